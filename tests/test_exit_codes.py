"""Exit codes that tell the truth (issue 24): 0 only when everything asked was done, 1 when a command completed short
of it (an `error` verdict, an extraction without an answer), 2 refused or failed, 3 a safe state unconfirmed, 130
interrupted; every argument error names its option; a taken port says how to get a free one.

Through the CLI where the code is the CLI's behaviour: `check` against an emulated board whose firmware fails in the
middle of a measurement, or whose port vanishes, `extract` on an unreadable datasheet, `--seed -1` everywhere.
"""

from __future__ import annotations

import pytest

import bench_cli
from protocols.claim_sources import load_main_job_claims
from chamber.safe_state import SafeStateUnconfirmed
from protocols.exit_codes import RUN_STATUS, exit_code, safe_state_confirmed
from simulator.board import running_board
from simulator.board_faults import BoardFaults
from support import run_cli

CONFIRMED = {"chamber": "wt", "applied": {}, "error": None, "confirmed": True}
UNCONFIRMED = {"chamber": "wt", "applied": {}, "error": "LinkLost: gone", "confirmed": False}


# ----------------------------------------------------------------------------------------------- the one rule
@pytest.mark.parametrize("result, kw, code", [
    ({}, {}, 0),
    ({"safe_state": [CONFIRMED, CONFIRMED]}, {}, 0),
    ({"incomplete": {"error_verdicts": 1}}, {}, 1),
    ({"incomplete": {}}, {}, 0),  # nothing counted short: done
    ({}, {"incomplete": True}, 1),
    ({}, {"failed": True}, 2),
    ({"interrupted": True, "incomplete": {"error_verdicts": 2}}, {"failed": True}, 130),
    ({"interrupted": True, "safe_state": [CONFIRMED, UNCONFIRMED]}, {}, 3),  # the chamber may run on: wins
    ({"safe_state": UNCONFIRMED}, {"incomplete": True}, 3),  # one outcome (operator commands) as well as a list
    ({"safe_state": {"chamber": "wt", "error": "halted"}}, {}, 3),  # an outcome without `confirmed`: its error
])
def test_the_exit_code_rule_and_its_precedence(result, kw, code):
    assert exit_code(result, **kw) == code


def test_run_status_names_each_code_and_an_older_outcome_counts_as_confirmed_without_an_error():
    assert RUN_STATUS == {0: "finished", 1: "completed with errors", 2: "failed", 3: "safe state unconfirmed",
                          130: "interrupted"}
    assert safe_state_confirmed({"chamber": "wt", "error": None}) and safe_state_confirmed(None)
    assert not safe_state_confirmed([CONFIRMED, {**CONFIRMED, "confirmed": False}])


# ----------------------------------------------------------------------------------------------- check
def test_check_exits_1_with_the_error_verdict_when_the_firmware_fails_mid_measurement(capsys):
    with running_board("wt", faults=BoardFaults(error_on="MSR")) as board:
        r = run_cli(capsys, "check", "dps310-operating-range", "--port", board.url, "--rows", "8", "--json")
    result = r.json()
    assert (r.code, result["verdict"]) == (1, "error"), r.err
    assert "er09" in result["reason"] and result["incomplete"] == {"error_verdicts": 1}
    assert [o["confirmed"] for o in result["safe_state"]] == [True]  # reset, then left safe: not a 3


def test_check_exits_3_when_the_link_is_lost_mid_measurement_and_the_safe_state_cannot_be_confirmed(capsys):
    with running_board("wt", faults=BoardFaults(vanish_after_rows=5)) as board:
        r = run_cli(capsys, "check", "dps310-operating-range", "--port", board.url, "--rows", "8", "--json")
    result = r.json()
    assert (r.code, result["verdict"]) == (3, "error"), r.err
    assert "link" in result["reason"]
    assert [o["confirmed"] for o in result["safe_state"]] == [False]
    r = run_cli(capsys, "check", "dps310-operating-range", "--backend", "sim", "--rows", "8")
    assert r.code == 0 and "NOT confirmed" not in r.out  # the same claim on a healthy chamber: all done


def test_check_all_without_claim_files_grades_the_pool_run_grades(capsys):
    r = run_cli(capsys, "check", "--all", "--backend", "sim", "--rows", "8", "--json")
    assert r.code == 0, r.err
    graded = [x["claim_id"] for x in r.json()["results"]]
    assert sorted(graded) == sorted(load_main_job_claims(None)) and len(graded) == 53
    assert {"nf-f12-max-speed-intake", "mcp4151-inl-pot-1"} <= set(graded)  # chamber parts, not only the 37


# ----------------------------------------------------------------------------------------------- extract
def test_extract_on_an_unreadable_datasheet_exits_1_with_the_outcome(capsys, tmp_path):
    pdf = tmp_path / "DPS310.pdf"
    pdf.write_bytes(b"%PDF-1.4 not really a PDF")
    r = run_cli(capsys, "extract", "dps310-operating-range", "--model", "scripted:reader", "--datasheet", str(pdf),
                "--no-chamber", "--record", str(tmp_path / "records"), "--json")
    assert (r.code, r.json()["outcome"]) == (1, "document_unreadable"), r.err  # the document, not the model


# ----------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("argv", [
    ["run"], ["check", "--all"], ["calibrate"], ["sim", "serve"], ["chamber", "info", "--backend", "sim"], ["serve"]])
def test_a_negative_seed_is_refused_naming_the_option_before_any_work(capsys, argv):
    r = run_cli(capsys, *argv, "--seed", "-1")
    assert r.code == 2 and r.out == ""
    line = r.err.strip()
    assert "\n" not in line and "argument --seed: expected a whole number >= 0, got '-1'" in line, line


def test_every_custom_argument_type_names_its_option(capsys):
    cases = [(["check", "--all", "--rows", "0"], "--rows"), (["sweep", "x", "--steps", "2"], "--steps"),
             (["serve", "--listen-port", "70000"], "--listen-port"), (["serve", "--lease-timeout", "-1"],
                                                                      "--lease-timeout"),
             (["sweep", "x", "--measured", "1e999", "--u", "1"], "--measured")]
    for argv, option in cases:
        r = run_cli(capsys, *argv)
        assert r.code == 2 and f"argument {option}: expected" in r.err, (argv, r.err)


# ----------------------------------------------------------------------------------------------- main's mapping
def test_main_maps_the_drivers_unconfirmed_safe_state_to_3_and_an_interrupt_to_130(capsys, monkeypatch):
    import protocols.check_job as check_job

    def left_running(**kw):
        raise SafeStateUnconfirmed([])

    monkeypatch.setattr(check_job, "check_command", left_running)
    r = run_cli(capsys, "check", "--all", "--backend", "sim")
    assert r.code == 3 and r.err.startswith("error: SafeStateUnconfirmed: ") and r.err.count("\n") == 1

    def stopped(**kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(check_job, "check_command", stopped)
    assert run_cli(capsys, "check", "--all", "--backend", "sim").code == 130


def test_the_default_runs_folder_is_runs_in_the_current_folder(capsys, tmp_path, monkeypatch):
    args = bench_cli.build_parser().parse_args(["run"])
    assert args.runs_dir.as_posix() == "runs" and not args.runs_dir.is_absolute()
    monkeypatch.chdir(tmp_path)
    r = run_cli(capsys, "runs", "list")
    assert r.code == 0 and r.out.strip() == f"no runs yet (index {tmp_path / 'runs' / 'index.sqlite'} does not exist)"


def test_every_chamber_command_says_how_it_left_the_chambers(capsys, tmp_path):
    cal = run_cli(capsys, "calibrate", "--backend", "sim", "-n", "8", "--json")
    assert cal.code == 0 and [o["chamber"] for o in cal.json()["safe_state"]] == ["wt", "lt"]
    assert all(o["confirmed"] for o in cal.json()["safe_state"])
    live = run_cli(capsys, "sweep", "dps310-operating-range", "--backend", "sim", "--steps", "3", "--json")
    assert live.code == 0 and all(o["confirmed"] for o in live.json()["safe_state"]) and live.json()["safe_state"]
    given = run_cli(capsys, "sweep", "dps310-operating-range", "--measured", "945.285", "--u", "0.080", "--json")
    assert given.code == 0 and given.json()["safe_state"] == []  # no chamber opened


def test_serve_stopped_by_sigterm_exits_0_having_printed_one_json_object(tmp_path):
    import json
    import signal
    import subprocess
    import sys

    from support import PROJECT_ROOT

    proc = subprocess.Popen([sys.executable, str(PROJECT_ROOT / "bench_cli.py"), "serve", "--listen-port", "0",
                             "--chamber", "wt", "--record", str(tmp_path / "api"), "--json"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())  # blocks until the service listens
        assert ready["chambers"] == ["wt"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == ""  # the stop adds nothing to stdout: one JSON object in all
