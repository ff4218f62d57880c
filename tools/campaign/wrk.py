"""The cross-check: the campaign's 1 KB keep-alive test driven by wrk instead of sluice-load.

Every other row is measured with sluice-load. To show that its numbers belong to the proxies
and not to the load generator, the plain HTTP 1 KB test is run again with wrk (Debian's wrk
4.1), against each HTTP peer at the concurrency its sweep chose, on the same cores, and the
report puts the two side by side: requests per second and the proxy's CPU per request.

wrk speaks to a forward proxy through a Lua script: the request line carries the absolute URL
and the Proxy-Authorization field the key (from the peer's proxy URL), like any client that is
configured with an HTTP proxy.
"""

import base64
import re
import subprocess
from urllib.parse import unquote, urlsplit


def script(proxy_url, target_url, close):
    """The Lua script for one peer: absolute-form GETs of target_url through proxy_url."""
    u = urlsplit(proxy_url)
    lines = ['wrk.method = "GET"', f'wrk.path = "{target_url}"',
             f'wrk.headers["Host"] = "{urlsplit(target_url).netloc}"']
    if u.username is not None:
        cred = f"{unquote(u.username)}:{unquote(u.password or '')}"
        token = base64.b64encode(cred.encode()).decode()
        lines.append(f'wrk.headers["Proxy-Authorization"] = "Basic {token}"')
    if close:
        lines.append('wrk.headers["Connection"] = "close"')
    return "\n".join(lines) + "\n"


def connect_url(proxy_url):
    """Where wrk connects: the proxy's address without its credentials."""
    u = urlsplit(proxy_url)
    return f"http://{u.hostname}:{u.port}/"


_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse(text):
    """A report in the shape measure.metrics() reads (ok, failed, elapsed_s, errors), from
    wrk's summary; None when it has no summary."""
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h),", text)
    if m is None:
        return None
    completed = int(m.group(1))
    elapsed = float(m.group(2)) * _SCALE[m.group(3)]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    bad = int(non2xx.group(1)) if non2xx else 0
    errors = {}
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if sock:
        for name, v in zip(("connect", "read", "write", "timeout"), sock.groups()):
            if int(v):
                errors[name] = int(v)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", text)
    return {"ok": completed - bad, "failed": bad + sum(errors.values()), "requests": completed,
            "elapsed_s": elapsed, "errors": errors,
            "wrk_requests_per_s": float(rate.group(1)) if rate else None}


def closes_are_not_errors(report):
    """For a peer that closes the client connection after every response (wrk is told with
    Connection: close): wrk counts each of those closes as a read error, although the response
    was whole. Up to one per completed request is taken as the close, not as a failure."""
    closes = min(report["errors"].get("read", 0), report["requests"])
    if closes:
        report["errors"]["read"] -= closes
        if report["errors"]["read"] == 0:
            del report["errors"]["read"]
        report["failed"] -= closes
        report["closes_counted_as_read_errors"] = closes


def command(wrk, cpus_prefix, threads, connections, duration, script_path, url):
    """wrk's command line; its duration is whole seconds (at least one)."""
    return cpus_prefix + [wrk, f"-t{threads}", f"-c{connections}",
                          f"-d{max(1, round(duration))}s",
                          "--timeout", "10s", "-s", str(script_path), url]


def run(cmd, timeout):
    """Runs wrk; (report or None, output tail)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    return parse(p.stdout), (p.stderr or p.stdout)[-400:]
