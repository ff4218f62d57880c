"""The tunnel relay every protocol shares: bulk tunnels splice, small ones copy, counters per
listener and per key, disable_splice, and worker pinning."""

import hashlib
import os
import re
import signal
import socket
import struct
import threading
import time

import pytest

from helpers import basic_auth, free_port, read_all
from origins import EchoServer
from sluice_proc import find_typed_configs


@pytest.fixture
def echo():
    s = EchoServer()
    yield s
    s.stop()


def connect_tunnel(sluice, port):
    c = socket.create_connection(sluice.proxy_addr, timeout=20)
    target = f"127.0.0.1:{port}"
    c.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
              f"Proxy-Authorization: {basic_auth(sluice.key)}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = c.recv(4096)
        assert chunk, f"no answer to CONNECT: {head!r}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    assert head.endswith(b"\r\n\r\n"), "bytes behind the 200 before anything was sent"
    return c


def socks5_tunnel(addr, key, port):
    c = socket.create_connection(addr, timeout=20)
    c.sendall(b"\x05\x01\x02")
    assert c.recv(2) == b"\x05\x02"
    c.sendall(b"\x01\x01u" + bytes([len(key)]) + key.encode())
    assert c.recv(2) == b"\x01\x00"
    c.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", port))
    reply = c.recv(10)
    assert reply[:2] == b"\x05\x00", reply
    return c


def exchange(c, size):
    """Sends `size` bytes (a thread) while reading the echo; half-closes; returns both hashes."""
    data = os.urandom(1 << 20) * (size >> 20)
    sent_hash = hashlib.sha256(data).hexdigest()

    def send():
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=send)
    t.start()
    h = hashlib.sha256()
    got = 0
    while True:
        chunk = c.recv(1 << 20)
        if not chunk:
            break
        h.update(chunk)
        got += len(chunk)
    t.join()
    c.close()
    assert got == size, f"{got} of {size} bytes came back"
    return sent_hash, h.hexdigest()


SIZE = 16 << 20


def test_bulk_connect_tunnel_is_spliced_and_counted(sluice, echo):
    c = connect_tunnel(sluice, echo.port)
    sent, got = exchange(c, SIZE)
    assert sent == got, "the echo differs from what was sent"
    prefix = "tunnel.listener.http."
    sluice.wait_stat(prefix + "tunnels_active", lambda v: v == 0)
    assert sluice.stat(prefix + "bytes_to_upstream") == SIZE
    assert sluice.stat(prefix + "bytes_to_downstream") == SIZE
    # Most of it went socket to socket; only the first reads of each direction were copied.
    assert sluice.stat(prefix + "bytes_spliced") > SIZE
    assert sluice.stat(prefix + "tunnels_total") == 1
    # The same bytes under the key that opened the tunnel.
    assert sluice.stat("tunnel.key.key1.bytes_to_upstream") == SIZE
    assert sluice.stat("tunnel.key.key1.bytes_to_downstream") == SIZE
    assert sluice.stat("http1.http.tunnels_active") == 0


def test_small_exchanges_are_copied_not_spliced(sluice, echo):
    c = connect_tunnel(sluice, echo.port)
    for i in range(20):
        c.sendall(b"ping %d\n" % i)
        want = b"ping %d\n" % i
        got = b""
        while len(got) < len(want):
            got += c.recv(100)
        assert got == want
    c.close()
    sluice.wait_stat("tunnel.listener.http.tunnels_active", lambda v: v == 0)
    assert sluice.stat("tunnel.listener.http.bytes_spliced") == 0
    assert sluice.stat("tunnel.listener.http.bytes_to_upstream") == sum(
        len(b"ping %d\n" % i) for i in range(20))


def test_disable_splice_copies_every_byte(start_sluice, echo):
    s = start_sluice(extra_short="limits:\n  disable_splice: true\n")
    c = connect_tunnel(s, echo.port)
    sent, got = exchange(c, SIZE)
    assert sent == got
    s.wait_stat("tunnel.listener.http.tunnels_active", lambda v: v == 0)
    assert s.stat("tunnel.listener.http.bytes_spliced") == 0
    assert s.stat("tunnel.listener.http.bytes_to_upstream") == SIZE


def test_socks5_bulk_tunnel_is_spliced(start_sluice, echo):
    socks_port = free_port()
    s = start_sluice(extra_short=f"socks5:\n  listen: 127.0.0.1:{socks_port}\n")
    c = socks5_tunnel(("127.0.0.1", socks_port), s.key, echo.port)
    sent, got = exchange(c, SIZE)
    assert sent == got
    s.wait_stat("tunnel.listener.socks5.tunnels_active", lambda v: v == 0)
    assert s.stat("tunnel.listener.socks5.bytes_to_upstream") == SIZE
    assert s.stat("tunnel.listener.socks5.bytes_spliced") > SIZE
    assert s.stat("tunnel.key.key1.bytes_to_downstream") == SIZE


def worker_cpus(pid):
    """{thread name: Cpus_allowed_list} of sluice's worker threads."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            name = f.read().strip()
        if not name.startswith("sluice-w"):
            continue
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            m = re.search(r"^Cpus_allowed_list:\s*(\S+)", f.read(), re.M)
        out[name] = m.group(1)
    return out


def allowed_cpus():
    return sorted(os.sched_getaffinity(0))


def test_pin_workers_pins_each_worker_to_its_cpu(start_sluice):
    cpus = allowed_cpus()
    n = 2
    s = start_sluice(workers=n, patch=lambda full: full.update(pin_workers=True))
    pinned = worker_cpus(s.proc.pid)
    assert sorted(pinned) == [f"sluice-w{i}" for i in range(n)], pinned
    for i in range(n):
        assert pinned[f"sluice-w{i}"] == str(cpus[i % len(cpus)]), pinned


def test_workers_are_not_pinned_by_default(start_sluice):
    s = start_sluice(workers=2)
    pinned = worker_cpus(s.proc.pid)
    assert len(pinned) == 2
    for name, cpus in pinned.items():
        assert "-" in cpus or "," in cpus or len(allowed_cpus()) == 1, (name, cpus)


def send_all_at_once(pid, sock, data, stop):
    """Sends `data` and half-closes; with `stop`, sluice is stopped meanwhile, so it reads all
    of it, end included, in one read when it resumes."""
    if stop:
        os.kill(pid, signal.SIGSTOP)
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
    if stop:
        time.sleep(0.2)
        os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("size", [1000, 100_000])
def test_connect_bytes_and_end_sent_with_the_head_reach_the_destination(sluice, echo, size):
    payload = os.urandom(size)
    target = f"127.0.0.1:{echo.port}"
    c = socket.create_connection(sluice.proxy_addr, timeout=10)
    # The head, the first tunnel bytes and the half-close, before sluice has answered.
    head = (f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
            f"Proxy-Authorization: {basic_auth(sluice.key)}\r\n\r\n").encode()
    send_all_at_once(sluice.proc.pid, c, head + payload, stop=size < 65536)
    got = read_all(c)
    c.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert body == payload, f"{len(body)} of {len(payload)} bytes came back"


@pytest.mark.parametrize("size", [1000, 100_000])
def test_socks5_bytes_and_end_sent_with_the_request_reach_the_destination(start_sluice, echo,
                                                                         size):
    socks_port = free_port()
    s = start_sluice(extra_short=f"socks5:\n  listen: 127.0.0.1:{socks_port}\n")
    payload = os.urandom(size)
    key = s.key.encode()
    c = socket.create_connection(("127.0.0.1", socks_port), timeout=10)
    # Greeting, credentials, request, the first tunnel bytes and the half-close, all at once.
    handshake = (b"\x05\x01\x02" + b"\x01\x01u" + bytes([len(key)]) + key +
                 b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") +
                 struct.pack(">H", echo.port))
    send_all_at_once(s.proc.pid, c, handshake + payload, stop=size < 65536)
    got = read_all(c)
    c.close()
    assert got[:4] == b"\x05\x02\x01\x00", got[:4]  # method, then auth status
    assert got[4:6] == b"\x05\x00", got[4:14]      # the reply: succeeded
    assert got[14:] == payload, f"{len(got) - 14} of {len(payload)} bytes came back"


def test_thousands_of_keys_share_an_overflow_stats_set(start_sluice, tmp_path, echo):
    # Every key gets its own counters while the stats store has room; the rest share one set
    # instead of the store running out (it holds 8192 stats).
    keys = [f"k{i}:key-{i:05d}-{os.urandom(6).hex()}" for i in range(3000)]
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("\n".join(keys) + "\n")

    def patch(full):
        for auth in find_typed_configs(full, "AuthConfig"):
            auth["api_keys_file"] = str(keys_file)

    s = start_sluice(patch=patch)
    assert "tunnel.key_overflow" in s.log()
    first, last = keys[0].split(":", 1)[1], keys[-1].split(":", 1)[1]
    for key in (first, last):
        c = socket.create_connection(s.proxy_addr, timeout=10)
        target = f"127.0.0.1:{echo.port}"
        c.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                  f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode() + b"hello")
        c.shutdown(socket.SHUT_WR)
        assert read_all(c).endswith(b"\r\n\r\nhello")
        c.close()
    s.wait_stat("tunnel.listener.http.tunnels_active", lambda v: v == 0)
    assert s.stat("auth.key.k0.allowed") == 1
    assert s.stat("tunnel.key.k0.bytes_to_upstream") == 5
    assert s.stat("auth.key_overflow.allowed") == 1
    assert s.stat("tunnel.key_overflow.bytes_to_upstream") == 5
