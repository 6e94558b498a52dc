"""The serial backend: a Mk1 board behind any pyserial URL, through firmware_bridge.

Why thin: everything protocol-shaped lives in the bridge; this class only owns the session's lifetime (open,
reopen after a loss or a halt) and keeps one set of link counters across reconnections.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import serial

from firmware_bridge.errors import BridgeError, LinkLost
from firmware_bridge.rows import RowBlock
from firmware_bridge.segments import LinkCounters
from firmware_bridge.session import BootInfo, Mk1Session, Timing

log = logging.getLogger(__name__)


class SerialBackend:
    def __init__(self, url: str, *, timing: Timing = Timing(),
                 port_factory: Callable[..., Any] = serial.serial_for_url):
        self.url = url
        self.description = f"serial {url}"
        self.timing = timing
        self._port_factory = port_factory
        self._counters = LinkCounters()
        self._session: Mk1Session | None = None

    @property
    def session(self) -> Mk1Session:
        if self._session is None:
            raise LinkLost(f"not connected to {self.url}")
        return self._session

    def connect(self) -> BootInfo:
        self.close()
        self._session = Mk1Session.connect(self.url, timing=self.timing, counters=self._counters,
                                           port_factory=self._port_factory)
        assert self._session.boot is not None
        return self._session.boot

    def set(self, name: str, value: float) -> float:
        return self.session.set(name, value)

    def measure(self, n: int) -> RowBlock:
        return self.session.measure(n)

    def reset(self) -> BootInfo:
        """RST when the board still listens; a halted board (or a broken link) is reset by reopening the port."""
        session = self._session
        if session is not None and session.link.halted is None and session.link.broken is None:
            try:
                return session.reset()
            except BridgeError as exc:
                log.info("RST failed (%s); reopening the port", exc)
        return self.connect()

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def counters(self) -> dict[str, int]:
        return self._counters.as_dict()
