"""The command line: --version, check, init, config expand, and startup failures."""

import base64
import json
import socket
import subprocess

import yaml

from sluice_proc import Sluice, find_typed_configs, run_cli, short_config, sluice_binary
from helpers import CLEAN_ENV, curl, free_port


def output(r):
    return (r.stdout or "") + (r.stderr or "")


def write(path, text):
    path.write_text(text)
    return path


def valid_config(tmp_path, key="k-0123456789abcdef"):
    return write(tmp_path / "ok.yaml", short_config(free_port(), free_port(), key))


def test_version():
    r = run_cli("--version")
    assert r.returncode == 0, output(r)
    assert r.stdout.startswith("sluice "), f"--version printed {r.stdout!r}"


def test_check_accepts_a_valid_config(tmp_path):
    r = run_cli("check", "-c", valid_config(tmp_path))
    assert r.returncode == 0, output(r)
    assert "configuration OK" in output(r)


def test_check_binds_nothing(tmp_path):
    # The configured proxy port is taken: `check` must still pass, since it binds nothing.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = write(tmp_path / "c.yaml", short_config(port, free_port(), "k-0123456789abcdef"))
        r = run_cli("check", "-c", cfg)
    assert r.returncode == 0, f"check failed on a taken port: {output(r)}"


def test_check_names_an_unknown_key(tmp_path):
    cfg = write(tmp_path / "bad.yaml", "server:\n  lisen: 127.0.0.1:8080\nauth:\n"
                "  api_keys: [\"k\"]\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, f"exit {r.returncode}: {output(r)}"
    assert "server.lisen" in output(r), f"error does not name server.lisen: {output(r)}"
    assert "configuration OK" not in output(r)


def test_check_names_an_unknown_top_level_section(tmp_path):
    cfg = write(tmp_path / "bad.yaml", "servers:\n  listen: 127.0.0.1:8080\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, output(r)
    assert "servers" in output(r), output(r)


def test_check_rejects_a_bad_type(tmp_path):
    cfg = write(tmp_path / "bad.yaml", "server:\n  workers: many\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, output(r)
    assert "server.workers" in output(r), f"error does not name server.workers: {output(r)}"


def test_check_rejects_an_unparsable_listen_address(tmp_path):
    cfg = write(tmp_path / "bad.yaml", "server:\n  listen: not-an-address\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, f"check accepted listen: not-an-address: {output(r)}"


def test_check_missing_file_fails(tmp_path):
    r = run_cli("check", "-c", tmp_path / "nope.yaml")
    assert r.returncode != 0, output(r)
    assert "nope.yaml" in output(r), f"error does not name the file: {output(r)}"


def test_run_with_unknown_key_fails_at_startup(tmp_path):
    cfg = write(tmp_path / "bad.yaml",
                short_config(free_port(), free_port(), "k-0123456789abcdef").replace(
                    "  workers: 1\n", "  workers: 1\n  lisen: 127.0.0.1:1\n"))
    try:
        r = subprocess.run([sluice_binary(), "run", "-c", str(cfg)], capture_output=True,
                           text=True, env=CLEAN_ENV, timeout=15)
    except subprocess.TimeoutExpired:
        raise AssertionError("sluice run kept running with an unknown config key") from None
    assert r.returncode != 0, output(r)
    assert "server.lisen" in output(r), f"startup error does not name the key: {output(r)}"


def read_key(path):
    doc = yaml.safe_load(path.read_text())
    keys = doc["auth"]["api_keys"]
    assert keys, f"init wrote no API key: {path.read_text()}"
    k = keys[0]
    return k["key"] if isinstance(k, dict) else k


def test_init_writes_a_commented_config_with_a_fresh_key(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for p in (a, b):
        r = run_cli("init", "-c", p)
        assert r.returncode == 0, output(r)
        assert p.exists(), f"init did not write {p}"
    text = a.read_text()
    assert "#" in text, "the generated config has no comments"
    mode = a.stat().st_mode & 0o777
    assert mode & 0o077 == 0, f"the config holds a secret but is mode {oct(mode)}"
    ka, kb = read_key(a), read_key(b)
    assert len(ka) >= 16, f"API key too short to be random: {ka!r}"
    assert ka != kb, "two inits produced the same key"
    r = run_cli("check", "-c", a)
    assert r.returncode == 0, f"the config init wrote does not pass check: {output(r)}"


def test_init_refuses_to_overwrite(tmp_path):
    p = tmp_path / "c.yaml"
    assert run_cli("init", "-c", p).returncode == 0
    before = p.read_bytes()
    r = run_cli("init", "-c", p)
    assert r.returncode == 1, f"second init exit {r.returncode}: {output(r)}"
    assert p.read_bytes() == before, "init overwrote an existing config"


def test_default_path_honours_xdg_config_home(tmp_path):
    xdg = tmp_path / "xdg"
    r = run_cli("init", env={"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path / "home")})
    assert r.returncode == 0, output(r)
    assert (xdg / "sluice/config.yaml").is_file(), f"no config under $XDG_CONFIG_HOME: {output(r)}"
    r = run_cli("check", env={"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path / "home")})
    assert r.returncode == 0 and "configuration OK" in output(r), output(r)


def test_default_path_under_home(tmp_path):
    env = {k: v for k, v in CLEAN_ENV.items() if k != "XDG_CONFIG_HOME"}
    env["HOME"] = str(tmp_path)
    r = subprocess.run([sluice_binary(), "init"], capture_output=True, text=True, env=env,
                       timeout=30)
    assert r.returncode == 0, output(r)
    assert (tmp_path / ".config/sluice/config.yaml").is_file(), output(r)


def test_config_expand_prints_the_full_form(tmp_path):
    port, admin = free_port(), free_port()
    cfg = write(tmp_path / "c.yaml", short_config(port, admin, "k-0123456789abcdef"))
    r = run_cli("config", "expand", "-c", cfg)
    assert r.returncode == 0, output(r)
    assert "listeners:" in r.stdout, r.stdout
    full = yaml.safe_load(r.stdout)
    addresses = [l.get("address") for l in full["listeners"]]
    assert f"127.0.0.1:{port}" in addresses, f"listener addresses {addresses}"
    assert "sluice.http1" in r.stdout and "sluice.auth" in r.stdout and "sluice.router" in r.stdout

    # The printed full form is itself a valid config.
    full_path = write(tmp_path / "full.yaml", r.stdout)
    r2 = run_cli("check", "-c", full_path)
    if "<redacted>" not in r.stdout:
        assert r2.returncode == 0, f"expanded config does not pass check: {output(r2)}"


def test_unknown_command_fails():
    r = run_cli("frobnicate")
    assert r.returncode != 0, output(r)


# ---------------------------------------------------------------------------------------------
# no accidental open relay: a listener beyond loopback needs keys, or open_relay: true


def keyless_config(tmp_path, listen, extra=""):
    return write(tmp_path / "keyless.yaml",
                 f"server:\n  listen: \"{listen}\"\n  workers: 1\n"
                 f"admin:\n  listen: 127.0.0.1:{free_port()}\n{extra}")


def assert_refused_as_open_relay(r, address, listener="http"):
    assert r.returncode == 1, f"exit {r.returncode}: {output(r)}"
    text = output(r)
    assert "configuration OK" not in text, text
    assert f"listener '{listener}' listens on {address}" in text, text
    assert "open relay" in text and "auth.api_keys" in text, text
    assert "auth.open_relay: true" in text, text


def test_keyless_config_on_a_wildcard_address_is_refused(tmp_path):
    for host in ("0.0.0.0", "[::]"):
        port = free_port()
        cfg = keyless_config(tmp_path, f"{host}:{port}")
        assert_refused_as_open_relay(run_cli("check", "-c", cfg), f"{host}:{port}")
        try:
            r = subprocess.run([sluice_binary(), "run", "-c", str(cfg)], capture_output=True,
                               text=True, env=CLEAN_ENV, timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"sluice run served keyless on {host}:{port}") from None
        assert_refused_as_open_relay(r, f"{host}:{port}")


def test_keyless_socks5_port_beyond_loopback_is_refused(tmp_path):
    port = free_port()
    cfg = keyless_config(tmp_path, f"127.0.0.1:{free_port()}",
                         f"socks5:\n  listen: \"0.0.0.0:{port}\"\n")
    assert_refused_as_open_relay(run_cli("check", "-c", cfg), f"0.0.0.0:{port}", "socks5")


def test_keyless_config_on_loopback_is_a_warning(tmp_path):
    for host in ("127.0.0.1", "127.0.0.2", "[::1]"):
        r = run_cli("check", "-c", keyless_config(tmp_path, f"{host}:{free_port()}"))
        assert r.returncode == 0, output(r)
        assert "configuration OK" in output(r) and "OPEN RELAY" in output(r), output(r)


def test_open_relay_said_in_words_starts(tmp_path):
    port = free_port()
    # Only loopback clients are admitted, so the open port serves nobody else meanwhile.
    cfg = keyless_config(tmp_path, f"0.0.0.0:{port}",
                         "auth:\n  open_relay: true\nallowlist:\n  cidrs: [\"127.0.0.0/8\"]\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 0 and "configuration OK" in output(r), output(r)
    assert "OPEN RELAY" in output(r), output(r)
    admin_port = int(yaml.safe_load(cfg.read_text())["admin"]["listen"].rsplit(":", 1)[1])
    s = Sluice(tmp_path, "", port, admin_port, cfg).start()
    assert s.stop() == 0, s.log()[-2000:]

    # The full form says it in the sluice.auth config, and refuses without it.
    r = run_cli("config", "expand", "-c", cfg)
    assert r.returncode == 0, output(r)
    assert "open_relay: true" in r.stdout, r.stdout
    full = yaml.safe_load(r.stdout)
    full_path = write(tmp_path / "full.yaml", yaml.safe_dump(full, sort_keys=False))
    r = run_cli("check", "-c", full_path)
    assert r.returncode == 0, output(r)
    for auth in find_typed_configs(full, ".AuthConfig"):
        auth.pop("open_relay")
    write(full_path, yaml.safe_dump(full, sort_keys=False))
    assert_refused_as_open_relay(run_cli("check", "-c", full_path), f"0.0.0.0:{port}")


# ---------------------------------------------------------------------------------------------
# sluice status: the running instance, found through the config's admin address


def open_tunnel(s, port):
    """A CONNECT tunnel through sluice to 127.0.0.1:port, left open."""
    c = socket.create_connection(s.proxy_addr, timeout=10)
    auth = base64.b64encode(f"user:{s.key}".encode()).decode()
    c.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
              f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = c.recv(4096)
        assert chunk, f"sluice closed the CONNECT: {head!r}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return c


def test_status_of_a_running_instance(start_sluice, nginx):
    s = start_sluice(workers=2)
    r = curl("-x", s.proxy_url, "-U", f"user:{s.key}", "-o", "/dev/null", "-w", "%{http_code}",
             nginx.url("/1k"))
    assert r.stdout == b"200", r.describe()
    s.wait_stat("request_record.total", lambda v: v >= 1)
    with open_tunnel(s, nginx.port):
        s.wait_stat("tunnel.listener.http.tunnels_active", lambda v: v == 1)
        r = run_cli("status", "-c", s.config_path, "--json")
        stats = s.stats()
        text = run_cli("status", "-c", s.config_path)
    assert r.returncode == 0, output(r)
    st = json.loads(r.stdout)
    info = s.admin("/server_info").json()
    assert st["version"] == info["version"] and st["state"] == "live", st
    assert st["workers"] == 2 and st["uptime_seconds"] >= 0, st
    assert st["admin_address"] == f"127.0.0.1:{s.admin_port}", st
    assert st["listeners"] == [{"name": "http", "address": f"127.0.0.1:{s.port}"}], st
    assert st["active_connections"] >= 1, st
    assert st["tunnels_active"] == stats["tunnel.listener.http.tunnels_active"] == 1, st
    assert st["requests_total"] == stats["request_record.total"] >= 1, st
    assert st["upstream_budget_refused"] == (stats["upstream.client_limit_refused"] +
                                             stats["upstream.descriptor_reserve_refused"]), st
    assert st["bans_enabled"] is True and st["bans"] == 0, st

    assert text.returncode == 0, output(text)
    lines = text.stdout
    assert lines.startswith(f"sluice {info['version']}, admin endpoint 127.0.0.1:{s.admin_port}")
    assert "state:            live" in lines, lines
    assert "workers:          2" in lines, lines
    assert f"http       127.0.0.1:{s.port}" in lines, lines
    assert "tunnels:          1 active" in lines, lines
    assert f"requests:         {st['requests_total']} served" in lines, lines
    assert "bans:             0" in lines, lines


def test_status_says_when_nothing_answers(tmp_path):
    admin_port = free_port()
    cfg = write(tmp_path / "c.yaml", short_config(free_port(), admin_port, "k-0123456789abcdef"))
    for args in (("status", "-c", cfg), ("status", "-c", cfg, "--json")):
        r = run_cli(*args)
        assert r.returncode == 1, output(r)
        assert f"no sluice is answering at 127.0.0.1:{admin_port}" in r.stderr, output(r)
        assert r.stdout == "", output(r)


def test_status_without_an_admin_address(tmp_path):
    admin_port = free_port()
    cfg = write(tmp_path / "c.yaml",
                short_config(free_port(), admin_port, "k-0123456789abcdef").replace(
                    f"listen: 127.0.0.1:{admin_port}", "listen: \"off\""))
    r = run_cli("status", "-c", cfg)
    assert r.returncode == 1, output(r)
    assert "has no admin address" in r.stderr, output(r)


def test_status_with_a_bad_config_gives_the_check_error(tmp_path):
    cfg = write(tmp_path / "bad.yaml", "server:\n  lisen: 127.0.0.1:8080\nauth:\n"
                "  api_keys: [\"k\"]\n")
    check = run_cli("check", "-c", cfg)
    r = run_cli("status", "-c", cfg)
    assert r.returncode == 1, output(r)
    assert "server.lisen" in r.stderr and r.stderr == check.stderr, (output(r), output(check))


def test_json_is_only_for_status(tmp_path):
    r = run_cli("check", "-c", valid_config(tmp_path), "--json")
    assert r.returncode != 0 and "--json" in r.stderr, output(r)
