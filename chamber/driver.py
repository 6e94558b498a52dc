"""The Chamber driver: one object a protocol uses to set variables and take checked measurements.

Why the rules live here: validation and operator limits before anything is sent, refusing commands after a
firmware error until reset, and recovering from a lost link (fail the measurement in flight, reconnect with
back-off on next use, re-apply the last settings, mark the frame) must hold for every caller and both backends.

One exchange at a time: the main job's API serves chamber calls from a worker thread while the main thread may
leave (Ctrl-C, SIGTERM) and apply the safe state; every command holds the chamber's lock, and the exit path takes
it with a timeout (`exclusive`), so the two never interleave on the wire.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from chamber.backend import SETTLE_TIMEOUT_S, Backend, Settled
from chamber.catalogue import VariableCatalogue
from chamber.errors import ChamberBusy, ChamberHalted, FirmwareError, LinkLost, NotConnected
from chamber.frame import Frame
from chamber.limits import OperatorLimits, as_limits
from firmware_bridge.session import BootInfo
from firmware_bridge.variables import Kind, Layout, layout_from_names

log = logging.getLogger(__name__)

DEFAULT_BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
"""Seconds to wait before each reconnection attempt (the first also lets the board notice the port closed)."""


class Chamber:
    def __init__(self, backend: Backend, *, limits: OperatorLimits | dict | str | None = None,
                 backoff: Iterable[float] = DEFAULT_BACKOFF, sleep: Callable[[float], None] = time.sleep):
        self.backend = backend
        self._limits_given: OperatorLimits | None = as_limits(limits)
        self.limits: OperatorLimits | None = self._limits_given  # after connect: the part for this chamber
        self._backoff = tuple(backoff)
        self._sleep = sleep
        self._boot: BootInfo | None = None
        self._layout: Layout | None = None
        self._catalogue: VariableCatalogue | None = None
        self._applied: dict[str, float] = {}  # every SET the board accepted, in order (re-applied on reconnect)
        self._halted: FirmwareError | None = None
        self._link_down: LinkLost | None = None
        self._reconnected = False
        self._reconnects = 0
        self._closed = False
        self._lock = threading.RLock()  # one exchange at a time (reentrant: set_many calls set)

    # ------------------------------------------------------------------ connection
    def connect(self) -> "Chamber":
        """Reset the board and await its configuration and variable list."""
        with self._lock:
            self._closed = False
            self._install(self.backend.connect())
            self._applied.clear()
            self._halted = None
            self._link_down = None
        return self

    @contextmanager
    def exclusive(self, timeout: float | None = None, *, take_over: bool = False) -> Iterator["Chamber"]:
        """Hold the chamber for several commands (no other thread's exchange in between). `timeout`: wait at most
        this long for a command in flight on another thread to end, else ChamberBusy. `take_over` (the exit path's
        safe state): after that wait, make the other thread's exchange give up (it fails with LinkLost and the
        board is settled or reset next) and wait once more."""
        wait = -1 if timeout is None else max(timeout, 0.0)
        if not self._lock.acquire(timeout=wait):
            if take_over:
                log.warning("another thread still holds the chamber after %g s: abandoning its exchange", timeout)
                self.backend.abandon()
            if not take_over or not self._lock.acquire(timeout=wait):
                raise ChamberBusy(f"expected the chamber to be free within {timeout:g} s, another thread still holds "
                                  "it")
        try:
            yield self
        finally:
            self._lock.release()

    def _install(self, boot: BootInfo) -> None:
        layout = layout_from_names(boot.config, boot.names)
        limits = self._limits_given
        if limits is not None:
            limits.check_against(layout)
            limits = limits.for_chamber(layout.chamber)  # a two-chamber file: this chamber's part (or none)
        self._boot = boot
        self._layout = layout
        self.limits = limits
        self._catalogue = VariableCatalogue(layout, limits)

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            raise NotConnected("connect() first")
        return self._layout

    @property
    def config(self) -> str:
        return self.layout.config

    @property
    def catalogue(self) -> VariableCatalogue:
        if self._catalogue is None:
            raise NotConnected("connect() first")
        return self._catalogue

    # ------------------------------------------------------------------ commands
    def set(self, name: str, value: float | str) -> float:
        """Validate (firmware rules and operator limits), then SET; returns the float applied."""
        with self._lock:
            self._check_usable()
            number = self.catalogue.validate(name, value)
            self._ensure_link()
            self._call(self.backend.set, name, number)
            self._applied.pop(name, None)
            self._applied[name] = number
            return number

    def set_many(self, settings: dict[str, float | str]) -> dict[str, float]:
        """Validate every setting first (nothing is sent if one is refused), then apply them in order."""
        with self._lock:
            self._check_usable()
            numbers = {name: self.catalogue.validate(name, value) for name, value in settings.items()}
            return {name: self.set(name, number) for name, number in numbers.items()}

    def measure(self, n: int) -> Frame:
        """MSR n rows; LinkLost if the link breaks (no partial frame); reconnects first if the last one broke."""
        with self._lock:
            self._check_usable()
            if isinstance(n, bool) or int(n) != n or n < 1:
                raise ValueError(f"expected a positive whole number of rows, received {n!r}")
            self.catalogue.check_measurable(self.state())  # the PID runs only while measuring: bounded on every path
            self._ensure_link()
            block = self._call(self.backend.measure, int(n))
            frame = Frame(
                names=self.layout.names,
                values=block.values,
                host_timestamps=block.host_timestamps,
                config=self.config,
                reconnected=self._reconnected,
                link=self.link_stats(),
            )
            self._reconnected = False
            return frame

    def read_back(self) -> dict[str, float]:
        """One MSR row: each actuator's value as the board reports it (the value it applied), NaN if unset."""
        with self._lock:
            frame = self.measure(1)
            row = frame.values[0]
            return {v.name: float(row[i]) for i, v in enumerate(self.layout.variables) if v.kind is Kind.ACTUATOR}

    def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> Settled:
        """Finish an exchange an interrupt cut short (serial: the backend finishes it as the firmware expects,
        else resets the board by reopening the port), so the next command is answered as its own. A lost link is
        reopened here without re-applying the last settings (the caller is about to set others). After "reset"
        the settings are forgotten, as after reset(). A halted board is left for reset()."""
        with self._lock:
            if self._closed:
                raise NotConnected("the chamber was closed")
            if self._halted is not None:
                return Settled("idle")
            if self._link_down is not None:
                result = Settled("reset", self.backend.connect())
            else:
                result = self._call(self.backend.settle, timeout)
            if result.boot is not None:  # the board rebooted (reopened port, or the RST in flight): settings gone
                self._install(result.boot)
                self._applied.clear()
                self._link_down = None
            if result.how == "reset":
                self._reconnects += 1
                self._reconnected = True
            return result

    def reset(self) -> None:
        """Reset the board (also a halted one): power-on state, settings forgotten."""
        with self._lock:
            if self._closed:
                raise NotConnected("the chamber was closed")
            self._install(self.backend.reset())
            self._applied.clear()
            self._halted = None
            self._link_down = None

    def state(self) -> dict[str, float]:
        """The last applied value of each input variable the host set (since connect or reset)."""
        layout = self.layout
        return {n: v for n, v in self._applied.items() if (var := layout.get(n)) is not None and var.kind is Kind.ACTUATOR}

    def applied(self) -> dict[str, float]:
        """Every accepted SET (inputs, flag and sensor overrides) in the order it was applied."""
        return dict(self._applied)

    def link_state(self) -> tuple[str, BaseException | None]:
        """("halted", the firmware error) | ("down", why) | ("up", None) from what the driver knows; no I/O, no lock
        (a health check must not wait behind a measurement)."""
        if self._closed:
            return "down", NotConnected("the chamber was closed")
        if self._halted is not None:
            return "halted", self._halted
        if self._link_down is not None:
            return "down", self._link_down
        return "up", None

    def link_stats(self) -> dict[str, int]:
        stats = dict(self.backend.counters())
        stats["reconnects"] = self._reconnects
        return stats

    def close(self, timeout: float | None = None) -> None:
        """Close the port. `timeout`: wait at most this long for another thread's exchange (then close anyway:
        its read fails and it ends)."""
        acquired = self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))
        try:
            self._closed = True
            self.backend.close()
        finally:
            if acquired:
                self._lock.release()

    def __enter__(self) -> "Chamber":
        if self._layout is None:
            self.connect()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ rules
    def _check_usable(self) -> None:
        if self._closed:
            raise NotConnected("the chamber was closed")
        if self._layout is None:
            raise NotConnected("connect() first")
        if self._halted is not None:
            raise ChamberHalted(self._halted)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except FirmwareError as exc:
            self._halted = exc
            raise
        except LinkLost as exc:
            self._link_down = exc
            raise

    def _ensure_link(self) -> None:
        if self._link_down is None:
            return
        last: LinkLost = self._link_down
        for attempt, delay in enumerate(self._backoff, start=1):
            self._sleep(delay)
            try:
                self._install(self.backend.connect())
                for name, value in list(self._applied.items()):
                    self.backend.set(name, value)
            except FirmwareError as exc:
                self._halted = exc
                self._link_down = None
                raise
            except LinkLost as exc:
                log.info("reconnect attempt %d failed: %s", attempt, exc)
                last = exc
                continue
            self._link_down = None
            self._reconnects += 1
            self._reconnected = True
            log.info("reconnected after %d attempt(s); re-applied %d setting(s)", attempt, len(self._applied))
            return
        raise LinkLost(f"could not reconnect after {len(self._backoff)} attempts (last: {last.reason})")
