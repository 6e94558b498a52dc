"""The Remote Lab's workers under faults, on SQLite and emulated boards: a board lost mid-experiment, a full disk,
a worker that died mid-experiment, a cancel inside a long WAIT, a stop of the lab. Nothing measured is lost, nothing
runs twice, every zip matches its checksum, and the chamber is left safe.

The faults are real: the emulated board's own fault switches (simulator/board_faults.py) close its port mid-MSR,
and SQLite's page cap (PRAGMA max_page_count on the worker's connections) makes the database answer "database or
disk is full" exactly as a full disk does.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import threading
import time
import zipfile

import pytest
import sqlalchemy as sa

from chamber.driver import Chamber
from chamber.serial_backend import SerialBackend
from protocols.remote_lab import store
from protocols.remote_lab.accounts import Accounts
from protocols.remote_lab.lab_file import Lab, LabFile
from protocols.remote_lab.worker import ChamberWorker, WorkerRefused, reap
from simulator.board import running_board
from simulator.board_faults import BoardFaults
from chamber.testing import FAST_TIMING

from remote_lab_support import poll

LAB = Lab(LabFile.model_validate({"chambers": {"wt-1": {"board": "emulated:wt"}}}), "test lab")


def wait_until(predicate, timeout=20.0):
    return poll(predicate, timeout, "condition")


@pytest.fixture
def engine(tmp_path):
    engine = store.open_store(f"sqlite:///{tmp_path / 'lab.sqlite'}")
    store.register_chambers(engine, ["wt-1"])
    ACCOUNTS["ann"] = Accounts(engine, time.time).add("ann", "ann-password-1").account_id
    yield engine
    engine.dispose()


@contextlib.contextmanager
def serving(engine, board_holder, ttl=6.0, worker_id="w1"):
    """A worker for wt-1 on an emulated board with a stable path (so it can come back after vanishing)."""
    def open_chamber(stack):
        board = stack.enter_context(running_board("wt", "pty", stable_path=True))
        board_holder.append(board)
        chamber = Chamber(SerialBackend(board.url, timing=FAST_TIMING), backoff=(0.02, 0.05, 0.1)).connect()
        stack.callback(chamber.close)
        return chamber

    worker = ChamberWorker(engine, LAB, "wt-1", worker_id=worker_id, ttl=ttl, open_chamber=open_chamber)
    stop = threading.Event()
    thread = threading.Thread(target=worker.serve, args=(stop,), daemon=True)
    thread.start()
    wait_until(lambda: store.chamber_rows(engine)["wt-1"]["status"] == "READY")
    try:
        yield worker
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()


ACCOUNTS: dict[str, str] = {}


def submit(engine, instructions, user="ann"):
    return store.submit(engine, user_id=user, account_id=ACCOUNTS.get(user), chamber_id="wt-1", config="standard",
                        instructions=instructions, tag=None, now=time.time(), scheduler_id="test", max_queued=100)


def final(engine, experiment_id, timeout=30.0):
    return wait_until(lambda: (e := store.get_experiment(engine, experiment_id))["status"] in store.FINAL and e,
                      timeout)


def zip_rows(engine, row):
    data, checksum = store.zip_of(engine, row["experiment_id"], row["download_token"])
    assert hashlib.sha256(data).hexdigest() == checksum == row["checksum"]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        csv = archive.read(f"{row['experiment_id']}/observations.csv").decode()
    return csv.splitlines()[1:]


def test_a_board_lost_mid_experiment_fails_it_with_the_drivers_error_and_the_next_one_runs(engine):
    boards = []
    with serving(engine, boards):
        boards[0].faults = BoardFaults(vanish_after_rows=10)  # within the runner's 25-row chunks
        lost = submit(engine, ["SET,load_in,0.5", "MSR,5,0", "MSR,100,0"])  # the port closes 10 rows into the 2nd
        after = submit(engine, ["SET,load_in,0.25", "MSR,10,0"])
        row = final(engine, lost)
        assert row["status"] == "FAILED" and "LinkLost" in row["reason"]
        kept = zip_rows(engine, row)
        assert len(kept) == row["n_observations"] == 5  # the rows that arrived whole; none of the cut chunk
        second = final(engine, after)
        assert second["status"] == "DONE" and len(zip_rows(engine, second)) == 10
    assert store.chamber_rows(engine)["wt-1"]["worker_id"] is None  # the lease handed back


def test_a_full_disk_fails_the_experiment_without_a_zip_and_the_lab_goes_on(engine, tmp_path):
    boards = []
    with engine.connect() as db:  # room for a few hundred rows at most, then SQLITE_FULL as on a full disk
        pages = db.exec_driver_sql("PRAGMA page_count").scalar()
    capped = store.open_store(f"sqlite:///{tmp_path / 'lab.sqlite'}")

    @sa.event.listens_for(capped, "connect")
    def _cap(dbapi_connection, record):
        dbapi_connection.execute(f"PRAGMA max_page_count={pages + 12}")

    capped.dispose()  # connections made from here on carry the cap
    with serving(capped, boards):
        big = submit(engine, ["SET,load_in,0.5"] + ["MSR,100,0"] * 30)
        row = final(engine, big, timeout=60)
    assert row["status"] == "FAILED" and "full" in row["reason"]
    assert row["checksum"] is None or zip_rows(engine, row) is not None  # never a zip that fails its checksum
    with engine.connect() as db:
        stored = db.scalar(sa.select(sa.func.count()).select_from(store.experiment_rows))
    assert stored >= 1  # the rows stored before the disk filled are kept
    capped.dispose()


def age_lease(engine, chamber_id, seconds):
    """Make the chamber's heartbeat `seconds` old by the database's clock (the one that judges leases)."""
    with engine.begin() as db:
        db.execute(store.chambers.update().where(store.chambers.c.chamber_id == chamber_id).values(
            heartbeat_at=store.database_now(engine) - seconds))


def test_a_worker_that_died_mid_experiment_is_reaped_its_rows_kept_and_never_rerun(engine):
    experiment_id = submit(engine, ["MSR,5,0", "WAIT,100000"])
    assert store.take_lease(engine, "wt-1", "dead-worker", ttl=6) is None
    claimed = store.claim_next(engine, "wt-1", "dead-worker", time.time())
    store.append_rows(engine, claimed.experiment_id, "timestamp,config,counter", "1.0,standard,0\n", 1)
    store.set_progress(engine, claimed.experiment_id, 2)
    assert reap(engine, ttl=6) == []  # its heartbeat is fresh: alive, left alone
    age_lease(engine, "wt-1", 30)
    assert reap(engine, ttl=6) == [experiment_id]
    row = store.get_experiment(engine, experiment_id)
    assert row["status"] == "FAILED" and "dead-worker stopped mid-experiment" in row["reason"]
    assert "instruction 2 of 2" in row["reason"] and zip_rows(engine, row) == ["1.0,standard,0"]
    assert not store.append_rows(engine, experiment_id, "h", "2.0,standard,1\n", 1)  # a late row is not kept
    assert store.get_experiment(engine, experiment_id)["n_observations"] == 1  # the count matches the zip
    assert store.claim_next(engine, "wt-1", "w2", time.time()) is None  # not queued again (and w2 holds no lease)
    assert reap(engine, ttl=6) == []  # ended once


def test_a_worker_reaped_while_alive_stops_its_experiment_and_keeps_the_zip_as_reaped(engine):
    boards = []
    with serving(engine, boards) as worker:
        experiment_id = submit(engine, ["MSR,3,0", "WAIT,60000", "MSR,3,0"])
        wait_until(lambda: store.get_experiment(engine, experiment_id)["n_observations"] == 3)
        assert store.finish(engine, experiment_id, status="FAILED", now=time.time(), reason="reaped (test)",
                            zip_data=None, checksum=None)  # what the reaper does after a long heartbeat stall
        wait_until(lambda: worker.current is None, timeout=5)  # the heartbeat saw it: the WAIT was cut short
        row = store.get_experiment(engine, experiment_id)
        assert row["status"] == "FAILED" and row["reason"] == "reaped (test)" and row["n_observations"] == 3


def test_a_cancel_reaches_an_experiment_inside_a_long_wait(engine):
    boards = []
    with serving(engine, boards):
        experiment_id = submit(engine, ["MSR,3,0", "WAIT,60000", "MSR,3,0"])
        wait_until(lambda: store.get_experiment(engine, experiment_id)["n_observations"] == 3)
        assert store.cancel(engine, experiment_id, time.time()) == "STOPPING"
        row = final(engine, experiment_id, timeout=10)  # ended within 10 s: the heartbeat's check cut the 60 s WAIT
        assert row["status"] == "CANCELED" and len(zip_rows(engine, row)) == 3
        assert boards[0].firmware.variables["load_in"] == 0.0  # left in its safe state


def test_stopping_the_lab_mid_experiment_fails_it_honestly_and_hands_the_chamber_back_safe(engine):
    boards = []
    with serving(engine, boards):
        experiment_id = submit(engine, ["SET,load_in,0.7", "MSR,2,0", "WAIT,60000"])
        wait_until(lambda: store.get_experiment(engine, experiment_id)["n_observations"] == 2)
    row = store.get_experiment(engine, experiment_id)
    assert row["status"] == "FAILED" and "worker stopping" in row["reason"]
    assert boards[0].firmware.variables["load_in"] == 0.0


def test_a_live_worker_is_never_joined_by_a_second_one(engine):
    boards = []
    with serving(engine, boards):
        second = ChamberWorker(engine, LAB, "wt-1", worker_id="w2", ttl=6.0, open_chamber=lambda stack: None)
        with pytest.raises(WorkerRefused, match="served by worker w1"):
            second.take(sleep=lambda s: time.sleep(min(s, 1.5)))  # w1 renews its heartbeat while w2 waits
