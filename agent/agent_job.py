"""The agent part of the main job: one recorded cell per claim whose datasheet is present, then the scores.

Why its own module: the main job's cells used to run inside the CLI. Here they get everything passed in (the
model client, the datasheet folder, the run folder and its index, the chamber tools API's URL), and the chamber
is reached only over HTTP through that URL (agent/ never imports chamber/ or simulator/).

Resume rule: a cell whose record is complete (validate_record) is kept as it is and its index row is written
again from the record, so a process killed between a finished cell and its index row leaves no hole after the
next run; an incomplete record (killed mid-cell) is removed and the cell runs again from scratch.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Sequence

from agent.record import RecordError, validate_record
from agent.runindex import RunIndex
from protocols.claims import Claim
from protocols.files import write_json_atomic
from protocols.lab_job import JobProgress, Quiet


def cell_id_of(model_spec: str, claim_id: str) -> str:
    """The main job's cell id: the model spec made file-safe, then the claim id (one cell per claim and model)."""
    return f"{model_spec.replace(':', '-').replace('/', '-')}.{claim_id}"


def _finished(record: Path) -> str | None:
    """The outcome of a complete record, or None when the record is cut short or invalid (it is removed)."""
    try:
        events = validate_record(record)
    except (RecordError, ValueError, OSError):
        record.unlink()
        return None
    return events[-1].outcome


def run_agent_job(claims: Sequence[Claim], *, model_spec: str, model: Any, datasheets_dir: Path, run_dir: Path,
                  run_id: str, index: RunIndex, api_url: str | None, selected: Sequence[str] | None = None,
                  progress: JobProgress = Quiet()) -> dict[str, Any]:
    """Run the cells of `claims` (only the `selected` ids, when given) that print a figure to extract
    (Source.prints_figure) and have a datasheet in `datasheets_dir`,
    record each in `run_dir/cells` and the index, score them into `run_dir/scores.json`; returns the summary."""
    import httpx

    from agent.chamber_client import ChamberClient
    from agent.loop import run_cell

    wanted = list(claims) if selected is None else [c for c in claims if c.id in set(selected)]
    no_figure = sorted(c.id for c in wanted if not c.source.prints_figure)
    if no_figure:
        progress.say(f"agent: {len(no_figure)} claims print no figure to extract (graded by the chamber only): "
                     + ", ".join(no_figure))
    wanted = [c for c in wanted if c.source.prints_figure]
    runnable = [c for c in wanted if (datasheets_dir / c.identity.filename).exists()]
    skipped = sorted({c.identity.filename for c in wanted} - {c.identity.filename for c in runnable})
    if skipped:
        progress.say(f"agent: datasheets not found in {datasheets_dir}: {', '.join(skipped)} — get them with "
                     "`python bench_cli.py datasheet fetch --all --dir DIR` and set CHAMBERLAB_SHARED")
    cells_dir = run_dir / "cells"
    cells_dir.mkdir(exist_ok=True)
    if api_url:
        progress.say(f"agent: chamber tools API at {api_url} (live view: {api_url}/)")
    outcomes: dict[str, int] = {}
    resumed = 0
    progress.start("agent", len(runnable))
    with contextlib.ExitStack() as stack:
        chamber = ChamberClient(stack.enter_context(httpx.Client(base_url=api_url, timeout=120.0))) if api_url else None
        for claim in runnable:
            cell_id = cell_id_of(model_spec, claim.id)
            record = cells_dir / f"{cell_id}.jsonl"
            kept = _finished(record) if record.exists() else None
            if kept is not None:
                index.record_cell(run_id, cell_id, claim.id, model_spec, kept, str(record))
                resumed += 1
                progress.advance(f"{claim.id} (kept)")
                continue
            result = run_cell(claim, model=model, datasheet=datasheets_dir / claim.identity.filename,
                              record_dir=cells_dir, clock=time.time, chamber=chamber, run_id=cell_id,
                              sleep=time.sleep)
            outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
            index.record_cell(run_id, cell_id, claim.id, model_spec, result.outcome, str(result.record))
            progress.advance(f"{claim.id}: {result.outcome}")
    return {"model": model_spec, "cells": len(runnable), "kept_from_earlier": resumed, "outcomes": outcomes,
            "skipped_datasheets": skipped, "no_figure_to_extract": no_figure, "phase_two": bool(api_url),
            **score_cells(cells_dir, run_dir, claims, datasheets_dir)}


def score_cells(cells_dir: Path, run_dir: Path, claims: Sequence[Claim], datasheets_dir: Path) -> dict[str, Any]:
    """Fidelity and the silent-failure detector over the run's cells, written to scores.json."""
    from agent.scoring.score import score_paths

    scores = score_paths([cells_dir], claims={c.id: c for c in claims}, datasheets_dir=datasheets_dir)
    write_json_atomic(run_dir / "scores.json", scores)
    return {"fidelity_and_flags": scores.get("summary", {})}
