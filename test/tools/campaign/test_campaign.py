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
                    "What each one supports"):
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
