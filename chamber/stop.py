"""A stop request an operator makes with Ctrl-C or SIGTERM, turned into a flag that long steps poll.

Why a flag and not an exception: a protocol run must stop *between* rows, keep every row received, leave the
chamber in its safe state and still print its summary. An exception raised inside a half-read MSR would lose
the rows in flight and could leave the link mid-packet. The first signal sets the flag; a second one (the
operator insists) raises KeyboardInterrupt at once, and the exit paths still apply the safe state. While they
do, further signals wait (`signals_deferred`): a Ctrl-C must not cut short the very step that makes the chamber
safe.
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Set once; `wait(seconds)` is a pause that ends early when a stop is requested (returns True then)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None

    def request(self, reason: str = "requested") -> None:
        if self.signal_name is None:
            self.signal_name = reason
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(max(0.0, seconds))


@contextmanager
def handled_by(handler: Callable[[int, Any], None], signals: tuple[signal.Signals, ...]) -> Iterator[bool]:
    """While inside: `handler` handles `signals`, the previous handlers restored on exit. Yields False (and changes
    nothing) outside the main thread, where Python delivers no signals."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield True
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@contextmanager
def stop_on_signals(stop: StopRequest | None = None) -> Iterator[StopRequest]:
    """While inside: SIGINT/SIGTERM request a stop (the second one raises KeyboardInterrupt). Handlers are
    restored on exit. Outside the main thread (signals cannot be caught there) the request is only programmatic."""
    stop = stop or StopRequest()

    def handler(signum: int, _frame: Any) -> None:
        if stop.requested:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        stop.request(signal.Signals(signum).name)

    with handled_by(handler, STOP_SIGNALS):
        yield stop


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside: SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so `finally` blocks (safe state, run
    index) run instead of the process dying where it stands."""
    def handler(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    with handled_by(handler, (signal.SIGTERM,)):
        yield


_deferring = False  # signals are being deferred (only the main thread installs handlers, so one flag will do)


@contextmanager
def signals_deferred(what: str = "the chamber is being made safe") -> Iterator[list[str]]:
    """While inside (main thread): SIGINT and SIGTERM are recorded instead of raised, so the safe state is not cut
    short the way the command was; the first one logs one line saying `what` is finishing first. Yields the list
    of signal names received; the caller decides what they mean once done (a stop). Nested use defers to the
    outermost. Elsewhere (no signals there) it only yields the empty list."""
    global _deferring
    received: list[str] = []

    def handler(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if not received:
            log.warning("%s received: %s first; it ends within its time bound", name, what)
        received.append(name)

    if _deferring:
        yield received
        return
    with handled_by(handler, STOP_SIGNALS) as installed:
        _deferring = installed
        try:
            yield received
        finally:
            _deferring = False
