"""The upstream budget: what one client may make sluice hold toward destinations (sockets per
client across connections, protocols and HTTP/2 streams), and the descriptors kept back so that
accepts, the admin endpoint and other clients keep working when the process runs short."""

import os
import socket
import subprocess
import time

import pytest

from helpers import CLEAN_ENV, RawConnection, basic_auth, free_port
from origins import EchoServer
from test_http2 import H2Client, use_http2
from test_socks5 import CONNECT, SUCCEEDED, Socks5Client

GENERAL_FAILURE = 0x01


@pytest.fixture
def echo():
    s = EchoServer()
    yield s
    s.stop()


def source_socket(ip, addr):
    """A client socket from loopback address `ip` (any of 127.0.0.0/8 can be bound)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((ip, 0))
    s.settimeout(10)
    s.connect(addr)
    return s


def connect_status(c, key, authority):
    c.send(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
           f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode())
    return c.read_response("CONNECT").status


def test_http2_streams_count_against_their_client(start_sluice, echo):
    s = start_sluice(extra_short="limits:\n  max_upstream_connections_per_client: 5\n",
                     patch=use_http2())
    c = H2Client(s)
    tunnels = []
    for _ in range(5):
        sid = c.open("CONNECT", echo.authority, end=False)
        assert c.wait(lambda: c.streams[sid].status is not None)
        assert c.streams[sid].status == 200
        tunnels.append(sid)
    # The sixth upstream of this client, on the same connection or another, is refused.
    over = c.open("CONNECT", echo.authority, end=False)
    assert c.wait(lambda: c.streams[over].status is not None)
    assert c.streams[over].status == 503
    other_connection = H2Client(s)
    r = other_connection.open("CONNECT", echo.authority, end=False)
    assert other_connection.wait(lambda: other_connection.streams[r].status is not None)
    assert other_connection.streams[r].status == 503
    assert s.stat("upstream.client_limit_refused") == 2
    # Another client has its own budget.
    stranger = H2Client(s, sock=source_socket("127.0.0.2", s.proxy_addr))
    sid = stranger.open("CONNECT", echo.authority, end=False)
    assert stranger.wait(lambda: stranger.streams[sid].status is not None)
    assert stranger.streams[sid].status == 200
    # A tunnel that ends gives its place back.
    c.conn.reset_stream(tunnels[0])
    c.send()
    deadline = time.monotonic() + 5
    status = None
    while time.monotonic() < deadline:
        sid = c.open("CONNECT", echo.authority, end=False)
        assert c.wait(lambda: c.streams[sid].status is not None)
        status = c.streams[sid].status
        if status == 200:
            break
        time.sleep(0.1)
    assert status == 200


def test_keep_alive_requests_and_socks5_share_the_budget(start_sluice, py_origin, echo):
    socks_port = free_port()
    s = start_sluice(extra_short="limits:\n  max_upstream_connections_per_client: 2\n"
                                 f"socks5:\n  listen: 127.0.0.1:{socks_port}\n")
    # Pooled requests take and give back their place: many in a row stay within 2.
    with RawConnection(s.proxy_addr) as c:
        for i in range(20):
            c.send(f"GET http://127.0.0.1:{py_origin.port}/hello HTTP/1.1\r\n"
                   f"Host: 127.0.0.1:{py_origin.port}\r\n"
                   f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
            assert c.read_response().status == 200, i
    assert s.stat("upstream.client_limit_refused") == 0
    # Two HTTP/1 tunnels fill it; the third is refused whatever the protocol.
    a, b = RawConnection(s.proxy_addr), RawConnection(s.proxy_addr)
    try:
        assert connect_status(a, s.key, echo.authority) == 200
        assert connect_status(b, s.key, echo.authority) == 200
        with RawConnection(s.proxy_addr) as c:
            assert connect_status(c, s.key, echo.authority) == 503
        with Socks5Client(("127.0.0.1", socks_port)) as c:
            c.login(s.key)
            rep, _ = c.request(CONNECT, "127.0.0.1", echo.port)
            assert rep == GENERAL_FAILURE, rep
    finally:
        a.close()
        b.close()
    assert s.stat("upstream.client_limit_refused") == 2
    # With the tunnels gone, SOCKS5 gets its upstream.
    deadline = time.monotonic() + 5
    rep = None
    while time.monotonic() < deadline and rep != SUCCEEDED:
        with Socks5Client(("127.0.0.1", socks_port)) as c:
            c.login(s.key)
            rep, _ = c.request(CONNECT, "127.0.0.1", echo.port)
        time.sleep(0.05)
    assert rep == SUCCEEDED


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_the_descriptor_reserve_keeps_accepts_and_the_admin_working(start_sluice, echo):
    """One client opens tunnels until the process is down to its reserve: further upstream
    sockets are refused with 503 at once, while new clients are still accepted and answered and
    the admin endpoint still serves; when the tunnels close, upstreams work again."""
    s = start_sluice(extra_short="limits:\n  descriptor_reserve: 40\n")
    pid = s.proc.pid
    limit = open_descriptors(pid) + 100
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:{limit}"], check=True,
                   env=CLEAN_ENV)
    time.sleep(2.5)  # the server re-reads the limit every 2 s
    held = []
    refused = 0
    try:
        for _ in range(60):
            c = RawConnection(s.proxy_addr)
            status = connect_status(c, s.key, echo.authority)
            if status == 503:
                refused += 1
                c.close()
                break
            assert status == 200
            held.append(c)
        assert refused == 1, f"no refusal after {len(held)} tunnels (limit {limit})"
        # sluice is never left without descriptors: the reserve is still free.
        assert open_descriptors(pid) <= limit - 40 + 2
        assert s.stat("upstream.descriptor_reserve_refused") >= 1
        # Another client is accepted and gets an answer (not a hang), and the admin serves.
        with RawConnection(s.proxy_addr) as other:
            assert connect_status(other, s.key, echo.authority) == 503
        assert s.stat("listener.http.downstream_cx_total") >= len(held) + 2
    finally:
        for c in held:
            c.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with RawConnection(s.proxy_addr) as c:
            if connect_status(c, s.key, echo.authority) == 200:
                break
        time.sleep(0.1)
    else:
        pytest.fail("upstreams did not work again after the tunnels closed")
