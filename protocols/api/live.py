"""The live feed of the chamber tools API and of the main job: each chamber's input state, the latest sensor rows,
the claim in use, the stage of the job, what is being measured now, and how the job ended.

Why a module of its own, fed by a thin proxy around each chamber: every SET and MSR the service makes (a tool
call, or a protocol that `run_protocol` runs) goes through the chamber object the app was given, so wrapping that
object once (`LiveChamber`) sees all of them without touching the tools, the protocol runner or the driver. The
feed keeps only what a tool call would also show a caller: inputs as describe_chamber reports them, sensor values
as measure(statistic="raw") returns them, and the claim as describe_chamber names it; never a session id (it is a
session's capability) nor bookkeeping columns.

Why rows are published one by one: a 200-row MSR on a real-pace wind tunnel takes ~29 s, and a page fed per call
froze for as long. `LiveChamber.measure` watches the serial link's deliveries while its MSR runs (`RowTap`) and
publishes each row with the wall-clock time the host read it; a backend without a serial link (the in-process
simulator) hands over its rows at once, and they are published as the call returns.

Why bounded and push-based: the feed is read by a browser page over Server-Sent Events for hours, so rows live
in a ring of fixed size, and a stream waits on an asyncio event that a publisher sets from whichever thread
measured, with no polling. Each feed has a `start_id`: a page that sees another one knows the service restarted
and drops the traces it drew. `close()` ends every open stream: uvicorn's shutdown waits for running responses.

Why the end is an event of its own, with the report in the stream: the job's view closes when the job ends, and a
page that only saw the stream break said "reconnecting" forever. `record_end` says how the job ended (its status,
the time, the verdicts, the report it wrote); each open stream sends that update and then the report itself (an
`event: report`), so the page keeps a copy and its link still works after the job's process has gone; the page
then stops reconnecting. While the view is up, `GET /report` serves the same file (`live_app`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import numpy as np
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from firmware_bridge.variables import Kind

from .live_page import LIVE_PAGE

DEFAULT_RING_ROWS = 2000
HEARTBEAT_S = 5.0
"""A `ping` event this often keeps proxies from timing out an idle stream and tells the page it is still live."""
RETRY_MS = 1000
"""How soon the browser reconnects after the stream broke (a restarted service is seen within about this)."""
STATIC_FILES = {"uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css", "uPlot.LICENSE": "text/plain"}
"""The vendored charting library (protocols/api/static/, MIT): the only files /static/ serves."""


class LiveFeed:
    """Latest state per chamber, a ring of the latest sensor rows (each with a sequence number), the claim in use,
    the job's stage, the verdicts known so far.

    Thread-safe: publishers may run on any thread; `stream` runs on the server's event loop.
    """

    def __init__(self, *, ring_rows: int = DEFAULT_RING_ROWS, wall_clock: Callable[[], float] = time.time,
                 start_id: str | None = None) -> None:
        if ring_rows < 1:
            raise ValueError(f"ring_rows must be at least 1, got {ring_rows}")
        self._clock = wall_clock
        self._lock = threading.Lock()
        self._rows: deque[dict[str, Any]] = deque(maxlen=ring_rows)
        self._seq = 0  # sequence number of the last row recorded
        self._version = 0  # bumps on every change (rows, state, claim, stage)
        self._chambers: dict[str, dict[str, Any]] = {}
        self._claim: dict[str, Any] | None = None
        self._stage: dict[str, Any] | None = None
        self._measuring: dict[str, Any] | None = None
        self._end: dict[str, Any] | None = None
        self._report: Path | None = None
        self._verdicts: dict[str, dict[str, Any]] = {}
        self._verdicts_version = 0  # bumps when a verdict is recorded: a stream resends them only then
        self._bounds: dict[str, str] = {}  # claim id -> its bound as text, for claims published without one
        self._row_s: dict[str, float] = {}  # chamber kind -> seconds per row over its last block of rows
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._closed = False
        self._forward: list[LiveFeed] = []  # feeds that also show the claims published here (nested views)
        self.start_id = start_id or uuid.uuid4().hex[:12]
        self.started_at = wall_clock()

    # ------------------------------------------------------------------------------------- publishing
    def add_chamber(self, kind: str, config: str | None, sensors: list[dict[str, Any]],
                    state: Mapping[str, Any]) -> None:
        """Announce a connected chamber: its configuration, its sensor columns (name, unit) and its input state."""
        with self._lock:
            note = (self._chambers.get(kind) or {}).get("note")  # a chamber shown again keeps its note
            self._chambers[kind] = {"config": config, "sensors": sensors, "state": _clean(state), "updated_at": None,
                                    "rows": 0, **({"note": note} if note else {})}
        self._changed()

    def record_state(self, kind: str, state: Mapping[str, Any]) -> None:
        """The chamber's inputs after a SET (what describe_chamber would report now)."""
        with self._lock:
            entry = self._chambers.setdefault(kind, {"config": None, "sensors": [], "rows": 0})
            entry["state"], entry["updated_at"] = _clean(state), self._clock()
        self._changed()

    def record_chamber_note(self, kind: str, note: str) -> None:
        """One line about what the chamber is doing in the job (a fleet's chamber: its claims graded so far)."""
        with self._lock:
            entry = self._chambers.setdefault(kind, {"config": None, "sensors": [], "state": {}, "rows": 0})
            entry["note"] = note
        self._changed()

    def record_rows(self, kind: str, names: tuple[str, ...], values: Any, timestamps: Any) -> None:
        """Rows just measured on `kind` (values: rows x names, NaN for unset; timestamps: wall-clock seconds);
        only sensor columns are kept. The chamber's pace comes from whole MSRs (record_pace)."""
        with self._lock:
            entry = self._chambers.setdefault(kind, {"config": None, "sensors": [], "state": {}, "rows": 0})
            sensors = [s["name"] for s in entry["sensors"]]
            index = [names.index(s) for s in sensors if s in names]
            total = int(values.shape[0])
            entry["rows"] += total
            entry["updated_at"] = self._clock()
            self._seq += total
            first = max(0, total - (self._rows.maxlen or total))  # older rows would fall out of the ring at once
            kept = [s for s in sensors if s in names]
            block = values[first:, index].tolist()  # one conversion, not one per reading
            for i, (row, t) in enumerate(zip(block, np.asarray(timestamps)[first:].tolist()), start=first):
                self._rows.append({"seq": self._seq - total + 1 + i, "chamber": kind, "t": t,
                                   "values": {name: _number(v) for name, v in zip(kept, row)}})
        self._changed()

    def record_pace(self, kind: str, timestamps: Any) -> None:
        """The pace of a whole MSR whose rows were published one by one (row_seconds reads it)."""
        with self._lock:
            self._note_pace(kind, timestamps)

    def _note_pace(self, kind: str, timestamps: Any) -> None:
        total = len(timestamps)
        if total >= 2:  # the pace this chamber reads at now (protocols/api/timing.py plans with it)
            span = float(timestamps[total - 1] - timestamps[0])
            if span > 0:
                self._row_s[kind] = span / (total - 1)

    def record_claim(self, claim: Mapping[str, Any], *, chamber: str | None, activity: str) -> None:
        """The claim in use (`activity`: what was done for it, e.g. the tool's name or `graded`). A `bound` key
        (the claim's limits as text) is kept; a feed nesting this one's chambers shows the claim too."""
        with self._lock:
            self._claim = {**claim, "chamber": chamber, "activity": activity, "at": self._clock()}
            forward = list(self._forward)
        self._changed()
        for feed in forward:
            feed.record_claim(claim, chamber=chamber, activity=activity)

    def record_stage(self, stage: str, *, done: int = 0, total: int = 0, note: str = "") -> None:
        """The stage of the job the view belongs to (calibration and checks, station, agent, ...), i/N, a note.
        Another stage ends what was being measured in the one before."""
        with self._lock:
            if self._stage is not None and self._stage["name"] != stage:
                self._measuring = None
            self._stage = {"name": stage, "done": done, "total": total, "note": note, "at": self._clock()}
        self._changed()

    def record_measuring(self, claims: Sequence[str], *, chamber: str, staged: str, rows: int) -> None:
        """What the chambers measure now: the claims one reading serves (`calibration` for the cross-sensor
        calibration), on `chamber`, with `staged` (what is set, in the steps' words) and the `rows` it reads."""
        with self._lock:
            self._measuring = {"claims": list(claims), "chamber": chamber, "staged": staged, "rows": int(rows),
                               "at": self._clock()}
        self._changed()

    def record_end(self, status: str, *, verdicts: Mapping[str, int], report: Path | None = None,
                   note: str = "") -> None:
        """How the job ended: its status (finished, interrupted, failed, ...), how many of each verdict it
        decided, the report it wrote (an HTML file; None: none was written) and a note (the error, the run
        folder). Nothing is measured any more; each open stream sends this, then the report, and ends."""
        with self._lock:
            self._measuring = None
            self._report = Path(report) if report is not None else None
            self._end = {"status": status, "at": self._clock(), "verdicts": sum(int(n) for n in verdicts.values()),
                         "counts": {str(k): int(n) for k, n in verdicts.items()}, "note": note,
                         "report": "report" if self._report is not None else None,
                         "report_name": self._report.name if self._report is not None else None}
        self._changed()

    @property
    def report_file(self) -> Path | None:
        """The report the job wrote (record_end), or None."""
        with self._lock:
            return self._report

    def record_verdicts(self, checks: list[Mapping[str, Any]]) -> None:
        """Verdicts as the runner writes them (CheckResult.to_dict): each claim's verdict and measured value ± U."""
        with self._lock:
            for c in checks:
                m = c.get("measured") or {}
                self._verdicts[str(c["claim_id"])] = {
                    "verdict": c.get("verdict"), "value": m.get("value"), "u": m.get("u"),
                    "unit": m.get("unit") or c.get("claim_unit"),
                    **{k: c[k] for k in ("reason", "class", "source") if c.get(k)}}
            self._verdicts_version += 1
        self._changed()

    def record_bounds(self, bounds: Mapping[str, str]) -> None:
        """Each claim's bound as text (claim_bound), shown with a claim published without one (the API's)."""
        with self._lock:
            self._bounds.update(bounds)

    def forward_claims_to(self, other: LiveFeed) -> None:
        """Show the claims published here on `other` too (the agent's API nested inside the main job's view)."""
        if other is not self:
            with self._lock:
                if other not in self._forward:
                    self._forward.append(other)

    # ------------------------------------------------------------------------------------- reading
    def row_seconds(self, kind: str) -> float | None:
        """Seconds per row of the last whole MSR measured on `kind` (None before two rows were seen)."""
        with self._lock:
            return self._row_s.get(kind)

    def snapshot(self, since: int = 0) -> dict[str, Any]:
        """Everything, with only the rows whose sequence number is above `since` (0: the whole ring)."""
        with self._lock:
            new = min(len(self._rows), max(0, self._seq - since))  # seq is contiguous in the ring: the last `new`
            rows = list(itertools.islice(self._rows, len(self._rows) - new, None))
            claim = None if self._claim is None else dict(self._claim)
            if claim is not None and claim.get("id") in self._verdicts:
                claim["result"] = dict(self._verdicts[claim["id"]])
            if claim is not None and not claim.get("bound") and claim.get("id") in self._bounds:
                claim["bound"] = self._bounds[claim["id"]]
            measuring = None if self._measuring is None else dict(self._measuring, claims=list(
                self._measuring["claims"]))
            bound = next((self._bounds[c] for c in (measuring or {}).get("claims", ()) if c in self._bounds), None)
            if measuring is not None and bound:  # the first claim's (the calibration it may serve has none)
                measuring["bound"] = bound
            return {"start_id": self.start_id, "started_at": self.started_at, "now": self._clock(),
                    "seq": self._seq, "version": self._version, "ring_rows": self._rows.maxlen,
                    "chambers": {k: dict(v, state=dict(v.get("state", {}))) for k, v in self._chambers.items()},
                    "claim": claim, "stage": None if self._stage is None else dict(self._stage),
                    "measuring": measuring, "end": None if self._end is None else dict(self._end),
                    "verdicts": {k: dict(v) for k, v in self._verdicts.items()},
                    "verdicts_version": self._verdicts_version, "rows": rows}

    async def stream(self, *, heartbeat_s: float = HEARTBEAT_S) -> AsyncIterator[str]:
        """Server-Sent Events: first the whole snapshot, then one `update` per change with the new rows only, and
        a `ping` (with the service's start id and time) when nothing changed for `heartbeat_s`; `verdicts` is null
        in an update when none was recorded since the last one sent (a page keeps what it has). Once the job has
        ended (record_end): that update, then the report it wrote as `event: report` ({"name", "html"}), and the
        stream ends."""
        loop = asyncio.get_running_loop()
        waiter = (loop, asyncio.Event())
        with self._lock:
            if self._closed:
                return
            self._waiters.add(waiter)
        try:
            sent_version, since, sent_verdicts = -1, 0, -1
            yield f"retry: {RETRY_MS}\n\n"
            while True:
                waiter[1].clear()
                snap = self.snapshot(since)
                if snap["version"] != sent_version:
                    sent_version, since = snap["version"], snap["seq"]
                    if snap["verdicts_version"] == sent_verdicts:
                        snap["verdicts"] = None  # unchanged: 50-odd verdicts with their reasons, not resent per row
                    sent_verdicts = snap["verdicts_version"]
                    yield f"event: update\nid: {snap['seq']}\ndata: {json.dumps(snap, allow_nan=False)}\n\n"
                if snap["end"] is not None:
                    report = self._report_event()
                    if report:
                        yield report
                    return
                if self._closed:
                    return
                try:
                    await asyncio.wait_for(waiter[1].wait(), heartbeat_s)
                except asyncio.TimeoutError:
                    ping = {"start_id": self.start_id, "now": self._clock()}
                    yield f"event: ping\ndata: {json.dumps(ping)}\n\n"
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    def _report_event(self) -> str:
        """The report the job wrote, as one SSE event (empty: no report, or it cannot be read any more)."""
        path = self.report_file
        if path is None:
            return ""
        try:
            html = path.read_text(encoding="utf-8")
        except OSError:
            return ""
        return f"event: report\ndata: {json.dumps({'name': path.name, 'html': html})}\n\n"

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


@dataclass
class _Sink:
    """One feed to publish a measurement's rows on, and how many of them it has shown already."""

    feed: LiveFeed
    kind: str
    shown: int = 0


class RowTap:
    """Each row of an MSR as the serial link delivers it, to the sinks, while the `with` block runs.

    Why here and not a callback in the driver: the driver returns a frame only once every row is checked (a
    failure discards them all), which is right for a measurement and too late for a view. The tap is the session's
    `row_observer` (Mk1Session.measure calls it with each run of rows the link delivers) and decodes rows the
    way RowChecker does; it only reads. A row shown here belongs to an MSR that may still fail its checks at the end (the driver then
    raises and the caller gets no frame); the view shows what the board sent. A chamber without a serial session
    (the in-process simulator, the Remote Lab) has nothing to tap: its rows are published when the call returns.
    """

    def __init__(self, chamber: Any, sinks: list[_Sink]) -> None:
        self._chamber, self._sinks = chamber, sinks
        self._names = tuple(chamber.layout.names)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        session = _serial_session(self._chamber)
        checker = getattr(session, "checker", None)
        if session is None or checker is None or getattr(session, "row_observer", True) is not None:
            yield
            return
        width, row_bytes = checker.width, checker.row_bytes
        mine = threading.get_ident()  # another thread's MSR (waiting on the driver's lock meanwhile) is not ours

        def observe(data: bytes, stamp: float, count: int) -> None:
            if threading.get_ident() == mine and len(data) == count * row_bytes and width == len(self._names):
                self._publish(data, stamp, count, width)

        session.row_observer = observe
        try:
            yield
        finally:
            session.row_observer = None

    def _publish(self, data: bytes, stamp: float, count: int, width: int) -> None:
        values = np.frombuffer(data, dtype="<f4").reshape(count, width).astype(np.float64)
        stamps = np.full(count, float(stamp))
        for sink in self._sinks:
            sink.feed.record_rows(sink.kind, self._names, values, stamps)
            sink.shown += count


def _serial_session(chamber: Any) -> Any:
    """The chamber's Mk1Session, if it talks to a board over a serial link (else None); no I/O."""
    backend = getattr(chamber, "backend", None)
    try:
        return getattr(backend, "session", None)
    except Exception:  # noqa: BLE001 - a backend not connected yet says so by raising; nothing to tap then
        return None


class LiveChamber:
    """A connected chamber that reports what the service does to it to a LiveFeed; everything else is the chamber.

    Only `set`, `set_many` and `measure` are intercepted: a refused SET or a lost link raises before the state
    reaches the feed, so the page never shows an input the chamber did not take. Rows are published as the link
    delivers them (RowTap). Wrapping a LiveChamber again (the agent's chamber tools API inside the main job)
    keeps one tap for both feeds and shows the inner API's claims on the outer view.
    """

    def __init__(self, chamber: Any, kind: str, feed: LiveFeed) -> None:
        self._chamber, self._kind, self._feed = chamber, kind, feed
        sensors = [{"name": v.name, "unit": v.unit} for v in chamber.layout.variables if v.kind is Kind.SENSOR]
        state = chamber.state() if callable(getattr(chamber, "state", None)) else {}
        feed.add_chamber(kind, str(getattr(chamber, "config", None) or chamber.layout.config), sensors, state)
        if isinstance(chamber, LiveChamber):
            feed.forward_claims_to(chamber._feed)

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
        return self._measure(n, [])

    def _measure(self, n: int, outer: list[_Sink]) -> Any:
        sinks = [_Sink(self._feed, self._kind), *outer]
        if isinstance(self._chamber, LiveChamber):
            return self._chamber._measure(n, sinks)
        with RowTap(self._chamber, sinks).watching():
            frame = self._chamber.measure(n)
        names, values, stamps = tuple(frame.names), frame.values, frame.host_timestamps
        for sink in sinks:
            if sink.shown < len(values):  # rows not seen on the link (no serial session, or a reconnect)
                sink.feed.record_rows(sink.kind, names, values[sink.shown:], stamps[sink.shown:])
            sink.feed.record_pace(sink.kind, stamps)
        return frame


def _number(value: Any) -> float | None:
    """A reading as JSON allows it: NaN (the sensor's 'unset') and infinities become null."""
    number = float(value)
    return number if math.isfinite(number) else None


def _clean(state: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_number(v) if isinstance(v, (int, float)) else v) for k, v in state.items()}


def add_live_routes(app: Any, feed: LiveFeed) -> None:
    """The live view's read-only routes on `app`: the page at `/`, `/live` (a snapshot), `/live/stream` (SSE),
    `/live/static/...` (the vendored charting library). One definition for the chamber tools API and for the
    main job's own view (`live_app`)."""
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

    @app.get("/live/static/{name}", include_in_schema=False)
    async def live_static(name: str) -> Response:
        if name not in STATIC_FILES:
            return JSONResponse({"error": {"code": "not_found", "message": f"no static file {name!r}; served: "
                                           + ", ".join(sorted(STATIC_FILES))}}, status_code=404)
        body = resources.files("protocols.api").joinpath("static", name).read_bytes()
        return Response(body, media_type=STATIC_FILES[name], headers={"Cache-Control": "max-age=3600"})


def live_app(feed: LiveFeed) -> Any:
    """A read-only app with the live view alone, for the main job's own grading (which runs in-process, without the
    tools API), and `GET /report`: the report the job wrote, once it has ended (record_end). Served on loopback
    only; it has no tools, so nothing on it can move the chamber."""
    app = FastAPI(title="chamberlab live view", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.live = feed  # serve_in_thread ends the open streams through it before uvicorn stops
    add_live_routes(app, feed)

    @app.get("/report", include_in_schema=False)
    async def report() -> Response:
        path = feed.report_file
        if path is None:
            return JSONResponse({"error": {"code": "no_report", "message": "no report yet: the job writes it when "
                                           "it ends, and this view then links it"}}, status_code=404)
        try:
            return HTMLResponse(path.read_text(encoding="utf-8"), headers={"Cache-Control": "no-store"})
        except OSError as exc:
            return JSONResponse({"error": {"code": "report_unreadable", "message": f"expected the report at {path}, "
                                           f"got {type(exc).__name__}: {exc}"}}, status_code=404)
    return app


def claim_bound(claim: Any) -> str:
    """A claim's limits as one line of text: `300 ≤ x ≤ 1200 hPa`, `≥ 5 V`, `= 3.3 ± 0.1 V`."""
    low, high, value, unit = (getattr(claim, k, None) for k in ("low", "high", "value", "unit"))
    if low is not None and high is not None:
        return f"{low} … {high} {unit}"
    if low is not None:
        return f"≥ {low} {unit}"
    if high is not None:
        return f"≤ {high} {unit}"
    return f"= {value} {unit}" if value is not None else ""


def report_graded(feed: LiveFeed) -> Callable[[Any], None]:
    """A `ProtocolContext.graded` callback that shows each claim the batch has just graded on the live view."""

    def graded(claim: Any) -> None:
        feed.record_claim({"id": claim.id, "component": claim.component, "parameter": claim.parameter,
                           "unit": claim.unit, "bound": claim_bound(claim)}, chamber=None, activity="graded")

    return graded

