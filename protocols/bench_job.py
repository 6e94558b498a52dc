"""The bench part of the main job (one bench of chambers, not the Remote Lab service in protocols/remote_lab/): grade every claim on the chambers, then with the station, sweep, link counters.

Why its own module: this is the chamber work of `run` (protocols floor: the runner, the sweep, the station's
envelope), with everything it touches passed in (the connected chambers, the run folder, the rows, the station
file, a progress sink), so a test can drive it without the command line and the CLI only renders its summary.
The agent's part (agent/agent_job.py) reaches the chambers only through the tools API started here.

Files written into the run folder: calibration.json, checks.json, station_checks.json, sweep.json/.csv/.png and
link.json, each whole or not at all (protocols/files.py).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, TextIO

from protocols.claims import Claim
from protocols.files import write_json_atomic
from protocols.runner import CheckResult, ProtocolContext, run_batch

SWEEP_CLAIM = "dps310-operating-range"
"""The claim whose live reading the main job's perturbation sweep holds fixed (the seed paper's figure)."""


class JobProgress(Protocol):
    """Where a job reports: `start` a stage of `total` steps, `advance` one step with a note, `detail` what the
    current step is doing (a staging read, a settle), `say` a line. The library calls it; the CLI renders it (a
    progress bar on a terminal, plain lines otherwise)."""

    def start(self, label: str, total: int) -> None: ...

    def advance(self, note: str) -> None: ...

    def detail(self, message: str) -> None: ...

    def say(self, message: str) -> None: ...


class Quiet:
    """A JobProgress that shows nothing (tests, library callers)."""

    def start(self, label: str, total: int) -> None:
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
    terminal and cut to its width - 1 (never wraps), the current `detail` as its note; `say` lines printed above
    it (wrapped, never cut: they may be the hint that matters), each stamped with the job's elapsed time.
    Not on a terminal: a line at each stage's start and end, between them at most one every `every` seconds
    (never one per step or per settle), and every `say` line."""

    def __init__(self, stream: TextIO, *, width: int | None = None, tty: bool | None = None,
                 every: float | None = None, clock: Callable[[], float] | None = None) -> None:
        import time

        from firmware_bridge.progress_line import CALM_EVERY_S, ProgressLine

        self.clock = clock or time.monotonic
        self.line = ProgressLine(stream, width=width, tty=tty, every=CALM_EVERY_S if every is None else every,
                                 clock=self.clock)
        self.began = self.clock()

    def start(self, label: str, total: int) -> None:
        self.line.start(label, total)

    def advance(self, note: str) -> None:
        self.line.advance(note)

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
                 report: Callable[[str], None] = lambda m: None, station: Any = None) -> list[CheckResult]:
    """Grade claims as one planned batch (protocols/runner.py); the wind tunnel is calibrated in the same plan
    when one is connected and no record was given."""
    context = ProtocolContext(chambers=chambers, calibration=calibration, rows=rows, progress=report,
                              station=station)
    return run_batch(claims, context, calibrate=True).results


def run_lab_job(claims: Sequence[Claim], chambers: Mapping[str, Any], run_dir: Path, *, rows: int,
                station_file: str | Path | None, progress: JobProgress = Quiet(),
                graded: Callable[[Claim], None] = lambda claim: None,
                on_verdicts: Callable[[list[dict[str, Any]]], None] = lambda checks: None) -> LabOutcome:
    """Calibrate and grade `claims` (only these: the caller's selection) on `chambers`, sweep the live
    operating-range reading when its claim is among them, grade again with the station of `station_file` (None:
    chamber alone), and record the link counters; files go into `run_dir`. `on_verdicts` receives the chamber-only
    verdicts as soon as they are written (the run index records them). The summary's `error_claims` lists every
    claim with an `error` verdict, with or without the station."""
    from calibration.records import save_record

    progress.say(f"grading {len(claims)} claims on {', '.join(sorted(chambers))} (the wind tunnel's calibration "
                 "in the same plan)")
    progress.start("checks", len(claims))
    batch = run_batch(claims, ProtocolContext(chambers=chambers, rows=rows, progress=progress_steps(progress),
                                              graded=graded), calibrate=True)
    if batch.record is not None:
        save_record(batch.record, run_dir / "calibration.json")
        progress.say(f"calibration: the wind tunnel's barometers cross-calibrated -> {run_dir / 'calibration.json'}")
    elif batch.calibration_error:
        progress.say(f"calibration failed: {batch.calibration_error}")
    checks = [r.to_dict() for r in batch.results]
    write_json_atomic(run_dir / "checks.json", {"results": checks})
    on_verdicts(checks)
    errors = {r["claim_id"] for r in checks if r["verdict"] == "error"}
    summary: dict[str, Any] = {"verdicts": count(r["verdict"] for r in checks),
                               "sweep": sweep_live_reading(batch.results, run_dir, progress)}
    if station_file:
        summary["station"] = grade_with_station(claims, chambers, Path(station_file), run_dir, rows=rows,
                                                calibration=batch.record, earlier=batch.results, progress=progress)
        errors.update(summary["station"]["errors"])
    summary["error_claims"] = sorted(errors)
    summary["link"] = {kind: c.link_stats() for kind, c in chambers.items()}
    write_json_atomic(run_dir / "link.json", summary["link"])
    return LabOutcome(batch.results, summary, batch.record)


def grade_with_station(claims: Sequence[Claim], chambers: Mapping[str, Any], station_file: Path, run_dir: Path, *,
                       rows: int, calibration: Any, earlier: Sequence[CheckResult],
                       progress: JobProgress = Quiet()) -> dict[str, Any]:
    """Grade again with the instrument station: which claims become definitive, and the gradable envelope.
    A claim the station does not change keeps its verdict from `earlier` (same protocol, same chambers)."""
    from chamber.instruments import open_station
    from protocols.instrument_protocols import gradable_envelope

    progress.say(f"station: opening {station_file}, then grading {len(claims)} claims again")
    with open_station(station_file) as station:
        progress.start("station", len(claims))
        context = ProtocolContext(chambers=chambers, calibration=calibration, rows=rows, station=station,
                                  progress=progress_steps(progress))
        results = run_batch(claims, context, reuse={r.claim.id: r for r in earlier}).results
        envelope = gradable_envelope(claims, station)
    checks = [r.to_dict() for r in results]
    write_json_atomic(run_dir / "station_checks.json",
                      {"station": str(station_file), "results": checks, "envelope": envelope})
    definitive = [r["claim_id"] for r in checks if r["verdict"] in ("pass", "fail")]
    return {"file": str(station_file), "verdicts": count(r["verdict"] for r in checks), "definitive": definitive,
            "errors": [r["claim_id"] for r in checks if r["verdict"] == "error"]}


def sweep_live_reading(results: Sequence[CheckResult], run_dir: Path,
                       progress: JobProgress = Quiet()) -> dict[str, Any]:
    """The perturbation sweep on the live operating-range reading (held fixed, the upper bound moved); skipped,
    saying why, when that claim was not graded (not selected) or gave no measurement."""
    from protocols.sweep import sweep, write_sweep_files

    live = next((r for r in results if r.claim.id == SWEEP_CLAIM), None)
    if live is None:
        return {"skipped": f"{SWEEP_CLAIM} not among the claims graded"}
    if live.measurement is None or live.measurement.value is None:
        return {"skipped": "no live operating-range measurement"}
    progress.say(f"sweep: {SWEEP_CLAIM}, the bound moved through the live reading (41 bounds)")
    progress.start("sweep", 2)
    m = live.measurement
    result = sweep(live.claim, m.value, m.u, unit=m.unit, steps=41, dof=m.dof)
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
