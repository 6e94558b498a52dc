#!/usr/bin/env python3
"""Matrix throughput: cells per minute against a local model server with a fixed 2 s latency, by concurrency.

Why: a matrix of paid model calls is bound by model latency, not by our own work; running cells concurrently
should scale nearly linearly until our per-cell CPU (datasheet tools, SDK, record writing) saturates the
cores. Goal (issue 18): at concurrency 64, ≥ 25× the single-cell rate on 2 cores — and the records identical,
byte for byte, to a sequential run (each cell gets its own injected clock, so nothing in a record depends on
scheduling).

The model server runs in a child process (its own interpreter, so its work does not share our GIL): an
Anthropic Messages endpoint on 127.0.0.1 that waits the fixed latency (asyncio, no thread held) and answers
with a three-turn script (two search_text calls, then submit_extraction), request ids derived from the request
body. Cells run through the real matrix runner, the real anthropic SDK and the real datasheet tools, phase one
only (the chamber serves one call at a time; its throughput is bench_api.py's subject).

Usage: bench_matrix.py [--json] [--quick] [--latency 2.0] [--levels 1,8,32,64]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fastapi import Request  # at module level: FastAPI resolves the endpoint's annotation from these globals

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GOAL_SPEEDUP_64 = 25.0
CLAIMS = ("dps310-operating-range", "dps310-pressure-rate-range", "acs70331-bandwidth", "si115x-supply-voltage-vdd")


def _script(conv):
    """The server's policy: two searches and a submit, whatever the tools return (a fixed 3-turn cell)."""
    from agent.prompt import SUBMIT_EXTRACTION

    yield ("search_text", {"query": conv.task.parameter})
    yield ("search_text", {"query": conv.task.unit or "V"})
    unit = conv.task.unit or "V"
    yield (SUBMIT_EXTRACTION, {"value": 1.0, "unit": unit, "page": 1, "quote": f"1.0 {unit}", "conditions": {}})


def serve(latency_s: float) -> None:
    """Child process: serve the scripted Messages endpoint; print the base URL on stdout, then run."""
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from agent.models.scripted import ReplayPolicy
    from agent.prompt import ClaimView
    from agent.testserver import answer

    policy = ReplayPolicy(_script)
    task = ClaimView("bench", "bench", "range", "V", ())  # HTTP carries no claim: one fixed task for every cell
    app = FastAPI()

    @app.post("/v1/messages")
    async def messages(request: Request) -> JSONResponse:
        raw = await request.body()
        await asyncio.sleep(latency_s)
        status, reply = answer(policy, json.loads(raw), task)
        return JSONResponse(reply, status_code=status, headers={"request-id": "req_" + hashlib.sha256(raw).hexdigest()[:20]})

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", backlog=2048, timeout_keep_alive=300,
                            limit_concurrency=None)
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:  # startup handshake
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        print(f"http://127.0.0.1:{port}", flush=True)
        await task

    asyncio.run(run())


def _cell_clock(_cell):
    """Each cell's own clock: 10 ms per reading from a fixed epoch (records independent of scheduling)."""
    return itertools.count(1_800_000_000.0, 0.01).__next__


def run_level(url: str, claims, datasheets: Path, cells: list, concurrency: int, out: Path) -> float:
    """Run `cells` at `concurrency` into `out`; returns the wall seconds."""
    from agent.models.anthropic_client import AnthropicClient
    from agent.scoring.matrix import run_matrix

    client = AnthropicClient("bench-model", api_key="bench-key", base_url=url)  # one SDK client, shared
    t0 = time.perf_counter()
    result = run_matrix(cells, claims=claims, out=out, datasheets_dir=datasheets, client_factory=lambda _: client,
                        clock=time.time, clock_for=_cell_clock, concurrency=concurrency)
    wall = time.perf_counter() - t0
    bad = {k: v for k, v in result.items() if k.startswith("outcome:") and k != "outcome:submitted"}
    if result.get("failures") or bad or result.get("ran") != len(cells):
        raise SystemExit(f"concurrency {concurrency}: not every cell submitted: {result}")
    return wall


def _records(out: Path) -> dict[str, bytes]:
    cells = out / "cells"
    return {str(p.relative_to(cells)): p.read_bytes() for p in sorted(cells.rglob("*")) if p.is_file()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one wave per level (fewer cells; noisier)")
    ap.add_argument("--latency", type=float, default=2.0, help="the model server's fixed latency, seconds")
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.latency)
        return 0

    from agent.scoring.matrix import plan
    from bench_cli import shared_dir
    from protocols.claims import load_claims

    levels = [int(x) for x in args.levels.split(",")]
    claims = load_claims()
    datasheets = shared_dir() / "datasheets"
    ids = [c for c in CLAIMS if c in claims and (datasheets / claims[c].identity.filename).exists()]
    if not ids:
        raise SystemExit(f"no datasheets for {CLAIMS} under {datasheets} (set CHAMBERLAB_SHARED)")
    child = subprocess.Popen([sys.executable, __file__, "--serve", "--latency", str(args.latency)],
                             stdout=subprocess.PIPE, text=True)
    try:
        url = child.stdout.readline().strip()
        if not url.startswith("http://"):
            raise SystemExit("the model server did not start")
        waves = 1 if args.quick else 2
        tmp = Path(tempfile.mkdtemp(prefix="bench_matrix_"))
        rows, walls = [], {}
        biggest = max(levels)
        # one plan for every level: the first n cells of it; the largest level's records are the reference
        total = max(biggest * waves, 2)
        repeats = -(-total // len(ids))
        all_cells = plan(["bench-model"], ids, repeats, ["normal"])
        all_cells = sorted(all_cells, key=lambda c: (c.repeat, c.claim_id))[:total]
        for level in levels:
            n = max(level * waves, 2) if level > 1 else (2 if args.quick else 3)
            cells = all_cells[:n]
            wall = run_level(url, claims, datasheets, cells, level, tmp / f"c{level}")
            walls[level] = wall
            rows.append({"concurrency": level, "cells": n, "wall_s": round(wall, 2),
                         "cells_per_min": round(n / wall * 60.0, 1)})
        base = rows[0]["cells_per_min"]
        for r in rows:
            r["speedup"] = round(r["cells_per_min"] / base, 1)
        # byte-identity: every record of a smaller level equals the same cell's record at the largest level
        ref = _records(tmp / f"c{biggest}")
        identical = all(all(ref.get(k) == v for k, v in _records(tmp / f"c{lv}").items()) for lv in levels)
    finally:
        child.terminate()
        child.wait(timeout=10)
    by = {r["concurrency"]: r for r in rows}
    out = {
        "latency_s": args.latency, "turns_per_cell": 3, "levels": rows,
        "cells_per_min_1": by.get(1, {}).get("cells_per_min"), "cells_per_min_64": by.get(64, {}).get("cells_per_min"),
        "speedup_64": by.get(64, {}).get("speedup"), "goal_speedup_64": GOAL_SPEEDUP_64,
        "records_identical_to_sequential": identical, "cores": _cores(),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"matrix throughput, model latency {args.latency:g} s, 3 turns per cell, {out['cores']} cores")
        print(f"{'concurrency':>12} {'cells':>6} {'wall s':>8} {'cells/min':>10} {'speedup':>8}")
        for r in rows:
            print(f"{r['concurrency']:>12} {r['cells']:>6} {r['wall_s']:>8} {r['cells_per_min']:>10} {r['speedup']:>7}×")
        print(f"goal at 64: ≥ {GOAL_SPEEDUP_64:g}× the single-cell rate; records byte-identical to the sequential "
              f"run: {identical}")
    return 0


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


if __name__ == "__main__":
    sys.exit(main())
