"""Two real processes on one runs folder (issue 19: two `run`s once shared a run id and interleaved records).

The thread tests in test_runfolder.py show the lock logic; this one shows the kernel's flock separating two
processes, which is what two `run` commands are. The child holds its folder until the parent has opened its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.runfolder import RunLocked, open_run_folder
from test_runfolder import BACKEND, _fixed_clock

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import sys
    from datetime import datetime, timezone
    from agent.runfolder import open_run_folder
    clock = lambda: datetime(2026, 12, 1, 4, 51, 17, tzinfo=timezone.utc)
    with open_run_folder(sys.argv[1], {backend!r}, clock=clock) as folder:
        print(folder.run_dir, flush=True)
        sys.stdin.readline()  # hold the folder until the parent says so
""")


def test_a_second_process_never_takes_a_folder_the_first_holds(tmp_path: Path):
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(backend=BACKEND), str(tmp_path)], cwd=ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = Path(child.stdout.readline().strip())
        assert held.name == "20261201T045117Z"
        with open_run_folder(tmp_path, BACKEND, clock=_fixed_clock) as mine:  # same second, the child is live
            assert mine.run_dir != held and mine.run_id == "20261201T045117Z-2"
        with pytest.raises(RunLocked):
            open_run_folder(tmp_path, BACKEND, resume=held, clock=_fixed_clock)
    finally:
        child.communicate("go\n", timeout=30)
    assert child.returncode == 0
    with open_run_folder(tmp_path, BACKEND, resume=held, clock=_fixed_clock) as again:  # let go: resumable
        assert again.run_dir == held
