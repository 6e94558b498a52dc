"""`chamber run --validate-only` makes every check the real run makes before its first byte (issue 24), and the
real run makes them all before its first byte too: a strict limits file, the safe state against the catalogue and
limits, every SET, and every MSR against the pressure controller's operator-limit rule, replayed in file order.
The issue's protocol (SET, SET, MSR under a limits file capping load_in) was refused by the real run with
ControllerUnbounded after two of its three instructions had been sent, and called valid offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from chamber import open_chamber
from chamber.catalogue import VariableCatalogue
from chamber.limits import parse_limits
from chamber.protocol_language import ProtocolError, parse_protocol, validate_protocol
from chamber.protocol_runner import run_protocol
from firmware_bridge.variables import layout_for
from support import run_cli

CAP = "chamber: wt\nvariables:\n  load_in: {min: 0, max: 0.5}\n"
ISSUE_PROTOCOL = "SET,load_out,0.3\nSET,hatch,10\nMSR,1,0\n"
PINNED = "SET,load_out,0.3\nSET,load_in,0.4\nMSR,2,0\n"
DUP = "chamber: wt\nvariables:\n  load_in: {max: 0.1}\n  load_in: {max: 1}\n"


def files(tmp_path: Path, **texts: str) -> dict[str, str]:
    out = {}
    for name, text in texts.items():
        path = tmp_path / name.replace("_", ".")
        path.write_text(text, encoding="utf-8")
        out[name] = str(path)
    return out


def error_of(run) -> dict[str, str]:
    assert run.code == 2, (run.code, run.out, run.err)
    return run.json()["error"]


# ------------------------------------------------------------------------------------ a duplicate-key limits file
@pytest.mark.parametrize("command", [
    ["chamber", "measure", "-n", "1", "--backend", "sim", "--set", "load_in=0.9"],
    ["chamber", "run", "P.txt", "--validate-only", "--chamber", "wt"],
    ["chamber", "run", "P.txt", "--backend", "sim", "--chamber", "wt"],
    ["chamber", "info", "--backend", "sim"],
    ["chamber", "shell", "--backend", "sim"],
    ["check", "--all", "--backend", "sim"],
    ["calibrate", "--backend", "sim", "-o", "cal.json"],
])
def test_a_duplicate_key_limits_file_is_refused_by_every_command(tmp_path, capsys, monkeypatch, command):
    f = files(tmp_path, dup_yaml=DUP, P_txt=ISSUE_PROTOCOL)
    monkeypatch.chdir(tmp_path)
    error = error_of(run_cli(capsys, "--json", *command, "--limits", f["dup_yaml"]))
    assert error["type"] == "LimitsFileError"
    assert error["message"] == (f"limits file {f['dup_yaml']}: key 'variables.load_in' appears twice (line 3 and "
                                "line 4); expected each key once in a mapping")
    assert not list(tmp_path.glob("*.csv"))


def test_the_text_refusal_is_one_line_on_stderr(tmp_path, capsys):
    f = files(tmp_path, dup_yaml=DUP)
    run = run_cli(capsys, "chamber", "measure", "-n", "1", "--backend", "sim", "--limits", f["dup_yaml"],
                  "--set", "load_in=0.9")
    assert run.code == 2 and run.out == ""
    assert run.err.strip().splitlines() == [f"error: LimitsFileError: limits file {f['dup_yaml']}: key "
                                            "'variables.load_in' appears twice (line 3 and line 4); expected each "
                                            "key once in a mapping"]


# ------------------------------------------------------------------------------------ the pressure controller
def test_the_issue_protocol_is_refused_offline_and_by_the_real_run_with_the_same_reason_and_line(tmp_path, capsys,
                                                                                                   monkeypatch):
    f = files(tmp_path, cap_yaml=CAP, P_txt=ISSUE_PROTOCOL)
    monkeypatch.chdir(tmp_path)
    common = ["--chamber", "wt", "--config", "pressure-control", "--limits", f["cap_yaml"]]
    offline = error_of(run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--validate-only", *common))
    real = error_of(run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--backend", "sim", *common,
                            "-o", str(tmp_path / "out.csv")))
    assert offline == real
    assert real["type"] == "ProtocolError"
    assert real["message"].startswith(f"{f['P_txt']}: 1 line(s) cannot run, nothing was sent: line 3: 'MSR,1,0': "
                                      "expected load_in set by an earlier SET within the operator limits "
                                      "(ControllerUnbounded: the pressure controller drives every fan")
    assert "load_in (limit 0..0.5)" in real["message"]
    assert not (tmp_path / "out.csv").exists()


def test_pinning_the_capped_fan_first_passes_both(tmp_path, capsys):
    f = files(tmp_path, cap_yaml=CAP, P_txt=PINNED)
    common = ["--chamber", "wt", "--config", "pressure-control", "--limits", f["cap_yaml"]]
    offline = run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--validate-only", *common)
    assert offline.code == 0 and offline.json()["valid"] is True
    real = run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--backend", "sim", *common,
                   "-o", str(tmp_path / "out.csv"))
    assert real.code == 0 and real.json()["rows"] == 2
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 3


def test_the_replay_follows_the_file_order_and_rst_forgets_what_was_set():
    catalogue = VariableCatalogue(layout_for("wt", "pressure-control"), parse_limits({"variables": {
        "load_in": {"max": 0.5}, "load_out": {"allowed": [0, 0.25]}}}))
    protocol = parse_protocol(["MSR,1,0", "SET,load_in,0.2", "MSR,1,0", "SET,load_out,0.25", "MSR,1,0", "RST",
                               "SET,load_out,0", "MSR,1,0", "SET,hatch,10", "SET,load_in,0.1", "MSR,1,0"], "p.txt")
    with pytest.raises(ProtocolError) as caught:
        validate_protocol(protocol, catalogue)
    got = {p.line: p.expected for p in caught.value.problems}
    assert sorted(got) == [1, 3, 8]
    assert got[1].startswith("load_in and load_out set by an earlier SET") and "load_in (limit -inf..0.5)" in got[1]
    assert got[3].startswith("load_out set by") and got[8].startswith("load_in set by")
    standard = VariableCatalogue(layout_for("wt", "standard"), catalogue.limits)  # no controller: nothing to pin
    assert validate_protocol(protocol, standard)[2] == pytest.approx(0.2)


def test_what_the_host_set_before_the_run_counts():
    catalogue = VariableCatalogue(layout_for("wt", "pressure-control"), parse_limits({"variables": {
        "load_in": {"max": 0.5}}}))
    protocol = parse_protocol(["SET,hatch,10", "MSR,1,0"], "p.txt")
    with pytest.raises(ProtocolError, match=r"line 2: 'MSR,1,0': expected load_in set by"):
        validate_protocol(protocol, catalogue, {})
    assert validate_protocol(protocol, catalogue, {"load_in": 0.3}) == {1: 10.0}


def test_the_run_sends_nothing_through_the_serial_driver_to_an_emulated_board():
    from simulator.board import running_board

    limits = parse_limits({"chamber": "wt", "variables": {"load_in": {"max": 0.5}}})
    with running_board("wt", config="pressure-control") as board:
        chamber = open_chamber(board.url, backend="serial", limits=limits)
        try:
            before = dict(chamber.backend.counters())
            with pytest.raises(ProtocolError, match=r"line 3: 'MSR,1,0': expected load_in set by"):
                run_protocol(chamber, parse_protocol(ISSUE_PROTOCOL.splitlines(), "P.txt"), on_frame=lambda f: None)
            assert chamber.applied() == {}  # neither SET went out
            assert chamber.backend.counters() == before
            outcome = run_protocol(chamber, parse_protocol(PINNED.splitlines(), "Q.txt"), on_frame=lambda f: None)
            assert outcome.error is None and outcome.rows == 2  # the same board runs the pinned protocol
        finally:
            chamber.close()


def test_the_sim_run_refuses_before_the_first_set():
    chamber = open_chamber(backend="sim", chamber="wt", config="pressure-control",
                           limits={"chamber": "wt", "variables": {"load_in": {"max": 0.5}}})
    with pytest.raises(ProtocolError):
        run_protocol(chamber, parse_protocol(ISSUE_PROTOCOL.splitlines(), "P.txt"), on_frame=lambda f: None)
    assert chamber.applied() == {} and chamber.backend.counters()["messages"] == 0


# ------------------------------------------------------------------------------------ the safe state and limits
@pytest.mark.parametrize("texts, needle", [
    ({"cap_yaml": CAP + "  pot_2: {max: 50}\n", "safe_yaml": "wt: {pot_2: 90}\n"}, "pot_2=90: outside the operator limit -inf..50"),
    ({"cap_yaml": CAP, "safe_yaml": "wt: {load_in: 0.9}\n"}, "load_in=0.9: load_in rests at 0"),
    ({"cap_yaml": "chamber: wt\nvariables:\n  load_in: {min: 0.2, max: 0.5}\n"},
     "the limit 0.2..0.5 excludes load_in=0, its value in the safe state"),
])
def test_a_safe_state_the_real_run_refuses_is_refused_offline(tmp_path, capsys, texts, needle):
    f = files(tmp_path, P_txt="SET,hatch,10\nMSR,1,0\n", **texts)
    safe = ["--safe", f["safe_yaml"]] if "safe_yaml" in f else []
    offline = error_of(run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--validate-only", "--chamber", "wt",
                               "--limits", f["cap_yaml"], *safe))
    real = error_of(run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--backend", "sim", "--chamber", "wt",
                            "--limits", f["cap_yaml"], *safe, "-o", str(tmp_path / "o.csv")))
    assert offline["type"] == real["type"] == "LimitsFileError" and needle in offline["message"]
    assert offline["message"] == real["message"]
    assert not (tmp_path / "o.csv").exists()  # refused before the chamber opened


def test_a_limits_file_for_the_other_chamber_is_refused_offline_as_on_connect(tmp_path, capsys):
    f = files(tmp_path, lt_yaml="chamber: lt\nvariables:\n  red: {max: 100}\n", P_txt="SET,hatch,10\nMSR,1,0\n")
    offline = error_of(run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--validate-only", "--chamber", "wt",
                               "--limits", f["lt_yaml"]))
    real = error_of(run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--backend", "sim", "--chamber", "wt",
                            "--limits", f["lt_yaml"], "-o", str(tmp_path / "o.csv")))
    assert offline["type"] == real["type"] == "LimitsError"
    assert offline["message"] == real["message"] == "limits are for chamber 'lt', but the board is 'wt'"


def test_a_bool_in_a_limits_file_is_refused_offline(tmp_path, capsys):
    f = files(tmp_path, b_yaml="chamber: wt\nvariables:\n  load_in: {min: false, max: true}\n", P_txt="MSR,1,0\n")
    error = error_of(run_cli(capsys, "--json", "chamber", "run", f["P_txt"], "--validate-only", "--limits",
                             f["b_yaml"]))
    assert "field 'variables.load_in.min': expected a number, got false (a boolean)" in error["message"]


def test_chamber_measure_checks_the_controller_rule_before_its_first_set():
    from chamber.limits import ControllerUnbounded
    from chamber.operator import measure_job

    chamber = open_chamber(backend="sim", chamber="wt", config="pressure-control",
                           limits={"chamber": "wt", "variables": {"load_in": {"max": 0.5}}})
    with pytest.raises(ControllerUnbounded, match=r"load_in \(limit -inf\.\.0\.5\)"):
        measure_job(chamber, 1, {"load_out": "0.3"}, stop=None, on_progress=lambda p: None, chunk_rows=25)
    assert chamber.applied() == {} and chamber.backend.counters()["messages"] == 0
    data = measure_job(chamber, 1, {"load_out": "0.3", "load_in": "0.2"}, stop=None, on_progress=lambda p: None,
                       chunk_rows=25)
    assert len(data["rows"]) == 1 and data["applied"] == {"load_out": 0.3, "load_in": 0.2}
