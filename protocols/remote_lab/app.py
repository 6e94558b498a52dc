"""The Remote Lab HTTP API (v0), as the chamber authors' client `causalchamber.lab` speaks it.

Why each choice: the client is the contract (notes in shared/docs/remote-lab.md). It sends HTTP basic auth on
every request, maps 400/401/403/409/422 to UserError and anything else to LabError, and reads `message`,
`request_id` and `scheduler_id` from a JSON error body — so every refusal here has that body and the status that
puts the blame where it belongs (a bad instruction 400, a wrong password 401, someone else's experiment or an
unknown chamber 403, a busy session 409; the lab's own faults 5xx). It downloads a finished experiment with a
plain GET and no credentials, so the download URL carries an unguessable token instead. Everything the client
sends is checked here (protocols.remote_lab.validation) before it is queued or reaches a worker; state lives in
the store, so a restarted API loses nothing.

Why the real-time handlers are coroutines (issue 32: one user's `WAIT,60000` held a server thread, and 40 such
calls left every other user's GET waiting 55 s): a call is queued in the database for the chamber's worker and
its answer is awaited on the event loop, woken by the worker (wakeups.py), so no thread waits on a chamber and the
short database reads of every request keep the threadpool to themselves. Who may do what is decided before
anything is queued: credentials (gate.py: the login limiter, hashing slots), a session's owner, one call at a
time per session (409 at once), a call's planned chamber time within the lab's `max_call_s` (400), the
real-time sharing rules (session_store.py), the per-user caps on queued work (store.submit). The audit records
who submitted, cancelled, downloaded, opened or took over a session, from which address.
"""

from __future__ import annotations

import asyncio
import email.policy
import functools
import logging
import secrets
import time
import uuid
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from typing import Any, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from protocols.remote_lab import audit, session_store, store
from protocols.remote_lab.accounts import Accounts
from protocols.remote_lab.gate import Caller, GateRefusal, LabBasic, LoginGate
from protocols.remote_lab.lab_file import Lab
from protocols.remote_lab.logins import LoginLimiter
from protocols.remote_lab.validation import InvalidProtocol, check_protocol
from protocols.remote_lab.wakeups import Wakeups
from protocols.remote_lab.worker import LEASE_TTL_S

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 8 << 20
MODELS = {"wt": "Wind tunnel Mk1", "lt": "Light tunnel Mk1"}
DOCUMENTATION = "https://github.com/juangamella/causal-chamber"


class LabRequestError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class ExperimentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    chamber_id: str = Field(max_length=64)
    chamber_config: str = Field(max_length=64)
    instructions: list[Any]
    tag: str | None = None


class SessionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    chamber_id: str = Field(max_length=64)
    chamber_config: str = Field(max_length=64)


class InstructionsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instructions: list[Any]


class BodyCap:
    """Refuse a request body over `limit` bytes before any handler parses it, whether it says its length
    (Content-Length) or not (chunked): the body is read here, counted, and handed on whole."""

    def __init__(self, app: Any, limit: int, refuse: Callable[..., JSONResponse]):
        self.app, self.limit, self.refuse = app, limit, refuse

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._too_large(scope, receive, send, declared.decode("latin-1"))
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await self._too_large(scope, receive, send, f"over {self.limit}")
                return
        delivered = False

        async def replay() -> Any:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Any, receive: Any, send: Any, size: str) -> None:
        response = self.refuse(uuid.uuid4().hex[:16], 400, f"request body of {size} bytes; this lab takes at most "
                                                          f"{self.limit} bytes")
        await response(scope, receive, send)


CALL_POLL_S = 1.0
"""While a real-time call runs, its waiter also looks at the database this often (a missed wake-up, a dead worker)."""


def create_app(engine: Engine, lab: Lab, accounts: Accounts, *, scheduler_id: str,
               clock: Callable[[], float] = time.time, lease_ttl: float = LEASE_TTL_S, codebase_version: str = "",
               call_timeout_s: float = 120.0, wakeups: Wakeups | None = None, limiter: LoginLimiter | None = None,
               public_url: str | None = None) -> FastAPI:
    """The API. `wakeups`: how a worker's answer wakes a waiting call (default: in-process, for a lab whose
    workers run in this process); `public_url`: the base of the URLs the API hands out (default: the request's own,
    as uvicorn saw it: forwarded headers count only from a trusted proxy)."""
    app = FastAPI(title="chamberlab Remote Lab", version="v0", docs_url=None, redoc_url=None)
    wake = wakeups or Wakeups()
    gate = LoginGate(accounts, limiter or LoginLimiter(clock))
    basic = LabBasic(auto_error=False)
    link_ttl_s = lab.spec.download_link_days * 86400.0
    base_url = public_url.rstrip("/").removesuffix("/v0") if public_url else None

    def fail(request_id: str, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"message": message, "request_id": request_id, "scheduler_id": scheduler_id},
                            status_code=status, headers=headers)

    @app.middleware("http")
    async def request_ids(request: Request, call_next: Any) -> Any:
        request.state.request_id = uuid.uuid4().hex[:16]
        return await call_next(request)

    app.add_middleware(BodyCap, limit=MAX_BODY_BYTES, refuse=fail)

    @app.exception_handler(LabRequestError)
    async def _lab_error(request: Request, exc: LabRequestError) -> JSONResponse:
        return fail(request.state.request_id, exc.status, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return fail(request.state.request_id, 400, f"request field '{where}': {first.get('msg')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return fail(getattr(request.state, "request_id", "-"), exc.status_code, str(exc.detail),
                    getattr(exc, "headers", None))

    async def user(request: Request, credentials: tuple[str, str] | None = Depends(basic)) -> Caller:
        try:
            return await gate.caller(request, credentials)
        except GateRefusal as exc:
            raise LabRequestError(exc.status, exc.message, exc.headers) from None

    def chamber_entry(chamber_id: str, config: str, mode: str) -> Any:
        if chamber_id not in lab.spec.chambers:
            raise LabRequestError(403, f"no chamber {chamber_id!r} in this lab; chambers: "
                                       f"{', '.join(lab.spec.chambers)}")
        entry = lab.entry(chamber_id)
        if entry.mode != mode:
            others = [c for c, e in lab.spec.chambers.items() if e.mode == mode]
            what = "queued experiments" if mode == "queue" else "real-time sessions"
            raise LabRequestError(400, f"chamber {chamber_id} runs in {entry.mode} mode, not {what}; "
                                       f"{mode} chambers: {', '.join(others) or 'none'}")
        if config not in entry.configs:
            raise LabRequestError(400, f"chamber {chamber_id} has no config {config!r}; valid configs: "
                                       f"{', '.join(entry.configs)}")
        return entry

    def checked(chamber_id: str, config: str, instructions: list[Any]) -> Any:
        try:
            return check_protocol(instructions, kind=lab.kind(chamber_id), config=config,
                                  limits=lab.limits[chamber_id], caps=lab.caps)
        except InvalidProtocol as exc:
            raise LabRequestError(400, str(exc)) from None

    def owned(experiment_id: str, caller: Caller) -> dict[str, Any]:
        row = store.get_experiment(engine, experiment_id)
        if row is None or row["account_id"] != caller.account_id:
            raise LabRequestError(403, f"no experiment {experiment_id!r} among yours")
        return row

    def live(chamber_id: str) -> dict[str, Any] | None:
        row = store.chamber_rows(engine, lease_ttl).get(chamber_id)
        return row if row and row["alive"] else None

    def shown(row: dict[str, Any], request: Request) -> dict[str, Any]:
        token = row.pop("download_token", None)
        out = {k: row.get(k) for k in ("experiment_id", "status", "chamber_id", "config", "tag", "user_id",
                                       "submitted_on", "started_on", "finished_on", "current_instruction",
                                       "total_instructions", "n_observations", "reason", "scheduler_id")}
        if row.get("checksum") and token:
            base = base_url or str(request.base_url).rstrip("/")
            out["download_url"] = f"{base}/v0/downloads/{row['experiment_id']}/{token}"
            out["checksum"] = row["checksum"]
            if row.get("finished_on") is not None:
                out["download_expires_on"] = row["finished_on"] + link_ttl_s
        if "position" in row:
            out["position"] = row["position"]
        return out

    def audit_line(action: str, caller: Caller | None, target: str | None, detail: str | None = None,
                   address: str | None = None) -> None:
        audit.record(engine, action, at=clock(), user_name=caller.name if caller else None,
                     account_id=caller.account_id if caller else None, target=target,
                     address=address or (caller.address if caller else None), detail=detail)

    @app.get("/health")
    @app.get("/v0/health")
    def health() -> dict[str, Any]:
        rows = store.chamber_rows(engine)
        return {"status": "ok", "scheduler_id": scheduler_id, "chambers": {
            c: ("OFFLINE" if live(c) is None else rows[c]["status"]) for c in lab.spec.chambers}}

    @app.get("/v0/chambers")
    def chambers(caller: Caller = Depends(user)) -> dict[str, Any]:
        rows = store.chamber_rows(engine, lease_ttl)
        out = []
        for chamber_id, entry in lab.spec.chambers.items():
            row = rows.get(chamber_id) or {}
            out.append({"chamber_id": chamber_id, "status": row.get("status") if row.get("alive") else "OFFLINE",
                        "detail": row.get("detail"), "chamber_model": MODELS[entry.chamber_kind or "wt"],
                        "mode": entry.mode, "valid_configs": list(entry.configs)})
        return {"chambers": out}

    @app.get("/v0/queues/{chamber_id}")
    def queue(chamber_id: str, request: Request, caller: Caller = Depends(user)) -> dict[str, Any]:
        if chamber_id not in lab.spec.chambers:
            raise LabRequestError(403, f"no chamber {chamber_id!r} in this lab")
        if lab.entry(chamber_id).mode != "queue":
            raise LabRequestError(400, f"chamber {chamber_id} runs real-time sessions; it has no queue")
        return {"experiments": [shown(r, request) for r in store.queue_of(engine, chamber_id)]}

    @app.post("/v0/experiments")
    def submit(body: ExperimentIn, request: Request, caller: Caller = Depends(user)) -> dict[str, Any]:
        chamber_entry(body.chamber_id, body.chamber_config, "queue")
        if body.tag is not None and len(body.tag) > lab.caps.max_tag_chars:
            raise LabRequestError(400, f"tag of {len(body.tag)} characters; at most {lab.caps.max_tag_chars}")
        plan = checked(body.chamber_id, body.chamber_config, body.instructions)
        try:
            experiment_id = store.submit(
                engine, user_id=caller.name, account_id=caller.account_id, chamber_id=body.chamber_id,
                config=body.chamber_config, instructions=plan.instructions, tag=body.tag, now=clock(),
                scheduler_id=scheduler_id, max_queued=caller.max_queued or lab.caps.max_queued_per_user,
                planned_s=plan.planned_s, max_queued_s=lab.caps.max_queued_s_per_user)
        except store.QueueFull as exc:
            raise LabRequestError(403, str(exc)) from None
        wake.notify(f"chamber:{body.chamber_id}")
        audit_line("submit", caller, experiment_id, f"{body.chamber_id}: {len(plan.instructions)} instructions, "
                                                    f"{plan.planned_s:.1f} s planned")
        return {"experiment_id": experiment_id}

    @app.get("/v0/experiments")
    def experiments(request: Request, caller: Caller = Depends(user)) -> dict[str, Any]:
        return {"experiments": [shown(r, request) for r in store.user_experiments(engine, caller.account_id)]}

    @app.get("/v0/experiments/{experiment_id}")
    def experiment(experiment_id: str, request: Request, caller: Caller = Depends(user)) -> dict[str, Any]:
        return shown(owned(experiment_id, caller), request)

    @app.post("/v0/experiments/{experiment_id}/cancel")
    def cancel(experiment_id: str, request: Request, caller: Caller = Depends(user)) -> dict[str, Any]:
        row = owned(experiment_id, caller)
        now = store.cancel(engine, experiment_id, clock())
        if now is None and row["status"] != "STOPPING":
            raise LabRequestError(409, f"experiment {experiment_id} has ended already ({row['status']})")
        wake.notify(f"chamber:{row['chamber_id']}")
        audit_line("cancel", caller, experiment_id, f"{row['status']} -> {now or row['status']}")
        return shown(owned(experiment_id, caller), request)

    @app.get("/v0/downloads/{experiment_id}/{token}")
    def download(experiment_id: str, token: str, request: Request) -> Response:
        found = store.zip_of(engine, experiment_id, token, now=clock(), ttl_s=link_ttl_s)
        if found is None:
            raise LabRequestError(403, "no download at this address (a wrong or expired link, or its account was "
                                       "removed)")
        data, checksum = found
        row = store.get_experiment(engine, experiment_id) or {}
        audit.record(engine, "download", at=clock(), user_name=row.get("user_id"), account_id=row.get("account_id"),
                     target=experiment_id, address=request.client.host if request.client else None)
        return Response(data, media_type="application/zip", headers={
            "Content-Disposition": f'attachment; filename="{experiment_id}.zip"', "X-Checksum-SHA256": checksum})

    @app.post("/v0/sessions")
    async def open_session(body: SessionIn, caller: Caller = Depends(user)) -> dict[str, Any]:
        entry = chamber_entry(body.chamber_id, body.chamber_config, "real-time")
        if await run_in_threadpool(live, body.chamber_id) is None:
            raise LabRequestError(503, f"chamber {body.chamber_id} has no worker serving it right now; try later")
        try:
            session_id, call_id, held = await run_in_threadpool(functools.partial(
                session_store.open_session, engine, chamber_id=body.chamber_id, user_id=caller.name,
                account_id=caller.account_id, config=body.chamber_config, now=clock(),
                idle_takeover_s=entry.idle_takeover_s))
        except session_store.ChamberInUse as exc:
            raise LabRequestError(409, str(exc)) from None
        wake.notify(f"chamber:{body.chamber_id}")
        try:
            await answered(call_id, call_timeout_s, body.chamber_id)
        except LabRequestError:
            await run_in_threadpool(session_store.fail_opening, engine, session_id)
            raise
        await run_in_threadpool(audit_line, "session-takeover" if held else "session-open", caller, session_id,
                                f"{body.chamber_id}" + (f"; took over {', '.join(held)}" if held else ""))
        return {"session_id": session_id, "chamber_model": MODELS[lab.kind(body.chamber_id)],
                "config_version": f"mk1/{body.chamber_config}", "documentation": DOCUMENTATION,
                "codebase_version": codebase_version}

    @app.post("/v0/sessions/{session_id}/instructions")
    async def instructions(session_id: str, body: InstructionsIn, caller: Caller = Depends(user)) -> Response:
        session = await run_in_threadpool(session_store.get_session, engine, session_id)
        if session is None or session["account_id"] != caller.account_id:
            raise LabRequestError(403, f"no session {session_id!r} among yours")
        if session["state"] != "OPEN":
            raise LabRequestError(409, f"session {session_id} has ended: {session['reason'] or session['state']}")
        plan = checked(session["chamber_id"], session["config"], body.instructions)
        if plan.planned_s > lab.caps.max_call_s:
            raise LabRequestError(400, f"these instructions plan {plan.planned_s:.1f} s of chamber time; this lab "
                                       f"allows at most {lab.caps.max_call_s:g} s per real-time call: split them "
                                       "(nothing was sent)")
        if await run_in_threadpool(live, session["chamber_id"]) is None:
            raise LabRequestError(503, f"chamber {session['chamber_id']} has no worker serving it right now")
        call_id = await run_in_threadpool(session_store.add_call, engine, session_id, session["chamber_id"],
                                          plan.instructions, clock())
        if call_id is None:
            raise LabRequestError(409, f"session {session_id} is still running its previous instructions; one call "
                                       "at a time per session")
        wake.notify(f"chamber:{session['chamber_id']}")
        try:
            call = await answered(call_id, call_timeout_s + plan.planned_s, session["chamber_id"])
        finally:
            await run_in_threadpool(session_store.touch_session, engine, session_id, clock())
        if not call["result_csv"]:
            return Response(b"", media_type="text/plain")
        return multipart_csv(call["result_csv"])

    async def answered(call_id: int, timeout: float, chamber_id: str) -> dict[str, Any]:
        """The call's answer, awaited without holding a thread: woken by the worker's answer (wakeups), with a
        look at the database every CALL_POLL_S (a missed wake-up, a worker that died)."""
        def answer() -> dict[str, Any] | None:
            call = _final(session_store.call_of(engine, call_id))
            if call is None and live(chamber_id) is None:  # its worker stopped: nobody will answer
                session_store.fail_call(engine, call_id, 503, f"chamber {chamber_id}'s worker stopped; the call was "
                                                              "not run to its end")
                call = _final(session_store.call_of(engine, call_id))
            return call

        loop = asyncio.get_running_loop()
        deadline, topic = loop.time() + timeout, f"call:{call_id}"
        while True:
            since = wake.generation(topic)
            call = await run_in_threadpool(answer)
            left = deadline - loop.time()
            if call is not None or left <= 0:
                break
            await wake.wait_async(topic, since, min(CALL_POLL_S, left))
        if not call:
            waiting = (await run_in_threadpool(session_store.call_of, engine, call_id) or {}).get("state") == "PENDING"
            await run_in_threadpool(session_store.fail_call, engine, call_id, 409 if waiting else 503, (
                f"chamber {chamber_id} is busy with earlier instructions; try again" if waiting else
                f"chamber {chamber_id} did not answer within {timeout:.0f} s"))
            call = await run_in_threadpool(session_store.call_of, engine, call_id)
        if call["state"] == "FAILED":
            raise LabRequestError(call["error_status"] or 500, call["error_message"] or "the chamber failed")
        return call

    return app


def _final(call: dict[str, Any] | None) -> dict[str, Any] | None:
    return call if call is not None and call["state"] in ("DONE", "FAILED") else None


def multipart_csv(csv_text: str) -> Response:
    """The rows as the client parses them: `multipart/mixed` with one `text/csv` part (7bit, so its payload is the
    CSV itself), built by the stdlib email package the client parses it with."""
    message = MIMEMultipart("mixed", boundary=f"chamberlab-{secrets.token_hex(12)}")
    message.attach(MIMEText(csv_text, "csv", "us-ascii"))
    raw = message.as_bytes(policy=email.policy.HTTP)
    head, _, body = raw.partition(b"\r\n\r\n")
    return Response(body, media_type=None, headers={"Content-Type": message["Content-Type"]})
