"""The driver's typed errors, plus the bridge's, so callers import every chamber error from one place.

Why: a refused setting (nothing was sent), a halted board (reset needed) and a lost link (reconnects on next use)
need different handling, and each message names what was expected and what arrived.
"""

from __future__ import annotations

from firmware_bridge.errors import (  # noqa: F401  (re-exported)
    BoardRebooted,
    BridgeError,
    FirmwareError,
    FrameRejected,
    LinkLost,
    NoBoardAnswered,
    PacketTooLong,
    ProtocolError,
    SettleTimeout,
)
from firmware_bridge.recovery import BoardUnresponsive  # noqa: F401  (re-exported)


class ChamberError(Exception):
    """Base of the driver's own errors."""


class InvalidSetting(ChamberError, ValueError):
    """A SET refused before anything was sent: unknown variable, non-numeric, outside the allowed values or limits."""

    def __init__(self, variable: str, value: object, expected: str):
        self.variable = variable
        self.value = value
        self.expected = expected
        super().__init__(f"cannot set {variable!r}: expected {expected}, received {value!r}; nothing was sent")


class ChamberHalted(ChamberError):
    """The board reported a firmware error and halted; the driver refuses commands until reset()."""

    def __init__(self, cause: FirmwareError):
        self.cause = cause
        super().__init__(f"the chamber is halted after firmware error {cause.code} ({cause.meaning}); call reset() first")


class LimitsError(ChamberError, ValueError):
    """An operator limits file that does not fit the chamber (unknown variable, limit outside the firmware's range)."""


class NotConnected(ChamberError):
    """The driver was used before connect() or after close()."""


class ChamberBusy(ChamberError):
    """Another thread kept the chamber (an exchange in flight) longer than the caller could wait."""
