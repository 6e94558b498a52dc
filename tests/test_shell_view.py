"""Issue 27: what `chamber shell` shows and how a script ends (the simulator; the real firmware's Ctrl-C and safe
state are tests/test_shell_real_firmware.py).

Why: each row was 35 CSV columns wrapping over 3 lines with the header repeated per MSR, an MSR was silent until
all its rows were in (`--chunk` ignored), `vars` did not say that a SET on a sensor overrides its reading, `help`
left out WAIT_INPUT and comments, and a refused line in a piped script still exited 0.
"""

from __future__ import annotations


import io
import subprocess
import sys
from pathlib import Path

import bench_cli
from chamber import open_chamber
from chamber.protocol_language import EXPECTED
from chamber.shell import RowView, Shell
from chamber.stop import StopRequest

ROOT = Path(bench_cli.__file__).resolve().parent


def shell_of(chunk_rows: int = 25, csv: bool = False) -> tuple[Shell, list[str], list[int]]:
    chamber = open_chamber(backend="sim", chamber="wt", seed=1)
    lines: list[str] = []
    chunks: list[int] = []
    view = RowView(chamber.layout.names, lines.append, kind="wt", csv=csv)

    def on_frame(frame) -> None:
        chunks.append(len(frame))
        view.rows(frame)

    return Shell(chamber, wait=lambda s: False, on_frame=on_frame, chunk_rows=chunk_rows, view=view), lines, chunks


def test_an_msr_streams_its_rows_chunk_by_chunk_in_a_compact_aligned_view_with_one_header():
    shell, lines, chunks = shell_of(chunk_rows=4)
    assert shell.execute("SET,load_in,0.4").ok
    assert shell.execute("MSR,10,0").text == "10 row(s)"
    assert chunks == [4, 4, 2]  # --chunk honoured: three MSRs on the wire, rows shown as each arrives
    assert shell.execute("MSR,3,0").ok
    header = lines[0].split()
    assert header == ["counter", "load_in", "rpm_in", "rpm_out", "pressure_upwind", "pressure_downwind"]
    assert len(lines) == 1 + 13 and sum(x.split()[0] == "counter" for x in lines) == 1  # the header once
    assert len({len(x) for x in lines}) == 1 and len(lines[0]) < 80  # aligned, one terminal line a row
    assert [x.split()[0] for x in lines[1:]] == [str(i) for i in range(13)]
    assert all(x.split()[1] == "0.4" for x in lines[1:])


def test_cols_chooses_the_sensors_and_the_header_is_written_again_only_when_the_columns_change():
    shell, lines, _ = shell_of()
    assert shell.execute("cols pressure_ambient, mic").text == "columns: counter, pressure_ambient, mic"
    assert not shell.execute("cols nosuch").ok
    shell.execute("MSR,2,0")
    shell.execute("SET,hatch,10")
    shell.execute("MSR,2,0")
    headers = [x.split() for x in lines if x.split()[0] == "counter"]
    assert headers == [["counter", "pressure_ambient", "mic"], ["counter", "hatch", "pressure_ambient", "mic"]]
    assert "sensors: " in shell.execute("cols").text
    assert shell.execute("cols default").text.startswith("columns: counter, hatch, rpm_in")


def test_csv_on_shows_every_column_with_the_header_once():
    shell, lines, _ = shell_of()
    shell.execute("csv on")
    shell.execute("MSR,2,0")
    shell.execute("MSR,2,0")
    assert lines[0].startswith("timestamp,config,counter,flag,intervention,hatch")  # the public dataset layout
    assert len(lines) == 5 and all(len(x.split(",")) == 37 for x in lines)
    assert all(x.split(",")[1] == "standard" for x in lines[1:])


def test_vars_marks_kind_and_unit_and_a_set_on_a_sensor_warns_that_it_overrides_the_reading():
    shell, _, _ = shell_of()
    listing = {line.split()[0]: line for line in shell.execute("vars").text.splitlines()[1:]}
    assert listing["load_in"].split()[1:3] == ["actuator", "duty"] and "overrides" not in listing["load_in"]
    assert listing["pressure_upwind"].split()[1:3] == ["sensor", "Pa"] and "overrides the reading" in listing[
        "pressure_upwind"]
    reply = shell.execute("SET,pressure_upwind,100")
    assert reply.ok and "warning" in reply.text and "overrides its reading" in reply.text
    assert "override ended" in shell.execute("SET,pressure_upwind,-9999").text
    assert "warning" not in shell.execute("SET,hatch,5").text


def test_help_lists_every_instruction_and_shell_command():
    shell, _, _ = shell_of()
    text = shell.execute("help").text
    for expected in EXPECTED.values():
        assert expected in text
    for word in ("# a comment", "vars", "state", "cols", "csv on", "help", "quit", "Ctrl-C"):
        assert word in text


def test_a_stop_request_ends_an_msr_after_its_chunk_and_a_wait_at_once():
    shell, lines, chunks = shell_of(chunk_rows=5)
    stop = StopRequest()
    shell._on_frame = lambda frame: (chunks.append(len(frame)), stop.request("SIGINT"))
    reply = shell.execute("MSR,50,0", stop)
    assert reply.stopped and reply.text == "stopped after 5 of 50 row(s) (kept)" and chunks == [5]
    waits = Shell(shell.chamber)  # the stop request's own wait
    stop = StopRequest()
    stop.request("SIGINT")
    assert waits.execute("WAIT,60000", stop).text == "WAIT of 60000 ms cut short"  # (a 60 s WAIT run out says so
    # otherwise: the text is the fact, not a time)


def run_script(script: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), "chamber", "shell", "--backend", "sim",
                           *extra], input=script, capture_output=True, text=True, timeout=60)


def test_a_refused_line_in_a_piped_script_stops_it_and_exits_2_with_the_chamber_left_safe():
    proc = run_script("SET,load_in,0.5\nSET,load_in,7\nMSR,3,0\n")
    assert proc.returncode == 2, proc.stderr
    assert "! refused, nothing sent: load_in: expected 0..1" in proc.stderr
    assert "line 2 of the script was not done; the script stops here" in proc.stderr
    assert proc.stdout == ""  # the MSR after it never ran
    assert "safe state wt: load_in=0, load_out=0, hatch=0, pot_1=0 (read back)" in proc.stderr
    clean = run_script("SET,load_in,0.5\nMSR,3,0\n# a comment\n\nquit\n", "--json")
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.count("counter,") == 1  # rows into a pipe: the whole CSV, header once


def test_the_shell_takes_the_bench_chunk_option(monkeypatch, capsys):
    import chamber.operator as operator

    seen = {}

    def fake_run_shell(chamber, stdin, stdout, stderr, history, *, chunk_rows, csv):
        seen.update(chunk_rows=chunk_rows, csv=csv)
        return operator.ShellEnd()

    monkeypatch.setattr(operator, "run_shell", fake_run_shell)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert bench_cli.main(["chamber", "shell", "--backend", "sim", "--chunk", "7", "--csv"]) == 0
    assert seen == {"chunk_rows": 7, "csv": True}
