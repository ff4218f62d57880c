"""End-to-end tests of sluice-load against real peers: sluice-origin directly, Squid (absolute-form,
CONNECT, an https_port), Dante (SOCKS5 with RFC 1929 username/password and without), and sluice
itself on every port it has (the HTTP port always; SOCKS5 and TLS when the build supports them).

In every mode, sluice-load's own counts are checked against sluice-origin's /stats: requests,
socket bytes (exactly, when nothing between rewrites them), response payload, WebSocket messages,
tunnel bytes.

    /usr/bin/python3 -m pytest -q -p no:cacheprovider test/tools/load/test_load.py

Binaries: bazel-bin/tools/load/sluice-load, bazel-bin/tools/origin/sluice-origin and
bazel-bin/source/exe/sluice (or SLUICE_LOAD_BIN, SLUICE_ORIGIN_BIN, SLUICE_BIN). With
SLUICE_LOAD_DIRECT_ONLY=1 (the bazel sh_test) only the tests without a proxy run.
Loopback only; every daemon is started here and killed by its PID.
"""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "test" / "integration"))
from origins import SluiceOrigin  # noqa: E402  (the shared sluice-origin driver)
from peer_proxies import (DANTE_PASSWORD, DANTE_USER, Dante, Squid,  # noqa: E402
                          can_unshare, kill_all)


def _bin(env, rel):
    return Path(os.environ.get(env) or REPO / "bazel-bin" / rel)


LOAD = _bin("SLUICE_LOAD_BIN", "tools/load/sluice-load")
ORIGIN = _bin("SLUICE_ORIGIN_BIN", "tools/origin/sluice-origin")
SLUICE = _bin("SLUICE_BIN", "source/exe/sluice")
DIRECT_ONLY = os.environ.get("SLUICE_LOAD_DIRECT_ONLY") == "1"
CLEAN_ENV = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}

peers = pytest.mark.skipif(DIRECT_ONLY, reason="SLUICE_LOAD_DIRECT_ONLY=1: no proxies")

_procs = []


@atexit.register
def _kill_leftovers():
    for p in _procs:
        if p.poll() is None:
            p.kill()
    kill_all()


def stop(proc, sig=signal.SIGTERM, timeout=10):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


_ports = set()


def free_port(kind=socket.SOCK_STREAM):
    while True:
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports:
            _ports.add(port)
            return port


def wait_port(port, proc, what, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode} before listening on {port}",
                        pytrace=False)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"{what} did not listen on {port} within {timeout}s", pytrace=False)


def need(path):
    if not Path(path).is_file():
        pytest.fail(f"{path} not found: bazel build //:sluice-load //:sluice-origin //:sluice",
                    pytrace=False)
    return str(path)


# -- sluice-load ---------------------------------------------------------------------------------

def load(*args, expect_rc=0, timeout=120):
    """Runs sluice-load with --json and returns the parsed report."""
    cmd = [need(LOAD), *[str(a) for a in args], "--json", "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=CLEAN_ENV)
    assert r.returncode == expect_rc, f"{cmd} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)


def assert_clean(j, n=None, status="200"):
    assert j["errors"] == {}, j
    assert j["failed"] == 0, j
    assert j["incomplete"] == 0, j
    if n is not None:
        assert j["requests"] == n, j
        assert j["ok"] == n, j
        assert j["status"] == {status: n}, j
        assert j["latency"]["count"] == n, j
    lat = j["latency"]
    order = [lat[k] for k in ("min_us", "p50_us", "p75_us", "p90_us", "p99_us", "p99_9_us",
                              "p99_99_us", "max_us")]
    assert order == sorted(order), lat
    assert lat["max_us"] > 0


# -- sluice-origin -------------------------------------------------------------------------------

def Origin(threads=2, tls=None):
    o = SluiceOrigin(need(ORIGIN), threads=threads, tls=tls, env=CLEAN_ENV)
    _procs.append(o.proc)
    return o


@pytest.fixture(scope="module")
def origin():
    o = Origin()
    yield o
    o.stop()


@pytest.fixture(scope="module")
def certs():
    script = REPO / "tools/gen-test-certs.sh"
    if not script.is_file():
        pytest.skip("tools/gen-test-certs.sh is not here (bazel sandbox): TLS tests run in pytest")
    d = Path(tempfile.mkdtemp(prefix="sluice-load-certs-"))
    subprocess.run([str(script), str(d)], check=True, capture_output=True)
    # A client certificate from the same CA, for gosst's --crt/--key.
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=sluice-load",
                    "-keyout", str(d / "client.key"), "-out", str(d / "client.csr")],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(d / "client.csr"), "-CA",
                    str(d / "ca.pem"), "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "1",
                    "-out", str(d / "client.pem")], check=True, capture_output=True)
    # Squid drops to the `proxy` user: it must read these.
    os.chmod(d, 0o755)
    for f in d.iterdir():
        os.chmod(f, 0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_origin(certs):
    o = Origin(tls=certs)
    yield o
    o.stop()


# ==== direct ====================================================================================

def test_direct_keepalive_counts_match_origin(origin):
    n = 3000
    j, d = origin.measure(lambda: load("-t", 2, "-c", 8, "-n", n,
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert j["mode"] == "direct"
    assert d["requests"] == n
    # Measured on the sockets, byte for byte what the origin counted on its side.
    assert d["bytes_received"] == j["bytes_sent"] == j["destination_bytes_sent"]
    assert d["bytes_sent"] == j["bytes_read"] == j["destination_bytes_read"]
    assert j["payload_bytes_read"] == n * 1024
    assert j["connections_opened"] == 8
    assert j["phases"]["tcp_connect"]["count"] == 8
    assert j["phases"]["first_byte"]["count"] == n
    assert j["phases"]["proxy_handshake"]["count"] == 0


def test_direct_new_conn_with_request_body(origin):
    n = 400
    j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--new-conn", "--body-bytes", 3000,
                                       "--dst", f"{origin.url}/echo"))
    assert_clean(j, n)
    assert j["connections_opened"] == n
    assert j["phases"]["tcp_connect"]["count"] == n
    assert j["payload_bytes_sent"] == n * 3000
    assert j["payload_bytes_read"] == n * 3000
    assert d["requests"] == n
    assert d["bytes_received"] == j["bytes_sent"]
    assert d["bytes_sent"] == j["bytes_read"]


def test_duration_mode_counts_match(origin):
    j, d = origin.measure(lambda: load("-c", 4, "-d", "1s", "--dst", f"{origin.url}/bytes/100"))
    assert_clean(j)
    assert j["requests"] > 100
    assert 0.9 < j["elapsed_s"] < 4
    assert d["requests"] == j["requests"]
    assert d["bytes_received"] == j["bytes_sent"]
    assert d["bytes_sent"] == j["bytes_read"]


def test_non_2xx_are_failures(origin):
    j = load("-c", 2, "-n", 50, "--dst", f"{origin.url}/missing")
    assert j["failed"] == 50 and j["ok"] == 0
    assert j["status"] == {"404": 50}
    assert j["errors"] == {}


def test_connect_refused_is_an_error_kind():
    port = free_port()
    j = load("-c", 2, "-n", 20, "--dst", f"http://127.0.0.1:{port}/")
    assert j["failed"] == 20
    assert j["errors"] == {"connect_refused": 20}


def test_gosst_command_line_and_text_report(origin):
    """gosst's README invocation works as written, and its report is there, fixed."""
    def run():
        return subprocess.run([need(LOAD), "-c", "10", "-n", "1000", "--dst",
                               f"{origin.url}/bytes/3"], capture_output=True, text=True,
                              timeout=60, env=CLEAN_ENV)
    r, d = origin.measure(run)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    fields = {}
    for line in out.splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
    assert fields["Server Address"] == f"127.0.0.1:{origin.port}"
    assert fields["Api Path"] == "/bytes/3"
    assert fields["Total Concurrency"] == "10"
    assert fields["Total Requests"] == "1000"
    assert fields["Failed Requests"].startswith("0 ")
    assert fields["Request per second"].endswith("[req/sec]")
    sent = int(fields["Total Sent"].split()[0])
    read = int(fields["Total read"].split()[0])
    assert sent == d["bytes_received"] and read == d["bytes_sent"]
    assert "Percentage of the requests served within a certain time (us)" in out
    for p in ("50%", "75%", "90%", "99%", "99.9%", "99.99%", "100%"):
        line = next(x for x in out.splitlines() if x.startswith(p + " "))
        value = float(line.split()[1])
        assert 0 < value < 10_000_000, line
        assert "." in line.split()[1], "microseconds with a decimal, not whole milliseconds"


def test_open_loop_rate_is_kept(origin):
    j = load("-c", 4, "--rate", 500, "-d", "2s", "--dst", f"{origin.url}/bytes/10")
    assert_clean(j)
    assert 850 <= j["requests"] <= 1050, j["requests"]


def test_coordinated_omission_correction():
    """The origin stalls for 0.6 s in the middle of a run. A closed loop with 4 connections sees
    only the 4 stalled requests as slow; the open loop counts every request that should have been
    sent during the stall from its intended send time, so a tenth or more of them are slow."""
    o = Origin(threads=1)
    try:
        def stall():
            time.sleep(1.0)
            o.proc.send_signal(signal.SIGSTOP)
            time.sleep(0.6)
            o.proc.send_signal(signal.SIGCONT)

        results = {}
        for mode, extra in (("open", ["--rate", 400]), ("closed", [])):
            t = threading.Thread(target=stall)
            t.start()
            results[mode] = load("-c", 4, "-d", "3s", *extra, "--dst", f"{o.url}/bytes/10")
            t.join()
        opened, closed = results["open"]["latency"], results["closed"]["latency"]
        assert opened["max_us"] > 500_000 and closed["max_us"] > 500_000
        # Open loop: ~240 of ~1200 requests were due during the stall; their latencies spread
        # from 0 to 600 ms, so p90 lies well above 100 ms.
        assert opened["p90_us"] > 100_000, opened
        # Closed loop: 4 slow requests among thousands: the p99 stays fast.
        assert closed["p99_us"] < 100_000, closed
        assert results["closed"]["requests"] > 10 * 4
    finally:
        o.stop()


def test_websocket_echo_direct(origin):
    n = 2000
    j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--ws", "--ws-size", 1000,
                                       "--ws-count", 100, "--dst", f"{origin.url}/ws"))
    assert_clean(j, n, status="101")
    # Each connection reconnects after 100 messages; the 4 do not end on a multiple of 100.
    assert n // 100 <= j["connections_opened"] <= n // 100 + 4
    assert d["ws_messages"] == n
    assert d["ws_bytes"] == n * 1000
    assert j["payload_bytes_read"] == j["payload_bytes_sent"] == n * 1000
    assert d["requests"] == j["connections_opened"]  # one upgrade per connection
    assert d["bytes_received"] == j["bytes_sent"] and d["bytes_sent"] == j["bytes_read"]


def test_websocket_one_way_direct(origin):
    n = 300
    j, d = origin.measure(lambda: load("-c", 2, "-n", n, "--ws-one-way", "--ws-size", 70000,
                                       "--dst", f"{origin.url}/ws/sink"))
    assert_clean(j, n, status="101")
    assert d["ws_messages"] == n
    assert d["ws_bytes"] == n * 70000
    assert j["payload_bytes_sent"] == n * 70000
    assert j["payload_bytes_read"] == 0  # each acknowledgement is an empty message


def test_tunnel_bytes_up_and_down_direct(origin):
    size = 4 * 1024 * 1024
    j, d = origin.measure(lambda: load("-c", 2, "-n", 6, "--tunnel-bytes", size,
                                       "--dst", f"tcp://127.0.0.1:{origin.sink}"))
    assert_clean(j, 6)
    assert d["sink_bytes"] == 6 * size == j["payload_bytes_sent"]
    j, d = origin.measure(lambda: load("-c", 2, "-n", 6, "--tunnel-bytes", size, "--tunnel-dir",
                                       "down", "--dst", f"tcp://127.0.0.1:{origin.source}"))
    assert_clean(j, 6)
    assert d["source_bytes"] == 6 * size == j["payload_bytes_read"]


def test_hold_direct(origin):
    j = load("--hold", 100, "-d", "0.5s", "--dst", f"tcp://127.0.0.1:{origin.sink}")
    assert j["held"] == 100
    assert j["errors"] == {}
    assert j["connections_opened"] == 100


class SlowConnectProxy:
    """A CONNECT proxy stand-in on loopback: it answers each CONNECT with 200 after `delay`
    seconds, then holds the connection until the client closes it, and records how many CONNECTs
    were unanswered at once (the most at any moment)."""

    def __init__(self, delay):
        self.delay = delay
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = self.connects = 0
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            if not head.startswith(b"CONNECT "):
                return
            with self.lock:
                self.connects += 1
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            time.sleep(self.delay)
            with self.lock:
                self.in_flight -= 1
            try:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                while conn.recv(4096):
                    pass
            except OSError:
                pass

    def close(self):
        self.listener.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_hold_window_limits_tunnels_opening_at_once(threads):
    """--hold 40 --hold-window 5: never more than 5 CONNECTs unanswered at once (the window is
    a total, split over the threads), and all 40 tunnels are held in the end. Without the window
    all 40 are unanswered together."""
    proxy = SlowConnectProxy(delay=0.1)
    try:
        j = load("-t", threads, "--hold", 40, "--hold-window", 5, "-d", "3s",
                 "--proxy", f"http://127.0.0.1:{proxy.port}", "--dst", "tcp://127.0.0.1:9")
    finally:
        proxy.close()
    assert j["held"] == 40, j
    assert j["errors"] == {}, j
    assert j["hold_window"] == 5 and j["threads"] == threads
    assert proxy.connects == 40
    assert 2 <= proxy.max_in_flight <= 5, proxy.max_in_flight
    proxy = SlowConnectProxy(delay=0.3)
    try:
        j = load("--hold", 40, "-d", "1.5s",
                 "--proxy", f"http://127.0.0.1:{proxy.port}", "--dst", "tcp://127.0.0.1:9")
    finally:
        proxy.close()
    assert j["held"] == 40 and j["hold_window"] == 0, j
    assert proxy.max_in_flight > 5, proxy.max_in_flight


def test_hold_window_text_report_and_option_errors(origin):
    r = subprocess.run([need(LOAD), "-q", "--hold", "8", "--hold-window", "3", "-d", "0.3s",
                        "--dst", f"tcp://127.0.0.1:{origin.sink}"],
                       capture_output=True, text=True, timeout=30, env=CLEAN_ENV)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Held 8 of 8 tunnels to "), r.stdout
    assert "(opened 3 at a time)" in r.stdout.splitlines()[0], r.stdout
    # -t is capped at the window: every thread has a place in it.
    j = load("-t", 4, "--hold", 8, "--hold-window", 2, "-d", "0.3s",
             "--dst", f"tcp://127.0.0.1:{origin.sink}")
    assert j["threads"] == 2 and j["held"] == 8 and j["hold_window"] == 2, j
    dst = ["--dst", f"tcp://127.0.0.1:{origin.sink}"]
    for args, message in [
        (["--hold-window", "5", *dst], "--hold-window goes with --hold"),
        (["--hold", "4", "--hold-window", "0", *dst], "bad --hold-window"),
        (["--hold", "4", "--hold-window", "x", *dst], "bad --hold-window"),
        (["--hold", "4", *dst, "--hold-window"], "bad --hold-window"),
    ]:
        r = subprocess.run([need(LOAD), *args], capture_output=True, text=True, timeout=30,
                           env=CLEAN_ENV)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert f"sluice-load: {message}\n" in r.stderr, (args, r.stderr)


def test_tls_origin_resumption_vs_full_handshakes(tls_origin, certs):
    ca = certs / "ca.pem"
    j, d = tls_origin.measure(lambda: load("-c", 2, "-n", 100, "--new-conn", "--ca", ca,
                                           "--dst", f"{tls_origin.url}/bytes/1024"))
    assert_clean(j, 100)
    assert d["requests"] == 100
    assert j["tls_full_handshakes"] + j["tls_resumed_handshakes"] == 100
    assert j["tls_resumed_handshakes"] >= 90
    assert j["phases"]["tls_destination"]["count"] == 100
    # The origin counts its socket bytes (TLS records): the same as sluice-load's socket bytes.
    assert d["bytes_received"] == j["bytes_sent"]
    assert d["bytes_sent"] == j["bytes_read"]
    assert j["bytes_sent"] > j["destination_bytes_sent"]  # TLS records on the wire
    j = load("-c", 2, "-n", 50, "--new-conn", "--no-resume", "--ca", ca,
             "--dst", f"{tls_origin.url}/bytes/1024")
    assert_clean(j, 50)
    assert j["tls_full_handshakes"] == 50 and j["tls_resumed_handshakes"] == 0


def test_tls_verification_fails_without_the_right_ca(tls_origin, certs, tmp_path):
    other = tmp_path / "other"
    subprocess.run([str(REPO / "tools/gen-test-certs.sh"), str(other)], check=True,
                   capture_output=True)
    j = load("-n", 3, "--ca", other / "ca.pem", "--dst", f"{tls_origin.url}/bytes/1")
    assert j["errors"] == {"tls": 3}


# ==== Squid =====================================================================================

@pytest.fixture(scope="module")
def squid(certs):
    if not Path("/usr/sbin/squid").exists():
        pytest.skip("squid is not installed")
    s = Squid(certs)  # from peer_proxies
    yield s
    s.stop()


@peers
def test_squid_absolute_form(origin, squid):
    n = 1000
    j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--proxy",
                                       f"http://127.0.0.1:{squid.port}",
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert "absolute-form" in j["mode"] and not j["tunnel"]
    assert d["requests"] == n
    assert j["payload_bytes_read"] == n * 1024
    # Squid rewrites heads (Via, X-Forwarded-For...), so only the bodies match byte for byte.
    assert d["bytes_sent"] >= n * 1024


@peers
def test_squid_connect(origin, squid):
    n = 1000
    j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--connect", "--proxy",
                                       f"http://127.0.0.1:{squid.port}",
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert "CONNECT" in j["mode"] and j["tunnel"]
    assert j["phases"]["proxy_handshake"]["count"] == 4
    assert d["requests"] == n
    # Through a tunnel the destination's bytes are exactly the origin's.
    assert d["bytes_received"] == j["destination_bytes_sent"]
    assert d["bytes_sent"] == j["destination_bytes_read"]


@peers
def test_squid_connect_to_tls_destination_resumes(tls_origin, squid, certs):
    n = 200
    j, d = tls_origin.measure(lambda: load("-c", 4, "-n", n, "--new-conn", "--ca",
                                           certs / "ca.pem", "--proxy",
                                           f"http://127.0.0.1:{squid.port}",
                                           "--dst", f"{tls_origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert j["tunnel"]  # https:// destinations always tunnel
    assert j["tls_resumed_handshakes"] >= n - 10
    assert j["phases"]["proxy_handshake"]["count"] == n
    assert j["phases"]["tls_destination"]["count"] == n
    assert d["requests"] == n
    assert j["payload_bytes_read"] == n * 1024


@peers
def test_squid_https_proxy_absolute_form(origin, squid, certs):
    n = 500
    j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--proxy-ca", certs / "ca.pem",
                                       "--proxy", f"https://127.0.0.1:{squid.tls_port}",
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert j["proxy_kind"] == "https" and not j["tunnel"]
    assert j["tls_full_handshakes"] == 4
    assert d["requests"] == n
    assert j["payload_bytes_read"] == n * 1024


@peers
def test_squid_https_proxy_tls_in_tls(tls_origin, squid, certs):
    """TLS to the proxy, CONNECT inside it, TLS to the destination inside the tunnel."""
    n = 300
    j, d = tls_origin.measure(lambda: load("-c", 3, "-n", n, "--ca", certs / "ca.pem",
                                           "--proxy", f"https://127.0.0.1:{squid.tls_port}",
                                           "--dst", f"{tls_origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert j["tunnel"] and j["tls_full_handshakes"] == 6
    assert d["requests"] == n
    assert j["payload_bytes_read"] == n * 1024


@peers
def test_squid_websocket_and_tunnels(origin, squid):
    proxy = f"http://127.0.0.1:{squid.port}"
    j, d = origin.measure(lambda: load("-c", 2, "-n", 400, "--ws", "--connect", "--proxy", proxy,
                                       "--dst", f"ws://127.0.0.1:{origin.port}/ws"))
    assert_clean(j, 400, status="101")
    assert d["ws_messages"] == 400
    size = 2 * 1024 * 1024
    j, d = origin.measure(lambda: load("-c", 2, "-n", 4, "--tunnel-bytes", size, "--proxy", proxy,
                                       "--dst", f"tcp://127.0.0.1:{origin.sink}"))
    assert_clean(j, 4)
    assert d["sink_bytes"] == 4 * size
    j = load("--hold", 50, "-d", "0.5s", "--proxy", proxy,
             "--dst", f"tcp://127.0.0.1:{origin.sink}")
    assert j["held"] == 50 and j["errors"] == {}


# ==== Dante =====================================================================================

@pytest.fixture(scope="module")
def dante_user():
    if not Path("/usr/sbin/danted").exists():
        pytest.skip("danted is not installed")
    if not can_unshare():
        pytest.skip("needs root and unshare -m for a test user Dante can check")
    d = Dante("username")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def dante_none():
    if not Path("/usr/sbin/danted").exists():
        pytest.skip("danted is not installed")
    d = Dante("none")
    yield d
    d.stop()


@peers
def test_dante_socks5_username_auth(origin, dante_user):
    n = 1000
    proxy = f"socks5://{DANTE_USER}:{DANTE_PASSWORD}@127.0.0.1:{dante_user.port}"
    j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--proxy", proxy,
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert "username/password" in j["mode"]
    assert j["phases"]["proxy_handshake"]["count"] == 4
    assert d["requests"] == n
    assert d["bytes_received"] == j["destination_bytes_sent"]
    # On the wire, the SOCKS5 greeting, RFC 1929 authentication and CONNECT come on top.
    assert j["bytes_sent"] > j["destination_bytes_sent"]
    assert d["bytes_sent"] == j["destination_bytes_read"]


@peers
def test_dante_wrong_password_is_refused(origin, dante_user):
    proxy = f"socks5://{DANTE_USER}:wrong@127.0.0.1:{dante_user.port}"
    j, d = origin.measure(lambda: load("-c", 2, "-n", 10, "--proxy", proxy,
                                       "--dst", f"{origin.url}/bytes/1"))
    assert j["failed"] == 10 and j["errors"] == {"socks_auth": 10}
    assert d["requests"] == 0


@peers
def test_dante_new_conn_websocket_and_tunnel(origin, dante_user):
    proxy = f"socks5h://{DANTE_USER}:{DANTE_PASSWORD}@127.0.0.1:{dante_user.port}"
    j, d = origin.measure(lambda: load("-c", 4, "-n", 200, "--new-conn", "--proxy", proxy,
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, 200)
    assert j["connections_opened"] == 200 and d["requests"] == 200
    j, d = origin.measure(lambda: load("-c", 2, "-n", 300, "--ws", "--proxy", proxy,
                                       "--dst", f"ws://127.0.0.1:{origin.port}/ws"))
    assert_clean(j, 300, status="101")
    assert d["ws_messages"] == 300
    size = 2 * 1024 * 1024
    j, d = origin.measure(lambda: load("-c", 2, "-n", 4, "--tunnel-bytes", size, "--tunnel-dir",
                                       "down", "--proxy", proxy,
                                       "--dst", f"tcp://127.0.0.1:{origin.source}"))
    assert_clean(j, 4)
    assert d["source_bytes"] == 4 * size == j["payload_bytes_read"]


@peers
def test_dante_gosst_bare_proxy_is_socks5(origin, dante_none):
    """gosst: `--proxy host:port` is a SOCKS5 proxy (no credentials)."""
    n = 500
    j, d = origin.measure(lambda: load("-c", 5, "-n", n, "--proxy",
                                       f"127.0.0.1:{dante_none.port}",
                                       "--dst", f"{origin.url}/bytes/64"))
    assert_clean(j, n)
    assert j["proxy_kind"] == "socks5" and "no auth" in j["mode"]
    assert d["requests"] == n
    assert d["bytes_received"] == j["destination_bytes_sent"]
    assert d["bytes_sent"] == j["destination_bytes_read"]
    # socks5h:// with a name: the proxy resolves it (ATYP 3, DOMAINNAME).
    j, d = origin.measure(lambda: load("-c", 2, "-n", 100, "--proxy",
                                       f"socks5h://127.0.0.1:{dante_none.port}",
                                       "--dst", f"http://localhost:{origin.port}/bytes/64"))
    assert_clean(j, 100)
    assert d["requests"] == 100


# ==== sluice ====================================================================================

SLUICE_KEY = "sluice-load-test-key-0123456789abcdef"


class Sluice:
    """sluice with the HTTP port, plus SOCKS5 and TLS ports when this build has them."""

    def __init__(self, certs, socks5=False, tls=False, h2c=False):
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-load-sluice-"))
        self.port, self.admin = free_port(), free_port()
        self.socks_port = free_port() if socks5 else None
        self.tls_port = free_port() if tls else None
        conf = (f"server:\n  listen: 127.0.0.1:{self.port}\n  workers: 1\n"
                f"auth:\n  api_keys: [\"{SLUICE_KEY}\"]\n"
                f"admin:\n  listen: 127.0.0.1:{self.admin}\n"
                "destinations:\n  allow_private: true\n"
                "  allowed_ports: [80, 443, \"1024-65535\"]\n"
                "limits:\n  max_connections_per_client: 100000\n"
                "  max_upstream_connections_per_client: 1000000\n")
        if socks5:
            conf += f"socks5:\n  listen: 127.0.0.1:{self.socks_port}\n"
        if tls:
            conf += (f"tls:\n  listen: 127.0.0.1:{self.tls_port}\n"
                     f"  cert: {certs}/server-chain.pem\n  key: {certs}/server.key\n")
        path = self.dir / "sluice.yaml"
        path.write_text(conf)
        if h2c:
            path = self._http2_full_form(path)
        self.log = self.dir / "sluice.log"
        self.proc = subprocess.Popen([need(SLUICE), "run", "-c", str(path)],
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
                                     env=CLEAN_ENV)
        _procs.append(self.proc)
        deadline = time.monotonic() + 15
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with opener.open(f"http://127.0.0.1:{self.admin}/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sluice did not start:\n{self.log.read_text(errors='replace')}")

    def _http2_full_form(self, short):
        """The HTTP port speaking HTTP/2 with prior knowledge (h2c): the expanded full form with
        its sluice.http1 filter swapped for sluice.http2, request filters kept."""
        import yaml

        r = subprocess.run([need(SLUICE), "config", "expand", "-c", str(short)],
                           capture_output=True, text=True, env=CLEAN_ENV, timeout=30)
        assert r.returncode == 0, r.stderr
        full = yaml.safe_load(r.stdout)
        swapped = 0
        for listener in full["listeners"]:
            for chain in listener.get("filter_chains", []):
                for i, f in enumerate(chain.get("filters", [])):
                    if f.get("name") == "sluice.http1":
                        chain["filters"][i] = {"name": "sluice.http2", "typed_config": {
                            "@type": "type.googleapis.com/sluice.filters.v1.Http2ProxyConfig",
                            "request_filters": f["typed_config"]["request_filters"]}}
                        swapped += 1
        assert swapped

        def keys(node):  # the printout redacts keys: put the real one back
            if isinstance(node, dict):
                if str(node.get("@type", "")).endswith(".AuthConfig"):
                    node["api_keys"] = [{"name": "load", "key": SLUICE_KEY}]
                for v in node.values():
                    keys(v)
            elif isinstance(node, list):
                for v in node:
                    keys(v)

        keys(full)
        path = self.dir / "full.yaml"
        path.write_text(yaml.safe_dump(full, sort_keys=False))
        return path

    def stop(self):
        stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def sluice(certs):
    s = Sluice(certs)
    yield s
    s.stop()


def _sluice_with(certs, **ports):
    try:
        return Sluice(certs, **ports)
    except RuntimeError as e:
        if "not supported" in str(e):
            pytest.skip(f"this sluice build has no {', '.join(ports)} port yet")
        raise


@peers
@pytest.mark.parametrize("mode", [[], ["--connect"], ["--new-conn"]],
                         ids=["absolute-form", "connect", "new-conn"])
def test_sluice_http_port(origin, sluice, mode):
    n = 1000
    proxy = f"http://user:{SLUICE_KEY}@127.0.0.1:{sluice.port}"
    j, d = origin.measure(lambda: load("-c", 4, "-n", n, *mode, "--proxy", proxy,
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert d["requests"] == n
    assert j["payload_bytes_read"] == n * 1024
    if mode == ["--connect"]:
        assert d["bytes_received"] == j["destination_bytes_sent"]
        assert d["bytes_sent"] == j["destination_bytes_read"]


@peers
def test_sluice_http_port_websocket_tls_and_tunnel(origin, tls_origin, sluice, certs):
    proxy = f"http://user:{SLUICE_KEY}@127.0.0.1:{sluice.port}"
    # WebSocket upgrade in absolute-form through sluice's HTTP/1.1 codec.
    j, d = origin.measure(lambda: load("-c", 2, "-n", 400, "--ws", "--proxy", proxy,
                                       "--dst", f"ws://127.0.0.1:{origin.port}/ws"))
    assert_clean(j, 400, status="101")
    assert d["ws_messages"] == 400
    # CONNECT to a TLS destination.
    j, d = tls_origin.measure(lambda: load("-c", 2, "-n", 200, "--ca", certs / "ca.pem",
                                           "--proxy", proxy,
                                           "--dst", f"{tls_origin.url}/bytes/1024"))
    assert_clean(j, 200)
    assert d["requests"] == 200 and j["payload_bytes_read"] == 200 * 1024
    size = 2 * 1024 * 1024
    j, d = origin.measure(lambda: load("-c", 2, "-n", 4, "--tunnel-bytes", size, "--proxy", proxy,
                                       "--dst", f"tcp://127.0.0.1:{origin.sink}"))
    assert_clean(j, 4)
    assert d["sink_bytes"] == 4 * size


@peers
def test_sluice_wrong_key_gets_407(origin, sluice):
    # Few attempts: sluice bans a client after repeated wrong keys.
    proxy = f"http://user:not-the-key@127.0.0.1:{sluice.port}"
    j, d = origin.measure(lambda: load("-n", 2, "--proxy", proxy,
                                       "--dst", f"{origin.url}/bytes/1"))
    assert j["status"] == {"407": 2} and j["failed"] == 2
    assert d["requests"] == 0


@peers
def test_sluice_socks5_port(origin, certs):
    s = _sluice_with(certs, socks5=True)
    try:
        n = 1000
        proxy = f"socks5://user:{SLUICE_KEY}@127.0.0.1:{s.socks_port}"
        j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--proxy", proxy,
                                           "--dst", f"{origin.url}/bytes/1024"))
        assert_clean(j, n)
        assert d["requests"] == n
        assert d["bytes_received"] == j["destination_bytes_sent"]
        assert d["bytes_sent"] == j["destination_bytes_read"]
    finally:
        s.stop()


def alpn_of(port, certs):
    """The protocol a TLS port picks when offered h2 and http/1.1."""
    import ssl
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as t:
            return t.selected_alpn_protocol()


@peers
def test_sluice_tls_port(origin, certs):
    s = _sluice_with(certs, tls=True)
    try:
        n = 500
        proxy = f"https://user:{SLUICE_KEY}@127.0.0.1:{s.tls_port}"
        for mode in ([], ["--connect"]):
            j, d = origin.measure(lambda: load("-c", 4, "-n", n, *mode, "--proxy-ca",
                                               certs / "ca.pem", "--proxy", proxy,
                                               "--dst", f"{origin.url}/bytes/1024"))
            assert_clean(j, n)
            assert d["requests"] == n
        # HTTP/2 by ALPN on the same port: plain requests and CONNECT streams.
        if alpn_of(s.tls_port, certs) != "h2":
            pytest.skip("sluice's TLS port does not offer h2 by ALPN in this build")
        h2 = f"h2://user:{SLUICE_KEY}@127.0.0.1:{s.tls_port}"
        for mode in ([], ["--connect"]):
            j, d = origin.measure(lambda: load("-c", 8, "-n", n, *mode, "--proxy-ca",
                                               certs / "ca.pem", "--proxy", h2,
                                               "--dst", f"{origin.url}/bytes/1024"))
            assert_clean(j, n)
            assert j["connections_opened"] == 1
            assert d["requests"] == n
        # A new TLS + HTTP/2 connection per request, resumed; then full handshakes.
        n = 300
        j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--new-conn", "--proxy-ca",
                                           certs / "ca.pem", "--proxy", h2,
                                           "--dst", f"{origin.url}/bytes/1024"))
        assert_h2_new_conn(j, n, resumed_at_least=n - 4)
        assert d["requests"] == n
        j, d = origin.measure(lambda: load("-c", 4, "-n", 100, "--new-conn", "--no-resume",
                                           "--proxy-ca", certs / "ca.pem", "--proxy", h2,
                                           "--dst", f"{origin.url}/bytes/1024"))
        assert_h2_new_conn(j, 100)
        assert j["tls_full_handshakes"] == 100
        assert d["requests"] == 100
    finally:
        s.stop()


# ==== HTTP/2 to the proxy =======================================================================

class Nginx:
    """nginx with TLS and HTTP/2 as a reverse proxy to sluice-origin: an HTTP/2 peer for plain
    requests (it does not do CONNECT)."""

    def __init__(self, certs, origin_port):
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-load-nginx-"))
        os.chmod(self.dir, 0o777)
        self.port = free_port()
        self.mtls_port = free_port()
        d = self.dir
        conf = d / "nginx.conf"
        conf.write_text(
            f"worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n  access_log off;\n"
            f"  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n"
            f"  fastcgi_temp_path {d}/fcgi;\n  uwsgi_temp_path {d}/uwsgi;\n"
            f"  scgi_temp_path {d}/scgi;\n"
            f"  upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 32; }}\n"
            f"  server {{\n    listen 127.0.0.1:{self.port} ssl http2;\n"
            f"    ssl_certificate {certs}/server-chain.pem;\n"
            f"    ssl_certificate_key {certs}/server.key;\n"
            "    location / { proxy_pass http://origin; proxy_http_version 1.1;\n"
            "                 proxy_set_header Connection \"\"; }\n  }\n"
            # A TLS origin that wants a client certificate (gosst's --ca/--crt/--key).
            f"  server {{\n    listen 127.0.0.1:{self.mtls_port} ssl;\n"
            f"    ssl_certificate {certs}/server-chain.pem;\n"
            f"    ssl_certificate_key {certs}/server.key;\n"
            f"    ssl_client_certificate {certs}/ca.pem;\n    ssl_verify_client on;\n"
            "    location / { proxy_pass http://origin; proxy_http_version 1.1;\n"
            "                 proxy_set_header Connection \"\"; }\n  }\n}\n")
        self.proc = subprocess.Popen(["/usr/sbin/nginx", "-c", str(conf), "-p", str(d), "-g",
                                      "daemon off;"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        _procs.append(self.proc)
        wait_port(self.port, self.proc, "nginx")
        wait_port(self.mtls_port, self.proc, "nginx (client certificates)")

    def stop(self):
        stop(self.proc, signal.SIGQUIT)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def nginx(certs, origin):
    if not Path("/usr/sbin/nginx").exists():
        pytest.skip("nginx is not installed")
    n = Nginx(certs, origin.port)
    yield n
    n.stop()


@peers
def test_h2_to_nginx_plain_requests(origin, nginx, certs):
    """HTTP/2 over TLS (ALPN h2): -c streams on one connection. nginx ends a connection after
    1000 requests with GOAWAY: the requests it refused go out again on the next connection."""
    n = 3000
    j, d = origin.measure(lambda: load("-c", 16, "-n", n, "--proxy-ca", certs / "ca.pem",
                                       "--proxy", f"h2://127.0.0.1:{nginx.port}",
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert j["proxy_kind"] == "h2"
    assert 3 <= j["connections_opened"] <= 5, j["connections_opened"]
    # The connections after the first resume its TLS session (a TLS 1.3 ticket).
    assert j["tls_full_handshakes"] == 1, j
    assert j["tls_resumed_handshakes"] == j["connections_opened"] - 1, j
    assert d["requests"] == n
    assert j["payload_bytes_read"] == n * 1024
    # --proxy-http2 with an https:// URL is the same mode; request bodies go in DATA frames.
    j, d = origin.measure(lambda: load("-c", 4, "-n", 200, "--body-bytes", 20000, "--proxy-http2",
                                       "--proxy", f"https://127.0.0.1:{nginx.port}",
                                       "--dst", f"{origin.url}/echo"))
    assert_clean(j, 200)
    assert d["requests"] == 200
    assert j["payload_bytes_read"] == j["payload_bytes_sent"] == 200 * 20000


def assert_h2_new_conn(j, n, resumed_at_least=0, tls=True):
    """HTTP/2 plain requests with --new-conn: every request on a connection of its own (TCP,
    TLS, one stream), and every phase counted once per request."""
    assert_clean(j, n)
    assert j["proxy_kind"] == ("h2" if tls else "h2c") and not j["tunnel"] and j["new_conn"]
    assert j["connections_opened"] == n
    assert j["phases"]["tcp_connect"]["count"] == n
    assert j["phases"]["first_byte"]["count"] == n
    assert j["payload_bytes_read"] == n * 1024
    if tls:
        assert j["tls_full_handshakes"] + j["tls_resumed_handshakes"] == n
        assert j["tls_resumed_handshakes"] >= resumed_at_least, j["tls_resumed_handshakes"]
        assert j["phases"]["proxy_handshake"]["count"] == n
    # Each request's latency includes its connection's setup.
    assert j["latency"]["mean_us"] > j["phases"]["tcp_connect"]["mean_us"]


@peers
def test_h2_new_conn_to_nginx(origin, nginx, certs):
    """--new-conn with plain requests over HTTP/2: a new TLS connection per request (its session
    resumed), one stream on it, then GOAWAY and close."""
    n = 400
    j, d = origin.measure(lambda: load("-c", 4, "-n", n, "--new-conn", "--proxy-ca",
                                       certs / "ca.pem", "--proxy", f"h2://127.0.0.1:{nginx.port}",
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_h2_new_conn(j, n, resumed_at_least=n - 4)
    assert d["requests"] == n
    # Over two threads, by duration: the same, with the requests done however many there were.
    j, d = origin.measure(lambda: load("-t", 2, "-c", 8, "-d", "1s", "--new-conn",
                                       "--proxy", f"h2://127.0.0.1:{nginx.port}",
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert j["requests"] > 50
    assert_h2_new_conn(j, j["requests"])
    assert d["requests"] == j["requests"]
    # Connections are not shared in this mode: --h2-conns makes no sense with it.
    r = subprocess.run([need(LOAD), "--new-conn", "--h2-conns", "2", "--proxy",
                        f"h2://127.0.0.1:{nginx.port}", "--dst", f"{origin.url}/"],
                       capture_output=True, text=True, timeout=30, env=CLEAN_ENV)
    assert r.returncode == 2 and "--h2-conns" in r.stderr


def test_h2_new_conn_counts_every_failed_connection():
    """Nothing listens: each request is one connection attempt and one connect_refused."""
    port = free_port()
    j = load("-c", 2, "-n", 20, "--new-conn", "--proxy", f"h2://127.0.0.1:{port}",
             "--dst", "http://127.0.0.1:1/")
    assert j["failed"] == 20 and j["ok"] == 0
    assert j["errors"] == {"connect_refused": 20}
    assert j["connections_opened"] == 20


def test_h2_new_conn_errors_after_the_handshake(tls_origin, certs):
    """A TLS port that does not speak h2 fails every request with proxy_tls; one that takes the
    request and drops the connection fails every request with closed or reset. Each is one
    connection and one failure; none is retried or lost."""
    j, d = tls_origin.measure(lambda: load("-c", 2, "-n", 30, "--new-conn", "--proxy",
                                           f"h2://127.0.0.1:{tls_origin.port}",
                                           "--dst", "http://127.0.0.1:1/"))
    assert j["failed"] == 30 and j["ok"] == 0
    assert j["errors"] == {"proxy_tls": 30}
    assert j["connections_opened"] == 30
    assert d["requests"] == 0
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs / "server-chain.pem", certs / "server.key")
    ctx.set_alpn_protocols(["h2"])
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = []

    def serve():
        with listener:
            while True:
                try:
                    raw, _ = listener.accept()
                except OSError:
                    return
                accepted.append(1)
                raw.settimeout(5)
                try:
                    with ctx.wrap_socket(raw, server_side=True) as t:
                        # the preface, then frames up to the request's HEADERS: then drop it
                        got, at = b"", 24
                        while True:
                            while len(got) >= at + 9 and got[at + 3] != 1:
                                at += 9 + int.from_bytes(got[at:at + 3], "big")
                            if len(got) >= at + 9:
                                break
                            chunk = t.recv(65536)
                            if not chunk:
                                break
                            got += chunk
                except OSError:
                    pass

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        j = load("-c", 2, "-n", 30, "--new-conn", "--proxy", f"h2://127.0.0.1:{port}",
                 "--dst", "http://127.0.0.1:1/bytes/1")
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        server.join(10)
    assert j["failed"] == 30 and j["ok"] == 0 and j["status"] == {}
    assert set(j["errors"]) <= {"closed", "reset"} and sum(j["errors"].values()) == 30, j
    assert j["connections_opened"] == 30 == len(accepted)
    assert j["tls_full_handshakes"] + j["tls_resumed_handshakes"] == 30


@pytest.fixture(scope="module")
def h2c_sluice(certs):
    s = Sluice(certs, h2c=True)
    yield s
    s.stop()


@peers
def test_h2c_sluice_plain_and_connect(origin, h2c_sluice):
    proxy = f"h2c://user:{SLUICE_KEY}@127.0.0.1:{h2c_sluice.port}"
    n = 2000
    j, d = origin.measure(lambda: load("-c", 16, "-n", n, "--proxy", proxy,
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert j["connections_opened"] == 1 and not j["tunnel"]
    assert d["requests"] == n and j["payload_bytes_read"] == n * 1024
    # Two threads, each with its own connection and event loop; open loop at 2000 req/s.
    j, d = origin.measure(lambda: load("-t", 2, "-c", 16, "-d", "1s", "--rate", 2000,
                                       "--proxy", proxy, "--dst", f"{origin.url}/bytes/100"))
    assert_clean(j)
    assert j["connections_opened"] == 2
    assert 1700 <= j["requests"] <= 2100 and d["requests"] == j["requests"]
    # CONNECT streams, multiplexed: 8 tunnels on one connection.
    j, d = origin.measure(lambda: load("-c", 8, "-n", n, "--connect", "--proxy", proxy,
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_clean(j, n)
    assert j["tunnel"] and j["connections_opened"] == 1
    assert j["phases"]["proxy_handshake"]["count"] == 8
    assert d["requests"] == n
    assert d["bytes_received"] == j["destination_bytes_sent"]
    assert d["bytes_sent"] == j["destination_bytes_read"]
    # Plain requests with --new-conn: a new cleartext HTTP/2 connection per request.
    j, d = origin.measure(lambda: load("-c", 4, "-n", 300, "--new-conn", "--proxy", proxy,
                                       "--dst", f"{origin.url}/bytes/1024"))
    assert_h2_new_conn(j, 300, tls=False)
    assert d["requests"] == 300
    # A new CONNECT stream per request, closed with END_STREAM (no resets for rapid-reset
    # protection to count).
    j, d = origin.measure(lambda: load("-c", 4, "-n", 1000, "--new-conn", "--connect",
                                       "--proxy", proxy, "--dst", f"{origin.url}/bytes/10"))
    assert_clean(j, 1000)
    assert j["connections_opened"] == 1
    assert j["phases"]["proxy_handshake"]["count"] == 1000
    assert d["requests"] == 1000


@peers
def test_h2c_sluice_tls_websocket_tunnel_hold(origin, tls_origin, h2c_sluice, certs):
    proxy = f"h2c://user:{SLUICE_KEY}@127.0.0.1:{h2c_sluice.port}"
    # TLS to the destination inside CONNECT streams, resumed per stream.
    j, d = tls_origin.measure(lambda: load("-c", 4, "-n", 300, "--new-conn", "--ca",
                                           certs / "ca.pem", "--proxy", proxy,
                                           "--dst", f"{tls_origin.url}/bytes/1024"))
    assert_clean(j, 300)
    assert j["tls_resumed_handshakes"] >= 290
    assert d["requests"] == 300
    j, d = origin.measure(lambda: load("-c", 4, "-n", 1000, "--ws", "--proxy", proxy,
                                       "--dst", f"ws://127.0.0.1:{origin.port}/ws"))
    assert_clean(j, 1000, status="101")
    assert d["ws_messages"] == 1000
    size = 8 * 1024 * 1024
    j, d = origin.measure(lambda: load("-c", 2, "-n", 4, "--tunnel-bytes", size, "--proxy", proxy,
                                       "--dst", f"tcp://127.0.0.1:{origin.sink}"))
    assert_clean(j, 4)
    assert d["sink_bytes"] == 4 * size
    j, d = origin.measure(lambda: load("-c", 2, "-n", 4, "--tunnel-bytes", size, "--tunnel-dir",
                                       "down", "--proxy", proxy,
                                       "--dst", f"tcp://127.0.0.1:{origin.source}"))
    assert_clean(j, 4)
    assert d["source_bytes"] == 4 * size
    # 250 held tunnels: three connections of up to 100 streams each.
    j = load("--hold", 250, "-d", "0.5s", "--proxy", proxy,
             "--dst", f"tcp://127.0.0.1:{origin.sink}")
    assert j["held"] == 250 and j["errors"] == {}
    assert j["connections_opened"] == 3


@peers
def test_gosst_tls_flags_with_client_certificate(origin, nginx, certs):
    """gosst's `--dst https://... --ca ca.crt --crt client.crt --key client.key` against an nginx
    origin that requires a client certificate; without one, nginx answers 400."""
    url = f"https://127.0.0.1:{nginx.mtls_port}/bytes/512"
    j, d = origin.measure(lambda: load("-c", 4, "-n", 400, "--dst", url, "--ca", certs / "ca.pem",
                                       "--crt", certs / "client.pem", "--key",
                                       certs / "client.key"))
    assert_clean(j, 400)
    assert d["requests"] == 400 and j["payload_bytes_read"] == 400 * 512
    j = load("-n", 5, "--dst", url, "--ca", certs / "ca.pem")
    assert j["status"] == {"400": 5} and j["failed"] == 5
