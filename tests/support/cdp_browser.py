"""A minimal headless-Chromium driver over the DevTools protocol, for the HTML report test.

:class:`Browser` starts ``chromium --headless --remote-debugging-port=0`` with a throwaway
profile, reads the port it chose from its ``DevToolsActivePort`` file, and talks to the first
page target over a websocket (``websocket-client``). :meth:`Browser.open` loads a URL and
returns what the page did: console errors, uncaught exceptions, log errors (CSP violations
included) and every request it made.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Optional

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""Executable names tried, in order (Debian's package installs ``chromium``)."""


def find_chromium() -> Optional[str]:
    """Path of a Chromium-family browser on PATH, else ``None``."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageLoad:
    """What one page load did: ``errors`` (console errors, uncaught exceptions, error log entries
    such as CSP violations, as text) and ``requests`` (every URL the page requested)."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Browser:
    """One headless Chromium with one page; use as a context manager. ``timeout_s`` bounds
    start-up and each wait (seconds); raises ``TimeoutError`` past it."""

    def __init__(self, executable: str, timeout_s: float = 15.0) -> None:
        import websocket  # websocket-client, from the dev extra

        self.timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="pipecheck-chromium-")
        try:
            self._process = subprocess.Popen(
                [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
                 "--remote-debugging-port=0", f"--user-data-dir={self._profile}",
                 "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                 "--disable-sync", "--disable-background-networking",
                 "--disable-component-update", "--window-size=1100,900", "about:blank"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except BaseException:  # not started: nothing to stop, but the profile is ours
            shutil.rmtree(self._profile, ignore_errors=True)
            raise
        self._next_id = 0
        try:
            port = self._wait_for_port()
            target = self._page_target(port)
            self._socket = websocket.create_connection(
                target["webSocketDebuggerUrl"], timeout=timeout_s, suppress_origin=True)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection, stop the browser (terminate, then kill), delete the profile."""
        socket = getattr(self, "_socket", None)
        if socket is not None:
            socket.close()
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    # -- protocol ------------------------------------------------------------------------------

    def call(self, method: str, events: Optional[list[dict]] = None, **params: Any) -> dict:
        """Send one command and return its result; events that arrive meanwhile are appended
        to ``events``. Raises ``RuntimeError`` on a protocol error."""
        self._next_id += 1
        self._socket.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            message = json.loads(self._socket.recv())
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if events is not None and "method" in message:
                events.append(message)
        raise TimeoutError(f"no reply to {method} in {self.timeout_s} s")

    def open(self, url: str, settle_s: float = 0.3) -> PageLoad:
        """Load ``url``, wait for its load event plus ``settle_s`` seconds, and return what it
        did."""
        events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", events)
        events.clear()  # what an earlier page left behind
        self.call("Page.navigate", events, url=url)
        self._wait_for("Page.loadEventFired", events)
        end = time.monotonic() + settle_s
        self._socket.settimeout(0.05)
        try:
            while time.monotonic() < end:
                try:
                    events.append(json.loads(self._socket.recv()))
                except Exception:  # websocket's timeout: nothing arrived in this slice
                    pass
        finally:
            self._socket.settimeout(self.timeout_s)
        return _page_load(events)

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript ``expression`` in the page (the page itself runs no
        script; DevTools evaluation is not subject to its Content-Security-Policy)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluation failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def set_width(self, width: int, height: int = 900) -> None:
        """Lay the page out in a viewport ``width`` x ``height`` CSS pixels."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def screenshot(self, path: str) -> None:
        """Save the viewport as a PNG at ``path``."""
        import base64

        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(data))

    # -- start-up ------------------------------------------------------------------------------

    def _wait_for_port(self) -> int:
        marker = os.path.join(self._profile, "DevToolsActivePort")
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self._process.returncode}")
            try:
                with open(marker, encoding="utf-8") as handle:
                    first = handle.readline().strip()
                if first:
                    return int(first)
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"chromium did not open its DevTools port in {self.timeout_s} s")

    def _page_target(self, port: int) -> dict:
        deadline = time.monotonic() + self.timeout_s
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
        while time.monotonic() < deadline:
            with direct.open(f"http://127.0.0.1:{port}/json/list",
                             timeout=self.timeout_s) as reply:
                targets = json.load(reply)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]
            time.sleep(0.05)
        raise TimeoutError("chromium has no page target")

    def _wait_for(self, method: str, events: list[dict]) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if any(e.get("method") == method for e in events):
                return
            events.append(json.loads(self._socket.recv()))
        raise TimeoutError(f"no {method} in {self.timeout_s} s")


def _page_load(events: list[dict]) -> PageLoad:
    load = PageLoad()
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            load.errors.append("console: " + " ".join(
                str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            load.errors.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            load.errors.append(f"log: {params['entry'].get('text')}")
        elif method == "Network.requestWillBeSent":
            load.requests.append(params.get("request", {}).get("url", ""))
    return load
