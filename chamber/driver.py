"""The Chamber driver: one object a protocol uses to set variables and take checked measurements.

Why the rules live here: validation and operator limits before anything is sent, refusing commands after a
firmware error until reset, and recovering from a lost link (fail the measurement in flight, reconnect with
back-off on next use, re-apply the last settings, mark the frame) must hold for every caller and both backends.

A board that does not come back is given a bounded time (issue 31): the reconnection of a lost link — its attempts
and the waits between them together — stops at `reconnect_window` seconds (30 by default, on the `clock` passed
in), each attempt is said to an observer ("board lost, reconnecting (2/8)"), and once the window is spent the
chamber is marked lost (BoardLost): every later command fails at once, naming when the board was lost, instead
of each claim of a batch spending its own minutes on reconnects. connect(), reset() or a settle() that reopens
the port brings it back; the exit path's safe state still tries once (Chamber.settle, bounded by the backend).

One exchange at a time: the main job's API serves chamber calls from a worker thread while the main thread may
leave (Ctrl-C, SIGTERM) and apply the safe state; every command holds the chamber's lock, and the exit path takes
it with a timeout (`exclusive`), so the two never interleave on the wire.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator

from chamber.backend import SETTLE_TIMEOUT_S, Backend, Settled
from chamber.catalogue import VariableCatalogue
from chamber.errors import ChamberBusy, ChamberHalted, FirmwareError, LinkLost, NotConnected
from chamber.frame import Frame
from chamber.limits import OperatorLimits, as_limits
from firmware_bridge.session import BootInfo
from firmware_bridge.variables import Kind, Layout, layout_from_names

log = logging.getLogger(__name__)

DEFAULT_BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4)
"""Seconds to wait before each reconnection attempt (the first also lets the board notice the port closed); a
port that refuses at once is tried for ~13 s (a USB re-enumeration, a board's reboot), within the window below."""

RECONNECT_WINDOW_S = 30.0
"""The most a lost link's reconnection may take, attempts and waits together. An attempt is started only when it
fits in what is left, judged by the longest attempt so far (a silent board costs the backend's boot timeout and
RST patience, 18 s by default, per attempt), so the window is not overrun by more than the first attempt."""


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class BoardLost(LinkLost):
    """The board was lost and not reconnected within the reconnect window: the chamber refuses every command at
    once (no new attempts) until connect(), reset() or a settle() that reopens the port succeeds. Names when the
    link was lost, how many attempts were made over how long, and the last attempt's error."""

    def __init__(self, lost_at: datetime, attempts: int, spent_s: float, window_s: float, last: str):
        self.lost_at = lost_at
        self.attempts = attempts
        self.spent_s = spent_s
        self.window_s = window_s
        self.last = last
        plural = "" if attempts == 1 else "s"
        super().__init__(f"board lost at {lost_at.astimezone(timezone.utc):%H:%M:%S} UTC, not reconnected within "
                         f"{window_s:g} s: could not reconnect after {attempts} attempt{plural} over {spent_s:.1f} s "
                         f"(last: {last})")


class Chamber:
    def __init__(self, backend: Backend, *, limits: OperatorLimits | dict | str | None = None,
                 backoff: Iterable[float] = DEFAULT_BACKOFF, sleep: Callable[[float], None] = time.sleep,
                 reconnect_window: float = RECONNECT_WINDOW_S, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = _utc_now):
        """`backoff`: the wait before each reconnection attempt; `reconnect_window`: the most a reconnection takes
        (seconds of `clock`, a monotonic clock); `now` dates the loss of a link (BoardLost's message)."""
        self.backend = backend
        self._limits_given: OperatorLimits | None = as_limits(limits)
        self.limits: OperatorLimits | None = self._limits_given  # after connect: the part for this chamber
        self._backoff = tuple(backoff)
        if not self._backoff:
            raise ValueError("expected at least one reconnection attempt (a backoff of one wait or more)")
        self._sleep = sleep
        self._window = float(reconnect_window)
        self._clock = clock
        self._now = now
        self._lost_at: datetime | None = None  # when the link in `_link_down` was lost
        self._lost: BoardLost | None = None  # set once a reconnection spent its window: commands fail at once
        self._observer: Callable[[str], None] | None = None
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
            self._back_up()
        return self

    @contextmanager
    def observed(self, observer: Callable[[str], None]) -> Iterator["Chamber"]:
        """Say the link's story to `observer` while in the block: the loss, each reconnection attempt ("board
        lost, reconnecting (2/8)"), the reconnection or the give-up. The observer before it is restored after."""
        before, self._observer = self._observer, observer
        try:
            yield self
        finally:
            self._observer = before

    def _say(self, message: str) -> None:
        if self._observer is not None:
            try:
                self._observer(message)
            except Exception:  # a progress sink must not decide whether the board reconnects
                log.debug("the link observer failed", exc_info=True)

    def _back_up(self) -> None:
        """The link works again (a fresh connection): nothing is down or lost."""
        self._link_down = None
        self._lost_at = None
        self._lost = None

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

    def reconnect_now(self) -> bool:
        """Bring a lost link back now (re-applying the last settings, within the reconnect window) and take any
        reconnect not yet reported by a frame as the caller's: the next frame's `reconnected` then speaks only of
        losses after this call. For a caller about to stage and read again after a loss (protocols/staging.py
        `Chambers.once_more_if_lost`), whose fresh SET and settle make the rows its own. True when there was a
        reconnect."""
        with self._lock:
            self._check_usable()
            self._ensure_link()
            reconnected, self._reconnected = self._reconnected, False
            return reconnected

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
                self._back_up()
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
            self._back_up()

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
        if self._lost is not None:
            return "down", self._lost
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
            if self._link_down is None:
                self._lost_at = self._now()
            self._link_down = exc
            raise

    def _ensure_link(self) -> None:
        """Reconnect a lost link and re-apply the last settings, within the reconnect window; BoardLost (then at
        once on every later call) when the window is spent."""
        if self._link_down is None:
            return
        if self._lost is not None:
            lost = self._lost
            raise BoardLost(lost.lost_at, lost.attempts, lost.spent_s, lost.window_s, lost.last)
        last: LinkLost = self._link_down
        lost_at = self._lost_at or self._now()
        total = len(self._backoff)
        began = self._clock()
        longest = 0.0  # the longest attempt so far: the next one is started only if one as long still fits
        attempts = 0
        for attempt, delay in enumerate(self._backoff, start=1):
            if attempt > 1 and self._clock() - began + delay + longest > self._window:
                break
            self._say(f"board lost ({last.reason}), reconnecting ({attempt}/{total})" if attempt == 1
                      else f"board lost, reconnecting ({attempt}/{total})")
            self._sleep(delay)
            attempts = attempt
            started = self._clock()
            try:
                self._install(self.backend.connect())
                for name, value in list(self._applied.items()):
                    self.backend.set(name, value)
            except FirmwareError as exc:
                self._halted = exc
                self._back_up()
                raise
            except LinkLost as exc:
                log.info("reconnect attempt %d failed: %s", attempt, exc)
                last = exc
                longest = max(longest, self._clock() - started)
                continue
            self._back_up()
            self._reconnects += 1
            self._reconnected = True
            log.info("reconnected after %d attempt(s); re-applied %d setting(s)", attempt, len(self._applied))
            self._say(f"reconnected after {attempt} attempt(s); re-applied {len(self._applied)} setting(s)")
            return
        self._lost = BoardLost(lost_at, attempts, self._clock() - began, self._window, last.reason)
        log.log(logging.INFO if self._observer is not None else logging.WARNING, "%s", self._lost)  # said once
        self._say(f"{self._lost.reason}: its remaining work ends as error at once")
        raise BoardLost(lost_at, attempts, self._lost.spent_s, self._window, last.reason)
