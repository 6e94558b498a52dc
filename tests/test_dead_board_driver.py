"""The driver's reconnect window (issue 31): a lost board is reconnected within a bounded time, each attempt is
said, and once the window is spent the chamber is lost for good: every later command fails at once naming when
the board was lost, until connect() or reset() brings it back.

A unit test of the driver's rule (a scripted backend on a manual clock: an attempt that costs a silent board's 18 s
costs 18 s of that clock, nothing is slept); the same rule against real boards is in test_dead_board_batch.py.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from chamber.driver import DEFAULT_BACKOFF, RECONNECT_WINDOW_S, BoardLost, Chamber
from chamber.errors import LinkLost
from firmware_bridge.rows import RowBlock
from firmware_bridge.session import BootInfo
from firmware_bridge.variables import layout_for
from support import ManualClock

WT = layout_for("wt")
LOST_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class ScriptedBackend:
    """A backend whose board answers until `die()`; then each connect costs `attempt_s` of the clock and fails,
    unless `revive()` was called. Counts connects and records SETs."""

    description = "scripted"

    def __init__(self, clock: ManualClock, attempt_s: float = 0.0) -> None:
        self.clock, self.attempt_s = clock, attempt_s
        self.alive, self.connects, self.sets = True, 0, []

    def connect(self) -> BootInfo:
        self.connects += 1
        if not self.alive:
            self.clock.advance(self.attempt_s)
            raise LinkLost("no Mk1 board answered")
        return BootInfo(WT.config, tuple(WT.names))

    def set(self, name: str, value: float) -> float:
        if not self.alive:
            raise LinkLost("port vanished")
        self.sets.append((name, value))
        return value

    def measure(self, n: int) -> RowBlock:
        if not self.alive:
            raise LinkLost("port vanished")
        return RowBlock(np.zeros((n, len(WT.names))), np.arange(n, dtype=np.float64))

    def reset(self) -> BootInfo:
        return self.connect()

    def close(self) -> None:
        pass

    def abandon(self) -> None:
        pass

    def counters(self) -> dict[str, int]:
        return {}

    def die(self) -> None:
        self.alive = False

    def revive(self) -> None:
        self.alive = True


def chamber(backend: ScriptedBackend, clock: ManualClock, said: list[str]) -> Chamber:
    c = Chamber(backend, sleep=clock.advance, clock=clock, now=lambda: LOST_AT).connect()
    c._observer = said.append  # noqa: SLF001 - what Chamber.observed installs, without its block
    return c


def lose(c: Chamber, backend: ScriptedBackend) -> None:
    """The board dies under a measurement: that measurement fails with LinkLost, as on a real link."""
    backend.die()
    with pytest.raises(LinkLost):
        c.measure(5)


def test_a_board_that_refuses_at_once_is_tried_every_attempt_then_lost_for_good():
    clock, said = ManualClock(), []
    backend = ScriptedBackend(clock, attempt_s=0.0)
    c = chamber(backend, clock, said)
    c.set("load_in", 0.5)
    lose(c, backend)
    began = backend.connects
    with pytest.raises(BoardLost) as lost:
        c.measure(5)
    n = len(DEFAULT_BACKOFF)
    assert backend.connects - began == n  # every attempt of the back-off fits in the window
    assert said[0] == f"board lost (port vanished), reconnecting (1/{n})"
    assert said[1:n] == [f"board lost, reconnecting ({i}/{n})" for i in range(2, n + 1)]
    assert said[n].startswith("board lost at 03:04:05 UTC, not reconnected within 30 s: could not reconnect after "
                              f"{n} attempts over {sum(DEFAULT_BACKOFF):.1f} s (last: no Mk1 board answered)")
    assert lost.value.lost_at == LOST_AT and lost.value.attempts == n
    # Lost for good: every later command fails at once, with the same reason, and no attempt is made.
    for command in (lambda: c.measure(3), lambda: c.set("load_in", 0), lambda: c.read_back()):
        with pytest.raises(BoardLost, match="board lost at 03:04:05 UTC"):
            command()
    assert backend.connects - began == n and len(said) == n + 1
    assert c.link_state() == ("down", c._lost)  # noqa: SLF001 - the health check says so too


def test_a_silent_board_costs_one_attempt_when_a_second_would_overrun_the_window():
    clock, said = ManualClock(), []
    backend = ScriptedBackend(clock, attempt_s=18.0)  # boot timeout 6 s + RST patience 12 s, as the serial backend
    c = chamber(backend, clock, said)
    lose(c, backend)
    began, start = backend.connects, clock()
    with pytest.raises(BoardLost, match=r"could not reconnect after 1 attempt over 18\.\d s"):
        c.measure(5)
    assert backend.connects - began == 1  # 0.05 + 18 + 0.1 + 18 > 30: the second would not fit
    assert clock() - start <= RECONNECT_WINDOW_S
    assert said == ["board lost (port vanished), reconnecting (1/8)", said[1]] and "not reconnected" in said[1]


@pytest.mark.parametrize("attempt_s, attempts", [(9.0, 3), (4.0, 6)])  # 9.05, 18.15, 27.35 | ... 21.55, 27.15
def test_attempts_stop_where_the_next_would_not_fit_in_the_window(attempt_s, attempts):
    clock, said = ManualClock(), []
    backend = ScriptedBackend(clock, attempt_s=attempt_s)
    c = chamber(backend, clock, said)
    lose(c, backend)
    began, start = backend.connects, clock()
    with pytest.raises(BoardLost):
        c.set("hatch", 10)
    assert backend.connects - began == attempts
    spent = clock() - start
    assert spent <= RECONNECT_WINDOW_S
    # ... and one more attempt as long as the longest would have overrun it
    assert spent + DEFAULT_BACKOFF[attempts] + attempt_s > RECONNECT_WINDOW_S


def test_a_board_back_within_the_window_is_reconnected_and_its_settings_re_applied():
    clock, said = ManualClock(), []
    backend = ScriptedBackend(clock)
    c = chamber(backend, clock, said)
    c.set_many({"load_in": 0.5, "hatch": 20})
    lose(c, backend)
    real_connect = backend.connect

    def back_on_third() -> BootInfo:
        if backend.connects >= 2:  # the third attempt finds the board back
            backend.revive()
        return real_connect()

    backend.connect = back_on_third  # type: ignore[method-assign]
    backend.connects, backend.sets = 0, []
    frame = c.measure(4)
    assert frame.reconnected and backend.connects == 3
    assert backend.sets == [("load_in", 0.5), ("hatch", 20.0)]
    assert said[-1] == "reconnected after 3 attempt(s); re-applied 2 setting(s)"


def test_connect_or_reset_brings_a_lost_board_back():
    clock, said = ManualClock(), []
    backend = ScriptedBackend(clock)
    c = chamber(backend, clock, said)
    lose(c, backend)
    with pytest.raises(BoardLost):
        c.measure(1)
    backend.revive()
    c.reset()  # the operator's recovery (POST /operator/recover) resets the board
    assert c.measure(2).values.shape == (2, len(WT.names)) and c.link_state() == ("up", None)
    lose(c, backend)
    with pytest.raises(BoardLost):
        c.measure(1)
    backend.revive()
    c.connect()
    assert c.measure(1).values.shape[0] == 1


def test_the_exit_paths_settle_still_tries_a_lost_board_once():
    """The safe state is still attempted on a board lost for good (Chamber.settle reopens the port once)."""
    clock, said = ManualClock(), []
    backend = ScriptedBackend(clock)
    c = chamber(backend, clock, said)
    lose(c, backend)
    with pytest.raises(BoardLost):
        c.measure(1)
    began = backend.connects
    with pytest.raises(LinkLost):
        c.settle()
    assert backend.connects - began == 1
    backend.revive()
    assert c.settle().how == "reset" and c.link_state() == ("up", None)


def test_the_observer_is_said_to_only_inside_its_block_and_a_failing_one_changes_nothing():
    clock = ManualClock()
    backend = ScriptedBackend(clock)
    c = Chamber(backend, sleep=clock.advance, clock=clock, now=lambda: LOST_AT).connect()
    heard: list[str] = []

    def broken(message: str) -> None:
        raise RuntimeError("a progress sink that fails")

    with c.observed(heard.append):
        with c.observed(broken):
            lose(c, backend)
            with pytest.raises(BoardLost):  # the broken sink did not decide anything
                c.measure(1)
        assert heard == []
    backend.revive()
    c.connect()
    lose(c, backend)
    with pytest.raises(BoardLost):
        c.measure(1)
    assert heard == []  # outside every block: nothing said


def test_a_backoff_without_attempts_is_refused():
    with pytest.raises(ValueError, match="at least one reconnection attempt"):
        Chamber(ScriptedBackend(ManualClock()), backoff=())
