"""PROXY protocol from trusted balancers: HAProxy (Debian's) in front of sluice with send-proxy
and send-proxy-v2. The client's own address is what sluice bans, limits and logs, not the
balancer's; a header from anyone else, a balancer's connection without one, or a malformed
one is closed and counted."""

import json
import shutil
import socket
import subprocess
import time

import pytest

from helpers import basic_auth, free_port


class HAProxy:
    """HAProxy in front of sluice: one frontend per PROXY protocol version."""

    def __init__(self, workdir, backend_port):
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.v1, self.v2 = free_port(), free_port()
        cfg = workdir / "haproxy.cfg"
        cfg.write_text(
            "global\n  maxconn 1000\n"
            "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n"
            "  timeout server 30s\n"
            f"frontend v1\n  bind 127.0.0.1:{self.v1}\n  default_backend v1\n"
            f"frontend v2\n  bind 127.0.0.1:{self.v2}\n  default_backend v2\n"
            f"backend v1\n  server sluice 127.0.0.1:{backend_port} send-proxy\n"
            f"backend v2\n  server sluice 127.0.0.1:{backend_port} send-proxy-v2\n")
        self.log = open(workdir / "haproxy.log", "wb")
        self.proc = subprocess.Popen([binary, "-db", "-f", str(cfg)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        # Not by connecting: a probe through a frontend would reach sluice as a client.
        for port in (self.v1, self.v2):
            wait_listening(port, self.proc)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def wait_listening(port, proc, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "haproxy exited"
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return  # taken: haproxy listens there
        finally:
            probe.close()
        time.sleep(0.05)
    pytest.fail(f"haproxy does not listen on {port}")


def connect_from(source, port):
    """A connection to 127.0.0.1:port from the loopback address `source`."""
    s = socket.socket()
    s.settimeout(5)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def get(source, port, key, url):
    """One request from `source`; the status, or None when the connection was closed first."""
    c = connect_from(source, port)
    try:
        c.sendall(f"GET {url} HTTP/1.1\r\nHost: {url.split('/')[2]}\r\nConnection: close\r\n"
                  f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode())
        data = b""
        while True:
            d = c.recv(65536)
            if not d:
                break
            data += d
    except (ConnectionResetError, BrokenPipeError):
        return None
    finally:
        c.close()
    return int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else None


def closed_without_answer(c, timeout=5):
    c.settimeout(timeout)
    try:
        return c.recv(4096) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def fronted(start_sluice, tmp_path):
    log = tmp_path / "access.log"
    s = start_sluice(extra_short=(
        "proxy_protocol:\n  trusted_cidrs: [127.0.0.1/32]\n"
        "bans:\n  max_failures: 3\n"
        "limits:\n  max_connections_per_client: 2\n"
        f"access_log:\n  mode: all\n  path: {log}\n"))
    s.access_log = log
    h = HAProxy(tmp_path, s.port)
    yield s, h
    h.stop()


def records(s, count, timeout=5):
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        lines = s.access_log.read_text().splitlines() if s.access_log.exists() else []
        if len(lines) >= count:
            break
        time.sleep(0.05)
    return [json.loads(l) for l in lines]


def test_the_client_behind_the_balancer_is_the_client(fronted, py_origin):
    s, h = fronted
    before = s.stat("listener.http.proxy_protocol.accepted")
    assert before == 0
    assert get("127.0.0.2", h.v1, s.key, py_origin.url("/hello")) == 200
    assert get("127.0.0.3", h.v2, s.key, py_origin.url("/hello")) == 200
    clients = [r["client"].rsplit(":", 1)[0] for r in records(s, 2)]
    assert clients == ["127.0.0.2", "127.0.0.3"], clients
    assert s.stat("listener.http.proxy_protocol.accepted") == before + 2


def test_the_client_is_banned_not_the_balancer(fronted, py_origin):
    s, h = fronted
    for port in (h.v1, h.v2, h.v1):
        assert get("127.0.0.2", port, "wrong", py_origin.url("/hello")) == 407
    # 127.0.0.2 is banned (closed at accept, behind the balancer too); 127.0.0.3 is not.
    assert get("127.0.0.2", h.v2, s.key, py_origin.url("/hello")) is None
    assert get("127.0.0.3", h.v1, s.key, py_origin.url("/hello")) == 200
    banned = [b["address"] for b in s.admin("/bans").json()["bans"]]
    assert banned == ["127.0.0.2"], banned


def test_per_client_limits_count_the_client(fronted, py_origin):
    s, h = fronted
    # Two open connections of one client through the balancer: its third is refused, another
    # client's first is not, though every connection comes from the balancer's address.
    held = [connect_from("127.0.0.5", h.v1) for _ in range(2)]
    assert s.wait_stat("listener.http.downstream_cx_active", lambda v: v == 2) == 2
    third = get("127.0.0.5", h.v1, s.key, py_origin.url("/hello"))
    assert third == 503, third
    assert get("127.0.0.6", h.v1, s.key, py_origin.url("/hello")) == 200
    assert s.stat("listener.http.downstream_cx_per_client_overflow") == 1
    for c in held:
        c.close()


def test_headers_from_others_and_balancers_without_one_are_closed(fronted, py_origin):
    s, h = fronted
    header = b"PROXY TCP4 192.0.2.9 127.0.0.1 1234 80\r\n"
    url = py_origin.url("/hello")
    request = (f"GET {url} HTTP/1.1\r\nHost: {url.split('/')[2]}\r\nConnection: close\r\n"
               f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n").encode()
    # A client of its own (not a balancer) is served as itself...
    assert get("127.0.0.4", s.port, s.key, py_origin.url("/hello")) == 200
    # ...but may not claim to speak for another.
    c = connect_from("127.0.0.4", s.port)
    c.sendall(header + request)
    assert closed_without_answer(c)
    # The balancer's address without a header, and with a broken one.
    c = connect_from("127.0.0.1", s.port)
    c.sendall(request)
    assert closed_without_answer(c)
    c = connect_from("127.0.0.1", s.port)
    c.sendall(b"PROXY TCP4 192.0.2.9 127.0.0.1 99999 80\r\n" + request)
    assert closed_without_answer(c)
    # A LOCAL v2 header (the balancer's health check) keeps the balancer's address.
    c = connect_from("127.0.0.1", s.port)
    c.sendall(b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00" + request)
    c.settimeout(5)
    assert c.recv(100).startswith(b"HTTP/1.1 200")
    c.close()
    pp = "listener.http.proxy_protocol."
    assert s.stat(pp + "untrusted") == 1
    assert s.stat(pp + "missing") == 1
    assert s.stat(pp + "malformed") == 1
    assert s.stat(pp + "local") == 1


def test_it_must_be_the_first_listener_filter(tmp_path):
    from sluice_proc import run_cli
    cfg = tmp_path / "c.yaml"
    port = free_port()
    cfg.write_text(
        "listeners:\n- name: http\n"
        f"  address: 127.0.0.1:{port}\n"
        "  listener_filters:\n"
        "  - name: sluice.ip_allowlist\n"
        "    typed_config: {'@type': type.googleapis.com/sluice.filters.v1.IpAllowlistConfig,"
        " cidrs: [127.0.0.0/8]}\n"
        "  - name: sluice.proxy_protocol\n"
        "    typed_config: {'@type': type.googleapis.com/sluice.filters.v1.ProxyProtocolConfig,"
        " trusted_cidrs: [127.0.0.1/32]}\n"
        "  filter_chains:\n  - filters:\n    - name: sluice.socks5\n"
        "      typed_config: {'@type': type.googleapis.com/sluice.filters.v1.Socks5Config}\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, r.stdout
    assert "listener_filters[1]" in r.stderr and "first listener filter" in r.stderr, r.stderr
