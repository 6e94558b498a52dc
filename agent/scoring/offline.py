"""`score` and `report` over what is already recorded: no model, no chamber, only files in and files out.

Why its own module: scoring records or run folders offline and writing a run folder's report are the scoring
floor's jobs; the CLI parses the paths and renders the result (`score_text`, `report_text`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

RUN_FOLDER_FILES = ("summary.json", "checks.json", "station_checks.json", "calibration.json", "sweep.json",
                    "link.json", "scores.json", "cells")
"""What a run folder holds; `report` refuses a folder with none of them instead of writing an empty report."""


class NotARunFolder(ValueError):
    """`report` on a folder that holds nothing a run writes."""


def score_job(paths: Sequence[Path], *, datasheets_dir: Path, prices: Path | None, no_grounding: bool,
              out: Path | None, claims: Mapping[str, Any] | None = None, force: bool = False) -> dict[str, Any]:
    """Score record files, run folders or an imported archive (agent.scoring.score) with the price table of the
    file `prices`; written to `out` if given (a new file in an existing folder unless `force`, checked before
    scoring, and written whole: protocols.files.write_json_file). Each run folder's cells are graded against the
    claim pool the run recorded (claim_pool.json; an older folder: the pool `run` grades), unless `claims` is given
    (`--claims`). The source-grounding search runs unless `no_grounding`, when the datasheet folder exists."""
    from agent.scoring.pricing import load_price_table
    from agent.scoring.score import score_paths
    from protocols.files import check_output_path, write_json_file

    if out is not None:
        check_output_path(out, force=force, option="--out")
    data = score_paths(list(paths), claims=claims, datasheets_dir=datasheets_dir if datasheets_dir.exists() else None,
                       prices=load_price_table(prices) if prices else None, ground=not no_grounding)
    if out is not None:
        write_json_file(out, data, force=force)
    return data


def flagged_text(flagged: Mapping[str, Any]) -> str:
    """The detector's count as a reader says it: '0 of 37 fidelity-passing cells (one-sided 95 % upper bound
    0.078)'; the bound only where the count is zero (that is when it is computed)."""
    bound = flagged.get("upper_95")
    return (f"{flagged.get('count', 0)} of {flagged.get('n', 0)} {flagged.get('unit', 'cells')}"
            + (f" (one-sided 95 % upper bound {bound:.3f})" if bound is not None else ""))


def score_text(d: Mapping[str, Any]) -> str:
    lines = [f"{c['run_id']}: {c['outcome']} fidelity={c['fidelity'].get('passed')} flags={','.join(c['flags']) or '-'}"
             for c in d["cells"][:200]]
    if len(d["cells"]) > 200:
        lines.append(f"... {len(d['cells']) - 200} more cells (use --json)")
    s = d["summary"]
    lines.append(f"cells {s['cells']}, fidelity passed {s['fidelity_passed']}, flagged {flagged_text(s['flagged'])}")
    if s.get("claim_pools"):
        lines.append(f"claims graded against: {'; '.join(s['claim_pools'])}")
    for group, text in (s.get("stability_text") or {}).items():
        lines.append(f"{group}: {text}")
    for key in ("planted_faults_total", "planted_faults_flagged", "clean_cells_total", "clean_cells_flagged", "kappa"):
        if key in s:
            lines.append(f"{key}: {s[key]}")
    return "\n".join(lines)


def report_job(run_dir: Path, claims: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write run_dir/report.md, report.html and figures/ from what the run folder holds. Each verdict's limits are
    drawn, and cells re-scored (a folder without a readable scores.json) graded, against the run's recorded claim
    pool, or against `claims` when given (`--claims`): one reader, protocols.claim_sources.claims_for_run."""
    from agent.scoring.report import write_report

    if run_dir.is_dir() and not any((run_dir / n).exists() for n in RUN_FOLDER_FILES):
        raise NotARunFolder(f"{run_dir}: expected a run folder holding one of {', '.join(RUN_FOLDER_FILES)}; "
                            "it holds none of them (run `run` or `matrix --out` first)")
    path = write_report(run_dir, claims=claims)
    return {"report": str(path), "html": str(path.with_suffix(".html")),
            "figures": sorted(str(p) for p in (run_dir / "figures").iterdir() if p.suffix in (".svg", ".png"))}


def report_text(d: Mapping[str, Any]) -> str:
    return f"wrote {d['report']} and {d['html']} ({len(d['figures'])} figures)"
