"""A lab a group shares (issue 32): accounts by id, planned chamber time, session activity, the audit table.

Every existing account gets an id, and every experiment and session of a name that still has an account is given
that account's id, so its owner keeps seeing it; an experiment of a name no longer in the lab gets an id of its own
(`gone-<name>`), which no account can ever have: a name added again does not inherit it. The planned seconds of an
experiment queued before this revision are unknown (NULL, counted as 0 by the per-user cap).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lab_users") as batch:
        batch.add_column(sa.Column("account_id", sa.String(40), nullable=True))
        batch.create_index("ix_lab_users_account_id", ["account_id"], unique=True)
    with op.batch_alter_table("lab_experiments") as batch:
        batch.add_column(sa.Column("account_id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("planned_s", sa.Float, nullable=True))
        batch.create_index("ix_lab_experiments_account", ["account_id", "seq"])
        batch.create_index("ix_lab_experiments_turns", ["chamber_id", "account_id", "started_on"])
    with op.batch_alter_table("lab_sessions") as batch:
        batch.add_column(sa.Column("account_id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("active_on", sa.Float, nullable=True))
    op.create_table(
        "lab_audit",
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
    db = op.get_bind()
    users = sa.table("lab_users", sa.column("name", sa.String), sa.column("account_id", sa.String))
    owned = [sa.table(t, sa.column("user_id", sa.String), sa.column("account_id", sa.String))
             for t in ("lab_experiments", "lab_sessions")]
    for (name,) in db.execute(sa.select(users.c.name)).all():
        account_id = f"acc-{secrets.token_hex(8)}"
        db.execute(users.update().where(users.c.name == name).values(account_id=account_id))
        for table in owned:
            db.execute(table.update().where(table.c.user_id == name).values(account_id=account_id))
    for table in owned:  # names without an account now: their own id, never an account's
        db.execute(table.update().where(table.c.account_id.is_(None)).values(
            account_id=sa.literal("gone-") + table.c.user_id))


def downgrade() -> None:
    op.drop_table("lab_audit")
    with op.batch_alter_table("lab_sessions") as batch:
        batch.drop_column("active_on")
        batch.drop_column("account_id")
    with op.batch_alter_table("lab_experiments") as batch:
        batch.drop_index("ix_lab_experiments_turns")
        batch.drop_index("ix_lab_experiments_account")
        batch.drop_column("planned_s")
        batch.drop_column("account_id")
    with op.batch_alter_table("lab_users") as batch:
        batch.drop_index("ix_lab_users_account_id")
        batch.drop_column("account_id")
