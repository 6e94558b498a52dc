"""A run whose process died is seen as such, and resumed (issue 31): the index row of a run killed outright is
marked `interrupted` by the next `runs list` (or `run`), a run still held by a live process stays `running`, and
`run --resume` continues a `--no-agent` run: the chamber verdicts decided before the kill (checks.partial.jsonl)
are kept and only the other claims are graded. A run stopped by Ctrl-C writes checks.json with the verdicts
decided so far.

The runs are the real CLI as a subprocess on the emulated boards (as `make run`), killed with SIGKILL (nothing of
the process runs after it) or SIGINT once the run folder holds some verdicts (polled: the event is a file growing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent.runfolder import LOCK_NAME, runs_job
from agent.runindex import RunIndex
from protocols.bench_job import KEPT_NOTE, PARTIAL_CHECKS
from support import PROJECT_ROOT

CLI = [sys.executable, str(PROJECT_ROOT / "bench_cli.py")]
POOL = 53  # the claims `run` grades by default
HANG_GUARD_S = 300


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG_GUARD_S)


def _verdict_lines(run_dir: Path) -> int:
    """Complete verdict lines of checks.partial.jsonl (a line a kill cut short is not one)."""
    path = run_dir / PARTIAL_CHECKS
    if not path.exists():
        return 0
    count = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        count += "claim_id" in item
    return count


def _start_and_stop(runs: Path, signum: signal.Signals, at_least: int = 10) -> tuple[Path, subprocess.Popen, str]:
    """Start `run --no-agent` and send `signum` once its run folder holds `at_least` verdicts."""
    proc = subprocess.Popen([*CLI, "run", "--no-agent", "--runs-dir", str(runs), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + HANG_GUARD_S
    run_dir = None
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            folders = [p for p in runs.glob("*/") if p.is_dir()]
            if folders and _verdict_lines(folders[0]) >= at_least:
                run_dir = folders[0]
                break
            time.sleep(0.02)  # polling for a file to grow, not waiting for a result
        assert run_dir is not None, f"the run never recorded {at_least} verdicts: {proc.poll()}"
        os.killpg(proc.pid, signum) if signum == signal.SIGKILL else proc.send_signal(signum)
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return run_dir, proc, out


def test_a_killed_no_agent_run_is_listed_interrupted_and_resume_keeps_its_verdicts(tmp_path):
    runs = tmp_path / "runs"
    run_dir, proc, _ = _start_and_stop(runs, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    with RunIndex(runs / "index.sqlite") as index:
        assert [r.status for r in index.runs()] == ["running"]  # nothing of the process ran after the kill
    kept = _verdict_lines(run_dir)

    listed = json.loads(_run("runs", "list", "--runs-dir", str(runs), "--json").stdout)["runs"]
    assert [(r["run_id"], r["status"]) for r in listed] == [(run_dir.name, "interrupted")]
    summary = listed[0]["summary"]
    assert summary["interrupted"] is True and sum(summary["verdicts"].values()) >= 1
    assert f"run --resume {run_dir}" in summary["note"]
    text = _run("runs", "list", "--runs-dir", str(runs)).stdout
    assert "interrupted" in text and run_dir.name in text

    out = _run("run", "--no-agent", "--runs-dir", str(runs), "--resume", str(run_dir), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    resumed = json.loads(out.stdout)
    assert resumed["run_id"] == run_dir.name and resumed["status"] == "finished"
    assert resumed["verdicts_kept"] == kept and sum(resumed["verdicts"].values()) == POOL
    assert f"{kept} verdict(s) decided before the interruption are kept" in out.stderr
    checks = json.loads((run_dir / "checks.json").read_text())
    assert len(checks["results"]) == POOL and "interrupted" not in checks
    assert len([r for r in checks["results"] if r["details"].get("kept") == KEPT_NOTE]) == kept
    assert not (run_dir / PARTIAL_CHECKS).exists()  # checks.json says it all now
    with RunIndex(runs / "index.sqlite") as index:
        assert [r.status for r in index.runs()] == ["finished"]
        assert len(index.verdicts(run_dir.name)) == POOL


def test_a_run_stopped_by_ctrl_c_writes_the_verdicts_decided_and_the_next_run_continues_it(tmp_path):
    runs = tmp_path / "runs"
    run_dir, proc, out = _start_and_stop(runs, signal.SIGINT)
    assert proc.returncode == 130
    summary = json.loads(out)
    checks = json.loads((run_dir / "checks.json").read_text())
    assert checks["interrupted"] is True and checks["results"] and checks["not_graded"]
    assert len(checks["results"]) + len(checks["not_graded"]) == POOL
    assert summary["status"] == "interrupted" and summary["not_graded"] == len(checks["not_graded"])
    assert sum(summary["verdicts"].values()) == len(checks["results"])
    with RunIndex(runs / "index.sqlite") as index:
        assert [r.status for r in index.runs()] == ["interrupted"]
        assert len(index.verdicts(run_dir.name)) == len(checks["results"])

    again = _run("run", "--no-agent", "--runs-dir", str(runs), "--json")  # the interrupted run is picked up
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = json.loads(again.stdout)
    assert resumed["run_id"] == run_dir.name and resumed["verdicts_kept"] == len(checks["results"])
    final = json.loads((run_dir / "checks.json").read_text())["results"]
    assert [r["claim_id"] for r in final if r["details"].get("kept")] == [r["claim_id"] for r in checks["results"]]


def test_a_run_held_by_a_live_process_stays_running_and_is_interrupted_once_that_process_dies(tmp_path):
    runs = tmp_path / "runs"
    run_dir = runs / "20260101T000000Z"
    run_dir.mkdir(parents=True)
    with RunIndex(runs / "index.sqlite") as index:
        index.start_run(run_dir.name, run_dir, "2026-01-01T00:00:00+00:00", "emulated boards on ptys")
        index.record_verdict(run_dir.name, {"claim_id": "dps310-operating-range", "verdict": "pass"})
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(run_dir / LOCK_NAME)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert [r["status"] for r in runs_job(runs)["runs"]] == ["running"]  # alive: not touched
        holder.kill()
        holder.wait(timeout=10)
        (row,) = runs_job(runs)["runs"]
        assert row["status"] == "interrupted" and row["summary"]["verdicts"] == {"pass": 1}
        assert row["summary"]["status"] == "interrupted" and "killed" in row["summary"]["note"]
        assert [r["status"] for r in runs_job(runs)["runs"]] == ["interrupted"]  # marked once, listed as such
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


class _Wt:
    config = "standard"


def test_a_resume_keeps_decided_verdicts_only_and_only_when_graded_the_same_way(tmp_path):
    from protocols.bench_job import kept_verdicts
    from protocols.claim_sources import load_main_job_claims

    pool = load_main_job_claims(None)
    claims = [pool["dps310-operating-range"], pool["acs70331-bandwidth"], pool["nf-f12-max-speed-intake"]]
    header = {"header": {"rows": 40, "configs": {"wt": "standard"}}}
    lines = [json.dumps(header),
             json.dumps({"claim_id": "dps310-operating-range", "verdict": "pass"}),
             json.dumps({"claim_id": "acs70331-bandwidth", "verdict": "error"}),  # the apparatus failed: graded again
             json.dumps({"claim_id": "not-in-this-selection", "verdict": "pass"}),
             '{"claim_id": "nf-f12-max-speed-intake", "verd']  # the line the kill cut short
    (tmp_path / PARTIAL_CHECKS).write_text("\n".join(lines), encoding="utf-8")
    chambers = {"wt": _Wt()}
    kept, why = kept_verdicts(tmp_path, claims, rows=40, chambers=chambers)
    assert list(kept) == ["dps310-operating-range"] and why is None
    kept, why = kept_verdicts(tmp_path, claims, rows=200, chambers=chambers)
    assert kept == {} and why == ("1 earlier verdict(s) not kept: graded at 40 rows on {'wt': 'standard'}, this "
                                  "attempt grades at 200 rows on {'wt': 'standard'}")
