"""The grading commands on their own: calibrate, check, sweep and `station check`, each a function of plain values.

Why here and not in the CLI: opening the chambers of a selection, calibrating, grading a batch, sweeping a bound
and checking a station are protocols-floor work (the runner, the sweep, the station's envelope). Each job takes
the chamber selection (chamber/selection.py), the files and a `say` sink for progress lines, and returns a dict
of JSON-ready values; the `*_text` functions beside them are the text renderings the CLI prints without --json.
A job that opened chambers says how it left them (`safe_state`, one outcome per chamber), and `check` counts its
`error` verdicts (`incomplete`), so the CLI's exit code (protocols/exit_codes.py) tells the truth.

What was decided is kept (issue 31): a `check` stopped by Ctrl-C or SIGTERM returns the verdicts graded before
it (`interrupted`, `not_graded`; exit code 130, or 3 when a chamber's safe state was not confirmed), and a board
lost mid-batch ends its remaining claims as `error` at once (the driver's reconnect window) beside the verdicts
already decided. Nothing is overwritten or destroyed: a file the user names (`calibrate -o`, `sweep --csv/--plot`)
is refused if it exists (unless `force`) or cannot be written, before any chamber is opened, and is written
through a temporary file renamed into place (protocols/files.py), so a full disk leaves an old record whole.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from firmware_bridge.progress_line import TERMINAL, fit_line, fit_text, line_limit, table_lines, wrap_parts
from protocols.claims import Claim, get_claim
from protocols.exit_codes import outcomes_of
from protocols.bench_job import open_lab
from protocols.files import check_output_path, check_output_paths, write_file_atomic

Say = Callable[[str], None]


class JobRefused(ValueError):
    """A grading job that cannot run with what it was given (no wind tunnel to calibrate, no measurement to
    sweep); the message names what was expected and what arrived."""


def lab_selection(backend: str | None, port: list[str] | None, seed: int, limits: str | Path | None,
                  params: str | Path | None = None, chamber: str = "both",
                  lab_credentials: str | Path | None = None) -> Any:
    """The chambers of a grading command or the service: the boards at the `port` URLs (the kind each announces;
    a lab+http:// URL is a Remote Lab chamber, with the credentials file `lab_credentials`), else the in-process
    simulator of `chamber` (wt, lt or both)."""
    from chamber.selection import selection_of

    kinds = ("wt", "lt") if chamber == "both" else (chamber,)
    return selection_of(backend, port, seed=seed, params=params, limits=limits, kinds=kinds,
                        lab_credentials=lab_credentials)


def open_station_file(station_file: str | Path | None, say: Say) -> Any:
    """The opened instrument station of `station_file` (None without one); StationError names the file."""
    if not station_file:
        return None
    from chamber.instruments import open_station

    say(f"opening station {station_file}")
    return open_station(Path(station_file))


# --------------------------------------------------------------------------------------------- calibrate
def calibrate_job(selection: Any, *, n: int, osr: int, output: str | Path | None, say: Say,
                  force: bool = False) -> dict[str, Any]:
    """Cross-sensor calibration of the wind tunnel's four barometers; the record (written to `output` if given:
    refused before the chamber is opened if a file is there and not `force`, or if its folder cannot be written;
    written whole or not at all)."""
    from calibration.records import record_from_calibration
    from protocols.runner import calibrate

    if output:
        check_output_path(output, force=force, option="-o")  # before the chamber is opened (and so reset)
    with open_lab(selection, say) as opened:
        if "wt" not in opened.chambers:
            raise JobRefused("calibration needs the wind tunnel; connected: " + ", ".join(opened.chambers))
        cal = calibrate(opened.chambers["wt"], n=n, osr=osr, progress=say)
    record = record_from_calibration(cal, date=datetime.now(timezone.utc))
    if output:
        write_file_atomic(Path(output), record.model_dump_json(by_alias=True, indent=2) + "\n", force=force)
    return {"record": record.model_dump(mode="json", by_alias=True), "path": output, "safe_state": outcomes_of(opened)}


def calibration_text(d: Mapping[str, Any], width: Any = TERMINAL) -> str:
    """The calibration's mean, spread and offsets (each line fitted to a terminal's width: fit_text)."""
    p = d["record"]["parameters"]
    return fit_text("\n".join(
        [f"cross-sensor mean {p['mean']:.2f} Pa (u {p['mean_u']:.2f} Pa), spread {p['spread']:.2f} Pa"]
        + [f"  {k:<18} offset {v:+7.2f} Pa  (u {p['offset_u'][k]:.2f})" for k, v in p["offsets"].items()]
        + ([f"record written to {d['path']}"] if d["path"] else [])), width)


# --------------------------------------------------------------------------------------------- check
def check_job(claims: Sequence[Claim], selection: Any, *, rows: int, calibration: str | Path | None,
              station: str | Path | None, say: Say,
              progress: Any = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str] | None]:
    """Grade `claims` on the chambers of `selection` with the calibration record of the file `calibration` (None:
    calibrate in the same plan) and the instrument station of the file `station` (None: the chamber alone): one
    result dict per claim graded, the chambers' safe-state outcomes, and None, or, when Ctrl-C or SIGTERM
    stopped the batch, the ids of the claims not graded (the results are then those decided before it). A bad
    station file or instrument fails before any staging. `progress` (a protocols.bench_job.JobProgress): the
    claims as one stage, i/N with the staging reads as its notes; without one every progress line goes to `say`."""
    from protocols.bench_job import grade_claims, link_notes, progress_steps
    from protocols.runner import BatchInterrupted

    record = None
    if calibration:
        from calibration.records import load_record

        record = load_record(Path(calibration))
    instruments = open_station_file(station, say)
    not_graded: list[str] | None = None
    try:
        with open_lab(selection, say) as opened:
            if progress is not None:
                progress.start("checks", len(claims))
            try:
                results = grade_claims(claims, opened.chambers, rows=rows, calibration=record, station=instruments,
                                       report=say if progress is None else progress_steps(progress),
                                       link=say if progress is None else link_notes(progress))
            except BatchInterrupted as stop:  # the chambers are made safe leaving the block; the verdicts stay
                results, not_graded = stop.results, stop.not_graded
                if progress is not None:  # its line ends before the lines that follow
                    progress.stage("interrupted")
                say(f"interrupted: {len(results)} claim(s) graded, {len(not_graded)} not graded; leaving the "
                    "chambers in their safe state")
    finally:
        if instruments is not None:
            instruments.close()
    return [r.to_dict() for r in results], outcomes_of(opened), not_graded


def pool_text(sources: Sequence[str | Path] | None, n: int) -> str:
    """Which claim pool a `check --all` grades, in words: the claim files given, else the one `run` grades."""
    from protocols.claim_sources import MAIN_JOB_POOL

    where = ", ".join(str(p) for p in sources) if sources else MAIN_JOB_POOL
    return f"{n} claims from {where}"


def check_command(claims: Mapping[str, Claim], claim_id: str | None, all: bool, selection: Any, *, rows: int,
                  calibration: str | Path | None, station: str | Path | None, say: Say,
                  pool: Sequence[str | Path] | None = None, progress: Any = None, fleet: str | None = None,
                  port: Sequence[str] | None = None, seed: int = 0, limits: str | Path | None = None) -> dict[str, Any]:
    """`check`: one claim of `claims` (its result dict) or, with `all`, every one ({"results": [...]}, and `pool`:
    which claims those are, the files of `pool` or else the pool `run` grades); beside them the chambers'
    `safe_state` and, when a verdict is `error`, `incomplete: {"error_verdicts": n}`. `progress`: as check_job.
    With `fleet` (a fleet file or demo:N): on every chamber of the fleet (protocols/fleet_job.py), which brings
    its own boards, stations and calibrations, so --port, --station and --calibration are refused beside it."""
    if fleet:
        from protocols.fleet_job import check_fleet

        given = [name for name, value in (("--port", port), ("--station", station), ("--calibration", calibration))
                 if value]
        if given:
            raise JobRefused(f"--fleet brings its chambers' boards, stations and calibrations; got {', '.join(given)} "
                             "beside it (put a station in the fleet file, per chamber)")
        chosen = list(claims.values()) if all else [get_claim(claim_id or "", claims)]
        if all:
            say(f"grading {pool_text(pool, len(claims))}")
        return check_fleet(chosen, fleet, rows=rows, say=say, limits=limits, seed=seed, one=not all)
    if all:
        say(f"grading {pool_text(pool, len(claims))}")
    results, safe, not_graded = check_job(list(claims.values()) if all else [get_claim(claim_id or "", claims)],
                                          selection, rows=rows, calibration=calibration, station=station, say=say,
                                          progress=progress)
    errors = sum(r["verdict"] == "error" for r in results)
    stopped = {"interrupted": True, "not_graded": not_graded} if not_graded is not None else {}
    if all or not results:  # one claim stopped before its verdict: the same shape as --all, with no result
        body: dict[str, Any] = {"results": results, **({"pool": pool_text(pool, len(claims))} if all else {})}
    else:
        body = results[0]
    return {**body, **stopped, "safe_state": safe, **({"incomplete": {"error_verdicts": errors}} if errors else {})}


def check_text(d: Mapping[str, Any], width: Any = TERMINAL) -> str:
    """The table of a `check --all`, or one claim's row and the reason for its verdict (a fleet's: fleet_text);
    on a terminal every line fits its width (`width`: columns, None: whole lines, TERMINAL: stdout's)."""
    from protocols.exit_codes import unconfirmed_note

    if "units" in d or "chambers" in d and "source" in d:
        from protocols.fleet_job import fleet_text

        return fleet_text(d, width)
    text = (check_table_text(d["results"], width) + (f"\npool: {d['pool']}" if d.get("pool") else "")
            if "results" in d else check_table_text([d], width) + "\n\n" + d["reason"])
    stopped = (f"interrupted: {len(d['results']) if 'results' in d else 1} claim(s) graded before the stop, "
               f"{len(d['not_graded'])} not graded" if d.get("interrupted") else None)
    return fit_text("\n".join([text, *filter(None, [stopped, unconfirmed_note(d.get("safe_state"))])]), width)


def check_table_text(results: Sequence[Mapping[str, Any]], width: Any = TERMINAL) -> str:
    """The verdict table: claim, verdict, value ± u, k, matched/unmatched conditions, class; then the counts.
    Piped, or on a terminal wide enough, one aligned line per claim; on a narrower terminal the claim and verdict
    columns stay and the rest follows them as parts (value ± u, k, cond m/u, class), continued under the value
    column (firmware_bridge.progress_line.wrap_parts: never inside a part)."""
    header = f"{'claim':<36} {'verdict':<13} {'value ± u':<28} {'k':>5} {'cond m/u':>8}  class"
    rows = []
    for r in results:
        m = r["measured"]
        value = "—" if not m or m["value"] is None else f"{m['value']} ± {m['u']} {m['unit']}"
        k = "" if not m or m["k"] is None else f"{m['k']:.2f}"
        cond = f"{len(r['matched_conditions'])}/{len(r['unmatched_conditions'])}"
        rows.append((r, value, k, cond))
    lines = [f"{r['claim_id']:<36} {r['verdict']:<13} {value:<28} {k:>5} {cond:>8}  {r['class'] or ''}".rstrip()
             for r, value, k, cond in rows]
    limit = line_limit(width)
    if limit is not None and max(len(x) for x in [header, *lines]) > limit:  # narrow: claim, verdict, then parts
        header = f"{'claim':<36} {'verdict':<12} value ± u, k, cond m/u, class"
        lines = [x for r, value, k, cond in rows for x in wrap_parts(
            [p for p in (value if value != "—" else "", k and f"k {k}", f"cond {cond}", r["class"] or "") if p],
            width, head=f"{r['claim_id']:<36} {r['verdict']:<12} ", indent=" " * 50)]
    counts = sorted(Counter(r["verdict"] for r in results).items())
    return "\n".join([*fit_line(header, width), "-" * min(len(header), limit or len(header)), *lines, "",
                      *wrap_parts([f"{k}: {v}" for k, v in counts], width, sep="  ")])


# --------------------------------------------------------------------------------------------- sweep
def sweep_job(claim_id: str, selection: Any, *, measured: str | None, u: str | None, recording: str | Path | None,
              steps: int, csv: str | None, plot: str | None, say: Say, force: bool = False, fleet: str | None = None,
              port: Sequence[str] | None = None, seed: int = 0, limits: str | Path | None = None) -> dict[str, Any]:
    """Hold one measurement fixed (given, from a recorded CSV, or measured live) and move the claim's bound
    through it; the CSV and the figure are written both or neither. A file already at `csv` or `plot` is
    refused unless `force`, as is one that cannot be written, before any chamber is opened. With `fleet`: the
    claim's units measured on every chamber of the fleet and the fleet verdict at each bound
    (protocols.fleet_job.sweep_fleet; rows to --csv, no figure)."""
    from protocols.sweep import sweep, write_sweep_files

    claim = get_claim(claim_id)
    check_output_paths({"--csv": csv, "--plot": plot}, force=force)  # before any chamber
    if fleet:
        from protocols.fleet_job import sweep_fleet

        given = [name for name, value in (("--measured", measured), ("--u", u), ("--recording", recording),
                                          ("--plot", plot), ("--port", port)) if value]
        if given:
            raise JobRefused(f"--fleet measures the units live on the fleet's chambers and writes its rows to --csv; "
                             f"got {', '.join(given)} beside it")
        return sweep_fleet(claim, fleet, steps=steps, rows=200, say=say, csv=csv, limits=limits, seed=seed)
    if (measured is None) != (u is None):
        raise JobRefused(f"a given measurement needs both its value and its u; got value {measured}, u {u}")
    safe: list[dict[str, Any]] = []  # no chamber opened for a given or recorded measurement
    if measured is not None and u is not None:
        value, unc, unit, dof = measured, u, claim.unit, float("inf")
    else:
        m, safe = sweep_measurement(claim, selection, recording, say)
        value, unc, unit, dof = m.value, m.u, m.unit, m.dof
    result = sweep(claim, value, unc, unit=unit, steps=steps, dof=dof)
    write_sweep_files(result, csv_path=Path(csv) if csv else None, plot_path=Path(plot) if plot else None)
    return {**result.to_dict(), "files": {"csv": csv, "plot": plot}, "safe_state": safe}


def sweep_measurement(claim: Claim, selection: Any, recording: str | Path | None,
                      say: Say) -> tuple[Any, list[dict[str, Any]]]:
    """The fixed measurement of a sweep: from a recorded CSV (refused naming the rows: unset readings, fans on),
    or measured live with the claim's protocol; and the safe-state outcomes of the chambers opened for it."""
    from protocols.bench_job import grade_claims

    if recording:
        from protocols.recorded import operating_range_from_recording

        return operating_range_from_recording(claim, Path(recording)), []
    with open_lab(selection, say) as opened:
        (result,) = grade_claims([claim], opened.chambers, rows=200, report=say)
    if result.measurement is None or result.measurement.value is None:
        raise JobRefused(f"{claim.id}: the protocol gave no measurement to sweep ({result.verdict.reason})")
    return result.measurement, outcomes_of(opened)


def sweep_text(d: Mapping[str, Any], width: Any = TERMINAL) -> str:
    """The sweep's table: each bound tried, its distance and verdict (a fleet's: the fleet verdict and interval);
    fitted to a terminal's width like every summary."""
    if "units" in d:
        from protocols.fleet_job import fleet_text

        widths = (24, 14, 24, 0)
        rows = [(f"{'bound':>24}", "fleet verdict", "class", "interval")] + [
            (f"{r['bound']:>24}", r["verdict"] or "-", r["class"] or "", f"[{r['lower']}, {r['upper']}]")
            for r in d["rows"]]
        return "\n".join([fleet_text(d, width), *table_lines(rows, widths, width)])
    m = d["measured"]
    return "\n".join([*wrap_parts([f"measured {m['value']} ± {m['u']} {m['unit']}",
                                   f"c = {d['combined_uncertainty']}"], width, head=f"{d['claim_id']}: "),
                      *table_lines([(f"{'bound':>24}", f"{'distance':>22}", "verdict")]
                                   + [(f"{r['bound']:>24}", f"{r['distance']:>22}", r["verdict"]) for r in d["rows"]],
                                   (24, 23, 0), width)])


# --------------------------------------------------------------------------------------------- station check
def station_check_job(station_file: str | Path, *, claims: bool) -> dict[str, Any]:
    """Each instrument's *IDN? and certificate against the station file; with `claims`, also which packaged
    claims the station makes gradable (the envelope)."""
    from chamber.instruments import check_station, open_station

    report = check_station(Path(station_file))
    if claims and report["ok"]:
        from protocols.claims import load_claims
        from protocols.instrument_protocols import gradable_envelope

        with open_station(Path(station_file)) as station:
            report["envelope"] = gradable_envelope(load_claims(), station)
    return report


def station_text(d: Mapping[str, Any], width: Any = TERMINAL) -> str:
    """Each instrument's check, the rails and positions, and the envelope (fitted to a terminal's width)."""
    lines = [f"station {d['station']} ({d['backend']}): {'OK' if d['ok'] else 'NOT OK'}"]
    for r in d["instruments"]:
        status = "ok " if r["ok"] else "BAD"
        lines += table_lines([(f"  {status}", r["name"], r["kind"], r["resource"], r["idn"] or "no *IDN? reply")],
                             (5, 16, 22, 18, 0), width, indent="      ")
        if not r["ok"]:
            lines.append(f"      {r['error']}")
    for r in d["rails"]:
        lines.append(f"  rail {r['name']}: {r['instrument']} -> {r['component']} ({r['chamber']}: "
                     f"{', '.join(r['reads'])})")
    for r in d["positions"]:
        lines.append(f"  position {r['name']}: {r['instrument']} -> {r['component']} ({r['chamber']})")
    for e in d.get("envelope", []):
        mark = "gradable" if e["gradable_with_station"] else "not gradable"
        lines.append(f"  {e['claim_id']:<36} {mark:<13} {e['note']}")
    return fit_text("\n".join(lines), width)
