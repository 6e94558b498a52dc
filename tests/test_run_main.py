"""The main job (`bench_cli.py run`) end to end on emulated boards: its run directory, its index, and resuming.

These run the real CLI as a subprocess, as `make run` does: two emulated boards on ptys, the serial driver, the
chamber tools API on 127.0.0.1, the scripted reader over the real datasheets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.record import validate_record
from agent.runindex import RunIndex
from bench_cli import PROJECT_ROOT
from conftest import shared_path

CLI = [sys.executable, str(PROJECT_ROOT / "bench_cli.py")]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_run_writes_one_directory_with_report_records_and_index(tmp_path: Path):
    shared_path("datasheets")
    out = _run("run", "--runs-dir", str(tmp_path), "--claims",
               "dps310-operating-range,si115x-adc-bit-depth,nf-f12-max-speed-intake", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == tmp_path.resolve()
    for name in ("checks.json", "sweep.json", "sweep.png", "link.json", "calibration.json", "report.md",
                 "report.html", "scores.json"):
        assert (run_dir / name).exists(), name
    checks = {r["claim_id"]: r for r in json.loads((run_dir / "checks.json").read_text())["results"]}
    assert checks["dps310-operating-range"]["verdict"] == "pass"
    assert checks["si115x-adc-bit-depth"]["verdict"] == "pass"
    assert not [c for c, r in checks.items() if r["verdict"] in ("fail", "error")]
    # The sweep's verdict changes exactly at m ± c of the live reading.
    sweep = json.loads((run_dir / "sweep.json").read_text())
    assert summary["sweep"]["verdict_changes_at"] == sweep["flip_points"]
    records = sorted((run_dir / "cells").glob("*.jsonl"))
    assert len(records) == 3  # a chamber-part claim is the agent's too (issue 16), not only the packaged 37
    for record in records:
        validate_record(record)  # schema, order, no chamber call before the freeze, blob hashes
    assert summary["agent"]["phase_two"] is True
    prov = summary["provenance"]  # where the results came from, for the top of the report (issue 19)
    assert prov["model"] == "scripted:reader" and prov["seed"] == 0 and prov["limits"] is None
    assert prov["station"].endswith(".yaml") and prov["software_version"] == "0.1.0" and prov["seconds"] > 0
    assert sorted(c["kind"] for c in prov["chambers"]) == ["lt", "wt"]
    assert all(c["emulated"] and Path(c["port"]).name == f"mk1-{c['kind']}" and c["config"]  # a pty's own link
               for c in prov["chambers"])
    assert prov["claims_sources"] == ["protocols/data/claims", "protocols/data/chamber_parts"]
    from agent.scoring.report_git import read_source_state  # the run records the code it was made with

    assert prov["git_commit"] == read_source_state().commit and isinstance(prov["git_dirty"], bool)
    assert json.loads((run_dir / "summary.json").read_text())["provenance"] == prov
    assert summary["live_view"].startswith("http://127.0.0.1:")  # the grading could be watched live
    assert summary["link"]["wt"]["crc_failures"] == 0 and summary["link"]["wt"]["segments_received"] > 0
    report = (run_dir / "report.md").read_text()
    assert "dps310-operating-range" in report and "sweep" in report.lower()
    # --claims selects what the chamber grades too (issue 24): the checks and the station pass hold these three.
    station = json.loads((run_dir / "station_checks.json").read_text())
    assert sorted(r["claim_id"] for r in station["results"]) == sorted(checks) == sorted(
        ["dps310-operating-range", "si115x-adc-bit-depth", "nf-f12-max-speed-intake"])
    assert "With the instrument station" in report
    assert summary["status"] == "finished" and not summary["incomplete"]
    with RunIndex(tmp_path / "index.sqlite") as index:
        runs = list(index.runs())
        assert [r.status for r in runs] == ["finished"]
        assert {v["claim_id"] for v in index.verdicts(runs[0].run_id)} >= {"dps310-operating-range"}
        cells = index.cells(runs[0].run_id)
        assert sorted(c["claim_id"] for c in cells) == ["dps310-operating-range", "nf-f12-max-speed-intake",
                                                        "si115x-adc-bit-depth"]
        # Scored into the index after the run (NULL until then, so these can fail): fidelity passed, no flag.
        assert all(c["outcome"] == "submitted" and Path(c["record"]).exists() for c in cells)
        assert [(c["fidelity"], c["flags"]) for c in cells] == [("passed", [])] * 3
    listed = json.loads(_run("runs", "list", "--runs-dir", str(tmp_path), "--json").stdout)
    assert [r["run_id"] for r in listed["runs"]] == [runs[0].run_id]


def _complete_records(cells: Path) -> list[Path]:
    done = []
    for record in cells.glob("*.jsonl"):
        try:
            validate_record(record)
        except Exception:
            continue
        done.append(record)
    return done


def test_a_killed_run_keeps_finished_cells_and_the_rerun_resumes(tmp_path: Path):
    shared_path("datasheets")
    proc = subprocess.Popen([*CLI, "run", "--runs-dir", str(tmp_path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    kept: list[Path] = []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            cells = list(tmp_path.glob("*/cells"))
            if cells:
                kept = _complete_records(cells[0])
                if len(kept) >= 3:
                    break
            time.sleep(0.05)  # polling for files to appear, not waiting for a result
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert len(kept) >= 3, "the run ended or stalled before three cells were recorded"
    with RunIndex(tmp_path / "index.sqlite") as index:
        (interrupted,) = list(index.runs())
    assert interrupted.status == "running"  # killed mid-run: the index says so
    before = {p.name: p.read_bytes() for p in kept}

    out = _run("run", "--runs-dir", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    assert summary["run_id"] == interrupted.run_id  # resumed, not a new run
    assert summary["agent"]["kept_from_earlier"] >= len(kept)
    run_dir = Path(summary["run_dir"])
    for name, content in before.items():
        assert (run_dir / "cells" / name).read_bytes() == content  # finished records untouched
    for record in (run_dir / "cells").glob("*.jsonl"):
        validate_record(record)
    with RunIndex(tmp_path / "index.sqlite") as index:
        assert [r.status for r in index.runs()] == ["finished"]
    # With the simulated instrument station more claims become definitive (7 of the 25 main); the three typical
    # supply currents it measures are Typ.-only, so one unit leaves them inconclusive, never failed (issue 16).
    station = json.loads((run_dir / "station_checks.json").read_text())
    main = [r for r in station["results"] if not r["claim_id"].startswith("a4988-")]
    assert len([r for r in main if r["verdict"] in ("pass", "fail")]) >= 7
    assert not [r for r in station["results"] if r["verdict"] == "fail"]
    assert [r["class"] for r in main if r["claim_id"] == "si115x-active-current-3v3"] == ["typical-not-guaranteed"]
    report = (run_dir / "report.md").read_text()
    assert "With the instrument station" in report and "typical-not-guaranteed" in report


@pytest.mark.parametrize("flag", ["--new"])
def test_new_starts_a_fresh_run_after_an_interrupted_one(tmp_path: Path, flag: str):
    with RunIndex(tmp_path / "index.sqlite") as index:
        old = tmp_path / "20260101T000000Z"
        old.mkdir()
        index.start_run(old.name, old, "2026-01-01T00:00:00+00:00", "emulated boards on ptys")
    out = _run("run", "--runs-dir", str(tmp_path), "--no-agent", flag, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["run_id"] != old.name


def test_report_leads_with_the_headline_and_html_has_real_tables(tmp_path: Path):
    from agent.scoring.report import write_report

    (tmp_path / "checks.json").write_text(json.dumps({"results": [
        {"claim_id": "x-inconclusive", "verdict": "inconclusive", "class": "engagement-only", "measured": None,
         "reason": "not staged"},
        {"claim_id": "x-pass", "verdict": "pass", "class": None, "distance": "-2.0", "combined_uncertainty": "0.5",
         "measured": {"value": "1.0", "u": "0.5", "unit": "V"}, "reason": "inside"}]}))
    report = write_report(tmp_path).read_text()
    glance, rest = report.split("## Chamber verdicts", 1)
    assert "x-pass: **pass**, 1.0 ± 0.5 V" in glance  # definitive verdicts are named in the headline
    assert rest.index("| x-pass |") < rest.index("| x-inconclusive |")  # definitive rows first
    assert "| — |" in rest  # nothing measured is a dash, not "None"
    assert "None" not in rest.split("## Absent inputs")[0]
    html = (tmp_path / "report.html").read_text()
    assert "<table>" in html and "<td class='pass'>pass</td>" in html
    assert "sweep.json" in report.split("## Absent inputs")[1]  # what was absent is said
