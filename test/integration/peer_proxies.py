"""Other proxies from Debian, run on loopback for the tests: Squid (HTTP, CONNECT, an https_port,
optional Basic auth) and Dante (SOCKS5 with RFC 1929 username/password, or without).

Used as parents of sluice (test_parents.py) and as peers of the load generator
(test/tools/load/test_load.py).
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

SQUID = Path("/usr/sbin/squid")
DANTED = Path("/usr/sbin/danted")

DANTE_USER, DANTE_PASSWORD = "sluiceload", "s3cret-Pw"

_procs = []


def kill_all():
    """Kills every peer still running (an atexit hook of the caller)."""
    for p in _procs:
        if p.poll() is None:
            p.kill()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc, timeout=10):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_port(port, proc, what, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode} before listening on {port}",
                        pytrace=False)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"{what} did not listen on {port} within {timeout}s", pytrace=False)


class Squid:
    """squid -N on 127.0.0.1: no cache, no access log, every port may be CONNECTed to (no
    SSL_ports rule). With `certs` (a directory holding server-chain.pem and server.key) an
    https_port too; with `user` and `password`, Basic authentication is required."""

    def __init__(self, certs=None, user=None, password=None):
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-squid-"))
        os.chmod(self.dir, 0o777)
        self.port = _free_port()
        self.tls_port = _free_port() if certs else None
        lines = [f"http_port 127.0.0.1:{self.port}"]
        if certs:
            lines.append(f"https_port 127.0.0.1:{self.tls_port} tls-cert={certs}/server-chain.pem "
                         f"tls-key={certs}/server.key")
        lines += [f"pid_filename {self.dir}/squid.pid", "cache deny all", "cache_mem 8 MB",
                  f"access_log stdio:{self.dir}/access.log", "cache_store_log none",
                  f"cache_log {self.dir}/cache.log", f"coredump_dir {self.dir}",
                  "visible_hostname sluice-test", "shutdown_lifetime 0 seconds",
                  "pinger_enable off", "http_upgrade_request_protocols websocket allow all"]
        if user:
            passwd = self.dir / "passwd"
            hashed = subprocess.run(["openssl", "passwd", "-apr1", password], capture_output=True,
                                    text=True, check=True).stdout.strip()
            passwd.write_text(f"{user}:{hashed}\n")
            os.chmod(passwd, 0o644)
            lines += [f"auth_param basic program /usr/lib/squid/basic_ncsa_auth {passwd}",
                      "acl authed proxy_auth REQUIRED", "http_access allow authed",
                      "http_access deny all"]
        else:
            lines.append("http_access allow all")
        conf = self.dir / "squid.conf"
        conf.write_text("\n".join(lines) + "\n")
        self.proc = subprocess.Popen([str(SQUID), "-N", "-f", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _procs.append(self.proc)
        _wait_port(self.port, self.proc, "squid")
        if certs:
            _wait_port(self.tls_port, self.proc, "squid https_port")

    def access_log(self):
        """Squid's access log so far (it writes each line when a transaction ends)."""
        path = self.dir / "access.log"
        return path.read_text() if path.exists() else ""

    def stop(self):
        _stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def can_unshare():
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                       capture_output=True)
    return os.geteuid() == 0 and r.returncode == 0


class Dante:
    """danted with `socksmethod: username` (or none), CONNECT (and UDP ASSOCIATE) from loopback.

    Dante's username method checks the system's passwd/shadow. Rather than adding a user to the
    machine, danted runs in a private mount namespace (unshare -m) where copies of /etc/passwd and
    /etc/shadow with one extra test user are bind-mounted over the real ones: nothing outside the
    namespace changes. Needs root (CAP_SYS_ADMIN).
    """

    def __init__(self, method):
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-dante-"))
        self.port = _free_port()
        conf = self.dir / "danted.conf"
        conf.write_text(
            f"logoutput: {self.dir}/danted.log\n"
            f"internal: 127.0.0.1 port = {self.port}\n"
            "external: 127.0.0.1\n"
            f"socksmethod: {method}\n"
            "clientmethod: none\n"
            "user.privileged: root\nuser.unprivileged: nobody\n"
            "client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }\n"
            "socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 command: connect udpassociate "
            "\nlog: connect }\n"
            "socks pass { from: 0.0.0.0/0 to: 127.0.0.0/8 command: udpreply }\n")
        cmd = [str(DANTED), "-f", str(conf), "-p", str(self.dir / "danted.pid")]
        if method == "username":
            passwd = self.dir / "passwd"
            shadow = self.dir / "shadow"
            passwd.write_text(Path("/etc/passwd").read_text() +
                              f"{DANTE_USER}:x:64999:64999::/nonexistent:/usr/sbin/nologin\n")
            hashed = subprocess.run(["openssl", "passwd", "-6", DANTE_PASSWORD],
                                    capture_output=True, text=True, check=True).stdout.strip()
            shadow.write_text(Path("/etc/shadow").read_text() +
                              f"{DANTE_USER}:{hashed}:19000:0:99999:7:::\n")
            os.chmod(shadow, 0o600)
            script = (f"mount --bind {passwd} /etc/passwd && "
                      f"mount --bind {shadow} /etc/shadow && exec \"$@\"")
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _procs.append(self.proc)
        _wait_port(self.port, self.proc, f"danted ({method})")

    def log(self):
        path = self.dir / "danted.log"
        return path.read_text() if path.exists() else ""

    def stop(self):
        _stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)
