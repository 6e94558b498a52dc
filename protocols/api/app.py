"""The chamber tools API as a FastAPI app: sessions, the extraction freeze, the tools, the lease, the record.

Why a factory with everything passed in: the chambers (a mapping kind -> connected Chamber), the operator limits,
the record folder, the clocks and the token come from the caller (the CLI, a test, the main job), so the same app
serves a real board, the in-process simulator or a test double, and nothing here opens a port or reads a path
on its own.

Request path of a tool call `POST /sessions/{id}/tools/{name}` (the order is the contract):
  auth (401; without a token: Host/Origin loopback, 403) -> body cap (413) -> nesting depth (400) -> record the
  request (503 if it cannot be written: nothing else happens) -> session exists (404) -> not ended, extraction
  frozen (409) -> Content-Type application/json (415) -> arguments parse against the tool's model (422) -> lease
  (409 + Retry-After) -> the tool (SETs only after the whole request passed the SettingGuard; measurements only
  while the pressure controller cannot drive a fan past its limit) -> record the response -> reply.
Each session starts from the chamber at rest (issue 24: a session inherited the last one's `hatch 40,
load_in 0.7`): the first time a session takes a chamber's lease after another session (or nobody) used it, the
safe settings not in force are applied, every input the last session moved is put back, and a `safe_state` event
in the session's record says what was applied. Why at the lease and not at POST /sessions: a new session must not
move a chamber another session is working on; and with two sessions alternating on one chamber, each finds it at
rest when it takes it back, never half of the other's staging. Each session also ends by handing its chambers
back safe (issue 31): the safe state applied and read back, at once on submit_chamber_outcome or DELETE, and, for
a session its client abandoned, once it has been idle for `session_idle_s` (a background sweep of the served
app; handback.py). GET /health reports each chamber's link as the driver knows it (200 while any chamber is up,
"degraded" if one is not; 503 "down" when none is). POST /sessions/{id}/plans/{tool} says a call's planned
chamber seconds before it is made, so a client sets its read timeout from them (timing.py; including the session's
take of a chamber and, for submit_chamber_outcome, the hand-back); it is answered before the freeze too (it reads
nothing from the chamber) and recorded like every path of a session.
Arguments are validated after the freeze check on purpose: before the freeze every chamber tool answers 409,
whatever was sent. The tool's schema is still documented in /openapi.json (and served at GET /tools).

Why the tool route is async: everything but the chamber work is bookkeeping of a few tens of microseconds, done
on the event loop; the chamber work runs where `ChamberRunner` says (inline for the in-process simulator, a
thread per chamber for a device). Bouncing every call through the thread pool cost more than the call itself and,
with many clients, made the loop and a crowd of pool threads fight over the GIL (issue #5 latency goal).
"""

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from chamber.errors import ChamberError, InvalidSetting
from chamber.limits import OperatorLimits, as_limits
from chamber.safe_state import SafeState, resolve_safe_state, safe_state_of
from firmware_bridge.errors import BridgeError
from protocols.claims import Claim, load_claims

from .auth import BearerAuthMiddleware, LoopbackHostMiddleware
from .chamber_state import link_of, state_now
from .errors import ApiError, error_body
from .guard import GuardedChamber, SettingGuard
from protocols.service_defaults import (DEFAULT_LEASE_TIMEOUT_S, DEFAULT_MAX_HOLD_S, DEFAULT_MAX_SESSIONS,
                                         DEFAULT_MAX_SESSIONS_PER_CLIENT, DEFAULT_SESSION_IDLE_S, DEFAULT_SWEEP_S)

from .handback import Handback
from .lease import ChamberLeases, LeaseBusy, LeaseGrant
from .live import LiveChamber, LiveFeed, add_live_routes
from .operator import add_operator_routes
from .record import RecordFiles, RecordMiddleware, RecordUnavailable, SessionRecord
from .runner import MODES, ChamberRunner, mode_for
from .schemas import (
    CreateSession,
    ErrorResponse,
    ExtractionFrozen,
    FreezeExtraction,
    FrozenExtraction,
    PlannedCall,
    SessionCreated,
    SessionStatus,
    ToolSpecModel,
    jsonable,
)
from .sessions import Session, SessionStore
from .timing import chambers_touched, nominal_row_s, planned_seconds
from .tools import TOOLS, TOOLS_BY_NAME, Tool, ToolEnvironment

log = logging.getLogger(__name__)

API_VERSION = "1.0"
DEFAULT_MAX_BODY_BYTES = 1 << 20

APPARATUS_ERRORS: tuple[type[BaseException], ...] = (BridgeError, ChamberError, OSError, TimeoutError)
"""Link lost, firmware halted, port gone: the apparatus failed, not the request (503, nothing partial returned)."""

STOP_GRACE_S = 1.0
"""When the server stops, how long a chamber call in flight may go on before it is cut short (a SET finishes in
milliseconds; a 200-row measure would take 28 s, and the exit path's safe state must not wait for it)."""


@dataclass
class ApiState:
    """What the app holds, reachable as `app.state.api` (tests and the CLI read it)."""

    store: SessionStore
    lease: ChamberLeases
    env: ToolEnvironment
    runner: ChamberRunner
    live: LiveFeed
    handback: Handback
    faults: dict[str, str] = field(default_factory=dict)  # chamber kind -> the last apparatus error seen on it

    def prepare_stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """The server is about to stop (called from the thread that stops it): end the live streams, refuse new
        chamber work and cut a chamber call in flight short after `grace_s` (Handback.stop)."""
        self.live.close()
        self.handback.stop(grace_s)

    def close(self) -> None:
        """Close the record files, end the live streams and stop the chamber thread (when the server stops)."""
        self.live.close()
        self.store.close()
        self.runner.close()


def _limits_by_kind(limits: Any, kinds: list[str]) -> dict[str, list[OperatorLimits]]:
    """Operator limits per chamber kind from: None, one OperatorLimits (for its `chamber`, or all when None), a
    dict/path in the limits-file format, or a mapping {"wt": limits, "lt": limits}."""
    out: dict[str, list[OperatorLimits]] = {k: [] for k in kinds}
    if limits is None:
        return out
    if isinstance(limits, Mapping) and limits and set(limits) <= {"wt", "lt"}:
        for kind, value in limits.items():
            parsed = as_limits(value)
            if parsed is not None and kind in out:
                out[kind].append(parsed)
        return out
    parsed = as_limits(limits)  # type: ignore[arg-type]
    for kind in kinds:
        part = parsed.for_chamber(kind) if parsed is not None else None  # one file may cover both chambers
        if part is not None:
            out[kind].append(part)
    return out


def _validation_message(errors: list[dict[str, Any]], what: str) -> str:
    parts = []
    for err in errors[:8]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "(body)"
        msg = str(err.get("msg", "invalid"))
        given = err.get("input")
        shown = json.dumps(jsonable(given))[:80] if err.get("type") != "missing" else None
        parts.append(f"{loc}: {msg}" + (f" (got {shown})" if shown is not None else ""))
    more = f" (+{len(errors) - 8} more)" if len(errors) > 8 else ""
    return f"invalid arguments for {what}: " + "; ".join(parts) + more


def create_app(
    chambers: Mapping[str, Any],
    *,
    limits: Any = None,
    record_dir: str | Path,
    clock: Callable[[], float] = time.monotonic,
    lease_timeout_s: float = DEFAULT_LEASE_TIMEOUT_S,
    token: str | None = None,
    claims: Mapping[str, Claim] | None = None,
    wall_clock: Callable[[], float] = time.time,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    call_wait_s: float | None = None,
    new_session_id: Callable[[], str] | None = None,
    chamber_calls: str = "auto",
    lease_max_hold_s: float = DEFAULT_MAX_HOLD_S,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
    session_idle_s: float = DEFAULT_SESSION_IDLE_S,
    allowed_hosts: tuple[str, ...] = (),
    safe: SafeState | None = None,
    record_files: RecordFiles | None = None,
    sweep_every_s: float = DEFAULT_SWEEP_S,
) -> FastAPI:
    """Build the API over connected chambers {"wt": Chamber, "lt": Chamber} (either may be absent).

    `limits`: operator limits enforced on the server in addition to each chamber's own `limits` (see
    `_limits_by_kind` for the accepted forms). `clock` (monotonic seconds) drives the lease timeout; `wall_clock`
    stamps the records. `token`: when given, every request needs `Authorization: Bearer <token>`.
    `call_wait_s`: how long a session's second concurrent call waits for its first (default: the lease timeout).
    `chamber_calls`: where chamber work runs, "inline" on the event loop, "thread" (a worker thread per chamber)
    or "auto" (inline when every chamber is the in-process simulator; see runner.py).
    `lease_max_hold_s`: the longest one session keeps a chamber's lease while another asks (lease.py).
    `max_sessions`, `max_sessions_per_client`: the caps on open sessions (all, and per client address);
    `session_idle_s`: a session without a request (and no call in flight) this long is ended as abandoned and its
    chambers handed back safe (sessions.py, handback.py), by a sweep every `sweep_every_s` that the served app
    runs (server.serve_in_thread starts `app.state.background`; a TestClient does not: tests call
    `app.state.api.handback.sweep()`).
    `allowed_hosts`: names besides the loopback ones a tokenless server answers to (auth.py). `safe`: the safe
    state sessions start from, end in and POST /operator/recover applies (default: each chamber's own, the resting
    state plus the limits' `safe:` section: chamber.safe_state).
    `record_files`: the pool of open record files (tests pass one whose writes fail).
    """
    if chamber_calls not in MODES:
        raise ValueError(f"chamber_calls must be one of {', '.join(MODES)}, got {chamber_calls!r}")
    kinds = sorted(chambers)
    mode = mode_for(chambers) if chamber_calls == "auto" else chamber_calls
    live = LiveFeed(wall_clock=wall_clock)
    chambers = {kind: LiveChamber(ch, kind, live) for kind, ch in chambers.items()}  # every SET and MSR is seen
    per_kind = _limits_by_kind(limits, kinds)
    guards = {kind: SettingGuard(ch.layout, [*per_kind[kind], getattr(ch, "limits", None)]) for kind, ch in chambers.items()}
    chambers = {kind: GuardedChamber(ch, guards[kind]) for kind, ch in chambers.items()}  # the PID's reach too
    env = ToolEnvironment(chambers=dict(chambers), guards=guards, lease_timeout_s=float(lease_timeout_s))
    store_kwargs = {"new_id": new_session_id} if new_session_id is not None else {}
    lease = ChamberLeases(kinds, lease_timeout_s, clock=clock, wait_s=call_wait_s, max_hold_s=lease_max_hold_s)
    store = SessionStore(claims if claims is not None else load_claims(), Path(record_dir), connected=kinds,
                         wall_clock=wall_clock, max_sessions=max_sessions, idle_s=session_idle_s,
                         record_files=record_files, max_per_client=max_sessions_per_client, in_call=lease.in_call,
                         **store_kwargs)
    safe_by_kind = _safe_by_kind(safe, per_kind, chambers)
    runner = ChamberRunner(mode, lanes=max(1, len(kinds)))
    faults: dict[str, str] = {}
    operator_record = SessionRecord(Path(record_dir) / "operator.jsonl", wall_clock, RecordFiles(max_open=1))
    handback = Handback(env=env, lease=lease, runner=runner, store=store, safe_by_kind=safe_by_kind, faults=faults,
                        operator_record=operator_record)
    state = ApiState(store, lease, env, runner, live, handback, faults)

    app = FastAPI(
        title="chamberlab chamber tools API",
        version=API_VERSION,
        description="Tools an agent uses on the Causal Chambers after freezing its datasheet extraction. Errors are "
                    "`{\"error\": {\"code\", \"message\"}}`; chamber tools answer 409 until the extraction is frozen.",
        responses={422: {"model": ErrorResponse}, 404: {"model": ErrorResponse}},
    )
    app.state.api = state
    app.state.live = live  # serve_in_thread ends the open streams through it before uvicorn stops
    app.state.on_stop = (state.prepare_stop,)  # serve_in_thread calls these as the server begins to stop
    app.state.background = ((lambda: handback.run(sweep_every_s)),)  # serve_in_thread runs these on its loop

    # ------------------------------------------------------------------------------------------ errors
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        what = f"{request.method} {request.url.path}"
        errors = [dict(e) for e in exc.errors()]
        return JSONResponse(error_body("invalid_arguments", _validation_message(errors, what) +
                                       ". See /openapi.json for the expected body.", jsonable(errors[:8])),
                            status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            code, message = "not_found", f"no route {request.method} {request.url.path}; see /openapi.json"
        elif exc.status_code == 405:
            code, message = "method_not_allowed", f"{request.method} is not allowed on {request.url.path}; see /openapi.json"
        else:
            code, message = "invalid_arguments", str(exc.detail)
        return JSONResponse(error_body(code, message), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:  # pragma: no cover - a bug
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal_error", f"the server failed on this request ({type(exc).__name__}); "
                                       "it is logged. Retrying will not help."), status_code=500)

    # ------------------------------------------------------------------------------------------ service
    @app.get("/health", summary="liveness, what is connected, and each chamber's link",
             responses={503: {"description": "every connected chamber is down or halted"}})
    async def health() -> JSONResponse:
        links = {kind: link_of(env.chambers[kind], state.faults.get(kind)) for kind in kinds}
        down = [kind for kind, link in links.items() if link["link"] != "up"]
        status = "ok" if not down else ("down" if len(down) == len(kinds) else "degraded")
        return JSONResponse({"status": status, "api_version": API_VERSION, "chambers": kinds, "links": links,
                             "tools": [t.name for t in TOOLS]}, status_code=503 if status == "down" else 200)

    tool_specs = [t.spec() for t in TOOLS]

    @app.get("/tools", response_model=list[ToolSpecModel], summary="the chamber tools: name, description, input_schema")
    async def list_tools() -> JSONResponse:
        return JSONResponse(tool_specs)

    # ------------------------------------------------------------------------------------------ live view
    # Read-only and behind the same auth as every route: the feed holds only what tool calls show (live.py).
    add_live_routes(app, live)

    # ------------------------------------------------------------------------------------------ sessions
    @app.post("/sessions", response_model=SessionCreated, status_code=201, summary="start a session for one claim")
    def create_session(body: CreateSession, request: Request) -> JSONResponse:
        session = store.create(body.claim_id, request.client.host if request.client is not None else None)
        created = SessionCreated(session_id=session.id, claim_id=session.claim.id, chamber=session.chamber,
                                 connected_chambers=kinds, lease_timeout_s=lease.timeout_s,
                                 session_idle_s=store.idle_s).model_dump()
        try:
            session.record.write("request", method="POST", path="/sessions", query=None, body=body.model_dump())
            session.record.write("response", method="POST", path="/sessions", status=201, body=created)
        except RecordUnavailable as exc:  # a session without its record would act unrecorded: none is made
            store.end(session, "record_unavailable")
            raise _unrecorded(exc) from None
        live.record_claim(env.claim_parts(session)[0], chamber=session.chamber, activity="session started")
        return JSONResponse(created, status_code=201)

    def _status(session: Session) -> dict[str, Any]:
        return SessionStatus(session_id=session.id, claim_id=session.claim.id, chamber=session.chamber,
                             frozen=session.frozen, extraction_sha256=session.extraction_sha256, ended=session.ended,
                             end_reason=session.end_reason, holds_lease=lease.holds(session.id),
                             outcome=session.outcome).model_dump()

    @app.get("/sessions/{session_id}", response_model=SessionStatus, summary="a session's state")
    async def get_session(session_id: str) -> JSONResponse:
        return JSONResponse(jsonable(_status(store.get(session_id))))

    @app.delete("/sessions/{session_id}", response_model=SessionStatus,
                summary="end a session: its chambers are handed back safe (read back) and its leases freed")
    async def delete_session(session_id: str) -> JSONResponse:
        session = store.get(session_id)
        store.end(session, "deleted")
        await handback.session_ended(session)
        return JSONResponse(jsonable(_status(session)))

    @app.post("/sessions/{session_id}/extraction", response_model=ExtractionFrozen,
              summary="freeze the extraction (once); opens the chamber tools")
    def freeze_extraction(session_id: str, body: FreezeExtraction) -> JSONResponse:
        session = store.get(session_id)
        digest = store.freeze(session, body.payload)
        return JSONResponse(ExtractionFrozen(session_id=session.id, sha256=digest,
                                             frozen_at=session.frozen_at or 0.0).model_dump())

    @app.get("/sessions/{session_id}/extraction", response_model=FrozenExtraction, summary="the frozen extraction")
    def get_extraction(session_id: str) -> JSONResponse:
        session = store.get(session_id)
        payload = session.extraction()
        return JSONResponse({"session_id": session.id, "sha256": session.extraction_sha256, "payload": payload})

    # ------------------------------------------------------------------------------------------ tools
    async def run_tool(session_id: str, tool: Tool, raw: bytes, content_type: str | None) -> JSONResponse:
        session = store.get(session_id)
        store.require_chamber_phase(session, tool.name)
        _require_json(tool, raw, content_type)
        args = _parse_arguments(tool, raw)
        if not tool.uses_chamber:  # submit_chamber_outcome: store, end, hand the chambers back, free the lease
            result = tool.run(env, session, args)
            if not store.end(session, "submitted", result["outcome"]):
                raise ApiError("session_ended", f"session {session.id} has ended ({session.end_reason})")
            await handback.session_ended(session)
            return JSONResponse({**result, "stored": True, "ended": True})
        touched = chambers_touched(tool.name, args, session.chamber, kinds, session.claim)
        try:
            grants = await lease.begin(session.id, touched)
        except LeaseBusy as exc:
            raise ApiError("chamber_busy", f"{tool.name}: {exc}",
                           headers={"Retry-After": str(exc.retry_after_s)}) from None
        try:
            for kind, grant in grants.items():
                if grant.how == "taken_over":
                    session.record.write("lease", chamber=kind, how="taken_over", previous_holder=grant.previous_holder)
            if session.ended:  # ended (DELETE) while this call waited for the session's previous one
                raise ApiError("session_ended", f"session {session.id} has ended ({session.end_reason})")
            if handback.stopping:  # the chambers are being made safe for the server's exit
                raise ApiError("server_stopping", f"{tool.name}: the server is stopping; nothing reached the "
                                                  "chamber. Retry on a server that is running.")
            for kind in touched:  # a session starts from the chamber at rest on each chamber it takes (docstring)
                await handback.take(session, kind)
            live.record_claim(env.claim_parts(session)[0], chamber=session.chamber, activity=tool.name)
            result = await runner.run(tool.run, env, session, args)
        except ApiError:
            raise
        except RecordUnavailable as exc:
            raise _unrecorded(exc) from None
        except InvalidSetting as exc:
            raise ApiError("setting_refused", f"{tool.name}: {exc}") from None
        except APPARATUS_ERRORS as exc:
            log.warning("%s: apparatus error: %s", tool.name, exc)
            for kind in touched or [session.chamber or "?"]:  # the chambers the call was on (health shows it)
                state.faults[kind] = f"{type(exc).__name__}: {exc}"
            raise ApiError("apparatus_error", f"{tool.name} failed on the apparatus ({type(exc).__name__}: {exc}); "
                                              "nothing partial was returned. Retry later; if it persists the "
                                              "operator must recover the chamber (POST /operator/recover).") from None
        except Exception as exc:
            log.exception("%s failed", tool.name)
            raise ApiError("internal_error", f"{tool.name} failed inside the server ({type(exc).__name__}); "
                                             "it is logged. Retrying will not help.") from None
        finally:
            lease.end(session.id, touched)
            store.touch(session)  # a long call is activity, not idle time
        return JSONResponse(result, headers={"X-Chamber-Lease": _lease_header(grants)})

    for tool in TOOLS:
        _add_tool_route(app, tool, run_tool)

    @app.post("/sessions/{session_id}/tools/{name}", include_in_schema=False)
    async def unknown_tool(session_id: str, name: str) -> JSONResponse:
        store.get(session_id)
        raise ApiError("unknown_tool", f"no tool {name!r}; tools: {', '.join(TOOLS_BY_NAME)} (see GET /tools)")

    def row_s(kind: str) -> float:
        seen = live.row_seconds(kind)
        nominal = nominal_row_s(kind, getattr(env.chambers[kind], "config", None))
        return max(nominal, seen or 0.0)

    @app.post("/sessions/{session_id}/plans/{name}", response_model=PlannedCall,
              summary="a tool call's planned chamber seconds, before making it (same body as the tool)")
    async def plan_call(session_id: str, name: str, request: Request) -> JSONResponse:
        session = store.get(session_id)
        tool = TOOLS_BY_NAME.get(name)
        if tool is None:
            raise ApiError("unknown_tool", f"no tool {name!r}; tools: {', '.join(TOOLS_BY_NAME)} (see GET /tools)")
        raw = await request.body()
        _require_json(tool, raw, request.headers.get("content-type"))
        args = _parse_arguments(tool, raw)
        touched = chambers_touched(tool.name, args, session.chamber, kinds, session.claim) if tool.uses_chamber else []
        start = {kind: handback.start_plan(session, kind) for kind in touched}  # a take brings the chamber to rest
        seconds = planned_seconds(tool.name, args, touched, session.claim, row_s=row_s,
                                  state=lambda kind: start[kind][1] if kind in start else state_now(env.chambers[kind]))
        seconds += sum(taking for taking, _ in start.values())
        if tool.name == "submit_chamber_outcome":  # it hands the session's chambers back, read back (handback.py)
            seconds += handback.end_seconds(session, row_s)
        return JSONResponse(PlannedCall(tool=tool.name, chambers=touched, planned_s=round(seconds, 3),
                                        row_s={kind: row_s(kind) for kind in touched},
                                        lease_wait_s=lease.wait_s).model_dump())

    add_operator_routes(app, state, safe_by_kind, operator_record)

    app.add_middleware(RecordMiddleware, lookup=lambda sid: (s.record if (s := store.lookup(sid)) else None),
                       max_body_bytes=max_body_bytes, clock=clock)
    if token is not None:
        app.add_middleware(BearerAuthMiddleware, token=token)
    else:  # the tokenless loopback default: refuse DNS-rebound requests (auth.py)
        app.add_middleware(LoopbackHostMiddleware, extra_hosts=tuple(allowed_hosts))
    return app


def _lease_header(grants: dict[str, LeaseGrant]) -> str:
    """X-Chamber-Lease: "taken_over" if any chamber's lease was, else "acquired" if any was free, else "held"
    ("none": the call touched no connected chamber)."""
    hows = {grant.how for grant in grants.values()}
    return next((how for how in ("taken_over", "acquired", "held") if how in hows), "none")


def _unrecorded(exc: RecordUnavailable) -> ApiError:
    return ApiError("record_unavailable", f"the server cannot record this call ({exc}); nothing reached the "
                                          "chamber. Retry once the operator has freed space on the record folder.")


def _safe_by_kind(safe: SafeState | None, per_kind: dict[str, list[OperatorLimits]],
                  chambers: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """The safe settings per chamber (a session's start and end, recovery): `safe`, else the chamber's resting state
    plus the server limits' `safe:` section (`per_kind`, the limits create_app already parsed: a limits file is
    read once; chamber.safe_state checks and merges it, so a section only adds to the resting state), else the
    chamber's own (safe_state_of: its driver's limits' section added to the resting state)."""
    if safe is not None:
        return {kind: safe.for_chamber(kind) for kind in chambers}
    out = {}
    for kind, chamber in chambers.items():
        limits = next((lim for lim in per_kind[kind] if lim.safe is not None), None)
        resolved = resolve_safe_state(None, limits) if limits is not None else safe_state_of(chamber)
        out[kind] = resolved.for_chamber(kind)
    return out


def _require_json(tool: Tool, raw: bytes, content_type: str | None) -> None:
    """A tool body must be declared JSON (a cross-site form or text/plain post is not); an empty body needs none."""
    if not raw.strip():
        return
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise ApiError("unsupported_media_type", f"{tool.name}: the body must be sent with Content-Type: "
                                                 f"application/json; it came as {content_type or '(none)'!r}")


def _parse_arguments(tool: Tool, raw: bytes) -> Any:
    """The tool's argument model from the body: empty body or null means {} (every argument at its default)."""
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError("invalid_arguments", f"{tool.name}: the body is not JSON ({exc}); send a JSON object "
                                            "matching the tool's input_schema (GET /tools)") from None
    if data is None:
        data = {}
    try:
        return tool.arguments.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise ApiError("invalid_arguments", _validation_message(errors, tool.name) +
                       ". Send a JSON object matching the tool's input_schema (GET /tools).",
                       details=jsonable(errors[:8])) from None


def _add_tool_route(app: FastAPI, tool: Tool,
                    run_tool: Callable[[str, Tool, bytes, str | None], Awaitable[JSONResponse]]) -> None:
    required = bool(tool.arguments.model_json_schema().get("required"))

    async def endpoint(session_id: str, request: Request) -> JSONResponse:
        raw = await request.body()
        return await run_tool(session_id, tool, raw, request.headers.get("content-type"))

    app.add_api_route(
        f"/sessions/{{session_id}}/tools/{tool.name}",
        endpoint,
        methods=["POST"],
        name=tool.name,
        summary=tool.name,
        description=tool.description,
        response_model=dict[str, Any],
        responses={409: {"model": ErrorResponse, "description": "extraction not frozen, session ended, or chamber busy"},
                   415: {"model": ErrorResponse}, 422: {"model": ErrorResponse}, 404: {"model": ErrorResponse},
                   503: {"model": ErrorResponse}},
        openapi_extra={"requestBody": {"required": required, "content": {
            "application/json": {"schema": tool.spec()["input_schema"]}}}},
    )
