"""The one interface both chamber backends implement: connect, set, measure, reset, close, counters.

Why an interface: the driver (validation, limits, halting, reconnection) must behave the same whether the board
is behind a serial port or is the emulated firmware in this process, so tests of the driver's rules are fast and
the serial path is still exercised end to end.
"""

from __future__ import annotations

from typing import Protocol

from firmware_bridge.rows import RowBlock
from firmware_bridge.session import BootInfo


class Backend(Protocol):
    description: str

    def connect(self) -> BootInfo:
        """Reset the board and return its announcement (numbering and row counter start afresh)."""
        ...

    def set(self, name: str, value: float) -> float:
        """Send one validated SET; returns the value the board echoed."""
        ...

    def measure(self, n: int) -> RowBlock:
        """MSR n rows, all checked; raises rather than return part of them."""
        ...

    def reset(self) -> BootInfo:
        """Reset the board even if it is halted (serial: RST, else reopen the port) and return the announcement."""
        ...

    def close(self) -> None: ...

    def counters(self) -> dict[str, int]: ...
