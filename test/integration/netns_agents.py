"""Small servers and a client that test_dest_guard.py runs inside a network namespace.

    python3 netns_agents.py origin LOG PORT...   HTTP origin on [::]:PORT (IPv4 too) per port;
                                                 one JSON line per accepted connection and per
                                                 request in LOG, with the local address reached.
    python3 netns_agents.py dns LOG PORT TABLE   UDP name server on 127.0.0.1:PORT answering A
                                                 queries from TABLE (JSON, see below); one JSON
                                                 line per query in LOG.
    python3 netns_agents.py raw PROXY_PORT REQS  sends each raw request (JSON list of strings) on
                                                 its own connection to 127.0.0.1:PROXY_PORT and
                                                 prints the responses as JSON.

TABLE maps a lowercase name to a list of answers; a name with several lists answers them in turn
(query 1 gets the first, query 2 the second, ...), with TTL 0 so nothing is cached: a name that
changes its answer between the check and a second lookup (DNS rebinding). Names not in TABLE
get NXDOMAIN; AAAA queries get an empty answer.
"""

import json
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _plain_ip(ip):
    return ip[7:] if ip.startswith("::ffff:") else ip


class _Log:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.file = open(path, "a", buffering=1)

    def write(self, **record):
        with self.lock:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()


def run_origin(log_path, ports):
    log = _Log(log_path)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def setup(self):
            super().setup()
            local = self.connection.getsockname()
            log.write(event="accept", port=local[1], local=_plain_ip(local[0]))

        def do_GET(self):
            local = self.connection.getsockname()
            local_ip = _plain_ip(local[0])
            log.write(event="request", port=local[1], local=local_ip, path=self.path,
                      host=self.headers.get("Host", ""))
            body = f"origin {local_ip} {self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class DualStackServer(ThreadingHTTPServer):
        address_family = socket.AF_INET6
        daemon_threads = True

        def server_bind(self):
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()

    servers = [DualStackServer(("::", int(p)), Handler) for p in ports]
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    servers[0].serve_forever()


def run_dns(log_path, port, table):
    log = _Log(log_path)
    asked = {}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", int(port)))
    print("ready", flush=True)
    while True:
        query, peer = sock.recvfrom(512)
        if len(query) < 17:
            continue
        pos, labels = 12, []
        while pos < len(query) and query[pos] != 0:
            n = query[pos]
            labels.append(query[pos + 1:pos + 1 + n].decode("latin-1"))
            pos += 1 + n
        pos += 1
        if pos + 4 > len(query):
            continue
        qtype = struct.unpack("!H", query[pos:pos + 2])[0]
        name = ".".join(labels).lower()  # evdns randomises the case it asks with
        log.write(name=name, type=qtype)
        header = bytearray(query[:12])
        header[2] = 0x81
        header[3] = 0x80
        answers = []
        ttl = 60
        if name not in table:
            header[3] |= 3  # NXDOMAIN
        elif qtype == 1:
            entry = table[name]
            if entry and isinstance(entry[0], list):  # answers in turn
                n = asked.get(name, 0)
                asked[name] = n + 1
                entry = entry[min(n, len(entry) - 1)]
                ttl = 0
            answers = entry
        header[6:12] = struct.pack("!HHH", len(answers), 0, 0)
        reply = bytes(header) + query[12:pos + 4]
        for ip in answers:
            reply += struct.pack("!HHHIH", 0xC00C, 1, 1, ttl, 4) + socket.inet_aton(ip)
        sock.sendto(reply, peer)


def run_raw(proxy_port, requests):
    from helpers import raw_request

    out = []
    for data in requests:
        method = data.split(" ", 1)[0]
        try:
            r = raw_request(("127.0.0.1", int(proxy_port)), data.encode("latin-1"), method)
            out.append({"status": r.status, "body": r.body.decode("latin-1")})
        except Exception as e:  # noqa: BLE001 -- reported to the test as data
            out.append({"status": 0, "body": f"{type(e).__name__}: {e}"})
    print(json.dumps(out))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "origin":
        run_origin(sys.argv[2], sys.argv[3:])
    elif what == "dns":
        run_dns(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
    elif what == "raw":
        run_raw(sys.argv[2], json.loads(sys.argv[3]))
    else:
        sys.exit(f"unknown agent {what!r}")
