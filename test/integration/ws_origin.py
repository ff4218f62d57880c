"""A small WebSocket (RFC 6455) echo origin on loopback, plus frame helpers for raw clients.

Paths:
  /echo    handshake, then echo every text/binary message (ping -> pong, close -> close)
  /slow    as /echo, but the 101 is sent after 0.5 s; bytes that reached the origin before it
           sent its 101 are recorded (`early_bytes`): a proxy must hold them back
  /hello   as /echo, but a text frame "hi" follows the 101 in the same write
  /refuse  403 with a small body, keep-alive (the upgrade is declined)
  /bad101  101 with "Upgrade: h2c" (a proxy must not relay it as a WebSocket)
  /plain   200 "plain" for a request without upgrade
Every request head the origin received is kept in `heads` (bytes) for assertions.
"""

import base64
import hashlib
import os
import socket
import socketserver
import struct
import threading
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def accept_key(key):
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (str or bytes)."""
    if isinstance(key, str):
        key = key.encode()
    return base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()


def encode_frame(opcode, payload, mask, fin=True):
    """One frame; clients must mask (mask=True), servers must not."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack("!H", n)
    else:
        head += bytes([m | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + apply_mask(payload, key)


def apply_mask(payload, key):
    if not payload:
        return b""
    # XOR through ints: fast enough for test messages of a few MiB.
    k = (key * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(k, "big")).to_bytes(len(payload),
                                                                              "big")


class FrameReader:
    """Reads frames from a socket; `pending` holds bytes read past the last frame."""

    def __init__(self, sock, pending=b""):
        self.sock = sock
        self.pending = pending

    def _exact(self, n):
        while len(self.pending) < n:
            chunk = self.sock.recv(max(65536, n - len(self.pending)))
            if not chunk:
                raise ConnectionError(f"eof after {len(self.pending)} of {n} bytes")
            self.pending += chunk
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def frame(self):
        """(fin, opcode, masked, payload)"""
        b0, b1 = self._exact(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._exact(8))[0]
        masked = bool(b1 & 0x80)
        key = self._exact(4) if masked else None
        payload = self._exact(n)
        if masked:
            payload = apply_mask(payload, key)
        return bool(b0 & 0x80), b0 & 0x0F, masked, payload

    def message(self):
        """(opcode, payload) of the next whole data message; control frames are returned too."""
        fin, op, masked, payload = self.frame()
        if op >= 8:
            return op, payload
        while not fin:
            fin, cont, masked, more = self.frame()
            payload += more
        return op, payload


def read_head(sock, pending=b""):
    """Reads up to the end of an HTTP head: (head bytes, bytes read past it)."""
    buf = pending
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"eof in head: {buf!r}")
        buf += chunk
    i = buf.index(b"\r\n\r\n") + 4
    return buf[:i], buf[i:]


def parse_head(head):
    """(first line, {lower-case name: [values]})"""
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return lines[0], headers


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        origin = self.server.origin
        sock = self.request
        sock.settimeout(30)
        pending = b""
        try:
            while True:
                head, pending = read_head(sock, pending)
                with origin.lock:
                    origin.heads.append(head)
                line, headers = parse_head(head)
                parts = line.split(" ")
                path = parts[1] if len(parts) > 1 else ""
                if path == "/plain":
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
                    continue
                if path == "/refuse":
                    sock.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 7\r\n"
                                 b"Content-Type: text/plain\r\n\r\nrefused")
                    continue
                if path == "/bad101":
                    sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
                                 b"Connection: Upgrade\r\n\r\n")
                    return
                key = headers.get("sec-websocket-key", [""])[0]
                upgrade = headers.get("upgrade", [""])[0].lower()
                if path not in ("/echo", "/slow", "/hello") or upgrade != "websocket" or not key:
                    sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
                    return
                if path == "/slow":
                    time.sleep(0.5)
                    sock.setblocking(False)
                    try:
                        while True:
                            early = sock.recv(65536)
                            if not early:
                                break
                            pending += early
                    except BlockingIOError:
                        pass
                    sock.setblocking(True)
                    sock.settimeout(30)
                    with origin.lock:
                        origin.early_bytes.append(pending)
                proto = headers.get("sec-websocket-protocol", [""])[0].split(",")[0].strip()
                resp = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                        b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
                        + accept_key(key).encode() + b"\r\n")
                if proto:
                    resp += b"Sec-WebSocket-Protocol: " + proto.encode() + b"\r\n"
                resp += b"\r\n"
                if path == "/hello":
                    resp += encode_frame(OP_TEXT, b"hi", mask=False)
                sock.sendall(resp)
                self._echo(sock, pending)
                return
        except (ConnectionError, OSError):
            return

    def _echo(self, sock, pending):
        origin = self.server.origin
        reader = FrameReader(sock, pending)
        while True:
            try:
                op, payload = reader.message()
            except (ConnectionError, OSError):
                return
            with origin.lock:
                origin.messages.append((op, payload))
            if op in (OP_TEXT, OP_BINARY):
                sock.sendall(encode_frame(op, payload, mask=False))
            elif op == OP_PING:
                sock.sendall(encode_frame(OP_PONG, payload, mask=False))
            elif op == OP_CLOSE:
                sock.sendall(encode_frame(OP_CLOSE, payload[:2], mask=False))
                return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class WsOrigin:
    def __init__(self):
        self.heads = []
        self.early_bytes = []
        self.messages = []
        self.lock = threading.Lock()
        self._server = None

    def start(self):
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.origin = self
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def ws_url(self, path="/echo", scheme="ws"):
        return f"{scheme}://127.0.0.1:{self.port}{path}"
