"""Each session's JSONL record: every request and every response, appended and handed to the OS before the reply
leaves.

Why before the reply: the record is the audit trail of what an untrusted agent asked the chamber and what it was
told. If the server dies mid-call, the request is already on disk; if a response reached the agent, its line is
too. One file per session, `<record_dir>/<session_id>.jsonl`; each line is a JSON object with `seq` (per file),
`t` (wall clock, seconds since the epoch) and `kind` ("request", "response", or a lifecycle event).

`RecordMiddleware` does the recording for every `/sessions/{id}/...` request of an existing session, whatever
answered it (a tool, a 409, FastAPI's 422), so no path can skip the record. It also enforces the body-size cap,
because it is the one place that reads bodies before the app does.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Awaitable, Callable, MutableMapping

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_SESSION_PATH = re.compile(r"^/sessions/([^/]+)(?:/|$)")


def _decoded(body: bytes) -> Any:
    """A body as JSON when it is JSON, else as text (kept whole: the size cap bounds it)."""
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {"unparsed": body.decode("utf-8", errors="replace")}


class RecordFiles:
    """The append handles of the session records, kept open between writes, at most `max_open` at a time.

    Why open handles: reopening the file for every event cost more than the rest of a small tool call's
    bookkeeping. Why a bound: a server may hold hundreds of sessions (a schema fuzzer creates many), and one
    handle per session would exhaust descriptors; the least recently written file is closed first and simply
    reopened if its session writes again. Handles are unbuffered (`buffering=0`): each event is one write(2) of
    a whole line, on the OS's side of the file before `append` returns (no fsync: a server crash keeps it, a
    power cut may not).
    """

    def __init__(self, max_open: int = 64) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be >= 1, got {max_open!r}")
        self.max_open = max_open
        self._lock = threading.Lock()
        self._files: OrderedDict[Path, Any] = OrderedDict()

    def append(self, path: Path, data: bytes) -> None:
        with self._lock:
            handle = self._files.pop(path, None)
            if handle is None:
                while len(self._files) >= self.max_open:
                    self._files.popitem(last=False)[1].close()
                handle = open(path, "ab", buffering=0)  # noqa: SIM115 - kept open on purpose, closed by close()
            self._files[path] = handle  # most recently used last
            view = memoryview(data)
            while view:  # a raw write may be partial; the line goes out whole
                view = view[handle.write(view):]

    def open_count(self) -> int:
        with self._lock:
            return len(self._files)

    def close(self) -> None:
        with self._lock:
            while self._files:
                self._files.popitem()[1].close()


class SessionRecord:
    """Appends JSON lines to one session's file; each line reaches the OS before `write` returns.

    `files` is the server's shared pool of open handles (a private one-handle pool when omitted).
    """

    def __init__(self, path: Path, wall_clock: Callable[[], float] = time.time, files: RecordFiles | None = None) -> None:
        self.path = path
        self._clock = wall_clock
        self._files = files if files is not None else RecordFiles(max_open=1)
        self._lock = threading.Lock()
        self._seq = 0

    def write(self, kind: str, *, raw_body: bytes | None = None, **fields: Any) -> None:
        """Append one event. `raw_body`: JSON bytes this server produced itself, spliced in as the `body` field
        without a parse-and-dump round trip (a describe_chamber reply is several kB)."""
        with self._lock:  # seq order is file order
            self._seq += 1
            event = {"seq": self._seq, "t": self._clock(), "kind": kind, **fields}
            line = json.dumps(event, ensure_ascii=False, default=str).encode("utf-8")
            if raw_body is not None:
                line = b"".join((line[:-1], b', "body": ', raw_body, b"}\n"))
            else:
                line += b"\n"
            self._files.append(self.path, line)

    def read(self) -> list[dict[str, Any]]:
        """Every event written so far (for tests and the CLI)."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(body).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": data, "more_body": False})


class RecordMiddleware:
    """ASGI middleware: cap request bodies; record request and response of every existing session's path."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, lookup: Callable[[str], SessionRecord | None],
                 max_body_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.lookup = lookup
        self.max_body_bytes = max_body_bytes
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._too_large(send, declared)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await self._too_large(send, len(body))
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        match = _SESSION_PATH.match(scope.get("path", ""))
        record = self.lookup(match.group(1)) if match else None
        if record is None:
            await self.app(scope, replay, send)
            return

        started = self.clock()
        record.write("request", method=scope["method"], path=scope["path"],
                     query=scope.get("query_string", b"").decode("latin-1") or None, body=_decoded(bytes(body)))
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                payload = b"".join(chunks)
                status = start["status"] if start else 500
                timing = {"method": scope["method"], "path": scope["path"], "status": status,
                          "duration_ms": round((self.clock() - started) * 1000.0, 3)}
                if payload and _is_json(start):  # our own JSON: spliced in as it is
                    record.write("response", raw_body=payload, **timing)
                else:
                    record.write("response", body=_decoded(payload), **timing)
                assert start is not None
                await send(start)
                await send({"type": "http.response.body", "body": payload, "more_body": False})
                return
            await send(message)

        await self.app(scope, replay, capture)

    async def _too_large(self, send: Send, size: int) -> None:
        await _send_json(send, 413, {"error": {
            "code": "payload_too_large",
            "message": f"request body of {size} bytes exceeds the {self.max_body_bytes}-byte limit; send less"}})


def _is_json(start: Message | None) -> bool:
    if start is None:
        return False
    for key, value in start.get("headers", []):
        if key == b"content-type":
            return value.split(b";")[0].strip() == b"application/json"
    return False


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", []):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
