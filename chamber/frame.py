"""A measurement frame: checked rows of one MSR, as the driver returns them.

Why frozen and complete: a frame is evidence for a datasheet verdict. It carries the full row (bookkeeping
included), the host time of each row, the board configuration, the link counters at the time, and whether the
link had to be re-established before it, so a later reader can judge it without the live session.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Frame:
    names: tuple[str, ...]
    values: np.ndarray  # float64 (n, len(names)); -9999 (unset) is NaN
    host_timestamps: np.ndarray  # float64 (n,), seconds since the epoch, when the host read each row
    config: str
    reconnected: bool
    link: dict[str, int]

    def __post_init__(self) -> None:
        if self.values.ndim != 2 or self.values.shape[1] != len(self.names):
            raise ValueError(f"values shape {self.values.shape} does not match {len(self.names)} names")
        self.values.setflags(write=False)
        self.host_timestamps.setflags(write=False)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def column(self, name: str) -> np.ndarray:
        try:
            return self.values[:, self.names.index(name)]
        except ValueError:
            raise KeyError(f"no column {name!r}; columns: {', '.join(self.names)}") from None
