#!/usr/bin/env python3
"""Latency of the chamber tools API (describe_chamber, measure n=1) beside a bare FastAPI endpoint, one run.

Goal (issue #5): p99 under 20 ms and within 3x of the bare endpoint, with 1 and with 16 concurrent clients, on the
in-process simulated wind tunnel. The reference is a FastAPI app whose one route returns a constant, served by the
same uvicorn in the same server process, called by the same clients: the difference is what sessions, the freeze
check, argument validation, the lease, the chamber call and the flushed JSONL record cost.

Setup: the servers run in a child process (so client threads do not share the server's GIL); each client thread
has its own keep-alive http.client connection. The 16 clients share ONE frozen session, as the parallel tool calls of one
model turn would: the lease serialises their chamber calls (another session would get 409 by design). That is not
what limits the 16-client figures: one uvicorn event loop serves the bare endpoint one request at a time too, so
with 16 clients every figure is about 16 service times, and the 16 client threads share the machine's cores with
the server.

The reference for the goal is the bare endpoint as FastAPI's tutorial writes it (`def`, run in the thread pool).
The same constant from an `async def` endpoint (no thread hop, the cheapest FastAPI route) is printed beside it
for information; the goal is not judged against it.
Usage: python benchmarks/bench_api.py [--requests 400] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

PROJECT = Path(__file__).resolve().parents[1]
GOAL_P99_MS = 20.0
GOAL_RATIO = 3.0
CLAIM = "dps310-operating-range"


def serve_forever() -> None:
    """Child process: the API over the in-process sim and the bare app; print both URLs; stop on stdin EOF."""
    sys.path.insert(0, str(PROJECT))
    from fastapi import FastAPI

    import chamber
    from protocols.api.server import running_api, serve_in_thread

    bare = FastAPI()

    @bare.post("/constant")
    def constant() -> dict:
        return {"ok": True}

    @bare.post("/constant_async")
    async def constant_async() -> dict:
        return {"ok": True}

    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=0)
    with tempfile.TemporaryDirectory() as records:
        with running_api({"wt": wt}, record_dir=records) as api_url, serve_in_thread(bare) as bare_url:
            print(json.dumps({"api": api_url, "bare": bare_url}), flush=True)
            sys.stdin.read()
    wt.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def run_clients(url: str, path: str, body: dict, clients: int, per_client: int) -> list[float]:
    """Latencies (ms) of `per_client` sequential POSTs from each of `clients` threads, after a warm-up each.

    The client is the standard library's keep-alive http.client (a few tens of microseconds per request), so the
    figures are the server's, not a heavy client's; both the API and the bare endpoint get the same client."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    payload = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client() -> None:
        mine = []
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            for i in range(5 + per_client):
                if i == 5:
                    barrier.wait()
                start = time.perf_counter()
                conn.request("POST", path, body=payload, headers=headers)
                response = conn.getresponse()
                data = response.read()
                if i >= 5:
                    mine.append((time.perf_counter() - start) * 1000.0)
                if response.status != 200:
                    errors.append(f"{path}: HTTP {response.status} {data[:200]!r}")
        finally:
            conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, first: {errors[0]}")
    return latencies


def direct_chamber_measure_ms(calls: int = 400) -> dict[str, float]:
    """`Chamber.measure(1)` on the in-process sim called directly (no HTTP): the floor under every measure call,
    and with 16 clients on one chamber each call waits for up to 15 of these."""
    import chamber

    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=0)
    try:
        for _ in range(20):
            wt.measure(1)
        lat = []
        for _ in range(calls):
            start = time.perf_counter()
            wt.measure(1)
            lat.append((time.perf_counter() - start) * 1000.0)
    finally:
        wt.close()
    return {"direct_measure_p50_ms": statistics.median(lat), "direct_measure_p99_ms": percentile(lat, 99)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400, help="requests per configuration (split over the clients)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve_forever()
        return 0

    child = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=PROJECT)
    try:
        urls = json.loads(child.stdout.readline())
        with httpx.Client(base_url=urls["api"]) as http:
            sid = http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
            http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300, "high": 1200}}).raise_for_status()
        targets = {
            "describe": (urls["api"], f"/sessions/{sid}/tools/describe_chamber", {}),
            "measure": (urls["api"], f"/sessions/{sid}/tools/measure", {"n": 1}),
            "bare": (urls["bare"], "/constant", {}),
            "bare_async": (urls["bare"], "/constant_async", {}),
        }
        result: dict = {"requests_per_configuration": args.requests, "goal_p99_ms": GOAL_P99_MS,
                        "goal_ratio_to_bare": GOAL_RATIO}
        for clients in (1, 16):
            per_client = max(1, args.requests // clients)
            for name, (url, path, body) in targets.items():
                lat = run_clients(url, path, body, clients, per_client)
                result[f"{name}_p50_ms_{clients}"] = statistics.median(lat)
                result[f"{name}_p99_ms_{clients}"] = percentile(lat, 99)
        for clients in (1, 16):
            worst = max(result[f"describe_p99_ms_{clients}"], result[f"measure_p99_ms_{clients}"])
            result[f"p99_ms_{clients}"] = worst  # the slower of the two tools
            result[f"bare_p99_ms_{clients}"] = result[f"bare_p99_ms_{clients}"]
            result[f"ratio_p99_{clients}"] = worst / result[f"bare_p99_ms_{clients}"]
            result[f"ratio_p99_to_async_{clients}"] = worst / result[f"bare_async_p99_ms_{clients}"]
        result.update(direct_chamber_measure_ms())
        result["goal_met"] = all(result[f"p99_ms_{c}"] < GOAL_P99_MS and result[f"ratio_p99_{c}"] <= GOAL_RATIO
                                 for c in (1, 16))
    finally:
        child.stdin.close()
        child.wait(timeout=30)

    if args.json:
        print(json.dumps(result))
        return 0
    print(f"chamber tools API on the in-process sim (goal: p99 < {GOAL_P99_MS:g} ms and <= {GOAL_RATIO:g}x bare), "
          f"{args.requests} requests per row")
    print(f"{'clients':>7}  {'endpoint':<22} {'p50 ms':>8} {'p99 ms':>8}")
    for clients in (1, 16):
        for name, label in (("describe", "describe_chamber"), ("measure", "measure(n=1)"), ("bare", "bare FastAPI"),
                            ("bare_async", "(bare, async def)")):
            print(f"{clients:>7}  {label:<22} {result[f'{name}_p50_ms_{clients}']:>8.2f} "
                  f"{result[f'{name}_p99_ms_{clients}']:>8.2f}")
        print(f"{'':>7}  p99 ratio to bare: {result[f'ratio_p99_{clients}']:.2f}x "
              f"(to the async bare: {result[f'ratio_p99_to_async_{clients}']:.2f}x)")
    print(f"(Chamber.measure(1) called directly, no HTTP: p50 {result['direct_measure_p50_ms']:.2f} ms, "
          f"p99 {result['direct_measure_p99_ms']:.2f} ms; 16 clients of one session are served one at a time)")
    print("goal met" if result["goal_met"] else "goal NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
