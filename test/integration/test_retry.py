"""A pooled origin connection that the origin drops just as it is reused: idempotent requests
are retried once on a new connection; others get a 502 (their bodies may have been consumed)."""
import socket
import threading

from helpers import RawConnection, basic_auth


class OneShotOrigin:
    """Answers the first request on each connection with a keep-alive response, then closes the
    connection when the next request arrives, without answering: a pooled connection that fails
    on reuse (the race the retry exists for, made deterministic)."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.answered = 0
        self.lock = threading.Lock()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_head(self, conn, buf):
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                return None, b""
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head, rest

    def _serve(self, conn):
        with conn:
            head, rest = self._read_head(conn, b"")
            if head is None:
                return
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                rest += conn.recv(65536)
            body = b"served"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            with self.lock:
                self.answered += 1
            # The next request on this connection is met with a close.
            self._read_head(conn, b"")

    def stop(self):
        self.stopped = True
        self.listener.close()


def request(s, origin, method="GET", body=b""):
    target = f"http://127.0.0.1:{origin.port}/x"
    head = (f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\n"
            f"Proxy-Authorization: {basic_auth(s.key)}\r\n")
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def test_idempotent_request_is_retried_on_a_new_connection(sluice):
    origin = OneShotOrigin()
    try:
        with RawConnection(sluice.proxy_addr) as c:
            c.send(request(sluice, origin))
            first = c.read_response()
            assert first.status == 200 and first.body == b"served", first
            c.send(request(sluice, origin))
            second = c.read_response()
            assert second.status == 200 and second.body == b"served", second
        assert sluice.stat("http1.http.rq_retry") == 1
        assert sluice.stat("upstream.pool_reuse") == 1, "the second request did not use the pool"
        assert origin.connections == 2 and origin.answered == 2
    finally:
        origin.stop()


def test_request_with_a_body_is_not_retried(sluice):
    origin = OneShotOrigin()
    try:
        with RawConnection(sluice.proxy_addr) as c:
            c.send(request(sluice, origin))
            assert c.read_response().status == 200
            c.send(request(sluice, origin, "POST", b"payload"))
            second = c.read_response()
            assert second.status == 502, second
        assert sluice.stat("http1.http.rq_retry") == 0
        assert origin.answered == 1, "the POST must not be sent twice"
    finally:
        origin.stop()
