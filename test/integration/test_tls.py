"""The HTTPS proxy port: TLS to the proxy (BoringSSL), then the same HTTP/1.1 codec, auth, bans
and destination guard as the plain port. Real clients: curl --proxy https://, Python's ssl."""

import socket
import ssl
import time

import pytest

from helpers import basic_auth, curl, free_port
from tls_helpers import (client_context, client_hello_bytes, make_cert, proxied_get, read_all,
                         tls_connect)


def tls_short(port, certs, extra=""):
    d = certs["dir"]
    return (f"tls:\n  listen: 127.0.0.1:{port}\n  cert: {d / 'server-chain.pem'}\n"
            f"  key: {d / 'server.key'}\n{extra}")


def https_tls_configs(full):
    """The TlsConfig of every chain of the https listener (HTTP/2 and HTTP/1.1)."""
    return [chain["transport_socket"]["typed_config"]
            for listener in full["listeners"] if listener["name"] == "https"
            for chain in listener["filter_chains"]]


@pytest.fixture
def tls_sluice(start_sluice, certs):
    def start(workers=1, extra_tls="", patch=None):
        port = free_port()
        s = start_sluice(workers=workers, extra_short=tls_short(port, certs, extra_tls),
                         patch=patch)
        s.tls_port = port
        return s
    return start


def test_curl_http_and_connect_over_tls_proxy(tls_sluice, certs, nginx):
    s = tls_sluice()
    proxy = ["--proxy", f"https://127.0.0.1:{s.tls_port}", "--proxy-cacert", certs["ca"]]
    r = curl(*proxy, "-U", f"u:{s.key}", nginx.url("/1k"), "-o", "-", "-w",
             "%{http_code}")
    assert r.returncode == 0, r.describe()
    assert r.stdout.endswith(b"200") and len(r.stdout) == 1024 + 3, r.describe()
    # CONNECT through the TLS port, then TLS to the origin inside the tunnel.
    r = curl(*proxy, "-U", f"u:{s.key}", "--cacert", certs["ca"], nginx.tls_url("/small.txt"),
             "-o", "/dev/null", "-w", "%{http_code}")
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    # Same auth as the plain port.
    for creds in (["-U", "u:wrong"], []):
        r = curl(*proxy, *creds, nginx.url("/small.txt"), "-o", "/dev/null", "-w", "%{http_code}")
        assert r.stdout == b"407", r.describe()
    assert s.stat("tls.https.handshakes") == 4
    assert s.stat("http1.https.rs_2xx") == 2  # the GET and the CONNECT's 200
    assert s.stat("http1.https.rq_connect") == 1
    assert s.stat("listener.https.downstream_bytes_rx") > 0


def test_keep_alive_requests_on_one_tls_connection(tls_sluice, certs, nginx):
    s = tls_sluice()
    url = nginx.url("/1m")
    r = curl("--proxy", f"https://127.0.0.1:{s.tls_port}", "--proxy-cacert", certs["ca"], "-U",
             f"u:{s.key}", url, url, url, "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
             "-w", "%{http_code}%{num_connects}\n")
    assert r.returncode == 0, r.describe()
    assert r.stdout.decode().split() == ["2001", "2000", "2000"], r.describe()
    assert s.stat("tls.https.handshakes") == 1


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_session_resumption_across_workers(tls_sluice, certs, nginx, version):
    s = tls_sluice(workers=2)
    ctx = client_context(certs["ca"], max_version=version)
    url = nginx.url("/small.txt")
    host = url.split("/")[2]
    first = tls_connect(s.tls_port, ctx)
    assert first.version() == {ssl.TLSVersion.TLSv1_3: "TLSv1.3",
                               ssl.TLSVersion.TLSv1_2: "TLSv1.2"}[version]
    assert proxied_get(first, url, host, s.key).startswith(b"HTTP/1.1 200")
    session = first.session
    first.close()
    resumed = 0
    # Several connections: with two workers some land on the one that did not issue the ticket.
    for _ in range(6):
        c = tls_connect(s.tls_port, ctx, session=session)
        assert proxied_get(c, url, host, s.key).startswith(b"HTTP/1.1 200")
        resumed += c.session_reused
        c.close()
    assert resumed == 6
    assert s.stat("tls.https.handshakes_resumed") == 6
    assert s.stat("tls.https.handshakes") == 7


def test_sni_selects_the_certificate(tls_sluice, certs, nginx, tmp_path):
    other_cert, other_key = make_cert(tmp_path, certs["ca"], certs["dir"] / "ca.key", "other",
                                      ["proxy.example.test", "*.wild.example.test"])
    s = tls_sluice(extra_tls=f"  sni_certificates:\n    - {{cert: {other_cert}, key: {other_key}}}\n")
    ctx = client_context(certs["ca"])
    for name, expect in (("localhost", "localhost"), ("proxy.example.test", "proxy.example.test"),
                         ("a.wild.example.test", "proxy.example.test")):
        c = tls_connect(s.tls_port, ctx, server_hostname=name)  # verifies the name too
        subject = dict(x[0] for x in c.getpeercert()["subject"])
        assert subject["commonName"] == expect, name
        c.close()
    # A name no certificate covers gets the default one (and the client rejects it).
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_connect(s.tls_port, ctx, server_hostname="nope.example.test")
    assert s.stat("tls.https.sni_unmatched") == 1


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_old_tls_versions_are_refused(tls_sluice, certs):
    s = tls_sluice()
    ctx = client_context(certs["ca"], max_version=ssl.TLSVersion.TLSv1_1,
                         min_version=ssl.TLSVersion.TLSv1)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError):
        tls_connect(s.tls_port, ctx)
    assert s.wait_stat("tls.https.handshake_fail.protocol_version", lambda v: v == 1) == 1


def test_plain_http_on_the_tls_port_is_closed(tls_sluice, certs):
    s = tls_sluice()
    with socket.create_connection(("127.0.0.1", s.tls_port), timeout=5) as c:
        c.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        # Closed unread, so the kernel may answer with a reset instead of a FIN.
        try:
            assert c.recv(100) == b""
        except ConnectionResetError:
            pass
    assert s.stat("listener.https.sniffer.not_allowed") == 1
    assert s.stat("tls.https.handshakes") == 0


def test_handshake_deadline(tls_sluice, certs):
    def patch(full):
        for tls in https_tls_configs(full):
            tls["handshake_timeout"] = "1s"
    s = tls_sluice(patch=patch)
    with socket.create_connection(("127.0.0.1", s.tls_port), timeout=10) as c:
        # A real ClientHello, then silence: the server's flight arrives, the client never
        # finishes.
        c.sendall(client_hello_bytes(certs["ca"]))
        start = time.monotonic()
        got = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            got += chunk
        elapsed = time.monotonic() - start
    assert got[:1] == b"\x16", "the server's handshake flight should arrive before the cut"
    assert 0.5 < elapsed < 5, elapsed
    assert s.stat("tls.https.handshake_fail.timeout") == 1


def test_oversized_handshake_is_cut(tls_sluice, certs):
    def patch(full):
        for tls in https_tls_configs(full):
            tls["max_handshake_bytes"] = 4096
    s = tls_sluice(patch=patch)
    # A ClientHello of about 8 KiB: a long ALPN list.
    hello = client_hello_bytes(certs["ca"], alpn=[f"p{i:03d}" + "x" * 200 for i in range(40)])
    assert len(hello) > 8000
    with socket.create_connection(("127.0.0.1", s.tls_port), timeout=5) as c:
        c.sendall(hello)
        assert read_all(c) == b""
    assert s.stat("tls.https.handshake_fail.too_large") == 1


def test_tls_port_in_the_config_dump_and_check(tls_sluice, certs):
    s = tls_sluice()
    dump = s.admin("/config_dump").text
    assert "sluice.tls" in dump and "server-chain.pem" in dump


def test_certificates_reload_on_sighup_and_admin(start_sluice, certs, tmp_path):
    import shutil
    import signal
    live_cert, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(certs["dir"] / "server-chain.pem", live_cert)
    shutil.copy(certs["dir"] / "server.key", live_key)
    port = free_port()
    s = start_sluice(extra_short=f"tls:\n  listen: 127.0.0.1:{port}\n  cert: {live_cert}\n"
                                 f"  key: {live_key}\n")
    ctx = client_context(certs["ca"])

    def serial():
        c = tls_connect(port, ctx)
        try:
            return c.getpeercert()["serialNumber"]
        finally:
            c.close()

    first = serial()
    held = tls_connect(port, ctx)  # an open connection keeps the certificate it got
    for n, trigger in enumerate(("admin", "sighup")):
        cert, key = make_cert(tmp_path, certs["ca"], certs["dir"] / "ca.key", f"new{n}",
                              ["localhost"])
        shutil.copy(cert, live_cert)
        shutil.copy(key, live_key)
        if trigger == "admin":
            r = s.admin("/reload_certificates", method="POST")
            assert r.status == 200 and "certificates reloaded" in r.text, r.text
        else:
            # A whole reload: the chains are built again from their files.
            s.signal(signal.SIGHUP)
            assert s.wait_stat("reload.done", lambda v: v == 1) == 1
        assert serial() not in (first,), trigger
    # Each of the port's two chains (HTTP/2 and HTTP/1.1) re-read its own context once (the
    # counter counts re-reads of a running chain, not the chains a reload builds).
    assert s.stat("tls.https.certificate_reloads") == 2
    # A broken file: the reload fails, names the file, and the old certificate stays.
    before = serial()
    live_key.write_text("not a key\n")
    r = s.admin("/reload_certificates", method="POST")
    assert r.status == 500 and str(live_key) in r.text, r.text
    assert serial() == before
    assert s.stat("tls.https.certificate_reload_failures") == 2
    assert proxied_get(held, "http://127.0.0.1:1/", "127.0.0.1:1", "wrong").startswith(
        b"HTTP/1.1 407")


def test_alpn_picks_the_codec(tls_sluice, certs, nginx):
    """h2 offered: HTTP/2 (sluice prefers it); only http/1.1 or no ALPN: HTTP/1.1."""
    import h2.config
    import h2.connection
    import h2.events

    s = tls_sluice()
    c = tls_connect(s.tls_port, client_context(certs["ca"], alpn=["h2", "http/1.1"]))
    assert c.selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    authority = nginx.url("/").split("/")[2]
    conn.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":authority", authority),
                          (":path", "/small.txt"),
                          ("proxy-authorization", basic_auth(s.key))],
                      end_stream=True)
    c.sendall(conn.data_to_send())
    status, body, done = None, b"", False
    while not done:
        data = c.recv(65536)
        assert data, "connection closed before the response ended"
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                status = dict(event.headers)[b":status"]
            elif isinstance(event, h2.events.DataReceived):
                body += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                done = True
        c.sendall(conn.data_to_send())
    assert (status, body) == (b"200", b"small file from nginx\n")
    c.close()
    for alpn in (["http/1.1"], None):
        c = tls_connect(s.tls_port, client_context(certs["ca"], alpn=alpn))
        assert c.selected_alpn_protocol() == (alpn[0] if alpn else None)
        url = nginx.url("/small.txt")
        assert proxied_get(c, url, url.split("/")[2], s.key).startswith(b"HTTP/1.1 200")
        c.close()
    assert s.stat("tls.https.alpn_h2") == 1
    assert s.stat("tls.https.alpn_http11") == 1
    assert s.stat("tls.https.alpn_none") == 1
    assert s.stat("http2.https.rq_forward") == 1
    assert s.stat("http1.https.rq_forward") == 2


def test_a_peek_that_never_completes_hits_the_deadline(tls_sluice, certs):
    """The start of a TLS record, then nothing: the sniffer's wait ends at the listener's
    listener_filters_timeout, before any TLS object exists."""
    def patch(full):
        for listener in full["listeners"]:
            if listener["name"] == "https":
                listener["listener_filters_timeout"] = "1s"
    s = tls_sluice(patch=patch)
    with socket.create_connection(("127.0.0.1", s.tls_port), timeout=10) as c:
        c.sendall(b"\x16\x03\x01\x02")
        start = time.monotonic()
        try:
            assert c.recv(100) == b""
        except ConnectionResetError:
            pass
        elapsed = time.monotonic() - start
    assert 0.5 < elapsed < 5, elapsed
    assert s.stat("listener.https.downstream_listener_filter_timeout") == 1
    assert s.stat("tls.https.handshakes") == 0


def test_check_names_the_bad_certificate_file(certs, tmp_path):
    from sluice_proc import run_cli
    d = certs["dir"]
    cases = [
        (tmp_path / "missing.pem", d / "server.key", "cannot read"),
        (d / "ca.pem", d / "server.key", "does not match the certificate"),
        (d / "server.key", d / "server.key", "not a PEM certificate chain"),
    ]
    for cert, key, expected in cases:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"auth: {{api_keys: [\"k\"]}}\n"
                       f"tls: {{listen: \"127.0.0.1:{free_port()}\", cert: \"{cert}\", "
                       f"key: \"{key}\"}}\n")
        r = run_cli("check", "-c", str(cfg))
        assert r.returncode == 1, r.stdout + r.stderr
        assert expected in r.stderr and "transport_socket" in r.stderr, r.stderr


@pytest.mark.parametrize("ciphers", ["AES128-SHA:AES256-SHA", "ECDHE-RSA-AES128-SHA",
                                     "AES128-GCM-SHA256"])
def test_weak_tls12_suites_are_refused(tls_sluice, certs, ciphers):
    """TLS 1.2 without forward secrecy (RSA key exchange) or without AEAD (CBC) is refused."""
    s = tls_sluice()
    ctx = client_context(certs["ca"], max_version=ssl.TLSVersion.TLSv1_2)
    ctx.set_ciphers(ciphers)
    with pytest.raises(ssl.SSLError):
        tls_connect(s.tls_port, ctx)
    assert s.wait_stat("tls.https.handshake_fail.no_shared_cipher", lambda v: v == 1) == 1
    # The same client with a modern suite gets through.
    ctx = client_context(certs["ca"], max_version=ssl.TLSVersion.TLSv1_2)
    ctx.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
    c = tls_connect(s.tls_port, ctx)
    assert c.version() == "TLSv1.2" and c.cipher()[0] == "ECDHE-RSA-AES128-GCM-SHA256"
    c.close()


def test_instances_sharing_a_ticket_key_file_resume_each_others_sessions(start_sluice, certs,
                                                                          tmp_path):
    import os
    d = certs["dir"]
    key_file = tmp_path / "ticket.key"
    key_file.write_bytes(os.urandom(48))

    def start(with_file):
        port = free_port()
        extra = f"  session_ticket_key_file: {key_file}\n" if with_file else ""
        s = start_sluice(extra_short=f"tls:\n  listen: 127.0.0.1:{port}\n"
                                     f"  cert: {d / 'server-chain.pem'}\n"
                                     f"  key: {d / 'server.key'}\n{extra}")
        s.tls_port = port
        return s

    a, b, c = start(True), start(True), start(False)
    ctx = client_context(certs["ca"])
    first = tls_connect(a.tls_port, ctx)
    assert proxied_get(first, "http://127.0.0.1:1/", "127.0.0.1:1", "x").startswith(b"HTTP/1.1")
    session = first.session
    first.close()
    on_b = tls_connect(b.tls_port, ctx, session=session)
    assert on_b.session_reused  # another process, the same key file
    on_b.close()
    on_c = tls_connect(c.tls_port, ctx, session=session)
    assert not on_c.session_reused  # its own random secret
    on_c.close()
    assert b.stat("tls.https.handshakes_resumed") == 1
    assert c.stat("tls.https.handshakes_resumed") == 0


def test_a_short_ticket_key_file_is_refused(certs, tmp_path):
    from sluice_proc import run_cli
    d = certs["dir"]
    key_file = tmp_path / "short.key"
    key_file.write_bytes(b"too short")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"auth: {{api_keys: [\"k\"]}}\n"
                   f"tls: {{listen: \"127.0.0.1:{free_port()}\", cert: \"{d / 'server-chain.pem'}\", "
                   f"key: \"{d / 'server.key'}\", session_ticket_key_file: \"{key_file}\"}}\n")
    r = run_cli("check", "-c", str(cfg))
    assert r.returncode == 1
    assert "session_ticket_key_file" in r.stderr and "at least 32" in r.stderr, r.stderr


def tls_burst(s, certs, n):
    """n clients send their ClientHello together; returns once every handshake completed and a
    GET went through each."""
    ctx = client_context(certs["ca"])
    socks = []
    for _ in range(n):
        raw = socket.create_connection(("127.0.0.1", s.tls_port), timeout=10)
        raw.setblocking(False)
        socks.append(ctx.wrap_socket(raw, server_hostname="localhost",
                                     do_handshake_on_connect=False))
    pending = set(socks)
    deadline = time.monotonic() + 20
    while pending and time.monotonic() < deadline:
        for t in list(pending):
            try:
                t.do_handshake()
                pending.discard(t)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
        time.sleep(0.002)
    assert not pending, f"{len(pending)} handshakes did not complete"
    return socks


def test_a_burst_of_handshakes_takes_turns_and_every_one_completes(tls_sluice, certs, nginx):
    """With two handshakes per turn the worker starts a burst a few at a time (the rest wait
    unread) and every one completes and is served."""
    s = tls_sluice(extra_tls="  handshakes_per_turn: 2\n")
    for t in tls_burst(s, certs, 60):
        t.setblocking(True)
        t.settimeout(10)
        got = proxied_get(t, nginx.url("/small.txt"), f"127.0.0.1:{nginx.port}", s.key)
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        t.close()
    assert s.stat("tls.https.handshakes") == 60
    assert s.stat("server.tls_handshakes_waited") > 0
    assert s.stat("tls.https.handshake_fail.timeout") == 0


def test_a_reload_changes_the_handshakes_per_turn(tls_sluice, certs):
    s = tls_sluice(extra_tls="  handshakes_per_turn: 0\n")
    for t in tls_burst(s, certs, 40):
        t.close()
    assert s.stat("server.tls_handshakes_waited") == 0  # no bound: none waits
    text = s.config_path.read_text()
    assert "handshakes_per_turn: 0" in text
    s.config_path.write_text(text.replace("handshakes_per_turn: 0", "handshakes_per_turn: 1"))
    r = s.admin("/reload", method="POST", data=b"")
    assert r.status == 200, r.text
    for t in tls_burst(s, certs, 40):
        t.close()
    assert s.stat("server.tls_handshakes_waited") > 0
    assert s.stat("tls.https.handshakes") == 80


def test_handshakes_per_turn_out_of_range_is_refused(certs, tmp_path):
    from sluice_proc import run_cli
    d = certs["dir"]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"auth: {{api_keys: [\"k\"]}}\n"
                   f"tls: {{listen: \"127.0.0.1:{free_port()}\", "
                   f"cert: \"{d / 'server-chain.pem'}\", key: \"{d / 'server.key'}\", "
                   f"handshakes_per_turn: 5000}}\n")
    r = run_cli("check", "-c", str(cfg))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "tls_handshakes_per_turn: at most 4096" in r.stderr, r.stderr
