#!/usr/bin/env python3
"""chamberlab's one command line: parses arguments, calls the layers, renders text or JSON.

Every subcommand takes `--json` and then prints exactly one JSON object on stdout. Errors go to stderr as
`error: <Type>: <message>` (or a JSON object `{"error": {"type", "message"}}` with --json) and exit code 2, so
scripts can tell a refused request from a crash. Subsystems are imported inside the command functions so that
`--help` stays fast and a broken optional layer cannot stop the others from working.

The work lives below: chambers are opened by chamber/selection.py, the main job's lab part is
protocols/lab_job.py, its agent part agent/agent_job.py, its folder, lock and provenance agent/runfolder.py.
This file holds the main job (`run`, `runs`) and grading (`calibrate`, `check`, `sweep`); the other command
groups are cli_chamber.py and cli_agent.py, the shared helpers cli_common.py. COMMAND_GROUPS lists them all.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from cli_agent import add_datasheet_commands, add_extract_commands, add_scoring_commands
from cli_chamber import add_chamber_commands, add_serve_commands, add_sim_commands, add_station_commands
from cli_common import (add_claims_option, Args, Bars, claims_from_args, CliError, command, count_line, emit,
                        open_selected, open_station_from_args, progress, PROJECT_ROOT, shared_dir)

__all__ = ["PROJECT_ROOT", "shared_dir", "main", "build_parser"]
log = logging.getLogger("chamberlab.cli")


# ----------------------------------------------------------------------------------------------- section: verdicts
def add_chamber_selection(p: argparse.ArgumentParser) -> None:
    """--backend sim (both chambers in-process) or one or more --port URLs (the chamber kind is announced)."""
    p.add_argument("--backend", choices=["sim", "serial"], default=None,
                   help="sim: in-process simulator of both chambers (default when no --port is given)")
    p.add_argument("--port", action="append", default=None, metavar="URL",
                   help="pyserial URL of a chamber (device path, pty, socket://); repeat for wind + light tunnel")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (with --backend sim)")
    p.add_argument("--params", default=None, help="simulator parameter file, YAML or JSON (with --backend sim)")
    p.add_argument("--limits", default=None, help="operator limits file (YAML/JSON) enforced by the driver")
    p.add_argument("--station", default=None, metavar="STATION_FILE",
                   help="lab instruments (SMU, reference barometer, temperature controller) to grade more claims")


def add_verdict_commands(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "calibrate", "cross-sensor calibration of the wind tunnel's four DPS310 barometers")
    add_chamber_selection(p)
    p.add_argument("-n", type=int, default=200, help="rows measured after settling (default 200)")
    p.add_argument("--osr", type=int, default=8, choices=[1, 2, 4, 8])
    p.add_argument("-o", "--output", default=None, help="write the calibration record (JSON) here")
    p.set_defaults(handler=cmd_calibrate)
    p = command(sub, "check", "grade a claim (or --all) on the chamber: pass / inconclusive / fail with u")
    p.add_argument("claim_id", nargs="?", help="claim id (see protocols/data/claims/)")
    p.add_argument("--all", action="store_true", help="check every claim and print a table")
    add_claims_option(p)
    add_chamber_selection(p)
    p.add_argument("--rows", type=int, default=200, help="rows per measurement (default 200)")
    p.add_argument("--calibration", default=None, help="a calibration record to use (default: calibrate first)")
    p.set_defaults(handler=cmd_check)
    p = command(sub, "sweep", "hold one measurement fixed and move the claim's bound through it")
    p.add_argument("claim_id")
    add_chamber_selection(p)
    p.add_argument("--measured", default=None, help="a given measured value (in the claim's unit)")
    p.add_argument("--u", default=None, help="its standard uncertainty (with --measured)")
    p.add_argument("--recording", default=None, help="a recorded fans-off CSV (public dataset layout)")
    p.add_argument("--steps", type=int, default=41)
    p.add_argument("--csv", default=None, help="write the rows as CSV")
    p.add_argument("--plot", default=None, help="write the figure as PNG")
    p.set_defaults(handler=cmd_sweep)


def cmd_calibrate(args: Args) -> int:
    from datetime import datetime, timezone

    from calibration.records import record_from_calibration, save_record
    from protocols.runner import calibrate

    with open_selected(args) as opened:
        if "wt" not in opened.chambers:
            raise CliError("calibration needs the wind tunnel; connected: " + ", ".join(opened.chambers))
        cal = calibrate(opened.chambers["wt"], n=args.n, osr=args.osr, progress=lambda m: progress(args, m))
    record = record_from_calibration(cal, date=datetime.now(timezone.utc))
    if args.output:
        save_record(record, Path(args.output))

    def render(d: dict[str, Any]) -> str:
        p = d["record"]["parameters"]
        return "\n".join([f"cross-sensor mean {p['mean']:.2f} Pa (u {p['mean_u']:.2f} Pa), spread {p['spread']:.2f} Pa"]
                         + [f"  {k:<18} offset {v:+7.2f} Pa  (u {p['offset_u'][k]:.2f})" for k, v in p["offsets"].items()]
                         + ([f"record written to {d['path']}"] if d["path"] else []))

    emit(args, {"record": record.model_dump(mode="json", by_alias=True), "path": args.output}, render)
    return 0



def cmd_check(args: Args) -> int:
    from protocols.claims import get_claim
    from protocols.lab_job import grade_claims

    if bool(args.all) == bool(args.claim_id):
        raise CliError("give one CLAIM_ID or --all")
    pool, _ = claims_from_args(args)
    claims = list(pool.values()) if args.all else [get_claim(args.claim_id, pool)]
    calibration = None
    if args.calibration:
        from calibration.records import load_record

        calibration = load_record(Path(args.calibration))
    station = open_station_from_args(args)  # a bad station file or instrument fails here, before any staging
    try:
        with open_selected(args) as opened:
            results = grade_claims(claims, opened.chambers, rows=args.rows, calibration=calibration,
                                   report=lambda m: progress(args, m), station=station)
    finally:
        if station is not None:
            station.close()
    dicts = [r.to_dict() for r in results]
    if args.all:
        emit(args, {"results": dicts}, lambda d: render_check_table(d["results"]))
    else:
        emit(args, dicts[0], lambda d: render_check_table([d]) + "\n\n" + d["reason"])
    return 0


def cmd_sweep(args: Args) -> int:
    from protocols.claims import get_claim
    from protocols.sweep import plot_sweep, sweep, write_sweep_csv

    claim = get_claim(args.claim_id)
    if (args.measured is None) != (args.u is None):
        raise CliError("--measured and --u go together")
    if args.measured is not None:
        measured, u, unit, dof = args.measured, args.u, claim.unit, float("inf")
    else:
        m = sweep_measurement(args, claim)
        measured, u, unit, dof = m.value, m.u, m.unit, m.dof
    result = sweep(claim, measured, u, unit=unit, steps=args.steps, dof=dof)
    if args.csv:
        write_sweep_csv(result, Path(args.csv))
    if args.plot:
        plot_sweep(result, Path(args.plot))

    def render(d: dict[str, Any]) -> str:
        m = d["measured"]
        return "\n".join([f"{d['claim_id']}: measured {m['value']} ± {m['u']} {m['unit']}, "
                          f"c = {d['combined_uncertainty']}", f"{'bound':>24} {'distance':>22}  verdict"]
                         + [f"{r['bound']:>24} {r['distance']:>22}  {r['verdict']}" for r in d["rows"]])

    emit(args, {**result.to_dict(), "files": {"csv": args.csv, "plot": args.plot}}, render)
    return 0


def sweep_measurement(args: Args, claim: Any) -> Any:
    """The fixed measurement of a sweep: from a recorded CSV, or measured live with the claim's protocol."""
    from protocols.lab_job import grade_claims

    if args.recording:  # refused naming the rows: unset readings, fans on, another protocol (protocols/recorded.py)
        from protocols.recorded import operating_range_from_recording

        return operating_range_from_recording(claim, Path(args.recording))
    with open_selected(args) as opened:
        (result,) = grade_claims([claim], opened.chambers, rows=200, report=lambda m: progress(args, m))
    if result.measurement is None or result.measurement.value is None:
        raise CliError(f"{claim.id}: the protocol gave no measurement to sweep ({result.verdict.reason})")
    return result.measurement


# ----------------------------------------------------------------------------------------------- section: run
def add_run_commands(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "run", "the main job: chambers, calibration, all checks, the sweep, the agent, scores, report")
    p.add_argument("--port", action="append", default=None, metavar="URL",
                   help="real chamber(s) instead of the emulated boards (repeat for wind + light tunnel)")
    p.add_argument("--model", default="scripted:reader", help="agent model (default scripted:reader, offline)")
    p.add_argument("--runs-dir", type=Path, default=PROJECT_ROOT / "runs", help="where run directories go")
    p.add_argument("--resume", type=Path, default=None, help="resume this run directory (finished cells kept)")
    p.add_argument("--new", action="store_true",
                   help="start a new run even if the last one was interrupted (default: resume it)")
    p.add_argument("--rows", type=int, default=200, help="rows per measurement")
    p.add_argument("--seed", type=int, default=0, help="seed of the emulated boards")
    add_claims_option(p, ids=True)  # ids select the claims for the agent
    p.add_argument("--no-agent", action="store_true", help="skip the agent (chamber part only)")
    p.add_argument("--station", default=None, metavar="STATION_FILE",
                   help="lab instruments to grade with as well (default with emulated boards: the simulated station)")
    p.add_argument("--no-station", action="store_true", help="grade with the chamber alone")
    p.add_argument("--limits", default=None,
                   help="operator limits file (YAML/JSON; one file may cover both chambers) enforced by the driver")
    p.set_defaults(handler=cmd_run)
    p = command(sub, "runs", "list runs recorded in the index (runs/index.sqlite)")
    p.add_argument("action", choices=["list"])
    p.add_argument("--runs-dir", type=Path, default=PROJECT_ROOT / "runs")
    p.set_defaults(handler=cmd_runs)


def cmd_run(args: Args) -> int:
    """The main job: chambers (lab_job) then the agent's cells over the chamber tools API (agent_job), one run
    folder held by this process (runfolder), the report, and the summary on stdout."""
    import contextlib

    from agent.agent_job import run_agent_job
    from agent.runfolder import open_run_folder, provenance, utc_now
    from agent.scoring.report import write_report
    from chamber.instruments import sim_station_file
    from protocols.claim_sources import CHAMBER_PARTS_DIR, load_main_job_claims, split_claims_args
    from protocols.claims import PACKAGED_DIR
    from protocols.files import write_json_atomic
    from protocols.lab_job import run_lab_job, start_chamber_api, start_live_view

    model = None  # a wrong model spec, missing key or bad claim file fails now, not after the chamber part
    if not args.no_agent:
        from agent.models import client_for

        model = client_for(args.model, os.environ)
    agent_pool, selected = claims_from_args(args, ids=True)
    paths = split_claims_args(args.claims)[0]
    claims = list((agent_pool if paths else load_main_job_claims(None)).values())  # + the chamber-parts claims
    sources = [str(p) for p in paths] or [PACKAGED_DIR, f"protocols/data/{CHAMBER_PARTS_DIR.name}"]
    station = None if args.no_station else (args.station or (None if args.port else str(sim_station_file())))
    backend = "serial:" + ",".join(args.port) if args.port else "emulated boards on ptys"
    folder = open_run_folder(args.runs_dir, backend, resume=args.resume, new=args.new)
    if folder.resumed:
        progress(args, f"resuming run {folder.run_id} (finished agent cells are kept; --new starts afresh)")
    summary: dict[str, Any] = {"run_id": folder.run_id, "run_dir": str(folder.run_dir), "backend": backend}
    where: list[dict[str, Any]] = []
    bars = Bars()

    def record_provenance() -> None:
        summary["provenance"] = provenance(folder, finished=utc_now(), seed=None if args.port else args.seed,
                                           model=None if args.no_agent else args.model, chambers=where,
                                           station=station, limits=args.limits, claims_sources=sources)
    status = "failed"
    try:
        with contextlib.ExitStack() as stack:
            opened = stack.enter_context(open_selected(args, backend=None if args.port else "emulated"))
            where += opened.provenance()
            chambers, summary["live_view"], graded = start_live_view(stack, opened.chambers)
            progress(args, f"live view: {summary['live_view']}")
            lab = run_lab_job(claims, chambers, folder.run_dir, rows=args.rows, station_file=station, progress=bars,
                              graded=graded, on_verdicts=lambda checks: [
                                  folder.index.record_verdict(folder.run_id, r) for r in checks])
            summary.update(lab.summary)
            if model is not None:
                agent_claims = [c for c in claims if c.id in agent_pool]
                summary["agent"] = run_agent_job(
                    agent_claims, model_spec=args.model, model=model, datasheets_dir=shared_dir() / "datasheets",
                    run_dir=folder.run_dir, run_id=folder.run_id, index=folder.index, selected=selected,
                    api_url=start_chamber_api(stack, chambers, folder.run_dir, agent_claims), progress=bars)
        record_provenance()
        write_json_atomic(folder.run_dir / "summary.json", summary)
        summary["report"] = str(write_report(folder.run_dir))
        status = "finished"
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: chambers made safe above; the index and summary say so
        status = "interrupted"
        summary["interrupted"] = True
        record_provenance()
    finally:
        summary["seconds"] = round((utc_now() - folder.started).total_seconds(), 1)
        folder.index.finish_run(folder.run_id, utc_now().isoformat(timespec="seconds"), status, summary)
        folder.close()
    emit(args, summary, render_run_summary)
    return 130 if status == "interrupted" else 0


def cmd_runs(args: Args) -> int:
    from agent.runindex import RunIndex

    path = args.runs_dir.resolve() / "index.sqlite"
    if not path.exists():
        emit(args, {"runs": []}, lambda d: f"no runs yet (index {path} does not exist)")
        return 0
    with RunIndex(path) as index:
        runs = [dict(r.__dict__) for r in index.runs()]
    emit(args, {"runs": runs}, lambda d: "\n".join(
        [f"{'run':<18} {'status':<9} {'backend':<26} verdicts"]
        + [f"{r['run_id']:<18} {r['status']:<9} {r['backend'][:26]:<26} {count_line(r['summary'].get('verdicts', {}))}"
           for r in d["runs"]]))
    return 0


# ----------------------------------------------------------------------------------------------- main
COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_run_commands, add_verdict_commands, add_sim_commands, add_chamber_commands, add_datasheet_commands,
    add_extract_commands, add_serve_commands, add_station_commands, add_scoring_commands]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench_cli.py", description="chamberlab: Causal Chamber lab controller and instrumented datasheet agent")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMAND_GROUPS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from chamber.stop import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():  # SIGTERM unwinds like Ctrl-C: exit paths apply the safe state
            result = args.handler(args)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:  # rendered, not swallowed: the type and message tell the user what went wrong
        if args.verbose:
            log.exception("command failed")
        if getattr(args, "json", False):
            sys.stdout.write(json.dumps({"error": {"type": type(exc).__name__, "message": str(exc)}}) + "\n")
        else:
            sys.stderr.write(f"error: {type(exc).__name__}: {exc}\n")
        return 2
    return int(result or 0)


def render_check_table(results: list[dict[str, Any]]) -> str:
    header = f"{'claim':<36} {'verdict':<13} {'value ± u':<28} {'k':>5} {'cond m/u':>8}  class"
    lines = [header, "-" * len(header)]
    for r in results:
        m = r["measured"]
        value = "—" if not m or m["value"] is None else f"{m['value']} ± {m['u']} {m['unit']}"
        k = "" if not m or m["k"] is None else f"{m['k']:.2f}"
        cond = f"{len(r['matched_conditions'])}/{len(r['unmatched_conditions'])}"
        lines.append(f"{r['claim_id']:<36} {r['verdict']:<13} {value:<28} {k:>5} {cond:>8}  {r['class'] or ''}")
    return "\n".join([*lines, "", "  ".join(f"{k}: {v}" for k, v in sorted(Counter(r["verdict"] for r in results).items()))])


def render_run_summary(d: dict[str, Any]) -> str:
    lines = ["", f"run {d['run_id']} ({d['backend']}) in {d.get('seconds', '?')} s"]
    if "verdicts" in d:
        lines.append("verdicts:   " + ", ".join(f"{k} {v}" for k, v in sorted(d["verdicts"].items())))
    s = d.get("sweep") or {}
    if "measured" in s:
        m = s["measured"]
        lines.append(f"sweep:      {s['claim_id']} measured {m['value']} ± {m['u']} {m['unit']}, "
                     f"c = {s['combined_uncertainty']}; verdict changes at bounds {', '.join(s['verdict_changes_at'])}")
    st = d.get("station")
    if st:
        lines.append(f"station:    {len(st['definitive'])} definitive with instruments ("
                     + ", ".join(f"{k} {v}" for k, v in sorted(st["verdicts"].items())) + ")")
    for kind, counters in (d.get("link") or {}).items():
        lines.append(f"link {kind}:    " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    a = d.get("agent")
    if a:
        lines.append(f"agent:      {a['model']} on {a['cells']} claims ({a['kept_from_earlier']} kept from before): "
                     + ", ".join(f"{k} {v}" for k, v in a["outcomes"].items()))
        if a.get("skipped_datasheets"):
            lines.append(f"            skipped (no datasheet): {', '.join(a['skipped_datasheets'])}")
        fs = a.get("fidelity_and_flags")
        if isinstance(fs, dict) and fs:
            flagged = fs.get("flagged") or {}
            bound = (f" (one-sided 95 % upper bound {flagged['upper_95']:.3f}; unit: {flagged.get('unit', 'cells')})"
                     if flagged.get("count") == 0 and flagged.get("upper_95") is not None else "")
            latency = fs.get("latency_per_cell_mean_s")
            lines.append(f"scores:     fidelity {fs.get('fidelity_passed')} of {fs.get('cells')} cells; detector flags "
                         f"{flagged.get('count', 0)} of {flagged.get('n', 0)}{bound}; engine errors "
                         f"{fs.get('engine_errors', 0)}" + (f"; {latency:.2f} s per cell" if latency else ""))
    lines.append(f"results:    {d['run_dir']}")
    lines.append(f"report:     {d.get('report') or Path(d['run_dir']) / 'summary.json'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
