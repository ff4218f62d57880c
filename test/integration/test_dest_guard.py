"""The destination guard (sluice.dest_guard) end to end: the real binary, curl, an origin and a
name server, all inside a network namespace this module creates.

In the namespace `lo` carries one address of each internal range, so a request the guard
wrongly lets through reaches the origin (and fails the test) instead of leaving the machine.
The public-looking addresses (8.8.8.8, 2606:4700:4700::1111) belong to a second namespace, the
"world", joined to the first by a veth pair and to nothing else: sluice's own host addresses are
refused like sluice itself, so a public destination must be another host. The tests here run
with the default `allow_private: false`.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import CLEAN_ENV, basic_auth, parse_stats_text
from sluice_proc import sluice_binary, write_full_form

AGENTS = Path(__file__).resolve().parent / "netns_agents.py"
PYTHON = sys.executable

ORIGIN_PORT = 8080
LOW_PORT = 25  # outside the default allowed_ports; the origin listens there too
HIGH_PORT = 1023
DNS_PORT = 53
PUBLIC_V4 = "8.8.8.8"
PUBLIC_V6 = "2606:4700:4700::1111"
# sluice's end of the veth pair to the world namespace (its source address there).
VETH_V4 = "10.99.0.1"
VETH_V6 = "fd99::1"
# Public-looking addresses of sluice's own host, on its lo: what a cloud host's public IP is.
HOST_V4 = "1.2.3.4"
HOST_V6 = "2a00:1450::5"
# An address put on lo while sluice runs (and taken off again).
LATE_V4 = "5.6.7.8"

FORBIDDEN_PRIVATE = "403 Forbidden: destination is a private address"
FORBIDDEN_DENIED = "403 Forbidden: destination is in a denied range"
FORBIDDEN_PORT = "403 Forbidden: destination port not allowed"
FORBIDDEN_SELF = "403 Forbidden: destination is sluice itself"

# One address per internal IPv4 range, all put on lo in the namespace (so all reachable there).
PRIVATE_V4_ON_LO = {
    "10.0.0.0/8": "10.0.0.1",
    "100.64.0.0/10": "100.64.0.1",
    "127.0.0.0/8": "127.0.0.1",
    "169.254.0.0/16": "169.254.1.1",
    "172.16.0.0/12": "172.16.0.1",
    "192.0.0.0/24": "192.0.0.9",
    "192.0.2.0/24": "192.0.2.1",
    "192.88.99.0/24": "192.88.99.1",
    "192.168.0.0/16": "192.168.1.1",
    "198.18.0.0/15": "198.18.0.1",
    "198.51.100.0/24": "198.51.100.7",
    "203.0.113.0/24": "203.0.113.5",
}
# Reached without being on lo: 0.0.0.0 is the local host; the others cannot be dialled at all,
# but must still be refused by the guard (403), not by a failed connect (502).
PRIVATE_V4_OTHER = {
    "0.0.0.0/8": "0.0.0.0",
    "224.0.0.0/4": "224.0.0.1",
    "240.0.0.0/4": "240.0.0.1",
    "255.255.255.255": "255.255.255.255",
}
# Internal IPv6 ranges whose addresses lo takes.
PRIVATE_V6_ON_LO = {
    "::1/128": "::1",
    "fc00::/7": "fd00::1",
    "2001:db8::/32": "2001:db8::1",
    "2001::/32": "2001::1",
    "2002::/16": "2002:808:808::1",
    "64:ff9b::/96": "64:ff9b::808:808",
    "64:ff9b:1::/48": "64:ff9b:1::1",
    "100::/64": "100::1",
}
PRIVATE_V6_OTHER = {
    "::/128": "::",
    "::ffff:0:0/96 (loopback)": "::ffff:127.0.0.1",
    "::ffff:0:0/96 (public)": "::ffff:8.8.8.8",
    "fe80::/10": "fe80::1",
    "ff00::/8": "ff02::1",
}

# Every notation of 127.0.0.1 a resolver or URL parser accepts, as a client would write it.
LOOPBACK_NOTATIONS = [
    "127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.1", "0x7f000001", "0x7f.0.0.1",
    "017700000001", "127.0.1", "0x7F.0x0.0x0.0x1", "127.000.000.001", "0177.1", "127.0.0.1.",
    "[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:0:0:1]",
]

DNS_TABLE = {
    "good.test": [PUBLIC_V4],
    "evil.test": ["127.0.0.1"],
    "mixed.test": [PUBLIC_V4, "10.0.0.1"],
    "private.test": ["192.168.1.1"],
    # Answers in turn, TTL 0: public first, loopback from then on.
    "rebind.test": [[PUBLIC_V4], ["127.0.0.1"]],
}


def _run(cmd, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, env=CLEAN_ENV, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


class JsonLog:
    """A JSON-lines file an agent appends to; mark() then since() reads what came after."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.touch()

    def mark(self):
        return self.path.stat().st_size

    def since(self, mark=0):
        with open(self.path, "rb") as f:
            f.seek(mark)
            data = f.read()
        return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


class Netns:
    """A network namespace with only lo up, and the origin and name server running in it."""

    def __init__(self, name, workdir):
        self.name = name
        self.world = f"{name}-world"
        self.dir = Path(workdir)
        self.procs = []
        self.ipv6 = False
        self.origin_log = None
        self.dns_log = None

    def cmd(self, *args):
        return ["ip", "netns", "exec", self.name, *[str(a) for a in args]]

    def setup(self):
        _run(["ip", "netns", "add", self.world])
        for ns in (self.name, self.world):
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # Addresses usable at once: no duplicate address detection on either side.
            for key in ("all", "default"):
                _run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                      f"net.ipv6.conf.{key}.accept_dad=0"], check=False)
        _run(["ip", "-n", self.name, "link", "add", "veth0", "type", "veth", "peer", "name",
              "veth1", "netns", self.world])
        _run(["ip", "-n", self.name, "link", "set", "veth0", "up"])
        _run(["ip", "-n", self.world, "link", "set", "veth1", "up"])
        _run(["ip", "-n", self.name, "addr", "add", f"{VETH_V4}/32", "dev", "veth0"])
        _run(["ip", "-n", self.name, "route", "add", f"{PUBLIC_V4}/32", "dev", "veth0", "src",
              VETH_V4])
        _run(["ip", "-n", self.world, "addr", "add", f"{PUBLIC_V4}/32", "dev", "veth1"])
        _run(["ip", "-n", self.world, "route", "add", f"{VETH_V4}/32", "dev", "veth1"])
        for ip in [*PRIVATE_V4_ON_LO.values(), HOST_V4]:
            if ip != "127.0.0.1":
                _run(["ip", "-n", self.name, "addr", "add", f"{ip}/32", "dev", "lo"])
        r = _run(["ip", "-n", self.name, "-6", "addr", "add", f"{VETH_V6}/128", "dev", "veth0",
                  "nodad"], check=False)
        self.ipv6 = r.returncode == 0
        if self.ipv6:
            _run(["ip", "-n", self.name, "-6", "route", "add", f"{PUBLIC_V6}/128", "dev", "veth0",
                  "src", VETH_V6])
            _run(["ip", "-n", self.world, "-6", "addr", "add", f"{PUBLIC_V6}/128", "dev",
                  "veth1", "nodad"])
            _run(["ip", "-n", self.world, "-6", "route", "add", f"{VETH_V6}/128", "dev",
                  "veth1"])
            for ip in [*PRIVATE_V6_ON_LO.values(), HOST_V6]:
                if ip != "::1":
                    _run(["ip", "-n", self.name, "-6", "addr", "add", f"{ip}/128", "dev", "lo",
                          "nodad"])

    def set_address(self, ip, present):
        """Puts an address on sluice's lo, or takes it off."""
        family = ["-6"] if ":" in ip else []
        _run(["ip", "-n", self.name, *family, "addr", "add" if present else "del",
              f"{ip}/{128 if ':' in ip else 32}", "dev", "lo"])

    def spawn(self, what, *args, ns=None):
        cmd = ["ip", "netns", "exec", ns or self.name, PYTHON, AGENTS, what, *map(str, args)]
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=CLEAN_ENV)
        self.procs.append(p)
        line = p.stdout.readline()
        if line.strip() != "ready":
            p.kill()
            raise RuntimeError(f"{what} agent did not start: {line!r} {p.stderr.read()}")
        return p

    def start_agents(self):
        self.origin_log = JsonLog(self.dir / "origin.log")
        ports = (ORIGIN_PORT, LOW_PORT, HIGH_PORT, 3129)
        self.spawn("origin", self.origin_log.path, *ports)
        # The world's origin answers on the public addresses, into the same log.
        self.spawn("origin", self.origin_log.path, *ports, ns=self.world)
        self.dns_log = JsonLog(self.dir / "dns.log")
        self.spawn("dns", self.dns_log.path, DNS_PORT, json.dumps(DNS_TABLE))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)

    def curl(self, *args, timeout=10):
        r = _run(self.cmd("curl", "-sS", "--max-time", timeout, *args), check=False,
                 timeout=timeout + 10)
        return r

    def raw(self, port, requests):
        r = _run(self.cmd(PYTHON, AGENTS, "raw", port, json.dumps(requests)), timeout=120)
        return json.loads(r.stdout)


class NsSluice:
    """sluice running inside the namespace; its ports are only reachable from there."""

    def __init__(self, ns, workdir, port, admin_port, key, config_path):
        self.ns = ns
        self.dir = Path(workdir)
        self.port = port
        self.admin_port = admin_port
        self.key = key
        self.config_path = config_path
        self.log_path = self.dir / "sluice.log"
        self.proc = None

    def start(self):
        self._log = open(self.log_path, "wb")
        # `ip netns exec` execs the command: this pid is sluice's own.
        self.proc = subprocess.Popen(self.ns.cmd(sluice_binary(), "run", "-c", self.config_path),
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=CLEAN_ENV)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"sluice exited with {self.proc.returncode}\n{self.log()}",
                            pytrace=False)
            r = self.ns.curl("-o", "/dev/null", "-w", "%{http_code}",
                             f"http://127.0.0.1:{self.admin_port}/ready", timeout=2)
            if r.stdout == "200":
                return self
            time.sleep(0.05)
        pytest.fail(f"sluice in {self.ns.name} not ready\n{self.log()}", pytrace=False)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            return None

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stats(self):
        r = self.ns.curl(f"http://127.0.0.1:{self.admin_port}/stats")
        assert r.returncode == 0, r.stderr
        return parse_stats_text(r.stdout)

    def guard_stats(self):
        s = self.stats()
        return {k[len("dest_guard."):]: v for k, v in s.items() if k.startswith("dest_guard.")}

    def get(self, url, *args):
        """GET through the proxy; (status, body)."""
        r = self.ns.curl("-x", f"http://127.0.0.1:{self.port}", "-U", f"u:{self.key}",
                         "-w", "\n%{http_code}", *args, url)
        body, _, code = r.stdout.rpartition("\n")
        return int(code or 0), body.strip()

    def tunnel(self, url):
        """GET through a CONNECT tunnel; (CONNECT status, body)."""
        r = self.ns.curl("-p", "-x", f"http://127.0.0.1:{self.port}", "-U", f"u:{self.key}",
                         "-w", "\n%{http_connect}", url)
        body, _, code = r.stdout.rpartition("\n")
        return int(code or 0), body.strip()

    def raw(self, targets, kind="GET"):
        """Raw requests naming each target exactly as written (curl would normalise them)."""
        auth = basic_auth(self.key)
        requests = []
        for authority in targets:
            if kind == "CONNECT":
                requests.append(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
                                f"Proxy-Authorization: {auth}\r\n\r\n")
            else:
                requests.append(f"GET http://{authority}/raw HTTP/1.1\r\nHost: {authority}\r\n"
                                f"Proxy-Authorization: {auth}\r\nConnection: close\r\n\r\n")
        return self.ns.raw(self.port, requests)


@pytest.fixture(scope="module")
def netns(tmp_path_factory):
    if shutil.which("ip") is None:
        pytest.skip("`ip` (iproute2) is not installed: network namespaces unavailable")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (`ip netns add`)")
    name = f"sluice-test-{secrets.token_hex(4)}"
    r = _run(["ip", "netns", "add", name], check=False)
    if r.returncode != 0:
        pytest.skip(f"`ip netns add` failed: {r.stderr.strip()}")
    ns = Netns(name, tmp_path_factory.mktemp("netns"))
    try:
        ns.setup()
        ns.start_agents()
        yield ns
    finally:
        ns.stop()
        _run(["ip", "netns", "del", name], check=False)
        _run(["ip", "netns", "del", ns.world], check=False)


@pytest.fixture
def ns_sluice(request, netns, tmp_path):
    """Factory: ns_sluice(destinations="", listen="127.0.0.1", patch=None) starts sluice in the
    namespace with the short form's destinations section (default: empty = the defaults)."""
    started = []

    def start(destinations="", listen="127.0.0.1", patch=None):
        n = len(started)
        workdir = tmp_path / f"sluice{n}"
        workdir.mkdir()
        key = secrets.token_urlsafe(24)
        port, admin_port = 3128 + 10 * n, 9901 + 10 * n
        cfg = workdir / "config.yaml"
        text = (f"server:\n  listen: \"{listen}:{port}\"\n  workers: 1\n"
                f"auth:\n  api_keys: [\"{key}\"]\n"
                f"admin:\n  listen: \"127.0.0.1:{admin_port}\"\n")
        if destinations:
            text += f"destinations:\n{destinations}\n"
        cfg.write_text(text)
        if patch is not None:
            cfg = write_full_form(cfg, workdir / "full.yaml", key, patch=patch)
        s = NsSluice(netns, workdir, port, admin_port, key, cfg)
        started.append(s)
        return s.start()

    yield start

    problems = []
    for s in started:
        code = s.stop()
        if code != 0:
            problems.append(f"sluice exit code after SIGTERM: {code}\n{s.log()[-3000:]}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def use_test_dns(full):
    full.setdefault("dns", {})["resolvers"] = [f"127.0.0.1:{DNS_PORT}"]
    full["dns"]["ignore_hosts_file"] = True


# ---------------------------------------------------------------------------------------------


def test_namespace_really_reaches_every_address(netns):
    """The premise of the suite: without sluice, each refused address is reachable in the
    namespace, so a guard that lets one through would be caught by the origin."""
    targets = [PUBLIC_V4, *PRIVATE_V4_ON_LO.values(), "0.0.0.0"]
    if netns.ipv6:
        targets += [f"[{ip}]" for ip in (PUBLIC_V6, *PRIVATE_V6_ON_LO.values(), "::ffff:127.0.0.1")]
    for ip in targets:
        r = netns.curl("-o", "/dev/null", "-w", "%{http_code}", f"http://{ip}:{ORIGIN_PORT}/")
        assert r.stdout == "200", f"{ip}: {r.stdout} {r.stderr}"


def test_public_address_is_served_and_pinned(ns_sluice, netns):
    s = ns_sluice()
    mark = netns.origin_log.mark()
    status, body = s.get(f"http://{PUBLIC_V4}:{ORIGIN_PORT}/pub")
    assert (status, body) == (200, f"origin {PUBLIC_V4} /pub"), s.log()[-2000:]
    status, body = s.tunnel(f"http://{PUBLIC_V4}:{ORIGIN_PORT}/tun")
    assert (status, body) == (200, f"origin {PUBLIC_V4} /tun")
    if netns.ipv6:
        status, body = s.get(f"http://[{PUBLIC_V6}]:{ORIGIN_PORT}/pub6")
        assert (status, body) == (200, f"origin {PUBLIC_V6} /pub6")
    requests = [e for e in netns.origin_log.since(mark) if e["event"] == "request"]
    assert len(requests) == (3 if netns.ipv6 else 2), requests
    g = s.guard_stats()
    assert g["allowed"] == len(requests), g
    assert g["blocked_private"] == 0, g


def test_every_private_range_is_refused(ns_sluice, netns):
    s = ns_sluice()
    targets = {**PRIVATE_V4_ON_LO, **PRIVATE_V4_OTHER}
    if netns.ipv6:
        targets.update({r: f"[{ip}]" for r, ip in {**PRIVATE_V6_ON_LO,
                                                    **PRIVATE_V6_OTHER}.items()})
    mark = netns.origin_log.mark()
    refused = 0
    for rng, host in targets.items():
        status, body = s.get(f"http://{host}:{ORIGIN_PORT}/")
        assert (status, body.strip()) == (403, FORBIDDEN_PRIVATE), f"{rng} ({host})"
        status, _ = s.tunnel(f"http://{host}:{ORIGIN_PORT}/")
        assert status == 403, f"CONNECT {rng} ({host})"
        refused += 2
    assert netns.origin_log.since(mark) == [], "a refused destination reached the origin"
    g = s.guard_stats()
    assert g["blocked_private"] == refused, g
    assert g["allowed"] == 0, g


def test_every_literal_notation_of_loopback_is_refused(ns_sluice, netns):
    s = ns_sluice()
    mark = netns.origin_log.mark()
    dns_mark = netns.dns_log.mark()
    for kind in ("GET", "CONNECT"):
        targets = [f"{host}:{ORIGIN_PORT}" for host in LOOPBACK_NOTATIONS]
        for host, r in zip(LOOPBACK_NOTATIONS, s.raw(targets, kind)):
            assert (r["status"], r["body"].strip()) == (403, FORBIDDEN_PRIVATE), \
                f"{kind} {host}: {r}"
    # The same notations of the public address are served: they are normalised, not refused
    # for looking odd.
    public = ["134744072", "0x8.0x8.0x8.0x8", "010.010.010.010", "8.526344", "0x08080808"]
    for host, r in zip(public, s.raw([f"{h}:{ORIGIN_PORT}" for h in public])):
        assert (r["status"], r["body"]) == (200, f"origin {PUBLIC_V4} /raw\n"), f"{host}: {r}"
    seen = [e for e in netns.origin_log.since(mark) if e["event"] == "request"]
    assert [e["local"] for e in seen] == [PUBLIC_V4] * len(public), seen
    # A literal is never sent to DNS.
    assert netns.dns_log.since(dns_mark) == []
    assert s.guard_stats()["blocked_private"] == 2 * len(LOOPBACK_NOTATIONS)


def test_port_outside_allowed_ports_is_refused_without_connect_or_lookup(ns_sluice, netns):
    s = ns_sluice()
    mark = netns.origin_log.mark()
    dns_mark = netns.dns_log.mark()
    for port in (LOW_PORT, HIGH_PORT):
        status, body = s.get(f"http://{PUBLIC_V4}:{port}/")
        assert (status, body.strip()) == (403, FORBIDDEN_PORT), port
        status, _ = s.tunnel(f"http://{PUBLIC_V4}:{port}/")
        assert status == 403, port
        status, body = s.get(f"http://good.test:{port}/")
        assert (status, body.strip()) == (403, FORBIDDEN_PORT), port
    assert netns.origin_log.since(mark) == [], "the origin saw a connection on a refused port"
    assert netns.dns_log.since(dns_mark) == [], "a name was resolved for a refused port"
    assert s.guard_stats()["blocked_port"] == 6
    # The origin really listens there: with the port allowed, it answers.
    t = ns_sluice(destinations=f"  allowed_ports: [\"{LOW_PORT}\", \"{ORIGIN_PORT}\"]")
    assert t.get(f"http://{PUBLIC_V4}:{LOW_PORT}/low") == (200, f"origin {PUBLIC_V4} /low")
    status, body = t.get(f"http://{PUBLIC_V4}:{HIGH_PORT}/")
    assert (status, body.strip()) == (403, FORBIDDEN_PORT)


def test_allow_private_opens_private_ranges(ns_sluice, netns):
    s = ns_sluice(destinations="  allow_private: true")
    for ip in ("10.0.0.1", "192.168.1.1", "127.0.0.1", "100.64.0.1", "169.254.1.1"):
        assert s.get(f"http://{ip}:{ORIGIN_PORT}/p") == (200, f"origin {ip} /p"), ip
    if netns.ipv6:
        assert s.get(f"http://[fd00::1]:{ORIGIN_PORT}/p") == (200, "origin fd00::1 /p")
    assert s.guard_stats()["blocked_private"] == 0


def test_allow_opens_only_its_ranges(ns_sluice, netns):
    s = ns_sluice(destinations="  allow: [\"192.168.0.0/16\", \"fd00::/8\"]")
    assert s.get(f"http://192.168.1.1:{ORIGIN_PORT}/a") == (200, "origin 192.168.1.1 /a")
    status, body = s.get(f"http://10.0.0.1:{ORIGIN_PORT}/")
    assert (status, body.strip()) == (403, FORBIDDEN_PRIVATE)
    if netns.ipv6:
        assert s.get(f"http://[fd00::1]:{ORIGIN_PORT}/a") == (200, "origin fd00::1 /a")


def test_deny_wins_over_allow_private(ns_sluice, netns):
    s = ns_sluice(destinations="  allow_private: true\n"
                               "  allow: [\"10.0.0.0/8\"]\n"
                               f"  deny: [\"10.0.0.0/8\", \"{PUBLIC_V4}/32\", \"fd00::/8\"]")
    mark = netns.origin_log.mark()
    for host in ("10.0.0.1", PUBLIC_V4, "[::ffff:10.0.0.1]") + (("[fd00::1]",) if netns.ipv6
                                                                  else ()):
        status, body = s.get(f"http://{host}:{ORIGIN_PORT}/")
        assert (status, body.strip()) == (403, FORBIDDEN_DENIED), host
    assert netns.origin_log.since(mark) == []
    assert s.get(f"http://192.168.1.1:{ORIGIN_PORT}/d") == (200, "origin 192.168.1.1 /d")
    g = s.guard_stats()
    assert g["blocked_denied"] == (4 if netns.ipv6 else 3), g


def test_sluice_itself_is_refused_even_with_allow_private(ns_sluice, netns):
    s = ns_sluice(destinations="  allow_private: true")
    for host in (f"127.0.0.1:{s.port}", f"127.0.0.1:{s.admin_port}", f"0.0.0.0:{s.port}",
                 f"[::ffff:127.0.0.1]:{s.admin_port}"):
        status, body = s.get(f"http://{host}/stats")
        assert (status, body.strip()) == (403, FORBIDDEN_SELF), host
    # Other services on the same address are not sluice.
    assert s.get(f"http://127.0.0.1:{ORIGIN_PORT}/o") == (200, "origin 127.0.0.1 /o")
    assert s.guard_stats()["blocked_self"] == 4

    # Bound to 0.0.0.0, sluice is every local address on its port.
    w = ns_sluice(destinations="  allow_private: true", listen="0.0.0.0")
    for host in ("10.0.0.1", VETH_V4, "127.0.0.2", "192.168.1.1"):
        status, body = w.get(f"http://{host}:{w.port}/")
        assert (status, body.strip()) == (403, FORBIDDEN_SELF), host
        status, _ = w.tunnel(f"http://{host}:{w.port}/")
        assert status == 403, host
    assert w.get(f"http://10.0.0.1:{ORIGIN_PORT}/w") == (200, "origin 10.0.0.1 /w")
    assert w.guard_stats()["blocked_self"] == 8


def test_the_hosts_own_public_addresses_are_sluice_itself(ns_sluice, netns):
    """HOST_V4 stands for the host's public address; the origin listens on [::] there, as a
    database bound to 0.0.0.0 would. No port of it is reachable through sluice by default."""
    s = ns_sluice()
    mark = netns.origin_log.mark()
    hosts = [HOST_V4] + ([f"[{HOST_V6}]"] if netns.ipv6 else [])
    for host in hosts:
        for port in (ORIGIN_PORT, 3129):
            status, body = s.get(f"http://{host}:{port}/")
            assert (status, body.strip()) == (403, FORBIDDEN_SELF), (host, port)
        status, _ = s.tunnel(f"http://{host}:{ORIGIN_PORT}/")
        assert status == 403, host
    # Another notation of the literal is the same host (the IPv4-mapped form is refused as an
    # internal range first).
    r = s.raw(["16909060:8080", "[::ffff:1.2.3.4]:8080"], kind="CONNECT")
    assert [x["status"] for x in r] == [403, 403], r
    assert netns.origin_log.since(mark) == [], "a request reached the host's own service"
    g = s.guard_stats()
    assert (g["blocked_self"], g["blocked_private"]) == (3 * len(hosts) + 1, 1), g
    # The world's public address is still served.
    assert s.get(f"http://{PUBLIC_V4}:{ORIGIN_PORT}/w") == (200, f"origin {PUBLIC_V4} /w")

    # An `allow` range opens the host explicitly.
    a = ns_sluice(destinations=f"  allow: [\"{HOST_V4}/32\"]")
    assert a.get(f"http://{HOST_V4}:{ORIGIN_PORT}/a") == (200, f"origin {HOST_V4} /a")


def test_the_hosts_addresses_follow_its_interfaces(ns_sluice, netns):
    """An address that appears on an interface while sluice runs is sluice's host within a few
    seconds, and stops being it when it goes."""
    s = ns_sluice(destinations=f"  deny: [\"10.99.0.0/16\"]")
    status, _ = s.get(f"http://{LATE_V4}:{ORIGIN_PORT}/")
    assert status == 502, "not on the host yet: the connect fails"
    changes = s.stats()["server.host_address_changes"]
    netns.set_address(LATE_V4, True)
    try:
        deadline = time.monotonic() + 15
        while True:
            status, body = s.get(f"http://{LATE_V4}:{ORIGIN_PORT}/")
            if status == 403 or time.monotonic() > deadline:
                break
            assert status == 200 or status == 502, (status, body)
            time.sleep(0.3)
        assert (status, body.strip()) == (403, FORBIDDEN_SELF)
        stats = s.stats()
        assert stats["server.host_address_changes"] > changes
    finally:
        netns.set_address(LATE_V4, False)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        status, _ = s.get(f"http://{LATE_V4}:{ORIGIN_PORT}/")
        if status == 502:
            break
        time.sleep(0.3)
    assert status == 502, "the address left the host but is still refused as its own"


def test_embedded_ipv4_is_judged_as_that_ipv4_address(ns_sluice, netns):
    """With every internal range open and the metadata address denied, no IPv6 form that a
    translator or tunnel turns into 169.254.169.254 gets past the deny range."""
    s = ns_sluice(destinations="  allow_private: true\n  deny: [\"169.254.169.254/32\"]")
    forms = ["64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe", "2002:a9fe:a9fe::1", "::a9fe:a9fe",
             "::ffff:169.254.169.254", "2001:0:4136:e378:8000:63bf:5601:5601"]
    r = s.raw([f"[{ip}]:{ORIGIN_PORT}" for ip in forms] + [f"169.254.169.254:{ORIGIN_PORT}"],
              kind="CONNECT")
    for ip, x in zip(forms + ["169.254.169.254"], r):
        assert x["status"] == 403 and "denied range" in x["body"], (ip, x)
    assert s.guard_stats()["blocked_denied"] == len(forms) + 1


def test_names_are_checked_on_every_address_and_pinned(ns_sluice, netns):
    s = ns_sluice(patch=use_test_dns)
    mark = netns.origin_log.mark()
    status, body = s.get(f"http://good.test:{ORIGIN_PORT}/g")
    assert (status, body) == (200, f"origin {PUBLIC_V4} /g"), s.log()[-2000:]
    for name in ("evil.test", "mixed.test", "private.test"):
        status, body = s.get(f"http://{name}:{ORIGIN_PORT}/")
        assert (status, body.strip()) == (403, FORBIDDEN_PRIVATE), name
        status, _ = s.tunnel(f"http://{name}:{ORIGIN_PORT}/")
        assert status == 403, name
    status, body = s.get(f"http://nxdomain.test:{ORIGIN_PORT}/")
    assert status == 502 and "no such host" in body, body
    seen = [e for e in netns.origin_log.since(mark) if e["event"] == "request"]
    assert [(e["local"], e["path"]) for e in seen] == [(PUBLIC_V4, "/g")], seen
    g = s.guard_stats()
    assert (g["allowed"], g["blocked_private"], g["resolve_failed"]) == (1, 6, 1), g


def test_dns_rebinding_cannot_slip_through(ns_sluice, netns):
    """rebind.test answers 8.8.8.8 once, then 127.0.0.1, with TTL 0. The guard checks the first
    answer and the router dials exactly that address: no second lookup that could see the
    loopback answer. The next request sees the loopback answer and is refused."""
    s = ns_sluice(patch=use_test_dns)
    mark = netns.origin_log.mark()
    dns_mark = netns.dns_log.mark()
    status, body = s.get(f"http://rebind.test:{ORIGIN_PORT}/first")
    assert (status, body) == (200, f"origin {PUBLIC_V4} /first"), s.log()[-2000:]
    status, body = s.get(f"http://rebind.test:{ORIGIN_PORT}/second")
    assert (status, body.strip()) == (403, FORBIDDEN_PRIVATE)
    a_queries = [q for q in netns.dns_log.since(dns_mark)
                 if q["name"] == "rebind.test" and q["type"] == 1]
    assert len(a_queries) == 2, f"one lookup per request expected: {a_queries}"
    seen = [e for e in netns.origin_log.since(mark) if e["event"] == "accept"]
    assert [e["local"] for e in seen] == [PUBLIC_V4], seen
