#!/usr/bin/env python3
"""How long the next connection takes to bring back a board a killed host left mid-session (issue 31, item 4).

Why a benchmark: the recovery's cost is time on the operator's clock (the boot wait, the rows still owed, the
probes), and the probe rate bounds how long a session without a link journal can be and still be found within
the default budget (twice --boot-timeout). On the real Mk1 firmware (../shared/firmware-harness, built into
--build-dir) behind tests/persistent_link.py, a ser2net-like server that keeps one board session across hosts:

- journal: the wind tunnel left streaming an MSR of 25 rows after 3 (fans on); the next host reads the journal;
- probe: the light tunnel left idle after --commands SETs, no journal; the next host sweeps for the number.

Reference: before the recovery, the next command failed after 18.8 s with `ReplyTimeout ... 4294967295` (the
issue's report; the RST fallback numbered from scratch, for boot_timeout + 2 x boot_timeout).

Run: python benchmarks/bench_recovery.py [--json] [--commands 400] [--build-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench_cli import shared_dir  # noqa: E402
from firmware_bridge.link_journal import LinkJournal  # noqa: E402
from firmware_bridge.session import Mk1Session, Timing  # noqa: E402
from persistent_link import PersistentLink  # noqa: E402

from board_processes import firmware_board  # noqa: E402  (benchmarks/, beside this file)

REFERENCE_S = 18.8  # issue 31: the next command's ReplyTimeout, before the recovery


@contextmanager
def firmware(build: Path, kind: str, log: Path) -> Iterator[str]:
    """The real firmware of `kind`, its stderr appended to `log`."""
    with open(log, "ab") as sink, firmware_board(build, kind, stderr=sink) as url:
        yield url


def journal_case(build: Path, work: Path) -> dict[str, Any]:
    with firmware(build, "wt", work / "wt.log") as url, PersistentLink(url) as proxy:
        first = Mk1Session.connect(proxy.url, timing=Timing(), journal=LinkJournal.for_port(work, proxy.url))
        first.set("load_in", 0.8)
        first.link.send(b"MSR,25,0", "MSR,25,0")
        for _ in range(4):  # OK,MSR and three rows
            first.link.next_message(5.0)
        first.close()
        began = time.monotonic()
        session = Mk1Session.connect(proxy.url, timing=Timing(), journal=LinkJournal.for_port(work, proxy.url))
        took = time.monotonic() - began
        found = session.boot.recovered
        session.close()
    assert found is not None
    return {"connect_s": round(took, 2), "recovery_s": round(found.seconds, 2), "rows_drained": found.drained_rows,
            "probes": found.probes, "via": found.via}


def probe_case(build: Path, work: Path, commands: int) -> dict[str, Any]:
    log = work / "lt.log"
    with firmware(build, "lt", log) as url, PersistentLink(url) as proxy:
        first = Mk1Session.connect(proxy.url, timing=Timing())
        for i in range(commands):
            first.set("flag", i)
        first.close()
        began = time.monotonic()
        session = Mk1Session.connect(proxy.url, timing=Timing(probe_timeout=60.0))
        took = time.monotonic() - began
        found = session.boot.recovered
        session.close()
    assert found is not None and found.commands_accepted == commands
    per_probe = found.seconds / found.probes
    budget = 2 * Timing().boot_timeout
    return {"connect_s": round(took, 2), "recovery_s": round(found.seconds, 2), "probes": found.probes,
            "ms_per_probe": round(1000 * per_probe, 2), "commands_found": found.commands_accepted,
            "reachable_in_default_budget": int(2 * budget / per_probe),
            "ring_overflows": log.read_text().count("was full")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--commands", type=int, default=400, help="SETs before the light tunnel is left (default 400)")
    parser.add_argument("--build-dir", type=Path, default=None, help="where to build the firmware (default: a temp dir)")
    args = parser.parse_args()
    harness = shared_dir() / "firmware-harness"
    if shutil.which("g++") is None or not harness.is_dir():
        print("skipped: needs g++ and ../shared/firmware-harness (the real firmware)", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        work = Path(tmp)
        build = args.build_dir or work / "fw"
        subprocess.run(["make", "-s", "-C", str(harness), f"B={build}", f"PYTHON={sys.executable}"], check=True,
                       capture_output=True)
        result = {"journal_wt_mid_msr": journal_case(build, work),
                  "probe_lt_idle": probe_case(build, work, args.commands), "reference_before_s": REFERENCE_S}
    if args.json:
        print(json.dumps(result))
        return 0
    j, p = result["journal_wt_mid_msr"], result["probe_lt_idle"]
    print(f"journal, WT left mid-MSR: next connect {j['connect_s']} s (recovery {j['recovery_s']} s: "
          f"{j['rows_drained']} rows drained, {j['probes']} probes)")
    print(f"probe, LT left idle after {p['commands_found']} commands: next connect {p['connect_s']} s (recovery "
          f"{p['recovery_s']} s, {p['probes']} probes, {p['ms_per_probe']} ms/probe, ring overflows "
          f"{p['ring_overflows']}); within the default 12 s: sessions up to ~{p['reachable_in_default_budget']} "
          "commands")
    print(f"reference: before the recovery the next command failed after {REFERENCE_S} s (ReplyTimeout)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
