#!/usr/bin/env python3
"""Rows per second of the in-process simulator, per chamber, beside a plain numpy random draw of the same shape.

Goal (issue #3): ≥ 200,000 rows/s for each chamber. The reference is `rng.standard_normal((n, width))`, the
cost of merely drawing one random number per cell, so the ratio says how much the physics adds.
Usage: python benchmarks/bench_sim.py [--batch 10000] [--seconds 1.0] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from simulator.physics import make_model

GOAL_ROWS_PER_S = 200_000


def rate(fn, batch: int, seconds: float) -> float:
    fn(batch)  # warm-up
    rows, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn(batch)
        rows += batch
    return rows / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=10_000, help="rows per sample() call")
    ap.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    wt = make_model("wt", seed=0)
    wt.apply("load_in", 0.6)
    wt.apply("load_out", 0.4)
    lt = make_model("lt", seed=0)
    for name, value in (("red", 120), ("green", 80), ("blue", 200)):
        lt.apply(name, value)
    rng = np.random.default_rng(0)
    width = wt.layout.row_length
    result = {
        "batch_rows": args.batch,
        "rows_per_s_wt": rate(wt.sample, args.batch, args.seconds),
        "rows_per_s_lt": rate(lt.sample, args.batch, args.seconds),
        "numpy_draw_rows_per_s": rate(lambda n: rng.standard_normal((n, width)), args.batch, args.seconds),
        "numpy_draw_width": width,
        "rows_per_s_wt_batch_100": rate(wt.sample, 100, args.seconds / 2),
        "rows_per_s_lt_batch_100": rate(lt.sample, 100, args.seconds / 2),
        "goal_rows_per_s": GOAL_ROWS_PER_S,
    }
    result["goal_met"] = min(result["rows_per_s_wt"], result["rows_per_s_lt"]) >= GOAL_ROWS_PER_S
    if args.json:
        print(json.dumps(result))
    else:
        print(f"in-process simulator, {args.batch} rows per sample() call (goal ≥ {GOAL_ROWS_PER_S:,} rows/s)")
        print(f"  wind tunnel   {result['rows_per_s_wt']:>14,.0f} rows/s   (100-row calls: {result['rows_per_s_wt_batch_100']:,.0f})")
        print(f"  light tunnel  {result['rows_per_s_lt']:>14,.0f} rows/s   (100-row calls: {result['rows_per_s_lt_batch_100']:,.0f})")
        print(f"  numpy draw    {result['numpy_draw_rows_per_s']:>14,.0f} rows/s   (standard_normal, {width} columns)")
        print(f"  goal met: {result['goal_met']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
