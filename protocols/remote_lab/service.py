"""`lab serve`, `lab worker` and `lab user`: the Remote Lab's processes and its accounts, as library calls.

Why here: which database (SQLite file under --data on one host, PostgreSQL for a lab spread over hosts), which
chambers get a worker in which process (on SQLite every chamber in the serving process; on PostgreSQL only those
named, so `lab worker` processes beside the other chambers own theirs), the demo lab and its account, and an
orderly stop (workers stop after the current row, leave their chambers safe, hand back their leases) are the
service's rules; the CLI passes plain values and renders what `on_ready` receives.

Serving a group on a network (issue 32): `lab serve` speaks HTTPS itself with --tls-cert/--tls-key; a non-loopback
--host without TLS is refused in one line unless --insecure-http says a TLS proxy is in front; forwarded headers
count only from --trusted-proxy addresses; --public-url is the base of the URLs handed out. The database password
comes from --db-password-file or libpq's PGPASSWORD/PGPASSFILE, never from the command line (bench_cli refuses a
--db URL holding one: `ps` shows it). The data folder is the lab owner's alone (files.py). A database at another
schema revision is refused naming `lab migrate` (migrate.py). The demo account exists only in demo mode.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from chamber.remote_lab_backend import write_credentials
from chamber.selection import default_link_state_dir
from firmware_bridge.error_text import exception_line
from protocols.remote_lab import audit, store
from protocols.remote_lab.accounts import Accounts, AccountError, read_password_file
from protocols.remote_lab.files import private_file, private_folder
from protocols.remote_lab.lab_file import Lab, demo_lab, load_lab
from protocols.remote_lab.wakeups import Wakeups, wakeups_for
from protocols.remote_lab.worker import LEASE_TTL_S, ChamberWorker, Heartbeats, WorkerRefused, reap

log = logging.getLogger(__name__)
DEFAULT_DATA = Path("lab-data")
DEMO_USER = "demo"
STARTUP_S = 60.0
"""How long `lab serve`/`lab worker` wait for their boards to connect before saying they serve (a real board's
reset and announcement take seconds; a board that does not answer is refused by its worker well within this)."""
REAP_S = 2.0
"""How often the API looks for experiments whose worker died (one query when there are none)."""
DEMO_ACCOUNT_PREFIX = "acc-demo-"


class NetworkRefused(ValueError):
    """A way of serving the network this lab refuses (plain HTTP off loopback, half a TLS pair, a bad URL)."""


def database_url(db: str | None, data: Path | None, password_file: Path | None = None,
                 say: Callable[[str], None] | None = None) -> str:
    """--db as given (postgresql://... or sqlite:///...), with the password of `password_file` put in; else an
    SQLite file in --data (default ./lab-data), the folder made private to this account (said when narrowed)."""
    if db:
        if not db.startswith(("postgresql://", "postgresql+psycopg://", "sqlite:///")):
            raise ValueError(f"--db: expected postgresql://USER@HOST/DB or sqlite:///PATH, got {_shown_url(db)!r}")
        if password_file is not None:
            from sqlalchemy.engine import make_url

            password = read_secret_file(password_file)
            return make_url(db).set(password=password).render_as_string(hide_password=False)
        return db
    if password_file is not None:
        raise ValueError("--db-password-file is for a PostgreSQL --db; the SQLite lab in --data has no password")
    folder = private_folder(Path(data or DEFAULT_DATA), say)
    return f"sqlite:///{folder.resolve() / 'lab.sqlite'}"


def read_secret_file(path: Path) -> str:
    """A password file's first line (a file others can read is refused: the password would be theirs too)."""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--db-password-file {path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") \
            from None
    if mode & 0o077:
        raise ValueError(f"--db-password-file {path}: readable by other accounts (mode {mode & 0o777:04o}); expected "
                         "0600: chmod 600 it")
    password = text.splitlines()[0] if text else ""
    if not password:
        raise ValueError(f"--db-password-file {path}: expected the password on its first line, got an empty file")
    return password


def db_on_command_line(db: str | None) -> str | None:
    """Why a --db given on the command line is refused (it holds a password, which `ps` shows), or None."""
    if not db:
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        password = make_url(db).password
    except ArgumentError:
        return None  # database_url names the bad URL
    if password:
        return ("--db holds a password, which every local account can read in the process list; put it in "
                "--db-password-file FILE (mode 0600), or libpq's PGPASSFILE or PGPASSWORD, and give --db without it")
    return None


def check_network(host: str, *, tls_cert: Path | None, tls_key: Path | None, insecure_http: bool,
                  public_url: str | None, trusted_proxy: Sequence[str]) -> None:
    """Refuse, in one line each, a way of serving that would send passwords in clear or hand out wrong URLs."""
    if (tls_cert is None) != (tls_key is None):
        raise NetworkRefused("--tls-cert and --tls-key go together: the certificate (chain) and its private key")
    if tls_cert is not None and tls_key is not None:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise NetworkRefused(f"--tls-cert {tls_cert} / --tls-key {tls_key}: expected a PEM certificate and its "
                                 f"key, got {type(exc).__name__}: {exc}") from None
    elif not _loopback(host) and not insecure_http:
        raise NetworkRefused(f"--host {host} serves the network over plain HTTP, where basic auth sends every "
                             "password in clear; give --tls-cert FILE --tls-key FILE, or --insecure-http when a TLS "
                             "proxy in front of this server takes the connections")
    if public_url is not None and not public_url.startswith(("https://", "http://")):
        raise NetworkRefused(f"--public-url: expected https://HOST[:PORT][/PATH], got {public_url!r}")
    for proxy in trusted_proxy:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise NetworkRefused(f"--trusted-proxy: expected an IP address or network, got {proxy!r}") from None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _lab(config: Path | None) -> Lab:
    return load_lab(config) if config is not None else demo_lab()


def _demo_account(accounts: Accounts, folder: Path) -> Path:
    """The demo lab's account: user `demo`, its password in `<data>/demo.credentials` in the client's format."""
    path = folder / "demo.credentials"
    if accounts.get(DEMO_USER) is not None and path.exists():
        private_file(path)
        return path
    if accounts.get(DEMO_USER) is not None:
        accounts.remove(DEMO_USER, reason="the demo account was made anew")
    password = secrets.token_urlsafe(12)
    accounts.add(DEMO_USER, password, account_prefix=DEMO_ACCOUNT_PREFIX)
    private_folder(folder)
    return write_credentials(path, DEMO_USER, password)


def _disable_demo(accounts: Accounts, folder: Path | None, say: Callable[[str], None]) -> None:
    """A real lab served from a folder (or database) that holds the demo account: the account is removed."""
    user = accounts.get(DEMO_USER)
    made_here = folder is not None and (folder / "demo.credentials").exists()
    if user is None or not ((user.account_id or "").startswith(DEMO_ACCOUNT_PREFIX) or made_here):
        return
    accounts.remove(DEMO_USER, reason="a lab file is served here: the demo account exists only in demo mode",
                    action="demo-disabled")
    say(f"the demo account of an earlier demo lab was disabled: {DEMO_USER!r} cannot log in while a lab file is "
        "served from this database")


class Workers:
    """Worker threads, one per chamber; `stop()` asks them to stop and waits (each leaves its chamber safe)."""

    def __init__(self, engine: Any, lab: Lab, chamber_ids: Sequence[str], say: Callable[[str], None],
                 clock: Callable[[], float] = time.time, wakeups: Wakeups | None = None,
                 journal_dir: Path | None = None):
        unknown = [c for c in chamber_ids if c not in lab.spec.chambers]
        if unknown:
            raise ValueError(f"--chamber/--worker {unknown[0]!r}: not in the lab file; chambers: "
                             f"{', '.join(lab.spec.chambers)}")
        self.stop_event = threading.Event()
        self.wakeups = wakeups or Wakeups()
        self.heartbeats = Heartbeats(engine)  # one transaction per beat for all of this process's chambers
        self.workers = [ChamberWorker(engine, lab, c, clock=clock, wakeups=self.wakeups, heartbeats=self.heartbeats,
                                      journal_dir=journal_dir) for c in chamber_ids]
        self.errors: dict[str, str] = {}
        self.say = say
        self.threads = [threading.Thread(target=self._serve, args=(w,), name=f"lab-worker-{w.chamber_id}",
                                         daemon=True) for w in self.workers]

    def _serve(self, worker: ChamberWorker) -> None:
        try:
            worker.serve(self.stop_event)
        except WorkerRefused as exc:  # its board did not answer, or another worker holds it: the others go on
            self.errors[worker.chamber_id] = exception_line(exc)
            self.say(f"not serving {worker.chamber_id}: {self.errors[worker.chamber_id]}")
        except Exception as exc:  # a fault of ours: named in one line, the stack in the debug log
            self.errors[worker.chamber_id] = f"{type(exc).__name__}: {exception_line(exc)}"
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
        for worker in self.workers:  # a sleeping worker wakes now, not at its next fallback poll
            self.wakeups.notify_local(worker.topic)
        for thread in self.threads:
            thread.join(timeout=timeout)
        self.heartbeats.close()
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
    while not stop.wait(REAP_S):
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
              stop: threading.Event | None = None, no_workers: bool = False, tls_cert: Path | None = None,
              tls_key: Path | None = None, insecure_http: bool = False, trusted_proxy: Sequence[str] = (),
              public_url: str | None = None, db_password_file: Path | None = None) -> int:
    """Serve the API (and, on SQLite, a worker per chamber; on PostgreSQL the --worker ones; none with
    `no_workers`, when `lab worker` processes serve every chamber) until interrupted."""
    from protocols.api.server import serve_in_thread
    from protocols.remote_lab.app import create_app
    from protocols.serve_job import check_port_free

    check_network(host, tls_cert=tls_cert, tls_key=tls_key, insecure_http=insecure_http, public_url=public_url,
                  trusted_proxy=trusted_proxy)
    lab = _lab(config)
    _refused_lines(lab, say)
    url = database_url(db, data, db_password_file, say)
    check_port_free(host, listen_port)
    engine = store.open_store(url)
    store.register_chambers(engine, lab.spec.chambers)
    accounts = Accounts(engine, time.time)
    folder = None if db else Path(data or DEFAULT_DATA)
    credentials = _demo_account(accounts, Path(data or DEFAULT_DATA)) if config is None else None
    if config is not None:
        _disable_demo(accounts, folder, say)
    sqlite = url.startswith("sqlite")
    if no_workers and worker:
        raise ValueError(f"--no-workers and --worker {worker[0]} exclude each other")
    chamber_ids = [] if no_workers else list(lab.spec.chambers) if sqlite and not worker else list(worker)
    wakeups = wakeups_for(engine, shared_file=sqlite and set(chamber_ids) != set(lab.spec.chambers))
    scheduler_id = f"{socket.gethostname()}/{os.getpid()}"
    app = create_app(engine, lab, accounts, scheduler_id=scheduler_id, codebase_version=_version(),
                     wakeups=wakeups, public_url=public_url)
    stop = stop or threading.Event()
    workers = Workers(engine, lab, chamber_ids, say, wakeups=wakeups,
                      journal_dir=default_link_state_dir(os.environ)).start()
    reaper = threading.Thread(target=_reaper, args=(engine, stop), daemon=True, name="lab-reaper")
    reaper.start()
    code: int | None = None
    try:
        refused = {**lab.refused, **workers.wait_started()}
        with serve_in_thread(app, host=host, port=listen_port, ssl_certfile=tls_cert, ssl_keyfile=tls_key,
                             proxy_headers=bool(trusted_proxy), forwarded_allow_ips=list(trusted_proxy)) as base:
            on_ready({"url": base, "endpoint": base + "/v0", "database": _shown_url(url), "lab": lab.source,
                      "credentials_file": str(credentials) if credentials else None,
                      "workers": [c for c in chamber_ids if c not in refused], "refused": refused,
                      "tls": tls_cert is not None, "public_url": public_url, "trusted_proxy": list(trusted_proxy),
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
        wakeups.close()
        engine.dispose()
    return code


def run_workers(*, config: Path, db: str | None, data: Path | None, chamber: Sequence[str],
                on_ready: Callable[[dict[str, Any]], None], say: Callable[[str], None],
                stop: threading.Event | None = None, db_password_file: Path | None = None) -> int:
    """`lab worker`: serve these chambers of the lab file from this host until interrupted."""
    lab = load_lab(config)
    refused = [c for c in chamber if c in lab.refused]
    if refused:
        raise ValueError(f"--chamber {refused[0]}: refused by the lab file: {lab.refused[refused[0]]}")
    url = database_url(db, data, db_password_file, say)
    engine = store.open_store(url)
    store.register_chambers(engine, lab.spec.chambers)
    wakeups = wakeups_for(engine, shared_file=url.startswith("sqlite"))
    workers = Workers(engine, lab, list(chamber), say, wakeups=wakeups,
                      journal_dir=default_link_state_dir(os.environ)).start()
    stop = stop or threading.Event()
    try:
        failed = workers.wait_started()
        on_ready({"database": _shown_url(url), "chambers": [c for c in chamber if c not in failed],
                  "refused": failed, "host": socket.gethostname(), "pid": os.getpid()})
        _until_interrupted(stop, workers)
    finally:
        code = _stop_workers(workers, say)
        wakeups.close()
        engine.dispose()
    return code or (2 if workers.errors else 0)


def user_job(*, action: str, name: str | None, password_file: Path | None, db: str | None, data: Path | None,
             max_queued: int | None, db_password_file: Path | None = None) -> dict[str, Any]:
    """`lab user add|list|remove`: accounts in the lab's database (a removal cancels the user's queued
    experiments, ends their sessions and is audited; their finished data stays)."""
    engine = store.open_store(database_url(db, data, db_password_file))
    accounts = Accounts(engine, time.time)
    try:
        if action == "list":
            return {"users": [{"name": u.name, "created_on": u.created_on, "max_queued": u.max_queued,
                               "account_id": u.account_id} for u in accounts.list()]}
        if not name:
            raise AccountError(f"lab user {action}: expected a user NAME")
        if action == "add":
            if password_file is None:
                raise AccountError("lab user add: expected --password-file FILE (the password on its first line)")
            user = accounts.add(name, read_password_file(password_file), max_queued, address="lab user add")
            return {"added": user.name, "max_queued": user.max_queued, "account_id": user.account_id}
        ended = accounts.remove(name, address="lab user remove")
        _wake_other_hosts(engine, [f"chamber:{c}" for c in ended["chambers"]])
        return {"removed": name, **ended}
    finally:
        engine.dispose()


def _wake_other_hosts(engine: Any, topics: Sequence[str]) -> None:
    """Tell PostgreSQL workers at once (their heartbeat would see a stop within HEARTBEAT_S anyway)."""
    if engine.dialect.name != "postgresql" or not topics:
        return
    import sqlalchemy as sa

    from protocols.remote_lab.wakeups import CHANNEL

    with engine.begin() as db:
        for topic in topics:
            db.execute(sa.select(sa.func.pg_notify(CHANNEL, topic)))


def user_text(data: dict[str, Any]) -> str:
    if "users" in data:
        return "\n".join(f"{u['name']}" + (f" (at most {u['max_queued']} queued)" if u["max_queued"] else "")
                         for u in data["users"]) or "no users"
    if "added" in data:
        return f"added user {data['added']}"
    return (f"removed user {data['removed']}: canceled {len(data['canceled'])} queued experiment(s), stopping "
            f"{len(data['stopping'])} running, sessions ended on {', '.join(data['sessions_on']) or 'no chamber'}; "
            "their finished experiments are kept")


def migrate_job(*, db: str | None, data: Path | None, db_password_file: Path | None = None) -> dict[str, Any]:
    """`lab migrate`: upgrade the lab database in place to this chamberlab's schema revision."""
    from protocols.remote_lab.migrate import migrate

    engine = store.open_store(database_url(db, data, db_password_file), ensure=False)
    try:
        return migrate(engine)
    finally:
        engine.dispose()


def audit_job(*, db: str | None, data: Path | None, user: str | None, since: str | None,
              db_password_file: Path | None = None) -> dict[str, Any]:
    """`lab audit`: who did what, when, from where (oldest first)."""
    start = audit.parse_since(since)
    engine = store.open_store(database_url(db, data, db_password_file))
    try:
        return {"entries": audit.read(engine, user=user, since=start)}
    finally:
        engine.dispose()


def serve_text(data: dict[str, Any]) -> str:
    lines = [f"Remote Lab at {data['endpoint']}  (database {data['database']}; {data['lab']})"]
    if data.get("public_url"):
        lines.append(f"  download links and URLs handed out under {data['public_url']}")
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

