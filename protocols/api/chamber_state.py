"""What the API knows and does to a chamber outside the tools: its link for /health, bringing it to rest (a
session's start) and safe (a session's end), its inputs read beside a running call.

Why apart from app.py: these read the driver (through the app's wrappers) and apply settings through the same
SettingGuard as every tool, and each is a rule of its own that tests name: bringing a chamber to rest applies only
the settings not already in force and never one the operator limits refuse; /health reports what the driver knows
without asking the board anything (a probe would wait behind a tool call on the same serial line).

What a session leaves (issue 31), in two steps:
- at its end (hand_back): the safe state (chamber/safe_state.py: fans off, hatch home, LEDs off, ... plus what
  the operator added), the settings not in force applied and one row read back, at once: what a chamber left
  unattended needs, and cheap (a SET or two and a row);
- at the next session's start on that chamber (start_safe): the chamber "at rest": the safe settings not in
  force and every other input the last session moved (oversampling, references, potentiometers, ...) back at the
  value it had when that session took the chamber. An input the host had not set since the board started goes
  back to its firmware power-on value (oversampling 1, references 5 V, motors home: POWER_ON below); one whose
  power-on value is not a number the firmware accepts (pressure-control `input`) is left, and named in
  `not_applied`. Why this at the next start and not at the end: each such SET costs the real board about 0.2 s,
  it matters only to a session that measures next, and that session pays it once.
So no session inherits another's hatch, fan loads or oversampling, while inputs no session touched (an operator's,
set before the server started) stay as they were.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from chamber.safe_state import same_float32
from simulator.light_tunnel import POWER_ON as LT_POWER_ON
from simulator.wind_tunnel import POWER_ON as WT_POWER_ON

from .schemas import jsonable
from .tools import ToolEnvironment

POWER_ON: dict[str, Mapping[str, float]] = {"wt": WT_POWER_ON, "lt": LT_POWER_ON}
"""Each input's value after the firmware's setup() (the simulator's tables, written from wt_mk_1.ino and
lt_mk_1.ino): what an input the host never set is at, and so what it returns to once a session moved it."""


def state_now(chamber: Any) -> dict[str, float]:
    """The chamber's inputs, read beside a call that may be changing them on the chamber thread: a read that
    collides with a SET gives {} (every setting then counts as a change: the plan errs long)."""
    try:
        return dict(chamber.state())
    except RuntimeError:  # the dict changed size while it was read
        return {}


def rest_plan(state: Mapping[str, float], safe: Mapping[str, float], before: Mapping[str, float] | None,
              power_on: Mapping[str, float]) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The settings that bring a chamber from `state` (its inputs as the host set them) to rest, in order: the safe
    settings not in force (an input never set counts as not in force), then, when `before` (the inputs in force
    when the last session took the chamber) is known, every other input that session moved, back to its value in
    `before`, else to `power_on`. Also the inputs it cannot return (no known power-on value), as `not_applied`
    entries."""
    wanted = {name: float(value) for name, value in safe.items() if state.get(name) != float(value)}
    unknown: list[dict[str, Any]] = []
    if before is not None:
        for name, value in state.items():
            if name in safe or before.get(name) == value:
                continue
            target = before.get(name, power_on.get(name))
            if target is None or not math.isfinite(target):
                unknown.append({"variable": name, "value": value, "expected": "its value before the session: none "
                                "the host knows (not set since the board started, no power-on value); left as it is"})
            elif float(target) != value:
                wanted[name] = float(target)
    return wanted, unknown


def to_rest(env: ToolEnvironment, kind: str, safe: Mapping[str, float],
            before: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Bring chamber `kind` to rest (rest_plan) in one SET list, leaving out a value the limits refuse (it must not
    stop the others); what was applied, what was not (and why), the state after."""
    chamber, guard = env.chambers[kind], env.guards[kind]
    wanted, refused = rest_plan(chamber.state(), safe, before, POWER_ON.get(kind, {}))
    allowed: dict[str, float] = {}
    for name, value in wanted.items():
        problem = guard.problem(name, value)
        if problem is not None:
            refused.append({k: v for k, v in problem.items() if k != "code"})
        else:
            allowed[name] = value
    applied = chamber.set_many(allowed) if allowed else {}
    return jsonable({"safe": dict(safe), "applied": applied, "not_applied": refused, "state": chamber.state()})


def start_safe(env: ToolEnvironment, kind: str, safe: Mapping[str, float],
               before: Mapping[str, float] | None = None) -> dict[str, Any]:
    """A session's start on a chamber another session (or nobody) used last: the chamber brought to rest from what
    that session left (`before`: the inputs in force when it took the chamber; None: nobody did)."""
    return to_rest(env, kind, safe, before)


def hand_back(env: ToolEnvironment, kind: str, safe: Mapping[str, float]) -> dict[str, Any]:
    """A session's end on a chamber it used: the safe settings not in force applied (to_rest), then one row read
    back from the board, as every exit path does (chamber/safe_state.py): `confirmed` when each safe setting shows
    its value in the row (same_float32); `unconfirmed`: those that do not (the value the row shows, None if unset).
    The row is also what a judge on the wire sees: the chamber read back safe while the server keeps running."""
    rested = to_rest(env, kind, safe)
    readback = env.chambers[kind].read_back()
    left_out = {entry["variable"] for entry in rested["not_applied"]}
    expected = {name: float(value) for name, value in safe.items() if name not in left_out}
    wrong = {name: readback.get(name) for name, value in expected.items()
             if not (name in readback and same_float32(value, readback[name]))}
    return {**rested, "readback": jsonable({name: readback[name] for name in expected if name in readback}),
            "confirmed": not wrong, "unconfirmed": jsonable(wrong)}


def handback_text(kind: str, outcome: Mapping[str, Any]) -> str:
    """One line for the log: `wt handed back safe: load_in=0, hatch=0 (read back)`, or what was not confirmed."""
    applied = ", ".join(f"{name}={value:g}" for name, value in outcome.get("applied", {}).items()) or "nothing to set"
    if outcome.get("error"):
        return f"{kind} NOT handed back safe: {outcome['error']}"
    if not outcome.get("confirmed"):
        shown = ", ".join(f"{name}={'unset' if value is None else f'{value:g}'}"
                          for name, value in outcome.get("unconfirmed", {}).items())
        return f"{kind} handed back, safe state NOT confirmed: {applied}; read back {shown}"
    return f"{kind} handed back safe: {applied} (read back)"


def link_of(chamber: Any, fault: str | None) -> dict[str, Any]:
    """{"link": "up" | "down" | "halted", "detail": ...} from what the driver knows (no probe: the board is asked
    nothing, so /health never waits behind a tool call): Chamber.link_state()."""
    link, reason = chamber.link_state()
    try:
        stats = jsonable(chamber.link_stats()) if callable(getattr(chamber, "link_stats", None)) else None
    except Exception as exc:  # a backend that cannot count: the link state stands
        stats = {"unavailable": f"{type(exc).__name__}: {exc}"}
    detail: dict[str, Any] = {"reason": None if reason is None else f"{type(reason).__name__}: {reason}",
                              "last_fault": fault, "stats": stats}
    return {"link": link, "detail": detail}
