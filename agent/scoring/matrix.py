"""The matrix: models × claims × repeats × arms, a bounded number at a time, resumable — through the cell runner.

Why a thin module: planning, the resume rule (a complete record kept, a cut-short one removed and run again, an
engine_error one retried up to a cap) and the id scheme are agent.cell_runner's, the same for the main job and
`extract`; so are the runner's options (run_matrix passes them through rather than repeating them). What is the
matrix's own: its run folder layout — `OUT/cells/<cell_id>.jsonl` (+ blobs), `OUT/extractions/<cell_id>.json`,
failed attempts in `OUT/retired/`, `OUT/index.sqlite` (one run row, a row per cell with its fidelity and flags),
then `OUT/scores.json` — and its flat counts. With a chamber service every cell that submits its extraction goes
on to phase two (over HTTP); without one the record says phase two was skipped.

Model options: the flags (--max-output-tokens, --temperature, --extra-body, --thinking, --effort) are written into
every model's spec under the spec's own `?option=` (the spec wins), so each model runs, is indexed and resumes
under one full spec string; its cells are named by the model's label (agent.cell_runner.model_labels). Before any
cell, each model that calls an endpoint is preflighted (agent.doctor): a failed probe the run needs stops the
matrix, naming the probe, its finding and its evidence (`OUT/preflight/<label>/`).
"""

from __future__ import annotations

import contextlib
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from agent.cell_runner import (CellDone, CellIndex, PlannedCell, model_labels, plan_cells, report_json, run_cells,
                               score_run)
from agent.models.base import one_line

MatrixCell = PlannedCell  # one cell of the matrix: claim, model, arm, repeat (cell_id / run_id follow from them)
plan = plan_cells


class MatrixRefused(ValueError):
    """A matrix request naming what does not exist (claim ids, arms) or a missing datasheet folder."""


class PreflightFailed(MatrixRefused):
    """A model's endpoint failed a preflight probe the run depends on: no cell was run."""


def preflight_models(specs: Sequence[str], labels: Mapping[str, str], out: Path, say: Callable[[str], None],
                     timeout_s: float = 120.0) -> dict[str, Any]:
    """agent.doctor.preflight for each spec that calls an endpoint (not scripted:*), its evidence under
    `out/preflight/<label>/`, each probe request allowed `timeout_s`; raises PreflightFailed on the first model
    with a failed probe the run needs."""
    from agent import doctor
    from agent.models import is_scripted
    from agent.scoring.cells import slug

    done: dict[str, Any] = {}
    for spec in specs:
        if is_scripted(spec):
            continue
        folder = out / "preflight" / slug(labels[spec])  # a file-safe label (vLLM names hold "/")
        report = doctor.preflight(spec, out_dir=folder, environ=os.environ, progress=say,  # needs: the run's own
                                  timeout_s=timeout_s)
        done[labels[spec]] = {"ok": bool(report.ok), "evidence": str(folder)}
        if not report.ok:
            raise PreflightFailed(_preflight_failure(spec, report, folder))
        say(f"preflight {labels[spec]}: passed ({folder})")
    return done


def _preflight_failure(spec: str, report: Any, folder: Path) -> str:
    """One line: the failed probes the run needs grouped by cause (a few words each), each fix once (the text
    tool protocol once for every cause it answers, when doctor recommends it), the evidence folder."""
    from agent.doctor import NATIVE_BROKEN
    from agent.models.serving import SUMMARY

    failed = [p for p in report.probes if p.name in set(report.failed_needed)]
    by_cause: dict[str, list[str]] = {}
    for p in failed:
        by_cause.setdefault(SUMMARY.get(p.cause or "", one_line(p.finding, 100)), []).append(p.name)
    found = "; ".join(f"{', '.join(names)}: {what}" for what, names in by_cause.items()) or "a needed probe failed"
    recommended = getattr(report, "recommendation", None)
    fixes = dict.fromkeys("--tool-protocol text (?tools=text)" if recommended and p.cause in NATIVE_BROKEN else p.fix
                          for p in failed if p.fix)
    return (f"preflight of {spec} failed, no cell run: {found}"
            + (f". Fix: {'; '.join(fixes)}" if fixes else "")
            + f". Evidence in {folder}; `chamberlab doctor --model '{spec}'` explains each probe; --no-preflight "
              "runs the matrix anyway")


def run_matrix(cells: list[PlannedCell], *, out: Path, concurrency: int = 2, progress: Any = None,
               **runner: Any) -> dict[str, Any]:
    """Run every cell the resume rule does not keep under `out`; returns the counts (planned, skipped = kept,
    restarted, retried_engine_error, ran, failed, outcome:<x>, phase_two:<x>), `failures` (cells that raised)
    and `engine_errors` (cells whose latest record is engine_error). `runner` is agent.cell_runner.run_cells'
    keywords (claims, datasheets_dir, client_factory, clock, budget, chamber, clock_for, index, ...): with
    `clock_for` each cell has its own clock (records then independent of concurrency, byte for byte).
    `progress`: a firmware_bridge.progress_line.ProgressLine (cells i/N, elapsed, ETA from the cells run now, a
    kept cell taking no time), or a function given one line per cell run, or None."""
    out = Path(out)
    line = progress if hasattr(progress, "start") else None
    began, seen, ran = time.monotonic(), 0, 0
    if line is not None:
        line.start("matrix: cells", len(cells))

    def said(done: CellDone) -> None:
        nonlocal seen, ran
        seen, ran = seen + 1, ran + (not done.kept)
        state = f"failed ({done.error})" if done.error is not None else "kept" if done.kept else done.outcome
        what = f"{done.cell.cell_id}: {state}"
        if line is None:
            if callable(progress) and not done.kept and done.error is None:
                progress(f"[{seen}/{len(cells)}] {what}")
            return
        if done.error is not None:
            line.say(what)
        eta = (time.monotonic() - began) / ran * (len(cells) - seen) if ran else None
        line.update(seen, what, eta_s=eta if seen < len(cells) else 0.0)
        if seen >= len(cells):
            line.finish()

    report = run_cells(cells, cells_dir=out / "cells", concurrency=concurrency, extractions_dir=out / "extractions",
                       on_cell=said, **runner)
    return report_json(report)


def check_plan(claims: Mapping[str, Any], selected: Sequence[str] | None, arms: Sequence[str]) -> list[str]:
    """The claim ids of the plan (every claim unless `selected`), refusing unknown ids and arms by name."""
    from agent.scoring.arms import ARMS

    ids = list(claims) if selected is None else list(selected)
    unknown = [c for c in ids if c not in claims]
    if unknown:
        raise MatrixRefused(f"unknown claim id(s) {', '.join(unknown)}; known: {', '.join(sorted(claims))}")
    bad = [a for a in arms if a not in ARMS]
    if bad:
        raise MatrixRefused(f"unknown arm(s) {', '.join(bad)}; known: {', '.join(ARMS)}")
    return ids


def matrix_job(*, models: Sequence[str], claims: Mapping[str, Any], selected: Sequence[str] | None,
               arms: Sequence[str], repeats: int, out: Path, datasheets_dir: Path, prices: Path | None,
               concurrency: int, max_turns: int, wall_s: float, no_chamber: bool, chamber_url: str | None,
               chamber_token_file: Path | None, inspect_log: bool, say: Callable[[str], None],
               claim_sources: Sequence[str | Path] = (), thinking: str | None = None, effort: str | None = None,
               max_output_tokens: int | None = None, extra_body: str | None = None,
               temperature: float | None = None, preflight: bool | None = None,
               progress: Any = None, tool_protocol: str = "native") -> dict[str, Any]:
    """Check the request (the --out folder, ids, arms, every model's spec with the option flags and its key, the
    datasheet folder) before any cell runs (`tool_protocol` text: every model but scripted:* carries its tool calls
    as text, `?tools=text`, unless its spec says otherwise), preflight each model's endpoint (`preflight`: None = on
    for every model but scripted:*), record the claim pool in `out/claim_pool.json` (with `claim_sources`, the files it
    came from), run the plan into `out` with its index, score it into `out/scores.json` and the index rows; the
    run's counts, the scores' summary (stability in words) and (with `inspect_log`) one inspect-ai eval log per
    model. `progress`: the cells' progress line (firmware_bridge.progress_line.ProgressLine), else a line per
    cell through `say`."""
    from agent.extract_job import chamber_for_cells, model_options
    from agent.loop import Budget
    from agent.models import client_for, full_spec
    from agent.runindex import RunIndex
    from agent.scoring.pricing import load_price_table
    from protocols.claim_sources import MAIN_JOB_POOL, write_run_pool

    if out.exists() and not out.is_dir():
        raise MatrixRefused(f"--out {out} is a file; expected a folder (new or a run folder to resume)")
    ids = check_plan(claims, selected, arms)
    options = model_options(thinking=thinking, effort=effort, max_output_tokens=max_output_tokens,
                            extra_body=extra_body, temperature=temperature, tool_protocol=tool_protocol)
    models = [full_spec(m, options) for m in models]  # each spec with the flags written in (its own ?... wins)
    for m in models:  # fail before any cell runs when a key is missing or an option does not apply
        client_for(m, os.environ)
    price_table = load_price_table(prices) if prices else None
    if not datasheets_dir.exists():
        raise MatrixRefused(f"datasheet folder {datasheets_dir} not found (give --datasheets or set "
                            "CHAMBERLAB_SHARED)")
    cells = plan(list(models), ids, repeats, list(arms))
    labels = model_labels(models)
    checked: dict[str, Any] = {}
    if preflight is not False:
        checked = preflight_models(models, labels, out, say, timeout_s=wall_s)  # wall_s: a slow CPU server
    out.mkdir(parents=True, exist_ok=True)
    write_run_pool(out, claims, [str(p) for p in claim_sources] or [MAIN_JOB_POOL])  # no --claims PATH: run's pool
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with RunIndex(out / "index.sqlite") as index, contextlib.ExitStack() as stack:
        where = CellIndex(index, out.name)
        index.start_run(out.name, out, started, "matrix")
        status = "failed"
        try:
            chamber = chamber_for_cells(stack, no_chamber=no_chamber, chamber_url=chamber_url,
                                        token_file=chamber_token_file, api_dir=out / "api", claims=claims, say=say)
            run = run_matrix(cells, out=out, claims=claims, datasheets_dir=datasheets_dir,
                             client_factory=lambda spec: client_for(spec, os.environ), clock=time.time,
                             concurrency=concurrency, budget=Budget(max_turns=max_turns, wall_s=wall_s),
                             sleep=time.sleep, progress=progress or say, chamber=chamber, index=where)
            scores = score_run([out], out / "scores.json", claims=claims, datasheets_dir=datasheets_dir,
                               prices=price_table, index=where)
            status = "finished"
        finally:
            index.finish_run(out.name, datetime.now(timezone.utc).isoformat(timespec="seconds"), status,
                             {"cells": len(cells)})
    data: dict[str, Any] = {"run": run, "summary": scores["summary"], "out": str(out),
                            "models": labels, "preflight": checked}
    short = {"failures": run.get("failures"), "engine_errors": run.get("engine_errors"),  # cells that are not
             "document_unreadable": scores["summary"].get("document_unreadable")}  # results: exit code 1
    if any(short.values()):
        data["incomplete"] = {k: v for k, v in short.items() if v}
    if inspect_log:
        from agent.inspect_log import export_eval_logs

        records = [out / "cells" / f"{c.cell_id}.jsonl" for c in cells]
        data["inspect_log"] = [str(p) for p in export_eval_logs([r for r in records if r.exists()], out / "inspect")]
    return data


def matrix_text(d: Mapping[str, Any], width: Any = "terminal") -> str:
    """The matrix's counts, failures, stability and scores; on a terminal each line fits its width (broken between
    "key value" parts, firmware_bridge.progress_line), piped whole lines."""
    from agent.scoring.offline import flagged_text
    from firmware_bridge.progress_line import fit_line, wrap_parts

    run = d["run"]
    lines = wrap_parts([f"{k} {v}" for k, v in run.items() if k not in ("failures", "engine_errors")], width,
                       head="cells: ")
    for key in ("failures", "engine_errors"):
        if run.get(key):
            lines += wrap_parts([str(x) for x in run[key]], width, head=f"{key.replace('_', ' ')}: ")
    for group, text in (d["summary"].get("stability_text") or {}).items():
        lines += fit_line(f"{group}: {text}", width)
    lines += wrap_parts([f"{d['out']}/scores.json", f"flagged {flagged_text(d['summary']['flagged'])}"], width,
                        head="scores: ", sep="; ")
    return "\n".join(lines)
