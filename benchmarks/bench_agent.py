#!/usr/bin/env python3
"""Local tool time per cell for the scripted reader over the main claims, beside the seed paper's figure.

The seed paper reports 9–12 s of local tool execution per cell (7–14 % of wall time); our goal is under 0.5 s.
Tool time is the sum of tool-call durations in each cell's record (datasheet tools only: the reader runs phase
one). Cells run in process (ScriptedModel) so that the figure is tool time, not HTTP time.

Usage: bench_agent.py [--json] [--components DPS310,Si115x,ACS70331] [--record DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.loop import run_cell  # noqa: E402
from agent.models.scripted import ScriptedModel, policy_named  # noqa: E402
from agent.record import validate_record  # noqa: E402
from bench_cli import shared_dir  # noqa: E402
from protocols.claims import load_claims  # noqa: E402

PAPER = "9–12 s local tool time per cell (7–14 % of wall time)"
GOAL_S = 0.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--components", default="DPS310,Si115x,ACS70331", help="the 25 main claims' components")
    ap.add_argument("--record", type=Path, default=None, help="keep the records here (default: a temp folder)")
    args = ap.parse_args()
    wanted = {c.strip().lower() for c in args.components.split(",")}
    claims = [c for c in load_claims().values() if c.component.lower() in wanted]
    record_dir = args.record or Path(tempfile.mkdtemp(prefix="bench_agent_"))
    tool_s, wall_s, wrong_outcomes = [], [], []
    for claim in claims:
        pdf = shared_dir() / "datasheets" / claim.identity.filename
        t0 = time.perf_counter()
        result = run_cell(claim, model=ScriptedModel(policy_named("reader"), "scripted:reader"), datasheet=pdf,
                          record_dir=record_dir, clock=time.time)
        wall_s.append(time.perf_counter() - t0)
        events = validate_record(result.record)
        tool_s.append(sum(e.duration_ms for e in events if e.kind == "tool_call") / 1000.0)
        if result.outcome != "submitted":
            wrong_outcomes.append(claim.id)
    share = [t / w for t, w in zip(tool_s, wall_s)]
    out = {
        "cells": len(claims),
        "tool_s_per_cell_mean": statistics.fmean(tool_s),
        "tool_s_per_cell_max": max(tool_s),
        "wall_s_per_cell_mean": statistics.fmean(wall_s),
        "tool_share_of_wall_mean": statistics.fmean(share),
        "goal_s": GOAL_S,
        "paper": PAPER,
        "not_submitted": wrong_outcomes,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"cells: {out['cells']} (scripted reader, components {args.components})")
        print(f"local tool time per cell: mean {out['tool_s_per_cell_mean']:.3f} s, max {out['tool_s_per_cell_max']:.3f} s"
              f"   | seed paper: {PAPER} | goal < {GOAL_S} s")
        print(f"wall per cell: mean {out['wall_s_per_cell_mean']:.3f} s; tool share {100 * out['tool_share_of_wall_mean']:.0f} %")
        if wrong_outcomes:
            print(f"not submitted: {', '.join(wrong_outcomes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
