"""The lab's durable state on an existing engine: users, the experiment queue, rows, chamber leases, sessions.

Why SQLAlchemy Core on SQLite or PostgreSQL and no home-made queue: one host keeps everything in one SQLite file;
a lab spread over hosts shares one PostgreSQL server, whose row locks do the claiming (`SELECT ... FOR UPDATE SKIP
LOCKED`: two workers never take one experiment, a worker never waits on another's lock). Hosts share the database,
not a disk, so rows and result zips travel through it. Every change is one transaction; a state change is
conditional on the state it expects (`UPDATE ... WHERE status = 'QUEUED'`), so a racing writer finds no row rather
than overwriting. Time is passed in (`clock`), never read here, so tests and the reaper agree on "stale".
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

metadata = sa.MetaData()

users = sa.Table(
    "lab_users", metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("password_hash", sa.Text, nullable=False),
    sa.Column("created_on", sa.Float, nullable=False),
    sa.Column("max_queued", sa.Integer, nullable=True),  # None: the lab's default
)

experiments = sa.Table(
    "lab_experiments", metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),  # queue order
    sa.Column("experiment_id", sa.String(40), nullable=False, unique=True),
    sa.Column("user_id", sa.String(64), nullable=False, index=True),
    sa.Column("chamber_id", sa.String(64), nullable=False),
    sa.Column("config", sa.String(64), nullable=False),
    sa.Column("tag", sa.String(200), nullable=True),
    sa.Column("instructions", sa.Text, nullable=False),  # JSON list of the instruction strings as accepted
    sa.Column("total_instructions", sa.Integer, nullable=False),
    sa.Column("current_instruction", sa.Integer, nullable=False, default=0),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("submitted_on", sa.Float, nullable=False),
    sa.Column("started_on", sa.Float, nullable=True),
    sa.Column("finished_on", sa.Float, nullable=True),
    sa.Column("worker_id", sa.String(200), nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("n_observations", sa.Integer, nullable=False, default=0),
    sa.Column("csv_header", sa.Text, nullable=True),
    sa.Column("zip_data", sa.LargeBinary, nullable=True),
    sa.Column("checksum", sa.String(64), nullable=True),
    sa.Column("download_token", sa.String(64), nullable=True),
    sa.Column("scheduler_id", sa.String(200), nullable=True),
    sa.Index("ix_lab_experiments_queue", "chamber_id", "status", "seq"),
)

experiment_rows = sa.Table(  # rows as they arrive (CSV lines, no header): a killed worker's rows are kept
    "lab_experiment_rows", metadata,
    sa.Column("experiment_id", sa.String(40), primary_key=True),
    sa.Column("chunk", sa.Integer, primary_key=True),
    sa.Column("n_rows", sa.Integer, nullable=False),
    sa.Column("csv_text", sa.Text, nullable=False),
)

chambers = sa.Table(  # one row per chamber: who serves it (the lease) and how it is
    "lab_chambers", metadata,
    sa.Column("chamber_id", sa.String(64), primary_key=True),
    sa.Column("worker_id", sa.String(200), nullable=True),
    sa.Column("heartbeat_at", sa.Float, nullable=True),
    sa.Column("status", sa.String(16), nullable=False, default="OFFLINE"),
    sa.Column("detail", sa.Text, nullable=True),
)

sessions = sa.Table(
    "lab_sessions", metadata,
    sa.Column("session_id", sa.String(40), primary_key=True),
    sa.Column("chamber_id", sa.String(64), nullable=False, index=True),
    sa.Column("user_id", sa.String(64), nullable=False),
    sa.Column("config", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # OPENING, OPEN, ENDED, FAILED
    sa.Column("created_on", sa.Float, nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
)

session_calls = sa.Table(  # what a session asks of its chamber's worker, and the answer, through the database
    "lab_session_calls", metadata,
    sa.Column("call_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(40), nullable=False),
    sa.Column("chamber_id", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # open | instructions
    sa.Column("instructions", sa.Text, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # PENDING, RUNNING, DONE, FAILED
    sa.Column("created_on", sa.Float, nullable=False),
    sa.Column("result_csv", sa.Text, nullable=True),
    sa.Column("error_status", sa.Integer, nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Index("ix_lab_session_calls_pending", "chamber_id", "state", "call_id"),
)

ACTIVE = ("RUNNING", "STOPPING")
FINAL = ("DONE", "FAILED", "CANCELED")


class StoreError(Exception):
    """A store operation that cannot be done as asked (a lease held by another live worker, an unknown row)."""


@dataclass(frozen=True)
class Claimed:
    """An experiment a worker has taken: what to run."""

    experiment_id: str
    chamber_id: str
    config: str
    instructions: list[str]
    user_id: str


def open_store(url: str) -> Engine:
    """An engine on `url` (sqlite:///PATH or postgresql://...), tables created if missing. SQLite gets WAL and a
    busy timeout, so the API's threads and the in-process workers write in turn instead of failing."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]  # psycopg 3, the maintained driver
    if url.startswith("sqlite"):
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
    with engine.begin() as db:
        if engine.dialect.name == "postgresql":  # processes starting together on a new database create it once
            db.exec_driver_sql("SELECT pg_advisory_xact_lock(2025122501)")
        metadata.create_all(db)
    return engine


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


# ------------------------------------------------------------------------------------------------ experiments
def submit(engine: Engine, *, user_id: str, chamber_id: str, config: str, instructions: Sequence[str],
           tag: str | None, now: float, scheduler_id: str, max_queued: int) -> str | None:
    """Queue an experiment; its id, or None when the user already has `max_queued` experiments waiting (counted in
    the same transaction as the insert)."""
    experiment_id = new_id("exp")
    with engine.begin() as db:  # the user's row written first: concurrent submissions of one user count in turn
        db.execute(users.update().where(users.c.name == user_id).values(name=users.c.name))
        waiting = db.scalar(sa.select(sa.func.count()).select_from(experiments).where(
            experiments.c.user_id == user_id, experiments.c.status == "QUEUED"))
        if waiting >= max_queued:
            return None
        db.execute(experiments.insert().values(
            experiment_id=experiment_id, user_id=user_id, chamber_id=chamber_id, config=config, tag=tag,
            instructions=json.dumps(list(instructions)), total_instructions=len(instructions), current_instruction=0,
            status="QUEUED", submitted_on=now, scheduler_id=scheduler_id, n_observations=0))
    return experiment_id


_PUBLIC = [c for c in experiments.c if c.name not in ("instructions", "zip_data", "csv_header", "download_token")]


def get_experiment(engine: Engine, experiment_id: str) -> dict[str, Any] | None:
    with engine.connect() as db:
        row = db.execute(sa.select(*_PUBLIC, experiments.c.download_token).where(
            experiments.c.experiment_id == experiment_id)).mappings().first()
    return dict(row) if row else None


def user_experiments(engine: Engine, user_id: str) -> list[dict[str, Any]]:
    with engine.connect() as db:
        rows = db.execute(sa.select(*_PUBLIC, experiments.c.download_token).where(
            experiments.c.user_id == user_id).order_by(experiments.c.seq)).mappings().all()
    return [dict(r) for r in rows]


def queue_of(engine: Engine, chamber_id: str) -> list[dict[str, Any]]:
    """The chamber's running experiment (position 0) and its queued ones (1, 2, ... in submission order)."""
    with engine.connect() as db:
        rows = db.execute(sa.select(*_PUBLIC).where(
            experiments.c.chamber_id == chamber_id,
            experiments.c.status.in_(("QUEUED", *ACTIVE))).order_by(experiments.c.seq)).mappings().all()
    out, position = [], 0
    for row in rows:
        item = dict(row)
        if item["status"] in ACTIVE:
            item["position"] = 0
        else:
            position += 1
            item["position"] = position
        out.append(item)
    return out


def cancel(engine: Engine, experiment_id: str, now: float) -> str | None:
    """Cancel: a queued experiment ends CANCELED at once; a running one is asked to stop (STOPPING: its worker
    stops after the current row and keeps what it measured). Returns the new status, None if already final."""
    with engine.begin() as db:
        done = db.execute(experiments.update().where(
            experiments.c.experiment_id == experiment_id, experiments.c.status == "QUEUED").values(
            status="CANCELED", finished_on=now, reason="canceled before it started")).rowcount
        if done:
            return "CANCELED"
        asked = db.execute(experiments.update().where(
            experiments.c.experiment_id == experiment_id, experiments.c.status == "RUNNING").values(
            status="STOPPING")).rowcount
        return "STOPPING" if asked else None


def claim_next(engine: Engine, chamber_id: str, worker_id: str, now: float) -> Claimed | None:
    """Take the chamber's oldest queued experiment (RUNNING, this worker's), or None. On PostgreSQL the row is
    locked with FOR UPDATE SKIP LOCKED; on both engines the update is conditional on QUEUED."""
    with engine.begin() as db:
        holder = db.scalar(sa.select(chambers.c.worker_id).where(chambers.c.chamber_id == chamber_id))
        if holder != worker_id:  # a worker whose lease was taken over claims nothing more
            return None
        row = db.execute(sa.select(experiments.c.seq, experiments.c.experiment_id, experiments.c.config,
                                   experiments.c.instructions, experiments.c.user_id).where(
            experiments.c.chamber_id == chamber_id, experiments.c.status == "QUEUED").order_by(
            experiments.c.seq).limit(1).with_for_update(skip_locked=True)).first()
        if row is None:
            return None
        taken = db.execute(experiments.update().where(
            experiments.c.seq == row.seq, experiments.c.status == "QUEUED").values(
            status="RUNNING", started_on=now, worker_id=worker_id)).rowcount
        if not taken:
            return None
    return Claimed(row.experiment_id, chamber_id, row.config, json.loads(row.instructions), row.user_id)


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


def zip_of(engine: Engine, experiment_id: str, token: str) -> tuple[bytes, str] | None:
    """The zip and its checksum, if `token` is the experiment's download token."""
    with engine.connect() as db:
        row = db.execute(sa.select(experiments.c.zip_data, experiments.c.checksum, experiments.c.download_token).where(
            experiments.c.experiment_id == experiment_id)).first()
    if row is None or row.zip_data is None or not secrets.compare_digest(row.download_token or "", token):
        return None
    return bytes(row.zip_data), row.checksum


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


# ------------------------------------------------------------------------------------------------ sessions
def open_session(engine: Engine, *, chamber_id: str, user_id: str, config: str, now: float) -> tuple[str, int]:
    """A new session (OPENING) and its `open` call for the chamber's worker; (session id, call id)."""
    session_id = new_id("ses")
    with engine.begin() as db:
        db.execute(sessions.insert().values(session_id=session_id, chamber_id=chamber_id, user_id=user_id,
                                            config=config, state="OPENING", created_on=now))
        call = db.execute(session_calls.insert().values(
            session_id=session_id, chamber_id=chamber_id, kind="open", instructions="[]", state="PENDING",
            created_on=now)).inserted_primary_key[0]
    return session_id, int(call)


def get_session(engine: Engine, session_id: str) -> dict[str, Any] | None:
    with engine.connect() as db:
        row = db.execute(sa.select(sessions).where(sessions.c.session_id == session_id)).mappings().first()
    return dict(row) if row else None


def add_call(engine: Engine, session_id: str, chamber_id: str, instructions: Sequence[str], now: float) -> int | None:
    """Queue a session's instructions for its worker; None when a call of this session is still unanswered."""
    with engine.begin() as db:
        busy = db.scalar(sa.select(sa.func.count()).select_from(session_calls).where(
            session_calls.c.session_id == session_id, session_calls.c.state.in_(("PENDING", "RUNNING"))))
        if busy:
            return None
        return int(db.execute(session_calls.insert().values(
            session_id=session_id, chamber_id=chamber_id, kind="instructions",
            instructions=json.dumps(list(instructions)), state="PENDING", created_on=now)).inserted_primary_key[0])


def next_call(engine: Engine, chamber_id: str) -> dict[str, Any] | None:
    """The chamber's oldest unanswered call, taken (RUNNING) by the caller."""
    with engine.begin() as db:
        row = db.execute(sa.select(session_calls).where(
            session_calls.c.chamber_id == chamber_id, session_calls.c.state == "PENDING").order_by(
            session_calls.c.call_id).limit(1).with_for_update(skip_locked=True)).mappings().first()
        if row is None:
            return None
        taken = db.execute(session_calls.update().where(session_calls.c.call_id == row["call_id"],
                                                        session_calls.c.state == "PENDING").values(
            state="RUNNING")).rowcount
    return dict(row) if taken else None


def answer_call(engine: Engine, call_id: int, *, result_csv: str | None = None, error_status: int | None = None,
                error_message: str | None = None) -> bool:
    """Answer a call the worker took; False when the API gave up on it meanwhile (its answer stands)."""
    state = "FAILED" if error_status else "DONE"
    with engine.begin() as db:
        return bool(db.execute(session_calls.update().where(
            session_calls.c.call_id == call_id, session_calls.c.state == "RUNNING").values(
            state=state, result_csv=result_csv, error_status=error_status, error_message=error_message)).rowcount)


def call_of(engine: Engine, call_id: int) -> dict[str, Any] | None:
    with engine.connect() as db:
        row = db.execute(sa.select(session_calls).where(session_calls.c.call_id == call_id)).mappings().first()
    return dict(row) if row else None


def fail_call(engine: Engine, call_id: int, status: int, message: str) -> bool:
    """Fail a call nobody answered (its worker is gone); False when a worker answered it meanwhile."""
    with engine.begin() as db:
        return bool(db.execute(session_calls.update().where(
            session_calls.c.call_id == call_id, session_calls.c.state.in_(("PENDING", "RUNNING"))).values(
            state="FAILED", error_status=status, error_message=message)).rowcount)


def set_session_state(engine: Engine, session_id: str, state: str, reason: str | None = None) -> None:
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.session_id == session_id).values(state=state, reason=reason))


def activate_session(engine: Engine, session_id: str, chamber_id: str) -> None:
    """The session holds the chamber now: every other open session of that chamber ends (taken over)."""
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.chamber_id == chamber_id, sessions.c.state == "OPEN",
                                           sessions.c.session_id != session_id).values(
            state="ENDED", reason=f"another session ({session_id}) took chamber {chamber_id}"))
        db.execute(sessions.update().where(sessions.c.session_id == session_id).values(state="OPEN"))


def end_sessions_of(engine: Engine, chamber_id: str, reason: str) -> None:
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.chamber_id == chamber_id,
                                           sessions.c.state.in_(("OPEN", "OPENING"))).values(state="ENDED",
                                                                                            reason=reason))
        db.execute(session_calls.update().where(session_calls.c.chamber_id == chamber_id,
                                                session_calls.c.state.in_(("PENDING", "RUNNING"))).values(
            state="FAILED", error_status=409, error_message=reason))


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.01,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Any:
    """Poll `predicate` until it returns something truthy or `timeout` passes (then its last value)."""
    deadline = clock() + timeout
    while True:
        value = predicate()
        if value or clock() >= deadline:
            return value
        sleep(min(interval, max(0.0, deadline - clock())))
        interval = min(interval * 1.5, 0.1)
