"""Alembic's environment for the lab database: always run on a connection the caller opened (protocols.remote_lab.
migrate), never from an alembic.ini, so the URL and its password come from where `lab migrate` got them."""

from __future__ import annotations

from alembic import context

from protocols.remote_lab.schema import metadata

VERSION_TABLE = "lab_alembic_version"

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
