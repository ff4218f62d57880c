"""What one run measures: the load generator's report and the proxy's own CPU and memory.

CPU is the user+system time of every process of the proxy (its threads, its children, and the
children it has reaped), from /proc/PID/stat, over the measured run only. Memory is the
proportional set size (PSS: each shared page divided among the processes that map it) summed
over the proxy's processes, from /proc/PID/smaps_rollup; the RSS sum is kept beside it.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")


def _children_map():
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def proc_tree(pid):
    """pid and all its descendants."""
    children = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids):
    """User+system time of the processes, their reaped children's included."""
    ticks = 0
    for p in pids:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return ticks / HZ


def memory_kb(pids):
    """(PSS, RSS) in KiB, summed over the processes."""
    pss = rss = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1])
        except OSError:
            continue
    return pss, rss


def established_to(port):
    """TCP connections in ESTABLISHED whose remote end is 127.0.0.1:port (or ::1)."""
    n = 0
    hexport = f"{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "01" and f[2].endswith(":" + hexport):
                n += 1
    return n


def taskset(cpus):
    return ["taskset", "-c", ",".join(map(str, cpus))]


def run_json(cmd, timeout):
    """Runs a load generator that prints JSON; returns (report or None, stderr tail)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    try:
        return json.loads(p.stdout), p.stderr[-400:]
    except ValueError:
        return None, (p.stderr or p.stdout)[-400:] or f"exit {p.returncode}"


def measured_run(cmd, pids_of, timeout):
    """One measured run: the proxy's CPU over the load generator's run, and its report."""
    pids = pids_of()
    c0 = cpu_seconds(pids)
    t0 = time.monotonic()
    report, err = run_json(cmd, timeout)
    wall = time.monotonic() - t0
    cpu = cpu_seconds(pids_of()) - c0 if pids else None
    return report, err, cpu, wall


def metrics(report, cpu):
    """The figures the rows read, from one report and the proxy's CPU seconds."""
    if report is None:
        return {}
    ok = report.get("ok", 0)
    elapsed = report.get("elapsed_s") or 0
    payload = report.get("payload_bytes_read", 0) + report.get("payload_bytes_sent", 0)
    m = {"ok": ok, "failed": report.get("failed", 0)}
    if elapsed > 0:
        m["rate"] = ok / elapsed
        m["gbps"] = payload * 8 / elapsed / 1e9
    lat = report.get("latency") or {}
    if "p99_us" in lat and ok:
        m["p99_ms"] = lat["p99_us"] / 1000
        m["p50_ms"] = lat.get("p50_us", 0) / 1000
    if cpu is not None:
        m["cpu_s"] = cpu
        if ok:
            m["cpu_us"] = cpu * 1e6 / ok
        if payload:
            m["cpu_s_per_gb"] = cpu / (payload / 1e9)
    full = report.get("tls_full_handshakes", 0)
    resumed = report.get("tls_resumed_handshakes", 0)
    if full + resumed:
        m["tls_resumed_share"] = resumed / (full + resumed)
    return m


def clean(report):
    """No failed request, no error of any kind, and something completed."""
    return (report is not None and report.get("ok", 0) > 0 and report.get("failed", 0) == 0
            and not report.get("errors"))


def failure_summary(report, err):
    if report is None:
        return f"the load generator failed: {err.strip()[:200]}"
    parts = []
    if report.get("errors"):
        parts.append("errors " + ", ".join(f"{k} {v}" for k, v in report["errors"].items()))
    if report.get("proxy_refusals"):
        parts.append("proxy answered " + ", ".join(
            f"{k} ×{v}" for k, v in report["proxy_refusals"].items()))
    other = {k: v for k, v in (report.get("status") or {}).items()
             if not k.startswith("2") and k != "101"}
    if other:
        parts.append("status " + ", ".join(f"{k} ×{v}" for k, v in other.items()))
    return f"{report.get('failed', 0)} of {report.get('requests', 0)} failed" + (
        f" ({'; '.join(parts)})" if parts else "")


class Holder:
    """sluice-load --hold N in the background: N idle tunnels until stopped."""

    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        try:
            return json.loads(out)
        except ValueError:
            return None


def wait_established(port, want, holders, timeout):
    """Waits until `want` connections to port are established (or the holders gave up)."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        n = established_to(port)
        if n >= want:
            return n
        if any(h.proc.poll() is not None for h in holders):
            return n
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > 20:
            return n  # no progress for 20 s: the proxy holds what it can
        time.sleep(0.2)
    return established_to(port)
