"""Fixtures: loopback origins (nginx, a Python server) and the real sluice binary.

The binary is $SLUICE_BIN, or bazel-bin/source/exe/sluice under the repository root
(`bazel build //:sluice`). Every test that starts sluice gets a fresh process on fresh ports with
a random API key, one worker (so pool and stats numbers are exact), and on failure its log is
attached to the report.
"""

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from helpers import CLEAN_ENV, REPO_ROOT, free_port
from origins import NginxOrigin, PythonOrigin, SluiceOrigin
from sluice_proc import STOP_TIMEOUT, Sluice, short_config, write_full_form


# ---------------------------------------------------------------------------------------------
# report hook: attach each sluice log to a failing test's report


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for s in getattr(item, "_sluice_processes", []):
            rep.sections.append((f"sluice log ({s.log_path})", s.log()[-20000:]))


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(REPO_ROOT / "tools/gen-test-certs.sh"), str(d)], check=True,
                   capture_output=True, env=CLEAN_ENV)
    return {"dir": d, "ca": d / "ca.pem", "cert": d / "server.pem", "key": d / "server.key"}


@pytest.fixture(scope="session")
def nginx(tmp_path_factory, certs):
    origin = NginxOrigin(tmp_path_factory.mktemp("nginx"), certs["cert"], certs["key"]).start()
    yield origin
    origin.stop()


SLUICE_ORIGIN_BIN = Path(os.environ.get("SLUICE_ORIGIN_BIN") or
                         REPO_ROOT / "bazel-bin" / "tools" / "origin" / "sluice-origin")


@pytest.fixture(scope="module")
def sluice_origin():
    """A sluice-origin process (one thread): /bytes/N, /stats, a sink, a source, a UDP echo."""
    if not SLUICE_ORIGIN_BIN.is_file():
        pytest.fail(f"{SLUICE_ORIGIN_BIN} not found: bazel build //:sluice-origin", pytrace=False)
    o = SluiceOrigin(SLUICE_ORIGIN_BIN, threads=1)
    yield o
    o.stop()


@pytest.fixture(scope="session")
def py_origin():
    origin = PythonOrigin().start()
    yield origin
    origin.stop()


@pytest.fixture
def start_sluice(request, tmp_path):
    """Factory: start_sluice(workers=1, extra_short="", router=None, drain_timeout=None, patch=None,
    env=None).

    `router` (a dict of RouterConfig fields), `drain_timeout` or `patch` (a function editing the
    full form as a dict) switch to the full form: the
    short config is expanded with `sluice config expand` and patched, so the test exercises the
    same schema the binary prints. `env` adds to the process's environment.
    """
    started = []
    request.node._sluice_processes = started

    def start(workers=1, extra_short="", router=None, drain_timeout=None, patch=None, env=None):
        n = len(started)
        workdir = tmp_path / f"sluice{n}"
        workdir.mkdir()
        key = secrets.token_urlsafe(24)
        port, admin_port = free_port(), free_port()
        cfg = workdir / "config.yaml"
        cfg.write_text(short_config(port, admin_port, key, workers, extra_short))
        if router is not None or drain_timeout is not None or patch is not None:
            cfg = write_full_form(cfg, workdir / "full.yaml", key, router, drain_timeout, patch)
        s = Sluice(workdir, key, port, admin_port, cfg)
        started.append(s)
        return s.start(env)

    yield start

    problems = []
    for s in started:
        if s.exit_code is not None or s.proc is None:
            continue  # the test stopped it and checked the exit itself
        code = s.stop()
        if code != 0:
            problems.append(f"sluice ({s.config_path}) exit code after SIGTERM: "
                            f"{'hung > %ss (killed)' % STOP_TIMEOUT if code is None else code}\n"
                            f"log tail:\n{s.log()[-5000:]}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def sluice(start_sluice):
    """A running sluice with the default test config (short form, one worker)."""
    return start_sluice()
