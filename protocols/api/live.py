"""The live feed of the chamber tools API: each chamber's input state, the latest sensor rows, the claim in use.

Why a module of its own, fed by a thin proxy around each chamber: every SET and MSR the service makes (a tool
call, or a protocol that `run_protocol` runs) goes through the chamber object the app was given, so wrapping that
object once (`LiveChamber`) sees all of them without touching the tools, the protocol runner or the driver. The
feed keeps only what a tool call would also show a caller: inputs as describe_chamber reports them, sensor values
as measure(statistic="raw") returns them, and the claim as describe_chamber names it; never a session id (it is a
session's capability) nor bookkeeping columns.

Why bounded and push-based: the feed is read by a browser page over Server-Sent Events for hours, so rows live
in a ring of fixed size (a protocol run of 2,000 rows keeps only the last `ring_rows`), and a stream waits on an
asyncio event that a publisher sets from whichever thread measured (the chamber thread or the event loop), with
no polling. `close()` ends every open stream: uvicorn's shutdown waits for running responses, and an endless
stream would otherwise keep the server from stopping.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any, Callable

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse

from firmware_bridge.variables import Kind

from .live_page import LIVE_PAGE

DEFAULT_RING_ROWS = 300
HEARTBEAT_S = 15.0
"""An SSE comment this often keeps proxies and the browser from timing out an idle stream."""


class LiveFeed:
    """Latest state per chamber, a ring of the latest sensor rows (each with a sequence number), the claim in use.

    Thread-safe: publishers (`record_rows`, `record_state`, `record_claim`) may run on any thread; `stream` runs on
    the server's event loop.
    """

    def __init__(self, *, ring_rows: int = DEFAULT_RING_ROWS, wall_clock: Callable[[], float] = time.time) -> None:
        if ring_rows < 1:
            raise ValueError(f"ring_rows must be at least 1, got {ring_rows}")
        self._clock = wall_clock
        self._lock = threading.Lock()
        self._rows: deque[dict[str, Any]] = deque(maxlen=ring_rows)
        self._seq = 0  # sequence number of the last row recorded
        self._version = 0  # bumps on every change (rows, state, claim)
        self._chambers: dict[str, dict[str, Any]] = {}
        self._claim: dict[str, Any] | None = None
        self._row_s: dict[str, float] = {}  # chamber kind -> seconds per row over its last block of rows
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._closed = False

    # ------------------------------------------------------------------------------------- publishing
    def add_chamber(self, kind: str, config: str | None, sensors: list[dict[str, Any]], state: Mapping[str, Any]) -> None:
        """Announce a connected chamber: its configuration, its sensor columns (name, unit) and its input state."""
        with self._lock:
            self._chambers[kind] = {"config": config, "sensors": sensors, "state": _clean(state), "updated_at": None,
                                    "rows": 0}
        self._changed()

    def record_state(self, kind: str, state: Mapping[str, Any]) -> None:
        """The chamber's inputs after a SET (what describe_chamber would report now)."""
        with self._lock:
            entry = self._chambers.setdefault(kind, {"config": None, "sensors": [], "rows": 0})
            entry["state"], entry["updated_at"] = _clean(state), self._clock()
        self._changed()

    def record_rows(self, kind: str, names: tuple[str, ...], values: Any, timestamps: Any) -> None:
        """Rows just measured on `kind` (values: rows x names, NaN for unset); only sensor columns are kept."""
        with self._lock:
            entry = self._chambers.setdefault(kind, {"config": None, "sensors": [], "state": {}, "rows": 0})
            sensors = [s["name"] for s in entry["sensors"]]
            index = [names.index(s) for s in sensors if s in names]
            total = int(values.shape[0])
            if total >= 2:  # the pace this chamber reads at now (protocols/api/timing.py plans with it)
                span = float(timestamps[total - 1] - timestamps[0])
                if span > 0:
                    self._row_s[kind] = span / (total - 1)
            entry["rows"] += total
            entry["updated_at"] = self._clock()
            self._seq += total
            first = max(0, total - (self._rows.maxlen or total))  # older rows would fall out of the ring at once
            kept = [s for s in sensors if s in names]
            block = values[first:, index].tolist()  # one conversion, not one per reading
            for i, (row, t) in enumerate(zip(block, timestamps[first:].tolist()), start=first):
                self._rows.append({"seq": self._seq - total + 1 + i, "chamber": kind, "t": t,
                                   "values": {name: _number(v) for name, v in zip(kept, row)}})
        self._changed()

    def record_claim(self, claim: Mapping[str, Any], *, chamber: str | None, activity: str) -> None:
        """The claim whose session last used the service (`activity`: what it did, e.g. the tool's name)."""
        with self._lock:
            self._claim = {**claim, "chamber": chamber, "activity": activity, "at": self._clock()}
        self._changed()

    # ------------------------------------------------------------------------------------- reading
    def row_seconds(self, kind: str) -> float | None:
        """Seconds per row of the last block of rows measured on `kind` (None before two rows were seen)."""
        with self._lock:
            return self._row_s.get(kind)

    def snapshot(self, since: int = 0) -> dict[str, Any]:
        """Everything, with only the rows whose sequence number is above `since` (0: the whole ring)."""
        with self._lock:
            rows = [r for r in self._rows if r["seq"] > since]
            return {"seq": self._seq, "version": self._version, "ring_rows": self._rows.maxlen,
                    "chambers": {k: dict(v, state=dict(v.get("state", {}))) for k, v in self._chambers.items()},
                    "claim": None if self._claim is None else dict(self._claim), "rows": rows}

    async def stream(self, *, heartbeat_s: float = HEARTBEAT_S) -> AsyncIterator[str]:
        """Server-Sent Events: first the whole snapshot, then one `update` per change with the new rows only."""
        loop = asyncio.get_running_loop()
        waiter = (loop, asyncio.Event())
        with self._lock:
            if self._closed:
                return
            self._waiters.add(waiter)
        try:
            sent_version, since = -1, 0
            while True:
                waiter[1].clear()
                snap = self.snapshot(since)
                if snap["version"] != sent_version:
                    sent_version, since = snap["version"], snap["seq"]
                    yield f"event: update\nid: {snap['seq']}\ndata: {json.dumps(snap, allow_nan=False)}\n\n"
                if self._closed:
                    return
                try:
                    await asyncio.wait_for(waiter[1].wait(), heartbeat_s)
                except asyncio.TimeoutError:
                    yield ": still here\n\n"
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    def close(self) -> None:
        """End every open stream (and refuse new ones): the server is stopping."""
        with self._lock:
            self._closed = True
        self._wake()

    def _changed(self) -> None:
        with self._lock:
            self._version += 1
        self._wake()

    def _wake(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed; its stream is gone
                pass


class LiveChamber:
    """A connected chamber that reports what the service does to it to a LiveFeed; everything else is the chamber.

    Only `set`, `set_many` and `measure` are intercepted, after the chamber returned: a refused SET or a lost
    link raises before anything reaches the feed, so the page never shows a value the chamber did not take.
    """

    def __init__(self, chamber: Any, kind: str, feed: LiveFeed) -> None:
        self._chamber, self._kind, self._feed = chamber, kind, feed
        sensors = [{"name": v.name, "unit": v.unit} for v in chamber.layout.variables if v.kind is Kind.SENSOR]
        state = chamber.state() if callable(getattr(chamber, "state", None)) else {}
        feed.add_chamber(kind, str(getattr(chamber, "config", None) or chamber.layout.config), sensors, state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chamber, name)

    @property
    def wrapped(self) -> Any:
        """The chamber itself (tests compare identities through it)."""
        return self._chamber

    def set(self, name: str, value: Any) -> float:
        applied = self._chamber.set(name, value)
        self._feed.record_state(self._kind, self._chamber.state())
        return applied

    def set_many(self, settings: Mapping[str, Any]) -> dict[str, float]:
        applied = self._chamber.set_many(settings)
        self._feed.record_state(self._kind, self._chamber.state())
        return applied

    def measure(self, n: int) -> Any:
        frame = self._chamber.measure(n)
        self._feed.record_rows(self._kind, tuple(frame.names), frame.values, frame.host_timestamps)
        return frame


def _number(value: Any) -> float | None:
    """A reading as JSON allows it: NaN (the sensor's 'unset') and infinities become null."""
    number = float(value)
    return number if math.isfinite(number) else None


def _clean(state: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_number(v) if isinstance(v, (int, float)) else v) for k, v in state.items()}


def add_live_routes(app: Any, feed: LiveFeed) -> None:
    """The live view's three read-only routes on `app`: the page at `/`, `/live` (a snapshot), `/live/stream` (SSE).
    One definition for the chamber tools API and for the main job's own view (`live_app`)."""
    @app.get("/", include_in_schema=False)
    async def live_page() -> HTMLResponse:
        return HTMLResponse(LIVE_PAGE, headers={"Cache-Control": "no-store"})

    @app.get("/live", summary="the live feed: each chamber's inputs, the latest sensor rows, the claim in use")
    async def live_snapshot(since: int = 0) -> JSONResponse:
        return JSONResponse(feed.snapshot(since))

    @app.get("/live/stream", include_in_schema=False)
    async def live_stream() -> StreamingResponse:
        return StreamingResponse(feed.stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def live_app(feed: LiveFeed) -> Any:
    """A read-only app with the live view alone, for the main job's own grading (which runs in-process, without the
    tools API). Served on loopback only; it has no tools, so nothing on it can move the chamber."""
    app = FastAPI(title="chamberlab live view", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.live = feed  # serve_in_thread ends the open streams through it before uvicorn stops
    add_live_routes(app, feed)
    return app


def report_graded(feed: LiveFeed) -> Callable[[Any], None]:
    """A `ProtocolContext.graded` callback that shows each claim the batch has just graded on the live view."""

    def graded(claim: Any) -> None:
        feed.record_claim({"id": claim.id, "component": claim.component, "parameter": claim.parameter,
                           "unit": claim.unit}, chamber=None, activity="graded")

    return graded
