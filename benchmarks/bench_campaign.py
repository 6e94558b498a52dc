#!/usr/bin/env python3
"""Chamber time of the full grading campaign (calibration + every claim + the sweep), planned vs per claim.

Why a benchmark: a real chamber is the scarce resource (wind tunnel ~7 rows/s, light tunnel ~12.4 rows/s), and
the figure that matters is the physical time the boards are busy. Both ways run in the same invocation on their
own real-pace boards, side by side:

- baseline: the per-claim way — the calibration alone, then every claim graded separately at the default rows
  (protocols.runner.check_claim: its own stagings, nothing shared, no early stop);
- campaign: one planned batch (protocols.runner.run_batch with the calibration in the plan): shared stagings,
  ordered by actuator cost, short reads where more rows cannot change a verdict.

Boards: the emulated board (`bench_cli.py sim serve --pace real`, its own process, TCP) and, when g++ and the
harness are present, the real Mk1 firmware (../shared/firmware-harness, built into --build-dir). The sweep is
computed from the live operating-range reading (no chamber time). Rows and stagings (SET lists sent) are
counted at the chamber object. Goal: campaign ≤ 120 s of chamber time, from ~9 min; identical verdict classes.

Run: python benchmarks/bench_campaign.py [--json] [--rows 200] [--boards emulated,firmware] [--build-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_cli import shared_dir  # noqa: E402
from chamber import open_chamber  # noqa: E402
from calibration.records import record_from_calibration  # noqa: E402
from protocols.claims import load_claims  # noqa: E402
from protocols.runner import ProtocolContext, calibrate, check_claim, run_batch  # noqa: E402
from protocols.sweep import sweep  # noqa: E402

from board_processes import emulated_board, firmware_board  # noqa: E402  (benchmarks/, beside this file)

GOAL_S = 120.0
REFERENCE_S = 9 * 60.0  # issue 15: check --all on the real firmware at the default rows, ~9 min


class Counting:
    """A chamber that counts the rows it is asked for and the SET lists it is sent (everything else passes)."""

    def __init__(self, chamber: Any) -> None:
        self._chamber, self.rows, self.stagings = chamber, 0, 0

    def set_many(self, settings: Any) -> Any:
        self.stagings += 1
        return self._chamber.set_many(settings)

    def measure(self, n: int) -> Any:
        self.rows += n
        return self._chamber.measure(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chamber, name)


def _sweep_of(results: list[Any]) -> dict[str, Any] | None:
    live = next((r for r in results if r.claim.id == "dps310-operating-range"), None)
    if live is None or live.measurement is None or live.measurement.value is None:
        return None
    m = live.measurement
    return sweep(live.claim, m.value, m.u, unit=m.unit, steps=41, dof=m.dof).to_dict()["flip_points"]


def run_way(way: str, urls: list[str], rows: int) -> dict[str, Any]:
    claims = list(load_claims().values())
    with ExitStack() as stack:
        chambers: dict[str, Counting] = {}
        for url in urls:
            c = open_chamber(url, backend="serial")
            stack.callback(c.close)
            chambers[c.layout.chamber] = Counting(c)
        started = time.monotonic()
        if way == "baseline":
            cal = calibrate(chambers["wt"], n=rows)
            record = record_from_calibration(cal, date=datetime.now(timezone.utc))
            context = ProtocolContext(chambers=chambers, calibration=record, rows=rows)
            results = [check_claim(claim, context) for claim in claims]
        else:
            batch = run_batch(claims, ProtocolContext(chambers=chambers, rows=rows), calibrate=True)
            results = batch.results
        flips = _sweep_of(results)
        seconds = time.monotonic() - started
    stopped = {r.claim.id: r.details["plan"]["stopping"] for r in results if "plan" in r.details}
    return {
        "seconds": round(seconds, 1),
        "rows": {k: c.rows for k, c in chambers.items()},
        "stagings": sum(c.stagings for c in chambers.values()),
        "verdicts": {r.claim.id: [r.verdict.verdict, r.verdict.inconclusive_class] for r in results},
        "sweep_flip_points": flips,
        "stopping": stopped if way == "campaign" else None,
    }


def _firmware_build(build_dir: Path | None) -> Path | None:
    harness = shared_dir() / "firmware-harness"
    if shutil.which(os.environ.get("CXX", "g++")) is None or not harness.is_dir():
        return None
    target = build_dir or Path(tempfile.mkdtemp(prefix="fwbuild-"))
    if not (target / "wt_mk_1").exists() or not (target / "lt_mk_1").exists():
        subprocess.run(["make", "-s", "-C", str(harness), f"B={target}", f"PYTHON={sys.executable}"], check=True,
                       capture_output=True, timeout=600)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--boards", default="emulated,firmware", help="emulated and/or firmware (comma-separated)")
    parser.add_argument("--build-dir", type=Path, default=None, help="firmware harness build (built if missing)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    boards = [b for b in args.boards.split(",") if b]
    build = _firmware_build(args.build_dir) if "firmware" in boards else None
    skipped = {}
    if "firmware" in boards and build is None:
        boards.remove("firmware")
        skipped["firmware"] = "needs g++ and ../shared/firmware-harness"
    out: dict[str, Any] = {}
    threads = []
    with ExitStack() as stack:  # every board pair runs at once: each way's chamber time is its own wall time
        for board in boards:
            for way in ("baseline", "campaign"):
                if board == "emulated":
                    urls = [stack.enter_context(emulated_board(k, args.seed)) for k in ("wt", "lt")]
                else:
                    assert build is not None
                    urls = [stack.enter_context(firmware_board(build, k)) for k in ("wt", "lt")]

                def work(board: str = board, way: str = way, urls: list[str] = urls) -> None:
                    try:
                        out.setdefault(board, {})[way] = run_way(way, urls, args.rows)
                    except Exception as exc:  # reported in the output, the other ways go on
                        out.setdefault(board, {})[way] = {"error": f"{type(exc).__name__}: {exc}"}

                threads.append(threading.Thread(target=work, name=f"{board}-{way}"))
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    summary: dict[str, Any] = {"rows_default": args.rows, "goal_s": GOAL_S, "reference_s": REFERENCE_S,
                               "skipped": skipped, "boards": {}}
    for board, ways in out.items():
        base, camp = ways.get("baseline", {}), ways.get("campaign", {})
        identical = ("verdicts" in base and "verdicts" in camp and base["verdicts"] == camp["verdicts"])
        differing = {} if identical or "verdicts" not in base or "verdicts" not in camp else {
            k: {"baseline": base["verdicts"][k], "campaign": camp["verdicts"].get(k)}
            for k in base["verdicts"] if base["verdicts"][k] != camp["verdicts"].get(k)}
        summary["boards"][board] = {
            "campaign_s": camp.get("seconds"), "baseline_s": base.get("seconds"),
            "rows": camp.get("rows"), "baseline_rows": base.get("rows"),
            "stagings": camp.get("stagings"), "baseline_stagings": base.get("stagings"),
            "verdicts_identical": identical, "differing": differing,
            "sweep": {"campaign": camp.get("sweep_flip_points"), "baseline": base.get("sweep_flip_points")},
            "stopping": camp.get("stopping"), "errors": {w: v["error"] for w, v in ways.items() if "error" in v},
        }
    first = next(iter(summary["boards"].values()), {})
    summary.update({k: first.get(k) for k in ("campaign_s", "baseline_s", "rows", "stagings", "verdicts_identical")})
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for board, s in summary["boards"].items():
        rows = lambda r: " + ".join(f"{k} {v}" for k, v in (r or {}).items())  # noqa: E731
        print(f"{board}: campaign {s['campaign_s']} s ({rows(s['rows'])} rows, {s['stagings']} stagings)  vs  "
              f"per claim {s['baseline_s']} s ({rows(s['baseline_rows'])} rows, {s['baseline_stagings']} stagings); "
              f"goal <= {GOAL_S:.0f} s; verdict classes identical: {s['verdicts_identical']}"
              + (f"; errors: {s['errors']}" if s["errors"] else ""))
    for board, why in skipped.items():
        print(f"{board}: skipped ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
