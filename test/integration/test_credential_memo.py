"""The credential memos of sluice.auth: a keep-alive connection presenting the credential it last
authenticated with, or any connection presenting one that authenticated on its worker before, is
let in without decoding and hashing it again (auth.memo_hits), as the same key, with every
per-request check still made; another credential, or a wrong one, gets the answer it would get on
a connection of its own."""

import secrets

from helpers import RawConnection, basic_auth
from sluice_proc import find_typed_configs
from test_http2 import H2Client, use_http2


def two_named_keys(keys, then=None):
    """A start_sluice patch: the auth filters accept exactly `keys` ({name: key})."""

    def patch(full):
        auths = find_typed_configs(full, ".AuthConfig")
        assert auths, "no sluice.auth in the full form"
        for auth in auths:
            auth["api_keys"] = [{"name": n, "key": k} for n, k in keys.items()]
        if then is not None:
            then(full)

    return patch


def assert_auth_stats(s, **expected):
    """sluice.auth's counters: memo_hits=7, a=5 (auth.key.a.allowed), denied_invalid=3..."""
    for name, value in expected.items():
        stat = f"auth.{name}" if name in ("memo_hits", "allowed", "denied_invalid") \
            else f"auth.key.{name}.allowed"
        assert s.stat(stat) == value, f"{stat}: {s.stat(stat)} != {value}"


def get(conn, authority, credential):
    conn.send(f"GET http://{authority}/hello HTTP/1.1\r\nHost: {authority}\r\n"
              f"Proxy-Authorization: {credential}\r\n\r\n".encode())
    return conn.read_response()


def test_one_keep_alive_connection_switching_keys(start_sluice, py_origin):
    # Two keys and a wrong one: the worker's memo keeps any two credentials together (two per
    # set of its memos), so every hit below is certain whatever their hashes.
    keys = {"a": secrets.token_urlsafe(32), "b": secrets.token_urlsafe(32)}
    s = start_sluice(patch=two_named_keys(keys))
    a, b = basic_auth(keys["a"]), basic_auth(keys["b"])
    wrong = basic_auth(keys["a"] + "x")
    # (credential, status, whether a memo knows it: the one the connection last authenticated
    # with, or one that authenticated on the worker before)
    steps = [
        (a, 200, False),
        (a, 200, True),
        (b, 200, False),  # another key: the full path, then b is remembered
        (b, 200, True),
        (wrong, 407, False),  # never remembered, and b stays remembered
        (b, 200, True),
        (a, 200, True),  # the connection's memo has b, the worker's still has a
        (wrong, 407, False),
        (a, 200, True),
    ]
    authority = f"127.0.0.1:{py_origin.port}"
    with RawConnection(s.proxy_addr) as c:
        for i, (credential, status, _) in enumerate(steps):
            r = get(c, authority, credential)
            assert r.status == status, f"step {i}: {r}"
            if status == 200:
                assert r.body.startswith(b"hello"), f"step {i}: {r}"
            else:
                assert r.header("Proxy-Authenticate") == 'Basic realm="sluice"', f"step {i}: {r}"
    assert s.stat("http1.http.rq_total") == len(steps), "the requests did not share a connection"
    assert sum(1 for _, _, hit in steps if hit) == 5
    assert_auth_stats(s, a=4, b=3, allowed=7, denied_invalid=2, memo_hits=5)
    # New connections of the same worker: a and b are known, a wrong key takes the full path.
    with RawConnection(s.proxy_addr) as c:
        assert get(c, authority, a).status == 200
        assert get(c, authority, wrong).status == 407
    with RawConnection(s.proxy_addr) as c:
        assert get(c, authority, b).status == 200
    assert_auth_stats(s, memo_hits=7, a=5, b=4, denied_invalid=3)


def test_the_same_key_in_other_bytes_takes_the_full_path(start_sluice, py_origin):
    keys = {"a": secrets.token_urlsafe(32), "b": secrets.token_urlsafe(32)}
    s = start_sluice(patch=two_named_keys(keys))
    authority = f"127.0.0.1:{py_origin.port}"
    bearer = f"Bearer {keys['a']}"
    with RawConnection(s.proxy_addr) as c:
        assert get(c, authority, basic_auth(keys["a"])).status == 200
        assert get(c, authority, bearer).status == 200  # other bytes: the full path
        assert get(c, authority, bearer).status == 200  # the connection's memo now
        assert get(c, authority, basic_auth(keys["a"], user="someone-else")).status == 200
    # A form never presented before, on a new connection: the full path.
    with RawConnection(s.proxy_addr) as c:
        assert get(c, authority, f"Bearer {keys['b']}").status == 200
    assert_auth_stats(s, memo_hits=1, a=4, b=1, denied_invalid=0)


def test_http2_streams_of_one_connection(start_sluice, py_origin):
    keys = {"a": secrets.token_urlsafe(32), "b": secrets.token_urlsafe(32)}
    s = start_sluice(patch=two_named_keys(keys, then=use_http2()))
    c = H2Client(s)
    authority = f"127.0.0.1:{py_origin.port}"
    # One stream at a time: each reuses the stream object (and its filters) of the one before.
    steps = [(keys["a"], 200), (keys["a"], 200), (keys["b"], 200), ("not-a-key", 407),
             (keys["b"], 200), (keys["a"], 200), (keys["a"], 200)]
    for i, (key, status) in enumerate(steps):
        r = c.response(c.open("GET", authority, "/hello", key=key))
        assert r.status == status, f"step {i}: {vars(r)}"
    c.close()
    # a, a (hit), b, wrong, b (hit), a (hit: the worker's memo), a (hit)
    assert_auth_stats(s, a=4, b=2, denied_invalid=1, memo_hits=4)
