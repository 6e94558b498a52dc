"""The Remote Lab's tables exactly as `protocols/remote_lab/store.py` defined them on main before issue 32 (commit
14746cd), when `open_store` made them with `metadata.create_all`: frozen here, so the upgrade test builds a database
the way that code did, whatever the schema becomes."""

from __future__ import annotations

import sqlalchemy as sa

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
