"""sluice service enable|disable|status: the systemd unit of a config.

The units go to a folder under the test's tmp_path (--unit-dir). systemd is installed here but is
not PID 1, so systemctl cannot reach a manager: the tests use --no-systemctl, and check that
without it the command says what failed and what to run by hand.
"""

import os
import subprocess

import pytest

from helpers import CLEAN_ENV, free_port
from sluice_proc import run_cli, short_config, sluice_binary


def output(r):
    return (r.stdout or "") + (r.stderr or "")


def unit_lines(path):
    return [l for l in path.read_text().splitlines() if l and not l.startswith("#")]


def config(tmp_path, extra=""):
    path = tmp_path / "etc" / "config.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(short_config(free_port(), free_port(), "k-0123456789abcdef", extra=extra))
    return path


def verify(unit, user=False, tmp_path=None):
    """systemd-analyze verify: exit 0 and not a word (it only warns about many mistakes)."""
    cmd = ["systemd-analyze"] + (["--user"] if user else []) + ["verify", str(unit)]
    env = dict(CLEAN_ENV)
    if user:
        # The user manager's runtime folder (no session here).
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = str(runtime)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and not r.stderr.strip(), f"systemd-analyze verify: {output(r)}"


def manager_reachable(user):
    r = subprocess.run(["systemctl"] + (["--user"] if user else []) + ["is-system-running"],
                       capture_output=True, text=True, env=CLEAN_ENV)
    # "offline" (or a connection error) when no manager answers.
    text = output(r)
    return r.stdout.strip() != "offline" and "Failed to connect" not in text and \
        "has not been booted" not in text


def test_enable_writes_a_system_unit_that_verifies(tmp_path):
    logs = tmp_path / "var-log"
    logs.mkdir()
    cfg = config(tmp_path, f"access_log:\n  mode: all\n  path: {logs}/access.log\n")
    units = tmp_path / "units"
    # A relative config path is written absolute.
    r = run_cli("service", "enable", "-c", "etc/config.yaml", "--unit-dir", units,
                "--no-systemctl", cwd=tmp_path)
    assert r.returncode == 0, output(r)
    unit = units / "sluice.service"
    assert f"wrote {unit}" in r.stdout, output(r)
    lines = unit_lines(unit)
    binary = os.path.realpath(sluice_binary())
    for want in ["Type=notify", f"ExecStart={binary} run -c {cfg.resolve()}",
                 "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "LimitNOFILE=65536",
                 "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes",
                 "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
                 "AmbientCapabilities=CAP_NET_BIND_SERVICE", f"ReadWritePaths={logs}",
                 "WantedBy=multi-user.target"]:
        assert want in lines, f"{want!r} not in the unit:\n{unit.read_text()}"
    assert any(l.startswith("ProtectHome=") for l in lines), unit.read_text()
    if not binary.startswith(("/root/", "/home/")):
        assert "ProtectHome=yes" in lines, unit.read_text()
    # PrivateTmp hides the pytest folder from the service: said, not silently broken.
    assert "PrivateTmp" in r.stderr and str(cfg.resolve()) in r.stderr, output(r)
    verify(unit)

    # Enabling again replaces the unit sluice wrote.
    r = run_cli("service", "enable", "-c", cfg, "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 0, output(r)


def test_user_unit_keeps_home_and_grants_no_capability(tmp_path):
    cfg = config(tmp_path)
    units = tmp_path / "user-units"
    r = run_cli("service", "enable", "--user", "-c", cfg, "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 0, output(r)
    unit = units / "sluice.service"
    lines = unit_lines(unit)
    assert "Type=notify" in lines and "WantedBy=default.target" in lines, unit.read_text()
    assert not any(l.startswith(("ProtectHome=", "AmbientCapabilities=",
                                 "CapabilityBoundingSet=", "ReadWritePaths=")) for l in lines), \
        unit.read_text()
    verify(unit, user=True, tmp_path=tmp_path)


def test_user_unit_goes_under_xdg_config_home_by_default(tmp_path):
    cfg = config(tmp_path)
    xdg = tmp_path / "xdg"
    r = run_cli("service", "enable", "--user", "-c", cfg, "--no-systemctl",
                env={"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path / "home")})
    assert r.returncode == 0, output(r)
    assert (xdg / "systemd/user/sluice.service").is_file(), output(r)
    r = run_cli("service", "enable", "--user", "-c", cfg, "--no-systemctl",
                env={"XDG_CONFIG_HOME": "", "HOME": str(tmp_path / "home")})
    assert r.returncode == 0, output(r)
    assert (tmp_path / "home/.config/systemd/user/sluice.service").is_file(), output(r)


def test_without_a_service_manager_the_unit_is_written_and_the_steps_are_listed(tmp_path):
    if manager_reachable(user=True):
        pytest.skip("a user service manager runs here: enabling would start sluice for real")
    cfg = config(tmp_path)
    units = tmp_path / "units"
    r = run_cli("service", "enable", "--user", "-c", cfg, "--unit-dir", units)
    assert r.returncode == 1, output(r)
    assert (units / "sluice.service").is_file(), output(r)
    text = output(r)
    assert "`systemctl --user daemon-reload` failed" in text, text
    assert "do by hand" in text, text
    assert f"systemctl --user enable --now {units / 'sluice.service'}" in text, text

    r = run_cli("service", "status", "--user", "--unit-dir", units)
    assert r.returncode != 0, output(r)
    assert f"unit: {units / 'sluice.service'} (present)" in r.stdout, output(r)
    assert "is a service manager running?" in r.stderr, output(r)


def test_enable_refuses_a_bad_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  lisen: 127.0.0.1:8080\nauth:\n  api_keys: [\"k\"]\n")
    units = tmp_path / "units"
    r = run_cli("service", "enable", "-c", bad, "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 1, output(r)
    assert "server.lisen" in r.stderr, output(r)
    assert not (units / "sluice.service").exists(), "a unit was written for a broken config"


def test_disable_removes_only_the_unit_sluice_wrote(tmp_path):
    cfg = config(tmp_path)
    units = tmp_path / "units"
    unit = units / "sluice.service"
    assert run_cli("service", "enable", "-c", cfg, "--unit-dir", units,
                   "--no-systemctl").returncode == 0
    r = run_cli("service", "status", "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 0 and "(present)" in r.stdout, output(r)
    r = run_cli("service", "disable", "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 0 and f"removed {unit}" in r.stdout, output(r)
    assert not unit.exists()
    r = run_cli("service", "status", "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 1 and "(absent)" in r.stdout, output(r)
    r = run_cli("service", "disable", "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 0 and "nothing to disable" in r.stdout, output(r)

    # A unit somebody else wrote is neither replaced nor removed.
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    r = run_cli("service", "enable", "-c", cfg, "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 1 and "not written by sluice" in r.stderr, output(r)
    r = run_cli("service", "disable", "--unit-dir", units, "--no-systemctl")
    assert r.returncode == 1 and "not written by sluice" in r.stderr, output(r)
    assert unit.read_text() == "[Service]\nExecStart=/bin/true\n"


def test_service_needs_an_action_and_its_options_need_service(tmp_path):
    r = run_cli("service")
    assert r.returncode == 1 and "enable, disable or status" in r.stderr, output(r)
    r = run_cli("service", "restart")
    assert r.returncode == 1 and "enable, disable or status" in r.stderr, output(r)
    r = run_cli("check", "-c", config(tmp_path), "--no-systemctl")
    assert r.returncode == 1 and "go with `sluice service`" in r.stderr, output(r)
