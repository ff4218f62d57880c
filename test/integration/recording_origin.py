"""A loopback origin that parses HTTP/1.1 itself, strictly, and records everything it receives.

The smuggling suite needs to know exactly what sluice forwarded: every raw byte on every
connection, and every request parsed out of them (method, target, headers, body). The parser
here is deliberately strict (RFC 9112, CRLF only, no obs-fold, Content-Length digits only,
Transfer-Encoding must end in chunked, no CL+TE): anything it cannot parse unambiguously is
recorded as an error and the connection is closed, so a test can assert that sluice never
forwarded anything a second parser could read differently.

How it answers is up to the test: `responder(req, ctx)` returns the raw bytes to send (or a
Reply with extra steps: a delay, more bytes later, closing). The default answers 200 with a
short body naming the request, keep-alive.
"""

import re
import socket
import threading
import time
from dataclasses import dataclass, field

TCHAR = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
REQUEST_LINE = re.compile(rb"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/1\.([01])$")
# field-value characters: VCHAR, obs-text, SP, HTAB.
FIELD_VALUE = re.compile(rb"^[\x21-\x7e\x80-\xff \t]*$")
MAX_HEAD = 256 * 1024


class OriginParseError(Exception):
    pass


@dataclass
class RecordedRequest:
    method: str
    target: str
    version: str                                   # "HTTP/1.1" or "HTTP/1.0"
    headers: list = field(default_factory=list)    # [(name, value)] as received, in order
    framing: str = "none"                          # "none", "length" or "chunked"
    body: bytes = b""                              # payload (chunked: decoded)
    raw_body: bytes = b""                          # the body bytes as they came, framing included
    trailers: list = field(default_factory=list)   # [(name, value)] of a chunked body
    conn: int = 0                                  # index of the connection it came on
    index_in_conn: int = 0

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def __str__(self):
        hs = "".join(f"\n    {k}: {v}" for k, v in self.headers)
        return (f"{self.method} {self.target} {self.version} (conn {self.conn}){hs}\n"
                f"    body ({self.framing}): {self.body[:200]!r}")


@dataclass
class Reply:
    """What to send back: `data` now; then each (delay_seconds, bytes) of `later`; then close the
    connection when `close` is set."""
    data: bytes = b""
    later: list = field(default_factory=list)
    close: bool = False


@dataclass
class ConnectionRecord:
    index: int
    raw: bytearray = field(default_factory=bytearray)
    requests: list = field(default_factory=list)
    error: str = ""      # why the origin's parser gave up on this connection
    closed_by_peer: bool = False


class Context:
    """Passed to the responder: which connection and which request on it."""

    def __init__(self, conn_index, index_in_conn, request_number):
        self.conn_index = conn_index
        self.index_in_conn = index_in_conn
        self.request_number = request_number  # 0-based across the origin's life


def default_response(req, ctx):
    body = f"{req.method} {req.target} body={len(req.body)}\n".encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
            % len(body)) + body


class _Reader:
    def __init__(self, sock, record):
        self.sock = sock
        self.record = record
        self.buf = bytearray()

    def fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError
        self.record.raw += chunk
        self.buf += chunk

    def line(self, limit):
        """One CRLF-terminated line, without the CRLF. A bare LF or CR is an error."""
        while True:
            lf = self.buf.find(b"\n")
            if lf >= 0:
                break
            if len(self.buf) > limit:
                raise OriginParseError("line too long")
            self.fill()
        if lf == 0 or self.buf[lf - 1] != 0x0D:
            raise OriginParseError("bare LF")
        line = bytes(self.buf[:lf - 1])
        del self.buf[:lf + 1]
        if b"\r" in line:
            raise OriginParseError("bare CR")
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self.fill()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


def _parse_fields(reader, limit):
    fields = []
    total = 0
    while True:
        line = reader.line(limit)
        total += len(line) + 2
        if total > limit:
            raise OriginParseError("head too large")
        if line == b"":
            return fields
        if line[:1] in (b" ", b"\t"):
            raise OriginParseError("obs-fold")
        name, sep, value = line.partition(b":")
        if not sep or not TCHAR.match(name):
            raise OriginParseError(f"invalid field line {line[:80]!r}")
        if not FIELD_VALUE.match(value):
            raise OriginParseError(f"invalid field value {line[:80]!r}")
        fields.append((name.decode("latin-1"), value.strip(b" \t").decode("latin-1")))


def _parse_request(reader):
    line = reader.line(MAX_HEAD)
    m = REQUEST_LINE.match(line)
    if not m:
        raise OriginParseError(f"invalid request line {line[:120]!r}")
    req = RecordedRequest(m.group(1).decode(), m.group(2).decode("latin-1"),
                          "HTTP/1." + m.group(3).decode())
    req.headers = _parse_fields(reader, MAX_HEAD)
    hosts = req.header_all("host")
    if len(hosts) != 1 and req.version == "HTTP/1.1":
        raise OriginParseError(f"{len(hosts)} Host headers")
    cls = req.header_all("content-length")
    tes = req.header_all("transfer-encoding")
    if cls and tes:
        raise OriginParseError("Content-Length with Transfer-Encoding")
    if len(cls) > 1:
        raise OriginParseError("several Content-Length fields")
    if tes:
        if req.version != "HTTP/1.1":
            raise OriginParseError("Transfer-Encoding in HTTP/1.0")
        codings = [c.strip(" \t").lower() for c in ",".join(tes).split(",")]
        if "" in codings or codings[-1] != "chunked" or codings.count("chunked") != 1:
            raise OriginParseError(f"Transfer-Encoding {tes!r}")
        req.framing = "chunked"
        _read_chunked(reader, req)
    elif cls:
        if not re.fullmatch(r"[0-9]{1,18}", cls[0]):
            raise OriginParseError(f"Content-Length {cls[0]!r}")
        req.framing = "length"
        req.body = reader.exact(int(cls[0]))
        req.raw_body = req.body
    return req


def _read_chunked(reader, req):
    raw = bytearray()
    body = bytearray()
    while True:
        line = reader.line(4096)
        raw += line + b"\r\n"
        size_text, _, ext = line.partition(b";")
        if not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", size_text):
            raise OriginParseError(f"chunk size {line[:40]!r}")
        if ext and not re.fullmatch(
                rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+(=([!#$%&'*+\-.^_`|~0-9A-Za-z]+|\"[^\"\\]*\"))?"
                rb"(;[!#$%&'*+\-.^_`|~0-9A-Za-z]+(=([!#$%&'*+\-.^_`|~0-9A-Za-z]+|\"[^\"\\]*\"))?)*",
                ext):
            raise OriginParseError(f"chunk extension {line[:60]!r}")
        size = int(size_text, 16)
        if size == 0:
            break
        data = reader.exact(size)
        body += data
        raw += data
        crlf = reader.exact(2)
        raw += crlf
        if crlf != b"\r\n":
            raise OriginParseError("no CRLF after chunk data")
    trailer_start = len(reader.record.raw) - len(reader.buf)
    req.trailers = _parse_fields(reader, 65536)
    trailer_end = len(reader.record.raw) - len(reader.buf)
    raw += reader.record.raw[trailer_start:trailer_end]
    req.body = bytes(body)
    req.raw_body = bytes(raw)


class RecordingOrigin:
    """Threaded raw-socket origin on 127.0.0.1 (port chosen by the kernel)."""

    def __init__(self, responder=None):
        self.responder = responder or default_response
        self.lock = threading.Lock()
        self.connections = []
        self._request_number = 0
        self._threads = []
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self.authority = f"127.0.0.1:{self.port}"

    def url(self, path="/"):
        return f"http://{self.authority}{path}"

    # -- lifecycle

    def start(self):
        t = threading.Thread(target=self._accept_loop, name="recording-origin", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self):
        self._stop.set()
        for t in list(self._threads):
            t.join(5)
        self._listener.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- what was received

    @property
    def requests(self):
        with self.lock:
            return [r for c in self.connections for r in c.requests]

    @property
    def raw(self):
        """Every byte received, all connections in accept order."""
        with self.lock:
            return b"".join(bytes(c.raw) for c in self.connections)

    @property
    def errors(self):
        with self.lock:
            return [(c.index, c.error) for c in self.connections if c.error]

    @property
    def connection_count(self):
        with self.lock:
            return len(self.connections)

    def wait_requests(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        while len(self.requests) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.requests

    def describe(self):
        with self.lock:
            out = [f"origin {self.authority}: {len(self.connections)} connection(s)"]
            for c in self.connections:
                out.append(f"  conn {c.index}: {len(c.raw)} bytes, {len(c.requests)} request(s)"
                           f"{', error: ' + c.error if c.error else ''}: {bytes(c.raw[:600])!r}")
            return "\n".join(out)

    # -- serving

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                record = ConnectionRecord(len(self.connections))
                self.connections.append(record)
            t = threading.Thread(target=self._serve, args=(sock, record), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, sock, record):
        sock.settimeout(0.1)
        reader = _Reader(sock, record)
        try:
            while not self._stop.is_set():
                try:
                    req = self._next_request(reader)
                except socket.timeout:
                    continue
                req.conn = record.index
                with self.lock:
                    req.index_in_conn = len(record.requests)
                    record.requests.append(req)
                    ctx = Context(record.index, req.index_in_conn, self._request_number)
                    self._request_number += 1
                reply = self.responder(req, ctx)
                if isinstance(reply, (bytes, bytearray)):
                    reply = Reply(bytes(reply))
                if reply.data:
                    sock.sendall(reply.data)
                for delay, data in reply.later:
                    time.sleep(delay)
                    sock.sendall(data)
                if reply.close:
                    return
        except EOFError:
            record.closed_by_peer = True
        except OriginParseError as e:
            record.error = str(e)
        except OSError as e:
            record.error = record.error or f"socket error: {e}"
        finally:
            sock.close()

    def _next_request(self, reader):
        # Wait for the first byte with a short timeout (to notice stop()); once a request has
        # started, a stall mid-request is a sluice bug, so read it with a longer timeout.
        while not reader.buf:
            reader.fill()
        reader.sock.settimeout(10)
        try:
            return _parse_request(reader)
        except socket.timeout:
            raise OriginParseError("stalled in the middle of a request") from None
        finally:
            reader.sock.settimeout(0.1)
