"""Happy Eyeballs (RFC 8305): a name with an AAAA record whose address never answers and an A
record that does. The IPv6 attempt goes first; 250 ms later an IPv4 attempt races it and wins,
instead of the request waiting out the connect timeout."""

import socket
import struct
import subprocess
import time

import pytest

from helpers import CLEAN_ENV, RawConnection, basic_auth
from sluice_proc import find_typed_configs
from test_socks5 import SlowDns


class DualStackDns(SlowDns):
    """A loopback name server: names ending in ".test" have A 127.0.0.1 and AAAA ::1, at once."""

    def __init__(self):
        super().__init__(delay=0)

    def _answer(self, query, peer):
        qid, _flags, qdcount = struct.unpack("!HHH", query[:6])
        pos, labels = 12, []
        while query[pos] != 0:
            labels.append(query[pos + 1:pos + 1 + query[pos]].decode().lower())
            pos += 1 + query[pos]
        qtype = struct.unpack("!H", query[pos + 1:pos + 3])[0]
        question = query[12:pos + 5]
        rdata = None
        if qdcount == 1 and ".".join(labels).endswith(".test"):
            rdata = {1: socket.inet_aton("127.0.0.1"),
                     28: socket.inet_pton(socket.AF_INET6, "::1")}.get(qtype)
        if rdata is None:
            resp = struct.pack("!HHHHHH", qid, 0x8180, 1, 0, 0, 0) + question
        else:
            resp = (struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question +
                    struct.pack("!HHHIH", 0xC00C, qtype, 1, 60, len(rdata)) + rdata)
        try:
            self.sock.sendto(resp, peer)
        except OSError:
            pass


class SilentIpv6:
    """[::1]:port taking no connection: its accept queue is held full, so SYNs go unanswered."""

    def __init__(self, port):
        self.port = port
        self.listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.listener.bind(("::1", port))
        self.listener.listen(0)
        self.filler = socket.create_connection(("::1", port), timeout=5)

    def pending_connects(self):
        r = subprocess.run(["ss", "-Htn", "state", "syn-sent", "dst", f"[::1]:{self.port}"],
                           capture_output=True, text=True, env=CLEAN_ENV, check=True)
        return len([line for line in r.stdout.splitlines() if line.strip()])

    def close(self):
        self.filler.close()
        self.listener.close()


@pytest.fixture
def dual_stack(py_origin):
    dns = DualStackDns()
    silent = SilentIpv6(py_origin.port)
    yield dns, silent
    silent.close()
    dns.stop()


def start_with(start_sluice, dns, **router):
    def patch(full):
        full.setdefault("dns", {})["resolvers"] = [f"127.0.0.1:{dns.port}"]
        for r in find_typed_configs(full, ".RouterConfig"):
            r.update(router)

    return start_sluice(patch=patch)


def get(s, url):
    host = url.split("/")[2]
    with RawConnection(s.proxy_addr, 20) as c:
        c.send(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n"
               f"Proxy-Authorization: {basic_auth(s.key)}\r\n\r\n".encode())
        return c.read_response("GET")


def test_a_silent_ipv6_address_loses_the_race(start_sluice, dual_stack, py_origin):
    dns, silent = dual_stack
    s = start_with(start_sluice, dns, connect_timeout="5s")
    r = get(s, f"http://dual.test:{py_origin.port}/hello")
    assert r.status == 200, r
    assert s.stat("upstream.cx_connect_raced") == 1
    assert s.stat("upstream.cx_connect_timeout") == 0
    # The losing attempt was closed, not left pending.
    deadline = time.monotonic() + 5
    while silent.pending_connects() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert silent.pending_connects() == 0


def test_prefer_ipv4_dials_it_first(start_sluice, dual_stack, py_origin):
    dns, _ = dual_stack
    s = start_with(start_sluice, dns, prefer="ipv4", connect_timeout="5s")
    assert get(s, f"http://dual.test:{py_origin.port}/hello").status == 200
    assert s.stat("upstream.cx_connect_raced") == 0


def test_only_ipv6_has_nothing_to_race_with(start_sluice, dual_stack, py_origin):
    dns, _ = dual_stack
    s = start_with(start_sluice, dns, only="ipv6", connect_timeout="1s")
    assert get(s, f"http://dual.test:{py_origin.port}/hello").status == 504
    assert s.stat("upstream.cx_connect_raced") == 0
    assert s.stat("upstream.cx_connect_timeout") == 1


def test_without_the_delay_one_address_at_a_time(start_sluice, dual_stack, py_origin):
    dns, _ = dual_stack
    s = start_with(start_sluice, dns, happy_eyeballs_delay="0s", connect_timeout="1s")
    # The silent IPv6 address holds the only attempt until the connect timeout.
    assert get(s, f"http://dual.test:{py_origin.port}/hello").status == 504
    assert s.stat("upstream.cx_connect_raced") == 0


def test_bad_values_are_refused(tmp_path, start_sluice):
    from sluice_proc import run_cli, write_full_form
    s = start_sluice()
    for field, value, message in (("prefer", "ipv5", "prefer: 'ipv5'"),
                                  ("only", "both", "only: 'both'"),
                                  ("happy_eyeballs_delay", "20s", "longer than connect_timeout")):
        def patch(full, field=field, value=value):
            for r in find_typed_configs(full, ".RouterConfig"):
                r[field] = value
        path = write_full_form(s.config_path, tmp_path / f"{field}.yaml", s.key, patch=patch)
        r = run_cli("check", "-c", path)
        assert r.returncode == 1 and message in r.stderr, (field, r.stderr)
