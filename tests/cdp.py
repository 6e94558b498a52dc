"""A minimal Chrome DevTools Protocol client on the standard library, for the live view's browser tests, its
latency benchmark and its README screenshot.

Why our own: the venv has no websocket package, and the test needs only a few things: start headless Chromium,
open a page, evaluate an expression, size the viewport, move the mouse, take a screenshot, and collect console
errors and uncaught exceptions. A WebSocket client for
that is a handshake and unmasked-in/masked-out frames (RFC 6455), which is what this is; nothing else is used.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser binary: $CHROMIUM if set, else the first of CHROMIUM_NAMES on PATH."""
    given = os.environ.get("CHROMIUM")
    if given:
        return given if shutil.which(given) else None
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class WebSocket:
    """One client WebSocket connection: text frames out (masked), text frames in; pings answered."""

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                           f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError(f"websocket handshake with {url}: connection closed after {head!r}")
            head += chunk
        head, self._buffer = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"websocket handshake with {url}: expected 101, got {head[:80]!r}")

    def send(self, text: str) -> None:
        data = text.encode()
        n = len(data)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                  bytes([0x80 | 127]) + struct.pack(">Q", n))
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            self._buffer += chunk
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def receive(self) -> str:
        """The next whole text message (fragments joined); socket.timeout when none arrives in time."""
        parts: list[bytes] = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)  # the server does not mask
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("the browser closed the DevTools connection")
            if opcode == 0x9:  # ping: answer with a masked pong
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if opcode in (0x1, 0x0):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Page:
    """A page target over CDP: `call` a method and get its result; events are kept in `events`."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._next_id = 0

    def call(self, method: str, timeout_s: float = 10.0, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        wanted = self._next_id
        self.ws.send(json.dumps({"id": wanted, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = json.loads(self.ws.receive())
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(f"{method}: no answer within {timeout_s} s")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def emulate(self, width: int, height: int, scale: float = 1.0) -> None:
        """Size the viewport (CSS pixels) and the device pixel ratio (2: a high-DPI screen)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=scale,
                  mobile=False)

    def screenshot(self, path: str) -> None:
        """A PNG of the viewport, written to `path`."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def mouse_move(self, x: float, y: float) -> None:
        """Move the mouse to (x, y) in CSS pixels (hover)."""
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error log entries (failed loads among them) so far."""
        out = []
        for e in self.events:
            method, params = e["method"], e.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(f"exception: {params['exceptionDetails'].get('text')} "
                           f"{params['exceptionDetails'].get('exception', {}).get('description', '')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(f"console.{params['type']}: {[a.get('value') for a in params.get('args', [])]}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        return out


@contextlib.contextmanager
def headless_page(binary: str, *, startup_timeout_s: float = 10.0) -> Iterator[Page]:
    """Headless Chromium with a fresh profile and one blank page, DevTools on a port the browser picks."""
    profile = tempfile.mkdtemp(prefix="chamberlab-chromium-")
    command = [binary, "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
               f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check", "--disable-gpu",
               "--disable-extensions", "--disable-background-networking", "--disable-dev-shm-usage",
               "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
               "about:blank"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ws = None
    try:
        port = None
        deadline = time.monotonic() + startup_timeout_s
        seen = []
        while port is None:
            line = proc.stderr.readline() if proc.stderr else ""
            if not line:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{binary} did not announce its DevTools port; stderr: {''.join(seen)[-2000:]}")
                continue
            seen.append(line)
            match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = int(match.group(1)) if match else None
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{binary} opened no page within {startup_timeout_s} s")
        ws = WebSocket(pages[0]["webSocketDebuggerUrl"], timeout_s=startup_timeout_s)
        page = Page(ws)
        for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
            page.call(domain)
        yield page
    finally:
        if ws is not None:
            ws.close()
        proc.kill()
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(profile, ignore_errors=True)
