"""The first Remote Lab schema (issue 25; as `metadata.create_all` made it before issue 32), table for table.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lab_users",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("password_hash", sa.Text, nullable=False),
        sa.Column("created_on", sa.Float, nullable=False),
        sa.Column("max_queued", sa.Integer, nullable=True),
    )
    op.create_table(
        "lab_experiments",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("experiment_id", sa.String(40), nullable=False, unique=True),
        sa.Column("user_id", sa.String(64), nullable=False, index=True),
        sa.Column("chamber_id", sa.String(64), nullable=False),
        sa.Column("config", sa.String(64), nullable=False),
        sa.Column("tag", sa.String(200), nullable=True),
        sa.Column("instructions", sa.Text, nullable=False),
        sa.Column("total_instructions", sa.Integer, nullable=False),
        sa.Column("current_instruction", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("submitted_on", sa.Float, nullable=False),
        sa.Column("started_on", sa.Float, nullable=True),
        sa.Column("finished_on", sa.Float, nullable=True),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("n_observations", sa.Integer, nullable=False),
        sa.Column("csv_header", sa.Text, nullable=True),
        sa.Column("zip_data", sa.LargeBinary, nullable=True),
        sa.Column("checksum", sa.String(64), nullable=True),
        sa.Column("download_token", sa.String(64), nullable=True),
        sa.Column("scheduler_id", sa.String(200), nullable=True),
        sa.Index("ix_lab_experiments_queue", "chamber_id", "status", "seq"),
    )
    op.create_table(
        "lab_experiment_rows",
        sa.Column("experiment_id", sa.String(40), primary_key=True),
        sa.Column("chunk", sa.Integer, primary_key=True),
        sa.Column("n_rows", sa.Integer, nullable=False),
        sa.Column("csv_text", sa.Text, nullable=False),
    )
    op.create_table(
        "lab_chambers",
        sa.Column("chamber_id", sa.String(64), primary_key=True),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("heartbeat_at", sa.Float, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
    )
    op.create_table(
        "lab_sessions",
        sa.Column("session_id", sa.String(40), primary_key=True),
        sa.Column("chamber_id", sa.String(64), nullable=False, index=True),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("config", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_on", sa.Float, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
    )
    op.create_table(
        "lab_session_calls",
        sa.Column("call_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(40), nullable=False),
        sa.Column("chamber_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("instructions", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_on", sa.Float, nullable=False),
        sa.Column("result_csv", sa.Text, nullable=True),
        sa.Column("error_status", sa.Integer, nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Index("ix_lab_session_calls_pending", "chamber_id", "state", "call_id"),
    )


def downgrade() -> None:
    for table in ("lab_session_calls", "lab_sessions", "lab_chambers", "lab_experiment_rows", "lab_experiments",
                  "lab_users"):
        op.drop_table(table)
