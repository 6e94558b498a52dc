"""NaN, Infinity and oversized numbers in a data file are refused naming the file and the key (issue 31, item 7).

A NaN in a simulator parameter file was accepted (NaN compares false with every bound, so it passed every check);
a 5,000-digit JSON integer gave Python's "Exceeds the limit (4300 digits)", naming no file. The one reader
(firmware_bridge/model_file.py, rules in data_numbers.py) now refuses both while parsing, for every file it reads:
here the simulator parameters, operator limits, safe state, lab, claims and station files through their own
loaders, in YAML and JSON, and once through the CLI before any chamber is opened.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from chamber.instruments.station import load_station_file
from chamber.limits import load_limits
from chamber.safe_state import load_safe_state
from chamber.selection import read_params
from firmware_bridge.data_numbers import MAX_INTEGER_DIGITS
from firmware_bridge.model_file import ModelFileError, parse_data_text, read_data_file
from protocols.claims import ClaimFileError, load_claims
from protocols.remote_lab.lab_file import load_lab
from simulator.board import running_board
from simulator.params import SimParams, load_params
from support import run_cli

BIG = "7" * 5000
FINITE = "expected a finite number"
DIGITS = f"expected an integer of at most {MAX_INTEGER_DIGITS} digits, got an integer of 5000 digits"

# (loader, file name, text with the bad number, the key path the message names (YAML: and its line))
CASES = [
    (read_params, "params.json", '{"wind_tunnel": {"ambient_mean_pa": NaN}}',
     f"simulator parameters {{}}: field 'wind_tunnel.ambient_mean_pa': {FINITE}, got NaN"),
    (load_params, "params.yaml", "wind_tunnel:\n  barometer_noise_pa: {1: .inf}\n",
     f"simulator parameters {{}}: field 'wind_tunnel.barometer_noise_pa.1' (line 2): {FINITE}, got .inf"),
    (read_params, "params-big.json", '{"wind_tunnel": {"ambient_mean_pa": ' + BIG + '}}',
     f"simulator parameters {{}}: field 'wind_tunnel.ambient_mean_pa': {DIGITS}"),
    (load_limits, "limits.yaml", "chamber: wt\nvariables:\n  load_in: {max: .nan}\n",
     f"limits file {{}}: field 'variables.load_in.max' (line 3): {FINITE}, got .nan"),
    (load_limits, "limits.json", '{"chamber": "wt", "variables": {"load_in": {"min": -Infinity}}}',
     f"limits file {{}}: field 'variables.load_in.min': {FINITE}, got -Infinity"),
    (load_limits, "limits-big.yaml", f"chamber: wt\nvariables:\n  load_in: {{max: {BIG}}}\n",
     f"limits file {{}}: field 'variables.load_in.max' (line 3): {DIGITS}"),
    (load_safe_state, "safe.yaml", "wt: {load_in: -.inf}\n",
     f"safe-state file {{}}: field 'wt.load_in' (line 1): {FINITE}, got -.inf"),
    (load_safe_state, "safe.json", '{"wt": {"load_in": NaN}}', f"safe-state file {{}}: field 'wt.load_in': "
     f"{FINITE}, got NaN"),
    (load_safe_state, "safe-big.json", '{"wt": {"load_in": ' + BIG + '}}',
     f"safe-state file {{}}: field 'wt.load_in': {DIGITS}"),
    (load_lab, "lab.yaml", "chambers:\n  wt-1:\n    board: sim\n    limits: {chamber: wt, variables: "
     "{load_in: {max: .nan}}}\n",
     f"lab file {{}}: field 'chambers.wt-1.limits.variables.load_in.max' (line 4): {FINITE}, got .nan"),
    (load_lab, "lab-big.json", '{"chambers": {"wt-1": {"board": "sim", "max_msr_rows": ' + BIG + '}}}',
     f"lab file {{}}: field 'chambers.wt-1.max_msr_rows': {DIGITS}"),
    (load_claims, "claims.yaml", "claims:\n  - id: x\n    value: .nan\n",
     f"{{}}: field 'claims[0].value' (line 3): {FINITE}, got .nan"),
    (load_claims, "claims-big.yaml", f"claims:\n  - id: x\n    value: {BIG}\n",
     f"{{}}: field 'claims[0].value' (line 3): {DIGITS}"),
    (load_station_file, "station.yaml", "instruments:\n  smu:\n    resource: X\n    settle_s: .inf\n",
     f"station file {{}}: field 'instruments.smu.settle_s' (line 4): {FINITE}, got .inf"),
    (load_station_file, "station-big.yaml", f"instruments:\n  smu:\n    resource: X\n    settle_s: {BIG}\n",
     f"station file {{}}: field 'instruments.smu.settle_s' (line 4): {DIGITS}"),
]


@pytest.mark.parametrize("load, name, text, message", CASES, ids=[c[1] for c in CASES])
def test_each_data_file_refuses_nan_infinity_and_huge_numbers_naming_file_and_key(tmp_path, load, name, text,
                                                                                  message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises((ModelFileError, ClaimFileError)) as caught:  # a claim file's error is its own type
        load(path)
    assert str(caught.value) == message.format(path)
    assert "4300" not in str(caught.value)


def test_a_number_beyond_a_float_is_refused_and_a_tiny_one_is_not():
    with pytest.raises(ModelFileError) as caught:
        parse_data_text('{"a": [1, {"b": 1e400}]}', source="f.json", json_format=True)
    assert str(caught.value) == ("f.json: field 'a[1].b': expected a number within a 64-bit float's range (about "
                                 "±1.8e308), got 1e400")
    with pytest.raises(ModelFileError, match=r"field 'a' \(line 1\): expected a number within"):
        parse_data_text("a: -1.0e999\n", source="f.yaml")
    assert parse_data_text('{"a": 1e-400}', source="f", json_format=True) == {"a": 0.0}


def test_integers_up_to_the_limit_are_read_and_keys_are_checked_too():
    longest = "9" * MAX_INTEGER_DIGITS
    assert parse_data_text(f"a: {longest}\n", source="f") == {"a": int(longest)}
    assert parse_data_text(f'{{"a": -{longest}}}', source="f", json_format=True) == {"a": -int(longest)}
    with pytest.raises(ModelFileError, match=r"got an integer of 41 digits"):
        parse_data_text(f"a: 1{longest}\n", source="f")
    with pytest.raises(ModelFileError, match=r"got an integer of 5000 digits"):
        parse_data_text(f"? {BIG}\n: 1\n", source="f")  # a key is not constructed: Python would refuse it first
    with pytest.raises(ModelFileError, match=r"got an integer of \d+ digits"):
        parse_data_text("a: 0x" + "f" * 64 + "\n", source="f")


def test_a_reader_that_expects_nan_says_so_and_gets_it(tmp_path):
    """The seed paper's scoring archives write bare NaN tokens; their reader passes allow_non_finite."""
    path = tmp_path / "archive.json"
    path.write_text('{"measured_value": NaN, "u": Infinity}')
    with pytest.raises(ModelFileError, match="field 'measured_value': expected a finite number, got NaN"):
        read_data_file(path)
    data = read_data_file(path, allow_non_finite=True)
    assert math.isnan(data["measured_value"]) and data["u"] == math.inf
    big = tmp_path / "big.json"
    big.write_text('{"n": ' + BIG + '}')
    with pytest.raises(ModelFileError, match="got an integer of 5000 digits"):  # oversized: refused for all
        read_data_file(big, allow_non_finite=True)


def test_the_simulator_parameter_model_itself_refuses_nan():
    """Parameters built in code (a fit's result, `params_from(dict)`) pass the same rule as a file."""
    with pytest.raises(ValueError, match="Input should be a finite number"):
        SimParams.model_validate({"wind_tunnel": {"ambient_mean_pa": math.nan}})


def test_the_cli_refuses_a_nan_parameter_file_before_opening_the_chamber(tmp_path, capsys):
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"wind_tunnel": {"ambient_walk_sd_pa": 30.0}})[:-2] + ', "ambient_mean_pa": NaN}}')
    protocol = tmp_path / "P.txt"
    protocol.write_text("MSR,1,0\n")
    r = run_cli(capsys, "chamber", "run", str(protocol), "--validate-only", "--params", str(params), "--json")
    assert r.code == 2 and r.json()["error"] == {"type": "ParamsFileError", "message": (
        f"simulator parameters {params}: field 'wind_tunnel.ambient_mean_pa': expected a finite number, got NaN")}
    limits = tmp_path / "limits.json"
    limits.write_text('{"chamber": "wt", "variables": {"load_in": {"max": ' + BIG + '}}}')
    with running_board("wt", transport="tcp") as board:
        r = run_cli(capsys, "chamber", "measure", "--port", board.url, "--limits", str(limits), "-n", "1", "--json")
        assert board.board.connections == 0
    assert r.code == 2 and r.json()["error"]["message"] == (
        f"limits file {limits}: field 'variables.load_in.max': {DIGITS}")
    assert not Path(tmp_path / "o.csv").exists()
