"""A worker's batch of sends and receives (io_uring): on by default, off with disable_io_uring,
the same answers either way."""
import base64
import ctypes
import json
import os
import socket
import subprocess

import pytest

from test_reload import sluice_load_bin


def io_uring_usable():
    """Whether this kernel lets the process make a ring (io_uring_setup(2), number 425)."""
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)
    if fd < 0:
        return False
    os.close(fd)
    return True


def rings(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[io_uring]":
                n += 1
        except OSError:
            pass
    return n


def load(s, dst, *extra):
    r = subprocess.run([sluice_load_bin(), "--proxy", f"http://u:{s.key}@127.0.0.1:{s.port}",
                        "--dst", dst, "-c", "32", "-n", "6000", "--json", "-q", *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requests"] == 6000 and out["failed"] == 0 and not out["errors"], out
    return out


@pytest.mark.parametrize("size", [100, 1024, 15_000, 200_000])
def test_keep_alive_requests_go_through_the_workers_ring(start_sluice, sluice_origin, size):
    s = start_sluice(workers=1)
    load(s, sluice_origin.url + f"/bytes/{size}")
    if not io_uring_usable():
        pytest.skip("io_uring is not available on this kernel")
    # 32 connections at once: turns find several sends and receives, and the worker makes its
    # ring for them (the main thread, with nothing to batch, makes none).
    assert rings(s.proc.pid) == 1
    stats = s.stats()
    # A small exchange's two receives and two sends (the client's, the origin's) are batched;
    # a large response's reads and writes go at once.
    if size <= 1024:
        assert stats["server.io_batched"] >= 4 * 6000 * 0.9, stats["server.io_batched"]
    assert 0 < stats["server.io_uring_enters"] < stats["server.io_batched"]
    assert stats["server.reads_completed"] == 0  # off by default


@pytest.mark.parametrize("size", [100, 1024, 200_000])
def test_reads_by_completion(start_sluice, sluice_origin, size):
    s = start_sluice(workers=1, patch=lambda full: full.update(reads_by_completion=True))
    load(s, sluice_origin.url + f"/bytes/{size}")
    if not io_uring_usable():
        pytest.skip("io_uring is not available on this kernel")
    stats = s.stats()
    if size <= 1024:
        # Each connection's first message is read by readiness, the others stand in the ring:
        # the client's requests and the origin's responses, two a request.
        assert stats["server.reads_completed"] > 2 * 6000 * 0.8, stats
        assert stats["server.io_batched"] >= 2 * 6000 * 0.9, stats["server.io_batched"]
        assert (stats["server.io_batched"] + stats["server.reads_completed"]
                >= 4 * 6000 * 0.9), stats
        # Once the clients' connections are closed, receives stand on the pooled origin
        # connections alone (each read more than one response).
        idle = s.stat("upstream.pool_idle")
        assert idle > 0
        assert s.wait_stat("server.reads_standing", lambda v: v == idle) == idle
    else:
        # A bulk response stops the origin connection's receive (it reads by readiness, in
        # blocks); a response's short tail may arm it again for the next one. No client
        # connection is left standing.
        idle = s.stat("upstream.pool_idle")
        assert idle > 0
        assert s.wait_stat("server.reads_standing", lambda v: v <= idle) <= idle
    # Byte for byte, on one connection that goes from read by readiness to by completion and
    # back: small and bulk responses in turn.
    from helpers import RawConnection
    from test_policy_limits import get
    pattern = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_"
    with RawConnection(s.proxy_addr, timeout=30) as h:
        for n in (100, 1024, size, 10, size, 1024, 3):
            r = get(h, s.key, sluice_origin.url + f"/bytes/{n}")
            assert r.status == 200
            assert r.body == (pattern * (n // 64 + 1))[:n], n


def test_new_connections_and_tunnels_through_the_ring(start_sluice, sluice_origin):
    s = start_sluice(workers=1)
    load(s, sluice_origin.url + "/bytes/1024", "--new-conn")
    batched = s.stat("server.io_batched")
    assert batched > 6000, batched
    load(s, sluice_origin.url + "/bytes/1024", "--connect")
    assert s.stat("server.io_batched") > batched + 6000


def test_disable_io_uring_makes_a_system_call_each(start_sluice, sluice_origin):
    s = start_sluice(workers=1, patch=lambda full: full.update(disable_io_uring=True))
    load(s, sluice_origin.url + "/bytes/1024")
    assert rings(s.proc.pid) == 0
    assert s.stat("server.io_batched") == 0
    assert s.stat("server.io_uring_enters") == 0


def request_on_a_new_connection(s, url):
    """One GET through the proxy on a connection of its own, read to the proxy's close."""
    auth = base64.b64encode(f"u:{s.key}".encode()).decode()
    host = url.split("/")[2]
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
        c.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: Basic {auth}\r\n"
                  "Connection: close\r\n\r\n".encode())
        reply = b""
        while chunk := c.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]


def test_a_new_connection_is_registered_read_and_closed_through_the_ring(start_sluice,
                                                                        sluice_origin):
    if not io_uring_usable():
        pytest.skip("io_uring is not available on this kernel")
    s = start_sluice(workers=1)
    url = sluice_origin.url + "/bytes/100"
    request_on_a_new_connection(s, url)  # the origin connection is pooled from here on
    batched, enters = s.stat("server.io_batched"), s.stat("server.io_uring_enters")
    request_on_a_new_connection(s, url)
    # The connection's registration in the worker's epoll set and its first receive go to the
    # kernel in one entry; its close is one of the batch's operations too. One at a time, every
    # other operation of the exchange (the origin's send and receive, the reply) is alone in its
    # batch and made with the system call.
    assert s.stat("server.io_uring_enters") >= enters + 1
    assert s.stat("server.io_batched") >= batched + 6


def test_reads_by_completion_leaves_a_bulk_tunnel_to_splice(start_sluice, sluice_origin):
    """The client's side of a download is quiet (its receive stands); the origin's bulk makes
    the relay ask both sides to read by readiness, and the tunnel splices."""
    from test_policy_limits import connect_tunnel
    s = start_sluice(workers=1, patch=lambda full: full.update(reads_by_completion=True))
    c, resp = connect_tunnel(s, s.key, f"127.0.0.1:{sluice_origin.source}")
    assert resp.status == 200
    # The count is the client's second message (the CONNECT was its first): its receive
    # stands from here.
    size = 8 << 20
    c.send(f"{size}\n".encode())
    got = len(c.buf)
    while got < size:
        d = c.sock.recv(1 << 20)
        assert d
        got += len(d)
    c.close()
    assert s.wait_stat("tunnel.listener.http.bytes_spliced", lambda v: v > 0) > 0
