"""A real-time session's calls, answered by the worker that holds the chamber: open (reset and make safe), then
instructions run one call at a time with the rows handed back as CSV.

Why through the database: the API process and the chamber's worker may be on different hosts; the call and its
answer are rows of `lab_session_calls`, so a session works the same whether its chamber hangs off this host or
another. The instructions were checked by the API (protocols.remote_lab.validation); the runner checks them again
against the chamber's real state before the first byte, exactly as on the bench. An error is answered with the
HTTP status the authors' client maps right: 400 the user's instruction, 409 a session that lost the chamber,
503 the lab's board.
"""

from __future__ import annotations

import io
import json
import logging
from typing import Any

from chamber.errors import ChamberError
from chamber.protocol_language import ProtocolError, parse_protocol
from chamber.protocol_runner import run_protocol
from chamber.public_csv import PublicCsvWriter
from chamber.safe_state import apply_safe_state
from chamber.stop import StopRequest
from firmware_bridge.error_text import exception_line
from firmware_bridge.errors import BridgeError
from protocols.remote_lab import session_store

log = logging.getLogger(__name__)


def answer_call(worker: Any, call: dict[str, Any]) -> None:
    """Run `call` on the worker's chamber and store the answer (never raises for a chamber or user error)."""
    engine, chamber = worker.engine, worker.chamber
    session = session_store.get_session(engine, call["session_id"])
    if session is None:
        session_store.answer_call(engine, call["call_id"], error_status=400, error_message="no such session")
        return
    if call["kind"] == "open":
        _open(worker, call, session)
        return
    if session["state"] != "OPEN":
        session_store.answer_call(engine, call["call_id"], error_status=409,
                          error_message=f"session {session['session_id']} has ended: {session['reason']}")
        return
    halt = StopRequest()
    worker.current = (None, halt)  # a stopping worker cuts a long WAIT short, as for an experiment
    worker.wakeups.notify_local(worker.topic)
    try:
        protocol = parse_protocol(json.loads(call["instructions"]), source=f"session {session['session_id']}")
        buffer = io.StringIO()
        writer = PublicCsvWriter(buffer, None)
        outcome = run_protocol(chamber, protocol, on_frame=writer.write_frame, ask=no_operator, stop=halt,
                               wait=halt.wait)
    except ProtocolError as exc:
        session_store.answer_call(engine, call["call_id"], error_status=400, error_message=exception_line(exc))
        return
    except (ChamberError, BridgeError, OSError) as exc:
        _board_fault(worker, call, exc)
        return
    finally:
        worker.current = None
    if outcome.interrupted:
        session_store.answer_call(engine, call["call_id"], error_status=503,
                          error_message=f"chamber {worker.chamber_id}'s worker is stopping; the instructions were "
                                        f"cut short at line {outcome.stopped_at_line}")
        return
    if outcome.error:
        _board_fault(worker, call, RuntimeError(f"{outcome.error['type']}: {outcome.error['message']}"))
        return
    session_store.answer_call(engine, call["call_id"], result_csv=buffer.getvalue() if writer.rows else None)


def _open(worker: Any, call: dict[str, Any], session: dict[str, Any]) -> None:
    engine, chamber = worker.engine, worker.chamber
    if session["config"] != chamber.config:
        session_store.answer_call(engine, call["call_id"], error_status=400,
                          error_message=f"chamber {worker.chamber_id} is in config {chamber.config}; the session "
                                        f"asked for {session['config']}")
        session_store.set_session_state(engine, session["session_id"], "FAILED", "config not available")
        return
    try:
        chamber.reset()
        outcome = apply_safe_state(chamber, worker.safe)
    except (ChamberError, BridgeError, OSError) as exc:
        session_store.set_session_state(engine, session["session_id"], "FAILED", str(exc))
        _board_fault(worker, call, exc)
        return
    if not outcome.confirmed:
        session_store.set_session_state(engine, session["session_id"], "FAILED", outcome.text)
        session_store.answer_call(engine, call["call_id"], error_status=503,
                          error_message=f"chamber {worker.chamber_id} could not be verified: {outcome.text}")
        return
    if (session_store.call_of(engine, call["call_id"]) or {}).get("state") != "RUNNING":
        return  # the client was told this open failed (it waited too long): it takes no chamber from anyone
    session_store.activate_session(engine, session["session_id"], worker.chamber_id)
    session_store.answer_call(engine, call["call_id"])


def _board_fault(worker: Any, call: dict[str, Any], exc: BaseException) -> None:
    message = f"chamber {worker.chamber_id}: {type(exc).__name__}: {exception_line(exc)}"
    log.warning("%s", message)
    session_store.answer_call(worker.engine, call["call_id"], error_status=503, error_message=message)
    worker._say("ERROR", message)


def no_operator(prompt: str) -> None:
    raise ChamberError(f"WAIT_INPUT needs an operator; a Remote Lab has none ({prompt})")
