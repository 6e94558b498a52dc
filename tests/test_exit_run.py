"""`run` says what it did (issue 24): its exit code, index status and summary agree; `--claims` limits the chamber's
grading too; a full disk names the file and leaves the index consistent; a run that never started leaves nothing;
a resume with --no-agent keeps the agent's sections; the job says what stage it is in at every stage.

In process through the CLI (support.run_cli) on the emulated boards, as `make run` runs them; the full disk once
injected (ENOSPC from the file write) and once real (a file-size limit in a child process, EFBIG from the kernel).
"""

from __future__ import annotations

import errno
import io
import json
import subprocess
import sys
from pathlib import Path

import protocols.files as files
from agent.runindex import RunIndex
from conftest import shared_path
from protocols.bench_job import TextProgress
from simulator.board import running_board
from simulator.board_faults import BoardFaults
from support import PROJECT_ROOT, run_cli

QUICK = ("--no-agent", "--rows", "8", "--new", "--json")


def rows(runs: Path) -> list:
    with RunIndex(runs / "index.sqlite") as index:
        return list(index.runs())


def test_run_claims_selects_what_the_chamber_grades_and_says_each_stage(capsys, tmp_path):
    runs = tmp_path / "runs"
    r = run_cli(capsys, "run", "--runs-dir", str(runs), "--claims", "si115x-adc-bit-depth,mcp4151-full-scale-error",
                *QUICK)
    assert r.code == 0, r.err
    summary = r.json()
    run_dir = Path(summary["run_dir"])
    chosen = {"si115x-adc-bit-depth", "mcp4151-full-scale-error"}
    assert {c["claim_id"] for c in json.loads((run_dir / "checks.json").read_text())["results"]} == chosen
    assert {c["claim_id"] for c in json.loads((run_dir / "station_checks.json").read_text())["results"]} == chosen
    assert sum(summary["verdicts"].values()) == 2
    assert summary["sweep"] == {"skipped": "dps310-operating-range not among the claims graded"}
    assert not (run_dir / "sweep.json").exists()
    (row,) = rows(runs)
    assert row.status == summary["status"] == "finished" and not row.summary.get("incomplete")
    with RunIndex(runs / "index.sqlite") as index:
        assert {v["claim_id"] for v in index.verdicts(row.run_id)} == chosen
    said = r.err.splitlines()
    for stage in ("checks", "station"):  # each stage's start and end (i/N, elapsed, ETA), piped: nothing between
        assert any(x.startswith(f"{stage} 0/2 (0 %) elapsed 0:0") for x in said), r.err
        assert any(x.startswith(f"{stage} 2/2 (100 %) elapsed ") and " ETA 0:00 " in x for x in said), r.err
    assert not any(x.startswith("  wt: stage ") for x in said)  # calm: no line per staging read or settle
    assert any(x.endswith("] leaving the chambers in their safe state") for x in said), r.err
    assert any("] report: writing " in x for x in said), r.err  # said lines carry the job's elapsed time
    text = run_cli(capsys, "runs", "list", "--runs-dir", str(runs)).out
    assert f"{row.run_id:<18} finished " in text


def test_a_run_with_an_error_verdict_exits_1_and_its_index_summary_and_text_say_completed_with_errors(
        capsys, tmp_path):
    runs = tmp_path / "runs"

    def run_on_a_failing_board(*extra: str):  # the firmware fails the first MSR it gets, once
        with running_board("wt", faults=BoardFaults(error_on="MSR")) as board:
            return run_cli(capsys, "run", "--runs-dir", str(runs), "--port", board.url, "--claims",
                           "dps310-operating-range", "--no-station", "--no-agent", "--rows", "8", "--new", *extra)

    r = run_on_a_failing_board("--json")
    assert r.code == 1, r.err
    summary = r.json()
    assert summary["status"] == "completed with errors" and summary["incomplete"] == {"error_verdicts": 1}
    assert summary["error_claims"] == ["dps310-operating-range"]
    assert json.loads((Path(summary["run_dir"]) / "summary.json").read_text())["status"] == summary["status"]
    (row,) = rows(runs)
    assert row.status == "completed with errors" and row.summary["incomplete"] == {"error_verdicts": 1}
    text = run_on_a_failing_board()
    assert text.code == 1
    first = text.out.strip().splitlines()[0]
    assert first.endswith(" s: completed with errors (error verdicts 1)"), first


def test_a_run_whose_chambers_cannot_be_opened_leaves_no_folder_and_no_index_row(capsys, tmp_path):
    runs = tmp_path / "runs"
    r = run_cli(capsys, "run", "--runs-dir", str(runs), "--port", "socket://127.0.0.1:9", *QUICK)
    assert r.code == 2 and r.json()["error"]["type"] == "LinkLost"
    assert not runs.exists()  # no run folder with only its .run.lock, no "failed" row
    r = run_cli(capsys, "run", "--runs-dir", str(runs), "--resume", str(tmp_path / "nope"), *QUICK)
    assert r.code == 2 and "--resume: expected a run directory" in r.json()["error"]["message"]
    assert not runs.exists()


def test_a_full_disk_names_the_file_removes_its_part_and_ends_the_index_row_failed(capsys, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    real = files._write_text

    def full(tmp: Path, text: str) -> None:
        if tmp.name == "checks.json.part":
            tmp.write_text(text[:100], encoding="utf-8")  # part of it went out, then the disk was full
            raise OSError(errno.ENOSPC, "No space left on device")
        real(tmp, text)

    monkeypatch.setattr(files, "_write_text", full)
    r = run_cli(capsys, "run", "--runs-dir", str(runs), "--claims", "dps310-operating-range", "--no-station", *QUICK)
    (row,) = rows(runs)
    checks = Path(row.run_dir) / "checks.json"
    assert r.code == 2 and r.json()["error"] == {"type": "WriteFailed", "message": f"no space left writing {checks}"}
    assert not list(Path(row.run_dir).glob("*.part")) and not checks.exists()
    assert row.status == "failed" and row.summary["error"] == f"WriteFailed: no space left writing {checks}"
    assert row.summary["status"] == "failed" and all(o["confirmed"] for o in row.summary["safe_state"])


_FSIZE = """
import resource, signal, sys
sys.path.insert(0, sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal, as a full disk gives ENOSPC
resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, resource.RLIM_INFINITY))
import bench_cli
sys.exit(bench_cli.main(sys.argv[2:]))
"""


def test_a_real_file_size_limit_fails_the_run_naming_the_file_and_the_index_stays_consistent(tmp_path):
    runs = tmp_path / "runs"  # checks.json of all 53 claims is ~290 kB; the index and the calibration fit
    out = subprocess.run([sys.executable, "-c", _FSIZE, str(PROJECT_ROOT), "run", "--runs-dir", str(runs),
                          "--no-station", *QUICK], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    (row,) = rows(runs)
    checks = Path(row.run_dir) / "checks.json"
    assert out.returncode == 2, out.stderr[-2000:]
    assert json.loads(out.stdout)["error"]["message"] == f"file too large writing {checks}"
    assert not list(Path(row.run_dir).glob("*.part")) and not checks.exists()
    assert row.status == "failed" and str(checks) in row.summary["error"]


def test_resuming_a_finished_run_without_the_agent_keeps_its_agent_and_scores_sections(capsys, tmp_path):
    shared_path("datasheets", "DPS310.pdf")
    runs = tmp_path / "runs"
    first = run_cli(capsys, "run", "--runs-dir", str(runs), "--claims", "dps310-operating-range", "--no-station",
                    "--rows", "8", "--json")
    assert first.code == 0, first.err
    agent = first.json()["agent"]
    assert agent["cells"] == 1 and agent["fidelity_and_flags"]["cells"] == 1
    run_dir = first.json()["run_dir"]
    again = run_cli(capsys, "run", "--runs-dir", str(runs), "--resume", run_dir, "--claims", "dps310-operating-range",
                    "--no-station", "--no-agent", "--rows", "8", "--json")
    assert again.code == 0, again.err
    kept = json.loads((Path(run_dir) / "summary.json").read_text())
    assert kept["agent"] == agent and again.json()["agent"] == agent
    assert [r.status for r in rows(runs)] == ["finished"]


def test_progress_on_a_terminal_redraws_one_line_with_details_and_never_passes_79_columns():
    screen = io.StringIO()
    progress = TextProgress(screen, width=80, tty=True)
    progress.start("checks", 3)
    progress.advance("dps310-operating-range-with-a-very-long-claim-identifier-that-goes-on-and-on")
    progress.detail("wt: stage fans off, OSR 8 (serves 2 step(s)), read 200 rows and then some more words here")
    progress.say("calibration failed: " + "x" * 200)
    progress.advance("b")
    progress.advance("c")
    written = screen.getvalue()
    lines = [seg for line in written.split("\n") for seg in line.split("\r")]
    assert lines and max(len(x) for x in lines) <= 79
    assert written.count("\n") == 5  # the said line (stamped, wrapped in four), the stage end: details redraw
    said = "".join(x.strip() for x in lines if x and not x.startswith("checks"))
    assert "x" * 200 in said.split("calibration failed: ")[-1]  # wrapped, not cut
    assert "checks 3/3 (100 %) elapsed 0:00 ETA 0:00 c" in written.split("\n")[-2]
    now = [0.0]
    plain = io.StringIO()
    log = TextProgress(plain, tty=False, every=10.0, clock=lambda: now[0])
    log.start("agent", 2)
    now[0] = 3.0
    log.detail("cell 1: phase two")  # piped: within the calm interval, nothing
    now[0] = 6.0
    log.advance("dps310-operating-range: submitted")
    now[0] = 12.0
    log.advance("b: submitted")  # the stage's end: always
    assert plain.getvalue().splitlines() == ["agent 0/2 (0 %) elapsed 0:00 ETA ?",
                                             "agent 2/2 (100 %) elapsed 0:12 ETA 0:00 b: submitted"]


def test_the_agent_stage_promises_no_eta_from_its_fast_cells():
    """The main job's cells are not alike (phase two on the chamber takes 7 s, the others a tenth of that): after
    42 fast cells the line says "ETA ?", not the 2 s their rate would promise for the last 7."""
    now = [0.0]
    plain = io.StringIO()
    log = TextProgress(plain, tty=False, every=0.0, clock=lambda: now[0])
    log.start("agent", 49)
    for _ in range(42):
        now[0] += 0.24
        log.advance("a4988-blank-time: submitted")
    assert plain.getvalue().splitlines()[-1] == "agent 42/49 (85 %) elapsed 0:10 ETA ? a4988-blank-time: submitted"
