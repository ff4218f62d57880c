"""The end-of-request record: one per request, tunnel and SOCKS5 command, for every protocol.

At log level debug each record is a `request name=value ...` line. The byte counts are checked
against what sluice-origin counted on its own sockets (its /stats), so they are the bytes that
really went to and came from the destination, heads included."""

import re
import shlex
import socket
import time

import pytest

from helpers import RawConnection, basic_auth, free_port, read_all
from test_http2 import H2Client, use_http2
from test_socks5 import CONNECT, SUCCEEDED, Socks5Client


@pytest.fixture(scope="module")
def origin(sluice_origin):
    return sluice_origin


def debug_log(full):
    full["log_level"] = "debug"


def records(s, n, timeout=10):
    """The first n record lines of sluice's log, parsed into dicts (waits for them)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line.split("] request ", 1)[1] for line in s.log().splitlines()
                 if "] request protocol=" in line]
        if len(lines) >= n or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) >= n, f"{len(lines)} record(s), wanted {n}:\n{s.log()[-3000:]}"
    return [dict(field.split("=", 1) for field in shlex.split(line)) for line in lines]


def stat(s, name):
    return s.stats().get(name, 0)


def check_bytes(record, served):
    assert int(record["bytes_to_origin"]) == served["bytes_received"], (record, served)
    assert int(record["bytes_from_origin"]) == served["bytes_sent"], (record, served)


def test_http1_forward_record(start_sluice, origin):
    s = start_sluice(patch=debug_log)

    def run():
        with RawConnection(s.proxy_addr) as c:
            c.send(f"GET {origin.url}/bytes/3000 HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\n"
                   f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
            resp = c.read_response()
            assert resp.status == 200 and len(resp.body) == 3000

    _, served = origin.measure(run)
    (r,) = records(s, 1)
    assert r["protocol"] == "http1" and r["method"] == "GET", r
    assert r["target"] == f"127.0.0.1:{origin.port}" and r["status"] == "200", r
    assert r["key"] != "-" and r["client"].startswith("127.0.0.1:"), r
    assert r["upstream"] == f"127.0.0.1:{origin.port}" and r["denial"] == "-", r
    assert int(r["total_us"]) >= int(r["first_byte_us"]) >= 0, r
    check_bytes(r, served)
    assert s.wait_stat("request_record.total", lambda v: v == 1) == 1


def test_http1_connect_record(start_sluice, origin):
    s = start_sluice(patch=debug_log)

    def run():
        with socket.create_connection(s.proxy_addr, timeout=10) as c:
            c.sendall(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n"
                      f"Host: 127.0.0.1:{origin.port}\r\n"
                      f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
            assert c.recv(4096).startswith(b"HTTP/1.1 200")
            c.sendall(b"GET /bytes/5000 HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n")
            data = read_all(c)
            assert data.startswith(b"HTTP/1.1 200") and len(data) > 5000

    _, served = origin.measure(run)
    (r,) = records(s, 1)
    assert r["protocol"] == "http1" and r["method"] == "CONNECT" and r["status"] == "200", r
    check_bytes(r, served)


def test_http1_refusal_record(start_sluice, origin):
    s = start_sluice(patch=debug_log)
    with RawConnection(s.proxy_addr) as c:
        c.send(f"GET {origin.url}/bytes/10 HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\n\r\n"
               .encode())
        assert c.read_response().status == 407
    (r,) = records(s, 1)
    assert r["status"] == "407" and r["denial"] != "-", r
    assert r["bytes_to_origin"] == "0" and r["upstream"] == "-", r
    assert s.wait_stat("request_record.denied", lambda v: v == 1) == 1


def test_http2_stream_records(start_sluice, origin):
    s = start_sluice(patch=lambda full: (use_http2()(full), debug_log(full)))

    def run():
        c = H2Client(s)
        try:
            st = c.response(c.open("GET", f"127.0.0.1:{origin.port}", "/bytes/4000"))
            assert st.status == 200 and len(st.body) == 4000
        finally:
            c.close()

    _, served = origin.measure(run)
    (r,) = records(s, 1)
    assert r["protocol"] == "http2" and r["method"] == "GET" and r["status"] == "200", r
    check_bytes(r, served)


def test_socks5_connect_record(start_sluice, origin):
    port = free_port()
    s = start_sluice(extra_short=f"socks5:\n  listen: \"127.0.0.1:{port}\"\n", patch=debug_log)
    s.socks5_addr = ("127.0.0.1", port)

    def run():
        with Socks5Client(s.socks5_addr) as c:
            c.login(s.key)
            rep, _ = c.request(CONNECT, "127.0.0.1", origin.port)
            assert rep == SUCCEEDED
            c.sock.sendall(b"GET /bytes/2000 HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n")
            assert len(read_all(c.sock)) > 2000

    _, served = origin.measure(run)
    (r,) = records(s, 1)
    assert r["protocol"] == "socks5" and r["method"] == "connect" and r["status"] == "0", r
    assert re.match(r"127\.0\.0\.1:\d+$", r["upstream"]), r
    check_bytes(r, served)


def test_websocket_upgrade_record(start_sluice, origin):
    """An upgrade is one record: the exchange's bytes (request head, 101) and the tunnel's."""
    s = start_sluice(patch=debug_log)
    frame = bytes([0x81, 0x80 | 5, 1, 2, 3, 4]) + bytes(b ^ k for b, k in zip(b"hello", b"\1\2\3\4\1"))

    def run():
        with socket.create_connection(s.proxy_addr, timeout=10) as c:
            c.sendall(f"GET ws://127.0.0.1:{origin.port}/ws HTTP/1.1\r\n"
                      f"Host: 127.0.0.1:{origin.port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                      f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                data += c.recv(4096)
            assert data.startswith(b"HTTP/1.1 101"), data
            echo = data.split(b"\r\n\r\n", 1)[1]
            c.sendall(frame)
            while len(echo) < 7:
                echo += c.recv(4096)
            assert echo[:7] == b"\x81\x05hello", echo
            c.sendall(bytes([0x88, 0x80, 9, 9, 9, 9]))  # close, masked, no payload
            read_all(c)

    _, served = origin.measure(run)
    (r,) = records(s, 1)
    assert r["method"] == "GET" and r["status"] == "101", r
    check_bytes(r, served)
