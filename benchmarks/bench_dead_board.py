#!/usr/bin/env python3
"""How long `check --all` takes to end once its board dies, and what it keeps (issue 31).

Why a benchmark: the tests bound the number of reconnection attempts (one window per batch), never a duration;
the figure the operator feels is the time from the loss to the command's exit. Before the reconnect window, a
dead board cost every later staging its own full back-off (issue 31: rc 3 after 817 s on a silent board; a refused
port cost ~12.6 s per potentiometer staging, 256 of them). Goal: the command ends within 60 s of the loss, with
the verdicts decided before it kept in its JSON.

Two deaths, each on the emulated board at real pace (`bench_cli.py sim serve --pace real`, its own process, TCP),
`check --all --rows 40` started on it and the board ended `--after` seconds in:
- killed: SIGKILL (the port refuses at once, as an unplugged USB board's device node vanishes);
- hung: SIGSTOP (the port accepts but nothing answers: every attempt waits the boot timeout and the RST patience,
  18 s; the exit path's safe state waits as long once more).

Run: python benchmarks/bench_dead_board.py [--json] [--after 25] [--modes killed,hung]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 60.0
BEFORE = "817 s (issue 31, a silent board); a refused port: > 300 s, ~12.6 s per potentiometer staging"


def one(mode: str, after: float) -> dict[str, Any]:
    board = subprocess.Popen([sys.executable, str(ROOT / "bench_cli.py"), "sim", "serve", "--transport", "tcp",
                              "--pace", "real"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert board.stdout is not None
        url = board.stdout.readline().strip()
        check = subprocess.Popen([sys.executable, str(ROOT / "bench_cli.py"), "check", "--all", "--port", url,
                                  "--rows", "40", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=ROOT)
        time.sleep(after)  # a benchmark's timer: where in the batch the board dies
        os.kill(board.pid, signal.SIGKILL if mode == "killed" else signal.SIGSTOP)
        lost = time.monotonic()
        out, err = check.communicate(timeout=1800)
        seconds = time.monotonic() - lost
    finally:
        board.kill()
        board.wait()
    d = json.loads(out)
    verdicts = Counter(r["verdict"] for r in d.get("results", []))
    attempts = len([line for line in err.splitlines() if re.match(r"\[\d+:\d\d\] wt: board lost.*reconnecting", line)])
    return {"mode": mode, "after_s": after, "seconds_from_loss_to_exit": round(seconds, 1),
            "exit_code": check.returncode, "verdicts": dict(verdicts), "reconnect_attempts": attempts,
            "safe_state_confirmed": all(o.get("confirmed") for o in d.get("safe_state", [])),
            "goal_met": seconds <= GOAL_S}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--after", type=float, default=25.0, help="seconds into the batch the board dies")
    parser.add_argument("--modes", default="killed,hung")
    a = parser.parse_args()
    rows = [one(mode, a.after) for mode in a.modes.split(",")]
    if a.json:
        print(json.dumps({"goal_s": GOAL_S, "before": BEFORE, "runs": rows}, indent=2))
        return 0
    print(f"check --all on a board that dies {a.after:g} s in (goal: exit within {GOAL_S:g} s of the loss; "
          f"before: {BEFORE})")
    for r in rows:
        print(f"  {r['mode']:<7} exit {r['exit_code']} {r['seconds_from_loss_to_exit']:>6.1f} s after the loss, "
              f"{r['reconnect_attempts']} reconnection attempt(s), verdicts {r['verdicts']}, safe state "
              f"{'confirmed' if r['safe_state_confirmed'] else 'NOT confirmed'}: goal "
              f"{'met' if r['goal_met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
