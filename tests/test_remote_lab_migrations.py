"""Issue 32: the lab database is versioned (Alembic, shipped in the package) and upgrades in place.

A database written the way the first Remote Lab wrote it (tests/remote_lab_schema_0001.py: its tables, frozen, made
with create_all, no version table) with accounts, experiments with zips and rows, sessions and calls is refused by
`lab serve` and the store in one line naming `chamberlab lab migrate`; `lab migrate` recognises it, stamps it 0001
and upgrades it; then nothing is lost (every row and value of the old columns), every account keeps its password
and sees its own experiments, their zips download with their checksums, and an experiment of a name that no longer
has an account belongs to nobody who can log in. On SQLite and on PostgreSQL. Revision 0001 is today's schema
exactly, and the newest revision is exactly the tables the code uses (schema.py).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from argon2 import PasswordHasher
from fastapi.testclient import TestClient

import remote_lab_schema_0001 as old
from postgres_server import fresh_postgres_db, postgres_server  # noqa: F401  (fixtures)
from protocols.remote_lab import migrate, store
from protocols.remote_lab.accounts import Accounts
from protocols.remote_lab.app import create_app
from protocols.remote_lab.lab_file import demo_lab
from protocols.remote_lab.schema import metadata as head_metadata
from protocols.remote_lab.results import build_zip

ROOT = Path(__file__).resolve().parents[1]
HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def old_lab(url: str) -> dict[str, list[dict]]:
    """A database as the first lab made it, with data in every table; returns the rows written, by table."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        old.metadata.create_all(engine)
        zips = {e: build_zip(e, "timestamp,config,counter", [f"{i}.5,standard,{i}\n"], 1, {"chamber_id": "wt-1"})
                for i, e in enumerate(["exp-ann-done", "exp-bob-done", "exp-gone-done"])}
        rows = {
            "lab_users": [{"name": n, "password_hash": HASHER.hash(f"{n}-password"), "created_on": 1.0 + i,
                           "max_queued": [None, 3][i]} for i, n in enumerate(["ann", "bob"])],
            "lab_experiments": [
                {"experiment_id": e, "user_id": u, "chamber_id": "wt-queue-1", "config": "standard", "tag": f"t-{e}",
                 "instructions": json.dumps(["MSR,1,0"]), "total_instructions": 1, "current_instruction": c,
                 "status": s, "submitted_on": 10.0 + i, "started_on": None if s == "QUEUED" else 20.0 + i,
                 "finished_on": 30.0 + i if s == "DONE" else None, "worker_id": None, "reason": None,
                 "n_observations": 1 if s == "DONE" else 0, "csv_header": "timestamp,config,counter",
                 "zip_data": zips[e][0] if e in zips else None, "checksum": zips[e][1] if e in zips else None,
                 "download_token": f"token-{e}" if e in zips else None, "scheduler_id": "old-lab"}
                for i, (e, u, s, c) in enumerate([("exp-ann-done", "ann", "DONE", 1),
                                                  ("exp-bob-done", "bob", "DONE", 1),
                                                  ("exp-gone-done", "gone", "DONE", 1),
                                                  ("exp-ann-queued", "ann", "QUEUED", 0)])],
            "lab_experiment_rows": [{"experiment_id": "exp-ann-done", "chunk": 0, "n_rows": 1,
                                     "csv_text": "0.5,standard,0\n"}],
            "lab_chambers": [{"chamber_id": "wt-queue-1", "worker_id": None, "heartbeat_at": None,
                              "status": "OFFLINE", "detail": "worker stopped"}],
            "lab_sessions": [{"session_id": "ses-1", "chamber_id": "wt-rt-1", "user_id": "bob", "config": "standard",
                              "state": "ENDED", "created_on": 5.0, "reason": "taken over"}],
            "lab_session_calls": [{"session_id": "ses-1", "chamber_id": "wt-rt-1", "kind": "open", "instructions": "[]",
                                   "state": "DONE", "created_on": 5.0, "result_csv": None, "error_status": None,
                                   "error_message": None}],
        }
        with engine.begin() as db:
            for table, values in rows.items():
                db.execute(old.metadata.tables[table].insert(), values)
        return rows
    finally:
        engine.dispose()


def dump(engine, table: str, columns) -> list[dict]:
    t = head_metadata.tables[table]
    with engine.connect() as db:
        return [dict(r) for r in db.execute(sa.select(*[t.c[c] for c in columns]).order_by(*t.primary_key.columns)
                                            ).mappings()]


def check_upgraded(url: str, written: dict[str, list[dict]]) -> None:
    engine = store.open_store(url)  # at the newest revision now: opens without a word
    try:
        for table, rows in written.items():  # every row, every value of the old columns
            columns = list(rows[0])
            got = dump(engine, table, columns)
            key = [c.name for c in head_metadata.tables[table].primary_key.columns]
            if key == ["call_id"] or key == ["seq"]:
                got = [{c: r[c] for c in columns} for r in got]
            assert sorted(map(_canon, got)) == sorted(map(_canon, rows)), table
        accounts = Accounts(engine, time.time, HASHER)
        users = {u.name: u for u in accounts.list()}
        assert set(users) == {"ann", "bob"} and all(u.account_id.startswith("acc-") for u in users.values())
        assert accounts.check("ann", "ann-password") and accounts.check("bob", "bob-password")
        owner = {r["experiment_id"]: r["account_id"] for r in dump(engine, "lab_experiments",
                                                                 ["experiment_id", "account_id"])}
        assert owner["exp-ann-done"] == owner["exp-ann-queued"] == users["ann"].account_id
        assert owner["exp-bob-done"] == users["bob"].account_id and owner["exp-gone-done"] == "gone-gone"
        assert dump(engine, "lab_sessions", ["account_id"]) == [{"account_id": users["bob"].account_id}]
        app = create_app(engine, demo_lab(), accounts, scheduler_id="t", clock=lambda: 100.0)  # links live 7 days
        with TestClient(app) as http:
            mine = http.get("/v0/experiments", auth=("ann", "ann-password")).json()["experiments"]
            assert [e["experiment_id"] for e in mine] == ["exp-ann-done", "exp-ann-queued"]
            assert [e["position"] for e in http.get("/v0/queues/wt-queue-1", auth=("bob", "bob-password")).json()[
                "experiments"]] == [1]
            done = mine[0]
            data = http.get(done["download_url"].split("testserver", 1)[1])
            assert data.status_code == 200 and hashlib.sha256(data.content).hexdigest() == done["checksum"]
            gone = store.get_experiment(engine, "exp-gone-done")
            assert http.get(f"/v0/downloads/exp-gone-done/{gone['download_token']}").status_code == 403
            assert Accounts(engine, time.time, HASHER).add("gone", "gone-password").account_id != "gone-gone"
            assert http.get("/v0/experiments", auth=("gone", "gone-password")).json() == {"experiments": []}
    finally:
        engine.dispose()


def _canon(row: dict) -> str:
    return json.dumps({k: (v.hex() if isinstance(v, (bytes, memoryview)) else v) for k, v in row.items()},
                      sort_keys=True, default=str)


def test_an_sqlite_lab_of_the_first_schema_is_refused_then_upgraded_by_lab_migrate_with_nothing_lost(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    url = f"sqlite:///{data / 'lab.sqlite'}"
    written = old_lab(url)
    with pytest.raises(migrate.SchemaMismatch) as refused:
        store.open_store(url)
    assert "revision 0001 (made before schema revisions existed)" in str(refused.value)
    assert "run `chamberlab lab migrate`" in str(refused.value) and "\n" not in str(refused.value)
    serve = subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), "lab", "serve", "--data", str(data),
                            "--listen-port", "0"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert serve.returncode == 2 and "chamberlab lab migrate" in serve.stderr, serve.stderr
    assert len(serve.stderr.strip().splitlines()) == 1 and "Traceback" not in serve.stderr
    done = subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), "lab", "migrate", "--data", str(data)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "from revision 0001 to revision 0002" in done.stdout, done.stderr
    check_upgraded(url, written)
    again = subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), "lab", "migrate", "--data", str(data),
                            "--json"], capture_output=True, text=True, timeout=120)
    assert json.loads(again.stdout) == {"database": url, "from": "0002", "to": "0002", "changed": False}


def test_a_postgresql_lab_of_the_first_schema_upgrades_with_nothing_lost(fresh_postgres_db):
    written = old_lab(fresh_postgres_db)
    with pytest.raises(migrate.SchemaMismatch, match="lab migrate"):
        store.open_store(fresh_postgres_db)
    engine = store.open_store(fresh_postgres_db, ensure=False)
    try:
        assert migrate.migrate(engine)["from"] == "0001"
    finally:
        engine.dispose()
    check_upgraded(fresh_postgres_db, written)


def schema_of(engine) -> dict:
    inspector = sa.inspect(engine)
    out = {}
    for table in sorted(t for t in inspector.get_table_names() if t.startswith("lab_") and "alembic" not in t):
        out[table] = {
            "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            "pk": inspector.get_pk_constraint(table)["constrained_columns"],
            "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]))
                              for i in inspector.get_indexes(table)),
            "unique": sorted(tuple(u["column_names"]) for u in inspector.get_unique_constraints(table))}
    return out


def test_revision_0001_is_the_first_labs_schema_exactly(tmp_path):
    made = sa.create_engine(f"sqlite:///{tmp_path / 'create_all.sqlite'}")
    old.metadata.create_all(made)
    migrated = store.open_store(f"sqlite:///{tmp_path / 'alembic.sqlite'}", ensure=False)
    try:
        from alembic import command

        with migrated.begin() as db:
            command.upgrade(migrate._config(db), "0001")
        assert schema_of(migrated) == schema_of(made)
    finally:
        made.dispose()
        migrated.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_newest_revision_is_exactly_the_tables_the_code_uses(backend, tmp_path, request):
    url = f"sqlite:///{tmp_path / 'lab.sqlite'}" if backend == "sqlite" else request.getfixturevalue(
        "fresh_postgres_db")
    engine = store.open_store(url)
    try:
        with engine.connect() as db:
            context = MigrationContext.configure(db, opts={"version_table": migrate.VERSION_TABLE})
            assert context.get_current_revision() == migrate.head()
            assert compare_metadata(context, head_metadata) == []
    finally:
        engine.dispose()
