"""The matrix: models × claims × repeats × arms, a bounded number at a time, resumable — through the cell runner.

Why a thin module: planning, the resume rule (a complete record kept, a cut-short one removed and run again, an
engine_error one retried up to a cap) and the id scheme are agent.cell_runner's, the same for the main job and
`extract`. What is the matrix's own: its run folder layout — `OUT/cells/<cell_id>.jsonl` (+ blobs),
`OUT/extractions/<cell_id>.json`, failed attempts in `OUT/retired/`, then `OUT/scores.json` — and its flat
counts. With a chamber service every cell that submits its extraction goes on to phase two (over HTTP);
without one the record says phase two was skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from agent.cell_runner import CellDone, CellIndex, PlannedCell, plan_cells, report_json, run_cells
from agent.chamber_client import ChamberClient
from agent.loop import Budget

MatrixCell = PlannedCell  # one cell of the matrix: claim, model, arm, repeat (cell_id / run_id follow from them)
plan = plan_cells


def run_matrix(
    cells: list[PlannedCell],
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
    clock_for: Callable[[PlannedCell], Callable[[], float]] | None = None,
    index: CellIndex | None = None,
) -> dict[str, Any]:
    """Run every cell the resume rule does not keep under `out`; returns the counts (planned, skipped = kept,
    restarted, retried_engine_error, ran, failed, outcome:<x>, phase_two:<x>), `failures` (cells that raised)
    and `engine_errors` (cells whose latest record is engine_error). `chamber` (one client, shared: each cell
    opens its own session) runs phase two; None skips it. `clock_for` gives each cell its own clock (records
    then independent of concurrency, byte for byte). `index` gets a row per cell (score_run adds the scores)."""
    out = Path(out)

    def said(done: CellDone) -> None:
        if progress is not None and not done.kept and done.error is None:
            progress(f"{done.cell.cell_id}: {done.outcome}")

    report = run_cells(cells, claims=claims, cells_dir=out / "cells", datasheets_dir=datasheets_dir,
                       client_factory=client_factory, clock=clock, clock_for=clock_for, concurrency=concurrency,
                       budget=budget, sleep=sleep, chamber=chamber, decoy_for=decoy_for,
                       engine_error_retries=engine_error_retries, index=index, extractions_dir=out / "extractions",
                       on_cell=said)
    return report_json(report)
