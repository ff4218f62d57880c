"""/stats/prometheus with every front end in use: the HTTP port, the TLS port (HTTP/1.1 and HTTP/2
by ALPN), SOCKS5, a named API key. The exposition must pass `promtool check metrics` (Debian
package prometheus) without a word, and per-instance names must be labels."""

import re
import secrets
import shutil
import socket
import ssl
import subprocess

import h2.config
import h2.connection
import h2.events
import pytest

from helpers import basic_auth, curl, free_port
from sluice_proc import find_typed_configs

PROMTOOL = shutil.which("promtool")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (-?[0-9]+(?:\.[0-9]+)?)$')
HISTOGRAM_SAMPLES = ("_bucket", "_sum", "_count")


def h2_get(port, ca, authority, path, key):
    """One GET over TLS with ALPN h2 (sluice's HTTP/2 codec); returns the :status."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.set_alpn_protocols(["h2"])
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                         server_hostname="localhost") as sock:
        assert sock.selected_alpn_protocol() == "h2"
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                    header_encoding="utf-8"))
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":path", path),
                                (":authority", authority),
                                ("proxy-authorization", basic_auth(key))], end_stream=True)
        sock.sendall(conn.data_to_send())
        status = None
        while True:
            data = sock.recv(65536)
            assert data, "sluice closed the HTTP/2 connection before the stream ended"
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    status = int(dict(ev.headers)[":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                    return status
            sock.sendall(conn.data_to_send())


def parse_exposition(text):
    """{family: {"help": ..., "type": ..., "samples": {labels: value}}}; asserts line order.
    A histogram's samples are keyed by suffix and labels: "_bucket{...,le=\"+Inf\"}", "_sum{...}"."""
    families = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in families, f"second HELP for {name}"
            current = families[name] = {"help": line.split(" ", 3)[3], "samples": {}}
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert current is families.get(name) and "type" not in current, \
                f"TYPE {name} not right after its HELP"
            current["type"] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, labels, value = m.group(1), m.group(2) or "", m.group(3)
            if current is not None and current.get("type") == "histogram":
                family = next((name[:-len(x)] for x in HISTOGRAM_SAMPLES if name.endswith(x)), "")
                assert current is families.get(family), f"sample {line!r} outside its family"
                current["samples"][name[len(family):] + labels] = float(value)
            else:
                assert current is families.get(name), f"sample {line!r} outside its family"
                current["samples"][labels] = int(value)
    return families


@pytest.fixture
def busy_sluice(start_sluice, certs, nginx):
    """sluice with HTTP, TLS (h2 and http/1.1) and SOCKS5 listeners and a key named ci, after
    a few requests of each kind."""
    tls_port, socks_port = free_port(), free_port()
    ci_key = secrets.token_urlsafe(24)
    d = certs["dir"]

    def add_named_key(full):
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys"].append({"name": "ci", "key": ci_key})

    s = start_sluice(extra_short=(f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                                  f"  cert: {d / 'server-chain.pem'}\n  key: {d / 'server.key'}\n"
                                  f"socks5:\n  listen: 127.0.0.1:{socks_port}\n"),
                     patch=add_named_key)

    def ok(r):
        assert r.returncode == 0 and r.stdout == b"200", r.describe()

    out = ["-o", "/dev/null", "-w", "%{http_code}"]
    https_proxy = ["--proxy", f"https://127.0.0.1:{tls_port}", "--proxy-cacert", certs["ca"]]
    ok(curl("-x", s.proxy_url, "-U", f"u:{ci_key}", nginx.url("/1k"), *out))
    ok(curl("-x", s.proxy_url, "-U", f"u:{ci_key}", "--cacert", certs["ca"],
            nginx.tls_url("/small.txt"), *out))  # a CONNECT tunnel
    ok(curl("-x", s.proxy_url, "-U", f"u:{s.key}", nginx.url("/1k"), *out))
    ok(curl(*https_proxy, "-U", f"u:{ci_key}", nginx.url("/1k"), *out))
    ok(curl("--proxy", f"socks5h://u:{ci_key}@127.0.0.1:{socks_port}", nginx.url("/1k"), *out))
    r = curl("-x", s.proxy_url, "-U", "u:wrong", nginx.url("/1k"), *out)
    assert r.stdout == b"407", r.describe()
    authority = nginx.url("/1k").split("/")[2]
    assert h2_get(tls_port, certs["ca"], authority, "/1k", ci_key) == 200
    s.ci_key = ci_key
    return s


def test_prometheus_exposition_passes_promtool(busy_sluice, tmp_path):
    if PROMTOOL is None:
        pytest.skip("promtool not found: it comes with Debian's prometheus package "
                    "(tools/deps.sh --test installs it)")
    r = busy_sluice.admin("/stats/prometheus")
    assert r.status == 200, r
    path = tmp_path / "metrics.txt"
    path.write_bytes(r.body)
    with open(path, "rb") as f:
        check = subprocess.run([PROMTOOL, "check", "metrics"], stdin=f, capture_output=True,
                               timeout=60)
    problems = (check.stdout + check.stderr).decode(errors="replace").splitlines()
    assert check.returncode == 0 and not problems, \
        f"promtool exit {check.returncode}, {len(problems)} lines:\n" + "\n".join(problems[:60])


def test_instances_are_labels(busy_sluice):
    s = busy_sluice
    # The clients above have closed; their connections leave the gauges asynchronously, and the
    # two scrapes below must see the same values.
    for listener in ("http", "https", "socks5"):
        s.wait_stat(f"listener.{listener}.downstream_cx_active", lambda v: v == 0, timeout=10)
    text = s.admin("/stats/prometheus").text
    families = parse_exposition(text)
    stats = s.stats()
    assert s.key not in text and s.ci_key not in text, "an API key appears in /stats/prometheus"
    for name, family in families.items():
        assert name.startswith("sluice_") and re.fullmatch(r"[a-z0-9_]+", name), name
        assert family.get("type") in ("counter", "gauge", "histogram"), name
        assert family["help"], name
        assert (family["type"] == "counter") == name.endswith("_total"), \
            f"{name}: counters and only counters end in _total"
        assert (family["type"] == "histogram") == name.endswith("_seconds"), \
            f"{name}: histograms, and only they, are in seconds"
    # No listener, chain or key name is left inside a family name.
    for part in ("_http_", "_https_", "_socks5_", "_ci_", "_test_"):
        inside = [n for n in families if part in n + "_" and not n.startswith("sluice" + part)]
        assert not inside, f"{part!r} inside family names: {inside}"

    def value(family, labels):
        assert family in families, f"no family {family}: {sorted(families)[:80]}"
        samples = families[family]["samples"]
        assert labels in samples, f"{family}: no sample {labels}; has {sorted(samples)}"
        return samples[labels]

    # The same numbers as /stats, under labels.
    expect = {
        ("sluice_listener_downstream_cx_total", '{listener="http"}'):
            "listener.http.downstream_cx_total",
        ("sluice_listener_downstream_cx_active", '{listener="https"}'):
            "listener.https.downstream_cx_active",
        ("sluice_auth_key_allowed_total", '{key="ci"}'): "auth.key.ci.allowed",
        ("sluice_auth_key_allowed_total", '{key="test"}'): "auth.key.test.allowed",
        ("sluice_auth_allowed_total", ""): "auth.allowed",
        ("sluice_http1_rq_forward_total", '{chain="http"}'): "http1.http.rq_forward",
        ("sluice_http1_rq_connect_total", '{chain="http"}'): "http1.http.rq_connect",
        ("sluice_http2_streams_total", '{chain="https"}'): "http2.https.streams_total",
        ("sluice_socks5_cx_total", '{chain="socks5"}'): "socks5.socks5.cx_total",
        ("sluice_tunnel_key_tunnels_total", '{key="ci"}'): "tunnel.key.ci.tunnels_total",
        ("sluice_tunnel_listener_bytes_to_downstream_total", '{listener="http"}'):
            "tunnel.listener.http.bytes_to_downstream",
        ("sluice_tls_handshakes_total", '{chain="https"}'): "tls.https.handshakes",
        ("sluice_tls_alpn_total", '{chain="https",protocol="h2"}'): "tls.https.alpn_h2",
        ("sluice_http1_rs_total", '{chain="http",class="2xx"}'): "http1.http.rs_2xx",
        ("sluice_socks5_reply_total", '{chain="socks5",reply="succeeded"}'):
            "socks5.socks5.reply_succeeded",
    }
    for (family, labels), dotted in expect.items():
        assert value(family, labels) == stats[dotted], (family, labels, dotted)
    assert value("sluice_auth_key_allowed_total", '{key="ci"}') == 5
    assert value("sluice_tunnel_key_tunnels_total", '{key="ci"}') >= 2  # CONNECT and SOCKS5
    assert value("sluice_http2_streams_total", '{chain="https"}') == 1
    assert families["sluice_listener_downstream_cx_active"]["type"] == "gauge"
