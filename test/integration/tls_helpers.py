"""TLS clients for tests of sluice's HTTPS proxy port (Python's ssl module, real handshakes)."""

import socket
import ssl
import subprocess
from pathlib import Path

from helpers import CLEAN_ENV, basic_auth, read_all  # noqa: F401 (re-exported)


def client_context(ca, alpn=None, max_version=None, min_version=None):
    ctx = ssl.create_default_context(cafile=str(ca))
    if alpn:
        ctx.set_alpn_protocols(alpn)
    if max_version is not None:
        ctx.maximum_version = max_version
    if min_version is not None:
        ctx.minimum_version = min_version
    return ctx


def tls_connect(port, ctx, server_hostname="localhost", session=None, timeout=10.0):
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname=server_hostname, session=session)


def proxied_get(sock, url, host, key):
    """One absolute-form GET with Connection: close over an open TLS socket; the raw answer."""
    sock.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n"
                 f"Proxy-Authorization: {basic_auth(key)}\r\nConnection: close\r\n\r\n".encode())
    return read_all(sock)


def client_hello_bytes(ca, server_hostname="localhost", alpn=None):
    """The ClientHello a real client sends first (made in memory, nothing sent)."""
    ctx = client_context(ca, alpn=alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def make_cert(dirpath, ca_pem, ca_key, name, dns_names):
    """A certificate for `dns_names`, signed by the test CA; returns (cert, key) paths."""
    d = Path(dirpath)
    key, csr, cert, ext = (d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem",
                           d / f"{name}.ext")
    ext.write_text("basicConstraints=critical,CA:FALSE\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth\n"
                   "subjectAltName=" + ",".join(f"DNS:{n}" for n in dns_names) + "\n")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, env=CLEAN_ENV)
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", str(key),
        "-out", str(csr), "-subj", f"/CN={dns_names[0]}")
    run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-sha256", "-extfile", str(ext), "-out", str(cert))
    return cert, key
