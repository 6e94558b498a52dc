"""The one interface both chamber backends implement: connect, set, measure, reset, close, counters.

Why an interface: the driver (validation, limits, halting, reconnection) must behave the same whether the board
is behind a serial port or is the emulated firmware in this process, so tests of the driver's rules are fast and
the serial path is still exercised end to end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from firmware_bridge.rows import RowBlock
from firmware_bridge.session import BootInfo

SETTLE_TIMEOUT_S = 15.0
"""The longest a backend spends finishing an interrupted exchange before it resets the board instead: an MSR of
~70 wind-tunnel rows (BOARD_PACE row period), or a SET that moves the hatch across its range."""


@dataclass(frozen=True)
class Settled:
    """What `Backend.settle` did: "idle" (nothing was in flight), "finished" (the exchange in flight was finished
    as the firmware expects), "reset" (it could not be: the board was reset by reopening the port). `boot`: the
    fresh announcement when the board rebooted (after "reset", or a finished RST); then every setting is back at
    its power-on value."""

    how: Literal["idle", "finished", "reset"]
    boot: BootInfo | None = None


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

    def settle(self, timeout: float) -> Settled:
        """Finish an exchange an interrupt cut short, within `timeout` seconds, else reset the board."""
        ...

    def abandon(self) -> None:
        """From another thread, without waiting: make the exchange in progress give up soon (LinkLost) so that the
        caller can take the chamber; the board is then settled or reset as after an interrupt."""
        ...

    def close(self) -> None: ...

    def counters(self) -> dict[str, int]: ...
