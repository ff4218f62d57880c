"""HTTP/1.1 forward proxying with real curl: absolute-form requests through `-x`."""

import json

import pytest

from helpers import closed_port_socket, curl, header_values
from origins import chunked_body


def proxied(s, *args, timeout=30, headers_file=None, auth=True):
    auth_args = ["-U", f"user:{s.key}"] if auth else []
    return curl("-x", s.proxy_url, *auth_args, *args, timeout=timeout, headers_file=headers_file)


@pytest.mark.parametrize("name", ["1k", "1m"])
def test_get_byte_exact(sluice, nginx, tmp_path, name):
    out = tmp_path / "body"
    r = proxied(sluice, "-o", out, "-w", "%{http_code}", nginx.url(f"/{name}"))
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    got = out.read_bytes()
    want = nginx.files[name]
    assert len(got) == len(want), f"got {len(got)} bytes, want {len(want)}"
    assert got == want, f"/{name} through the proxy differs from the file"
    assert sluice.stat("http1.http.rs_2xx") == 1
    assert sluice.stat("auth.allowed") >= 1


def test_hostname_resolved_from_etc_hosts(sluice, nginx, tmp_path):
    out = tmp_path / "body"
    r = proxied(sluice, "-o", out, "-w", "%{http_code}", f"http://localhost:{nginx.port}/1k")
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert out.read_bytes() == nginx.files["1k"]


def test_ipv6_literal_origin(sluice, nginx, tmp_path):
    if not nginx.has_ipv6:
        pytest.skip("no IPv6 loopback on this machine")
    out = tmp_path / "body"
    r = proxied(sluice, "-o", out, "-w", "%{http_code}", f"http://[::1]:{nginx.port}/1k")
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert out.read_bytes() == nginx.files["1k"]


def test_bearer_auth(sluice, nginx):
    r = curl("-x", sluice.proxy_url, "--proxy-header", f"Proxy-Authorization: Bearer {sluice.key}",
             "-w", "\n%{http_code}", nginx.url("/small.txt"))
    assert r.returncode == 0, r.describe()
    assert r.stdout == nginx.files["small.txt"] + b"\n200", r.describe()


def test_basic_auth_any_user_name(sluice, nginx):
    r = curl("-x", sluice.proxy_url, "-U", f"someone-else:{sluice.key}", "-w", "%{http_code}",
             "-o", "/dev/null", nginx.url("/small.txt"))
    assert r.stdout == b"200", r.describe()


@pytest.mark.parametrize("how", ["none", "wrong-basic", "wrong-bearer", "key-as-user",
                                 "unknown-scheme"])
def test_missing_or_wrong_key_gets_407(sluice, nginx, tmp_path, how):
    args = {
        "none": [],
        "wrong-basic": ["-U", f"user:{sluice.key}x"],
        "wrong-bearer": ["--proxy-header", f"Proxy-Authorization: Bearer {sluice.key[:-1]}"],
        "key-as-user": ["-U", f"{sluice.key}:nope"],
        "unknown-scheme": ["--proxy-header", f"Proxy-Authorization: Token {sluice.key}"],
    }[how]
    hdrs = tmp_path / "headers"
    r = curl("-x", sluice.proxy_url, *args, "-o", "/dev/null", "-w", "%{http_code}",
             nginx.url("/1k"), headers_file=hdrs)
    assert r.stdout == b"407", r.describe()
    assert 'Basic realm="sluice"' in header_values(r.headers, "Proxy-Authenticate"), r.describe()
    counter = "auth.denied_missing" if how == "none" else "auth.denied_invalid"
    assert sluice.stat(counter) == 1, f"{counter} after one {how} request"
    assert sluice.stat("auth.allowed") == 0


def test_proxy_credentials_never_reach_the_origin(sluice, py_origin):
    r = proxied(sluice, "-H", "Proxy-Connection: keep-alive", "-H", "Connection: X-Drop-Me",
                "-H", "X-Drop-Me: secret", "-H", "X-Keep-Me: yes", py_origin.url("/headers"))
    assert r.returncode == 0, r.describe()
    seen = {k.lower(): v for k, v in json.loads(r.stdout)}
    assert "proxy-authorization" not in seen, f"origin saw the API key: {seen}"
    assert "proxy-connection" not in seen, f"hop-by-hop header forwarded: {seen}"
    assert "x-drop-me" not in seen, f"a Connection-listed header was forwarded: {seen}"
    assert seen.get("x-keep-me") == "yes", f"an end-to-end header was dropped: {seen}"
    assert seen.get("host") == f"127.0.0.1:{py_origin.port}", seen


def test_post_body_echoed(sluice, py_origin, tmp_path):
    data = tmp_path / "data"
    data.write_bytes(bytes(range(256)) * 1024 + b"tail")  # 256 KiB + 4
    out = tmp_path / "out"
    r = proxied(sluice, "--data-binary", f"@{data}", "-o", out, "-w", "%{http_code}",
                py_origin.url("/echo"))
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert out.read_bytes() == data.read_bytes(), "echoed POST body differs from what was sent"


def test_put_with_expect_100_continue(sluice, py_origin, tmp_path):
    data = tmp_path / "data"
    data.write_bytes(b"e" * 200000)
    out = tmp_path / "out"
    # With a 5 s expect timeout, a proxy that swallows the 100 costs 5 s; one that relays it
    # (or answers it itself) is immediate.
    r = proxied(sluice, "-X", "PUT", "-H", "Expect: 100-continue", "--expect100-timeout", "5",
                "--data-binary", f"@{data}", "-o", out, "-w", "%{http_code}",
                py_origin.url("/echo"))
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert out.read_bytes() == data.read_bytes()
    assert r.elapsed < 3, f"Expect: 100-continue took {r.elapsed:.1f}s: the 100 was not relayed"


def test_chunked_request_body(sluice, py_origin, tmp_path):
    data = tmp_path / "data"
    data.write_bytes(b"chunk me " * 30000)
    out = tmp_path / "out"
    hdrs = tmp_path / "headers"
    r = proxied(sluice, "-H", "Transfer-Encoding: chunked", "--data-binary", f"@{data}",
                "-o", out, "-w", "%{http_code}", py_origin.url("/echo"), headers_file=hdrs)
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert out.read_bytes() == data.read_bytes(), (
        f"chunked body echoed wrong: {len(out.read_bytes())} bytes back, sent "
        f"{len(data.read_bytes())}; origin saw chunked="
        f"{header_values(r.headers, 'X-Origin-Chunked')}")


def test_chunked_response(sluice, py_origin, tmp_path):
    out = tmp_path / "out"
    r = proxied(sluice, "-o", out, "-w", "%{http_code}", py_origin.url("/chunked"))
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    want = b"".join(chunked_body())
    got = out.read_bytes()
    assert got == want, f"chunked response: got {len(got)} bytes, want {len(want)}"


def test_head_has_no_body_and_keeps_the_connection(sluice, nginx, tmp_path):
    out = tmp_path / "out"
    r = curl("-x", sluice.proxy_url, "-U", f"user:{sluice.key}", "-I",
             "-w", "head %{http_code} %{num_connects}\n", nginx.url("/1k"),
             "--next", "-x", sluice.proxy_url, "-U", f"user:{sluice.key}", "-o", out,
             "-w", "get %{http_code} %{num_connects}\n", nginx.url("/1k"), timeout=10)
    assert r.returncode == 0, r.describe()
    text = r.stdout.decode(errors="replace")
    assert "Content-Length: 1024" in text, f"HEAD lost its Content-Length:\n{text}"
    assert "head 200 1" in text, text
    # The GET after HEAD reuses the client connection and gets exactly the file: the proxy did
    # not wait for (or forward) a body after the HEAD response.
    assert "get 200 0" in text, f"GET after HEAD did not reuse the connection:\n{text}"
    assert out.read_bytes() == nginx.files["1k"]


def test_http10_client(sluice, nginx, tmp_path):
    out = tmp_path / "out"
    r = proxied(sluice, "-0", "-o", out, "-w", "%{http_code}", nginx.url("/1k"))
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert out.read_bytes() == nginx.files["1k"]


def test_keepalive_one_client_connection(sluice, py_origin):
    before = py_origin.connections
    url = py_origin.url("/hello")
    r = proxied(sluice, "-w", "[%{http_code} %{num_connects}]", url, url, url)
    assert r.returncode == 0, r.describe()
    assert r.stdout.count(b"hello from the python origin") == 3, r.describe()
    assert b"[200 1]" in r.stdout and r.stdout.count(b"[200 0]") == 2, \
        f"curl did not reuse its proxy connection: {r.stdout!r}"
    assert sluice.wait_stat("http1.http.rq_total", lambda v: v >= 3) == 3
    assert sluice.stat("upstream.cx_connect_total") == 1, "sequential requests opened new upstreams"
    assert sluice.stat("upstream.pool_reuse") >= 1
    assert py_origin.connections - before == 1, "the origin saw more than one connection"


def test_keepalive_pool_shared_across_client_connections(sluice, nginx):
    for i in range(4):
        r = proxied(sluice, "-o", "/dev/null", "-w", "%{http_code}", nginx.url("/1k"))
        assert r.stdout == b"200", f"request {i}: {r.describe()}"
    assert sluice.wait_stat("listener.http.downstream_cx_total", lambda v: v >= 4) == 4
    assert sluice.stat("upstream.cx_connect_total") == 1, \
        "four sequential client connections to one origin should share one pooled upstream"
    assert sluice.stat("upstream.pool_reuse") >= 3


def test_unreachable_origin_gets_502(sluice, tmp_path):
    closed = closed_port_socket()
    try:
        port = closed.getsockname()[1]
        out = tmp_path / "out"
        r = proxied(sluice, "-o", out, "-w", "%{http_code}", f"http://127.0.0.1:{port}/x")
        assert r.stdout == b"502", r.describe()
        assert out.read_bytes().strip(), "502 without a body saying why"
    finally:
        closed.close()
    assert sluice.stat("upstream.cx_connect_fail") >= 1
    assert sluice.stat("http1.http.rs_5xx") >= 1


def test_slow_origin_gets_504(start_sluice, py_origin, tmp_path):
    s = start_sluice(router={"response_timeout": "2s"})
    out = tmp_path / "out"
    r = proxied(s, "-o", out, "-w", "%{http_code}", py_origin.url("/slow?s=6"), timeout=15)
    assert r.stdout == b"504", r.describe()
    assert 1.5 <= r.elapsed < 5, f"504 after {r.elapsed:.1f}s with response_timeout 2s"
    assert out.read_bytes().strip(), "504 without a body saying why"
    # The proxy still serves after a timeout.
    r = proxied(s, "-o", "/dev/null", "-w", "%{http_code}", py_origin.url("/hello"))
    assert r.stdout == b"200", r.describe()


def test_several_workers_serve_and_merge_stats(start_sluice, nginx):
    s = start_sluice(workers=2)
    for i in range(12):
        r = proxied(s, "-o", "/dev/null", "-w", "%{http_code}", nginx.url("/small.txt"))
        assert r.stdout == b"200", f"request {i}: {r.describe()}"
    assert s.wait_stat("http1.http.rq_total", lambda v: v >= 12) == 12, \
        "rq_total merged over workers is not the number of requests sent"
    assert s.stat("listener.http.downstream_cx_total") == 12
