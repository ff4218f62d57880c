"""The admin endpoint: readiness, stats in three formats, the redacted config dump."""

import json
import socket

import pytest

from helpers import curl, parse_stats_text, read_all


def one_request(s, nginx):
    r = curl("-x", s.proxy_url, "-U", f"user:{s.key}", "-o", "/dev/null", "-w", "%{http_code}",
             nginx.url("/1k"))
    assert r.stdout == b"200", r.describe()


def test_ready_and_health(sluice):
    for path in ("/ready", "/health"):
        r = sluice.admin(path)
        assert r.status == 200, f"GET {path}: {r}"


def test_stats_text_counts_requests(sluice, nginx):
    one_request(sluice, nginx)
    one_request(sluice, nginx)
    r = sluice.admin("/stats")
    assert r.status == 200, r
    lines = [l for l in r.text.splitlines() if l.strip()]
    assert lines, "empty /stats"
    bad = [l for l in lines if ": " not in l]
    assert not bad, f"/stats lines not in `name: value` form: {bad[:5]}"
    stats = parse_stats_text(r.text)
    expected = {
        "listener.http.downstream_cx_total": 2,
        "http1.http.rq_total": 2,
        "http1.http.rs_2xx": 2,
        "auth.allowed": 2,
        "auth.denied_missing": 0,
        "auth.denied_invalid": 0,
        "upstream.cx_connect_total": 1,
        "upstream.cx_connect_fail": 0,
        "http1.http.rq_connect": 0,
        "http1.http.rs_5xx": 0,
    }
    wrong = {k: (stats.get(k, "missing"), v) for k, v in expected.items() if stats.get(k) != v}
    assert not wrong, f"stats (got, want): {wrong}"
    assert "listener.http.downstream_cx_active" in stats, sorted(stats)
    assert sluice.key not in r.text, "the API key appears in /stats"


def test_stats_json_matches_text(sluice, nginx):
    one_request(sluice, nginx)
    r = sluice.admin("/stats?format=json")
    assert r.status == 200, r
    try:
        doc = r.json()
    except json.JSONDecodeError as e:
        pytest.fail(f"/stats?format=json is not JSON ({e}): {r.text[:300]}")
    flat = json.dumps(doc)
    assert "http1.http.rq_total" in flat, f"rq_total missing from JSON stats: {flat[:500]}"


def test_prometheus_exposition(sluice, nginx):
    one_request(sluice, nginx)
    r = sluice.admin("/stats/prometheus")
    assert r.status == 200, r
    assert "# TYPE" in r.text, f"no # TYPE lines: {r.text[:300]}"
    from prometheus_client.parser import text_string_to_metric_families
    try:
        families = list(text_string_to_metric_families(r.text))
    except Exception as e:  # the parser raises ValueError and friends on bad exposition text
        pytest.fail(f"/stats/prometheus is not valid exposition format: {e}\n{r.text[:1000]}")
    samples = {smp.name: smp.value for fam in families for smp in fam.samples}
    assert samples, "no samples in /stats/prometheus"
    assert any(v == 1 for k, v in samples.items() if "rq_total" in k), \
        f"no rq_total sample equal to 1: {[k for k in samples if 'rq' in k]}"


def test_config_dump_redacts_the_key(sluice):
    r = sluice.admin("/config_dump")
    assert r.status == 200, r
    assert sluice.key not in r.text, "the API key appears in /config_dump"
    doc = r.json()
    assert "<redacted>" in json.dumps(doc), f"no <redacted> marker: {r.text[:500]}"
    assert str(sluice.port) in r.text, "the proxy listener is not in /config_dump"


def test_server_info_and_listeners(sluice):
    r = sluice.admin("/server_info")
    assert r.status == 200, r
    assert sluice.key not in r.text
    r = sluice.admin("/listeners")
    assert r.status == 200, r
    assert str(sluice.port) in r.text, f"/listeners does not show the proxy port: {r.text[:300]}"


def test_state_changes_need_post(sluice, nginx):
    r = sluice.admin("/drain")
    assert r.status != 200, "GET /drain was accepted: state changes must be POST only"
    one_request(sluice, nginx)  # still serving


def test_unknown_admin_path_is_404(sluice):
    assert sluice.admin("/no-such-endpoint").status == 404


def test_admin_is_not_on_the_proxy_port(sluice):
    r = curl("-o", "/dev/null", "-w", "%{http_code}", f"{sluice.proxy_url}/stats")
    assert r.stdout != b"200", "the proxy port serves /stats"


def test_dns_and_pool_counters_are_published(sluice, nginx):
    # "localhost" comes from /etc/hosts: a hosts hit in the worker's resolver; the literal
    # 127.0.0.1 never reaches the resolver's counters.
    url = nginx.url("/1k").replace("127.0.0.1", "localhost")
    r = curl("-x", sluice.proxy_url, "-U", f"user:{sluice.key}", "-o", "/dev/null", "-w",
             "%{http_code}", url)
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert sluice.stat("dns.hosts_hits") == 1
    assert sluice.stat("dns.queries") == 0
    # The origin connection went back to the pool and is counted there.
    assert sluice.wait_stat("upstream.pool_idle", lambda v: v == 1) == 1


def test_admin_answers_only_its_own_host(sluice):
    """DNS rebinding: a page whose name now resolves to 127.0.0.1 reaches the admin with its own
    name in Host; only the admin's own address (and localhost on loopback) is answered."""
    port = sluice.admin_port
    for host in (f"evil.example:{port}", f"127.0.0.2:{port}", "127.0.0.1:1", f"localhost.evil:{port}"):
        r = sluice.admin("/config_dump", headers={"Host": host})
        assert r.status == 421, (host, r.status, r.text[:200])
        assert sluice.key not in r.text
    r = sluice.admin("/drain", method="POST", data=b"", headers={"Host": f"evil.example:{port}"})
    assert r.status == 421 and sluice.running()
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}"):
        assert sluice.admin("/stats", headers={"Host": host}).status == 200, host
    assert sluice.wait_stat("admin.host_refused", lambda v: v == 5) == 5


def test_post_drain_is_answered_in_full_before_the_process_exits(start_sluice):
    # With no connection open the drain ends the process at once; the answer must be out first.
    # Several rounds: whether it was lost depended on which thread got there first.
    for _ in range(10):
        s = start_sluice()
        with socket.create_connection(("127.0.0.1", s.admin_port), timeout=5) as c:
            c.sendall(b"POST /drain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
            raw = read_all(c)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), f"POST /drain answered {raw!r}"
        headers = head.lower().split(b"\r\n")
        assert b"content-length: 9" in headers and b"connection: close" in headers, raw
        assert body == b"draining\n", raw
        assert s.wait(15) == 0, s.log()[-2000:]
