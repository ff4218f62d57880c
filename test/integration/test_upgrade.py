"""Binary upgrade: the running process starts the binary at its path, hands it every listen
socket over a Unix socket (SCM_RIGHTS), and drains once the new process serves. A load running
through it has no failed request."""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from helpers import REPO_ROOT, free_port
from sluice_proc import SLUICE_BIN, Sluice, run_cli, short_config
from test_reload import proxy_get
from test_socks5 import CONNECT, Socks5Client

LOAD_BIN = REPO_ROOT / "bazel-bin/tools/load/sluice-load"


@pytest.fixture
def upgradable(tmp_path, request):
    """A sluice started from a copy of the binary, so the test can put a new one at its path."""
    started = []

    def start(extra=""):
        binary = tmp_path / "bin" / "sluice"
        binary.parent.mkdir(exist_ok=True)
        shutil.copy(SLUICE_BIN, binary)
        port, admin_port = free_port(), free_port()
        workdir = tmp_path / "run"
        workdir.mkdir()
        cfg = workdir / "config.yaml"
        s = Sluice(workdir, "k-" + os.urandom(9).hex(), port, admin_port, cfg)
        cfg.write_text(short_config(port, admin_port, s.key, 2, extra))
        import sluice_proc
        original = sluice_proc.SLUICE_BIN
        sluice_proc.SLUICE_BIN = binary
        try:
            s.start()
        finally:
            sluice_proc.SLUICE_BIN = original
        s.binary = binary
        started.append(s)
        return s

    yield start
    for s in started:
        # The new process is not the harness's child: stop it through its pid.
        try:
            pid = s.admin("/server_info", timeout=2).json()["pid"]
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, KeyError):
            pass
        s.stop()


def server_info(s):
    return s.admin("/server_info").json()


def wait_for_new_pid(s, old, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = server_info(s)["pid"]
            if pid != old:
                return pid
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail(f"pid {old} still answers after {timeout}s\n{s.log()[-4000:]}")


def test_upgrade_under_load_fails_no_request(upgradable, sluice_origin):
    socks_port = free_port()
    s = upgradable(extra=f"socks5:\n  listen: 127.0.0.1:{socks_port}\n")
    old_pid = s.proc.pid
    assert server_info(s)["pid"] == old_pid
    # A tunnel opened before the upgrade stays with the old process until it ends.
    held = Socks5Client(("127.0.0.1", socks_port))
    held.login(s.key)
    assert held.request(CONNECT, "127.0.0.1", sluice_origin.port)[0] == 0
    dst = sluice_origin.url + "/bytes/1024"
    loads = [
        ["--proxy", f"http://u:{s.key}@127.0.0.1:{s.port}", "--dst", dst],
        ["--proxy", f"http://u:{s.key}@127.0.0.1:{s.port}", "--dst", dst, "--new-conn"],
        ["--proxy", f"socks5://u:{s.key}@127.0.0.1:{socks_port}", "--dst", dst, "--new-conn"],
    ]
    procs = [subprocess.Popen([str(LOAD_BIN), *a, "-c", "8", "-d", "5s", "--json", "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for a in loads]
    time.sleep(1.0)
    # The binary at the path is the one that starts: put a fresh copy there (moved over the
    # running one, as a package upgrade does).
    fresh = s.binary.with_name("sluice.new")
    shutil.copy(SLUICE_BIN, fresh)
    os.rename(fresh, s.binary)
    cli = run_cli("upgrade", "-c", s.config_path, timeout=60)
    assert cli.returncode == 0, (cli.stdout, cli.stderr, s.log()[-3000:])
    assert "upgraded: pid" in cli.stdout, cli.stdout
    new_pid = wait_for_new_pid(s, old_pid)
    for a, p in zip(loads, procs):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        r = json.loads(out)
        assert r["requests"] > 100, (a, r)
        assert r["failed"] == 0 and not r["errors"], (a[1].split(":")[0], a[-1], r["failed"], r["errors"], r.get("status"))
    # The old process drained and exited; the tunnel it held ended with it at the latest.
    held.close()
    assert s.wait(20) == 0, s.log()[-3000:]
    info = server_info(s)
    assert info["pid"] == new_pid and info["state"] == "live"
    assert f"127.0.0.1:{s.port}" in json.dumps(s.admin("/listeners").json())
    # The new process serves every port.
    assert proxy_get(s, s.key, sluice_origin.url + "/bytes/10")[0] == 200
    with Socks5Client(("127.0.0.1", socks_port)) as c:
        c.login(s.key)
        assert c.request(CONNECT, "127.0.0.1", sluice_origin.port)[0] == 0
    assert "upgrade: pid" in s.log() and "serves on the sockets" in s.log()


def test_a_new_binary_that_cannot_start_leaves_the_old_serving(upgradable, sluice_origin):
    s = upgradable()
    old_pid = s.proc.pid
    # What lies at the path now is not sluice.
    s.binary.unlink()
    s.binary.write_text("#!/bin/sh\nexit 3\n")
    s.binary.chmod(0o755)
    r = s.admin("/upgrade", method="POST", data=b"")
    # Refused at once (it exited before taking the sockets) or after it started.
    assert r.status in (202, 409), r.text
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and s.stat("upgrade.failed") == 0:
        time.sleep(0.05)
    assert s.stat("upgrade.failed") == 1, s.log()[-2000:]
    assert "upgrade failed, this process serves on" in s.log()
    assert server_info(s)["pid"] == old_pid and server_info(s)["state"] == "live"
    assert proxy_get(s, s.key, sluice_origin.url + "/bytes/10")[0] == 200
    # And the CLI says so.
    cli = run_cli("upgrade", "-c", s.config_path, timeout=60)
    assert cli.returncode == 1, (cli.stdout, cli.stderr)
    assert "did not take over" in cli.stderr or "refused the upgrade" in cli.stderr, cli.stderr
    assert s.stat("upgrade.failed") == 2


def test_sigusr2_upgrades_too(upgradable, sluice_origin):
    s = upgradable()
    old_pid = s.proc.pid
    s.signal(signal.SIGUSR2)
    new_pid = wait_for_new_pid(s, old_pid)
    assert s.wait(20) == 0
    assert proxy_get(s, s.key, sluice_origin.url + "/bytes/10")[0] == 200
    assert server_info(s)["pid"] == new_pid
