"""Our Remote Lab server as a test fixture: `running_lab` serves a lab (the demo lab, or a lab file) in a thread
and yields (endpoint, credentials_file, data_dir) once every chamber's worker is READY.

Why a shared module: every test that drives the lab through the chamber authors' client (`causalchamber.lab`)
needs the same thing — a server on a free port, an account whose credentials file the client reads, and chambers
that answer — and must not wait on a fixed sleep for it. The server is `protocols.remote_lab.service.serve_lab`
itself (the function `chamberlab lab serve` calls), stopped through its `stop` event, so the workers leave their
chambers safe exactly as on Ctrl-C. Accounts are added through `protocols.remote_lab.accounts` on the lab's own
database, and credentials files are written in the client's `[api_keys]` format.
"""

from __future__ import annotations

import secrets
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import requests
import yaml

from chamber.remote_lab_backend import write_credentials  # noqa: F401  (the tests' one credentials writer)

SERVED = ("READY",)


class RunningLab(NamedTuple):
    """What `running_lab` yields; unpacks as (endpoint, credentials_file, data_dir)."""

    endpoint: str  # http://127.0.0.1:PORT/v0, the client's `endpoint`
    credentials_file: Path  # [api_keys] user, password: the demo user, or user `ada` for a lab file
    data_dir: Path  # the lab's --data folder (its SQLite database)


def poll(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """`predicate()` once it is truthy; AssertionError naming `what` and the last value after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {value!r})")
        time.sleep(interval)


def database_url(data_dir: Path, db: str | None = None) -> str:
    from protocols.remote_lab.service import database_url as lab_database_url

    return lab_database_url(db, data_dir)


def add_user(data_dir: Path, name: str, *, password: str | None = None, max_queued: int | None = None,
             db: str | None = None) -> Path:
    """Add an account to the lab whose database is in `data_dir` (or `db`); returns its credentials file."""
    from protocols.remote_lab import store
    from protocols.remote_lab.accounts import Accounts

    password = password or secrets.token_urlsafe(12)
    engine = store.open_store(database_url(data_dir, db))
    try:
        Accounts(engine, time.time).add(name, password, max_queued)
    finally:
        engine.dispose()
    return write_credentials(Path(data_dir) / f"{name}.credentials", name, password)


def write_lab_file(path: Path, chambers: dict[str, dict[str, Any]], caps: dict[str, Any] | None = None) -> Path:
    body: dict[str, Any] = {"chambers": chambers}
    if caps:
        body["caps"] = caps
    path.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    return path


def health(endpoint: str) -> dict[str, Any]:
    return requests.get(endpoint.rsplit("/v0", 1)[0] + "/health", timeout=10).json()


@contextmanager
def running_lab(tmp_path: Path, config: Path | None = None, db: str | None = None, *,
                ready_timeout: float = 60.0, data: Path | None = None, said: list[str] | None = None,
                **serve_options: Any) -> Iterator[RunningLab]:
    """Serve the demo lab (config None: wt-queue-1, lt-queue-1, wt-rt-1, lt-rt-1, emulated) or the lab file
    `config` on 127.0.0.1 (free port), in a thread; yields once every chamber reports READY. For a lab file (which
    has no demo account) user `ada` is added first and its credentials file is yielded. `data`: reuse a data
    folder (a restarted lab); by default a fresh one under `tmp_path`. `said`: a list that receives the lines the
    lab says; `serve_options`: more of serve_lab's options (tls_cert, public_url, ...). Stops the server (workers
    leave their chambers safe) on exit."""
    from protocols.remote_lab.service import serve_lab

    data_dir = Path(data) if data is not None else Path(tempfile.mkdtemp(prefix="lab-data-", dir=tmp_path))
    credentials: Path | None = None
    if config is not None:
        existing = data_dir / "ada.credentials"
        credentials = existing if existing.exists() else add_user(data_dir, "ada", db=db)
    announced: dict[str, Any] = {}
    said = said if said is not None else []
    failure: list[BaseException] = []
    ready, stop = threading.Event(), threading.Event()

    def on_ready(info: dict[str, Any]) -> None:
        announced.update(info)
        ready.set()

    def serve() -> None:
        try:
            serve_lab(config=config, db=db, data=data_dir, host="127.0.0.1", listen_port=0, worker=[],
                      on_ready=on_ready, say=said.append, stop=stop, **serve_options)
        except BaseException as exc:  # shown by the waiting test instead of a bare timeout
            failure.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=serve, name="remote-lab-under-test", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + ready_timeout
        ready.wait(ready_timeout)
        if failure:
            raise RuntimeError(f"lab serve failed: {type(failure[0]).__name__}: {failure[0]}") from failure[0]
        if not announced:
            raise RuntimeError(f"lab serve did not announce itself within {ready_timeout:g} s; it said {said}")
        endpoint = announced["endpoint"]

        def all_ready() -> bool:
            states = health(endpoint)["chambers"]
            return all(s in SERVED for s in states.values())

        try:
            poll(all_ready, max(1.0, deadline - time.monotonic()), "every chamber READY", interval=0.05)
        except AssertionError:
            raise RuntimeError(f"chambers not READY within {ready_timeout:g} s: {health(endpoint)['chambers']}; "
                               f"the lab said {said}") from None
        yield RunningLab(endpoint, Path(credentials or announced["credentials_file"]), data_dir)
    finally:
        stop.set()
        thread.join(timeout=90)
