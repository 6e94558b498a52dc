"""The matrix runner: models × claims × repeats × arms, a bounded number at a time, resumable, then re-scored.

Why resumable and file-based: a matrix of paid model calls is interrupted (rate limits, a laptop lid); a cell whose
record already ends with run_end is never paid for twice, and a cell cut short is discarded (its partial record
removed) and run again — a half-written record is never scored. With a chamber service every cell that
submits its extraction goes on to phase two (the chamber tools, over HTTP); without one the record says phase
two was skipped. Everything a score needs stays on disk:
`RUN_DIR/cells/<run_id>.jsonl` (+ blobs), `RUN_DIR/extractions/<run_id>.json`, then `RUN_DIR/scores.json`.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from agent.chamber_client import ChamberClient
from agent.datasheet.manifest import ManifestCache
from agent.loop import Budget, run_cell
from agent.scoring.arms import arm_setup
from agent.scoring.cells import slug

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MatrixCell:
    claim_id: str
    model: str
    arm: str
    repeat: int

    @property
    def run_id(self) -> str:
        return f"{self.claim_id}--{slug(self.model)}--{self.arm}--r{self.repeat}"


def plan(models: list[str], claim_ids: list[str], repeats: int, arms: list[str]) -> list[MatrixCell]:
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    return [MatrixCell(c, m, a, r) for m in models for a in arms for c in claim_ids for r in range(1, repeats + 1)]


def _run_end(record: Path) -> dict[str, Any] | None:
    """The record's closing run_end event, or None when it has none (cut short, or no record)."""
    try:
        lines = [ln for ln in record.read_text(encoding="utf-8").splitlines() if ln.strip()]
        last = json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return None
    return last if isinstance(last, dict) and last.get("kind") == "run_end" else None


def _outcome(record: Path) -> str | None:
    """The run_end outcome of a record, or None when it has no run_end (cut short)."""
    end = _run_end(record)
    return end.get("outcome") if end is not None else None


def _retire(cells_dir: Path, run_id: str) -> int:
    """Move an engine_error record (and its blobs) to `<out>/retired/<run_id>.<n>.*` so a resume can run the
    cell again while the failed attempt stays on disk for audit; returns how many attempts are retired now."""
    retired = cells_dir.parent / "retired"
    retired.mkdir(exist_ok=True)
    n = len(list(retired.glob(f"{run_id}.*.jsonl"))) + 1
    (cells_dir / f"{run_id}.jsonl").rename(retired / f"{run_id}.{n}.jsonl")
    blobs = cells_dir / f"{run_id}.blobs"
    if blobs.exists():
        blobs.rename(retired / f"{run_id}.{n}.blobs")
    return n


def retired_attempts(out: Path, run_id: str) -> int:
    return len(list((Path(out) / "retired").glob(f"{run_id}.*.jsonl")))


def default_decoy(claim: Any, datasheets_dir: Path) -> Path:
    """The paper's decoy is the A4988 datasheet; an A4988 claim gets the DPS310 one."""
    from protocols.datasheets import datasheet_for

    part = "DPS310" if claim.datasheet == "A4988" else "A4988"
    return Path(datasheets_dir) / datasheet_for(part).filename


def run_matrix(
    cells: list[MatrixCell],
    *,
    claims: Mapping[str, Any],
    out: Path,
    datasheets_dir: Path,
    client_factory: Callable[[str], Any],
    clock: Callable[[], float],
    concurrency: int = 2,
    budget: Budget = Budget(),
    sleep: Callable[[float], None] | None = None,
    decoy_for: Callable[[Any], Path] | None = None,
    progress: Callable[[str], None] | None = None,
    engine_error_retries: int = 2,
    chamber: ChamberClient | None = None,
    clock_for: Callable[[MatrixCell], Callable[[], float]] | None = None,
) -> dict[str, Any]:
    """Run every cell not already recorded under `out`; returns counts of what ran, was skipped or failed.

    A finished cell is kept, except one that ended in engine_error (an HTTP failure, a provider fault — not
    the model's doing): a resume runs it again, up to `engine_error_retries` times, the failed attempts moved
    to `<out>/retired/`. `engine_errors` in the result lists the cells whose latest record is engine_error.
    `chamber` (one client, shared: each cell opens its own session) runs phase two; None skips it.
    `clock_for` gives each cell its own clock (an injected, deterministic one makes every record independent
    of concurrency and scheduling, byte for byte); by default all cells read the shared `clock`."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    missing = sorted({c.claim_id for c in cells} - set(claims))
    if missing:
        raise KeyError(f"unknown claim id(s) {missing}")
    out = Path(out)
    cells_dir, ex_dir = out / "cells", out / "extractions"
    cells_dir.mkdir(parents=True, exist_ok=True)
    ex_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    status: Counter = Counter()
    failures: list[dict[str, str]] = []
    todo = []
    for cell in cells:
        record = cells_dir / f"{cell.run_id}.jsonl"
        end = _run_end(record)  # a finished cell's record ends with run_end
        if end is not None:
            if end.get("outcome") == "engine_error" and retired_attempts(out, cell.run_id) < engine_error_retries:
                _retire(cells_dir, cell.run_id)
                status["retried_engine_error"] += 1
                todo.append(cell)
                continue
            status["skipped"] += 1
            continue
        if record.exists():  # cut short earlier: discard and run again
            record.unlink()
            shutil.rmtree(cells_dir / f"{cell.run_id}.blobs", ignore_errors=True)
            status["restarted"] += 1
        todo.append(cell)

    readings = ManifestCache(keep_readings=True)  # each datasheet read and indexed once for all cells

    def one(cell: MatrixCell) -> None:
        claim = claims[cell.claim_id]
        pdf = Path(datasheets_dir) / claim.identity.filename
        try:
            decoy = (decoy_for or (lambda c: default_decoy(c, datasheets_dir)))(claim) if cell.arm == "wrong-content" else None
            setup = arm_setup(cell.arm, pdf, decoy_pdf=decoy, cache=readings)
            model = setup.model(client_factory(cell.model))
            cell_clock = clock_for(cell) if clock_for is not None else clock
            result = run_cell(claim, model=model, datasheet=pdf, record_dir=cells_dir, clock=cell_clock,
                              budget=budget, sleep=sleep, run_id=cell.run_id, tools=setup.tools, chamber=chamber,
                              surface_version=setup.surface_version)
        except Exception as e:  # one broken cell must not stop the matrix; it is reported, not scored as a pass
            log.warning("cell %s failed: %s", cell.run_id, e)
            with lock:
                status["failed"] += 1
                failures.append({"run_id": cell.run_id, "error": f"{type(e).__name__}: {e}"})
            return
        payload = {"run_id": cell.run_id, "claim_id": cell.claim_id, "model": cell.model, "arm": cell.arm,
                   "repeat": cell.repeat, "outcome": result.outcome, "extraction": result.extraction,
                   "extraction_sha256": result.extraction_sha256, "phase_two": result.phase_two,
                   "chamber_outcome": result.chamber_outcome, "record": str(result.record)}
        (ex_dir / f"{cell.run_id}.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
        with lock:
            status["ran"] += 1
            status[f"outcome:{result.outcome}"] += 1
            status[f"phase_two:{result.phase_two}"] += 1
        if progress is not None:
            progress(f"{cell.run_id}: {result.outcome}")

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, todo))
    engine_errors = sorted(c.run_id for c in cells
                           if _outcome(cells_dir / f"{c.run_id}.jsonl") == "engine_error")
    return {"planned": len(cells), **dict(status), "failures": failures, "engine_errors": engine_errors}
