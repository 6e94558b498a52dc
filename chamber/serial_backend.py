"""The serial backend: a Mk1 board behind any pyserial URL, through firmware_bridge.

Why thin: everything protocol-shaped lives in the bridge; this class only owns the session's lifetime (open,
reopen after a loss or a halt) and keeps one set of link counters across reconnections.

Reopening the port is also the last resort of `settle`: it resets the board as a power cycle would. A real Mega
resets on DTR (the Mk1Session pulses it, and opening the USB port does too); the firmware harness powers up a
fresh board process for every new TCP connection; the emulated board on a pty (simulator/board.py) sees the
host close and reopen the slave (inotify) and reboots and announces itself, and one on a socket reboots on the
new connection. Either way numbering restarts and every setting is at its power-on value.

Not every board resets when the port is opened (a serial server that holds the port across clients, a Mega with
auto-reset disabled): then the session recovers it (firmware_bridge/recovery.py), helped by the port's link journal
in `journal_dir` (firmware_bridge/link_journal.py), and `recovered` says what it found, for the caller to tell the
operator that a previous process may have left the chamber running.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import serial

from chamber.backend import SETTLE_TIMEOUT_S, Settled
from firmware_bridge.errors import BridgeError, FirmwareError, LinkLost
from firmware_bridge.link_journal import LinkJournal
from firmware_bridge.recovery import Recovery
from firmware_bridge.rows import RowBlock
from firmware_bridge.segments import LinkCounters
from firmware_bridge.session import BootInfo, Mk1Session, Timing

log = logging.getLogger(__name__)


class SerialBackend:
    def __init__(self, url: str, *, timing: Timing = Timing(),
                 port_factory: Callable[..., Any] = serial.serial_for_url, journal_dir: Path | None = None):
        self.url = url
        self.description = f"serial {url}"
        self.timing = timing
        self._port_factory = port_factory
        self._counters = LinkCounters()
        self._session: Mk1Session | None = None
        self._journal = LinkJournal.for_port(journal_dir, url) if journal_dir is not None else None
        self.recovered: Recovery | None = None
        """What the last connect found when the board had been left mid-session by a previous host (else None)."""

    @property
    def session(self) -> Mk1Session:
        if self._session is None:
            raise LinkLost(f"not connected to {self.url}")
        return self._session

    def connect(self) -> BootInfo:
        self.close()
        self.recovered = None
        self._session = Mk1Session.connect(self.url, timing=self.timing, counters=self._counters,
                                           port_factory=self._port_factory, journal=self._journal)
        assert self._session.boot is not None
        self.recovered = self._session.boot.recovered
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

    def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> Settled:
        """Finish the exchange an interrupt cut short (Mk1Session.settle) within `timeout` seconds; if that cannot
        be done (the rows still owed need longer, the board stays silent, the link broke), reset the board by
        reopening the port. FirmwareError (a halted board) is left to the caller, which resets it."""
        session = self._session
        if session is not None and session.link.broken is None:
            if not session.owes:
                return Settled("idle")
            try:
                return Settled("finished", session.settle(session.link.now() + timeout))
            except FirmwareError:
                raise
            except LinkLost as exc:
                log.warning("could not finish the exchange in flight on %s (%s); resetting the board by reopening "
                            "the port", self.url, exc)
        return Settled("reset", self.connect())

    def abandon(self) -> None:
        session = self._session
        if session is not None:
            session.link.abandon()

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._journal is not None:
            self._journal.close()  # reopened by the next session's first record

    def counters(self) -> dict[str, int]:
        return self._counters.as_dict()
