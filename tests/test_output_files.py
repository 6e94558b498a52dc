"""Nothing overwritten, nothing destroyed (issue 31, item 6): a file the user names is refused if it exists (unless
--force), its folder is checked writable before a chamber is opened, and it is written through a temporary file
beside it that is renamed at the end, so a full disk leaves an old record whole and the error names the path.

The rule itself (firmware_bridge/output_file.py) with real files, a real read-only folder (chmod for a user, a
read-only bind mount for root, whom mode bits do not stop) and a real full disk (RLIMIT_FSIZE in a child process:
the kernel's EFBIG, as a full disk gives ENOSPC); then every command that writes a named file, through the CLI,
on the emulated board, counting the board's connections to show that a refusal opened nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from chamber.operator import board_selection, protocol_command
from firmware_bridge.output_file import (OutputPathRefused, WriteFailed, check_output_path, staged_output,
                                         temporary_path, write_file_atomic)
from simulator.board import running_board
from support import PROJECT_ROOT, run_cli

OLD = "timestamp,config,counter\nthe old record, hours of measuring\n"
PROTOCOL = "SET,load_in,0.3\nMSR,3,0\nWAIT,5\nMSR,2,0\n"


@contextlib.contextmanager
def read_only_folder(parent: Path) -> Iterator[Path]:
    """A folder nobody here can create a file in: mode 0555 for a user; for root (whom modes do not stop) a
    read-only bind mount of it. Skips when neither can be made."""
    folder = parent / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"root cannot make a read-only folder here (mount --bind: {mounted.stderr.decode().strip()})")
    try:
        remount = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.decode().strip()}")
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".part", ".probe")))


# ------------------------------------------------------------------------------------------------ the rule
def test_an_existing_file_is_refused_without_force_and_left_as_it_was(tmp_path):
    target = tmp_path / "run.csv"
    target.write_text(OLD)
    with pytest.raises(OutputPathRefused) as caught:
        check_output_path(target, option="-o")
    assert str(caught.value) == (f"-o {target}: a file is already there ({len(OLD)} bytes); expected a new file "
                                 "name (--force replaces it once the new one is complete)")
    assert check_output_path(target, force=True, option="-o") == target
    with pytest.raises(OutputPathRefused, match="a file is already there"):
        write_file_atomic(target, "new\n")  # the writer refuses it too, before making anything
    assert target.read_text() == OLD and leftovers(tmp_path) == []


def test_a_folder_a_missing_folder_and_a_read_only_folder_are_refused_naming_path_and_reason(tmp_path):
    with pytest.raises(OutputPathRefused) as caught:
        check_output_path(tmp_path, option="--out")
    assert str(caught.value) == f"--out {tmp_path}: expected a file name, got a folder"
    missing = tmp_path / "no-such-folder" / "p.json"
    with pytest.raises(OutputPathRefused) as caught:
        check_output_path(missing, option="-o")
    assert str(caught.value) == (f"-o {missing}: folder {missing.parent} does not exist; expected an existing "
                                 "folder")
    with read_only_folder(tmp_path) as folder:
        with pytest.raises(OutputPathRefused) as caught:
            check_output_path(folder / "out.csv", option="-o")
        reason = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
        assert str(caught.value) == f"-o {folder / 'out.csv'}: folder {folder} is not writable ({reason})"
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "read-only") == []


def test_a_staged_file_appears_only_when_complete_and_a_stop_keeps_what_was_written(tmp_path):
    target = tmp_path / "rows.csv"
    target.write_text(OLD)
    with staged_output(target, force=True) as fh:
        fh.write("header\n")
        fh.flush()
        assert target.read_text() == OLD  # the old record is whole while the new one is written
        assert temporary_path(target).read_text() == "header\n"
    assert target.read_text() == "header\n" and leftovers(tmp_path) == []
    with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C: the rows written so far are kept
        with staged_output(tmp_path / "stopped.csv") as fh:
            fh.write("row 1\n")
            raise KeyboardInterrupt
    assert (tmp_path / "stopped.csv").read_text() == "row 1\n" and leftovers(tmp_path) == []


def test_a_file_that_appears_during_the_write_is_not_replaced_without_force(tmp_path):
    target = tmp_path / "rows.csv"
    with pytest.raises(WriteFailed) as caught:
        with staged_output(target) as fh:
            fh.write("ours\n")
            target.write_text("someone else's\n")
    kept = temporary_path(target)
    assert str(caught.value) == (f"{target} appeared while it was being written; the new file is kept as {kept} "
                                 "(expected no file there: move one of them, or give --force)")
    assert target.read_text() == "someone else's\n" and kept.read_text() == "ours\n"


_FULL = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from firmware_bridge.output_file import WriteFailed, write_file_atomic
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))  # Python ignores SIGXFSZ: EFBIG
try:
    write_file_atomic(Path(sys.argv[2]), "x" * 100_000, force=True)
except WriteFailed as exc:
    print(exc)
"""


def test_a_real_full_disk_leaves_the_old_file_whole_removes_the_temporary_one_and_names_the_path(tmp_path):
    target = tmp_path / "record.json"
    target.write_text(OLD)
    out = subprocess.run([sys.executable, "-c", _FULL, str(PROJECT_ROOT), str(target)], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == f"file too large writing {target} (the file already there is unchanged)", out.stderr
    assert target.read_text() == OLD and leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------------ chamber run
def protocol_file(tmp_path: Path, text: str = PROTOCOL) -> Path:
    path = tmp_path / "P.txt"
    path.write_text(text)
    return path


def test_chamber_run_refuses_an_existing_csv_without_force_before_opening_the_board(tmp_path, capsys):
    out = tmp_path / "run.csv"
    out.write_text(OLD)
    with running_board("wt", transport="tcp") as board:
        r = run_cli(capsys, "chamber", "run", str(protocol_file(tmp_path)), "--port", board.url, "-o", str(out),
                    "--json")
        assert board.board.connections == 0  # not opened, so not reset
    assert r.code == 2 and r.json()["error"] == {"type": "OutputPathRefused", "message": (
        f"-o {out}: a file is already there ({len(OLD)} bytes); expected a new file name (--force replaces it "
        "once the new one is complete)")}
    assert out.read_text() == OLD
    r = run_cli(capsys, "chamber", "run", str(protocol_file(tmp_path)), "--validate-only", "-o", str(out), "--json")
    assert r.code == 2 and r.json()["error"]["type"] == "OutputPathRefused"  # as the real run would refuse it


def test_chamber_run_with_force_replaces_the_csv_only_when_the_run_ends(tmp_path):
    out = tmp_path / "run.csv"
    out.write_text(OLD)
    seen: list[tuple[str, bool]] = []

    def progress(p):
        seen.append((out.read_text(), temporary_path(out).exists()))

    selection = board_selection("sim", None, "wt", "standard", 0, None, None, 6.0)
    result = protocol_command(selection, protocol_file(tmp_path), out, validate_only=False, chamber="wt",
                              config="standard", limits=None, safe=None, stdin=None, prompt_to=sys.stderr,
                              on_progress=progress, chunk=2, say=lambda line: None, force=True)
    assert result["rows"] == 5 and result["error"] is None and seen
    assert all(text == OLD and staged for text, staged in seen)  # every progress report: the old file, whole
    lines = out.read_text().splitlines()
    assert len(lines) == 6 and lines[0].startswith("timestamp,config,counter") and leftovers(tmp_path) == []


def test_chamber_run_into_a_read_only_folder_is_refused_before_any_byte_reaches_the_board(tmp_path, capsys):
    with read_only_folder(tmp_path) as folder, running_board("wt", transport="tcp") as board:
        r = run_cli(capsys, "chamber", "run", str(protocol_file(tmp_path)), "--port", board.url,
                    "-o", str(folder / "run.csv"), "--json")
        assert board.board.connections == 0
    error = r.json()["error"]
    assert r.code == 2 and error["type"] == "OutputPathRefused"
    assert error["message"].startswith(f"-o {folder / 'run.csv'}: folder {folder} is not writable (")


def test_chamber_runs_default_output_name_is_checked_too(tmp_path, capsys, monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "gmtime", lambda *a: time.struct_time((2025, 12, 2, 10, 0, 0, 1, 336, 0)))
    taken = tmp_path / "P_20251202T100000Z.csv"
    taken.write_text(OLD)
    r = run_cli(capsys, "chamber", "run", str(protocol_file(tmp_path)), "--backend", "sim", "--json")
    assert r.code == 2 and r.json()["error"]["message"].startswith(f"the default output {taken.name}: a file is "
                                                                   "already there")
    assert taken.read_text() == OLD


_FULL_RUN = """
import resource, sys
sys.path.insert(0, sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))  # Python ignores SIGXFSZ: EFBIG
import bench_cli
sys.exit(bench_cli.main(sys.argv[2:]))
"""


@pytest.mark.parametrize("existing", [True, False], ids=["over an old record", "a new file"])
def test_a_full_disk_during_chamber_run_names_the_csv_and_leaves_the_old_one_whole(tmp_path, existing):
    out = tmp_path / "run.csv"
    if existing:
        out.write_text(OLD)
    protocol = protocol_file(tmp_path, "SET,load_in,0.2\nMSR,200,0\n")  # ~600 bytes a row: 120 kB > 20 kB
    done = subprocess.run([sys.executable, "-c", _FULL_RUN, str(PROJECT_ROOT), "chamber", "run", str(protocol),
                           "--backend", "sim", "-o", str(out), "--force", "--json"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    note = "the file already there is unchanged" if existing else "no file was made"
    assert done.returncode == 2, done.stderr[-2000:]
    assert json.loads(done.stdout)["error"] == {"type": "WriteFailed",
                                                "message": f"file too large writing {out} ({note})"}
    assert (out.read_text() == OLD) if existing else not out.exists()
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------------ the other commands
def test_sim_fit_sweep_page_and_score_refuse_an_existing_output_and_replace_it_with_force(tmp_path, capsys):
    from conftest import shared_path

    recording = tmp_path / "rec.csv"
    with running_board("wt", transport="tcp") as board:
        fans_off = protocol_file(tmp_path, "SET,load_in,0\nSET,load_out,0\nMSR,20,0\n")
        assert run_cli(capsys, "chamber", "run", str(fans_off), "--port", board.url, "-o", str(recording),
                       "--json").code == 0
    pdf = str(shared_path("datasheets", "DPS310.pdf"))
    records = tmp_path / "records"
    assert run_cli(capsys, "extract", "dps310-operating-range", "--model", "scripted:reader", "--no-chamber",
                   "--record", str(records), "--json").code == 0
    commands = {
        "sim fit": (["sim", "fit", str(recording), "-o"], "p.json", "-o"),
        "sweep --csv": (["sweep", "dps310-operating-range", "--measured", "950", "--u", "0.5", "--csv"], "s.csv",
                        "--csv"),
        "sweep --plot": (["sweep", "dps310-operating-range", "--measured", "950", "--u", "0.5", "--plot"], "s.png",
                         "--plot"),
        "datasheet page": (["datasheet", "page", pdf, "9", "--out"], "p9.png", "--out"),
        "score --out": (["score", str(records), "--no-grounding", "--out"], "scores.json", "--out"),
    }
    for name, (argv, file_name, option) in commands.items():
        target = tmp_path / file_name
        target.write_text(OLD)
        r = run_cli(capsys, *argv, str(target), "--json")
        assert r.code == 2, (name, r.out)
        assert r.json()["error"] == {"type": "OutputPathRefused", "message": (
            f"{option} {target}: a file is already there ({len(OLD)} bytes); expected a new file name (--force "
            "replaces it once the new one is complete)")}, name
        assert target.read_text() == OLD, name
        forced = run_cli(capsys, *argv, str(target), "--force", "--json")
        assert forced.code == 0, (name, forced.out, forced.err)
        assert target.read_bytes() != OLD.encode(), name
    assert leftovers(tmp_path) == []


def test_a_missing_output_folder_is_refused_before_the_work_starts(tmp_path, capsys):
    missing = tmp_path / "figures" / "s.png"
    with running_board("wt", transport="tcp") as board:
        r = run_cli(capsys, "sweep", "dps310-operating-range", "--port", board.url, "--plot", str(missing), "--json")
        assert board.board.connections == 0  # refused before the chamber was opened for the live measurement
    assert r.code == 2 and r.json()["error"] == {"type": "OutputPathRefused", "message": (
        f"--plot {missing}: folder {missing.parent} does not exist; expected an existing folder")}
    assert not missing.parent.exists()


def test_the_probe_leaves_nothing_behind_in_a_folder_that_is_written(tmp_path):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    for _ in range(3):
        check_output_path(folder / "x.csv")
    assert list(folder.iterdir()) == []
