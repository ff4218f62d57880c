"""End-to-end tests of sluice-origin over raw loopback sockets (byte-exact checks).

Usage: origin_test.py PATH_TO_SLUICE_ORIGIN
"""

import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ORIGIN = None
PATTERN = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_"


def expected_bytes(n):
    reps = n // len(PATTERN) + 1
    return (PATTERN * reps)[:n]


class Origin:
    def __init__(self, threads=1, extra=(), extra_lines=0):
        self.proc = subprocess.Popen([ORIGIN, "--listen", "127.0.0.1:0", "-t", str(threads),
                                      *extra], stdout=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()
        assert line.startswith("listening on 127.0.0.1:"), line
        self.port = int(line.strip().rsplit(":", 1)[1])
        # "sink listening on 127.0.0.1:P", "udp echo on ...": by their first word.
        self.ports = {}
        for _ in range(extra_lines):
            line = self.proc.stdout.readline().decode().strip()
            self.ports[line.split()[0]] = int(line.rsplit(":", 1)[1])

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return Client(s)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


class Client:
    """Reads HTTP/1.1 responses and counts every byte received."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.received = 0

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed")
        self.received += len(chunk)
        self.buf += chunk

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line_nl(self):
        while b"\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def response(self, head_only=False):
        status_line = self._line()
        parts = status_line.split(b" ", 2)
        assert parts[0] == b"HTTP/1.1", status_line
        status = int(parts[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            name, value = line.split(b":", 1)
            headers[name.strip().lower().decode()] = value.strip().decode()
        if status == 100:
            return self.response(head_only)
        if head_only:
            return status, headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():  # trailers
                        pass
                    break
                body += self._take(size)
                assert self._take(2) == b"\r\n"
            return status, headers, body
        return status, headers, self._take(int(headers["content-length"]))

    def closed(self):
        """True when the server closed (EOF or reset) with nothing more to read."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


def get(path, method=b"GET"):
    return method + b" " + path + b" HTTP/1.1\r\nHost: origin\r\n\r\n"


class OriginTest(unittest.TestCase):
    def setUp(self):
        self.origin = Origin()

    def tearDown(self):
        self.origin.stop()

    def test_bytes_sizes_keep_alive(self):
        c = self.origin.connect()
        for n in [0, 1, 63, 64, 65, 16384, 16385, 1048576, 3 * 1048576 + 7]:
            c.send(get(b"/bytes/%d" % n))
            status, headers, body = c.response()
            self.assertEqual(status, 200)
            self.assertEqual(headers["content-length"], str(n))
            self.assertEqual(len(body), n)
            self.assertEqual(body, expected_bytes(n))
        c.close()

    def test_pipelined_requests_answered_in_order(self):
        c = self.origin.connect()
        c.send(get(b"/bytes/1048576") + get(b"/bytes/5") + get(b"/nope") + get(b"/bytes/2"))
        self.assertEqual(c.response()[2], expected_bytes(1048576))
        self.assertEqual(c.response()[2], b"abcde")
        self.assertEqual(c.response()[0], 404)
        self.assertEqual(c.response()[2], b"ab")
        c.close()

    def test_many_pipelined_heads_across_blocks(self):
        # 3000 requests in one write: heads straddle the server's 16 KiB read blocks.
        c = self.origin.connect()
        c.send(b"".join(get(b"/bytes/%d" % (i % 7)) for i in range(3000)))
        for i in range(3000):
            self.assertEqual(c.response()[2], expected_bytes(i % 7))
        c.close()

    def test_head_sent_byte_by_byte(self):
        c = self.origin.connect()
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in get(b"/bytes/3"):
            c.send(bytes([b]))
        self.assertEqual(c.response()[2], b"abc")
        c.close()

    def test_client_abandons_huge_response(self):
        c = self.origin.connect()
        c.send(get(b"/bytes/1073741824"))
        c.response(head_only=True)
        c._take(1 << 20)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()  # reset while the server is mid-stream
        d = self.origin.connect()
        d.send(get(b"/bytes/2"))
        self.assertEqual(d.response()[2], b"ab")
        d.close()
        self.assertIsNone(self.origin.proc.poll())

    def test_head_bytes(self):
        c = self.origin.connect()
        c.send(get(b"/bytes/10", b"HEAD") + get(b"/bytes/3"))
        status, headers, _ = c.response(head_only=True)
        self.assertEqual((status, headers["content-length"]), (200, "10"))
        # The next response follows at once: HEAD sent no body.
        self.assertEqual(c.response()[2], b"abc")
        c.close()

    def test_bytes_bad_sizes(self):
        c = self.origin.connect()
        for path in [b"/bytes/1073741825", b"/bytes/99999999999", b"/bytes/1x", b"/bytes/-1"]:
            c.send(get(path))
            self.assertEqual(c.response()[0], 400, path)
        c.send(get(b"/bytes/1073741824", b"HEAD"))
        self.assertEqual(c.response(head_only=True)[1]["content-length"], "1073741824")
        c.close()

    def test_echo_content_length(self):
        c = self.origin.connect()
        rng = random.Random(1)
        for n in [0, 1, 5000, 300000]:
            body = bytes(rng.getrandbits(8) for _ in range(n))
            c.send(b"POST /echo HTTP/1.1\r\nHost: o\r\nContent-Length: %d\r\n\r\n" % n + body)
            status, headers, got = c.response()
            self.assertEqual(status, 200)
            self.assertEqual(headers["content-length"], str(n))
            self.assertEqual(got, body)
        c.close()

    def test_echo_large_streamed_with_backpressure(self):
        # 16 MiB: far above the write watermark, so reads must pause and resume.
        body = os.urandom(16 << 20)
        c = self.origin.connect()
        head = b"POST /echo HTTP/1.1\r\nHost: o\r\nContent-Length: %d\r\n\r\n" % len(body)
        sender = threading.Thread(target=lambda: c.send(head + body))
        sender.start()
        status, _, got = c.response()
        sender.join()
        self.assertEqual(status, 200)
        self.assertTrue(got == body)
        c.close()

    def test_echo_chunked(self):
        c = self.origin.connect()
        payload = os.urandom(70000)
        chunked = b""
        for piece in [payload[:1], payload[1:40000], payload[40000:]]:
            chunked += b"%x;ext=1\r\n" % len(piece) + piece + b"\r\n"
        chunked += b"0\r\nX-Trailer: t\r\n\r\n"
        req = b"POST /echo HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
        # Split at awkward places to exercise incremental decoding.
        c.send(req[:50])
        c.send(req[50:51])
        c.send(req[51:])
        status, headers, got = c.response()
        self.assertEqual(status, 200)
        self.assertEqual(headers["transfer-encoding"], "chunked")
        self.assertEqual(got, payload)
        # Keep-alive survives a chunked echo.
        c.send(get(b"/bytes/4"))
        self.assertEqual(c.response()[2], b"abcd")
        c.close()

    def test_echo_expect_continue(self):
        c = self.origin.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: o\r\nExpect: 100-continue\r\n"
               b"Content-Length: 3\r\n\r\n")
        self.assertEqual(c._line(), b"HTTP/1.1 100 Continue")
        self.assertEqual(c._line(), b"")
        c.send(b"xyz")
        self.assertEqual(c.response()[2], b"xyz")
        c.close()

    def test_echo_bad_chunked_aborts(self):
        c = self.origin.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"zz\r\n")
        status, _, _ = c.response(head_only=True)
        self.assertEqual(status, 200)
        self.assertTrue(c.closed())
        c.close()

    def test_not_found(self):
        c = self.origin.connect()
        for req in [get(b"/"), get(b"/bytes/"), get(b"/stats", b"DELETE"), get(b"/echo")]:
            c.send(req)
            self.assertEqual(c.response()[0], 404, req)
        # A 404 with a body closes: the body is not read.
        c.send(b"POST /other HTTP/1.1\r\nHost: o\r\nContent-Length: 3\r\n\r\nabc")
        status, headers, _ = c.response()
        self.assertEqual((status, headers["connection"]), (404, "close"))
        self.assertTrue(c.closed())
        c.close()

    def test_garbage_gets_400_and_close(self):
        for req in [b"garbage\r\n\r\n", b"GET /bytes/1 HTTP/1.1\r\nBad Header\r\n\r\n",
                    b"GET /bytes/1 HTTP/1.1\r\nHost: o\r\nContent-Length: 1\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"]:
            c = self.origin.connect()
            c.send(req)
            status, headers, _ = c.response()
            self.assertEqual(status, 400, req)
            self.assertEqual(headers["connection"], "close")
            self.assertTrue(c.closed())
            c.close()

    def test_oversized_head_gets_431(self):
        c = self.origin.connect()
        c.send(b"GET /bytes/1 HTTP/1.1\r\nHost: o\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
        self.assertEqual(c.response()[0], 431)
        self.assertTrue(c.closed())
        c.close()

    def test_http10_closes(self):
        c = self.origin.connect()
        c.send(b"GET /bytes/2 HTTP/1.0\r\n\r\n")
        status, headers, body = c.response()
        self.assertEqual((status, body, headers["connection"]), (200, b"ab", "close"))
        self.assertTrue(c.closed())
        c.close()

    def test_stats_match_traffic(self):
        c = self.origin.connect()
        sent = 0
        reqs = [get(b"/bytes/100000"), get(b"/nope"),
                b"POST /echo HTTP/1.1\r\nHost: o\r\nContent-Length: 4\r\n\r\nabcd"]
        for req in reqs:
            c.send(req)
            sent += len(req)
            c.response()
        self.assertEqual(c.buf, b"")
        received = c.received
        c.close()
        s = self.origin.connect()
        stats_req = get(b"/stats")
        s.send(stats_req)
        status, headers, body = s.response()
        self.assertEqual(headers["content-type"], "application/json")
        stats = json.loads(body)
        self.assertEqual(stats, {"requests": len(reqs) + 1, "bytes_sent": received,
                                 "bytes_received": sent + len(stats_req), "sink_bytes": 0,
                                 "source_bytes": 0, "ws_messages": 0, "ws_bytes": 0,
                                 "udp_packets": 0, "udp_bytes": 0})
        s.close()


def ws_frame(opcode, payload, fin=True, mask=b"\x01\x02\x03\x04"):
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_ws_frame(client):
    b0, b1 = client._take(2)
    assert b1 & 0x80 == 0, "server frames are unmasked"
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(client._take(2), "big")
    elif n == 127:
        n = int.from_bytes(client._take(8), "big")
    return b0, client._take(n)


class ExtrasTest(unittest.TestCase):
    """/ws, the TCP sink and source, the UDP echo and the TLS port, with their /stats counts."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="origin-test-")
        cls.cert = os.path.join(cls.tmp, "cert.pem")
        cls.key = os.path.join(cls.tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", cls.key, "-out", cls.cert], check=True,
                       capture_output=True)
        cls.origin = Origin(threads=2, extra=["--sink", "127.0.0.1:0", "--source", "127.0.0.1:0",
                                              "--udp-echo", "127.0.0.1:0", "--tls-listen",
                                              "127.0.0.1:0", "--tls-cert", cls.cert,
                                              "--tls-key", cls.key], extra_lines=4)

    @classmethod
    def tearDownClass(cls):
        cls.origin.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def stats(self):
        c = self.origin.connect()
        c.send(get(b"/stats"))
        out = json.loads(c.response()[2])
        c.close()
        return out

    def upgrade(self, path):
        """A connection upgraded to a WebSocket on `path`."""
        c = self.origin.connect()
        c.send(b"GET " + path + b" HTTP/1.1\r\nHost: o\r\nUpgrade: websocket\r\n"
               b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               b"Sec-WebSocket-Version: 13\r\n\r\n")
        status, headers, _ = c.response(head_only=True)
        self.assertEqual(status, 101)
        # RFC 6455 section 1.3's example key and accept value.
        self.assertEqual(headers["sec-websocket-accept"], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        return c

    def close_websocket(self, c):
        """Sends a close frame: it is answered, and the origin closes the connection."""
        c.send(ws_frame(0x8, b"\x03\xe8"))
        self.assertEqual(read_ws_frame(c), (0x88, b"\x03\xe8"))
        self.assertTrue(c.closed())
        c.close()

    def test_websocket_echo(self):
        before = self.stats()
        c = self.upgrade(b"/ws")
        for size in (0, 5, 125, 126, 70000):
            payload = bytes(random.getrandbits(8) for _ in range(size))
            # Sent in two pieces to cross reads.
            frame = ws_frame(0x2, payload)
            c.send(frame[:3])
            c.send(frame[3:])
            self.assertEqual(read_ws_frame(c), (0x82, payload))
        # A frame larger than one echo write, sent in pieces whose ends fall at every mask
        # position: the echo is unmasked word by word from wherever a read left off.
        payload = bytes(random.getrandbits(8) for _ in range(300007))
        frame = ws_frame(0x2, payload)
        for i in range(0, len(frame), 4097):
            c.send(frame[i:i + 4097])
        self.assertEqual(read_ws_frame(c), (0x82, payload))
        # Fragmented text message: each fragment echoed as it comes.
        c.send(ws_frame(0x1, b"hel", fin=False) + ws_frame(0x0, b"lo"))
        self.assertEqual(read_ws_frame(c), (0x01, b"hel"))
        self.assertEqual(read_ws_frame(c), (0x80, b"lo"))
        c.send(ws_frame(0x9, b"pi"))
        self.assertEqual(read_ws_frame(c), (0x8A, b"pi"))
        self.close_websocket(c)
        after = self.stats()
        self.assertEqual(after["ws_messages"] - before["ws_messages"], 7)
        self.assertEqual(after["ws_bytes"] - before["ws_bytes"],
                         5 + 125 + 126 + 70000 + 300007 + 5)

    def test_websocket_sink_acknowledges_each_message_and_echoes_nothing(self):
        before = self.stats()
        c = self.upgrade(b"/ws/sink")
        for size in (0, 126, 300007):
            frame = ws_frame(0x2, bytes(random.getrandbits(8) for _ in range(size)))
            for i in range(0, len(frame), 4097):
                c.send(frame[i:i + 4097])
            self.assertEqual(read_ws_frame(c), (0x82, b""))
        # A fragmented message is acknowledged once, at its last fragment; a ping still gets
        # its pong, in order.
        c.send(ws_frame(0x1, b"hel", fin=False) + ws_frame(0x0, b"lo") + ws_frame(0x9, b"pi"))
        self.assertEqual(read_ws_frame(c), (0x82, b""))
        self.assertEqual(read_ws_frame(c), (0x8A, b"pi"))
        self.close_websocket(c)
        after = self.stats()
        self.assertEqual(after["ws_messages"] - before["ws_messages"], 4)
        self.assertEqual(after["ws_bytes"] - before["ws_bytes"], 126 + 300007 + 5)

    def test_websocket_rejects_unmasked_and_bad_upgrades(self):
        c = self.origin.connect()
        c.send(b"GET /ws HTTP/1.1\r\nHost: o\r\n\r\n")
        self.assertEqual(c.response()[0], 400)
        c.close()
        c = self.origin.connect()
        c.send(b"GET /ws HTTP/1.1\r\nHost: o\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.assertEqual(c.response(head_only=True)[0], 101)
        c.send(b"\x82\x02ab")  # unmasked client frame: protocol error
        self.assertTrue(c.closed())
        c.close()

    def test_sink_and_source(self):
        before = self.stats()
        s = socket.create_connection(("127.0.0.1", self.origin.ports["sink"]), timeout=10)
        for n in (0, 1, 1 << 20):
            s.sendall(b"%d\n" % n + b"x" * n)
            self.assertEqual(Client(s)._line_nl(), b"%d" % n)
        s.close()
        src = Client(socket.create_connection(("127.0.0.1", self.origin.ports["source"]),
                                              timeout=10))
        for n in (5, 3 << 20):
            src.send(b"%d\n" % n)
            self.assertEqual(src._take(n), expected_bytes(n))
        self.assertEqual(src.buf, b"")
        src.send(b"nope\n")
        self.assertTrue(src.closed())
        src.close()
        after = self.stats()
        self.assertEqual(after["sink_bytes"] - before["sink_bytes"], 1 + (1 << 20))
        self.assertEqual(after["source_bytes"] - before["source_bytes"], 5 + (3 << 20))

    def test_bulk_payloads_are_dropped_in_the_kernel(self):
        # The sink's count and a /ws/sink data frame are read with MSG_TRUNC past the first
        # read: counted (payload and socket bytes) but never copied out, so the origin's reads
        # (rchar in /proc/<pid>/io: read and readv, not recv) grow by far less than they carry.
        def rchar():
            with open(f"/proc/{self.origin.proc.pid}/io") as f:
                return int(f.readline().split()[1])

        n = 16 << 20
        before = self.stats()
        read_before = rchar()
        s = socket.create_connection(("127.0.0.1", self.origin.ports["sink"]), timeout=10)
        s.sendall(b"%d\n" % n + b"x" * n)
        self.assertEqual(Client(s)._line_nl(), b"%d" % n)
        # The next count on the same connection is read the buffered way again.
        s.sendall(b"3\nabc")
        self.assertEqual(Client(s)._line_nl(), b"3")
        s.close()
        ws = self.upgrade(b"/ws/sink")
        # An all-zero mask leaves the payload as it is.
        ws.send(b"\x82\xff" + n.to_bytes(8, "big") + b"\0\0\0\0" + b"y" * n)
        self.assertEqual(read_ws_frame(ws), (0x82, b""))
        # Frames after the dropped one are parsed as before: a ping gets its pong.
        ws.send(ws_frame(0x9, b"pi"))
        self.assertEqual(read_ws_frame(ws), (0x8A, b"pi"))
        self.close_websocket(ws)
        read = rchar() - read_before
        after = self.stats()
        self.assertEqual(after["sink_bytes"] - before["sink_bytes"], n + 3)
        self.assertEqual(after["ws_bytes"] - before["ws_bytes"], n)  # data frames only
        self.assertGreaterEqual(after["bytes_received"] - before["bytes_received"], 2 * n)
        self.assertLess(read, n // 4)

    def test_sink_client_gone_mid_payload(self):
        before = self.stats()
        s = socket.create_connection(("127.0.0.1", self.origin.ports["sink"]), timeout=10)
        s.sendall(b"%d\n" % (8 << 20) + b"x" * (1 << 20))
        time.sleep(0.2)
        s.close()
        # The origin drops the connection and goes on serving.
        s = socket.create_connection(("127.0.0.1", self.origin.ports["sink"]), timeout=10)
        s.sendall(b"2\nok")
        self.assertEqual(Client(s)._line_nl(), b"2")
        s.close()
        after = self.stats()
        self.assertEqual(after["sink_bytes"] - before["sink_bytes"], (1 << 20) + 2)

    def test_udp_echo(self):
        before = self.stats()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.settimeout(5)
        for payload in (b"a", b"hello" * 100, b"z" * 60000):
            u.sendto(payload, ("127.0.0.1", self.origin.ports["udp"]))
            self.assertEqual(u.recvfrom(65536)[0], payload)
        u.close()
        after = self.stats()
        self.assertEqual(after["udp_packets"] - before["udp_packets"], 3)
        self.assertEqual(after["udp_bytes"] - before["udp_bytes"], 1 + 500 + 60000)

    def test_tls_port(self):
        ctx = ssl.create_default_context(cafile=self.cert)
        raw = socket.create_connection(("127.0.0.1", self.origin.ports["tls"]), timeout=10)
        c = Client(ctx.wrap_socket(raw, server_hostname="127.0.0.1"))
        for n in (10, 100000):
            c.send(get(b"/bytes/%d" % n))
            self.assertEqual(c.response()[2], expected_bytes(n))
        c.close()


class MultiThreadTest(unittest.TestCase):
    def test_threads_and_summed_stats(self):
        origin = Origin(threads=4)
        try:
            clients = [origin.connect() for _ in range(16)]
            for c in clients:
                c.send(get(b"/bytes/1000"))
            for c in clients:
                self.assertEqual(c.response()[2], expected_bytes(1000))
            total = sum(c.received for c in clients)
            for c in clients:
                c.close()
            # A worker counts what it sent once its send call returns; by then the client may
            # have the bytes and another worker may have answered /stats (a loaded machine
            # preempts the first one in between). The sum catches up.
            s = origin.connect()
            deadline = time.monotonic() + 10
            asked = 0
            while True:
                expected = total + s.received  # earlier answers to /stats count too
                s.send(get(b"/stats"))
                asked += 1
                stats = json.loads(s.response()[2])
                if stats["bytes_sent"] == expected or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(stats["requests"], 16 + asked)
            self.assertEqual(stats["bytes_sent"], expected)
            s.close()
        finally:
            origin.stop()

    def test_bad_command_lines(self):
        for args in [[], ["--listen"], ["--listen", "nohost"], ["--listen", "127.0.0.1:0", "-t", "0"],
                     ["--bogus"], ["--listen", "127.0.0.1:0", "--tls-cert", "x"],
                     ["--listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0"]]:
            rc = subprocess.run([ORIGIN] + args, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=10).returncode
            self.assertEqual(rc, 2, args)


if __name__ == "__main__":
    ORIGIN = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
