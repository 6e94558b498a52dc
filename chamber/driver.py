"""The Chamber driver: one object a protocol uses to set variables and take checked measurements.

Why the rules live here: validation and operator limits before anything is sent, refusing commands after a
firmware error until reset, and recovering from a lost link (fail the measurement in flight, reconnect with
back-off on next use, re-apply the last settings, mark the frame) must hold for every caller and both backends.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

from chamber.backend import Backend
from chamber.catalogue import VariableCatalogue
from chamber.errors import ChamberHalted, FirmwareError, LinkLost, NotConnected
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

    # ------------------------------------------------------------------ connection
    def connect(self) -> "Chamber":
        """Reset the board and await its configuration and variable list."""
        self._closed = False
        self._install(self.backend.connect())
        self._applied.clear()
        self._halted = None
        self._link_down = None
        return self

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
        self._check_usable()
        number = self.catalogue.validate(name, value)
        self._ensure_link()
        self._call(self.backend.set, name, number)
        self._applied.pop(name, None)
        self._applied[name] = number
        return number

    def set_many(self, settings: dict[str, float | str]) -> dict[str, float]:
        """Validate every setting first (nothing is sent if one is refused), then apply them in order."""
        self._check_usable()
        numbers = {name: self.catalogue.validate(name, value) for name, value in settings.items()}
        return {name: self.set(name, number) for name, number in numbers.items()}

    def measure(self, n: int) -> Frame:
        """MSR n rows; LinkLost if the link breaks (no partial frame); reconnects first if the last one broke."""
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

    def reset(self) -> None:
        """Reset the board (also a halted one): power-on state, settings forgotten."""
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

    def link_stats(self) -> dict[str, int]:
        stats = dict(self.backend.counters())
        stats["reconnects"] = self._reconnects
        return stats

    def close(self) -> None:
        self._closed = True
        self.backend.close()

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
