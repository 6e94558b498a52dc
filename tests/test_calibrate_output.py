"""`calibrate -o` destroys nothing (issue 31): an existing record is refused unless --force, a folder that cannot be
written is refused before the chamber is opened (and so reset), and a full disk leaves the old record whole and
names the path.

"Before the chamber is opened" is shown with a port where no board answers: a command that opened it first would
fail with the link's error, not the output's. The full disk is real twice: a file-size limit in a child process
(EFBIG from the kernel, as tests/test_exit_run.py does) and, where this process may mount one, a tiny tmpfs
(ENOSPC); the read-only folder is a read-only tmpfs (root ignores a folder's mode bits) or, for another user, a
folder without write permission.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from calibration.records import load_record
from support import PROJECT_ROOT, run_cli

NO_BOARD = "socket://127.0.0.1:1"  # nothing listens there: opening the chamber would fail with LinkLost


def _calibrate(capsys, *args: str):
    return run_cli(capsys, "calibrate", "-n", "20", *args, "--json")


@pytest.fixture
def record(tmp_path: Path, capsys) -> Path:
    """A calibration record written by `calibrate --backend sim -o`."""
    path = tmp_path / "cal.json"
    r = _calibrate(capsys, "--backend", "sim", "-o", str(path))
    assert r.code == 0, r.err
    return path


def test_an_existing_record_is_refused_before_the_chamber_opens_and_left_as_it_was(record, capsys):
    before = record.read_bytes()
    r = _calibrate(capsys, "--port", NO_BOARD, "-o", str(record))
    assert r.code == 2
    error = r.json()["error"]
    assert error["type"] == "OutputPathRefused"  # not LinkLost: the chamber was never opened
    assert error["message"].startswith(f"-o {record}: a file is already there ({len(before)} bytes)")
    assert "--force" in error["message"] and record.read_bytes() == before


def test_force_replaces_the_record_once_the_new_one_is_complete(record, capsys):
    os.utime(record, (0, 0))
    r = _calibrate(capsys, "--backend", "sim", "--seed", "3", "-o", str(record), "--force")
    assert r.code == 0, r.err
    assert record.stat().st_mtime > 0 and load_record(record).model_dump(mode="json", by_alias=True) == r.json()[
        "record"]
    assert sorted(p.name for p in record.parent.iterdir()) == ["cal.json"]  # no temporary file left


_FSIZE = """
import resource, signal, sys
sys.path.insert(0, sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal, as a full disk gives ENOSPC
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
import bench_cli
sys.exit(bench_cli.main(sys.argv[3:]))
"""


def test_a_file_size_limit_leaves_the_old_record_whole_and_names_the_path(record):
    before = record.read_bytes()
    limit = len(before) // 2  # the new record (the same size) cannot be written
    out = subprocess.run([sys.executable, "-c", _FSIZE, str(PROJECT_ROOT), str(limit), "calibrate", "-n", "20",
                          "--backend", "sim", "--seed", "3", "-o", str(record), "--force", "--json"],
                         capture_output=True, text=True, timeout=300, cwd=record.parent)
    assert out.returncode == 2, out.stderr[-2000:]
    error = json.loads(out.stdout)["error"]
    assert error["type"] == "WriteFailed" and error["message"].startswith(f"file too large writing {record}")
    assert record.read_bytes() == before  # whole: the new one went to a temporary file, never over this one
    assert sorted(p.name for p in record.parent.iterdir()) == ["cal.json"]


@contextlib.contextmanager
def tmpfs(where: Path, *options: str) -> Iterator[Path]:
    """A tmpfs mounted at `where` (skips when this process may not mount one)."""
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_leaves_the_old_record_whole_and_names_the_path(record, tmp_path, capsys):
    with tmpfs(tmp_path / "small", "size=64k") as disk:
        target = disk / "cal.json"
        target.write_bytes(record.read_bytes())
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as fh:  # fill the disk to the last byte
            for size in (4096, 1):
                with contextlib.suppress(OSError):
                    while fh.write(b"\0" * size):
                        pass
        before = target.read_bytes()
        r = _calibrate(capsys, "--backend", "sim", "--seed", "3", "-o", str(target), "--force")
        assert r.code == 2
        error = r.json()["error"]
        assert error["type"] == "WriteFailed" and error["message"].startswith(f"no space left writing {target}")
        assert target.read_bytes() == before and load_record(target)
        assert sorted(p.name for p in disk.iterdir()) == ["cal.json", "filler"]


def test_a_read_only_folder_is_refused_before_the_chamber_opens(tmp_path, capsys):
    if os.geteuid() == 0:  # root writes through mode bits: a read-only mount is what refuses it
        context = tmpfs(tmp_path / "ro", "ro", "size=64k")
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        context = contextlib.nullcontext(folder)
    with context as folder:
        r = _calibrate(capsys, "--port", NO_BOARD, "-o", str(folder / "cal.json"))
        assert r.code == 2
        error = r.json()["error"]
        assert error["type"] == "OutputPathRefused"  # not LinkLost: the chamber was never opened
        assert error["message"].startswith(f"-o {folder / 'cal.json'}: folder {folder} is not writable")
        assert list(folder.iterdir()) == []
