"""CONNECT tunnels with real curl: HTTPS to a TLS nginx, --proxytunnel to plain HTTP."""

import socket
import ssl
import time

import pytest

from helpers import (RawConnection, SilentPort, basic_auth, closed_port_socket, curl,
                     header_values)


@pytest.mark.parametrize("name", ["1k", "1m"])
def test_https_through_connect(sluice, nginx, certs, tmp_path, name):
    out = tmp_path / "out"
    r = curl("-x", sluice.proxy_url, "-U", f"user:{sluice.key}", "--cacert", certs["ca"],
             "-o", out, "-w", "%{http_connect} %{http_code}", nginx.tls_url(f"/{name}"))
    assert r.returncode == 0, r.describe()
    assert r.stdout == b"200 200", f"want CONNECT 200 then GET 200: {r.describe()}"
    assert out.read_bytes() == nginx.files[name], f"/{name} through the tunnel differs"
    assert sluice.stat("http1.http.rq_connect") == 1


def test_proxytunnel_to_plain_http(sluice, nginx, tmp_path):
    out = tmp_path / "out"
    url = nginx.url("/1k")
    r = curl("-x", sluice.proxy_url, "-U", f"user:{sluice.key}", "--proxytunnel",
             "-o", out, "-w", "%{http_connect} %{http_code}\n", url, "-o", out.with_suffix(".2"),
             url)
    assert r.returncode == 0, r.describe()
    assert r.stdout == b"200 200\n000 200\n" or r.stdout == b"200 200\n200 200\n", r.describe()
    assert out.read_bytes() == nginx.files["1k"]
    assert out.with_suffix(".2").read_bytes() == nginx.files["1k"], \
        "second request inside the same tunnel differs"


def test_connect_to_closed_port_gets_502(sluice, certs):
    closed = closed_port_socket()
    try:
        port = closed.getsockname()[1]
        r = curl("-x", sluice.proxy_url, "-U", f"user:{sluice.key}", "--cacert", certs["ca"],
                 "-w", "%{http_connect}", f"https://127.0.0.1:{port}/")
    finally:
        closed.close()
    assert r.returncode != 0 and r.stdout == b"502", r.describe()
    assert sluice.stat("upstream.cx_connect_fail") >= 1


def test_connect_without_key_gets_407(sluice, nginx):
    target = f"127.0.0.1:{nginx.tls_port}"
    with RawConnection(sluice.proxy_addr) as c:
        c.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        resp = c.read_response("CONNECT")
    assert resp.status == 407, str(resp)
    assert resp.header("Proxy-Authenticate") == 'Basic realm="sluice"', str(resp)
    assert sluice.stat("auth.denied_missing") == 1


def test_connect_with_wrong_key_opens_no_tunnel(sluice, nginx):
    target = f"127.0.0.1:{nginx.port}"
    with RawConnection(sluice.proxy_addr) as c:
        c.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
               f"Proxy-Authorization: {basic_auth('not-the-key')}\r\n\r\n".encode())
        resp = c.read_response("CONNECT")
        assert resp.status == 407, str(resp)
        assert sluice.stat("auth.denied_invalid") == 1
        # Whatever follows must not reach nginx as a tunnelled request.
        try:
            c.send(b"GET /1k HTTP/1.1\r\nHost: x\r\n\r\n")
            follow = c.read_response()
            assert follow.body != nginx.files["1k"], "bytes after a 407 CONNECT were tunnelled"
        except (ConnectionError, OSError, ValueError):
            pass  # closed or refused: both fine
    assert sluice.stat("upstream.cx_connect_total") == 0


def test_raw_connect_tunnel_tls(sluice, nginx, certs):
    """A hand-made CONNECT, then TLS over the same socket: the tunnel is byte-transparent."""
    target = f"127.0.0.1:{nginx.tls_port}"
    c = RawConnection(sluice.proxy_addr)
    try:
        c.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
               f"Proxy-Authorization: {basic_auth(sluice.key)}\r\n\r\n".encode())
        resp = c.read_response("CONNECT")
        assert resp.status == 200, str(resp)
        assert not c.buf, f"bytes after the CONNECT response: {c.buf[:100]!r}"
        ctx = ssl.create_default_context(cafile=str(certs["ca"]))
        with ctx.wrap_socket(c.sock, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /1k HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = tls.recv(65536)
                if not chunk:
                    break
                data += chunk
        assert data.startswith(b"HTTP/1.1 200"), data[:200]
        assert data.endswith(nginx.files["1k"]), "tunnelled TLS response body differs"
    finally:
        c.close()


def test_connect_header_from_curl_is_well_formed(sluice, nginx, certs, tmp_path):
    hdrs = tmp_path / "headers"
    r = curl("-x", sluice.proxy_url, "-U", f"user:{sluice.key}", "--cacert", certs["ca"],
             "-o", "/dev/null", nginx.tls_url("/small.txt"), headers_file=hdrs)
    assert r.returncode == 0, r.describe()
    first = r.headers.splitlines()[0]
    assert first.startswith("HTTP/1.1 200"), f"CONNECT answer: {first!r}"
    # RFC 9110 9.3.6: a 2xx to CONNECT carries no Content-Length or Transfer-Encoding.
    connect_block = r.headers.split("\r\n\r\n")[0]
    assert not header_values(connect_block, "Content-Length"), connect_block
    assert not header_values(connect_block, "Transfer-Encoding"), connect_block


def wait_until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_client_that_leaves_cancels_its_pending_connect(sluice):
    """The destination never answers the SYN (connect_timeout is 10 s). A client that gives up
    first, even while sluice is not reading it, takes the pending connect with it."""
    silent = SilentPort()
    auth = basic_auth(sluice.key)
    target = f"127.0.0.1:{silent.port}"
    requests = [f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {auth}"
                f"\r\n\r\n",
                f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {auth}"
                f"\r\n\r\n"]
    try:
        for n, request in enumerate(requests, 1):
            c = socket.create_connection(sluice.proxy_addr, timeout=5)
            c.sendall(request.encode())
            assert wait_until(lambda: silent.pending_connects() == 1, 5), "sluice did not dial"
            c.close()
            assert wait_until(lambda: silent.pending_connects() == 0, 3), \
                "the connect outlived the client that asked for it"
            assert sluice.wait_stat("http1.http.rq_abandoned", lambda v: v == n) == n
        # Each also counts as a client that left mid-request.
        assert sluice.stat("http1.http.downstream_reset") == 2
    finally:
        silent.close()
