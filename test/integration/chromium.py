"""Headless Chromium driven over the DevTools protocol, for tests through sluice.

Chromium asks for proxy credentials through a dialog; headless, the DevTools `Fetch` domain
answers the challenge instead (Fetch.authRequired -> continueWithAuth), exactly as a user typing
the key would. The proxy's CA is trusted through an NSS database in a throwaway HOME, the way
Chromium on Linux trusts any local CA.
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import websocket

from helpers import CLEAN_ENV

CHROMIUM = shutil.which("chromium")


class Chromium:
    def __init__(self, workdir, proxy, ca=None):
        self.dir = Path(workdir)
        self.home = self.dir / "home"
        self.profile = self.dir / "profile"
        self.home.mkdir(parents=True, exist_ok=True)
        self.profile.mkdir(parents=True, exist_ok=True)
        self.env = dict(CLEAN_ENV, HOME=str(self.home))
        if ca is not None:
            nssdb = self.home / ".pki" / "nssdb"
            nssdb.mkdir(parents=True, exist_ok=True)
            subprocess.run(["certutil", "-N", "-d", f"sql:{nssdb}", "--empty-password"],
                           check=True, capture_output=True, env=self.env)
            subprocess.run(["certutil", "-A", "-d", f"sql:{nssdb}", "-n", "sluice-test-ca",
                            "-t", "C,,", "-i", str(ca)], check=True, capture_output=True,
                           env=self.env)
        self.log_path = self.dir / "chromium.log"
        args = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only", "--disable-dev-shm-usage",
                f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
                f"--proxy-server={proxy}",
                # Chromium never proxies loopback unless told to.
                "--proxy-bypass-list=<-loopback>",
                "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log_path, "wb"), env=self.env)
        self.ws = None
        self._next_id = 0
        self.events = []

    def start(self, timeout=30):
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start:\n{self.log()}")
            time.sleep(0.1)
        port, path = port_file.read_text().splitlines()[:2]
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=timeout,
                                              suppress_origin=True)
        return self

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def stop(self):
        if self.ws is not None:
            self.ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def send(self, method, params=None, session=None):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        return self._next_id

    def call(self, method, params=None, session=None, timeout=30):
        want = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._recv(deadline)
            if msg.get("id") == want:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
        raise TimeoutError(method)

    def _recv(self, deadline):
        self.ws.settimeout(max(0.1, deadline - time.monotonic()))
        msg = json.loads(self.ws.recv())
        if "method" in msg:
            self.events.append(msg)
            self._handle(msg)
        return msg

    def _handle(self, msg):
        method, params, session = msg["method"], msg.get("params", {}), msg.get("sessionId")
        if method == "Fetch.requestPaused":
            self.send("Fetch.continueRequest", {"requestId": params["requestId"]}, session)
        elif method == "Fetch.authRequired":
            self.auth_challenges.append(params.get("authChallenge", {}))
            self.send("Fetch.continueWithAuth", {
                "requestId": params["requestId"],
                "authChallengeResponse": {"response": "ProvideCredentials",
                                          "username": self.user, "password": self.password},
            }, session)

    def open_page(self, url, user, password, timeout=30):
        """Opens url in a new tab, answering proxy challenges with user/password; waits for the
        load event. Returns the tab's session id."""
        self.user, self.password = user, password
        self.auth_challenges = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        self.call("Fetch.enable", {"handleAuthRequests": True, "patterns": [{"urlPattern": "*"}]},
                  session)
        self.call("Page.enable", {}, session)
        self.call("Network.enable", {}, session)
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e["method"] == "Page.loadEventFired" and e.get("sessionId") == session
                   for e in self.events):
                return session
            self._recv(deadline)
        raise TimeoutError(f"no load event for {url}; log:\n{self.log()}")

    def evaluate(self, session, expression, timeout=30):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, session, timeout)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def responses(self, session):
        """(url, status, protocol) of every response the tab received."""
        return [(e["params"]["response"]["url"], e["params"]["response"]["status"],
                 e["params"]["response"].get("protocol"))
                for e in self.events
                if e["method"] == "Network.responseReceived" and e.get("sessionId") == session]
