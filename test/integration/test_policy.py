"""Per-group destination policy (docs/policy.md) end to end, on every protocol: host patterns
and their edge cases, a name allowed by a host rule but resolving into a refused range, CNAME
chains, report-only groups, an allow rule by CIDR that opens loopback for one group only, the
config checks, API keys files with groups, and `sluice policy explain`.

Names resolve through a loopback name server (dns.resolvers) that answers chosen addresses;
every origin is on 127.0.0.0/8."""

import json
import re
import secrets
import shutil
import socket
import struct
import subprocess
import time

import pytest

from helpers import CLEAN_ENV, RawConnection, basic_auth, free_port, raw_request
from sluice_proc import find_typed_configs, run_cli
from test_http2 import H2Client, Stream, use_http2
from test_socks5 import (BIND, CONNECT, NOT_ALLOWED, SUCCEEDED, UDP_ASSOCIATE, SlowDns,
                         Socks5Client, UdpEcho, encode_addr, parse_udp, recv_exact)
from origins import EchoServer
from ws_origin import WsOrigin


# ---------------------------------------------------------------------------------------------
# a name server answering chosen addresses, and CNAME chains


def encode_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


class PolicyDns(SlowDns):
    """A loopback name server: `table` maps a name to a list of IPv4 addresses (its A records)
    or to another name (a CNAME). An A query is answered with the whole chain, as a recursive
    server answers; AAAA queries get the chain without addresses; other names NXDOMAIN."""

    def __init__(self, table):
        self.table = {k.lower(): v for k, v in table.items()}
        super().__init__(delay=0)

    def _answer(self, query, peer):
        qid, _flags, qdcount = struct.unpack("!HHH", query[:6])
        if qdcount != 1:
            return
        pos, labels = 12, []
        while query[pos] != 0:
            labels.append(query[pos + 1:pos + 1 + query[pos]].decode().lower())
            pos += 1 + query[pos]
        qtype = struct.unpack("!H", query[pos + 1:pos + 3])[0]
        question = query[12:pos + 5]
        name = ".".join(labels)
        self.queries.append((name, qtype))
        if name not in self.table:
            resp = struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question
        else:
            records, current = [], name
            for _ in range(8):
                value = self.table.get(current)
                if isinstance(value, str):
                    records.append((current, 5, encode_name(value)))
                    current = value.lower()
                    continue
                if value and qtype == 1:
                    records += [(current, 1, socket.inet_aton(ip)) for ip in value]
                break
            resp = struct.pack("!HHHHHH", qid, 0x8180, 1, len(records), 0, 0) + question
            for owner, rtype, rdata in records:
                resp += encode_name(owner) + struct.pack("!HHIH", rtype, 1, 60, len(rdata)) + rdata
        try:
            self.sock.sendto(resp, peer)
        except OSError:
            pass

    def looked_up(self, name):
        return any(q == name for q, _ in self.queries)


@pytest.fixture
def dns_server():
    servers = []

    def make(table):
        d = PolicyDns(table)
        servers.append(d)
        return d

    yield make
    for d in servers:
        d.stop()


# ---------------------------------------------------------------------------------------------
# a sluice with groups, keys in them, a SOCKS5 port and the name server


def start_policy(start_sluice, groups, keys, dns=None, allow_private=True, deny=None,
                 h2=False, access_log=None, log_format="json", extra_short=""):
    """`keys`: {key name: group (None: the default group)}. The process gets .keys (name ->
    key), .socks5_addr and, with access_log (a path), .access_log."""
    secrets_by_name = {name: f"{name}-{secrets.token_urlsafe(18)}" for name in keys}
    socks_port = free_port()
    extra = f"socks5:\n  listen: 127.0.0.1:{socks_port}\n" + extra_short
    if access_log is not None:
        extra += f"access_log:\n  mode: all\n  format: {log_format}\n  path: {access_log}\n"

    def patch(full):
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys"] = [{"name": n, "key": secrets_by_name[n],
                                 **({"group": g} if g else {})} for n, g in keys.items()]
        for guard in find_typed_configs(full, ".DestGuardConfig"):
            guard["allow_private"] = allow_private
            if deny:
                guard["deny"] = deny
        full["policy"] = {"groups": groups}
        if dns is not None:
            full.setdefault("dns", {})["resolvers"] = [f"127.0.0.1:{dns.port}"]
        if h2:
            use_http2()(full)

    s = start_sluice(extra_short=extra, patch=patch)
    s.keys = secrets_by_name
    s.socks5_addr = ("127.0.0.1", socks_port)
    s.access_log = access_log
    return s


def authority(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def get(s, key, host, port, path="/hello", extra=""):
    a = authority(host, port)
    return raw_request(s.proxy_addr, (f"GET http://{a}{path} HTTP/1.1\r\nHost: {a}\r\n"
                                      f"Proxy-Authorization: {basic_auth(s.keys[key])}\r\n"
                                      f"Connection: close\r\n{extra}\r\n").encode())


def connect(s, key, host, port):
    """(response, connection): the connection is open (a tunnel) when the status is 200."""
    a = authority(host, port)
    c = RawConnection(s.proxy_addr)
    c.send(f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n"
           f"Proxy-Authorization: {basic_auth(s.keys[key])}\r\n\r\n".encode())
    return c.read_response("CONNECT"), c


def refused_by(r, rule, error="http_request_denied"):
    """A 403 that sluice made for `rule`, with the Proxy-Status naming it."""
    assert r.status == 403, str(r)
    assert r.body == f"403 Forbidden: policy rule {rule}\n".encode(), str(r)
    assert r.header("Proxy-Status") == (f'sluice; error={error}; details="policy rule {rule}"'), \
        str(r)
    return True


def socks_request(s, key, cmd, host, port):
    c = Socks5Client(s.socks5_addr)
    c.login(s.keys[key])
    rep, bound = c.request(cmd, host, port)
    return c, rep, bound


def socks_connect(s, key, host, port):
    c, rep, _ = socks_request(s, key, CONNECT, host, port)
    if rep != SUCCEEDED:
        assert c.closed_by_peer(), "a refused command ends the connection"
    c.close()
    return rep


def policy_stat(s, group, name):
    return s.stat(f"policy.group.{group}.{name}")


def log_lines(s, n, timeout=5):
    deadline = time.monotonic() + timeout
    while True:
        text = s.access_log.read_text() if s.access_log.exists() else ""
        lines = text.splitlines()
        if len(lines) >= n or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


HELLO = b"hello from the python origin\n"


# ---------------------------------------------------------------------------------------------
# host patterns


def test_host_patterns_and_their_edge_cases(start_sluice, dns_server, py_origin):
    names = ["exact.test", "www.exact.test", "sub.test", "a.sub.test", "x.y.sub.test",
             "suffixsub.test", "both.test", "x.both.test", "xn--bcher-kva.test", "other.test"]
    dns = dns_server({n: ["127.0.0.1"] for n in names})
    groups = [{"name": "staff", "default_action": "deny", "rules": [
        {"name": "exact", "action": "allow", "hosts": ["exact.test"]},
        {"name": "subdomains", "action": "allow", "hosts": ["*.sub.test"]},
        {"action": "allow", "hosts": [".both.test"]},
        # Case and a trailing dot in the pattern do not matter; IDNs are written in punycode.
        {"action": "allow", "hosts": ["XN--BCHER-KVA.test."]},
    ]}]
    s = start_policy(start_sluice, groups, {"alice": "staff", "bob": None}, dns=dns)
    port = py_origin.port
    allowed = ["exact.test", "EXACT.Test.", "a.sub.test", "x.y.sub.test", "both.test",
               "x.both.test", "xn--bcher-kva.test", "Xn--Bcher-Kva.TEST"]
    for host in allowed:
        r = get(s, "alice", host, port)
        assert r.status == 200 and r.body == HELLO, (host, str(r))
    # `*.x` is only the subdomains, `x` only the name; an IP address matches no host pattern.
    for host in ["www.exact.test", "sub.test", "suffixsub.test", "other.test", "127.0.0.1"]:
        assert refused_by(get(s, "alice", host, port), "staff.default"), host
    # Refused by the name alone: never looked up.
    for host in ["www.exact.test", "sub.test", "suffixsub.test", "other.test"]:
        assert not dns.looked_up(host), (host, dns.queries)
    assert policy_stat(s, "staff", "allowed") == len(allowed)
    assert policy_stat(s, "staff", "denied") == 5
    assert s.stat("dest_guard.blocked_policy") == 5
    prometheus = s.admin("/stats/prometheus").text
    assert 'sluice_policy_group_denied_total{group="staff"} 5\n' in prometheus, prometheus
    # A key of a group without rules: only the destination guard decides.
    r = get(s, "bob", "other.test", port)
    assert r.status == 200 and r.body == HELLO, str(r)
    assert "policy.group.default.allowed" not in s.stats()


def test_a_name_allowed_by_a_host_rule_but_resolving_into_a_refused_range(
        start_sluice, dns_server, py_origin):
    dns = dns_server({
        "inside.example.test": ["127.0.0.1", "127.0.0.2"],
        "out.example.test": ["127.0.0.1"],
        # CNAME chains: the rules see the name the client asked for and the chain's addresses.
        "alias.example.test": "hop.cdn.test", "hop.cdn.test": "edge.cdn.test",
        "edge.cdn.test": ["127.0.0.2"],
        "alias2.example.test": "edge2.cdn.test", "edge2.cdn.test": ["127.0.0.1"],
    })
    groups = [{"name": "staff", "default_action": "deny", "rules": [
        {"name": "no-internal", "action": "deny", "cidrs": ["127.0.0.2/32"]},
        {"name": "no-cdn", "action": "deny", "hosts": [".cdn.test"]},
        {"name": "example", "action": "allow", "hosts": [".example.test"]},
    ]}]
    s = start_policy(start_sluice, groups, {"alice": "staff"}, dns=dns)
    port = py_origin.port
    # One address of two is in the refused range: the whole request is refused.
    assert refused_by(get(s, "alice", "inside.example.test", port), "no-internal",
                      error="destination_ip_prohibited")
    r = get(s, "alice", "out.example.test", port)
    assert r.status == 200 and r.body == HELLO, str(r)
    assert refused_by(get(s, "alice", "127.0.0.2", port), "no-internal",
                      error="destination_ip_prohibited")
    # Through a CNAME chain to a refused address: refused by the range.
    assert refused_by(get(s, "alice", "alias.example.test", port), "no-internal",
                      error="destination_ip_prohibited")
    # A chain into .cdn.test ending on an allowed address: the host rules match the name asked
    # for (alias2.example.test), never the chain's names; asked directly, the name is refused.
    r = get(s, "alice", "alias2.example.test", port)
    assert r.status == 200 and r.body == HELLO, str(r)
    assert refused_by(get(s, "alice", "edge2.cdn.test", port), "no-cdn")
    # The same holds for tunnels.
    r, c = connect(s, "alice", "inside.example.test", port)
    c.close()
    assert refused_by(r, "no-internal", error="destination_ip_prohibited")
    assert policy_stat(s, "staff", "denied") == 5
    assert policy_stat(s, "staff", "allowed") == 2


# ---------------------------------------------------------------------------------------------
# every protocol


CI_GROUP = {"name": "ci", "default_action": "deny", "rules": [
    {"name": "no-websocket", "action": "deny", "kinds": ["websocket"]},
    {"name": "registry", "action": "allow", "hosts": ["registry.test"]},
    {"name": "bind-peers", "action": "allow", "kinds": ["socks5-bind"], "cidrs": ["127.0.0.1/32"]},
]}


@pytest.fixture
def ws_origin():
    o = WsOrigin().start()
    yield o
    o.stop()


@pytest.fixture
def echo():
    e = EchoServer()
    yield e
    e.stop()


@pytest.fixture
def udp_echo():
    e = UdpEcho()
    yield e
    e.stop()


def ci_dns(dns_server):
    return dns_server({"registry.test": ["127.0.0.1"], "elsewhere.test": ["127.0.0.1"]})


def test_http_connect_and_websocket(start_sluice, dns_server, py_origin, echo, ws_origin):
    s = start_policy(start_sluice, [CI_GROUP], {"ci": "ci"}, dns=ci_dns(dns_server))
    r = get(s, "ci", "registry.test", py_origin.port)
    assert r.status == 200 and r.body == HELLO, str(r)
    assert refused_by(get(s, "ci", "elsewhere.test", py_origin.port), "ci.default")
    # CONNECT
    r, c = connect(s, "ci", "registry.test", echo.port)
    try:
        assert r.status == 200, str(r)
        c.send(b"ping")
        assert recv_exact(c.sock, 4) == b"ping"
    finally:
        c.close()
    r, c = connect(s, "ci", "elsewhere.test", echo.port)
    c.close()
    assert refused_by(r, "ci.default")
    # A WebSocket upgrade is its own kind: refused even to the registry, whose plain GET passes.
    a = f"registry.test:{ws_origin.port}"
    r = raw_request(s.proxy_addr, (
        f"GET ws://{a}/echo HTTP/1.1\r\nHost: {a}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\nProxy-Authorization: {basic_auth(s.keys['ci'])}\r\n"
        f"\r\n").encode())
    assert refused_by(r, "no-websocket")
    r = get(s, "ci", "registry.test", ws_origin.port, path="/plain")
    assert r.status == 200 and r.body == b"plain", str(r)
    assert ws_origin.heads and all(b"Upgrade" not in h for h in ws_origin.heads), ws_origin.heads
    assert policy_stat(s, "ci", "denied") == 3
    assert policy_stat(s, "ci", "allowed") == 3


def test_http2_streams(start_sluice, dns_server, py_origin, echo, ws_origin):
    s = start_policy(start_sluice, [CI_GROUP], {"ci": "ci"}, dns=ci_dns(dns_server), h2=True)
    s.key = s.keys["ci"]  # H2Client's key
    c = H2Client(s)
    try:
        ok = c.response(c.open("GET", f"registry.test:{py_origin.port}", "/hello"))
        assert ok.status == 200 and bytes(ok.body) == HELLO, vars(ok)
        for method in ("GET", "CONNECT"):
            port = py_origin.port if method == "GET" else echo.port
            r = c.response(c.open(method, f"elsewhere.test:{port}", "/hello", end=False))
            assert r.status == 403, vars(r)
            assert r.headers["proxy-status"] == \
                'sluice; error=http_request_denied; details="policy rule ci.default"', vars(r)
            assert bytes(r.body) == b"403 Forbidden: policy rule ci.default\n", vars(r)
        tunnel = c.open("CONNECT", f"registry.test:{echo.port}", end=False)
        assert c.wait(lambda: c.streams[tunnel].status is not None)
        assert c.streams[tunnel].status == 200
        # RFC 8441: a WebSocket stream is kind websocket.
        assert c.wait(lambda: c.conn.remote_settings.get(0x8) == 1)
        sid = c.conn.get_next_available_stream_id()
        c.streams[sid] = Stream()
        c.conn.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"),
                                  (":scheme", "http"), (":path", "/echo"),
                                  (":authority", f"registry.test:{ws_origin.port}"),
                                  ("sec-websocket-version", "13"),
                                  ("proxy-authorization", basic_auth(s.key))], end_stream=False)
        c.send()
        r = c.response(sid)
        assert r.status == 403, vars(r)
        assert r.headers["proxy-status"] == \
            'sluice; error=http_request_denied; details="policy rule no-websocket"', vars(r)
    finally:
        c.close()
    assert ws_origin.heads == []
    assert policy_stat(s, "ci", "denied") == 3


def test_socks5_connect_udp_and_bind(start_sluice, dns_server, py_origin, udp_echo):
    s = start_policy(start_sluice, [CI_GROUP], {"ci": "ci"}, dns=ci_dns(dns_server))
    assert socks_connect(s, "ci", "registry.test", py_origin.port) == SUCCEEDED
    assert socks_connect(s, "ci", "elsewhere.test", py_origin.port) == NOT_ALLOWED
    assert socks_connect(s, "ci", "127.0.0.1", py_origin.port) == NOT_ALLOWED
    # UDP ASSOCIATE: each destination is checked against the key's group.
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    u.settimeout(3)
    c, rep, relay = socks_request(s, "ci", UDP_ASSOCIATE, "127.0.0.1", u.getsockname()[1])
    try:
        assert rep == SUCCEEDED
        u.sendto(b"\0\0\0" + encode_addr("elsewhere.test", udp_echo.port) + b"no", relay)
        u.sendto(b"\0\0\0" + encode_addr("registry.test", udp_echo.port) + b"yes", relay)
        data, _ = u.recvfrom(65536)
        assert parse_udp(data)[3] == b"echo:yes"
        assert s.wait_stat("socks5.socks5.udp_dropped_denied", lambda v: v == 1) == 1
        assert [d for d, _ in udp_echo.received] == [b"yes"]
    finally:
        c.close()
        u.close()
    # BIND naming a peer: checked like a destination (bind-peers takes only 127.0.0.1).
    c, rep, _ = socks_request(s, "ci", BIND, "127.0.0.2", 40000)
    c.close()
    assert rep == NOT_ALLOWED
    # BIND for any peer: `bind-peers` needs the peer's address, so the peer that connects is
    # checked: 127.0.0.2 is refused (the BIND waits on), 127.0.0.1 is let through.
    c, rep, (host, port) = socks_request(s, "ci", BIND, "0.0.0.0", 0)
    try:
        assert rep == SUCCEEDED, rep
        wrong = socket.socket()
        wrong.bind(("127.0.0.2", 0))
        wrong.settimeout(3)
        wrong.connect((host, port))
        try:
            assert wrong.recv(10) == b""
        except ConnectionResetError:
            pass
        wrong.close()
        assert s.wait_stat("socks5.socks5.bind_peer_rejected", lambda v: v == 1) == 1
        right = socket.create_connection((host, port), timeout=5)
        try:
            rep, peer = c.reply()
            assert rep == SUCCEEDED and peer == right.getsockname(), (rep, peer)
            right.sendall(b"hi")
            assert recv_exact(c.sock, 2) == b"hi"
        finally:
            right.close()
    finally:
        c.close()
    # Refused: a CONNECT by name and one by address, a UDP destination, a named BIND peer and
    # the peer from 127.0.0.2; allowed: a CONNECT, a UDP destination, the peer from 127.0.0.1.
    assert policy_stat(s, "ci", "denied") == 5
    assert policy_stat(s, "ci", "allowed") == 3


def test_a_bind_for_any_peer_is_refused_by_a_rule_on_its_kind(start_sluice):
    groups = [{"name": "nobind", "rules": [{"name": "no-bind", "action": "deny",
                                            "kinds": ["socks5-bind"]}]}]
    s = start_policy(start_sluice, groups, {"k": "nobind"})
    c, rep, _ = socks_request(s, "k", BIND, "0.0.0.0", 0)
    try:
        assert rep == NOT_ALLOWED
        assert c.closed_by_peer()
    finally:
        c.close()
    assert policy_stat(s, "nobind", "denied") == 1
    assert s.stat("socks5.socks5.reply_not_allowed") == 1


# ---------------------------------------------------------------------------------------------
# report-only


def test_report_only_serves_counts_and_logs_the_rule(start_sluice, dns_server, py_origin,
                                                       tmp_path):
    dns = dns_server({"blocked.test": ["127.0.0.1"], "fine.test": ["127.0.0.1"]})
    groups = [{"name": "trial", "report_only": True, "rules": [
        {"name": "no-blocked", "action": "deny", "hosts": ["blocked.test"]},
        {"action": "deny", "kinds": ["socks5-connect"], "cidrs": ["127.0.0.0/8"]},
    ]}]
    s = start_policy(start_sluice, groups, {"t": "trial"}, dns=dns,
                     access_log=tmp_path / "access.log")
    r = get(s, "t", "blocked.test", py_origin.port)
    assert r.status == 200 and r.body == HELLO, str(r)
    r = get(s, "t", "fine.test", py_origin.port)
    assert r.status == 200 and r.body == HELLO, str(r)
    assert socks_connect(s, "t", "127.0.0.1", py_origin.port) == SUCCEEDED
    lines = [json.loads(line) for line in log_lines(s, 3)]
    by_target = {(rec["protocol"], rec["target"]): rec for rec in lines}
    trial = by_target[("http1", f"blocked.test:{py_origin.port}")]
    assert trial["status"] == 200 and trial["denial"] == "", trial
    assert trial["policy_rule"] == "no-blocked" and trial["policy_report_only"] is True, trial
    fine = by_target[("http1", f"fine.test:{py_origin.port}")]
    assert fine["policy_rule"] == "" and fine["policy_report_only"] is False, fine
    socks = by_target[("socks5", f"127.0.0.1:{py_origin.port}")]
    assert socks["policy_rule"] == "trial.rules[1]" and socks["policy_report_only"], socks
    assert policy_stat(s, "trial", "report_only") == 2
    assert policy_stat(s, "trial", "denied") == 0
    assert policy_stat(s, "trial", "allowed") == 1


def test_squid_log_lines_carry_the_rule(start_sluice, dns_server, py_origin, tmp_path):
    dns = dns_server({"blocked.test": ["127.0.0.1"]})
    groups = [{"name": "trial", "report_only": True,
               "rules": [{"action": "deny", "hosts": ["blocked.test"]}]},
              {"name": "strict", "rules": [{"action": "deny", "hosts": ["blocked.test"]}]}]
    s = start_policy(start_sluice, groups, {"t": "trial", "st": "strict"}, dns=dns,
                     access_log=tmp_path / "access.log", log_format="squid")
    assert get(s, "t", "blocked.test", py_origin.port).status == 200
    assert refused_by(get(s, "st", "blocked.test", py_origin.port), "strict.rules[0]")
    lines = log_lines(s, 2)
    assert len(lines) == 2, lines
    served = next(line for line in lines if " t " in line)
    refused = next(line for line in lines if " st " in line)
    assert " TCP_MISS/200 " in served and served.endswith(" - report_only_rule=trial.rules[0]"), \
        served
    assert " TCP_DENIED/403 " in refused and refused.endswith(" - policy_rule=strict.rules[0]"), \
        refused
    # The rule comes after Squid's ten fields, where the tools written for them do not look.
    if shutil.which("calamaris") is None:
        pytest.skip("calamaris is not installed (tools/deps.sh --test installs it)")
    report = subprocess.run(["calamaris", "-a"], input="\n".join(lines) + "\n", text=True,
                            capture_output=True, env=CLEAN_ENV, check=True).stdout
    assert re.search(r"lines parsed:\s+lines\s+2\b", report), report
    assert re.search(r"invalid lines:\s+lines\s+0\b", report), report


# ---------------------------------------------------------------------------------------------
# an allow rule by CIDR opens an internal range, for its group only


def test_an_allow_cidr_rule_opens_loopback_for_one_group(start_sluice, dns_server, py_origin,
                                                         udp_echo):
    dns = dns_server({"lo.test": ["127.0.0.1"]})
    groups = [{"name": "internal", "rules": [
        {"name": "loopback", "action": "allow", "cidrs": ["127.0.0.0/8"]}]},
              # The same rule, only tried: a report-only group opens nothing.
              {"name": "trial", "report_only": True, "rules": [
                  {"action": "allow", "cidrs": ["127.0.0.0/8"]}]}]
    s = start_policy(start_sluice, groups, {"ops": "internal", "dev": None, "try": "trial"},
                     dns=dns, allow_private=False, deny=["127.0.0.3/32"])
    port = py_origin.port
    for host in ("127.0.0.1", "lo.test"):
        r = get(s, "ops", host, port)
        assert r.status == 200 and r.body == HELLO, (host, str(r))
        for other in ("dev", "try"):
            r = get(s, other, host, port)
            assert r.status == 403 and b"destination is a private address" in r.body, \
                (other, host, str(r))
            assert r.header("Proxy-Status").startswith("sluice; error=destination_ip_prohibited")
    # Never sluice itself, never the guard's deny ranges.
    r = get(s, "ops", "127.0.0.1", s.admin_port, path="/stats")
    assert r.status == 403 and b"destination is sluice itself" in r.body, str(r)
    r = get(s, "ops", "127.0.0.3", port)
    assert r.status == 403 and b"destination is in a denied range" in r.body, str(r)
    # SOCKS5 CONNECT and UDP datagrams, the same.
    assert socks_connect(s, "ops", "lo.test", port) == SUCCEEDED
    assert socks_connect(s, "dev", "lo.test", port) == NOT_ALLOWED
    for key, expect in (("ops", True), ("dev", False)):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        u.settimeout(1.5)
        c, rep, relay = socks_request(s, key, UDP_ASSOCIATE, "127.0.0.1", u.getsockname()[1])
        try:
            assert rep == SUCCEEDED
            u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + key.encode(), relay)
            if expect:
                assert parse_udp(u.recvfrom(65536)[0])[3] == b"echo:ops"
            else:
                with pytest.raises(socket.timeout):
                    u.recvfrom(65536)
        finally:
            c.close()
            u.close()
    assert [d for d, _ in udp_echo.received] == [b"ops"]


# ---------------------------------------------------------------------------------------------
# reload


def test_a_reload_takes_the_new_rules(start_sluice, dns_server, py_origin):
    import yaml

    dns = dns_server({"site.test": ["127.0.0.1"]})
    groups = [{"name": "staff", "rules": [{"action": "allow", "hosts": ["site.test"]}],
               "default_action": "deny"}]
    s = start_policy(start_sluice, groups, {"alice": "staff"}, dns=dns)
    assert get(s, "alice", "site.test", py_origin.port).status == 200
    full = yaml.safe_load(s.config_path.read_text())
    full["policy"]["groups"][0]["rules"][0]["action"] = "deny"
    s.config_path.write_text(yaml.safe_dump(full))
    r = s.admin("/reload", method="POST", data=b"")
    assert r.status == 200, r
    assert refused_by(get(s, "alice", "site.test", py_origin.port), "staff.rules[0]")
    # A broken rule is refused by the reload, and the running rules stay.
    full["policy"]["groups"][0]["rules"][0]["hosts"] = ["site.*"]
    s.config_path.write_text(yaml.safe_dump(full))
    r = s.admin("/reload", method="POST", data=b"")
    assert r.status != 200 and b"policy.groups[0].rules[0].hosts[0]" in r.body, r
    assert refused_by(get(s, "alice", "site.test", py_origin.port), "staff.rules[0]")
    # The counters carry on across versions.
    assert policy_stat(s, "staff", "allowed") == 1
    assert policy_stat(s, "staff", "denied") == 2


# ---------------------------------------------------------------------------------------------
# config checks, keys files


def test_keys_whose_group_has_rules_need_a_destination_guard(start_sluice, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "listeners:\n"
        "  - name: http\n"
        "    address: 127.0.0.1:%d\n"
        "    filter_chains:\n"
        "      - filters:\n"
        "          - name: sluice.http1\n"
        "            typed_config:\n"
        "              \"@type\": type.googleapis.com/sluice.filters.v1.Http1ProxyConfig\n"
        "              request_filters:\n"
        "                - name: sluice.auth\n"
        "                  typed_config:\n"
        "                    \"@type\": type.googleapis.com/sluice.filters.v1.AuthConfig\n"
        "                    api_keys: [{name: a, key: k-aaaaaaaaaaaa}, {name: b, key: k-bbbbbbbbbbbb, group: ci}]\n"
        "                - name: sluice.router\n"
        "                  typed_config:\n"
        "                    \"@type\": type.googleapis.com/sluice.filters.v1.RouterConfig\n"
        "policy:\n"
        "  groups:\n"
        "    - name: ci\n"
        "      rules: [{action: allow, hosts: [registry.test]}]\n"
        "      default_action: deny\n" % free_port())
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert ("listeners[0].filter_chains[0].filters[0].request_filters: requests of "
            "policy group \"ci\" (which has rules) get in through these filters, but no "
            "sluice.dest_guard is among them") in r.stderr, r.stderr
    # Without the group's rules, the same chain is fine.
    cfg.write_text(cfg.read_text().replace(
        "      rules: [{action: allow, hosts: [registry.test]}]\n      default_action: deny\n",
        ""))
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 0, r.stderr


def test_a_keys_file_gives_keys_their_groups(start_sluice, dns_server, py_origin, tmp_path):
    dns = dns_server({"registry.test": ["127.0.0.1"], "elsewhere.test": ["127.0.0.1"]})
    keys_file = tmp_path / "keys"
    filed = "filed-" + secrets.token_urlsafe(18)
    keys_file.write_text(f"# builders\nbuilder:{filed} group=ci\n")

    def patch(full):
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys_file"] = str(keys_file)
        full["policy"] = {"groups": [CI_GROUP]}
        full.setdefault("dns", {})["resolvers"] = [f"127.0.0.1:{dns.port}"]

    s = start_sluice(patch=patch)
    s.keys = {"builder": filed, "test": s.key}
    r = get(s, "builder", "registry.test", py_origin.port)
    assert r.status == 200 and r.body == HELLO, str(r)
    assert refused_by(get(s, "builder", "elsewhere.test", py_origin.port), "ci.default")
    # The config's own key is in the default group, which has no rules.
    assert get(s, "test", "elsewhere.test", py_origin.port).status == 200
    # A group the policy does not have: file:line, never the key.
    keys_file.write_text(f"builder:{filed} group=nope\n")
    r = run_cli("check", "-c", s.config_path)
    assert r.returncode == 1
    assert f"{keys_file}:1: group: \"nope\" is not a group of policy.groups" in r.stderr, r.stderr
    assert filed not in r.stderr


# ---------------------------------------------------------------------------------------------
# sluice policy explain


def test_policy_explain(start_sluice, dns_server):
    dns = dns_server({"registry.test": ["127.0.0.1"], "inside.example.test":
                      ["127.0.0.1", "127.0.0.2"], "mirror.test": ["127.0.0.9"]})
    groups = [CI_GROUP,
              {"name": "staff", "default_action": "deny", "rules": [
                  {"name": "no-internal", "action": "deny", "cidrs": ["127.0.0.2/32"]},
                  {"name": "loopback", "action": "allow", "cidrs": ["127.0.0.0/8"]}]},
              {"name": "trial", "report_only": True,
               "rules": [{"name": "no-registry", "action": "deny", "hosts": ["registry.test"]}]}]
    s = start_policy(start_sluice, groups, {"ci": "ci", "alice": "staff", "t": "trial",
                                            "dev": None}, dns=dns, allow_private=False)

    def explain(*args):
        r = run_cli("policy", "explain", "-c", s.config_path, *args)
        return r.returncode, r.stdout, r.stderr

    code, out, _ = explain("ci", "registry.test:443")
    assert "key:         ci (group ci)\n" in out
    assert "listener:    http\n" in out
    assert "destination: registry.test port 443, kind connect\n" in out
    assert "rules:       registry (allow) decides for every address, before any lookup\n" in out
    assert "addresses:   1, from the name servers of dns.resolvers\n" in out
    # The group's rule allows by name, which opens nothing: the listener's guard still refuses
    # loopback.
    assert "  127.0.0.1: rule registry (allow); guard: destination is a private address\n" in out
    assert code == 1 and out.endswith("decision:    refused: destination is a private address "
                                      "(HTTP 403, SOCKS5 reply 0x02)\n"), out

    code, out, _ = explain("ci", "elsewhere.test:443", "--kind", "http")
    assert code == 1, out
    assert "rules:       ci.default (deny) decides for every address, before any lookup\n" in out
    assert "addresses:" not in out  # refused before any lookup
    assert out.endswith("decision:    refused: policy rule ci.default (HTTP 403, SOCKS5 reply "
                        "0x02)\n"), out

    code, out, _ = explain("alice", "inside.example.test:8080", "--kind", "socks5-connect")
    assert code == 1, out
    assert "rules:       no-internal (deny) has cidrs: each address decides\n" in out
    assert "addresses:   2, from the name servers of dns.resolvers\n" in out
    assert "  127.0.0.1: rule loopback (allow) by cidr, opening its cidrs; guard: allowed\n" \
        in out, out
    assert "  127.0.0.2: rule no-internal (deny) by cidr; guard: destination is a private " \
           "address\n" in out, out
    assert out.endswith("decision:    refused: policy rule no-internal (HTTP 403, SOCKS5 reply "
                        "0x02)\n"), out

    code, out, _ = explain("alice", "127.0.0.1:8080")
    assert code == 0, out
    assert "destination: 127.0.0.1 port 8080, kind connect (an IP address: host patterns do not " \
           "match it)\n" in out
    assert out.endswith("decision:    allowed\n"), out

    code, out, _ = explain("t", "registry.test:443", "--listener", "socks5")
    assert "key:         t (group trial, report-only)\n" in out
    assert "listener:    socks5\n" in out
    # Report-only: the rule's refusal is not enforced, the guard's still is.
    assert "  127.0.0.1: rule no-registry (deny); guard: destination is a private address\n" \
        in out, out
    assert code == 1 and out.endswith("decision:    refused: destination is a private address "
                                      "(HTTP 403, SOCKS5 reply 0x02)\n"), out

    code, out, _ = explain("dev", "mirror.test:443")
    assert "key:         dev (group default, no rules)\n" in out
    assert "rules:       none: group default allows what the guard allows\n" in out
    assert "  127.0.0.9: guard: destination is a private address\n" in out, out
    assert code == 1

    code, out, _ = explain("alice", "127.0.0.1:25")
    assert code == 1
    assert "port:        25 refused by the guard: destination port not allowed\n" in out

    # Usage and config errors: 2.
    assert explain("nobody", "registry.test:443")[0] == 2
    assert explain("ci", "registry.test")[0] == 2
    assert explain("ci", "registry.test:443", "--kind", "udp")[0] == 2
    assert explain("ci", "registry.test:443", "--listener", "nope")[0] == 2
    assert run_cli("policy", "explain", "-c", s.workdir / "missing.yaml", "ci",
                   "registry.test:443").returncode == 2
    r = run_cli("policy", "explain", "-c", s.config_path, "ci", "registry.test:443", "--kind",
                "udp")
    assert "--kind \"udp\": one of http, connect" in r.stderr, r.stderr
