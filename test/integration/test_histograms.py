"""Latency histograms through the real binary: request duration per listener and protocol, tunnel
duration, TLS handshake, upstream connect and DNS lookup times. Their counts move with the
traffic, agree with the counters, read the same in /stats, its JSON and /stats/prometheus, and the
exposition still passes `promtool check metrics`."""

import math
import shutil
import subprocess

import pytest

from helpers import curl, free_port
from test_prometheus import h2_get, parse_exposition
from test_socks5 import SlowDns

PROMTOOL = shutil.which("promtool")
QUANTILES = (".p50", ".p90", ".p99")

# dotted name -> (Prometheus family, labels)
HISTOGRAMS = {
    "request.http.http1.duration_seconds":
        ("sluice_request_duration_seconds", '{listener="http",protocol="http1"}'),
    "request.https.http1.duration_seconds":
        ("sluice_request_duration_seconds", '{listener="https",protocol="http1"}'),
    "request.https.http2.duration_seconds":
        ("sluice_request_duration_seconds", '{listener="https",protocol="http2"}'),
    "request.socks5.socks5.duration_seconds":
        ("sluice_request_duration_seconds", '{listener="socks5",protocol="socks5"}'),
    "tunnel.listener.http.duration_seconds":
        ("sluice_tunnel_listener_duration_seconds", '{listener="http"}'),
    "tunnel.listener.socks5.duration_seconds":
        ("sluice_tunnel_listener_duration_seconds", '{listener="socks5"}'),
    "tls.https.handshake_duration_seconds":
        ("sluice_tls_handshake_duration_seconds", '{chain="https"}'),
    "upstream.cx_connect_duration_seconds": ("sluice_upstream_cx_connect_duration_seconds", ""),
    "dns.lookup_duration_seconds": ("sluice_dns_lookup_duration_seconds", ""),
}


@pytest.fixture
def dns():
    d = SlowDns(delay=0.05)
    yield d
    d.stop()


@pytest.fixture
def front_ends(start_sluice, certs, dns):
    """sluice with HTTP, TLS (h2 and http/1.1) and SOCKS5 listeners and a loopback name server
    that answers *.test with 127.0.0.1."""
    tls_port, socks_port = free_port(), free_port()
    d = certs["dir"]

    def use_dns(full):
        full.setdefault("dns", {})["resolvers"] = [f"127.0.0.1:{dns.port}"]

    s = start_sluice(extra_short=(f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                                  f"  cert: {d / 'server-chain.pem'}\n  key: {d / 'server.key'}\n"
                                  f"socks5:\n  listen: 127.0.0.1:{socks_port}\n"),
                     patch=use_dns)
    s.tls_port, s.socks_port = tls_port, socks_port
    return s


def histograms(s):
    """{name: {"count", "sum", "p50", "p90", "p99"}} from the text /stats."""
    stats = s.stats()
    out = {}
    for name in HISTOGRAMS:
        assert f"{name}.count" in stats, \
            f"{name} is not in /stats: {sorted(k for k in stats if 'seconds' in k)}"
        out[name] = {k: stats[f"{name}.{k}"] for k in ("count", "sum", "p50", "p90", "p99")}
    return out


def drive(s, certs, nginx):
    def ok(r):
        assert r.returncode == 0 and r.stdout == b"200", r.describe()

    out = ["-o", "/dev/null", "-w", "%{http_code}"]
    auth = ["-U", f"u:{s.key}"]
    https_proxy = ["--proxy", f"https://127.0.0.1:{s.tls_port}", "--proxy-cacert", certs["ca"]]
    ok(curl("-x", s.proxy_url, *auth, nginx.url("/1k"), *out))
    ok(curl("-x", s.proxy_url, *auth, "--cacert", certs["ca"], nginx.tls_url("/small.txt"),
            *out))  # a CONNECT tunnel
    # A name only the loopback name server knows: one lookup.
    ok(curl("-x", s.proxy_url, *auth, nginx.url("/1k").replace("127.0.0.1", "origin.test"), *out))
    ok(curl(*https_proxy, *auth, nginx.url("/1k"), *out))
    ok(curl("--proxy", f"socks5h://u:{s.key}@127.0.0.1:{s.socks_port}", nginx.url("/1k"), *out))
    authority = nginx.url("/1k").split("/")[2]
    assert h2_get(s.tls_port, certs["ca"], authority, "/1k", s.key) == 200


def test_counts_move_with_the_traffic(front_ends, certs, nginx, dns):
    s = front_ends
    before = histograms(s)
    # Registered at start, empty: no quantile to estimate yet.
    for name, h in before.items():
        assert h["count"] == 0 and h["sum"] == 0, (name, h)
        assert all(math.isnan(h[q[1:]]) for q in QUANTILES), (name, h)

    drive(s, certs, nginx)
    want = {
        # the forward request, the CONNECT, the request to origin.test
        "request.http.http1.duration_seconds": 3,
        "request.https.http1.duration_seconds": 1,
        "request.https.http2.duration_seconds": 1,
        "request.socks5.socks5.duration_seconds": 1,
        "tunnel.listener.http.duration_seconds": 1,
        "tunnel.listener.socks5.duration_seconds": 1,
        "tls.https.handshake_duration_seconds": 2,
        "dns.lookup_duration_seconds": 1,
    }
    # Tunnels end (and leave their records) after the client has gone.
    for name, n in want.items():
        assert s.wait_stat(f"{name}.count", lambda v, n=n: v >= n, timeout=10) == n, name
    after = histograms(s)
    stats = s.stats()
    # The counters of the same events agree.
    assert after["tls.https.handshake_duration_seconds"]["count"] == stats["tls.https.handshakes"]
    assert after["dns.lookup_duration_seconds"]["count"] == stats["dns.queries"]
    assert [q for q, _ in dns.queries if q == "origin.test"], dns.queries
    connected = (stats["upstream.cx_connect_total"] - stats["upstream.cx_connect_fail"] -
                 stats["upstream.cx_connect_timeout"])
    assert connected >= 1
    assert after["upstream.cx_connect_duration_seconds"]["count"] == connected
    for name, h in after.items():
        assert h["sum"] > 0, (name, h)
        assert 0 < h["p50"] <= h["p90"] <= h["p99"], (name, h)
    # The lookup waited for the name server's delay: its estimate is at least that bucket's.
    assert after["dns.lookup_duration_seconds"]["p99"] >= 0.025, after["dns.lookup_duration_seconds"]

    # The JSON form: the same counts, cumulative buckets.
    doc = s.admin("/stats?format=json").json()
    by_name = {h["name"]: h for h in doc["histograms"]}
    for name, h in after.items():
        j = by_name[name]
        assert j["count"] == h["count"] and j["sum"] == pytest.approx(h["sum"]), (name, j)
        counts = [b["count"] for b in j["buckets"]]
        bounds = [b["le"] for b in j["buckets"]]
        assert counts == sorted(counts) and counts[-1] <= j["count"], (name, j)
        assert bounds == sorted(bounds), (name, j)
    assert not [x for x in doc["stats"] if x["name"] in HISTOGRAMS], "a histogram among the stats"

    # Prometheus: one histogram family each, _count equal to the +Inf bucket and to /stats.
    families = parse_exposition(s.admin("/stats/prometheus").text)
    for name, (family, labels) in HISTOGRAMS.items():
        assert families[family]["type"] == "histogram", family
        samples = families[family]["samples"]
        inf = labels[:-1] + ',le="+Inf"}' if labels else '{le="+Inf"}'
        assert samples["_count" + labels] == samples["_bucket" + inf] == after[name]["count"], \
            (name, sorted(samples))
        assert samples["_sum" + labels] == pytest.approx(after[name]["sum"]), name
        buckets = [(k, v) for k, v in samples.items()
                   if k.startswith("_bucket" + labels[:-1] if labels else "_bucket")]
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), (name, buckets)


def test_exposition_with_histograms_passes_promtool(front_ends, certs, nginx, tmp_path):
    if PROMTOOL is None:
        pytest.skip("promtool not found: it comes with Debian's prometheus package "
                    "(tools/deps.sh --test installs it)")
    s = front_ends
    drive(s, certs, nginx)
    s.wait_stat("tunnel.listener.socks5.duration_seconds.count", lambda v: v >= 1, timeout=10)
    r = s.admin("/stats/prometheus")
    assert r.status == 200, r
    assert "# TYPE sluice_request_duration_seconds histogram" in r.text
    path = tmp_path / "metrics.txt"
    path.write_bytes(r.body)
    with open(path, "rb") as f:
        check = subprocess.run([PROMTOOL, "check", "metrics"], stdin=f, capture_output=True,
                               timeout=60)
    problems = (check.stdout + check.stderr).decode(errors="replace").splitlines()
    assert check.returncode == 0 and not problems, \
        f"promtool exit {check.returncode}, {len(problems)} lines:\n" + "\n".join(problems[:60])
