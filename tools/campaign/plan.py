"""The rows of the campaign: the seed's tests per protocol, plus SOCKS5 and the workers row.

A test is one kind of load (one sluice-load command line, or a memory or UDP procedure); a
row is one figure a test gives (requests per second, CPU per request, p99, ...). Several rows
can come from the same runs: "CPU cost per request (1 KB)" is the CPU of the 1 KB runs.
"""

from dataclasses import dataclass, field

KB, MB = 1024, 1024 * 1024

GROUPS = [
    ("plain", "Plain HTTP proxy port"),
    ("https", "HTTPS proxy (resumed TLS sessions)"),
    ("https-full", "HTTPS proxy, full handshake on every connection"),
    ("h2", "HTTP/2 over TLS"),
    ("ws", "WebSocket, plain"),
    ("wss", "WebSocket over TLS"),
    ("socks5", "SOCKS5"),
    ("workers", "Several cores (plain HTTP port, 1 KB responses)"),
]
GROUP_TITLES = dict(GROUPS)

# What a figure is, how it reads, and which way is better.
UNITS = {"rate": ("req/s", "higher"), "msg": ("msg/s", "higher"), "dgram": ("datagrams/s", "higher"),
         "cpu_us": ("µs/req", "lower"), "cpu_us_msg": ("µs/msg", "lower"),
         "cpu_us_dgram": ("µs/datagram", "lower"), "p99_ms": ("ms", "lower"),
         "gbps": ("Gbit/s", "higher"), "cpu_s_per_gb": ("s/GB", "lower"), "mem_mb": ("MB", "lower")}
# Which measured metric each figure reads.
METRIC_OF = {"rate": "rate", "msg": "rate", "dgram": "rate", "cpu_us": "cpu_us",
             "cpu_us_msg": "cpu_us", "cpu_us_dgram": "cpu_us", "p99_ms": "p99_ms",
             "gbps": "gbps", "cpu_s_per_gb": "cpu_s_per_gb", "mem_mb": "mem_mb"}


@dataclass
class Row:
    id: str
    group: str
    title: str
    figure: str          # a key of UNITS
    test: str            # the test whose runs give it
    level: int = 0       # memory rows: the tunnel count
    unit: str = ""
    better: str = ""

    def __post_init__(self):
        self.unit, self.better = UNITS[self.figure]


@dataclass
class Test:
    id: str
    group: str
    kind: str                    # load | bulk | memory | udp
    what: str                    # what it measures, for docs and the report
    args: list = field(default_factory=list)   # sluice-load arguments besides the proxy
    levels: tuple = ()           # the concurrency sweep (load, udp); tunnel counts (memory)
    new_conn: bool = False       # a new connection per request
    keepalive: bool = False      # keep-alive HTTP (a peer that closes each connection is told)
    quick: bool = False          # part of --quick
    na: str = ""                 # no peer can run it here: why
    workers: int = 1             # the workers row: cores for the proxy
    crosscheck: bool = False     # run again with wrk at each peer's chosen level (wrk.py)
    rows: list = field(default_factory=list)


SMALL = (64, 256, 1024)          # the seed's sweep
# Large bodies at 1,024 connections take longer per response than a run lasts.
LARGE_1M = (16, 64, 256)
LARGE_10M = (4, 16, 64)


def memory_levels(nofile):
    """1,000, 5,000 and as many as the open-file limit allows (two descriptors per tunnel in
    the proxy, a thousand kept for the rest), at most the seed's 25,000."""
    top = min(25000, (nofile - 1000) // 2 // 1000 * 1000)
    return tuple(sorted({1000, 5000, top} if top > 5000 else {1000, top}))


def http_tests(group, quick_ids, mem_levels):
    """The seed's HTTP rows on one kind of proxy port (plain, https, h2)."""
    g = group
    origin = "{origin}"
    tests = [
        Test(f"{g}.1k", g, "load", "GET of 1 KiB, keep-alive", ["--dst", origin + "/bytes/1024"],
             SMALL, keepalive=True, crosscheck=(g == "plain")),
        Test(f"{g}.10k", g, "load", "GET of 10 KiB, keep-alive",
             ["--dst", origin + "/bytes/10240"], SMALL, keepalive=True),
        Test(f"{g}.new", g, "load", "GET of 1 KiB, a new client connection per request" +
             (" (TLS, one HTTP/2 stream, GOAWAY, close)" if g == "h2" else ""),
             ["--dst", origin + "/bytes/1024", "--new-conn"], SMALL, new_conn=True),
        Test(f"{g}.1m", g, "load", "GET of 1 MiB, keep-alive",
             ["--dst", origin + "/bytes/1048576"], LARGE_1M, keepalive=True),
        Test(f"{g}.10m", g, "load", "GET of 10 MiB, keep-alive",
             ["--dst", origin + "/bytes/10485760"], LARGE_10M, keepalive=True),
        Test(f"{g}.bulk", g, "bulk", "CONNECT tunnels, 4 at once, each moving 16 MiB per "
             "exchange to the origin's sink", ["-c", "4", "--dst", "tcp://{sink}",
                                               "--tunnel-bytes", "16MiB"]),
        Test(f"{g}.mem", g, "memory", "idle CONNECT tunnels to the origin's sink, held open",
             levels=mem_levels),
    ]
    for t in tests:
        t.quick = t.id in quick_ids
    t = {x.id.split(".")[1]: x for x in tests}
    rows = [
        Row(f"{g}.1k", g, "HTTP, 1 KB responses", "rate", t["1k"].id),
        Row(f"{g}.10k", g, "HTTP, 10 KB responses", "rate", t["10k"].id),
        Row(f"{g}.new", g, "HTTP, 1 KB responses, a new connection per request", "rate",
            t["new"].id),
        Row(f"{g}.1m", g, "HTTP, 1 MB responses", "rate", t["1m"].id),
        Row(f"{g}.10m", g, "HTTP, 10 MB responses", "rate", t["10m"].id),
        Row(f"{g}.bulk", g, "CONNECT tunnels, bulk transfer", "gbps", t["bulk"].id),
        Row(f"{g}.bulk-cpu", g, "CONNECT tunnels, CPU per GB moved", "cpu_s_per_gb",
            t["bulk"].id),
    ]
    if g == "plain":
        rows.append(Row("plain.cpu", g, "CPU cost per request (1 KB)", "cpu_us", t["1k"].id))
    for n in mem_levels:
        rows.append(Row(f"{g}.mem.{n}", g, f"Memory with {n:,} open tunnels", "mem_mb",
                        t["mem"].id, level=n))
    return tests, rows


def ws_tests(group, quick_ids):
    g = group
    ws = "ws://{origin_host}/ws"
    tests = [
        Test(f"{g}.64", g, "load", "WebSocket echo of 64-byte messages, one in flight per "
             "connection", ["--dst", ws, "--ws", "--ws-size", "64"], SMALL),
        Test(f"{g}.64k", g, "load", "WebSocket echo of 64 KiB messages",
             ["--dst", ws, "--ws", "--ws-size", "65536"], LARGE_1M),
        Test(f"{g}.new", g, "load", "WebSocket: upgrade, one 64-byte exchange, close",
             ["--dst", ws, "--ws", "--ws-size", "64", "--ws-count", "1"], SMALL, new_conn=True),
    ]
    for t in tests:
        t.quick = t.id in quick_ids
    rows = [
        Row(f"{g}.64", g, "WebSocket, 64-byte messages", "msg", f"{g}.64"),
        Row(f"{g}.p99", g, "WebSocket round trip, 64-byte messages (p99)", "p99_ms", f"{g}.64"),
        Row(f"{g}.cpu", g, "CPU cost per WebSocket message", "cpu_us_msg", f"{g}.64"),
        Row(f"{g}.64k", g, "WebSocket, 64 KB messages", "gbps", f"{g}.64k"),
        Row(f"{g}.new", g, "WebSocket, one connection per exchange", "msg", f"{g}.new"),
    ]
    return tests, rows


def socks_tests(quick_ids):
    g = "socks5"
    tests = [
        Test("socks5.ka", g, "load", "SOCKS5 CONNECT, then keep-alive GETs of 1 KiB in the tunnel",
             ["--dst", "{origin}/bytes/1024"], SMALL),
        Test("socks5.new", g, "load", "a new SOCKS5 connection and handshake per GET of 1 KiB",
             ["--dst", "{origin}/bytes/1024", "--new-conn"], SMALL, new_conn=True),
        Test("socks5.udp", g, "udp", "UDP ASSOCIATE, 64-byte datagrams echoed by the origin, "
             "one in flight per association (tools/campaign/udp_load.py)", levels=(16, 64, 256)),
        Test("socks5.bulk", g, "bulk", "SOCKS5 tunnels, 4 at once, each moving 16 MiB per "
             "exchange to the origin's sink", ["-c", "4", "--dst", "tcp://{sink}",
                                               "--tunnel-bytes", "16MiB"]),
    ]
    for t in tests:
        t.quick = t.id in quick_ids
    rows = [
        Row("socks5.ka", g, "SOCKS5, 1 KB responses in a kept tunnel", "rate", "socks5.ka"),
        Row("socks5.cpu", g, "CPU cost per request in a SOCKS5 tunnel (1 KB)", "cpu_us",
            "socks5.ka"),
        Row("socks5.new", g, "SOCKS5, a new connection and handshake per request", "rate",
            "socks5.new"),
        Row("socks5.udp", g, "SOCKS5 UDP echo, 64-byte datagrams", "dgram", "socks5.udp"),
        Row("socks5.udp-cpu", g, "CPU cost per UDP datagram (both ways)", "cpu_us_dgram",
            "socks5.udp"),
        Row("socks5.bulk", g, "SOCKS5 tunnels, bulk transfer", "gbps", "socks5.bulk"),
    ]
    return tests, rows


def worker_levels(cores):
    """1, 2, 4, ... up to the cores the machine has, and the core count itself."""
    levels, k = [], 1
    while k < cores:
        levels.append(k)
        k *= 2
    levels.append(cores)
    return levels


def workers_tests(cores):
    tests, rows = [], []
    for k in worker_levels(cores):
        tid = "plain.1k" if k == 1 else f"workers.{k}"
        if k > 1:
            tests.append(Test(tid, "workers", "load", f"GET of 1 KiB, keep-alive, the proxy on "
                              f"{k} cores ({k} workers where it has workers)",
                              ["--dst", "{origin}/bytes/1024"], SMALL, keepalive=True,
                              quick=(k == cores), workers=k))
        rows.append(Row(f"workers.{k}", "workers", f"HTTP, 1 KB responses, {k} "
                        f"core{'s' if k > 1 else ''}", "rate", tid))
    return tests, rows


QUICK = {"plain.1k", "plain.bulk", "plain.mem", "https.1k", "https-full.new", "h2.1k", "h2.new",
         "ws.64", "wss.64", "socks5.ka", "socks5.udp"}


def build(cores, nofile):
    """(tests, rows) in the order they run and appear."""
    mem = memory_levels(nofile)
    tests, rows = [], []
    for g in ("plain", "https"):
        t, r = http_tests(g, QUICK, mem)
        tests += t
        rows += r
    full = Test("https-full.new", "https-full", "load", "GET of 1 KiB, a new TLS connection per "
                "request, no session resumption (RSA 2048 certificate)",
                ["--dst", "{origin}/bytes/1024", "--new-conn", "--no-resume"], SMALL,
                new_conn=True, quick=True)
    tests.append(full)
    rows.append(Row("https-full.new", "https-full", "HTTP, 1 KB responses, a new connection per "
                    "request, full handshake", "rate", full.id))
    t, r = http_tests("h2", QUICK, mem)
    tests += t
    rows += r
    for g in ("ws", "wss"):
        t, r = ws_tests(g, QUICK)
        tests += t
        rows += r
    t, r = socks_tests(QUICK)
    tests += t
    rows += r
    t, r = workers_tests(cores)
    tests += t
    rows += r
    by_id = {x.id: x for x in tests}
    for row in rows:
        by_id[row.test].rows.append(row)
    return tests, rows


@dataclass
class Settings:
    """Durations and repetitions of one mode."""
    mode: str
    duration: float      # seconds per measured run (the longest; see fit())
    warmup: float        # seconds of load before a peer's first run of a test
    runs: int            # runs at the chosen concurrency (the sweep's run there is the first)
    quick_levels: bool   # sweep only the two lowest levels
    per_run: float = 0.3     # measured: starting the load generator, /proc reads, its report
    per_start: float = 2.5   # starting a proxy and waiting for its ports
    mem_quick_levels: tuple = (1000,)
    min_duration: float = 2.0


FULL = Settings("full", duration=4.0, warmup=1.0, runs=3, quick_levels=False)
QUICK_SETTINGS = Settings("quick", duration=0.7, warmup=0.3, runs=1, quick_levels=True,
                          per_start=2.0)


def sweep_levels(test, settings):
    if settings.quick_levels and test.kind in ("load", "udp"):
        return test.levels[:2]
    if test.kind == "memory" and settings.mode == "quick":
        return settings.mem_quick_levels
    return test.levels


def runs_of(test, settings):
    """(measured runs, seconds) of one peer on one test, the sweep counted in full."""
    s = settings
    if test.kind in ("load", "udp"):
        n = len(sweep_levels(test, s)) + s.runs - 1
        n += s.runs if test.crosscheck else 0
        return n, s.warmup + n * (s.duration + s.per_run)
    if test.kind == "bulk":
        return s.runs, s.warmup + s.runs * (s.duration + s.per_run)
    # memory: a fresh proxy per run, each level opened and measured once the tunnels are up
    # (a TLS tunnel costs the proxy a full handshake: fewer open per second)
    levels = sweep_levels(test, s)
    per_second = 800 if test.group == "https" else 1500
    opened = 0
    per = s.per_start
    for n in levels:
        per += 1.5 + (n - opened) / per_second
        opened = n
    return s.runs, s.runs * per


def estimate(tests, applicable, settings):
    """Seconds, and the counts behind them: {test id: [peer ids]} says who runs what."""
    total = runs = pairs = 0
    groups = {}
    for t in tests:
        peers = applicable.get(t.id, [])
        if not peers:
            continue
        n, secs = runs_of(t, settings)
        total += secs * len(peers)
        runs += n * len(peers)
        pairs += len(peers)
        key = (t.group, t.workers)
        groups[key] = max(groups.get(key, 0), len(peers))
    # proxies start together at the start of each group (and of each workers level)
    total += len(groups) * settings.per_start
    return total, runs, pairs


def fit(tests, applicable, settings, budget_s):
    """Shortens the runs (by half seconds, down to min_duration) until the estimate fits the
    budget; returns the estimate. The time grows linearly with the run length."""
    while True:
        total, _, _ = estimate(tests, applicable, settings)
        if total <= budget_s or settings.duration - 0.5 < settings.min_duration:
            return total
        settings.duration -= 0.5
