#!/usr/bin/env python3
"""Memory per idle keep-alive client: a fresh sluice (one worker, plain port, one key), N client
connections opened one after another, each after one proxied GET with Basic auth, then left
idle; the figure is sluice's RSS growth divided by N, right after the last one and after the
next memory_release_interval (10 s).

    tools/bench/idle_keepalive.py [-n N] [--runs R]    (SLUICE_BIN picks the binary)

Needs a built sluice and sluice-origin. Prints one line per run.
"""

import argparse
import base64
import os
import resource
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SLUICE = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "bazel-bin/source/exe/sluice"))
ORIGIN = os.path.join(ROOT, "bazel-bin/tools/origin/sluice-origin")
ORIGIN_PORT, PROXY_PORT, ADMIN_PORT = 18421, 18423, 18426


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def wait_ready(proc):
    for _ in range(100):
        if proc.poll() is not None:
            raise RuntimeError("sluice exited")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/ready", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("sluice not ready")


def one_request(auth):
    c = socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=10)
    c.sendall(f"GET http://127.0.0.1:{ORIGIN_PORT}/bytes/16 HTTP/1.1\r\n"
              f"Host: 127.0.0.1:{ORIGIN_PORT}\r\nProxy-Authorization: {auth}\r\n\r\n".encode())
    data = b""
    while not (b"\r\n\r\n" in data and len(data.partition(b"\r\n\r\n")[2]) >= 16):
        d = c.recv(4096)
        if not d:
            raise RuntimeError(f"closed: {data!r}")
        data += d
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"not 200: {data[:200]!r}")
    return c


def run(n, workdir):
    key = secrets.token_urlsafe(32)  # 43 characters, like sluice init's keys
    auth = "Basic " + base64.b64encode(f"bench:{key}".encode()).decode()
    cfg = os.path.join(workdir, "sluice.yaml")
    with open(cfg, "w") as f:
        f.write(f'server: {{listen: "127.0.0.1:{PROXY_PORT}", workers: 1}}\n'
                f'admin: {{listen: "127.0.0.1:{ADMIN_PORT}"}}\n'
                f'auth: {{api_keys: ["{key}"]}}\n'
                f"destinations: {{allow_private: true}}\n"
                f"limits: {{max_connections_per_client: 100000, max_connections: 100000}}\n")
    log = open(os.path.join(workdir, "sluice.log"), "w")
    proc = subprocess.Popen([SLUICE, "run", "-c", cfg], stdout=log, stderr=subprocess.STDOUT)
    conns = []
    try:
        wait_ready(proc)
        # One client first, so one-time allocations (the pool, the buffers) are not counted.
        conns.append(one_request(auth))
        time.sleep(1)
        before = rss_kib(proc.pid)
        for _ in range(n):
            conns.append(one_request(auth))
        opened = rss_kib(proc.pid)
        time.sleep(11)
        settled = rss_kib(proc.pid)
        return ((opened - before) * 1024 / n, (settled - before) * 1024 / n)
    finally:
        for c in conns:
            c.close()
        proc.terminate()
        proc.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    origin = subprocess.Popen([ORIGIN, "--listen", f"127.0.0.1:{ORIGIN_PORT}", "-t", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        with tempfile.TemporaryDirectory(prefix="sluice-idle-keepalive.") as workdir:
            for _ in range(args.runs):
                opened, settled = run(args.n, workdir)
                print(f"{SLUICE}: {args.n} idle keep-alive clients: {opened:.0f} bytes each "
                      f"just opened, {settled:.0f} after a memory release", flush=True)
    finally:
        origin.terminate()
        origin.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
