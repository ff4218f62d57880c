"""A short wrk run through the proxy (absolute-form requests, keep-alive): zero errors."""

import re
import shutil
import subprocess

from helpers import CLEAN_ENV, basic_auth

WRK_SCRIPT = """\
wrk.method = "GET"
wrk.path = "{url}"
wrk.headers["Host"] = "{host}"
wrk.headers["Proxy-Authorization"] = "{auth}"
"""


def parse_wrk(text):
    """The numbers wrk prints; the error lines appear only when non-zero."""
    m = re.search(r"^\s*(\d+) requests in ", text, re.M)
    requests = int(m.group(1)) if m else None
    errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors = sum(int(g) for g in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    non2xx = int(m.group(1)) if m else 0
    return requests, errors, non2xx


def test_parse_wrk_output():
    clean = "  Thread Stats ...\n  1234 requests in 3.00s, 1.5MB read\nRequests/sec: 411.33\n"
    assert parse_wrk(clean) == (1234, 0, 0)
    dirty = ("  10 requests in 3.00s, 1.5MB read\n"
             "  Socket errors: connect 0, read 2, write 0, timeout 1\n"
             "  Non-2xx or 3xx responses: 7\n")
    assert parse_wrk(dirty) == (10, 3, 7)


def test_wrk_through_proxy(sluice, nginx, tmp_path):
    assert shutil.which("wrk"), "wrk is not installed (tools/deps.sh --test installs it)"
    script = tmp_path / "proxy.lua"
    host = f"127.0.0.1:{nginx.port}"
    script.write_text(WRK_SCRIPT.format(url=nginx.url("/1k"), host=host,
                                        auth=basic_auth(sluice.key)))
    p = subprocess.run(["wrk", "-t1", "-c16", "-d3s", "--timeout", "5s", "-s", str(script),
                        sluice.proxy_url + "/"], capture_output=True, text=True, env=CLEAN_ENV,
                       timeout=30)
    text = p.stdout + p.stderr
    assert p.returncode == 0, f"wrk exit {p.returncode}:\n{text}"
    requests, errors, non2xx = parse_wrk(text)
    assert requests and requests > 0, f"wrk made no requests:\n{text}"
    assert errors == 0, f"wrk socket errors:\n{text}"
    assert non2xx == 0, f"wrk got non-2xx answers:\n{text}"
    rs_2xx = sluice.stat("http1.http.rs_2xx")
    # wrk counts only completed responses; the proxy may have answered a few more at the cut-off.
    assert requests <= rs_2xx <= requests + 16, f"wrk saw {requests}, proxy counted {rs_2xx} 2xx"
    assert sluice.stat("upstream.cx_connect_total") <= 16, \
        "more upstream connections than client connections: the pool is not reused"
