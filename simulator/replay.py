"""Recorded experiments in the public Causal Chamber CSV layout: read, write, and replay them as a PhysicsModel.

Why: "built from the public chamber data" must be literal. When a user has a recorded dataset (e.g.
wt_bernoulli_v1 `fans_off`), its real readings can flow through the whole stack (firmware emulation, serial
link, driver, verdicts) by serving its rows in place of simulated physics, and `simulator/fit.py` can estimate
the simulator's parameters from it.

The layout is the one the original host program wrote and the public datasets use
(../shared/chamber-data/reference/variables_*.csv): `timestamp, config, counter, flag, intervention`, then the
chamber's variables. A file whose columns match no known layout is refused with the missing and extra columns
named, relative to the closest known layout.
"""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from firmware_bridge.variables import LAYOUTS, Kind, Layout

log = logging.getLogger(__name__)

HOST_COLUMNS = ("timestamp", "config")
"""The host's own columns that open every public CSV row, before the firmware's bookkeeping and variables."""


class RecordingLayoutError(ValueError):
    """A CSV whose columns are not a known chamber layout (names what is missing and extra)."""

    def __init__(self, path: str, closest: Layout, missing: list[str], extra: list[str]) -> None:
        self.path, self.closest, self.missing, self.extra = path, closest, missing, extra
        super().__init__(
            f"{path}: columns match no known layout; closest is {closest.chamber}/{closest.config} "
            f"(expected {', '.join(HOST_COLUMNS + closest.names)}); "
            f"missing: {', '.join(missing) or 'none'}; extra: {', '.join(extra) or 'none'}"
        )


class RecordingValueError(ValueError):
    """A cell that is not a number where the layout needs one."""


class ReplayExhausted(RuntimeError):
    """All rows of a recording were served and the model was not asked to loop."""


@dataclass
class Recording:
    """A loaded experiment: rows in the layout's order (bookkeeping first), with the host's columns beside them."""

    path: str
    layout: Layout
    rows: np.ndarray  # (n, layout.row_length) float64
    timestamps: np.ndarray  # (n,) unix seconds (NaN where absent)
    configs: list[str]

    def column(self, name: str) -> np.ndarray:
        return self.rows[:, self.layout.index(name)]

    def rows_per_second(self) -> float | None:
        """The pace the recording was taken at (median positive timestamp step), if timestamps allow."""
        steps = np.diff(self.timestamps)
        steps = steps[np.isfinite(steps) & (steps > 0)]
        if len(steps) == 0:
            return None
        return float(1.0 / np.median(steps))


def match_layout(columns: list[str], path: str = "<csv>") -> Layout:
    """The known layout whose columns (host columns + names, any order) are exactly `columns`."""
    have = set(columns)
    best: tuple[int, Layout] | None = None
    for layout in LAYOUTS.values():
        want = set(HOST_COLUMNS) | set(layout.names)
        if want == have:
            return layout
        distance = len(want ^ have)
        if best is None or distance < best[0]:
            best = (distance, layout)
    assert best is not None
    closest = best[1]
    want_order = list(HOST_COLUMNS) + list(closest.names)
    missing = [c for c in want_order if c not in have]
    extra = [c for c in columns if c not in set(want_order)]
    raise RecordingLayoutError(path, closest, missing, extra)


def _number(text: str, row: int, column: str, path: str) -> float:
    text = text.strip()
    if text == "" or text.lower() == "nan":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise RecordingValueError(f"{path}: row {row}, column {column!r}: expected a number, got {text!r}") from None


def read_recording(path: str | Path) -> Recording:
    """Load a public-layout CSV. Raises RecordingLayoutError / RecordingValueError; never returns a partial file."""
    path = str(path)
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise RecordingLayoutError(path, LAYOUTS[("wt", "standard")], list(HOST_COLUMNS), []) from None
        duplicates = sorted({h for h in header if header.count(h) > 1})
        if duplicates:
            raise RecordingValueError(f"{path}: duplicate columns {', '.join(duplicates)}")
        layout = match_layout(header, path)
        position = {name: header.index(name) for name in layout.names}
        ts_at, cfg_at = header.index("timestamp"), header.index("config")
        rows: list[list[float]] = []
        stamps: list[float] = []
        configs: list[str] = []
        for line_no, cells in enumerate(reader, start=2):
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                raise RecordingValueError(f"{path}: line {line_no} has {len(cells)} cells, header has {len(header)}")
            rows.append([_number(cells[position[name]], line_no, name, path) for name in layout.names])
            stamps.append(_number(cells[ts_at], line_no, "timestamp", path))
            configs.append(cells[cfg_at].strip())
    data = np.array(rows, dtype=float).reshape(len(rows), layout.row_length)
    odd = sorted(set(configs) - {layout.config})
    if odd:
        log.info("%s: config column says %s; columns match %s/%s", path, odd, layout.chamber, layout.config)
    return Recording(path, layout, data, np.array(stamps, dtype=float), configs)


def write_recording(
    path: str | Path,
    layout: Layout,
    rows: np.ndarray,
    *,
    timestamps: np.ndarray | None = None,
    start_time: float = 1.7e9,
    rows_per_second: float = 7.0,
) -> None:
    """Write rows (layout order, bookkeeping first) as a public-layout CSV. Timestamps default to a steady pace."""
    rows = np.asarray(rows, dtype=float)
    if rows.ndim != 2 or rows.shape[1] != layout.row_length:
        raise ValueError(f"rows must have shape (n, {layout.row_length}) for {layout.chamber}/{layout.config}, got {rows.shape}")
    if timestamps is None:
        timestamps = start_time + np.arange(len(rows)) / rows_per_second
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(list(HOST_COLUMNS) + list(layout.names))
        for stamp, row in zip(timestamps, rows):
            writer.writerow([repr(float(stamp)), layout.config] + [repr(float(x)) for x in row])


class ReplayModel:
    """A PhysicsModel that serves a recording's rows in order, so real readings flow through the whole stack.

    `apply` records the value (so `state()` and later rows' actuator columns are unaffected: the readings come
    from the recording, which cannot respond) and logs once per variable that it has no physical effect.
    `sample` past the end raises ReplayExhausted unless `loop=True`. `reset` starts again at the first row.
    """

    replays_recorded_rows = True
    """The recorded rows are the board's whole output: the firmware fills in only bookkeeping and overrides."""

    def __init__(self, recording: Recording, *, loop: bool = False, rows_per_second: float | None = None) -> None:
        if len(recording.rows) == 0:
            raise ReplayExhausted(f"{recording.path}: the recording has no rows to replay")
        self.recording = recording
        self.layout = recording.layout
        self.loop = loop
        default = 7.0 if self.layout.chamber == "wt" else 12.0
        self.rows_per_second = rows_per_second or recording.rows_per_second() or default
        self._actuator_cols = {v.name: i for i, v in enumerate(self.layout.variables) if v.kind is Kind.ACTUATOR}
        self._warned: set[str] = set()
        self.reset()

    @property
    def position(self) -> int:
        """Index of the next row to be served."""
        return self._next

    def reset(self) -> None:
        self._next = 0
        self._last = self.recording.rows[0]

    def apply(self, name: str, value: float) -> None:
        if name not in self._actuator_cols:
            raise KeyError(f"recording {self.recording.path} has no actuator {name!r}")
        if name not in self._warned:
            self._warned.add(name)
            log.warning("replay of %s: SET %s=%g has no effect on recorded readings", self.recording.path, name, value)

    def state(self) -> dict[str, float]:
        row = self.recording.rows[self._next] if self._next < len(self.recording.rows) else self._last
        return {name: float(row[i]) for name, i in self._actuator_cols.items()}

    def sample(self, n: int) -> np.ndarray:
        if n < 0:
            raise ValueError(f"sample needs n >= 0, got {n}")
        rows = self.recording.rows
        total = len(rows)
        if not self.loop and self._next + n > total:
            raise ReplayExhausted(
                f"{self.recording.path}: asked for {n} rows at row {self._next}, only {total - self._next} left of {total}"
            )
        idx = (self._next + np.arange(n)) % total
        out = rows[idx].copy()
        self._next = (self._next + n) % total if self.loop else self._next + n
        if n:
            self._last = out[-1]
        return out
