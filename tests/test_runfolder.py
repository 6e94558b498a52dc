"""The main job's run folder: one process per run (lock), distinct ids, resume of interrupted runs only, the index
rebuilt from the cell records on resume, and the provenance the report shows."""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from agent.runfolder import RunLocked, open_run_folder, provenance
from agent.runindex import RunIndex
from conftest import shared_path

BACKEND = "emulated boards on ptys"


def _fixed_clock() -> datetime:
    return datetime(2026, 12, 1, 4, 51, 17, tzinfo=timezone.utc)


def test_two_runs_started_in_the_same_second_get_their_own_folders(tmp_path: Path):
    first = open_run_folder(tmp_path, BACKEND, clock=_fixed_clock)
    second = open_run_folder(tmp_path, BACKEND, clock=_fixed_clock)  # the first is live: not resumed
    try:
        assert first.run_id == "20261201T045117Z" and second.run_id == "20261201T045117Z-2"
        assert first.run_dir != second.run_dir and not second.resumed
    finally:
        first.close()
        second.close()
    with RunIndex(tmp_path / "index.sqlite") as index:
        assert sorted(r.run_id for r in index.runs()) == ["20261201T045117Z", "20261201T045117Z-2"]


def test_threads_racing_for_a_run_never_share_a_folder(tmp_path: Path):
    dirs, errors = [], []
    start, held = threading.Barrier(4), threading.Barrier(4)

    def run() -> None:  # each thread opens, holds while the others open, then lets go (sqlite is per thread)
        start.wait()
        try:
            with open_run_folder(tmp_path, BACKEND, clock=_fixed_clock) as folder:
                dirs.append(folder.run_dir)
                held.wait(timeout=30)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and len(set(dirs)) == 4


def test_resuming_a_folder_another_process_holds_is_refused(tmp_path: Path):
    live = open_run_folder(tmp_path, BACKEND, clock=_fixed_clock)
    try:
        with pytest.raises(RunLocked, match=str(live.run_dir)):
            open_run_folder(tmp_path, BACKEND, resume=live.run_dir)
    finally:
        live.close()


def test_an_interrupted_run_is_resumed_once_its_process_let_go(tmp_path: Path):
    killed = open_run_folder(tmp_path, BACKEND, clock=_fixed_clock)
    killed.close()  # as a SIGKILL does: the lock goes, the index still says running
    again = open_run_folder(tmp_path, BACKEND)
    try:
        assert again.run_id == killed.run_id and again.resumed
    finally:
        again.close()
    fresh = open_run_folder(tmp_path, BACKEND, new=True)
    try:
        assert fresh.run_id != killed.run_id and not fresh.resumed
    finally:
        fresh.close()


def test_provenance_has_the_report_shape(tmp_path: Path):
    with open_run_folder(tmp_path, BACKEND, clock=_fixed_clock) as folder:
        p = provenance(folder, finished=datetime(2026, 12, 1, 4, 51, 39, 500000, tzinfo=timezone.utc), seed=0,
                       model="scripted:reader", chambers=[{"kind": "wt", "port": "/dev/pts/7", "emulated": True,
                                                           "config": "standard"}],
                       station=None, limits=None, claims_sources=["protocols/data/claims"])
    assert set(p) == {"software_version", "started_utc", "finished_utc", "seconds", "seed", "model", "chambers",
                      "station", "limits", "claims_sources", "git_commit", "git_dirty"}
    assert p["started_utc"] == "2026-12-01T04:51:17+00:00" and p["finished_utc"] == "2026-12-01T04:51:39+00:00"
    assert p["seconds"] == 22.5 and p["software_version"] == "0.1.0"
    with pytest.raises(ValueError, match="kind"):
        provenance(folder, finished=_fixed_clock(), seed=None, model=None, station=None, limits=None,
                   claims_sources=[], chambers=[{"kind": "xx", "port": "p", "emulated": False, "config": "c"}])


def test_a_cell_missing_from_the_index_is_written_back_from_its_record_on_resume(tmp_path: Path):
    from agent.agent_job import run_agent_job
    from agent.models import client_for
    from protocols.claims import load_claims

    datasheets = shared_path("datasheets")
    claim = load_claims()["dps310-operating-range"]
    folder = open_run_folder(tmp_path, BACKEND, clock=_fixed_clock)

    def job() -> dict:
        return run_agent_job([claim], model_spec="scripted:reader", model=client_for("scripted:reader", {}),
                             datasheets_dir=datasheets, run_dir=folder.run_dir, run_id=folder.run_id,
                             index=folder.index, api_url=None)

    try:
        assert job()["kept_from_earlier"] == 0
        (row,) = folder.index.cells(folder.run_id)
        # A SIGKILL between the finished cell and its index row: the record is there, the row is not.
        with sqlite3.connect(tmp_path / "index.sqlite") as db:
            db.execute("DELETE FROM cells WHERE run_id=?", (folder.run_id,))
        assert folder.index.cells(folder.run_id) == []
        again = job()
        assert again["kept_from_earlier"] == 1 and again["outcomes"] == {}
        assert folder.index.cells(folder.run_id) == [row]
    finally:
        folder.close()


def test_a_claim_that_prints_no_figure_is_named_and_not_run_as_a_cell(tmp_path: Path):
    """The Noctua white paper's 'will stop at 0% duty-cycle' prints no figure of the claim's own: the chamber
    grades it, the agent part names it and runs no cell for it (a cell could only fail to find a number)."""
    from agent.agent_job import run_agent_job
    from agent.models import client_for
    from protocols.claim_sources import CHAMBER_PARTS_DIR, load_checked_claims

    parts = load_checked_claims([CHAMBER_PARTS_DIR])
    wordy = [c for c in parts.values() if not c.source.prints_figure]
    assert sorted(c.id for c in wordy) == ["nf-f12-pwm-runs-below-20-percent-exhaust",
                                           "nf-f12-pwm-runs-below-20-percent-intake",
                                           "nf-f12-pwm-stops-at-zero-duty-exhaust",
                                           "nf-f12-pwm-stops-at-zero-duty-intake"]
    figure = parts["nf-f12-max-speed-intake"]
    folder = open_run_folder(tmp_path, BACKEND, clock=_fixed_clock)
    try:
        out = run_agent_job([wordy[0], figure], model_spec="scripted:reader", model=client_for("scripted:reader", {}),
                            datasheets_dir=shared_path("datasheets"), run_dir=folder.run_dir, run_id=folder.run_id,
                            index=folder.index, api_url=None)
        assert out["no_figure_to_extract"] == [wordy[0].id]
        assert out["cells"] == 1 and [c["claim_id"] for c in folder.index.cells(folder.run_id)] == [figure.id]
        assert out["fidelity_and_flags"]["fidelity_passed"] == 1
    finally:
        folder.close()
