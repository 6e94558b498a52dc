"""The shared test helpers (tests/support.py) do what their docstrings say, so the tests built on them can fail."""

from __future__ import annotations

import pytest

from protocols.claims import get_claim
from support import CliRun, ManualClock, SteppingClock, cli_subprocess, reads_the_claim, serial_chamber


def test_stepping_clock_advances_by_its_step_on_every_reading():
    clock = SteppingClock(100.0, step=0.5)
    assert [clock(), clock(), clock()] == [100.5, 101.0, 101.5]
    with pytest.raises(ValueError, match="step must be > 0"):
        SteppingClock(step=0.0)


def test_manual_clock_moves_only_when_told_and_never_back():
    clock = ManualClock(10.0)
    assert clock() == clock() == 10.0
    clock.advance(2.5)
    assert clock() == 12.5
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1.0)


def test_cli_run_json_reads_the_last_line_and_names_what_it_got():
    assert CliRun(0, "progress\n{\"ok\": true}\n", "").json() == {"ok": True}
    with pytest.raises(AssertionError, match="got 'not json'"):
        CliRun(0, "not json\n", "").json()
    with pytest.raises(AssertionError, match="got nothing"):
        CliRun(2, "", "boom").json()


def test_cli_subprocess_runs_the_project_cli():
    done = cli_subprocess("--help", timeout_s=120)
    assert done.returncode == 0 and "usage" in done.stdout.lower()


def test_serial_chamber_is_the_real_driver_on_an_emulated_board():
    with serial_chamber("wt", seed=3) as chamber:
        frame = chamber.measure(4)
        assert frame.values.shape[0] == 4


def test_reads_the_claim_compares_the_printed_figures():
    rng = get_claim("dps310-operating-range")  # a range: 300 .. 1200 hPa
    assert reads_the_claim(rng, {"low": 300, "high": 1200})
    assert not reads_the_claim(rng, {"low": 300, "high": 1100})
    assert not reads_the_claim(rng, None)
    acc = get_claim("dps310-relative-accuracy")  # an accuracy: the band value ± tolerance is read as the range
    t = acc.tolerance.value
    assert reads_the_claim(acc, {"low": acc.value - t, "high": acc.value + t})
    assert not reads_the_claim(acc, {"value": acc.value})
