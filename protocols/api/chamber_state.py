"""What the API knows and does to a chamber outside the tools: its link for /health, its safe start, its inputs
read beside a running call.

Why apart from app.py: these read the driver (through the app's wrappers) and apply settings through the same
SettingGuard as every tool, and each is a rule of its own that tests name: a session's safe start applies only
the safe settings not in force and never one the operator limits refuse; /health reports what the driver knows
without asking the board anything (a probe would wait behind a tool call on the same serial line).
"""

from __future__ import annotations

from typing import Any

from .schemas import jsonable
from .tools import ToolEnvironment


def state_now(chamber: Any) -> dict[str, float]:
    """The chamber's inputs, read beside a call that may be changing them on the chamber thread: a read that
    collides with a SET gives {} (every setting then counts as a change: the plan errs long)."""
    try:
        return dict(chamber.state())
    except RuntimeError:  # the dict changed size while it was read
        return {}


def start_safe(env: ToolEnvironment, kind: str, safe: dict[str, float]) -> dict[str, Any]:
    """Apply the safe settings that are not in force (an input never set counts as not in force) in one SET list,
    leaving out a value the limits refuse (it must not stop the others); what was applied, refused, the state."""
    chamber, guard = env.chambers[kind], env.guards[kind]
    now = chamber.state()
    wanted: dict[str, float] = {}
    refused: list[dict[str, Any]] = []
    for name, value in safe.items():
        if now.get(name) == float(value):
            continue
        problem = guard.problem(name, value)
        if problem is not None:
            refused.append({k: v for k, v in problem.items() if k != "code"})
        else:
            wanted[name] = float(value)
    applied = chamber.set_many(wanted) if wanted else {}
    return jsonable({"safe": dict(safe), "applied": applied, "not_applied": refused, "state": chamber.state()})


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
