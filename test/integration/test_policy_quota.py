"""Byte quotas of policy groups and their keys (quota_bytes, quota_period) against the real
binary: a transfer is closed when it crosses the quota, later requests get 429 (SOCKS5 0x02)
until the period ends, and the count survives a restart through policy.state_file; a restart in
a later period starts it at 0 (SLUICE_TEST_CLOCK_OFFSET_SECONDS moves sluice's wall clock, for
tests only)."""

import secrets

from helpers import RawConnection, basic_auth, free_port
from sluice_proc import find_typed_configs
from test_policy_limits import connect_tunnel, get
from test_socks5 import CONNECT, Socks5Client

MiB = 1 << 20
QUOTA = 8 * MiB
NOT_ALLOWED = 0x02


def start_quota(start_sluice, tmp_path, limits=None, key_limits=None):
    names = {"ci-1": secrets.token_urlsafe(18), "ci-2": secrets.token_urlsafe(18)}
    state = tmp_path / "quota.state"
    socks_port = free_port()
    group = {"name": "ci"}
    if limits:
        group["limits"] = limits
    if key_limits:
        group["key_limits"] = key_limits

    def patch(full):
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys"] = [{"name": n, "key": k, "group": "ci"} for n, k in names.items()]
        full["policy"] = {"groups": [group], "state_file": str(state)}

    s = start_sluice(extra_short=f"socks5:\n  listen: 127.0.0.1:{socks_port}\n", patch=patch)
    s.keys = names
    s.state = state
    s.socks_addr = ("127.0.0.1", socks_port)
    return s


def drain(c):
    """Bytes read from c until the peer closes it."""
    got = len(c.buf)
    c.buf = b""
    while True:
        try:
            d = c.sock.recv(1 << 20)
        except ConnectionResetError:
            return got
        if not d:
            return got
        got += len(d)


def assert_quota_refused(resp, reason):
    assert resp.status == 429, resp
    after = int(resp.header("Retry-After"))
    assert 1 <= after <= 86400, resp
    assert resp.header("Proxy-Status") == \
        f'sluice; error=http_request_denied; details="{reason}"', resp


def test_quota_closes_the_tunnel_that_crosses_it_and_refuses_then(start_sluice, tmp_path,
                                                                 sluice_origin):
    s = start_quota(start_sluice, tmp_path, limits={"quota_bytes": QUOTA})
    c, resp = connect_tunnel(s, s.keys["ci-1"], f"127.0.0.1:{sluice_origin.source}")
    assert resp.status == 200
    c.send(f"{4 * QUOTA}\n".encode())
    got = drain(c)
    c.close()
    # Closed at the quota, within one read (a pipe's or a read budget's worth: 64 KiB; a shaped
    # tunnel reads no more than that into a larger pipe).
    assert QUOTA - 64 * 1024 <= got <= QUOTA + 64 * 1024, got
    s.wait_stat("tunnel.listener.http.tunnels_active", lambda v: v == 0)
    assert s.stat("tunnel.listener.http.bytes_spliced") > 0
    assert s.stat("policy.group.ci.quota_closed") == 1
    # The group's quota holds for both its keys, on every protocol.
    with RawConnection(s.proxy_addr) as h:
        url = f"http://127.0.0.1:{sluice_origin.port}/bytes/16"
        assert_quota_refused(get(h, s.keys["ci-2"], url), "byte quota of group ci")
    c2, resp = connect_tunnel(s, s.keys["ci-1"], f"127.0.0.1:{sluice_origin.source}")
    assert_quota_refused(resp, "byte quota of group ci")
    c2.close()
    with Socks5Client(s.socks_addr) as sc:
        sc.login(s.keys["ci-2"])
        rep, _ = sc.request(CONNECT, "127.0.0.1", sluice_origin.source)
        assert rep == NOT_ALLOWED
    assert s.stat("policy.group.ci.quota_refused") == 3
    assert s.stat("policy.key.ci-2.quota_refused") == 2
    assert s.wait_stat("policy.group.ci.quota_bytes", lambda v: v >= QUOTA, timeout=5) >= QUOTA


def test_quota_survives_a_restart_and_a_new_period_resets_it(start_sluice, tmp_path,
                                                            sluice_origin):
    s = start_quota(start_sluice, tmp_path, key_limits={"quota_bytes": QUOTA})
    url = f"http://127.0.0.1:{sluice_origin.port}/bytes/{2 * QUOTA}"
    with RawConnection(s.proxy_addr, timeout=30) as h:
        h.send(f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1:{sluice_origin.port}\r\n"
               f"Proxy-Authorization: {basic_auth(s.keys['ci-1'])}\r\n\r\n".encode())
        got = drain(h)
    # The response was cut at the key's quota (its head and a read at most past it).
    assert QUOTA - 64 * 1024 <= got <= QUOTA + 128 * 1024, got
    small = f"http://127.0.0.1:{sluice_origin.port}/bytes/16"
    with RawConnection(s.proxy_addr) as h:
        assert_quota_refused(get(h, s.keys["ci-1"], small), "byte quota of key ci-1")
        # Another key of the group has its own.
        assert get(h, s.keys["ci-2"], small).status == 200
    assert s.stop() == 0
    # The count was written at exit: the same period, the same state file.
    line = [x for x in s.state.read_text().splitlines() if x.startswith("ci ci-1 ")]
    assert len(line) == 1 and int(line[0].split()[3]) >= QUOTA, s.state.read_text()
    s.start()
    with RawConnection(s.proxy_addr) as h:
        assert_quota_refused(get(h, s.keys["ci-1"], small), "byte quota of key ci-1")
        assert get(h, s.keys["ci-2"], small).status == 200
    assert s.stop() == 0
    # A day later the count saved is a past period's: it starts at 0.
    s.start(env={"SLUICE_TEST_CLOCK_OFFSET_SECONDS": "86400"})
    with RawConnection(s.proxy_addr) as h:
        assert get(h, s.keys["ci-1"], small).status == 200


def test_a_quota_needs_a_state_file(tmp_path):
    import yaml
    from sluice_proc import run_cli
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "server": {"listen": f"127.0.0.1:{free_port()}"},
        "auth": {"api_keys": [{"name": "a", "key": "k" * 20, "group": "g"}]},
        "admin": {"listen": f"127.0.0.1:{free_port()}"},
        "policy": {"groups": [{"name": "g", "key_limits": {"quota_bytes": 1000}}]},
    }))
    r = run_cli("check", "-c", cfg)
    assert r.returncode != 0
    assert "policy.state_file: required when a group has a quota_bytes" in r.stderr, r.stderr


def test_http2_stream_past_the_quota_gets_429_and_a_crossing_tunnel_is_reset(
        start_sluice, tmp_path, sluice_origin):
    from test_http2 import H2Client, use_http2
    names = {"a": secrets.token_urlsafe(18)}
    state = tmp_path / "quota.state"

    def patch(full):
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys"] = [{"name": "a", "key": names["a"], "group": "g"}]
        full["policy"] = {"groups": [{"name": "g", "key_limits": {"quota_bytes": MiB}}],
                          "state_file": str(state)}
        use_http2()(full)

    s = start_sluice(patch=patch)
    c = H2Client(s, timeout=30)
    c.key = names["a"]
    sid = c.open("CONNECT", f"127.0.0.1:{sluice_origin.source}", end=False)
    assert c.wait(lambda: c.streams[sid].status is not None)
    assert c.streams[sid].status == 200
    c.send_body(sid, f"{4 * MiB}\n".encode(), end=False)
    st = c.streams[sid]
    assert c.wait(lambda: st.reset is not None, timeout=20), len(st.body)
    assert len(st.body) <= MiB + 64 * 1024
    sid = c.open("GET", f"127.0.0.1:{sluice_origin.port}", "/bytes/16")
    st = c.response(sid)
    assert st.status == 429, vars(st)
    assert st.headers["proxy-status"] == \
        'sluice; error=http_request_denied; details="byte quota of key a"'
    assert 1 <= int(st.headers["retry-after"]) <= 86400
    assert c.goaway is None and not c.closed


def test_a_reload_keeps_the_count_and_applies_the_new_quota(start_sluice, tmp_path,
                                                            sluice_origin):
    import yaml
    s = start_quota(start_sluice, tmp_path, limits={"quota_bytes": MiB})
    part = f"http://127.0.0.1:{sluice_origin.port}/bytes/{600 * 1024}"
    small = f"http://127.0.0.1:{sluice_origin.port}/bytes/16"
    with RawConnection(s.proxy_addr, timeout=30) as h:
        assert get(h, s.keys["ci-1"], part).status == 200
    # The second crosses the quota: its response is cut.
    with RawConnection(s.proxy_addr, timeout=30) as h:
        h.send(f"GET {part} HTTP/1.1\r\nHost: 127.0.0.1:{sluice_origin.port}\r\n"
               f"Proxy-Authorization: {basic_auth(s.keys['ci-1'])}\r\n\r\n".encode())
        assert drain(h) < 600 * 1024
    with RawConnection(s.proxy_addr) as h:
        assert_quota_refused(get(h, s.keys["ci-1"], small), "byte quota of group ci")
    full = yaml.safe_load(s.config_path.read_text())
    full["policy"]["groups"][0]["limits"]["quota_bytes"] = 4 * MiB
    s.config_path.write_text(yaml.safe_dump(full, sort_keys=False))
    assert s.admin("/reload", method="POST", data=b"").status == 200
    # A higher quota admits again; the count goes on from where it was (about 1 MiB), so after
    # one more part it is past 1.5 MiB.
    with RawConnection(s.proxy_addr, timeout=30) as h:
        assert get(h, s.keys["ci-2"], part).status == 200
    got = s.wait_stat("policy.group.ci.quota_bytes", lambda v: v >= 1600 * 1024, timeout=5)
    assert 1600 * 1024 <= got <= 1800 * 1024, got


def test_socks5_udp_counts_toward_the_quota_and_ends_at_it(start_sluice, tmp_path):
    from test_socks5 import SUCCEEDED, UDP_ASSOCIATE, UdpEcho, encode_addr
    import socket
    import time
    s = start_quota(start_sluice, tmp_path, key_limits={"quota_bytes": 64 * 1024})
    echo = UdpEcho()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    u.settimeout(0.5)
    try:
        c = Socks5Client(s.socks_addr)
        c.login(s.keys["ci-1"])
        rep, relay = c.request(UDP_ASSOCIATE, "127.0.0.1", u.getsockname()[1])
        assert rep == SUCCEEDED
        payload = b"x" * 1000
        echoed = 0
        for _ in range(200):  # 200 KB up (and as much echoed back) against a 64 KiB quota
            u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", echo.port) + payload, relay)
            try:
                u.recvfrom(65536)
                echoed += 1
            except socket.timeout:
                break
        # Both ways count: about 32 round trips fit in 64 KiB, then the association ends.
        assert 20 <= echoed <= 40, echoed
        assert c.closed_by_peer(), "the association outlived its quota"
        deadline = time.monotonic() + 5
        while s.stat("socks5.socks5.udp_dropped_quota") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.stat("socks5.socks5.udp_dropped_quota") >= 1
        # A new association of the key is refused: the quota is spent.
        c2 = Socks5Client(s.socks_addr)
        c2.login(s.keys["ci-1"])
        rep, _ = c2.request(UDP_ASSOCIATE, "127.0.0.1", u.getsockname()[1])
        assert rep == NOT_ALLOWED
        c2.close()
    finally:
        echo.stop()
        u.close()
