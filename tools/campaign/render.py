"""The campaign's report, from its results.json: report.md, index.html and charts/*.svg.

One document model (headings, paragraphs, tables, charts, code) written out twice, as Markdown
and as HTML, so both say the same. Every number comes from results.json. Re-render with:

    tools/campaign/render DIR       (reads DIR/results.json, writes the report next to it)
"""

import html
import re
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files, searchable
plt.rcParams["svg.hashsalt"] = "sluice-campaign"  # the same data gives the same file

SLUICE_COLOR, PEER_COLOR, FLOOR_COLOR = "#1f6f5c", "#8a94a6", "#d2d6dd"


# -- numbers ---------------------------------------------------------------------------------------

def fmt(v):
    if v is None:
        return "—"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def short(v):
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2g}M" if a < 1e7 else f"{v / 1e6:.0f}M"
    if a >= 1e3:
        return f"{v / 1e3:.2g}k" if a < 1e4 else f"{v / 1e3:.0f}k"
    return fmt(v)


def times(x):
    return f"{x:.2g}×" if x < 10 else f"{x:.0f}×"


def ratio_text(s, o, better):
    """sluice against the other, the seed's way: how many times more or less."""
    if not s or not o:
        return ""
    word = "more" if s >= o else "less"
    r = s / o if s >= o else o / s
    good = (s >= o) == (better == "higher")
    return f"{times(r)} {word}" if good or r < 1.005 else f"{times(r)} {word} (worse)"


# -- the document model ----------------------------------------------------------------------------

class Doc:
    def __init__(self):
        self.blocks = []

    def h(self, level, text, anchor=None):
        self.blocks.append(("h", level, text, anchor))

    def p(self, text, cls=None):
        self.blocks.append(("p", text, cls))

    def ul(self, items):
        self.blocks.append(("ul", items))

    def table(self, header, rows, caption=None):
        self.blocks.append(("table", header, rows, caption))

    def chart(self, name, alt):
        self.blocks.append(("chart", name, alt))

    def code(self, text, title=None):
        self.blocks.append(("code", text, title))

    def raw_html(self, text):
        self.blocks.append(("html", text))

    def md_only(self, text):
        self.blocks.append(("md", text))


INLINE = [(re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"),
          (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
          (re.compile(r"\[([^\]]+)\]\(([^)]+)\)"), r'<a href="\2">\1</a>')]


def inline_html(text):
    t = html.escape(text, quote=False)
    for rx, rep in INLINE:
        t = rx.sub(rep, t)
    return t


def md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc):
    out = []
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            anchor = f'<a id="{b[3]}"></a>\n\n' if b[3] else ""
            out.append(anchor + "#" * b[1] + " " + b[2])
        elif kind == "p":
            out.append(b[1])
        elif kind == "ul":
            out.append("\n".join(f"- {x}" for x in b[1]))
        elif kind == "table":
            header, rows, caption = b[1], b[2], b[3]
            lines = []
            if caption:
                lines.append(f"*{caption}*\n")
            lines.append("| " + " | ".join(md_cell(h) for h in header) + " |")
            lines.append("|" + "|".join(" --- " for _ in header) + "|")
            lines += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]
            out.append("\n".join(lines))
        elif kind == "chart":
            out.append(f"![{b[2]}](charts/{b[1]}.svg)")
        elif kind == "md":
            out.append(b[1])
        elif kind == "code":
            title = f"{b[2]}:\n\n" if b[2] else ""
            out.append(f"{title}```\n{b[1].rstrip()}\n```")
    return "\n\n".join(out) + "\n"


CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2430;
       max-width: 1080px; margin: 2rem auto; padding: 0 1.2rem; background: #fbfbfc; }
h1 { font-size: 1.9rem; margin-bottom: .2rem; } h2 { margin-top: 2.4rem; border-bottom: 1px solid #dde1e6; }
h3 { margin-top: 1.8rem; } .conditions { color: #5b6472; font-size: .88rem; }
table { border-collapse: collapse; margin: .6rem 0 1rem; font-size: .9rem; background: #fff; }
th, td { border: 1px solid #dde1e6; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f0f2f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; color: #5b6472; padding-bottom: .3rem; }
.chart { display: flex; flex-wrap: wrap; gap: 1.2rem; align-items: flex-start; }
.chart svg { max-width: 560px; height: auto; background: #fff; border: 1px solid #e4e7eb; }
pre { background: #f3f4f6; padding: .7rem; overflow-x: auto; font-size: .8rem; }
.headline { display: flex; gap: 1.5rem; flex-wrap: wrap; }
.headline div { background: #fff; border: 1px solid #dde1e6; padding: .8rem 1rem; flex: 1 1 220px; }
.headline strong { font-size: 2rem; display: block; color: #1f6f5c; }
"""


def to_html(doc, title, charts_dir):
    out = [f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
           f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"]
    pending_chart = None
    for b in doc.blocks:
        kind = b[0]
        if kind != "table" and pending_chart is not None:
            out.append(pending_chart + "</div>")
            pending_chart = None
        if kind == "h":
            anchor = f' id="{b[3]}"' if b[3] else ""
            out.append(f"<h{b[1]}{anchor}>{inline_html(b[2])}</h{b[1]}>")
        elif kind == "p":
            cls = f' class="{b[2]}"' if b[2] else ""
            out.append(f"<p{cls}>{inline_html(b[1])}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{inline_html(x)}</li>" for x in b[1]) + "</ul>")
        elif kind == "table":
            header, rows, caption = b[1], b[2], b[3]
            t = ["<table>"]
            if caption:
                t.append(f"<caption>{inline_html(caption)}</caption>")
            t.append("<tr>" + "".join(f"<th>{inline_html(str(h))}</th>" for h in header) + "</tr>")
            for r in rows:
                cells = []
                for c in r:
                    c = str(c)
                    num = bool(re.fullmatch(r"[\d,.]+|—", c.strip("*")))
                    attr = ' class="num"' if num else ""
                    cells.append(f"<td{attr}>{inline_html(c)}</td>")
                t.append("<tr>" + "".join(cells) + "</tr>")
            t.append("</table>")
            if pending_chart is not None:
                out.append(pending_chart + "<div>" + "".join(t) + "</div></div>")
                pending_chart = None
            else:
                out.append("".join(t))
        elif kind == "chart":
            svg = (charts_dir / f"{b[1]}.svg").read_text()
            svg = svg[svg.index("<svg"):]
            pending_chart = f'<div class="chart"><figure role="img" aria-label="{html.escape(b[2])}">{svg}</figure>'
        elif kind == "code":
            title_html = f"<p>{inline_html(b[2])}:</p>" if b[2] else ""
            out.append(f"{title_html}<pre>{html.escape(b[1].rstrip())}</pre>")
        elif kind == "html":
            out.append(b[1])
    if pending_chart is not None:
        out.append(pending_chart + "</div>")
    out.append("</body></html>\n")
    return "\n".join(out)


# -- charts ----------------------------------------------------------------------------------------

def chart(path, bars, unit, better):
    """bars: [(label, value, lo, hi, kind)] with kind sluice|peer|floor; best first."""
    n = len(bars)
    fig, ax = plt.subplots(figsize=(6.2, 0.48 * n + 0.9))
    labels = [b[0] for b in bars][::-1]
    values = [b[1] for b in bars][::-1]
    colors = [{"sluice": SLUICE_COLOR, "peer": PEER_COLOR, "floor": FLOOR_COLOR}[b[4]]
              for b in bars][::-1]
    lo = [max(0.0, b[1] - b[2]) for b in bars][::-1]
    hi = [max(0.0, b[3] - b[1]) for b in bars][::-1]
    ax.barh(range(n), values, color=colors, xerr=[lo, hi], ecolor="#39424e", capsize=3,
            height=0.62)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels)
    top = max(b[3] for b in bars) or 1
    ends = [max(b[1], b[3]) for b in bars][::-1]
    for i, v in enumerate(values):
        ax.text(ends[i] + top * 0.02, i, short(v), va="center", fontsize=9)
    ax.set_xlim(0, top * 1.18)
    ax.set_xlabel(f"{unit}, {better} is better (bar: median; line: min to max)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


# -- the report ------------------------------------------------------------------------------------

def conditions(doc_json):
    c, m = doc_json["campaign"], doc_json["machine"]
    s = c["settings"]
    return (f"1 core per proxy (CPU {', '.join(map(str, c['proxy_cpus']))}), load generator and "
            f"origin on CPU {', '.join(map(str, c['load_cpus']))} · authentication on (nginx: "
            f"none) · {m['cpu_model']}, {m['cores']} cores, {m['os']}, kernel {m['kernel']} · "
            f"loopback · {s['duration_s']:g} s runs, median of {s['runs']} "
            f"{'run' if s['runs'] == 1 else 'runs'} at the best clean concurrency · seed "
            f"{c['seed']} · campaign of {c['date']} ({c['mode']}).")


def value_cell(r):
    if r is None or "value" not in r:
        return "—"
    mark = "" if r.get("clean", True) else "*"
    return fmt(r["value"]) + mark


def build(d):
    peers = d["peers"]
    pid = {p["id"]: p for p in peers}
    results = d["results"]
    rows = d["rows"]
    groups = d["groups"]
    others = [p for p in peers if p["id"] != "sluice"]
    forward = [p for p in others if not p["floor"]]
    cond = conditions(d)
    c = d["campaign"]

    def best_other(row):
        cands = [(results[row["id"]][p["id"]]["value"], p) for p in forward
                 if "value" in results[row["id"]].get(p["id"], {})]
        if not cands:
            return None, None
        pick = max if row["better"] == "higher" else min
        return pick(cands, key=lambda x: x[0])

    doc = Doc()
    names = ", ".join(p["name"] for p in others if p["available"]) or "nobody"
    doc.h(1, "sluice against " + names)
    doc.p(f"The benchmark campaign of {c['date']}: every row of the seed's campaign that applies, "
          "per protocol, against every peer that runs on this machine, each with the tuning its "
          "own documentation recommends. Produced by `tools/campaign/run` "
          f"(`{c['command']}`); every number below comes from `results.json` next to this "
          "report, which keeps every run.")
    doc.p(cond, "conditions")
    if c["mode"] == "quick":
        doc.p("**This is a --quick run**: the CI smoke test of the machinery, one short run per "
              "peer and test on a machine that may be busy. Its numbers are not results.")

    # the short version
    wins = total = 0
    for row in rows:
        s = results[row["id"]].get("sluice", {})
        v, _ = best_other(row)
        if "value" in s and v is not None:
            total += 1
            better = s["value"] >= v if row["better"] == "higher" else s["value"] <= v
            wins += better
    doc.h(2, "The short version", "short")
    if total:
        doc.p(f"sluice had the better value in **{wins} of the {total} rows** where it and at "
              "least one other forward proxy ran (nginx, the reverse-proxy floor, is left out of "
              "this count and of the ratio column).")
    heads = []
    for rid, label in (("plain.1k", "requests per second at 1 KB"),
                       ("plain.new", "new connections per second"),
                       ("plain.cpu", "CPU per request at 1 KB")):
        row = next((r for r in rows if r["id"] == rid), None)
        s = results.get(rid, {}).get("sluice", {})
        v, other = best_other(row) if row else (None, None)
        if "value" in s and v:
            heads.append((times(s["value"] / v if row["better"] == "higher" else v / s["value"]),
                          label, f"{fmt(s['value'])} against {fmt(v)} {row['unit']} "
                          f"({other['name']}, the best other)"))
    mem_rows = [r for r in rows if r["id"].startswith("plain.mem.")]
    if mem_rows:
        row = mem_rows[-1]
        s = results[row["id"]].get("sluice", {})
        v, other = best_other(row)
        if "value" in s:
            heads.append((f"{fmt(s['value'])} MB", f"for {row['title'][len('Memory with '):]}",
                          f"against {fmt(v)} MB ({other['name']})" if v else ""))
    if heads:
        doc.raw_html('<div class="headline">' + "".join(
            f"<div><strong>{html.escape(a)}</strong>{html.escape(b)}<br><small>"
            f"{html.escape(x)}</small></div>" for a, b, x in heads) + "</div>")
        doc.md_only("\n".join(f"- **{a}** {b}: {x}" for a, b, x in heads))

    # what each one supports
    doc.h(2, "What each one supports", "supports")
    kinds = [("http", "HTTP proxy and CONNECT tunnels"), ("https", "HTTPS proxy port (TLS)"),
             ("h2", "HTTP/2 to clients"), ("socks5", "SOCKS5")]
    doc.table(["Protocol"] + [p["name"] for p in peers],
              [[label] + ["Yes" if k in p["kinds"] else "—" for p in peers] for k, label in kinds])
    notes = []
    for p in peers:
        by_reason = {}
        for k, why in p["missing"].items():
            by_reason.setdefault(why, []).append(dict(kinds)[k])
        notes += [f"**{p['name']}**, {', '.join(ks)}: {why}" for why, ks in by_reason.items()]
    unavailable = [f"**{p['name']}** did not run: {p['unavailable']}" for p in peers
                   if p["unavailable"]]
    doc.ul(unavailable + notes)

    # test by test
    doc.h(2, "Test by test", "tests")
    doc.p("Each peer at its best clean concurrency level (64, 256 or 1,024 connections; lower "
          "levels for 1 MB and larger bodies). The ratio column is sluice's figure against the "
          "best other forward proxy of the row: how many times more or less. For memory, CPU and "
          "latency, less is better. `*`: no run at any level was clean (see the row's notes); "
          "`—`: not supported or not run, the reason under the table.")
    tests = {t["id"]: t for t in d["tests"]}
    kind_of = {g["id"]: g["kind"] for g in groups}

    def relevant(gid):
        """The peers with the kind of proxy port the group needs (run or not)."""
        return [p for p in peers if kind_of[gid] in p["kinds"]]

    for gid, gtitle in ((g["id"], g["title"]) for g in groups):
        grows = [r for r in rows if r["group"] == gid]
        if not grows:
            continue
        doc.h(3, gtitle)
        table = []
        reasons = {}
        skipped = {}
        gpeers = relevant(gid)
        for row in grows:
            res = results[row["id"]]
            cells = [f"[{row['title']}](#{row['id']}) ({row['unit']})"]
            why_skipped = tests[row["test"]].get("skipped")
            if why_skipped:
                skipped.setdefault(why_skipped, []).append(row["title"])
            for p in gpeers:
                r = res.get(p["id"], {})
                cells.append(value_cell(r))
                if "na" in r and not why_skipped:
                    reasons.setdefault(p["name"], {}).setdefault(r["na"], []).append(row["title"])
            v, other = best_other(row)
            s = res.get("sluice", {})
            cells.append(f"{ratio_text(s.get('value'), v, row['better'])} vs {other['name']}"
                         if v and "value" in s else "")
            table.append(cells)
        doc.table(["Test"] + [p["name"] for p in gpeers] + ["Ratio"], table)
        ran = [r for r in grows if not tests[r["test"]].get("skipped")]
        notes = []
        left_out = [p for p in peers if p not in gpeers]
        if left_out:
            notes.append("Not in this table: " + "; ".join(
                f"{p['name']} ({p['missing'][kind_of[gid]]})" for p in left_out))
        for name, whys in reasons.items():
            parts = [why + ("" if len(titles) == len(ran) else f" ({'; '.join(titles)})")
                     for why, titles in whys.items()]
            notes.append(f"— {name}: " + "; ".join(parts))
        notes += [f"Not run in this campaign ({why}): {'; '.join(titles)}"
                  for why, titles in skipped.items()]
        doc.ul(notes)

    # every row with its chart
    doc.h(2, "Charts and data, row by row", "rows")
    for row in rows:
        res = results[row["id"]]
        doc.h(3, f"{row['title']} ({dict((g['id'], g['title']) for g in groups)[row['group']]})",
              row["id"])
        t = tests[row["test"]]
        doc.p(f"{row['unit']}, {row['better']} is better. {t['what'][0].upper()}{t['what'][1:]}.")
        if t.get("skipped"):
            doc.p(f"Not run in this campaign ({t['skipped']}).")
            continue
        have = [(p, res[p["id"]]) for p in peers if "value" in res.get(p["id"], {})]
        if have:
            rev = row["better"] == "higher"
            have.sort(key=lambda x: x[1]["value"], reverse=rev)
            bars = [(f"{p['name']}", r["value"], r["min"], r["max"],
                     "sluice" if p["id"] == "sluice" else "floor" if p["floor"] else "peer")
                    for p, r in have]
            name = row["id"].replace(".", "_")
            chart(d["_charts"] / f"{name}.svg", bars, row["unit"], row["better"])
            doc.chart(name, f"{row['title']}: {row['unit']} by proxy")
        table = []
        for p in relevant(row["group"]):
            r = res.get(p["id"], {})
            if "value" in r:
                conc = ("n/a" if t["kind"] == "memory" else
                        "4 tunnels" if t["kind"] == "bulk" else f"{r['concurrency']:,}")
                table.append([p["name"], p["version"], value_cell(r),
                              f"{fmt(r['min'])} – {fmt(r['max'])}", len(r["runs"]), conc,
                              "; ".join(r.get("notes", []))])
            else:
                table.append([p["name"], p["version"], "—", "", "", "", r.get("na", "")])
        doc.table(["Proxy", "Version", row["unit"], "min – max", "runs", "Connections", "Notes"],
                  table, caption=f"{row['title']}: {row['unit']}, measured values by proxy")
        doc.p(cond, "conditions")

    # the same test from a second load generator
    cc = d.get("crosscheck") or {}
    doc.h(2, "Cross-check: the same test driven by wrk", "crosscheck")
    doc.p("Every row above is measured with `sluice-load`. To show that its figures are the "
          "proxies' and not the load generator's, the plain HTTP 1 KB keep-alive test runs "
          "again with wrk (a Lua script sends absolute-form GETs with the key in "
          "Proxy-Authorization, as a client configured with a proxy does), against each HTTP "
          "peer at the concurrency its sweep chose, on the same cores, as many runs as the "
          "row. The two generators agree when the ratio is near 1× and the CPU per request "
          "is alike; the order of the peers should not change.")
    cc_rows = []
    for p in peers:
        e = (cc.get("peers") or {}).get(p["id"])
        if not e:
            continue
        w = e.get("wrk_rate")
        s = e.get("sluice_load_rate")
        cc_rows.append([
            p["name"], f"{e['concurrency']:,}", fmt(s) if s else "—",
            (fmt(w) + ("" if e["clean"] else " *")) if w else "—",
            f"{fmt(e['wrk_rate_min'])} – {fmt(e['wrk_rate_max'])}" if w else "",
            f"{w / s:.2f}×" if w and s else "",
            fmt(e.get("sluice_load_cpu_us")) if e.get("sluice_load_cpu_us") else "—",
            fmt(e.get("wrk_cpu_us")) if e.get("wrk_cpu_us") else "—",
            e.get("failure", "")])
    if cc_rows:
        doc.table(["Proxy", "Connections", "sluice-load req/s", "wrk req/s", "wrk min – max",
                   "wrk / sluice-load", "CPU µs/req (sluice-load)", "CPU µs/req (wrk)",
                   "Notes"], cc_rows,
                  caption="HTTP, 1 KB responses: sluice-load and wrk side by side")
        doc.p(cond, "conditions")
    else:
        doc.p("Not run" + (f" ({cc['note']})" if cc.get("note") else
                           " (the plain HTTP 1 KB test did not run)") + ".")

    # how each peer was run
    doc.h(2, "How each peer was run", "peers")
    for p in peers:
        doc.h(3, f"{p['name']} {p['version']}".strip(), "peer-" + p["id"])
        if p["unavailable"] and not p["available"]:
            doc.p(f"Not run: {p['unavailable']}.")
        doc.p(f"Authentication: {p['auth']}.")
        doc.ul(p["tuning"])
        if p["command"]:
            doc.code(p["command"], "Command line")
        for fname, text in p["configs"].items():
            doc.code(text, f"`{fname}`")

    # method and machine
    m = d["machine"]
    doc.h(2, "Method and machine", "method")
    s = c["settings"]
    doc.ul([
        f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, "
        f"kernel {m['kernel']}, virtualization: {m['virtualization']}; load average "
        f"{', '.join(f'{x:.2f}' for x in m['load_average_at_start'])} at the start and "
        f"{', '.join(f'{x:.2f}' for x in m.get('load_average_at_end', []))} at the end.",
        f"Each proxy runs alone on CPU {', '.join(map(str, c['proxy_cpus']))} (`taskset`; the "
        f"workers row gives it N cores); `sluice-load` and `sluice-origin` run on CPU "
        f"{', '.join(map(str, c['load_cpus']))}. Every address is on loopback.",
        "Concurrency: one run at each level of the sweep, the best level with no failed request "
        f"(\"clean\") chosen, then {s['runs'] - 1} more runs there; the row shows the median of "
        f"the {s['runs']} runs at that level, with their min and max. Runs of {s['duration_s']:g} "
        f"s after a {s['warmup_s']:g} s warm-up per peer and test; peers take their runs in turn.",
        "CPU is the proxy's own user+system time (all its processes and threads, from "
        "/proc/PID/stat) over the measured run, divided by what the load generator completed.",
        "Memory is the proportional set size (PSS) summed over the proxy's processes, with the "
        f"tunnels held open and idle: 1,000 opened at once, then the rest up to each level. The "
        f"largest level is {c['memory_levels'][-1]:,}, set by {c['memory_limit']}.",
        f"Commit {c['sluice_commit']}; took {c['took_s'] / 60:.1f} min (estimated "
        f"{c['estimated_s'] / 60:.1f}).",
    ] + [f"On the way: {e}" for e in c.get("events", [])])
    doc.h(2, "What the numbers do not show", "limits")
    doc.ul([
        "One machine, one kind of traffic, loopback only: no network latency, no packet loss, no "
        "real DNS, no TLS to the origin.",
        f"The load generator shares {len(c['load_cpus'])} core(s) with the origin: above some "
        "rate it is the client that saturates, and the fastest proxies bunch together under "
        "that ceiling (compare their CPU per request rather than their rate).",
        "nginx is a reverse proxy without authentication or destination checks: the floor of "
        "what relaying HTTP costs, not a forward proxy.",
        "Ratios travel across machines better than absolute figures; a shared machine moves "
        "both between runs (the min–max columns show by how much).",
        "More in [docs/campaign.md](../campaign.md) (what each row measures, and how to re-run "
        "or add a peer).",
    ])
    doc.p("Found a setting that makes a peer faster? Open an issue: the campaign is built to be "
          "re-run (`tools/campaign/run`).")
    return doc, "sluice against " + names


def render(d, out):
    out = Path(out)
    charts = out / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    for old in charts.glob("*.svg"):
        old.unlink()
    d = dict(d, _charts=charts)
    doc, title = build(d)
    (out / "report.md").write_text(to_markdown(doc))
    (out / "index.html").write_text(to_html(doc, title, charts))
