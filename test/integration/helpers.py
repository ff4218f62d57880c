"""Small tools the integration tests share: ports, curl, raw HTTP over sockets, stats text."""

import base64
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# Proxy variables in the environment would send the test's own requests somewhere else.
_PROXY_VARS = {"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy"}
CLEAN_ENV = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS}


_handed_out = set()


def read_all(sock):
    """Everything the peer sends until it closes."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def free_port():
    """A loopback TCP port that was free a moment ago and that this process has not handed out
    before (the kernel readily returns a just-closed port twice in a row)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def closed_port_socket():
    """A socket bound to a loopback port but not listening: connects to it are refused, and
    holding it keeps another process from taking the port. Close it when done."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s


class SilentPort:
    """A loopback port whose SYNs go unanswered: its accept queue (backlog 0) is held full by one
    connection nobody accepts, so a connect to it stays pending (SYN-SENT) until its timeout.
    pending_connects() counts the sockets of this host in SYN-SENT toward it (`ss`)."""

    def __init__(self):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.filler = [socket.create_connection(("127.0.0.1", self.port), timeout=5)]

    def pending_connects(self):
        r = subprocess.run(["ss", "-Htn", "state", "syn-sent", "dst", f"127.0.0.1:{self.port}"],
                           capture_output=True, text=True, env=CLEAN_ENV, check=True)
        return len([line for line in r.stdout.splitlines() if line.strip()])

    def close(self):
        for s in self.filler:
            s.close()
        self.listener.close()


def wait_for_port(port, host="127.0.0.1", timeout=10.0, proc=None, what="server"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout}s")


def basic_auth(key, user="user"):
    return "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()


# ---------------------------------------------------------------------------------------------
# curl


@dataclass
class CurlResult:
    args: list
    returncode: int
    stdout: bytes
    stderr: str
    elapsed: float
    headers: str = ""  # what -D wrote, when asked for

    def describe(self):
        return (
            f"curl {' '.join(str(a) for a in self.args)}\n"
            f"  exit {self.returncode} after {self.elapsed:.2f}s\n"
            f"  stderr: {self.stderr.strip()[:2000]}\n"
            f"  stdout: {self.stdout[:300]!r}{'...' if len(self.stdout) > 300 else ''}\n"
            f"  headers: {self.headers.strip()[:2000]}"
        )


def curl(*args, timeout=30, headers_file=None):
    """Runs the real curl. Returns a CurlResult; never raises on curl's own failures."""
    cmd = ["curl", "-sS", "--max-time", str(timeout)]
    if headers_file is not None:
        cmd += ["-D", str(headers_file)]
    cmd += [str(a) for a in args]
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, env=CLEAN_ENV, timeout=timeout + 10)
    elapsed = time.monotonic() - start
    headers = ""
    if headers_file is not None and Path(headers_file).exists():
        headers = Path(headers_file).read_bytes().decode("latin-1")  # keep CRLFs
    return CurlResult(cmd[1:], p.returncode, p.stdout, p.stderr.decode(errors="replace"),
                      elapsed, headers)


def header_values(raw_headers, name):
    """Values of a header in what curl -D wrote (all responses it saw, in order)."""
    out = []
    for line in raw_headers.splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip().lower() == name.lower():
            out.append(v.strip())
    return out


# ---------------------------------------------------------------------------------------------
# raw HTTP/1.1 over a socket, for what curl will not send


@dataclass
class RawResponse:
    status: int
    reason: str
    headers: list = field(default_factory=list)  # [(name, value)] in order
    body: bytes = b""

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def __str__(self):
        hs = "".join(f"\n  {k}: {v}" for k, v in self.headers)
        return f"HTTP {self.status} {self.reason}{hs}\n  body: {self.body[:300]!r}"


class RawConnection:
    """A client socket with a buffered reader that parses HTTP/1.1 responses."""

    def __init__(self, addr, timeout=10.0):
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"peer closed the connection; unparsed bytes: {self.buf[:200]!r}")
        self.buf += chunk

    def _read_line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > 1 << 20:
                raise ValueError("response line longer than 1 MiB")
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _read_to_eof(self):
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                data, self.buf = self.buf, b""
                return data
            self.buf += chunk

    def read_response(self, method="GET", skip_interim=True):
        """Reads one response. `method` matters for HEAD (no body) and CONNECT (2xx: no body)."""
        while True:
            line = self._read_line().decode("latin-1")
            parts = line.split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise ValueError(f"bad status line {line!r}")
            status = int(parts[1])
            reason = parts[2] if len(parts) > 2 else ""
            headers = []
            while True:
                h = self._read_line().decode("latin-1")
                if h == "":
                    break
                k, sep, v = h.partition(":")
                if not sep:
                    raise ValueError(f"bad header line {h!r}")
                headers.append((k.strip(), v.strip()))
            resp = RawResponse(status, reason, headers)
            if 100 <= status < 200 and skip_interim:
                continue
            break
        if (method == "HEAD" or status in (204, 304) or 100 <= status < 200
                or (method == "CONNECT" and 200 <= status < 300)):
            return resp
        te = (resp.header("Transfer-Encoding") or "").lower()
        cl = resp.header("Content-Length")
        if "chunked" in te:
            body = b""
            while True:
                size_line = self._read_line().split(b";")[0].strip()
                size = int(size_line, 16)
                if size == 0:
                    while self._read_line() != b"":
                        pass
                    break
                body += self._read_exact(size)
                if self._read_exact(2) != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
            resp.body = body
        elif cl is not None:
            resp.body = self._read_exact(int(cl))
        else:
            resp.body = self._read_to_eof()
        return resp

    def is_closed_by_peer(self, wait=3.0):
        """True if the peer closes (EOF or reset) within `wait` seconds without sending more."""
        if self.buf:
            return False
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


def raw_request(addr, data, method="GET", timeout=10.0):
    """Sends `data` on a new connection and returns the first response."""
    with RawConnection(addr, timeout) as c:
        c.send(data)
        return c.read_response(method)


# ---------------------------------------------------------------------------------------------
# stats


def parse_stats_text(text):
    """`name: value` lines -> {name: number}; other lines are ignored."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if not sep:
            continue
        value = value.strip()
        try:
            out[name.strip()] = int(value)
        except ValueError:
            try:
                out[name.strip()] = float(value)
            except ValueError:
                pass
    return out


def rss_kib(pid):
    """Resident memory of a process, in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")
