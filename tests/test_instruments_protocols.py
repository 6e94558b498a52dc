"""Grading claims with the simulated station: the envelope, the instrument protocols, and no change without it."""

from __future__ import annotations


import numpy as np
import pytest
import yaml

from chamber import open_chamber
from chamber.instruments import open_station, sim_station_file
from protocols.claims import load_claims
from protocols.instrument_protocols import gradable_envelope
from protocols.measurement import Measurement
from protocols.runner import ProtocolContext, check_claim
from protocols.verdict import verdict

MAIN = ("DPS310", "Si115x", "ACS70331")
INSTRUMENT_BUDGET_TERMS = ("certificate",)


def _main_claims():
    return [c for c in load_claims().values() if c.component in MAIN]


def _grade(claims, station, *, seed=0, chambers_wrapper=None):
    chambers = {k: open_chamber(backend="sim", chamber=k, seed=seed) for k in ("wt", "lt")}
    if chambers_wrapper:
        chambers = chambers_wrapper(chambers)
    try:
        context = ProtocolContext(chambers=chambers, rows=60, settle_rows=5, station=station)
        return {c.id: check_claim(c, context) for c in claims}
    finally:
        for c in chambers.values():
            c.close()


def _without_instruments(claim):
    conditions = [c.model_copy(update={"instrument": None}) for c in claim.conditions]
    return claim.model_copy(update={"conditions": conditions, "instrument_protocol": None})


@pytest.fixture(scope="module")
def graded():
    claims = _main_claims()
    with open_station(sim_station_file()) as station:
        with_station = _grade(claims, station)
    return claims, _grade(claims, None), with_station


TYPICAL_CURRENTS = {"dps310-current-1hz-low-precision", "si115x-active-current-3v3", "si115x-standby-current-1v8"}


def test_the_station_grades_ten_of_twenty_five_claims_seven_definitively(graded):
    """Ten claims get every decisive condition realised; the three typical supply currents among them are Typ.-only
    (no printed Min./Max.), so one unit leaves them inconclusive (typical-not-guaranteed), never failed."""
    claims, alone, with_station = graded
    assert len(claims) == 25
    definitive = lambda results: {k for k, r in results.items() if r.verdict.verdict in ("pass", "fail")}
    assert len(definitive(alone)) == 2
    gained = definitive(with_station) - definitive(alone)
    assert len(definitive(with_station)) >= 7 and not definitive(with_station) & TYPICAL_CURRENTS
    for claim_id in TYPICAL_CURRENTS:
        v = with_station[claim_id].verdict
        assert (v.verdict, v.inconclusive_class) == ("inconclusive", "typical-not-guaranteed"), claim_id
        assert v.deviation_from_typical is not None and v.expanded_uncertainty is not None
    for claim_id in gained | TYPICAL_CURRENTS:  # each carries the instrument's certified contribution in its budget
        r = with_station[claim_id]
        assert r.protocol.startswith("instruments."), claim_id
        if r.measurement is not None:
            names = [c.name for c in r.measurement.budget.components]
            assert any(t in n for n in names for t in INSTRUMENT_BUDGET_TERMS), (claim_id, names)


def test_without_a_station_verdicts_are_unchanged(graded):
    claims, alone, _ = graded
    stripped = _grade([_without_instruments(c) for c in claims], None)
    for claim in claims:
        a, b = alone[claim.id], stripped[claim.id]
        assert (a.protocol, a.verdict.verdict, a.verdict.inconclusive_class, a.verdict.reason) == (
            b.protocol, b.verdict.verdict, b.verdict.inconclusive_class, b.verdict.reason), claim.id


def test_changing_a_claims_stated_value_changes_the_verdict_not_the_reading():
    claim = load_claims()["dps310-current-1hz-low-precision"]
    with open_station(sim_station_file()) as station:  # a fresh station each time: the same seeded readings
        first = _grade([claim], station)[claim.id]
    moved = claim.model_copy(update={"value": first.measurement.value})  # the stated value set to the reading
    with open_station(sim_station_file()) as station:
        again = _grade([moved], station)[claim.id]
    assert again.measurement.value == first.measurement.value  # the simulator did not read the claim
    assert {first.verdict.numeric_verdict, again.verdict.numeric_verdict} == {"fail", "pass"}
    assert first.verdict.deviation_from_typical != again.verdict.deviation_from_typical == 0


def test_the_reading_comes_from_the_simulator_params(tmp_path):
    src = sim_station_file()
    params = yaml.safe_load((src.parent / "params.yaml").read_text())
    params["rails"]["GPIB0::24::INSTR"]["states"]["1hz_low_precision"]["charge_per_measurement_c"] *= 2
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    station_doc = yaml.safe_load(src.read_text())
    for entry in station_doc["instruments"].values():
        entry["certificate"] = str(src.parent / entry["certificate"])
    station_doc["sim_params"] = "params.yaml"
    (tmp_path / "station.yaml").write_text(yaml.safe_dump(station_doc))
    claim = load_claims()["dps310-current-1hz-low-precision"]
    with open_station(sim_station_file()) as a, open_station(tmp_path / "station.yaml") as b:
        base, doubled = _grade([claim], a)[claim.id], _grade([claim], b)[claim.id]
    rate_charge = 1.0 * 1.58  # µA: the packaged file's 1 Hz × 1.58 µC; doubling the charge adds this much
    assert float(doubled.measurement.value - base.measurement.value) == pytest.approx(rate_charge, rel=0.05)


def test_an_unmatchable_condition_counts_as_matched_only_when_reported():
    claim = load_claims()["si115x-supply-voltage-vdd"]
    inside = dict(value="2.5", u="0.001", unit="V")
    assert verdict(claim, Measurement(**inside)).verdict == "inconclusive"
    assert verdict(claim, Measurement(**inside, matched_conditions=["VDD sweep"])).verdict == "pass"
    assert verdict(claim, None).inconclusive_class == "unmatched-stimulus"


class _BrownOut:
    """A real sim chamber whose light readings vanish in the first measurement after the call count reaches k."""

    def __init__(self, chamber, reads, k):
        self._chamber, self._reads, self._left = chamber, reads, k

    def measure(self, n):
        frame = self._chamber.measure(n)
        self._left -= 1
        if self._left != 0:
            return frame
        values = frame.values.copy()
        for name in self._reads:
            values[:, frame.names.index(name)] = np.nan
        return type(frame)(frame.names, values, frame.host_timestamps.copy(), frame.config, frame.reconnected,
                           frame.link)

    def __getattr__(self, name):
        return getattr(self._chamber, name)


def test_a_sensor_that_stops_answering_inside_the_range_fails_the_vdd_claim():
    claim = load_claims()["si115x-supply-voltage-vdd"]
    wrap = lambda ch: {**ch, "lt": _BrownOut(ch["lt"], ["ir_1", "vis_1"], k=2)}  # settle rows, then step 1's rows
    with open_station(sim_station_file()) as station:
        result = _grade([claim], station, chambers_wrapper=wrap)[claim.id]
    assert result.verdict.verdict == "fail"
    assert "stopped answering at 1.6" in result.verdict.reason


def test_an_instrument_error_is_an_error_not_a_fail(tmp_path):
    src = sim_station_file()
    doc = yaml.safe_load(src.read_text())
    for entry in doc["instruments"].values():
        entry["certificate"] = str(src.parent / entry["certificate"])
    doc["rails"][1]["current_limit_a"] = 1e-4  # the Si115x's active current (≈4 mA) hits this limit
    (tmp_path / "station.yaml").write_text(yaml.safe_dump(doc))
    claim = load_claims()["si115x-active-current-3v3"]
    with open_station(tmp_path / "station.yaml") as station:
        result = _grade([claim], station)[claim.id]
    assert result.verdict.verdict == "error" and "ComplianceError" in result.verdict.reason


def test_envelope_names_the_missing_instrument(tmp_path):
    claims = _main_claims()
    alone = {e["claim_id"]: e for e in gradable_envelope(claims, None)}
    assert alone["si115x-standby-current-1v8"]["would_need"] == ["smu"]
    assert alone["dps310-absolute-accuracy"]["would_need"] == ["reference_barometer"]
    assert alone["si115x-vis-response-525nm"]["would_need"] == []
    assert alone["si115x-vis-response-525nm"]["blocking_conditions"]
    src = sim_station_file()
    doc = yaml.safe_load(src.read_text())
    for entry in doc["instruments"].values():
        entry["certificate"] = str(src.parent / entry["certificate"])
    del doc["instruments"]["thermal_stage"]
    doc["positions"] = [p for p in doc["positions"] if p["instrument"] != "thermal_stage"]
    (tmp_path / "station.yaml").write_text(yaml.safe_dump(doc))
    with open_station(tmp_path / "station.yaml") as station:
        envelope = {e["claim_id"]: e for e in gradable_envelope(claims, station)}
        assert envelope["si115x-operating-temperature"]["would_need"] == ["temperature_controller"]
        assert envelope["si115x-standby-current-1v8"]["gradable_with_station"]
        # and check_claim falls back to the chamber-only verdict for the claim it cannot realise
        result = _grade([load_claims()["si115x-operating-temperature"]], station)["si115x-operating-temperature"]
        assert result.verdict.verdict == "inconclusive" and result.protocol is None
