"""Egress addresses (policy.groups[].egress) end to end: two keys in two groups, an origin that
reports the address each connection came from, through HTTP forwarding (and the keep-alive
pool), CONNECT, SOCKS5 CONNECT, UDP ASSOCIATE and BIND; a bind that fails; reload; config errors.

On the host these use 127.0.0.2 and 127.0.0.3 (loopback: on lo already). IPv6 egress and DNS
queries run in a network namespace of their own with only lo up, where lo also carries
10.0.0.0/8 and fd00::/8 addresses: evdns never binds a source address for a name server on
127.0.0.0/8 or ::1, so the name servers there are on addresses of their own.
"""

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from egress_agents import PeerOrigin
from helpers import CLEAN_ENV, RawConnection, basic_auth, curl, free_port
from origins import ipv6_loopback_works
from sluice_proc import find_typed_configs, run_cli, write_full_form
from test_dest_guard import JsonLog, NsSluice
from test_socks5 import (BIND, CONNECT, GENERAL_FAILURE, HOST_UNREACHABLE, SUCCEEDED,
                         UDP_ASSOCIATE, Socks5Client, UdpEcho, encode_addr, parse_udp,
                         recv_exact)

AGENTS = Path(__file__).resolve().parent / "egress_agents.py"
# Not an address of this host: binding it fails (EADDRNOTAVAIL) before anything is sent.
NOT_OURS = "192.0.2.1"


def keys_and_groups(groups, keys):
    """A patch for the full form: `groups` as policy.groups, `keys` {name: (key, group)}."""

    def patch(full):
        full["policy"] = {"groups": groups}
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys"] = [{"name": name, "key": key, **({"group": group} if group else {})}
                                for name, (key, group) in keys.items()]

    return patch


def new_keys(*names_and_groups):
    return {name: (secrets.token_urlsafe(24), group) for name, group in names_and_groups}


@pytest.fixture
def origin():
    o = PeerOrigin("127.0.0.1")
    yield o
    o.stop()


@pytest.fixture
def udp_echo():
    e = UdpEcho()
    yield e
    e.stop()


GROUPS = [{"name": "ga", "egress": {"ipv4": "127.0.0.2"}},
          {"name": "gb", "egress": {"ipv4": "127.0.0.3"}},
          # The same egress as ga: it may share ga's pooled connections.
          {"name": "ga2", "egress": {"ipv4": "127.0.0.2"}}]


@pytest.fixture
def egress_sluice(start_sluice):
    keys = new_keys(("a", "ga"), ("b", "gb"), ("a2", "ga2"), ("d", None))
    socks_port = free_port()
    s = start_sluice(extra_short=f"socks5:\n  listen: \"127.0.0.1:{socks_port}\"\n",
                     patch=keys_and_groups(GROUPS, keys))
    s.keys = {name: key for name, (key, _) in keys.items()}
    s.socks5_addr = ("127.0.0.1", socks_port)
    return s


def get(conn, s, key, url):
    host = url.split("/")[2]
    conn.send(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n"
              f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode())
    return conn.read_response("GET")


def get_once(s, key, url):
    with RawConnection(s.proxy_addr, 10) as c:
        return get(c, s, key, url)


def seen(response):
    assert response.status == 200, response
    return json.loads(response.body)


def socks_login(s, key):
    c = Socks5Client(s.socks5_addr)
    c.login(key)
    return c


# ---------------------------------------------------------------------------------------------
# on the host's loopback: 127.0.0.2, 127.0.0.3


def test_each_group_reaches_the_origin_from_its_egress(egress_sluice, origin):
    s = egress_sluice
    url = f"http://127.0.0.1:{origin.port}/x"
    assert seen(get_once(s, s.keys["a"], url))["peer"] == "127.0.0.2"
    assert seen(get_once(s, s.keys["b"], url))["peer"] == "127.0.0.3"
    # A group without an egress: the system's choice, as before.
    assert seen(get_once(s, s.keys["d"], url))["peer"] == "127.0.0.1"
    assert s.stat("upstream.egress.ga.cx") == 1
    assert s.stat("upstream.egress.gb.cx") == 1
    assert s.stat("upstream.egress.ga.bind_failed") == 0
    prometheus = s.admin("/stats/prometheus").text
    assert 'sluice_upstream_egress_cx_total{group="gb"} 1\n' in prometheus
    assert 'sluice_upstream_egress_bind_failed_total{group="ga"} 0\n' in prometheus


def test_the_pool_never_hands_one_group_another_egress(egress_sluice, origin):
    s = egress_sluice
    url = f"http://127.0.0.1:{origin.port}"
    first = seen(get_once(s, s.keys["a"], f"{url}/1"))
    assert first["peer"] == "127.0.0.2"
    # gb's request finds ga's connection idle in the pool, to the same origin: not for it.
    second = seen(get_once(s, s.keys["b"], f"{url}/2"))
    assert second["peer"] == "127.0.0.3"
    assert second["conn"] != first["conn"]
    assert s.stat("upstream.pool_reuse") == 0
    # ga2 has ga's egress: it takes ga's connection.
    third = seen(get_once(s, s.keys["a2"], f"{url}/3"))
    assert (third["peer"], third["conn"]) == ("127.0.0.2", first["conn"])
    assert s.stat("upstream.pool_reuse") == 1
    # Without an egress, neither of theirs.
    fourth = seen(get_once(s, s.keys["d"], f"{url}/4"))
    assert fourth["peer"] == "127.0.0.1"
    assert fourth["conn"] not in (first["conn"], second["conn"])
    # One client connection, its requests in turn with two keys: each from its own egress.
    with RawConnection(s.proxy_addr, 10) as c:
        again_b = seen(get(c, s, s.keys["b"], f"{url}/5"))
        again_a = seen(get(c, s, s.keys["a"], f"{url}/6"))
    assert (again_b["peer"], again_b["conn"]) == ("127.0.0.3", second["conn"])
    assert (again_a["peer"], again_a["conn"]) == ("127.0.0.2", first["conn"])
    assert s.stat("upstream.pool_reuse") == 3
    assert len(origin.accepts()) == 3


def test_connect_tunnels_leave_from_the_egress(egress_sluice, origin):
    s = egress_sluice
    for name, ip in (("a", "127.0.0.2"), ("b", "127.0.0.3")):
        r = curl("-sS", "-p", "-x", s.proxy_url, "-U", f"u:{s.keys[name]}",
                 f"http://127.0.0.1:{origin.port}/tunnel")
        assert r.returncode == 0, r.describe()
        assert json.loads(r.stdout)["peer"] == ip


def test_http2_streams_leave_from_their_keys_egress(start_sluice, origin):
    from test_http2 import H2Client, use_http2

    keys = new_keys(("a", "ga"), ("b", "gb"))
    groups = keys_and_groups(GROUPS, keys)
    h2 = use_http2()

    def patch(full):
        groups(full)
        h2(full)

    s = start_sluice(patch=patch)
    c = H2Client(s)
    try:
        authority = f"127.0.0.1:{origin.port}"
        # Two streams of one connection, with two keys: each from its group's egress.
        sa = c.open("GET", authority, "/h2-a", key=keys["a"][0])
        sb = c.open("GET", authority, "/h2-b", key=keys["b"][0])
        ra, rb = c.response(sa), c.response(sb)
        assert ra.status == 200 and json.loads(bytes(ra.body))["peer"] == "127.0.0.2", ra.body
        assert rb.status == 200 and json.loads(bytes(rb.body))["peer"] == "127.0.0.3", rb.body
        # A CONNECT stream of group gb.
        st = c.open("CONNECT", authority, end=False, key=keys["b"][0])
        c.wait(lambda: c.streams[st].status is not None)
        assert c.streams[st].status == 200
        c.conn.send_data(st, b"GET /h2-tunnel HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n")
        c.send()
        tunnel = c.response(st)
        assert json.loads(bytes(tunnel.body).split(b"\r\n\r\n", 1)[1])["peer"] == "127.0.0.3"
    finally:
        c.close()


def test_socks5_connect_leaves_from_the_egress(egress_sluice, origin):
    s = egress_sluice
    with socks_login(s, s.keys["b"]) as c:
        rep, bound = c.request(CONNECT, "127.0.0.1", origin.port)
        assert rep == SUCCEEDED
        # The reply names the connecting socket's address: the egress.
        assert bound[0] == "127.0.0.3", bound
        c.sock.sendall(b"GET /socks HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = c.sock.recv(4096)
            if not chunk:
                break
            data += chunk
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["peer"] == "127.0.0.3"


def test_socks5_udp_datagrams_leave_from_the_egress(egress_sluice, udp_echo):
    s = egress_sluice
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    u.settimeout(3)
    with socks_login(s, s.keys["a"]) as c:
        rep, relay = c.request(UDP_ASSOCIATE, "127.0.0.1", u.getsockname()[1])
        assert rep == SUCCEEDED
        # The client is told the address it reached sluice at, not the egress.
        assert relay[0] == "127.0.0.1", relay
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"ping", relay)
        data, src = u.recvfrom(65536)
        assert src == relay
        assert parse_udp(data) == (0, "127.0.0.1", udp_echo.port, b"echo:ping")
    u.close()
    assert [peer[0] for _, peer in udp_echo.received] == ["127.0.0.2"]


def test_socks5_bind_listens_on_the_egress(egress_sluice):
    s = egress_sluice
    with socks_login(s, s.keys["b"]) as c:
        rep, (host, port) = c.request(BIND, "127.0.0.1", 40000)
        # The peer is told (through the client) the address the group's connects come from.
        assert rep == SUCCEEDED and host == "127.0.0.3" and port != 0, (rep, host, port)
        peer = socket.create_connection((host, port), timeout=5)
        try:
            rep, _ = c.reply()
            assert rep == SUCCEEDED
            peer.sendall(b"hello")
            assert recv_exact(c.sock, 5) == b"hello"
        finally:
            peer.close()


def test_an_egress_of_one_family_dials_only_that_family(egress_sluice):
    if not ipv6_loopback_works():
        pytest.skip("no IPv6 loopback")
    s = egress_sluice
    r = get_once(s, s.keys["a"], "http://[::1]:1099/")
    assert r.status == 502, r
    assert b"::1: no IPv4 address (of 1), the family of group ga's egress" in r.body, r.body
    with socks_login(s, s.keys["a"]) as c:
        rep, _ = c.request(CONNECT, "::1", 1099)
        assert rep == HOST_UNREACHABLE
    assert s.stat("upstream.egress.ga.cx") == 0


def test_an_egress_that_cannot_be_bound_is_a_502(start_sluice, origin, udp_echo):
    keys = new_keys(("x", "gx"))
    socks_port = free_port()
    s = start_sluice(extra_short=f"socks5:\n  listen: \"127.0.0.1:{socks_port}\"\n",
                     patch=keys_and_groups([{"name": "gx", "egress": {"ipv4": NOT_OURS}}], keys))
    s.socks5_addr = ("127.0.0.1", socks_port)
    key = keys["x"][0]
    r = get_once(s, key, f"http://127.0.0.1:{origin.port}/")
    assert r.status == 502, r
    assert r.header("Proxy-Status").startswith("sluice; error=proxy_configuration_error"), r
    assert f"cannot bind the egress address {NOT_OURS} of group gx".encode() in r.body, r.body
    with socks_login(s, key) as c:
        assert c.request(CONNECT, "127.0.0.1", origin.port)[0] == GENERAL_FAILURE
    with socks_login(s, key) as c:
        assert c.request(UDP_ASSOCIATE, "127.0.0.1", 0)[0] == GENERAL_FAILURE
    with socks_login(s, key) as c:
        assert c.request(BIND, "127.0.0.1", 40000)[0] == GENERAL_FAILURE
    assert s.stat("upstream.egress.gx.bind_failed") == 4
    assert s.stat("upstream.egress.gx.cx") == 0
    assert origin.accepts() == [] and udp_echo.received == []
    assert f"cannot bind the egress address {NOT_OURS} of group gx" in s.log()


def test_a_reload_moves_a_group_to_its_new_egress(start_sluice, origin):
    keys = new_keys(("a", "ga"))
    s = start_sluice(patch=keys_and_groups([{"name": "ga", "egress": {"ipv4": "127.0.0.2"}}],
                                           keys))
    key = keys["a"][0]
    url = f"http://127.0.0.1:{origin.port}/"
    before = seen(get_once(s, key, url))
    assert before["peer"] == "127.0.0.2"
    write_full_form(s.workdir / "config.yaml", s.config_path, key,
                    patch=keys_and_groups([{"name": "ga", "egress": {"ipv4": "127.0.0.4"}}],
                                          keys))
    r = s.admin("/reload", method="POST", data=b"")
    assert r.status == 200, r.text
    after = seen(get_once(s, key, url))
    # The idle connection from 127.0.0.2 is not the group's any more.
    assert after["peer"] == "127.0.0.4" and after["conn"] != before["conn"]
    assert s.stat("upstream.pool_reuse") == 0


def test_a_parent_proxy_is_dialled_from_the_egress(start_sluice, origin):
    """Through an HTTP parent a relayed request goes in absolute-form to the parent: the peer
    origin stands in for it and reports where the connection came from."""
    keys = new_keys(("a", "ga"), ("d", None))
    groups = keys_and_groups([{"name": "ga", "egress": {"ipv4": "127.0.0.2"}}], keys)

    def patch(full):
        groups(full)
        full["parents"] = [{"name": "p4", "address": f"127.0.0.1:{origin.port}",
                            "protocol": "http"},
                           {"name": "p6", "address": f"[::1]:{origin.port}",
                            "protocol": "http"}]
        full["routes"] = [{"ports": ["1099"], "parents": ["p6"]}, {"parents": ["p4"]}]

    s = start_sluice(patch=patch)
    r = seen(get_once(s, keys["a"][0], "http://127.0.0.1:1024/via-parent"))
    assert r["peer"] == "127.0.0.2" and r["path"] == "http://127.0.0.1:1024/via-parent", r
    assert seen(get_once(s, keys["d"][0], "http://127.0.0.1:1024/"))["peer"] == "127.0.0.1"
    assert s.stat("upstream.egress.ga.cx") == 1
    # A parent of a family the egress has no address for is passed by, its health untouched.
    r = get_once(s, keys["a"][0], "http://127.0.0.1:1099/")
    assert r.status == 502, r
    assert (f"parent proxy p6: [::1]:{origin.port} is not IPv4, the family of group ga's "
            f"egress").encode() in r.body, r.body
    assert s.stat("upstream.parent.p6.failures") == 0


@pytest.mark.parametrize("egress,message", [
    ({"ipv4": "::1"}, 'egress.ipv4: "::1" is an IPv6 address: it goes in egress.ipv6'),
    ({"ipv6": "127.0.0.2"}, 'egress.ipv6: "127.0.0.2" is an IPv4 address: it goes in egress.ipv4'),
    ({"ipv4": "proxy.example.com"}, 'egress.ipv4: "proxy.example.com" is not an IPv4 address'),
    ({"ipv4": "127.0.0.2:80"}, 'egress.ipv4: "127.0.0.2:80" is not an IPv4 address'),
    ({"ipv4": "0.0.0.0"}, 'egress.ipv4: "0.0.0.0" is unspecified'),
    ({"ipv4": "224.0.0.1"}, 'egress.ipv4: "224.0.0.1" is a multicast'),
    ({"ipv6": "fe80::1"}, 'egress.ipv6: "fe80::1" is link-local'),
    ({"ipv6": "::ffff:127.0.0.2"}, 'egress.ipv6: "::ffff:127.0.0.2" is an IPv4-mapped address'),
    ({}, "egress: names no address (set ipv4, ipv6 or both)"),
])
def test_a_bad_egress_is_refused_with_its_path(tmp_path, egress, message):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("server:\n  listen: 127.0.0.1:18080\n"
                   "auth:\n  api_keys: [{name: a, key: \"k-" + "x" * 30 + "\", group: staff}]\n"
                   "policy:\n  groups:\n    - {name: default}\n"
                   f"    - {{name: staff, egress: {json.dumps(egress)}}}\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"policy.groups[1].{message}" in r.stderr, r.stderr


def test_a_good_egress_passes_the_check(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("server:\n  listen: 127.0.0.1:18080\n"
                   "auth:\n  api_keys: [{name: a, key: \"k-" + "x" * 30 + "\", group: staff}]\n"
                   "policy:\n  groups:\n"
                   "    - {name: staff, egress: {ipv4: 192.0.2.10, ipv6: \"2001:db8::10\"}}\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------------------------
# IPv6 egress and DNS, in a network namespace with only lo up

NS_ORIGIN_PORT = 8080
NS_DNS_PORT = 53
# On the namespace's lo: the origin, the egress addresses, the name servers.
NS_V4 = {"origin": "10.0.0.1", "e4a": "10.0.0.2", "e4b": "10.0.0.3", "dns": "10.53.0.53"}
NS_V6 = {"origin": "fd00::1", "e6a": "fd00::2", "e6b": "fd00::3", "dns": "fd00::53"}
NS_TABLE = {
    "dual.test": {"A": [NS_V4["origin"]], "AAAA": [NS_V6["origin"]]},
    "v4only.test": {"A": [NS_V4["origin"]]},
    "cache.test": {"A": [NS_V4["origin"]], "AAAA": [NS_V6["origin"]]},
}
# Put on lo only by the test that needs it to come late.
NS_LATE = "10.0.0.9"
NS_GROUPS = [{"name": "g4", "egress": {"ipv4": NS_V4["e4a"]}},
             {"name": "g6", "egress": {"ipv6": NS_V6["e6a"]}},
             {"name": "gboth", "egress": {"ipv4": NS_V4["e4b"], "ipv6": NS_V6["e6b"]}},
             {"name": "glate", "egress": {"ipv4": NS_LATE}}]


def _run(cmd, check=True):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=CLEAN_ENV)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed: {r.stderr.strip()}")
    return r


class EgressNetns:
    """A namespace with only lo up, carrying NS_V4 and NS_V6; the origin and name servers."""

    def __init__(self, name, workdir):
        self.name = name
        self.dir = Path(workdir)
        self.procs = []

    def cmd(self, *args):
        return ["ip", "netns", "exec", self.name, *[str(a) for a in args]]

    def setup(self):
        _run(["ip", "-n", self.name, "link", "set", "lo", "up"])
        for ip in NS_V4.values():
            _run(["ip", "-n", self.name, "addr", "add", f"{ip}/32", "dev", "lo"])
        for ip in NS_V6.values():
            _run(["ip", "-n", self.name, "-6", "addr", "add", f"{ip}/128", "dev", "lo", "nodad"])
        self.origin_log = JsonLog(self.dir / "origin.log")
        self.dns_log = JsonLog(self.dir / "dns.log")
        self.spawn("origin", self.origin_log.path, NS_ORIGIN_PORT)
        self.spawn("dns", self.dns_log.path, NS_DNS_PORT, json.dumps(NS_TABLE), NS_V4["dns"],
                   NS_V6["dns"])

    def spawn(self, *args):
        p = subprocess.Popen(self.cmd(sys.executable, AGENTS, *args), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=CLEAN_ENV)
        self.procs.append(p)
        line = p.stdout.readline()
        if line.strip() != "ready":
            p.kill()
            raise RuntimeError(f"agent {args[0]} did not start: {line!r} {p.stderr.read()}")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)

    def curl(self, *args, timeout=10):
        return _run(self.cmd("curl", "-sS", "--max-time", timeout, *args), check=False)


@pytest.fixture(scope="module")
def egress_netns(tmp_path_factory):
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need root and iproute2")
    name = f"sluice-egress-{secrets.token_hex(4)}"
    if _run(["ip", "netns", "add", name], check=False).returncode != 0:
        pytest.skip("`ip netns add` failed")
    ns = EgressNetns(name, tmp_path_factory.mktemp("egress-netns"))
    try:
        ns.setup()
        yield ns
    finally:
        ns.stop()
        _run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def ns_sluice(egress_netns, tmp_path):
    keys = new_keys(("k4", "g4"), ("k6", "g6"), ("kboth", "gboth"), ("klate", "glate"),
                    ("kd", None))
    first = next(iter(keys.values()))[0]
    short = tmp_path / "config.yaml"
    short.write_text("server:\n  listen: \"127.0.0.1:3128\"\n  workers: 1\n"
                     f"auth:\n  api_keys: [\"{first}\"]\n"
                     "admin:\n  listen: \"127.0.0.1:9901\"\n"
                     "destinations:\n  allow_private: true\n")
    groups_patch = keys_and_groups(NS_GROUPS, keys)

    def patch(full):
        groups_patch(full)
        full["dns"] = {"resolvers": [f"{NS_V4['dns']}:{NS_DNS_PORT}",
                                     f"[{NS_V6['dns']}]:{NS_DNS_PORT}"],
                       "ignore_hosts_file": True}

    cfg = write_full_form(short, tmp_path / "full.yaml", first, patch=patch)
    s = NsSluice(egress_netns, tmp_path, 3128, 9901, first, cfg)
    s.keys = {name: key for name, (key, _) in keys.items()}
    s.start()
    yield s
    code = s.stop()
    assert code == 0, s.log()[-3000:]


def ns_get(ns, s, key, url, tunnel=False):
    r = ns.curl(*(["-p"] if tunnel else []), "-x", "http://127.0.0.1:3128", "-U", f"u:{key}",
                "-w", "\n%{http_code}", url)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body


def dns_since(ns, mark, name):
    return [q for q in ns.dns_log.since(mark) if q["name"] == name]


@pytest.mark.parametrize("key,peer,dns_from", [
    ("k6", NS_V6["e6a"], {NS_V6["e6a"]}),
    ("k4", NS_V4["e4a"], {NS_V4["e4a"]}),
    ("kboth", NS_V6["e6b"], {NS_V4["e4b"], NS_V6["e6b"]}),
])
def test_namespace_egress_of_connects_and_lookups(egress_netns, ns_sluice, key, peer, dns_from):
    ns, s = egress_netns, ns_sluice
    mark = ns.dns_log.mark()
    # A fresh sluice: the lookup is this group's.
    code, body = ns_get(ns, s, s.keys[key], f"http://dual.test:{NS_ORIGIN_PORT}/forward")
    assert code == 200, body
    # IPv6 is preferred; a group with only an IPv4 egress dials only IPv4.
    assert json.loads(body)["peer"] == peer
    code, body = ns_get(ns, s, s.keys[key], f"http://dual.test:{NS_ORIGIN_PORT}/tunnel",
                        tunnel=True)
    assert code == 200 and json.loads(body)["peer"] == peer, body
    queries = dns_since(ns, mark, "dual.test")
    assert queries, "no lookup reached the name servers"
    assert {q["peer"] for q in queries} <= dns_from, queries
    # Each query went to a name server of the family it left from.
    assert all((":" in q["peer"]) == (":" in q["server"]) for q in queries), queries


def test_namespace_default_group_keeps_the_systems_choice(egress_netns, ns_sluice):
    ns, s = egress_netns, ns_sluice
    code, body = ns_get(ns, s, s.keys["kd"], f"http://dual.test:{NS_ORIGIN_PORT}/d")
    assert code == 200, body
    egress = {NS_V4["e4a"], NS_V4["e4b"], NS_V6["e6a"], NS_V6["e6b"]}
    assert json.loads(body)["peer"] not in egress


def test_namespace_ipv6_only_egress_refuses_an_ipv4_only_name(egress_netns, ns_sluice):
    ns, s = egress_netns, ns_sluice
    code, body = ns_get(ns, s, s.keys["k6"], f"http://v4only.test:{NS_ORIGIN_PORT}/")
    assert code == 502, body
    assert "v4only.test: no IPv6 address (of 1), the family of group g6's egress" in body, body
    code, body = ns_get(ns, s, s.keys["k4"], f"http://v4only.test:{NS_ORIGIN_PORT}/")
    assert code == 200 and json.loads(body)["peer"] == NS_V4["e4a"], body


def test_namespace_groups_of_different_egress_do_not_share_answers(egress_netns, ns_sluice):
    ns, s = egress_netns, ns_sluice
    mark = ns.dns_log.mark()
    for key in ("k4", "kboth", "k4", "kboth"):
        code, body = ns_get(ns, s, s.keys[key], f"http://cache.test:{NS_ORIGIN_PORT}/")
        assert code == 200, body
    peers = [q["peer"] for q in dns_since(ns, mark, "cache.test")]
    # Each egress asked once (A and AAAA), then answered from its own cache.
    assert NS_V4["e4a"] in peers and (NS_V4["e4b"] in peers or NS_V6["e6b"] in peers), peers
    assert len(peers) == 4, peers
    assert s.stats()["dns.cache_hits"] == 2


def test_namespace_an_egress_address_is_used_once_it_exists(egress_netns, ns_sluice):
    ns, s = egress_netns, ns_sluice
    key = s.keys["klate"]
    code, body = ns_get(ns, s, key, f"http://dual.test:{NS_ORIGIN_PORT}/")
    assert code == 502, body
    assert (f"dual.test: cannot send DNS queries to {NS_V4['dns']}:{NS_DNS_PORT} from egress "
            f"{NS_LATE}: Cannot assign requested address") in body, body
    code, body = ns_get(ns, s, key, f"http://{NS_V4['origin']}:{NS_ORIGIN_PORT}/")
    assert code == 502 and f"cannot bind the egress address {NS_LATE} of group glate" in body
    assert s.stats()["upstream.egress.glate.bind_failed"] == 1
    _run(["ip", "-n", ns.name, "addr", "add", f"{NS_LATE}/32", "dev", "lo"])
    try:
        time.sleep(1.1)  # the name servers' binds are tried again at most once a second
        mark = ns.dns_log.mark()
        code, body = ns_get(ns, s, key, f"http://dual.test:{NS_ORIGIN_PORT}/")
        assert code == 200 and json.loads(body)["peer"] == NS_LATE, body
        assert {q["peer"] for q in dns_since(ns, mark, "dual.test")} == {NS_LATE}
    finally:
        _run(["ip", "-n", ns.name, "addr", "del", f"{NS_LATE}/32", "dev", "lo"])
