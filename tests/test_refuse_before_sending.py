"""Refuse what the firmware cannot take, before it is sent (issue 31, item 7).

`--chunk 100000` sent `MSR,40000,0`, beyond the firmware's 16-bit row count (the first Ctrl-C then did nothing for
a minute); `-n 99999999999`, `--steps 1e8` and `--rows 1e9` were accepted or failed late; a protocol with
WAIT_INPUT passed --validate-only with stdin closed and failed the real run after two instructions had been sent.
Each is now refused first: a usage error naming the option and the limit, or a typed error from the library
before the chamber is opened. "Nothing was sent" is shown on the emulated board (its connection count stays 0:
the port was never opened, so the board was not even reset) or with a spy that lists every SET and MSR.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chamber import open_chamber
from chamber.operator import OperatorRefused, board_selection, measure_command, operator_input, protocol_command
from chamber.protocol_language import MAX_MSR_ROWS, parse_protocol
from chamber.protocol_runner import ChunkRefused, check_chunk_rows, measure_rows
from chamber.shell import Shell
from simulator.board import running_board
from support import PROJECT_ROOT, ChamberSpy, run_cli

CHUNK = (f"expected a whole number 1..{MAX_MSR_ROWS} (the most rows one MSR may ask for: the firmware reads n as "
         "a 16-bit int)")


def usage(r) -> str:
    error = r.json()["error"]
    assert r.code == 2 and error["type"] == "usage", error
    return error["message"]


# ------------------------------------------------------------------------------------------------ MSR chunks
def test_the_chunk_limit_is_the_firmwares_16_bit_count():
    assert MAX_MSR_ROWS == 2**15 - 1  # the ATmega2560's int (firmware-harness README, "Known differences")
    assert check_chunk_rows(MAX_MSR_ROWS) == MAX_MSR_ROWS and check_chunk_rows(1) == 1
    for bad in (MAX_MSR_ROWS + 1, 0, 40_000, True, 2.0):
        with pytest.raises(ChunkRefused) as caught:
            check_chunk_rows(bad)
        assert str(caught.value) == (f"chunk: expected a whole number of rows 1..{MAX_MSR_ROWS} (the most one MSR "
                                     f"may ask for: the firmware reads n as a 16-bit int), got {bad!r}; nothing "
                                     "was sent")


@pytest.mark.parametrize("argv", [
    ["chamber", "measure", "-n", "10"], ["chamber", "run", "P.txt"], ["chamber", "shell"]], ids=lambda a: a[1])
def test_a_chunk_above_the_limit_is_a_usage_error_naming_the_option_and_the_limit(capsys, tmp_path, argv):
    (tmp_path / "P.txt").write_text("MSR,10,0\n")
    argv = [str(tmp_path / a) if a == "P.txt" else a for a in argv]
    with running_board("wt", transport="tcp") as board:
        for chunk in ("100000", str(MAX_MSR_ROWS + 1), "0"):
            message = usage(run_cli(capsys, *argv, "--port", board.url, "--chunk", chunk, "--json"))
            assert f"argument --chunk: {CHUNK}, got '{chunk}'" in message
        assert board.board.connections == 0


def test_the_library_refuses_a_large_chunk_before_opening_or_sending(tmp_path):
    with running_board("wt", transport="tcp") as board:
        selection = board_selection("serial", board.url, "wt", "standard", 0, None, None, 6.0)
        with pytest.raises(ChunkRefused):
            measure_command(selection, 40_000, ["load_in=0.5"], safe=None, on_progress=lambda p: None,
                            chunk=100_000, warn=lambda line: None)
        (tmp_path / "P.txt").write_text("SET,load_in,0.5\nMSR,10,0\n")
        with pytest.raises(ChunkRefused):
            protocol_command(selection, tmp_path / "P.txt", tmp_path / "o.csv", validate_only=False, chamber="wt",
                             config="standard", limits=None, safe=None, stdin=None, prompt_to=io.StringIO(),
                             on_progress=lambda p: None, chunk=MAX_MSR_ROWS + 1, say=lambda line: None)
        assert board.board.connections == 0 and not (tmp_path / "o.csv").exists()
    spy = ChamberSpy(open_chamber(backend="sim", chamber="wt"))
    with pytest.raises(ChunkRefused):
        measure_rows(spy, 40_000, chunk_rows=40_000)
    with pytest.raises(ChunkRefused):
        Shell(spy, chunk_rows=40_000)
    assert spy.calls == []


def test_a_long_measurement_goes_out_in_msrs_within_the_limit():
    spy = ChamberSpy(open_chamber(backend="sim", chamber="wt"))
    frame, interrupted = measure_rows(spy, 70, chunk_rows=32)
    assert not interrupted and len(frame) == 70 and spy.calls == [("measure", 32), ("measure", 32), ("measure", 6)]


# ------------------------------------------------------------------------------------------------ absurd counts
@pytest.mark.parametrize("argv, option, expected, given", [
    (["chamber", "measure", "--backend", "sim"], "-n", "1..50000", "99999999999"),
    (["calibrate", "--backend", "sim"], "-n", "1..50000", "99999999999"),
    (["check", "--all", "--backend", "sim"], "--rows", "1..50000", "1000000000"),
    (["run", "--no-agent"], "--rows", "1..50000", "1000000000"),
    (["run", "--no-agent"], "--rows", "1..50000", "1e9"),
    (["sweep", "dps310-operating-range", "--measured", "950", "--u", "0.5"], "--steps", "3..10001", "100000000"),
    (["sweep", "dps310-operating-range", "--measured", "950", "--u", "0.5"], "--steps", "3..10001", "1e8"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_absurd_counts_and_steps_are_usage_errors_naming_the_option(capsys, tmp_path, monkeypatch, argv, option,
                                                                     expected, given):
    monkeypatch.chdir(tmp_path)
    message = usage(run_cli(capsys, *argv, option, given, "--json"))
    assert f"argument {option}: expected a whole number {expected}, got '{given}'" in message
    assert list(tmp_path.iterdir()) == []  # no run folder, no file: refused before any work


# ------------------------------------------------------------------------------------------------ WAIT_INPUT
WAITS = "SET,load_in,0.4\nMSR,1,0\nWAIT_INPUT,open the hatch\nMSR,1,0\nWAIT_INPUT,close it\nMSR,1,0\n"


def test_what_stdin_can_give_an_operator(tmp_path):
    assert operator_input(None) == (0, "closed")
    closed = open(os.devnull)
    closed.close()
    assert operator_input(closed) == (0, "closed")
    with open(os.devnull) as null:
        assert operator_input(null) == (0, os.devnull)
    answers = tmp_path / "answers.txt"
    answers.write_text("\nyes")
    with open(answers) as fh:
        assert operator_input(fh) == (2, "a file holding 2 line(s)")
    read_end, write_end = os.pipe()
    with os.fdopen(read_end) as pipe:
        assert operator_input(pipe) == (None, "")  # the writer is still there: a line may come
        os.close(write_end)
        assert operator_input(pipe) == (0, "a pipe closed with nothing in it")
    assert operator_input(io.StringIO("")) == (None, "")  # no descriptor: asked when the WAIT_INPUT comes


def _run(protocol: Path, *argv: str, **popen) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PROJECT_ROOT / "bench_cli.py"), "chamber", "run", str(protocol),
                           *argv, "--json"], capture_output=True, text=True, timeout=120, **popen)


@pytest.mark.parametrize("stdin", ["devnull", "closed"])
def test_wait_input_with_no_stdin_is_refused_by_validate_only_as_by_the_run_before_anything_is_sent(tmp_path,
                                                                                                   stdin):
    protocol = tmp_path / "P.txt"
    protocol.write_text(WAITS)
    popen = {"stdin": subprocess.DEVNULL} if stdin == "devnull" else {"preexec_fn": lambda: os.close(0)}
    what = os.devnull if stdin == "devnull" else "closed"
    expected = {"type": "OperatorRefused", "message": (
        f"{protocol}: line 3: 'WAIT_INPUT,open the hatch': expected a line on stdin (an operator pressing Enter) "
        f"for each of the 2 WAIT_INPUT(s), but stdin is {what}; nothing was sent")}
    offline = _run(protocol, "--validate-only", **popen)
    assert offline.returncode == 2 and json.loads(offline.stdout)["error"] == expected, offline.stderr
    with running_board("wt", transport="tcp") as board:
        real = _run(protocol, "--port", board.url, "-o", str(tmp_path / "o.csv"), **popen)
        assert board.board.connections == 0  # the port was never opened: no SET, no MSR, not even a reset
    assert real.returncode == 2 and json.loads(real.stdout)["error"] == expected, real.stderr
    assert not (tmp_path / "o.csv").exists()


def test_a_file_of_answers_is_enough_when_it_holds_a_line_per_wait_input(tmp_path):
    protocol = tmp_path / "P.txt"
    protocol.write_text(WAITS)
    one = tmp_path / "one.txt"
    one.write_text("\n")
    with open(one) as fh:
        short = _run(protocol, "--validate-only", stdin=fh)
    error = json.loads(short.stdout)["error"]
    assert short.returncode == 2 and error["message"].startswith(f"{protocol}: line 5: 'WAIT_INPUT,close it'")
    assert "but stdin is a file holding 1 line(s)" in error["message"]
    two = tmp_path / "two.txt"
    two.write_text("\n\n")
    with open(two) as fh:
        done = _run(protocol, "--backend", "sim", "-o", str(tmp_path / "o.csv"), stdin=fh, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["rows"] == 3 and len((tmp_path / "o.csv").read_text().splitlines()) == 4


def test_a_protocol_without_wait_input_runs_with_stdin_closed(tmp_path):
    protocol = tmp_path / "P.txt"
    protocol.write_text("SET,load_in,0.4\nMSR,2,0\n")
    done = _run(protocol, "--backend", "sim", "-o", str(tmp_path / "o.csv"), stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and json.loads(done.stdout)["rows"] == 2, done.stderr


def test_an_msr_beyond_the_limit_in_a_protocol_is_refused_naming_the_limit():
    from chamber.protocol_language import ProtocolError

    with pytest.raises(ProtocolError) as caught:
        parse_protocol(["MSR,32767,0", "MSR,32768,0"], "P.txt")
    assert [p.line for p in caught.value.problems] == [2]
    assert caught.value.problems[0].expected == (f"MSR,<rows 1..{MAX_MSR_ROWS}>,<delay ms> (the firmware reads n "
                                                 "as a 16-bit int; split the MSR)")
