"""Small typed helpers for tests of the chamber stack, one verb each.

Why in the package: tests of several layers need the same few tools (short timeouts, a port that records the
bytes actually written, a physics model whose readings encode the row number), and they are useful to anyone
writing a driver test against the emulated board.
"""

from __future__ import annotations

import signal
from typing import Any, Callable

import numpy as np
import serial

from firmware_bridge.link import RESEND_AFTER_S
from firmware_bridge.packets import PacketSplitter, segment_of
from firmware_bridge.segments import Segment
from firmware_bridge.session import Timing
from firmware_bridge.variables import Kind, Layout, layout_for

FAST_TIMING = Timing(boot_timeout=1.0, reply_timeout=1.0, stall_timeout=0.5, resend_after=RESEND_AFTER_S, dtr_pulse=0.0,
                     ack_patience=0.0)
"""Timeouts for tests against the unthrottled emulated board (a real board needs the defaults)."""


class RecordingPort:
    """A real pyserial port that also keeps every byte written to it, so tests assert on the wire."""

    def __init__(self, port: Any):
        object.__setattr__(self, "_port", port)
        object.__setattr__(self, "written", bytearray())

    def write(self, data: bytes) -> int | None:
        self.written += data
        return self._port.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._port, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._port, name, value)  # e.g. dtr: raises on a pty exactly as the real port does


def recording_factory(sink: list[RecordingPort]) -> Callable[..., RecordingPort]:
    """A port_factory for SerialBackend / Mk1Session.connect that appends each opened port to `sink`."""

    def factory(url: str, **kwargs: Any) -> RecordingPort:
        port = RecordingPort(serial.serial_for_url(url, **kwargs))
        sink.append(port)
        return port

    return factory


class CountingModel:
    """A PhysicsModel whose every sensor reads 1000·column + the model's own row number: any lost, repeated or
    damaged row is visible. Actuator columns read back the applied values."""

    rows_per_second = 1000.0

    def __init__(self, layout: Layout | None = None):
        self.layout = layout or layout_for("wt", "standard")
        self._actuators = {v.name: 0.0 for v in self.layout.variables if v.kind is Kind.ACTUATOR}
        self.reset()

    def reset(self) -> None:
        self.rows_drawn = 0
        self._state = dict(self._actuators)

    def apply(self, name: str, value: float) -> None:
        self._state[name] = float(value)

    def state(self) -> dict[str, float]:
        return dict(self._state)

    def sample(self, n: int) -> np.ndarray:
        index = np.arange(self.rows_drawn, self.rows_drawn + n, dtype=np.float64)
        self.rows_drawn += n
        out = 1000.0 * np.arange(self.layout.row_length)[None, :] + index[:, None]
        for i, v in enumerate(self.layout.variables):
            if v.kind is Kind.ACTUATOR:
                out[:, i] = self._state[v.name]
        return out

    def expected(self, start: int, n: int, column: int) -> np.ndarray:
        return 1000.0 * column + np.arange(start, start + n, dtype=np.float64)


class InterruptingPort:
    """A real pyserial port that raises KeyboardInterrupt in the read that brings a chosen segment from the board
    (`arm(when)`: `when(segment)` is true for it: a reply, the n-th row, the ACK of our command), as Ctrl-C would
    between a read and its processing: the bytes of that read are lost to the host, as they would be then.
    `arm(when, signum)` instead raises that signal in the process (signal.raise_signal), so whatever handler is
    installed decides. Conditions armed one after another fire in turn. Deterministic: it fires on what arrives,
    not on timing. Wrap a live link's port (`link.port = InterruptingPort(link.port)`)."""

    def __init__(self, port: Any):
        self._port = port
        self._armed: list[tuple[Callable[[Segment], bool], int | None]] = []
        self._splitter = PacketSplitter()
        self.fired = 0

    def arm(self, when: Callable[[Segment], bool], signum: int | None = None) -> None:
        if not self._armed:
            self._splitter = PacketSplitter()
        self._armed.append((when, signum))

    def read(self, size: int = 1) -> bytes:
        data = self._port.read(size)
        if self._armed and data:
            for body in self._splitter.feed(data).bodies:
                segment = segment_of(body)
                if segment is None or not self._armed or not self._armed[0][0](segment):
                    continue
                _, signum = self._armed.pop(0)
                self.fired += 1
                if signum is None:
                    raise KeyboardInterrupt("interrupted as the armed segment arrived (test)")
                signal.raise_signal(signum)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._port, name)


def nth_row(n: int, row_bytes: int) -> Callable[[Segment], bool]:
    """An `InterruptingPort.arm` condition: the n-th row (1-based) of the MSR in flight."""
    seen = [0]

    def when(segment: Segment) -> bool:
        is_row = not segment.is_ack and len(segment.data) == row_bytes
        seen[0] += is_row
        return is_row and seen[0] == n

    return when


def reply(prefix: bytes) -> Callable[[Segment], bool]:
    """An `InterruptingPort.arm` condition: the board's text message starting with `prefix` (b"OK,SET,")."""
    return lambda segment: not segment.is_ack and segment.data.startswith(prefix)


def ack_of_ours() -> Callable[[Segment], bool]:
    """An `InterruptingPort.arm` condition: the board's ACK of our command (the command stays unacknowledged)."""
    return lambda segment: segment.is_ack
