"""`chamber run`: the authors' protocol language, the public CSV layout, progress, the safe stop, operator limits.

The protocols are the 57 the chamber authors ran to record the public validation datasets; the layout is the one
in ../shared/chamber-data/reference/variables_*.csv; the comparison is with the authors' own host program
(../shared/firmware-harness/run_authors_host.py) against the real Mk1 firmware.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bench_cli
from chamber import open_chamber
from chamber.catalogue import VariableCatalogue
from chamber.errors import LimitsError
from chamber.limits import load_limits, parse_limits
from chamber.protocol_language import ProtocolError, load_protocol, parse_protocol, validate_protocol
from chamber.protocol_runner import run_protocol
from chamber.public_csv import PublicCsvWriter
from chamber.safe_state import DEFAULT_SAFE, apply_safe_state, resolve_safe_state
from chamber.stop import StopRequest
from conftest import shared_path
from firmware_bridge.variables import Kind, layout_for
from firmware_harness import firmware_build, real_board  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
PROTOCOLS = shared_path("chamber-data", "protocols")
REFERENCE = shared_path("chamber-data", "reference")

needs_shared = pytest.mark.skipif(not PROTOCOLS.is_dir(), reason="needs ../shared/chamber-data (CHAMBERLAB_SHARED)")

SHORT = """# a short protocol in the authors' language
SET,hatch,0.0
SET,load_in,0.0
SET,load_out,0.0
SET,osr_1,8.0
SET,v_in,1.1
SET,res_in,1.0
SET,pot_1,255.0
SET,flag,0
MSR,1,0

SET,flag,1
SET,osr_1,1
SET,load_out,0.5
MSR,2,0
WAIT,20
SET,hatch,10
MSR,2,10
"""


def reference_columns(name: str) -> list[str]:
    with open(REFERENCE / name, newline="") as fh:
        return [row["column_name"] for row in csv.DictReader(fh)]


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    lines = [line.rstrip("\n").split(",") for line in path.read_text().splitlines() if line.strip()]
    return lines[0], lines[1:]


def cli(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = bench_cli.main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------- the language
@needs_shared
def test_all_57_public_protocols_parse_and_validate_against_their_chamber():
    files = sorted(PROTOCOLS.glob("*/*.txt"))
    assert len(files) == 57
    for path in files:
        kind = "wt" if path.parent.name.startswith("wt_") else "lt"
        protocol = load_protocol(path)
        numbers = validate_protocol(protocol, VariableCatalogue(layout_for(kind, "standard")))
        assert len(numbers) == sum(1 for i in protocol.instructions if i.__class__.__name__ == "SetInstruction")
    longest = PROTOCOLS / "wt_validate_v1" / "validate_load_out_pressure_intake.txt"
    assert len(longest.read_text().splitlines()) == 18028
    assert load_protocol(longest).rows == 3000


def test_every_bad_line_is_named_with_what_was_expected_before_anything_is_sent():
    text = "SET,hatch,0\nMSR,0,0\n# fine\nWAIT,x\nFOO,1\nSET,Hatch,1\nMSR,40000,0\n"
    with pytest.raises(ProtocolError) as caught:
        parse_protocol(text.splitlines(), "p.txt")
    problems = {p.line: p for p in caught.value.problems}
    assert sorted(problems) == [2, 4, 5, 6, 7]
    assert "MSR,<rows 1..32767>" in problems[2].expected and "16-bit" in problems[7].expected
    assert "WAIT,<milliseconds>" in problems[4].expected and problems[5].text == "FOO,1"

    chamber = open_chamber(backend="sim", chamber="wt")
    protocol = parse_protocol(["SET,hatch,0", "MSR,1,0", "SET,red,10", "SET,osr_1,3", "SET,load_in,0.9"], "q.txt")
    with pytest.raises(ProtocolError) as caught:
        run_protocol(chamber, protocol, on_frame=lambda f: None)
    lines = {p.line: p.expected for p in caught.value.problems}
    assert sorted(lines) == [3, 4] and "settable variable" in lines[3] and "1, 2, 4, 8" in lines[4]
    assert chamber.backend.counters()["messages"] == 0  # not one SET, not the MSR on line 2

    limited = open_chamber(backend="sim", chamber="wt", limits={"variables": {"load_in": {"max": 0.5}}})
    with pytest.raises(ProtocolError, match=r"line 5: 'SET,load_in,0.9': expected -inf..0.5 \(operator limits\)"):
        run_protocol(limited, protocol.__class__("q.txt", protocol.instructions[-1:]), on_frame=lambda f: None)


# ----------------------------------------------------------------------------------------------- the CSV
@needs_shared
def test_chamber_run_on_the_emulated_board_writes_the_public_layout_that_fit_replay_and_sweep_accept(tmp_path, capsys):
    from simulator.board import running_board
    from simulator.fit import fit_recording
    from simulator.replay import ReplayModel, read_recording

    protocol = tmp_path / "fans_off.txt"
    protocol.write_text("SET,load_in,0\nSET,load_out,0\nSET,osr_upwind,8\nWAIT,5\nMSR,30,0\nSET,flag,1\nMSR,1,0\n")
    out = tmp_path / "fans_off.csv"
    with running_board("wt", transport="tcp") as board:
        code, summary = cli("chamber", "run", str(protocol), "--port", board.url, "-o", str(out), "--chunk", "7",
                            "--json", capsys=capsys)
    assert code == 0 and summary["rows"] == 31 and not summary["interrupted"] and summary["error"] is None
    head, rows = read_csv(out)
    assert head == reference_columns("variables_wt_standard.csv")  # column for column
    assert len(rows) == 31 and [float(r[2]) for r in rows] == list(range(31))
    assert all(r[1] == "standard" for r in rows) and abs(float(rows[0][0]) - summary_time(rows)) < 1e9

    recording = read_recording(out)
    assert recording.layout.chamber == "wt" and len(recording.rows) == 31
    assert ReplayModel(recording).sample(31).shape == (31, recording.layout.row_length)
    assert fit_recording(out).report["rows"] == 31
    code, sweep = cli("sweep", "dps310-operating-range", "--recording", str(out), "--json", capsys=capsys)
    assert code == 0 and sweep["measured"]["unit"] == "hPa"
    assert summary["safe_state"]["applied"] == DEFAULT_SAFE["wt"] and summary["safe_state"]["error"] is None


def summary_time(rows: list[list[str]]) -> float:
    return float(rows[-1][0])  # unix seconds, as the public datasets' variables.csv documents


@needs_shared
def test_light_tunnel_csv_matches_the_public_layout_and_unset_reads_minus_9999(tmp_path):
    chamber = open_chamber(backend="sim", chamber="lt")
    out = tmp_path / "lt.csv"
    with open(out, "w") as fh:
        writer = PublicCsvWriter(fh, chamber.layout.names)
        run_protocol(chamber, parse_protocol(["SET,red,10", "MSR,3,0"]), on_frame=writer.write_frame)
    head, rows = read_csv(out)
    assert head == reference_columns("variables_lt_standard.csv")
    assert rows[0][head.index("green")] == "-9999.0" and rows[0][head.index("red")] == "10.0"


@needs_shared
def test_the_longest_public_protocol_runs_unchanged_on_the_in_process_chamber(tmp_path):
    protocol = load_protocol(PROTOCOLS / "wt_validate_v1" / "validate_load_out_pressure_intake.txt")
    chamber = open_chamber(backend="sim", chamber="wt")
    waited: list[float] = []
    out = tmp_path / "long.csv"
    with open(out, "w") as fh:
        writer = PublicCsvWriter(fh, chamber.layout.names)
        outcome = run_protocol(chamber, protocol, on_frame=writer.write_frame,
                               wait=lambda s: waited.append(s) or False)
    assert outcome.error is None and outcome.rows == 3000 and outcome.instructions_done == 15025
    assert math.isclose(sum(waited), 25514.709)  # 7 h of WAIT, none of it slept here
    assert writer.rows == 3000 and len(out.read_text().splitlines()) == 3001


def test_real_firmware_same_header_columns_and_actuator_rows_as_the_authors_host(firmware_build, tmp_path, capsys):
    harness = shared_path("firmware-harness", "run_authors_host.py")
    protocol = tmp_path / "cmp.txt"
    protocol.write_text(SHORT)
    ours = tmp_path / "ours.csv"
    with real_board(firmware_build, "wt", FW_TIME_SCALE="0", FW_BAUD="0") as url:  # a fresh board per connection
        theirs = subprocess.run([sys.executable, str(harness), "--port", url, "--protocol", str(protocol),
                                 "--workdir", str(tmp_path / "authors"), "--delay", "0"],
                                capture_output=True, text=True, timeout=60)
        assert theirs.returncode == 0, theirs.stderr[-2000:]
        code, summary = cli("chamber", "run", str(protocol), "--port", url, "-o", str(ours), "--json", capsys=capsys)
    assert code == 0 and summary["rows"] == 5
    their_head, their_rows = read_csv(Path(json.loads(theirs.stdout.splitlines()[-1])["csv"]))
    our_head, our_rows = read_csv(ours)
    assert our_head == their_head == reference_columns("variables_wt_standard.csv")
    layout = layout_for("wt", "standard")
    same = ["config", "counter", "flag", "intervention"] + [v.name for v in layout.variables if v.kind is Kind.ACTUATOR]
    for name in same:
        i = our_head.index(name)
        assert [r[i] for r in our_rows] == [r[i] for r in their_rows], name  # same text, e.g. 1.100000023841858


# ----------------------------------------------------------------------------------------------- stopping safely
def test_a_stop_request_ends_after_the_current_row_keeps_every_row_and_the_safe_state_is_applied(tmp_path):
    chamber = open_chamber(backend="sim", chamber="wt")
    stop = StopRequest()
    frames = []

    def on_frame(frame):
        frames.append(frame)
        if len(frames) == 3:
            stop.request("SIGINT")

    protocol = parse_protocol(["SET,load_in,0.8", "SET,load_out,0.7"] + ["MSR,1,0", "WAIT,1000"] * 10)
    outcome = run_protocol(chamber, protocol, on_frame=on_frame, stop=stop, wait=lambda s: stop.requested)
    assert outcome.interrupted and outcome.rows == 3 and len(frames) == 3 and outcome.stopped_at_line == 8
    assert chamber.state()["load_in"] == np.float32(0.8)
    safe = apply_safe_state(chamber, resolve_safe_state())
    assert safe.error is None and chamber.state() == DEFAULT_SAFE["wt"]  # the fans off, the hatch home


def test_a_halted_board_is_reset_before_the_safe_state(tmp_path):
    from chamber.errors import FirmwareError

    chamber = open_chamber(backend="sim", chamber="wt")
    chamber._halted = FirmwareError("er03")  # as after a firmware error report
    outcome = apply_safe_state(chamber, resolve_safe_state())
    assert outcome.reset_first and outcome.error is None and outcome.applied == DEFAULT_SAFE["wt"]


def test_sigterm_stops_chamber_run_prints_the_interrupted_summary_and_keeps_the_rows(tmp_path):
    protocol = tmp_path / "long.txt"
    protocol.write_text("SET,load_in,0.9\n" + "MSR,1,0\nWAIT,60000\n" * 3)
    out = tmp_path / "long.csv"
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench_cli.py"), "chamber", "run", str(protocol),
                             "--backend", "sim", "-o", str(out), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # the first row is in, the run is in its 60 s WAIT
        seen.append(line)
        if "(waiting 1 min 00 s)" in line and "line 3: WAIT" in line:
            break
    else:
        pytest.fail(f"no WAIT progress line on stderr: {seen}")
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=30)
    summary = json.loads(stdout)
    assert proc.returncode == 130
    assert summary["interrupted"] and summary["rows"] == 1 and summary["stopped_at_line"] == 3
    assert summary["safe_state"]["applied"] == DEFAULT_SAFE["wt"]
    assert len(out.read_text().splitlines()) == 2


# ----------------------------------------------------------------------------------------------- limits
def test_one_limits_file_covers_both_chambers_with_their_own_safe_states(tmp_path):
    path = tmp_path / "limits.yaml"
    path.write_text("wt:\n  variables:\n    load_in: {max: 0.5}\n  safe: {load_in: 0, pot_2: 0}\n"
                    "lt:\n  variables:\n    red: {max: 100}\n")
    limits = load_limits(path)
    assert limits.chambers == ("wt", "lt")
    wt = open_chamber(backend="sim", chamber="wt", limits=path)
    lt = open_chamber(backend="sim", chamber="lt", limits=path)
    with pytest.raises(Exception, match=r"-inf..0.5 \(operator limits\)"):
        wt.set("load_in", 0.6)
    with pytest.raises(Exception, match=r"-inf..100 \(operator limits\)"):
        lt.set("red", 101)
    safe = resolve_safe_state(None, limits)
    assert safe.for_chamber("wt") == {**DEFAULT_SAFE["wt"], "pot_2": 0}  # added to the resting state
    assert safe.for_chamber("lt") == DEFAULT_SAFE["lt"]
    # a one-chamber file, given while both are connected, limits its own chamber only
    single = parse_limits({"chamber": "wt", "variables": {"hatch": {"max": 45}}}).covering()
    assert open_chamber(backend="sim", chamber="lt", limits=single).limits is None


@pytest.mark.parametrize("bound", ["nan", "inf", "-inf"])
def test_nan_and_infinite_bounds_are_refused(tmp_path, bound):
    path = tmp_path / "limits.yaml"
    path.write_text(f"chamber: wt\nvariables:\n  load_in: {{max: .{bound.replace('-', '')}}}\n".replace(".-", "-.")
                    if bound != "-inf" else "chamber: wt\nvariables:\n  load_in: {min: -.inf}\n")
    with pytest.raises(LimitsError, match="finite"):
        load_limits(path)
    with pytest.raises(LimitsError, match="finite"):
        parse_limits({"variables": {"hatch": {"allowed": [float(bound)]}}})


def test_a_safe_state_outside_the_limits_or_unknown_is_refused_at_connect():
    with pytest.raises(LimitsError, match="outside its own limit"):
        open_chamber(backend="sim", chamber="wt",
                     limits={"variables": {"load_in": {"min": 0.1}}, "safe": {"load_in": 0}})
    with pytest.raises(LimitsError, match="'red'"):
        open_chamber(backend="sim", chamber="wt", limits={"safe": {"red": 0}})


def test_an_interrupted_main_job_is_indexed_interrupted_prints_its_summary_and_leaves_both_chambers_safe(
        tmp_path, monkeypatch, capsys):
    import chamber.safe_state as safe_state
    from agent.runindex import RunIndex

    made_safe: list[str] = []
    real_apply = safe_state.apply_safe_state

    def recording_apply(chamber, safe):
        outcome = real_apply(chamber, safe)
        made_safe.append(outcome.chamber)
        return outcome

    def interrupted_checks(*args, **kwargs):  # the operator stops the job as the checks begin
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(safe_state, "apply_safe_state", recording_apply)
    from protocols.bench_job import TextProgress

    monkeypatch.setattr(TextProgress, "start", interrupted_checks)  # the CLI's progress of the checks stage
    code, summary = cli("run", "--runs-dir", str(tmp_path), "--no-agent", "--no-station", "--rows", "10", "--json",
                        capsys=capsys)
    assert code == 130 and summary["interrupted"] is True
    assert sorted(made_safe) == ["lt", "wt"]
    index = RunIndex(tmp_path / "index.sqlite")
    assert [r.status for r in index.runs()] == ["interrupted"]
    index.close()


# ----------------------------------------------------------------------------------------------- the shell
def test_shell_checks_each_line_against_catalogue_and_limits_before_sending_and_completes_names():
    from chamber.shell import Shell

    chamber = open_chamber(backend="sim", chamber="wt", limits={"variables": {"load_in": {"max": 0.5}}})
    shell = Shell(chamber, wait=lambda s: None)
    sent = chamber.backend.counters()["messages"]
    assert not shell.execute("SET,load_in,0.6").ok and "0.5 (operator limits)" in shell.execute("SET,load_in,0.6").text
    assert "settable variable" in shell.execute("SET,red,1").text
    assert "expected MSR,<rows" in shell.execute("MSR,x,0").text
    assert chamber.backend.counters()["messages"] == sent  # nothing went out
    assert shell.execute("SET,load_in,0.25").text == "OK load_in=0.25"
    assert len(shell.execute("MSR,3,0").frame) == 3
    assert shell.complete("SET,load_") == ["SET,load_in,", "SET,load_out,"]
    assert shell.complete("MS") == ["MSR,"] and shell.execute("quit").quit


def test_chamber_shell_from_a_pipe_applies_the_safe_state_on_exit(tmp_path):
    safe = tmp_path / "safe.yaml"
    safe.write_text("wt: {load_in: 0, load_out: 0, hatch: 0}\n")
    proc = subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), "chamber", "shell", "--backend", "sim",
                           "--safe", str(safe)], input="SET,hatch,20\nSET,load_in,0.7\nMSR,1,0\n",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "OK hatch=20" in proc.stderr and "safe state wt: load_in=0, load_out=0, hatch=0" in proc.stderr
    assert proc.stdout.startswith("timestamp,config,counter,flag,intervention,hatch")  # the public layout


def test_an_operator_command_reads_its_limits_file_once_and_leaves_the_chamber_in_its_safe_section(
        tmp_path, monkeypatch):
    import chamber.limits as limits_module
    from chamber.operator import board_selection, measure_command

    path = tmp_path / "limits.yaml"
    path.write_text("chamber: wt\nvariables: {pot_2: {max: 40}}\nsafe: {load_in: 0, load_out: 0, pot_2: 2}\n")
    reads: list[str] = []
    real_load = limits_module.load_model_file
    monkeypatch.setattr(limits_module, "load_model_file", lambda p, *a, **k: reads.append(str(p)) or
                        real_load(p, *a, **k))
    selection = board_selection("sim", None, "wt", "standard", 0, None, path, 6.0)
    data = measure_command(selection, 2, ["hatch=7"], safe=None, on_progress=lambda p: None, chunk=25,
                           warn=lambda line: None)
    assert reads == [str(path)]  # the chamber's limits and the command's safe state come from one read
    assert len(data["rows"]) == 2 and data["applied"] == {"hatch": 7.0}
    assert data["safe_state"]["applied"] == {**DEFAULT_SAFE["wt"], "pot_2": 2.0}  # its section adds to the rest


@pytest.mark.parametrize("chamber_line", ["chamber: wt\n", ""])  # a file for the wt, or for whichever is connected
def test_safe_close_without_a_given_state_uses_the_chambers_own_limits_safe_section(tmp_path, chamber_line):
    from chamber.safe_state import safe_close

    path = tmp_path / "limits.yaml"
    path.write_text(chamber_line + "safe: {pot_2: 3, res_in: 1}\n")
    wt = open_chamber(backend="sim", chamber="wt", limits=path)
    wt.set_many({"load_in": 0.8, "load_out": 0.4, "hatch": 20})
    outcome = safe_close(wt)
    assert outcome.error is None and outcome.applied == {**DEFAULT_SAFE["wt"], "pot_2": 3.0, "res_in": 1.0}
    lt = open_chamber(backend="sim", chamber="lt")  # no limits: the default
    assert safe_close(lt).applied == DEFAULT_SAFE["lt"]


@pytest.mark.parametrize("text, problem", [
    ("wt: {load_in: '0'}\n", r"field 'wt\.load_in': Input should be a valid number \(got '0'\)"),
    ("wt: {load_in: true}\n", r"field 'wt\.load_in': expected a number, got true \(a boolean\)"),
    ("wt: {load_in: .nan}\n", r"field 'wt\.load_in' \(line 1\): expected a finite number, got \.nan"),  # issue 31
    ("xt: {load_in: 0}\n", r"unexpected field 'xt' \(expected one of: wt, lt\)"),
    ("", r"empty document; expected a mapping of settings by chamber \(wt: \{variable: value\}"),
    ("- 1\n", r"expected a mapping of SafeStateFile fields at the top level, got list"),
])
def test_a_bad_safe_state_file_is_refused_in_one_line_naming_the_file_and_the_field(tmp_path, text, problem):
    from chamber.errors import LimitsError
    from chamber.safe_state import load_safe_state
    from firmware_bridge.model_file import ModelFileError

    path = tmp_path / "safe.yaml"
    path.write_text(text)
    with pytest.raises(LimitsError, match=f"^safe-state file {re.escape(str(path))}: {problem}") as caught:
        load_safe_state(path)
    assert isinstance(caught.value, ModelFileError) and "\n" not in str(caught.value)
    path.write_text("wt: {load_in: 0, pot_2: 2}\nlt: {red: 0}\n")
    safe = load_safe_state(path)
    assert safe.for_chamber("wt") == {**DEFAULT_SAFE["wt"], "pot_2": 2.0}
    assert safe.for_chamber("lt") == DEFAULT_SAFE["lt"]  # restating a resting value changes nothing
    assert safe.source.endswith(f"safe-state file {path}")


@pytest.mark.parametrize("text, problem", [
    ("lt: {red: 0}\n", None),  # names only the light tunnel: the wind tunnel keeps its resting state
    ("wt: {load_in: 0.8}\n", r"field 'wt\.load_in': load_in=0\.8: load_in rests at 0 in the built-in safe state"),
    ("wt: {hatch: 30}\n", r"field 'wt\.hatch': hatch=30: hatch rests at 0"),
    ("wt: {pressure_upwind: 0}\n", r"pressure_upwind is a sensor, expected an actuator"),
    ("wt: {red: 0}\n", r"expected an actuator of the wt chamber"),
    ("wt: {pot_2: 300}\n", r"pot_2=300: expected 0\.\.255"),
    ("lt: {pol_1: 40}\n", r"pol_1=40: pol_1 rests at 0"),
])
def test_a_safe_file_only_adds_to_the_resting_state_and_is_checked_before_anything_opens(tmp_path, text, problem):
    """Issue 31: a --safe naming only lt: left the wind tunnel's fans at 0.8 ("nothing to set"); a safe section
    that sets a fan, moves the hatch, or names a sensor or another chamber's variable is refused, offline."""
    from chamber.errors import LimitsError

    path = tmp_path / "safe.yaml"
    path.write_text(text)
    if problem is None:
        assert resolve_safe_state(path).for_chamber("wt") == DEFAULT_SAFE["wt"]
        return
    with pytest.raises(LimitsError, match=f"^safe-state file {re.escape(str(path))}: .*{problem}"):
        resolve_safe_state(path)
    proc = subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), "chamber", "measure", "--port",
                           "socket://127.0.0.1:9", "--safe", str(path), "-n", "1"],
                          capture_output=True, text=True, timeout=60)  # no board there: refused before opening
    assert proc.returncode == 2 and "LimitsFileError" in proc.stderr and "cannot open" not in proc.stderr, proc.stderr


def test_limits_that_keep_a_chamber_from_resting_are_refused_before_it_opens(tmp_path):
    from chamber.errors import LimitsError

    with pytest.raises(LimitsError, match=r"'wt\.variables\.load_in': the limit 0\.1\.\.inf excludes load_in=0"):
        resolve_safe_state(None, parse_limits({"wt": {"variables": {"load_in": {"min": 0.1}}}}))
    with pytest.raises(LimitsError, match=r"pot_2=200: outside the operator limit -inf\.\.100"):
        resolve_safe_state(None, parse_limits({"chamber": "wt", "variables": {"pot_2": {"max": 100}},
                                               "safe": {"pot_2": 200}}))
