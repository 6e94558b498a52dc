"""Strict input files (issue 24): every YAML/JSON file the project reads refuses a key given twice, an empty
document, a boolean where a number is meant and a file above its size cap, each in one line naming the file, the
key and what was expected. One section per file kind, each through the loader the commands use, on a copy of a
real packaged file where there is one."""

from __future__ import annotations

import io
import json
from pathlib import Path
from unittest import mock

import pytest
import yaml

from calibration.records import RecordError, load_record
from chamber.errors import LimitsError
from chamber.instruments import CertificateError, StationError, load_certificate, load_station_file, sim_station_file
from chamber.instruments.station import StationFileError
from chamber.limits import load_limits
from chamber.safe_state import load_safe_state
from chamber.selection import read_params
from firmware_bridge.model_file import (
    DATA_MAX_BYTES,
    SETTINGS_MAX_BYTES,
    ModelFileError,
    bool_where_number,
    parse_data_text,
    read_data_file,
)
from protocols.claims import CLAIM_MAX_BYTES, ClaimFileError, load_claims
from simulator.params import SimParams, load_params

SIM_DIR = sim_station_file().parent
CLAIM = {"id": "dps310-test-range", "parameter": "Operating pressure range", "kind": "range", "low": 300,
         "high": 1200, "unit": "hPa", "tolerance": {"value": 0, "meaning": "none", "entry": "as_stated"},
         "conditions": [{"name": "intake fan off", "value": "load_in = 0", "decisive": True, "variable": "load_in"}],
         "source": {"page": 6, "span": "Pressure Pa 300 1200 hPa", "needles": ["300", "1200", "hPa"]},
         "protocol": "dps310.operating_range"}


def one_line(exc: BaseException, *needles: str) -> str:
    text = str(exc)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def oversize(tmp_path: Path, name: str, start: str, cap: int) -> Path:
    """A file that begins validly and is one byte over `cap` (a YAML comment, or JSON whitespace)."""
    pad = cap + 1 - len(start.encode())
    filler = "\n" + "#" * (pad - 1) if not name.endswith(".json") else " " * pad
    return write(tmp_path, name, start + filler)


def refused_unread(load, path: Path, error: type[BaseException]) -> BaseException:
    """`load(path)` refuses the file over the cap by its size (stat) alone: opening it fails the test."""
    real_open = io.open

    def guarded(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and Path(file).resolve() == path.resolve():
            raise AssertionError(f"{path} was opened: a file over the cap is refused by stat(), before it is read")
        return real_open(file, *args, **kwargs)

    with mock.patch("io.open", guarded), mock.patch("builtins.open", guarded), pytest.raises(error) as caught:
        load(path)
    return caught.value


# ------------------------------------------------------------------------------------------------ the reader
def test_a_key_given_twice_is_refused_with_its_path_and_both_lines(tmp_path):
    with pytest.raises(ModelFileError) as caught:
        parse_data_text("a:\n  b: 1\n  c:\n    - {d: 1, d: 2}\n", source="f")
    one_line(caught.value, "key 'a.c[0].d' appears twice (line 4 and line 4); expected each key once")
    with pytest.raises(ModelFileError) as caught:
        parse_data_text("x: 1\ny: 2\nx: 3\n", source="f")
    one_line(caught.value, "key 'x' appears twice (line 1 and line 3)")
    with pytest.raises(ModelFileError, match=r"key 'a\.1\.0' appears twice"):  # 1 and 1.0 are one dict key
        parse_data_text("a: {1: x, 1.0: y}\n", source="f")
    with pytest.raises(ModelFileError) as caught:
        parse_data_text('{"a": [{"b": 1, "b": 2}]}', source="f", json_format=True)
    one_line(caught.value, "key 'a[0].b' appears more than once; expected each key once in an object")


def test_a_merge_key_may_be_overridden_as_yaml_says():
    data = parse_data_text("base: &b {min: 0, max: 1}\nload_in:\n  <<: *b\n  max: 0.5\n", source="f")
    assert data["load_in"] == {"min": 0, "max": 0.5}


def test_aliases_may_share_a_value_but_not_contain_themselves_or_explode(tmp_path):
    from firmware_bridge.model_file import MAX_EXPANDED_VALUES

    assert parse_data_text("b: &b {min: 0}\nc: *b\nd: [*b, *b]\n", source="f")["d"] == [{"min": 0}] * 2
    with pytest.raises(ModelFileError) as caught:
        parse_data_text("a: 1\nb: &x [1, *x]\n", source="f")
    one_line(caught.value, "f: an alias at line 2 refers to a node that contains it; expected a tree of values")
    ten = lambda name: "[" + ", ".join([f"*{name}"] * 10) + "]"  # noqa: E731
    bomb = "\n".join(["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"] + [f"a{i}: &a{i} {ten(f'a{i - 1}')}"
                                                                  for i in range(1, 9)])
    assert len(bomb) < 1000  # a kilobyte standing for a billion values
    with pytest.raises(LimitsError) as caught:  # refused while composing: nothing is expanded a billion times
        load_limits(write(tmp_path, "bomb.yaml", bomb))
    one_line(caught.value, f"its aliases expand it to more than {MAX_EXPANDED_VALUES} values")


def test_yaml_11_surprises_stay_text_and_yaml_12_numbers_are_numbers():
    data = parse_data_text("a: [yes, no, on, off, y, 012, 1:30, 1e3, 1.5e-3, 0x1F, true, FALSE, .inf, 1_000]\n"
                           "on: 1\n", source="f", allow_non_finite=True)  # .inf: refused by default (issue 31)
    assert data["a"] == ["yes", "no", "on", "off", "y", "012", "1:30", 1000.0, 0.0015, 31, True, False,
                         float("inf"), 1000]
    assert "on" in data and True not in data  # the key `on` is not the boolean true


def test_empty_documents_are_refused_naming_what_was_expected(tmp_path):
    for name, text in (("e.yaml", ""), ("c.yaml", "# only a comment\n"), ("n.yaml", "~\n"), ("e.json", " \n"),
                       ("n.json", "null")):
        with pytest.raises(ModelFileError) as caught:
            read_data_file(write(tmp_path, name, text), what="thing", expected="a mapping of things")
        one_line(caught.value, f"thing {tmp_path / name}: empty document; expected a mapping of things")


def test_the_size_cap_is_read_from_stat_before_the_file(tmp_path, monkeypatch):
    path = oversize(tmp_path, "big.yaml", "a: 1", 1000)
    opened = []
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: opened.append(self))
    with pytest.raises(ModelFileError) as caught:
        read_data_file(path, what="thing", max_bytes=1000)
    one_line(caught.value, f"thing {path}: 1001 bytes (1001 B); expected a file of at most 1000 bytes (1000 B)")
    assert opened == []


def test_bool_where_number_follows_the_model_not_the_names():
    found = bool_where_number({"version": True, "source": "x", "power_on": {"load_in": False},
                               "wind_tunnel": {"rpm_hold_when_stopped": True, "barometer_noise_pa": {True: 1.0}}},
                              SimParams)
    assert [loc for loc, _ in found] == [("version",), ("power_on", "load_in"),
                                         ("wind_tunnel", "barometer_noise_pa", True)]


# ------------------------------------------------------------------------------------------------ limits
def test_limits_file(tmp_path):
    dup = write(tmp_path, "dup.yaml", "chamber: wt\nvariables:\n  load_in: {max: 0.1}\n  load_in: {max: 1}\n")
    with pytest.raises(LimitsError) as caught:
        load_limits(dup)
    one_line(caught.value, f"limits file {dup}: key 'variables.load_in' appears twice (line 3 and line 4)")
    dup_json = write(tmp_path, "dup.json", json.dumps({"variables": {"load_in": {"max": 0.1}}})[:-2]
                     + ', "load_in": {"max": 1}}}')
    with pytest.raises(LimitsError, match=r"dup\.json: key 'variables\.load_in' appears more than once"):
        load_limits(dup_json)
    with pytest.raises(LimitsError) as caught:
        load_limits(write(tmp_path, "empty.yaml", "\n"))
    one_line(caught.value, "empty.yaml: empty document; expected a mapping with chamber/variables/safe")
    with pytest.raises(LimitsError) as caught:
        load_limits(write(tmp_path, "bool.yaml", "variables:\n  load_in: {min: false, max: true}\n"))
    one_line(caught.value, "field 'variables.load_in.min': expected a number, got false (a boolean)",
             "field 'variables.load_in.max': expected a number, got true (a boolean)")
    with pytest.raises(LimitsError) as caught:  # the two-chamber form, and a safe value
        load_limits(write(tmp_path, "both.yaml",
                          "wt:\n  variables:\n    hatch: {max: true}\nlt:\n  safe: {red: false}\n"))
    one_line(caught.value, "field 'wt.variables.hatch.max': expected a number, not a boolean (got True)",
             "field 'lt.safe.red': expected a number, not a boolean (got False)")
    with pytest.raises(LimitsError, match=r"field 'variables\.load_in\.max': Input should be a valid number.*'yes'"):
        load_limits(write(tmp_path, "yes.yaml", "variables:\n  load_in: {max: yes}\n"))
    big = oversize(tmp_path, "big.yaml", "chamber: wt", SETTINGS_MAX_BYTES)
    one_line(refused_unread(load_limits, big, LimitsError), f"limits file {big}: 262145 bytes (256.0 KiB); expected a "
             "file of at most 262144 bytes (256.0 KiB)")


def test_the_nine_megabyte_limits_file_of_the_issue_is_refused_in_well_under_a_second(tmp_path):
    path = write(tmp_path, "huge.yaml", "variables:\n" + "".join(f"  v{i}: {{min: 0, max: 1}}\n"
                                                                   for i in range(360_000)))
    assert path.stat().st_size > 9_000_000
    one_line(refused_unread(load_limits, path, LimitsError), f"limits file {path}: {path.stat().st_size} bytes (",
             " MiB); expected a file of at most 262144 bytes (256.0 KiB)")


# ------------------------------------------------------------------------------------------------ safe state
def test_safe_state_file(tmp_path):
    with pytest.raises(LimitsError) as caught:
        load_safe_state(write(tmp_path, "dup.yaml", "wt: {load_in: 0, load_out: 0, load_in: 1}\n"))
    one_line(caught.value, "safe-state file", "key 'wt.load_in' appears twice")
    with pytest.raises(LimitsError, match=r"empty\.yaml: empty document; expected "):
        load_safe_state(write(tmp_path, "empty.yaml", ""))
    with pytest.raises(LimitsError) as caught:
        load_safe_state(write(tmp_path, "bool.json", '{"wt": {"load_in": true}}'))
    one_line(caught.value, "bool.json: field 'wt.load_in': expected a number, got true (a boolean)")
    big = oversize(tmp_path, "big.yaml", "wt: {load_in: 0}", SETTINGS_MAX_BYTES)
    one_line(refused_unread(load_safe_state, big, LimitsError), "safe-state file",
             "expected a file of at most 262144 bytes")


# ------------------------------------------------------------------------------------------------ station
def test_station_file(tmp_path):
    text = (SIM_DIR / "station.yaml").read_text(encoding="utf-8")
    assert load_station_file(write(tmp_path, "ok.yaml", text)).name == "chamberlab-sim-station"
    dup = write(tmp_path, "dup.yaml", text.replace("    max_voltage_v: 4.0", "    max_voltage_v: 4.0\n"
                                                   "    max_voltage_v: 40", 1))
    with pytest.raises(StationError) as caught:
        load_station_file(dup)
    one_line(caught.value, f"station file {dup}: key 'rails[0].max_voltage_v' appears twice")
    with pytest.raises(StationFileError, match=r"empty document; expected a mapping with name, instruments"):
        load_station_file(write(tmp_path, "empty.yaml", "# to do\n"))
    with pytest.raises(StationError) as caught:
        load_station_file(write(tmp_path, "bool.yaml", text.replace("seed: 0", "seed: true", 1)
                                .replace("current_limit_a: 1.0e-3", "current_limit_a: true", 1)))
    one_line(caught.value, "field 'seed': expected a number, got true", "field 'rails[0].current_limit_a'")
    big = oversize(tmp_path, "big.yaml", text, SETTINGS_MAX_BYTES)
    one_line(refused_unread(load_station_file, big, StationError), "station file", "at most 262144 bytes (256.0 KiB)")


def test_a_station_file_error_is_one_line_not_a_tuple(tmp_path):
    path = write(tmp_path, "st.yaml", "name: x\ninstruments: {}\n")
    with pytest.raises(StationFileError) as caught:
        load_station_file(path)
    assert caught.value.args == (str(caught.value),) and not str(caught.value).startswith("(")
    assert caught.value.source == f"station file {path}"
    one_line(caught.value, f"station file {path}: field 'instruments': ", "(got {})")


# ------------------------------------------------------------------------------------------------ certificate
def test_certificate_file(tmp_path):
    text = (SIM_DIR / "certificates" / "reference_barometer.yaml").read_text(encoding="utf-8")
    assert load_certificate(write(tmp_path, "ok.yaml", text)).serial == "SIM0002"
    with pytest.raises(CertificateError) as caught:
        load_certificate(write(tmp_path, "dup.yaml", text.replace("serial: SIM0002", "serial: SIM0002\nserial: X")))
    one_line(caught.value, "certificate file", "key 'serial' appears twice")
    with pytest.raises(CertificateError, match=r"empty document; expected a mapping with instrument, serial"):
        load_certificate(write(tmp_path, "empty.yaml", ""))
    with pytest.raises(CertificateError) as caught:
        load_certificate(write(tmp_path, "bool.yaml", text.replace("coverage_factor: 2.0", "coverage_factor: true")))
    one_line(caught.value, "field 'quantities.pressure.coverage_factor': expected a number, got true (a boolean)")
    big = oversize(tmp_path, "big.yaml", text, SETTINGS_MAX_BYTES)
    one_line(refused_unread(load_certificate, big, CertificateError), "certificate file",
             "at most 262144 bytes (256.0 KiB)")


# ------------------------------------------------------------------------------------------------ claims
def test_claim_file(tmp_path):
    text = yaml.safe_dump({"component": "DPS310", "datasheet": "DPS310", "claims": [CLAIM]}, sort_keys=False)
    assert list(load_claims(write(tmp_path, "ok.yaml", text))) == ["dps310-test-range"]
    dup = write(tmp_path, "dup.yaml", text.replace("  unit: hPa\n", "  unit: hPa\n  unit: kPa\n", 1))
    with pytest.raises(ClaimFileError) as caught:
        load_claims(dup)
    one_line(caught.value, f"{dup}: key 'claims[0].unit' appears twice")
    with pytest.raises(ClaimFileError, match=r"empty\.yaml: empty document; expected a mapping with a 'claims' list"):
        load_claims(write(tmp_path, "empty.yaml", "\n"))
    with pytest.raises(ClaimFileError) as caught:
        load_claims(write(tmp_path, "bool.yaml", text.replace("page: 6", "page: true")))
    one_line(caught.value, "claim dps310-test-range: field 'source.page': expected a number, got true (a boolean)")
    big = oversize(tmp_path, "big.yaml", text, CLAIM_MAX_BYTES)
    assert CLAIM_MAX_BYTES == DATA_MAX_BYTES
    one_line(refused_unread(load_claims, big, ClaimFileError), f"{big}: ",
             "expected a file of at most 1048576 bytes (1.0 MiB)")


# ------------------------------------------------------------------------------------------------ params
def test_simulator_params_file(tmp_path):
    dup = write(tmp_path, "dup.json", '{"wind_tunnel": {"rows_per_second": 7, "rows_per_second": 70}}')
    with pytest.raises(ModelFileError) as caught:
        load_params(dup)
    one_line(caught.value, f"simulator parameters {dup}: key 'wind_tunnel.rows_per_second' appears more than once")
    with pytest.raises(ModelFileError, match=r"empty document; expected a mapping of SimParams fields \(version, "):
        load_params(write(tmp_path, "empty.yaml", ""))
    with pytest.raises(ModelFileError) as caught:
        load_params(write(tmp_path, "bool.yaml", "wind_tunnel: {rows_per_second: true}\npower_on: {hatch: false}\n"))
    one_line(caught.value, "field 'wind_tunnel.rows_per_second': expected a number, got true",
             "field 'power_on.hatch': expected a number, got false")
    with pytest.raises(ModelFileError, match=r"key 'power_on\.hatch' appears twice"):  # as `--params` reads it
        read_params(write(tmp_path, "dup.yaml", "power_on:\n  hatch: 0\n  hatch: 90\n"))
    big = oversize(tmp_path, "big.json", "{}", SETTINGS_MAX_BYTES)
    one_line(refused_unread(load_params, big, ModelFileError), "simulator parameters", "at most 262144 bytes (256.0 KiB)")


# ------------------------------------------------------------------------------------------------ calibration
def test_calibration_record_file(tmp_path):
    dup = write(tmp_path, "dup.json", '{"chamber": "wt", "config": "standard", "chamber": "lt"}')
    with pytest.raises(RecordError) as caught:
        load_record(dup)
    one_line(caught.value, f"calibration record {dup}: key 'chamber' appears more than once")
    with pytest.raises(RecordError, match=r"empty document; expected a mapping of CalibrationRecord fields"):
        load_record(write(tmp_path, "empty.json", ""))
    with pytest.raises(RecordError) as caught:
        load_record(write(tmp_path, "bool.json", json.dumps({"parameters": {"osr": True, "n": 8}})))
    one_line(caught.value, "field 'parameters.osr': expected a number, got true (a boolean)")
    big = oversize(tmp_path, "big.json", "{}", SETTINGS_MAX_BYTES)
    one_line(refused_unread(load_record, big, RecordError), "calibration record", "at most 262144 bytes (256.0 KiB)")


# ------------------------------------------------------------------------------------------------ protocol file
def test_a_protocol_file_above_its_cap_is_refused_before_it_is_read(tmp_path):
    from chamber.protocol_language import PROTOCOL_MAX_BYTES, ProtocolError, load_protocol

    path = tmp_path / "huge.txt"
    with path.open("wb") as fh:  # sparse: stat() says 16 MiB + 1, nothing to read but zeros
        fh.truncate(PROTOCOL_MAX_BYTES + 1)
    one_line(refused_unread(load_protocol, path, ProtocolError),
             f"{path}: {PROTOCOL_MAX_BYTES + 1} bytes (16.0 MiB); expected a file of at most {PROTOCOL_MAX_BYTES} "
             "bytes (16.0 MiB); nothing was sent")


# ------------------------------------------------------------------------------------------------ every number
class Item(int):
    """A list or tuple position in a data path (a plain int there is a dict key, as in `barometer_noise_pa`)."""


def _numeric_paths(annotation, loc=(), depth=0):
    """Every location in a model's data where a number is meant (dict keys as 'k' or 1, list items at Item(0))."""
    import types
    import typing
    from decimal import Decimal

    from pydantic import BaseModel

    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if depth > 5:
        return
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, info in annotation.model_fields.items():
            yield from _numeric_paths(info.annotation, (*loc, info.alias or name), depth + 1)
    elif origin in (typing.Union, types.UnionType):
        for arm in args:
            if arm is not type(None):
                yield from _numeric_paths(arm, loc, depth)
    elif origin is dict:
        yield from _numeric_paths(args[1], (*loc, 1 if args[0] is int else "k"), depth + 1)
    elif origin in (list, set, frozenset) or origin is tuple and args[-1] is Ellipsis:
        yield from _numeric_paths(args[0], (*loc, Item(0)), depth + 1)
    elif origin is tuple:
        for i, arm in enumerate(args):
            yield from _numeric_paths(arm, (*loc, Item(i)), depth + 1)
    elif origin is typing.Literal:
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args):
            yield loc
    elif isinstance(annotation, type) and annotation is not bool and issubclass(annotation, (int, float, Decimal)):
        yield loc


def _with_true_at(loc):
    value = True
    for step in reversed(loc):
        value = [None] * step + [value] if isinstance(step, Item) else {step: value}
    return value


def _settings_models():
    from calibration.records import CalibrationRecord
    from chamber.instruments.certificate import Certificate
    from chamber.instruments.sim.dynamics import SimParams as InstrumentSimParams
    from chamber.instruments.station import StationFile
    from chamber.limits import OperatorLimits
    from chamber.safe_state import SafeStateFile

    return [OperatorLimits, SafeStateFile, StationFile, Certificate, CalibrationRecord, SimParams, InstrumentSimParams]


@pytest.mark.parametrize("model", _settings_models(), ids=lambda m: f"{m.__module__}.{m.__name__}")
def test_every_numeric_field_of_every_settings_model_refuses_a_boolean(model):
    from firmware_bridge.model_file import validate_model

    paths = list(dict.fromkeys(_numeric_paths(model)))
    assert paths, "each settings model has numbers"
    for loc in paths:
        with pytest.raises(ModelFileError) as caught:
            validate_model(_with_true_at(loc), model, source="f")
        shown = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in loc).lstrip(".")  # as field_path
        assert f"field '{shown}': expected a number" in str(caught.value), (loc, str(caught.value))


# ------------------------------------------------------------------------------------------------ real files
def _real_files(shared: Path) -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    packaged = [p for folder in ("chamber", "simulator", "protocols", "calibration", "agent")
                for p in (root / folder).rglob("*") if p.suffix in (".yaml", ".yml", ".json")]
    return sorted(packaged) + sorted(p for p in shared.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def test_every_real_yaml_and_json_file_reads_as_before(shared):
    """The packaged files and those in the shared folder: none repeats a key or leans on a YAML 1.1 scalar, so
    the strict reader gives exactly what PyYAML / json gave them before. Only the seed paper's archives hold NaN
    (their reader says allow_non_finite; every other file is read with the default, which refuses it)."""
    files = _real_files(shared)
    assert len(files) > 50
    for path in files:
        text = path.read_text(encoding="utf-8")
        before = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        now = read_data_file(path, max_bytes=4 * DATA_MAX_BYTES, allow_non_finite="paper-archive" in path.parts)
        assert json.dumps(now, sort_keys=True, default=str) == json.dumps(before, sort_keys=True, default=str), path
