"""Bans after repeated wrong keys, and the auth hardening that goes with them (sha256: keys, the
keys file), end to end with the real binary, raw sockets and curl, on loopback only."""

import hashlib
import secrets
import socket
import time

import pytest

from helpers import RawConnection, basic_auth, curl, free_port
from sluice_proc import run_cli, short_config

WRONG = "not-the-key-" + "x" * 20


def request_bytes(origin_url, key=None, close=True):
    head = f"GET {origin_url} HTTP/1.1\r\nHost: {origin_url.split('/')[2]}\r\n"
    if key is not None:
        head += f"Proxy-Authorization: {basic_auth(key)}\r\n"
    if close:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode()


def status_of(s, origin_url, key=None):
    """One request on a fresh connection; its status."""
    with RawConnection(s.proxy_addr, timeout=5) as c:
        c.send(request_bytes(origin_url, key))
        return c.read_response().status


def status_from(s, origin_url, key, source):
    """One request from the loopback address `source` (any of 127.0.0.0/8 can be bound); its
    status, or None when the proxy closed without answering."""
    with socket.create_connection(s.proxy_addr, timeout=5, source_address=(source, 0)) as sock:
        sock.sendall(request_bytes(origin_url, key))
        head = b""
        while b"\r\n" not in head:
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            head += chunk
        return int(head.split(b" ", 2)[1])


def refused_at_accept(s, payload=b"", source=None):
    """True when the proxy closes a new connection without answering a byte, even to a request
    sent at once."""
    sock = socket.create_connection(s.proxy_addr, timeout=5,
                                    source_address=(source, 0) if source else None)
    try:
        if payload:
            try:
                sock.sendall(payload)
            except (BrokenPipeError, ConnectionResetError):
                return True
        sock.settimeout(3)
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        assert data == b"", f"a refused connection must get no bytes, got {data[:200]!r}"
        return True
    finally:
        sock.close()


def ban_localhost(s, origin_url, n=5):
    for i in range(n):
        assert status_of(s, origin_url, WRONG) == 407, f"wrong key #{i + 1}"


def sha256_hex(key):
    return hashlib.sha256(key.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# bans


def test_fifth_wrong_key_bans_and_the_next_connection_is_closed_at_accept(start_sluice,
                                                                          py_origin):
    s = start_sluice()
    url = py_origin.url("/hello")
    ban_localhost(s, url, 4)
    assert s.stat("bans.failures") == 4
    assert s.stat("bans.banned") == 0
    # Four wrong keys are not a ban: the right key still works.
    assert status_of(s, url, s.key) == 200
    # The 5th wrong key is answered (407) and starts the ban.
    assert status_of(s, url, WRONG) == 407
    assert s.stat("bans.failures") == 5
    assert s.stat("bans.banned") == 1
    assert s.stat("bans.active") == 1
    seen = len(py_origin.requests)
    refused_before = s.stat("listener.http.downstream_cx_refused")
    # The 6th connection: closed at accept, nothing answered, whatever it sends.
    assert refused_at_accept(s, request_bytes(url, WRONG))
    assert s.wait_stat("bans.refused", lambda v: v == 1) == 1
    # The right key from the banned address is refused the same way.
    assert refused_at_accept(s, request_bytes(url, s.key))
    assert refused_at_accept(s)
    assert s.wait_stat("bans.refused", lambda v: v == 3) == 3
    assert s.stat("listener.http.downstream_cx_refused") == refused_before + 3
    assert len(py_origin.requests) == seen, "a banned client's request reached the origin"
    # Refused connections never reached auth: no more failures were counted.
    assert s.stat("bans.failures") == 5
    r = curl("-x", s.proxy_url, "-U", f"user:{s.key}", url)
    assert r.returncode != 0, f"curl through a ban should fail: {r.describe()}"


def test_get_bans_lists_the_ban(start_sluice, py_origin):
    s = start_sluice()
    r = s.admin("/bans")
    assert r.status == 200 and r.headers["Content-Type"] == "application/json", r
    assert r.json() == {"enabled": True, "bans": [], "tracked": 0}
    ban_localhost(s, py_origin.url("/hello"))
    body = s.admin("/bans").json()
    assert len(body["bans"]) == 1, body
    b = body["bans"][0]
    assert b["address"] == "127.0.0.1"
    assert b["failures"] == 5
    assert b["reason"] == "invalid proxy credentials"
    assert 890 <= b["expires_in_seconds"] <= 900, b
    assert body["tracked"] == 1
    index = s.admin("/").text
    assert "/bans" in index and "/bans/unban" in index, index


def test_unban_restores_access(start_sluice, py_origin):
    s = start_sluice()
    url = py_origin.url("/hello")
    ban_localhost(s, url)
    assert refused_at_accept(s)
    # Only POST, and not from a web page.
    assert s.admin("/bans/unban?addr=127.0.0.1").status == 405
    assert s.admin("/bans/unban?addr=127.0.0.1", method="POST", data=b"",
                   headers={"Origin": "http://evil.example"}).status == 403
    # Malformed requests change nothing.
    for bad in ["", "?addr=", "?addr=localhost", "?addr=127.0.0.1:80", "?addr=1.2.3",
                "?addr=127.0.0.1/24", "?addr=%zz"]:
        r = s.admin("/bans/unban" + bad, method="POST", data=b"")
        assert r.status == 400, (bad, r)
    assert refused_at_accept(s)
    # Another address is not banned: 404, and the IPv6 one is named by its /64.
    r = s.admin("/bans/unban?addr=127.0.0.2", method="POST", data=b"")
    assert r.status == 404 and "127.0.0.2" in r.text, r
    r = s.admin("/bans/unban?addr=2001:db8::1", method="POST", data=b"")
    assert r.status == 404 and "2001:db8::/64" in r.text, r

    r = s.admin("/bans/unban?addr=127.0.0.1", method="POST", data=b"")
    assert r.status == 200, r
    assert r.json() == {"unbanned": "127.0.0.1"}
    assert s.stat("bans.active") == 0
    assert s.admin("/bans").json()["bans"] == []
    assert status_of(s, url, s.key) == 200
    # Lifted once: a second unban finds nothing.
    assert s.admin("/bans/unban?addr=127.0.0.1", method="POST", data=b"").status == 404
    # The count starts again from zero: 4 wrong keys do not ban.
    ban_localhost(s, url, 4)
    assert status_of(s, url, s.key) == 200
    assert s.stat("bans.banned") == 1


def test_ban_expires(start_sluice, py_origin):
    s = start_sluice(extra_short="bans:\n  duration: 2s\n")
    url = py_origin.url("/hello")
    ban_localhost(s, url)
    started = time.monotonic()
    assert refused_at_accept(s)
    assert 1 <= s.admin("/bans").json()["bans"][0]["expires_in_seconds"] <= 2
    time.sleep(max(0.0, 2.3 - (time.monotonic() - started)))
    assert status_of(s, url, s.key) == 200
    assert s.admin("/bans").json()["bans"] == []
    assert s.stat("bans.active") == 0


def test_open_keep_alive_connection_of_a_banned_client_gets_403(start_sluice, py_origin):
    s = start_sluice()
    url = py_origin.url("/hello")
    with RawConnection(s.proxy_addr, timeout=5) as kept:
        kept.send(request_bytes(url, s.key, close=False))
        assert kept.read_response().status == 200
        ban_localhost(s, url)
        seen = len(py_origin.requests)
        # A right key on the connection opened before the ban: refused all the same.
        kept.send(request_bytes(url, s.key, close=False))
        r = kept.read_response()
        assert r.status == 403, r
        assert b"banned" in r.body, r
        assert r.header("Connection") == "close", r
        assert kept.is_closed_by_peer(), "the banned client's connection stayed open"
        assert len(py_origin.requests) == seen
    assert s.stat("auth.denied_banned") == 1


def test_missing_credentials_do_not_count(start_sluice, py_origin):
    s = start_sluice()
    url = py_origin.url("/hello")
    for _ in range(8):
        assert status_of(s, url, None) == 407
    assert s.stat("auth.denied_missing") == 8
    assert s.stat("bans.failures") == 0
    assert status_of(s, url, s.key) == 200
    # curl's usual dance (challenge first, then the key) counts nothing either.
    r = curl("-x", s.proxy_url, "-U", f"user:{s.key}", "--proxy-anyauth", "-o", "/dev/null",
             "-w", "%{http_code}", url)
    assert r.returncode == 0 and r.stdout == b"200", r.describe()
    assert s.stat("bans.failures") == 0
    assert s.admin("/bans").json()["tracked"] == 0


def test_failures_outside_the_window_do_not_ban(start_sluice, py_origin):
    s = start_sluice(extra_short="bans:\n  window: 1s\n  max_failures: 3\n")
    url = py_origin.url("/hello")
    for _ in range(3):
        ban_localhost(s, url, 2)
        time.sleep(1.1)
    assert s.stat("bans.failures") == 6
    assert s.stat("bans.banned") == 0
    assert status_of(s, url, s.key) == 200
    # Three within the second do.
    ban_localhost(s, url, 3)
    assert s.stat("bans.banned") == 1
    assert refused_at_accept(s)


def test_bans_disabled(start_sluice, py_origin):
    s = start_sluice(extra_short="bans:\n  disabled: true\n")
    url = py_origin.url("/hello")
    ban_localhost(s, url, 12)
    assert status_of(s, url, s.key) == 200
    assert s.admin("/bans").json() == {"enabled": False, "bans": [], "tracked": 0}
    r = run_cli("config", "expand", "-c", s.config_path)
    assert r.returncode == 0, r.stderr
    assert "sluice.ban" not in r.stdout and "disabled: true" in r.stdout, r.stdout


@pytest.mark.parametrize("extra, error", [
    ("bans:\n  ipv6_prefix: 8\n", "bans.ipv6_prefix"),
    ("bans:\n  ipv6_prefix: 129\n", "bans.ipv6_prefix"),
    ("bans:\n  max_failures: 1001\n", "bans.max_failures"),
    ("bans:\n  window: 25h\n", "bans.window"),
    ("bans:\n  duration: 10\n", "bans.duration"),
    ("bans:\n  max_entries: -1\n", "bans.max_entries"),
    ("bans:\n  max_entries: 10000001\n", "bans.max_entries"),
    ("bans:\n  nope: 1\n", "bans.nope"),
    ("bans:\n  ipv6_aggregate_prefix: 65\n", "bans.ipv6_aggregate_prefix: 65 is longer than"),
    ("bans:\n  ipv6_aggregate_prefix: 129\n", "bans.ipv6_aggregate_prefix"),
    ("bans:\n  ipv6_aggregate_prefix: -1\n", "bans.ipv6_aggregate_prefix"),
    ("bans:\n  ipv6_prefix: 56\n  ipv6_aggregate_prefix: 60\n", "bans.ipv6_aggregate_prefix"),
    ("bans:\n  ipv6_aggregate_threshold: 1001\n", "bans.ipv6_aggregate_threshold"),
    ("bans:\n  ipv6_aggregate_prefix: 63\n  ipv6_aggregate_threshold: 3\n",
     "bans.ipv6_aggregate_threshold"),
])
def test_bad_ban_settings_fail_startup(tmp_path, extra, error):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(short_config(18999, 18998, "k" * 24, 1, extra))
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert error in r.stderr, r.stderr


def test_aggregate_settings_are_accepted_and_shown(start_sluice):
    bans = start_sluice().admin("/config_dump").json()["bans"]
    assert (bans["ipv6_aggregate_prefix"], bans["ipv6_aggregate_threshold"]) == (48, 3), bans
    s = start_sluice(extra_short="bans:\n  ipv6_aggregate_prefix: 40\n"
                                 "  ipv6_aggregate_threshold: 5\n")
    bans = s.admin("/config_dump").json()["bans"]
    assert (bans["ipv6_aggregate_prefix"], bans["ipv6_aggregate_threshold"]) == (40, 5), bans
    # 0 turns aggregation off and stays 0 (it is not "unset").
    s = start_sluice(extra_short="bans:\n  ipv6_aggregate_prefix: 0\n")
    assert s.admin("/config_dump").json()["bans"]["ipv6_aggregate_prefix"] == 0
    r = run_cli("config", "expand", "-c", s.config_path)
    assert r.returncode == 0 and "ipv6_aggregate_prefix: 0" in r.stdout, (r.stdout, r.stderr)


def test_failure_counts_from_many_addresses_do_not_evict_a_ban(start_sluice, py_origin):
    s = start_sluice(extra_short="bans:\n  max_entries: 3\n")
    url = py_origin.url("/hello")
    ban_localhost(s, url)
    # 40 other loopback addresses, one wrong key each: they take turns in the two free slots.
    for i in range(2, 42):
        assert status_from(s, url, WRONG, f"127.0.0.{i}") == 407, i
    assert s.stat("bans.evicted_failures") == 38
    assert s.stat("bans.evicted_bans") == 0
    assert refused_at_accept(s)
    assert [b["address"] for b in s.admin("/bans").json()["bans"]] == ["127.0.0.1"]


def test_a_table_full_of_bans_keeps_them(start_sluice, py_origin):
    s = start_sluice(extra_short="bans:\n  max_entries: 2\n  max_failures: 2\n")
    url = py_origin.url("/hello")
    for source in ("127.0.0.2", "127.0.0.3"):
        for _ in range(2):
            assert status_from(s, url, WRONG, source) == 407, source
    assert s.stat("bans.banned") == 2
    # A third address guessing finds no room: its failures are not tracked, and neither ban
    # gives way to it.
    for _ in range(4):
        assert status_from(s, url, WRONG, "127.0.0.4") == 407
    assert s.stat("bans.untracked") == 4
    assert s.stat("bans.evicted") == 0
    assert refused_at_accept(s, source="127.0.0.2")
    assert refused_at_accept(s, source="127.0.0.3")
    assert status_from(s, url, s.key, "127.0.0.4") == 200
    assert sorted(b["address"] for b in s.admin("/bans").json()["bans"]) == \
        ["127.0.0.2", "127.0.0.3"]


def test_full_form_without_bans_section_uses_the_defaults(start_sluice, py_origin):
    def drop_bans(full):
        full.pop("bans", None)
    s = start_sluice(patch=drop_bans)
    ban_localhost(s, py_origin.url("/hello"))
    assert s.stat("bans.banned") == 1
    assert refused_at_accept(s)


# ---------------------------------------------------------------------------------------------
# auth hardening: sha256: keys, the keys file


def set_keys(keys=None, keys_file=None):
    """A full-form patch replacing the AuthConfig's keys."""
    def patch(full):
        from sluice_proc import find_typed_configs
        for a in find_typed_configs(full, ".AuthConfig"):
            if keys is not None:
                a["api_keys"] = keys
            if keys_file is not None:
                a["api_keys_file"] = str(keys_file)
    return patch


def test_sha256_keys_authenticate(start_sluice, py_origin):
    clear = secrets.token_urlsafe(24)
    digest = sha256_hex(clear)
    s = start_sluice(patch=set_keys([{"name": "hashed", "key": "sha256:" + digest.upper()}]))
    url = py_origin.url("/hello")
    assert status_of(s, url, clear) == 200
    assert s.stat("auth.key.hashed.allowed") == 1
    # The digest is not the key: presenting it fails (and counts).
    assert status_of(s, url, digest) == 407
    assert status_of(s, url, "sha256:" + digest) == 407
    assert s.stat("bans.failures") == 2
    # The config dump shows neither.
    dump = s.admin("/config_dump").text
    assert digest not in dump and digest.upper() not in dump and clear not in dump


def test_sha256_key_in_the_short_form(tmp_path, py_origin):
    from sluice_proc import Sluice
    clear = secrets.token_urlsafe(24)
    port, admin_port = free_port(), free_port()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(short_config(port, admin_port, "sha256:" + sha256_hex(clear)))
    s = Sluice(tmp_path, clear, port, admin_port, cfg).start()
    try:
        assert status_of(s, py_origin.url("/hello"), clear) == 200
        assert status_of(s, py_origin.url("/hello"), sha256_hex(clear)) == 407
        assert s.stat("auth.key.key1.allowed") == 1
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("key, error", [
    ("sha256:abc", "64 hex digits"),
    ("sha256:" + "g" * 64, "64 hex digits"),
    ("sha256:" + "a" * 65, "64 hex digits"),
])
def test_malformed_sha256_key_fails_startup(tmp_path, key, error):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(short_config(18999, 18998, key))
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "auth.api_keys[0].key" in r.stderr and error in r.stderr, r.stderr


def test_api_keys_file(tmp_path, start_sluice, py_origin):
    k_ci, k_bare, k_hashed = (secrets.token_urlsafe(24) for _ in range(3))
    keys = tmp_path / "keys.txt"
    keys.write_text(
        "# keys for the proxy\n"
        "\n"
        f"ci:{k_ci}\n"
        f"   {k_bare}   \r\n"
        f"hashed:sha256:{sha256_hex(k_hashed)}\n"
        "  # indented comment\n")
    s = start_sluice(patch=set_keys(keys_file=keys))
    url = py_origin.url("/hello")
    for key in (s.key, k_ci, k_bare, k_hashed):
        assert status_of(s, url, key) == 200, key
    # Inline key "test" is key 1; the unnamed file key is the 3rd overall.
    assert s.stat("auth.key.test.allowed") == 1
    assert s.stat("auth.key.ci.allowed") == 1
    assert s.stat("auth.key.key3.allowed") == 1
    assert s.stat("auth.key.hashed.allowed") == 1
    assert status_of(s, url, "ci") == 407
    assert f"3 keys from {keys}" in s.log()
    for k in (k_ci, k_bare, k_hashed):
        assert k not in s.log(), "a key reached the log"


def test_api_keys_file_in_the_short_form(tmp_path):
    key = secrets.token_urlsafe(24)
    keys = tmp_path / "keys.txt"
    keys.write_text(f"ops:{key}\n")
    cfg = tmp_path / "c.yaml"
    text = short_config(18999, 18998, "k" * 24).replace(
        "auth:\n", f"auth:\n  api_keys_file: \"{keys}\"\n")
    cfg.write_text(text)
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 0, r.stderr
    r = run_cli("config", "expand", "-c", cfg)
    assert f'api_keys_file: "{keys}"' in r.stdout, r.stdout
    keys.write_text("bad name:" + key + "\n")
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1 and f"{keys}:1:" in r.stderr, r.stderr


@pytest.mark.parametrize("content, line, error", [
    ("ok:good-key-1\n\nbad name:secret-1\n", 3, "must be a name"),
    ("# c\n:secret-2\n", 2, "empty name"),
    ("a:good-key-1\nb:\n", 2, "empty key"),
    ("sha256:1234\n", 1, "64 hex digits"),
    ("a:sha256:" + "z" * 64 + "\n", 1, "hex digits"),
    ("a:k1-aaaaaaaaaa\na:k2-bbbbbbbbbb\n", 2, "'a' is used twice"),
    ("a:k1-aaaaaaaaaa\nb:k1-aaaaaaaaaa\n", 2, "the same key as 'a'"),
    ("a:secret\x01-3\n", 1, "control characters"),
    ("a:" + "k" * 1025 + "\n", 1, "longer than 1024"),
    ("n" * 65 + ":secret-4\n", 1, "name longer than 64"),
])
def test_bad_keys_file_fails_startup_with_file_and_line(tmp_path, content, line, error):
    keys = tmp_path / "keys.txt"
    keys.write_text(content)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(short_config(18999, 18998, "k" * 24).replace(
        "auth:\n", f"auth:\n  api_keys_file: \"{keys}\"\n"))
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"{keys}:{line}:" in r.stderr and error in r.stderr, r.stderr
    assert "api_keys_file" in r.stderr, r.stderr
    for secret in ("secret-1", "secret-2", "secret-3", "secret-4", "k1-aaaaaaaaaa",
                   "k2-bbbbbbbbbb"):
        assert secret not in r.stderr, f"the error quotes a key: {r.stderr}"


@pytest.mark.parametrize("content, error", [
    (None, "cannot open"),
    ("", "no keys in the file"),
    ("# only comments\n\n", "no keys in the file"),
])
def test_missing_or_empty_keys_file_fails_startup(tmp_path, content, error):
    keys = tmp_path / "keys.txt"
    if content is not None:
        keys.write_text(content)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(short_config(18999, 18998, "k" * 24).replace(
        "auth:\n", f"auth:\n  api_keys_file: \"{keys}\"\n"))
    r = run_cli("check", "-c", cfg)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert str(keys) in r.stderr and error in r.stderr, r.stderr
