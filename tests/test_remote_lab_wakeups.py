"""Issue 32: an idle lab sleeps on wake-ups instead of polling. A change wakes its waiters (threads, coroutines, and
on PostgreSQL other processes' waiters through LISTEN/NOTIFY); a waiter that read the generation before looking
at the database never misses a change made after. Asserted as events (woken, not timed out, with a fallback far
longer than the test), never as durations; the idle figures are bench_lab's."""

from __future__ import annotations

import asyncio
import threading

from postgres_server import fresh_postgres_db, postgres_server  # noqa: F401  (fixtures)
from protocols.remote_lab import store
from protocols.remote_lab.wakeups import PostgresWakeups, Wakeups, wakeups_for

LONG = 120.0  # a fallback no test waits out: returning True means woken


def test_a_thread_is_woken_by_a_change_after_it_looked_and_not_by_another_topic():
    wake = Wakeups(fallback_s=LONG)
    since = wake.generation("chamber:a")
    wake.notify("chamber:b")
    assert not wake.wait("chamber:a", since, timeout=0.0)  # another topic's change is not ours
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(wake.wait("chamber:a", since)))
    waiter.start()
    wake.notify("chamber:a")
    waiter.join(30)
    assert woken == [True]
    assert wake.wait("chamber:a", since, timeout=0.0)  # a change before the wait is not lost


def test_a_stop_ends_a_sleeping_waiter():
    wake, stop = Wakeups(fallback_s=LONG), threading.Event()
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(wake.wait("chamber:a", 0, stop=stop)))
    waiter.start()
    stop.set()
    waiter.join(30)
    assert woken == [False] and not waiter.is_alive()


def test_a_coroutine_is_woken_from_another_thread_without_holding_one():
    wake = Wakeups(fallback_s=LONG)

    async def main() -> bool:
        since = wake.generation("call:7")
        threading.Timer(0.05, wake.notify, args=("call:7",)).start()
        return await wake.wait_async("call:7", since)

    assert asyncio.run(main()) is True


def test_postgres_notify_wakes_a_waiter_of_another_engine(fresh_postgres_db):
    api_engine, worker_engine = store.open_store(fresh_postgres_db), store.open_store(fresh_postgres_db)
    api, worker = wakeups_for(api_engine, fallback_s=LONG), wakeups_for(worker_engine, fallback_s=LONG)
    try:
        assert isinstance(worker, PostgresWakeups) and worker.listening.wait(30)
        since = worker.generation("chamber:wt-1")
        woken: list[bool] = []
        waiter = threading.Thread(target=lambda: woken.append(worker.wait("chamber:wt-1", since)))
        waiter.start()
        api.notify("chamber:wt-1")  # another process's NOTIFY, as the API's after a submission
        waiter.join(60)
        assert woken == [True]
    finally:
        api.close()
        worker.close()
        api_engine.dispose()
        worker_engine.dispose()
