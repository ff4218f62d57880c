"""An origin and a name server that report the source address they saw, for test_egress.py.

In-process (threads), or inside a network namespace as a process:

    python3 egress_agents.py origin LOG PORT        HTTP/1.1 origin on [::]:PORT (IPv4 too)
    python3 egress_agents.py dns LOG PORT TABLE ADDR...
                                                    UDP name server on each ADDR:PORT

The origin answers every GET with JSON {"peer": ip, "conn": n, "path": ...}: the address the
connection came from and its number (1, 2, ...), keep-alive; it logs one JSON line per
connection ({"event": "accept", "peer", "conn"}) in LOG. The name server answers A and AAAA
queries from TABLE (JSON: name -> {"A": [...], "AAAA": [...]}, TTL 60; other names NXDOMAIN)
and logs one JSON line per query ({"peer", "server", "name", "type"}) in LOG.
"""

import json
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def plain_ip(ip):
    return ip[7:] if ip.startswith("::ffff:") else ip


class JsonLines:
    """Records in memory, and as JSON lines in a file when given one."""

    def __init__(self, path=None):
        self.lock = threading.Lock()
        self.records = []
        self.file = open(path, "a", buffering=1) if path else None

    def write(self, **record):
        with self.lock:
            self.records.append(record)
            if self.file:
                self.file.write(json.dumps(record) + "\n")

    def snapshot(self):
        with self.lock:
            return list(self.records)


class PeerOrigin:
    """HTTP/1.1 keep-alive origin; each answer names the peer address of its connection."""

    def __init__(self, host="127.0.0.1", port=0, log_path=None):
        self.log = JsonLines(log_path)
        log = self.log
        counter = {"n": 0}
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def setup(self):
                super().setup()
                with lock:
                    counter["n"] += 1
                    self.conn_number = counter["n"]
                self.peer_ip = plain_ip(self.client_address[0])
                log.write(event="accept", peer=self.peer_ip, conn=self.conn_number)

            def do_GET(self):
                body = json.dumps({"peer": self.peer_ip, "conn": self.conn_number,
                                   "path": self.path}).encode() + b"\n"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

            def server_bind(self):
                if family == socket.AF_INET6:
                    self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                super().server_bind()

        self.server = Server((host, port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def accepts(self):
        return [r for r in self.log.snapshot() if r["event"] == "accept"]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _dns_answer(query, table, peer, server, log):
    if len(query) < 17:
        return None
    qid, _flags, qdcount = struct.unpack("!HHH", query[:6])
    if qdcount != 1:
        return None
    pos, labels = 12, []
    while pos < len(query) and query[pos] != 0:
        n = query[pos]
        labels.append(query[pos + 1:pos + 1 + n].decode("latin-1"))
        pos += 1 + n
    if pos + 5 > len(query):
        return None
    qtype = struct.unpack("!H", query[pos + 1:pos + 3])[0]
    question = query[12:pos + 5]
    name = ".".join(labels).lower()  # evdns randomises the case it asks with
    log.write(peer=plain_ip(peer[0]), server=server, name=name, type=qtype)
    entry = table.get(name)
    if entry is None:
        return struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question
    family, key, rtype = {1: (socket.AF_INET, "A", 1),
                          28: (socket.AF_INET6, "AAAA", 28)}.get(qtype, (None, None, None))
    ips = entry.get(key, []) if key else []
    resp = struct.pack("!HHHHHH", qid, 0x8180, 1, len(ips), 0, 0) + question
    for ip in ips:
        rdata = socket.inet_pton(family, ip)
        resp += struct.pack("!HHHIH", 0xC00C, rtype, 1, 60, len(rdata)) + rdata
    return resp


class RecordingDns:
    """A UDP name server on each of `addresses` (one port for all), logging who asked."""

    def __init__(self, addresses, table, port=0, log_path=None):
        self.log = JsonLines(log_path)
        self.table = table
        self.socks = []
        self.port = port
        for addr in addresses:
            family = socket.AF_INET6 if ":" in addr else socket.AF_INET
            s = socket.socket(family, socket.SOCK_DGRAM)
            s.bind((addr, self.port))
            self.port = s.getsockname()[1]
            s.settimeout(0.2)
            self.socks.append((s, addr))
        self._stop = False
        self.threads = [threading.Thread(target=self._run, args=(s, a), daemon=True)
                        for s, a in self.socks]
        for t in self.threads:
            t.start()

    def _run(self, sock, addr):
        while not self._stop:
            try:
                query, peer = sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            resp = _dns_answer(query, self.table, peer, addr, self.log)
            if resp is not None:
                try:
                    sock.sendto(resp, peer)
                except OSError:
                    pass

    def queries(self):
        return self.log.snapshot()

    def stop(self):
        self._stop = True
        for t in self.threads:
            t.join(2)
        for s, _ in self.socks:
            s.close()


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "origin":
        PeerOrigin("::", int(sys.argv[3]), log_path=sys.argv[2])
    elif what == "dns":
        RecordingDns(sys.argv[5:], json.loads(sys.argv[4]), port=int(sys.argv[3]),
                     log_path=sys.argv[2])
    else:
        sys.exit(f"unknown agent {what!r}")
    print("ready", flush=True)
    threading.Event().wait()
