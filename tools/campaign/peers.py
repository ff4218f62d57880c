"""The proxies the campaign runs, each with the tuning its own documentation recommends.

Configuration files come from tools/bench/lib.sh (the functions the benchmark scripts use), so
that a peer runs the same way in every benchmark. A peer here says which proxy ports it has
(kinds: http, https, h2, socks5), what it cannot do and why (the report's "—"), how to start it
on the proxy's cores, and what its tuning is and where that comes from.

To add a peer: subclass Peer, fill in the class attributes and start(), and append it to
all_peers(); docs/campaign.md walks through it.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from measure import proc_tree

REPO = Path(__file__).resolve().parents[2]

# What a group of rows needs from a peer: the kind of proxy port.
KIND_OF_GROUP = {"plain": "http", "ws": "http", "workers": "http", "https": "https",
                 "https-full": "https", "wss": "https", "h2": "h2", "socks5": "socks5"}
KIND_NAMES = {"http": "HTTP proxy port", "https": "HTTPS proxy port (TLS)",
              "h2": "HTTP/2 to clients", "socks5": "SOCKS5"}


def libsh(function, *args, env=None, cwd=REPO):
    """Runs one function of tools/bench/lib.sh; returns its standard output."""
    e = dict(os.environ)
    e.update(env or {})
    out = subprocess.run(["bash", "-c", '. tools/bench/lib.sh && "$@"', "sh", function,
                          *[str(a) for a in args]], cwd=cwd, env=e, check=True,
                         capture_output=True, text=True)
    return out.stdout


def first_line(cmd):
    """The first line a command prints (on stdout, or else on stderr)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (p.stdout or p.stderr).strip()
    return text.splitlines()[0] if text else ""


def dpkg_version(package):
    return first_line(["dpkg-query", "-W", "-f=${Version}", package])


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Instance:
    """One running proxy: its processes, its ports and the proxy URLs of each kind."""

    def __init__(self, peer, proc, directory, ports, urls, command, configs):
        self.peer = peer
        self.proc = proc
        self.dir = directory
        self.ports = ports
        self.urls = urls
        self.command = command
        self.configs = configs

    def pids(self):
        return proc_tree(self.proc.pid) if self.proc.poll() is None else []

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.peer.name} exited with {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            if all(port_open(p) for p in self.ports):
                return self
            time.sleep(0.1)
        raise RuntimeError(f"{self.peer.name} did not open {self.ports} in {timeout} s: "
                           f"{self.log_tail()}")

    def log_tail(self):
        try:
            return (self.dir / "stderr").read_text(errors="replace")[-800:]
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                for pid in proc_tree(self.proc.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.proc.wait(5)
        self.peer.after_stop(self)


class Peer:
    id = ""
    name = ""
    floor = False          # a reference point (nginx), not a forward proxy: left out of ratios
    auth = "Basic auth"    # how clients authenticate, for the report
    kinds = ()             # proxy ports it has
    missing = {}           # kind -> why it has none
    tuning = []            # what is set and why, with the source
    closes_keepalive = ""  # set when it closes every client connection after one response
    binary = ""            # the command it needs on PATH
    package = ""           # its Debian package
    version_cmd = ()       # prints its version on the first line, after version_prefix
    version_prefix = ""

    def __init__(self, ctx):
        self.ctx = ctx
        self.unavailable = self.probe()

    # -- what it is ---------------------------------------------------------------------------
    def probe(self):
        """None when it can run here, else why not."""
        if self.binary and not shutil.which(self.binary):
            return f"{self.binary} is not installed (apt-get install {self.package})"
        return None

    def version(self):
        if self.version_cmd:
            return first_line(list(self.version_cmd)).replace(self.version_prefix, "")
        return dpkg_version(self.package) if self.package else ""

    def kind_na(self, kind):
        if kind in self.kinds:
            return None
        return self.missing.get(kind, f"no {KIND_NAMES[kind]}")

    def test_na(self, test):
        """Why this peer cannot run the test (besides a missing kind), or None."""
        return None

    # -- running it ---------------------------------------------------------------------------
    def start(self, base_port, workers=1, cpus=(0,)):
        raise NotImplementedError

    def after_stop(self, instance):
        pass

    def _launch(self, name, base_port, cmd, ports, urls, configs, cpus, env=None, workers=1):
        directory = self.ctx.work / f"{name}-{base_port}"
        directory.mkdir(parents=True, exist_ok=True)
        full = ["taskset", "-c", ",".join(map(str, cpus))] + [str(c) for c in cmd]
        e = dict(os.environ)
        e.update(env or {})
        proc = subprocess.Popen(full, cwd=REPO, env=e, stdout=subprocess.DEVNULL,
                                stderr=open(directory / "stderr", "wb"),
                                start_new_session=True)
        inst = Instance(self, proc, directory, ports, urls, full, configs)
        self.ctx.started.append(inst)
        return inst.wait_ready()

    def _dir(self, name, base_port):
        d = self.ctx.work / f"{name}-{base_port}"
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
        return d

    def _cred(self, user):
        return f"{user}:{self.ctx.key}@"


class Sluice(Peer):
    id = "sluice"
    name = "sluice"
    auth = "API key (Basic auth on HTTP, username/password on SOCKS5)"
    kinds = ("http", "https", "h2", "socks5")
    tuning = [
        "One worker per core given (`server.workers`), each pinned by taskset with the rest of "
        "the process; the configuration of tools/bench/lib.sh (`bench_sluice_config`).",
        "Authentication on: one API key. The destination guard on, with private destinations "
        "allowed (`destinations.allow_private`) because the origin is on loopback.",
        "Per-client connection and upstream limits raised (`limits`): every connection of the "
        "campaign comes from one address.",
        "Everything else at its defaults: splice for tunnels, session tickets on the TLS port, "
        "access log off.",
    ]

    def probe(self):
        if not os.access(self.ctx.bin["sluice"], os.X_OK):
            return f"no binary at {self.ctx.bin['sluice']} (bazel build //:sluice)"
        return None

    def version(self):
        return first_line([str(self.ctx.bin["sluice"]), "--version"]).replace("sluice ", "")

    def start(self, base_port, workers=1, cpus=(0,)):
        d = self._dir("sluice", base_port)
        certs = d / "certs"
        if not certs.exists():
            certs.symlink_to(self.ctx.certs)
        libsh("bench_sluice_config", base_port, workers,
              env={"WORK": str(d), "KEY": self.ctx.key, "SLUICE_BIN": str(self.ctx.bin["sluice"])})
        p = base_port
        cred = self._cred("u")
        urls = {"http": f"http://{cred}127.0.0.1:{p + 3}",
                "https": f"https://{cred}127.0.0.1:{p + 4}",
                "h2": f"h2://{cred}127.0.0.1:{p + 4}",
                "socks5": f"socks5://{cred}127.0.0.1:{p + 5}"}
        return self._launch("sluice", base_port,
                            [self.ctx.bin["sluice"], "run", "-c", d / "sluice.yaml"],
                            [p + 3, p + 4, p + 5], urls, [d / "sluice.yaml"], cpus)


class Squid(Peer):
    id = "squid"
    name = "Squid"
    binary = package = "squid"
    version_cmd, version_prefix = ("squid", "-v"), "Squid Cache: Version "
    kinds = ("http", "https")
    missing = {"h2": "Squid 5.7 speaks HTTP/1.1 to its clients",
               "socks5": "not a SOCKS server"}
    tuning = [
        "`cache deny all`, `cache_mem 0 MB`, `access_log none`: a pure relay, as Squid's "
        "documentation advises for a proxy that must not cache.",
        "`workers N` with `cpu_affinity_map` pinning each worker to its own core "
        "(SMP scaling guide, wiki Features/SmpScale); N = 1 except in the workers row.",
        "`max_filedescriptors` at the hard limit (the FAQ on running out of descriptors).",
        "Basic auth through `basic_ncsa_auth` with `credentialsttl 1 hour`, so the helper "
        "is asked once per credential, not per request.",
        "`http_upgrade_request_protocols websocket allow all` for WebSocket upgrades.",
        "Run with `--foreground` (the master and its SMP kids), its CPU counted over all of "
        "them and the auth helper.",
    ]

    def start(self, base_port, workers=1, cpus=(0,)):
        d = self._dir("squid", base_port)
        c = self.ctx.certs
        libsh("bench_squid_config", d, base_port, self.ctx.key, workers, base_port + 1,
              c / "server-chain.pem", c / "server.key")
        cred = self._cred("bench")
        urls = {"http": f"http://{cred}127.0.0.1:{base_port}",
                "https": f"https://{cred}127.0.0.1:{base_port + 1}"}
        return self._launch("squid", base_port, ["squid", "--foreground", "-f", d / "squid.conf"],
                            [base_port, base_port + 1], urls, [d / "squid.conf"], cpus)


class Tinyproxy(Peer):
    id = "tinyproxy"
    name = "Tinyproxy"
    binary = package = "tinyproxy"
    version_cmd, version_prefix = ("tinyproxy", "-v"), "tinyproxy "
    kinds = ("http",)
    missing = {"https": "no TLS listener", "h2": "no HTTP/2",
               "socks5": "not a SOCKS server (SOCKS only toward an upstream)"}
    closes_keepalive = ("Tinyproxy closes the client connection after every response (without "
                        "Connection: close), so its keep-alive rows are measured with a new "
                        "connection per request, which is what its clients get.")
    tuning = [
        "`MaxClients` above the connections of the test (its manual: one thread per client, "
        "MaxClients is the most it serves at once).",
        "`LogLevel Error`, no log file; `BasicAuth bench KEY`; `Allow 127.0.0.1`; no "
        "`ConnectPort` line, so CONNECT reaches the origin's port.",
        "In the workers row it runs on N cores as it is (threads, no worker setting).",
    ]

    def start(self, base_port, workers=1, cpus=(0,)):
        d = self._dir("tinyproxy", base_port)
        libsh("bench_tinyproxy_config", d, base_port, self.ctx.key, self.ctx.max_conns)
        urls = {"http": f"http://{self._cred('bench')}127.0.0.1:{base_port}"}
        return self._launch("tinyproxy", base_port,
                            ["tinyproxy", "-d", "-c", d / "tinyproxy.conf"], [base_port], urls,
                            [d / "tinyproxy.conf"], cpus)


class Nginx(Peer):
    id = "nginx"
    name = "nginx (reverse proxy)"
    floor = True
    binary, package = "nginx", "nginx-light"
    version_cmd, version_prefix = ("nginx", "-v"), "nginx version: nginx/"
    auth = "none (nginx has no proxy authentication)"
    kinds = ("http", "https", "h2")
    missing = {"socks5": "no SOCKS5"}
    tuning = [
        "The floor, not a competitor: a reverse proxy in front of the same origin, with no "
        "authentication, no forward-proxy parsing and no destination checks. It takes the "
        "absolute-form requests of the load generator as any request.",
        "`worker_processes N` with `worker_cpu_affinity auto` (one worker per core, its tuning "
        "guide), `worker_rlimit_nofile` at the hard limit, `access_log off`.",
        "Upstream keep-alive: `keepalive 256`, `proxy_http_version 1.1`, `Connection \"\"` "
        "(the documentation of ngx_http_upstream_module).",
        "TLS: `ssl_protocols TLSv1.2 TLSv1.3` (1.22's default leaves 1.3 out; sluice negotiates "
        "1.3), `ssl_session_cache shared:SSL:10m` and session tickets; HTTP/2 on the TLS port "
        "(`listen ... ssl http2`); WebSocket upgrades passed on /ws.",
    ]

    def test_na(self, test):
        if test.kind in ("bulk", "memory"):
            return "a reverse proxy: no CONNECT tunnels"
        return None

    def start(self, base_port, workers=1, cpus=(0,)):
        d = self._dir("nginx", base_port)
        c = self.ctx.certs
        body = libsh("bench_nginx_reverse_proxy", self.ctx.origin_port, base_port,
                     base_port + 1, c / "server-chain.pem", c / "server.key")
        libsh("bench_nginx_config", d, "auto", body, workers)
        urls = {"http": f"http://127.0.0.1:{base_port}",
                "https": f"https://127.0.0.1:{base_port + 1}",
                "h2": f"h2://127.0.0.1:{base_port + 1}"}
        return self._launch("nginx", base_port, ["nginx", "-c", d / "nginx.conf", "-p", d, "-g",
                                                 "daemon off;"],
                            [base_port, base_port + 1], urls, [d / "nginx.conf"], cpus)


class Dante(Peer):
    id = "dante"
    name = "Dante"
    package = "dante-server"
    auth = "username/password (socksmethod username, against the system's password database)"
    kinds = ("socks5",)
    missing = {k: "a SOCKS server only" for k in ("http", "https", "h2")}
    tuning = [
        "`socksmethod: username` (its only password method: the system's password database; "
        "the test user exists only in danted's own mount namespace), `clientmethod: none`.",
        "No per-session logging (no `log:` in its rules); CONNECT and UDP ASSOCIATE from "
        "loopback. Dante forks its negotiate, request and I/O processes on demand: all are "
        "counted.",
        "The performance settings of its manual (danted.conf(5)) are the CPU mask and "
        "scheduling of those processes (`cpu.mask`, `cpu.schedule`), which it says should in "
        "most cases not be necessary: taskset pins them all to the proxy's core. "
        "`udp.connectdst` stays at its default, yes, which the manual says improves UDP "
        "performance.",
    ]

    def probe(self):
        if not os.access("/usr/sbin/danted", os.X_OK):
            return "danted is not installed (apt-get install dante-server)"
        if os.geteuid() != 0:
            return ("needs root: its username method checks the system password database, "
                    "and the test user is bind-mounted in a private mount namespace")
        return None

    def start(self, base_port, workers=1, cpus=(0,)):
        d = self._dir("dante", base_port)
        libsh("bench_dante_config", d, "username", base_port)
        urls = {"socks5": f"socks5://{self._cred('sluicebench')}127.0.0.1:{base_port}"}
        cmd = ["bash", "-c", '. tools/bench/lib.sh; bench_dante_exec "$@"', "sh", d, "username",
               self.ctx.key]
        return self._launch("dante", base_port, cmd, [base_port], urls, [d / "danted.conf"],
                            cpus)


class Microsocks(Peer):
    id = "microsocks"
    name = "microsocks"
    binary = package = "microsocks"
    auth = "username/password (-u, -P)"
    kinds = ("socks5",)
    missing = {k: "a SOCKS server only" for k in ("http", "https", "h2")}
    tuning = [
        "`-i 127.0.0.1 -p PORT -u bench -P KEY`: its README has no other settings (a thread per "
        "client, no configuration file). Not `-1` (auth once per IP), which would skip "
        "authentication after the first connection.",
    ]

    def test_na(self, test):
        if test.kind == "udp":
            return "no UDP ASSOCIATE (CONNECT only)"
        return None

    def start(self, base_port, workers=1, cpus=(0,)):
        cmd = ["microsocks", "-i", "127.0.0.1", "-p", base_port, "-u", "bench", "-P",
               self.ctx.key]
        urls = {"socks5": f"socks5://{self._cred('bench')}127.0.0.1:{base_port}"}
        return self._launch("microsocks", base_port, cmd, [base_port], urls, [], cpus)


class ThreeProxy(Peer):
    id = "3proxy"
    name = "3proxy"
    kinds = ("http", "socks5")
    missing = {"h2": "no HTTP/2", "https": "known once built (TLS needs OpenSSL at build time)"}
    tuning = [
        "Built from the given source with `make -f Makefile.Linux` (its default flags: -O3, "
        "LTO; no splice, which its Makefile says is slower for most traffic).",
        "`maxconn` above the connections of the test (doc/html/highload.html: the default 500 "
        "caps every service), `-ocTCP_NODELAY -osTCP_NODELAY` (the same guide's socket "
        "options), no `log`.",
        "`users bench:CL:KEY`, `auth strong`, `allow bench`; `proxy` and `socks` services.",
        "In the workers row it runs on N cores as it is (a thread per connection).",
    ]

    def probe(self):
        b = self.ctx.bin.get("3proxy")
        if b is None:
            return self.ctx.why_no.get("3proxy", "no --3proxy source given")
        if not os.access(b, os.X_OK):
            return f"no binary at {b}"
        if b"ssl_serv" in Path(b).read_bytes():
            self.kinds = ("http", "https", "socks5")
        else:
            self.missing = dict(self.missing, https="built without TLS: its Makefile found no "
                                "OpenSSL headers (libssl-dev is not installed here)")
        return None

    def version(self):
        return self.ctx.versions.get("3proxy", "")

    def start(self, base_port, workers=1, cpus=(0,)):
        d = self._dir("3proxy", base_port)
        libsh("bench_3proxy_config", d, base_port, base_port + 2, self.ctx.key,
              self.ctx.max_conns)
        cfg = d / "3proxy.cfg"
        ports = [base_port, base_port + 2]
        cred = self._cred("bench")
        urls = {"http": f"http://{cred}127.0.0.1:{base_port}",
                "socks5": f"socks5://{cred}127.0.0.1:{base_port + 2}"}
        if "https" in self.kinds:
            c = self.ctx.certs
            with cfg.open("a") as f:
                f.write(f"ssl_server_cert {c}/server-chain.pem\nssl_server_key {c}/server.key\n"
                        f"ssl_serv\nproxy -p{base_port + 1} -i127.0.0.1 -e127.0.0.1\n")
            ports.append(base_port + 1)
            urls["https"] = f"https://{cred}127.0.0.1:{base_port + 1}"
        return self._launch("3proxy", base_port, [self.ctx.bin["3proxy"], cfg], ports, urls,
                            [cfg], cpus)


class Gost(Peer):
    id = "gost"
    name = "gost"
    kinds = ("http", "https", "h2", "socks5")
    tuning = [
        "The seed's settings: `GOGC=400`, `GOST_LOGGER_LEVEL=error`; Go sizes GOMAXPROCS from "
        "the CPUs taskset gives it.",
        "Services from its command line (gost v3): `http://`, `http+tls://` (TLS port), "
        "`http2://` (HTTP/2 is its own listener, not ALPN on the TLS port), "
        "`socks5://...?udp=true`; user bench with the key on each.",
    ]

    def probe(self):
        b = self.ctx.bin.get("gost")
        if b is None:
            return ("no --gost binary given (it cannot be built here: a Go build needs the Go "
                    "module proxy)")
        if not os.access(b, os.X_OK):
            return f"no binary at {b}"
        return None

    def version(self):
        return first_line([str(self.ctx.bin["gost"]), "-V"]).replace("gost ", "")

    def start(self, base_port, workers=1, cpus=(0,)):
        c = self.ctx.certs
        cred = self._cred("bench")
        tls = f"certFile={c}/server-chain.pem&keyFile={c}/server.key"
        p = base_port
        cmd = [self.ctx.bin["gost"],
               "-L", f"http://{cred}127.0.0.1:{p}",
               "-L", f"http+tls://{cred}127.0.0.1:{p + 1}?{tls}",
               "-L", f"http2://{cred}127.0.0.1:{p + 2}?{tls}",
               "-L", f"socks5://{cred}127.0.0.1:{p + 3}?udp=true"]
        urls = {"http": f"http://{cred}127.0.0.1:{p}", "https": f"https://{cred}127.0.0.1:{p + 1}",
                "h2": f"h2://{cred}127.0.0.1:{p + 2}", "socks5": f"socks5://{cred}127.0.0.1:{p + 3}"}
        return self._launch("gost", base_port, cmd, [p, p + 1, p + 2, p + 3], urls, [], cpus,
                            env={"GOGC": "400", "GOST_LOGGER_LEVEL": "error"})


PEER_CLASSES = [Sluice, Squid, Tinyproxy, ThreeProxy, Gost, Dante, Microsocks, Nginx]


def all_peers(ctx):
    return [cls(ctx) for cls in PEER_CLASSES]
