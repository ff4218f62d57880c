"""Signals: SIGTERM/SIGINT stop accepting, let in-flight requests finish, and exit 0."""

import os
import signal
import socket
import subprocess
import time

import pytest

from helpers import CLEAN_ENV, curl, rss_kib


def start_slow_curl(s, py_origin, seconds):
    py_origin.slow_started.clear()
    cmd = ["curl", "-sS", "--max-time", "30", "-x", s.proxy_url, "-U", f"user:{s.key}",
           "-w", "\n%{http_code}", py_origin.url(f"/slow?s={seconds}")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=CLEAN_ENV)
    assert py_origin.slow_started.wait(10), "the slow request never reached the origin"
    return p


def connect_refused_within(addr, seconds):
    """True once a new connection to `addr` is refused (polled for up to `seconds`)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(addr, timeout=0.5):
                pass
        except ConnectionRefusedError:
            return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def test_sigterm_drains_in_flight_request(start_sluice, py_origin):
    s = start_sluice()
    p = start_slow_curl(s, py_origin, 3)
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    stopped_accepting = connect_refused_within(s.proxy_addr, 1.5)
    out, err = p.communicate(timeout=30)
    code = s.wait(15)
    assert out == b"slow done\n\n200", \
        f"in-flight request cut by SIGTERM: curl exit {p.returncode}, {out!r}, {err!r}"
    assert code == 0, f"exit code after SIGTERM with drain: {code}"
    assert time.monotonic() - t0 >= 2, "sluice exited before the in-flight request could finish"
    assert stopped_accepting, "new connections were still accepted after SIGTERM"


def test_sigint_exits_zero_when_idle(start_sluice, nginx):
    s = start_sluice()
    r = curl("-x", s.proxy_url, "-U", f"user:{s.key}", "-o", "/dev/null", "-w", "%{http_code}",
             nginx.url("/1k"))
    assert r.stdout == b"200", r.describe()
    t0 = time.monotonic()
    s.signal(signal.SIGINT)
    code = s.wait(15)
    assert code == 0, f"exit code after SIGINT: {code}"
    # Nothing in flight (an idle keep-alive upstream does not count): no reason to wait.
    assert time.monotonic() - t0 < 5, f"idle shutdown took {time.monotonic() - t0:.1f}s"


def test_drain_timeout_bounds_shutdown(start_sluice, py_origin):
    s = start_sluice(drain_timeout="1s")
    p = start_slow_curl(s, py_origin, 8)
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    code = s.wait(15)
    elapsed = time.monotonic() - t0
    p.kill()
    p.communicate()
    assert code == 0, f"exit code after the drain timeout: {code}"
    assert elapsed < 5, f"shutdown took {elapsed:.1f}s with drain_timeout 1s"


def test_admin_post_drain_stops_and_exits_zero(start_sluice, nginx):
    s = start_sluice()
    # A web page must not be able to drain the proxy: browsers send Origin on cross-site POSTs.
    r = s.admin("/drain", method="POST", data=b"", headers={"Origin": "http://example.com"})
    assert r.status != 200, f"cross-origin POST /drain was accepted: {r}"
    assert s.admin("/ready").status == 200, "a refused drain still changed readiness"

    r = s.admin("/drain", method="POST", data=b"")
    assert r.status == 200, f"POST /drain: {r}"
    code = s.wait(15)
    assert code == 0, f"exit code after POST /drain: {code}"


class NotifySocket:
    """The datagram socket a service manager (systemd) listens on for sd_notify messages."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.seen = []

    def wait_for(self, assignment, timeout=10):
        """Reads messages until one holds `assignment` (a line such as READY=1); returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                message = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            self.seen.append(message)
            if assignment in message.split("\n"):
                return message
        raise AssertionError(f"no {assignment} within {timeout}s; messages: {self.seen}")

    def close(self):
        self.sock.close()
        os.unlink(self.path)


def test_service_manager_hears_ready_reloading_and_stopping(start_sluice, tmp_path):
    notify = NotifySocket(tmp_path / "notify")
    try:
        s = start_sluice(env={"NOTIFY_SOCKET": notify.path})
        ready = notify.wait_for("READY=1")
        assert f"STATUS=serving: http on 127.0.0.1:{s.port}; workers: 1" in ready, ready
        assert notify.seen == [ready], f"something came before READY=1: {notify.seen}"

        s.signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING=1")
        assert any(l.startswith("MONOTONIC_USEC=") for l in reloading.split("\n")), reloading
        assert "STATUS=" in notify.wait_for("READY=1")

        s.signal(signal.SIGTERM)
        stopping = notify.wait_for("STOPPING=1")
        assert "STATUS=draining" in stopping, stopping
        assert s.wait(15) == 0
    finally:
        notify.close()


def test_no_notify_socket_no_message(start_sluice, tmp_path):
    # Without NOTIFY_SOCKET nothing is sent (and nothing fails): the usual case outside systemd.
    s = start_sluice()
    s.signal(signal.SIGHUP)
    assert s.admin("/ready").status == 200
    assert "service manager" not in s.log(), s.log()


def burst(s, n=1500):
    """n connections, each holding an unfinished 8 KiB request head in sluice's buffers, then
    all closed: the heap grows, then holds mostly free memory."""
    conns = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        c.sendall(f"GET http://127.0.0.1/ HTTP/1.1\r\nX-Pad: {'p' * 8000}\r\n".encode())
        conns.append(c)
    s.wait_stat("listener.http.downstream_cx_active", lambda v: v == n, timeout=10)
    time.sleep(0.5)
    peak = rss_kib(s.proc.pid)
    for c in conns:
        c.close()
    s.wait_stat("listener.http.downstream_cx_active", lambda v: v == 0, timeout=10)
    return peak


@pytest.mark.parametrize("interval", ["1s", "0s"])
def test_free_memory_goes_back_after_a_burst(start_sluice, interval):
    def patch(full):
        full["memory_release_interval"] = interval
        for listener in full["listeners"]:
            listener["connection_limits"]["max_connections_per_client"] = 5000
    s = start_sluice(patch=patch)
    peak = burst(s)
    time.sleep(2.5)
    after = rss_kib(s.proc.pid)
    released = s.stat("server.memory_released")
    # At least 4 MiB of the burst handed back, trimmed or not: the connections' objects, their
    # request heads and their first reads live in slabs that go back to the system as they
    # empty, so the heap the burst used is not pinned by the connections still open.
    assert after < peak - 4096, (peak, after)
    if interval == "0s":
        assert released == 0
    else:
        assert released >= 1
