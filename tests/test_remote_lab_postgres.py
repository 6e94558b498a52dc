"""The Remote Lab spread over hosts, on PostgreSQL (issue 25): the rules only a shared server can show.

Why these tests, on a real server and real processes: SQLite cannot stand in for PostgreSQL's row locks, and a
worker killed with SIGKILL can only be a process. So: (a) many connections claiming one chamber's queue take every
experiment exactly once (FOR UPDATE SKIP LOCKED, and a locked row is skipped, not waited for); (b) an API process
and two `lab worker` processes (four emulated chambers, two per "host"), driven by the chamber authors' own client:
SIGKILL one worker mid-experiment and its experiment ends FAILED with the rows it measured, never re-run, the
other host's chambers go on, the dead host's queue waits and runs once a new worker has made the chambers safe;
(c) the API process restarted while experiments are queued and running loses none. The server comes from
tests/postgres_server.py (CI's, or a private one), else the tests skip and say why.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from postgres_server import fresh_postgres_db, postgres_server  # noqa: F401  (fixtures)
import remote_lab_support
from chamber.remote_lab_backend import write_credentials
from support import PROJECT_ROOT

CHAMBERLAB = str(PROJECT_ROOT / ".venv" / "bin" / "chamberlab")
USER, PASSWORD = "ada", "lovelace-2026"
FINAL = ("DONE", "FAILED", "CANCELED")
SLOW, FAST_B, FAST_C, FAST_D = "wt-slow", "lt-b", "wt-c", "lt-d"  # worker 1: SLOW, FAST_B; worker 2: C, D
LAB_FILE = {"chambers": {
    SLOW: {"board": "emulated:wt?pace=real", "mode": "queue"},  # the real board's timings: ~7 rows/s
    FAST_B: {"board": "emulated:lt", "mode": "queue"},
    FAST_C: {"board": "emulated:wt", "mode": "queue"},
    FAST_D: {"board": "emulated:lt", "mode": "queue"},
}}
KIND = {SLOW: "wt", FAST_B: "lt", FAST_C: "wt", FAST_D: "lt"}
ACTUATOR = {"wt": ("load_in", 0.5), "lt": ("red", 120)}  # the safe state puts both back to 0


def poll(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.1) -> Any:
    """`check()` until truthy (returned), else fail naming `what`: the one polling rule of the lab's tests."""
    return remote_lab_support.poll(check, timeout_s, what, every_s)


def _queued(engine: Any, chamber: str, n: int) -> list[str]:
    from protocols.remote_lab import store

    store.register_chambers(engine, [chamber])
    return [store.submit(engine, user_id=USER, chamber_id=chamber, config="standard", instructions=["MSR,1,0"],
                         tag=f"e{i}", now=1000.0 + i, scheduler_id="test", max_queued=10_000) for i in range(n)]


def test_claims_from_many_connections_take_each_experiment_exactly_once(fresh_postgres_db: str) -> None:
    from protocols.remote_lab import store

    engines = [store.open_store(fresh_postgres_db) for _ in range(8)]  # 8 pools: 8 workers' connections
    try:
        ids = _queued(engines[0], "wt-1", 50)
        assert store.take_lease(engines[0], "wt-1", "racer", ttl=60) is None  # one worker holds the chamber; its
        claims: list[tuple[str, int]] = []  # 8 connections claim at once (a claim needs the lease)
        errors: list[BaseException] = []
        start = threading.Barrier(len(engines))

        def claimer(k: int) -> None:
            try:
                start.wait(timeout=30)
                while any(r["status"] == "QUEUED" for r in store.queue_of(engines[k], "wt-1")):
                    got = store.claim_next(engines[k], "wt-1", "racer", now=2000.0)
                    if got is not None:
                        claims.append((got.experiment_id, k))
            except BaseException as exc:  # reported below, with the thread's number
                errors.append(exc)

        threads = [threading.Thread(target=claimer, args=(k,)) for k in range(len(engines))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, f"a claiming thread failed: {errors[0]!r}"
        claimed = [c for c, _ in claims]
        twice = sorted({c for c in claimed if claimed.count(c) > 1})
        assert not twice, f"claimed more than once: {twice}"
        assert sorted(claimed) == sorted(ids), f"never claimed: {sorted(set(ids) - set(claimed))}"
        for experiment_id, _ in claims:  # each row taken once, by the lease holder
            row = store.get_experiment(engines[0], experiment_id)
            assert (row["status"], row["worker_id"]) == ("RUNNING", "racer"), row
        assert len({k for _, k in claims}) > 1, "one connection took everything: the claims never raced"
    finally:
        for engine in engines:
            engine.dispose()


def test_a_claim_skips_a_locked_experiment_instead_of_waiting(fresh_postgres_db: str) -> None:
    """A worker holding the oldest row (mid-claim) does not block another: it takes the next one at once."""
    import sqlalchemy as sa

    from protocols.remote_lab import store

    engine = store.open_store(fresh_postgres_db)
    try:
        first, second, _ = _queued(engine, "lt-1", 3)
        assert store.take_lease(engine, "lt-1", "worker-b", ttl=60) is None
        got: list[Any] = []
        with engine.connect() as holder:
            holder.begin()
            holder.execute(sa.select(store.experiments.c.seq).where(
                store.experiments.c.experiment_id == first).with_for_update())
            claim = threading.Thread(target=lambda: got.append(store.claim_next(engine, "lt-1", "worker-b", 2000.0)))
            claim.start()
            claim.join(timeout=5.0)
            waited = claim.is_alive()
            holder.rollback()  # frees a claim that waited, so the test ends either way
        claim.join(timeout=30)
        assert not waited, "the claim waited behind the locked row instead of skipping it"
        assert got and got[0] is not None and got[0].experiment_id == second, got
        assert store.status_of(engine, first) == "QUEUED"
    finally:
        engine.dispose()


# ----------------------------------------------------------------------------------------------- processes
class LabProcess:
    """A `chamberlab lab ...` process in its own process group; stdout lines kept, stderr in a file."""

    def __init__(self, name: str, argv: list[str], folder: Path):
        self.name = name
        self.stderr_path = folder / f"{name}.stderr"
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([CHAMBERLAB, *argv], stdout=subprocess.PIPE, stderr=err,
                                         cwd=folder, start_new_session=True, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def first_json(self, timeout_s: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and self.lines.empty():
                break
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.lstrip().startswith("{"):
                return json.loads(line)
        pytest.fail(f"{self.name}: no JSON line within {timeout_s:g} s (exit {self.proc.poll()}); stdout "
                    f"{self.seen!r}; stderr {self.stderr()[-1500:]}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL to its whole group: the host pulled out, nothing runs a finally."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.name} did not stop within {timeout_s:g} s of SIGTERM; stderr {self.stderr()[-1500:]}")


class Processes:
    """Every process a test starts; all killed at the end whatever happened."""

    def __init__(self, folder: Path, db: str, lab_file: Path):
        self.folder, self.db, self.lab_file = folder, db, lab_file
        self.started: list[LabProcess] = []
        self.public_db, self.password_file = without_password(db, folder)  # never a password on a command line

    def api(self, name: str) -> tuple[LabProcess, dict[str, Any]]:
        proc = self._start(name, ["lab", "serve", *self.db_options(), "--config", str(self.lab_file),
                                  "--listen-port", "0", "--json"])
        return proc, proc.first_json()

    def worker(self, name: str, *chambers: str) -> LabProcess:
        return self._start(name, ["lab", "worker", *self.db_options(), "--config", str(self.lab_file),
                                  *[a for c in chambers for a in ("--chamber", c)]])

    def db_options(self) -> list[str]:
        return ["--db", self.public_db, "--db-password-file", str(self.password_file)]

    def _start(self, name: str, argv: list[str]) -> LabProcess:
        proc = LabProcess(name, argv, self.folder)
        self.started.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.started:
            try:
                proc.kill()
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


@pytest.fixture
def lab_setup(fresh_postgres_db: str, tmp_path: Path) -> Iterator[Processes]:
    """A lab file of four emulated queue chambers, an account in the database, and the processes to kill after."""
    lab_file = tmp_path / "lab.json"
    lab_file.write_text(json.dumps(LAB_FILE), encoding="utf-8")
    add_account(fresh_postgres_db, tmp_path)
    processes = Processes(tmp_path, fresh_postgres_db, lab_file)
    try:
        yield processes
    finally:
        processes.kill_all()


def add_account(db: str, folder: Path) -> None:
    """The test's user, added with `lab user add` as an operator would, and its credentials file for the client."""
    (folder / "password").write_text(PASSWORD + "\n", encoding="utf-8")
    public_db, secret = without_password(db, folder)  # the database password through libpq's PGPASSWORD here
    added = subprocess.run([CHAMBERLAB, "lab", "user", "add", USER, "--password-file", str(folder / "password"),
                            "--db", public_db], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PGPASSWORD": secret.read_text().strip()})
    assert added.returncode == 0, added.stderr
    write_credentials(folder / "credentials.ini", USER, PASSWORD)


def without_password(db: str, folder: Path) -> tuple[str, Path]:
    """The URL without its password, and the password in a 0600 file (--db-password-file)."""
    from sqlalchemy.engine import make_url

    url = make_url(db)
    secret = folder / "db-password"
    secret.touch(mode=0o600)
    secret.write_text((url.password or "") + "\n", encoding="utf-8")
    return url._replace(password=None).render_as_string(hide_password=False), secret


def client(folder: Path, endpoint: str) -> Any:
    from causalchamber.lab import Lab

    return Lab(credentials_file=str(folder / "credentials.ini"), endpoint=endpoint, verbose=False)


def submit(lab: Any, chamber: str, msr: list[int], tag: str) -> tuple[str, int]:
    """An experiment through the client: one SET of an actuator (so the chamber is left unsafe), then MSRs;
    (its id, the rows it should measure)."""
    protocol = lab.new_experiment(chamber, "standard")
    protocol.set(*ACTUATOR[KIND[chamber]])
    for n in msr:
        protocol.measure(n, delay=0)
    return protocol.submit(tag=tag), sum(msr)


def chamber_status(lab: Any) -> dict[str, str]:
    return {c["chamber_id"]: c["status"] for c in lab.get_available_chambers(verbose=False)}


class History:
    """Every experiment as polled: the statuses it went through and each started_on it showed."""

    def __init__(self) -> None:
        self.statuses: dict[str, list[str]] = {}
        self.started: dict[str, set[float]] = {}
        self.last: dict[str, dict[str, Any]] = {}

    def record(self, lab: Any) -> dict[str, dict[str, Any]]:
        for e in lab.get_experiments(verbose=False):
            seen = self.statuses.setdefault(e["experiment_id"], [])
            if not seen or seen[-1] != e["status"]:
                seen.append(e["status"])
            if e.get("started_on") is not None:
                self.started.setdefault(e["experiment_id"], set()).add(e["started_on"])
            self.last[e["experiment_id"]] = e
        return self.last

    def started_once(self) -> None:
        moved = {e: sorted(s) for e, s in self.started.items() if len(s) > 1}
        assert not moved, f"started_on changed (an experiment started again): {moved}"


def download(experiment: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(observations CSV, metadata) of the experiment's zip, after checking its SHA-256 against `checksum`."""
    import yaml

    assert experiment.get("download_url") and experiment.get("checksum"), experiment
    with urllib.request.urlopen(experiment["download_url"], timeout=30) as reply:
        data = reply.read()
    assert hashlib.sha256(data).hexdigest() == experiment["checksum"], "the zip's SHA-256 is not its checksum"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        root = experiment["experiment_id"]
        meta = yaml.safe_load(archive.read(f"{root}/metadata.yaml"))
        csv = archive.read(f"{root}/{meta['observations_file']}").decode()
    return csv, meta


def data_rows(csv: str) -> int:
    lines = [line for line in csv.splitlines() if line.strip()]
    return max(0, len(lines) - 1)


def assert_done_once(lab: Any, experiment: dict[str, Any], planned: int, root: Path) -> None:
    """DONE with exactly its planned rows (a second run would double them), in the zip the client checks too."""
    assert experiment["status"] == "DONE", experiment
    assert experiment["n_observations"] == planned, experiment
    csv, meta = download(experiment)
    assert data_rows(csv) == planned and meta["n_observations"] == planned, (data_rows(csv), meta)
    root.mkdir(parents=True, exist_ok=True)
    dataset = lab.download_data(experiment["experiment_id"], root=str(root), verbose=False)
    assert len(dataset.dataframe) == planned


# ----------------------------------------------------------------------------------------------- (b) a host dies
def test_a_killed_worker_fails_its_experiment_once_and_its_queue_waits_for_the_next(lab_setup: Processes,
                                                                                   tmp_path: Path) -> None:
    import psycopg

    procs = lab_setup
    api, ready = procs.api("api")
    assert ready["workers"] == [], ready  # on PostgreSQL the API process serves no chamber itself
    worker_1 = procs.worker("worker-1", SLOW, FAST_B)
    worker_2 = procs.worker("worker-2", FAST_C, FAST_D)
    lab = client(tmp_path, ready["endpoint"])
    poll("all four chambers READY", lambda: set(chamber_status(lab).values()) == {"READY"}, 60)

    planned: dict[str, int] = {}
    on: dict[str, str] = {}
    killed, planned[killed] = submit(lab, SLOW, [5] * 16, "the one killed")  # 80 rows at ~7 rows/s: ~11 s
    for tag, chamber, msr in [("b-before", FAST_B, [10, 10]), ("c-1", FAST_C, [20]), ("d-1", FAST_D, [15]),
                              ("c-2", FAST_C, [5, 5])]:
        eid, planned[eid] = submit(lab, chamber, msr, tag)
        on[eid] = chamber
    waiting_slow = []
    for tag in ("slow-queued-1", "slow-queued-2"):
        eid, planned[eid] = submit(lab, SLOW, [3, 4], tag)
        waiting_slow.append(eid)
    history = History()

    def killed_has_rows() -> Any:
        e = history.record(lab)[killed]
        return e if e["status"] == "RUNNING" and e["n_observations"] > 0 else None

    before = poll("the slow experiment RUNNING with rows stored", killed_has_rows, 60, every_s=0.05)
    b_done = poll("worker 1's fast chamber done with its experiment",
                  lambda: [e for e in history.record(lab).values() if e["tag"] == "b-before"
                           and e["status"] == "DONE"], 60)
    worker_1.kill()
    worker_1_id = f"{socket.gethostname()}/{worker_1.pid}/{SLOW}"

    after_kill: dict[str, str] = {}
    for tag, chamber, msr in [("b-after", FAST_B, [6]), ("c-3", FAST_C, [7]), ("d-2", FAST_D, [8, 2])]:
        eid, planned[eid] = submit(lab, chamber, msr, tag)
        after_kill[tag], on[eid] = eid, chamber
    waiting = waiting_slow + [after_kill["b-after"]]

    failed = poll("the killed worker's experiment FAILED",
                  lambda: (e := history.record(lab)[killed])["status"] in FINAL and e, 20, every_s=0.2)
    assert failed["status"] == "FAILED", failed
    assert worker_1_id in (failed["reason"] or "") and "stopped" in failed["reason"], failed["reason"]
    assert before["n_observations"] <= failed["n_observations"] < planned[killed], failed
    csv, meta = download(failed)  # the partial rows, downloadable, the checksum that of these bytes
    assert data_rows(csv) == failed["n_observations"] and meta["status"] == "FAILED", meta

    host_2 = [e for e, chamber in on.items() if chamber in (FAST_C, FAST_D)]

    def host_2_done_and_host_1_waits() -> bool:
        last = history.record(lab)
        stirred = [e for e in waiting if last[e]["status"] != "QUEUED"]
        assert not stirred, f"worker 1's queue moved with no worker: {[last[e] for e in stirred]}"
        return all(last[e]["status"] in FINAL for e in host_2)

    poll("worker 2's experiments ended", host_2_done_and_host_1_waits, 60)
    for e in host_2:
        assert_done_once(lab, history.last[e], planned[e], tmp_path / "downloads")
    status = chamber_status(lab)
    assert status[SLOW] == status[FAST_B] == "OFFLINE" and status[FAST_C] == status[FAST_D] == "READY", status

    # A new worker for the dead host's chambers; the queued rows are held (as a claim in progress would hold
    # them), so what it does before any experiment can start shows: the safe state, then READY.
    with psycopg.connect(procs.db) as hold:
        hold.execute("SELECT seq FROM lab_experiments WHERE experiment_id = ANY(%s) FOR UPDATE", (waiting,))
        worker_3 = procs.worker("worker-3", SLOW, FAST_B)
        poll("the new worker's chambers READY (safe state confirmed)",
             lambda: (s := chamber_status(lab))[SLOW] == s[FAST_B] == "READY" and s, 60)
        assert all(history.record(lab)[e]["status"] == "QUEUED" for e in waiting)
        hold.rollback()
    poll("worker 1's queue ran on the new worker",
         lambda: all(history.record(lab)[e]["status"] in FINAL for e in waiting), 90)
    for e in waiting:
        assert_done_once(lab, history.last[e], planned[e], tmp_path / "downloads")
        assert history.last[e]["started_on"] > failed["finished_on"], history.last[e]
    assert_done_once(lab, b_done[0], planned[b_done[0]["experiment_id"]], tmp_path / "downloads")

    again = history.record(lab)[killed]  # the killed one: not re-run, not touched
    assert (again["status"], again["n_observations"], again["started_on"], again["finished_on"]) == (
        "FAILED", failed["n_observations"], failed["started_on"], failed["finished_on"]), again
    went = history.statuses[killed]
    assert went[-2:] == ["RUNNING", "FAILED"] and went.count("RUNNING") == 1, went
    history.started_once()
    assert worker_2.proc.poll() is None and worker_3.proc.poll() is None and api.proc.poll() is None


# ----------------------------------------------------------------------------------------------- (c) API restart
def test_restarting_the_api_process_loses_no_experiment(lab_setup: Processes, tmp_path: Path) -> None:
    import sqlalchemy as sa

    from protocols.remote_lab import store

    procs = lab_setup
    api, ready = procs.api("api-1")
    procs.worker("workers", SLOW, FAST_B, FAST_C, FAST_D)
    lab = client(tmp_path, ready["endpoint"])
    poll("all four chambers READY", lambda: set(chamber_status(lab).values()) == {"READY"}, 60)

    planned: dict[str, int] = {}
    for i in range(2):
        eid, planned[eid] = submit(lab, SLOW, [5] * 5, f"slow-{i}")  # ~4 s each at the real pace
        for chamber in (FAST_B, FAST_C, FAST_D):
            eid, planned[eid] = submit(lab, chamber, [10, 5], f"{chamber}-{i}")
    history = History()
    slow_0 = next(e for e, x in history.record(lab).items() if x["tag"] == "slow-0")
    poll("an experiment RUNNING", lambda: history.record(lab)[slow_0]["status"] == "RUNNING", 60, every_s=0.05)
    assert any(e["status"] == "QUEUED" for e in history.last.values()), "nothing left queued to lose"

    assert api.terminate() == 0, api.stderr()[-1500:]
    engine = store.open_store(procs.db)  # the API is down: the workers go on, through the database alone
    try:
        def rows_now() -> dict[str, tuple[str, int]]:
            with engine.connect() as db:
                return {r.experiment_id: (r.status, r.n_observations) for r in db.execute(sa.select(
                    store.experiments.c.experiment_id, store.experiments.c.status,
                    store.experiments.c.n_observations))}
        at_stop = rows_now()
        poll("an experiment progressing with the API down",
             lambda: any(rows_now()[e] != at_stop[e] for e in at_stop), 30)
    finally:
        engine.dispose()

    api_2, ready_2 = procs.api("api-2")
    lab = client(tmp_path, ready_2["endpoint"])
    for chamber in (SLOW, FAST_B, FAST_C, FAST_D):
        eid, planned[eid] = submit(lab, chamber, [4], f"{chamber}-after")
    poll("every experiment ended", lambda: all(history.record(lab)[e]["status"] in FINAL for e in planned)
         and history.last, 120)
    assert set(history.last) == set(planned), "an experiment was lost or appeared"
    for e, rows in planned.items():
        assert_done_once(lab, history.last[e], rows, tmp_path / "downloads")
    history.started_once()
    assert api_2.proc.poll() is None


def test_a_real_time_session_reaches_a_chamber_served_by_another_hosts_worker(fresh_postgres_db: str,
                                                                              tmp_path: Path) -> None:
    """The API process has no worker; the session's calls travel through the database to the worker process that
    holds the chamber, and the rows come back. When that worker dies, the session's next call fails at once
    (LabError 503 naming the stopped worker), not after the call timeout."""
    from causalchamber.lab import Chamber
    from causalchamber.lab.exceptions import LabError

    lab_file = tmp_path / "rt-lab.json"
    lab_file.write_text(json.dumps({"chambers": {"wt-rt": {"board": "emulated:wt", "mode": "real-time"}}}))
    add_account(fresh_postgres_db, tmp_path)
    procs = Processes(tmp_path, fresh_postgres_db, lab_file)
    try:
        api, ready = procs.api("api")
        worker = procs.worker("worker", "wt-rt")
        lab = client(tmp_path, ready["endpoint"])
        poll("wt-rt READY", lambda: chamber_status(lab) == {"wt-rt": "READY"}, 60)
        chamber = Chamber("wt-rt", "standard", credentials=(USER, PASSWORD), endpoint=ready["endpoint"], verbose=0)
        assert chamber.set("load_in", 0.5) is None
        rows = chamber.measure(4)
        assert len(rows) == 4 and rows["load_in"].tolist() == [0.5] * 4
        batch = chamber.new_batch()
        batch.set("load_out", 0.25)
        batch.measure(2)
        assert batch.submit()["load_out"].tolist() == [0.25, 0.25]
        worker.kill()
        with pytest.raises(LabError) as failed:
            chamber.measure(1)
        assert failed.value.code == 503 and "worker" in failed.value.message  # the lease saw it (not a timeout:
        assert "did not answer within" not in failed.value.message, failed.value.message  # that says so)
    finally:
        procs.kill_all()

