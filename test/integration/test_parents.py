"""Parent proxies: sluice in front of real parents from Debian (Squid for HTTP and CONNECT,
Dante for SOCKS5 with username/password) and of another sluice, chosen by routes, with failover
and passive health. Every connection stays on loopback."""

import atexit
import re

import pytest

from helpers import basic_auth, closed_port_socket, curl, header_values
from peer_proxies import DANTE_PASSWORD, DANTE_USER, DANTED, SQUID, Dante, Squid, can_unshare, \
    kill_all

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
    log = squid.access_log()
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
    assert re.search(rf"CONNECT 127\.0\.0\.1:{py_origin.port} {SQUID_USER}", squid.access_log())


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
        log = squid.access_log()
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
