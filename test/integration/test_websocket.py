"""WebSocket through the HTTP/1.1 proxy port: absolute-form Upgrade requests relayed to the
origin and switched to a tunnel on its 101, and WebSocket inside a CONNECT tunnel.

websocket-client (python3-websocket) always sends CONNECT through an HTTP proxy, so the
absolute-form handshake is written by hand on a raw socket; the frames after it are then spoken
by websocket-client's own WebSocket object over that socket (or by the helpers in ws_origin.py
where a test needs the exact bytes).
"""

import base64
import os
import socket
import time

import pytest
import websocket

from helpers import basic_auth
from ws_origin import (OP_BINARY, OP_TEXT, FrameReader, WsOrigin, accept_key, encode_frame,
                       parse_head, read_head)

STAT = "http1.http."


@pytest.fixture
def ws_origin():
    origin = WsOrigin().start()
    yield origin
    origin.stop()


def handshake(port, key=None, path="/echo", scheme="ws", auth=True, extra="", host=None):
    key = key or base64.b64encode(os.urandom(16)).decode()
    host = host or f"127.0.0.1:{port}"
    req = (f"GET {scheme}://{host}{path} HTTP/1.1\r\n"
           f"Host: {host}\r\n"
           f"Upgrade: websocket\r\n"
           f"Connection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\n"
           f"Sec-WebSocket-Version: 13\r\n"
           f"Sec-WebSocket-Protocol: chat\r\n")
    if auth:
        req += f"Proxy-Authorization: {auth if isinstance(auth, str) else ''}\r\n"
    return key, req + extra + "\r\n"


def connect(sluice):
    s = socket.create_connection(sluice.proxy_addr, timeout=10)
    return s


def read_response(sock, pending=b""):
    """(status, headers, body, rest) of a response with Content-Length (or none)."""
    head, rest = read_head(sock, pending)
    line, headers = parse_head(head)
    status = int(line.split(" ")[1])
    n = int(headers.get("content-length", ["0"])[0]) if status >= 200 and status != 101 else 0
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:n], rest[n:], head


def upgrade(sluice, origin, path="/echo", scheme="ws", extra=""):
    """A client socket whose upgrade was accepted; returns (socket, bytes read past the 101)."""
    s = connect(sluice)
    key, req = handshake(origin.port, path=path, scheme=scheme,
                         auth=basic_auth(sluice.key), extra=extra)
    s.sendall(req.encode())
    status, headers, _, rest, head = read_response(s)
    assert status == 101, head
    assert headers["upgrade"] == ["websocket"], head
    assert headers["connection"] == ["Upgrade"], head
    assert headers["sec-websocket-accept"] == [accept_key(key)], head
    assert headers["sec-websocket-protocol"] == ["chat"], head
    return s, rest


def library_socket(sock, rest):
    """websocket-client's frame layer over an upgraded socket."""
    assert rest == b"", "the echo origin sends nothing unasked after its 101"
    ws = websocket.WebSocket()
    ws.sock = sock
    ws.connected = True
    return ws


def closed_soon(sock, within):
    sock.settimeout(within)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except socket.timeout:
        return False
    except OSError:
        return True


@pytest.mark.parametrize("scheme", ["ws", "http"])
def test_absolute_form_upgrade_echo(sluice, ws_origin, scheme):
    s, rest = upgrade(sluice, ws_origin, scheme=scheme)
    ws = library_socket(s, rest)
    ws.send("hello")
    assert ws.recv() == "hello"
    big = os.urandom(65536)
    ws.send_binary(big)
    assert ws.recv() == big
    assert sluice.wait_stat(STAT + "upgrades_active", lambda v: v == 1) == 1
    assert sluice.stat(STAT + "tunnels_active") == 1
    ws.close()
    s.close()

    # What the origin got: an origin-form upgrade request with the WebSocket fields, without
    # the proxy credential.
    line, headers = parse_head(ws_origin.heads[0])
    assert line == "GET /echo HTTP/1.1"
    assert headers["upgrade"] == ["websocket"]
    assert headers["connection"] == ["Upgrade"]
    assert headers["sec-websocket-version"] == ["13"]
    assert "sec-websocket-key" in headers
    assert "proxy-authorization" not in headers
    assert headers["host"] == [f"127.0.0.1:{ws_origin.port}"]
    assert ws_origin.messages[:2] == [(OP_TEXT, b"hello"), (OP_BINARY, big)]

    assert sluice.wait_stat(STAT + "rq_upgrade", lambda v: v == 1) == 1
    assert sluice.wait_stat(STAT + "upgrade_switched", lambda v: v == 1) == 1
    assert sluice.wait_stat(STAT + "upgrades_active", lambda v: v == 0) == 0
    assert sluice.wait_stat(STAT + "tunnels_active", lambda v: v == 0) == 0


def test_frame_right_behind_101_is_relayed(sluice, ws_origin):
    s, rest = upgrade(sluice, ws_origin, path="/hello")
    reader = FrameReader(s, rest)
    fin, op, masked, payload = reader.frame()
    assert (fin, op, masked, payload) == (True, OP_TEXT, False, b"hi")
    s.sendall(encode_frame(OP_TEXT, b"and back", mask=True))
    assert reader.message() == (OP_TEXT, b"and back")
    s.close()


def test_upgrade_never_uses_or_feeds_the_pool(sluice, ws_origin):
    """A pooled origin connection is not upgraded, and the connection of a declined upgrade is
    not pooled."""
    s = connect(sluice)
    plain = (f"GET http://127.0.0.1:{ws_origin.port}/plain HTTP/1.1\r\n"
             f"Host: 127.0.0.1:{ws_origin.port}\r\n"
             f"Proxy-Authorization: {basic_auth(sluice.key)}\r\n\r\n").encode()
    s.sendall(plain)
    status, _, body, rest, head = read_response(s)
    assert (status, body) == (200, b"plain"), head
    s.close()  # its origin connection is now in the pool
    u, urest = upgrade(sluice, ws_origin)
    u.sendall(encode_frame(OP_TEXT, b"x", mask=True))
    assert FrameReader(u, urest).message() == (OP_TEXT, b"x")
    u.close()
    assert sluice.wait_stat("upstream.cx_connect_total", lambda v: v == 2) == 2
    assert sluice.stat("upstream.pool_reuse") == 0

    s = connect(sluice)
    _, req = handshake(ws_origin.port, path="/refuse", auth=basic_auth(sluice.key))
    s.sendall(req.encode())
    status, _, _, rest, head = read_response(s)
    assert status == 403, head
    s.sendall(plain)
    status, _, body, _, head = read_response(s, rest)
    assert (status, body) == (200, b"plain"), head
    s.close()
    # The refused upgrade took a third connection; the plain request after it reused the first
    # (pooled) one, not the one that saw the upgrade.
    assert sluice.wait_stat("upstream.cx_connect_total", lambda v: v == 3) == 3
    assert sluice.stat("upstream.pool_reuse") == 1


def test_many_messages_both_ways_with_pipelining(sluice, ws_origin):
    """Frames written back to back in one send, large and small, come back in order."""
    s, rest = upgrade(sluice, ws_origin)
    msgs = [os.urandom(n) for n in (1, 125, 126, 65535, 65536, 300000, 7)]
    s.sendall(b"".join(encode_frame(OP_BINARY, m, mask=True) for m in msgs))
    reader = FrameReader(s, rest)
    for m in msgs:
        op, payload = reader.message()
        assert (op, payload) == (OP_BINARY, m)
    s.close()


def test_websocket_client_through_connect(sluice, ws_origin):
    """The library's own proxy mode: CONNECT, then the handshake inside the tunnel."""
    ws = websocket.create_connection(
        ws_origin.ws_url("/echo"), http_proxy_host="127.0.0.1", http_proxy_port=sluice.port,
        http_proxy_auth=("user", sluice.key), proxy_type="http",
        http_no_proxy=["no-such-host.invalid"], timeout=10)
    try:
        ws.send("through connect")
        assert ws.recv() == "through connect"
        big = os.urandom(65536)
        ws.send_binary(big)
        assert ws.recv() == big
    finally:
        ws.close()
    assert sluice.wait_stat(STAT + "rq_connect", lambda v: v == 1) == 1
    assert sluice.stat(STAT + "rq_upgrade") == 0


def test_websocket_client_connect_needs_key(sluice, ws_origin):
    with pytest.raises(websocket.WebSocketProxyException, match="407"):
        websocket.create_connection(
            ws_origin.ws_url("/echo"), http_proxy_host="127.0.0.1", http_proxy_port=sluice.port,
            http_proxy_auth=("user", "wrong"), proxy_type="http",
            http_no_proxy=["no-such-host.invalid"], timeout=10)
    assert ws_origin.heads == []


def test_upgrade_without_key_gets_407(sluice, ws_origin):
    s = connect(sluice)
    _, req = handshake(ws_origin.port, auth=False)
    # Frame bytes right behind the head must never reach the origin either.
    s.sendall(req.encode() + encode_frame(OP_TEXT, b"sneaky", mask=True))
    status, headers, body, _, head = read_response(s)
    assert status == 407, head
    assert headers["proxy-authenticate"] == ['Basic realm="sluice"']
    assert "upgrade" not in headers
    assert closed_soon(s, 3), "the unread frame would be parsed as a request: must close"
    s.close()
    time.sleep(0.2)
    assert ws_origin.heads == []
    assert sluice.wait_stat("auth.denied_missing", lambda v: v == 1) == 1


def test_origin_refusal_is_a_normal_response(sluice, ws_origin):
    s = connect(sluice)
    _, req = handshake(ws_origin.port, path="/refuse", auth=basic_auth(sluice.key))
    s.sendall(req.encode())
    status, headers, body, rest, head = read_response(s)
    assert status == 403, head
    assert body == b"refused"
    assert "upgrade" not in headers, head
    assert "upgrade" not in ",".join(headers.get("connection", [])).lower(), head
    # Still an HTTP connection: the next request is served.
    s.sendall(f"GET http://127.0.0.1:{ws_origin.port}/plain HTTP/1.1\r\n"
              f"Host: 127.0.0.1:{ws_origin.port}\r\n"
              f"Proxy-Authorization: {basic_auth(sluice.key)}\r\n\r\n".encode())
    status, _, body, _, head = read_response(s, rest)
    assert (status, body) == (200, b"plain"), head
    s.close()
    assert sluice.wait_stat(STAT + "upgrade_refused", lambda v: v == 1) == 1
    assert sluice.stat(STAT + "upgrade_switched") == 0
    assert sluice.stat(STAT + "upgrades_active") == 0


def test_frames_after_refused_upgrade_never_reach_origin(sluice, ws_origin):
    """The client sends its first frame with the handshake; the origin declines: the frame is
    then parsed as the next HTTP request (and refused), never relayed."""
    s = connect(sluice)
    _, req = handshake(ws_origin.port, path="/refuse", auth=basic_auth(sluice.key))
    frame = encode_frame(OP_TEXT, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", mask=False)
    s.sendall(req.encode() + frame)
    status, _, body, rest, head = read_response(s)
    assert status == 403, head
    status, _, _, _, head = read_response(s, rest)
    assert status == 400, head
    assert closed_soon(s, 3)
    s.close()
    time.sleep(0.2)
    assert len(ws_origin.heads) == 1, ws_origin.heads


def test_pipelined_bytes_wait_for_101(sluice, ws_origin):
    s = connect(sluice)
    key, req = handshake(ws_origin.port, path="/slow", auth=basic_auth(sluice.key))
    s.sendall(req.encode() + encode_frame(OP_TEXT, b"early bird", mask=True))
    status, headers, _, rest, head = read_response(s)
    assert status == 101, head
    assert headers["sec-websocket-accept"] == [accept_key(key)]
    op, payload = FrameReader(s, rest).message()
    assert (op, payload) == (OP_TEXT, b"early bird")
    s.close()
    assert ws_origin.early_bytes == [b""], "bytes behind the upgrade head reached the origin " \
                                           "before it accepted"


def test_idle_upgraded_connection_times_out(start_sluice, ws_origin):
    sluice = start_sluice(extra_short="limits:\n  tunnel_idle_timeout: 1s\n")
    s, rest = upgrade(sluice, ws_origin)
    ws = library_socket(s, rest)
    ws.send("still here")
    assert ws.recv() == "still here"
    t0 = time.monotonic()
    assert closed_soon(s, 5), "idle upgraded connection still open"
    assert time.monotonic() - t0 >= 0.8
    s.close()
    assert sluice.wait_stat(STAT + "tunnel_idle_timeout", lambda v: v == 1) == 1
    assert sluice.wait_stat(STAT + "upgrades_active", lambda v: v == 0) == 0


def test_client_half_close_reaches_origin(sluice, ws_origin):
    """A close frame then FIN from the client: the origin answers the close and the proxy
    closes both sides."""
    s, rest = upgrade(sluice, ws_origin)
    s.sendall(encode_frame(8, b"\x03\xe8", mask=True))
    s.shutdown(socket.SHUT_WR)
    op, payload = FrameReader(s, rest).message()
    assert (op, payload) == (8, b"\x03\xe8")
    assert closed_soon(s, 3)
    s.close()
    assert sluice.wait_stat(STAT + "upgrades_active", lambda v: v == 0) == 0


def test_wss_absolute_form_refused(sluice, ws_origin):
    s = connect(sluice)
    _, req = handshake(ws_origin.port, scheme="wss", auth=basic_auth(sluice.key))
    s.sendall(req.encode())
    status, _, body, _, head = read_response(s)
    assert status == 400, head
    assert b"CONNECT" in body
    s.close()
    assert ws_origin.heads == []
    assert sluice.wait_stat(STAT + "upgrade_rejected", lambda v: v == 1) == 1


def test_ws_url_without_upgrade_refused(sluice, ws_origin):
    s = connect(sluice)
    s.sendall(f"GET ws://127.0.0.1:{ws_origin.port}/plain HTTP/1.1\r\n"
              f"Host: 127.0.0.1:{ws_origin.port}\r\n"
              f"Proxy-Authorization: {basic_auth(sluice.key)}\r\n\r\n".encode())
    status, _, body, _, head = read_response(s)
    assert status == 400, head
    s.close()
    assert ws_origin.heads == []


@pytest.mark.parametrize("extra,method", [
    ("Content-Length: 5\r\n", "GET"),
    ("Transfer-Encoding: chunked\r\n", "GET"),
    ("", "POST"),
])
def test_upgrade_with_body_or_not_get_refused(sluice, ws_origin, extra, method):
    s = connect(sluice)
    _, req = handshake(ws_origin.port, auth=basic_auth(sluice.key), extra=extra)
    req = method + req[3:]
    body = b"hello" if "Length" in extra else (b"5\r\nhello\r\n0\r\n\r\n" if extra else b"")
    s.sendall(req.encode() + body + encode_frame(OP_TEXT, b"x", mask=True))
    status, _, _, _, head = read_response(s)
    assert status == 400, head
    assert closed_soon(s, 3)
    s.close()
    time.sleep(0.2)
    assert ws_origin.heads == []
    assert sluice.wait_stat(STAT + "upgrade_rejected", lambda v: v == 1) == 1


def test_other_upgrades_are_stripped(sluice, ws_origin):
    s = connect(sluice)
    s.sendall(f"GET http://127.0.0.1:{ws_origin.port}/plain HTTP/1.1\r\n"
              f"Host: 127.0.0.1:{ws_origin.port}\r\n"
              f"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
              f"Proxy-Authorization: {basic_auth(sluice.key)}\r\n\r\n".encode())
    status, _, body, _, head = read_response(s)
    assert (status, body) == (200, b"plain"), head
    s.close()
    _, headers = parse_head(ws_origin.heads[0])
    assert "upgrade" not in headers and "http2-settings" not in headers, headers
    assert "connection" not in headers, headers
    assert sluice.stat(STAT + "rq_upgrade") == 0


def test_http10_upgrade_is_ignored(sluice, ws_origin):
    s = connect(sluice)
    _, req = handshake(ws_origin.port, path="/plain", scheme="http", auth=basic_auth(sluice.key))
    s.sendall(req.replace("HTTP/1.1", "HTTP/1.0").encode())
    status, _, body, _, head = read_response(s)
    assert (status, body) == (200, b"plain"), head
    s.close()
    _, headers = parse_head(ws_origin.heads[0])
    assert "upgrade" not in headers


def test_101_to_something_else_is_502(sluice, ws_origin):
    s = connect(sluice)
    _, req = handshake(ws_origin.port, path="/bad101", auth=basic_auth(sluice.key))
    s.sendall(req.encode())
    status, _, _, _, head = read_response(s)
    assert status == 502, head
    assert closed_soon(s, 3)
    s.close()
    assert sluice.wait_stat(STAT + "upstream_rs_bad", lambda v: v == 1) == 1


def test_websocket_disabled(start_sluice, ws_origin):
    def patch(full):
        from sluice_proc import find_typed_configs
        for c in find_typed_configs(full, "Http1ProxyConfig"):
            c["disable_websocket"] = True
    sluice = start_sluice(patch=patch)
    s = connect(sluice)
    _, req = handshake(ws_origin.port, scheme="http", auth=basic_auth(sluice.key))
    s.sendall(req.encode())
    status, headers, _, _, head = read_response(s)
    # The origin got a plain GET and (the echo origin needs the upgrade) answered 400.
    assert status == 400, head
    s.close()
    _, oh = parse_head(ws_origin.heads[0])
    assert "upgrade" not in oh
    s = connect(sluice)
    _, req = handshake(ws_origin.port, scheme="ws", auth=basic_auth(sluice.key))
    s.sendall(req.encode())
    status, _, body, _, head = read_response(s)
    assert status == 400 and b"disabled" in body, head
    s.close()


def test_upgrade_through_the_tls_port(start_sluice, certs, ws_origin):
    """The same absolute-form upgrade, with TLS between the client and sluice."""
    from helpers import free_port
    from tls_helpers import client_context, tls_connect

    tls_port = free_port()
    d = certs["dir"]
    s = start_sluice(extra_short=f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                                 f"  cert: {d / 'server-chain.pem'}\n  key: {d / 'server.key'}\n")
    sock = tls_connect(tls_port, client_context(certs["ca"]))
    key, req = handshake(ws_origin.port, auth=basic_auth(s.key))
    sock.sendall(req.encode())
    status, headers, _, rest, head = read_response(sock)
    assert status == 101, head
    assert headers["sec-websocket-accept"] == [accept_key(key)], head
    ws = library_socket(sock, rest)
    for message in (b"x" * 64, os.urandom(65536)):
        ws.send_binary(message)
        assert ws.recv() == message
    ws.close()
    sock.close()
    assert s.wait_stat("http1.https.upgrade_switched", lambda v: v == 1) == 1
    assert s.stat("tls.https.handshakes") == 1


@pytest.mark.parametrize("proxy_type", ["socks5", "socks5h"])
def test_websocket_client_through_socks5(start_sluice, ws_origin, proxy_type):
    """websocket-client's SOCKS5 mode (through PySocks): the handshake and frames inside a
    SOCKS5 tunnel, the key as the password."""
    from helpers import free_port
    socks_port = free_port()
    s = start_sluice(extra_short=f"socks5:\n  listen: 127.0.0.1:{socks_port}\n")
    ws = websocket.create_connection(
        ws_origin.ws_url("/echo").replace("127.0.0.1", "localhost"),
        http_proxy_host="127.0.0.1", http_proxy_port=socks_port,
        http_proxy_auth=("user", s.key), proxy_type=proxy_type,
        http_no_proxy=["no-such-host.invalid"], timeout=10)
    try:
        for message in (b"m" * 64, os.urandom(65536)):
            ws.send_binary(message)
            assert ws.recv() == message
    finally:
        ws.close()
    assert s.wait_stat("socks5.socks5.rq_connect", lambda v: v == 1) == 1
    assert s.stat("socks5.socks5.auth_ok") == 1
