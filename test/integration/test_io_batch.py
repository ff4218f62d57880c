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
