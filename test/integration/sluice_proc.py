"""Running the real sluice binary: the CLI, a live process and its admin endpoint."""

import atexit
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers import CLEAN_ENV, REPO_ROOT, parse_stats_text

SLUICE_BIN = Path(os.environ.get("SLUICE_BIN") or REPO_ROOT / "bazel-bin/source/exe/sluice")
READY_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0

# Never the environment's proxy for the admin calls.
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))

_live_processes = []


@atexit.register
def _kill_leftovers():
    for p in _live_processes:
        if p.poll() is None:
            p.kill()


def sluice_binary():
    if not SLUICE_BIN.is_file() or not os.access(SLUICE_BIN, os.X_OK):
        pytest.fail(f"sluice binary not found at {SLUICE_BIN}: run `bazel build //:sluice` "
                    f"or set SLUICE_BIN", pytrace=False)
    return str(SLUICE_BIN)


def run_cli(*args, env=None, timeout=30, cwd=None):
    """Runs `sluice ARGS...` to completion (for check/init/config/--version)."""
    e = dict(CLEAN_ENV)
    if env:
        e.update(env)
    return subprocess.run([sluice_binary(), *[str(a) for a in args]], capture_output=True,
                          text=True, env=e, timeout=timeout, cwd=cwd)


def short_config(port, admin_port, key, workers=1, extra=""):
    # allow_private is written out so these loopback-origin tests keep working once the
    # destination guard enforces it.
    return (
        f"server:\n"
        f"  listen: 127.0.0.1:{port}\n"
        f"  workers: {workers}\n"
        f"auth:\n"
        f"  api_keys: [\"{key}\"]\n"
        f"admin:\n"
        f"  listen: 127.0.0.1:{admin_port}\n"
        f"destinations:\n"
        f"  allow_private: true\n"
        f"  allowed_ports: [80, 443, \"1024-65535\"]\n"
        f"{extra}"
    )


def find_typed_configs(node, type_suffix):
    """Every `typed_config` dict in a full-form tree whose @type ends with `type_suffix`."""
    found = []
    if isinstance(node, dict):
        if str(node.get("@type", "")).endswith(type_suffix):
            found.append(node)
        for v in node.values():
            found += find_typed_configs(v, type_suffix)
    elif isinstance(node, list):
        for v in node:
            found += find_typed_configs(v, type_suffix)
    return found


class AdminResponse:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self):
        return self.body.decode(errors="replace")

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<admin {self.status} {self.body[:300]!r}>"


class Sluice:
    """A running sluice process."""

    def __init__(self, workdir, key, port, admin_port, config_path):
        self.workdir = Path(workdir)
        self.key = key
        self.port = port
        self.admin_port = admin_port
        self.config_path = Path(config_path)
        self.proxy_addr = ("127.0.0.1", port)
        self.proxy_url = f"http://127.0.0.1:{port}"
        self.admin_url = f"http://127.0.0.1:{admin_port}"
        self.log_path = self.workdir / "sluice.log"
        self.proc = None
        self.exit_code = None

    # -- lifecycle

    def start(self, env=None):
        """Starts it (with `env` added to the environment) and waits for /ready."""
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sluice_binary(), "run", "-c", str(self.config_path)],
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env={**CLEAN_ENV, **(env or {})})
        _live_processes.append(self.proc)
        deadline = time.monotonic() + READY_TIMEOUT
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.exit_code = self.proc.returncode
                pytest.fail(f"sluice exited with {self.proc.returncode} before /ready answered\n"
                            f"config:\n{self.config_path.read_text()}\nlog:\n{self.log()}",
                            pytrace=False)
            try:
                r = self.admin("/ready", timeout=1)
                if r.status == 200:
                    return self
                last = r
            except OSError as e:
                last = e
            time.sleep(0.05)
        self.proc.kill()
        self.exit_code = self.proc.wait(5)
        pytest.fail(f"sluice /ready did not answer 200 within {READY_TIMEOUT}s (last: {last})\n"
                    f"log:\n{self.log()}", pytrace=False)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT):
        """Waits for exit; returns the exit code, or None if still running after `timeout`."""
        try:
            self.exit_code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.exit_code

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM and wait. Returns the exit code (kills and returns None on a hang)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.wait(timeout)
        if code is None:
            self.proc.kill()
            self.proc.wait(5)
        return code

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"

    # -- admin

    def admin(self, path, method="GET", data=None, headers=None, timeout=5):
        req = urllib.request.Request(self.admin_url + path, data=data, method=method,
                                     headers=headers or {})
        try:
            with _direct.open(req, timeout=timeout) as r:
                return AdminResponse(r.status, dict(r.headers.items()), r.read())
        except urllib.error.HTTPError as e:
            return AdminResponse(e.code, dict(e.headers.items()), e.read())

    def stats(self):
        r = self.admin("/stats")
        assert r.status == 200, f"GET /stats answered {r.status}: {r.text[:500]}"
        return parse_stats_text(r.text)

    def stat(self, name):
        stats = self.stats()
        if name not in stats:
            near = sorted(k for k in stats if k.split(".")[0] == name.split(".")[0])
            raise AssertionError(f"stat {name!r} is not in /stats; names with that prefix: "
                                 f"{near or sorted(stats)[:60]}")
        return stats[name]

    def wait_stat(self, name, predicate, timeout=5.0):
        """Polls a stat until predicate(value) holds (counters merge from workers on read)."""
        deadline = time.monotonic() + timeout
        value = self.stat(name)
        while not predicate(value) and time.monotonic() < deadline:
            time.sleep(0.05)
            value = self.stat(name)
        return value



def write_full_form(short_path, full_path, key, router=None, drain_timeout=None, patch=None):
    """Expands a short config with `sluice config expand` and patches the full form.

    `patch`, if given, is called with the full form (a dict) to edit it in place.
    """
    import yaml

    r = run_cli("config", "expand", "-c", short_path)
    assert r.returncode == 0, f"`sluice config expand` failed ({r.returncode}): {r.stderr}"
    full = yaml.safe_load(r.stdout)
    assert isinstance(full, dict) and "listeners" in full, \
        f"`sluice config expand` did not print a full form with listeners:\n{r.stdout}"
    # The printout may redact keys; put the real one back.
    auths = find_typed_configs(full, ".AuthConfig")
    assert auths, f"no AuthConfig in the expanded config:\n{r.stdout}"
    for a in auths:
        a["api_keys"] = [{"name": "test", "key": key}]
    if router:
        routers = find_typed_configs(full, ".RouterConfig")
        assert routers, f"no RouterConfig in the expanded config:\n{r.stdout}"
        for rc in routers:
            rc.update(router)
    if drain_timeout is not None:
        full["drain_timeout"] = drain_timeout
    if patch is not None:
        patch(full)
    Path(full_path).write_text(yaml.safe_dump(full, sort_keys=False))
    return full_path
