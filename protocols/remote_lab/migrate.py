"""The lab database's schema revision: create a new database at the newest, refuse to serve any other, upgrade one.

Why Alembic (shipped in the package, protocols/remote_lab/migrations/): a lab holds experiments, zips and accounts
that outlive the code; tables made by `create_all` cannot change, so the next column would break every lab with
data. Each revision is a small module; `chamberlab lab migrate` runs them in one transaction per revision.

The rules: an empty database is created at the newest revision (by whichever process comes first: a PostgreSQL
advisory lock, or an flock on the SQLite file, lets the others wait and find it made). A database at another
revision is refused by `lab serve`, `lab worker` and `lab user` in one line naming `chamberlab lab migrate` (a
server never changes the schema under another host's worker). A database made before revisions existed (the
tables of revision 0001 and no version table) is recognised by its tables and stamped 0001 before upgrading.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Any, Iterator

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

VERSION_TABLE = "lab_alembic_version"
FIRST = "0001"
FIRST_TABLES = {"lab_users", "lab_experiments", "lab_experiment_rows", "lab_chambers", "lab_sessions",
                "lab_session_calls"}
"""The tables of revision 0001: a database holding exactly these and no version table was made before revisions."""
ADVISORY_LOCK = 2025122501


class SchemaMismatch(RuntimeError):
    """A lab database at another schema revision than this code's (one line: where it is, what is needed)."""


def _config(connection: Any) -> Config:
    config = Config()
    config.set_main_option("script_location", "protocols.remote_lab:migrations")
    config.attributes["connection"] = connection
    return config


def head() -> str:
    return ScriptDirectory.from_config(_config(None)).get_current_head() or FIRST


def current(connection: Any) -> str | None:
    """The database's revision: from its version table; FIRST for tables made before revisions; None when empty."""
    revision = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()
    if revision is not None:
        return revision
    tables = set(sa.inspect(connection).get_table_names())
    if FIRST_TABLES <= tables:
        return FIRST
    return None


@contextlib.contextmanager
def _schema_lock(engine: Engine) -> Iterator[Any]:
    """One process at a time sets up a schema: the others wait, then find it made."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as db:
            db.exec_driver_sql(f"SELECT pg_advisory_xact_lock({ADVISORY_LOCK})")
            yield db
        return
    path = engine.url.database  # a lock file beside it: a descriptor of the database itself, once closed, would
    handle = None  # drop SQLite's own POSIX locks held by this process
    if path and path != ":memory:":
        handle = os.open(f"{path}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        with engine.begin() as db:
            yield db
    finally:
        if handle is not None:
            os.close(handle)  # releases the flock


def _where(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def ensure_schema(engine: Engine) -> None:
    """Create an empty database at the newest revision; SchemaMismatch for one at any other revision."""
    wanted = head()
    with _schema_lock(engine) as db:
        found = current(db)
        if found is None:
            command.upgrade(_config(db), "head")
            return
    if found != wanted:
        made = " (made before schema revisions existed)" if found == FIRST else ""
        raise SchemaMismatch(f"the lab database {_where(engine)} is at schema revision {found}{made}; this chamberlab "
                             f"needs {wanted}: run `chamberlab lab migrate` with the same --db/--data first (it "
                             "upgrades in place and keeps every experiment, zip and account)")


def migrate(engine: Engine) -> dict[str, Any]:
    """Upgrade the database in place to the newest revision (stamping an unversioned first-lab database 0001
    first); returns where it was and where it is."""
    wanted = head()
    with _schema_lock(engine) as db:
        found = current(db)
        if found == FIRST and MigrationContext.configure(
                db, opts={"version_table": VERSION_TABLE}).get_current_revision() is None:
            command.stamp(_config(db), FIRST)
        command.upgrade(_config(db), "head")
    return {"database": _where(engine), "from": found, "to": wanted,
            "changed": found != wanted}


def migrate_text(data: dict[str, Any]) -> str:
    if not data["changed"]:
        return f"the lab database {data['database']} is at schema revision {data['to']} already"
    was = "empty" if data["from"] is None else f"revision {data['from']}"
    return f"upgraded the lab database {data['database']} from {was} to revision {data['to']}"
