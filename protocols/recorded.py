"""A recorded fans-off CSV (the public dataset layout) as the operating-range measurement, checked first.

Why a check: a recording is read as it was written. The firmware writes -9999 for a reading it has not got
(`firmware_bridge.variables.UNSET`; the live driver turns it into NaN and the calibration refuses NaN), but a CSV
keeps the raw number, so one unset barometer row averaged in moved the four-unit mean from ~945 hPa to
810 ± 130 hPa. And the protocol's premise is fans off (one pressure at every barometer); a row with a fan load
set measures something else. Both are refused before any arithmetic, naming the rows, rather than filtered
silently: which rows to drop is the operator's decision.

Rows are numbered as data rows, 1 = the first row after the header (blank lines are not rows).
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

import numpy as np

from calibration.cross_sensor import BAROMETERS
from firmware_bridge.variables import UNSET
from protocols.barometer_protocols import FANS_OFF, OPERATING_RANGE
from protocols.claims import Claim
from protocols.measurement import Measurement
from protocols.runner import operating_range_from_columns
from simulator.replay import read_recording

MAX_LISTED = 12  # row ranges named in a refusal before "…"


class RecordingRefused(ValueError):
    """A recording that cannot give the measurement asked for; names the rows (or the claim) and why."""


def row_ranges(rows: np.ndarray) -> str:
    """1-based row numbers as ranges: [3, 4, 5, 9] → "3-5, 9" (at most MAX_LISTED ranges, then "…")."""
    ranges = []
    for _, run in groupby(enumerate(int(r) + 1 for r in rows), key=lambda pair: pair[1] - pair[0]):
        numbers = [n for _, n in run]  # consecutive numbers share n - position
        ranges.append(str(numbers[0]) if len(numbers) == 1 else f"{numbers[0]}-{numbers[-1]}")
    shown = ", ".join(ranges[:MAX_LISTED])
    return shown + (", …" if len(ranges) > MAX_LISTED else "")


def _refuse_rows(path: str, mask: np.ndarray, what: str) -> None:
    rows = np.flatnonzero(mask)
    if len(rows):
        raise RecordingRefused(f"{path}: {len(rows)} of {len(mask)} rows {what}: rows {row_ranges(rows)} "
                               "(1 = the first data row); nothing was averaged. Cut those rows, or record again")


def operating_range_from_recording(claim: Claim, path: str | Path) -> Measurement:
    """The four-barometer mean of a fans-off recording, by the operating-range protocol's own function.

    Refused (RecordingRefused) for a claim of another protocol, a recording without rows, any barometer reading
    unset (-9999) or missing, and any row with a fan load that is not 0."""
    if claim.protocol != OPERATING_RANGE.key:
        raise RecordingRefused(f"a recording gives the four-barometer mean (fans off), which measures protocol "
                               f"{OPERATING_RANGE.key!r}; claim {claim.id} uses {claim.protocol!r}")
    rec = read_recording(path)
    if rec.layout.chamber != "wt":
        raise RecordingRefused(f"{rec.path}: expected a wind tunnel recording, got {rec.layout.chamber}/"
                               f"{rec.layout.config}")
    if len(rec.rows) == 0:
        raise RecordingRefused(f"{rec.path}: expected fans-off rows, the file has none")
    readings = np.column_stack([rec.column(b) for b in BAROMETERS])
    _refuse_rows(rec.path, np.any((readings == UNSET) | ~np.isfinite(readings), axis=1),
                 f"have an unset (-9999) or missing reading of {', '.join(BAROMETERS)}")
    fans = [name for name, _off in FANS_OFF]
    loads = np.column_stack([rec.column(f) for f in fans])
    _refuse_rows(rec.path, np.any(loads != 0.0, axis=1),  # NaN or -9999 is not "off" either
                 f"are not fans off ({' or '.join(fans)} not 0)")
    return operating_range_from_columns(claim, {b: rec.column(b) for b in BAROMETERS}, rec.layout.config)
