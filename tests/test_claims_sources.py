"""Claim files from anywhere (issue 16): a user's file or folder is graded by every command, its parts are data,
and a claim on an unknown part, an unknown protocol or a datasheet of another SHA-256 is refused naming the file,
the claim and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import bench_cli
from protocols.claim_sources import load_checked_claims, split_claims_args
from protocols.claims import ClaimFileError, load_claims
from protocols.datasheets import known_datasheets

DPS310_SHA = "440d2b01d1e9851aab2be030d1d02f608d56f8d8b103f47c330b26772b8ad9e8"
RANGE = {
    "id": "dps310-lab-operating-range", "parameter": "Operating pressure range (the lab's copy)", "kind": "range",
    "low": 300, "high": 1200, "unit": "hPa", "tolerance": {"value": 0, "meaning": "none", "entry": "as_stated"},
    "conditions": [{"name": "intake fan off", "value": "load_in = 0", "decisive": True, "variable": "load_in"},
                   {"name": "exhaust fan off", "value": "load_out = 0", "decisive": True, "variable": "load_out"}],
    "source": {"page": 6, "span": "Pressure Pa 300 1200 hPa", "needles": ["300", "1200", "hPa"]},
    "protocol": "dps310.operating_range",
}
FAN = {  # a part of the lab's own, declared in the same file
    "part": "NF-F12", "revision": "industrialPPC-3000 PWM", "sha256": "ab" * 32, "url": "https://example.org/f12.pdf",
    "filename": "NF-F12.pdf", "pages": 2, "carried_by": [{"chamber": "wt", "variables": ["load_in", "rpm_in"]}],
}
FAN_CLAIM = {
    "id": "nf-f12-max-speed", "component": "NF-F12", "datasheet": "NF-F12", "parameter": "Max. rotational speed",
    "kind": "typical", "value": 3000, "unit": "RPM", "tolerance": {"value": 300, "meaning": "symmetric_bound",
                                                                    "entry": "as_stated"},
    "conditions": [{"name": "full duty", "value": "100 % PWM", "decisive": True, "variable": "load_in"}],
    "source": {"page": 1, "span": "Max. rotational speed (+/-10%) 3000 RPM", "needles": ["3000", "RPM"]},
}


def _write(path: Path, claims: list[dict], **top) -> Path:
    path.write_text(yaml.safe_dump({"component": "DPS310", "datasheet": "DPS310", **top, "claims": claims},
                                   allow_unicode=True), encoding="utf-8")
    return path


def _refused(path: Path) -> ClaimFileError:
    with pytest.raises(ClaimFileError) as info:
        load_checked_claims([path])
    return info.value


def test_the_parts_are_data_with_the_chamber_variables_that_carry_them():
    parts = {d.part: d for d in known_datasheets()}
    assert set(parts) == {"DPS310", "Si115x", "ACS70331", "A4988"}
    assert [c.chamber for c in parts["ACS70331"].carried_by] == ["wt", "lt"]
    assert "pressure_ambient" in parts["DPS310"].carried_by[0].variables
    assert len(load_checked_claims()) == len(load_claims()) == 37  # the packaged set stays the default


def test_a_users_folder_and_file_load_together_with_a_part_of_its_own(tmp_path):
    folder = tmp_path / "lab"
    folder.mkdir()
    _write(folder / "a.yaml", [RANGE], datasheet_sha256=DPS310_SHA)
    fan = _write(tmp_path / "fan.yaml", [FAN_CLAIM], parts=[FAN])
    claims = load_checked_claims([folder, fan])
    assert list(claims) == ["dps310-lab-operating-range", "nf-f12-max-speed"]
    assert claims["nf-f12-max-speed"].identity.filename == "NF-F12.pdf"
    assert claims["dps310-lab-operating-range"].identity.sha256 == DPS310_SHA


@pytest.mark.parametrize("change, field, words", [
    ({"component": "NF-F12", "datasheet": "NF-F12", "id": "nf-f12-x"}, "component", "no datasheet for part 'NF-F12'"),
    ({"protocol": "dps310.no_such_protocol"}, "protocol", "unknown protocol 'dps310.no_such_protocol'"),
    ({"instrument_protocol": "instruments.nothing"}, "instrument_protocol", "unknown protocol"),
    ({"datasheet_sha256": "00" * 32}, "datasheet_sha256", "is not the DPS310 V1.1"),
])
def test_refused_naming_file_claim_and_field(tmp_path, change, field, words):
    path = _write(tmp_path / "bad.yaml", [{**RANGE, **change}])
    err = _refused(path)
    assert (err.file, err.claim_id, err.field) == (str(path), change.get("id", RANGE["id"]), field)
    assert words in err.problem and str(path) in str(err)


def test_a_file_that_redeclares_a_packaged_part_or_a_bad_part_is_refused(tmp_path):
    err = _refused(_write(tmp_path / "dup.yaml", [RANGE], parts=[{**FAN, "part": "DPS310"}]))
    assert err.field == "parts[0].part" and "already in the parts table" in err.problem
    err = _refused(_write(tmp_path / "var.yaml", [RANGE], parts=[{**FAN, "carried_by": [
        {"chamber": "wt", "variables": ["angle_1"]}]}]))
    assert err.field.startswith("parts[0].carried_by") and "angle_1" in err.problem


def test_claims_values_split_into_paths_and_ids(tmp_path):
    assert split_claims_args(None) == ([], None)
    assert split_claims_args(["all"]) == ([], None)
    assert split_claims_args(["a-b,c-d", str(tmp_path)]) == ([tmp_path], ["a-b", "c-d"])
    assert split_claims_args(["mine.yaml"]) == ([Path("mine.yaml")], None)


def _cli(capsys, *argv: str) -> tuple[int, dict]:
    code = bench_cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_check_grades_a_users_claim_and_refuses_a_bad_file(tmp_path, capsys):
    good = _write(tmp_path / "good.yaml", [RANGE])
    code, out = _cli(capsys, "check", "dps310-lab-operating-range", "--claims", str(good))
    assert (code, out["verdict"]) == (0, "pass")
    bad = _write(tmp_path / "bad.yaml", [{**RANGE, "protocol": "dps310.nope"}])
    code, out = _cli(capsys, "check", "dps310-lab-operating-range", "--claims", str(bad))
    assert code == 2 and out["error"]["type"] == "ClaimFileError"
    assert "bad.yaml: claim dps310-lab-operating-range: field 'protocol'" in out["error"]["message"]
    code, out = _cli(capsys, "check", "--all", "--claims", "dps310-operating-range")  # an id is not a path
    assert code == 2 and "expected a claim file or folder" in out["error"]["message"]


def test_serve_matrix_and_extract_take_the_users_claims(tmp_path, capsys, monkeypatch):
    """Every command loads claims the same way: each refuses the same bad file before doing any work."""
    bad = _write(tmp_path / "bad.yaml", [{**RANGE, "datasheet_sha256": "11" * 32}])
    for argv in (["serve", "--listen-port", "0"], ["matrix", "--models", "scripted:reader", "--out", str(tmp_path / "m")],
                 ["extract", "dps310-lab-operating-range", "--model", "scripted:reader", "--no-chamber"],
                 ["run", "--no-agent", "--runs-dir", str(tmp_path / "runs")]):
        code, out = _cli(capsys, *argv, "--claims", str(bad))
        assert code == 2 and "field 'datasheet_sha256'" in out["error"]["message"], argv


def test_extract_and_matrix_read_a_users_claim_on_its_datasheet(tmp_path, capsys):
    from conftest import shared_path

    shared_path("datasheets", "DPS310.pdf")
    good = _write(tmp_path / "good.yaml", [RANGE])
    code, out = _cli(capsys, "extract", "dps310-lab-operating-range", "--model", "scripted:reader", "--no-chamber",
                     "--record", str(tmp_path / "rec"), "--claims", str(good))
    assert (code, out["outcome"]) == (0, "submitted")
    code, out = _cli(capsys, "matrix", "--models", "scripted:reader", "--no-chamber", "--out", str(tmp_path / "m"),
                     "--claims", str(good), "--claims", "dps310-lab-operating-range")
    assert code == 0 and out["summary"]["cells"] == 1, out["summary"]
