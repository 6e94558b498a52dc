#!/usr/bin/env python3
"""Wall time of grading a fleet: 8 real-pace wind tunnels graded concurrently against one, in one run.

Why a benchmark: a fleet campaign is worth having only if the chambers overlap — a real chamber is mostly waiting
(~7 rows/s: an MSR of 100 rows is ~14 s of the board's own time), so one host thread per chamber should grade 8 of
them in about the time of one. Goal (issue 34): the fleet's wall time ≤ GOAL_RATIO × one chamber's, each measured
from opening the chambers to every one of them closed safe (protocols.fleet_campaign.fleet_chambers +
grade_campaign: the code `check --fleet` and `run --fleet` run).

Boards: real-pace emulated wind tunnels, each its own process (`bench_cli.py sim serve --pace real --transport tcp`,
a distinct seed), so the host process does only the host's work, as with USB boards. Each chamber has the simulated
instrument station (its own copy, as `--fleet demo:N` gives) and grades CLAIMS: the fans-off barometer claims
(operating range, pressure precision at four OSRs, absolute accuracy against the station's reference) and a
potentiometer's zero-scale error, in one planned campaign with the calibration in its plan. The single chamber runs
first, then the 8 (the first board serves both: every connection resets it).

Run: python benchmarks/bench_fleet.py [--json] [--rows 100] [--chambers 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chamber.instruments import sim_station_file  # noqa: E402
from chamber.stop import StopRequest  # noqa: E402
from protocols.claim_sources import load_main_job_claims  # noqa: E402
from protocols.fleet_campaign import fleet_chambers, grade_campaign  # noqa: E402
from protocols.fleet_file import Fleet, FleetMember  # noqa: E402

from board_processes import emulated_board  # noqa: E402  (benchmarks/, beside this file)

GOAL_RATIO = 1.3
CLAIMS = ("dps310-operating-range", "dps310-pressure-precision-high", "dps310-absolute-accuracy",
          "mcp4151-zero-scale-error-pot-1")


def timed(urls: list[str], rows: int) -> dict[str, Any]:
    """Open, grade and close a fleet of the boards at `urls`; the wall time of each phase and each campaign."""
    pool = load_main_job_claims()
    claims = [pool[c] for c in CLAIMS]
    fleet = Fleet(tuple(FleetMember(f"wt{i}", url, station=sim_station_file()) for i, url in enumerate(urls, 1)),
                  f"bench:{len(urls)}")
    began = time.monotonic()
    with fleet_chambers(fleet, say=lambda line: None, boot_timeout=15.0) as campaign:
        opened = time.monotonic()
        grade_campaign(campaign, claims, rows=rows, stop=StopRequest())
        graded = time.monotonic()
    closed = time.monotonic()
    runs = campaign.runs
    return {"chambers": len(urls), "wall_s": round(closed - began, 2), "open_s": round(opened - began, 2),
            "grade_s": round(graded - opened, 2), "close_s": round(closed - graded, 2),
            "campaign_s": [round(r.seconds, 2) for r in runs], "errors": [r.error for r in runs if r.error],
            "rows": sum(sum(r.rows.values()) for r in runs),
            "verdicts": {r.member.id: sorted(x.verdict.verdict for x in r.results) for r in runs},
            "safe_confirmed": all(o["confirmed"] for o in campaign.safe_state)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--chambers", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("CHAMBERLAB_STATE_DIR", tempfile.mkdtemp(prefix="bench-fleet-links-"))
    with ExitStack() as stack:
        urls = [stack.enter_context(emulated_board("wt", seed)) for seed in range(1, args.chambers + 1)]
        one = timed(urls[:1], args.rows)
        many = timed(urls, args.rows)
    ratio = many["wall_s"] / one["wall_s"]
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpus": os.cpu_count(),
              "rows": args.rows, "claims": list(CLAIMS), "one": one, "fleet": many, "ratio": round(ratio, 3),
              "goal_ratio": GOAL_RATIO, "within_goal": ratio <= GOAL_RATIO}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"bench_fleet: {len(CLAIMS)} claims at {args.rows} rows per chamber, real-pace emulated wind tunnels, "
              f"{os.cpu_count()} CPU(s)")
        for name, r in (("1 chamber", one), (f"{args.chambers} chambers", many)):
            print(f"  {name:<12} wall {r['wall_s']:7.1f} s (open {r['open_s']:.1f}, grade {r['grade_s']:.1f}, "
                  f"close {r['close_s']:.1f}); campaigns {min(r['campaign_s']):.1f}..{max(r['campaign_s']):.1f} s; "
                  f"{r['rows']} rows; safe state confirmed: {r['safe_confirmed']}"
                  + (f"; errors: {r['errors']}" if r["errors"] else ""))
        print(f"  ratio {ratio:.2f} x one chamber's wall time; goal <= {GOAL_RATIO} x: "
              f"{'within' if ratio <= GOAL_RATIO else 'NOT within'} the goal")
    return 0 if ratio <= GOAL_RATIO and one["safe_confirmed"] and many["safe_confirmed"] else 1


if __name__ == "__main__":
    sys.exit(main())
