"""The bench part of the main job (one bench of chambers, not the Remote Lab service in protocols/remote_lab/): grade every claim on the chambers, then with the station, sweep, link counters.

Why its own module: this is the chamber work of `run` (protocols floor: the runner, the sweep, the station's
envelope), with everything it touches passed in (the connected chambers, the run folder, the rows, the station
file, a progress sink), so a test can drive it without the command line and the CLI only renders its summary.
The agent's part (agent/agent_job.py) reaches the chambers only through the tools API started here.

Files written into the run folder: calibration.json, checks.json, station_checks.json, sweep.json/.csv/.png and
link.json, each whole or not at all (protocols/files.py). While the chamber-only batch runs, each verdict is
appended to checks.partial.jsonl as it is decided, so that a run killed outright (SIGKILL, a power cut) keeps
them: a resumed run (`run --resume`, with or without the agent) keeps those verdicts and grades only the claims
left (kept_verdicts). Ctrl-C or SIGTERM writes checks.json with the verdicts decided so far (`interrupted`,
`not_graded`) and raises LabInterrupted, whose `summary` says the same for the run's summary.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, TextIO

from protocols.claims import Claim
from protocols.files import json_default, write_file_atomic, write_json_atomic
from protocols.runner import BatchInterrupted, CheckResult, ProtocolContext, run_batch
from protocols.staging import Measuring

log = logging.getLogger(__name__)

SWEEP_CLAIM = "dps310-operating-range"
"""The claim whose live reading the main job's perturbation sweep holds fixed (the seed paper's figure)."""

PARTIAL_CHECKS = "checks.partial.jsonl"
"""The chamber-only verdicts of a run as each is decided (a header line, then one result per line): what a run
killed outright keeps for its resume."""

KEPT_NOTE = "graded before the run was interrupted; kept when it was resumed"


class JobProgress(Protocol):
    """Where a job reports: `start` a stage of `total` steps, `stage` a stage without steps of its own (opening the
    station, writing the report), `advance` one step with a note, `detail` what the current step is doing (a
    staging read, a settle), `measuring` the runner's event as a reading starts (protocols.staging.Measuring: the
    claims it serves, what is staged), `say` a line. The library calls it; the CLI renders it (a progress bar on a
    terminal, plain lines otherwise) and the live view shows the stage and what is measured from these calls."""

    def start(self, label: str, total: int) -> None: ...

    def stage(self, name: str, note: str = "") -> None: ...

    def measuring(self, event: Measuring) -> None: ...

    def advance(self, note: str) -> None: ...

    def detail(self, message: str) -> None: ...

    def say(self, message: str) -> None: ...


class Quiet:
    """A JobProgress that shows nothing (tests, library callers)."""

    def start(self, label: str, total: int) -> None:
        pass

    def stage(self, name: str, note: str = "") -> None:
        pass

    def measuring(self, event: Measuring) -> None:
        pass

    def advance(self, note: str) -> None:
        pass

    def detail(self, message: str) -> None:
        pass

    def say(self, message: str) -> None:
        pass


class TextProgress:
    """A JobProgress drawn on a text stream (the CLI's stderr) with the one progress line of every long command
    (firmware_bridge/progress_line.py): each stage `label i/N (p %) elapsed ETA note`, redrawn in place on a
    terminal and fitted to its width - 1 (never wraps; elapsed moves during a long step), the current `detail` as
    its note; `say` lines printed above it (wrapped at spaces, never cut: they may be the hint that matters), each
    stamped with the job's elapsed time. A stage whose steps are not alike (UNEVEN_STAGES: claims graded in one
    planned batch, whose first need no chamber and last may need minutes of it; the agent's cells, where the few
    whose phase two measures on the chamber take 7 s each and the rest a tenth of that) shows "ETA ?" rather
    than an ETA from its rate so far, which would promise seconds ("agent 42/49 ETA 0:02", then 26 s). Not on a terminal: a line at each stage's start and end, between them at
    most one every `every` seconds (never one per step or per settle), and every `say` line."""

    UNEVEN_STAGES = frozenset({"checks", "station", "agent"})

    def __init__(self, stream: TextIO, *, width: int | None = None, tty: bool | None = None,
                 every: float | None = None, clock: Callable[[], float] | None = None) -> None:
        import time

        from firmware_bridge.progress_line import CALM_EVERY_S, ProgressLine

        self.clock = clock or time.monotonic
        self.line = ProgressLine(stream, width=width, tty=tty, every=CALM_EVERY_S if every is None else every,
                                 clock=self.clock)
        self.began = self.clock()

    def start(self, label: str, total: int) -> None:
        self.line.start(label, total, rate_eta=label not in self.UNEVEN_STAGES)

    def advance(self, note: str) -> None:
        self.line.advance(note)

    def stage(self, name: str, note: str = "") -> None:
        """A stage without steps: the counted stage before it is over (its last line shown, its ticker stopped);
        the job says this stage in a line of its own (`say`)."""
        self.line.finish()

    def measuring(self, event: Measuring) -> None:
        """The runner's staging lines (`detail`) say what is read on the progress line; an event that carries the
        plan's chamber time still ahead (`planned_left_s`: the planner's seconds at the measured row rates) is
        the stage's ETA from then on, counted down."""
        left = event.planned_left_s
        if left is not None and self.line.open:
            self.line.update(eta_s=max(0.0, float(left)))

    def detail(self, message: str) -> None:
        if self.line.open:
            self.line.update(note=message.strip())
        else:
            self.say("  " + message.strip())

    def say(self, message: str) -> None:
        from firmware_bridge.progress_line import clock_text

        self.line.say(f"[{clock_text(self.clock() - self.began)}] {message}", indent="        ")

    def close(self) -> None:
        """End the stage still open (its last line shown)."""
        self.line.finish()


@dataclass
class LabOutcome:
    """What the lab part produced: the chamber-only results, the summary entries, the calibration record."""

    results: list[CheckResult]
    summary: dict[str, Any] = field(default_factory=dict)
    calibration: Any = None


def count(items: Iterable[Any]) -> dict[str, int]:
    """How many of each value (verdicts, outcomes), keyed by its text."""
    return dict(Counter(str(item) for item in items))


def link_notes(progress: JobProgress) -> Callable[[str], None]:
    """Where a chamber's link events go ("wt: board lost, reconnecting (2/8)", the give-up): a line of their own
    (stamped, kept in a log) and the progress line's note, so the line never shows a staging while the job is
    in fact reconnecting."""
    def note(message: str) -> None:
        progress.say(message)
        progress.detail(message)
    return note


def progress_steps(progress: JobProgress) -> Callable[[str], None]:
    """The runner's progress lines: each '[i/N] claim' line is one step of the stage (the note is the claim id);
    the others (each staging set and read, each settle) are its details, so a real-pace board that reads for
    minutes before the first claim is decided never leaves the job silent."""
    def step(message: str) -> None:
        if message.startswith("["):
            progress.advance(message.split("] ", 1)[-1])
        else:
            progress.detail(message)
    return step


def grade_claims(claims: Sequence[Claim], chambers: Mapping[str, Any], *, rows: int, calibration: Any = None,
                 report: Callable[[str], None] = lambda m: None, station: Any = None,
                 link: Callable[[str], None] | None = None,
                 on_result: Callable[[CheckResult], None] = lambda result: None) -> list[CheckResult]:
    """Grade claims as one planned batch (protocols/runner.py); the wind tunnel is calibrated in the same plan
    when one is connected and no record was given. `link`: where the chambers' link events go (default
    `report`); `on_result`: each result as it is decided. An interrupt raises runner.BatchInterrupted with the
    results decided so far."""
    context = ProtocolContext(chambers=chambers, calibration=calibration, rows=rows, progress=report,
                              station=station)
    return run_batch(claims, context, calibrate=True, on_result=on_result, link=link).results


class LabInterrupted(KeyboardInterrupt):
    """The lab part stopped by Ctrl-C or SIGTERM (a KeyboardInterrupt: every exit path treats it as one), after
    checks.json was written with what was decided; `summary` holds the summary entries known by then (verdicts,
    not_graded, error_claims, and the sweep and station when they had run)."""

    def __init__(self, summary: dict[str, Any], signal: str = "") -> None:
        self.summary = summary
        super().__init__(signal or "interrupted")


def _configs(chambers: Mapping[str, Any]) -> dict[str, str]:
    return {kind: str(getattr(c, "config", "")) for kind, c in sorted(chambers.items())}


def kept_verdicts(run_dir: Path, claims: Sequence[Claim], *, rows: int,
                  chambers: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The chamber-only verdicts an earlier attempt of this run decided (checks.partial.jsonl while its batch
    was unfinished, else a checks.json), for the claims in `claims`, when they were graded at the same `rows` on
    chambers of the same configurations; and, when some were found but cannot be kept, why not (else None).
    An `error` verdict is not kept (the apparatus failed: nothing was decided, the claim is graded again), nor is
    a line cut short by a kill."""
    partial, whole = run_dir / PARTIAL_CHECKS, run_dir / "checks.json"
    header: dict[str, Any] = {}
    found: list[dict[str, Any]] = []
    try:
        if partial.exists():
            for line in partial.read_text(encoding="utf-8").splitlines():
                try:
                    item = json.loads(line)
                except ValueError:  # the line a kill cut short
                    continue
                if isinstance(item, dict) and "header" in item:
                    header = item["header"] if isinstance(item["header"], dict) else {}
                elif isinstance(item, dict) and item.get("claim_id"):
                    found.append(item)
        elif whole.exists():
            data = json.loads(whole.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                header = {k: data.get(k) for k in ("rows", "configs")}
                found = [r for r in data.get("results") or [] if isinstance(r, dict) and r.get("claim_id")]
    except (OSError, ValueError) as exc:
        return {}, f"the earlier verdicts could not be read ({type(exc).__name__}: {exc})"
    wanted = {c.id for c in claims}
    found = [r for r in found if r["claim_id"] in wanted and r.get("verdict") != "error"]  # an error decided nothing
    if not found:
        return {}, None
    if header.get("rows") != rows or header.get("configs") != _configs(chambers):
        return {}, (f"{len(found)} earlier verdict(s) not kept: graded at {header.get('rows')} rows on "
                    f"{header.get('configs')}, this attempt grades at {rows} rows on {_configs(chambers)}")
    return {r["claim_id"]: r for r in found}, None


class _PartialChecks:
    """checks.partial.jsonl, appended and flushed as each verdict is decided. Best effort: a write that fails
    (a full disk) is logged once and the file given up; checks.json, written whole at the end, names the path
    if the disk is still full then."""

    def __init__(self, path: Path, header: dict[str, Any], kept: Iterable[dict[str, Any]]) -> None:
        self.path = path
        self._file: Any = None
        text = "".join(json.dumps(line, default=json_default) + "\n" for line in [{"header": header}, *kept])
        try:
            write_file_atomic(path, text, force=True)
            self._file = open(path, "a", encoding="utf-8")
        except OSError as exc:
            self._give_up(exc)

    def add(self, result: dict[str, Any]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(result, default=json_default) + "\n")
            self._file.flush()
        except OSError as exc:
            self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        log.warning("cannot record verdicts as they are decided in %s (%s); they are written at the end",
                    self.path, exc)
        self.close()

    def close(self, remove: bool = False) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
        if remove:
            self.path.unlink(missing_ok=True)


def _save_calibration(record: Any, run_dir: Path) -> Path:
    """calibration.json whole or not at all (a full disk leaves the one before intact and names the path)."""
    return write_file_atomic(run_dir / "calibration.json", record.model_dump_json(by_alias=True, indent=2) + "\n",
                             force=True)


def _kept(result: dict[str, Any]) -> dict[str, Any]:
    details = result.get("details") if isinstance(result.get("details"), dict) else {}
    return {**result, "details": {**details, "kept": KEPT_NOTE}}


def run_lab_job(claims: Sequence[Claim], chambers: Mapping[str, Any], run_dir: Path, *, rows: int,
                station_file: str | Path | None, progress: JobProgress = Quiet(),
                graded: Callable[[Claim], None] = lambda claim: None,
                on_verdicts: Callable[[list[dict[str, Any]]], None] = lambda checks: None,
                on_verdict: Callable[[dict[str, Any]], None] = lambda result: None,
                resume: bool = False,
                on_station_verdicts: Callable[[list[dict[str, Any]]], None] = lambda checks: None) -> LabOutcome:
    """Calibrate and grade `claims` (only these: the caller's selection) on `chambers`, sweep the live
    operating-range reading when its claim is among them, grade again with the station of `station_file` (None:
    chamber alone), and record the link counters; files go into `run_dir`. `on_verdict` receives each chamber-only
    verdict as it is decided, `on_verdicts` all of them once checks.json is written (the run index records them),
    `on_station_verdicts` the station pass's once station_checks.json is written (the caller holds them: no
    reading back of a file this job wrote).
    The summary's `error_claims` lists every claim with an `error` verdict, with or without the station.
    `resume`: keep the verdicts an earlier attempt of this run decided (kept_verdicts) and grade only the others.
    Ctrl-C or SIGTERM: checks.json holds the verdicts decided (`interrupted`, `not_graded`), then LabInterrupted."""
    kept, not_kept = kept_verdicts(run_dir, claims, rows=rows, chambers=chambers) if resume else ({}, None)
    if not_kept:
        progress.say(not_kept)
    todo = [c for c in claims if c.id not in kept]
    calibration = None
    if kept and (run_dir / "calibration.json").exists():
        from calibration.records import RecordFileError, load_record

        try:
            calibration = load_record(run_dir / "calibration.json")
        except RecordFileError as exc:
            progress.say(f"the earlier calibration is not used ({exc}); calibrating again")
    header = {"rows": rows, "configs": _configs(chambers)}
    partial = _PartialChecks(run_dir / PARTIAL_CHECKS, header, kept.values())
    summary: dict[str, Any] = {}
    if kept:
        summary["verdicts_kept"] = len(kept)
        progress.say(f"resuming: {len(kept)} verdict(s) decided before the interruption are kept; grading the "
                     f"{len(todo)} other claim(s)" + (" with the calibration measured then" if calibration else ""))
    progress.say(f"grading {len(todo)} claims on {', '.join(sorted(chambers))}" + (
        " (the wind tunnel's calibration in the same plan)" if calibration is None else ""))
    progress.start("checks", len(todo))

    def decided(result: CheckResult) -> None:
        d = result.to_dict()
        partial.add(d)
        on_verdict(d)

    def in_order(new: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [_kept(kept[c.id]) if c.id in kept else new[c.id] for c in claims if c.id in kept or c.id in new]

    try:
        try:
            batch = run_batch(todo, ProtocolContext(chambers=chambers, rows=rows, progress=progress_steps(progress),
                                                    graded=graded, measuring=progress.measuring,
                                                    calibration=calibration),
                              calibrate=calibration is None, on_result=decided, link=link_notes(progress))
        except BatchInterrupted as stop:
            checks = in_order({r.claim.id: r.to_dict() for r in stop.results})
            if stop.record is not None:
                _save_calibration(stop.record, run_dir)
            write_json_atomic(run_dir / "checks.json", {"results": checks, **header, "interrupted": True,
                                                        "not_graded": stop.not_graded})
            partial.close()  # kept beside checks.json: its lines are what a resume keeps
            on_verdicts(checks)
            summary.update(verdicts=count(r["verdict"] for r in checks), not_graded=len(stop.not_graded),
                           error_claims=sorted(r["claim_id"] for r in checks if r["verdict"] == "error"))
            progress.say(f"interrupted: {len(checks)} verdict(s) kept in {run_dir / 'checks.json'}, "
                         f"{len(stop.not_graded)} claim(s) not graded")
            raise LabInterrupted(summary, str(stop)) from stop
        if batch.record is not None and calibration is None:
            _save_calibration(batch.record, run_dir)
            progress.say(f"calibration: the wind tunnel's barometers cross-calibrated -> "
                         f"{run_dir / 'calibration.json'}")
        elif batch.calibration_error:
            progress.say(f"calibration failed: {batch.calibration_error}")
        checks = in_order({r.claim.id: r.to_dict() for r in batch.results})
        write_json_atomic(run_dir / "checks.json", {"results": checks, **header})
        partial.close(remove=True)  # checks.json says it all now
        on_verdicts(checks)
        errors = {r["claim_id"] for r in checks if r["verdict"] == "error"}
        summary["verdicts"] = count(r["verdict"] for r in checks)
        summary["error_claims"] = sorted(errors)
        summary["sweep"] = sweep_live_reading(batch.results, run_dir, progress, kept=kept, claims=claims)
        record = batch.record if calibration is None else calibration
        if station_file:
            summary["station"] = grade_with_station(claims, chambers, Path(station_file), run_dir, rows=rows,
                                                    calibration=record, earlier=batch.results, progress=progress,
                                                    on_verdicts=on_station_verdicts)
            errors.update(summary["station"]["errors"])
        summary["error_claims"] = sorted(errors)
        summary["link"] = {kind: c.link_stats() for kind, c in chambers.items()}
        write_json_atomic(run_dir / "link.json", summary["link"])
    except LabInterrupted:
        raise
    except KeyboardInterrupt as exc:  # after the chamber-only batch: its verdicts are all in checks.json
        summary["interrupted_during"] = "the sweep or the station pass"
        raise LabInterrupted(summary, str(exc)) from exc
    finally:
        partial.close()
    return LabOutcome(batch.results, summary, record)


def grade_with_station(claims: Sequence[Claim], chambers: Mapping[str, Any], station_file: Path, run_dir: Path, *,
                       rows: int, calibration: Any, earlier: Sequence[CheckResult],
                       progress: JobProgress = Quiet(),
                       on_verdicts: Callable[[list[dict[str, Any]]], None] = lambda checks: None) -> dict[str, Any]:
    """Grade again with the instrument station: which claims become definitive, and the gradable envelope.
    A claim the station does not change keeps its verdict from `earlier` (same protocol, same chambers).
    `on_verdicts` receives the results (as station_checks.json holds them) once that file is written."""
    from chamber.instruments import open_station
    from protocols.instrument_protocols import gradable_envelope

    progress.say(f"station: opening {station_file}, then grading {len(claims)} claims again")
    progress.stage("station", f"opening {station_file}")
    with open_station(station_file) as station:
        progress.start("station", len(claims))
        context = ProtocolContext(chambers=chambers, calibration=calibration, rows=rows, station=station,
                                  progress=progress_steps(progress), measuring=progress.measuring)
        results = run_batch(claims, context, reuse={r.claim.id: r for r in earlier}).results
        envelope = gradable_envelope(claims, station)
    checks = [r.to_dict() for r in results]
    write_json_atomic(run_dir / "station_checks.json",
                      {"station": str(station_file), "results": checks, "envelope": envelope})
    on_verdicts(checks)
    definitive = [r["claim_id"] for r in checks if r["verdict"] in ("pass", "fail")]
    return {"file": str(station_file), "verdicts": count(r["verdict"] for r in checks), "definitive": definitive,
            "errors": [r["claim_id"] for r in checks if r["verdict"] == "error"]}


def _kept_reading(kept: Mapping[str, dict[str, Any]]) -> tuple[Any, Any, str, float] | None:
    """The operating-range reading of a kept verdict (its measurement_detail): value, u, unit, dof; None without
    one."""
    m = (kept.get(SWEEP_CLAIM) or {}).get("measurement_detail") or {}
    if m.get("value") is None or m.get("u") is None:
        return None
    return m["value"], m["u"], str(m.get("unit")), math.inf if m.get("dof") is None else float(m["dof"])


def sweep_live_reading(results: Sequence[CheckResult], run_dir: Path,
                       progress: JobProgress = Quiet(), *, kept: Mapping[str, dict[str, Any]] | None = None,
                       claims: Sequence[Claim] = ()) -> dict[str, Any]:
    """The perturbation sweep on the live operating-range reading (held fixed, the upper bound moved); skipped,
    saying why, when that claim was not graded (not selected) or gave no measurement. `kept`: verdicts of an
    earlier attempt of the run (result dicts), where the reading is when the claim was graded then (the claim
    itself from `claims`)."""
    from protocols.sweep import sweep, write_sweep_files

    live = next((r for r in results if r.claim.id == SWEEP_CLAIM), None)
    earlier = next((c for c in claims if c.id == SWEEP_CLAIM), None) if kept and SWEEP_CLAIM in kept else None
    if live is not None:
        m = live.measurement
        reading = None if m is None or m.value is None else (m.value, m.u, m.unit, m.dof)
        claim = live.claim
    elif earlier is not None and kept is not None:
        reading, claim = _kept_reading(kept), earlier
    else:
        return {"skipped": f"{SWEEP_CLAIM} not among the claims graded"}
    if reading is None:
        return {"skipped": "no live operating-range measurement"}
    progress.say(f"sweep: {SWEEP_CLAIM}, the bound moved through the live reading (41 bounds)")
    progress.start("sweep", 2)
    value, u, unit, dof = reading
    result = sweep(claim, value, u, unit=unit, steps=41, dof=dof)
    d = result.to_dict()
    write_json_atomic(run_dir / "sweep.json", d)
    progress.advance("sweep.json")
    write_sweep_files(result, csv_path=run_dir / "sweep.csv", plot_path=run_dir / "sweep.png")  # both or neither
    progress.advance("sweep.csv, sweep.png")
    # Where the verdict changes: the exact flip points m ± c (closed band: inconclusive at the point itself).
    return {"claim_id": d["claim_id"], "measured": d["measured"], "combined_uncertainty": d["combined_uncertainty"],
            "verdict_changes_at": d["flip_points"], "figure": str(run_dir / "sweep.png")}


def start_chamber_api(stack: contextlib.ExitStack, chambers: Mapping[str, Any], run_dir: Path,
                      claims: Sequence[Claim]) -> str:
    """The chamber tools API on 127.0.0.1 over the connected chambers, for the agent's phase two; its record of
    every request goes to `run_dir/api`. Closed with `stack`. Its one client is this job's agent, so the per-client
    session cap is the service's whole cap."""
    from protocols.api.server import running_api
    from protocols.service_defaults import DEFAULT_MAX_SESSIONS

    return stack.enter_context(running_api(chambers, record_dir=run_dir / "api", claims={c.id: c for c in claims},
                                           max_sessions_per_client=DEFAULT_MAX_SESSIONS))


def open_lab(selection: Any, say: Say, **kinds: Any) -> Any:
    """Open the chambers of `selection` (chamber.selection.OpenChambers: safe state and close on exit), saying
    which chamber connected where."""
    from chamber.selection import open_chambers

    return open_chambers(selection, warn=say, on_connect=lambda kind, c, where: say(
        f"connected {kind} ({c.config}, {c.layout.row_length} variables) on {where}"))


def open_job_chambers(ports: Sequence[str] | None, *, seed: int, limits: str | Path | None,
                      say: Callable[[str], None], lab_credentials: Path | None = None) -> Any:
    """The main job's chambers: the boards at `ports`, else both emulated boards on ptys (seeded); opened
    (chamber.selection.OpenChambers: left safe and closed on exit), each connection said."""
    from chamber.selection import selection_of

    return open_lab(selection_of(None if ports else "emulated", list(ports) if ports else None, seed=seed,
                                 limits=limits, lab_credentials=lab_credentials), say)


def job_station_file(station: str | None, *, no_station: bool, real_ports: bool) -> str | None:
    """The station the main job grades with: none with `no_station`, the given file, else the simulated station
    with emulated boards (none with real chambers)."""
    from chamber.instruments import sim_station_file

    if no_station:
        return None
    return station or (None if real_ports else str(sim_station_file()))


def check_job_files(limits: str | Path | None, station: str | Path | None) -> None:
    """Parse the limits and station files whole (not only read them) before the main job opens anything."""
    from chamber.instruments.station import load_station_file
    from chamber.limits import load_limits

    if limits:
        load_limits(limits)
    if station:
        load_station_file(station)
