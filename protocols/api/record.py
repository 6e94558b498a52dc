"""Each session's JSONL record: every request and every response, appended and handed to the OS before the reply
leaves.

Why before the reply: the record is the audit trail of what an untrusted agent asked the chamber and what it was
told. If the server dies mid-call, the request is already on disk; if a response reached the agent, its line is
too. One file per session, `<record_dir>/<session_id>.jsonl`; each line is a JSON object with `seq` (per file),
`t` (wall clock, seconds since the epoch) and `kind` ("request", "response", or a lifecycle event).

`RecordMiddleware` does the recording for every `/sessions/{id}/...` request of an existing session, whatever
answered it (a tool, a 409, FastAPI's 422), so no path can skip the record. It also enforces the body-size cap,
because it is the one place that reads bodies before the app does.

What keeps the record valid JSON Lines whatever arrives (issue 19): a body nested deeper than MAX_JSON_DEPTH is
refused (400) before anything parses it (the parsers and the validation errors recurse per level); no line is
ever written with a bare NaN or Infinity (a strict parser reads every line); an exception that escapes the app
still gets its 500 response line; and a line that cannot be written whole (a full disk) is cut back, so no half
line stays (a file whose first line failed is removed: no empty record of a session that never was, issue 24),
and a request that cannot be recorded is answered 503 without ever reaching the app (the chamber).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Awaitable, Callable, MutableMapping

import numpy as np

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_SESSION_PATH = re.compile(r"^/sessions/([^/]+)(?:/|$)")

MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects a request body may have (a claim extraction needs a handful)."""

_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]")


class RecordUnavailable(Exception):
    """A record line could not be written (full disk, lost mount); what it would have recorded must not happen."""

    def __init__(self, path: Path, cause: OSError) -> None:
        self.path, self.cause = path, cause
        super().__init__(f"cannot append to the record {path.name} ({type(cause).__name__}: {cause})")


def too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> int | None:
    """The nesting depth of the JSON text `body` when it exceeds `limit`, else None; strings are skipped, nothing
    is parsed (a few ms for a 1 MiB body of brackets)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return None
    brackets = np.frombuffer(_NOT_BRACKET.sub(b"", _JSON_STRING.sub(b'""', body)), dtype=np.uint8)
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    depth = int(np.cumsum(steps).max()) if steps.size else 0
    return depth if depth > limit else None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decoded(body: bytes) -> Any:
    """A body as JSON when it is strict JSON (no NaN/Infinity), else as text (kept whole: the size cap bounds it)."""
    if not body:
        return None
    try:
        return json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {"unparsed": body.decode("utf-8", errors="replace")}


def _finite(obj: Any) -> Any:
    """A copy whose non-finite floats are the strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _strict_line(event: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(event, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: written as a string, never bare
        text = json.dumps(_finite(event), ensure_ascii=False, default=str, allow_nan=False)
    return text.encode("utf-8")


def _decoded_lenient(body: bytes) -> Any:
    """Our own JSON that may carry NaN/Infinity (as Python's encoder writes them): parsed, or kept as text."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {"unparsed": body.decode("utf-8", errors="replace")}


def _remove_if_empty(path: Path) -> None:
    """Delete a record file that holds no line (its first line failed): a 0-byte .jsonl would pass for a session
    that was recorded and did nothing."""
    try:
        if path.stat().st_size == 0:
            path.unlink()
    except OSError as exc:
        log.error("record %s: could not remove the empty file (%s)", path, exc)


def _open_append(path: Path) -> Any:
    return open(path, "ab", buffering=0)  # noqa: SIM115 - kept open on purpose, closed by RecordFiles.close()


class RecordFiles:
    """The append handles of the session records, kept open between writes, at most `max_open` at a time.

    Why open handles: reopening the file for every event cost more than the rest of a small tool call's
    bookkeeping. Why a bound: a server may hold hundreds of sessions (a schema fuzzer creates many), and one
    handle per session would exhaust descriptors; the least recently written file is closed first and simply
    reopened if its session writes again. Handles are unbuffered (`buffering=0`): each event is one write(2) of
    a whole line, on the OS's side of the file before `append` returns (no fsync: a server crash keeps it, a
    power cut may not).
    """

    def __init__(self, max_open: int = 64, *, opener: Callable[[Path], Any] = _open_append) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be >= 1, got {max_open!r}")
        self.max_open = max_open
        self._opener = opener  # tests pass one whose writes fail (a full disk)
        self._lock = threading.Lock()
        self._files: OrderedDict[Path, Any] = OrderedDict()

    def append(self, path: Path, data: bytes) -> None:
        """Write one whole line, or none of it: on OSError the file is cut back to where the line began and
        RecordUnavailable is raised."""
        with self._lock:
            handle = self._files.pop(path, None)
            try:
                if handle is None:
                    while len(self._files) >= self.max_open:
                        self._files.popitem(last=False)[1].close()
                    handle = self._opener(path)
                start = handle.seek(0, os.SEEK_END)  # append mode: the line lands here
            except OSError as exc:
                if handle is not None:
                    handle.close()
                    _remove_if_empty(path)
                raise RecordUnavailable(path, exc) from exc
            self._files[path] = handle  # most recently used last
            view = memoryview(data)
            try:
                while view:  # a raw write may be partial; the line goes out whole
                    view = view[handle.write(view):]
            except OSError as exc:
                try:
                    handle.truncate(start)  # no half line stays (truncating frees space, so it works on a full disk)
                except OSError:
                    log.error("record %s: could not remove a half-written line at byte %d", path, start)
                self._files.pop(path, None)
                handle.close()
                if start == 0:  # its first line: no record file at all, rather than an empty one (issue 24)
                    _remove_if_empty(path)
                raise RecordUnavailable(path, exc) from exc

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
            event = {"seq": self._seq + 1, "t": self._clock(), "kind": kind, **fields}
            if raw_body is not None and (b"NaN" in raw_body or b"Infinity" in raw_body):  # re-encode strictly
                fields_body: Any = _decoded_lenient(raw_body)
                event["body"], raw_body = fields_body, None
            line = _strict_line(event)
            if raw_body is not None:
                line = b"".join((line[:-1], b', "body": ', raw_body, b"}\n"))
            else:
                line += b"\n"
            self._files.append(self.path, line)  # RecordUnavailable: nothing written, seq unchanged
            self._seq += 1

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
        received = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            received += message.get("body", b"")
            if len(received) > self.max_body_bytes:
                await self._too_large(send, len(received))
                return
            if not message.get("more_body", False):
                break
        body = bytes(received)  # one copy, shared by the depth check, the record line and the replay
        depth = too_deep(body)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        match = _SESSION_PATH.match(scope.get("path", ""))
        record = self.lookup(match.group(1)) if match else None
        if record is None:
            if depth is not None:
                await _send_json(send, 400, _too_deep_body(depth))
                return
            await self._guarded(scope, replay, send, None, 0.0)
            return

        started = self.clock()
        try:
            record.write("request", method=scope["method"], path=scope["path"],
                         query=scope.get("query_string", b"").decode("latin-1") or None,
                         body={"unparsed": body.decode("utf-8", errors="replace")} if depth is not None
                         else _decoded(body))
        except RecordUnavailable as exc:  # never act on a request the record does not hold
            log.error("%s %s not served: %s", scope["method"], scope["path"], exc)
            await _send_json(send, 503, {"error": {
                "code": "record_unavailable",
                "message": f"the server cannot record this request ({exc}); nothing was done and nothing reached "
                           "the chamber. Retry once the operator has freed space on the record folder."}})
            return
        if depth is not None:
            await self._respond(send, record, scope, started, 400, _too_deep_body(depth))
            return
        await self._guarded(scope, replay, send, record, started)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, record: SessionRecord | None,
                       started: float) -> None:
        """Run the app; record its response (when `record`); an exception that escapes it still gets a 500
        response, and its response line."""
        start: Message | None = None
        chunks: list[bytes] = []
        sent = False

        async def capture(message: Message) -> None:
            nonlocal start, sent
            if record is None:
                sent = sent or message["type"] == "http.response.start"
                await send(message)
                return
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                payload = b"".join(chunks)
                status = start["status"] if start else 500
                timing = self._timing(scope, status, started)
                try:
                    if payload and _is_json(start):  # our own JSON: spliced in as it is
                        record.write("response", raw_body=payload, **timing)
                    else:
                        record.write("response", body=_decoded(payload), **timing)
                except RecordUnavailable as exc:  # the chamber already acted: the caller must still hear of it
                    log.error("%s %s: response not recorded: %s", scope["method"], scope["path"], exc)
                assert start is not None
                sent = True
                await send(start)
                await send({"type": "http.response.body", "body": payload, "more_body": False})
                return
            await send(message)

        try:
            await self.app(scope, receive, capture)
        except Exception as exc:  # a bug below: answer 500 and record it, instead of a reset and a lone request
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            if sent:
                return
            body = {"error": {"code": "internal_error",
                              "message": f"the server failed on this request ({type(exc).__name__}); it is logged. "
                                         "Retrying will not help."}}
            if record is None:
                await _send_json(send, 500, body)
            else:
                await self._respond(send, record, scope, started, 500, body)

    def _timing(self, scope: Scope, status: int, started: float) -> dict[str, Any]:
        return {"method": scope["method"], "path": scope["path"], "status": status,
                "duration_ms": round((self.clock() - started) * 1000.0, 3)}

    async def _respond(self, send: Send, record: SessionRecord, scope: Scope, started: float, status: int,
                       body: dict[str, Any]) -> None:
        """Send a response this middleware makes itself, with its response line."""
        try:
            record.write("response", body=body, **self._timing(scope, status, started))
        except RecordUnavailable as exc:
            log.error("%s %s: response not recorded: %s", scope["method"], scope["path"], exc)
        await _send_json(send, status, body)

    async def _too_large(self, send: Send, size: int) -> None:
        await _send_json(send, 413, {"error": {
            "code": "payload_too_large",
            "message": f"request body of {size} bytes exceeds the {self.max_body_bytes}-byte limit; send less"}})


def _too_deep_body(depth: int) -> dict[str, Any]:
    return {"error": {"code": "body_too_deep",
                      "message": f"the JSON body nests {depth} levels deep; at most {MAX_JSON_DEPTH} levels of "
                                 "arrays and objects are accepted. Send a flatter body."}}


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
