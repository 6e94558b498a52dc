"""What a tool call will cost: which chambers it touches (their leases) and its planned chamber seconds.

Why the server says it: a protocol run at the real board's pace took 131 s while the agent's HTTP client gave up
after 120 s, so the cell became an engine error although the chamber finished the work (issue 24). The server
knows before a call starts how many rows it reads and which stagings it makes, so `POST /sessions/{id}/plans/
{tool}` answers with the planned seconds and the client sets its read timeout from them (agent/chamber_client.py);
a call that really hangs still times out, a bounded time after its plan.

The plan is an estimate, not a bound: rows times the chamber's row period (the real board's nominal pace, or the
pace of the last rows this server read on it, whichever is longer), plus the planner's seconds for each change of
settings (a SET round trip, stepper moves, fan spin-up: protocols/planner.py) and each step's settle seconds. At
the emulated board's real pace a short protocol run (10 rows, six SETs) planned 2.3 s and took 2.8 s over HTTP;
the client's margin (its base timeout plus half the plan again) covers that, and rows dominate a long run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from protocols.claims import Claim
from protocols.planner import NOMINAL_ROW_S, PlanItem, change_seconds, plan
from protocols.registry import declared_protocol
CAMERA_ROW_S = 1.5
"""A row in a camera configuration also waits for its picture (the firmware's take_picture)."""


def nominal_row_s(kind: str, config: str | None) -> float:
    return NOMINAL_ROW_S.get(kind, max(NOMINAL_ROW_S.values())) + (CAMERA_ROW_S if "camera" in (config or "") else 0.0)


def protocol_chamber(claim: Claim) -> str | None:
    """The chamber the claim's protocol runs on (None: no protocol, or one decided without a chamber)."""
    declaration = declared_protocol(claim)
    return None if declaration is None else declaration.chamber


def chambers_touched(tool: str, args: Any, default: str | None, connected: list[str], claim: Claim) -> list[str]:
    """The connected chambers a call may use, sorted (the order their leases are taken in). A chamber named but
    not connected is left out: the tool itself refuses it (chamber_not_connected). Every tool today uses one
    chamber at most; the leases take any number (lease.py)."""
    if tool == "run_protocol":  # a claim decided without a chamber (no protocol, a pre-check) touches none
        kind = protocol_chamber(claim)
        wanted = [kind] if kind is not None else []
    elif tool == "cross_sensor_check":
        wanted = ["wt"]
    else:
        wanted = [getattr(args, "chamber", None) or default]
    return sorted(k for k in set(wanted) if k in connected)


def planned_seconds(tool: str, args: Any, kinds: list[str], claim: Claim, *, state: Callable[[str], Mapping[str, float]],
                    row_s: Callable[[str], float]) -> float:
    """The chamber seconds a call is planned to take (0 for a call that only reads the state).

    `state(kind)`: the chamber's inputs now; `row_s(kind)`: the seconds per row to plan with."""
    if not kinds:
        return 0.0
    kind = kinds[0]
    if tool == "measure":
        return args.n * row_s(kind)
    if tool == "cross_sensor_check":
        return (args.n + args.settle_rows) * row_s(kind)
    if tool == "stage_conditions":
        return change_seconds(state(kind), args.settings)
    if tool == "run_protocol":
        return _protocol_seconds(claim, args.rows, args.settle_rows, state, row_s)
    return 0.0


def _protocol_seconds(claim: Claim, rows: int, settle_rows: int, state: Callable[[str], Mapping[str, float]],
                      row_s: Callable[[str], float]) -> float:
    declaration = declared_protocol(claim)
    if declaration is None or declaration.chamber is None:
        return 0.0
    kind = declaration.chamber
    now = dict(state(kind))
    the_plan = plan([PlanItem(claim.id, declaration, claim, may_stop_early=False)], rows=rows,
                    settle_rows=settle_rows, start={kind: now})
    total = 0.0
    for staging in the_plan.stagings:
        total += change_seconds(now, staging.settings) + staging.settle_s
        total += (staging.settle_rows + staging.full_rows) * row_s(staging.chamber)
        now.update(staging.settings)
    for chamber, restore in the_plan.restores.items():
        total += change_seconds(now if chamber == kind else state(chamber), restore)
    return total
