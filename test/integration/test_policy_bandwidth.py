"""Bandwidth limits of policy groups and their keys (upload_bytes_per_second,
download_bytes_per_second) against the real binary: a limit slows a transfer (its reads are
paused) rather than refusing it, both ways, through a spliced CONNECT tunnel and a relayed HTTP
response, and keys of a group share the group's limit."""

import threading
import time

import pytest

from helpers import RawConnection, basic_auth
from test_policy_limits import connect_tunnel, start_limited
from test_http2 import H2Client
from test_socks5 import CONNECT, Socks5Client

MiB = 1 << 20
RATE = 8 * MiB
SIZE = 64 * MiB


def expected_seconds(size, rate):
    # The bucket lets 100 ms of the rate (at least 64 KiB) through ahead of it (ByteBucket).
    return size / rate - max(0.1, 65536 / rate)


def assert_within(elapsed, size, rate):
    want = expected_seconds(size, rate)
    assert abs(elapsed - want) <= 0.1 * want, f"{size} bytes took {elapsed:.2f} s, want {want:.2f} s"


def download(c, n):
    """Asks the origin's source for n bytes through tunnel c and reads them all."""
    c.send(f"{n}\n".encode())
    got = len(c.buf)
    c.buf = b""
    while got < n:
        d = c.sock.recv(1 << 20)
        assert d, f"tunnel closed after {got} of {n} bytes"
        got += len(d)
    return got


def upload(c, n):
    """Sends n bytes to the origin's sink through tunnel c; returns once the sink counted them."""
    c.send(f"{n}\n".encode())
    block = b"u" * MiB
    left = n
    while left > 0:
        k = min(left, len(block))
        c.sock.sendall(block[:k])
        left -= k
    line = b""
    while not line.endswith(b"\n"):
        d = c.sock.recv(64)
        assert d, "tunnel closed before the sink answered"
        line += d
    assert int(line) == n
    return n


def group(name, limits=None, key_limits=None):
    g = {"name": name}
    if limits:
        g["limits"] = limits
    if key_limits:
        g["key_limits"] = key_limits
    return g


def test_download_through_spliced_tunnel_is_shaped(start_sluice, sluice_origin):
    s = start_limited(start_sluice, [group("ci", key_limits={"download_bytes_per_second": RATE})],
                      {"ci-1": "ci"})
    c, resp = connect_tunnel(s, s.keys["ci-1"], f"127.0.0.1:{sluice_origin.source}")
    assert resp.status == 200
    t0 = time.monotonic()
    download(c, SIZE)
    elapsed = time.monotonic() - t0
    c.close()
    assert_within(elapsed, SIZE, RATE)
    s.wait_stat("tunnel.listener.http.tunnels_active", lambda v: v == 0)
    # The bulk of it went socket to socket, and was shaped there.
    assert s.stat("tunnel.listener.http.bytes_spliced") > SIZE // 2
    assert s.stat("policy.key.ci-1.bandwidth_paused") > 0
    assert s.stat("policy.group.ci.key_bandwidth_paused") > 0
    assert s.stat("policy.group.ci.bandwidth_paused") == 0


def test_upload_through_spliced_tunnel_is_shaped(start_sluice, sluice_origin):
    s = start_limited(start_sluice, [group("ci", limits={"upload_bytes_per_second": RATE})],
                      {"ci-1": "ci"})
    c, resp = connect_tunnel(s, s.keys["ci-1"], f"127.0.0.1:{sluice_origin.sink}")
    assert resp.status == 200
    t0 = time.monotonic()
    upload(c, SIZE)
    elapsed = time.monotonic() - t0
    c.close()
    assert_within(elapsed, SIZE, RATE)
    s.wait_stat("tunnel.listener.http.tunnels_active", lambda v: v == 0)
    assert s.stat("tunnel.listener.http.bytes_spliced") > SIZE // 2
    assert s.stat("policy.group.ci.bandwidth_paused") > 0
    # The download direction has no limit: its answer was not held back.
    assert s.stat("policy.key.ci-1.bandwidth_paused") == s.stat("policy.group.ci.bandwidth_paused")


def test_relayed_http_response_is_shaped(start_sluice, sluice_origin):
    s = start_limited(start_sluice, [group("ci", limits={"download_bytes_per_second": RATE})],
                      {"ci-1": "ci"})
    c = RawConnection(s.proxy_addr, timeout=30)
    host = f"127.0.0.1:{sluice_origin.port}"
    t0 = time.monotonic()
    c.send(f"GET http://{host}/bytes/{SIZE} HTTP/1.1\r\nHost: {host}\r\n"
           f"Proxy-Authorization: {basic_auth(s.keys['ci-1'])}\r\n\r\n".encode())
    # The head, then the body counted as it comes (not kept: 64 MiB).
    while b"\r\n\r\n" not in c.buf:
        c._fill()
    head, _, rest = c.buf.partition(b"\r\n\r\n")
    c.buf = b""
    assert head.startswith(b"HTTP/1.1 200"), head
    assert f"content-length: {SIZE}".encode() in head.lower(), head
    got = len(rest)
    while got < SIZE:
        d = c.sock.recv(1 << 20)
        assert d, f"closed after {got} bytes of the body"
        got += len(d)
    elapsed = time.monotonic() - t0
    assert got == SIZE
    assert_within(elapsed, SIZE, RATE)
    # Slowed, not refused: the keep-alive connection serves the next request at once.
    c.send(f"GET http://{host}/bytes/16 HTTP/1.1\r\nHost: {host}\r\n"
           f"Proxy-Authorization: {basic_auth(s.keys['ci-1'])}\r\n\r\n".encode())
    assert c.read_response().status == 200
    c.close()
    assert s.stat("policy.group.ci.bandwidth_paused") > 0


def test_two_keys_share_the_group_limit_and_the_stricter_wins(start_sluice, sluice_origin):
    # The group allows 8 MiB/s for both keys together; ci-2's own limit is higher, so the
    # group's is the stricter and the two downloads share it.
    s = start_limited(start_sluice,
                      [group("ci", limits={"download_bytes_per_second": RATE},
                             key_limits={"download_bytes_per_second": 4 * RATE})],
                      {"ci-1": "ci", "ci-2": "ci"}, workers=2)
    half = SIZE // 2
    tunnels = []
    for name in ("ci-1", "ci-2"):
        c, resp = connect_tunnel(s, s.keys[name], f"127.0.0.1:{sluice_origin.source}")
        assert resp.status == 200
        tunnels.append(c)
    done = {}

    def run(i, c):
        download(c, half)
        done[i] = time.monotonic()

    t0 = time.monotonic()
    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(tunnels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(done) == 2
    elapsed = max(done.values()) - t0
    for c in tunnels:
        c.close()
    assert_within(elapsed, SIZE, RATE)
    assert s.stat("policy.group.ci.bandwidth_paused") > 0



def test_socks5_connect_download_is_shaped(start_sluice, sluice_origin):
    s = start_limited(start_sluice, [group("g", key_limits={"download_bytes_per_second": RATE})],
                      {"a": "g"}, socks5=True)
    size = SIZE // 2
    sc = Socks5Client(s.socks_addr, timeout=30)
    sc.login(s.keys["a"])
    rep, _ = sc.request(CONNECT, "127.0.0.1", sluice_origin.source)
    assert rep == 0
    c = RawConnection.__new__(RawConnection)
    c.sock, c.buf = sc.sock, b""
    t0 = time.monotonic()
    download(c, size)
    elapsed = time.monotonic() - t0
    sc.close()
    assert_within(elapsed, size, RATE)
    assert s.stat("policy.key.a.bandwidth_paused") > 0


@pytest.mark.parametrize("way", ["download", "upload"])
def test_http2_connect_stream_is_shaped(start_sluice, sluice_origin, way):
    # An HTTP/2 stream is paused by its window credit (upload) or by not reading the
    # destination (download).
    # The Python client sends about 1.5 MiB/s on its own: the upload's rate is well below.
    rate, size = (4 * MiB, 16 * MiB) if way == "download" else (512 * 1024, 4 * MiB)
    limit = {f"{way}_bytes_per_second": rate}
    s = start_limited(start_sluice, [group("g", key_limits=limit)], {"a": "g"}, http2=True)
    c = H2Client(s, timeout=30)
    c.key = s.keys["a"]
    port = sluice_origin.source if way == "download" else sluice_origin.sink
    sid = c.open("CONNECT", f"127.0.0.1:{port}", end=False)
    assert c.wait(lambda: c.streams[sid].status is not None)
    assert c.streams[sid].status == 200
    st = c.streams[sid]
    t0 = time.monotonic()
    if way == "download":
        c.send_body(sid, f"{size}\n".encode(), end=False)
        assert c.wait(lambda: len(st.body) >= size, timeout=60), len(st.body)
    else:
        c.send_body(sid, f"{size}\n".encode() + b"u" * size, end=False, timeout=60)
        want = f"{size}\n".encode()
        assert c.wait(lambda: bytes(st.body) == want, timeout=60), bytes(st.body)
    elapsed = time.monotonic() - t0
    c.close()
    assert_within(elapsed, size, rate)
    assert s.stat("policy.key.a.bandwidth_paused") > 0


def test_relayed_request_body_is_shaped(start_sluice, sluice_origin):
    # The client's body is not read while the upload is paused; the origin echoes it back as it
    # comes, so the echo's end marks when the last byte went up. The connection then serves its
    # next request: the pauses were all undone.
    size = SIZE // 2
    s = start_limited(start_sluice, [group("ci", key_limits={"upload_bytes_per_second": RATE})],
                      {"ci-1": "ci"})
    c = RawConnection(s.proxy_addr, timeout=30)
    host = f"127.0.0.1:{sluice_origin.port}"
    auth = basic_auth(s.keys["ci-1"])
    t0 = time.monotonic()
    c.send(f"POST http://{host}/echo HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {auth}\r\n"
           f"Content-Length: {size}\r\n\r\n".encode())
    sender = threading.Thread(target=lambda: c.sock.sendall(b"p" * size))
    sender.start()
    while b"\r\n\r\n" not in c.buf:
        c._fill()
    head, _, rest = c.buf.partition(b"\r\n\r\n")
    c.buf = b""
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"chunked" not in head.lower(), head
    got = len(rest)
    while got < size:
        d = c.sock.recv(1 << 20)
        assert d, f"closed after {got} bytes of the echo"
        got += len(d)
    elapsed = time.monotonic() - t0
    sender.join(10)
    assert got == size
    assert_within(elapsed, size, RATE)
    c.send(f"GET http://{host}/bytes/16 HTTP/1.1\r\nHost: {host}\r\n"
           f"Proxy-Authorization: {auth}\r\n\r\n".encode())
    assert c.read_response().status == 200
    c.close()
    assert s.stat("policy.key.ci-1.bandwidth_paused") > 0


def test_websocket_download_is_shaped(start_sluice, sluice_origin):
    # An accepted upgrade becomes a tunnel under the same limits: the origin's echo of 16 MiB
    # of frames comes back at the download rate (the upload is not limited).
    rate, size = 4 * MiB, 16 * MiB
    s = start_limited(start_sluice, [group("g", key_limits={"download_bytes_per_second": rate})],
                      {"a": "g"})
    c = RawConnection(s.proxy_addr, timeout=30)
    host = f"127.0.0.1:{sluice_origin.port}"
    c.send(f"GET http://{host}/ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
           f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           f"Sec-WebSocket-Version: 13\r\n"
           f"Proxy-Authorization: {basic_auth(s.keys['a'])}\r\n\r\n".encode())
    while b"\r\n\r\n" not in c.buf:
        c._fill()
    head, _, rest = c.buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    # Binary frames of 64 KiB, masked with the key 0 (the payload goes as it is).
    payload = 65536
    frame = bytes([0x82, 0x80 | 127]) + payload.to_bytes(8, "big") + b"\0\0\0\0" + b"w" * payload
    count = size // payload
    t0 = time.monotonic()
    sender = threading.Thread(target=lambda: [c.sock.sendall(frame) for _ in range(count)])
    sender.start()
    # Each echo is a 10-byte head (unmasked, 64-bit length) and the payload.
    want = count * (10 + payload)
    got = len(rest)
    while got < want:
        d = c.sock.recv(1 << 20)
        assert d, f"closed after {got} of {want} bytes"
        got += len(d)
    elapsed = time.monotonic() - t0
    sender.join(10)
    c.close()
    assert_within(elapsed, want, rate)
    assert s.stat("policy.key.a.bandwidth_paused") > 0


def test_socks5_udp_over_the_bandwidth_is_dropped(start_sluice):
    import secrets
    import socket
    import time
    from helpers import free_port
    from sluice_proc import find_typed_configs
    from test_socks5 import SUCCEEDED, UDP_ASSOCIATE, Socks5Client, UdpEcho, encode_addr
    key = secrets.token_urlsafe(18)
    socks_port = free_port()

    def patch(full):
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys"] = [{"name": "u1", "key": key, "group": "udp"}]
        full["policy"] = {"groups": [{"name": "udp",
                                      "key_limits": {"upload_bytes_per_second": 20000}}]}

    s = start_sluice(extra_short=f"socks5:\n  listen: 127.0.0.1:{socks_port}\n", patch=patch)
    echo = UdpEcho()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    try:
        c = Socks5Client(("127.0.0.1", socks_port))
        c.login(key)
        rep, relay = c.request(UDP_ASSOCIATE, "127.0.0.1", u.getsockname()[1])
        assert rep == SUCCEEDED
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < 2.0:  # 1 KB datagrams as fast as they go, for 2 s
            u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", echo.port) + b"y" * 1000, relay)
            sent += 1
            time.sleep(0.0005)
        time.sleep(0.3)
        got = len(echo.received)
        # 20,000 bytes a second for 2 s (and the bucket's first room): about 40 to 80 datagrams
        # of the thousands sent, the rest dropped and counted.
        assert sent > 500, sent
        assert 25 <= got <= 110, (got, sent)
        assert s.stat("socks5.socks5.udp_dropped_bandwidth") >= sent - got - 5
        c.close()
    finally:
        echo.stop()
        u.close()
