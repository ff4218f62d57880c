"""Proxy-Status (RFC 9209) on the answers sluice makes itself, on HTTP/1.1 and HTTP/2: each names
sluice, the error type and, as details, the reason the body already gives. Answers an origin made
(a 200, the origin's own 403) are relayed without one."""

import socket
import struct
import threading

import pytest

from helpers import RawConnection, SilentPort, basic_auth, closed_port_socket, raw_request
from origins import EchoServer, TcpServer
from sluice_proc import find_typed_configs
from test_http2 import H2Client, use_http2

PROTOCOLS = ["http1", "http2"]


def proxy_status(error, details):
    return f'sluice; error={error}; details="{details}"'


class CannedOrigin(TcpServer):
    """Answers every request head with the same bytes, then closes."""

    def __init__(self, response):
        self.response = response
        super().__init__()

    def serve(self, c):
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = c.recv(65536)
                if not chunk:
                    return
                data += chunk
            c.sendall(self.response)
            c.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class NxdomainServer:
    """A UDP name server on loopback that says every name does not exist (RCODE 3); with
    answer=False it never answers at all."""

    def __init__(self, answer=True):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                query, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            if not self.answer or len(query) < 12:
                continue
            (qid,) = struct.unpack("!H", query[:2])
            # QR, opcode 0, RD copied, RA, RCODE 3; the question echoed, no records.
            flags = 0x8000 | (struct.unpack("!H", query[2:4])[0] & 0x0100) | 0x0080 | 3
            self.sock.sendto(struct.pack("!HHHHHH", qid, flags, 1, 0, 0, 0) + query[12:], peer)

    def stop(self):
        self.sock.close()


def patches(protocol, *more):
    """A start_sluice patch: the HTTP/2 codec when asked for, then `more` in order."""
    fns = ([use_http2()] if protocol == "http2" else []) + list(more)

    def patch(full):
        for fn in fns:
            fn(full)

    return patch


def with_dns(port):
    def patch(full):
        full["dns"] = {"resolvers": [f"127.0.0.1:{port}"], "ignore_hosts_file": True,
                       "timeout": "1s"}
    return patch


def no_private(full):
    guards = find_typed_configs(full, ".DestGuardConfig")
    assert guards
    for g in guards:
        g["allow_private"] = False


class Answer:
    def __init__(self, status, proxy_status, body):
        self.status = status
        self.proxy_status = proxy_status
        self.body = body

    def __repr__(self):
        return f"<{self.status} proxy-status={self.proxy_status!r} body={self.body[:200]!r}>"


def ask(s, protocol, method, authority, path="/", key=True):
    """One request through sluice; its status, Proxy-Status (None: absent) and body."""
    if protocol == "http1":
        auth = f"Proxy-Authorization: {basic_auth(s.key)}\r\n" if key else ""
        target = authority if method == "CONNECT" else f"http://{authority}{path}"
        r = raw_request(s.proxy_addr, f"{method} {target} HTTP/1.1\r\nHost: {authority}\r\n"
                                      f"{auth}\r\n".encode(), method=method)
        return Answer(r.status, r.header("Proxy-Status"), r.body)
    c = H2Client(s)
    try:
        st = c.response(c.open(method, authority, path, key=key, end=method != "CONNECT"))
    finally:
        c.close()
    return Answer(st.status, st.headers.get("proxy-status"), bytes(st.body))


@pytest.fixture
def echo():
    e = EchoServer()
    yield e
    e.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_missing_key_is_a_denied_request(start_sluice, py_origin, protocol):
    s = start_sluice(patch=patches(protocol))
    r = ask(s, protocol, "GET", f"127.0.0.1:{py_origin.port}", "/hello", key=False)
    assert r.status == 407, r
    assert r.proxy_status == proxy_status("http_request_denied", "proxy credentials required")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_private_destination_is_a_prohibited_ip(start_sluice, protocol):
    s = start_sluice(patch=patches(protocol, no_private))
    r = ask(s, protocol, "GET", "192.0.2.1:8080")
    assert r.status == 403, r
    assert r.proxy_status == proxy_status("destination_ip_prohibited",
                                          "destination is a private address")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_refused_port_is_a_denied_request(start_sluice, protocol):
    # The port, not the address, is what the policy refuses: destination_ip_prohibited would
    # send a client to look at an address that is fine.
    s = start_sluice(patch=patches(protocol))
    r = ask(s, protocol, "CONNECT", "127.0.0.1:25")
    assert r.status == 403, r
    assert r.proxy_status == proxy_status("http_request_denied", "destination port not allowed")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_refused_connect_is_connection_refused(start_sluice, protocol):
    s = start_sluice(patch=patches(protocol))
    closed = closed_port_socket()
    port = closed.getsockname()[1]
    try:
        r = ask(s, protocol, "GET", f"127.0.0.1:{port}")
    finally:
        closed.close()
    assert r.status == 502, r
    assert r.proxy_status == proxy_status(
        "connection_refused", f"cannot connect to 127.0.0.1:{port}: Connection refused")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_name_that_does_not_resolve_is_a_dns_error(start_sluice, protocol):
    dns = NxdomainServer()
    try:
        s = start_sluice(patch=patches(protocol, with_dns(dns.port)))
        r = ask(s, protocol, "GET", "nonexistent.invalid:8080")
    finally:
        dns.stop()
    assert r.status == 502, r
    assert r.proxy_status == proxy_status("dns_error", "nonexistent.invalid: no such host")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_silent_name_server_is_a_dns_timeout(start_sluice, protocol):
    dns = NxdomainServer(answer=False)
    try:
        s = start_sluice(patch=patches(protocol, with_dns(dns.port)))
        r = ask(s, protocol, "GET", "nonexistent.invalid:8080")
    finally:
        dns.stop()
    assert r.status == 502, r
    assert r.proxy_status == proxy_status("dns_timeout", "nonexistent.invalid: lookup timed out")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unanswered_connect_is_a_connection_timeout(start_sluice, protocol):
    silent = SilentPort()
    try:
        s = start_sluice(router={"connect_timeout": "1s"}, patch=patches(protocol))
        r = ask(s, protocol, "GET", f"127.0.0.1:{silent.port}")
    finally:
        silent.close()
    assert r.status == 504, r
    assert r.proxy_status == proxy_status("connection_timeout",
                                          f"connect to 127.0.0.1:{silent.port} timed out")


def test_malformed_request_is_a_request_error_http1(sluice, py_origin):
    a = f"127.0.0.1:{py_origin.port}"
    r = raw_request(sluice.proxy_addr, f"GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\n"
                                       f"Bad Header: x\r\n\r\n".encode())
    assert r.status == 400, r
    assert r.header("Proxy-Status") == proxy_status("http_request_error", "whitespace before colon")


def test_malformed_request_is_a_request_error_http2(start_sluice, py_origin):
    s = start_sluice(patch=use_http2())
    c = H2Client(s)
    # nghttp2 resets streams with most malformations itself; a bad port is sluice's to refuse.
    st = c.response(c.open("GET", "127.0.0.1:99999", "/hello"))
    assert st.status == 400, vars(st)
    assert st.headers.get("proxy-status") == proxy_status("http_request_error",
                                                          "invalid :authority")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_malformed_origin_response_is_a_protocol_error(start_sluice, protocol):
    origin = CannedOrigin(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
                          b"hello")
    try:
        s = start_sluice(patch=patches(protocol))
        r = ask(s, protocol, "GET", origin.authority)
    finally:
        origin.stop()
    assert r.status == 502, r
    assert r.proxy_status == proxy_status("http_protocol_error", "conflicting content-length")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_origin_closing_inside_its_head_is_an_incomplete_response(start_sluice, protocol):
    origin = CannedOrigin(b"HTTP/1.1 200 OK\r\nContent-")
    try:
        s = start_sluice(patch=patches(protocol))
        r = ask(s, protocol, "GET", origin.authority)
    finally:
        origin.stop()
    assert r.status == 502, r
    assert r.proxy_status == proxy_status("http_response_incomplete",
                                          "origin closed the connection")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_upstream_budget_is_a_connection_limit(start_sluice, echo, protocol):
    s = start_sluice(extra_short="limits:\n  max_upstream_connections_per_client: 1\n",
                     patch=patches(protocol))
    # One tunnel holds the client's only upstream socket; the next upstream is refused.
    if protocol == "http1":
        with RawConnection(s.proxy_addr) as held:
            held.send(f"CONNECT {echo.authority} HTTP/1.1\r\nHost: {echo.authority}\r\n"
                      f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
            assert held.read_response("CONNECT").status == 200
            r = ask(s, protocol, "CONNECT", echo.authority)
    else:
        c = H2Client(s)
        try:
            sid = c.open("CONNECT", echo.authority, end=False)
            assert c.wait(lambda: c.streams[sid].status is not None)
            assert c.streams[sid].status == 200
            over = c.response(c.open("CONNECT", echo.authority, end=False))
            r = Answer(over.status, over.headers.get("proxy-status"), bytes(over.body))
        finally:
            c.close()
    assert r.status == 503, r
    assert r.proxy_status == proxy_status("connection_limit_reached",
                                          "too many upstream connections from this client")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_origin_answers_carry_no_proxy_status(start_sluice, py_origin, protocol):
    s = start_sluice(patch=patches(protocol))
    ok = ask(s, protocol, "GET", f"127.0.0.1:{py_origin.port}", "/hello")
    assert ok.status == 200, ok
    assert ok.proxy_status is None
    origin = CannedOrigin(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 5\r\n\r\nnope\n")
    try:
        forbidden = ask(s, protocol, "GET", origin.authority)
    finally:
        origin.stop()
    assert forbidden.status == 403, forbidden
    assert forbidden.body == b"nope\n"
    assert forbidden.proxy_status is None
