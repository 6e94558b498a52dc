"""The operator's recovery of a halted chamber: reset the board, re-apply a known state, report what was done.

Why a route and not a restart: one value the board halts on (er03) used to leave every later call of every session
with 503 `ChamberHalted` until the server was restarted, losing every session and its lease with it. Here
`POST /operator/recover` resets the board (the driver's reset works on a halted board), applies the safe state
(or, with `"restore": "last"`, the inputs that were in force, each re-checked by the server's SettingGuard) and
answers with what it found and did. It is behind the same auth as every route (bearer token, or loopback Host
and Origin), waits for a tool call in flight to finish (the lease's call slot) so it never interleaves with one,
and writes one line per recovery to `<record_dir>/operator.jsonl` (the record of what happened to the chambers
outside any session's calls: the sessions' hand-backs at their end are lines there too, handback.py).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import Field

from .errors import ApiError
from .record import RecordUnavailable, SessionRecord
from .schemas import ChamberKind, _Strict, jsonable

log = logging.getLogger(__name__)


class RecoverChamber(_Strict):
    chamber: ChamberKind | None = Field(default=None, description="'wt' or 'lt'; omit to recover every connected chamber")
    restore: Literal["safe", "last"] = Field(
        default="safe", description="'safe': apply the safe state after the reset; 'last': re-apply the inputs that "
                                    "were set before it (each checked against the firmware and the operator limits)")


def recover_one(state: Any, kind: str, safe: dict[str, float], restore: str) -> dict[str, Any]:
    """Reset one chamber and re-apply `safe` (or its last inputs); returns the report. Runs where chamber work runs."""
    chamber = state.env.chambers[kind]
    guard = state.env.guards[kind]
    before = dict(chamber.state())
    chamber.reset()
    wanted = dict(safe) if restore == "safe" else before
    applied: dict[str, float] = {}
    refused: list[dict[str, Any]] = []
    for name, value in wanted.items():  # one at a time: a value the limits now refuse must not stop the others
        problem = guard.problem(name, value)
        if problem is not None:
            refused.append({k: v for k, v in problem.items() if k != "code"})
            continue
        applied.update(chamber.set_many({name: value}))
    state.live.record_state(kind, chamber.state())
    fault = state.faults.pop(kind, None)
    return jsonable({"chamber": kind, "reset": True, "last_fault": fault, "settings_before": before,
                     "restore": restore, "applied": applied, "not_applied": refused, "state": chamber.state()})


def add_operator_routes(app: FastAPI, state: Any, safe_by_kind: dict[str, dict[str, float]],
                        record: SessionRecord) -> None:
    """`POST /operator/recover` on `app` (state: the app's ApiState; `record`: <record_dir>/operator.jsonl)."""

    @app.post("/operator/recover", summary="reset a halted chamber, re-apply the safe (or last) state, report")
    async def recover(body: RecoverChamber | None = None) -> JSONResponse:
        body = body or RecoverChamber()
        connected = state.env.connected
        if body.chamber is not None and body.chamber not in connected:
            raise ApiError("chamber_not_connected", f"recover: chamber {body.chamber!r} is not connected "
                                                    f"(connected: {', '.join(connected) or 'none'})")
        kinds = [body.chamber] if body.chamber else connected
        try:
            record.write("recover_request", chamber=body.chamber, restore=body.restore)
        except RecordUnavailable as exc:
            raise ApiError("record_unavailable", f"recover: {exc}; nothing was done") from None
        reports = []
        async with state.lease.exclusive(kinds):  # no tool call runs on these chambers meanwhile
            for kind in kinds:
                try:
                    reports.append(await state.runner.run(recover_one, state, kind, safe_by_kind.get(kind, {}),
                                                          body.restore))
                except Exception as exc:  # the board did not come back: say so, and what was recovered before it
                    log.warning("recover %s failed: %s: %s", kind, type(exc).__name__, exc)
                    try:
                        record.write("recover_failed", chamber=kind, error=f"{type(exc).__name__}: {exc}",
                                     recovered=reports)
                    except RecordUnavailable:
                        pass
                    raise ApiError("apparatus_error", f"recover: resetting {kind} failed ({type(exc).__name__}: "
                                                      f"{exc}); recovered before it: {[r['chamber'] for r in reports]}. "
                                                      "Check the board and its connection.") from None
        result = {"recovered": reports}
        try:
            record.write("recover_response", status=200, body=result)
        except RecordUnavailable as exc:
            log.error("recover: done but not recorded: %s", exc)
        log.warning("operator recovered %s (%s)", ", ".join(kinds), body.restore)
        return JSONResponse(result)
