"""The figures of issue 32 (a Remote Lab a group can share), measured for benchmarks/bench_lab.py and printed there
beside their goals and the figures the issue measured before the change.

Each function starts its own `chamberlab lab serve` (and, for the idle lab, `lab worker`) processes in a temp
folder, drives them over HTTP from this process on 127.0.0.1, and stops them with SIGINT:
- stall: one user's real-time call in a 60 s WAIT and 40 session opens waiting behind it; another user's
  GET /v0/chambers and GET /v0/experiments latencies (goal p99 <= 200 ms);
- logins: 100 concurrent wrong logins (each from its own 127.0.0.x address, so the limiter does not stop them
  before the hash): the server's peak memory above idle (goal <= 300 MB) and another user's p99 meanwhile (goal
  <= 500 ms); and a known name with a wrong password against an unknown name (goal: medians within 25 %);
- idle: 5 idle chambers on PostgreSQL (transactions/s from pg_stat_database, goal <= 5; CPU per process, goal
  <= 2 % of a core) and on SQLite in one process (CPU); submit -> claimed on an idle chamber (goal p99 <= 100 ms,
  plus the chamber's preparation, reported beside it).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx

ROOT = Path(__file__).resolve().parents[1]
USERS = {"ada": "ada-password-1", "bob": "bob-password-1"}
BEFORE = {"stall_s": 55.1, "burst_mb": 2590 - 168, "burst_other_s": 6.5, "known_ms": 201.0, "unknown_ms": 2.0,
          "idle_tx_s": 464.0, "idle_cpu": 0.85}
"""What issue 32 measured before the change (127.0.0.1, the same kind of machine)."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))]


def cli(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "bench_cli.py"), *args]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def lab(chambers: dict[str, dict[str, Any]], *, db: str | None = None, password_file: Path | None = None,
        workers: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """`lab serve` (SQLite with in-process workers, or PostgreSQL with `lab worker` processes for `workers`)."""
    sys.path.insert(0, str(ROOT))
    from protocols.remote_lab import service, store
    from protocols.remote_lab.accounts import Accounts

    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_lab_group-")))
        config = folder / "lab.json"
        config.write_text(json.dumps({"chambers": chambers, "caps": {"max_queued_per_user": 100_000}}))
        where = ["--db", db, "--db-password-file", str(password_file)] if db else ["--data", str(folder / "data")]
        url = service.database_url(db, None if db else folder / "data", password_file)
        engine = store.open_store(url)
        try:
            store.register_chambers(engine, chambers)
            accounts = Accounts(engine, time.time)
            for name, password in USERS.items():
                accounts.add(name, password)
        finally:
            engine.dispose()
        procs: list[subprocess.Popen] = []

        def stop() -> None:
            for proc in reversed(procs):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            for proc in reversed(procs):
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
        stack.callback(stop)
        serve = subprocess.Popen(cli("lab", "serve", "--config", str(config), *where, "--listen-port", "0", "--json",
                                     *(["--no-workers"] if workers is not None else [])),
                                 stdout=subprocess.PIPE, stderr=open(folder / "serve.log", "w"), text=True, cwd=folder)
        procs.append(serve)
        for i, chamber in enumerate(workers or []):
            procs.append(subprocess.Popen(cli("lab", "worker", "--config", str(config), *where, "--chamber", chamber),
                                          stdout=subprocess.DEVNULL, stderr=open(folder / f"w{i}.log", "w"),
                                          cwd=folder))
        line = serve.stdout.readline()
        if not line:
            raise RuntimeError(f"lab serve did not start: {(folder / 'serve.log').read_text()[-1500:]}")
        endpoint = json.loads(line)["endpoint"]
        deadline = time.monotonic() + 90
        while workers != []:  # `lab serve --no-workers` alone: its chambers wait for `lab worker` processes
            states = httpx.get(endpoint + "/health", timeout=10).json()["chambers"]
            if all(s == "READY" for s in states.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"chambers not READY: {states}")
            time.sleep(0.1)
        yield {"endpoint": endpoint, "pids": [p.pid for p in procs], "url": url}


def timed(client: httpx.Client, path: str) -> float:
    start = time.perf_counter()
    response = client.get(path)
    response.raise_for_status()
    return time.perf_counter() - start


def stall(gets: int = 100) -> dict[str, Any]:
    """Another user's GETs while ada's call sits in a 60 s WAIT with 40 of her session opens waiting behind it."""
    with lab({"rt": {"board": "emulated:wt", "mode": "real-time"}, "q": {"board": "emulated:wt"}}) as served:
        base = served["endpoint"]
        ada = httpx.Client(base_url=base, auth=("ada", USERS["ada"]), timeout=120)
        sid = ada.post("/sessions", json={"chamber_id": "rt", "chamber_config": "standard"}).json()["session_id"]
        threads = [threading.Thread(target=lambda: httpx.post(
            f"{base}/sessions/{sid}/instructions", json={"instructions": ["WAIT,60000"]}, auth=("ada", USERS["ada"]),
            timeout=120), daemon=True)]
        threads[0].start()
        while httpx.get(base + "/health", timeout=10).json()["chambers"]["rt"] != "EXECUTING":
            time.sleep(0.05)
        for _ in range(40):
            threads.append(threading.Thread(target=lambda: httpx.post(
                f"{base}/sessions", json={"chamber_id": "rt", "chamber_config": "standard"},
                auth=("ada", USERS["ada"]), timeout=120), daemon=True))
            threads[-1].start()
        time.sleep(1.0)  # the opens are in (each waits on the event loop for the chamber)
        latencies: dict[str, list[float]] = {"/chambers": [], "/experiments": []}
        with httpx.Client(base_url=base, auth=("bob", USERS["bob"]), timeout=60) as bob:
            bob.get("/chambers")  # bob's first login hashes his password (~0.2 s on purpose); later ones are remembered
            for _ in range(gets):
                for path in latencies:
                    latencies[path].append(timed(bob, path))
        in_flight = sum(t.is_alive() for t in threads)
    return {"in_flight": in_flight, **{f"{p}_p50_ms": statistics.median(v) * 1e3 for p, v in latencies.items()},
            **{f"{p}_p99_ms": percentile(v, 99) * 1e3 for p, v in latencies.items()}}


def logins(burst: int = 100, pairs: int = 30) -> dict[str, Any]:
    with lab({"q": {"board": "emulated:wt"}}) as served:
        base, pid = served["endpoint"], served["pids"][0]
        time.sleep(1.0)
        idle = rss_mb(pid)
        peak, done = [idle], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak.append(rss_mb(pid))
                time.sleep(0.01)

        def wrong(k: int) -> None:
            transport = httpx.HTTPTransport(local_address=f"127.0.{1 + k // 250}.{1 + k % 250}")
            with httpx.Client(transport=transport, timeout=120) as http:
                http.get(base + "/experiments", auth=("ada", f"guess-{k}"))

        others: list[float] = []
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        attackers = [threading.Thread(target=wrong, args=(k,)) for k in range(burst)]
        start = time.perf_counter()
        for t in attackers:
            t.start()
        with httpx.Client(base_url=base, auth=("bob", USERS["bob"]), timeout=60) as bob:
            bob.get("/chambers")  # remembered: no hash from here on
            while any(t.is_alive() for t in attackers):
                others.append(timed(bob, "/chambers"))
        burst_s = time.perf_counter() - start
        done.set()
        sampler.join()
        known, unknown = [], []
        for k in range(pairs):  # each from its own address: the limiter never answers instead of the hash
            for name, out in (("ada", known), (f"nobody-{k}", unknown)):
                address = f"127.0.{3 if name == 'ada' else 4}.{1 + k}"
                transport = httpx.HTTPTransport(local_address=address)
                with httpx.Client(transport=transport, timeout=60) as http:
                    http.get(base + "/health")
                    start = time.perf_counter()
                    assert http.get(base + "/experiments", auth=(name, "a wrong password")).status_code == 401
                    out.append((time.perf_counter() - start) * 1e3)
    return {"idle_mb": idle, "peak_above_idle_mb": max(peak) - idle, "burst_s": burst_s,
            "others_p99_ms": percentile(others, 99) * 1e3 if others else 0.0, "others_n": len(others),
            "known_median_ms": statistics.median(known), "unknown_median_ms": statistics.median(unknown)}


def postgres_admin() -> tuple[str, Any] | None:
    """A PostgreSQL admin URL: CHAMBERLAB_TEST_POSTGRES_URL, else a private cluster (tests/postgres_server.py)."""
    given = os.environ.get("CHAMBERLAB_TEST_POSTGRES_URL")
    if given:
        return given, None
    sys.path.insert(0, str(ROOT / "tests"))
    import postgres_server

    bin_dir = postgres_server._server_bin()
    if bin_dir is None:
        return None
    cluster = postgres_server._PrivateCluster(bin_dir)
    return cluster.start(), cluster


def transactions(admin: str, database: str) -> int:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:  # connected to another database: not counted
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                                (database,)).fetchone()[0])


def idle(window_s: float = 30.0, chambers: int = 5, submits: int = 30) -> dict[str, Any]:
    out: dict[str, Any] = {}
    lab_chambers = {f"wt-{i + 1}": {"board": "emulated:wt"} for i in range(chambers)}
    with lab(lab_chambers) as served:  # SQLite, one process
        time.sleep(3.0)
        pid, before = served["pids"][0], cpu_s(served["pids"][0])
        time.sleep(window_s)
        out["sqlite_cpu"] = (cpu_s(pid) - before) / window_s
    found = postgres_admin()
    if found is None:
        out["postgres"] = "skipped: no PostgreSQL (set CHAMBERLAB_TEST_POSTGRES_URL or install Debian's postgresql)"
        return out
    admin, cluster = found
    import psycopg

    name = f"bench_idle_{secrets.token_hex(4)}"
    admin = admin.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return run_postgres_idle(admin, name, lab_chambers, window_s, submits, out, cluster)


def run_postgres_idle(admin: str, name: str, lab_chambers: dict[str, Any], window_s: float, submits: int,
                      out: dict[str, Any], cluster: Any) -> dict[str, Any]:
    """The PostgreSQL part of `idle`: one `lab serve --no-workers` and one `lab worker` for every chamber."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(admin).set(database=name)
    try:
        with tempfile.TemporaryDirectory() as folder:
            secret = Path(folder) / "pw"
            secret.touch(mode=0o600)
            secret.write_text((url.password or "") + "\n")
            public = url._replace(password=None).render_as_string(hide_password=False)
            with lab_with_workers(lab_chambers, public, secret) as served:
                time.sleep(3.0)
                pids = served["pids"]
                cpu0, tx0 = [cpu_s(p) for p in pids], transactions(admin, name)
                time.sleep(window_s)
                tx1, cpu1 = transactions(admin, name), [cpu_s(p) for p in pids]
                out["postgres_tx_s"] = (tx1 - tx0) / window_s
                out["window_s"] = window_s
                out["postgres_cpu"] = {"api": (cpu1[0] - cpu0[0]) / window_s, "worker": (cpu1[1] - cpu0[1]) / window_s}
                out.update(claim_latency(served["endpoint"], next(iter(lab_chambers)), submits))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if cluster is not None:
            cluster.stop()
    return out


@contextmanager
def lab_with_workers(chambers: dict[str, Any], db: str, secret: Path) -> Iterator[dict[str, Any]]:
    with lab(chambers, db=db, password_file=secret, workers=[]) as served:
        folder = Path(tempfile.mkdtemp(prefix="bench_lab_worker-"))
        config = folder / "lab.json"
        config.write_text(json.dumps({"chambers": chambers}))
        worker = subprocess.Popen(cli("lab", "worker", "--config", str(config), "--db", db, "--db-password-file",
                                      str(secret), *[a for c in chambers for a in ("--chamber", c)]),
                                  stdout=subprocess.DEVNULL, stderr=open(folder / "worker.log", "w"), cwd=folder)
        try:
            deadline = time.monotonic() + 90
            while set(httpx.get(served["endpoint"] + "/health", timeout=10).json()["chambers"].values()) != {"READY"}:
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise RuntimeError(f"workers not READY: {(folder / 'worker.log').read_text()[-1500:]}")
                time.sleep(0.1)
            yield {**served, "pids": [served["pids"][0], worker.pid]}
        finally:
            worker.send_signal(signal.SIGINT)
            worker.wait(timeout=60)


def claim_latency(endpoint: str, chamber: str, submits: int) -> dict[str, Any]:
    """One experiment at a time on an idle chamber: submitted_on -> started_on (claimed), and started_on -> its
    first row (the chamber's preparation, then one row)."""
    import csv
    import io
    import zipfile

    claims, prepare = [], []
    with httpx.Client(base_url=endpoint, auth=("ada", USERS["ada"]), timeout=60) as http:
        for _ in range(submits):
            while http.get("/health").json()["chambers"][chamber] != "READY":
                time.sleep(0.02)
            time.sleep(0.3)  # idle: the worker sleeps on its wake-up
            eid = http.post("/experiments", json={"chamber_id": chamber, "chamber_config": "standard",
                                                  "instructions": ["SET,load_in,0.5", "MSR,1,0"]}).json()[
                "experiment_id"]
            while (row := http.get(f"/experiments/{eid}").json())["status"] not in ("DONE", "FAILED", "CANCELED"):
                time.sleep(0.02)
            with zipfile.ZipFile(io.BytesIO(httpx.get(row["download_url"], timeout=30).content)) as z:
                first = next(csv.DictReader(io.StringIO(z.read(f"{eid}/observations.csv").decode())))
            claims.append((row["started_on"] - row["submitted_on"]) * 1e3)
            prepare.append((float(first["timestamp"]) - row["started_on"]) * 1e3)
    return {"claim_p50_ms": statistics.median(claims), "claim_p99_ms": percentile(claims, 99),
            "first_row_p50_ms": statistics.median(prepare), "first_row_p99_ms": percentile(prepare, 99)}


def show(r: dict[str, Any]) -> None:
    s, g, i = r.get("stall"), r.get("logins"), r.get("idle")
    print("\n4. a lab a group shares (issue 32); 'before' is what the issue measured before the change")
    if s:
        print(f"stall: ada's real-time call in WAIT,60000 + 40 of her session opens waiting ({s['in_flight']} still "
              "in flight when measured); bob's GETs:")
        for path in ("/chambers", "/experiments"):
            p99 = s[f"{path}_p99_ms"]
            print(f"  GET /v0{path:<13} p50 {s[f'{path}_p50_ms']:7.1f} ms  p99 {p99:7.1f} ms  (goal <= 200 ms: "
                  f"{'met' if p99 <= 200 else 'NOT met'}; before {BEFORE['stall_s']:g} s)")
    if g:
        print(f"logins: 100 concurrent wrong logins took {g['burst_s']:.1f} s; server memory peak "
              f"{g['peak_above_idle_mb']:.0f} MB above idle {g['idle_mb']:.0f} MB (goal <= 300 MB: "
              f"{'met' if g['peak_above_idle_mb'] <= 300 else 'NOT met'}; before {BEFORE['burst_mb']:g} MB)")
        print(f"  another user meanwhile: p99 {g['others_p99_ms']:.1f} ms over {g['others_n']} GETs (goal <= 500 ms: "
              f"{'met' if g['others_p99_ms'] <= 500 else 'NOT met'}; before {BEFORE['burst_other_s']:g} s)")
        ratio = g["unknown_median_ms"] / g["known_median_ms"]
        print(f"  wrong password, known name: median {g['known_median_ms']:.1f} ms; unknown name "
              f"{g['unknown_median_ms']:.1f} ms; ratio {ratio:.2f} (goal within 25 %: "
              f"{'met' if abs(ratio - 1) <= 0.25 else 'NOT met'}; before {BEFORE['known_ms']:g} vs "
              f"{BEFORE['unknown_ms']:g} ms)")
    if i:
        print(f"idle, 5 chambers: SQLite, one process: {i['sqlite_cpu'] * 100:.2f} % of a core "
              f"(goal <= 2 %: {'met' if i['sqlite_cpu'] <= 0.02 else 'NOT met'}; "
              f"before {BEFORE['idle_cpu'] * 100:g} %)")
        if isinstance(i.get("postgres"), str):
            print(f"  PostgreSQL: {i['postgres']}")
        elif "postgres_tx_s" in i:
            cpu = i["postgres_cpu"]
            print(f"  PostgreSQL (lab serve --no-workers + 1 lab worker), over {i['window_s']:g} s from 3 s after "
                  "the start (a shorter window holds more of the start-up's queries: --quick reads high): "
                  f"{i['postgres_tx_s']:.2f} transactions/s "
                  f"(goal <= 5: {'met' if i['postgres_tx_s'] <= 5 else 'NOT met'}; before {BEFORE['idle_tx_s']:g}); "
                  f"CPU api {cpu['api'] * 100:.2f} %, worker {cpu['worker'] * 100:.2f} % of a core (goal <= 2 %)")
            print(f"  submit -> claimed on an idle chamber: p50 {i['claim_p50_ms']:.1f} ms, "
                  f"p99 {i['claim_p99_ms']:.1f} "
                  f"ms (goal <= 100 ms + preparation: {'met' if i['claim_p99_ms'] <= 100 else 'NOT met'}); "
                  f"claimed -> first row (preparation + 1 row): p50 {i['first_row_p50_ms']:.1f} ms, "
                  f"p99 {i['first_row_p99_ms']:.1f} ms")
