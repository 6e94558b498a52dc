"""`lab serve`, `lab worker` and `lab user`: the Remote Lab's processes and its accounts, as library calls.

Why here: which database (SQLite file under --data on one host, PostgreSQL for a lab spread over hosts), which
chambers get a worker in which process (on SQLite every chamber in the serving process; on PostgreSQL only those
named, so `lab worker` processes beside the other chambers own theirs), the demo lab and its account, and an
orderly stop (workers stop after the current row, leave their chambers safe, hand back their leases) are the
service's rules; the CLI passes plain values and renders what `on_ready` receives.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from chamber.remote_lab_backend import write_credentials
from protocols.remote_lab import store
from protocols.remote_lab.accounts import Accounts, AccountError, read_password_file
from protocols.remote_lab.lab_file import Lab, demo_lab, load_lab
from protocols.remote_lab.worker import LEASE_TTL_S, ChamberWorker, WorkerRefused, reap

log = logging.getLogger(__name__)
DEFAULT_DATA = Path("lab-data")
DEMO_USER = "demo"
STARTUP_S = 60.0
"""How long `lab serve`/`lab worker` wait for their boards to connect before saying they serve (a real board's
reset and announcement take seconds; a board that does not answer is refused by its worker well within this)."""


def database_url(db: str | None, data: Path | None) -> str:
    """--db as given (postgresql://... or sqlite:///...), else an SQLite file in --data (default ./lab-data)."""
    if db:
        if not db.startswith(("postgresql://", "postgresql+psycopg://", "sqlite:///")):
            raise ValueError(f"--db: expected postgresql://USER:PASSWORD@HOST/DB or sqlite:///PATH, got {db!r}")
        return db
    folder = Path(data or DEFAULT_DATA)
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder.resolve() / 'lab.sqlite'}"


def _lab(config: Path | None) -> Lab:
    return load_lab(config) if config is not None else demo_lab()


def _demo_account(accounts: Accounts, folder: Path) -> Path:
    """The demo lab's account: user `demo`, its password in `<data>/demo.credentials` in the client's format."""
    path = folder / "demo.credentials"
    if accounts.get(DEMO_USER) is not None and path.exists():
        return path
    if accounts.get(DEMO_USER) is not None:
        accounts.remove(DEMO_USER)
    password = secrets.token_urlsafe(12)
    accounts.add(DEMO_USER, password)
    folder.mkdir(parents=True, exist_ok=True)
    return write_credentials(path, DEMO_USER, password)


class Workers:
    """Worker threads, one per chamber; `stop()` asks them to stop and waits (each leaves its chamber safe)."""

    def __init__(self, engine: Any, lab: Lab, chamber_ids: Sequence[str], say: Callable[[str], None],
                 clock: Callable[[], float] = time.time):
        unknown = [c for c in chamber_ids if c not in lab.spec.chambers]
        if unknown:
            raise ValueError(f"--chamber/--worker {unknown[0]!r}: not in the lab file; chambers: "
                             f"{', '.join(lab.spec.chambers)}")
        self.stop_event = threading.Event()
        self.workers = [ChamberWorker(engine, lab, c, clock=clock) for c in chamber_ids]
        self.errors: dict[str, str] = {}
        self.say = say
        self.threads = [threading.Thread(target=self._serve, args=(w,), name=f"lab-worker-{w.chamber_id}",
                                         daemon=True) for w in self.workers]

    def _serve(self, worker: ChamberWorker) -> None:
        try:
            worker.serve(self.stop_event)
        except WorkerRefused as exc:  # its board did not answer, or another worker holds it: the others go on
            self.errors[worker.chamber_id] = " ".join(str(exc).split())
            self.say(f"not serving {worker.chamber_id}: {self.errors[worker.chamber_id]}")
        except Exception as exc:  # a fault of ours: named in one line, the stack in the debug log
            self.errors[worker.chamber_id] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            log.debug("worker for %s stopped", worker.chamber_id, exc_info=True)
            self.say(f"worker for {worker.chamber_id} stopped: {self.errors[worker.chamber_id]}")
        finally:
            worker.started.set()

    def start(self) -> "Workers":
        for thread in self.threads:
            thread.start()
        return self

    def wait_started(self, timeout: float = STARTUP_S) -> dict[str, str]:
        """Wait until every worker has connected its board and made it safe, or refused it (bounded); returns the
        refused chambers with their one-line reasons."""
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            worker.started.wait(max(0.0, deadline - time.monotonic()))
        return dict(self.errors)

    def stop(self, timeout: float = 60.0) -> int:
        """Stop every worker; say how each chamber was left. The exit code of that: 3 when a chamber's safe state
        was not confirmed (protocols/exit_codes.py), else 0."""
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=timeout)
        unconfirmed = False
        for worker, thread in zip(self.workers, self.threads):
            if thread.is_alive():  # still inside a call to the board: its chamber may be left as it is
                self.say(f"{worker.chamber_id}: the worker did not stop within {timeout:g} s; its chamber may still "
                         "be running as last set")
                unconfirmed = True
            elif worker.final_safe is not None:
                self.say(f"{worker.chamber_id}: {worker.final_safe.text}")
                unconfirmed |= not worker.final_safe.confirmed
        return 3 if unconfirmed else 0


def _reaper(engine: Any, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        try:
            for experiment_id in reap(engine, LEASE_TTL_S):
                log.warning("experiment %s ended FAILED: its worker stopped", experiment_id)
        except Exception:  # the database may be briefly away; the next round tries again
            log.debug("reaper round failed", exc_info=True)


def _until_interrupted(stop: threading.Event, workers: "Workers | None" = None) -> None:
    """Wait for a stop signal (KeyboardInterrupt: chamber.stop.signals_as_interrupt turns SIGTERM, SIGHUP and
    SIGQUIT into one too) or `stop`; with `workers`, also end once none of them is left serving."""
    try:
        while not stop.wait(0.5):
            if workers is not None and workers.threads and all(not t.is_alive() for t in workers.threads):
                return
    except KeyboardInterrupt:
        pass


def _stop_workers(workers: "Workers", say: Callable[[str], None]) -> int:
    """Stop every worker, each leaving its chamber safe; further stop signals wait meanwhile (a second Ctrl-C must
    not cut short the step that makes the chambers safe). The exit code of how they were left."""
    from chamber.stop import signals_deferred

    with signals_deferred("the workers are leaving their chambers safe"):
        say("stopping: workers finish their current row, leave their chambers safe and hand back their leases")
        return workers.stop()


def _refused_lines(lab: Lab, say: Callable[[str], None]) -> None:
    for chamber_id, reason in lab.refused.items():
        say(f"not serving {chamber_id}: {reason}")


def serve_lab(*, config: Path | None, db: str | None, data: Path | None, host: str, listen_port: int,
              worker: Sequence[str], on_ready: Callable[[dict[str, Any]], None], say: Callable[[str], None],
              stop: threading.Event | None = None, no_workers: bool = False) -> int:
    """Serve the API (and, on SQLite, a worker per chamber; on PostgreSQL the --worker ones; none with
    `no_workers`, when `lab worker` processes serve every chamber) until interrupted."""
    from protocols.api.server import serve_in_thread
    from protocols.remote_lab.app import create_app
    from protocols.serve_job import check_port_free

    lab = _lab(config)
    _refused_lines(lab, say)
    url = database_url(db, data)
    check_port_free(host, listen_port)
    engine = store.open_store(url)
    store.register_chambers(engine, lab.spec.chambers)
    accounts = Accounts(engine, time.time)
    credentials = _demo_account(accounts, Path(data or DEFAULT_DATA)) if config is None else None
    sqlite = url.startswith("sqlite")
    if no_workers and worker:
        raise ValueError(f"--no-workers and --worker {worker[0]} exclude each other")
    chamber_ids = [] if no_workers else list(lab.spec.chambers) if sqlite and not worker else list(worker)
    scheduler_id = f"{socket.gethostname()}/{os.getpid()}"
    app = create_app(engine, lab, accounts, scheduler_id=scheduler_id, codebase_version=_version())
    stop = stop or threading.Event()
    workers = Workers(engine, lab, chamber_ids, say).start()
    reaper = threading.Thread(target=_reaper, args=(engine, stop), daemon=True, name="lab-reaper")
    reaper.start()
    code: int | None = None
    try:
        refused = {**lab.refused, **workers.wait_started()}
        with serve_in_thread(app, host=host, port=listen_port) as base:
            on_ready({"url": base, "endpoint": base + "/v0", "database": _shown_url(url), "lab": lab.source,
                      "credentials_file": str(credentials) if credentials else None,
                      "workers": [c for c in chamber_ids if c not in refused], "refused": refused,
                      "chambers": {c: {"mode": e.mode, "board": e.board, "configs": list(e.configs)}
                                   for c, e in lab.spec.chambers.items()}})
            try:
                _until_interrupted(stop)
            finally:  # the workers first, while the API still answers: a call in flight gets its answer
                stop.set()
                code = _stop_workers(workers, say)
    finally:
        stop.set()
        if code is None:  # the API never started: the workers are stopped here
            code = _stop_workers(workers, say)
        engine.dispose()
    return code


def run_workers(*, config: Path, db: str | None, data: Path | None, chamber: Sequence[str],
                on_ready: Callable[[dict[str, Any]], None], say: Callable[[str], None],
                stop: threading.Event | None = None) -> int:
    """`lab worker`: serve these chambers of the lab file from this host until interrupted."""
    lab = load_lab(config)
    refused = [c for c in chamber if c in lab.refused]
    if refused:
        raise ValueError(f"--chamber {refused[0]}: refused by the lab file: {lab.refused[refused[0]]}")
    url = database_url(db, data)
    engine = store.open_store(url)
    store.register_chambers(engine, lab.spec.chambers)
    workers = Workers(engine, lab, list(chamber), say).start()
    stop = stop or threading.Event()
    try:
        failed = workers.wait_started()
        on_ready({"database": _shown_url(url), "chambers": [c for c in chamber if c not in failed],
                  "refused": failed, "host": socket.gethostname(), "pid": os.getpid()})
        _until_interrupted(stop, workers)
    finally:
        code = _stop_workers(workers, say)
        engine.dispose()
    return code or (2 if workers.errors else 0)


def user_job(*, action: str, name: str | None, password_file: Path | None, db: str | None, data: Path | None,
             max_queued: int | None) -> dict[str, Any]:
    """`lab user add|list|remove`: accounts in the lab's database."""
    engine = store.open_store(database_url(db, data))
    accounts = Accounts(engine, time.time)
    try:
        if action == "list":
            return {"users": [{"name": u.name, "created_on": u.created_on, "max_queued": u.max_queued}
                              for u in accounts.list()]}
        if not name:
            raise AccountError(f"lab user {action}: expected a user NAME")
        if action == "add":
            if password_file is None:
                raise AccountError("lab user add: expected --password-file FILE (the password on its first line)")
            user = accounts.add(name, read_password_file(password_file), max_queued)
            return {"added": user.name, "max_queued": user.max_queued}
        accounts.remove(name)
        return {"removed": name}
    finally:
        engine.dispose()


def user_text(data: dict[str, Any]) -> str:
    if "users" in data:
        return "\n".join(f"{u['name']}" + (f" (at most {u['max_queued']} queued)" if u["max_queued"] else "")
                         for u in data["users"]) or "no users"
    return f"added user {data['added']}" if "added" in data else f"removed user {data['removed']}"


def serve_text(data: dict[str, Any]) -> str:
    lines = [f"Remote Lab at {data['endpoint']}  (database {data['database']}; {data['lab']})"]
    refused = data.get("refused") or {}
    for chamber_id, c in data["chambers"].items():
        if chamber_id in refused:
            continue
        served = "worker here" if chamber_id in data["workers"] else "worker elsewhere"
        lines.append(f"  {chamber_id:<14} {c['mode']:<9} {c['board']:<22} configs {', '.join(c['configs'])} ({served})")
    if data.get("credentials_file"):
        lines.append(f"demo account: {data['credentials_file']}  ->  causalchamber.lab.Lab(credentials_file="
                     f"'{data['credentials_file']}', endpoint='{data['endpoint']}')")
    for chamber_id, reason in refused.items():
        lines.append(f"  {chamber_id:<14} NOT SERVED: {reason}")
    lines.append("Ctrl-C stops (workers finish their row and leave the chambers safe)")
    return "\n".join(lines)


def _shown_url(url: str) -> str:
    """A database URL without its password, for printing."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _version() -> str:
    try:
        from importlib.metadata import version

        return f"chamberlab {version('chamberlab')}"
    except Exception:
        return "chamberlab"
