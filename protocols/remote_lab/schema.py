"""The lab database's tables at the newest schema revision (protocols/remote_lab/migrations/ builds them).

Why a module of its own: the tables are what the migrations create and what every store module reads and writes;
keeping them apart from the functions that use them lets the migrations, the store, the sessions, the audit and the
fair queue share one definition. A test checks that `alembic upgrade head` gives exactly these tables, so a column
added here without a revision (or the reverse) fails there, not in a lab that holds data.

Who owns what: an experiment, a session and an audit line carry the owner's `account_id` (a new id for every
account ever added) beside the name it had, so a name removed and added again is a new account that sees nothing
of the old one, while an operator's export still shows who ran what.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

users = sa.Table(
    "lab_users", metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("password_hash", sa.Text, nullable=False),
    sa.Column("created_on", sa.Float, nullable=False),
    sa.Column("max_queued", sa.Integer, nullable=True),  # None: the lab's default
    sa.Column("account_id", sa.String(40), nullable=True),  # revision 0002; set for every account it adds
    sa.Index("ix_lab_users_account_id", "account_id", unique=True),
)

experiments = sa.Table(
    "lab_experiments", metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),  # submission order
    sa.Column("experiment_id", sa.String(40), nullable=False, unique=True),
    sa.Column("user_id", sa.String(64), nullable=False, index=True),  # the owner's name (shown; not the key)
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
    sa.Column("account_id", sa.String(40), nullable=True),  # revision 0002: the owner (the key)
    sa.Column("planned_s", sa.Float, nullable=True),  # revision 0002: planned chamber seconds (the fair caps)
    sa.Index("ix_lab_experiments_queue", "chamber_id", "status", "seq"),
    sa.Index("ix_lab_experiments_account", "account_id", "seq"),
    sa.Index("ix_lab_experiments_turns", "chamber_id", "account_id", "started_on"),
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
    sa.Column("account_id", sa.String(40), nullable=True),  # revision 0002: the owner
    sa.Column("active_on", sa.Float, nullable=True),  # revision 0002: its last call's end (idle since)
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

audit = sa.Table(  # revision 0002: who did what to which experiment, session or account, when, from where
    "lab_audit", metadata,
    sa.Column("audit_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("user_name", sa.String(64), nullable=True),
    sa.Column("account_id", sa.String(40), nullable=True),
    sa.Column("target", sa.String(64), nullable=True),
    sa.Column("address", sa.String(64), nullable=True),
    sa.Column("detail", sa.Text, nullable=True),
    sa.Index("ix_lab_audit_at", "at"),
    sa.Index("ix_lab_audit_account", "account_id", "at"),
)
