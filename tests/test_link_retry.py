"""A link lost once and brought back at once costs no verdict (issue 35): the runner stages and reads again.

Why: on a starved host an emulated (or real) board can miss a row deadline, or a board can reboot mid-read; the
driver reconnects and re-applies its settings, and the claims whose rows were in flight deserve their verdicts,
not "link_lost". The emulated board reboots once mid-MSR (BoardFaults.reset_after_rows, a fault that fires once)
under the real driver, runner and serial session over TCP; the tests check protocol facts: the claim is graded
from rows read after a fresh SET (no reconnect inside its readings), the board was rebooted exactly once and
reconnected once, and what was staged again is what the plan staged.
"""

from __future__ import annotations

import pytest

from chamber.driver import Chamber
from chamber.serial_backend import SerialBackend
from chamber.testing import FAST_TIMING
from firmware_bridge.errors import BoardRebooted
from protocols.claim_sources import load_main_job_claims
from protocols.runner import ProtocolContext, run_batch
from simulator.board import running_board
from simulator.board_faults import BoardFaults


def _batch(claim_ids: list[str], faults: BoardFaults, **options):
    pool = load_main_job_claims(None)
    progress: list[str] = []
    link: list[str] = []
    with running_board("wt", "tcp", faults=faults) as board:
        chamber = Chamber(SerialBackend(board.url, timing=FAST_TIMING), backoff=(0.01, 0.02)).connect()
        connected_boots = board.firmware.boots
        try:
            context = ProtocolContext(chambers={"wt": chamber}, rows=20, progress=progress.append)
            batch = run_batch([pool[c] for c in claim_ids], context, link=link.append, **options)
            stats = chamber.link_stats()
        finally:
            chamber.close()
        boots = board.firmware.boots - connected_boots
    return batch, progress, link, stats, boots


def test_a_planned_staging_whose_board_rebooted_mid_read_is_read_again_and_graded():
    batch, progress, link, stats, boots = _batch(["dps310-operating-range"], BoardFaults(reset_after_rows=5))
    (result,) = batch.results
    assert result.verdict.verdict == "pass", result.verdict.reason
    assert result.measurement is not None and result.measurement.status == "ok"
    assert boots == 2 and stats["reconnects"] == 1  # since connecting: the planted reboot, the reconnect's reset
    assert any(m.startswith("wt: reconnected after 1 attempt(s)") for m in link), link
    again = [m for m in progress if "link lost during stage" in m]
    assert len(again) == 1 and again[0].endswith("reading it again after the reconnect"), progress
    staged = [m for m in progress if m.startswith("wt: stage ")]
    assert len(staged) == 2 and staged[0] == staged[1]  # the same staging, SET again after the reconnect


def test_a_procedure_whose_board_rebooted_mid_read_runs_again_from_its_first_set():
    claim = "nf-f12-pwm-stops-at-zero-duty-intake"  # a procedure: its next SET depends on what it read
    batch, progress, link, stats, boots = _batch([claim], BoardFaults(reset_after_rows=5))
    (result,) = batch.results
    assert result.verdict.verdict != "error", result.verdict.reason
    assert boots == 2 and stats["reconnects"] == 1
    assert [m for m in progress if "link lost during" in m] == [
        f"wt: link lost during protocol {result.protocol}; reading it again after the reconnect"]


def test_a_second_loss_in_the_same_staging_is_the_claims_error_naming_it():
    """One more try, not a loop: a board that reboots in every read leaves the claim `error` (link_lost)."""
    pool = load_main_job_claims(None)
    with running_board("wt", "tcp") as board:
        chamber = Chamber(SerialBackend(board.url, timing=FAST_TIMING), backoff=(0.01, 0.02)).connect()
        real_measure = chamber.backend.measure
        calls: list[int] = []

        def rebooting_measure(n):  # the driver's backend as is, except that every read of 20 rows or more is lost
            calls.append(n)
            if n >= 20:
                raise BoardRebooted(f"the board rebooted mid-MSR after 0 of {n} rows")
            return real_measure(n)

        chamber.backend.measure = rebooting_measure  # type: ignore[method-assign]
        try:
            context = ProtocolContext(chambers={"wt": chamber}, rows=20)
            batch = run_batch([pool["dps310-operating-range"]], context, stop_early=False)
        finally:
            chamber.close()
    (result,) = batch.results
    assert result.verdict.verdict == "error"
    assert result.measurement is not None and result.measurement.status == "link_lost"
    assert "rebooted mid-MSR" in result.verdict.reason
    assert len([n for n in calls if n >= 20]) == 2  # the read, and the one read again: no third


@pytest.mark.parametrize("kept", [True, False])
def test_reconnect_now_takes_an_unreported_reconnect_as_the_callers(kept):
    """The driver's side: after reconnect_now, the next frame says `reconnected` only for a later loss."""
    with running_board("wt", "tcp", faults=BoardFaults(reset_after_rows=2)) as board:
        chamber = Chamber(SerialBackend(board.url, timing=FAST_TIMING), backoff=(0.01,)).connect()
        try:
            with pytest.raises(BoardRebooted):
                chamber.measure(5)
            if kept:
                assert chamber.reconnect_now() is True
                assert chamber.reconnect_now() is False  # nothing more to take
            frame = chamber.measure(3)
        finally:
            chamber.close()
    assert frame.reconnected is (not kept)
    assert frame.values.shape[0] == 3
