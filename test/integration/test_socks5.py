"""SOCKS5 (RFC 1928, RFC 1929) end to end: curl through the SOCKS port, raw-socket clients for
every reply code, UDP ASSOCIATE against a local UDP echo server, BIND, the deadlines, and wrong
keys counting toward a ban. Loopback only."""

import socket
import struct
import threading
import time

import pytest

from helpers import (SilentPort, basic_auth, closed_port_socket, curl, free_port, raw_request,
                     read_all)
from origins import ipv6_loopback_works
from sluice_proc import find_typed_configs

WRONG = "not-the-key-" + "x" * 20

# Reply codes (RFC 1928 section 6).
SUCCEEDED = 0x00
GENERAL_FAILURE = 0x01
NOT_ALLOWED = 0x02
HOST_UNREACHABLE = 0x04
CONNECTION_REFUSED = 0x05
TTL_EXPIRED = 0x06
COMMAND_NOT_SUPPORTED = 0x07
ADDRESS_TYPE_NOT_SUPPORTED = 0x08

CONNECT, BIND, UDP_ASSOCIATE = 1, 2, 3


# ---------------------------------------------------------------------------------------------
# a raw SOCKS5 client


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes: {data!r}")
        data += chunk
    return data


def encode_addr(host, port):
    """ATYP DST.ADDR DST.PORT for a literal IPv4/IPv6 address or a domain name."""
    try:
        return b"\x01" + socket.inet_pton(socket.AF_INET, host) + struct.pack("!H", port)
    except OSError:
        pass
    try:
        return b"\x04" + socket.inet_pton(socket.AF_INET6, host) + struct.pack("!H", port)
    except OSError:
        pass
    name = host.encode()
    return b"\x03" + bytes([len(name)]) + name + struct.pack("!H", port)


def read_addr(sock):
    atyp = recv_exact(sock, 1)[0]
    if atyp == 1:
        host = socket.inet_ntop(socket.AF_INET, recv_exact(sock, 4))
    elif atyp == 4:
        host = socket.inet_ntop(socket.AF_INET6, recv_exact(sock, 16))
    elif atyp == 3:
        host = recv_exact(sock, recv_exact(sock, 1)[0]).decode()
    else:
        raise AssertionError(f"reply with ATYP {atyp}")
    return host, struct.unpack("!H", recv_exact(sock, 2))[0]


def parse_udp(datagram):
    """(frag, host, port, payload) of a SOCKS UDP datagram."""
    assert datagram[:2] == b"\0\0", datagram[:10]
    frag, atyp = datagram[2], datagram[3]
    if atyp == 1:
        host, rest = socket.inet_ntop(socket.AF_INET, datagram[4:8]), datagram[8:]
    elif atyp == 4:
        host, rest = socket.inet_ntop(socket.AF_INET6, datagram[4:20]), datagram[20:]
    else:
        n = datagram[4]
        host, rest = datagram[5:5 + n].decode(), datagram[5 + n:]
    return frag, host, struct.unpack("!H", rest[:2])[0], rest[2:]


class Socks5Client:
    def __init__(self, addr, timeout=5):
        self.sock = socket.create_connection(addr[:2], timeout=timeout)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def greet(self, methods=(0x02,)):
        self.sock.sendall(bytes([5, len(methods), *methods]))
        ver, method = recv_exact(self.sock, 2)
        assert ver == 5
        return method

    def auth(self, password, user="user"):
        u, p = user.encode(), password.encode()
        self.sock.sendall(bytes([1, len(u)]) + u + bytes([len(p)]) + p)
        ver, status = recv_exact(self.sock, 2)
        assert ver == 1
        return status

    def login(self, key):
        assert self.greet() == 0x02
        assert self.auth(key) == 0, "the right key was refused"

    def request(self, cmd, host, port):
        self.sock.sendall(bytes([5, cmd, 0]) + encode_addr(host, port))
        return self.reply()

    def reply(self):
        ver, rep, rsv = recv_exact(self.sock, 3)
        assert ver == 5 and rsv == 0
        return rep, read_addr(self.sock)

    def closed_by_peer(self, timeout=5):
        """True when the server closes the connection (EOF or reset) within timeout."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


# ---------------------------------------------------------------------------------------------
# local servers


class UdpEcho:
    """Echoes each datagram to its sender; remembers who sent what."""

    def __init__(self, host="127.0.0.1"):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = []
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop:
            try:
                data, peer = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            self.received.append((data, peer))
            self.sock.sendto(b"echo:" + data, peer)

    def stop(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def udp_echo():
    e = UdpEcho()
    yield e
    e.stop()


@pytest.fixture
def start_socks(start_sluice):
    """start_socks(patch_socks5=None, allow_private=True): sluice with a SOCKS5 port.

    patch_socks5 (a dict) updates the Socks5Config of the full form; allow_private=False turns
    the destination guard's loopback opening off."""

    def start(patch_socks5=None, allow_private=True, extra_short="", host="127.0.0.1",
              router=None):
        port = free_port()
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        extra = f"socks5:\n  listen: \"{listen}\"\n" + extra_short

        def patch(full):
            socks = find_typed_configs(full, ".Socks5Config")
            assert socks, "the short form made no Socks5Config"
            if patch_socks5:
                for c in socks:
                    c.update(patch_socks5)
            if not allow_private:
                for g in find_typed_configs(full, ".DestGuardConfig"):
                    g["allow_private"] = False

        needs_full = patch_socks5 is not None or not allow_private
        s = start_sluice(extra_short=extra, patch=patch if needs_full else None, router=router)
        s.socks5_port = port
        s.socks5_addr = (host, port)
        return s

    return start


@pytest.fixture
def socks(start_socks):
    return start_socks()


# ---------------------------------------------------------------------------------------------
# curl


def test_curl_socks5_hostname_resolved_by_sluice(socks, py_origin):
    r = curl("--socks5-hostname", f"user:{socks.key}@127.0.0.1:{socks.socks5_port}",
             f"http://localhost:{py_origin.port}/hello")
    assert r.returncode == 0, r.describe()
    assert r.stdout == b"hello from the python origin\n", r.describe()
    assert socks.stat("socks5.socks5.rq_connect") == 1
    assert socks.stat("socks5.socks5.reply_succeeded") == 1
    assert socks.stat("socks5.socks5.auth_ok") == 1
    assert socks.stat("auth.allowed") == 1


def test_curl_socks5_client_side_resolution(socks, py_origin):
    r = curl("--socks5", f"user:{socks.key}@127.0.0.1:{socks.socks5_port}",
             py_origin.url("/hello"), py_origin.url("/hello"))
    assert r.returncode == 0, r.describe()
    assert r.stdout == b"hello from the python origin\n" * 2, r.describe()
    assert socks.stat("socks5.socks5.rq_connect") >= 1


def test_curl_wrong_key_is_refused(socks, py_origin):
    before = len(py_origin.requests)
    r = curl("--socks5-hostname", f"user:{WRONG}@127.0.0.1:{socks.socks5_port}",
             py_origin.url("/hello"))
    assert r.returncode != 0, r.describe()
    assert socks.stat("socks5.socks5.auth_failed") == 1
    assert socks.stat("auth.denied_invalid") == 1
    assert len(py_origin.requests) == before, "a refused client reached the origin"


def test_curl_without_credentials_is_refused_when_keys_exist(socks, py_origin):
    r = curl("--socks5-hostname", f"127.0.0.1:{socks.socks5_port}", py_origin.url("/hello"))
    assert r.returncode != 0, r.describe()
    assert socks.stat("socks5.socks5.no_acceptable_method") == 1
    # The raw exchange: only "no authentication" offered -> 0xFF, then the server closes.
    with Socks5Client(socks.socks5_addr) as c:
        assert c.greet(methods=(0x00,)) == 0xFF
        assert c.closed_by_peer()


def test_pysocks_client(socks, py_origin):
    socks_mod = pytest.importorskip("socks")
    s = socks_mod.socksocket()
    s.set_proxy(socks_mod.SOCKS5, "127.0.0.1", socks.socks5_port, rdns=True, username="u",
                password=socks.key)
    s.settimeout(5)
    s.connect(("localhost", py_origin.port))
    s.sendall(b"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    data = read_all(s)
    s.close()
    assert data.startswith(b"HTTP/1.0 200") or data.startswith(b"HTTP/1.1 200"), data[:200]
    assert data.endswith(b"hello from the python origin\n")


def test_wrong_keys_count_toward_a_ban_like_http(socks, py_origin):
    for i in range(5):
        with Socks5Client(socks.socks5_addr) as c:
            assert c.greet() == 0x02
            assert c.auth(WRONG) != 0, f"wrong key #{i + 1} accepted"
            assert c.closed_by_peer()
    assert socks.stat("bans.failures") == 5
    assert socks.stat("bans.banned") == 1
    # Banned: both ports close new connections at accept, before a byte.
    for addr in (socks.socks5_addr, socks.proxy_addr):
        sock = socket.create_connection(addr, timeout=5)
        try:
            sock.sendall(b"\x05\x01\x02")
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(3)
        try:
            assert sock.recv(100) == b"", f"banned client got bytes from {addr}"
        except ConnectionResetError:
            pass
        sock.close()
    # The right key does not help a banned client either.
    r = curl("--socks5", f"user:{socks.key}@127.0.0.1:{socks.socks5_port}",
             py_origin.url("/hello"))
    assert r.returncode != 0, r.describe()


# ---------------------------------------------------------------------------------------------
# reply codes


def connect_reply(s, host, port, atyp_bytes=None):
    with Socks5Client(s.socks5_addr) as c:
        c.login(s.key)
        if atyp_bytes is not None:
            c.sock.sendall(bytes([5, CONNECT, 0]) + atyp_bytes)
            rep, _ = c.reply()
        else:
            rep, _ = c.request(CONNECT, host, port)
        if rep != SUCCEEDED:
            assert c.closed_by_peer(), "a refused request must end the connection"
        return rep


def test_connect_reply_carries_the_bound_address_and_tunnels(socks, py_origin):
    with Socks5Client(socks.socks5_addr) as c:
        c.login(socks.key)
        rep, (host, port) = c.request(CONNECT, "127.0.0.1", py_origin.port)
        assert rep == SUCCEEDED
        assert host == "127.0.0.1" and port != 0, (host, port)
        c.sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while not data.endswith(b"origin\n"):
            chunk = c.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        assert b"hello from the python origin\n" in data, data
    assert socks.wait_stat("socks5.socks5.tunnels_active", lambda v: v == 0) == 0


def test_port_not_allowed_is_0x02(socks):
    assert connect_reply(socks, "127.0.0.1", 25) == NOT_ALLOWED
    assert socks.stat("dest_guard.blocked_port") == 1
    assert socks.stat("socks5.socks5.reply_not_allowed") == 1


def test_private_destination_is_0x02(start_socks, py_origin):
    s = start_socks(allow_private=False)
    before = py_origin.connections
    assert connect_reply(s, "127.0.0.1", py_origin.port) == NOT_ALLOWED
    # In another notation, and by name: every resolved address is checked.
    assert connect_reply(s, "localhost", py_origin.port) == NOT_ALLOWED
    assert connect_reply(s, "127.1", py_origin.port) == NOT_ALLOWED
    assert connect_reply(s, "::1", py_origin.port) == NOT_ALLOWED
    assert s.stat("dest_guard.blocked_private") == 4
    assert py_origin.connections == before, "a refused destination was connected to"


def test_sluice_itself_is_0x02(socks):
    assert connect_reply(socks, "127.0.0.1", socks.socks5_port) == NOT_ALLOWED
    assert connect_reply(socks, "127.0.0.1", socks.port) == NOT_ALLOWED
    assert socks.stat("dest_guard.blocked_self") == 2


def test_connection_refused_is_0x05(socks):
    closed = closed_port_socket()
    try:
        assert connect_reply(socks, "127.0.0.1", closed.getsockname()[1]) == CONNECTION_REFUSED
    finally:
        closed.close()
    assert socks.stat("socks5.socks5.reply_connection_refused") == 1


def test_connect_timeout_is_0x06(start_socks):
    s = start_socks(router={"connect_timeout": "1s"})
    # A listener whose accept queue is full: the kernel drops further SYNs, so a connect hangs.
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers = []
    try:
        for _ in range(4):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(full.getsockname())
            fillers.append(f)
        time.sleep(0.2)
        start = time.monotonic()
        assert connect_reply(s, "127.0.0.1", full.getsockname()[1]) == TTL_EXPIRED
        assert 0.5 < time.monotonic() - start < 5
        assert s.stat("socks5.socks5.reply_ttl_expired") == 1
    finally:
        for f in fillers:
            f.close()
        full.close()


def test_unresolvable_name_is_0x04(socks):
    assert connect_reply(socks, "no-such-host.invalid", 8080) == HOST_UNREACHABLE
    assert socks.stat("socks5.socks5.reply_host_unreachable") == 1


def test_unknown_command_is_0x07(socks):
    with Socks5Client(socks.socks5_addr) as c:
        c.login(socks.key)
        rep, _ = c.request(0x09, "127.0.0.1", 8080)
        assert rep == COMMAND_NOT_SUPPORTED
        assert c.closed_by_peer()
    assert socks.stat("socks5.socks5.reply_command_not_supported") == 1


def test_unknown_address_type_is_0x08(socks):
    assert connect_reply(socks, None, None, atyp_bytes=b"\x05\x7f\x00\x00\x01\x1f\x90") == \
        ADDRESS_TYPE_NOT_SUPPORTED
    assert socks.stat("socks5.socks5.reply_address_type_not_supported") == 1


def test_disabled_commands_are_0x07(start_socks, udp_echo):
    s = start_socks(patch_socks5={"disable_bind": True, "disable_udp_associate": True})
    for cmd in (BIND, UDP_ASSOCIATE):
        with Socks5Client(s.socks5_addr) as c:
            c.login(s.key)
            rep, _ = c.request(cmd, "0.0.0.0", 0)
            assert rep == COMMAND_NOT_SUPPORTED, cmd


def test_bad_version_is_closed_without_reply(socks):
    with Socks5Client(socks.socks5_addr) as c:
        c.sock.sendall(b"\x04\x01\x00\x50\x7f\x00\x00\x01\x00")  # SOCKS4 CONNECT
        assert c.closed_by_peer()
    assert socks.wait_stat("socks5.socks5.handshake_malformed", lambda v: v == 1) == 1


def test_handshake_deadline(start_socks):
    s = start_socks(patch_socks5={"handshake_timeout": "1s"})
    with Socks5Client(s.socks5_addr) as c:
        c.sock.sendall(b"\x05")  # half a greeting, then nothing
        start = time.monotonic()
        assert c.closed_by_peer(timeout=5)
        assert 0.5 < time.monotonic() - start < 4
    assert s.wait_stat("socks5.socks5.handshake_timeout", lambda v: v == 1) == 1


def test_request_sent_with_the_credentials_in_one_write(socks, py_origin):
    """A client that does not wait for the method and auth answers (optimistic data)."""
    with Socks5Client(socks.socks5_addr) as c:
        key = socks.key.encode()
        c.sock.sendall(b"\x05\x01\x02" + b"\x01\x04user" + bytes([len(key)]) + key +
                       b"\x05\x01\x00" + encode_addr("127.0.0.1", py_origin.port) +
                       b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert recv_exact(c.sock, 2) == b"\x05\x02"
        assert recv_exact(c.sock, 2) == b"\x01\x00"
        rep, _ = c.reply()
        assert rep == SUCCEEDED
        data = b""
        while True:
            chunk = c.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        assert data.endswith(b"hello from the python origin\n"), data


# ---------------------------------------------------------------------------------------------
# UDP ASSOCIATE


def udp_associate(s, client_udp):
    c = Socks5Client(s.socks5_addr)
    c.login(s.key)
    rep, relay = c.request(UDP_ASSOCIATE, "127.0.0.1", client_udp.getsockname()[1])
    assert rep == SUCCEEDED
    assert relay[0] == "127.0.0.1" and relay[1] != 0, relay
    return c, relay


def udp_socket():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    u.settimeout(3)
    return u


def test_udp_associate_relays_both_ways(socks, udp_echo):
    u = udp_socket()
    c, relay = udp_associate(socks, u)
    try:
        # Literal IPv4 destination.
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"ping-1", relay)
        data, src = u.recvfrom(65536)
        assert src == relay
        frag, host, port, payload = parse_udp(data)
        assert (frag, host, port, payload) == (0, "127.0.0.1", udp_echo.port, b"echo:ping-1")
        # A name, resolved (and checked) by sluice.
        u.sendto(b"\0\0\0" + encode_addr("localhost", udp_echo.port) + b"ping-2", relay)
        data, _ = u.recvfrom(65536)
        assert parse_udp(data)[3] == b"echo:ping-2"
        # The echo server saw the relay's address, never the client's.
        assert all(peer[1] != u.getsockname()[1] for _, peer in udp_echo.received)
        assert socks.stat("socks5.socks5.udp_client_rx") == 2
        # Counted on the worker after its sendto returns: the client can hold the reply first.
        assert socks.wait_stat("socks5.socks5.udp_client_tx", lambda v: v == 2) == 2
        assert socks.stat("socks5.socks5.udp_associations_active") == 1
    finally:
        c.close()
        u.close()


def test_udp_from_another_port_and_fragments_are_dropped(socks, udp_echo):
    u = udp_socket()
    other = udp_socket()
    c, relay = udp_associate(socks, u)
    try:
        other.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"intruder", relay)
        u.sendto(b"\0\0\x01" + encode_addr("127.0.0.1", udp_echo.port) + b"fragment", relay)
        u.sendto(b"\0\0\0\x09garbage", relay)
        # A datagram after them still goes through: the drops did not end the association.
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"legit", relay)
        data, _ = u.recvfrom(65536)
        assert parse_udp(data)[3] == b"echo:legit"
        payloads = [d for d, _ in udp_echo.received]
        assert payloads == [b"legit"], payloads
        other.settimeout(0.5)
        with pytest.raises(socket.timeout):
            other.recvfrom(65536)
        assert socks.stat("socks5.socks5.udp_dropped_source") == 1
        assert socks.stat("socks5.socks5.udp_dropped_fragment") == 1
        assert socks.stat("socks5.socks5.udp_dropped_malformed") == 1
    finally:
        c.close()
        u.close()
        other.close()


def test_udp_destination_checks(start_socks, udp_echo):
    s = start_socks(allow_private=False)
    u = udp_socket()
    c, relay = udp_associate(s, u)
    try:
        # Loopback is a private destination here: dropped, never sent.
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"private", relay)
        u.sendto(b"\0\0\0" + encode_addr("localhost", udp_echo.port) + b"private-name", relay)
        assert s.wait_stat("socks5.socks5.udp_dropped_denied", lambda v: v == 2) == 2
        assert udp_echo.received == []
    finally:
        c.close()
        u.close()


def test_udp_port_not_allowed_is_dropped(socks, udp_echo):
    u = udp_socket()
    c, relay = udp_associate(socks, u)
    try:
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", 53) + b"dns?", relay)
        assert socks.wait_stat("socks5.socks5.udp_dropped_denied", lambda v: v == 1) == 1
        assert socks.stat("dest_guard.blocked_port") == 1
    finally:
        c.close()
        u.close()


def test_udp_association_ends_with_its_tcp_connection(socks, udp_echo):
    u = udp_socket()
    c, relay = udp_associate(socks, u)
    u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"one", relay)
    assert parse_udp(u.recvfrom(65536)[0])[3] == b"echo:one"
    c.close()
    assert socks.wait_stat("socks5.socks5.udp_associations_active", lambda v: v == 0) == 0
    u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"two", relay)
    u.settimeout(0.5)
    with pytest.raises((socket.timeout, ConnectionRefusedError)):
        u.recvfrom(65536)
    assert [d for d, _ in udp_echo.received] == [b"one"]
    u.close()


def test_udp_idle_timeout_ends_the_association(start_socks, udp_echo):
    s = start_socks(patch_socks5={"udp_idle_timeout": "1s"})
    u = udp_socket()
    c, relay = udp_associate(s, u)
    try:
        assert c.closed_by_peer(timeout=5), "the control connection outlived the association"
        assert s.stat("socks5.socks5.udp_idle_timeout") == 1
    finally:
        c.close()
        u.close()


def test_udp_datagram_size_limit(start_socks, udp_echo):
    s = start_socks(patch_socks5={"max_udp_datagram_bytes": 600})
    u = udp_socket()
    c, relay = udp_associate(s, u)
    try:
        header = b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port)
        u.sendto(header + b"x" * 700, relay)
        u.sendto(header + b"small", relay)
        assert parse_udp(u.recvfrom(65536)[0])[3] == b"echo:small"
        assert s.stat("socks5.socks5.udp_dropped_too_large") == 1
        assert [d for d, _ in udp_echo.received] == [b"small"]
    finally:
        c.close()
        u.close()


# ---------------------------------------------------------------------------------------------
# BIND


def test_bind_accepts_one_inbound_connection_and_tunnels(socks):
    with Socks5Client(socks.socks5_addr) as c:
        c.login(socks.key)
        rep, (host, port) = c.request(BIND, "127.0.0.1", 40000)
        assert rep == SUCCEEDED and host == "127.0.0.1" and port != 0, (rep, host, port)
        # The "application server" connects to the announced address.
        server = socket.create_connection((host, port), timeout=5)
        try:
            rep, peer = c.reply()
            assert rep == SUCCEEDED
            assert peer == server.getsockname(), (peer, server.getsockname())
            server.sendall(b"from-server")
            assert recv_exact(c.sock, 11) == b"from-server"
            c.sock.sendall(b"from-client")
            assert recv_exact(server, 11) == b"from-client"
            # Half-close from the server side reaches the client as EOF.
            server.shutdown(socket.SHUT_WR)
            assert c.sock.recv(10) == b""
        finally:
            server.close()
    assert socks.stat("socks5.socks5.rq_bind") == 1


def test_a_bind_port_is_sluice_itself_while_it_listens(socks):
    """The port BIND opens is sluice's own: no request may reach it through sluice, by SOCKS5
    CONNECT or by HTTP CONNECT and GET on the HTTP port (it would be sluice dialling itself,
    and the BIND would take it for the awaited peer)."""
    with Socks5Client(socks.socks5_addr) as c:
        c.login(socks.key)
        rep, (host, port) = c.request(BIND, "127.0.0.1", 40000)
        assert rep == SUCCEEDED, rep
        assert connect_reply(socks, "127.0.0.1", port) == NOT_ALLOWED
        auth = basic_auth(socks.key)
        for target in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::ffff:127.0.0.1]:{port}"):
            r = raw_request(("127.0.0.1", socks.port),
                            f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                            f"Proxy-Authorization: {auth}\r\n\r\n".encode(), method="CONNECT")
            assert r.status == 403 and b"sluice itself" in r.body, (target, r.status, r.body)
        r = raw_request(("127.0.0.1", socks.port),
                        f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Proxy-Authorization: {auth}\r\n\r\n".encode())
        assert r.status == 403, r.status
        assert socks.stat("dest_guard.blocked_self") == 5
        # Still waiting: nothing reached the BIND listener.
        c.sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            c.sock.recv(1)
        c.sock.settimeout(5)
        # The awaited peer arrives; the listener closes and the port is nobody's: a connect to
        # it is refused by the kernel, not by the guard.
        server = socket.create_connection((host, port), timeout=5)
        try:
            assert c.reply()[0] == SUCCEEDED
            assert connect_reply(socks, "127.0.0.1", port) == CONNECTION_REFUSED
            assert socks.stat("dest_guard.blocked_self") == 5
        finally:
            server.close()


def test_a_udp_relay_port_is_sluice_itself(socks, udp_echo):
    """One association's relay port cannot be a destination of another's (or its own):
    sluice would be sending datagrams to itself."""
    ua, ub = udp_socket(), udp_socket()
    ca, relay_a = udp_associate(socks, ua)
    cb, relay_b = udp_associate(socks, ub)
    try:
        ub.sendto(b"\0\0\0" + encode_addr("127.0.0.1", relay_a[1]) + b"to-a", relay_b)
        ub.sendto(b"\0\0\0" + encode_addr("localhost", relay_a[1]) + b"to-a-name", relay_b)
        ua.sendto(b"\0\0\0" + encode_addr("127.0.0.1", relay_a[1]) + b"to-self", relay_a)
        assert socks.wait_stat("socks5.socks5.udp_dropped_denied", lambda v: v == 3) == 3
        assert socks.stat("dest_guard.blocked_self") == 3
        # A's client saw nothing, and both relays still work.
        ua.settimeout(0.3)
        with pytest.raises(socket.timeout):
            ua.recvfrom(65536)
        ua.settimeout(3)
        for u, relay in ((ua, relay_a), (ub, relay_b)):
            u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"ping", relay)
            assert parse_udp(u.recvfrom(65536)[0])[3] == b"echo:ping"
        # A TCP connect to the relay's port number is not UDP: it goes to whoever owns that.
        assert connect_reply(socks, "127.0.0.1", relay_a[1]) == CONNECTION_REFUSED
    finally:
        ca.close()
        cb.close()
        ua.close()
        ub.close()


def test_bind_filters_the_inbound_peer_by_the_named_address(socks):
    with Socks5Client(socks.socks5_addr) as c:
        c.login(socks.key)
        rep, (host, port) = c.request(BIND, "127.0.0.2", 40000)
        assert rep == SUCCEEDED
        # From 127.0.0.1: not the peer the client named; closed, and the BIND waits on.
        wrong = socket.create_connection((host, port), timeout=5)
        wrong.settimeout(3)
        try:
            assert wrong.recv(10) == b""
        except ConnectionResetError:
            pass
        wrong.close()
        assert socks.wait_stat("socks5.socks5.bind_peer_rejected", lambda v: v == 1) == 1
        right = socket.socket()
        right.bind(("127.0.0.2", 0))
        right.settimeout(5)
        right.connect((host, port))
        try:
            rep, peer = c.reply()
            assert rep == SUCCEEDED and peer[0] == "127.0.0.2", (rep, peer)
        finally:
            right.close()


def test_bind_deadline(start_socks):
    s = start_socks(patch_socks5={"bind_timeout": "1s"})
    with Socks5Client(s.socks5_addr) as c:
        c.login(s.key)
        rep, (host, port) = c.request(BIND, "0.0.0.0", 0)
        assert rep == SUCCEEDED
        start = time.monotonic()
        rep, _ = c.reply()
        assert rep == TTL_EXPIRED
        assert 0.5 < time.monotonic() - start < 4
        assert c.closed_by_peer()
    assert s.stat("socks5.socks5.bind_timeout") == 1
    # The listening socket is gone.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=2).close()


# ---------------------------------------------------------------------------------------------
# IPv6


@pytest.mark.skipif(not ipv6_loopback_works(), reason="no IPv6 loopback")
def test_ipv6_control_connection_connect_and_udp(start_socks, py_origin):
    s = start_socks(host="::1")
    echo = UdpEcho("::1")
    u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    u.bind(("::1", 0))
    u.settimeout(3)
    try:
        # CONNECT over an IPv6 control connection to an IPv4 origin.
        with Socks5Client(s.socks5_addr) as c:
            c.login(s.key)
            rep, _ = c.request(CONNECT, "127.0.0.1", py_origin.port)
            assert rep == SUCCEEDED
        # UDP: the relay is bound on the address the client reached (::1).
        with Socks5Client(s.socks5_addr) as c:
            c.login(s.key)
            rep, relay = c.request(UDP_ASSOCIATE, "::", u.getsockname()[1])
            assert rep == SUCCEEDED and relay[0] == "::1", relay
            u.sendto(b"\0\0\0" + encode_addr("::1", echo.port) + b"v6", relay)
            data, _ = u.recvfrom(65536)
            assert parse_udp(data) == (0, "::1", echo.port, b"echo:v6")
    finally:
        u.close()
        echo.stop()


# ---------------------------------------------------------------------------------------------
# without keys


def start_without_keys(start_sluice, socks5_fields=None):
    port = free_port()

    def patch(full):
        for a in find_typed_configs(full, ".AuthConfig"):
            a.pop("api_keys", None)
        for c in find_typed_configs(full, ".Socks5Config"):
            c.update(socks5_fields or {})

    s = start_sluice(extra_short=f"socks5:\n  listen: 127.0.0.1:{port}\n", patch=patch)
    s.socks5_port = port
    s.socks5_addr = ("127.0.0.1", port)
    return s


def test_without_keys_no_authentication_is_offered(start_sluice, py_origin):
    s = start_without_keys(start_sluice)
    r = curl("--socks5-hostname", f"127.0.0.1:{s.socks5_port}", py_origin.url("/hello"))
    assert r.returncode == 0, r.describe()
    assert r.stdout == b"hello from the python origin\n"
    assert s.stat("auth.open_relay") == 1
    with Socks5Client(s.socks5_addr) as c:
        assert c.greet(methods=(0x00, 0x02)) == 0x00


def test_require_auth_without_keys_asks_for_a_password(start_sluice, py_origin):
    s = start_without_keys(start_sluice, {"require_auth": True})
    with Socks5Client(s.socks5_addr) as c:
        assert c.greet(methods=(0x00,)) == 0xFF
    with Socks5Client(s.socks5_addr) as c:
        assert c.greet(methods=(0x00, 0x02)) == 0x02
        assert c.auth("anything") == 0  # no keys: any password passes (an open relay)
        rep, _ = c.request(CONNECT, "127.0.0.1", py_origin.port)
        assert rep == SUCCEEDED


# ---------------------------------------------------------------------------------------------
# asynchronous DNS: a loopback name server that answers late


class SlowDns:
    """A UDP name server on loopback: A queries for names ending in ".test" get 127.0.0.1 after
    `delay` seconds; AAAA queries get no records; anything else NXDOMAIN."""

    def __init__(self, delay=0.3):
        self.delay = delay
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.queries = []
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _answer(self, query, peer):
        qid, _flags, qdcount = struct.unpack("!HHH", query[:6])
        if qdcount != 1:
            return
        pos, labels = 12, []
        while query[pos] != 0:
            labels.append(query[pos + 1:pos + 1 + query[pos]].decode().lower())
            pos += 1 + query[pos]
        qtype = struct.unpack("!H", query[pos + 1:pos + 3])[0]
        question = query[12:pos + 5]
        name = ".".join(labels)
        self.queries.append((name, qtype))
        if not name.endswith(".test"):
            resp = struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question
        elif qtype == 1:
            resp = (struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question +
                    struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton("127.0.0.1"))
        else:
            resp = struct.pack("!HHHHHH", qid, 0x8180, 1, 0, 0, 0) + question
        time.sleep(self.delay)
        try:
            self.sock.sendto(resp, peer)
        except OSError:
            pass

    def _run(self):
        while not self._stop:
            try:
                query, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(query, peer), daemon=True).start()

    def stop(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def slow_dns():
    d = SlowDns()
    yield d
    d.stop()


def start_with_dns(start_sluice, dns):
    port = free_port()

    def patch(full):
        full.setdefault("dns", {})["resolvers"] = [f"127.0.0.1:{dns.port}"]

    s = start_sluice(extra_short=f"socks5:\n  listen: 127.0.0.1:{port}\n", patch=patch)
    s.socks5_port = port
    s.socks5_addr = ("127.0.0.1", port)
    return s


def test_udp_datagrams_wait_for_their_destination_check(start_sluice, slow_dns, udp_echo):
    s = start_with_dns(start_sluice, slow_dns)
    u = udp_socket()
    c, relay = udp_associate(s, u)
    try:
        # Sent while the name is being resolved: held (bounded), then relayed in order.
        for i in range(3):
            u.sendto(b"\0\0\0" + encode_addr("echo.test", udp_echo.port) + b"q%d" % i, relay)
        u.sendto(b"\0\0\0" + encode_addr("127.0.0.1", udp_echo.port) + b"literal", relay)
        got = sorted(parse_udp(u.recvfrom(65536)[0])[3] for _ in range(4))
        assert got == [b"echo:literal", b"echo:q0", b"echo:q1", b"echo:q2"], got
        # A name that does not resolve: dropped and counted.
        u.sendto(b"\0\0\0" + encode_addr("missing.invalid", udp_echo.port) + b"x", relay)
        assert s.wait_stat("socks5.socks5.udp_dropped_denied", lambda v: v == 1) == 1
        assert s.stat("dest_guard.resolve_failed") >= 1
    finally:
        c.close()
        u.close()


def test_client_leaving_during_lookups_cancels_them(start_sluice, slow_dns, udp_echo):
    s = start_with_dns(start_sluice, slow_dns)
    # CONNECT: the client leaves while the name is being resolved (its connection is not read
    # meanwhile, so sluice notices when it answers).
    with Socks5Client(s.socks5_addr) as c:
        c.login(s.key)
        c.sock.sendall(b"\x05\x01\x00" + encode_addr("late.test", 8080))
        time.sleep(0.05)
    # UDP: the association ends while a datagram waits for its check.
    u = udp_socket()
    c, relay = udp_associate(s, u)
    u.sendto(b"\0\0\0" + encode_addr("later.test", udp_echo.port) + b"x", relay)
    time.sleep(0.05)
    c.close()
    u.close()
    assert s.wait_stat("socks5.socks5.udp_associations_active", lambda v: v == 0) == 0
    time.sleep(slow_dns.delay + 0.3)  # the answers arrive after their askers left
    assert udp_echo.received == []
    # Still serving.
    with Socks5Client(s.socks5_addr) as c2:
        c2.login(s.key)
        rep, _ = c2.request(CONNECT, "127.0.0.1", s.port)
        assert rep == NOT_ALLOWED  # sluice itself


def test_a_client_that_leaves_cancels_its_pending_connect(socks):
    """CONNECT to a destination that never answers the SYN: the client closes while sluice
    dials (and does not read it); the connect is cancelled, not left to its 10 s timeout."""
    silent = SilentPort()
    try:
        c = Socks5Client(socks.socks5_addr)
        c.login(socks.key)
        c.sock.sendall(b"\x05\x01\x00" + encode_addr("127.0.0.1", silent.port))
        deadline = time.monotonic() + 5
        while silent.pending_connects() != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert silent.pending_connects() == 1, "sluice did not dial"
        c.close()
        deadline = time.monotonic() + 3
        while silent.pending_connects() != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert silent.pending_connects() == 0, "the connect outlived the client"
        assert socks.wait_stat("socks5.socks5.rq_abandoned", lambda v: v == 1) == 1
    finally:
        silent.close()
