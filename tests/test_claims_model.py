"""The claim model rejects bad files with an error that names the file, the claim and the field."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from protocols.claims import (
    Claim,
    ClaimFileError,
    Condition,
    UnknownClaim,
    chamber_variable_names,
    get_claim,
    load_claims,
    normalise_text,
)

GOOD = {
    "id": "dps310-test-range",
    "parameter": "Operating pressure range",
    "kind": "range",
    "low": 300,
    "high": 1200,
    "unit": "hPa",
    "tolerance": {"value": 0, "meaning": "none", "entry": "as_stated"},
    "conditions": [
        {"name": "intake fan off", "value": "load_in = 0", "decisive": True, "variable": "load_in"},
        {"name": "supply", "value": "VDD= 1.8V", "decisive": False, "unmatchable": "no VDD stimulus", "kind": "stimulus"},
    ],
    "source": {"page": 6, "span": "Pressure Pa 300 1200 hPa", "needles": ["300", "1200", "hPa"]},
    "protocol": "dps310.operating_range",
}


def write(tmp_path: Path, claims: list[dict], name: str = "bad.yaml", **top) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"component": "DPS310", "datasheet": "DPS310", **top, "claims": claims}, allow_unicode=True))
    return path


def mutated(**changes) -> dict:
    claim = copy.deepcopy(GOOD)
    for dotted, value in changes.items():
        target = claim
        *path, last = dotted.split("__")
        for key in path:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is DELETE:
            del target[last]
        else:
            target[last] = value
    return claim


DELETE = object()


def load_error(tmp_path: Path, claim: dict) -> ClaimFileError:
    path = write(tmp_path, [claim])
    with pytest.raises(ClaimFileError) as info:
        load_claims(path)
    err = info.value
    assert err.file == str(path)
    assert str(err).startswith(f"{path}: claim {claim.get('id', '<no id>')}: field ")
    return err


def test_the_good_claim_loads_with_exact_decimals(tmp_path):
    claims = load_claims(write(tmp_path, [GOOD]))
    c = claims["dps310-test-range"]
    assert (c.low, c.high) == (Decimal(300), Decimal(1200))
    assert c.decisive_unmatched() == []
    assert c.matched_variables() == ["load_in"]


def test_missing_unit(tmp_path):
    err = load_error(tmp_path, mutated(unit=DELETE))
    assert (err.claim_id, err.field, err.problem) == ("dps310-test-range", "unit", "missing")
    assert str(err).endswith("claim dps310-test-range: field 'unit': missing")


def test_blank_unit(tmp_path):
    err = load_error(tmp_path, mutated(unit="  "))
    assert err.field == "unit"


def test_inverted_range(tmp_path):
    err = load_error(tmp_path, mutated(low=1200, high=300))
    assert err.field == "low"
    assert "inverted range" in err.problem and "1200" in err.problem and "300" in err.problem


def test_range_needs_both_bounds(tmp_path):
    err = load_error(tmp_path, mutated(high=DELETE))
    assert err.field == "high"


def test_unknown_kind(tmp_path):
    err = load_error(tmp_path, mutated(kind="dc_accuracy"))
    assert err.field == "kind"
    assert "'typical'" in err.problem and "'max_rating'" in err.problem


def test_unknown_condition_variable(tmp_path):
    err = load_error(tmp_path, mutated(conditions__0__variable="res_in_temperature"))
    assert err.field == "conditions[0].variable"
    assert "unknown chamber variable 'res_in_temperature'" in err.problem


def test_condition_needs_exactly_one_of_variable_and_unmatchable(tmp_path):
    both = mutated(conditions__0__unmatchable="also unmatchable")
    assert load_error(tmp_path, both).field == "conditions[0].variable"
    neither = mutated(conditions__1__unmatchable=DELETE)
    assert load_error(tmp_path, neither).field == "conditions[1].variable"


def test_unknown_claim_id_prefix_in_file(tmp_path):
    err = load_error(tmp_path, mutated(id="si115x-test-range"))
    assert err.field == "id" and "must start with 'dps310-'" in err.problem


def test_malformed_claim_id(tmp_path):
    err = load_error(tmp_path, mutated(id="DPS310 Range"))
    assert err.field == "id"


def test_unknown_claim_id_lookup_names_the_known_ids(tmp_path):
    claims = load_claims(write(tmp_path, [GOOD]))
    with pytest.raises(UnknownClaim) as info:
        get_claim("dps310-nope", claims)
    assert "'dps310-nope'" in str(info.value) and "dps310-test-range" in str(info.value)
    assert isinstance(info.value, KeyError)  # UnknownClaim is also a KeyError for Mapping users


def test_needle_must_occur_in_span(tmp_path):
    err = load_error(tmp_path, mutated(source__needles=["300", "Pa RMS"]))
    assert err.field == "source.needles" and "Pa RMS" in err.problem


def test_span_must_have_normalised_whitespace(tmp_path):
    err = load_error(tmp_path, mutated(source__span="Pressure Pa\n300 1200 hPa"))
    assert err.field == "source.span"


def test_unknown_datasheet(tmp_path):
    err = load_error(tmp_path, mutated(datasheet="TPS6594"))
    assert err.field == "datasheet" and "known: DPS310" in err.problem


def test_page_beyond_the_datasheet(tmp_path):
    err = load_error(tmp_path, mutated(source__page=42))
    assert err.field == "source.page" and "41-page" in err.problem


def test_typo_field_is_rejected(tmp_path):
    err = load_error(tmp_path, mutated(units="hPa"))
    assert err.field == "units"


def test_tolerance_none_must_be_zero_and_accuracy_needs_a_band(tmp_path):
    err = load_error(tmp_path, mutated(tolerance={"value": 6, "meaning": "none", "entry": "as_stated"}))
    assert err.field == "tolerance.value"
    acc = mutated(kind="accuracy", value=0, low=DELETE, high=DELETE)
    assert load_error(tmp_path, acc).field == "tolerance"


def test_typical_value_outside_its_bounds(tmp_path):
    err = load_error(tmp_path, mutated(kind="typical", value=1300))
    assert err.field == "value"


def test_duplicate_ids_across_files_name_both(tmp_path):
    write(tmp_path, [GOOD], name="a.yaml")
    write(tmp_path, [GOOD], name="b.yaml")
    with pytest.raises(ClaimFileError, match=r"b\.yaml: claim dps310-test-range: field 'id': duplicate.*a\.yaml"):
        load_claims(tmp_path)


def test_empty_or_unparsable_file_names_the_file(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("component: DPS310\nclaims: []\n")
    with pytest.raises(ClaimFileError, match=r"empty\.yaml: field 'claims'"):
        load_claims(empty)
    broken = tmp_path / "broken.yaml"
    broken.write_text("claims: [\n")
    with pytest.raises(ClaimFileError, match=r"broken\.yaml: not valid YAML"):
        load_claims(broken)


def test_packaged_default_is_read_as_package_data():
    from protocols.claims import PACKAGED_DIR, _packaged_files

    names = [name for name, _ in _packaged_files()]
    assert names == [f"{PACKAGED_DIR}/{n}.yaml" for n in ("a4988", "acs70331", "dps310", "si115x")]
    with pytest.raises(UnknownClaim):
        get_claim("dps310-nope")


def test_condition_variables_come_from_the_firmware_catalogue():
    names = chamber_variable_names()
    assert {"load_in", "load_out", "pressure_ambient", "vis_1", "diode_vis_1"} <= names
    with pytest.raises(ValueError, match="unknown chamber variable"):
        Condition(name="x", value="y", decisive=True, variable="temperature")


def test_model_can_be_used_without_a_file():
    c = Claim.model_validate({**GOOD, "component": "DPS310", "datasheet": "dps310"})
    assert c.datasheet == "DPS310" and c.identity.sha256.startswith("440d2b01")


def test_normalise_text_folds_pdf_traps():
    assert normalise_text("–20\u00a0to\u2009 85\u00adºC", signs=True) == "-20 to 85°C"
    assert normalise_text("1 μs", signs=True) == "1 µs"
    assert normalise_text("a\n  b") == "a b"
