"""Rows in the public datasets' CSV layout, written and flushed as they arrive.

Why this exact layout: operators compare our files with the public Causal Chamber datasets and feed them to the
same tools (`sim fit`, `simulator.replay`, `sweep --recording`). The header is what the authors' host program
writes, `timestamp,config` and then the board's VARIABLES_LIST in the order the board announced it; each value is
the board's 32-bit float written as the authors' host writes it (`"%s" % float(x)`, e.g. `1.100000023841858`
for v_in=1.1), and an unset variable is `-9999.0`, as the board sends it. The one deliberate difference:
`timestamp` is unix time (what the public datasets' variables.csv documents), where the vendored host writes
`timeit.default_timer()`, a clock with an arbitrary origin.

Each row is flushed (and the file's buffer handed to the OS) before the next one is taken, so a run stopped by
Ctrl-C, a lost link or a power cut keeps every row it received.
"""

from __future__ import annotations

import math
from typing import TextIO

from chamber.frame import Frame
from firmware_bridge.variables import UNSET
from simulator.replay import HOST_COLUMNS  # defined once, with the layout's reader and writer


def header(names: tuple[str, ...] | list[str]) -> str:
    return ",".join((*HOST_COLUMNS, *names))


def format_cell(value: float) -> str:
    """A board value as the authors' host writes it; NaN (the driver's unset) back to the board's -9999."""
    number = float(value)
    return repr(float(UNSET)) if math.isnan(number) else repr(number)


class PublicCsvWriter:
    """Writes the header once (from the first frame's names, i.e. the board's announcement), then rows."""

    def __init__(self, stream: TextIO, names: tuple[str, ...] | None = None):
        self._stream = stream
        self.names: tuple[str, ...] | None = None
        self.rows = 0
        if names is not None:
            self._start(tuple(names))

    def _start(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._stream.write(header(names) + "\n")
        self._stream.flush()

    def write_frame(self, frame: Frame) -> int:
        """Append every row of a frame; returns how many. A frame with other columns than the header is refused."""
        if self.names is None:
            self._start(frame.names)
        elif frame.names != self.names:
            raise ValueError(f"frame columns {', '.join(frame.names)} differ from the file's {', '.join(self.names)}")
        config = frame.config
        for stamp, row in zip(frame.host_timestamps.tolist(), frame.values.tolist()):
            self._stream.write(",".join([repr(float(stamp)), config, *map(format_cell, row)]) + "\n")
        self._stream.flush()
        self.rows += len(frame)
        return len(frame)
