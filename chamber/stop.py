"""A stop request an operator makes with Ctrl-C or SIGTERM, turned into a flag that long steps poll.

Which signals: every way a lab run is told to end (issue 31): SIGINT (Ctrl-C), SIGTERM (a service manager, `kill`),
SIGHUP (the terminal closed, an SSH session dropped) and SIGQUIT (Ctrl-\\). Each goes the one way to stop: the safe
state applied and read back. SIGHUP ignored when the process started (`nohup`) stays ignored: that operator asked
the run to outlive the terminal.

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

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""The signals that stop a command (and that wait while the safe state is applied)."""

MEANING = {"SIGINT": "Ctrl-C", "SIGTERM": "a stop request", "SIGHUP": "the terminal hung up",
           "SIGQUIT": "Ctrl-\\"}
"""What each stop signal usually means, for the one line a command prints when it stops."""

_received: list[str] = []  # every stop signal this process received, in order (signals are process-wide)


def note_signal(signum: int) -> str:
    """Record a stop signal (for `received_signals`) and return its name."""
    name = signal.Signals(signum).name
    _received.append(name)
    return name


def received_signals() -> list[str]:
    """The stop signals this process received so far, in order."""
    return list(_received)


def describe_signal(name: str) -> str:
    """`SIGHUP (the terminal hung up)`: a signal's name with what it usually means."""
    return f"{name} ({MEANING[name]})" if name in MEANING else name


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
    nothing) outside the main thread, where Python delivers no signals. A SIGHUP that is ignored (`nohup`) stays
    ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    kept = [s for s in signals if not (s == signal.SIGHUP and signal.getsignal(s) is signal.SIG_IGN)]
    previous = {s: signal.signal(s, handler) for s in kept}
    try:
        yield True
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@contextmanager
def stop_on_signals(stop: StopRequest | None = None) -> Iterator[StopRequest]:
    """While inside: a stop signal (STOP_SIGNALS) requests a stop (the second one raises KeyboardInterrupt).
    Handlers are restored on exit. Outside the main thread (signals cannot be caught there) the request is only
    programmatic."""
    stop = stop or StopRequest()

    def handler(signum: int, _frame: Any) -> None:
        name = note_signal(signum)
        if stop.requested:
            raise KeyboardInterrupt(f"second {name}")
        stop.request(name)

    with handled_by(handler, STOP_SIGNALS):
        yield stop


@contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """While inside: every stop signal raises KeyboardInterrupt naming it, as Ctrl-C does, so `finally` blocks
    (safe state, run index) run instead of the process dying where it stands (SIGTERM, SIGHUP and SIGQUIT would
    otherwise end it at once with the fans running)."""
    def handler(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(note_signal(signum))

    with handled_by(handler, STOP_SIGNALS):
        yield


_deferring = False  # signals are being deferred (only the main thread installs handlers, so one flag will do)


@contextmanager
def signals_deferred(what: str = "the chamber is being made safe") -> Iterator[list[str]]:
    """While inside (main thread): stop signals are recorded instead of raised, so the safe state is not cut
    short the way the command was; the first one logs one line saying `what` is finishing first. Yields the list
    of signal names received; the caller decides what they mean once done (a stop). Nested use defers to the
    outermost. Elsewhere (no signals there) it only yields the empty list."""
    global _deferring
    received: list[str] = []

    def handler(signum: int, _frame: Any) -> None:
        name = note_signal(signum)
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
