"""What a protocol is: a declaration of what it stages and reads, and a pure function from the readings to a result.

Why a declaration: the settings a protocol stages were written three times (declared, typed again in the run
function, typed again as the set of staged variables for the matched conditions). Declared once as ordered
steps, the same data tells the runner what to stage (protocols/runner.py), the planner which claims can share a
staging (protocols/planner.py), the chamber tools API what `describe()` shows and what the setting guard must
check before anything moves, and the decision rule which of the claim's conditions were matched.

A step declares every setting its readings depend on; what a step does not declare, it does not depend on (so
the planner may stage it together with another step's settings). The function that turns readings into a
Measurement never touches the chamber, so the same function grades a live run, a planned batch and a recorded CSV.

Settling in seconds: what a fan does after a duty change is a matter of time, not of rows, and the row rate is the
board's (~7 rows/s on the real wind tunnel, as fast as the host asks on an unpaced emulated board). A step may
settle `settle_s` seconds instead of a row count, timed by the rows' host timestamps. A backend that stamps a whole
read at once (the in-process simulator) shows no time passing, so the time rows cover is never taken below rows ×
the chamber's shortest real row (`ROW_PERIOD_FLOOR_S`; `covered_seconds` is that rule, the only copy of it).

Protocols that interleave lab-instrument actions with chamber reads (an SMU sweep that reads the chamber at each
supply voltage), or whose next SET depends on what was read (wait until a fan is at rest), declare a `procedure`
instead of steps; the runner still runs it, with the same apparatus guard, setting guard, row counts and progress,
and gives it reads through the same staging code. A procedure declares every SET list it may send (`stagings`),
so the run's pre-check sees them before anything moves and `describe()` lists them; the runner refuses a SET it
did not declare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol as TypingProtocol

import numpy as np

from protocols.claims import Claim
from protocols.measurement import Measurement
from protocols.verdict import CapabilityCheck, Verdict

if TYPE_CHECKING:  # the types only; calibration sits below protocols, so this is no cycle either way
    from calibration.cross_sensor import CrossSensorCalibration
    from calibration.records import CalibrationRecord

Settings = tuple[tuple[str, float], ...]


class ChamberLike(TypingProtocol):
    """What the runner uses of chamber.driver.Chamber (protocols sit above chamber/, but take it as a parameter)."""

    config: str

    def set_many(self, values: dict[str, float]) -> Any: ...

    def measure(self, n: int) -> Any: ...


class ProtocolUnavailable(RuntimeError):
    """The protocol needs a chamber (or instrument) that is not connected; the message names which one."""


class DeclarationError(ValueError):
    """A declaration that cannot be run as written (e.g. a step reading nothing); names the protocol and step."""


ROW_PERIOD_FLOOR_S: Mapping[str, float] = {"wt": 0.12}
"""Shortest time one row takes on the real board, per chamber kind: the wind tunnel reads four DPS310s of 24 ms
each plus five 5 ms ADC settles (~121 ms; it runs at ~7 rows/s). A chamber without an entry cannot settle in
seconds (nothing bounds how fast a one-stamp-per-read backend of it may deliver rows)."""
CHUNK_ROWS = 7
"""Rows per read while settling or reading for seconds (about 1 s on the real wind tunnel)."""


def covered_seconds(timestamps: np.ndarray | None, rows: int, floor_s: float) -> float:
    """The seconds `rows` rows cover: the span of their host timestamps, never below rows × `floor_s`."""
    stamped = float(timestamps[-1] - timestamps[0]) if timestamps is not None and len(timestamps) else 0.0
    return max(stamped, rows * floor_s)


def row_floor(kind: str | None, what: str) -> float:
    """The chamber's row floor, or DeclarationError naming the chambers that have one."""
    try:
        return ROW_PERIOD_FLOOR_S[kind or ""]
    except KeyError:
        raise DeclarationError(f"{what}: expected a chamber with a known shortest row "
                               f"({', '.join(sorted(ROW_PERIOD_FLOOR_S))}) to time in seconds, got {kind!r}") from None


@dataclass(frozen=True)
class Step:
    """One staging of a protocol: apply `settings`, discard `settle_rows` rows, read `rows` rows of `reads`.

    `rows`/`settle_rows` None: the run's sizes (200 and 20 by default). `settle_s`: discard rows until this many
    seconds have passed by `covered_seconds` instead (and no settle rows unless `settle_rows` is given: both are
    then met). `label` names the step in progress lines, in `describe()` and for the evaluating function
    (`Evaluation.step(label)`).
    """

    label: str
    settings: Settings
    reads: tuple[str, ...]
    rows: int | None = None
    settle_rows: int | None = None
    settle_s: float | None = None

    def __post_init__(self) -> None:
        if self.settle_s is not None and not (math.isfinite(self.settle_s) and self.settle_s >= 0):
            raise DeclarationError(f"step {self.label!r}: settle_s: expected finite seconds >= 0, got {self.settle_s!r}")

    def settings_dict(self) -> dict[str, float]:
        return {name: float(value) for name, value in self.settings}


@dataclass(frozen=True)
class Settled:
    """What a settle after a staging's SETs discarded: its rows, the seconds they cover (`covered_seconds`), the
    seconds by the timestamps alone, and whether the link was re-established meanwhile."""

    rows: int = 0
    seconds: float = 0.0
    stamped_seconds: float = 0.0
    reconnected: bool = False

    def to_dict(self) -> dict[str, float | int]:
        return {"rows": self.rows, "seconds": round(self.seconds, 3), "stamped_seconds": round(self.stamped_seconds, 3)}


@dataclass(frozen=True)
class StepReadings:
    """The rows one step read, as columns (NaN where the firmware reported a value unset).

    `timestamps`: the host time each row was read (None when the backend gave none); `settled_s`: the seconds the
    settle after the SETs covered; `row_floor_s`: the chamber's shortest row, so `seconds` applies the same rule.
    """

    label: str
    settings: Settings
    columns: Mapping[str, np.ndarray]
    reconnected: bool = False
    settle_rows: int = 0  # rows discarded before these (after the staging's SETs)
    timestamps: np.ndarray | None = None
    settled_s: float = 0.0
    row_floor_s: float = 0.0

    @property
    def n(self) -> int:
        return int(len(next(iter(self.columns.values())))) if self.columns else 0

    @property
    def seconds(self) -> float:
        """The seconds these rows cover (`covered_seconds`)."""
        return covered_seconds(self.timestamps, self.n, self.row_floor_s)

    @property
    def stamped_seconds(self) -> float:
        """The seconds by the timestamps alone (0 for a backend that stamps a whole read at once)."""
        return covered_seconds(self.timestamps, self.n, 0.0)

    def timing(self) -> dict[str, float | int]:
        """Rows, seconds and stamped seconds, for a measurement's details."""
        return {"rows": self.n, "seconds": round(self.seconds, 3), "stamped_seconds": round(self.stamped_seconds, 3)}

    def column(self, name: str) -> np.ndarray:
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"step {self.label!r} did not read {name!r}; it read {sorted(self.columns)}") from None

    def first(self, n: int) -> "StepReadings":
        """The first n rows (a planned staging read for several claims hands each the rows it asked for)."""
        return replace(self, columns={k: v[:n] for k, v in self.columns.items()},
                       timestamps=None if self.timestamps is None else self.timestamps[:n])


@dataclass(frozen=True)
class Evaluation:
    """Everything the pure evaluating function may use: the claim, each step's readings, the calibration."""

    claim: Claim | None
    readings: tuple[StepReadings, ...]
    matched: tuple[str, ...]
    calibration: "CalibrationRecord | None" = None
    config: str = "standard"  # the chamber's configuration, as it announced itself

    def step(self, label: str) -> StepReadings:
        for r in self.readings:
            if r.label == label:
                return r
        raise KeyError(f"no step {label!r}; steps read: {[r.label for r in self.readings]}")

    @property
    def reconnected(self) -> bool:
        return any(r.reconnected for r in self.readings)


@dataclass(frozen=True)
class ProtocolOutcome:
    """A protocol's result: a Measurement for the decision rule, or a verdict it decided without one.

    `evidence`: for a decided verdict, the measured quantity the decision rests on (e.g. the rise of a fan
    current), so the planner can tell whether more rows could change it. `calibration`: the result of the
    calibration protocol (no claim, no verdict).
    """

    measurement: Measurement | None = None
    decided: Verdict | None = None
    details: dict[str, Any] = field(default_factory=dict)
    evidence: Measurement | None = None
    calibration: "CrossSensorCalibration | None" = None


@dataclass(frozen=True)
class Inputs:
    """What a pre-staging decision may use (nothing measured yet): the calibration on hand."""

    calibration: "CalibrationRecord | None" = None


class Reader(TypingProtocol):
    """What a procedure may ask of the runner: stage a chamber, read rows, report progress; and its station."""

    rows: int
    settle_rows: int
    station: Any

    def chamber(self, kind: str) -> ChamberLike: ...

    def stage(self, kind: str, settings: Mapping[str, float], settle_rows: int, label: str, *,
              settle_s: float = 0.0) -> Settled:
        """SET (a declared SET list only), then discard `settle_rows` rows and/or `settle_s` seconds of rows."""
        ...

    def read(self, kind: str, rows: int) -> StepReadings: ...

    def read_for(self, kind: str, seconds: float, reads: tuple[str, ...], *, at_least_rows: int = 2) -> StepReadings:
        """Rows of `reads` until `seconds` have passed by `covered_seconds` and `at_least_rows` are in."""
        ...

    def progress(self, message: str) -> None: ...


@dataclass(frozen=True)
class Declaration:
    """A protocol: the chamber, ordered steps, the instruments it needs, and how readings become a result.

    Exactly one of `evaluate` (pure: Evaluation → ProtocolOutcome) and `procedure` (instrument protocols) runs;
    with neither, nothing is staged and the claim is graded without a measurement. `stagings`: every SET list a
    procedure may send (restore aside), checked with the run's other SETs before anything moves. `precheck` decides before
    staging (a resolution-limited claim is inconclusive without a single row). `restore`: settings applied once
    the protocol's steps are read (a fan left at full load is turned off again). `unit`: of the Measurement,
    for the failed one an apparatus error leaves. `stop_rule`: for a value the generic stopping rule cannot
    judge (an extremum over the rows only grows with more of them), whether more rows could change it, and why.
    """

    key: str
    chamber: str | None
    description: str
    unit: str
    steps: tuple[Step, ...] = ()
    evaluate: Callable[[Evaluation], ProtocolOutcome] | None = None
    precheck: Callable[[Claim, Inputs], CapabilityCheck | None] | None = None
    procedure: Callable[[Reader, Claim], ProtocolOutcome] | None = None
    restore: Settings = ()
    stop_rule: Callable[[ProtocolOutcome], tuple[bool, str]] | None = None
    instruments: tuple[str, ...] = ()  # lab instruments it needs (chamber.instruments kinds); () = chamber only
    stagings: tuple[Settings, ...] = ()

    def __post_init__(self) -> None:
        if self.evaluate is not None and self.procedure is not None:
            raise DeclarationError(f"protocol {self.key!r}: declare evaluate or procedure, not both")
        if self.steps and self.evaluate is None:
            raise DeclarationError(f"protocol {self.key!r}: steps need an evaluate function")
        if self.steps and self.chamber is None:
            raise DeclarationError(f"protocol {self.key!r}: steps need a chamber")
        labels = [s.label for s in self.steps]
        if len(set(labels)) != len(labels):
            raise DeclarationError(f"protocol {self.key!r}: step labels repeat: {labels}")
        for s in self.steps:
            if not s.reads:
                raise DeclarationError(f"protocol {self.key!r}, step {s.label!r}: reads nothing")
            if s.settle_s:
                row_floor(self.chamber, f"protocol {self.key!r}, step {s.label!r}")
        if self.stagings and (self.procedure is None or self.chamber is None):
            raise DeclarationError(f"protocol {self.key!r}: stagings are a procedure's, on a chamber; steps declare "
                                   "their own settings")

    @property
    def staged(self) -> frozenset[str]:
        """Every chamber variable this protocol sets or reads: what its matched conditions are made of."""
        names = {n for s in self.steps for n, _ in s.settings} | {n for s in self.steps for n in s.reads}
        return frozenset(names | {n for n, _ in self.restore} | {n for s in self.stagings for n, _ in s})

    def matched(self, claim: Claim) -> tuple[str, ...]:
        """Names of the claim's conditions whose chamber variable this protocol staged or read."""
        return tuple(c.name for c in claim.conditions if c.variable and c.variable in self.staged)

    def all_settings(self) -> list[dict[str, float]]:
        """Every SET list the protocol sends, in order: what a setting guard checks before anything moves."""
        out = [s.settings_dict() for s in self.steps if s.settings]
        out += [{n: float(v) for n, v in s} for s in self.stagings if s]
        if self.restore:
            out.append({n: float(v) for n, v in self.restore})
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "chamber": self.chamber,
            "instruments": list(self.instruments),
            "steps": [{"label": s.label, "settings": [{"variable": n, "value": v} for n, v in s.settings],
                       "reads": list(s.reads), "rows": s.rows, "settle_rows": s.settle_rows, "settle_s": s.settle_s}
                      for s in self.steps],
            "stagings": [[{"variable": n, "value": v} for n, v in s] for s in self.stagings],
            "stages": [{"variable": n, "value": v} for s in self.steps for n, v in s.settings]
                      + [{"variable": n, "value": v} for s in self.stagings for n, v in s]
                      + [{"variable": n, "value": v} for n, v in self.restore],
            "reads": list(dict.fromkeys(n for s in self.steps for n in s.reads)),
            "restore": [{"variable": n, "value": v} for n, v in self.restore],
            "decided_before_staging": self.precheck is not None and not self.steps,
            "description": self.description,
        }
