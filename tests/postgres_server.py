"""A PostgreSQL server for the tests of the Remote Lab spread over hosts, or a skip that says why there is none.

Why a helper and not a fixture file of its own: the lab's multi-host rules (SKIP LOCKED claims, leases shared by
processes) only exist on PostgreSQL, which SQLite cannot stand in for. CI starts a server and hands its URL over in
CHAMBERLAB_TEST_POSTGRES_URL (.ci/run); a developer's `make test` with Debian's `postgresql` binaries installed
gets a throwaway private cluster started here (its own temp folder, a free port on 127.0.0.1, a password), so it
never touches a server already running on 5432. Each test gets a database of its own (`fresh_postgres_db`), so
tests and xdist workers sharing one server never see each other's rows.
"""

from __future__ import annotations

import atexit
import ctypes
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ENV_URL = "CHAMBERLAB_TEST_POSTGRES_URL"
START_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1

_cached: str | None = None
_skip_reason: str | None = None
_server: "_PrivateCluster | None" = None


def _connect(url: str, dbname: str | None = None, timeout_s: int = 5):
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    url = url.replace("postgresql+psycopg://", "postgresql://", 1)
    params = conninfo_to_dict(url)
    if dbname is not None:
        params["dbname"] = dbname
    return psycopg.connect(make_conninfo(**params), connect_timeout=timeout_s, autocommit=True)


def _reachable(url: str) -> str | None:
    """None when a query answers at `url`, else why not."""
    try:
        with _connect(url) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_bin() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin holding initdb and postgres (Debian's layout)."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    found = [b for b in found if (b / "postgres").exists()]

    def version(b: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in b.parent.name.split(".") if x.isdigit())

    return max(found, key=version) if found else None


class _PrivateCluster:
    """initdb in a temp folder and `postgres` as our child (as the `postgres` user when we are root: the server
    refuses root); the child gets SIGQUIT if this process dies, so a killed test run leaves no server behind."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.user = "chamberlab"
        self.password = secrets.token_urlsafe(16)
        self.folder = Path(tempfile.mkdtemp(prefix="chamberlab-pg-"))
        self.data = self.folder / "data"
        self.proc: subprocess.Popen[bytes] | None = None
        self.uid: int | None = None
        self.gid: int | None = None
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.folder, ignore_errors=True)
                raise RuntimeError("running as root and there is no `postgres` user to run the server as "
                                   "(PostgreSQL refuses to run as root)") from None
            self.uid, self.gid = entry.pw_uid, entry.pw_gid
            os.chown(self.folder, self.uid, self.gid)

    def _as_owner(self) -> None:  # preexec_fn: drop to postgres, then die with the parent
        if self.uid is not None:
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT, 0, 0, 0)

    def start(self) -> str:
        pwfile = self.folder / "pw"
        pwfile.write_text(self.password + "\n", encoding="utf-8")
        if self.uid is not None:
            os.chown(pwfile, self.uid, self.gid)
        env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
        init = subprocess.run(
            [str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", self.user, f"--pwfile={pwfile}",
             "--auth=scram-sha-256", "-E", "UTF8", "--no-sync"],
            preexec_fn=self._as_owner, capture_output=True, env=env, timeout=120)
        pwfile.unlink()
        if init.returncode != 0:
            raise RuntimeError(f"initdb exited {init.returncode}: {init.stderr.decode(errors='replace')[-400:]}")
        last = ""
        for _ in range(3):  # a free port can be taken between the probe and the bind: try another
            port = _free_port()
            log = open(self.folder / "server.log", "ab")
            self.proc = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.data), "-p", str(port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.folder}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "max_connections=200"],
                preexec_fn=self._as_owner, stdout=log, stderr=subprocess.STDOUT, env=env)
            log.close()
            url = f"postgresql://{self.user}:{self.password}@127.0.0.1:{port}/postgres"
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _reachable(url) is None:
                    return url
                time.sleep(0.1)
            last = (self.folder / "server.log").read_text(errors="replace")[-400:]
            self.stop_server()
        raise RuntimeError(f"the private PostgreSQL server did not start: {last}")

    def stop_server(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        self.stop_server()
        shutil.rmtree(self.folder, ignore_errors=True)


def postgres_url() -> str:
    """A reachable PostgreSQL server's URL (its superuser or a role that may CREATE DATABASE), else pytest.skip
    saying why. The env's CHAMBERLAB_TEST_POSTGRES_URL when set; else a private cluster started once per process
    (stopped at exit) when Debian's server binaries are installed."""
    global _cached, _skip_reason, _server
    if _cached is not None:
        return _cached
    if _skip_reason is not None:
        pytest.skip(_skip_reason)
    given = os.environ.get(ENV_URL)
    if given:
        problem = _reachable(given)
        if problem:
            _skip_reason = f"{ENV_URL} is set but the server does not answer: {problem}"
            pytest.skip(_skip_reason)
        _cached = given
        return given
    bin_dir = _server_bin()
    if bin_dir is None:
        _skip_reason = (f"needs PostgreSQL: set {ENV_URL}=postgresql://USER:PASSWORD@HOST:PORT/DB, or install "
                        "Debian's `postgresql` (server binaries under /usr/lib/postgresql/*/bin) for a private one")
        pytest.skip(_skip_reason)
    try:
        cluster = _PrivateCluster(bin_dir)
        try:
            _cached = cluster.start()
        except BaseException:
            cluster.stop()
            raise
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        _skip_reason = f"could not start a private PostgreSQL server from {bin_dir}: {exc}"
        pytest.skip(_skip_reason)
    _server = cluster
    atexit.register(stop_private_server)
    return _cached


def stop_private_server() -> None:
    """Stop the private cluster this process started, if any (idempotent)."""
    global _server, _cached
    if _server is not None:
        _server.stop()
        _server, _cached = None, None


def _with_database(url: str, dbname: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=dbname).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The server's admin URL for the session; a private cluster started for it stops when the session ends."""
    url = postgres_url()
    try:
        yield url
    finally:
        stop_private_server()


@pytest.fixture
def fresh_postgres_db(postgres_server: str) -> Iterator[str]:
    """A URL (postgresql://...) to a database created for this test alone, dropped after it."""
    name = f"chamberlab_test_{secrets.token_hex(6)}"
    with _connect(postgres_server) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(postgres_server, name)
    finally:
        with _connect(postgres_server) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
