"""Slow and greedy clients against the real binary: head and body deadlines, size limits,
idle timeouts, connection limits and running out of file descriptors."""

import os
import resource
import selectors
import socket
import threading
import time
import uuid

from helpers import RawConnection, basic_auth


def limits(**values):
    """A short-form `limits:` section."""
    return "limits:\n" + "".join(f"  {k}: {v}\n" for k, v in values.items())


def auth_line(s):
    return f"Proxy-Authorization: {basic_auth(s.key)}\r\n"


def get_request(s, origin, path="/hello", extra=""):
    return (f"GET {origin.url(path)} HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\n"
            f"{auth_line(s)}{extra}\r\n").encode()


def connect_from(addr, source="127.0.0.1", timeout=5):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(timeout)
    sock.connect(addr)
    return sock


def wrap(sock):
    """A RawConnection (response parser) over an already connected socket."""
    c = RawConnection.__new__(RawConnection)
    c.sock, c.buf = sock, b""
    return c


def timed_get(s, origin, path="/hello", source="127.0.0.1"):
    """One request on a new connection; returns (status, seconds)."""
    t0 = time.monotonic()
    with wrap(connect_from(s.proxy_addr, source, timeout=10)) as c:
        c.send(get_request(s, origin, path))
        resp = c.read_response()
    return resp.status, time.monotonic() - t0


def refused_with_503(sock, wait=3.0):
    """True if the proxy answers 503 and closes without being asked anything."""
    sock.settimeout(wait)
    data = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False
    return data.startswith(b"HTTP/1.1 503 ") and b"Connection: close\r\n" in data


def still_open(sock, wait=0.5):
    """True if the proxy neither closed the socket nor wrote to it within `wait`."""
    sock.settimeout(wait)
    try:
        sock.recv(1)  # any answer, EOF included, means it was not left alone
    except socket.timeout:
        return True
    except OSError:
        pass
    return False


# ---------------------------------------------------------------------------------------------
# request head: deadline, size, header count


def test_slowloris_is_cut_at_the_head_deadline_while_others_are_served(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(request_head_timeout="2s",
                                        max_connections_per_client=1000))
    n = 250
    head = get_request(s, py_origin, extra="X-Slow: " + "a" * 200 + "\r\n")
    sel = selectors.DefaultSelector()
    conns = {}
    start = time.monotonic()
    for i in range(n):
        sock = socket.create_connection(s.proxy_addr, timeout=5)
        sock.setblocking(False)
        conns[sock] = {"opened": time.monotonic(), "sent": 0, "data": b"", "closed": None}
        sel.register(sock, selectors.EVENT_READ)
    opened = time.monotonic() - start

    # A well-behaved client keeps making requests while the attack runs.
    latencies, errors = [], []
    stop = threading.Event()

    def normal_client():
        while not stop.is_set():
            try:
                status, seconds = timed_get(s, py_origin)
                latencies.append(seconds)
                if status != 200:
                    errors.append(status)
            except OSError as e:
                errors.append(repr(e))
            time.sleep(0.05)

    t = threading.Thread(target=normal_client, daemon=True)
    t.start()
    next_drip = time.monotonic()
    deadline = time.monotonic() + 8
    try:
        while time.monotonic() < deadline and any(v["closed"] is None for v in conns.values()):
            now = time.monotonic()
            if now >= next_drip:
                # One more byte on every open connection, every 0.5 s: the head never ends.
                for sock, v in conns.items():
                    if v["closed"] is None and v["sent"] < len(head) - 2:
                        try:
                            sock.send(head[v["sent"]:v["sent"] + 1])
                            v["sent"] += 1
                        except (BlockingIOError, InterruptedError):
                            pass
                        except OSError:
                            pass  # the proxy closed it; the read side records when
                next_drip = now + 0.5
            for key, _ in sel.select(timeout=0.05):
                sock = key.fileobj
                v = conns[sock]
                try:
                    chunk = sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if chunk:
                    v["data"] += chunk
                    continue
                v["closed"] = time.monotonic()
                sel.unregister(sock)
    finally:
        stop.set()
        t.join(10)
        for sock in conns:
            sock.close()
        sel.close()

    alive = [v for v in conns.values() if v["closed"] is None]
    assert not alive, f"{len(alive)} of {n} dribbling connections still open after 8 s"
    lifetimes = sorted(v["closed"] - v["opened"] for v in conns.values())
    assert lifetimes[0] >= 1.8, \
        f"a connection was cut at {lifetimes[0]:.2f}s, before the 2s deadline"
    assert lifetimes[-1] <= 2.0 + opened + 1.5, \
        f"a connection lived {lifetimes[-1]:.2f}s, the deadline is 2s"
    got_408 = sum(1 for v in conns.values() if v["data"].startswith(b"HTTP/1.1 408 "))
    assert got_408 >= n * 0.9, f"only {got_408} of {n} cut connections read a 408"
    assert all(v["sent"] >= 3 for v in conns.values()), "the attack did not dribble"
    assert s.wait_stat("http1.http.rq_head_timeout", lambda v: v >= n) == n

    assert not errors, f"the normal client failed during the attack: {errors[:5]}"
    assert len(latencies) >= 20, f"the normal client made only {len(latencies)} requests"
    assert max(latencies) < 1.0, \
        f"the normal client waited {max(latencies):.2f}s for a response during the attack"


def test_request_head_over_the_size_limit_gets_431(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(max_request_head_bytes=4096))
    before = len(py_origin.requests)
    with RawConnection(s.proxy_addr) as c:
        c.send(get_request(s, py_origin, extra="X-Big: " + "b" * 4200 + "\r\n"))
        resp = c.read_response()
        assert resp.status == 431, str(resp)
        assert c.is_closed_by_peer(), "connection left open after a 431"
    # Just below the limit passes.
    with RawConnection(s.proxy_addr) as c:
        req = get_request(s, py_origin, extra="X-Big: " + "b" * 3000 + "\r\n")
        assert len(req) < 4096
        c.send(req)
        assert c.read_response().status == 200
    assert len(py_origin.requests) == before + 1
    assert s.stat("http1.http.rq_rejected") == 1


def test_too_many_headers_get_431(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(max_request_headers=20))
    # Host and Proxy-Authorization count: 18 more make 20 (the limit), 19 more make 21.
    fill = lambda k: "".join(f"X-H{i}: v\r\n" for i in range(k))  # noqa: E731
    with RawConnection(s.proxy_addr) as c:
        c.send(get_request(s, py_origin, extra=fill(18)))
        assert c.read_response().status == 200
    with RawConnection(s.proxy_addr) as c:
        c.send(get_request(s, py_origin, extra=fill(19)))
        resp = c.read_response()
        assert resp.status == 431, str(resp)
        assert c.is_closed_by_peer()
    assert s.stat("http1.http.rq_rejected") == 1


def test_idle_keep_alive_connection_is_closed(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(idle_timeout="1s"))
    with RawConnection(s.proxy_addr) as c:
        c.send(get_request(s, py_origin))
        assert c.read_response().status == 200
        t0 = time.monotonic()
        assert c.is_closed_by_peer(wait=5), "idle keep-alive connection not closed"
        waited = time.monotonic() - t0
    assert 0.8 <= waited <= 2.5, f"closed after {waited:.2f}s idle, want about 1s"
    assert s.wait_stat("http1.http.downstream_idle_timeout", lambda v: v >= 1) == 1


# ---------------------------------------------------------------------------------------------
# request body: size and stalls


def post_head(s, origin, path, framing):
    return (f"POST {origin.url(path)} HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\n"
            f"{auth_line(s)}{framing}\r\n").encode()


def seen_by_origin(origin, marker):
    return [r for r in origin.requests if marker in r[1]]


def test_body_over_the_limit_gets_413_and_reaches_no_origin(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(max_request_body_bytes=1000))
    marker = uuid.uuid4().hex
    with RawConnection(s.proxy_addr) as c:
        c.send(post_head(s, py_origin, f"/echo?big={marker}", "Content-Length: 1001\r\n"))
        resp = c.read_response()
        assert resp.status == 413, str(resp)
        assert c.is_closed_by_peer(), "connection left open after a 413"
    assert s.stat("http1.http.rq_body_too_large") == 1
    assert s.stat("upstream.cx_connect_total") == 0, "a refused body made an origin connection"
    # At the limit passes, whole.
    with RawConnection(s.proxy_addr) as c:
        c.send(post_head(s, py_origin, f"/echo?ok={marker}", "Content-Length: 1000\r\n")
               + b"x" * 1000)
        resp = c.read_response()
        assert resp.status == 200 and resp.body == b"x" * 1000, str(resp)
    time.sleep(0.2)
    assert not seen_by_origin(py_origin, f"big={marker}"), "the origin saw the refused request"
    assert len(seen_by_origin(py_origin, f"ok={marker}")) == 1


def test_chunked_body_growing_past_the_limit_gets_413(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(max_request_body_bytes=1000))
    # Whole in the first packet: refused before anything is sent upstream.
    with RawConnection(s.proxy_addr) as c:
        c.send(post_head(s, py_origin, "/echo?one", "Transfer-Encoding: chunked\r\n")
               + b"3e9\r\n" + b"y" * 1001 + b"\r\n0\r\n\r\n")
        resp = c.read_response()
        assert resp.status == 413, str(resp)
        assert c.is_closed_by_peer()
    # Growing over several writes: the first chunks go out, the one that crosses the limit
    # does not, and the client gets 413 since the origin has not answered.
    with RawConnection(s.proxy_addr) as c:
        c.send(post_head(s, py_origin, "/echo?two", "Transfer-Encoding: chunked\r\n")
               + b"258\r\n" + b"z" * 600 + b"\r\n")
        time.sleep(0.3)
        c.send(b"258\r\n" + b"z" * 600 + b"\r\n")
        resp = c.read_response()
        assert resp.status == 413, str(resp)
        assert c.is_closed_by_peer()
    # Chunk framing does not count: exactly 1000 payload bytes in many chunks pass.
    with RawConnection(s.proxy_addr) as c:
        body = b"".join(b"a\r\n" + b"c" * 10 + b"\r\n" for _ in range(100)) + b"0\r\n\r\n"
        c.send(post_head(s, py_origin, "/echo?three", "Transfer-Encoding: chunked\r\n") + body)
        resp = c.read_response()
        assert resp.status == 200 and resp.body == b"c" * 1000, str(resp)
    assert s.stat("http1.http.rq_body_too_large") == 2
    assert not seen_by_origin(py_origin, "/echo?one")


def test_stalled_upload_is_cut_after_the_body_timeout(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(request_body_timeout="1s"))
    with RawConnection(s.proxy_addr) as c:
        c.send(post_head(s, py_origin, "/echo?stall", "Content-Length: 100\r\n") + b"x" * 10)
        t0 = time.monotonic()
        resp = c.read_response()
        waited = time.monotonic() - t0
        assert resp.status == 408, str(resp)
        assert c.is_closed_by_peer()
    assert 0.8 <= waited <= 2.5, f"cut after {waited:.2f}s of silence, want about 1s"
    assert s.stat("http1.http.rq_body_timeout") == 1
    assert s.stat("http1.http.upstream_rs_timeout") == 0

    # A slow upload that keeps moving is not cut, although it lasts longer than the timeout.
    with RawConnection(s.proxy_addr) as c:
        c.send(post_head(s, py_origin, "/echo?slow", "Content-Length: 50\r\n"))
        for _ in range(5):
            time.sleep(0.5)
            c.send(b"s" * 10)
        resp = c.read_response()
        assert resp.status == 200 and resp.body == b"s" * 50, str(resp)
    assert s.stat("http1.http.rq_body_timeout") == 1


def test_origin_that_stops_reading_the_body_is_the_origins_timeout(start_sluice):
    # An origin that accepts and never reads: the proxy's buffers fill, it stops reading the
    # client, and the silence that follows is not the client's fault.
    origin = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    origin.bind(("127.0.0.1", 0))
    origin.listen(8)
    port = origin.getsockname()[1]
    held = []
    accepting = threading.Thread(target=lambda: held.append(origin.accept()[0]), daemon=True)
    accepting.start()
    s = start_sluice(extra_short=limits(request_body_timeout="1s"))
    total = 256 << 20
    c = RawConnection(s.proxy_addr, timeout=20)
    try:
        c.send((f"POST http://127.0.0.1:{port}/sink HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"{auth_line(s)}Content-Length: {total}\r\n\r\n").encode())

        def upload():
            try:
                block = b"u" * (1 << 20)
                for _ in range(total >> 20):
                    c.sock.sendall(block)
            except OSError:
                pass  # cut off, as expected

        t = threading.Thread(target=upload, daemon=True)
        t.start()
        resp = c.read_response()
        assert resp.status == 504, str(resp)
    finally:
        c.close()
        origin.close()
        for h in held:
            h.close()
    assert s.stat("http1.http.upstream_rs_timeout") == 1
    assert s.stat("http1.http.rq_body_timeout") == 0


# ---------------------------------------------------------------------------------------------
# tunnels


def test_silent_connect_tunnel_is_closed(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(tunnel_idle_timeout="1s"))
    target = f"127.0.0.1:{py_origin.port}"
    with RawConnection(s.proxy_addr) as c:
        c.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth_line(s)}\r\n".encode())
        assert c.read_response("CONNECT").status == 200
        # Traffic keeps it open past the timeout...
        for _ in range(3):
            time.sleep(0.6)
            c.send(f"GET /hello HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            assert c.read_response().status == 200
        # ...silence closes it.
        t0 = time.monotonic()
        assert c.is_closed_by_peer(wait=5), "silent tunnel not closed"
        waited = time.monotonic() - t0
    assert 0.8 <= waited <= 2.5, f"tunnel closed after {waited:.2f}s of silence, want about 1s"
    assert s.wait_stat("http1.http.tunnel_idle_timeout", lambda v: v >= 1) == 1


# ---------------------------------------------------------------------------------------------
# connection limits


def test_max_connections(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(max_connections=20))
    socks = [connect_from(s.proxy_addr) for _ in range(20)]
    try:
        assert s.wait_stat("listener.http.downstream_cx_active", lambda v: v == 20) == 20
        extra = connect_from(s.proxy_addr)
        assert refused_with_503(extra), "the 21st connection was not refused with a 503"
        extra.close()
        assert s.stat("listener.http.downstream_cx_overflow") == 1
        assert all(still_open(x, 0.1) for x in socks), "an admitted connection was closed"
        # Another address is no exception: the limit is the listener's.
        other = connect_from(s.proxy_addr, "127.0.0.2")
        assert refused_with_503(other)
        other.close()
        assert s.stat("listener.http.downstream_cx_overflow") == 2

        for x in socks[:5]:
            x.close()
        del socks[:5]
        assert s.wait_stat("listener.http.downstream_cx_active", lambda v: v == 15) == 15
        fresh = [connect_from(s.proxy_addr) for _ in range(5)]
        socks += fresh
        assert all(still_open(x) for x in fresh), "connections under the limit were refused"
        c = wrap(fresh[0])
        c.sock.settimeout(5)
        c.send(get_request(s, py_origin))
        assert c.read_response().status == 200
        assert s.stat("listener.http.downstream_cx_overflow") == 2
        assert s.stat("listener.http.downstream_cx_active") == 20
    finally:
        for x in socks:
            x.close()
    assert s.wait_stat("listener.http.downstream_cx_active", lambda v: v == 0) == 0


def test_max_connections_per_client(start_sluice, py_origin):
    s = start_sluice(workers=2, extra_short=limits(max_connections_per_client=5))
    mine = [connect_from(s.proxy_addr, "127.0.0.1") for _ in range(5)]
    others = []
    try:
        assert s.wait_stat("listener.http.downstream_cx_active", lambda v: v == 5) == 5
        # Whichever worker accepts it, the sixth from the same address is refused.
        for _ in range(3):
            sixth = connect_from(s.proxy_addr, "127.0.0.1")
            assert refused_with_503(sixth), "a sixth connection from one address was admitted"
            sixth.close()
        assert s.stat("listener.http.downstream_cx_per_client_overflow") == 3
        assert s.stat("listener.http.downstream_cx_overflow") == 0
        # Other clients are unaffected: five each from two more addresses, and they work.
        for source in ("127.0.0.2", "127.0.0.3"):
            for _ in range(5):
                others.append(connect_from(s.proxy_addr, source))
        assert all(still_open(x, 0.2) for x in others)
        for source in ("127.0.0.2", "127.0.0.3"):
            assert timed_get(s, py_origin, source=source)[0] == 503, \
                f"{source} has 5 open already: its sixth must be refused"
        status, _ = timed_get(s, py_origin, source="127.0.0.4")
        assert status == 200
        # Closing one of the first client's connections makes room for exactly one more.
        mine.pop().close()
        assert s.wait_stat("listener.http.downstream_cx_active", lambda v: v == 14) == 14
        status, _ = timed_get(s, py_origin, source="127.0.0.1")
        assert status == 200
        assert s.stat("listener.http.downstream_cx_per_client_overflow") == 5
    finally:
        for x in mine + others:
            x.close()


# ---------------------------------------------------------------------------------------------
# out of file descriptors


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_accept_backs_off_when_out_of_descriptors_and_recovers(start_sluice, py_origin):
    s = start_sluice(extra_short=limits(max_connections_per_client=1000))
    pid = s.proc.pid
    time.sleep(0.3)  # the readiness check's admin connection closes
    # Leave room for 20 client connections, then take the process's descriptors away.
    limit = open_fds(pid) + 20
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
    clients = []
    try:
        for _ in range(60):
            # The kernel completes the handshake from the backlog even when sluice cannot accept.
            clients.append(socket.create_connection(s.proxy_addr, timeout=5))
        time.sleep(0.5)
        assert open_fds(pid) <= limit
        # Out of descriptors, accept is retried every 100 ms, not in a busy loop.
        cpu0 = cpu_seconds(pid)
        time.sleep(1.0)
        burnt = cpu_seconds(pid) - cpu0
        assert burnt < 0.3, f"sluice burnt {burnt:.2f}s of CPU in 1s while out of descriptors"
        log = s.log()
        assert "Too many open files" in log, f"EMFILE not logged:\n{log[-2000:]}"
        # Once per streak of failures, not every 100 ms (that would be 10 lines or more by now).
        assert log.count("Too many open files") <= 3, "the back-off floods the log"
    finally:
        for c in clients:
            c.close()
    # The descriptors come back as the clients leave. No new connection arrives to signal the
    # listener again: the retry timer alone must drain the 40 left in the backlog.
    assert s.wait_stat("listener.http.downstream_cx_total", lambda v: v >= 60, timeout=10) >= 60
    assert s.stat("listener.http.downstream_accept_error") >= 1
    deadline = time.monotonic() + 10
    status = None
    while time.monotonic() < deadline:
        try:
            status, seconds = timed_get(s, py_origin)
            if status == 200:
                break
        except OSError:
            pass
        time.sleep(0.2)
    assert status == 200, "sluice does not accept again after running out of descriptors"
    assert "accepting again after" in s.log()


def test_close_flush_timeout_cuts_a_client_that_stops_reading(start_sluice, sluice_origin):
    """A response with Connection: close that its client never reads: once the whole response
    is in sluice's buffer, the close waits close_flush_timeout for the client to take it, then
    closes with the rest unsent, counted."""
    s = start_sluice(extra_short=limits(close_flush_timeout="400ms"))
    # More than the kernel holds for sluice's socket (its send buffer grows to tcp_wmem's
    # largest on loopback), by less than the connection's 1 MiB high watermark: the whole
    # response is read from the origin, and half a MiB of it waits in sluice.
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        size = int(f.read().split()[2]) + 512 * 1024
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # the client takes little
    sock.settimeout(10)
    sock.connect(s.proxy_addr)
    assert s.stat("server.close_flush_timeouts") == 0
    sock.sendall(f"GET {sluice_origin.url}/bytes/{size} HTTP/1.1\r\n"
                 f"Host: 127.0.0.1:{sluice_origin.port}\r\n{auth_line(s)}"
                 f"Connection: close\r\n\r\n".encode())
    t0 = time.monotonic()
    while s.stat("server.close_flush_timeouts") == 0 and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    assert s.stat("server.close_flush_timeouts") == 1, "the close never gave up"
    assert elapsed >= 0.35, f"the close gave up after {elapsed:.2f}s, before its 400ms"
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    sock.close()
    assert got.startswith(b"HTTP/1.1 200"), got[:100]
    assert len(got) < size, "the whole response arrived: nothing was left unsent"


def test_a_client_that_stops_reading_mid_response_is_cut_as_the_clients(start_sluice,
                                                                        sluice_origin):
    """A keep-alive client that stops reading a large response: sluice's buffer fills, the
    origin is held back, and at response_timeout the response is cut and counted as the
    client's (downstream_rs_timeout), not as an origin that did not answer."""
    s = start_sluice(router={"response_timeout": "1s"})
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.settimeout(10)
    sock.connect(s.proxy_addr)
    sock.sendall(f"GET {sluice_origin.url}/bytes/{64 << 20} HTTP/1.1\r\n"
                 f"Host: 127.0.0.1:{sluice_origin.port}\r\n{auth_line(s)}\r\n".encode())
    t0 = time.monotonic()
    while s.stat("http1.http.downstream_rs_timeout") == 0 and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert s.stat("http1.http.downstream_rs_timeout") == 1, "the stalled response was never cut"
    assert s.stat("http1.http.upstream_rs_timeout") == 0, "the client's stall counted as the origin's"
    got = 0
    try:
        while chunk := sock.recv(1 << 20):
            got += len(chunk)
    except ConnectionResetError:
        pass
    sock.close()
    assert 0 < got < 64 << 20, f"{got} bytes: the response was not cut"
