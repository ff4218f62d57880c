"""Filters plugged in through the config: the custom header_rewrite extension and the client
allowlist listener filter, end to end with the real binary, curl and a real origin."""
import json
import socket

from helpers import curl


def proxied(s, *args):
    return curl("-x", s.proxy_url, "-U", f"user:{s.key}", *args)


def insert_header_rewrite(full):
    """Puts sluice.header_rewrite before the router of every HTTP/1 codec."""
    for listener in full["listeners"]:
        for chain in listener["filter_chains"]:
            for f in chain["filters"]:
                if f["name"] != "sluice.http1":
                    continue
                rf = f["typed_config"]["request_filters"]
                rf.insert(len(rf) - 1, {
                    "name": "sluice.header_rewrite",
                    "typed_config": {
                        "@type": "type.googleapis.com/"
                                 "sluice.extensions.header_rewrite.v1.HeaderRewriteConfig",
                        "remove": ["Cookie", "X-Internal"],
                        "add": [{"name": "Via", "value": "1.1 sluice"},
                                {"name": "X-Team", "value": "blue"}],
                        "replace": True,
                    },
                })


def test_header_rewrite_edits_what_the_origin_sees(start_sluice, py_origin):
    s = start_sluice(patch=insert_header_rewrite)
    r = proxied(s, "-H", "Cookie: session=1", "-H", "X-Internal: yes", "-H", "X-Team: red",
                "-H", "X-Keep: 1", py_origin.url("/headers"))
    assert r.returncode == 0, r.describe()
    seen = [(k.lower(), v) for k, v in json.loads(r.stdout)]
    names = [k for k, _ in seen]
    assert "cookie" not in names and "x-internal" not in names, f"removed headers reached: {seen}"
    assert ("via", "1.1 sluice") in seen, seen
    assert [v for k, v in seen if k == "x-team"] == ["blue"], f"replace=true kept the old: {seen}"
    assert ("x-keep", "1") in seen, seen
    assert s.stat("header_rewrite.rq_rewritten") == 1


def test_header_rewrite_leaves_tunnels_alone(start_sluice, nginx):
    s = start_sluice(patch=insert_header_rewrite)
    r = proxied(s, "--proxytunnel", "-o", "/dev/null", "-w", "%{http_code}", nginx.url("/1k"))
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert s.stat("header_rewrite.rq_rewritten") == 0


def test_unknown_extension_fails_startup_with_its_path(start_sluice, tmp_path):
    from sluice_proc import run_cli, write_full_form, short_config

    def add_unknown(full):
        chain = full["listeners"][0]["filter_chains"][0]
        rf = chain["filters"][0]["typed_config"]["request_filters"]
        rf.insert(0, {"name": "sluice.nope",
                      "typed_config": {"@type": "type.googleapis.com/sluice.filters.v1.RouterConfig"}})

    short = tmp_path / "short.yaml"
    short.write_text(short_config(18999, 18998, "k" * 20))
    full = write_full_form(short, tmp_path / "full.yaml", "k" * 20, patch=add_unknown)
    r = run_cli("check", "-c", full)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "request_filters[0]" in r.stderr and "sluice.nope" in r.stderr, r.stderr
    assert "sluice.header_rewrite" in r.stderr, "the error should list the linked filters"


def test_allowlist_admits_clients_inside(start_sluice, nginx):
    s = start_sluice(extra_short='allowlist:\n  cidrs: ["127.0.0.0/8"]\n')
    r = proxied(s, "-o", "/dev/null", "-w", "%{http_code}", nginx.url("/1k"))
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert s.stat("listener.http.ip_allowlist.allowed") == 1
    assert s.stat("listener.http.ip_allowlist.refused") == 0


def test_allowlist_closes_clients_outside_before_reading(start_sluice, nginx):
    s = start_sluice(extra_short='allowlist:\n  cidrs: ["10.0.0.0/8", "2001:db8::/32"]\n')
    with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
        # Closed at accept: the connection ends without an answer, whatever we send.
        try:
            c.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        except OSError:
            pass
        try:
            data = c.recv(100)
        except ConnectionResetError:
            data = b""
        assert data == b"", f"a refused client got an answer: {data!r}"
    assert s.wait_stat("listener.http.ip_allowlist.refused", lambda v: v == 1) == 1
    assert s.stat("listener.http.downstream_cx_total") == 0, "a refused socket became a connection"
