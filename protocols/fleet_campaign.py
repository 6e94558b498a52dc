"""Grading claims on every chamber of a fleet at once: one planned campaign per chamber, the chambers in parallel.

Why threads, one per chamber: a chamber at real pace is mostly waiting (an MSR of 200 rows is ~29 s of the board's
own time), so campaigns on different boards overlap almost entirely; each chamber keeps its own planned batch
(protocols/runner.py: one staging shared by every claim that stages the same conditions, the calibration in the
same plan), exactly as `check --all` grades one bench.

Which claims a chamber grades: those whose protocol runs on its kind (the claim's selected protocol, its station's
rail or position for an instrument protocol, else the kind the claims on the same part are measured on); a claim
no protocol measures (an engagement-only part) is graded on every chamber, each its own unit of "not measured".

Every exit leaves every chamber safe: each chamber is opened as an OpenChambers of its own (chamber/selection.py:
safe state applied and read back on close), and all are closed from the calling thread, in parallel, with stop
signals deferred meanwhile (chamber.stop.signals_deferred), also when opening one of them failed. Only the main
thread gets signals: the workers poll a chamber.stop.StopRequest between reads (StoppableChamber: an MSR is read
in chunks of STOP_CHUNK_ROWS and the request checked before each chunk and each SET), so Ctrl-C stops each
campaign between two reads with the verdicts decided so far (runner.BatchInterrupted), and a second Ctrl-C raises
at once in the caller, whose exit path still makes every chamber safe.

A simulated station (backend sim) is opened per chamber on its own copy of the simulated bench's files (pyvisa-sim
keeps one device state per bench file: two chambers' SMUs would otherwise share a voltage), seeded per chamber.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from chamber.stop import StopRequest, signals_deferred
from protocols.claims import Claim
from protocols.fleet_file import Fleet, FleetMember
from protocols.registry import protocol_for, selected_protocol
from protocols.runner import BatchInterrupted, CheckResult, run_batch
from protocols.staging import ProtocolContext

log = logging.getLogger(__name__)

STOP_CHUNK_ROWS = 25
"""Longest MSR a fleet campaign sends at once: a stop request waits at most this many rows (~3.6 s real pace)."""
JOIN_POLL_S = 0.2


class StoppableChamber:
    """A chamber whose SETs and MSRs first check a StopRequest (KeyboardInterrupt when it is set, as Ctrl-C would
    in the main thread), MSRs read in chunks of `chunk` rows joined into one frame; everything else is the chamber."""

    def __init__(self, chamber: Any, stop: StopRequest, chunk: int = STOP_CHUNK_ROWS) -> None:
        self._chamber, self._stop, self._chunk = chamber, stop, chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chamber, name)

    def _check(self) -> None:
        if self._stop.requested:
            raise KeyboardInterrupt(self._stop.signal_name or "stop requested")

    def set(self, name: str, value: Any) -> float:
        self._check()
        return self._chamber.set(name, value)

    def set_many(self, settings: Mapping[str, Any]) -> dict[str, float]:
        self._check()
        return self._chamber.set_many(settings)

    def measure(self, n: int) -> Any:
        frames = []
        left = int(n)
        while left > 0:
            self._check()
            frames.append(self._chamber.measure(min(left, self._chunk)))
            left -= len(frames[-1].values)
        if len(frames) == 1:
            return frames[0]
        return replace(frames[0], values=np.vstack([f.values for f in frames]),
                       host_timestamps=np.concatenate([f.host_timestamps for f in frames]),
                       reconnected=any(f.reconnected for f in frames), link=frames[-1].link)


@dataclass
class MemberRun:
    """One chamber of the fleet through the campaign: opened, graded, closed; what it decided and how it ended."""

    member: FleetMember
    index: int
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    opened: Any = None  # chamber.selection.OpenChambers
    kind: str | None = None
    station: Any = None
    url: str | None = None
    results: list[CheckResult] = field(default_factory=list)
    not_graded: list[str] = field(default_factory=list)
    interrupted: bool = False
    error: str | None = None
    seconds: float = 0.0
    rows: dict[str, int] = field(default_factory=dict)
    stagings: int = 0
    safe_state: list[dict[str, Any]] = field(default_factory=list)

    @property
    def chamber(self) -> Any:
        return None if self.opened is None or self.kind is None else self.opened.chambers.get(self.kind)

    def describe(self) -> dict[str, Any]:
        m = self.member
        return {"id": m.id, "board": m.board, "url": self.url, "kind": self.kind, "lab": m.lab,
                "station": None if m.station is None else str(m.station), "offsets": dict(m.offsets) or None,
                "graded": len(self.results), "not_graded": list(self.not_graded), "interrupted": self.interrupted,
                "error": self.error, "seconds": round(self.seconds, 1), "rows": dict(self.rows),
                "stagings": self.stagings, "safe_state": self.safe_state}


# ------------------------------------------------------------------------------------------------- opening
def _start_emulated(stack: contextlib.ExitStack, member: FleetMember, seed: int) -> str:
    """An emulated board for `member` (its unit drawn from its serial, its planted offsets), on a pty."""
    from chamber.emulated import parse_emulated_url, start_emulated_board

    return start_emulated_board(stack, parse_emulated_url(member.board, member.offsets), seed=seed)


def _open_station(run: MemberRun) -> Any:
    """The member's station (None without one); a simulated one on its own copy of the bench, seeded per chamber."""
    path = run.member.station
    if path is None:
        return None
    from chamber.instruments import load_station_file, open_station

    spec = load_station_file(path)
    if spec.backend != "sim":
        return run.stack.enter_context(open_station(path))
    from chamber.instruments.sim import SimBench, load_sim_params
    from chamber.instruments.sim.dynamics import packaged_bench_file

    bench_dir = Path(run.stack.enter_context(tempfile.TemporaryDirectory(prefix=f"fleet-bench-{run.member.id}-")))
    packaged = packaged_bench_file()
    for source in packaged.parent.glob("*.yaml"):
        shutil.copy(source, bench_dir / source.name)
    params = load_sim_params(None if spec.sim_params is None else Path(path).parent / spec.sim_params)
    bench = SimBench(params, seed=spec.seed + 1000 * (run.index + 1), bench_file=bench_dir / packaged.name)
    run.stack.callback(bench.close)
    return run.stack.enter_context(open_station(spec, rm=bench, base_dir=Path(path).parent,
                                                clock=bench.clock.now, sleep=bench.clock.sleep))


def _open_member(run: MemberRun, *, seed: int, limits: str | Path | None, boot_timeout: float,
                 say: Callable[[str], None]) -> None:
    """Open one chamber (and its board and station) into `run`; an error is kept in `run.error`."""
    from chamber.selection import open_chambers, selection_of

    m = run.member
    try:
        run.station = _open_station(run)
        url = _start_emulated(run.stack, m, seed) if m.emulated else m.board
        selection = selection_of("serial", [url], limits=limits, boot_timeout=boot_timeout,
                                 lab_credentials=m.credentials, state_dir=None)
        if m.emulated:  # a pty of this process: no link journal to keep across processes
            selection = selection.model_copy(update={"state_dir": Path(run.stack.enter_context(
                tempfile.TemporaryDirectory(prefix="fleet-links-")))})
        run.opened = open_chambers(selection, warn=lambda line: say(f"{m.id}: {line}"))
        run.url = url
        run.kind = next(iter(run.opened.chambers))  # what the board announced (an emulated one: its URL's kind)
        say(f"{m.id}: connected {run.kind} ({run.chamber.config}) on {url}")
    except Exception as exc:  # this chamber is not graded; the others are (its error is reported)
        run.error = " ".join(f"{type(exc).__name__}: {exc}".split())
        say(f"{m.id}: not opened: {run.error}")


def _parallel(runs: Sequence[MemberRun], work: Callable[[MemberRun], None], name: str,
              stop: StopRequest | None = None) -> None:
    """`work` on every run, each in a thread of its own; the caller waits (a signal still reaches it). Whatever
    ends the wait (a second Ctrl-C), every thread is waited for before this returns or raises (stop signals
    deferred meanwhile; `stop`, when given, is requested first so they end soon): no chamber is opened, read or
    closed behind the caller's back."""
    threads = [threading.Thread(target=work, args=(r,), name=f"fleet-{name}-{r.member.id}", daemon=True) for r in runs]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(JOIN_POLL_S)
    except BaseException:
        if stop is not None:
            stop.request("interrupted")
        with signals_deferred(f"the fleet's chambers are finishing ({name})"):
            for t in threads:
                t.join()
        raise


def close_members(runs: Sequence[MemberRun], say: Callable[[str], None]) -> None:
    """Safe state and close for every chamber, in parallel, stop signals deferred meanwhile; each outcome kept."""
    def close(run: MemberRun) -> None:
        try:
            if run.opened is not None:
                outcomes = run.opened.close(None)
                run.safe_state = [{**o.to_dict(), "fleet_chamber": run.member.id} for o in outcomes]
        except Exception as exc:  # noqa: BLE001 - reported; the other chambers are still closed
            run.error = run.error or f"{type(exc).__name__}: {exc}"
            say(f"{run.member.id}: closing failed: {exc}")
        finally:
            run.stack.close()

    with signals_deferred("every chamber of the fleet is being made safe") as received:
        _parallel(runs, close, "close")
    if received:
        raise KeyboardInterrupt(received[0])


# ------------------------------------------------------------------------------------------------ routing
def _station_kind(declaration: Any, claim: Claim, station: Any) -> str | None:
    kind = declaration.instruments[0]
    try:
        entry = station.rail(claim.component)[0] if kind == "smu" else station.position(kind, claim.component)[0]
    except Exception:  # noqa: BLE001 - the station lacks it: the protocol is then not selected anyway
        return None
    return str(entry.chamber)


def component_kinds(claims: Iterable[Claim]) -> dict[str, str]:
    """The chamber kind each part is measured on, from the chamber protocols of the claims on it (one kind only)."""
    kinds: dict[str, set[str]] = {}
    for claim in claims:
        declaration = protocol_for(claim)
        if declaration is not None and declaration.chamber:
            kinds.setdefault(claim.component, set()).add(declaration.chamber)
    return {part: next(iter(k)) for part, k in kinds.items() if len(k) == 1}


def claim_kind(claim: Claim, station: Any, parts: Mapping[str, str]) -> str | None:
    """The kind of chamber the claim is graded on with `station` (None: no protocol measures it anywhere)."""
    declaration = selected_protocol(claim, station)
    if declaration is not None and declaration.chamber:
        return declaration.chamber
    if declaration is not None and declaration.instruments and station is not None:
        kind = _station_kind(declaration, claim, station)
        if kind is not None:
            return kind
    return parts.get(claim.component)


# ------------------------------------------------------------------------------------------------ grading
@dataclass
class Campaign:
    """Every chamber's run, in fleet order (the ones that could not be opened keep their error)."""

    fleet: Fleet
    runs: list[MemberRun]
    say: Callable[[str], None]
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def safe_state(self) -> list[dict[str, Any]]:
        return [o for r in self.runs for o in r.safe_state]

    def first_of_each_kind(self) -> dict[str, tuple[str, Any]]:
        """(member id, chamber) of the first opened chamber of each kind (the agent's chamber tools API serves
        these)."""
        out: dict[str, tuple[str, Any]] = {}
        for r in self.runs:
            if r.chamber is not None and r.kind not in out:
                out[str(r.kind)] = (r.member.id, r.chamber)
        return out


@contextlib.contextmanager
def fleet_chambers(fleet: Fleet, *, say: Callable[[str], None], seed: int = 0, limits: str | Path | None = None,
                   boot_timeout: float = 6.0) -> Iterator[Campaign]:
    """Every chamber of `fleet` opened in parallel (with its board and station; one that cannot be opened keeps
    its error and the others go on), and on leaving the block, however it is left, every chamber made safe and
    closed (in parallel, stop signals deferred)."""
    began = time.monotonic()
    lock = threading.Lock()

    def said(line: str) -> None:
        with lock:
            say(line)

    runs = [MemberRun(m, i) for i, m in enumerate(fleet.members)]
    campaign = Campaign(fleet, runs, said)
    try:
        _parallel(runs, lambda r: _open_member(r, seed=seed, limits=limits, boot_timeout=boot_timeout, say=said),
                  "open")
        yield campaign
    finally:
        close_members(runs, said)
        campaign.seconds = time.monotonic() - began


def _grade(run: MemberRun, claims: Sequence[Claim], *, rows: int, stop: StopRequest,
           say: Callable[[str], None], wrap: Callable[[str, Any], Any],
           graded: Callable[[str, Claim], None], finished: Callable[[MemberRun], None]) -> None:
    began = time.monotonic()
    if run.chamber is None:
        return
    assert run.kind is not None
    parts = component_kinds(claims)
    mine = [c for c in claims if claim_kind(c, run.station, parts) in (None, run.kind)]
    chamber = StoppableChamber(wrap(run.member.id, run.chamber), stop)
    context = ProtocolContext(chambers={run.kind: chamber}, rows=rows, station=run.station,
                              progress=lambda message: log.debug("%s: %s", run.member.id, message),
                              graded=lambda claim: graded(run.member.id, claim))
    say(f"{run.member.id}: grading {len(mine)} claim(s) on {run.kind}")
    try:
        batch = run_batch(mine, context, calibrate=True,
                          link=lambda message: say(f"{run.member.id}: {message}"))
        run.results, run.rows, run.stagings = batch.results, batch.rows, batch.stagings
    except BatchInterrupted as stopped:
        run.results, run.not_graded, run.interrupted = stopped.results, stopped.not_graded, True
    except Exception as exc:  # noqa: BLE001 - the batch's own guards failed (a setting refused): this chamber's
        run.error = " ".join(f"{type(exc).__name__}: {exc}".split())
        say(f"{run.member.id}: grading failed: {run.error}")
    run.seconds = time.monotonic() - began
    decided = f"{len(run.results)} verdict(s)" + (f", {len(run.not_graded)} not graded (stopped)"
                                                   if run.interrupted else "")
    say(f"{run.member.id}: {decided} in {run.seconds:.1f} s")
    finished(run)


def grade_campaign(campaign: Campaign, claims: Sequence[Claim], *, rows: int, stop: StopRequest,
                   wrap: Callable[[str, Any], Any] = lambda member, chamber: chamber,
                   graded: Callable[[str, Claim], None] = lambda member, claim: None,
                   finished: Callable[[MemberRun], None] = lambda run: None) -> Campaign:
    """Grade `claims` on every opened chamber of `campaign` (one planned campaign per chamber, in parallel).
    `wrap(member_id, chamber)` may wrap each chamber (a live view); `graded(member_id, claim)` hears each claim
    decided, `finished(run)` each chamber's campaign ended (both from its thread). A set `stop` ends each
    campaign between two reads, keeping the verdicts decided (`interrupted`)."""
    if not stop.requested:
        _parallel(campaign.runs, lambda r: _grade(r, claims, rows=rows, stop=stop, say=campaign.say, wrap=wrap,
                                                  graded=graded, finished=finished), "grade", stop)
    campaign.interrupted = stop.requested or any(r.interrupted for r in campaign.runs)
    return campaign
