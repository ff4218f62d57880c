"""The origins the proxy talks to in tests: Debian's nginx (static files, plain and TLS) and a
small Python server for what nginx cannot do simply (echo, chunked, slow, header capture)."""

import json
import os
import random
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from helpers import CLEAN_ENV, free_port, read_all, wait_for_port

NGINX_BIN = os.environ.get("NGINX_BIN", "/usr/sbin/nginx")

NGINX_CONF = """\
{user}worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    default_type application/octet-stream;
    client_body_temp_path {dir}/tmp/client_body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    keepalive_requests 100000;
    keepalive_timeout 75s;

    server {{
        listen 127.0.0.1:{port};
        {listen_v6}
        root {dir}/www;
        location /1k {{ }}
        location /1m {{ }}
        location / {{ }}
    }}
    server {{
        listen 127.0.0.1:{tls_port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {dir}/www;
        location / {{ }}
    }}
}}
"""


def ipv6_loopback_works():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def deterministic_bytes(n, seed):
    return random.Random(seed).randbytes(n)


class NginxOrigin:
    """nginx as a subprocess, entirely inside `workdir` (no /var, no daemon)."""

    def __init__(self, workdir, cert, key):
        self.dir = Path(workdir)
        self.port = free_port()
        self.tls_port = free_port()
        self.files = {
            "1k": deterministic_bytes(1024, 1),
            "1m": deterministic_bytes(1024 * 1024, 2),
            "small.txt": b"small file from nginx\n",
        }
        (self.dir / "www").mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").mkdir(exist_ok=True)
        for name, data in self.files.items():
            (self.dir / "www" / name).write_bytes(data)
        # As root, nginx workers would run as nobody and could not read a 0700 temp dir.
        user = "user root;\n" if os.geteuid() == 0 else ""
        # The plain server also answers on [::1] (same port number) where IPv6 loopback exists.
        self.has_ipv6 = ipv6_loopback_works()
        listen_v6 = f"listen [::1]:{self.port};" if self.has_ipv6 else ""
        self.conf = self.dir / "nginx.conf"
        self.conf.write_text(NGINX_CONF.format(user=user, dir=self.dir, port=self.port,
                                               listen_v6=listen_v6, tls_port=self.tls_port,
                                               cert=cert, key=key))
        self.proc = None

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def tls_url(self, path):
        return f"https://127.0.0.1:{self.tls_port}{path}"

    def error_log(self):
        p = self.dir / "error.log"
        return p.read_text(errors="replace") if p.exists() else "(no error.log)"

    def start(self):
        cmd = [NGINX_BIN, "-p", str(self.dir), "-e", str(self.dir / "error.log"),
               "-c", str(self.conf), "-g", "daemon off;"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=CLEAN_ENV)
        try:
            wait_for_port(self.port, proc=self.proc, what="nginx")
            wait_for_port(self.tls_port, proc=self.proc, what="nginx (TLS)")
        except RuntimeError as e:
            self.stop()
            raise RuntimeError(f"{e}\nnginx stderr: {self.proc.stderr.read().decode()}\n"
                               f"error.log: {self.error_log()}") from None
        return self

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()  # SIGTERM: nginx's fast shutdown
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def chunked_body():
    """What /chunked sends, chunk by chunk; the client must see their concatenation."""
    return [b"first chunk\n", b"x" * 5000, deterministic_bytes(70000, 3), b"last\n"]


class _OriginHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the client says otherwise
    server_version = "sluice-test-origin"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def _read_body(self):
        """Returns (body, was_chunked). Decodes chunked framing itself: http.server does not."""
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            body = b""
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ConnectionError("EOF inside chunked body")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return body, True
                body += self.rfile.read(size)
                self.rfile.readline(16)  # CRLF after the chunk data
        n = int(self.headers.get("Content-Length", "0") or 0)
        return (self.rfile.read(n) if n else b""), False

    def _send(self, status, body, ctype="application/octet-stream", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _record(self):
        with self.server.lock:
            self.server.requests.append((self.command, self.path, list(self.headers.items())))

    def do_POST(self):
        self._record()
        body, was_chunked = self._read_body()
        if urlsplit(self.path).path == "/echo":
            self._send(200, body, extra=[("X-Origin-Chunked", "yes" if was_chunked else "no"),
                                         ("X-Origin-Length", str(len(body)))])
        else:
            self._send(404, b"not found\n", "text/plain")

    do_PUT = do_POST

    def do_GET(self):
        self._record()
        url = urlsplit(self.path)
        q = parse_qs(url.query)
        if url.path == "/hello":
            self._send(200, b"hello from the python origin\n", "text/plain")
        elif url.path == "/headers":
            self._send(200, json.dumps(list(self.headers.items())).encode(), "application/json")
        elif url.path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.command == "HEAD":
                return
            for chunk in chunked_body():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif url.path == "/slow":
            seconds = float(q.get("s", ["2"])[0])
            self.server.slow_started.set()
            time.sleep(seconds)
            self._send(200, b"slow done\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    do_HEAD = do_GET


class PythonOrigin:
    """ThreadingHTTPServer in a thread: /hello, /headers, /chunked, /slow?s=N, POST /echo."""

    def __init__(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _OriginHandler)
        self.server.daemon_threads = True
        self.server.lock = threading.Lock()
        self.server.connections = 0
        self.server.requests = []
        self.server.slow_started = threading.Event()
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def connections(self):
        with self.server.lock:
            return self.server.connections

    @property
    def requests(self):
        with self.server.lock:
            return list(self.server.requests)

    @property
    def slow_started(self):
        return self.server.slow_started

    def start(self):
        self.thread.start()
        wait_for_port(self.port, what="python origin")
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class TcpServer:
    """A threaded TCP server on a loopback port; subclasses serve(conn) each connection."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.authority = f"127.0.0.1:{self.port}"
        self.stopped = False
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def stop(self):
        self.stopped = True
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


class EchoServer(TcpServer):
    """Echoes every byte; half-closes after the client's FIN."""

    def serve(self, c):
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    c.shutdown(socket.SHUT_WR)
                    return
                c.sendall(d)
        except OSError:
            pass


class SluiceOrigin:
    """A sluice-origin process: an HTTP port (also /stats), a sink, a source and a UDP echo."""

    def __init__(self, binary, threads=2, tls=None, env=None):
        args = [str(binary), "--listen", "127.0.0.1:0", "-t", str(threads), "--sink",
                "127.0.0.1:0", "--source", "127.0.0.1:0", "--udp-echo", "127.0.0.1:0"]
        if tls:
            # Load goes to the TLS port; /stats is read on the plain one, so that reading it adds
            # no TLS handshake bytes of its own to the counts.
            args += ["--tls-listen", "127.0.0.1:0", "--tls-cert", str(tls / "server-chain.pem"),
                     "--tls-key", str(tls / "server.key")]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, env=env or CLEAN_ENV)
        lines = {}
        for _ in range(5 if tls else 4):
            line = self.proc.stdout.readline().decode().strip()
            assert line, "sluice-origin exited early"
            name, _, addr = line.rpartition(" ")
            lines[name] = int(addr.rsplit(":", 1)[1])
        self.port = lines["listening on"]
        self.sink = lines["sink listening on"]
        self.source = lines["source listening on"]
        self.udp = lines["udp echo on"]
        self.url = f"http://127.0.0.1:{self.port}"
        if tls:
            self.url = f"https://127.0.0.1:{lines['tls listening on']}"

    def stats(self):
        """(stats, bytes of the request, bytes of the whole response)."""
        req = b"GET /stats HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n"
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(req)
        data = read_all(s)
        s.close()
        body = data.split(b"\r\n\r\n", 1)[1]
        return json.loads(body), len(req), len(data)

    def measure(self, fn):
        """Runs fn() and returns (its result, what the origin served meanwhile)."""
        before, _, before_resp = self.stats()
        result = fn()
        after, after_req, _ = self.stats()
        d = {k: after[k] - before[k] for k in after}
        # The second /stats counts itself (request and its bytes); the first one's response
        # was sent after its own snapshot.
        d["requests"] -= 1
        d["bytes_received"] -= after_req
        d["bytes_sent"] -= before_resp
        return result, d

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
