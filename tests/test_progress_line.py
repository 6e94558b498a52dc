"""Issue 27: one progress line for every long command (firmware_bridge/progress_line.py) that fits the terminal,
shows i/N, elapsed and ETA, and is calm when piped.

Why these: the issue saw lines padded to 110-150 characters (an 80-column terminal wrapped and scrolled a line per
update), no elapsed or ETA, nothing for whole stages, and ~12,000 lines for the longest protocol when piped (one
per WAIT). Each test reads what was written, as a terminal or a log would receive it.
"""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bench_cli
from chamber import open_chamber
from chamber.operator import RowMeter
from chamber.protocol_language import parse_protocol
from chamber.protocol_runner import run_protocol
from conftest import shared_path
from firmware_bridge.progress_line import ProgressLine, clock_text

ROOT = Path(bench_cli.__file__).resolve().parent
COUNT = re.compile(r"\b\d+/\d+ \(\d+ %\)")


def segments(written: str) -> list[str]:
    """What a terminal shows line by line: every part between two newlines or carriage returns."""
    return [part for line in written.split("\n") for part in line.split("\r")]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_long_line_is_cut_to_79_columns_at_80_and_shows_count_elapsed_and_eta():
    clock, screen = Clock(), io.StringIO()
    line = ProgressLine(screen, width=80, tty=True, clock=clock)
    line.start("a-stage-with-a-long-label-" * 3, 10)
    for i in range(1, 11):
        clock.now += 6.0
        line.advance("a note that goes on and on " * 5)
    shown = segments(screen.getvalue())
    assert max(len(s) for s in shown) <= 79
    final = segments(screen.getvalue())[-2]  # the stage's last line (the text after it: empty)
    assert len(final) == 79  # padded to the width - 1
    # the label gives way (cut, marked) so that the figures show whole; no room is left for the note
    assert final.rstrip().endswith("… 10/10 (100 %) elapsed 1:00 ETA 0:00"), final
    line = ProgressLine(screen, width=80, tty=True, clock=clock)
    line.start("checks", 10)
    line.advance("a note that goes on and on " * 5)
    cut = line.text()
    assert len(cut) <= 79 and cut.endswith(" a note …"), cut  # the note cut at a space, marked
    short = io.StringIO()
    line = ProgressLine(short, width=80, tty=True, clock=clock)
    line.start("checks", 4)
    clock.now += 30
    line.advance("a")
    clock.now += 30
    line.update(note="b")
    drawn = segments(short.getvalue())[-1]
    assert drawn.startswith("checks 1/4 (25 %) elapsed 1:00 ETA 3:00 b"), drawn  # 60 s a step so far, 3 left
    assert len(drawn) == 79  # padded to the width - 1: a shorter redraw leaves nothing of the longer one


def test_the_width_follows_the_terminal_and_never_reaches_its_last_column(monkeypatch):
    monkeypatch.setenv("COLUMNS", "50")
    screen = io.StringIO()
    line = ProgressLine(screen, tty=True)
    line.start("x" * 100, 3)
    line.say("y" * 120)
    assert max(len(s) for s in segments(screen.getvalue())) == 49


def test_without_columns_the_width_is_the_terminal_stderr_is_on(monkeypatch):
    """stdout may be redirected (`--json > out.json`) while stderr is the terminal: its own size counts."""
    import fcntl
    import struct
    import termios

    monkeypatch.delenv("COLUMNS", raising=False)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    with os.fdopen(slave, "w") as terminal:
        line = ProgressLine(terminal)
        assert line.tty and line.width() == 60
        line.start("y" * 100, 2)
    os.close(master)


def test_piped_the_line_is_calm_a_line_per_interval_and_at_each_stage_start_and_end():
    clock, log = Clock(), io.StringIO()
    line = ProgressLine(log, tty=False, every=10.0, clock=clock)
    line.start("agent", 1000)
    for _ in range(1000):  # 1000 steps of 0.5 s: 500 s
        clock.now += 0.5
        line.advance("cell")
    lines = log.getvalue().splitlines()
    assert lines[0] == "agent 0/1000 (0 %) elapsed 0:00 ETA ?"
    assert lines[-1].startswith("agent 1000/1000 (100 %) elapsed 8:20 ETA 0:00")
    assert 50 <= len(lines) <= 53  # one every 10 s, the start and the end; not one per step
    assert all(COUNT.search(x) and " elapsed " in x and " ETA " in x for x in lines)


def test_clock_text():
    assert [clock_text(s) for s in (0, 59.4, 61, 3600 + 62, None)] == ["0:00", "0:59", "1:01", "1:01:02", "?"]


def test_chamber_run_piped_with_thousands_of_waits_prints_a_calm_log():
    """The longest public protocol's shape: a row, then a WAIT, thousands of times. Piped, the meter writes a line
    every 10 s of the run (a WAIT of 10 s or more gets its own), never one per WAIT."""
    text = "SET,load_in,0.2\n" + "MSR,1,0\nWAIT,500\n" * 3000 + "MSR,1,0\nWAIT,20000\nMSR,1,0\n"
    protocol = parse_protocol(text.splitlines(), "many-waits.txt")
    clock, log = Clock(), io.StringIO()

    def wait(seconds: float) -> bool:
        clock.now += seconds
        return False

    chamber = open_chamber(backend="sim", chamber="wt")
    meter = RowMeter("many-waits", log, tty=False, clock=clock)
    outcome = run_protocol(chamber, protocol, on_frame=lambda f: None, on_progress=meter, wait=wait, clock=clock)
    assert outcome.rows == 3002 and not outcome.error
    lines = log.getvalue().splitlines()
    elapsed = clock.now  # 1,520 s of WAIT
    assert len(lines) <= elapsed / 10 + 4, len(lines)  # start, end, the 20 s WAIT, one per 10 s
    assert len(lines) < 3000 / 10
    assert lines[0].startswith("many-waits: rows 0/3002 (0 %) elapsed 0:00")
    assert lines[-1].startswith("many-waits: rows 3002/3002 (100 %) elapsed 25:20 ETA 0:00")
    assert sum("(waiting 20 s)" in x for x in lines) == 1 and not any("(waiting 500 ms)" in x for x in lines)


def at_80_columns(cwd: Path, *argv: str, timeout: float = 300) -> list[str]:
    """Run `chamberlab argv` with its stderr on a pseudo-terminal of 80 columns (COLUMNS=80); what the terminal
    showed, line by line (every segment between newlines and carriage returns, blank ones left out)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "80", "LINES": "24"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench_cli.py"), *argv], stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL, cwd=cwd, env=env)
    os.close(slave)
    written = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        written += chunk
    os.close(master)
    assert proc.wait(timeout=30) in (0, 1), written.decode()[-2000:]
    return [s for s in segments(written.decode().replace("\r\n", "\n")) if s.strip()]


def test_chamber_run_at_an_80_column_terminal_stays_on_one_line(tmp_path):
    """`chamber run` with its stderr on a pseudo-terminal and COLUMNS=80: every redraw of the progress line is at
    most 79 columns and carries i/N, elapsed and ETA."""
    protocol = tmp_path / "p.txt"
    protocol.write_text("SET,load_in,0.3\n" + "MSR,20,0\nWAIT,200\n" * 8)
    shown = at_80_columns(tmp_path, "chamber", "run", str(protocol), "--backend", "sim", "-o", str(tmp_path / "p.csv"),
                          "--chunk", "5")
    progress = [s for s in shown if s.startswith("p: rows")]
    assert progress and max(len(s) for s in progress) <= 79, max(progress, key=len)
    assert all(COUNT.search(s) and " elapsed " in s and " ETA " in s for s in progress)
    assert progress[-1].startswith("p: rows 160/160 (100 %)")


def test_run_at_an_80_column_terminal_never_passes_79_columns_and_shows_every_chamber_stage(tmp_path):
    """The main job at an 80-column terminal: nothing it writes on stderr (progress lines, said lines) is wider
    than 79 columns, and the checks, calibration, sweep and station stages all show."""
    shown = at_80_columns(tmp_path, "run", "--runs-dir", str(tmp_path / "runs"), "--no-agent", "--rows", "8",
                          "--new", "--claims", "dps310-operating-range,si115x-adc-bit-depth", "--json")
    assert max(len(s) for s in shown) <= 79, max(shown, key=len)
    for stage in ("checks 2/2 (100 %) elapsed ", "station 2/2 (100 %) elapsed ", "sweep 2/2 (100 %) elapsed "):
        assert any(s.startswith(stage) and " ETA 0:00" in s for s in shown), (stage, shown)
    assert any("] calibration: " in s for s in shown) and any("] report: " in s for s in shown)


def test_matrix_shows_cells_i_of_n_elapsed_and_eta(tmp_path, capsys):
    shared_path("datasheets", "DPS310.pdf")
    code = bench_cli.main(["matrix", "--models", "scripted:reader,scripted:closed-book", "--claims",
                           "dps310-operating-range", "--out", str(tmp_path / "m"), "--no-chamber", "--json"])
    err = capsys.readouterr().err.splitlines()
    assert code == 0, err
    cells = [x for x in err if x.startswith("matrix: cells ")]
    assert cells[0] == "matrix: cells 0/2 (0 %) elapsed 0:00 ETA ?"
    assert cells[-1].startswith("matrix: cells 2/2 (100 %) elapsed ") and " ETA 0:00 " in cells[-1]
    assert len(cells) <= 3  # piped and quick: the start, the end, at most one between


@pytest.mark.parametrize("given, pool", [(None, "the packaged claims + protocols/data/chamber_parts"),
                                         ("protocols/data/claims", "protocols/data/claims")])
def test_check_all_says_which_claim_pool_it_grades(capsys, given, pool):
    from protocols.check_job import check_text

    argv = ["check", "--all", "--backend", "sim", "--rows", "10"] + (["--claims", str(ROOT / given)] if given else [])
    code = bench_cli.main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    last = out.strip().splitlines()[-1]
    assert last.startswith("pool: ") and pool in last, last
    assert f"grading {last.removeprefix('pool: ')}" in err
    assert check_text({"results": [], "pool": "3 claims from x"}).endswith("pool: 3 claims from x")
