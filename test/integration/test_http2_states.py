"""RFC 9113 stream states (5.1, 6.9, 8.1.1) against the real binary, with raw frames: each case
holds whether sluice answered the stream itself (a local 407) or is relaying an origin's
answer (a slow origin, so the stream is still in flight when the offending frame arrives)."""

import time

import hpack
import pytest
from hyperframe.frame import (DataFrame, GoAwayFrame, HeadersFrame, RstStreamFrame,
                              WindowUpdateFrame)

from helpers import basic_auth
from test_http2 import goaway_of, raw_connection, read_frames, use_http2

PROTOCOL_ERROR = 0x1
STREAM_CLOSED = 0x5


@pytest.fixture
def h2(start_sluice):
    return start_sluice(patch=use_http2())


def request_block(enc, s, py_origin, mode, method="GET", extra=()):
    """A request header block: `local` has no key (407 at once), `relayed` asks the origin's
    /slow (answered after 2 s)."""
    fields = [(":method", method), (":scheme", "http"),
              (":path", "/slow?s=2" if mode == "relayed" else "/hello"),
              (":authority", f"127.0.0.1:{py_origin.port}")]
    if mode == "relayed":
        fields.append(("proxy-authorization", basic_auth(s.key)))
    return enc.encode(fields + list(extra))


def headers(sid, block, end_stream):
    f = HeadersFrame(sid, block)
    f.flags.add("END_HEADERS")
    if end_stream:
        f.flags.add("END_STREAM")
    return f.serialize()


def data(sid, payload, end_stream=False):
    f = DataFrame(sid, payload)
    if end_stream:
        f.flags.add("END_STREAM")
    return f.serialize()


def rst_of(frames, sid):
    for f in frames:
        if isinstance(f, RstStreamFrame) and f.stream_id == sid:
            return f
    return None


def still_serving(sock, s, py_origin, sid):
    """The connection carries another request after the stream error."""
    enc = hpack.Encoder()
    block = enc.encode([(":method", "GET"), (":scheme", "http"), (":path", "/hello"),
                        (":authority", f"127.0.0.1:{py_origin.port}"),
                        ("proxy-authorization", basic_auth(s.key))])
    sock.sendall(headers(sid, block, True))
    frames = read_frames(sock, lambda f: f.stream_id == sid and "END_STREAM" in f.flags)
    assert goaway_of(frames) is None, frames
    assert any(isinstance(f, DataFrame) and f.stream_id == sid for f in frames), frames


MODES = ["local", "relayed"]


@pytest.mark.parametrize("mode", MODES)
def test_data_on_a_half_closed_stream_is_stream_closed(h2, py_origin, mode):
    sock = raw_connection(h2)
    enc = hpack.Encoder()
    sock.sendall(headers(1, request_block(enc, h2, py_origin, mode), True) + data(1, b"extra"))
    frames = read_frames(sock, lambda f: isinstance(f, (RstStreamFrame, GoAwayFrame)), timeout=5)
    rst = rst_of(frames, 1)
    gone = goaway_of(frames)
    assert (rst is not None and rst.error_code == STREAM_CLOSED) or \
        (gone is not None and gone.error_code == STREAM_CLOSED), frames
    if gone is None:
        still_serving(sock, h2, py_origin, 3)
    sock.close()


@pytest.mark.parametrize("mode", MODES)
def test_frames_after_a_reset_are_stream_closed(h2, py_origin, mode):
    sock = raw_connection(h2)
    enc = hpack.Encoder()
    sock.sendall(headers(1, request_block(enc, h2, py_origin, mode, method="POST"), False) +
                 RstStreamFrame(1, 0x8).serialize())
    time.sleep(0.2)
    sock.sendall(data(1, b"late"))
    frames = read_frames(sock, lambda f: isinstance(f, (RstStreamFrame, GoAwayFrame)), timeout=3)
    rst = rst_of(frames, 1)
    gone = goaway_of(frames)
    assert (rst is not None and rst.error_code == STREAM_CLOSED) or \
        (gone is not None and gone.error_code == STREAM_CLOSED), frames
    sock.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_lower_stream_id_is_a_connection_error(h2, py_origin, mode):
    sock = raw_connection(h2)
    enc = hpack.Encoder()
    sock.sendall(headers(5, request_block(enc, h2, py_origin, mode), True))
    time.sleep(0.1)
    sock.sendall(headers(3, request_block(enc, h2, py_origin, mode), True))
    frames = read_frames(sock, lambda f: isinstance(f, GoAwayFrame), timeout=5)
    gone = goaway_of(frames)
    assert gone is not None and gone.error_code == PROTOCOL_ERROR, frames
    sock.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_zero_window_update_on_a_stream_is_a_stream_error(h2, py_origin, mode):
    sock = raw_connection(h2)
    enc = hpack.Encoder()
    sock.sendall(headers(1, request_block(enc, h2, py_origin, mode, method="POST"), False) +
                 WindowUpdateFrame(1, 0).serialize())
    frames = read_frames(sock, lambda f: isinstance(f, (RstStreamFrame, GoAwayFrame)), timeout=5)
    rst = rst_of(frames, 1)
    assert rst is not None and rst.error_code == PROTOCOL_ERROR, frames
    assert goaway_of(frames) is None, frames
    still_serving(sock, h2, py_origin, 3)
    sock.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("body", [b"1234", b"123456789012"])
def test_a_content_length_that_the_data_does_not_match_is_a_stream_error(h2, py_origin, mode,
                                                                         body):
    sock = raw_connection(h2)
    enc = hpack.Encoder()
    block = request_block(enc, h2, py_origin, mode, method="POST",
                          extra=[("content-length", "10")])
    sock.sendall(headers(1, block, False) + data(1, body, end_stream=True))
    frames = read_frames(sock, lambda f: isinstance(f, (RstStreamFrame, GoAwayFrame)), timeout=5)
    rst = rst_of(frames, 1)
    assert rst is not None and rst.error_code == PROTOCOL_ERROR, frames
    assert goaway_of(frames) is None, frames
    still_serving(sock, h2, py_origin, 3)
    sock.close()


def test_data_after_a_completed_stream_is_a_connection_error(h2, py_origin):
    """Both sides ended the stream (a 407 answered a request without a body): a later DATA on
    it is a connection error STREAM_CLOSED (RFC 9113 5.1, closed)."""
    sock = raw_connection(h2)
    enc = hpack.Encoder()
    sock.sendall(headers(1, request_block(enc, h2, py_origin, "local"), True))
    frames = read_frames(sock, lambda f: f.stream_id == 1 and "END_STREAM" in f.flags)
    assert any(isinstance(f, DataFrame) and f.stream_id == 1 for f in frames), frames
    time.sleep(0.1)
    sock.sendall(data(1, b"late"))
    frames = read_frames(sock, lambda f: isinstance(f, GoAwayFrame), timeout=5)
    gone = goaway_of(frames)
    assert gone is not None and gone.error_code == STREAM_CLOSED, frames
    sock.close()


def test_frames_in_flight_after_sluices_own_reset_are_ignored(h2, py_origin):
    """sluice resets a stream the client has not ended (a 407 to a POST whose body is still
    coming): the body's DATA frames already sent are ignored, not punished."""
    sock = raw_connection(h2)
    enc = hpack.Encoder()
    sock.sendall(headers(1, request_block(enc, h2, py_origin, "local", method="POST"), False))
    frames = read_frames(sock, lambda f: isinstance(f, RstStreamFrame), timeout=5)
    assert rst_of(frames, 1) is not None, frames
    sock.sendall(data(1, b"in flight") + data(1, b"end", end_stream=True))
    still_serving(sock, h2, py_origin, 3)
    sock.close()
