"""The access log end to end: one line per request, tunnel and SOCKS5 command, in JSON or
Squid's native format, to a file that logrotate can move (SIGUSR1), with what each line says
checked against what the client and the origin saw."""

import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from helpers import CLEAN_ENV, RawConnection, basic_auth, free_port, read_all
from origins import EchoServer
from test_http2 import H2Client
from test_socks5 import CONNECT, SUCCEEDED, Socks5Client


@pytest.fixture
def echo():
    s = EchoServer()
    yield s
    s.stop()


def start_logging(start_sluice, tmp_path, certs, mode="all", fmt="json"):
    log = tmp_path / "access.log"
    socks_port, tls_port = free_port(), free_port()
    d = certs["dir"]
    s = start_sluice(extra_short=(
        f"access_log:\n  mode: {mode}\n  format: {fmt}\n  path: {log}\n"
        f"socks5:\n  listen: 127.0.0.1:{socks_port}\n"
        f"tls:\n  listen: 127.0.0.1:{tls_port}\n  cert: {d / 'server-chain.pem'}\n"
        f"  key: {d / 'server.key'}\n"))
    s.access_log = log
    s.socks_port = socks_port
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    ctx.set_alpn_protocols(["h2"])
    s.h2_socket = lambda: ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", tls_port), timeout=10), server_hostname="localhost")
    return s


def lines_of(s, n, timeout=5):
    """The first n lines of the access log (they arrive in batches, at most 200 ms late)."""
    deadline = time.monotonic() + timeout
    while True:
        text = s.access_log.read_text() if s.access_log.exists() else ""
        lines = text.splitlines()
        if len(lines) >= n or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def one_of_each(s, py_origin, echo):
    """An HTTP/1.1 GET, a refused one, a CONNECT tunnel, an HTTP/2 GET, a SOCKS5 CONNECT."""
    authority = f"127.0.0.1:{py_origin.port}"
    with RawConnection(s.proxy_addr) as c:
        c.send(f"GET http://{authority}/hello HTTP/1.1\r\nHost: {authority}\r\n"
               f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
        assert c.read_response().status == 200
        c.send(f"GET http://{authority}/nokey HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        assert c.read_response().status == 407
    t = socket.create_connection(s.proxy_addr, timeout=10)
    t.sendall(f"CONNECT {echo.authority} HTTP/1.1\r\nHost: {echo.authority}\r\n"
              f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode() + b"ping")
    t.shutdown(socket.SHUT_WR)
    assert read_all(t).endswith(b"ping")
    t.close()
    h2c = H2Client(s)
    r = h2c.response(h2c.open("GET", authority, "/hello"))
    assert r.status == 200
    h2c.close()
    with Socks5Client(("127.0.0.1", s.socks_port)) as c:
        c.login(s.key)
        rep, _ = c.request(CONNECT, "127.0.0.1", echo.port)
        assert rep == SUCCEEDED
        c.sock.sendall(b"pong")
        assert c.sock.recv(4) == b"pong"


def test_every_request_tunnel_and_command_leaves_one_json_line(start_sluice, tmp_path, certs,
                                                               py_origin, echo):
    s = start_logging(start_sluice, tmp_path, certs)
    one_of_each(s, py_origin, echo)
    lines = lines_of(s, 5)
    time.sleep(0.4)
    assert len(lines_of(s, 6, timeout=0.1)) == 5, s.access_log.read_text()
    records = [json.loads(line) for line in lines]
    by = {(r["protocol"], r["method"], r["path"]): r for r in records}
    get = by[("http1", "GET", "/hello")]
    assert (get["status"], get["key"], get["listener"]) == (200, "key1", "http"), get
    assert get["target"] == f"127.0.0.1:{py_origin.port}"
    assert get["upstream"] == f"127.0.0.1:{py_origin.port}"
    assert get["bytes_from_origin"] > len("hello") and get["bytes_to_origin"] > 0
    assert get["client"].startswith("127.0.0.1:") and get["total_us"] >= get["first_byte_us"] >= 0
    refused = by[("http1", "GET", "/nokey")]
    assert (refused["status"], refused["key"]) == (407, ""), refused
    assert refused["denial"] == "proxy credentials required" and refused["upstream"] == ""
    assert refused["proxy_status"] == "http_request_denied" and get["proxy_status"] == ""
    tunnel = by[("http1", "CONNECT", "")]
    assert tunnel["status"] == 200 and tunnel["bytes_to_origin"] == 4
    assert tunnel["bytes_from_origin"] == 4
    h2 = by[("http2", "GET", "/hello")]
    assert h2["status"] == 200 and h2["listener"] == "https"
    socks = by[("socks5", "connect", "")]
    assert socks["status"] == 0 and socks["bytes_to_origin"] == 4, socks
    assert s.stat("access_log.records") == 5
    assert s.stat("access_log.dropped") == 0
    # Never the key itself.
    assert s.key not in s.access_log.read_text()


def test_errors_mode_logs_only_refusals_and_failures(start_sluice, tmp_path, certs, py_origin,
                                                     echo):
    s = start_logging(start_sluice, tmp_path, certs, mode="errors")
    one_of_each(s, py_origin, echo)
    with RawConnection(s.proxy_addr) as c:
        c.send(f"GET http://127.0.0.1:1/closed HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"
               f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
        assert c.read_response().status == 403  # port 1 is not allowed
    lines = lines_of(s, 2)
    time.sleep(0.4)
    records = [json.loads(line) for line in lines_of(s, 3, timeout=0.1)]
    assert [(r["status"], r["path"]) for r in records] == [(407, "/nokey"), (403, "/closed")]


def test_squid_format_is_read_by_a_squid_log_analyser(start_sluice, tmp_path, certs, py_origin,
                                                      echo):
    s = start_logging(start_sluice, tmp_path, certs, fmt="squid")
    one_of_each(s, py_origin, echo)
    lines = lines_of(s, 5)
    squid_line = re.compile(r"^\d+\.\d{3} +\d+ 127\.0\.0\.1 TCP_[A-Z_]+/\d{3} \d+ [A-Z]+ \S+ \S+ "
                            r"HIER_[A-Z]+/\S+ -$")
    assert len(lines) == 5 and all(squid_line.match(line) for line in lines), lines
    assert any(" TCP_MISS/200 " in line and "/hello key1 HIER_DIRECT/127.0.0.1 -" in line
               for line in lines), lines
    assert any(" TCP_DENIED/407 " in line for line in lines), lines
    assert sum(" TCP_TUNNEL/200 " in line for line in lines) == 2, lines
    if shutil.which("calamaris") is None:
        pytest.skip("calamaris is not installed (tools/deps.sh --test installs it)")
    report = subprocess.run(["calamaris", "-a"], input="\n".join(lines) + "\n", text=True,
                            capture_output=True, env=CLEAN_ENV, check=True).stdout
    assert re.search(r"lines parsed:\s+lines\s+5\b", report), report
    assert re.search(r"invalid lines:\s+lines\s+0\b", report), report


def test_sigusr1_reopens_the_file_and_loses_no_record(start_sluice, tmp_path, certs, py_origin):
    s = start_logging(start_sluice, tmp_path, certs)
    authority = f"127.0.0.1:{py_origin.port}"
    rotated = tmp_path / "access.log.1"

    def get(n):
        with RawConnection(s.proxy_addr) as c:
            for i in range(n):
                c.send(f"GET http://{authority}/hello?{i} HTTP/1.1\r\nHost: {authority}\r\n"
                       f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
                assert c.read_response().status == 200

    get(30)
    assert len(lines_of(s, 30)) == 30
    os.rename(s.access_log, rotated)
    get(10)  # still written to the moved file until it is reopened
    s.proc.send_signal(signal.SIGUSR1)
    assert s.wait_stat("access_log.reopened", lambda v: v == 1) == 1
    get(20)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        old = rotated.read_text().splitlines()
        new = s.access_log.read_text().splitlines() if s.access_log.exists() else []
        if len(old) + len(new) == 60:
            break
        time.sleep(0.05)
    assert len(old) + len(new) == 60, (len(old), len(new))
    assert len(new) >= 20
    paths = [json.loads(line)["path"] for line in old + new]
    assert sorted(paths) == sorted([f"/hello?{i}" for i in range(30)] +
                                   [f"/hello?{i}" for i in range(10)] +
                                   [f"/hello?{i}" for i in range(20)])


def test_a_bad_access_log_setting_is_refused_with_its_key(start_sluice, tmp_path):
    from sluice_proc import sluice_binary
    for body, expect in ((f"access_log:\n  mode: sometimes\n", "access_log.mode"),
                         (f"access_log:\n  format: apache\n", "access_log.format")):
        cfg = tmp_path / "c.yaml"
        cfg.write_text("server:\n  listen: 127.0.0.1:3128\nauth:\n  api_keys: [\"k\"]\n" + body)
        r = subprocess.run([sluice_binary(), "check", "-c", str(cfg)], capture_output=True,
                           text=True, env=CLEAN_ENV)
        assert r.returncode != 0 and expect in (r.stdout + r.stderr), (r.stdout, r.stderr)
