"""The run index on a full disk (issue 24): a write SQLite refuses names the index file and leaves the rows
written before it readable (a real file-size limit in a child process makes SQLite's write fail)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agent.runindex import RunIndex
from support import PROJECT_ROOT

_FULL = """
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from agent.runindex import IndexWriteFailed, RunIndex
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path = Path(sys.argv[1])
index = RunIndex(path)
index.start_run("r1", path.parent / "r1", "2026-12-02T00:00:00+00:00", "emulated boards on ptys")
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size, resource.RLIM_INFINITY))
try:
    for n in range(10_000):
        index.record_verdict("r1", {"claim_id": f"claim-{n}-" + "x" * 200, "verdict": "pass"})
except IndexWriteFailed as exc:
    print(exc)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
index.finish_run("r1", "2026-12-02T00:01:00+00:00", "failed", {"error": "disk full"})
index.close()
"""


def test_a_refused_index_write_names_the_index_and_the_rows_before_it_stay(tmp_path: Path):
    path = tmp_path / "index.sqlite"
    out = subprocess.run([sys.executable, "-c", _FULL, str(path), str(PROJECT_ROOT)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    said = out.stdout.strip()  # SQLite words a file-size limit "disk I/O error", a full disk "database or disk is full"
    assert said in (f"disk I/O error writing {path}", f"database or disk is full writing {path}"), said
    with RunIndex(path) as index:
        (row,) = list(index.runs())
        assert (row.status, row.summary) == ("failed", {"error": "disk full"})  # the index is usable after it
        assert all(v["claim_id"].startswith("claim-") for v in index.verdicts("r1"))


def test_a_run_that_completed_with_errors_ended_and_is_not_resumed_but_a_failed_one_is(tmp_path: Path):
    from agent.runfolder import interrupted_runs

    backend = "emulated boards on ptys"
    with RunIndex(tmp_path / "index.sqlite") as index:
        for n, status in enumerate(["failed", "completed with errors", "interrupted"]):
            (tmp_path / f"r{n}").mkdir()
            index.start_run(f"r{n}", tmp_path / f"r{n}", f"2026-12-02T00:0{n}:00+00:00", backend)
            index.finish_run(f"r{n}", f"2026-12-02T00:0{n}:30+00:00", status, {})
        assert interrupted_runs(index, backend) == [tmp_path / "r2"]  # stops at the run that went to its end
        index.finish_run("r2", "2026-12-02T00:03:00+00:00", "failed", {})
        assert interrupted_runs(index, backend) == [tmp_path / "r2"]
        index.finish_run("r1", "2026-12-02T00:03:00+00:00", "interrupted", {})
        assert interrupted_runs(index, backend) == [tmp_path / "r2", tmp_path / "r1", tmp_path / "r0"]
