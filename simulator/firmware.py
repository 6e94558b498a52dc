"""The Mk1 firmware's logic, free of any wire: validation, error codes, counter/flag/intervention, overrides.

Why wire-free: the emulated board (simulator/board.py) wraps this in the serial protocol, and the in-process
chamber backend calls it directly, so both behave exactly like the same board. The firmware's quirks are kept on
purpose (the light tunnel's `red` setter ignores out-of-range values silently; `hatch` has no range check), because
a host must be tested against the board that exists, not an idealised one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from firmware_bridge.messages import boot_messages, format_reply_value
from firmware_bridge.variables import COUNTER_PERIOD, UNSET, Kind
from simulator.model import PhysicsModel

IGNORES_OUT_OF_RANGE = frozenset({"red"})
"""Setters with no range check that drop an out-of-range value silently (the rest apply it, e.g. hatch)."""


class FirmwareFault(Exception):
    """An error the firmware reports outside the framing (`<ERR,code[,detail]>`) before halting."""

    def __init__(self, code: str, detail: str = ""):
        self.code = code
        self.detail = detail
        super().__init__(f"{code} {detail}".strip())

    @property
    def report(self) -> bytes:
        body = f"ERR,{self.code}" + (f",{self.detail}" if self.detail else "")
        return f"<{body}>".encode("ascii", errors="replace")


@dataclass(frozen=True)
class Response:
    """What the board sends for one command: replies, then `measure` rows, then `after`, then maybe a reboot."""

    replies: tuple[str, ...] = ()
    measure: int = 0
    after: tuple[str, ...] = ()
    reboot: bool = False


class EmulatedFirmware:
    """One Mk1 board's firmware state around a physics model."""

    def __init__(self, model: PhysicsModel):
        self.model = model
        self.layout = model.layout
        self.config = model.layout.config
        self._col = {n: i for i, n in enumerate(self.layout.names)}
        self.halted: FirmwareFault | None = None
        self.boots = 0
        self._reset_state()

    def _reset_state(self) -> None:
        self.counter = 0
        self.flag = 0.0
        self.overrides: dict[str, float] = {}
        self._intervention_pending = False

    # ------------------------------------------------------------------ boot
    def boot(self) -> list[str]:
        """Power-on: physics and firmware state back to their initial values; returns the two announcements."""
        self.model.reset()
        self._reset_state()
        self.halted = None
        self.boots += 1
        return boot_messages(self.config, self.layout.names)

    # ------------------------------------------------------------------ commands
    def handle(self, message: str) -> Response | None:
        """Run one command. Raises FirmwareFault (and stays halted); returns None while halted."""
        if self.halted is not None:
            return None
        try:
            return self._dispatch(message)
        except FirmwareFault as fault:
            self.halted = fault
            raise

    def fail(self, code: str, detail: str = "") -> FirmwareFault:
        """Halt with a given error, as a hardware fault would (test switch of the emulated board)."""
        self.halted = FirmwareFault(code, detail)
        return self.halted

    def _dispatch(self, message: str) -> Response:
        if message == "RST":
            return Response(replies=("OK,RST",), reboot=True)
        parts = message.split(",")
        if parts[0] == "SET" and len(parts) == 3:
            return self._set(parts[1], parts[2], message)
        if parts[0] == "MSR" and len(parts) == 3:
            try:
                n, delay = int(parts[1]), int(parts[2])
            except ValueError:
                raise FirmwareFault("er01", message) from None
            if n < 0:
                raise FirmwareFault("er01", message)
            return Response(replies=(f"OK,MSR,n={n},wait={delay}",), measure=n, after=("OK,DONE",))
        raise FirmwareFault("er01", message)

    def _set(self, target: str, text: str, message: str) -> Response:
        try:
            value = float(text)
        except ValueError:
            raise FirmwareFault("er01", message) from None
        if not math.isfinite(value):
            raise FirmwareFault("er01", message)
        ok = Response(replies=(f"OK,SET,{target}={format_reply_value(value)}",))
        if target == "flag":
            self.flag = value
            self._intervention_pending = True
            return ok
        variable = self.layout.get(target)
        if variable is None or variable.kind is Kind.BOOKKEEPING:
            raise FirmwareFault("er04", target)
        if variable.kind is Kind.SENSOR:
            if value == UNSET:
                self.overrides.pop(target, None)
            else:
                self.overrides[target] = value
            self._intervention_pending = True
            return ok
        if value == UNSET:
            raise FirmwareFault("er42", target)
        in_range = variable.accepts(value)
        if not in_range:
            if variable.allowed is not None or variable.firmware_checks_range:
                raise FirmwareFault("er03", f"{target}={format_reply_value(value)}")
            if target in IGNORES_OUT_OF_RANGE:
                return ok  # the quirk: acknowledged, silently not applied
        self.model.apply(target, value)
        self._intervention_pending = True
        return ok

    # ------------------------------------------------------------------ rows
    def rows(self, n: int) -> np.ndarray:
        """The next n rows as the board would send them: float32, bookkeeping and overrides filled in."""
        values = np.asarray(self.model.sample(n), dtype=np.float64)
        if values.shape != (n, self.layout.row_length):
            raise ValueError(f"physics model returned shape {values.shape}, expected {(n, self.layout.row_length)}")
        values = values.copy()
        col = self._col
        values[:, col["counter"]] = (self.counter + np.arange(n)) % COUNTER_PERIOD
        self.counter = (self.counter + n) % COUNTER_PERIOD
        values[:, col["flag"]] = self.flag
        values[:, col["intervention"]] = 0.0
        if n and self._intervention_pending:
            values[0, col["intervention"]] = 1.0
            self._intervention_pending = False
        for name, value in self.overrides.items():
            values[:, col[name]] = value
        return values.astype("<f4")
