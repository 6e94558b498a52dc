"""The lab's durable state on an existing engine: users, the experiment queue, rows, chamber leases, sessions.

Why SQLAlchemy Core on SQLite or PostgreSQL and no home-made queue: one host keeps everything in one SQLite file;
a lab spread over hosts shares one PostgreSQL server, whose row locks do the claiming (`SELECT ... FOR UPDATE SKIP
LOCKED`: two workers never take one experiment, a worker never waits on another's lock). Hosts share the database,
not a disk, so rows and result zips travel through it. Every change is one transaction; a state change is
conditional on the state it expects (`UPDATE ... WHERE status = 'QUEUED'`), so a racing writer finds no row rather
than overwriting. Time is passed in (`clock`), never read here, so tests and the reaper agree on "stale".

The tables are in schema.py (built by the migrations, migrate.py); sessions and their calls in session_store.py;
the order a chamber takes its queue in is fair_queue.py's. An experiment belongs to an account id (the name is
shown, never the key), and its download link lives `download_ttl_s` after it ended and as long as its account.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from protocols.remote_lab import fair_queue

from protocols.remote_lab.schema import (audit, chambers, experiment_rows, experiments, metadata,  # noqa: F401
                                        session_calls, sessions, users)

ACTIVE = ("RUNNING", "STOPPING")
FINAL = ("DONE", "FAILED", "CANCELED")


class StoreError(Exception):
    """A store operation that cannot be done as asked (a lease held by another live worker, an unknown row)."""


class QueueFull(StoreError):
    """A user at one of their caps on queued work (experiments, or planned chamber seconds); the message says which."""


@dataclass(frozen=True)
class Claimed:
    """An experiment a worker has taken: what to run."""

    experiment_id: str
    chamber_id: str
    config: str
    instructions: list[str]
    user_id: str
    account_id: str | None = None


def open_store(url: str, *, ensure: bool = True) -> Engine:
    """An engine on `url` (sqlite:///PATH or postgresql://...); with `ensure`, an empty database is created at the
    newest schema revision and one at another revision refused (migrate.SchemaMismatch naming `lab migrate`).
    SQLite gets WAL and a busy timeout, so the API's threads and the in-process workers write in turn instead of
    failing, and its files are private to this account (files.private_sqlite)."""
    from protocols.remote_lab.files import private_sqlite
    from protocols.remote_lab.migrate import ensure_schema

    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]  # psycopg 3, the maintained driver
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database
        if path and path != ":memory:":
            private_sqlite(path)  # created 0600 before SQLite opens it: its -wal and -shm take its mode
        engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()
    else:
        engine = sa.create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    if ensure:
        ensure_schema(engine)
        if engine.dialect.name == "sqlite" and path and path != ":memory:":
            private_sqlite(path)  # the -wal and -shm the first connection made (and any an older lab left)
    return engine


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


# ------------------------------------------------------------------------------------------------ experiments
def submit(engine: Engine, *, user_id: str, chamber_id: str, config: str, instructions: Sequence[str],
           tag: str | None, now: float, scheduler_id: str, max_queued: int, account_id: str | None = None,
           planned_s: float | None = None, max_queued_s: float | None = None) -> str:
    """Queue an experiment; its id. QueueFull when the account already has `max_queued` experiments waiting, or
    when their planned chamber seconds with this one would pass `max_queued_s` (counted in the same transaction
    as the insert, after the account's row is written: concurrent submissions of one account count in turn)."""
    experiment_id = new_id("exp")
    owner = account_id or f"name-{user_id}"
    mine = experiments.c.account_id == owner
    with engine.begin() as db:
        db.execute(users.update().where(users.c.name == user_id).values(name=users.c.name))
        waiting, seconds = db.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(
            experiments.c.planned_s), 0.0)).where(mine, experiments.c.status == "QUEUED")).one()
        if waiting >= max_queued:
            raise QueueFull(f"you have {waiting} experiments queued, this lab's limit per user is {max_queued}; "
                            "wait for one to start or cancel one")
        if max_queued_s is not None and planned_s is not None and float(seconds) + planned_s > max_queued_s:
            raise QueueFull(f"your queued experiments plan {float(seconds):.0f} s of chamber time and this one "
                            f"{planned_s:.0f} s; this lab allows {max_queued_s:.0f} s queued per user: wait for "
                            "one to start or cancel one")
        db.execute(experiments.insert().values(
            experiment_id=experiment_id, user_id=user_id, account_id=owner, chamber_id=chamber_id, config=config,
            tag=tag, instructions=json.dumps(list(instructions)), total_instructions=len(instructions),
            current_instruction=0, status="QUEUED", submitted_on=now, scheduler_id=scheduler_id, n_observations=0,
            planned_s=planned_s))
    return experiment_id


_PUBLIC = [c for c in experiments.c if c.name not in ("instructions", "zip_data", "csv_header", "download_token",
                                                      "planned_s")]


def get_experiment(engine: Engine, experiment_id: str) -> dict[str, Any] | None:
    with engine.connect() as db:
        row = db.execute(sa.select(*_PUBLIC, experiments.c.download_token).where(
            experiments.c.experiment_id == experiment_id)).mappings().first()
    return dict(row) if row else None


def user_experiments(engine: Engine, account_id: str) -> list[dict[str, Any]]:
    with engine.connect() as db:
        rows = db.execute(sa.select(*_PUBLIC, experiments.c.download_token).where(
            experiments.c.account_id == account_id).order_by(experiments.c.seq)).mappings().all()
    return [dict(r) for r in rows]


def queue_of(engine: Engine, chamber_id: str) -> list[dict[str, Any]]:
    """The chamber's running experiment (position 0) and its queued ones (1, 2, ... in the order the chamber will
    run them: fair_queue)."""
    with engine.connect() as db:
        rows = [dict(r) for r in db.execute(sa.select(*_PUBLIC).where(
            experiments.c.chamber_id == chamber_id,
            experiments.c.status.in_(("QUEUED", *ACTIVE))).order_by(experiments.c.seq)).mappings().all()]
        queued = [r for r in rows if r["status"] == "QUEUED"]
        turns = fair_queue.last_turns(db, chamber_id, [r["account_id"] for r in queued])
    out = [{**r, "position": 0} for r in rows if r["status"] in ACTIVE]
    out += [{**r, "position": i} for i, r in enumerate(fair_queue.positions(queued, turns), start=1)]
    return out


def cancel(engine: Engine, experiment_id: str, now: float, reason: str = "canceled before it started") -> str | None:
    """Cancel: a queued experiment ends CANCELED at once; a running one is asked to stop (STOPPING: its worker
    stops after the current row and keeps what it measured). Returns the new status, None if already final."""
    with engine.begin() as db:
        done = db.execute(experiments.update().where(
            experiments.c.experiment_id == experiment_id, experiments.c.status == "QUEUED").values(
            status="CANCELED", finished_on=now, reason=reason)).rowcount
        if done:
            return "CANCELED"
        asked = db.execute(experiments.update().where(
            experiments.c.experiment_id == experiment_id, experiments.c.status == "RUNNING").values(
            status="STOPPING")).rowcount
        return "STOPPING" if asked else None


def cancel_account(engine: Engine, account_id: str, now: float, reason: str) -> dict[str, list[str]]:
    """Every queued experiment of the account CANCELED with `reason`, every running one asked to stop; their ids
    and chambers (to wake the workers)."""
    with engine.begin() as db:
        queued = db.execute(sa.select(experiments.c.experiment_id, experiments.c.chamber_id).where(
            experiments.c.account_id == account_id, experiments.c.status == "QUEUED")).all()
        running = db.execute(sa.select(experiments.c.experiment_id, experiments.c.chamber_id).where(
            experiments.c.account_id == account_id, experiments.c.status == "RUNNING")).all()
        db.execute(experiments.update().where(experiments.c.account_id == account_id,
                                              experiments.c.status == "QUEUED").values(
            status="CANCELED", finished_on=now, reason=reason))
        db.execute(experiments.update().where(experiments.c.account_id == account_id,
                                              experiments.c.status == "RUNNING").values(status="STOPPING"))
    return {"canceled": [r.experiment_id for r in queued], "stopping": [r.experiment_id for r in running],
            "chambers": sorted({r.chamber_id for r in [*queued, *running]})}


def claim_next(engine: Engine, chamber_id: str, worker_id: str, now: float) -> Claimed | None:
    """Take the chamber's next experiment by the fair queue's rule (RUNNING, this worker's), or None. One
    statement picks it; on PostgreSQL the row is locked with FOR UPDATE SKIP LOCKED (a row another claim holds is
    skipped, not waited for); on both engines the update is conditional on QUEUED."""
    with engine.begin() as db:
        holder = db.scalar(sa.select(chambers.c.worker_id).where(chambers.c.chamber_id == chamber_id))
        if holder != worker_id:  # a worker whose lease was taken over claims nothing more
            return None
        row = db.execute(sa.select(experiments.c.seq, experiments.c.experiment_id, experiments.c.config,
                                   experiments.c.instructions, experiments.c.user_id, experiments.c.account_id).where(
            experiments.c.chamber_id == chamber_id, experiments.c.status == "QUEUED").order_by(
            *fair_queue.claim_order(chamber_id)).limit(1).with_for_update(skip_locked=True)).first()
        if row is None:
            return None
        taken = db.execute(experiments.update().where(
            experiments.c.seq == row.seq, experiments.c.status == "QUEUED").values(
            status="RUNNING", started_on=now, worker_id=worker_id)).rowcount
        if not taken:
            return None
    return Claimed(row.experiment_id, chamber_id, row.config, json.loads(row.instructions), row.user_id,
                   row.account_id)


def has_queued(engine: Engine, chamber_id: str) -> bool:
    with engine.connect() as db:
        return db.scalar(sa.select(experiments.c.seq).where(experiments.c.chamber_id == chamber_id,
                                                            experiments.c.status == "QUEUED").limit(1)) is not None


def set_progress(engine: Engine, experiment_id: str, current: int) -> str:
    """Record the instruction being run (1-based); returns the status, so the worker sees a cancel (STOPPING)."""
    with engine.begin() as db:
        db.execute(experiments.update().where(experiments.c.experiment_id == experiment_id,
                                              experiments.c.status.in_(ACTIVE)).values(current_instruction=current))
        return db.scalar(sa.select(experiments.c.status).where(experiments.c.experiment_id == experiment_id))


def status_of(engine: Engine, experiment_id: str) -> str | None:
    with engine.connect() as db:
        return db.scalar(sa.select(experiments.c.status).where(experiments.c.experiment_id == experiment_id))


def set_header(engine: Engine, experiment_id: str, header: str) -> None:
    """The CSV header of the chamber that runs it, kept before any row: an experiment that measured nothing still
    downloads as a CSV with its columns (the client's pandas refuses a file without them)."""
    with engine.begin() as db:
        db.execute(experiments.update().where(experiments.c.experiment_id == experiment_id).values(csv_header=header))


def append_rows(engine: Engine, experiment_id: str, header: str, csv_text: str, n_rows: int) -> bool:
    """Keep a chunk of rows (CSV lines) the moment it arrives; the header is kept with the first chunk. False (and
    nothing kept) when the experiment is no longer running (ended by the reaper: its zip is made already)."""
    with engine.begin() as db:
        running = db.execute(experiments.update().where(
            experiments.c.experiment_id == experiment_id, experiments.c.status.in_(ACTIVE)).values(
            csv_header=header, n_observations=experiments.c.n_observations + n_rows)).rowcount
        if not running:
            return False
        chunk = db.scalar(sa.select(sa.func.count()).select_from(experiment_rows).where(
            experiment_rows.c.experiment_id == experiment_id))
        db.execute(experiment_rows.insert().values(experiment_id=experiment_id, chunk=chunk, n_rows=n_rows,
                                                   csv_text=csv_text))
    return True


def rows_of(engine: Engine, experiment_id: str) -> tuple[str | None, list[str], int]:
    """(header, CSV chunks in order, row count) of what an experiment measured so far."""
    with engine.connect() as db:
        header = db.scalar(sa.select(experiments.c.csv_header).where(experiments.c.experiment_id == experiment_id))
        chunks = db.execute(sa.select(experiment_rows.c.csv_text, experiment_rows.c.n_rows).where(
            experiment_rows.c.experiment_id == experiment_id).order_by(experiment_rows.c.chunk)).all()
    return header, [c.csv_text for c in chunks], sum(c.n_rows for c in chunks)


def finish(engine: Engine, experiment_id: str, *, status: str, now: float, reason: str | None,
           zip_data: bytes | None, checksum: str | None, from_status: Iterable[str] = ACTIVE,
           worker_id: str | None = None) -> bool:
    """End an experiment: status, reason, and its zip with the checksum of exactly those bytes, in one transaction
    (a zip is never stored without its checksum, nor a checksum without its zip). False when it was not in
    `from_status` any more (another writer ended it first)."""
    values: dict[str, Any] = {"status": status, "finished_on": now, "reason": reason}
    if zip_data is not None:
        values.update(zip_data=zip_data, checksum=checksum, download_token=secrets.token_urlsafe(24))
    condition = [experiments.c.experiment_id == experiment_id, experiments.c.status.in_(tuple(from_status))]
    if worker_id is not None:  # only while this worker still has it (the reaper ends a dead worker's run)
        condition.append(experiments.c.worker_id == worker_id)
    with engine.begin() as db:
        return bool(db.execute(experiments.update().where(*condition).values(**values)).rowcount)


def zip_of(engine: Engine, experiment_id: str, token: str, *, now: float | None = None,
           ttl_s: float | None = None) -> tuple[bytes, str] | None:
    """The zip and its checksum, if `token` is the experiment's download token, the link has not expired
    (`ttl_s` after the experiment ended, by `now`) and the account that owns it still exists."""
    with engine.connect() as db:
        row = db.execute(sa.select(experiments.c.zip_data, experiments.c.checksum, experiments.c.download_token,
                                   experiments.c.finished_on, users.c.name).select_from(experiments.outerjoin(
            users, users.c.account_id == experiments.c.account_id)).where(
            experiments.c.experiment_id == experiment_id)).first()
    if row is None or row.zip_data is None or not secrets.compare_digest(row.download_token or "", token):
        return None
    if row.name is None:  # its account was removed: its links died with it (the operator exports the data)
        return None
    if ttl_s is not None and now is not None and row.finished_on is not None and now > row.finished_on + ttl_s:
        return None
    return bytes(row.zip_data), row.checksum


def orphaned(engine: Engine, ttl: float) -> list[dict[str, Any]]:
    """RUNNING or STOPPING experiments whose chamber has no live lease by the database's clock, or whose lease
    is held by another worker than the one running them (one query: what the reaper ends)."""
    now = db_epoch(engine)
    alive = sa.and_(chambers.c.worker_id.is_not(None), chambers.c.heartbeat_at.is_not(None),
                    now - chambers.c.heartbeat_at <= ttl)
    with engine.connect() as db:
        rows = db.execute(sa.select(*_PUBLIC).select_from(experiments.join(
            chambers, chambers.c.chamber_id == experiments.c.chamber_id)).where(
            experiments.c.status.in_(ACTIVE), sa.or_(sa.not_(alive),
                                                     chambers.c.worker_id != experiments.c.worker_id))).mappings()
        return [dict(r) for r in rows]


def running_on(engine: Engine, chamber_id: str) -> list[dict[str, Any]]:
    with engine.connect() as db:
        return [dict(r) for r in db.execute(sa.select(*_PUBLIC).where(
            experiments.c.chamber_id == chamber_id, experiments.c.status.in_(ACTIVE))).mappings().all()]


# ------------------------------------------------------------------------------------------------ chambers
def register_chambers(engine: Engine, chamber_ids: Iterable[str]) -> None:
    """A row per chamber of the lab file (OFFLINE until a worker takes it); existing rows are kept. Processes
    starting together may insert the same row: the second insert's conflict is the row being there, as wanted."""
    with engine.connect() as db:
        known = set(db.scalars(sa.select(chambers.c.chamber_id)))
    for chamber_id in chamber_ids:
        if chamber_id in known:
            continue
        try:
            with engine.begin() as db:
                db.execute(chambers.insert().values(chamber_id=chamber_id, status="OFFLINE"))
        except sa.exc.IntegrityError:
            pass


def db_epoch(engine: Engine) -> Any:
    """The database server's clock in Unix seconds, as an SQL expression: leases are written and judged by one
    clock, so a worker host whose clock is off by seconds is neither reaped while alive nor kept while dead."""
    if engine.dialect.name == "postgresql":
        return sa.func.extract("epoch", sa.func.clock_timestamp())
    return (sa.func.julianday("now") - 2440587.5) * 86400.0


def database_now(engine: Engine) -> float:
    with engine.connect() as db:
        return float(db.scalar(sa.select(db_epoch(engine))))


def take_lease(engine: Engine, chamber_id: str, worker_id: str, ttl: float) -> dict[str, Any] | None:
    """Become the chamber's worker: granted when nobody holds it or the holder's heartbeat is older than `ttl`
    (by the database's clock). None when granted; else the live holder's row and its age (`age_s`)."""
    now = db_epoch(engine)
    with engine.begin() as db:
        got = db.execute(chambers.update().where(
            chambers.c.chamber_id == chamber_id,
            sa.or_(chambers.c.worker_id.is_(None), chambers.c.heartbeat_at < now - ttl,
                   chambers.c.worker_id == worker_id)).values(
            worker_id=worker_id, heartbeat_at=now, status="LOADING", detail=None)).rowcount
        if got:
            return None
        row = db.execute(sa.select(chambers, (now - chambers.c.heartbeat_at).label("age_s")).where(
            chambers.c.chamber_id == chamber_id)).mappings().first()
    if row is None:
        raise StoreError(f"chamber {chamber_id!r} is not registered in this lab's database")
    return dict(row)


def heartbeat(engine: Engine, chamber_id: str, worker_id: str, status: str | None = None,
              detail: str | None = None) -> bool:
    """Renew the lease (and say how the chamber is); False when another worker holds it now."""
    values: dict[str, Any] = {"heartbeat_at": db_epoch(engine)}
    if status is not None:
        values.update(status=status, detail=detail)
    with engine.begin() as db:
        return bool(db.execute(chambers.update().where(
            chambers.c.chamber_id == chamber_id, chambers.c.worker_id == worker_id).values(**values)).rowcount)


def heartbeat_many(engine: Engine, beats: Sequence[tuple[str, str, str | None, str | None]]) -> set[str]:
    """Renew several leases in one transaction ((chamber, worker, status, detail) each); the chambers whose lease
    another worker holds now."""
    lost: set[str] = set()
    if not beats:
        return lost
    now = db_epoch(engine)
    with engine.begin() as db:
        for chamber_id, worker_id, status, detail in beats:
            if not db.execute(chambers.update().where(chambers.c.chamber_id == chamber_id,
                                                      chambers.c.worker_id == worker_id).values(
                    heartbeat_at=now, status=status, detail=detail)).rowcount:
                lost.add(chamber_id)
    return lost


def release_lease(engine: Engine, chamber_id: str, worker_id: str) -> None:
    with engine.begin() as db:
        db.execute(chambers.update().where(chambers.c.chamber_id == chamber_id,
                                           chambers.c.worker_id == worker_id).values(
            worker_id=None, heartbeat_at=None, status="OFFLINE", detail="worker stopped"))


def chamber_rows(engine: Engine, ttl: float | None = None) -> dict[str, dict[str, Any]]:
    """Every chamber's row; with `ttl`, each says `alive`: a worker holds it with a heartbeat younger than `ttl`
    by the database's clock."""
    now = db_epoch(engine)
    with engine.connect() as db:
        rows = db.execute(sa.select(chambers, (now - chambers.c.heartbeat_at).label("age_s"))).mappings().all()
    out = {r["chamber_id"]: dict(r) for r in rows}
    for row in out.values():
        row["alive"] = (ttl is not None and row["worker_id"] is not None and row["age_s"] is not None
                        and row["age_s"] <= ttl)
    return out


