"""Data rows: little-endian float32 arrays in VARIABLES_LIST order, checked and decoded many at a time.

Why vectorised: a wind-tunnel row is 140 bytes; decoding row by row in Python would make the host, not the
500 kbaud link, the bottleneck. Every row is checked (length, counter continuity across MSRs) before any number
leaves this module, and a failed check rejects the whole block: no partial frame is ever returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from firmware_bridge.errors import FrameRejected
from firmware_bridge.variables import COUNTER_PERIOD, UNSET

ROW_DTYPE = np.dtype("<f4")


@dataclass(frozen=True)
class RowBlock:
    """Checked rows: float64 values (−9999 mapped to NaN) and the host time each row was read."""

    values: np.ndarray
    host_timestamps: np.ndarray

    def __len__(self) -> int:
        return int(self.values.shape[0])


def encode_rows(values: np.ndarray) -> list[bytes]:
    """Rows as the firmware sends them (one payload per row); the emulator's side of `RowChecker.decode`."""
    raw = np.ascontiguousarray(values, dtype=ROW_DTYPE)
    width = raw.shape[1] * ROW_DTYPE.itemsize
    flat = raw.tobytes()
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def unset_to_nan(values: np.ndarray) -> np.ndarray:
    out = np.array(values, dtype=np.float64, copy=True)
    out[out == UNSET] = np.nan
    return out


class RowChecker:
    """Decodes and checks rows of one board session; remembers the last counter to check the next MSR."""

    def __init__(self, width: int, first_counter: int | None = 0):
        self.width = width
        self.row_bytes = width * ROW_DTYPE.itemsize
        self._expected_next = first_counter  # None: accept whatever the first row says

    def decode(self, payloads: list[bytes], timestamps: np.ndarray | list[float]) -> RowBlock:
        """Check and decode a whole measurement; raises FrameRejected naming expected and received."""
        n = len(payloads)
        if n == 0:
            return RowBlock(np.empty((0, self.width)), np.empty(0))
        lengths = set(map(len, payloads))
        if lengths != {self.row_bytes}:
            bad_index, bad = next((i, len(p)) for i, p in enumerate(payloads) if len(p) != self.row_bytes)
            raise FrameRejected(
                f"row {bad_index} length",
                f"{self.row_bytes} bytes ({self.width} float32)",
                f"{bad} bytes",
            )
        raw = np.frombuffer(b"".join(payloads), dtype=ROW_DTYPE).reshape(n, self.width)
        return self.check_array(raw, timestamps)

    def decode_runs(self, runs: Sequence[tuple[bytes, float, int]]) -> RowBlock:
        """Like `decode`, for rows as the link delivers them: (bytes of `count` rows back to back, host time, count).

        Same checks and the same errors as `decode`, without a Python object per row."""
        n = 0
        for data, _, count in runs:
            if len(data) != count * self.row_bytes:
                raise FrameRejected(
                    f"row {n} length",
                    f"{self.row_bytes} bytes ({self.width} float32)",
                    f"{len(data) // count} bytes",
                )
            n += count
        if n == 0:
            return RowBlock(np.empty((0, self.width)), np.empty(0))
        raw = np.frombuffer(b"".join(data for data, _, _ in runs), dtype=ROW_DTYPE).reshape(n, self.width)
        stamps = np.repeat(np.array([stamp for _, stamp, _ in runs], dtype=np.float64), [c for _, _, c in runs])
        return self.check_array(raw, stamps)

    def check_array(self, raw: np.ndarray, timestamps: np.ndarray | list[float]) -> RowBlock:
        """Checks for rows that are already an (n, width) array (the in-process backend's path)."""
        n = raw.shape[0]
        if raw.ndim != 2 or raw.shape[1] != self.width:
            raise FrameRejected("row width", f"{self.width} values", f"{raw.shape[-1] if raw.ndim else 0} values")
        stamps = np.asarray(timestamps, dtype=np.float64)
        if stamps.shape != (n,):
            raise FrameRejected("host timestamps", f"{n}", f"{stamps.shape}")
        counters = raw[:, 0].astype(np.float64)
        start = self._expected_next if self._expected_next is not None else int(counters[0]) % COUNTER_PERIOD
        expected = (start + np.arange(n)) % COUNTER_PERIOD
        mismatch = np.flatnonzero(counters != expected)
        if mismatch.size:
            i = int(mismatch[0])
            raise FrameRejected(f"counter continuity at row {i}", f"counter {int(expected[i])}", f"counter {counters[i]:g}")
        self._expected_next = int((start + n) % COUNTER_PERIOD)
        return RowBlock(unset_to_nan(raw), stamps)
