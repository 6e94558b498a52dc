"""Staging and reading the chambers for one run: the setting guard before each SET, rows counted, seconds timed.

Why a module of its own: the planned batch (protocols/runner.py) and a procedure (a protocol whose next SET depends
on what it read) stage and read through the same code, so both get the same guard, the same row totals and the
same rule for the seconds rows cover (`protocols.declaration.covered_seconds`: the rows' host timestamps, never
below rows × the chamber's shortest real row). A settle in rows is one MSR, as before; a settle in seconds is read
in chunks of `CHUNK_ROWS` until the seconds are covered, so a slow board is not kept for the floor's row count and
a backend that stamps a whole read at once cannot cut it short.
"""

from __future__ import annotations

import logging
import time

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Protocol as TypingProtocol, Sequence, TypeVar

import numpy as np

from calibration.records import CalibrationRecord
from chamber.driver import BoardLost
from firmware_bridge.errors import LinkLost
from protocols.claims import Claim
from protocols.declaration import (
    CHUNK_ROWS,
    ROW_PERIOD_FLOOR_S,
    ChamberLike,
    Declaration,
    DeclarationError,
    ProtocolUnavailable,
    Settled,
    StepReadings,
    covered_seconds,
    row_floor,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

CHAMBER_NAMES = {"wt": "wind tunnel", "lt": "light tunnel"}


class ReadingError(RuntimeError):
    """A read that did not return the rows asked for (names the column, what was expected and what arrived)."""


class SettingCheck(TypingProtocol):
    """A server-side setting guard (protocols.api.guard.SettingGuard): every setting as a float, or it raises."""

    def check(self, settings: Mapping[str, Any], *, inputs_only: bool = True) -> dict[str, float]: ...


@dataclass(frozen=True)
class Measuring:
    """What a run starts to measure, as an event: the claims one reading serves (`calibration` for the
    cross-sensor calibration), the chamber, what is staged (the steps' labels, as the progress lines name them; a
    procedure's description as it starts) and the rows it reads (0: a procedure's, decided as it goes). A live
    view names the claim under measurement from it, never from the progress lines' words."""

    claims: tuple[str, ...]
    chamber: str
    staged: str
    rows: int
    planned_left_s: float | None = None  # the planned chamber seconds of this pass still ahead, this reading
    # included, scaled by the pace measured so far (None: not planned, e.g. a procedure)


@dataclass
class ProtocolContext:
    """What a run may use: the connected chambers by kind ("wt"/"lt"), a calibration record, the sizes, progress,
    an opened station of lab instruments (chamber.instruments.Station; None = the chamber alone), the setting
    guards per chamber kind (None: the driver's own checks only), the clock that dates a calibration, `graded`,
    called with each claim as its verdict is ready, and `measuring`, called as each planned staging is read and
    as each procedure starts and stages (a live view shows both)."""

    chambers: Mapping[str, ChamberLike]
    calibration: CalibrationRecord | None = None
    rows: int = 200
    settle_rows: int = 20
    progress: Callable[[str], None] = lambda message: None
    station: Any | None = None
    setting_guards: Mapping[str, SettingCheck] = field(default_factory=dict)
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    timer: Callable[[], float] = time.monotonic  # times the readings against their plan (the ETA's pace)
    graded: Callable[[Claim], None] = lambda claim: None
    measuring: Callable[[Measuring], None] = lambda event: None

    def chamber(self, kind: str) -> ChamberLike:
        if kind not in self.chambers:
            have = ", ".join(sorted(self.chambers)) or "none"
            raise ProtocolUnavailable(
                f"this protocol needs the {CHAMBER_NAMES.get(kind, kind)} ({kind!r}); connected: {have}")
        return self.chambers[kind]


def _stamps(frame: Any, rows: int) -> np.ndarray | None:
    stamps = getattr(frame, "host_timestamps", None)  # a test double may carry none: the floor decides then
    if stamps is None:
        return None
    stamps = np.asarray(stamps, dtype=np.float64)
    if stamps.shape != (rows,):
        raise ReadingError(f"expected {rows} row timestamps, got shape {stamps.shape}")
    return stamps


class Chambers:
    """Stages and reads the chambers for a run: the setting guard before each SET, rows counted, state tracked."""

    def __init__(self, context: ProtocolContext) -> None:
        self.context = context
        self.rows: dict[str, int] = {}
        self.stagings = 0
        self.current: dict[str, int | None] = {}  # chamber kind -> the planned staging it holds now
        self.serving: tuple[str, ...] = ()  # the claim a running procedure measures (its stagings name it)

    def guarded(self, kind: str, settings: Mapping[str, float]) -> dict[str, float]:
        guard = self.context.setting_guards.get(kind)
        return dict(settings) if guard is None else guard.check(settings, inputs_only=False)

    def once_more_if_lost(self, kind: str, what: str, attempt: Callable[[bool], T]) -> T:
        """`attempt(True)`; if the link is lost in it and the driver brings it back at once (reconnect_now, which
        takes the reconnect as ours: the second attempt's fresh SET and settle make its rows its own),
        `attempt(False)` once more. A second loss, a board lost for good (BoardLost) or a chamber that cannot
        reconnect on request raise as they came.

        Why try again: a board that stalls for a few seconds on a starved host (or a glitch on the wire) and comes
        back at once is not evidence against a datasheet; its claims deserve their verdicts, not "link_lost"."""
        try:
            return attempt(True)
        except LinkLost as lost:
            chamber = self.context.chambers.get(kind)
            reconnect_now = getattr(chamber, "reconnect_now", None) if chamber is not None else None
            if isinstance(lost, BoardLost) or not callable(reconnect_now):
                raise
            log.warning("%s: link lost during %s (%s); reconnecting to read it again", kind, what, lost)
            self.context.progress(f"{kind}: link lost during {what}; reading it again after the reconnect")
            reconnect_now()
        return attempt(False)

    def stage(self, kind: str, settings: Mapping[str, float], settle_rows: int, label: str, *,
              settle_s: float = 0.0) -> Settled:
        """SET through the guard, then settle (`settle`)."""
        chamber = self.context.chamber(kind)
        self.context.progress(f"{kind}: {label}: settle " + (f"{settle_s:g} s" if settle_s else f"{settle_rows} rows"))
        if self.serving:
            self.context.measuring(Measuring(self.serving, kind, label, 0))
        if settings:
            chamber.set_many(self.guarded(kind, settings))
        self.current[kind] = None
        self.stagings += 1
        return self.settle(kind, settle_rows, settle_s)

    def settle(self, kind: str, settle_rows: int, settle_s: float = 0.0) -> Settled:
        """Discard `settle_rows` rows in one MSR or, with `settle_s`, chunks until both are met."""
        if settle_s:
            return self._timed(kind, settle_s, (), settle_rows, CHUNK_ROWS)[1]
        if settle_rows <= 0:
            return Settled()
        got = self.read(kind, settle_rows, ())
        return Settled(settle_rows, covered_seconds(got.timestamps, settle_rows, ROW_PERIOD_FLOOR_S.get(kind, 0.0)),
                       covered_seconds(got.timestamps, settle_rows, 0.0), got.reconnected)

    def read(self, kind: str, rows: int, reads: Sequence[str] | None = None, settle_rows: int = 0) -> StepReadings:
        """`settle_rows + rows` rows in one read (one MSR round trip), the first `settle_rows` thrown away."""
        frame = self.context.chamber(kind).measure(settle_rows + rows)
        self.rows[kind] = self.rows.get(kind, 0) + settle_rows + rows
        names = list(reads) if reads is not None else list(frame.names)
        columns = {n: np.asarray(frame.column(n), dtype=np.float64)[settle_rows:] for n in names}
        for n, column in columns.items():
            if column.shape != (rows,):
                raise ReadingError(f"expected {rows} rows of {n}, got shape {column.shape}")
        stamps = _stamps(frame, settle_rows + rows)
        return StepReadings("", (), columns, bool(getattr(frame, "reconnected", False)), settle_rows,
                            None if stamps is None else stamps[settle_rows:], 0.0, ROW_PERIOD_FLOOR_S.get(kind, 0.0))

    def read_for(self, kind: str, seconds: float, reads: Sequence[str], *, at_least_rows: int = 2) -> StepReadings:
        """Rows of `reads` until `seconds` are covered (`covered_seconds`) and `at_least_rows` are in."""
        return self._timed(kind, seconds, reads, at_least_rows, CHUNK_ROWS)[0]

    def _timed(self, kind: str, seconds: float, reads: Sequence[str], at_least_rows: int,
               chunk_rows: int) -> tuple[StepReadings, Settled]:
        """Chunks of `chunk_rows` until `seconds` and `at_least_rows` are met: at most ⌈seconds/floor⌉ +
        at_least_rows + chunk_rows rows, however the backend stamps its rows."""
        floor = row_floor(kind, f"reading {seconds:g} s of {CHAMBER_NAMES.get(kind, kind)} rows")
        parts: list[StepReadings] = []
        while True:
            parts.append(self.read(kind, chunk_rows, reads))
            rows = chunk_rows * len(parts)
            stamps = None if any(p.timestamps is None for p in parts) else np.concatenate([p.timestamps for p in parts])
            covered = covered_seconds(stamps, rows, floor)
            if covered >= seconds and rows >= at_least_rows:
                reconnected = any(p.reconnected for p in parts)
                columns = {n: np.concatenate([p.columns[n] for p in parts]) for n in reads}
                return (StepReadings("", (), columns, reconnected, 0, stamps, 0.0, floor),
                        Settled(rows, covered, covered_seconds(stamps, rows, 0.0), reconnected))


@dataclass
class ProcedureReader:
    """What a procedure gets: the run's chambers, sizes, station and progress; only the SETs it declared."""

    chambers: Chambers
    declaration: Declaration
    rows: int
    settle_rows: int
    station: Any

    def chamber(self, kind: str) -> ChamberLike:
        return self.chambers.context.chamber(kind)

    def stage(self, kind: str, settings: Mapping[str, float], settle_rows: int, label: str, *,
              settle_s: float = 0.0) -> Settled:
        declared = self.declaration.all_settings()
        if settings and {n: float(v) for n, v in settings.items()} not in declared:
            raise DeclarationError(f"protocol {self.declaration.key!r} sent {dict(settings)}, which it did not "
                                   f"declare (the run's pre-check saw only {declared})")
        return self.chambers.stage(kind, settings, settle_rows, label, settle_s=settle_s)

    def read(self, kind: str, rows: int) -> StepReadings:
        return self.chambers.read(kind, rows)

    def read_for(self, kind: str, seconds: float, reads: tuple[str, ...], *, at_least_rows: int = 2) -> StepReadings:
        return self.chambers.read_for(kind, seconds, reads, at_least_rows=at_least_rows)

    def progress(self, message: str) -> None:
        self.chambers.context.progress(message)
