"""Exit codes that tell the truth: one rule for every command, read off the command's own result.

Why one module: `check` exited 0 with an `error` verdict, `run` said "finished" with error verdicts and `extract`
exited 0 on an unreadable datasheet, because each command chose its code on its own. Here is the one table (the
README quotes it); each job puts what the rule needs into its result (`safe_state`, `interrupted`, `incomplete`)
and the CLI, and `run`'s status in its index and summary, derive the code from it with `exit_code`.

| code | meaning |
|---|---|
| 0 | everything asked was done |
| 1 | the command completed, but not everything asked was done: an `error` verdict, an agent engine error, a cell not run, an agent part asked for by name (`run --model`) and skipped for want of datasheets, an extraction without a submitted answer, a station check that failed |
| 2 | refused (bad input or options, before any work) or failed (an exception) |
| 3 | the safe state of a chamber could not be confirmed: the chamber may be left running (wins over every other code) |
| 130 | interrupted (Ctrl-C or SIGTERM), the chambers left safe |

A part skipped whole is short only when it was asked for by name: the main job's default agent (no `--model`) on a
clone without the datasheets is skipped with a line saying how to get them, and the run exits 0 (the job counts what
was not done: agent.main_job.shortfall).
"""

from __future__ import annotations

from typing import Any, Mapping

DONE, INCOMPLETE, FAILED, UNSAFE, INTERRUPTED = 0, 1, 2, 3, 130

RUN_STATUS = {DONE: "finished", INCOMPLETE: "completed with errors", FAILED: "failed",
              UNSAFE: "safe state unconfirmed", INTERRUPTED: "interrupted"}
"""`run`'s status in its index row and summary for each exit code: the two always say the same thing."""


def _unconfirmed(safe_state: Any) -> list[Mapping[str, Any]]:
    """The outcomes (`safe_state`: one dict, a list of them, or None: no chamber) whose safe state was not confirmed.
    An outcome without a `confirmed` key (a record from before read-backs) counts as confirmed unless it carries an
    error."""
    entries = safe_state if isinstance(safe_state, list) else [safe_state] if safe_state else []
    return [e for e in entries if isinstance(e, Mapping) and not e.get("confirmed", not e.get("error"))]


def safe_state_confirmed(safe_state: Any) -> bool:
    """Whether every chamber's safe-state outcome was confirmed (see _unconfirmed)."""
    return not _unconfirmed(safe_state)


def unconfirmed_note(safe_state: Any) -> str | None:
    """One line naming the chambers whose safe state was not confirmed (None when every one was)."""
    bad = _unconfirmed(safe_state)
    return "; ".join(e.get("text") or f"safe state NOT confirmed on {e.get('chamber', '?')} ({e.get('error')})"
                     for e in bad) if bad else None


def exit_code(result: Mapping[str, Any], *, incomplete: bool = False, failed: bool = False) -> int:
    """The command's exit code from its result: 3 when a safe state is unconfirmed, 130 when `interrupted`, 2 when
    it `failed`, 1 when `incomplete` (the argument, or a non-empty `incomplete` entry of the result), else 0."""
    if not safe_state_confirmed(result.get("safe_state")):
        return UNSAFE
    if result.get("interrupted"):
        return INTERRUPTED
    if failed:
        return FAILED
    if incomplete or result.get("incomplete"):
        return INCOMPLETE
    return DONE


def outcomes_of(opened: Any) -> list[dict[str, Any]]:
    """The safe-state outcomes of a closed chamber.selection.OpenChambers (or None) as JSON-ready dicts."""
    return [o.to_dict() for o in getattr(opened, "outcomes", None) or ()]
