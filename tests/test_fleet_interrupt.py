"""Interrupting a fleet run leaves every chamber of the fleet safe (issue 34, judged as issue 24 is): a fleet of two
real Mk1 firmware boards (a wind tunnel and a light tunnel), each behind its own recording proxy
(tests/interrupt_proxy.py), graded concurrently by `check --all --fleet` or `run --fleet`; the signal is sent at a
protocol event on the wind tunnel's wire (its first SET, its first MSR), and the verdict is the wire's, on both
boards: the safe state applied and read back, exit code 130, no Traceback.

Why it matters for a fleet: only the main thread gets signals, and each chamber's campaign runs in a thread of its
own; the workers poll a stop request between reads (protocols/fleet_campaign.py), and every chamber is made safe
from the main thread, including the one whose campaign the signal did not come from.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from firmware_harness import firmware_build  # noqa: F401 - a fixture
from interrupt_proxy import on_msr_rows
from test_interrupt_commands import FIRST_SET, interrupt


def _fleet(tmp_path: Path, urls: dict[str, str]) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text("chambers:\n" + "".join(f"  {kind}-a: {{board: '{url}'}}\n" for kind, url in urls.items()),
                    encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("make_trigger", [FIRST_SET, lambda: on_msr_rows(3, (signal.SIGTERM,), unsafe_only=False)],
                         ids=["set-sigint", "msr-sigterm"])
def test_check_all_on_a_fleet_interrupted_leaves_every_chamber_safe(firmware_build, tmp_path, make_trigger):
    trigger = make_trigger()
    result = interrupt(firmware_build, tmp_path, lambda u: [
        "check", "--all", "--rows", "40", "--fleet", _fleet(tmp_path, u), "--json"], trigger, boards=("wt", "lt"))
    result.check()


@pytest.mark.slow
def test_run_on_a_fleet_interrupted_leaves_every_chamber_safe(firmware_build, tmp_path):
    trigger = on_msr_rows(3, unsafe_only=False)
    result = interrupt(firmware_build, tmp_path, lambda u: [
        "run", "--no-agent", "--rows", "20", "--fleet", _fleet(tmp_path, u), "--runs-dir", str(tmp_path / "runs"),
        "--json"], trigger, boards=("wt", "lt"))
    result.check()
