"""The in-process backend: the same EmulatedFirmware and physics as the emulated board, with no port.

Why: most tests of the driver's rules and of the layers above need a chamber, not a serial port. Messages still go
through the bridge's formatting and parsing (64-byte limit included), and rows through the same RowChecker, so the
only thing skipped is the wire.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from chamber.backend import Settled
from firmware_bridge.errors import FirmwareError
from firmware_bridge.messages import format_msr, format_set, parse_config, parse_msr_reply, parse_set_reply, parse_variables
from firmware_bridge.packets import check_message_fits
from firmware_bridge.rows import RowBlock, RowChecker
from firmware_bridge.session import BootInfo
from simulator.firmware import EmulatedFirmware, FirmwareFault, Response
from simulator.model import PhysicsModel
from simulator.physics import make_model


class SimBackend:
    def __init__(self, chamber: str = "wt", *, config: str = "standard", seed: int = 0,
                 params: dict[str, Any] | None = None, model: PhysicsModel | None = None,
                 wall_clock: Callable[[], float] = time.time):
        self.description = f"in-process sim {chamber}/{config} seed {seed}"
        self.firmware = EmulatedFirmware(model or make_model(chamber, config=config, seed=seed, params=params))
        self._clock = wall_clock
        self._checker: RowChecker | None = None
        self._messages = 0

    def connect(self) -> BootInfo:
        config_text, variables_text = self.firmware.boot()
        boot = BootInfo(parse_config(config_text), parse_variables(variables_text))
        self._checker = RowChecker(len(boot.names), first_counter=0)
        return boot

    def _send(self, text: str) -> Response:
        check_message_fits(text.encode("ascii", "replace"), text)  # "replace": one byte per character, as before
        try:
            response = self.firmware.handle(text)
        except FirmwareFault as fault:
            raise FirmwareError(fault.code, detail=fault.detail) from None
        if response is None:
            halted = self.firmware.halted
            raise FirmwareError(halted.code if halted else "er01", detail="board halted")
        self._messages += 1
        return response

    def set(self, name: str, value: float) -> float:
        text = format_set(name, value)
        response = self._send(text)
        return parse_set_reply(response.replies[0], name).value

    def measure(self, n: int) -> RowBlock:
        if self._checker is None:
            self.connect()
        assert self._checker is not None
        response = self._send(format_msr(n))
        parse_msr_reply(response.replies[0], n)
        rows = self.firmware.rows(response.measure)
        return self._checker.check_array(rows, np.full(rows.shape[0], self._clock()))

    def reset(self) -> BootInfo:
        return self.connect()

    def settle(self, timeout: float) -> Settled:
        """Nothing to settle: a command here is one function call, never half done on a wire."""
        return Settled("idle")

    def abandon(self) -> None:
        """Nothing to do: an in-process exchange never waits on a board."""

    def close(self) -> None:
        pass

    def counters(self) -> dict[str, int]:
        return {"messages": self._messages}
