"""Rate and concurrency limits of policy groups and their keys (policy.groups[].limits and
key_limits) against the real binary, on every protocol: HTTP/1.1 requests, CONNECT tunnels,
WebSocket upgrades, HTTP/2 streams, SOCKS5 CONNECT, BIND and UDP ASSOCIATE. Over a limit: 429
with Retry-After and Proxy-Status (HTTP/1.1 and HTTP/2 alike), SOCKS5 reply 0x02. The state
(tokens, requests in flight) survives a reload, which applies new values to it."""

import secrets
import socket
import ssl
import threading
import time

import pytest
import yaml

from helpers import RawConnection, basic_auth, free_port
from origins import EchoServer
from sluice_proc import find_typed_configs
from test_http2 import H2Client, use_http2
from test_socks5 import BIND, CONNECT, UDP_ASSOCIATE, Socks5Client
from ws_origin import WsOrigin

NOT_ALLOWED = 0x02


@pytest.fixture
def echo_server():
    s = EchoServer()
    yield s
    s.stop()


class Origin:
    """sluice-origin (a process of this module's own, so the counts of the session's shared
    Python origin are left alone): small GETs."""

    def __init__(self, o):
        self.port = o.port

    def url(self, path="/bytes/16"):
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture(scope="module")
def origin(sluice_origin):
    return Origin(sluice_origin)


@pytest.fixture
def ws_origin():
    origin = WsOrigin().start()
    yield origin
    origin.stop()


def start_limited(start_sluice, groups, keys, socks5=False, http2=False, tls=None, workers=1):
    """A sluice whose keys ({name: group}) belong to the given policy groups (a list of
    Group dicts). s.keys maps each name to its key; s.socks_addr is the SOCKS5 port's; with
    `tls` (the certs fixture) s.h2_socket() opens an HTTP/2 connection to its TLS port."""
    names = {name: secrets.token_urlsafe(18) for name in keys}
    socks_port = free_port()
    extra = f"socks5:\n  listen: 127.0.0.1:{socks_port}\n" if socks5 else ""
    if tls is not None:
        tls_port = free_port()
        d = tls["dir"]
        extra += (f"tls:\n  listen: 127.0.0.1:{tls_port}\n  cert: {d / 'server-chain.pem'}\n"
                  f"  key: {d / 'server.key'}\n")

    def patch(full):
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys"] = [{"name": n, "key": names[n], "group": g} for n, g in keys.items()]
        full["policy"] = {"groups": groups}
        if http2:
            use_http2()(full)

    s = start_sluice(workers=workers, extra_short=extra, patch=patch)
    s.keys = names
    s.socks_addr = ("127.0.0.1", socks_port)
    if tls is not None:
        ctx = ssl.create_default_context(cafile=str(tls["ca"]))
        ctx.set_alpn_protocols(["h2"])

        def h2_socket():
            raw = socket.create_connection(("127.0.0.1", tls_port), timeout=10)
            conn = ctx.wrap_socket(raw, server_hostname="localhost")
            assert conn.selected_alpn_protocol() == "h2"
            return conn
        s.h2_socket = h2_socket
    return s


def set_groups(s, groups):
    """Rewrites the running config's policy groups and reloads; returns the reload's answer."""
    full = yaml.safe_load(s.config_path.read_text())
    full["policy"] = {"groups": groups}
    s.config_path.write_text(yaml.safe_dump(full, sort_keys=False))
    return s.admin("/reload", method="POST", data=b"")


def get(conn, key, url):
    host = url.split("/")[2]
    conn.send(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n"
              f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode())
    return conn.read_response()


def connect_tunnel(s, key, authority):
    """(the connection, the response) of a CONNECT; the connection is the tunnel on a 200."""
    c = RawConnection(s.proxy_addr)
    c.send(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
           f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode())
    return c, c.read_response("CONNECT")


def echoes(c, payload=b"ping"):
    c.send(payload)
    got = b""
    while len(got) < len(payload):
        d = c.sock.recv(4096)
        if not d:
            return False
        got += d
    return got == payload


def assert_limited(resp, reason, retry_after=None):
    assert resp.status == 429, resp
    assert resp.reason == "Too Many Requests", resp
    after = resp.header("Retry-After")
    assert after is not None and int(after) >= 1, resp
    if retry_after is not None:
        assert int(after) == retry_after, resp
    assert resp.header("Proxy-Status") == \
        f'sluice; error=http_request_denied; details="{reason}"', resp
    assert resp.body == f"429 Too Many Requests: {reason}\n".encode(), resp


def wait_gauge(s, name, value, timeout=5.0):
    got = s.wait_stat(name, lambda v: v == value, timeout=timeout)
    assert got == value, f"{name} is {got}, not {value}"


# ---------------------------------------------------------------------------------------------
# rate


def hammer(s, key, url, seconds, threads=2):
    """Keep-alive clients asking as fast as they can for `seconds`: (statuses, elapsed)."""
    counts = {}
    lock = threading.Lock()
    start = time.monotonic()
    stop = start + seconds

    def run():
        mine = {}
        with RawConnection(s.proxy_addr) as c:
            while time.monotonic() < stop:
                status = get(c, key, url).status
                mine[status] = mine.get(status, 0) + 1
        with lock:
            for k, v in mine.items():
                counts[k] = counts.get(k, 0) + v

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return counts, time.monotonic() - start


def test_rate_is_held_within_ten_percent_over_ten_seconds(start_sluice, origin):
    # 20 requests per second, a bucket of 20: a client asking far faster gets the bucket, then
    # 20 a second.
    s = start_limited(start_sluice, [{"name": "team", "limits": {"requests_per_second": 20}}],
                      {"a": "team"})
    counts, elapsed = hammer(s, s.keys["a"], origin.url(), 10)
    expected = 20 + 20 * elapsed
    print(f"admitted {counts.get(200)} and refused {counts.get(429)} in {elapsed:.2f}s "
          f"(expected {expected:.1f})")
    assert set(counts) <= {200, 429}, counts
    assert counts.get(429, 0) > 5 * counts.get(200, 0), f"the client did not hammer: {counts}"
    assert abs(counts[200] - expected) <= 0.1 * expected, \
        f"{counts[200]} admitted in {elapsed:.2f}s, expected {expected:.0f} +-10%"
    assert s.stat("policy.group.team.rate_limited") == counts[429]
    assert s.stat("policy.key.a.rate_limited") == counts[429]
    assert s.stat("policy.group.team.key_rate_limited") == 0


def test_workers_share_one_bucket(start_sluice, origin):
    # Two workers, connections spread between them by SO_REUSEPORT: 10 tokens in all.
    s = start_limited(start_sluice,
                      [{"name": "g", "limits": {"requests_per_second": 0.01, "burst": 10,
                                                "max_concurrent": 1000}}],
                      {"a": "g"}, workers=2)
    statuses = []
    conns = [RawConnection(s.proxy_addr) for _ in range(16)]
    for _ in range(2):
        for c in conns:
            statuses.append(get(c, s.keys["a"], origin.url()).status)
    for c in conns:
        c.close()
    assert statuses.count(200) == 10, statuses
    assert statuses.count(429) == 22, statuses
    wait_gauge(s, "policy.group.g.concurrent", 0)


def test_an_http1_request_over_the_rate_gets_429_with_retry_after(start_sluice, origin):
    s = start_limited(start_sluice, [{"name": "slow", "limits": {"requests_per_second": 0.2}}],
                      {"a": "slow"})
    key = s.keys["a"]
    with RawConnection(s.proxy_addr) as c:
        assert get(c, key, origin.url()).status == 200
        # A token every 5 s: the next one in (just under) 5.
        assert_limited(get(c, key, origin.url()), "request rate limit of group slow",
                       retry_after=5)
        # The connection stays open for the next request.
        assert_limited(get(c, key, origin.url()), "request rate limit of group slow")
    # A CONNECT counts the same.
    c, resp = connect_tunnel(s, key, f"127.0.0.1:{origin.port}")
    assert_limited(resp, "request rate limit of group slow")
    c.close()
    assert s.stat("policy.group.slow.rate_limited") == 3
    assert s.stat("http1.http.rs_4xx") == 3


def test_fractional_rate_refills_a_token_at_a_time(start_sluice, origin):
    s = start_limited(start_sluice,
                      [{"name": "g", "limits": {"requests_per_second": 2, "burst": 1}}],
                      {"a": "g"})
    key = s.keys["a"]
    with RawConnection(s.proxy_addr) as c:
        assert get(c, key, origin.url()).status == 200
        assert get(c, key, origin.url()).status == 429
        time.sleep(0.55)
        assert get(c, key, origin.url()).status == 200
        assert get(c, key, origin.url()).status == 429


def test_http2_streams_over_the_rate_get_429_on_the_stream(start_sluice, origin):
    s = start_limited(start_sluice,
                      [{"name": "g", "limits": {"requests_per_second": 0.01, "burst": 3}}],
                      {"a": "g"}, http2=True)
    c = H2Client(s)
    c.key = s.keys["a"]
    sids = [c.open("GET", f"127.0.0.1:{origin.port}", "/bytes/16") for _ in range(5)]
    statuses = []
    for sid in sids:
        st = c.response(sid)
        assert st.reset is None, f"stream {sid} reset ({st.reset}), not answered"
        statuses.append(st.status)
        if st.status == 429:
            assert int(st.headers["retry-after"]) >= 90, st.headers  # a token every 100 s
            assert st.headers["proxy-status"] == \
                'sluice; error=http_request_denied; details="request rate limit of group g"'
            assert bytes(st.body) == b"429 Too Many Requests: request rate limit of group g\n"
    assert sorted(statuses) == [200, 200, 200, 429, 429], statuses
    # The connection carries on: no GOAWAY, and a CONNECT stream is refused the same way.
    sid = c.open("CONNECT", f"127.0.0.1:{origin.port}", end=False)
    assert c.response(sid).status == 429
    assert c.goaway is None and not c.closed
    assert s.stat("policy.group.g.rate_limited") == 3
    c.close()


def test_socks5_commands_over_the_rate_get_reply_0x02(start_sluice, origin):
    s = start_limited(start_sluice,
                      [{"name": "g", "limits": {"requests_per_second": 0.01, "burst": 3}}],
                      {"a": "g"}, socks5=True)
    key = s.keys["a"]
    clients = []
    # CONNECT, UDP ASSOCIATE and BIND each take a token.
    commands = ((CONNECT, origin.port), (UDP_ASSOCIATE, 0), (BIND, 40000))
    for cmd, port in commands:
        c = Socks5Client(s.socks_addr)
        c.login(key)
        rep, _ = c.request(cmd, "127.0.0.1", port)
        assert rep == 0, f"command {cmd} refused with {rep}"
        clients.append(c)
    for cmd, port in commands:
        with Socks5Client(s.socks_addr) as c:
            c.login(key)  # authentication is not a command: it takes no token
            rep, _ = c.request(cmd, "127.0.0.1", port)
            assert rep == NOT_ALLOWED, f"command {cmd} answered {rep}"
            assert c.closed_by_peer()
    assert s.stat("socks5.socks5.reply_not_allowed") == 3
    assert s.stat("policy.group.g.rate_limited") == 3
    for c in clients:
        c.close()


# ---------------------------------------------------------------------------------------------
# concurrency


def test_max_concurrent_tunnels_the_next_is_refused_until_one_closes(start_sluice, echo_server):
    s = start_limited(start_sluice, [{"name": "g", "limits": {"max_concurrent": 3}}],
                      {"a": "g"})
    key = s.keys["a"]
    tunnels = []
    for _ in range(3):
        c, resp = connect_tunnel(s, key, echo_server.authority)
        assert resp.status == 200, resp
        tunnels.append(c)
    wait_gauge(s, "policy.group.g.concurrent", 3)
    c, resp = connect_tunnel(s, key, echo_server.authority)
    assert_limited(resp, "concurrency limit of group g", retry_after=1)
    c.close()
    # The open ones still carry bytes; one closes, and the next is admitted.
    assert all(echoes(t) for t in tunnels)
    tunnels.pop().close()
    wait_gauge(s, "policy.group.g.concurrent", 2)
    c, resp = connect_tunnel(s, key, echo_server.authority)
    assert resp.status == 200, resp
    assert echoes(c)
    tunnels.append(c)
    assert s.stat("policy.group.g.concurrency_limited") == 1
    for t in tunnels:
        t.close()
    wait_gauge(s, "policy.group.g.concurrent", 0)


def test_every_kind_of_tunnel_holds_a_place_for_its_life(start_sluice, certs, echo_server,
                                                         ws_origin, origin):
    """An HTTP CONNECT, a WebSocket, an HTTP/2 CONNECT stream, SOCKS5 CONNECT, BIND and UDP
    ASSOCIATE hold a place each for as long as they last; a keep-alive request holds one only
    while it is in flight; a full group refuses every kind; each gives its place back when it
    ends."""
    s = start_limited(start_sluice, [{"name": "g", "limits": {"max_concurrent": 7}}],
                      {"a": "g"}, socks5=True, tls=certs)
    key = s.keys["a"]
    held = []
    c, resp = connect_tunnel(s, key, echo_server.authority)
    assert resp.status == 200
    held.append(c)
    ws = RawConnection(s.proxy_addr)
    ws.send((f"GET ws://127.0.0.1:{ws_origin.port}/echo HTTP/1.1\r\n"
             f"Host: 127.0.0.1:{ws_origin.port}\r\nUpgrade: websocket\r\n"
             f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             f"Sec-WebSocket-Version: 13\r\nProxy-Authorization: {basic_auth(key)}\r\n\r\n"
             ).encode())
    assert ws.read_response(skip_interim=False).status == 101
    held.append(ws)
    h2 = H2Client(s)
    h2.key = key
    sid = h2.open("CONNECT", echo_server.authority, end=False)
    assert h2.wait(lambda: h2.streams[sid].status == 200)
    for cmd, port in ((CONNECT, echo_server.port), (BIND, 40000), (UDP_ASSOCIATE, 0)):
        sc = Socks5Client(s.socks_addr)
        sc.login(key)
        rep, _ = sc.request(cmd, "127.0.0.1", port)
        assert rep == 0, f"command {cmd} refused with {rep}"
        held.append(sc)
    wait_gauge(s, "policy.group.g.concurrent", 6)
    # A keep-alive request takes the seventh place only while it is in flight.
    with RawConnection(s.proxy_addr) as idle:
        for _ in range(3):
            assert get(idle, key, origin.url()).status == 200
            wait_gauge(s, "policy.group.g.concurrent", 6)
        c, resp = connect_tunnel(s, key, echo_server.authority)
        assert resp.status == 200
        held.append(c)
        wait_gauge(s, "policy.group.g.concurrent", 7)
        # Full: a request on the idle keep-alive connection, a new tunnel, an HTTP/2 stream, a
        # SOCKS5 command are all refused.
        assert_limited(get(idle, key, origin.url()), "concurrency limit of group g")
    c, resp = connect_tunnel(s, key, echo_server.authority)
    assert resp.status == 429
    c.close()
    refused = h2.open("GET", f"127.0.0.1:{origin.port}", "/bytes/16")
    assert h2.response(refused).status == 429
    with Socks5Client(s.socks_addr) as sc:
        sc.login(key)
        assert sc.request(UDP_ASSOCIATE, "127.0.0.1", 0)[0] == NOT_ALLOWED
    assert s.stat("policy.group.g.concurrency_limited") == 4
    wait_gauge(s, "policy.group.g.concurrent", 7)
    # Each gives its place back as it closes.
    h2.close()
    wait_gauge(s, "policy.group.g.concurrent", 6)
    for i, h in enumerate(held):
        h.close()
        wait_gauge(s, "policy.group.g.concurrent", len(held) - i - 1)


def test_http2_streams_each_hold_a_place(start_sluice, echo_server, origin):
    s = start_limited(start_sluice, [{"name": "g", "limits": {"max_concurrent": 2}}],
                      {"a": "g"}, http2=True)
    c = H2Client(s)
    c.key = s.keys["a"]
    t1 = c.open("CONNECT", echo_server.authority, end=False)
    t2 = c.open("CONNECT", echo_server.authority, end=False)
    assert c.wait(lambda: c.streams[t1].status == 200 and c.streams[t2].status == 200)
    wait_gauge(s, "policy.group.g.concurrent", 2)
    refused = c.open("GET", f"127.0.0.1:{origin.port}", "/bytes/16")
    st = c.response(refused)
    assert st.status == 429 and st.headers["retry-after"] == "1", st.headers
    assert st.headers["proxy-status"] == \
        'sluice; error=http_request_denied; details="concurrency limit of group g"'
    # A stream the client resets gives its place back.
    c.conn.reset_stream(t1)
    c.send()
    wait_gauge(s, "policy.group.g.concurrent", 1)
    ok = c.open("GET", f"127.0.0.1:{origin.port}", "/bytes/16")
    assert c.response(ok).status == 200
    wait_gauge(s, "policy.group.g.concurrent", 1)
    c.close()
    wait_gauge(s, "policy.group.g.concurrent", 0)


def test_a_place_is_given_back_however_the_request_ends(start_sluice, origin, py_origin):
    """Served, refused by a later filter, the destination refusing the connect, the client
    leaving while the origin takes its time, and a tunnel of a key a reload revokes."""
    s = start_limited(start_sluice, [{"name": "g", "limits": {"max_concurrent": 1}}],
                      {"a": "g", "b": "g"})
    key = s.keys["a"]
    with RawConnection(s.proxy_addr) as c:
        assert get(c, key, origin.url()).status == 200
        # Port 25 is refused by the destination guard, after admission.
        assert get(c, key, "http://127.0.0.1:25/").status == 403
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        assert get(c, key, f"http://127.0.0.1:{port}/").status == 502
        closed.close()
    wait_gauge(s, "policy.group.g.concurrent", 0)
    # The client leaves while the origin takes its time.
    gone = RawConnection(s.proxy_addr)
    gone.send(f"GET {py_origin.url('/slow?s=3')} HTTP/1.1\r\n"
              f"Host: 127.0.0.1:{py_origin.port}\r\n"
              f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode())
    wait_gauge(s, "policy.group.g.concurrent", 1)
    with RawConnection(s.proxy_addr) as other:
        assert get(other, s.keys["b"], origin.url()).status == 429
    gone.close()
    wait_gauge(s, "policy.group.g.concurrent", 0)
    # A tunnel of a key a reload takes away.
    c, resp = connect_tunnel(s, key, f"127.0.0.1:{py_origin.port}")
    assert resp.status == 200
    wait_gauge(s, "policy.group.g.concurrent", 1)
    full = yaml.safe_load(s.config_path.read_text())
    for auth in find_typed_configs(full, ".AuthConfig"):
        auth["api_keys"] = [k for k in auth["api_keys"] if k["name"] != "a"]
    s.config_path.write_text(yaml.safe_dump(full, sort_keys=False))
    assert s.admin("/reload", method="POST", data=b"").status == 200
    assert c.is_closed_by_peer(wait=3)
    c.close()
    wait_gauge(s, "policy.group.g.concurrent", 0)
    with RawConnection(s.proxy_addr) as other:
        assert get(other, s.keys["b"], origin.url()).status == 200


def test_a_keep_alive_connection_between_requests_holds_no_place(start_sluice, origin):
    s = start_limited(start_sluice, [{"name": "g", "limits": {"max_concurrent": 1}}],
                      {"a": "g"})
    key = s.keys["a"]
    conns = [RawConnection(s.proxy_addr) for _ in range(5)]
    for _ in range(3):
        for c in conns:
            assert get(c, key, origin.url()).status == 200
    for c in conns:
        c.close()
    assert s.stat("policy.group.g.concurrency_limited") == 0


# ---------------------------------------------------------------------------------------------
# per key and per group


def test_keys_of_a_group_share_its_limits_and_key_limits_are_each_keys_own(start_sluice,
                                                                           origin):
    groups = [{"name": "team",
               "limits": {"requests_per_second": 0.01, "burst": 4},
               "key_limits": {"requests_per_second": 0.01, "burst": 3}}]
    s = start_limited(start_sluice, groups, {"a": "team", "b": "team"})

    def admitted(name, n):
        ok = 0
        with RawConnection(s.proxy_addr) as c:
            for _ in range(n):
                resp = get(c, s.keys[name], origin.url())
                ok += resp.status == 200
                last = resp
        return ok, last

    ok, last = admitted("a", 5)
    assert ok == 3  # the key's own burst
    assert_limited(last, "request rate limit of key a")
    ok, last = admitted("b", 5)
    assert ok == 1  # what the group has left of its 4
    assert_limited(last, "request rate limit of group team")
    assert s.stat("policy.key.a.rate_limited") == 2
    assert s.stat("policy.key.b.rate_limited") == 4
    assert s.stat("policy.group.team.rate_limited") == 4
    assert s.stat("policy.group.team.key_rate_limited") == 2


def test_key_limits_alone_leave_each_key_its_own_share(start_sluice, echo_server):
    groups = [{"name": "team", "key_limits": {"max_concurrent": 1}}]
    s = start_limited(start_sluice, groups, {"a": "team", "b": "team"})
    ta, resp = connect_tunnel(s, s.keys["a"], echo_server.authority)
    assert resp.status == 200
    c, resp = connect_tunnel(s, s.keys["a"], echo_server.authority)
    assert_limited(resp, "concurrency limit of key a")
    c.close()
    tb, resp = connect_tunnel(s, s.keys["b"], echo_server.authority)
    assert resp.status == 200
    wait_gauge(s, "policy.key.a.concurrent", 1)
    wait_gauge(s, "policy.key.b.concurrent", 1)
    assert s.stat("policy.group.team.key_concurrency_limited") == 1
    ta.close()
    tb.close()
    wait_gauge(s, "policy.key.a.concurrent", 0)


def test_groups_are_separate_and_unlimited_groups_are_untouched(start_sluice, origin):
    groups = [{"name": "tight", "limits": {"requests_per_second": 0.01, "burst": 1}},
              {"name": "free"}]
    s = start_limited(start_sluice, groups, {"a": "tight", "b": "free"})
    with RawConnection(s.proxy_addr) as c:
        statuses = [get(c, s.keys["a"], origin.url()).status for _ in range(3)]
        assert statuses == [200, 429, 429]
        statuses = [get(c, s.keys["b"], origin.url()).status for _ in range(20)]
        assert statuses == [200] * 20
    assert "policy.group.free.rate_limited" not in s.stats()


# ---------------------------------------------------------------------------------------------
# reload


def test_a_reload_carries_the_places_held_and_applies_a_new_maximum(start_sluice, echo_server):
    s = start_limited(start_sluice, [{"name": "g", "limits": {"max_concurrent": 2}}],
                      {"a": "g"})
    key = s.keys["a"]
    tunnels = []
    for _ in range(2):
        c, resp = connect_tunnel(s, key, echo_server.authority)
        assert resp.status == 200
        tunnels.append(c)
    r = set_groups(s, [{"name": "g", "limits": {"max_concurrent": 3}}])
    assert r.status == 200, r.text
    # The two open tunnels count against the new maximum: one more, not three.
    c, resp = connect_tunnel(s, key, echo_server.authority)
    assert resp.status == 200
    tunnels.append(c)
    c, resp = connect_tunnel(s, key, echo_server.authority)
    assert resp.status == 429
    c.close()
    # Lowered below what is open: refused until enough close.
    assert set_groups(s, [{"name": "g", "limits": {"max_concurrent": 1}}]).status == 200
    tunnels.pop().close()
    wait_gauge(s, "policy.group.g.concurrent", 2)
    c, resp = connect_tunnel(s, key, echo_server.authority)
    assert resp.status == 429
    c.close()
    tunnels.pop().close()
    tunnels.pop().close()
    wait_gauge(s, "policy.group.g.concurrent", 0)
    c, resp = connect_tunnel(s, key, echo_server.authority)
    assert resp.status == 200
    c.close()


def test_a_reload_keeps_the_tokens_and_reaches_connections_opened_before(start_sluice,
                                                                         origin):
    s = start_limited(start_sluice,
                      [{"name": "g", "limits": {"requests_per_second": 0.01, "burst": 5}}],
                      {"a": "g"})
    key = s.keys["a"]
    url = origin.url()
    before = RawConnection(s.proxy_addr)
    assert [get(before, key, url).status for _ in range(3)] == [200] * 3
    # A new rate and burst: the 2 tokens left stay 2 (not a fresh bucket of 10).
    r = set_groups(s, [{"name": "g", "limits": {"requests_per_second": 0.02, "burst": 10}}])
    assert r.status == 200, r.text
    with RawConnection(s.proxy_addr) as after:
        assert [get(after, key, url).status for _ in range(3)] == [200, 200, 429]
    # The connection from before the reload is held to the same bucket.
    assert get(before, key, url).status == 429
    # A group that had no limit gets one: it reaches the connection opened before too.
    before.close()
    s2 = start_limited(start_sluice, [{"name": "g"}], {"a": "g"})
    key2 = s2.keys["a"]
    old = RawConnection(s2.proxy_addr)
    assert [get(old, key2, url).status for _ in range(5)] == [200] * 5
    assert set_groups(s2, [{"name": "g", "limits": {"requests_per_second": 0.01,
                                                    "burst": 2}}]).status == 200
    assert [get(old, key2, url).status for _ in range(3)] == [200, 200, 429]
    # And taking it away again lets it through.
    assert set_groups(s2, [{"name": "g"}]).status == 200
    assert [get(old, key2, url).status for _ in range(3)] == [200] * 3
    old.close()


def test_a_refused_reload_changes_no_limit(start_sluice, origin):
    s = start_limited(start_sluice,
                      [{"name": "g", "limits": {"requests_per_second": 0.01, "burst": 2}}],
                      {"a": "g"})
    bad = set_groups(s, [{"name": "g", "limits": {"requests_per_second": 100, "burst": 100,
                                                  "download_bytes_per_second": 1000}}])
    assert bad.status != 200
    assert "policy.groups[0].limits.download_bytes_per_second: 1000 is outside" in bad.text
    with RawConnection(s.proxy_addr) as c:
        statuses = [get(c, s.keys["a"], origin.url()).status for _ in range(3)]
    assert statuses == [200, 200, 429]


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize("limits, error", [
    ({"burst": 5}, "policy.groups[0].limits.burst: set without requests_per_second"),
    ({"requests_per_second": -1}, "policy.groups[0].limits.requests_per_second: -1 is not a rate"),
    ({"requests_per_second": 1e9}, "policy.groups[0].limits.requests_per_second: 1e+09 is "
                                   "outside 0.001-1e+07"),
    ({"quota_bytes": 10}, "policy.state_file: required when a group has a quota_bytes"),
    ({"quota_bytes": 10, "quota_period": "year"},
     'policy.groups[0].limits.quota_period: "year" is not day or month'),
    ({"upload_bytes_per_second": 10},
     "policy.groups[0].limits.upload_bytes_per_second: 10 is outside 1024-1099511627776"),
])
def test_bad_limits_are_refused_with_their_path(tmp_path, limits, error):
    from sluice_proc import run_cli
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "server": {"listen": f"127.0.0.1:{free_port()}"},
        "auth": {"api_keys": [{"name": "a", "key": "k" * 20, "group": "g"}]},
        "admin": {"listen": f"127.0.0.1:{free_port()}"},
        "policy": {"groups": [{"name": "g", "limits": limits}]},
    }))
    r = run_cli("check", "-c", cfg)
    assert r.returncode != 0
    assert error in r.stderr, r.stderr


def test_the_short_form_takes_limits_and_key_limits(tmp_path):
    from sluice_proc import run_cli
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "server": {"listen": f"127.0.0.1:{free_port()}"},
        "auth": {"api_keys": [{"name": "a", "key": "k" * 20, "group": "g"}]},
        "admin": {"listen": f"127.0.0.1:{free_port()}"},
        "policy": {"groups": [{"name": "g",
                               "limits": {"requests_per_second": 2.5, "max_concurrent": 10},
                               "key_limits": {"requests_per_second": 1, "burst": 3}}]},
    }))
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 0, r.stderr
