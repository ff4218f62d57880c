"""Request smuggling and framing (RFC 9112), client side and origin side, against the real binary.

Every case is sent over a raw socket and checked twice: the exact status sluice answers (and
that it closes the connection where it must), and what the origin received, byte for byte. The
origin (recording_origin.py) parses HTTP/1.1 itself, strictly, so a request sluice should have
refused shows up as received bytes, and a request body sluice framed differently from a strict
parser shows up as a wrong body or a second, "smuggled" request.

Tinyproxy's 2026 smuggling bugs (docs: ../shared/docs/references.md) are here by name:
tinyproxy604 (case-sensitive `chunked`), tinyproxy609 (CL+TE desync, duplicate CL),
tinyproxy616 (`chunked,` / `chunked\\t` / `chunked, gzip` bypassing an exact match).
"""

import socket
import time

import pytest

from helpers import RawConnection, basic_auth, read_all
from recording_origin import RecordingOrigin, Reply, default_response

REJECTED = "http1.http.rq_rejected"
BAD_UPSTREAM = "http1.http.upstream_rs_bad"
CONNECTS = "upstream.cx_connect_total"

# A request that must never reach the origin as a request of its own. Origin-form, so sluice
# itself answers it with 400 when it reads it as a separate request.
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n"
# The same inside a body, where its length must not change when the template is filled in.
SMUGGLED_LITERAL = b"GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture
def origin():
    o = RecordingOrigin().start()
    yield o
    o.stop()


def render(template, s, origin):
    """Fills {url} (http://127.0.0.1:port, no path), {host} (127.0.0.1:port) and {auth} (a
    Proxy-Authorization line) into a bytes template; everything else is sent as written."""
    return (template.replace(b"{url}", origin.url("").encode())
            .replace(b"{host}", origin.authority.encode())
            .replace(b"{auth}", f"Proxy-Authorization: {basic_auth(s.key)}\r\n".encode()))


def read_all_responses(conn, count, method="POST"):
    out = []
    for _ in range(count):
        out.append(conn.read_response(method))
    return out


def assert_closed(conn, what):
    assert conn.is_closed_by_peer(wait=3.0), f"{what}: sluice left the connection open"


def assert_origin_got_nothing(origin, what):
    time.sleep(0.2)  # anything sluice wrongly forwarded has long arrived by now
    assert origin.raw == b"" and origin.requests == [], \
        f"{what}: the origin received bytes:\n{origin.describe()}"


def follow_up(s, origin, expect_requests_before):
    """A normal request on a new client connection still works, and reaches the origin as
    exactly one more request (nothing queued ahead of it on a reused upstream connection)."""
    req = render(b"GET {url}/after HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n",
                 s, origin)
    with RawConnection(s.proxy_addr) as c:
        c.send(req)
        resp = c.read_response("GET")
    assert resp.status == 200, f"follow-up request after the case: {resp}"
    got = origin.wait_requests(expect_requests_before + 1)
    assert len(got) == expect_requests_before + 1 and got[-1].target == "/after", \
        f"follow-up request did not arrive alone:\n{origin.describe()}"
    assert origin.errors == [], f"origin could not parse what sluice sent:\n{origin.describe()}"


# ---------------------------------------------------------------------------------------------
# Requests sluice must refuse: exact status, connection closed, nothing at the origin.

H = b"POST {url}/x HTTP/1.1\r\nHost: {host}\r\n{auth}"   # a valid start, then the case's lines

REFUSED = [
    # -- Content-Length with Transfer-Encoding, duplicate / malformed Content-Length
    ("cl_then_te", H + b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG", 400),
    ("te_then_cl", H + b"Transfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n0\r\n\r\nG", 400),
    ("tinyproxy609_cl_te_desync",
     H + b"Content-Length: 35\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED, 400),
    ("tinyproxy609_duplicate_cl_different",
     H + b"Content-Length: 5\r\nContent-Length: 40\r\n\r\nhello" + SMUGGLED, 400),
    ("cl_list_different", H + b"Content-Length: 5, 6\r\n\r\nhello", 400),
    ("cl_list_empty_element", H + b"Content-Length: 5,\r\n\r\nhello", 400),
    ("cl_plus_sign", H + b"Content-Length: +5\r\n\r\nhello", 400),
    ("cl_minus_sign", H + b"Content-Length: -5\r\n\r\nhello", 400),
    ("cl_inner_space", H + b"Content-Length: 5 0\r\n\r\nhello", 400),
    ("cl_hex", H + b"Content-Length: 0x5\r\n\r\nhello", 400),
    ("cl_empty", H + b"Content-Length: \r\n\r\nhello", 400),
    ("cl_overflow_20_digits", H + b"Content-Length: 18446744073709551621\r\n\r\nhello", 400),
    ("cl_space_before_colon", H + b"Content-Length : 5\r\n\r\nhello", 400),
    ("te_cl_with_cl_zero", H + b"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 400),
    # -- Transfer-Encoding whose final coding is not exactly chunked
    ("tinyproxy616_chunked_comma", H + b"Transfer-Encoding: chunked,\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 400),
    ("tinyproxy616_chunked_gzip", H + b"Transfer-Encoding: chunked, gzip\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 501),
    ("te_leading_comma", H + b"Transfer-Encoding: ,chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400),
    ("te_xchunked", H + b"Transfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501),
    ("te_chunked_param_no_value", H + b"Transfer-Encoding: chunked;foo\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 400),
    ("te_chunked_with_param", H + b"Transfer-Encoding: chunked;foo=bar\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 501),
    ("te_identity", H + b"Transfer-Encoding: identity\r\n\r\nhello", 501),
    ("te_quoted", H + b"Transfer-Encoding: \"chunked\"\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400),
    ("te_vertical_tab", H + b"Transfer-Encoding: \x0bchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400),
    ("te_chunked_twice_one_field", H + b"Transfer-Encoding: chunked, chunked\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 400),
    ("te_twice_chunked_chunked", H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
     b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400),
    ("te_twice_chunked_then_gzip", H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip"
     b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501),
    ("te_in_http10",
     b"POST {url}/x HTTP/1.0\r\nHost: {host}\r\n{auth}Transfer-Encoding: chunked\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 400),
    ("te_space_before_colon", H + b"Transfer-Encoding : chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
     400),
    # -- invalid chunked bodies (the head is valid: refused while reading the body)
    ("chunk_size_0x_prefix", H + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
     400),
    ("chunk_size_negative", H + b"Transfer-Encoding: chunked\r\n\r\n-1\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk_size_inner_space", H + b"Transfer-Encoding: chunked\r\n\r\n1 0\r\n" + b"a" * 16 +
     b"\r\n0\r\n\r\n", 400),
    ("chunk_size_17_hex_digits", H + b"Transfer-Encoding: chunked\r\n\r\n"
     b"00000000000000005\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk_size_overflow", H + b"Transfer-Encoding: chunked\r\n\r\n"
     b"10000000000000005\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk_size_empty", H + b"Transfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk_size_trailing_space", H + b"Transfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n"
     b"0\r\n\r\n", 400),
    ("chunk_ext_empty", H + b"Transfer-Encoding: chunked\r\n\r\n5;\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk_ext_no_value", H + b"Transfer-Encoding: chunked\r\n\r\n5;a=\r\nhello\r\n0\r\n\r\n",
     400),
    ("chunk_ext_unterminated_quote", H + b"Transfer-Encoding: chunked\r\n\r\n"
     b"5;a=\"x\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk_ext_ctl", H + b"Transfer-Encoding: chunked\r\n\r\n5;a\x01\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk_data_longer_than_size", H + b"Transfer-Encoding: chunked\r\n\r\n"
     b"5\r\nhelloX\r\n0\r\n\r\n", 400),
    ("chunk_data_lf_only", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n", 400),
    ("chunk_size_line_bare_lf", H + b"Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
     400),
    ("chunk_size_line_bare_cr", H + b"Transfer-Encoding: chunked\r\n\r\n5\rhello\r\n0\r\n\r\n",
     400),
    ("chunk_last_bare_lf", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\n\n", 400),
    ("chunk_size_line_oversized", H + b"Transfer-Encoding: chunked\r\n\r\n5" +
     b";a=b" * 2000 + b"\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk_size_leading_zeros_oversized", H + b"Transfer-Encoding: chunked\r\n\r\n" +
     b"0" * 5000 + b"5\r\nhello\r\n0\r\n\r\n", 400),
    ("trailer_hides_request_line", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
     + SMUGGLED, 400),
    ("trailer_obs_fold", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
     b"X-T: a\r\n b\r\n\r\n", 400),
    ("trailer_space_before_colon", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
     b"Content-Length : 5\r\n\r\n", 400),
    # -- line endings and field syntax in the head
    ("head_request_line_bare_lf", b"POST {url}/x HTTP/1.1\nHost: {host}\r\n{auth}"
     b"Content-Length: 5\r\n\r\nhello", 400),
    ("head_field_bare_lf", H + b"Content-Length: 5\n\r\nhello", 400),
    ("head_all_bare_lf", b"POST {url}/x HTTP/1.1\nHost: {host}\n{auth}Content-Length: 5\n\n"
     b"hello", 400),
    ("head_bare_cr_in_value", H + b"X-A: a\rContent-Length: 5\r\n\r\nhello", 400),
    ("head_bare_cr_line_end", H + b"Content-Length: 5\r\r\n\r\nhello", 400),
    ("head_obs_fold", H + b"X-A: a\r\n b\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("head_obs_fold_tab_te", H + b"X-A: a\r\n\tTransfer-Encoding: chunked\r\nContent-Length: 5"
     b"\r\n\r\nhello", 400),
    ("head_space_before_colon", H + b"X-A : a\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("head_tab_before_colon", H + b"Transfer-Encoding\t: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
     400),
    ("head_nul_in_value", H + b"X-A: a\x00b\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("head_ctl_in_name", H + b"X-\x01A: a\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("head_del_in_value", H + b"X-A: a\x7fb\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("head_empty_name", H + b": a\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("head_no_colon", H + b"X-A a\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("head_leading_space_first_field", b"POST {url}/x HTTP/1.1\r\n Host: {host}\r\n{auth}"
     b"Content-Length: 5\r\n\r\nhello", 400),
    # -- Host
    ("host_twice_same", H + b"Host: {host}\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("host_twice_different", H + b"Host: 127.0.0.2\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("host_disagrees_with_target", b"POST {url}/x HTTP/1.1\r\nHost: 127.0.0.2\r\n{auth}"
     b"Content-Length: 5\r\n\r\nhello", 400),
    ("host_port_disagrees_with_target", b"POST {url}/x HTTP/1.1\r\nHost: 127.0.0.1:1\r\n{auth}"
     b"Content-Length: 5\r\n\r\nhello", 400),
    ("host_missing_http11", b"POST {url}/x HTTP/1.1\r\n{auth}Content-Length: 5\r\n\r\nhello",
     400),
    ("host_with_userinfo", b"POST {url}/x HTTP/1.1\r\nHost: u@{host}\r\n{auth}"
     b"Content-Length: 5\r\n\r\nhello", 400),
    # -- request line
    ("method_invalid_token", b"PO(ST {url}/x HTTP/1.1\r\nHost: {host}\r\n{auth}"
     b"Content-Length: 5\r\n\r\nhello", 400),
    ("method_with_nul", b"POST\x00 {url}/x HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n", 400),
    ("version_http20", b"GET {url}/x HTTP/2.0\r\nHost: {host}\r\n{auth}\r\n", 505),
    ("version_http12", b"GET {url}/x HTTP/1.2\r\nHost: {host}\r\n{auth}\r\n", 505),
    ("version_http09", b"GET {url}/x HTTP/0.9\r\nHost: {host}\r\n{auth}\r\n", 505),
    ("version_missing_http09_style", b"GET {url}/x\r\nHost: {host}\r\n{auth}\r\n", 400),
    ("version_lowercase", b"GET {url}/x http/1.1\r\nHost: {host}\r\n{auth}\r\n", 400),
    ("version_trailing_space", b"GET {url}/x HTTP/1.1 \r\nHost: {host}\r\n{auth}\r\n", 400),
    ("request_line_two_spaces", b"GET  {url}/x HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n", 400),
    ("request_line_two_spaces_before_version", b"GET {url}/x  HTTP/1.1\r\nHost: {host}\r\n"
     b"{auth}\r\n", 400),
    ("request_line_tab_separator", b"GET\t{url}/x HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n", 400),
    ("target_fragment", b"GET {url}/x#frag HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n", 400),
    ("absolute_form_with_userinfo", b"GET http://user:pass@{host}/x HTTP/1.1\r\nHost: {host}"
     b"\r\n{auth}\r\n", 400),
    ("connect_without_port", b"CONNECT 127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\n", 400),
    ("connect_with_body", b"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n{auth}"
     b"Content-Length: 5\r\n\r\nhello", 400),
    ("origin_form_to_proxy", b"POST /x HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Length: 5\r\n"
     b"\r\nhello", 400),
    ("asterisk_form_to_proxy", b"OPTIONS * HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n", 400),
]


@pytest.mark.parametrize("template,status", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_request(start_sluice, origin, template, status):
    s = start_sluice()
    request = render(template, s, origin)
    with RawConnection(s.proxy_addr) as c:
        c.send(request)
        resp = c.read_response("POST")
        assert resp.status == status, f"expected {status}, got: {resp}"
        assert resp.header("Connection") == "close", f"no Connection: close on {resp}"
        assert_closed(c, "refused request")
    assert_origin_got_nothing(origin, "refused request")
    assert s.stat(REJECTED) == 1, "the refusal was not counted in rq_rejected"
    follow_up(s, origin, 0)


# ---------------------------------------------------------------------------------------------
# Requests sluice must accept: the origin gets exactly one request with exactly the body. Bytes
# after the body (a request in origin-form) are read by sluice as the next request on the
# client connection, answered 400 by sluice itself, and never reach the origin.

CHUNKED_HELLO = b"5\r\nhello\r\n0\r\n\r\n"

ACCEPTED = [
    # (id, template, statuses, body, framing at the origin)
    ("cl_plain", H + b"Content-Length: 5\r\n\r\nhello", [200], b"hello", "length"),
    ("tinyproxy609_duplicate_cl_equal", H + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\n"
     b"hello" + SMUGGLED, [200, 400], b"hello", "length"),
    ("cl_list_equal", H + b"Content-Length: 5, 5\r\n\r\nhello" + SMUGGLED, [200, 400], b"hello",
     "length"),
    ("cl_leading_zeros", H + b"Content-Length: 005\r\n\r\nhello", [200], b"hello", "length"),
    ("cl_ows_around_value", H + b"Content-Length:  5 \t\r\n\r\nhello", [200], b"hello", "length"),
    ("te_chunked", H + b"Transfer-Encoding: chunked\r\n\r\n" + CHUNKED_HELLO + SMUGGLED,
     [200, 400], b"hello", "chunked"),
    ("tinyproxy604_te_uppercase", H + b"Transfer-Encoding: CHUNKED\r\n\r\n" + CHUNKED_HELLO +
     SMUGGLED, [200, 400], b"hello", "chunked"),
    ("tinyproxy604_te_capitalised", H + b"Transfer-Encoding: Chunked\r\n\r\n" + CHUNKED_HELLO +
     SMUGGLED, [200, 400], b"hello", "chunked"),
    # The field value is OWS-trimmed (RFC 9110 5.5), so this IS chunked, and sluice frames the
    # body as chunked, like every RFC parser downstream: no disagreement to exploit.
    ("tinyproxy616_chunked_tab", H + b"Transfer-Encoding: chunked\t\r\n\r\n" + CHUNKED_HELLO +
     SMUGGLED, [200, 400], b"hello", "chunked"),
    ("te_chunked_trailing_space", H + b"Transfer-Encoding: chunked \r\n\r\n" + CHUNKED_HELLO +
     SMUGGLED, [200, 400], b"hello", "chunked"),
    ("te_gzip_then_chunked", H + b"Transfer-Encoding: gzip, chunked\r\n\r\n" + CHUNKED_HELLO +
     SMUGGLED, [200, 400], b"hello", "chunked"),
    ("te_twice_gzip_then_chunked", H + b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked"
     b"\r\n\r\n" + CHUNKED_HELLO + SMUGGLED, [200, 400], b"hello", "chunked"),
    ("chunk_ext_valid", H + b"Transfer-Encoding: chunked\r\n\r\n5;a=b;c=\"d e\"\r\nhello\r\n"
     b"0\r\n\r\n" + SMUGGLED, [200, 400], b"hello", "chunked"),
    ("chunk_size_uppercase_hex", H + b"Transfer-Encoding: chunked\r\n\r\nA\r\nhelloworld\r\n"
     b"0\r\n\r\n", [200], b"helloworld", "chunked"),
    ("chunk_body_contains_request", H + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
     % (len(SMUGGLED_LITERAL), SMUGGLED_LITERAL), [200], SMUGGLED_LITERAL, "chunked"),
    ("trailer_then_smuggled", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
     b"X-Trailer: 1\r\n\r\n" + SMUGGLED, [200, 400], b"hello", "chunked"),
    ("trailer_with_framing_fields", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
     b"Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n" + SMUGGLED, [200, 400],
     b"hello", "chunked"),
    ("cl_body_contains_request", H + b"Content-Length: %d\r\n\r\n%s"
     % (len(SMUGGLED_LITERAL), SMUGGLED_LITERAL), [200], SMUGGLED_LITERAL, "length"),
    ("get_without_body_then_smuggled", b"GET {url}/x HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n" +
     SMUGGLED, [200, 400], b"", "none"),
]


@pytest.mark.parametrize("template,statuses,body,framing", [c[1:] for c in ACCEPTED],
                         ids=[c[0] for c in ACCEPTED])
def test_accepted_request(start_sluice, origin, template, statuses, body, framing):
    s = start_sluice()
    request = render(template, s, origin)
    with RawConnection(s.proxy_addr) as c:
        c.send(request)
        responses = read_all_responses(c, len(statuses))
        assert [r.status for r in responses] == statuses, \
            "statuses: " + "; ".join(str(r) for r in responses)
        assert responses[0].body == default_response_body(request, body), str(responses[0])
        if statuses[-1] == 400:
            assert_closed(c, "after the pipelined origin-form request")
    time.sleep(0.2)
    reqs = origin.requests
    assert len(reqs) == 1, f"origin got {len(reqs)} requests:\n{origin.describe()}"
    assert origin.errors == [], f"origin could not parse what sluice sent:\n{origin.describe()}"
    r = reqs[0]
    assert r.target == "/x" and r.framing == framing and r.body == body, str(r)
    assert r.header("Proxy-Authorization") is None, "the proxy credential was forwarded"
    # Framing forwarded in one unambiguous form.
    assert len(r.header_all("Content-Length")) <= 1, f"several Content-Length fields: {r}"
    if framing == "length":
        assert r.header_all("Content-Length") == [str(len(body))], str(r)
    if framing == "chunked":
        assert r.header("Content-Length") is None, str(r)
        assert r.header_all("Transfer-Encoding")[-1].lower().endswith("chunked"), str(r)
    expected_rejects = 1 if statuses[-1] == 400 else 0
    assert s.stat(REJECTED) == expected_rejects
    follow_up(s, origin, 1)


def default_response_body(request, body):
    method = request.split(b" ", 1)[0].decode()
    return f"{method} /x body={len(body)}\n".encode()


def test_pipelined_after_chunked_body(start_sluice, origin):
    """Two requests in one write, the first with a chunked body: both answered in order, the
    origin sees exactly the two requests on one connection."""
    s = start_sluice()
    first = (b"POST {url}/one HTTP/1.1\r\nHost: {host}\r\n{auth}Transfer-Encoding: chunked\r\n\r\n"
             b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nX-T: 1\r\n\r\n")
    second = b"POST {url}/two HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Length: 3\r\n\r\nxyz"
    third = b"GET {url}/three HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"
    with RawConnection(s.proxy_addr) as c:
        c.send(render(first + second + third, s, origin))
        a, b = c.read_response("POST"), c.read_response("POST")
        d = c.read_response("GET")
        assert_closed(c, "after Connection: close")
    assert (a.status, a.body) == (200, b"POST /one body=5\n"), str(a)
    assert (b.status, b.body) == (200, b"POST /two body=3\n"), str(b)
    assert (d.status, d.body) == (200, b"GET /three body=0\n"), str(d)
    reqs = origin.requests
    assert [(r.method, r.target, r.body, r.conn) for r in reqs] == [
        ("POST", "/one", b"abcde", 0), ("POST", "/two", b"xyz", 0), ("GET", "/three", b"", 0)], \
        origin.describe()
    assert reqs[0].raw_body == b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nX-T: 1\r\n\r\n", str(reqs[0])
    assert reqs[0].trailers == [("X-T", "1")]
    assert origin.errors == []
    assert s.stat(CONNECTS) == 1


def test_chunked_body_split_across_writes(start_sluice, origin):
    """The chunked decoder keeps no buffer: a body dribbled byte by byte frames the same."""
    s = start_sluice()
    head = render(H + b"Transfer-Encoding: chunked\r\n\r\n", s, origin)
    body = b"3;a=\"b;c\"\r\nabc\r\n1\r\nd\r\n0\r\nX: y\r\n\r\n"
    with RawConnection(s.proxy_addr) as c:
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.send(head)
        for i in range(len(body)):
            c.send(body[i:i + 1])
            time.sleep(0.002)
        c.send(render(SMUGGLED, s, origin))
        first, second = c.read_response("POST"), c.read_response("GET")
    assert (first.status, second.status) == (200, 400), f"{first}\n{second}"
    reqs = origin.wait_requests(1)
    time.sleep(0.2)
    assert len(origin.requests) == 1 and reqs[0].body == b"abcd", origin.describe()
    assert reqs[0].raw_body == body


# ---------------------------------------------------------------------------------------------
# The origin side: malformed responses become 502, and the origin connection is not reused.

def once_then_normal(first):
    """A responder: `first` (bytes or a Reply) to the first request, normal answers after."""
    def respond(req, ctx):
        return first if ctx.request_number == 0 else default_response(req, ctx)
    return respond


def get(path):
    return b"GET {url}" + path + b" HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n"


BAD_RESPONSES = [
    ("cl_and_te", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n"),
    ("te_and_cl", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
     b"0\r\n\r\n"),
    ("two_different_cl", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nhi"),
    ("cl_list_different", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 5\r\n\r\nhi"),
    ("cl_not_a_number", b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nhi"),
    ("cl_negative", b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nhi"),
    ("te_chunked_twice", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
     b"0\r\n\r\n"),
    ("te_chunked_comma", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n"),
    ("te_not_ending_in_chunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
     b"2\r\nhi\r\n0\r\n\r\n"),
    ("te_gzip_only", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhi"),
    ("status_code_letters", b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\nhi"),
    ("status_code_two_digits", b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nhi"),
    ("status_no_space", b"HTTP/1.1 200OK\r\nContent-Length: 2\r\n\r\nhi"),
    ("status_line_not_http", b"ICY 200 OK\r\nContent-Length: 2\r\n\r\nhi"),
    ("status_line_lowercase", b"http/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"),
    ("status_version_http2", b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nhi"),
    ("status_line_http09_body", b"hi there, no head at all\r\n\r\n"),
    ("status_line_bare_lf", b"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nhi"),
    ("field_bare_lf", b"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nhi"),
    ("head_all_bare_lf", b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi"),
    ("field_bare_cr", b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nhi"),
    ("field_obs_fold", b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nhi"),
    ("field_space_before_colon", b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nhi"),
    ("field_nul", b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nhi"),
    ("switching_protocols_unasked", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n"
     b"Connection: upgrade\r\n\r\n"),
    ("head_too_large", b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-F%d: %s\r\n" % (i, b"a" * 1000)
                                                       for i in range(70)) +
     b"Content-Length: 2\r\n\r\nhi"),
]


@pytest.mark.parametrize("response", [c[1] for c in BAD_RESPONSES],
                         ids=[c[0] for c in BAD_RESPONSES])
def test_malformed_response_is_502_and_not_reused(start_sluice, response):
    with RecordingOrigin(once_then_normal(response)) as origin:
        s = start_sluice()
        with RawConnection(s.proxy_addr) as c:
            c.send(render(get(b"/bad"), s, origin))
            resp = c.read_response("GET")
            assert resp.status == 502, f"malformed origin response relayed as: {resp}"
            assert resp.body.startswith(b"502 Bad Gateway: "), \
                f"not sluice's own 502 (the malformed response leaked?): {resp}"
            assert_closed(c, "502 for a malformed response")
        assert s.stat(BAD_UPSTREAM) == 1
        assert_not_reused(s, origin)


def test_http10_client_never_receives_chunked_framing(start_sluice):
    """An origin that answers an HTTP/1.0 request with chunked framing (RFC 9112 6.1 forbids it)
    does not pass it on: the HTTP/1.0 client gets the decoded body, no Transfer-Encoding, and
    the end of the body is the connection's close."""
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Origin: yes\r\n\r\n"
               b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n")
    with RecordingOrigin(once_then_normal(chunked)) as origin:
        s = start_sluice()
        c = socket.create_connection(s.proxy_addr, timeout=10)
        try:
            c.sendall(render(b"GET {url}/ten HTTP/1.0\r\nHost: {host}\r\n"
                             b"Connection: keep-alive\r\n{auth}\r\n", s, origin))
            data = read_all(c)
        finally:
            c.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        assert lines[0] == b"HTTP/1.1 200 OK", data
        fields = {l.split(b":", 1)[0].lower(): l.split(b":", 1)[1].strip() for l in lines[1:]}
        assert b"transfer-encoding" not in fields, data
        assert fields.get(b"connection") == b"close", data
        assert fields.get(b"x-origin") == b"yes", data
        assert body == b"hello, world", data
        assert origin.requests[0].version == "HTTP/1.0", origin.describe()
    # An HTTP/1.1 client of the same response gets the chunked framing as it came.
    with RecordingOrigin(once_then_normal(chunked)) as origin:
        s = start_sluice()
        with RawConnection(s.proxy_addr) as c:
            c.send(render(get(b"/eleven"), s, origin))
            resp = c.read_response("GET")
            assert resp.status == 200 and resp.body == b"hello, world", resp
            assert resp.header("transfer-encoding") == "chunked", resp


def assert_not_reused(s, origin, client=None):
    """The next request (on `client`, or on a new client connection) reaches the origin over a
    new connection and gets the origin's real answer."""
    req = render(get(b"/next"), s, origin)
    if client is None:
        with RawConnection(s.proxy_addr) as c:
            c.send(req)
            resp = c.read_response("GET")
    else:
        client.send(req)
        resp = client.read_response("GET")
    assert (resp.status, resp.body) == (200, b"GET /next body=0\n"), \
        f"request after the bad response: {resp}\n{origin.describe()}"
    assert s.stat(CONNECTS) == 2, "the origin connection that sent a bad response was reused"
    reqs = origin.requests
    assert [(r.target, r.conn) for r in reqs] == [("/bad", 0), ("/next", 1)], origin.describe()
    assert origin.errors == [], origin.describe()


def test_good_response_connection_is_reused(start_sluice, origin):
    """The control for the cases above: a well-formed exchange does leave a reusable
    connection, so CONNECTS == 2 there really means 'not reused'."""
    s = start_sluice()
    for path in (b"/a", b"/b"):
        with RawConnection(s.proxy_addr) as c:
            c.send(render(get(path), s, origin))
            assert c.read_response("GET").status == 200
    assert s.stat(CONNECTS) == 1
    assert [r.conn for r in origin.requests] == [0, 0]


def test_duplicate_equal_response_cl_is_forwarded_once(start_sluice):
    """Two identical Content-Lengths are one length (RFC 9110 8.6); the client must see it once
    (a recipient that rejects duplicates would otherwise fail on sluice's output)."""
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2, 2\r\n\r\nhi"
    with RecordingOrigin(once_then_normal(response)) as origin:
        s = start_sluice()
        with RawConnection(s.proxy_addr) as c:
            c.send(render(get(b"/bad"), s, origin))
            resp = c.read_response("GET")
            raw_headers = [k.lower() for k, _ in resp.headers]
            assert resp.status == 200 and resp.body == b"hi", str(resp)
            assert raw_headers.count("content-length") == 1 and \
                resp.header("Content-Length") == "2", str(resp)


@pytest.mark.parametrize("delay", [0, 0.1], ids=["same_write", "later_write"])
def test_invalid_chunked_response_mid_stream_closes_client(start_sluice, delay):
    """The head went out already: the only honest signal left is closing the client connection
    (before the last chunk, so the client sees a truncated body), and the origin connection is
    not reused."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
    bad = b"ZZ\r\nworld\r\n0\r\n\r\n"
    first = Reply(head + bad) if delay == 0 else Reply(head, later=[(delay, bad)])
    with RecordingOrigin(once_then_normal(first)) as origin:
        s = start_sluice()
        with RawConnection(s.proxy_addr) as c:
            c.send(render(get(b"/bad"), s, origin))
            line = c._read_line()
            assert line == b"HTTP/1.1 200 OK", line
            rest = c._read_to_eof()  # raises on timeout if sluice keeps the connection open
            assert rest.endswith(b"\r\n\r\n5\r\nhello\r\n"), rest
            assert b"world" not in rest and not rest.endswith(b"0\r\n\r\n"), rest
        assert s.wait_stat(BAD_UPSTREAM, lambda v: v == 1) == 1
        assert_not_reused(s, origin)


@pytest.mark.parametrize("delay", [0, 0.1], ids=["same_write", "later_write"])
def test_response_with_extra_bytes_after_body(start_sluice, delay):
    """Bytes after the declared body are not a response to anything: the client gets exactly
    the declared body, its next request gets the origin's real answer (not the extra bytes), and
    the spoiled origin connection is not reused."""
    good = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
    extra = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
    first = Reply(good + extra) if delay == 0 else Reply(good, later=[(delay, extra)])
    with RecordingOrigin(once_then_normal(first)) as origin:
        s = start_sluice()
        with RawConnection(s.proxy_addr) as c:
            c.send(render(get(b"/bad"), s, origin))
            resp = c.read_response("GET")
            assert (resp.status, resp.body) == (200, b"hi"), str(resp)
            time.sleep(delay + 0.2)
            assert_not_reused(s, origin, client=c)


def test_response_head_limit_is_a_limit_not_a_hang(start_sluice):
    """Just under the response head limit is still relayed (the 502 above is the limit, not a
    general dislike of big heads)."""
    fields = b"".join(b"X-F%d: %s\r\n" % (i, b"a" * 1000) for i in range(60))
    response = b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: 2\r\n\r\nhi"
    assert len(response) < 65536
    with RecordingOrigin(once_then_normal(response)) as origin:
        s = start_sluice()
        with RawConnection(s.proxy_addr) as c:
            c.send(render(get(b"/big"), s, origin))
            resp = c.read_response("GET")
        assert (resp.status, resp.body) == (200, b"hi"), str(resp)[:300]
        assert len(resp.headers) >= 61


# ---------------------------------------------------------------------------------------------
# The recording origin on its own (no sluice): it must see what the cases above rely on it to
# see, or their "origin got exactly one request" would prove nothing.

def _direct(origin, data):
    with socket.create_connection(("127.0.0.1", origin.port), timeout=5) as c:
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass
    time.sleep(0.1)


def test_recording_origin_counts_a_smuggled_request(origin):
    _direct(origin, b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
                    b"GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n")
    assert [(r.method, r.target, r.body) for r in origin.requests] == [
        ("POST", "/a", b"hello"), ("GET", "/smuggled", b"")], origin.describe()
    assert origin.raw.startswith(b"POST /a ")


def test_recording_origin_decodes_chunked_exactly(origin):
    body = b"3;x=\"y\"\r\nabc\r\n2\r\nde\r\n0\r\nT: v\r\n\r\n"
    _direct(origin, b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" +
            body)
    r, = origin.requests
    assert (r.framing, r.body, r.raw_body, r.trailers) == ("chunked", b"abcde", body,
                                                           [("T", "v")])


@pytest.mark.parametrize("data", [
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 1\r\n\r\nx",
    b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\nx\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\nHost: h\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost : h\r\n\r\n",
    b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
], ids=["cl_te", "dup_cl", "cl_list", "te_not_final", "chunk_size", "bare_lf", "obs_fold",
        "two_hosts", "space_colon", "two_spaces"])
def test_recording_origin_flags_what_it_cannot_parse_strictly(origin, data):
    _direct(origin, data)
    assert origin.errors, f"the origin accepted {data!r}:\n{origin.describe()}"
    assert origin.requests == []
