"""Reload: a checked config taken by the running process (SIGHUP, POST /reload, `sluice
reload`), listeners kept, added and removed without refusing a connection, and revocation: a
removed key is refused at once and everything that authenticated with it closes within 1 s,
on every protocol; the same for a client address taken out of the allowlist."""

import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time

import pytest

from helpers import REPO_ROOT, basic_auth, free_port
from origins import EchoServer
from sluice_proc import find_typed_configs, run_cli, short_config
from test_http2 import H2Client
from test_socks5 import CONNECT, Socks5Client

# Revocation must land within 1 s of the swap; the default grace is 500 ms.
REVOKE_DEADLINE = 1.0


@pytest.fixture
def echo_server():
    s = EchoServer()
    yield s
    s.stop()


def write_config(s, keys, extra="", workers=1, server=""):
    """Rewrites the short config of `s` with named keys [(name, key)], `extra` sections and
    `server` lines (indented keys of the server section)."""
    items = ", ".join(f'{{name: {name}, key: "{key}"}}' for name, key in keys)
    text = short_config(s.port, s.admin_port, s.key, workers, extra)
    text = text.replace(f'api_keys: ["{s.key}"]', f"api_keys: [{items}]")
    text = text.replace("server:\n", "server:\n" + server, 1)
    s.config_path.write_text(text)


def reload(s):
    r = s.admin("/reload", method="POST", data=b"")
    return r


def reload_ok(s):
    r = reload(s)
    assert r.status == 200, r.text
    return r.text


def open_tunnel(addr, key, authority):
    """An HTTP/1.1 CONNECT tunnel (the socket after the 200)."""
    c = socket.create_connection(addr, timeout=5)
    c.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
              f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        d = c.recv(4096)
        assert d, f"closed before the answer: {head!r}"
        head += d
    assert head.startswith(b"HTTP/1.1 200"), head
    return c


def echoes(c, payload=b"ping"):
    c.sendall(payload)
    got = b""
    while len(got) < len(payload):
        d = c.recv(4096)
        if not d:
            return False
        got += d
    return got == payload


def seconds_until_closed(c, limit=5.0):
    """How long until the peer closes `c` (EOF or reset); None if it stays open past `limit`."""
    start = time.monotonic()
    c.settimeout(0.05)
    while time.monotonic() - start < limit:
        try:
            d = c.recv(4096)
            if d == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
    return None


def proxy_get(s, key, url, conn=None):
    """One keep-alive GET through the plain port; returns (status, the connection)."""
    c = conn or socket.create_connection(s.proxy_addr, timeout=5)
    host = url.split("/")[2]
    c.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n"
              f"Proxy-Authorization: {basic_auth(key)}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(65536)
        assert d, f"closed: {data!r}"
        data += d
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += c.recv(65536)
    return int(head.split()[1]), c


@pytest.fixture
def two_keys(start_sluice):
    """A sluice whose config, after one reload, has keys `a` and `b`."""
    s = start_sluice()
    s.keys = {"a": secrets.token_urlsafe(18), "b": secrets.token_urlsafe(18)}
    write_config(s, list(s.keys.items()))
    reload_ok(s)
    return s


# ---------------------------------------------------------------------------------------------
# the reload itself


def test_reload_takes_a_new_key_and_reports_the_version(start_sluice, py_origin):
    s = start_sluice()
    assert s.admin("/server_info").json()["config_version"] == 1
    assert s.admin("/config_dump").json()["config_version"] == 1
    new_key = secrets.token_urlsafe(18)
    assert proxy_get(s, new_key, py_origin.url("/hello"))[0] == 407
    write_config(s, [("main", s.key), ("new", new_key)])
    text = reload_ok(s)
    assert "config version 2" in text, text
    assert proxy_get(s, new_key, py_origin.url("/hello"))[0] == 200
    assert proxy_get(s, s.key, py_origin.url("/hello"))[0] == 200
    assert s.admin("/server_info").json()["config_version"] == 2
    dump = s.admin("/config_dump").json()
    assert dump["config_version"] == 2 and dump["listeners"], dump
    assert s.stat("reload.done") == 1
    assert s.stat("reload.config_version") == 2
    assert s.stat("reload.keys_revoked") == 0


def test_a_bad_file_changes_nothing_and_names_the_key(start_sluice, py_origin):
    s = start_sluice()
    good = s.config_path.read_text()
    s.config_path.write_text(good + "limits:\n  max_conections: 5\n")
    r = reload(s)
    assert r.status == 400
    assert "limits.max_conections" in r.text, r.text
    s.config_path.write_text(good.replace("allowed_ports: [80, 443", "allowed_ports: [0, 443"))
    r = reload(s)
    assert r.status == 400 and "allowed_ports" in r.text, r.text
    assert s.stat("reload.refused") == 2
    assert s.stat("reload.done") == 0
    assert s.admin("/server_info").json()["config_version"] == 1
    # Still serving with the running config.
    assert proxy_get(s, s.key, py_origin.url("/hello"))[0] == 200
    # The CLI prints the same path and exits 1 without asking the instance.
    s.config_path.write_text(good + "limits:\n  max_conections: 5\n")
    cli = run_cli("reload", "-c", s.config_path)
    assert cli.returncode == 1 and "limits.max_conections" in cli.stderr, cli
    assert s.stat("reload.refused") == 2


def test_an_address_in_use_refuses_the_reload(start_sluice, py_origin):
    s = start_sluice()
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    write_config(s, [("main", s.key)], extra=f"socks5:\n  listen: 127.0.0.1:{port}\n")
    r = reload(s)
    busy.close()
    assert r.status == 400 and "listener 'socks5'" in r.text and str(port) in r.text, r.text
    assert s.admin("/server_info").json()["config_version"] == 1
    assert proxy_get(s, s.key, py_origin.url("/hello"))[0] == 200


def test_sighup_and_the_cli_reload(start_sluice, py_origin):
    s = start_sluice()
    new_key = secrets.token_urlsafe(18)
    write_config(s, [("main", s.key), ("new", new_key)])
    s.signal(signal.SIGHUP)
    assert s.wait_stat("reload.done", lambda v: v == 1) == 1
    assert proxy_get(s, new_key, py_origin.url("/hello"))[0] == 200
    cli = run_cli("reload", "-c", s.config_path)
    assert cli.returncode == 0, cli
    assert "config version 3" in cli.stdout, cli.stdout
    assert s.admin("/server_info").json()["config_version"] == 3


def test_the_cli_finds_the_instance_through_the_pid_file(start_sluice, tmp_path):
    pid_file = tmp_path / "sluice.pid"
    s = start_sluice()
    write_config(s, [("main", s.key)], server=f"  pid_file: {pid_file}\n")
    reload_ok(s)
    text = s.config_path.read_text()
    assert int(pid_file.read_text()) == s.proc.pid
    # Without an admin address, `sluice reload` signals the pid from the file.
    no_admin = tmp_path / "no_admin.yaml"
    no_admin.write_text(text.replace(f"admin:\n  listen: 127.0.0.1:{s.admin_port}\n",
                                     "admin:\n  listen: \"off\"\n"))
    cli = run_cli("reload", "-c", no_admin)
    assert cli.returncode == 0 and str(s.proc.pid) in cli.stdout, cli
    assert s.wait_stat("reload.done", lambda v: v == 2) == 2
    s.stop()
    assert not pid_file.exists(), "the pid file outlived the process"


# ---------------------------------------------------------------------------------------------
# listeners


def test_listeners_added_and_removed_while_the_kept_one_serves_on(start_sluice, py_origin):
    s = start_sluice()
    before, c = proxy_get(s, s.key, py_origin.url("/hello"))
    assert before == 200
    socks_port = free_port()
    write_config(s, [("main", s.key)], extra=f"socks5:\n  listen: 127.0.0.1:{socks_port}\n")
    text = reload_ok(s)
    assert "added: socks5" in text, text
    with Socks5Client(("127.0.0.1", socks_port)) as client:
        client.login(s.key)
        assert client.request(CONNECT, "127.0.0.1", py_origin.port)[0] == 0
    # The connection opened before both reloads goes on with its next request.
    assert proxy_get(s, s.key, py_origin.url("/hello"), conn=c)[0] == 200
    listeners = {l["name"]: l["address"] for l in s.admin("/listeners").json()["listeners"]}
    assert listeners == {"http": f"127.0.0.1:{s.port}", "socks5": f"127.0.0.1:{socks_port}"}
    write_config(s, [("main", s.key)])
    text = reload_ok(s)
    assert "removed: socks5" in text, text
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", socks_port), timeout=1).close()
        except ConnectionRefusedError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the removed SOCKS5 port still accepts")
    assert proxy_get(s, s.key, py_origin.url("/hello"), conn=c)[0] == 200


def test_a_moved_listener_binds_its_new_address_first(start_sluice, py_origin):
    s = start_sluice()
    new_port = free_port()
    old_port = s.port
    text = s.config_path.read_text().replace(f"listen: 127.0.0.1:{old_port}",
                                             f"listen: 127.0.0.1:{new_port}")
    s.config_path.write_text(text)
    reload_ok(s)
    s.port, s.proxy_addr = new_port, ("127.0.0.1", new_port)
    assert proxy_get(s, s.key, py_origin.url("/hello"))[0] == 200
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", old_port), timeout=1)


def test_limits_change_on_the_running_listener(start_sluice, py_origin):
    s = start_sluice()
    held = [proxy_get(s, s.key, py_origin.url("/hello"))[1] for _ in range(3)]
    write_config(s, [("main", s.key)], extra="limits:\n  max_connections_per_client: 3\n")
    reload_ok(s)
    # The three open ones count against the new limit: a fourth is refused with a 503.
    extra = socket.create_connection(s.proxy_addr, timeout=5)
    extra.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert extra.recv(4096).startswith(b"HTTP/1.1 503"), "the new limit was not applied"
    for c in held:
        c.close()


def cpu_seconds(pid):
    """User and system time the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_memory_release_interval_follows_a_reload(start_sluice, py_origin):
    import yaml

    def with_interval(interval):
        def patch(full):
            full["memory_release_interval"] = interval
        return patch

    s = start_sluice(patch=with_interval("1s"))

    def reload_with(interval):
        full = yaml.safe_load(s.config_path.read_text())
        with_interval(interval)(full)
        s.config_path.write_text(yaml.safe_dump(full, sort_keys=False))
        answer = reload_ok(s)
        assert "next start" not in answer, answer  # no restart needed

    # Turned off: the releases stop, and nothing runs in their place (a timer re-armed for 0 s
    # would fire on every turn of the main thread's loop).
    reload_with("0s")
    before = cpu_seconds(s.proc.pid)
    time.sleep(2.5)
    assert cpu_seconds(s.proc.pid) - before < 0.5
    assert proxy_get(s, s.key, py_origin.url("/hello"))[0] == 200
    # On again, at another interval.
    reload_with("2s")
    assert proxy_get(s, s.key, py_origin.url("/hello"))[0] == 200


def test_access_log_turned_on_by_a_reload(start_sluice, tmp_path, py_origin):
    s = start_sluice()
    log = tmp_path / "access.log"
    proxy_get(s, s.key, py_origin.url("/before"))
    # Its record is out before the reload (the exchange ends when the origin's response does,
    # which may come after the client has the whole body); the counter exists from the first.
    deadline = time.monotonic() + 5
    while s.stats().get("request_record.total", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    write_config(s, [("main", s.key)], extra=f"access_log:\n  mode: all\n  path: {log}\n")
    reload_ok(s)
    proxy_get(s, s.key, py_origin.url("/after"))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (log.exists() and log.read_text()):
        time.sleep(0.05)
    lines = [json.loads(l) for l in log.read_text().splitlines()]
    assert [l["path"] for l in lines] == ["/after"], lines


# ---------------------------------------------------------------------------------------------
# revocation


def test_a_removed_keys_tunnel_and_keepalive_close_within_a_second(two_keys, echo_server,
                                                                    py_origin):
    s = two_keys
    tunnel_a = open_tunnel(s.proxy_addr, s.keys["a"], echo_server.authority)
    tunnel_b = open_tunnel(s.proxy_addr, s.keys["b"], echo_server.authority)
    status, keepalive_a = proxy_get(s, s.keys["a"], py_origin.url("/hello"))
    assert status == 200
    assert echoes(tunnel_a) and echoes(tunnel_b)
    revoked_before = s.stat("reload.keys_revoked")  # the fixture's reload took the first key
    write_config(s, [("b", s.keys["b"])])
    start = time.monotonic()
    text = reload_ok(s)
    assert "keys revoked: a" in text, text
    # Refused from the swap on, on a new connection...
    assert proxy_get(s, s.keys["a"], py_origin.url("/hello"))[0] == 407
    closed_at = seconds_until_closed(tunnel_a)
    assert closed_at is not None, "the revoked key's tunnel stayed open"
    assert time.monotonic() - start <= REVOKE_DEADLINE + 0.3, time.monotonic() - start
    assert seconds_until_closed(keepalive_a, limit=1.0) is not None, \
        "the revoked key's keep-alive connection stayed open"
    # The other key's tunnel is untouched.
    assert echoes(tunnel_b)
    assert s.stat("reload.keys_revoked") == revoked_before + 1
    assert s.stat("reload.revoked_closed") == 2


def test_a_removed_key_is_refused_on_a_connection_opened_before(start_sluice, py_origin):
    s = start_sluice()
    keys = {"a": secrets.token_urlsafe(18), "b": secrets.token_urlsafe(18)}
    # A long grace: the connection is still open when its next request comes.
    grace = "  revoke_grace: 5s\n"
    write_config(s, list(keys.items()), server=grace)
    reload_ok(s)
    status, conn = proxy_get(s, keys["a"], py_origin.url("/hello"))
    assert status == 200
    write_config(s, [("b", keys["b"])], server=grace)
    reload_ok(s)
    # Within the grace, the old connection's next request with the removed key is refused.
    assert proxy_get(s, keys["a"], py_origin.url("/hello"), conn=conn)[0] == 407
    assert s.stat("auth.denied_revoked") == 1


def test_a_key_kept_through_a_reload_is_revoked_by_a_later_one(two_keys, echo_server):
    s = two_keys
    tunnel = open_tunnel(s.proxy_addr, s.keys["a"], echo_server.authority)
    c_key = secrets.token_urlsafe(18)
    write_config(s, [("a", s.keys["a"]), ("b", s.keys["b"]), ("c", c_key)])
    text = reload_ok(s)
    assert "revoked" not in text, text
    assert echoes(tunnel)
    write_config(s, [("b", s.keys["b"]), ("c", c_key)])
    reload_ok(s)
    assert seconds_until_closed(tunnel, limit=REVOKE_DEADLINE + 0.5) is not None, \
        "a tunnel of a key revoked two versions after it opened stayed open"


def test_socks5_tunnel_of_a_removed_key_closes(start_sluice, py_origin):
    s = start_sluice()
    socks_port = free_port()
    keys = {"a": secrets.token_urlsafe(18), "b": secrets.token_urlsafe(18)}
    extra = f"socks5:\n  listen: 127.0.0.1:{socks_port}\n"
    write_config(s, list(keys.items()), extra=extra)
    reload_ok(s)
    clients = {}
    for name, key in keys.items():
        clients[name] = Socks5Client(("127.0.0.1", socks_port))
        clients[name].login(key)
        assert clients[name].request(CONNECT, "127.0.0.1", py_origin.port)[0] == 0
    write_config(s, [("b", keys["b"])], extra=extra)
    start = time.monotonic()
    reload_ok(s)
    assert seconds_until_closed(clients["a"].sock) is not None
    assert time.monotonic() - start <= REVOKE_DEADLINE + 0.3
    # b's tunnel still carries an HTTP exchange with the origin.
    b = clients["b"].sock
    b.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    b.settimeout(5)
    assert b.recv(100).startswith(b"HTTP/1.1 200")
    # A new SOCKS5 login with the removed key is refused.
    with Socks5Client(("127.0.0.1", socks_port)) as again:
        assert again.greet() == 0x02
        assert again.auth(keys["a"]) != 0


def test_http2_streams_of_a_removed_key_are_reset(start_sluice, certs, echo_server):
    s = start_sluice()
    keys = {"a": secrets.token_urlsafe(18), "b": secrets.token_urlsafe(18)}
    tls_port = free_port()
    d = certs["dir"]
    extra = (f"tls:\n  listen: 127.0.0.1:{tls_port}\n  cert: {d / 'server-chain.pem'}\n"
             f"  key: {d / 'server.key'}\n")
    write_config(s, list(keys.items()), extra=extra)
    reload_ok(s)
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    ctx.set_alpn_protocols(["h2"])

    def h2_socket():
        raw = socket.create_connection(("127.0.0.1", tls_port), timeout=10)
        tls = ctx.wrap_socket(raw, server_hostname="localhost")
        assert tls.selected_alpn_protocol() == "h2"
        return tls

    # One connection with a stream of each key (b's last), one with a stream of a only.
    shared = H2Client(s, sock=h2_socket())
    a = shared.open("CONNECT", echo_server.authority, end=False, key=keys["a"])
    assert shared.wait(lambda: shared.streams[a].status == 200)
    b = shared.open("CONNECT", echo_server.authority, end=False, key=keys["b"])
    assert shared.wait(lambda: shared.streams[b].status == 200)
    only_a = H2Client(s, sock=h2_socket())
    a2 = only_a.open("CONNECT", echo_server.authority, end=False, key=keys["a"])
    assert only_a.wait(lambda: only_a.streams[a2].status == 200)
    write_config(s, [("b", keys["b"])], extra=extra)
    start = time.monotonic()
    reload_ok(s)
    assert shared.wait(lambda: shared.streams[a].reset is not None, timeout=REVOKE_DEADLINE + 0.5)
    assert time.monotonic() - start <= REVOKE_DEADLINE + 0.3
    # b's stream goes on.
    shared.send_body(b, b"still here", end=False)
    assert shared.wait(lambda: bytes(shared.streams[b].body) == b"still here")
    assert shared.streams[b].reset is None
    # A connection whose only key was revoked is closed (its stream reset, then a GOAWAY).
    assert only_a.wait(lambda: only_a.closed, timeout=REVOKE_DEADLINE + 0.5)
    assert only_a.streams[a2].reset is not None or only_a.goaway is not None
    # A new stream with the removed key on the surviving connection is refused.
    again = shared.open("CONNECT", echo_server.authority, end=False, key=keys["a"])
    assert shared.response(again).status == 407


def test_an_address_taken_out_of_the_allowlist_is_closed(start_sluice, echo_server, py_origin):
    s = start_sluice()
    write_config(s, [("main", s.key)], extra="allowlist:\n  cidrs: [127.0.0.0/8]\n")
    reload_ok(s)
    tunnel = open_tunnel(s.proxy_addr, s.key, echo_server.authority)
    idle = proxy_get(s, s.key, py_origin.url("/hello"))[1]
    assert echoes(tunnel)
    write_config(s, [("main", s.key)], extra="allowlist:\n  cidrs: [192.0.2.0/24]\n")
    start = time.monotonic()
    reload_ok(s)
    # The idle keep-alive connection and the tunnel close when the grace ends.
    assert seconds_until_closed(idle) is not None
    assert seconds_until_closed(tunnel) is not None
    assert time.monotonic() - start <= REVOKE_DEADLINE + 0.3
    # And a new connection is refused at accept.
    c = socket.create_connection(s.proxy_addr, timeout=5)
    assert seconds_until_closed(c, limit=2) is not None
    assert s.stat("reload.revoked_closed") >= 1


# ---------------------------------------------------------------------------------------------
# under load


def sluice_load_bin():
    path = REPO_ROOT / "bazel-bin/tools/load/sluice-load"
    if not path.is_file():
        pytest.fail(f"{path} not found: bazel build //:sluice-load", pytrace=False)
    return str(path)


def test_twenty_reloads_under_load_fail_no_request_of_a_kept_key(start_sluice, sluice_origin,
                                                                  certs):
    """sluice-load on the plain, TLS, HTTP/2 and SOCKS5 ports while 20 reloads happen: some add
    and remove a listener and a key, some are invalid. The kept key sees no failure."""
    import yaml

    s = start_sluice(workers=2)
    kept = s.key
    tls_port, socks_port, extra_port = free_port(), free_port(), free_port()
    d = certs["dir"]
    write_config(s, [("kept", kept)], workers=2,
                 extra=f"tls:\n  listen: 127.0.0.1:{tls_port}\n  cert: {d / 'server-chain.pem'}"
                       f"\n  key: {d / 'server.key'}\nsocks5:\n  listen: 127.0.0.1:{socks_port}\n")
    expanded = run_cli("config", "expand", "-c", s.config_path)
    assert expanded.returncode == 0, expanded.stderr
    base = yaml.safe_load(expanded.stdout)

    def version(i, extra_listener, keys):
        full = json.loads(json.dumps(base))
        for auth in find_typed_configs(full, ".AuthConfig"):
            auth["api_keys"] = [{"name": n, "key": k} for n, k in keys]
        if extra_listener:
            listener = json.loads(json.dumps(full["listeners"][0]))
            listener["name"] = "extra"
            listener["address"] = f"127.0.0.1:{extra_port}"
            full["listeners"].append(listener)
        full["listeners"][0]["connection_limits"]["max_connections"] = 9000 + i
        s.config_path.write_text(yaml.safe_dump(full, sort_keys=False))

    version(0, False, [("kept", kept)])
    reload_ok(s)
    dst = sluice_origin.url + "/bytes/1024"
    ca = ["--proxy-ca", str(certs["ca"])]
    loads = [
        ["--proxy", f"http://u:{kept}@127.0.0.1:{s.port}", "--dst", dst],
        ["--proxy", f"http://u:{kept}@127.0.0.1:{s.port}", "--dst", dst, "--new-conn"],
        ["--proxy", f"https://u:{kept}@127.0.0.1:{tls_port}", *ca, "--dst", dst],
        ["--proxy", f"h2://u:{kept}@127.0.0.1:{tls_port}", *ca, "--dst", dst],
        ["--proxy", f"socks5://u:{kept}@127.0.0.1:{socks_port}", "--dst", dst],
        ["--proxy", f"socks5://u:{kept}@127.0.0.1:{socks_port}", "--dst", dst, "--new-conn"],
    ]
    procs = [subprocess.Popen([sluice_load_bin(), *args, "-c", "4", "-d", "9s", "--json", "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args in loads]
    time.sleep(0.5)
    done = refused = 0
    for i in range(1, 21):
        if i % 5 == 0:
            s.config_path.write_text(s.config_path.read_text() + "bogus_key: 1\n")
            r = reload(s)
            assert r.status == 400 and "bogus_key" in r.text, r.text
            refused += 1
        else:
            # The extra listener and a second key come and go.
            version(i, i % 2 == 1, [("kept", kept)] +
                    ([(f"k{i}", secrets.token_urlsafe(12))] if i % 2 == 1 else []))
            reload_ok(s)
            done += 1
            if i % 2 == 1:
                # The listener just added serves.
                extra = socket.create_connection(("127.0.0.1", extra_port), timeout=5)
                assert proxy_get(s, kept, dst, conn=extra)[0] == 200
                extra.close()
        time.sleep(0.3)
    for args, p in zip(loads, procs):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, (args, err)
        r = json.loads(out)
        where = " ".join(a.split("@")[-1] for a in args)
        assert r["requests"] > 100, (where, r)
        assert r["failed"] == 0 and not r["errors"], (where, r["failed"], r["errors"])
    assert s.stat("reload.done") == done + 1
    assert s.stat("reload.refused") == refused
