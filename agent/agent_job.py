"""The agent part of the main job: one recorded cell per claim whose datasheet is present, then the scores.

Why its own module: the main job's cells used to run inside the CLI. Here they get everything passed in (the
model client, the datasheet folder, the run folder and its index, the chamber tools API's URL), and the chamber
is reached only over HTTP through that URL (agent/ never imports chamber/ or simulator/).

The cells run through agent.cell_runner, the same runner, id scheme and resume rule as the matrix: one cell
per claim (arm normal, repeat 1); a complete record is kept and its index row written again from it (a process
killed between a finished cell and its row leaves no hole), an incomplete one is removed and run again, and an
engine_error one is retried on resume up to the runner's cap. After scoring, each cell's fidelity and flags are
written into its index row.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Sequence

from agent.cell_runner import CellDone, CellIndex, PlannedCell, run_cells, score_run
from agent.models.base import ModelClient
from agent.runindex import RunIndex
from protocols.claims import Claim
from protocols.bench_job import JobProgress, Quiet


def fetch_hint(datasheets_dir: Path) -> str:
    """How to get the missing datasheets into `datasheets_dir` (the main job's refusal and the agent's note)."""
    return (f"fetch them with `chamberlab datasheet fetch --all --dir {datasheets_dir}`, or set CHAMBERLAB_SHARED to "
            "the folder that holds datasheets/")


def run_agent_job(claims: Sequence[Claim], *, model_spec: str, model: ModelClient, datasheets_dir: Path, run_dir: Path,
                  run_id: str, index: RunIndex, api_url: str | None,
                  progress: JobProgress = Quiet()) -> dict[str, Any]:
    """Run the cells of `claims` (the caller's selection) that print a figure to extract (Source.prints_figure)
    and have a datasheet in `datasheets_dir`,
    record each in `run_dir/cells` and the index, score them into `run_dir/scores.json`; returns the summary
    (`not_run`: cells of `claims` that print a figure but did not run: no datasheet, or the cell crashed)."""
    import httpx

    from agent.chamber_client import ChamberClient

    wanted = list(claims)
    no_figure = sorted(c.id for c in wanted if not c.source.prints_figure)
    if no_figure:
        progress.say(f"agent: {len(no_figure)} claims print no figure to extract (graded by the chamber only): "
                     + ", ".join(no_figure))
    wanted = [c for c in wanted if c.source.prints_figure]
    runnable = [c for c in wanted if (datasheets_dir / c.identity.filename).exists()]
    skipped = sorted({c.identity.filename for c in wanted} - {c.identity.filename for c in runnable})
    if skipped:
        progress.say(f"agent: datasheets not found in {datasheets_dir}: {', '.join(skipped)} — "
                     + fetch_hint(datasheets_dir))
    cells_dir = run_dir / "cells"
    cells_dir.mkdir(exist_ok=True)
    if api_url:
        progress.say(f"agent: chamber tools API at {api_url} (its calls show on the job's live view)")
    progress.start("agent", len(runnable))

    def said(done: CellDone) -> None:
        claim = done.cell.claim_id
        progress.advance(f"{claim} (kept)" if done.kept else
                         f"{claim}: failed ({done.error})" if done.error else f"{claim}: {done.outcome}")

    where = CellIndex(index, run_id)
    with contextlib.ExitStack() as stack:
        chamber = ChamberClient(stack.enter_context(httpx.Client(base_url=api_url, timeout=120.0))) if api_url else None
        report = run_cells([PlannedCell(c.id, model_spec) for c in runnable], claims={c.id: c for c in runnable},
                           cells_dir=cells_dir, datasheets_dir=datasheets_dir, client_factory=lambda _spec: model,
                           clock=time.time, sleep=time.sleep, chamber=chamber, index=where, on_cell=said)
    progress.stage("scoring", f"fidelity and the silent-failure detector over {len(runnable)} cells")
    progress.say(f"scoring: fidelity and the silent-failure detector over {len(runnable)} cells")
    return {"model": model_spec, "cells": len(runnable), "kept_from_earlier": report.counts["kept"],
            "not_run": len(wanted) - len(runnable) + len(report.failures),
            "outcomes": dict(report.outcomes), "skipped_datasheets": skipped, "no_figure_to_extract": no_figure,
            "phase_two": bool(api_url), **({"failures": report.failures} if report.failures else {}),
            **score_cells(cells_dir, run_dir, claims, datasheets_dir, index=where)}


def score_cells(cells_dir: Path, run_dir: Path, claims: Sequence[Claim], datasheets_dir: Path,
                index: CellIndex | None = None) -> dict[str, Any]:
    """Fidelity and the silent-failure detector over the run's cells, written to scores.json and, per cell, into
    the index's fidelity and flags columns."""
    if not any(cells_dir.glob("*.jsonl")):  # nothing ran (no claim had its datasheet): nothing to score
        return {"fidelity_and_flags": {}}
    scores = score_run([cells_dir], run_dir / "scores.json", claims={c.id: c for c in claims},
                       datasheets_dir=datasheets_dir, index=index)
    return {"fidelity_and_flags": scores.get("summary", {})}
