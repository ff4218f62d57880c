"""The HTTP/2 codec (sluice.http2) with real clients: Debian's python3-h2 and nghttp, over plain
TCP with prior knowledge (h2c). The listener's sluice.http1 filter is swapped for sluice.http2
in the expanded full form, its request filters moved over unchanged.
"""

import json
import os
import shutil
import socket
import subprocess
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
import pytest
from hyperframe.frame import (ContinuationFrame, DataFrame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame, Frame)

from helpers import basic_auth, closed_port_socket, rss_kib
from sluice_proc import find_typed_configs
from origins import EchoServer, TcpServer, chunked_body

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_TYPE = "type.googleapis.com/sluice.filters.v1.Http2ProxyConfig"
ENHANCE_YOUR_CALM = 0xB
REFUSED_STREAM = 0x7


def use_http2(**options):
    """A start_sluice patch: every sluice.http1 filter becomes sluice.http2 with its filters."""

    def patch(full):
        swapped = 0
        for listener in full["listeners"]:
            for chain in listener.get("filter_chains", []):
                for i, f in enumerate(chain.get("filters", [])):
                    if f.get("name") != "sluice.http1":
                        continue
                    cfg = {"@type": H2_TYPE,
                           "request_filters": f["typed_config"]["request_filters"]}
                    cfg.update(options)
                    chain["filters"][i] = {"name": "sluice.http2", "typed_config": cfg}
                    swapped += 1
        assert swapped, f"no sluice.http1 filter to replace in {json.dumps(full)[:2000]}"

    return patch


@pytest.fixture
def h2_sluice(start_sluice):
    return start_sluice(patch=use_http2())


@pytest.fixture(params=["h2c", "tls"])
def h2_any(request, start_sluice, certs):
    """HTTP/2 both ways a client reaches it: cleartext prior knowledge on a port whose codec
    is sluice.http2, and the short form's TLS port with ALPN h2."""
    if request.param == "h2c":
        return start_sluice(patch=use_http2())
    import ssl

    from helpers import free_port
    tls_port = free_port()
    d = certs["dir"]
    s = start_sluice(extra_short=f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                                 f"  cert: {d / 'server-chain.pem'}\n  key: {d / 'server.key'}\n")
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    ctx.set_alpn_protocols(["h2", "http/1.1"])

    def connect():
        raw = socket.create_connection(("127.0.0.1", tls_port), timeout=10)
        tls = ctx.wrap_socket(raw, server_hostname="localhost")
        assert tls.selected_alpn_protocol() == "h2"
        return tls
    s.h2_socket = connect
    s.h2_chain = "https"
    return s


def chain_of(s):
    return getattr(s, "h2_chain", "http")


def stat(s, name):
    return s.stat(f"http2.{chain_of(s)}.{name}")


# ---------------------------------------------------------------------------------------------
# loopback TCP servers for tunnels


class SourceServer(TcpServer):
    """Sends `total` bytes on each connection as fast as the reader takes them; counts them."""

    def __init__(self, total):
        self.total = total
        self.sent = 0
        super().__init__()

    def serve(self, c):
        chunk = b"s" * 65536
        c.setblocking(True)
        try:
            while self.sent < self.total:
                n = c.send(chunk)
                self.sent += n
        except OSError:
            pass


@pytest.fixture
def echo_server():
    s = EchoServer()
    yield s
    s.stop()


# ---------------------------------------------------------------------------------------------
# an HTTP/2 client over h2


class Stream:
    def __init__(self):
        self.status = None
        self.headers = {}
        self.body = bytearray()
        self.ended = False
        self.reset = None
        self.interim = []  # statuses of 1xx heads


class H2Client:
    def __init__(self, sluice, timeout=10, sock=None):
        self.key = sluice.key
        if sock is None and hasattr(sluice, "h2_socket"):
            sock = sluice.h2_socket()
        self.sock = sock or socket.create_connection(sluice.proxy_addr, timeout=timeout)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                      validate_outbound_headers=False))
        self.conn.initiate_connection()
        # A large connection window, as browsers use: one stalled stream must not hold it all.
        self.conn.increment_flow_control_window(1 << 24)
        self.streams = {}
        self.no_ack = set()  # streams whose received DATA is not acknowledged (slow reader)
        self.goaway = None
        self.closed = False
        self.send()

    def close(self):
        self.sock.close()

    def send(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request_headers(self, method, authority, path="/", scheme="http", extra=(), key=True):
        h = [(":method", method)]
        if method != "CONNECT":
            h += [(":scheme", scheme), (":path", path)]
        h.append((":authority", authority))
        if key is True:
            h.append(("proxy-authorization", basic_auth(self.key)))
        elif key:
            h.append(("proxy-authorization", basic_auth(key)))
        return h + list(extra)

    def open(self, method, authority, path="/", body=None, end=True, **kw):
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = Stream()
        self.conn.send_headers(sid, self.request_headers(method, authority, path, **kw),
                               end_stream=end and body is None)
        self.send()
        if body is not None:
            self.send_body(sid, body, end=end)
        return sid

    def send_body(self, sid, data, end=True, timeout=20):
        deadline = time.monotonic() + timeout
        view = memoryview(data)
        while view:
            window = min(self.conn.local_flow_control_window(sid),
                         self.conn.max_outbound_frame_size)
            if window == 0:
                assert time.monotonic() < deadline, "flow-control window never reopened"
                self.read_once(0.2)
                continue
            self.conn.send_data(sid, bytes(view[:window]))
            view = view[window:]
            self.send()
        if end:
            self.conn.end_stream(sid)
            self.send()

    def read_once(self, timeout):
        self.sock.settimeout(max(timeout, 0.01))
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return False
        except OSError:
            self.closed = True
            return False
        if not data:
            self.closed = True
            return False
        for ev in self.conn.receive_data(data):
            self.handle(ev)
        self.send()
        return True

    def handle(self, ev):
        st = self.streams.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.InformationalResponseReceived):
            st.interim.append(int(dict(ev.headers)[":status"]))
        elif isinstance(ev, h2.events.ResponseReceived):
            st.headers = dict(ev.headers)
            st.status = int(st.headers[":status"])
        elif isinstance(ev, h2.events.DataReceived):
            st.body += ev.data
            if ev.stream_id not in self.no_ack:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            st.ended = True
        elif isinstance(ev, h2.events.StreamReset):
            if st is not None:
                st.reset = ev.error_code
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = ev

    def wait(self, pred, timeout=10):
        deadline = time.monotonic() + timeout
        while not pred() and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.read_once(min(left, 0.5))
        return pred()

    def response(self, sid, timeout=10):
        st = self.streams[sid]
        self.wait(lambda: st.ended or st.reset is not None or self.goaway is not None, timeout)
        return st


def raw_connection(sluice):
    """A socket that has sent the preface and an empty SETTINGS (no ACK of the server's)."""
    if hasattr(sluice, "h2_socket"):
        s = sluice.h2_socket()
    else:
        s = socket.create_connection(sluice.proxy_addr, timeout=10)
    s.sendall(PREFACE + SettingsFrame(0).serialize())
    return s


def read_frames(sock, until, timeout=10):
    """Reads frames until until(frame) is true or the peer closes; returns the frames seen."""
    buf = b""
    frames = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        while len(buf) >= 9:
            f, length = Frame.parse_frame_header(memoryview(buf[:9]))
            if len(buf) < 9 + length:
                break
            f.parse_body(memoryview(buf[9:9 + length]))
            buf = buf[9 + length:]
            frames.append(f)
            if until(f):
                return frames
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            d = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not d:
            break
        buf += d
    return frames


def goaway_of(frames):
    for f in frames:
        if isinstance(f, GoAwayFrame):
            return f
    return None


def headers_block(enc, authority, key, method="GET", path="/hello"):
    return enc.encode([(":method", method), (":scheme", "http"), (":path", path),
                       (":authority", authority), ("proxy-authorization", basic_auth(key))])


# ---------------------------------------------------------------------------------------------
# relayed requests


def test_get_relayed_as_http1(h2_sluice, py_origin):
    c = H2Client(h2_sluice)
    sid = c.open("GET", f"127.0.0.1:{py_origin.port}", "/hello")
    r = c.response(sid)
    assert r.status == 200 and r.ended, vars(r)
    assert bytes(r.body) == b"hello from the python origin\n"
    assert r.headers.get("content-length") == str(len(r.body))
    assert stat(h2_sluice, "rq_forward") == 1
    assert stat(h2_sluice, "rs_2xx") == 1
    c.close()


def test_header_translation(h2_sluice, py_origin):
    c = H2Client(h2_sluice)
    authority = f"127.0.0.1:{py_origin.port}"
    sid = c.open("GET", authority, "/headers?x=1",
                 extra=[("cookie", "a=1"), ("x-test", "yes"), ("cookie", "b=2"),
                        ("te", "trailers")])
    r = c.response(sid)
    assert r.status == 200, vars(r)
    got = json.loads(bytes(r.body))
    names = [k.lower() for k, _ in got]
    assert dict((k.lower(), v) for k, v in got)["host"] == authority
    assert names.count("host") == 1
    assert ("cookie", "a=1; b=2") in [(k.lower(), v) for k, v in got], got
    assert ("x-test", "yes") in [(k.lower(), v) for k, v in got]
    for hidden in ("proxy-authorization", "te", "connection", "transfer-encoding"):
        assert hidden not in names, got
    assert not any(n.startswith(":") for n in names), got
    assert py_origin.requests[-1][1] == "/headers?x=1"


def test_chunked_response_is_dechunked(h2_sluice, py_origin):
    c = H2Client(h2_sluice)
    sid = c.open("GET", f"127.0.0.1:{py_origin.port}", "/chunked")
    r = c.response(sid)
    assert r.status == 200 and r.ended, vars(r)
    assert bytes(r.body) == b"".join(chunked_body())
    assert "transfer-encoding" not in r.headers


def test_head_has_no_body(h2_sluice, py_origin):
    c = H2Client(h2_sluice)
    sid = c.open("HEAD", f"127.0.0.1:{py_origin.port}", "/hello")
    r = c.response(sid)
    assert r.status == 200 and r.ended and bytes(r.body) == b"", vars(r)
    assert r.headers.get("content-length") == str(len(b"hello from the python origin\n"))
    # The next request on the same connection still works (the exchange ended cleanly).
    sid = c.open("GET", f"127.0.0.1:{py_origin.port}", "/hello")
    assert c.response(sid).status == 200


def test_post_with_content_length(h2_sluice, py_origin):
    body = os.urandom(300000)
    c = H2Client(h2_sluice)
    sid = c.open("POST", f"127.0.0.1:{py_origin.port}", "/echo", body=body,
                 extra=[("content-length", str(len(body)))])
    r = c.response(sid, timeout=20)
    assert r.status == 200 and bytes(r.body) == body, (r.status, len(r.body))
    assert r.headers["x-origin-chunked"] == "no"


def test_100_continue_is_relayed(h2_sluice, py_origin):
    c = H2Client(h2_sluice)
    body = b"after the interim response"
    sid = c.open("POST", f"127.0.0.1:{py_origin.port}", "/echo", end=False,
                 extra=[("content-length", str(len(body))), ("expect", "100-continue")])
    st = c.streams[sid]
    assert c.wait(lambda: st.interim == [100]), vars(st)
    c.send_body(sid, body)
    r = c.response(sid)
    assert r.status == 200 and bytes(r.body) == body, vars(r)
    assert stat(h2_sluice, "rs_1xx") == 1


def test_post_without_length_is_chunked_to_origin(h2_sluice, py_origin):
    c = H2Client(h2_sluice)
    sid = c.open("POST", f"127.0.0.1:{py_origin.port}", "/echo", end=False)
    # Let the filters finish and the head go out before the body starts.
    time.sleep(0.3)
    parts = [os.urandom(1000), os.urandom(70000), b"end"]
    for p in parts:
        c.send_body(sid, p, end=False)
        time.sleep(0.05)
    c.conn.end_stream(sid)
    c.send()
    r = c.response(sid, timeout=20)
    assert r.status == 200 and bytes(r.body) == b"".join(parts), (r.status, len(r.body))
    assert r.headers["x-origin-chunked"] == "yes"


def test_many_streams_share_the_pool(h2_any, py_origin):
    h2_sluice = h2_any
    c = H2Client(h2_sluice)
    authority = f"127.0.0.1:{py_origin.port}"
    sids = [c.open("GET", authority, "/chunked") for _ in range(10)]
    for sid in sids:
        r = c.response(sid, timeout=20)
        assert r.status == 200 and bytes(r.body) == b"".join(chunked_body()), sid
    before = py_origin.connections
    for _ in range(5):
        r = c.response(c.open("GET", authority, "/hello"))
        assert r.status == 200
    # Sequential requests after the burst reuse idle pooled connections.
    assert py_origin.connections == before
    assert h2_sluice.stat("upstream.pool_reuse") >= 5


def test_https_scheme_refused(h2_sluice, py_origin):
    before = len(py_origin.requests)
    c = H2Client(h2_sluice)
    sid = c.open("GET", f"127.0.0.1:{py_origin.port}", "/hello", scheme="https")
    r = c.response(sid)
    assert r.status == 400, vars(r)
    assert stat(h2_sluice, "rq_rejected") == 1
    assert len(py_origin.requests) == before


def test_closed_port_gets_502(h2_sluice):
    closed = closed_port_socket()
    try:
        c = H2Client(h2_sluice)
        sid = c.open("GET", f"127.0.0.1:{closed.getsockname()[1]}", "/")
        r = c.response(sid)
    finally:
        closed.close()
    assert r.status == 502, vars(r)


def test_request_body_limit(start_sluice, py_origin):
    s = start_sluice(patch=use_http2(max_request_body_bytes=1000))
    c = H2Client(s)
    sid = c.open("POST", f"127.0.0.1:{py_origin.port}", "/echo", body=b"x" * 5000,
                 extra=[("content-length", "5000")])
    assert c.response(sid).status == 413
    sid = c.open("POST", f"127.0.0.1:{py_origin.port}", "/echo", end=False)
    c.send_body(sid, b"y" * 5000)
    r = c.response(sid)
    assert r.status == 413 or r.reset is not None, vars(r)
    assert stat(s, "rq_body_too_large") == 2


# ---------------------------------------------------------------------------------------------
# auth, per stream


def test_auth_per_stream(h2_any, py_origin):
    h2_sluice = h2_any
    c = H2Client(h2_sluice)
    authority = f"127.0.0.1:{py_origin.port}"
    missing = c.open("GET", authority, "/hello", key=None)
    wrong = c.open("GET", authority, "/hello", key="not-the-key")
    right = c.open("GET", authority, "/hello")
    for sid in (missing, wrong):
        r = c.response(sid)
        assert r.status == 407, vars(r)
        assert r.headers.get("proxy-authenticate") == 'Basic realm="sluice"'
    assert c.response(right).status == 200
    assert h2_sluice.stat("auth.denied_missing") == 1
    assert stat(h2_sluice, "rs_4xx") == 2


def test_connect_without_key_gets_407(h2_sluice, echo_server):
    c = H2Client(h2_sluice)
    sid = c.open("CONNECT", echo_server.authority, end=False, key=None)
    r = c.response(sid)
    assert r.status == 407, vars(r)
    assert echo_server.conns == []


# ---------------------------------------------------------------------------------------------
# CONNECT tunnels


def test_concurrent_connect_tunnels(h2_any, echo_server):
    h2_sluice = h2_any
    c = H2Client(h2_sluice)
    sids = [c.open("CONNECT", echo_server.authority, end=False) for _ in range(8)]
    assert c.wait(lambda: all(c.streams[s].status == 200 for s in sids)), \
        [vars(c.streams[s]) for s in sids]
    assert stat(h2_sluice, "tunnels_active") == 8
    payloads = {s: os.urandom(20000 + s) for s in sids}
    for s in sids:
        c.send_body(s, payloads[s], end=False)
    assert c.wait(lambda: all(len(c.streams[s].body) == len(payloads[s]) for s in sids)), \
        [len(c.streams[s].body) for s in sids]
    for s in sids:
        assert bytes(c.streams[s].body) == payloads[s]
    # END_STREAM half-closes toward the echo server, whose FIN comes back as END_STREAM.
    for s in sids:
        c.conn.end_stream(s)
    c.send()
    assert c.wait(lambda: all(c.streams[s].ended for s in sids))
    assert h2_sluice.wait_stat(f"http2.{chain_of(h2_sluice)}.tunnels_active", lambda v: v == 0) == 0
    assert stat(h2_sluice, "rq_connect") == 8


def test_rst_stream_closes_tunnel_upstream(h2_any, echo_server):
    h2_sluice = h2_any
    c = H2Client(h2_sluice)
    sid = c.open("CONNECT", echo_server.authority, end=False)
    assert c.wait(lambda: c.streams[sid].status == 200)
    c.send_body(sid, b"ping", end=False)
    assert c.wait(lambda: bytes(c.streams[sid].body) == b"ping")
    c.conn.reset_stream(sid)
    c.send()
    assert h2_sluice.wait_stat(f"http2.{chain_of(h2_sluice)}.tunnels_active", lambda v: v == 0) == 0
    # The upstream socket was closed: the echo server sees EOF.
    conn = echo_server.conns[0]
    conn.settimeout(5)
    deadline = time.monotonic() + 5
    closed = False
    while time.monotonic() < deadline:
        try:
            if conn.recv(100) == b"":
                closed = True
                break
        except OSError:
            closed = True
            break
    assert closed


def test_slow_tunnel_reader_is_bounded(h2_any, py_origin):
    """A client that never opens its window on one tunnel: sluice stops reading that upstream
    (bounded buffering) while other streams on the connection keep flowing."""
    h2_sluice = h2_any
    source = SourceServer(total=200 << 20)
    try:
        c = H2Client(h2_sluice)
        slow = c.open("CONNECT", source.authority, end=False)
        c.no_ack.add(slow)
        assert c.wait(lambda: c.streams[slow].status == 200)
        rss_before = rss_kib(h2_sluice.proc.pid)
        time.sleep(1.5)
        sent_1 = source.sent
        time.sleep(1.0)
        sent_2 = source.sent
        # The source is blocked: sluice read a bounded amount and then stopped.
        assert sent_2 == sent_1, (sent_1, sent_2)
        assert sent_2 < 32 << 20, sent_2
        assert len(c.streams[slow].body) <= 65535
        assert stat(h2_sluice, "upstream_read_paused") >= 1
        # Other streams on the same connection still work.
        for _ in range(3):
            r = c.response(c.open("GET", f"127.0.0.1:{py_origin.port}", "/chunked"))
            assert r.status == 200 and bytes(r.body) == b"".join(chunked_body())
        growth = rss_kib(h2_sluice.proc.pid) - rss_before
        assert growth < 16 * 1024, f"sluice RSS grew {growth} KiB"
        # Opening the window lets the tunnel flow again.
        c.no_ack.discard(slow)
        c.conn.acknowledge_received_data(len(c.streams[slow].body), slow)
        c.send()
        assert c.wait(lambda: len(c.streams[slow].body) > 1 << 20, timeout=10)
    finally:
        source.stop()


def open_zero_window_connection(s, authority, path, streams):
    """An HTTP/2 connection whose client announced SETTINGS_INITIAL_WINDOW_SIZE 0 and opened
    `streams` GETs: sluice may send their HEADERS but no DATA."""
    sock = socket.create_connection(s.proxy_addr, timeout=10)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                header_encoding="utf-8"))
    conn.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    conn.initiate_connection()
    for _ in range(streams):
        conn.send_headers(conn.get_next_available_stream_id(), [
            (":method", "GET"), (":scheme", "http"), (":path", path), (":authority", authority),
            ("proxy-authorization", basic_auth(s.key))], end_stream=True)
    sock.sendall(conn.data_to_send())
    return sock


def test_clients_that_open_no_window_hold_a_bounded_amount(start_sluice, sluice_origin):
    """Four connections, each with a zero initial window and 100 GETs of 4 MiB: sluice stops
    reading the origins once a connection has connection_buffer_bytes queued (1 MiB), so the
    four together add well under 16 MiB instead of 100 x stream_buffer_bytes each."""
    s = start_sluice(patch=use_http2())
    authority = f"127.0.0.1:{sluice_origin.port}"
    warm = H2Client(s)
    assert warm.response(warm.open("GET", authority, "/bytes/1000")).status == 200
    warm.close()
    rss_before = rss_kib(s.proc.pid)
    socks = [open_zero_window_connection(s, authority, "/bytes/4194304", 100) for _ in range(4)]
    try:
        assert s.wait_stat("http2.http.streams_active", lambda v: v == 400) == 400
        # Every origin answered and was read until the connection's queue was full.
        s.wait_stat("http2.http.connection_read_paused", lambda v: v == 4, timeout=10)
        time.sleep(1.0)
        growth = rss_kib(s.proc.pid) - rss_before
        assert growth < 16 * 1024, f"sluice RSS grew {growth} KiB for 4 zero-window connections"
        assert stat(s, "connection_read_paused") == 4
    finally:
        for c in socks:
            c.close()
    assert s.wait_stat("http2.http.streams_active", lambda v: v == 0) == 0


def test_a_stream_the_client_stops_reading_is_reset_as_the_clients(start_sluice, sluice_origin):
    """A stream whose client opens no window: its queue fills, the origin is held back, and at
    response_timeout the stream is reset and counted as the client's (downstream_rs_timeout),
    not as an origin that did not answer."""
    s = start_sluice(router={"response_timeout": "1s"}, patch=use_http2())
    authority = f"127.0.0.1:{sluice_origin.port}"
    sock = open_zero_window_connection(s, authority, f"/bytes/{64 << 20}", 1)
    try:
        assert s.wait_stat("http2.http.downstream_rs_timeout", lambda v: v == 1,
                           timeout=10) == 1
        assert stat(s, "upstream_rs_timeout") == 0
        assert s.wait_stat("http2.http.streams_active", lambda v: v == 0) == 0
    finally:
        sock.close()


def test_streams_held_back_before_their_head_are_reset_not_answered(start_sluice, sluice_origin):
    """A connection that opens no window and fills its queue: streams whose response head had
    not come yet are held back too. At response_timeout every stream is the client's stall:
    reset, none answered with a status of sluice's own."""
    s = start_sluice(router={"response_timeout": "1s"}, patch=use_http2())
    authority = f"127.0.0.1:{sluice_origin.port}"
    sock = open_zero_window_connection(s, authority, "/bytes/4194304", 20)
    try:
        assert s.wait_stat("http2.http.downstream_rs_timeout", lambda v: v == 20,
                           timeout=10) == 20
        assert stat(s, "upstream_rs_timeout") == 0
        assert stat(s, "rs_4xx") == 0 and stat(s, "rs_5xx") == 0
        assert stat(s, "rs_2xx") < 20, "every head came: no stream was held back before it"
        assert s.wait_stat("http2.http.streams_active", lambda v: v == 0) == 0
    finally:
        sock.close()


def test_one_stream_reads_on_while_the_connection_queue_is_full(start_sluice, sluice_origin):
    """The connection's queue is full of streams the client does not read; a stream it does
    read is paused with the rest, and flows again as soon as the client takes its bytes."""
    s = start_sluice(patch=use_http2(connection_buffer_bytes=262144))
    authority = f"127.0.0.1:{sluice_origin.port}"
    c = H2Client(s)
    stalled = [c.open("GET", authority, "/bytes/1048576") for _ in range(4)]
    for sid in stalled:
        c.no_ack.add(sid)
    assert s.wait_stat("http2.http.connection_read_paused", lambda v: v >= 1) >= 1
    r = c.response(c.open("GET", authority, "/bytes/2097152"), timeout=20)
    assert r.status == 200 and len(r.body) == 2097152
    # Reading the stalled streams lets them finish too.
    for sid in stalled:
        c.no_ack.discard(sid)
        c.conn.acknowledge_received_data(len(c.streams[sid].body), sid)
    c.send()
    assert c.wait(lambda: all(c.streams[sid].ended for sid in stalled), timeout=20)
    assert all(len(c.streams[sid].body) == 1048576 for sid in stalled)


@pytest.mark.parametrize("transport", ["h2c", "tls"])
def test_a_connection_without_its_preface_is_closed_at_the_preface_deadline(
        start_sluice, certs, transport):
    if transport == "h2c":
        s = start_sluice(patch=use_http2(preface_timeout="1s"))
        connect = lambda: socket.create_connection(s.proxy_addr, timeout=10)  # noqa: E731
    else:
        import ssl

        from helpers import free_port
        tls_port = free_port()
        d = certs["dir"]
        s = start_sluice(extra_short=f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                                     f"  cert: {d / 'server-chain.pem'}\n"
                                     f"  key: {d / 'server.key'}\n",
                         patch=lambda full: [c.update(preface_timeout="1s") for c in
                                             find_typed_configs(full, ".Http2ProxyConfig")])
        s.h2_chain = "https"
        ctx = ssl.create_default_context(cafile=str(certs["ca"]))
        ctx.set_alpn_protocols(["h2"])

        def connect():
            t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=10),
                                server_hostname="localhost")
            assert t.selected_alpn_protocol() == "h2"
            return t
    silent = connect()
    half = connect()
    half.sendall(PREFACE[:12])
    whole = connect()
    whole.sendall(PREFACE + SettingsFrame(0).serialize())
    started = time.monotonic()
    for sock in (silent, half):
        read_frames(sock, lambda f: False, timeout=8)
        assert time.monotonic() - started < 6, "not closed at the preface deadline"
    assert s.wait_stat(f"http2.{chain_of(s)}.preface_timeout", lambda v: v == 2) == 2
    # A connection that sent its preface is on the idle timeout (60 s), not the preface's.
    whole.settimeout(1.0)
    frames = read_frames(whole, lambda f: False, timeout=1.5)
    assert goaway_of(frames) is None
    whole.sendall(PingFrame(0, opaque_data=b"12345678").serialize())
    assert any(isinstance(f, PingFrame) and "ACK" in f.flags
               for f in read_frames(whole, lambda f: isinstance(f, PingFrame), timeout=5))
    for sock in (silent, half, whole):
        sock.close()


def test_slow_upstream_holds_client_window(h2_sluice):
    """An upstream that reads nothing: sluice stops crediting the client's stream window, so the
    client cannot make sluice buffer without bound."""
    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    sink.listen(1)
    try:
        c = H2Client(h2_sluice)
        sid = c.open("CONNECT", f"127.0.0.1:{sink.getsockname()[1]}", end=False)
        assert c.wait(lambda: c.streams[sid].status == 200)
        sent = 0
        chunk = b"u" * 16384
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            window = min(c.conn.local_flow_control_window(sid), len(chunk))
            if window == 0:
                if not c.read_once(0.5) and c.conn.local_flow_control_window(sid) == 0:
                    break
                continue
            c.conn.send_data(sid, chunk[:window])
            c.send()
            sent += window
        assert c.conn.local_flow_control_window(sid) == 0
        # Kernel buffers plus sluice's upstream high watermark plus one window.
        assert sent < 48 << 20, sent
    finally:
        sink.close()


# ---------------------------------------------------------------------------------------------
# protections


def test_rapid_reset_gets_goaway(h2_any, py_origin):
    h2_sluice = h2_any
    s = raw_connection(h2_sluice)
    enc = hpack.Encoder()
    out = bytearray()
    for i in range(400):
        sid = 2 * i + 1
        hf = HeadersFrame(sid, headers_block(enc, f"127.0.0.1:{py_origin.port}", h2_sluice.key))
        hf.flags.add("END_HEADERS")
        hf.flags.add("END_STREAM")
        out += hf.serialize()
        out += RstStreamFrame(sid, error_code=8).serialize()
    s.sendall(bytes(out))
    frames = read_frames(s, lambda f: isinstance(f, GoAwayFrame))
    g = goaway_of(frames)
    assert g is not None and g.error_code == ENHANCE_YOUR_CALM, frames[-5:]
    assert stat(h2_sluice, "rapid_reset") == 1
    s.close()


def test_too_many_concurrent_streams_refused(start_sluice, echo_server):
    sl = start_sluice(patch=use_http2(max_concurrent_streams=5))
    s = raw_connection(sl)
    enc = hpack.Encoder()
    out = bytearray()
    for i in range(10):
        hf = HeadersFrame(2 * i + 1, enc.encode([
            (":method", "CONNECT"), (":authority", echo_server.authority),
            ("proxy-authorization", basic_auth(sl.key))]))
        hf.flags.add("END_HEADERS")
        out += hf.serialize()
    s.sendall(bytes(out))
    frames = read_frames(s, lambda f: False, timeout=2)
    refused = [f.stream_id for f in frames
               if isinstance(f, RstStreamFrame) and f.error_code == REFUSED_STREAM]
    ok = {f.stream_id for f in frames if isinstance(f, HeadersFrame)}
    assert len(refused) == 5 and ok == {1, 3, 5, 7, 9}, frames
    assert stat(sl, "streams_refused") == 5
    s.close()


def test_header_list_too_large(h2_sluice, py_origin):
    c = H2Client(h2_sluice)
    sid = c.open("GET", f"127.0.0.1:{py_origin.port}", "/hello",
                 extra=[("x-big", "b" * 70000)])
    r = c.response(sid)
    assert r.status == 431, vars(r)
    assert stat(h2_sluice, "rq_header_list_too_large") == 1
    # The connection survives.
    assert c.response(c.open("GET", f"127.0.0.1:{py_origin.port}", "/hello")).status == 200


def test_ping_flood_gets_goaway(start_sluice):
    sl = start_sluice(patch=use_http2(max_control_frames=100))
    s = raw_connection(sl)
    s.sendall(b"".join(PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize()
                       for i in range(300)))
    frames = read_frames(s, lambda f: isinstance(f, GoAwayFrame))
    g = goaway_of(frames)
    assert g is not None and g.error_code == ENHANCE_YOUR_CALM, frames[-3:]
    assert stat(sl, "control_flood") == 1
    s.close()


def test_ping_flood_default_limit(h2_sluice):
    s = raw_connection(h2_sluice)
    s.sendall(b"".join(PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize()
                       for i in range(5000)))
    frames = read_frames(s, lambda f: isinstance(f, GoAwayFrame))
    g = goaway_of(frames)
    assert g is not None and g.error_code == ENHANCE_YOUR_CALM
    assert stat(h2_sluice, "control_flood") + stat(h2_sluice, "codec_error") >= 1
    s.close()


def test_empty_data_flood_gets_goaway(h2_sluice, py_origin):
    s = raw_connection(h2_sluice)
    enc = hpack.Encoder()
    hf = HeadersFrame(1, headers_block(enc, f"127.0.0.1:{py_origin.port}", h2_sluice.key,
                                       method="POST", path="/echo"))
    hf.flags.add("END_HEADERS")
    s.sendall(hf.serialize() + b"".join(DataFrame(1, b"").serialize() for _ in range(300)))
    g = goaway_of(read_frames(s, lambda f: isinstance(f, GoAwayFrame)))
    assert g is not None and g.error_code == ENHANCE_YOUR_CALM
    assert stat(h2_sluice, "empty_data_flood") == 1
    s.close()


def test_continuation_flood_gets_goaway(h2_sluice, py_origin):
    s = raw_connection(h2_sluice)
    enc = hpack.Encoder()
    block = headers_block(enc, f"127.0.0.1:{py_origin.port}", h2_sluice.key)
    out = HeadersFrame(1, block).serialize()  # no END_HEADERS
    filler = enc.encode([("x-filler", "f" * 50)])
    out += b"".join(ContinuationFrame(1, filler).serialize() for _ in range(100))
    s.sendall(out)
    g = goaway_of(read_frames(s, lambda f: isinstance(f, GoAwayFrame)))
    assert g is not None and g.error_code == ENHANCE_YOUR_CALM
    assert stat(h2_sluice, "continuation_flood") == 1
    s.close()


def test_idle_connection_gets_goaway(start_sluice):
    sl = start_sluice(patch=use_http2(idle_timeout="1s"))
    s = raw_connection(sl)
    t0 = time.monotonic()
    frames = read_frames(s, lambda f: isinstance(f, GoAwayFrame), timeout=5)
    assert goaway_of(frames) is not None
    assert 0.8 < time.monotonic() - t0 < 4
    assert stat(sl, "downstream_idle_timeout") == 1
    s.close()


def test_drain_sends_goaway_and_finishes_streams(h2_sluice, py_origin):
    # Raw frames: h2 stops accepting frames once it has seen a GOAWAY, sluice sends more.
    py_origin.slow_started.clear()
    s = raw_connection(h2_sluice)
    enc = hpack.Encoder()
    hf = HeadersFrame(1, headers_block(enc, f"127.0.0.1:{py_origin.port}", h2_sluice.key,
                                       path="/slow?s=1"))
    hf.flags.add("END_HEADERS")
    hf.flags.add("END_STREAM")
    s.sendall(hf.serialize())
    assert py_origin.slow_started.wait(5)
    assert h2_sluice.admin("/drain", method="POST").status == 200
    frames = read_frames(s, lambda f: False, timeout=5)
    g = goaway_of(frames)
    assert g is not None and g.error_code == 0 and g.last_stream_id == 1, frames
    data = b"".join(f.data for f in frames if isinstance(f, DataFrame) and f.stream_id == 1)
    assert data == b"slow done\n", frames
    assert any(isinstance(f, DataFrame) and "END_STREAM" in f.flags for f in frames)
    s.close()
    assert h2_sluice.wait(10) == 0


# ---------------------------------------------------------------------------------------------
# nghttp (h2c prior knowledge is its default for http:// URLs)


@pytest.mark.skipif(shutil.which("nghttp") is None, reason="nghttp2-client not installed")
def test_nghttp_client(h2_sluice, py_origin):
    r = subprocess.run(
        ["nghttp", "-H", f":authority: 127.0.0.1:{py_origin.port}",
         "-H", f"proxy-authorization: {basic_auth(h2_sluice.key)}",
         f"http://127.0.0.1:{h2_sluice.port}/chunked"],
        capture_output=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"".join(chunked_body())


# ---------------------------------------------------------------------------------------------
# retry on a dead pooled connection


def test_idempotent_request_retried_on_dead_pooled_connection(h2_sluice):
    from test_retry import OneShotOrigin

    origin = OneShotOrigin()
    try:
        c = H2Client(h2_sluice)
        authority = f"127.0.0.1:{origin.port}"
        first = c.response(c.open("GET", authority, "/a"))
        assert first.status == 200 and bytes(first.body) == b"served"
        # The pooled connection fails on reuse: the GET is retried on a new one.
        second = c.response(c.open("GET", authority, "/b"))
        assert second.status == 200 and bytes(second.body) == b"served", vars(second)
        assert stat(h2_sluice, "rq_retry") == 1
        assert origin.connections == 2
        # A POST with a body is not retried.
        third = c.response(c.open("POST", authority, "/c", body=b"data"))
        assert third.status == 502, vars(third)
    finally:
        origin.stop()


# ---------------------------------------------------------------------------------------------
# RFC 8441: WebSocket over an extended CONNECT stream, bridged to an HTTP/1.1 Upgrade


@pytest.fixture
def ws_origin():
    from ws_origin import WsOrigin

    origin = WsOrigin().start()
    yield origin
    origin.stop()


def ws_stream(c, origin, path="/echo", key=True):
    extra = [(":protocol", "websocket"), ("sec-websocket-version", "13")]
    sid = c.conn.get_next_available_stream_id()
    c.streams[sid] = Stream()
    hdrs = [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"),
            (":path", path), (":authority", f"127.0.0.1:{origin.port}"),
            ("sec-websocket-version", "13"), ("sec-websocket-protocol", "chat")]
    if key:
        hdrs.append(("proxy-authorization", basic_auth(c.key)))
    c.conn.send_headers(sid, hdrs, end_stream=False)
    c.send()
    return sid


def test_websocket_over_extended_connect(h2_sluice, ws_origin):
    from ws_origin import OP_TEXT, encode_frame, parse_head

    c = H2Client(h2_sluice)
    # SETTINGS_ENABLE_CONNECT_PROTOCOL (0x8) is advertised.
    assert c.wait(lambda: c.conn.remote_settings.get(0x8) == 1), dict(c.conn.remote_settings)
    sid = ws_stream(c, ws_origin)
    st = c.streams[sid]
    assert c.wait(lambda: st.status is not None or st.reset is not None), vars(st)
    assert st.status == 200, vars(st)
    # A masked client frame goes out as DATA; the origin's echo comes back as DATA.
    c.send_body(sid, encode_frame(OP_TEXT, b"hello over h2", mask=True), end=False)
    want = encode_frame(OP_TEXT, b"hello over h2", mask=False)
    assert c.wait(lambda: bytes(st.body).startswith(want)), bytes(st.body)
    line, headers = parse_head(ws_origin.heads[0])
    assert line.startswith("GET /echo HTTP/1.1"), line
    assert headers["upgrade"] == ["websocket"]
    assert headers["host"] == [f"127.0.0.1:{ws_origin.port}"]
    assert len(headers["sec-websocket-key"]) == 1
    assert "proxy-authorization" not in headers
    assert stat(h2_sluice, "rq_websocket") == 1
    assert stat(h2_sluice, "websocket_switched") == 1
    assert stat(h2_sluice, "tunnels_active") == 1
    c.conn.reset_stream(sid)
    c.send()
    assert h2_sluice.wait_stat(f"http2.{chain_of(h2_sluice)}.tunnels_active", lambda v: v == 0) == 0


def test_websocket_refused_by_origin_is_relayed(h2_sluice, ws_origin):
    c = H2Client(h2_sluice)
    sid = ws_stream(c, ws_origin, path="/refuse")
    r = c.response(sid)
    assert r.status == 403, vars(r)
    assert stat(h2_sluice, "websocket_refused") == 1


def test_websocket_bad_101_gets_502(h2_sluice, ws_origin):
    c = H2Client(h2_sluice)
    sid = ws_stream(c, ws_origin, path="/bad101")
    r = c.response(sid)
    assert r.status == 502, vars(r)
    assert stat(h2_sluice, "websocket_rejected") == 1


def test_websocket_needs_the_key(h2_sluice, ws_origin):
    c = H2Client(h2_sluice)
    sid = ws_stream(c, ws_origin, key=False)
    r = c.response(sid)
    assert r.status == 407, vars(r)
    assert ws_origin.heads == []


def test_websocket_disabled(start_sluice, ws_origin):
    sl = start_sluice(patch=use_http2(disable_websocket=True))
    c = H2Client(sl)
    assert c.wait(lambda: 0x4 in c.conn.remote_settings)
    assert c.conn.remote_settings.get(0x8, 0) == 0
    sid = ws_stream(c, ws_origin)
    r = c.response(sid)
    assert r.status == 501 or r.reset is not None, vars(r)
    assert ws_origin.heads == []


def test_websocket_bytes_before_101_are_held(h2_sluice, ws_origin):
    from ws_origin import OP_TEXT, encode_frame

    c = H2Client(h2_sluice)
    sid = ws_stream(c, ws_origin, path="/slow")
    # Sent at once, before the origin's (late) 101: sluice must hold it back.
    c.send_body(sid, encode_frame(OP_TEXT, b"early", mask=True), end=False)
    st = c.streams[sid]
    want = encode_frame(OP_TEXT, b"early", mask=False)
    assert c.wait(lambda: bytes(st.body).startswith(want), timeout=5), vars(st)
    assert st.status == 200
    assert ws_origin.early_bytes == [] or all(not b for b in ws_origin.early_bytes), \
        ws_origin.early_bytes


def test_unfinished_header_block_times_out(start_sluice, py_origin):
    sl = start_sluice(patch=use_http2(request_body_timeout="1s"))
    s = raw_connection(sl)
    enc = hpack.Encoder()
    s.sendall(HeadersFrame(1, headers_block(enc, f"127.0.0.1:{py_origin.port}", sl.key))
              .serialize())  # no END_HEADERS, no CONTINUATION ever
    t0 = time.monotonic()
    g = goaway_of(read_frames(s, lambda f: isinstance(f, GoAwayFrame), timeout=5))
    assert g is not None and g.error_code == 0x1, g
    assert 0.8 < time.monotonic() - t0 < 4
    assert stat(sl, "rq_head_timeout") == 1
    s.close()


# ---------------------------------------------------------------------------------------------
# h2 over TLS: the TLS transport socket negotiates h2 by ALPN, a chain matching it runs this codec


def test_h2_over_tls_alpn(start_sluice, certs, py_origin, echo_server):
    import copy
    import ssl

    from helpers import free_port

    tls_port = free_port()

    def add_h2_chain(full):
        for listener in full["listeners"]:
            chains = listener["filter_chains"]
            tls_chains = [c for c in chains if c.get("transport_socket")]
            if not tls_chains:
                continue
            base = tls_chains[0]
            rf = copy.deepcopy(base["filters"][-1]["typed_config"]["request_filters"])
            ts = copy.deepcopy(base["transport_socket"])
            ts["typed_config"]["alpn"] = ["h2", "http/1.1"]
            chains.insert(0, {
                "name": "h2tls",
                "match": {"transport_protocol": "tls", "application_protocols": ["h2"]},
                "transport_socket": ts,
                "filters": [{"name": "sluice.http2",
                             "typed_config": {"@type": H2_TYPE, "request_filters": rf}}],
            })
            return
        raise AssertionError("no TLS listener in the expanded config")

    d = certs["dir"]
    s = start_sluice(extra_short=(f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                                  f"  cert: {d / 'server-chain.pem'}\n  key: {d / 'server.key'}\n"),
                     patch=add_h2_chain)
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    raw = socket.create_connection(("127.0.0.1", tls_port), timeout=10)
    tls = ctx.wrap_socket(raw, server_hostname="localhost")
    assert tls.selected_alpn_protocol() == "h2"
    c = H2Client(s, sock=tls)
    r = c.response(c.open("GET", f"127.0.0.1:{py_origin.port}", "/chunked"))
    assert r.status == 200 and bytes(r.body) == b"".join(chunked_body()), vars(r)
    sid = c.open("CONNECT", echo_server.authority, end=False)
    assert c.wait(lambda: c.streams[sid].status == 200)
    c.send_body(sid, b"through tls and h2", end=True)
    assert c.wait(lambda: c.streams[sid].ended)
    assert bytes(c.streams[sid].body) == b"through tls and h2"
    assert s.stat("http2.h2tls.rq_forward") == 1
    assert s.stat("http2.h2tls.rq_connect") == 1
    c.close()


# ---------------------------------------------------------------------------------------------
# timeouts and refusals from the router, the destination guard and the ban table


def test_tunnel_idle_timeout_per_stream(start_sluice, echo_server):
    sl = start_sluice(router={"tunnel_idle_timeout": "1s"}, patch=use_http2())
    c = H2Client(sl)
    idle = c.open("CONNECT", echo_server.authority, end=False)
    busy = c.open("CONNECT", echo_server.authority, end=False)
    assert c.wait(lambda: c.streams[idle].status == 200 and c.streams[busy].status == 200)
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        c.send_body(busy, b"tick", end=False)
        c.read_once(0.2)
    assert c.streams[idle].reset == 0x8, vars(c.streams[idle])  # CANCEL
    assert c.streams[busy].reset is None and not c.closed
    assert stat(sl, "tunnel_idle_timeout") == 1


def test_origin_response_timeout_gets_504(start_sluice, py_origin):
    sl = start_sluice(router={"response_timeout": "1s"}, patch=use_http2())
    c = H2Client(sl)
    r = c.response(c.open("GET", f"127.0.0.1:{py_origin.port}", "/slow?s=3"), timeout=5)
    assert r.status == 504, vars(r)
    assert stat(sl, "upstream_rs_timeout") == 1


def test_dest_guard_port_refusal_gets_403(h2_sluice):
    c = H2Client(h2_sluice)
    r = c.response(c.open("CONNECT", "127.0.0.1:25", end=False))
    assert r.status == 403, vars(r)


def test_key_guessing_bans_and_sends_goaway(h2_sluice, py_origin):
    c = H2Client(h2_sluice)
    authority = f"127.0.0.1:{py_origin.port}"
    for i in range(5):
        assert c.response(c.open("GET", authority, "/hello", key=f"guess-{i}")).status == 407
    # Banned now: even the right key is refused, and the connection is drained.
    r = c.response(c.open("GET", authority, "/hello"))
    assert r.status == 403, vars(r)
    assert c.wait(lambda: c.goaway is not None or c.closed, timeout=5)
    assert h2_sluice.stat("auth.denied_banned") >= 1


def test_resets_sluice_sends_spend_the_rapid_reset_budget(start_sluice, py_origin):
    """MadeYouReset (CVE-2025-8671): streams that the server side resets because the client
    made them malformed (content-length 10, then 5 bytes and END_STREAM) count like client
    resets; past the budget the connection gets GOAWAY(ENHANCE_YOUR_CALM)."""
    sl = start_sluice(patch=use_http2(max_rapid_resets=20))
    s = raw_connection(sl)
    enc = hpack.Encoder()
    out = bytearray()
    for i in range(200):
        sid = 2 * i + 1
        hf = HeadersFrame(sid, enc.encode([
            (":method", "POST"), (":scheme", "http"), (":path", "/echo"),
            (":authority", f"127.0.0.1:{py_origin.port}"), ("content-length", "10"),
            ("proxy-authorization", basic_auth(sl.key))]))
        hf.flags.add("END_HEADERS")
        out += hf.serialize()
        df = DataFrame(sid, b"12345")
        df.flags.add("END_STREAM")
        out += df.serialize()
    s.sendall(bytes(out))
    frames = read_frames(s, lambda f: isinstance(f, GoAwayFrame))
    g = goaway_of(frames)
    assert g is not None and g.error_code == ENHANCE_YOUR_CALM, frames[-5:]
    assert stat(sl, "rapid_reset") == 1
    # The streams past the budget never reached an origin.
    assert len(py_origin.requests) < 200
    s.close()


@pytest.mark.parametrize("method", ["CONNECT", "GET"])
def test_a_stream_reset_while_its_connect_is_pending_cancels_the_connect(h2_sluice, method):
    """The destination never answers the SYN (connect_timeout is 10 s): a client that resets
    the stream first takes the pending connect with it, and the connection goes on."""
    from helpers import SilentPort
    silent = SilentPort()
    try:
        c = H2Client(h2_sluice)
        authority = f"127.0.0.1:{silent.port}"
        sid = c.open(method, authority, "/", end=method != "CONNECT")
        deadline = time.monotonic() + 5
        while silent.pending_connects() != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert silent.pending_connects() == 1, "sluice did not dial"
        c.conn.reset_stream(sid)
        c.send()
        deadline = time.monotonic() + 3
        while silent.pending_connects() != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert silent.pending_connects() == 0, "the connect outlived its stream"
        assert h2_sluice.wait_stat(f"http2.{chain_of(h2_sluice)}.streams_active",
                                   lambda v: v == 0) == 0
    finally:
        silent.close()
