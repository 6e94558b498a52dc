"""What a protocol is: a declaration of what it stages and reads, and a pure function from the readings to a result.

Why a declaration: the settings a protocol stages were written three times (declared, typed again in the run
function, typed again as the set of staged variables for the matched conditions). Declared once as ordered
steps, the same data tells the runner what to stage (protocols/runner.py), the planner which claims can share a
staging (protocols/planner.py), the chamber tools API what `describe()` shows and what the setting guard must
check before anything moves, and the decision rule which of the claim's conditions were matched.

A step declares every setting its readings depend on; what a step does not declare, it does not depend on (so
the planner may stage it together with another step's settings). The function that turns readings into a
Measurement never touches the chamber, so the same function grades a live run, a planned batch and a recorded CSV.

Protocols that interleave lab-instrument actions with chamber reads (an SMU sweep that reads the chamber at each
supply voltage) declare a `procedure` instead of steps; the runner still runs it, with the same apparatus guard,
setting guard and progress, and gives it reads through the same staging code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Step:
    """One staging of a protocol: apply `settings`, discard `settle_rows` rows, read `rows` rows of `reads`.

    `rows`/`settle_rows` None: the run's sizes (200 and 20 by default). `label` names the step in progress lines,
    in `describe()` and for the evaluating function (`Evaluation.step(label)`).
    """

    label: str
    settings: Settings
    reads: tuple[str, ...]
    rows: int | None = None
    settle_rows: int | None = None

    def settings_dict(self) -> dict[str, float]:
        return {name: float(value) for name, value in self.settings}


@dataclass(frozen=True)
class StepReadings:
    """The rows one step read, as columns (NaN where the firmware reported a value unset)."""

    label: str
    settings: Settings
    columns: Mapping[str, np.ndarray]
    reconnected: bool = False
    settle_rows: int = 0  # rows discarded before these (after the staging's SETs)

    @property
    def n(self) -> int:
        return int(len(next(iter(self.columns.values())))) if self.columns else 0

    def column(self, name: str) -> np.ndarray:
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"step {self.label!r} did not read {name!r}; it read {sorted(self.columns)}") from None

    def first(self, n: int) -> "StepReadings":
        """The first n rows (a planned staging read for several claims hands each the rows it asked for)."""
        return StepReadings(self.label, self.settings, {k: v[:n] for k, v in self.columns.items()}, self.reconnected,
                            self.settle_rows)


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

    def stage(self, kind: str, settings: Mapping[str, float], settle_rows: int, label: str) -> None: ...

    def read(self, kind: str, rows: int) -> StepReadings: ...

    def progress(self, message: str) -> None: ...


@dataclass(frozen=True)
class Declaration:
    """A protocol: the chamber, ordered steps, the instruments it needs, and how readings become a result.

    Exactly one of `evaluate` (pure: Evaluation → ProtocolOutcome) and `procedure` (instrument protocols) runs;
    with neither, nothing is staged and the claim is graded without a measurement. `precheck` decides before
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

    @property
    def staged(self) -> frozenset[str]:
        """Every chamber variable this protocol sets or reads: what its matched conditions are made of."""
        names = {n for s in self.steps for n, _ in s.settings} | {n for s in self.steps for n in s.reads}
        return frozenset(names | {n for n, _ in self.restore})

    def matched(self, claim: Claim) -> tuple[str, ...]:
        """Names of the claim's conditions whose chamber variable this protocol staged or read."""
        return tuple(c.name for c in claim.conditions if c.variable and c.variable in self.staged)

    def all_settings(self) -> list[dict[str, float]]:
        """Every SET list the protocol sends, in order: what a setting guard checks before anything moves."""
        out = [s.settings_dict() for s in self.steps if s.settings]
        if self.restore:
            out.append({n: float(v) for n, v in self.restore})
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "chamber": self.chamber,
            "instruments": list(self.instruments),
            "steps": [{"label": s.label, "settings": [{"variable": n, "value": v} for n, v in s.settings],
                       "reads": list(s.reads), "rows": s.rows, "settle_rows": s.settle_rows} for s in self.steps],
            "stages": [{"variable": n, "value": v} for s in self.steps for n, v in s.settings]
                      + [{"variable": n, "value": v} for n, v in self.restore],
            "reads": list(dict.fromkeys(n for s in self.steps for n in s.reads)),
            "restore": [{"variable": n, "value": v} for n, v in self.restore],
            "decided_before_staging": self.precheck is not None and not self.steps,
            "description": self.description,
        }
