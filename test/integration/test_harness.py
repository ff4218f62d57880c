"""The test origins and certificates work on their own (no sluice involved), so a failure in the
proxy tests points at the proxy, not at the harness."""

import json
import subprocess

from helpers import RawConnection, curl
from origins import chunked_body


def test_nginx_serves_files_byte_exact(nginx, tmp_path):
    for name in ("1k", "1m"):
        out = tmp_path / name
        r = curl("-o", out, "-w", "%{http_code}", nginx.url(f"/{name}"))
        assert r.returncode == 0 and r.stdout == b"200", r.describe()
        assert out.read_bytes() == nginx.files[name], f"/{name} from nginx differs from the file"


def test_nginx_tls_with_test_ca(nginx, certs, tmp_path):
    out = tmp_path / "1k"
    r = curl("--cacert", certs["ca"], "-o", out, "-w", "%{http_code}", nginx.tls_url("/1k"))
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert out.read_bytes() == nginx.files["1k"]


def test_certs_verify_for_loopback(certs):
    p = subprocess.run(["openssl", "verify", "-CAfile", str(certs["ca"]), str(certs["cert"])],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    san = subprocess.run(["openssl", "x509", "-in", str(certs["cert"]), "-noout", "-ext",
                          "subjectAltName"], capture_output=True, text=True).stdout
    assert "127.0.0.1" in san and "localhost" in san, san


def test_python_origin_echo_content_length_and_chunked(py_origin, tmp_path):
    data = tmp_path / "body"
    data.write_bytes(bytes(range(256)) * 300)
    r = curl("--data-binary", f"@{data}", "-D", "-", py_origin.url("/echo"))
    assert r.returncode == 0, r.describe()
    assert r.stdout.endswith(data.read_bytes()), "echo of a Content-Length body differs"
    assert b"X-Origin-Chunked: no" in r.stdout

    r = curl("-H", "Transfer-Encoding: chunked", "--data-binary", f"@{data}", "-D", "-",
             py_origin.url("/echo"))
    assert r.returncode == 0, r.describe()
    assert b"X-Origin-Chunked: yes" in r.stdout, r.describe()
    assert r.stdout.endswith(data.read_bytes()), "echo of a chunked body differs"


def test_python_origin_chunked_response_and_keepalive(py_origin):
    with RawConnection(("127.0.0.1", py_origin.port)) as c:
        c.send(b"GET /chunked HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        first = c.read_response()
        assert first.header("Transfer-Encoding") == "chunked", str(first)
        assert first.body == b"".join(chunked_body())
        second = c.read_response()
        assert second.status == 200 and second.body.startswith(b"hello"), str(second)


def test_python_origin_slow_and_headers(py_origin):
    py_origin.slow_started.clear()
    r = curl("-w", " %{time_total}", py_origin.url("/slow?s=0.5"))
    assert r.returncode == 0 and r.stdout.startswith(b"slow done"), r.describe()
    assert float(r.stdout.split()[-1]) >= 0.5
    assert py_origin.slow_started.is_set()
    r = curl("-H", "X-Probe: 1", py_origin.url("/headers"))
    headers = {k.lower(): v for k, v in json.loads(r.stdout)}
    assert headers.get("x-probe") == "1", r.describe()
