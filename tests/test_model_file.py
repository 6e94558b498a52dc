"""One loader for configuration files (issue 20): every YAML/JSON-into-pydantic loader reads through
firmware_bridge.model_file, and a bad file is refused by one error type on one line naming the file, the field
path, what was expected and what arrived."""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from calibration.records import RecordError, load_record
from chamber.errors import LimitsError
from chamber.instruments import CertificateError, StationError, load_certificate, load_station_file, sim_station_file
from chamber.instruments.sim import load_sim_params
from chamber.limits import load_limits, read_settings_file
from firmware_bridge.model_file import ModelFileError, field_path, load_model_file, read_data_file
from protocols.datasheets import DatasheetError, parse_datasheets
from simulator.params import load_params

SIM_DIR = sim_station_file().parent


def _one_line_naming(exc: BaseException, *needles: str) -> str:
    text = str(exc)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    assert isinstance(exc, ModelFileError), type(exc).__mro__
    return text


def _yaml_copy(tmp_path, source, mutate, name):
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    mutate(data)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ each loader
def test_simulator_params_name_file_and_field(tmp_path):
    path = tmp_path / "params.json"
    path.write_text(json.dumps({"power_on": {"load_in": "fast"}}))
    with pytest.raises(ModelFileError) as info:
        load_params(path)
    _one_line_naming(info.value, f"simulator parameters {path}", "field 'power_on.load_in'",
                     "Input should be a valid number", "(got 'fast')")


def test_calibration_record_names_file_and_field(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"parameters": {"osr": 16}}))
    with pytest.raises(RecordError) as info:
        load_record(path)
    _one_line_naming(info.value, f"calibration record {path}", "field 'parameters.osr'", "Input should be 1, 2, 4 or 8",
                     "(got 16)", "missing field 'chamber'")


def test_limits_file_names_file_and_field(tmp_path):
    path = tmp_path / "limits.yaml"
    path.write_text("chamber: wt\nvariables:\n  hatch: {min: 0, max: fast}\n")
    with pytest.raises(LimitsError) as info:
        load_limits(path)
    _one_line_naming(info.value, f"limits file {path}", "field 'variables.hatch.max'", "Input should be a valid number",
                     "(got 'fast')")


def test_a_misspelt_limit_lists_the_fields_expected_there(tmp_path):
    path = tmp_path / "limits.yaml"
    path.write_text("variables:\n  hatch: {maximum: 5}\n")
    with pytest.raises(LimitsError) as info:
        load_limits(path)
    _one_line_naming(info.value, str(path), "unexpected field 'variables.hatch.maximum' (expected one of: min, max, allowed)")


def test_settings_file_that_is_not_yaml_says_where(tmp_path):
    path = tmp_path / "safe.yaml"
    path.write_text("wt:\n  load_in: [0, 1\n")
    with pytest.raises(LimitsError) as info:
        read_settings_file(path)
    _one_line_naming(info.value, f"settings file {path}", "not valid YAML", "line 3")


def test_station_file_names_file_and_field(tmp_path):
    def mutate(d):
        d["instruments"]["smu_dps310"]["kind"] = "oscilloscope"
        for entry in d["instruments"].values():
            entry["certificate"] = str(SIM_DIR / entry["certificate"])

    path = _yaml_copy(tmp_path, sim_station_file(), mutate, "station.yaml")
    with pytest.raises(StationError) as info:
        load_station_file(path)
    _one_line_naming(info.value, f"station file {path}", "field 'instruments.smu_dps310.kind'", "(got 'oscilloscope')")


def test_certificate_names_file_and_field(tmp_path):
    path = _yaml_copy(tmp_path, SIM_DIR / "certificates" / "reference_barometer.yaml",
                      lambda d: d["quantities"]["pressure"].update(coverage_factor="two"), "cert.yaml")
    with pytest.raises(CertificateError) as info:
        load_certificate(path)
    _one_line_naming(info.value, f"certificate file {path}", "field 'quantities.pressure.coverage_factor'",
                     "Input should be a valid number", "(got 'two')")


def test_instrument_simulator_params_name_file_and_field(tmp_path):
    path = _yaml_copy(tmp_path, SIM_DIR / "params.yaml",
                      lambda d: d["rails"]["GPIB0::24::INSTR"].update(operating_vdd="low"), "params.yaml")
    with pytest.raises(ModelFileError) as info:
        load_sim_params(path)
    _one_line_naming(info.value, f"instrument simulator parameters {path}", "field 'rails.GPIB0::24::INSTR.operating_vdd'",
                     "(got 'low')")


def test_datasheet_table_names_source_entry_and_field():
    text = ("datasheets:\n  - {part: X, revision: r, sha256: " + "a" * 64
            + ", url: 'https://x', filename: x.pdf, pages: many}\n")
    with pytest.raises(DatasheetError) as info:
        parse_datasheets(text, source="t.yaml")
    _one_line_naming(info.value, "t.yaml: datasheet X: field 'pages'", "Input should be a valid integer", "(got 'many')")


# ------------------------------------------------------------------------------------------ the one rule
class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    value: float


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entries: list[_Entry]


def test_json_by_suffix_yaml_otherwise(tmp_path):
    (tmp_path / "a.json").write_text('{"entries": [{"name": "x", "value": 1}]}')
    (tmp_path / "a.yaml").write_text("entries:\n  - {name: x, value: 1}\n")
    assert load_model_file(tmp_path / "a.json", _File) == load_model_file(tmp_path / "a.yaml", _File)
    (tmp_path / "b.json").write_text("entries:\n  - {name: x, value: 1}\n")  # YAML in a .json file is not JSON
    with pytest.raises(ModelFileError, match=r"b\.json: not JSON \(Expecting value at line 1, column 1\)"):
        load_model_file(tmp_path / "b.json", _File)


def test_list_items_are_named_by_index_and_each_problem_is_listed(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("entries:\n  - {name: x, value: 1}\n  - {name: y, value: big}\n  - {value: 3, colour: red}\n")
    with pytest.raises(ModelFileError) as info:
        load_model_file(path, _File, what="entries file")
    _one_line_naming(info.value, f"entries file {path}: missing field 'entries[2].name'",
                     "unexpected field 'entries[2].colour' (expected one of: name, value)",
                     "field 'entries[1].value': Input should be a valid number", "(got 'big')")
    assert info.value.source == f"entries file {path}" and info.value.problem.startswith("missing field")


def test_missing_file_top_level_list_and_empty_file(tmp_path):
    with pytest.raises(ModelFileError, match=r"nope\.yaml: cannot read \(does not exist\)$"):
        load_model_file(tmp_path / "nope.yaml", _File)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ModelFileError, match=r"expected a mapping of _File fields at the top level, got list$"):
        load_model_file(tmp_path / "list.yaml", _File)
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    with pytest.raises(ModelFileError, match=r"empty\.yaml: empty document; expected a mapping$"):
        read_data_file(tmp_path / "empty.yaml")
    with pytest.raises(ModelFileError, match=r"empty\.yaml: empty document; expected a mapping of _File fields "
                                             r"\(entries\)$"):
        load_model_file(tmp_path / "empty.yaml", _File)


def test_field_path_reads_like_the_file():
    assert field_path(("rails", 0, "instrument")) == "rails[0].instrument"
    assert field_path(()) == "(top level)"
