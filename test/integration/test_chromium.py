"""Headless Chromium loads a page and its assets from a local origin through sluice's HTTPS
proxy port, answering the proxy's 407 challenge with the API key, with sluice's CA trusted."""

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chromium import CHROMIUM, Chromium
from helpers import free_port
from ws_origin import WsOrigin

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

BIG = bytes((i * 7 + 3) & 0xFF for i in range(300 * 1024))
PAGE = {
    "/index.html": ("text/html", b"""<!doctype html><html><head><title>start</title>
<link rel="stylesheet" href="/style.css"><script src="/app.js"></script></head>
<body><img id="img" src="/img.svg" width="10" height="10"></body></html>"""),
    "/style.css": ("text/css", b"body { background-color: rgb(1, 2, 3); }"),
    "/app.js": ("application/javascript", b"window.appRan = true; document.title = 'ran';"),
    "/img.svg": ("image/svg+xml",
                 b'<svg xmlns="http://www.w3.org/2000/svg" width="17" height="9"></svg>'),
    "/big.bin": ("application/octet-stream", BIG),
}


class PageOrigin:
    """A threaded HTTP/1.1 origin serving PAGE and counting requests per path."""

    def __init__(self):
        self.hits = {}
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.split("?")[0]
                origin.hits[path] = origin.hits.get(path, 0) + 1
                if path not in PAGE:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                ctype, body = PAGE[path]
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def page_origin():
    o = PageOrigin()
    yield o
    o.stop()


@pytest.fixture
def browser(tmp_path):
    started = []

    def start(proxy, ca):
        b = Chromium(tmp_path / f"chromium{len(started)}", proxy, ca).start()
        started.append(b)
        return b
    yield start
    for b in started:
        b.stop()


def load_and_check(b, origin, key):
    session = b.open_page(origin.url("/index.html"), "user", key)
    state = b.evaluate(session, """(async () => {
        const big = new Uint8Array(await (await fetch('/big.bin')).arrayBuffer());
        const digest = await crypto.subtle.digest('SHA-256', big);
        return {
          appRan: window.appRan === true,
          title: document.title,
          background: getComputedStyle(document.body).backgroundColor,
          imgWidth: document.getElementById('img').naturalWidth,
          bigLength: big.length,
          bigSha256: Array.from(new Uint8Array(digest))
              .map(b => b.toString(16).padStart(2, '0')).join(''),
        };
    })()""")
    assert state == {"appRan": True, "title": "ran", "background": "rgb(1, 2, 3)",
                     "imgWidth": 17, "bigLength": len(BIG),
                     "bigSha256": hashlib.sha256(BIG).hexdigest()}, state
    for path in PAGE:
        assert origin.hits.get(path, 0) >= 1, (path, origin.hits)
    return session


def test_chromium_through_the_tls_port(start_sluice, certs, page_origin, browser):
    tls_port = free_port()
    d = certs["dir"]
    s = start_sluice(extra_short=f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                                 f"  cert: {d / 'server-chain.pem'}\n  key: {d / 'server.key'}\n")
    b = browser(f"https://127.0.0.1:{tls_port}", certs["ca"])
    session = load_and_check(b, page_origin, s.key)
    # The browser met the 407 challenge and answered it; every asset went through the proxy.
    assert b.auth_challenges and b.auth_challenges[0].get("source") == "Proxy", b.auth_challenges
    responses = b.responses(session)
    assert {url.split("/", 3)[3] for url, status, _ in responses if status == 200} >= {
        "index.html", "style.css", "app.js", "img.svg", "big.bin"}, responses
    assert s.stat("tls.https.handshakes") >= 1
    assert s.stat("tls.https.handshake_fail.peer_alert") == 0  # the CA was trusted
    assert s.stat("auth.allowed") >= len(PAGE)
    # Chromium speaks HTTP/2 to an HTTPS proxy that offers it: the page and its assets were
    # streams of one multiplexed connection.
    assert s.stat("tls.https.alpn_h2") >= 1
    assert s.stat("http2.https.rq_forward") >= len(PAGE)
    assert s.stat("http1.https.rq_total") == 0


def test_chromium_websocket_through_the_tls_port(start_sluice, certs, page_origin, browser):
    ws = WsOrigin().start()
    try:
        tls_port = free_port()
        d = certs["dir"]
        s = start_sluice(extra_short=f"tls:\n  listen: 127.0.0.1:{tls_port}\n"
                                     f"  cert: {d / 'server-chain.pem'}\n"
                                     f"  key: {d / 'server.key'}\n")
        b = browser(f"https://127.0.0.1:{tls_port}", certs["ca"])
        session = b.open_page(page_origin.url("/index.html"), "user", s.key)
        echoed = b.evaluate(session, """new Promise((resolve, reject) => {
            const ws = new WebSocket('ws://127.0.0.1:%d/echo');
            ws.binaryType = 'arraybuffer';
            const big = new Uint8Array(65536).map((_, i) => i * 13 & 255);
            const got = [];
            ws.onopen = () => { ws.send('hello from chromium'); ws.send(big); };
            ws.onmessage = (e) => {
              got.push(typeof e.data === 'string' ? e.data
                  : new Uint8Array(e.data).every((v, i) => v === (i * 13 & 255)) ? 'big ok'
                  : 'big corrupt');
              if (got.length === 2) { ws.close(); resolve(got); }
            };
            ws.onerror = () => reject('websocket error');
            setTimeout(() => reject('timeout: ' + JSON.stringify(got)), 15000);
        })""" % ws.port)
        assert echoed == ["hello from chromium", "big ok"], echoed
        assert ws.messages[0] == (1, b"hello from chromium"), ws.messages[:1]
        # Chromium tunnels WebSocket through a proxy with CONNECT: a CONNECT stream on its
        # HTTP/2 connection to the proxy.
        assert s.stat("http2.https.rq_connect") >= 1
    finally:
        ws.stop()
