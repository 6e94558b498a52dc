#!/usr/bin/env python3
"""Remote Lab throughput and overheads, through the authors' client, against goals and references in one run.

Why a benchmark: the lab is worth running only if the chambers, not the queue, set the pace. Three figures:

1. Experiments per minute on 1 chamber and on N chambers (default 4) served by two `chamberlab lab worker`
   processes on one SQLite database. Goal: N chambers >= 0.9 x N x the 1-chamber rate. Both are measured with the
   same processes up (the other chambers idle and polling during the 1-chamber run), K experiments per chamber
   queued at once; rate = experiments / (last finished_on - first submitted_on).
2. Queue overhead per experiment, one experiment at a time per chamber (a client thread per chamber, each
   submitting when its chamber is READY): submit -> claimed (started_on), claimed -> first row measured (the
   worker's per-experiment reset and safe state, then one row), last row -> finished_on (zip built and stored),
   finished_on -> the client sees DONE (polling every 20 ms) and DONE -> the chamber READY again (the safe state
   after), p50/p99 beside the experiment's chamber time (first row -> last row, from the rows' timestamps).
3. `GET /v0/queues/{chamber}` latency with 1,000 queued experiments on a chamber no worker serves, called with
   the authors' client (`Lab.get_queue(..., verbose=False)`, a new connection per call) and with a keep-alive
   requests session; the reference is the same call on a chamber with an empty queue.

The experiment: `SET,load_in,0.5`, `MSR,5,0`, `WAIT,1000`, `MSR,5,0` (10 rows and a 1 s wait; the MSRs measure,
so rows' timestamps bound the chamber's work) on emulated wind tunnels at the real board's pace
(`emulated:wt?pace=real`). Processes: `lab serve --no-workers` (the API alone) and two `lab worker` processes with
the measured chambers split between them; all are started here and stopped with SIGINT, in a temp dir.
4. A lab a group shares (issue 32; benchmarks/lab_group_figures.py): a long real-time call does not stall other
   users; a burst of wrong logins neither takes the server's memory nor stalls others, and an unknown name costs
   what a known one does; an idle lab costs next to nothing (PostgreSQL transactions/s, CPU per process); submit ->
   claimed on an idle chamber. The preparation share of the experiment's chamber time (figure 2: reset + safe
   state before issue 32, now a restore of the standard settings read back) is printed beside its 20 % goal.
Usage: python benchmarks/bench_lab.py [--chambers 4] [--experiments 8] [--queued 1000] [--quick] [--no-group]
       [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
GOAL_SCALING = 0.9
GOAL_PREPARATION = 0.20
PROTOCOL = ["SET,load_in,0.5", "MSR,5,0", "WAIT,1000", "MSR,5,0"]
BOARD = "emulated:wt?pace=real"
PARKED = "wt-parked"
USER, PASSWORD = "bench", "bench-password-123"
FINAL = ("DONE", "FAILED", "CANCELED")
PARTS = {"claim": "submit -> claimed by the worker (started_on)",
         "prepare": "claimed -> first row (preparation, the SET, 1 row)",
         "first_row": "submit -> first row measured",
         "chamber": "chamber time: first row -> last row",
         "store": "last row -> finished_on (zip stored)",
         "seen": "finished_on -> client sees DONE (20 ms polls)",
         "total": "client: submit call -> DONE seen",
         "ready": "DONE seen -> chamber READY again (safe state)"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def cli(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "bench_cli.py"), *args]


class LabProcesses:
    """`lab serve` and two `lab worker` processes on one SQLite file in `folder`; stopped with SIGINT on exit."""

    def __init__(self, folder: Path, chambers: list[str], stack: ExitStack):
        self.folder, self.chambers = folder, chambers
        self.data = folder / "data"
        self.config = folder / "lab.json"
        self.config.write_text(json.dumps({
            "chambers": {**{c: {"board": BOARD, "mode": "queue"} for c in chambers},
                         PARKED: {"board": "emulated:wt", "mode": "queue"}},
            "caps": {"max_queued_per_user": 100_000}}))
        self.procs: list[tuple[str, subprocess.Popen]] = []
        stack.callback(self.stop)
        self._prepare_database()
        serve = self._start("serve", "lab", "serve", "--config", str(self.config), "--data", str(self.data),
                            "--listen-port", "0", "--no-workers", "--json")
        halves = [h for h in (chambers[0::2], chambers[1::2]) if h]
        for i, half in enumerate(halves):  # started beside the API: the tables and chamber rows exist already
            self._start(f"worker{i + 1}", "lab", "worker", "--config", str(self.config), "--data", str(self.data),
                        *[a for c in half for a in ("--chamber", c)])
        self.workers = {f"worker{i + 1}": h for i, h in enumerate(halves)}
        line = serve.stdout.readline()
        if not line:
            raise RuntimeError(f"lab serve did not start: {self.log('serve')}")
        self.endpoint = json.loads(line)["endpoint"]

    def _prepare_database(self) -> None:
        """The account, before the processes start (the chambers' rows too, so each process finds them)."""
        from protocols.remote_lab import service, store
        from protocols.remote_lab.accounts import Accounts

        engine = store.open_store(service.database_url(None, self.data))
        try:
            store.register_chambers(engine, json.loads(self.config.read_text())["chambers"])
            Accounts(engine, time.time).add(USER, PASSWORD)
        finally:
            engine.dispose()

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        err = open(self.folder / f"{name}.log", "w")
        out = subprocess.PIPE if name == "serve" else err  # only the API's ready line is read
        proc = subprocess.Popen(cli(*args), cwd=ROOT, stdout=out, stderr=err, text=True)
        err.close()
        self.procs.append((name, proc))
        return proc

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text()[-2000:] if path.exists() else ""

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until every measured chamber's worker says READY (boards booted, safe state applied)."""
        deadline = time.monotonic() + timeout
        statuses: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}: {self.log(name)}")
            statuses = requests.get(self.endpoint + "/health", timeout=10).json()["chambers"]
            if all(statuses.get(c) == "READY" for c in self.chambers):
                return
            time.sleep(0.1)
        raise RuntimeError(f"chambers not READY within {timeout:g} s: {statuses}")

    def stop(self) -> None:
        for name, proc in reversed(self.procs):  # workers first (they finish their row, leave chambers safe)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for name, proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        self.procs.clear()


class Client:
    """The authors' client for what a user does, and a keep-alive requests session for fast polling."""

    def __init__(self, endpoint: str):
        with contextlib.redirect_stdout(io.StringIO()):  # the package prints a banner on import
            from causalchamber.lab import Lab

        self.endpoint = endpoint
        self.lab = Lab(credentials=(USER, PASSWORD), endpoint=endpoint, verbose=False)
        self.http = requests.Session()
        self.http.auth = (USER, PASSWORD)

    def submit(self, chamber_id: str) -> str:
        protocol = self.lab.new_experiment(chamber_id, "standard")
        protocol.set("load_in", 0.5)
        protocol.measure(5, 0)
        protocol.wait(1000)
        protocol.measure(5, 0)
        return protocol.submit(tag="bench_lab")

    def experiment(self, experiment_id: str) -> dict[str, Any]:
        response = self.http.get(f"{self.endpoint}/experiments/{experiment_id}", timeout=30)
        response.raise_for_status()
        return response.json()

    def wait_all(self, ids: list[str], timeout: float, interval: float = 0.25) -> dict[str, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        wanted = set(ids)
        while True:
            response = self.http.get(f"{self.endpoint}/experiments", timeout=30)
            response.raise_for_status()
            rows = {r["experiment_id"]: r for r in response.json()["experiments"] if r["experiment_id"] in wanted}
            if all(rows.get(i, {}).get("status") in FINAL for i in ids):
                return rows
            if time.monotonic() > deadline:
                left = [i for i in ids if rows.get(i, {}).get("status") not in FINAL]
                raise RuntimeError(f"{len(left)} experiments not finished within {timeout:g} s")
            time.sleep(interval)


def checked_done(rows: dict[str, dict[str, Any]]) -> None:
    bad = [r for r in rows.values() if r["status"] != "DONE"]
    if bad:
        raise RuntimeError(f"{len(bad)} experiments did not end DONE, first: {bad[0]['status']} {bad[0]['reason']}")


def rate(client: Client, chambers: list[str], per_chamber: int, cycle_s: float) -> dict[str, float]:
    """Queue `per_chamber` experiments on each chamber at once; experiments per minute over the whole run."""
    ids = [client.submit(c) for _ in range(per_chamber) for c in chambers]
    rows = client.wait_all(ids, timeout=60 + 3 * per_chamber * cycle_s)
    checked_done(rows)
    window = max(r["finished_on"] for r in rows.values()) - min(r["submitted_on"] for r in rows.values())
    return {"experiments": len(ids), "window_s": window, "per_min": len(ids) / window * 60.0}


def row_times(zip_bytes: bytes) -> tuple[float, float, int, dict[str, Any]]:
    """(first row's timestamp, last row's timestamp, rows, how the worker prepared the chamber) of an experiment's
    zip (the preparation is in its metadata.yaml)."""
    import yaml

    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as z:
        name = next(n for n in z.namelist() if n.endswith(".csv"))
        rows = list(csv.DictReader(io.StringIO(z.read(name).decode())))
        meta = yaml.safe_load(z.read(next(n for n in z.namelist() if n.endswith("metadata.yaml"))))
    stamps = [float(r["timestamp"]) for r in rows]
    return stamps[0], stamps[-1], len(rows), meta.get("preparation") or {}


def overhead(client: Client, chambers: list[str], count: int, poll_s: float = 0.02) -> dict[str, Any]:
    """One experiment at a time on each idle chamber (a thread per chamber, `count` in all): where the time
    between submit and DONE goes, and how long the chamber takes to be READY again after DONE."""
    parts: dict[str, list[float]] = {k: [] for k in PARTS}
    prepared: dict[str, list[float]] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def chamber_status(http: requests.Session, chamber_id: str) -> str:
        return http.get(f"{client.endpoint}/health", timeout=30).json()["chambers"][chamber_id]

    def serve(chamber_id: str, n: int) -> None:
        http = requests.Session()
        http.auth = (USER, PASSWORD)
        try:
            for _ in range(n):
                while chamber_status(http, chamber_id) != "READY":
                    time.sleep(poll_s)
                t_submit = time.time()
                experiment_id = client.submit(chamber_id)
                while (row := http.get(f"{client.endpoint}/experiments/{experiment_id}", timeout=30).json()
                       )["status"] not in FINAL:
                    time.sleep(poll_s)
                t_seen = time.time()
                while chamber_status(http, chamber_id) != "READY":
                    time.sleep(poll_s)
                t_ready = time.time()
                if row["status"] != "DONE":
                    raise RuntimeError(f"experiment {experiment_id} ended {row['status']}: {row['reason']}")
                first, last, rows, how = row_times(http.get(row["download_url"], timeout=30).content)
                if rows != 10:
                    raise RuntimeError(f"experiment {experiment_id}: expected 10 rows, got {rows}")
                with lock:
                    prepared.setdefault(how.get("how", "?"), []).append(float(how.get("seconds", "nan")))
                    for key, value in (("claim", row["started_on"] - row["submitted_on"]),
                                       ("prepare", first - row["started_on"]),
                                       ("first_row", first - row["submitted_on"]), ("chamber", last - first),
                                       ("store", row["finished_on"] - last), ("seen", t_seen - row["finished_on"]),
                                       ("total", t_seen - t_submit), ("ready", t_ready - t_seen)):
                        parts[key].append(value)
        except Exception as exc:  # reported after the join
            errors.append(f"{chamber_id}: {type(exc).__name__}: {exc}")
        finally:
            http.close()

    shares = split(count, len(chambers))
    threads = [threading.Thread(target=serve, args=(c, n)) for c, n in zip(chambers, shares) if n]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"overhead run failed: {errors[0]}")
    out: dict[str, Any] = {k: {"p50_ms": statistics.median(v) * 1e3, "p99_ms": percentile(v, 99) * 1e3}
                           for k, v in parts.items()}
    out["preparations"] = {how: {"n": len(v), "p50_ms": statistics.median(v) * 1e3, "p99_ms": percentile(v, 99) * 1e3}
                           for how, v in prepared.items()}
    return out


def split(count: int, parts: int) -> list[int]:
    """`count` spread over `parts` as evenly as whole numbers go (the first ones take the remainder)."""
    return [count // parts + (1 if i < count % parts else 0) for i in range(parts)]


def fill_queue(client: Client, chamber_id: str, count: int, threads: int = 4) -> None:
    """Queue `count` experiments on a chamber nobody serves (plain POSTs from a few threads; not measured)."""
    body = {"chamber_id": chamber_id, "chamber_config": "standard", "instructions": PROTOCOL, "tag": "bench_lab"}
    errors: list[str] = []

    def post(n: int) -> None:
        with requests.Session() as http:
            http.auth = (USER, PASSWORD)
            for _ in range(n):
                response = http.post(f"{client.endpoint}/experiments", json=body, timeout=30)
                if response.status_code != 200:
                    errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                    return

    shares = split(count, threads)
    workers = [threading.Thread(target=post, args=(n,)) for n in shares]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise RuntimeError(f"queuing failed: {errors[0]}")


def queue_latency(client: Client, chamber_id: str, calls: int, expected: int) -> dict[str, float]:
    """p50/p99 (ms) of GET /v0/queues/{chamber} with the authors' client and with a keep-alive session."""
    out: dict[str, float] = {}
    for how in ("client", "session"):
        lat = []
        for i in range(calls + 5):
            start = time.perf_counter()
            if how == "client":
                got = len(client.lab.get_queue(chamber_id, verbose=False))
            else:
                response = client.http.get(f"{client.endpoint}/queues/{chamber_id}", timeout=30)
                response.raise_for_status()
                got = len(response.json()["experiments"])
            if i >= 5:
                lat.append((time.perf_counter() - start) * 1e3)
            if got != expected:
                raise RuntimeError(f"queue of {chamber_id}: expected {expected} experiments, got {got}")
        out[f"{how}_p50_ms"], out[f"{how}_p99_ms"] = statistics.median(lat), percentile(lat, 99)
    return out


def query_ms(database: Path, chamber_id: str, calls: int) -> dict[str, float]:
    """The database's share of the queue call: store.queue_of on the lab's SQLite file, in this process."""
    from protocols.remote_lab import store

    engine = store.open_store(f"sqlite:///{database}")
    try:
        lat = []
        for i in range(calls + 5):
            start = time.perf_counter()
            store.queue_of(engine, chamber_id)
            if i >= 5:
                lat.append((time.perf_counter() - start) * 1e3)
    finally:
        engine.dispose()
    return {"query_p50_ms": statistics.median(lat), "query_p99_ms": percentile(lat, 99)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    chambers = [f"wt-{i + 1}" for i in range(args.chambers)]
    result: dict[str, Any] = {"chambers": args.chambers, "experiments_per_chamber": args.experiments,
                              "overhead_experiments": args.overhead, "queued": args.queued, "calls": args.calls,
                              "protocol": PROTOCOL, "board": BOARD, "goal_scaling": GOAL_SCALING,
                              "database": "sqlite (one file, WAL)", "worker_poll_s": None}
    from protocols.remote_lab.wakeups import SHARED_FILE_POLL_S

    result["worker_poll_s"] = SHARED_FILE_POLL_S  # `lab worker` processes on one SQLite file: no wake-up channel
    load_at_start = os.getloadavg()[0]
    seconds: dict[str, float] = {}
    mark = [time.monotonic()]

    def lap(name: str) -> None:
        now = time.monotonic()
        seconds[name], mark[0] = now - mark[0], now

    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_lab-")))
        lab = LabProcesses(folder, chambers, stack)
        lab.wait_ready()
        lap("start")
        result["workers"] = lab.workers
        client = Client(lab.endpoint)
        result["overhead"] = overhead(client, chambers, args.overhead)
        lap("overhead")
        cycle_s = (result["overhead"]["total"]["p50_ms"] + result["overhead"]["ready"]["p50_ms"]) / 1e3
        lab.wait_ready()
        result["one"] = rate(client, chambers[:1], args.experiments, cycle_s)
        lab.wait_ready()
        result["many"] = rate(client, chambers, args.experiments, cycle_s)
        lap("rates")
        result["scaling"] = result["many"]["per_min"] / (args.chambers * result["one"]["per_min"])
        result["empty_queue"] = queue_latency(client, chambers[0], args.calls, 0)
        fill_queue(client, PARKED, args.queued)
        result["full_queue"] = queue_latency(client, PARKED, args.calls, args.queued)
        result["full_queue"].update(query_ms(lab.data / "lab.sqlite", PARKED, args.calls))
        result["empty_queue"].update(query_ms(lab.data / "lab.sqlite", chambers[0], args.calls))
        lap("queue")
    lap("stop")
    if args.group:
        import lab_group_figures as group

        result["group"] = {"stall": group.stall(args.calls), "logins": group.logins()}
        lap("stall+logins")
        result["group"]["idle"] = group.idle(window_s=10.0 if args.quick else 30.0, submits=10 if args.quick else 30)
        lap("idle")
    o = result["overhead"]
    result["preparation_how"] = "restore" if "restore" in o["preparations"] else "reset"
    result["preparation_ms"] = o["preparations"][result["preparation_how"]]["p50_ms"]
    result["preparation_share"] = result["preparation_ms"] / o["chamber"]["p50_ms"]
    result["seconds"] = seconds
    result["goal_met"] = result["scaling"] >= GOAL_SCALING
    result["load_average"] = [load_at_start, os.getloadavg()[0]]
    return result


def show(r: dict[str, Any]) -> None:
    n = r["chambers"]
    print(f"Remote Lab on {r['database']}: `lab serve` + 2 `lab worker` processes ({r['workers']}); "
          f"boards {r['board']}")
    print(f"experiment: {', '.join(r['protocol'])} (a fan set, 10 rows + 1 s wait); "
          f"{os.cpu_count()} CPUs, load average {r['load_average'][0]:.1f} at start, {r['load_average'][1]:.1f} at end")
    print(f"\n1. throughput, {r['experiments_per_chamber']} experiments per chamber queued at once "
          f"(goal: {n} chambers >= {GOAL_SCALING:g} x {n} x 1 chamber)")
    print(f"{'chambers':>9} {'experiments':>12} {'window s':>9} {'exp/min':>8} {'goal exp/min':>13}")
    print(f"{1:>9} {r['one']['experiments']:>12} {r['one']['window_s']:>9.1f} {r['one']['per_min']:>8.1f} "
          f"{'(reference)':>13}")
    goal = GOAL_SCALING * n * r["one"]["per_min"]
    print(f"{n:>9} {r['many']['experiments']:>12} {r['many']['window_s']:>9.1f} {r['many']['per_min']:>8.1f} "
          f"{goal:>13.1f}")
    print(f"{'':>9} scaling {r['scaling']:.2f} of linear: {'goal met' if r['goal_met'] else 'goal NOT met'}")
    o = r["overhead"]
    print(f"\n2. one experiment at a time per idle chamber (all {n} at once), {r['overhead_experiments']} experiments "
          f"(`lab worker` processes beside the API on one SQLite file poll it every {r['worker_poll_s'] * 1e3:g} ms)")
    print(f"{'interval':<50} {'p50 ms':>8} {'p99 ms':>8}")
    for key, label in PARTS.items():
        print(f"{label:<50} {o[key]['p50_ms']:>8.1f} {o[key]['p99_ms']:>8.1f}")
    for how, p in o["preparations"].items():
        label = f"preparation by {how} (the worker's own, {p['n']} experiments)"
        print(f"{label:<50} {p['p50_ms']:>8.1f} {p['p99_ms']:>8.1f}")
    print(f"\n3. GET /v0/queues/{{chamber}}, {r['calls']} calls each")
    print(f"{'queue':<22} {'client p50':>10} {'client p99':>10} {'keep-alive p50':>14} {'keep-alive p99':>14} "
          f"{'query p50':>9} {'query p99':>9}")
    for key, label in (("empty_queue", "empty (reference)"), ("full_queue", f"{r['queued']} queued, no worker")):
        q = r[key]
        print(f"{label:<22} {q['client_p50_ms']:>10.1f} {q['client_p99_ms']:>10.1f} {q['session_p50_ms']:>14.1f} "
              f"{q['session_p99_ms']:>14.1f} {q['query_p50_ms']:>9.1f} {q['query_p99_ms']:>9.1f}")
    print("(client: Lab.get_queue(verbose=False), a new connection per call; keep-alive: a requests session; "
          "query: store.queue_of alone, in this process)")
    share = r["preparation_share"]
    print(f"preparation before an experiment (by {r['preparation_how']}; p50; the first on each chamber resets): "
          f"{r['preparation_ms']:.0f} ms = {share * 100:.0f} % of the experiment's chamber time "
          f"(goal <= {GOAL_PREPARATION * 100:g} %: "
          f"{'met' if share <= GOAL_PREPARATION else 'NOT met'}; before issue 32: 2.4 s before a 2.5 s experiment)")
    if "group" in r:
        import lab_group_figures as group

        group.show(r["group"])
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r["seconds"].items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chambers", type=int, default=4, help="emulated chambers for the N-chamber rate (default 4)")
    ap.add_argument("--experiments", type=int, default=None, help="experiments per chamber for the rates (8)")
    ap.add_argument("--overhead", type=int, default=None, help="experiments for the overhead figures (30)")
    ap.add_argument("--queued", type=int, default=None, help="queued experiments for the queue call (1000)")
    ap.add_argument("--calls", type=int, default=None, help="queue calls timed per way (100)")
    ap.add_argument("--quick", action="store_true", help="small numbers for a smoke run (about two minutes)")
    ap.add_argument("--no-group", dest="group", action="store_false", help="skip the figures of issue 32")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    defaults = {"experiments": 2, "overhead": args.chambers, "queued": 200, "calls": 30} if args.quick else \
        {"experiments": 8, "overhead": 30, "queued": 1000, "calls": 100}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.chambers < 1 or min(args.experiments, args.overhead, args.queued, args.calls) < 1:
        ap.error("expected --chambers, --experiments, --overhead, --queued and --calls of at least 1")
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    result = run(args)
    if args.json:
        print(json.dumps(result))
    else:
        show(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
