"""Reading a planned batch on the chambers: each staging set, settled and read (the first pass, then the top-up to
the default rows), and the declared restores.

Why its own module: protocols/runner.py decides what a batch is and grades it; this is the part that moves the
chambers for it, under the runner's guards (every SET through the setting guard; any exception the failure of the
steps a staging serves, never of the batch). Each reading is announced first (`ProtocolContext.measuring`, a
Measuring event) with the claims it serves, what is staged, and the pass's planned chamber seconds still ahead:
the planner's seconds (protocols/planner.reading_seconds) scaled by the pace measured so far in the pass, which is
the ETA the progress line counts down and the live view shows.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from chamber.driver import BoardLost
from protocols.declaration import StepReadings
from protocols.planner import Plan, Staging, reading_seconds
from protocols.staging import Chambers, Measuring

log = logging.getLogger(__name__)


def _planned_pass(runner: Chambers, the_plan: Plan, todo: Sequence[int], reads: dict[int, StepReadings],
                  full: bool) -> list[float]:
    """Each staging's planned chamber seconds in one reading pass, in order, from each chamber's state as the
    pass finds it (protocols/planner.reading_seconds)."""
    state = {k: dict(getattr(c, "state", lambda: {})() or {}) for k, c in runner.context.chambers.items()}
    seconds = []
    for index in todo:
        staging = the_plan.stagings[index]
        have = reads[index].n if index in reads else 0
        want = staging.full_rows if full else staging.first_rows
        chamber_state = state.setdefault(staging.chamber, {})
        seconds.append(reading_seconds(staging, chamber_state, max(0, want - have)) if want > have else 0.0)
        chamber_state.update(staging.settings)
    return seconds


def read_stagings(runner: Chambers, the_plan: Plan, indices: Sequence[int] | range, reads: dict[int, StepReadings],
                   failures: dict[int, BaseException], served: Mapping[str, str], *, full: bool) -> None:
    """Read each staging (first pass: each user's first rows; `full`: topped up to the default rows); `served`:
    each plan item's claim id, for the `measuring` event that names what a reading serves, with the pass's planned
    chamber seconds still ahead (the planner's, scaled by the pace measured so far in this pass: the ETA)."""
    todo = [i for i in indices if i not in failures]
    planned = _planned_pass(runner, the_plan, todo, reads, full)
    began, planned_done = runner.context.timer(), 0.0
    for position, index in enumerate(todo):
        if index in failures:
            continue
        staging = the_plan.stagings[index]
        have = reads[index].n if index in reads else 0
        want = staging.full_rows if full else staging.first_rows
        if want <= have:
            continue
        pace = (runner.context.timer() - began) / planned_done if planned_done > 0 else 1.0
        left = sum(planned[position:]) * pace
        planned_done += planned[position]
        try:
            runner.context.measuring(Measuring(tuple(dict.fromkeys(served[u.item] for u in staging.uses)),
                                               staging.chamber, staging.label(), want - have, planned_left_s=left))
            held = runner.current.get(staging.chamber) == index
            more = runner.once_more_if_lost(  # a second try is staged afresh: held no more
                staging.chamber, f"stage {staging.label()}",
                lambda first: _stage_and_read(runner, staging, want - have, held=held and first))
            runner.current[staging.chamber] = index
        except Exception as exc:  # the apparatus guard: every step this staging serves gets this error
            failures[index] = exc
            runner.current[staging.chamber] = None
            continue
        settings = tuple(staging.settings.items())
        if index in reads:  # topped up: the rows so far, then these (timestamps kept per row)
            before = reads[index]
            columns = {n: np.concatenate([before.columns[n], more.columns[n]]) for n in more.columns}
            stamps = (None if before.timestamps is None or more.timestamps is None
                      else np.concatenate([before.timestamps, more.timestamps]))
            reads[index] = replace(before, settings=settings, columns=columns, timestamps=stamps,
                                   reconnected=before.reconnected or more.reconnected)
        else:
            reads[index] = replace(more, settings=settings)


def _stage_and_read(runner: Chambers, staging: Staging, rows: int, *, held: bool) -> StepReadings:
    """SET the staging (unless the chamber holds it already), settle it, and read `rows` rows."""
    if not held:
        runner.context.progress(f"{staging.chamber}: stage {staging.label()} "
                                f"(serves {len(staging.uses)} step(s)), read {rows} rows")
        runner.context.chamber(staging.chamber).set_many(runner.guarded(staging.chamber, staging.settings))
        runner.stagings += 1
    settled = runner.settle(staging.chamber, 0, staging.settle_s) if not held and staging.settle_s else None
    settle_rows = 0 if held else staging.settle_rows
    more = runner.read(staging.chamber, rows, staging.reads, settle_rows)
    if settled is not None:  # a reconnect while settling is the readings' (the evaluation refuses them)
        more = replace(more, settle_rows=settled.rows + settle_rows, settled_s=settled.seconds,
                       reconnected=more.reconnected or settled.reconnected)
    return more


def restore(runner: Chambers, kind: str, settings: Mapping[str, float], after: str) -> None:
    """Apply a declared restore through the setting guard; a failure is logged (the verdicts were measured)."""
    try:
        runner.context.chamber(kind).set_many(runner.guarded(kind, settings))
        runner.current[kind] = None
    except Exception as exc:
        log.log(logging.INFO if isinstance(exc, BoardLost) else logging.WARNING, "restoring %s after %s failed: %s: %s",
                kind, after, type(exc).__name__, exc)


def apply_restores(runner: Chambers, the_plan: Plan) -> None:
    for kind, settings in the_plan.restores.items():
        restore(runner, kind, settings, "the batch")
