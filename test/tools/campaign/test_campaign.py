"""The benchmark campaign's machinery, in its --quick mode: the files it writes, every row of the
campaign in each of them, every run kept, and the HTML page rendering in headless Chromium to a
page that is not blank. No performance number is checked: --quick runs are too short, on a
machine that may be busy, to mean anything.
"""

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
RUN = REPO / "tools" / "campaign" / "run"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("campaign")
    p = subprocess.run(["/usr/bin/python3", str(RUN), "--quick", "--out", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    return out, p.stderr, json.loads((out / "results.json").read_text())


def test_writes_the_report_files(campaign):
    out, _, _ = campaign
    for name in ("results.json", "report.md", "index.html"):
        assert (out / name).stat().st_size > 1000, name
    charts = list((out / "charts").glob("*.svg"))
    assert charts
    for svg in charts:
        root = ET.parse(svg).getroot()
        assert root.tag.endswith("svg"), svg
        # each chart is also inline in the page, next to its data table
        assert svg.name in (out / "report.md").read_text()


def test_every_row_and_peer_is_in_every_output(campaign):
    out, _, d = campaign
    md = (out / "report.md").read_text()
    page = (out / "index.html").read_text()
    peer_ids = {p["id"] for p in d["peers"]}
    assert {"sluice", "squid", "tinyproxy", "nginx", "dante", "microsocks", "3proxy",
            "gost"} <= peer_ids
    groups = {g["id"] for g in d["groups"]}
    assert groups == {"plain", "https", "https-full", "h2", "ws", "wss", "socks5", "workers"}
    assert len(d["rows"]) >= 45
    for row in d["rows"]:
        res = d["results"][row["id"]]
        # every peer has a value or the reason it has none
        assert set(res) == peer_ids, row["id"]
        for pid, r in res.items():
            assert "value" in r or r.get("na"), (row["id"], pid)
        assert row["title"] in md, row["title"]
        assert escape(row["title"], quote=False) in page, row["title"]
        assert f'id="{row["id"]}"' in page
    for g in d["groups"]:
        assert g["title"] in md and escape(g["title"], quote=False) in page
    for section in ("Test by test", "How each peer was run", "What the numbers do not show",
                    "What each one supports", "Cross-check: the same test driven by wrk"):
        assert section in md and section in page
    # a peer that is not here says why, in the report
    for p in d["peers"]:
        if not p["available"]:
            assert p["unavailable"] and p["unavailable"] in md


def test_the_quick_rows_ran_and_every_run_is_kept(campaign):
    _, stderr, d = campaign
    quick_tests = {t["id"] for t in d["tests"] if not t["skipped"]}
    assert {"plain.1k", "https.1k", "h2.1k", "h2.new", "ws.64", "wss.64",
            "socks5.ka"} <= quick_tests
    for row in d["rows"]:
        if row["test"] in quick_tests:
            r = d["results"][row["id"]]["sluice"]
            # (the quick memory test opens 1,000 tunnels only)
            assert "value" in r or r["na"] == "not run in --quick", row["id"]
    assert d["runs"]
    for run in d["runs"]:
        assert run["peer"] and run["test"]
        assert "report" in run or "memory" in run
    # the key never reaches the outputs
    assert "KEY" in json.dumps(d["runs"][0]["command"])
    assert d["machine"]["cores"] >= 1 and d["machine"]["cpu_model"]
    assert "estimated time" in stderr
    assert re.search(r"\[\s*1/\d+\] plain\.1k · sluice · .* left", stderr)


def test_http2_new_connection_row_has_figures_for_the_http2_peers(campaign):
    """sluice-load's --new-conn with an h2:// proxy: sluice and nginx get a figure, measured on a
    connection per request; a peer that has no HTTP/2 keeps "—" with its reason."""
    _, _, d = campaign
    res = d["results"]["h2.new"]
    peers = {p["id"]: p for p in d["peers"]}
    assert "value" in res["sluice"], res["sluice"]
    if peers["nginx"]["available"]:
        assert "value" in res["nginx"], res["nginx"]
    for pid, p in peers.items():
        if "h2" not in p["kinds"]:
            assert "value" not in res[pid]
            assert res[pid]["na"] in (p["missing"]["h2"], p["unavailable"]), (pid, res[pid])
    runs = [r for r in d["runs"] if r["test"] == "h2.new"]
    assert {r["peer"] for r in runs} >= {"sluice"}
    for r in runs:
        rep = r["report"]
        assert rep["proxy_kind"] == "h2" and rep["new_conn"] and not rep["tunnel"]
        assert rep["requests"] > 0 and rep["connections_opened"] >= rep["requests"], rep


def test_wrk_cross_checks_the_1k_row_for_every_http_peer_that_ran_it(campaign):
    out, _, d = campaign
    cc = d["crosscheck"]["peers"]
    ran = {pid for pid, r in d["results"]["plain.1k"].items() if "value" in r}
    assert "sluice" in ran
    assert set(cc) == ran, (set(cc), ran)
    for pid, e in cc.items():
        assert e["concurrency"] == d["results"]["plain.1k"][pid]["concurrency"], pid
        assert e["sluice_load_rate"] == d["results"]["plain.1k"][pid]["value"], pid
        # The proxy spent CPU on wrk's requests: they went through it.
        assert e["wrk_rate"] > 0 and e["wrk_cpu_us"] > 0, (pid, e)
    assert cc["sluice"]["clean"], cc["sluice"]
    runs = [r for r in d["runs"] if r.get("generator") == "wrk"]
    assert {r["peer"] for r in runs} == ran
    for r in runs:
        assert any(c.endswith("wrk") for c in r["command"]), r["command"]
        assert r["report"]["requests"] > 0, r
    md = (out / "report.md").read_text()
    assert "wrk / sluice-load" in md


def test_wrk_output_parses_into_a_report():
    import sys
    sys.path.insert(0, str(REPO / "tools" / "campaign"))
    import wrk
    text = """Running 4s test @ http://127.0.0.1:18603/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.62ms  212.33us   6.01ms   84.12%
    Req/Sec    39.61k     1.20k   41.02k    80.00%
  157644 requests in 4.00s, 185.03MB read
  Socket errors: connect 0, read 3, write 0, timeout 2
  Non-2xx or 3xx responses: 10
Requests/sec:  39410.73
Transfer/sec:     46.26MB
"""
    r = wrk.parse(text)
    assert r == {"ok": 157634, "failed": 15, "requests": 157644, "elapsed_s": 4.0,
                 "errors": {"read": 3, "timeout": 2}, "wrk_requests_per_s": 39410.73}
    assert wrk.parse("unable to connect to 127.0.0.1:1 Connection refused") is None
    assert wrk.parse("  10 requests in 1.50m, 1KB read\n")["elapsed_s"] == 90.0
    lua = wrk.script("http://bench:s%3Acret@127.0.0.1:9/", "http://127.0.0.1:8/bytes/1024",
                     close=True)
    assert 'wrk.path = "http://127.0.0.1:8/bytes/1024"' in lua
    assert 'Proxy-Authorization"] = "Basic YmVuY2g6czpjcmV0"' in lua  # bench:s:cret
    assert 'wrk.headers["Connection"] = "close"' in lua
    assert "Proxy-Authorization" not in wrk.script("http://127.0.0.1:9", "http://o/x", False)
    assert wrk.connect_url("http://bench:x@127.0.0.1:9") == "http://127.0.0.1:9/"
    # A peer that closes after every response: each close is a "read error" to wrk.
    closing = {"ok": 10, "failed": 12, "requests": 10, "errors": {"read": 12, "timeout": 1}}
    wrk.closes_are_not_errors(closing)
    assert closing["failed"] == 2 and closing["errors"] == {"read": 2, "timeout": 1}


def test_the_page_renders_in_chromium(campaign, tmp_path):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed")
    out, _, _ = campaign
    shot = tmp_path / "page.png"
    subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
                    "--window-size=1200,1800", f"--screenshot={shot}",
                    (out / "index.html").as_uri()],
                   capture_output=True, timeout=120, env=dict(os.environ, HOME=str(tmp_path)))
    assert shot.stat().st_size > 10000
    import matplotlib.image  # noqa: PLC0415 - python3-matplotlib, as the report uses

    pixels = matplotlib.image.imread(str(shot))[:, :, :3]
    background = pixels[5, 5]
    differs = (abs(pixels - background).sum(axis=2) > 0.1).mean()
    assert differs > 0.02, f"only {differs:.1%} of the page differs from its background"
    # text, tables and the headline boxes: more than a handful of colours
    flat = (pixels[::4, ::4] * 255).astype(int).reshape(-1, 3)
    assert len({tuple(x) for x in flat}) > 20
