#!/usr/bin/python3
"""SOCKS5 UDP echo load: the one mode sluice-load does not have.

    udp_load.py --proxy socks5://USER:KEY@127.0.0.1:PORT --dst 127.0.0.1:ECHO_PORT
                [-c 64] [-d 5] [--size 64] [--timeout 0.5]

Opens -c UDP associations (one TCP control connection each, username/password when the proxy
URL has them), then runs a closed loop on each: one datagram of --size bytes through the relay to
the echo server, and the next when the answer is back. A datagram not answered within --timeout
is counted lost and sent again. Prints a JSON report with the keys tools/campaign reads from
sluice-load (ok, failed, elapsed_s, requests_per_s, latency, errors, ...). Loopback only.
"""

import argparse
import ipaddress
import json
import selectors
import socket
import struct
import sys
import time
from urllib.parse import urlsplit


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("proxy closed the control connection")
        data += chunk
    return data


def associate(proxy, client_addr, timeout):
    """The SOCKS5 handshake and UDP ASSOCIATE; returns (control socket, relay address)."""
    ctl = socket.create_connection((proxy.hostname, proxy.port), timeout=timeout)
    ctl.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if proxy.username is not None:
        ctl.sendall(b"\x05\x01\x02")
        if recv_exact(ctl, 2) != b"\x05\x02":
            raise ConnectionError("proxy refused username/password authentication")
        user, key = proxy.username.encode(), (proxy.password or "").encode()
        ctl.sendall(bytes([1, len(user)]) + user + bytes([len(key)]) + key)
        if recv_exact(ctl, 2)[1] != 0:
            raise ConnectionError("proxy refused the credentials")
    else:
        ctl.sendall(b"\x05\x01\x00")
        if recv_exact(ctl, 2) != b"\x05\x00":
            raise ConnectionError("proxy refused no authentication")
    host, port = client_addr
    ctl.sendall(b"\x05\x03\x00\x01" + socket.inet_aton(host) + struct.pack(">H", port))
    head = recv_exact(ctl, 4)
    if head[1] != 0:
        raise ConnectionError(f"UDP ASSOCIATE refused: reply {head[1]}")
    if head[3] == 1:
        addr = socket.inet_ntoa(recv_exact(ctl, 4))
    elif head[3] == 4:
        addr = socket.inet_ntop(socket.AF_INET6, recv_exact(ctl, 16))
    else:
        addr = recv_exact(ctl, recv_exact(ctl, 1)[0]).decode()
    relay_port = struct.unpack(">H", recv_exact(ctl, 2))[0]
    if ipaddress.ip_address(addr).is_unspecified:
        addr = proxy.hostname
    return ctl, (addr, relay_port)


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--dst", required=True, help="HOST:PORT of the UDP echo server")
    ap.add_argument("-c", "--connections", type=int, default=64)
    ap.add_argument("-d", "--duration", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=0.5)
    args = ap.parse_args()

    proxy = urlsplit(args.proxy)
    dst_host, _, dst_port = args.dst.rpartition(":")
    for host in (proxy.hostname, dst_host):
        if not ipaddress.ip_address(host).is_loopback:
            sys.exit(f"udp_load: {host} is not a loopback address")
    header = b"\x00\x00\x00\x01" + socket.inet_aton(dst_host) + struct.pack(">H", int(dst_port))
    payload = b"x" * args.size
    datagram = header + payload

    errors = {}
    sel = selectors.DefaultSelector()
    flows = []
    for _ in range(args.connections):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        try:
            ctl, relay = associate(proxy, udp.getsockname(), timeout=10)
        except (OSError, ConnectionError) as e:
            errors["associate"] = errors.get("associate", 0) + 1
            last_error = str(e)
            udp.close()
            continue
        udp.connect(relay)
        udp.setblocking(False)
        flow = {"udp": udp, "ctl": ctl, "sent": 0.0}
        flows.append(flow)
        sel.register(udp, selectors.EVENT_READ, flow)

    ok = lost = 0
    latencies = []
    start = time.monotonic()
    end = start + args.duration
    for f in flows:
        f["sent"] = time.monotonic()
        f["udp"].send(datagram)
    now = start
    next_check = start + args.timeout
    while now < end:
        for key, _ in sel.select(timeout=min(args.timeout / 4, max(0.0, end - now))):
            f = key.data
            try:
                data = f["udp"].recv(65536)
            except (BlockingIOError, ConnectionRefusedError):
                continue
            now = time.monotonic()
            if data[10:] == payload:
                ok += 1
                latencies.append(now - f["sent"])
            else:
                errors["mismatch"] = errors.get("mismatch", 0) + 1
            if now < end:
                f["sent"] = now
                f["udp"].send(datagram)
        now = time.monotonic()
        if now >= next_check:
            for f in flows:
                if now - f["sent"] > args.timeout:
                    lost += 1
                    f["sent"] = now
                    f["udp"].send(datagram)
            next_check = now + args.timeout / 4
    elapsed = time.monotonic() - start
    for f in flows:
        f["udp"].close()
        f["ctl"].close()
    if lost:
        errors["lost"] = lost
    latencies.sort()
    us = [x * 1e6 for x in latencies]
    report = {
        "destination": f"udp://{args.dst}",
        "mode": f"{args.proxy.split('@')[-1]} (SOCKS5 UDP ASSOCIATE)",
        "workload": "udp-echo",
        "connections": len(flows),
        "elapsed_s": elapsed,
        "requests": ok + lost,
        "ok": ok,
        "failed": lost + errors.get("mismatch", 0) + errors.get("associate", 0),
        "incomplete": len(flows),
        "requests_per_s": ok / elapsed if elapsed > 0 else 0.0,
        "payload_bytes_read": ok * args.size,
        "payload_bytes_sent": (ok + lost) * args.size,
        "errors": errors,
        "latency": {"count": len(us), "mean_us": sum(us) / len(us) if us else 0.0,
                    "p50_us": percentile(us, 50), "p99_us": percentile(us, 99),
                    "max_us": us[-1] if us else 0.0},
    }
    if "associate" in errors:
        report["associate_error"] = last_error
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
