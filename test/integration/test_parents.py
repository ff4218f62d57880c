"""Parent proxies: sluice in front of real parents from Debian (Squid for HTTP and CONNECT,
Dante for SOCKS5 with username/password) and of another sluice, chosen by routes, with failover
and passive health. Every connection stays on loopback."""

import atexit
import json
import re
import socket
import subprocess
import threading
import time

import pytest

from helpers import basic_auth, closed_port_socket, curl, free_port, header_values
from peer_proxies import DANTE_PASSWORD, DANTE_USER, DANTED, SQUID, Dante, Squid, can_unshare, \
    kill_all

from test_socks5 import SUCCEEDED, UDP_ASSOCIATE, Socks5Client, UdpEcho, encode_addr, parse_udp

atexit.register(kill_all)

SQUID_USER, SQUID_PASSWORD = "sluice", "parent-Pw-1"


@pytest.fixture(scope="module")
def squid():
    if not SQUID.exists():
        pytest.skip("squid is not installed")
    s = Squid(user=SQUID_USER, password=SQUID_PASSWORD)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def dante():
    if not DANTED.exists():
        pytest.skip("danted is not installed")
    if not can_unshare():
        pytest.skip("needs root and unshare -m for a test user Dante can check")
    d = Dante("username")
    yield d
    d.stop()


def squid_logged(squid, pattern, timeout=5):
    """Squid's access log once a line matches `pattern` (a regex): Squid writes a transaction's
    line when it ends, which for a tunnel is after the client has gone."""
    deadline = time.monotonic() + timeout
    while True:
        log = squid.access_log()
        if re.search(pattern, log) or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


def parents_yaml(parents, routes):
    """The `parents:` and `routes:` keys of a short config."""
    out = "parents:\n"
    for p in parents:
        out += "  - {" + ", ".join(f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {v}"
                                   for k, v in p.items()) + "}\n"
    out += "routes:\n"
    for r in routes:
        out += "  - {" + ", ".join(f"{k}: {v}" for k, v in r.items()) + "}\n"
    return out.replace("'", '"')


def get(s, url, *extra):
    return curl("-x", s.proxy_url, "-U", f"user:{s.key}", "-w", "\n%{http_code}", *extra, url)


def tunnel_get(s, url):
    return curl("-x", s.proxy_url, "-U", f"user:{s.key}", "--proxytunnel", "-w",
                "\n%{http_connect} %{http_code}", url)


def squid_parent(squid, **more):
    return {"name": "squid", "address": f"127.0.0.1:{squid.port}", "protocol": "http",
            "username": SQUID_USER, "password": SQUID_PASSWORD, **more}


def test_http_forward_through_squid_asks_for_the_checked_address(start_sluice, squid, py_origin):
    s = start_sluice(extra_short=parents_yaml([squid_parent(squid)],
                                              [{"parents": '["squid"]'}]))
    # By name: sluice resolves "localhost" itself, checks it, and asks Squid for the address.
    r = get(s, f"http://localhost:{py_origin.port}/hello")
    assert r.returncode == 0, r.describe()
    assert r.stdout.endswith(b"\n200"), r.describe()
    assert r.stdout.startswith(b"hello"), r.describe()
    assert s.stat("upstream.parent.squid.requests") == 1
    assert s.stat("upstream.parent.squid.failures") == 0
    log = squid_logged(squid, re.escape(f"http://127.0.0.1:{py_origin.port}/hello"))
    assert f"http://127.0.0.1:{py_origin.port}/hello" in log, log
    assert "localhost" not in log, log
    assert SQUID_USER in log, "Squid saw no authenticated user: " + log


def test_connect_through_squid(start_sluice, squid, py_origin):
    s = start_sluice(extra_short=parents_yaml([squid_parent(squid)],
                                              [{"parents": '["squid"]'}]))
    r = tunnel_get(s, py_origin.url("/hello"))
    assert r.returncode == 0, r.describe()
    assert r.stdout.endswith(b"\n200 200"), r.describe()
    assert s.stat("upstream.parent.squid.requests") == 1
    pattern = rf"CONNECT 127\.0\.0\.1:{py_origin.port} {SQUID_USER}"
    assert re.search(pattern, squid_logged(squid, pattern))


def test_wrong_credentials_for_the_parent_are_a_502_that_says_so(start_sluice, squid, py_origin,
                                                                  tmp_path):
    s = start_sluice(extra_short=parents_yaml([squid_parent(squid, password="Wr0ng-Parent-Pw")],
                                              [{"parents": '["squid"]'}]))
    r = tunnel_get(s, py_origin.url("/hello"))
    assert b"\n502" in r.stdout, r.describe()
    h = tmp_path / "h"
    r = curl("-x", s.proxy_url, "-U", f"user:{s.key}", "-p", "-D", h, py_origin.url("/hello"))
    status = [v for v in header_values(h.read_text(errors="replace"), "proxy-status")]
    assert status and "proxy_configuration_error" in status[0], h.read_text()
    assert "Wr0ng-Parent-Pw" not in s.log(), "the parent's password reached the log"
    assert s.stat("upstream.parent.squid.failures") == 2


def test_socks5_parent_with_username_and_password(start_sluice, dante, py_origin):
    s = start_sluice(extra_short=parents_yaml(
        [{"name": "dante", "address": f"127.0.0.1:{dante.port}", "protocol": "socks5",
          "username": DANTE_USER, "password": DANTE_PASSWORD}], [{"parents": '["dante"]'}]))
    r = tunnel_get(s, py_origin.url("/hello"))
    assert r.returncode == 0, r.describe()
    assert r.stdout.endswith(b"\n200 200"), r.describe()
    # A relayed request goes through the SOCKS5 parent as a tunnel to the origin.
    r = get(s, py_origin.url("/hello"))
    assert r.stdout.startswith(b"hello") and r.stdout.endswith(b"\n200"), r.describe()
    assert s.stat("upstream.parent.dante.requests") == 2
    assert s.stat("upstream.parent.dante.failures") == 0


def test_socks5_parent_refusing_the_credentials(start_sluice, dante, py_origin):
    s = start_sluice(extra_short=parents_yaml(
        [{"name": "dante", "address": f"127.0.0.1:{dante.port}", "protocol": "socks5",
          "username": DANTE_USER, "password": "not-it"}], [{"parents": '["dante"]'}]))
    r = tunnel_get(s, py_origin.url("/hello"))
    assert b"\n502" in r.stdout, r.describe()
    assert s.stat("upstream.parent.dante.failures") == 1


def test_failover_and_passive_health(start_sluice, squid, py_origin):
    dead = closed_port_socket()  # bound, not listening: connects are refused
    try:
        s = start_sluice(extra_short=parents_yaml(
            [{"name": "dead", "address": f"127.0.0.1:{dead.getsockname()[1]}",
              "protocol": "http", "max_failures": 2, "unhealthy_for": "1m"},
             squid_parent(squid)],
            [{"parents": '["dead", "squid"]'}]))
        for _ in range(4):
            r = get(s, py_origin.url("/hello"))
            assert r.stdout.endswith(b"\n200"), r.describe()
        # Two failures made it unhealthy; the next two requests passed it by.
        assert s.stat("upstream.parent.dead.failures") == 2
        assert s.stat("upstream.parent.dead.unhealthy") == 1
        assert s.stat("upstream.parent.dead.skipped") == 2
        assert s.stat("upstream.parent.squid.requests") == 4
    finally:
        dead.close()


def test_every_parent_down_is_a_502(start_sluice, py_origin):
    dead = closed_port_socket()
    try:
        s = start_sluice(extra_short=parents_yaml(
            [{"name": "dead", "address": f"127.0.0.1:{dead.getsockname()[1]}",
              "protocol": "socks5"}], [{"parents": '["dead"]'}]))
        r = tunnel_get(s, py_origin.url("/hello"))
        assert b"\n502" in r.stdout, r.describe()
        assert s.stat("upstream.parent.dead.failures") == 1
    finally:
        dead.close()


def test_routes_pick_by_port_and_the_rest_goes_direct(start_sluice, squid, py_origin,
                                                      sluice_origin):
    s = start_sluice(extra_short=parents_yaml(
        [squid_parent(squid)],
        [{"ports": f'["{py_origin.port}"]', "parents": '["squid"]'}]))
    r = get(s, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n200"), r.describe()
    r = get(s, sluice_origin.url + "/bytes/10")
    assert r.stdout.endswith(b"\n200"), r.describe()
    assert s.stat("upstream.parent.squid.requests") == 1
    assert f":{sluice_origin.port}/" not in squid.access_log()


def test_the_destination_guard_holds_through_a_parent(start_sluice, squid, py_origin):
    from sluice_proc import find_typed_configs

    def close_private(full):
        for guard in find_typed_configs(full, "DestGuardConfig"):
            guard["allow_private"] = False

    s = start_sluice(extra_short=parents_yaml([squid_parent(squid)], [{"parents": '["squid"]'}]),
                     patch=close_private)
    before = squid.access_log()
    r = get(s, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n403"), r.describe()
    r = tunnel_get(s, py_origin.url("/hello"))
    assert b"\n403" in r.stdout, r.describe()
    assert s.stat("upstream.parent.squid.requests") == 0
    assert squid.access_log() == before, "a refused destination reached the parent"


def test_sluice_as_a_parent(start_sluice, py_origin):
    parent = start_sluice()
    front = start_sluice(extra_short=parents_yaml(
        [{"name": "upper", "address": f"127.0.0.1:{parent.port}", "protocol": "http",
          "username": "front", "password": parent.key}], [{"parents": '["upper"]'}]))
    r = get(front, py_origin.url("/hello"))
    assert r.stdout.startswith(b"hello") and r.stdout.endswith(b"\n200"), r.describe()
    r = tunnel_get(front, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n200 200"), r.describe()
    assert parent.stat("auth.allowed") == 2
    assert parent.stat("http1.http.rq_connect") == 1
    assert front.stat("upstream.parent.upper.requests") == 2


# -- HTTPS parents: TLS to the parent, then HTTP as to an http parent.

def tls_parent(start_sluice, certs, host="127.0.0.1"):
    """A sluice whose short-form TLS port (certificate for 127.0.0.1, ::1 and localhost) is
    the parent; `tls_port` is where it listens."""
    from helpers import free_port
    d = certs["dir"]
    port = free_port()
    parent = start_sluice(extra_short=f"tls:\n  listen: {host}:{port}\n"
                                      f"  cert: {d / 'server-chain.pem'}\n  key: {d / 'server.key'}\n")
    parent.tls_port = port
    return parent


def https_parent(parent, host="127.0.0.1", **more):
    return {"name": "upper", "address": f"{host}:{parent.tls_port}", "protocol": "https",
            "username": "front", "password": parent.key, **more}


def proxy_status(s, url, tmp_path):
    """The Proxy-Status field of sluice's answer to a relayed GET of `url`, and the answer."""
    h = tmp_path / "h"
    r = curl("-x", s.proxy_url, "-U", f"user:{s.key}", "-D", h, url)
    status = header_values(h.read_text(errors="replace"), "proxy-status")
    return (status[0] if status else ""), r


def test_sluice_as_an_https_parent(start_sluice, certs, py_origin):
    parent = tls_parent(start_sluice, certs)
    # An IP-literal parent: its certificate is checked against the address (no SNI).
    front = start_sluice(extra_short=parents_yaml(
        [https_parent(parent, ca_file=str(certs["ca"]))], [{"parents": '["upper"]'}]))
    r = get(front, py_origin.url("/hello"))
    assert r.stdout.startswith(b"hello") and r.stdout.endswith(b"\n200"), r.describe()
    r = tunnel_get(front, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n200 200"), r.describe()
    # Both went to the parent's TLS port: a relayed request in absolute-form, and a CONNECT.
    assert parent.stat("tls.https.handshakes") == 2
    assert parent.stat("auth.allowed") == 2
    assert parent.stat("http1.https.rq_connect") == 1
    assert parent.stat("http1.http.rq_total") == 0
    assert front.stat("upstream.parent.upper.requests") == 2
    assert front.stat("upstream.parent.upper.failures") == 0
    assert front.stat("upstream.parent.upper.tls.handshakes") == 2
    # The second connection resumed the session the first one got.
    assert front.stat("upstream.parent.upper.tls.handshakes_resumed") == 1
    assert parent.stat("tls.https.handshakes_resumed") == 1
    # /config_dump shows the parent, not its password.
    dump = front.admin("/config_dump").text
    assert str(certs["ca"]) in dump and parent.key not in dump, dump


def test_https_parent_by_name_sends_it_as_sni(start_sluice, certs, py_origin):
    parent = tls_parent(start_sluice, certs)
    front = start_sluice(extra_short=parents_yaml(
        [https_parent(parent, host="localhost", ca_file=str(certs["ca"]))],
        [{"parents": '["upper"]'}]))
    # Relayed requests: one TLS connection, kept alive, serves them all.
    for _ in range(3):
        r = get(front, py_origin.url("/hello"))
        assert r.stdout.startswith(b"hello") and r.stdout.endswith(b"\n200"), r.describe()
    assert front.stat("upstream.pool_reuse") == 2
    assert parent.stat("tls.https.handshakes") == 1
    # Tunnels: a connection each, each resuming the session of the one before.
    for _ in range(2):
        r = tunnel_get(front, py_origin.url("/hello"))
        assert r.stdout.endswith(b"\n200 200"), r.describe()
    assert parent.stat("tls.https.handshakes") == 3
    assert front.stat("upstream.parent.upper.tls.handshakes_resumed") == 2
    # The name went as SNI, and the parent's only certificate covers it.
    assert parent.stat("tls.https.sni_unmatched") == 0


def test_a_reload_that_changes_what_the_certificate_is_checked_against_drops_kept_connections(
        start_sluice, certs, py_origin):
    from sluice_proc import short_config
    parent = tls_parent(start_sluice, certs)

    def config(**more):
        return parents_yaml([https_parent(parent, ca_file=str(certs["ca"]), **more)],
                            [{"parents": '["upper"]'}])
    front = start_sluice(extra_short=config())
    for _ in range(2):
        r = get(front, py_origin.url("/hello"))
        assert r.stdout.endswith(b"\n200"), r.describe()
    assert parent.stat("tls.https.handshakes") == 1
    # The same config again: the parent and its kept connection stay.
    r = front.admin("/reload", method="POST", data=b"")
    assert r.status == 200, r.text
    r = get(front, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n200"), r.describe()
    assert parent.stat("tls.https.handshakes") == 1
    # Checked by name now: the connection checked by address is not used again.
    front.config_path.write_text(short_config(front.port, front.admin_port, front.key, 1,
                                              config(server_name="localhost")))
    r = front.admin("/reload", method="POST", data=b"")
    assert r.status == 200, r.text
    r = get(front, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n200"), r.describe()
    assert parent.stat("tls.https.handshakes") == 2


def test_socks5_and_http2_clients_through_an_https_parent(start_sluice, certs, py_origin):
    from helpers import free_port
    from origins import EchoServer
    from test_http2 import H2Client, use_http2
    from test_tunnels import socks5_tunnel
    echo = EchoServer()
    try:
        parent = tls_parent(start_sluice, certs)
        socks_port = free_port()
        front = start_sluice(
            extra_short=f"socks5:\n  listen: 127.0.0.1:{socks_port}\n" + parents_yaml(
                [https_parent(parent, ca_file=str(certs["ca"]))], [{"parents": '["upper"]'}]),
            patch=use_http2())
        c = socks5_tunnel(("127.0.0.1", socks_port), front.key, echo.port)
        c.sendall(b"ping through the TLS parent")
        got = b""
        while len(got) < 27:
            chunk = c.recv(100)
            assert chunk, got
            got += chunk
        assert got == b"ping through the TLS parent"
        c.close()
        h2 = H2Client(front)
        sid = h2.open("GET", f"127.0.0.1:{py_origin.port}", "/hello")
        r = h2.response(sid)
        assert r.status == 200 and bytes(r.body) == b"hello from the python origin\n", vars(r)
        sid = h2.open("CONNECT", echo.authority, end=False)
        assert h2.wait(lambda: h2.streams[sid].status == 200), vars(h2.streams[sid])
        h2.send_body(sid, b"h2 ping", end=False)
        assert h2.wait(lambda: bytes(h2.streams[sid].body) == b"h2 ping")
        h2.close()
        assert front.stat("upstream.parent.upper.tls.handshakes") == 3
        assert parent.stat("http1.https.rq_connect") == 2
        assert parent.stat("auth.allowed") == 3
    finally:
        echo.stop()


def test_a_bulk_tunnel_through_an_https_parent_is_copied_not_spliced(start_sluice, certs):
    from origins import EchoServer
    from test_tunnels import connect_tunnel, exchange
    echo = EchoServer()
    try:
        parent = tls_parent(start_sluice, certs)
        front = start_sluice(extra_short=parents_yaml(
            [https_parent(parent, ca_file=str(certs["ca"]))], [{"parents": '["upper"]'}]))
        c = connect_tunnel(front, echo.port)
        size = 4 << 20
        sent, got = exchange(c, size)
        assert sent == got, "the echo through the TLS parent differs from what was sent"
        front.wait_stat("tunnel.listener.http.tunnels_active", lambda v: v == 0)
        assert front.stat("tunnel.listener.http.bytes_to_upstream") == size
        assert front.stat("tunnel.listener.http.bytes_to_downstream") == size
        # One side is TLS: every byte is copied (and encrypted), none spliced.
        assert front.stat("tunnel.listener.http.bytes_spliced") == 0
        assert front.stat("tunnel.listener.http.splice_fallback") == 0
    finally:
        echo.stop()


def test_https_parent_with_the_wrong_ca_is_a_502_and_a_failure(start_sluice, certs, py_origin,
                                                               tmp_path):
    from helpers import CLEAN_ENV, REPO_ROOT
    other = tmp_path / "other-ca"
    subprocess.run([str(REPO_ROOT / "tools/gen-test-certs.sh"), str(other)], check=True,
                   capture_output=True, env=CLEAN_ENV)
    parent = tls_parent(start_sluice, certs)
    front = start_sluice(extra_short=parents_yaml(
        [https_parent(parent, ca_file=str(other / "ca.pem"), max_failures=2)],
        [{"parents": '["upper"]'}]))
    status, r = proxy_status(front, py_origin.url("/hello"), tmp_path)
    assert b"502" in r.stdout and b"certificate verify failed" in r.stdout, r.describe()
    assert "error=tls_certificate_error" in status, status
    r = get(front, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n502"), r.describe()
    # Each refusal is a failure of the parent; two in a row set it aside.
    assert front.stat("upstream.parent.upper.failures") == 2
    assert front.stat("upstream.parent.upper.unhealthy") == 1
    assert front.stat("upstream.parent.upper.tls.handshake_fail.certificate") == 2
    # Nothing reached the parent's HTTP layer; it saw sluice abort the handshakes.
    assert parent.stat("auth.allowed") == 0
    assert parent.stat("tls.https.handshakes") == 0


def test_https_parent_with_the_wrong_server_name_is_a_502(start_sluice, certs, py_origin,
                                                          tmp_path):
    parent = tls_parent(start_sluice, certs)
    front = start_sluice(extra_short=parents_yaml(
        [https_parent(parent, ca_file=str(certs["ca"]), server_name="wrong.example")],
        [{"parents": '["upper"]'}]))
    status, r = proxy_status(front, py_origin.url("/hello"), tmp_path)
    assert b"502" in r.stdout and b"Hostname mismatch" in r.stdout, r.describe()
    assert "error=tls_certificate_error" in status, status
    assert front.stat("upstream.parent.upper.failures") == 1
    assert parent.stat("auth.allowed") == 0


def test_https_parent_at_an_address_its_certificate_does_not_list(start_sluice, certs,
                                                                  py_origin, tmp_path):
    # The certificate lists 127.0.0.1 and ::1; the parent listens on 127.0.0.2 as well.
    parent = tls_parent(start_sluice, certs, host="127.0.0.2")
    front = start_sluice(extra_short=parents_yaml(
        [https_parent(parent, host="127.0.0.2", ca_file=str(certs["ca"]))],
        [{"parents": '["upper"]'}]))
    status, r = proxy_status(front, py_origin.url("/hello"), tmp_path)
    assert b"502" in r.stdout and b"IP address mismatch" in r.stdout, r.describe()
    assert "error=tls_certificate_error" in status, status


def test_https_parent_that_speaks_no_tls(start_sluice, py_origin, tmp_path, certs):
    plain = start_sluice()
    front = start_sluice(extra_short=parents_yaml(
        [{"name": "upper", "address": f"127.0.0.1:{plain.port}", "protocol": "https",
          "ca_file": str(certs["ca"])}], [{"parents": '["upper"]'}]))
    status, r = proxy_status(front, py_origin.url("/hello"), tmp_path)
    assert b"502" in r.stdout, r.describe()
    assert "error=tls_protocol_error" in status, status
    assert front.stat("upstream.parent.upper.failures") == 1
    assert front.stat("upstream.parent.upper.tls.handshake_fail.other") == 1


def test_an_https_parent_silent_in_the_handshake_times_out_within_the_connect_timeout(
        start_sluice, py_origin, certs):
    import socket
    import time
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the connect; nobody ever reads the ClientHello
    try:
        front = start_sluice(router={"connect_timeout": "0.5s"}, extra_short=parents_yaml(
            [{"name": "upper", "address": f"127.0.0.1:{silent.getsockname()[1]}",
              "protocol": "https", "ca_file": str(certs["ca"])}], [{"parents": '["upper"]'}]))
        start = time.monotonic()
        r = get(front, py_origin.url("/hello"))
        assert r.stdout.endswith(b"\n504"), r.describe()
        assert time.monotonic() - start < 5, "the handshake was not bounded by connect_timeout"
        assert front.stat("upstream.parent.upper.failures") == 1
        assert front.stat("upstream.cx_connect_timeout") == 1
    finally:
        silent.close()


@pytest.fixture(scope="module")
def squid_tls(certs):
    if not SQUID.exists():
        pytest.skip("squid is not installed")
    s = Squid(certs=certs["dir"], user=SQUID_USER, password=SQUID_PASSWORD)
    yield s
    s.stop()


def test_squid_https_port_as_a_parent(start_sluice, squid_tls, certs, py_origin):
    s = start_sluice(extra_short=parents_yaml(
        [{"name": "squid", "address": f"127.0.0.1:{squid_tls.tls_port}", "protocol": "https",
          "ca_file": str(certs["ca"]), "server_name": "localhost",
          "username": SQUID_USER, "password": SQUID_PASSWORD}], [{"parents": '["squid"]'}]))
    r = get(s, py_origin.url("/hello"))
    assert r.stdout.startswith(b"hello") and r.stdout.endswith(b"\n200"), r.describe()
    r = tunnel_get(s, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n200 200"), r.describe()
    assert s.stat("upstream.parent.squid.requests") == 2
    assert s.stat("upstream.parent.squid.failures") == 0
    assert s.stat("upstream.parent.squid.tls.handshakes") == 2
    connect_line = rf"CONNECT 127\.0\.0\.1:{py_origin.port} {SQUID_USER}"
    log = squid_logged(squid_tls, connect_line)
    assert f"http://127.0.0.1:{py_origin.port}/hello" in log, log
    assert re.search(connect_line, log), log


def test_bad_parent_config_is_refused_with_its_path(tmp_path):
    from sluice_proc import run_cli, short_config
    from helpers import free_port
    cases = [
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "gopher"}],
         [{"parents": '["p"]'}], "parents[0].protocol"),
        ([{"name": "p", "address": "no-port", "protocol": "http"}],
         [{"parents": '["p"]'}], "parents[0].address"),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "http"}],
         [{"parents": '["q"]'}], "routes[0].parents[0]"),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "http"}],
         [{"parents": '["p"]', "groups": '["nobody"]'}], "routes[0].groups[0]"),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "http"}],
         [{"parents": '["p"]', "balance": "random"}], "routes[0].balance"),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "https",
           "ca_file": str(tmp_path / "missing.pem")}],
         [{"parents": '["p"]'}], "parents[0].ca_file: cannot read"),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "https",
           "ca_file": str(tmp_path / "c.yaml")}],
         [{"parents": '["p"]'}], "parents[0].ca_file: "),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "https",
           "server_name": "not a name"}],
         [{"parents": '["p"]'}], "parents[0].server_name"),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "http",
           "ca_file": "/etc/ssl/certs/ca-certificates.crt"}],
         [{"parents": '["p"]'}], "parents[0].ca_file: only for https parents"),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "socks5",
           "server_name": "localhost"}],
         [{"parents": '["p"]'}], "parents[0].server_name: only for https parents"),
        ([{"name": "p", "address": "127.0.0.1:3128", "protocol": "http", "proxy_protocol": "v3"}],
         [{"parents": '["p"]'}], "parents[0].proxy_protocol"),
    ]
    for parents, routes, path in cases:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(short_config(free_port(), free_port(), "k" * 32, 1,
                                    parents_yaml(parents, routes)))
        r = run_cli("check", "-c", cfg)
        assert r.returncode != 0, (path, r.stdout, r.stderr)
        assert path in r.stderr, (path, r.stderr)


def test_http2_streams_through_squid(start_sluice, squid, py_origin):
    from origins import EchoServer
    from test_http2 import H2Client, use_http2
    echo = EchoServer()
    try:
        s = start_sluice(extra_short=parents_yaml([squid_parent(squid)],
                                                  [{"parents": '["squid"]'}]),
                         patch=use_http2())
        c = H2Client(s)
        sid = c.open("GET", f"127.0.0.1:{py_origin.port}", "/hello")
        r = c.response(sid)
        assert r.status == 200 and bytes(r.body) == b"hello from the python origin\n", vars(r)
        # A CONNECT stream becomes a CONNECT to the parent, and its bytes go both ways.
        sid = c.open("CONNECT", echo.authority, end=False)
        assert c.wait(lambda: c.streams[sid].status == 200), vars(c.streams[sid])
        c.send_body(sid, b"ping through squid", end=False)
        assert c.wait(lambda: bytes(c.streams[sid].body) == b"ping through squid")
        c.close()
        assert s.stat("upstream.parent.squid.requests") == 2
        log = squid_logged(squid, re.escape(f"http://127.0.0.1:{py_origin.port}/hello"))
        assert f"http://127.0.0.1:{py_origin.port}/hello" in log, log
    finally:
        echo.stop()


def test_kept_alive_connections_to_parents(start_sluice, squid, dante, py_origin, sluice_origin):
    s = start_sluice(extra_short=parents_yaml(
        [squid_parent(squid),
         {"name": "dante", "address": f"127.0.0.1:{dante.port}", "protocol": "socks5",
          "username": DANTE_USER, "password": DANTE_PASSWORD}],
        [{"ports": f'["{py_origin.port}"]', "parents": '["squid"]'},
         {"ports": f'["{sluice_origin.port}"]', "parents": '["dante"]'}]))
    # Through the HTTP parent, one connection serves request after request.
    for _ in range(3):
        r = get(s, py_origin.url("/hello"))
        assert r.stdout.endswith(b"\n200"), r.describe()
    assert s.stat("upstream.pool_reuse") == 2
    assert s.stat("upstream.cx_connect_total") == 1
    # Through the SOCKS5 parent, its tunnel to this origin is kept for the next request to it.
    for _ in range(2):
        r = get(s, sluice_origin.url + "/bytes/10")
        assert r.stdout.endswith(b"\n200"), r.describe()
    assert s.stat("upstream.pool_reuse") == 3
    assert s.stat("upstream.cx_connect_total") == 2
    # A direct request never gets a connection made through a parent.
    s2 = start_sluice(extra_short=parents_yaml(
        [squid_parent(squid)], [{"ports": f'["{py_origin.port}"]', "parents": '["squid"]'}]))
    r = get(s2, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n200"), r.describe()
    r = get(s2, f"http://127.0.0.1:{squid.port}/")  # Squid itself, as an origin: direct
    assert s2.stat("upstream.pool_reuse") == 0
    assert s2.stat("upstream.cx_connect_total") == 2


def test_routes_by_host_pattern(start_sluice, squid, py_origin):
    s = start_sluice(extra_short=parents_yaml(
        [squid_parent(squid)], [{"hosts": '[".localhost"]', "parents": '["squid"]'}]))
    r = get(s, f"http://localhost:{py_origin.port}/hello")
    assert r.stdout.endswith(b"\n200"), r.describe()
    # A host pattern never matches a destination given as an address: direct.
    r = get(s, py_origin.url("/hello"))
    assert r.stdout.endswith(b"\n200"), r.describe()
    assert s.stat("upstream.parent.squid.requests") == 1


def no_local_dns(full):
    """sluice's own lookups find nothing: no hosts file, a name server that never answers."""
    full["dns"] = {"resolvers": ["127.0.0.1:9"], "ignore_hosts_file": True, "timeout": "1s"}


def test_resolve_parent_sends_the_name_to_the_parent(start_sluice, squid, py_origin):
    s = start_sluice(extra_short=parents_yaml(
        [squid_parent(squid)],
        [{"hosts": '["localhost"]', "parents": '["squid"]', "resolve": "parent"}]),
        patch=no_local_dns)
    r = get(s, f"http://localhost:{py_origin.port}/hello")
    assert r.stdout.startswith(b"hello") and r.stdout.endswith(b"\n200"), r.describe()
    r = tunnel_get(s, f"http://localhost:{py_origin.port}/hello")
    assert r.stdout.endswith(b"\n200 200"), r.describe()
    log = squid_logged(squid, f"CONNECT localhost:{py_origin.port}")
    assert f"http://localhost:{py_origin.port}/hello" in log, log
    assert f"CONNECT localhost:{py_origin.port}" in log, log
    assert s.stat("upstream.dns_fail") == 0
    # The port is still the destination guard's: 25 is not an allowed port.
    r = get(s, "http://localhost:25/")
    assert r.stdout.endswith(b"\n403"), r.describe()


def test_without_resolve_parent_sluice_must_resolve(start_sluice, squid, py_origin):
    s = start_sluice(extra_short=parents_yaml(
        [squid_parent(squid)], [{"hosts": '["localhost"]', "parents": '["squid"]'}]),
        patch=no_local_dns)
    r = get(s, f"http://localhost:{py_origin.port}/hello")
    assert r.stdout.endswith(b"\n502"), r.describe()
    assert s.stat("upstream.parent.squid.requests") == 0


def test_resolve_parent_with_rules_that_need_addresses_is_refused(start_sluice, squid, py_origin):
    groups = ("policy:\n  groups:\n    - name: default\n      rules:\n"
              "        - {action: deny, cidrs: [\"10.0.0.0/8\"]}\n")
    s = start_sluice(extra_short=groups + parents_yaml(
        [squid_parent(squid)],
        [{"hosts": '["localhost"]', "parents": '["squid"]', "resolve": "parent"}]),
        patch=no_local_dns)
    r = get(s, f"http://localhost:{py_origin.port}/hello")
    assert r.stdout.endswith(b"\n403"), r.describe()
    assert s.stat("upstream.parent.squid.requests") == 0


# ---------------------------------------------------------------------------------------------
# UDP through a SOCKS5 parent


def socks5_front(start_sluice, parents, routes):
    """A sluice with a SOCKS5 port in front of `parents`."""
    port = free_port()
    s = start_sluice(extra_short=f'socks5:\n  listen: "127.0.0.1:{port}"\n' +
                     parents_yaml(parents, routes))
    s.socks5_addr = ("127.0.0.1", port)
    return s


def udp_association(s):
    """(control connection, client UDP socket, sluice's relay address)."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    u.settimeout(3)
    c = Socks5Client(s.socks5_addr)
    c.login(s.key)
    rep, relay = c.request(UDP_ASSOCIATE, "127.0.0.1", u.getsockname()[1])
    assert rep == SUCCEEDED
    return c, u, relay


def dante_parent(dante, **more):
    return {"name": "dante", "address": f"127.0.0.1:{dante.port}", "protocol": "socks5",
            "username": DANTE_USER, "password": DANTE_PASSWORD, **more}


def test_udp_through_a_socks5_parent(start_sluice, dante):
    echo = UdpEcho()
    s = socks5_front(start_sluice, [dante_parent(dante)], [{"parents": '["dante"]'}])
    c, u, relay = udp_association(s)
    try:
        for i in range(3):
            # A name: sluice resolves and checks it, and asks Dante for the checked address.
            host = "localhost" if i == 0 else "127.0.0.1"
            u.sendto(b"\0\0\0" + encode_addr(host, echo.port) + b"ping-%d" % i, relay)
            data, src = u.recvfrom(65536)
            assert src == relay
            # Back as from the destination.
            assert parse_udp(data) == (0, "127.0.0.1", echo.port, b"echo:ping-%d" % i)
        # The echo saw Dante's relay, never sluice's socket nor the client.
        peers = {peer for _, peer in echo.received}
        assert len(peers) == 1, peers
        assert relay[1] not in {p[1] for p in peers} and u.getsockname()[1] not in \
            {p[1] for p in peers}, (peers, relay)
        assert s.stat("socks5.socks5.udp_parent_associations") == 1
        assert s.stat("socks5.socks5.udp_parent_tx") == 3
        assert s.stat("socks5.socks5.udp_parent_rx") == 3
        assert s.stat("upstream.parent.dante.requests") == 1
        assert s.stat("upstream.parent.dante.failures") == 0
        # Dante logged the association, for sluice's credentials.
        log = dante.log()
        assert re.search(rf"udpassociate \[: username%{DANTE_USER}@", log), log
    finally:
        c.close()
        u.close()
        echo.stop()


def test_udp_fails_over_to_the_next_socks5_parent(start_sluice, dante):
    echo = UdpEcho()
    with closed_port_socket() as closed:
        down = {"name": "down", "address": f"127.0.0.1:{closed.getsockname()[1]}",
                "protocol": "socks5"}
        s = socks5_front(start_sluice, [down, dante_parent(dante)],
                         [{"parents": '["down", "dante"]'}])
        c, u, relay = udp_association(s)
        try:
            u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", echo.port) + b"ping", relay)
            data, _ = u.recvfrom(65536)
            assert parse_udp(data)[3] == b"echo:ping"
            assert s.stat("upstream.parent.down.failures") == 1
            assert s.stat("upstream.parent.dante.requests") == 1
        finally:
            c.close()
            u.close()
            echo.stop()


def test_udp_routed_to_an_http_parent_is_dropped_and_counted(start_sluice, py_origin):
    echo = UdpEcho()
    # Never dialled: an HTTP parent cannot carry datagrams.
    http = {"name": "web", "address": f"127.0.0.1:{py_origin.port}", "protocol": "http"}
    s = socks5_front(start_sluice, [http], [{"parents": '["web"]'}])
    c, u, relay = udp_association(s)
    try:
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", echo.port) + b"ping", relay)
        u.settimeout(0.5)
        with pytest.raises(socket.timeout):
            u.recvfrom(65536)
        assert echo.received == []
        assert s.stat("socks5.socks5.udp_dropped_no_udp_parent") == 1
        assert s.stat("upstream.parent.web.requests") == 0
    finally:
        c.close()
        u.close()
        echo.stop()


def test_udp_parent_association_that_cannot_be_made_drops_and_counts(start_sluice):
    echo = UdpEcho()
    with closed_port_socket() as closed:
        down = {"name": "down", "address": f"127.0.0.1:{closed.getsockname()[1]}",
                "protocol": "socks5"}
        s = socks5_front(start_sluice, [down], [{"parents": '["down"]'}])
        c, u, relay = udp_association(s)
        try:
            u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", echo.port) + b"ping", relay)
            u.settimeout(0.5)
            with pytest.raises(socket.timeout):
                u.recvfrom(65536)
            assert s.stat("socks5.socks5.udp_dropped_parent") == 1
            assert s.stat("upstream.parent.down.failures") == 1
            assert echo.received == []
        finally:
            c.close()
            u.close()
            echo.stop()


class ScriptedUdpParent:
    """A SOCKS5 parent (no authentication) that grants one UDP association, answers each
    datagram as its destination would (header kept, payload prefixed), and closes the control
    connection when told to."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.settimeout(0.2)
        self.control = None
        self.received = []
        self._stop = False
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._tcp, self._udp)]
        for t in self.threads:
            t.start()

    def _tcp(self):
        self.listener.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            self.control = conn
            conn.recv(3)  # 05 01 00
            conn.sendall(b"\x05\x00")
            self.request = conn.recv(10)
            conn.sendall(b"\x05\x00\x00" + encode_addr(*self.udp.getsockname()))

    def _udp(self):
        while not self._stop:
            try:
                data, peer = self.udp.recvfrom(65536)
            except (socket.timeout, OSError):
                continue
            self.received.append(data)
            frag, host, port, payload = parse_udp(data)
            self.udp.sendto(b"\0\0\0" + encode_addr(host, port) + b"parent:" + payload, peer)

    def close_control(self):
        self.control.close()

    def stop(self):
        self._stop = True
        for t in self.threads:
            t.join(1)
        self.listener.close()
        self.udp.close()


def test_udp_parent_association_ends_with_its_control_connection(start_sluice):
    parent = ScriptedUdpParent()
    s = socks5_front(start_sluice, [{"name": "scripted", "address": f"127.0.0.1:{parent.port}",
                                     "protocol": "socks5"}], [{"parents": '["scripted"]'}])
    c, u, relay = udp_association(s)
    try:
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", 9999) + b"one", relay)
        data, _ = u.recvfrom(65536)
        assert parse_udp(data) == (0, "127.0.0.1", 9999, b"parent:one")
        # UDP ASSOCIATE, sluice's source not named.
        assert parent.request == b"\x05\x03\x00\x01\0\0\0\0\0\0", parent.request
        parent.close_control()
        deadline = time.time() + 3
        while time.time() < deadline and s.stat("socks5.socks5.udp_dropped_parent") == 0:
            u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", 9999) + b"two", relay)
            time.sleep(0.1)
        assert s.stat("socks5.socks5.udp_dropped_parent") >= 1
        # After the close, nothing more went to the parent's relay.
        sent = s.stat("socks5.socks5.udp_parent_tx")
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", 9999) + b"three", relay)
        time.sleep(0.2)
        assert s.stat("socks5.socks5.udp_parent_tx") == sent
        assert not any(b"three" in d for d in parent.received)
        # 5 s after the end, a datagram makes a new association.
        time.sleep(5)
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", 9999) + b"four", relay)
        data, _ = u.recvfrom(65536)
        assert parse_udp(data) == (0, "127.0.0.1", 9999, b"parent:four")
        assert s.stat("socks5.socks5.udp_parent_associations") == 2
    finally:
        c.close()
        u.close()
        parent.stop()


# ---------------------------------------------------------------------------------------------
# PROXY protocol toward parents


def pp_parent(start_sluice, tmp_path, name, extra=""):
    """A sluice that reads PROXY protocol from loopback and logs every request's client."""
    log = tmp_path / f"{name}-access.log"
    parent = start_sluice(extra_short=extra + "proxy_protocol:\n  trusted_cidrs: [127.0.0.1/32]\n"
                          f"access_log:\n  mode: all\n  format: json\n  path: {log}\n")
    parent.access_log = log
    return parent


def parent_records(parent, count):
    deadline = time.time() + 5
    lines = []
    while time.time() < deadline:
        lines = parent.access_log.read_text().splitlines() if parent.access_log.exists() else []
        if len(lines) >= count:
            break
        time.sleep(0.05)
    return [json.loads(line) for line in lines]


def raw_client_request(front, request):
    """Sends `request` from a socket whose port is known; (its address, the answer)."""
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.bind(("127.0.0.1", 0))
    c.settimeout(5)
    c.connect(("127.0.0.1", front.port))
    c.sendall(request)
    answer = b""
    while True:  # every request says Connection: close
        chunk = c.recv(65536)
        if not chunk:
            break
        answer += chunk
    address = "%s:%d" % c.getsockname()
    c.close()
    return address, answer


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_proxy_protocol_to_a_parent_names_the_original_client(start_sluice, py_origin, tmp_path,
                                                               version):
    parent = pp_parent(start_sluice, tmp_path, "parent")
    front = start_sluice(extra_short=parents_yaml(
        [{"name": "upper", "address": f"127.0.0.1:{parent.port}", "protocol": "http",
          "username": "front", "password": parent.key, "proxy_protocol": version}],
        [{"parents": '["upper"]'}]))
    auth = basic_auth(front.key)
    url = py_origin.url("/hello")
    clients = []
    # Two clients, one after the other: the second must not get the first's connection (and
    # with it the first's header).
    for _ in range(2):
        address, answer = raw_client_request(
            front, f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1:{py_origin.port}\r\n"
                   f"Proxy-Authorization: {auth}\r\nConnection: close\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 200") and b"hello" in answer, answer
        clients.append(address)
    # A tunnel too.
    authority = f"127.0.0.1:{py_origin.port}"
    address, answer = raw_client_request(
        front, f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
               f"Proxy-Authorization: {auth}\r\n\r\n"
               f"GET /hello HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200"), answer
    clients.append(address)
    records = parent_records(parent, 3)
    assert [r["client"] for r in records] == clients, (records, clients)
    assert parent.stat("listener.http.proxy_protocol.accepted") == 3
    assert front.stat("upstream.parent.upper.failures") == 0


def test_proxy_protocol_to_an_https_parent_goes_before_tls(start_sluice, certs, py_origin,
                                                           tmp_path):
    d = certs["dir"]
    tls_port = free_port()
    parent = pp_parent(start_sluice, tmp_path, "tls-parent",
                       extra=f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                             f"  cert: {d / 'server-chain.pem'}\n  key: {d / 'server.key'}\n")
    parent.tls_port = tls_port
    front = start_sluice(extra_short=parents_yaml(
        [https_parent(parent, proxy_protocol="v2", ca_file=str(d / "ca.pem"))],
        [{"parents": '["upper"]'}]))
    auth = basic_auth(front.key)
    url = py_origin.url("/hello")
    address, answer = raw_client_request(
        front, f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1:{py_origin.port}\r\n"
               f"Proxy-Authorization: {auth}\r\nConnection: close\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200") and b"hello" in answer, answer
    records = parent_records(parent, 1)
    assert [r["client"] for r in records] == [address], records
    assert parent.stat("listener.https.proxy_protocol.accepted") == 1



def test_round_robin_spreads_requests_over_the_parents(start_sluice, squid, py_origin):
    upper = start_sluice()
    s = start_sluice(extra_short=parents_yaml(
        [squid_parent(squid),
         {"name": "upper", "address": f"127.0.0.1:{upper.port}", "protocol": "http",
          "username": "front", "password": upper.key}],
        [{"parents": '["squid", "upper"]', "balance": "round_robin"}]))
    for _ in range(4):
        r = tunnel_get(s, py_origin.url("/hello"))
        assert r.stdout.endswith(b"\n200 200"), r.describe()
    assert s.stat("upstream.parent.squid.requests") == 2
    assert s.stat("upstream.parent.upper.requests") == 2
    assert upper.stat("http1.http.rq_connect") == 2
