"""One listener, several protocols: sluice.protocol_sniffer peeks at the first bytes and the
filter chain for that protocol serves the connection. The full form is the short form's, with
the SOCKS5 (and TLS) listeners' chains moved onto the HTTP port."""

import copy
import socket

import pytest

from helpers import curl, free_port


def sniffer(protocols):
    return {"name": "sluice.protocol_sniffer",
            "typed_config": {"@type": "type.googleapis.com/sluice.filters.v1.ProtocolSnifferConfig",
                             "protocols": protocols}}


def share(full, protocols):
    """Moves every other listener's chains onto the 'http' listener, behind a sniffer."""
    listeners = {l["name"]: l for l in full["listeners"]}
    http = listeners["http"]
    http["listener_filters"] = list(http.get("listener_filters", [])) + [sniffer(protocols)]
    http["connection_limits"]["overflow_reply"] = "CLOSE"
    chains = []
    if "https" in listeners:
        chains += copy.deepcopy(listeners["https"]["filter_chains"])  # HTTP/2, then HTTP/1.1
    if "socks5" in listeners:
        socks_chain = copy.deepcopy(listeners["socks5"]["filter_chains"][0])
        socks_chain["match"] = {"application_protocols": ["socks5"]}
        chains.append(socks_chain)
    http_chain = http["filter_chains"][0]
    http_chain["match"] = {"transport_protocol": "raw_buffer",
                           "application_protocols": ["http/1.1"]}
    http["filter_chains"] = chains + [http_chain]
    full["listeners"] = [http]


@pytest.fixture
def shared(start_sluice, certs):
    d = certs["dir"]
    extra = (f"socks5:\n  listen: 127.0.0.1:{free_port()}\n"
             f"tls:\n  listen: 127.0.0.1:{free_port()}\n  cert: {d / 'server-chain.pem'}\n"
             f"  key: {d / 'server.key'}\n")
    return start_sluice(extra_short=extra, patch=lambda full: share(full, ["http1", "socks5", "tls"]))


def test_http_socks5_and_tls_on_one_port(shared, certs, nginx):
    s = shared
    url = nginx.url("/small.txt")
    r = curl("-x", f"http://127.0.0.1:{s.port}", "-U", f"u:{s.key}", url)
    assert r.returncode == 0 and r.stdout == b"small file from nginx\n", r.describe()
    r = curl("--socks5-hostname", f"u:{s.key}@127.0.0.1:{s.port}", url)
    assert r.returncode == 0 and r.stdout == b"small file from nginx\n", r.describe()
    r = curl("--proxy", f"https://127.0.0.1:{s.port}", "--proxy-cacert", certs["ca"], "-U",
             f"u:{s.key}", url)
    assert r.returncode == 0 and r.stdout == b"small file from nginx\n", r.describe()
    assert s.stat("listener.http.sniffer.http1") == 1
    assert s.stat("listener.http.sniffer.socks5") == 1
    assert s.stat("listener.http.sniffer.tls") == 1
    # Auth still applies on every protocol of the shared port.
    r = curl("--socks5-hostname", f"u:wrong@127.0.0.1:{s.port}", url)
    assert r.returncode != 0, r.describe()
    r = curl("-x", f"http://127.0.0.1:{s.port}", "-U", "u:wrong", url, "-o", "/dev/null", "-w",
             "%{http_code}")
    assert r.stdout == b"407", r.describe()


def test_a_protocol_the_port_does_not_accept_is_closed(start_sluice):
    s = start_sluice(extra_short=f"socks5:\n  listen: 127.0.0.1:{free_port()}\n",
                     patch=lambda full: share(full, ["http1"]))
    with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
        c.sendall(b"\x05\x01\x02")
        try:
            assert c.recv(10) == b""
        except ConnectionResetError:
            pass
    assert s.stat("listener.http.sniffer.not_allowed") == 1
    with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
        c.sendall(b"\x00\x01garbage that is no protocol\r\n")
        try:
            assert c.recv(10) == b""
        except ConnectionResetError:
            pass
    assert s.stat("listener.http.sniffer.unknown") == 1
