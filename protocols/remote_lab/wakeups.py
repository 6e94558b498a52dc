"""Wake-ups: whoever changes the queue or answers a call wakes whoever waits for it, so an idle lab does not poll.

Why: an idle worker used to ask the database every 20 ms whether there was work (464 PostgreSQL transactions/s
for 5 idle chambers), and a real-time call held a server thread polling for its answer. Now a waiter reads the
topic's generation, looks at the database once, and sleeps until the generation moves or a slow fallback poll
comes due (a lost wake-up costs at most that long, never correctness: the database stays the truth).

Topics are strings: `chamber:<id>` (new work or a cancel for that chamber's worker), `call:<n>` (a real-time call
answered). Three kinds, chosen by how the lab's processes share its database:
- `Wakeups`: one process (SQLite, the API with every worker inside it): a threading.Condition for threads and
  asyncio events (woken with call_soon_threadsafe) for the API's coroutines.
- `PostgresWakeups`: processes on several hosts: `NOTIFY chamberlab_lab, '<topic>'` after the change commits, and
  one dedicated psycopg connection per process that LISTENs and hands each topic to the local waiters. When that
  connection is down, waiters fall back to their slow poll until it is back.
- `Wakeups(fallback_s=short)`: SQLite shared by several processes (`lab worker` beside `lab serve --no-workers`):
  no channel between them, so the fallback poll is the wake-up (kept short).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from typing import Any, Callable

log = logging.getLogger(__name__)

IDLE_POLL_S = 10.0
"""The slow fallback poll of a waiter whose wake-ups come through a channel (one process, or LISTEN/NOTIFY)."""
SHARED_FILE_POLL_S = 0.05
STOP_CHECK_S = 1.0
"""How often a sleeping waiter looks at its stop event (Workers.stop also wakes every worker at once)."""
"""The poll of a waiter on an SQLite file other processes change (no channel between the processes)."""
CHANNEL = "chamberlab_lab"


class Wakeups:
    """Generations per topic, waited on by threads and coroutines. `fallback_s`: the longest a waiter sleeps
    without a wake-up before it looks at the database again."""

    def __init__(self, fallback_s: float = IDLE_POLL_S):
        self.fallback_s = fallback_s
        self._generations: dict[str, int] = defaultdict(int)
        self._changed = threading.Condition()
        self._async: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = defaultdict(set)

    # ------------------------------------------------------------------ waking
    def notify(self, topic: str) -> None:
        """`topic` changed (call after the change is committed)."""
        self._local(topic)

    def notify_local(self, topic: str) -> None:
        """Wake this process's waiters only (a change no other process waits for)."""
        self._local(topic)

    def _local(self, topic: str) -> None:
        with self._changed:
            self._generations[topic] += 1
            waiting = list(self._async.get(topic, ()))
            self._changed.notify_all()
        for loop, event in waiting:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed: its waiter is gone
                pass

    # ------------------------------------------------------------------ waiting
    def generation(self, topic: str) -> int:
        with self._changed:
            return self._generations[topic]

    def wait(self, topic: str, since: int, timeout: float | None = None,
             stop: threading.Event | None = None) -> bool:
        """Sleep until `topic` moves past generation `since` (True), `timeout` (default the fallback poll) passes
        or `stop` is set (False)."""
        deadline = time.monotonic() + (self.fallback_s if timeout is None else timeout)
        with self._changed:
            while self._generations[topic] == since:
                left = deadline - time.monotonic()
                if left <= 0 or (stop is not None and stop.is_set()):
                    return False
                self._changed.wait(min(left, STOP_CHECK_S) if stop is not None else left)
            return True

    async def wait_async(self, topic: str, since: int, timeout: float | None = None) -> bool:
        """As `wait`, for a coroutine: no thread is held while it sleeps."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        key = (loop, event)
        with self._changed:
            if self._generations[topic] != since:
                return True
            self._async[topic].add(key)
        try:
            await asyncio.wait_for(event.wait(), self.fallback_s if timeout is None else timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            with self._changed:
                waiters = self._async.get(topic)
                if waiters is not None:
                    waiters.discard(key)
                    if not waiters:
                        del self._async[topic]

    def close(self) -> None:
        """Stop any channel this uses (nothing for the in-process kind)."""


class PostgresWakeups(Wakeups):
    """Wake-ups across processes through PostgreSQL's LISTEN/NOTIFY: `notify` sends one NOTIFY (its own short
    transaction on the lab's engine); a daemon thread holds one dedicated connection that LISTENs (no transactions
    while idle) and reconnects with growing pauses when the server goes away."""

    def __init__(self, engine: Any, connect: Callable[[], Any], fallback_s: float = IDLE_POLL_S):
        super().__init__(fallback_s)
        self.engine, self._connect = engine, connect
        self._stop = threading.Event()
        self.listening = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="lab-listen", daemon=True)
        self._thread.start()

    def notify(self, topic: str) -> None:
        import sqlalchemy as sa

        self._local(topic)  # this process's own waiters at once
        try:
            with self.engine.begin() as db:
                db.execute(sa.select(sa.func.pg_notify(CHANNEL, topic)))
        except Exception as exc:  # the database away: the waiters' fallback poll finds the change
            log.debug("NOTIFY %s failed: %s", topic, exc)

    def _listen(self) -> None:
        pause = 0.5
        while not self._stop.is_set():
            try:
                with self._connect() as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    pause = 0.5
                    while not self._stop.is_set():
                        for note in connection.notifies(timeout=1.0):
                            self._local(note.payload)
            except Exception as exc:  # the server restarted or the network dropped: reconnect
                log.debug("LISTEN connection lost: %s", exc)
            self.listening.clear()
            self._stop.wait(pause)
            pause = min(pause * 2, 10.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def wakeups_for(engine: Any, *, shared_file: bool = False, fallback_s: float = IDLE_POLL_S) -> Wakeups:
    """The wake-ups that fit how this process shares the lab's database (see the module docstring)."""
    if engine.dialect.name == "postgresql":
        import psycopg

        url = engine.url.set(drivername="postgresql")
        conninfo = url.render_as_string(hide_password=False)
        return PostgresWakeups(engine, lambda: psycopg.connect(conninfo, autocommit=True, connect_timeout=10),
                               fallback_s)
    return Wakeups(SHARED_FILE_POLL_S if shared_file else fallback_s)
