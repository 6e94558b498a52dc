"""The fleet verdict (calibration/fleet_verdict.py) on real per-unit verdicts: each unit's measurement is decided
by protocols/verdict.py against the packaged claim, and the fleet rule decides the population from them.

Fleets are synthetic and seeded: 8 wind-tunnel barometers whose errors against a traceable reference are offset
per unit by N(0, 16 Pa) — wider than the real chamber's fans-off unit spread of 10–11.5 Pa (calibration/
real_figures.py), the harder case for finding a planted unit — with 20 readings of N(0, 2 Pa) around the offset;
u combines the readings' s/√20 with a 5 Pa reference uncertainty. Measured over 2,000 seeded fleets of this kind
(not a test: a figure for the report), a unit planted 150 Pa off is beyond h's 1 % value in 99.95 % of them and
excluded by Grubbs' test in 95.8 %; among 32 units, in all of them.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from decimal import Decimal

import numpy as np
import pytest
from scipy import stats

from calibration.fleet_records import fleet_record
from calibration.fleet_verdict import (
    FLEET_RULE_NAME,
    FLEET_RULE_VERSION,
    FleetVerdictError,
    PopulationLimits,
    UnitResult,
    _decide_interval,
    fleet_verdict,
    lab_comparison,
    lab_results,
    population_limits,
    printed_step_u,
)
from calibration.proficiency import Reference
from calibration.tolerance import ToleranceInterval, two_sided_factor
from protocols.measurement import Measurement
from protocols.verdict import verdict as decide

ACCURACY = "dps310-absolute-accuracy"
PRECISION = "dps310-pressure-precision-high"


def _limits(claim, semantics: str) -> PopulationLimits:
    return population_limits(claim.kind, semantics, unit=claim.unit, low=claim.low, high=claim.high,
                             point=claim.value, tolerance=claim.tolerance.value)


def _unit(claim, name: str, readings: np.ndarray, *, reference_u: float = 5.0, matched=None) -> UnitResult:
    u = math.hypot(float(np.std(readings, ddof=1)) / math.sqrt(len(readings)), reference_u)
    names = [c.name for c in claim.conditions if c.decisive] if matched is None else matched
    m = Measurement.from_values(float(np.mean(readings)), u, claim.unit, dof=200.0, matched_conditions=names)
    return UnitResult.from_verdict(name, decide(claim, m), readings=readings)


def _accuracy_fleet(claims, rng, offsets, **kw) -> tuple[list[UnitResult], PopulationLimits]:
    claim = claims[ACCURACY]
    units = [_unit(claim, f"wt{i}/pressure_upwind", off + rng.normal(0.0, 2.0, 20), **kw)
             for i, off in enumerate(offsets)]
    return units, _limits(claim, "point")  # an accuracy claim is a point with its printed band (verdict.py)


def test_a_planted_150_pa_barometer_fails_the_fleet_and_is_left_out(claims, rng):
    offsets = list(rng.normal(0.0, 16.0, 8))
    offsets[3] += 150.0
    units, limits = _accuracy_fleet(claims, rng, offsets)
    assert [u.verdict for u in units].count("fail") == 1 and units[3].verdict == "fail"
    fv = fleet_verdict(ACCURACY, limits, units)
    planted = "wt3/pressure_upwind"
    assert fv.verdict == "fail" and fv.failing_units == (planted,) and planted in fv.reason
    s = fv.screening
    assert s is not None and s.h[planted] > s.h_critical.at_1  # flagged by Mandel's h at 1 %
    assert s.outliers == (planted,) and planted not in fv.units_used and len(fv.units_used) == 7
    assert fv.interval is not None and fv.interval.zone == "inside"  # the other seven would pass
    assert fv.precision.s_L < 30 < fv.precision_with_outliers.s_L
    assert fv.rule == FLEET_RULE_NAME and fv.rule_version == FLEET_RULE_VERSION


def test_a_clean_fleet_passes_with_its_tolerance_interval(claims, rng):
    units, limits = _accuracy_fleet(claims, rng, list(rng.normal(0.0, 16.0, 8)))
    fv = fleet_verdict(ACCURACY, limits, units)
    assert limits.semantics == "range" and (limits.low, limits.high) == (Decimal(-100), Decimal(100))
    assert fv.verdict == "pass" and fv.inconclusive_class is None
    iv = fv.interval.interval
    assert iv.sides == "two-sided" and iv.n == 8 and iv.k == two_sided_factor(8, 0.90, 0.95)
    assert Decimal(-100) <= fv.interval.lower and fv.interval.upper <= Decimal(100)
    assert fv.precision is not None and fv.precision.p == 8  # s_r, s_L, s_R from the readings


def test_one_failing_unit_fails_the_fleet_even_when_it_is_no_outlier(claims, rng):
    units, limits = _accuracy_fleet(claims, rng, [-40.0, -20.0, 0.0, 10.0, 20.0, 30.0, 60.0, 108.0],
                                    reference_u=1.0)
    fv = fleet_verdict(ACCURACY, limits, units)
    assert fv.verdict == "fail" and fv.failing_units == ("wt7/pressure_upwind",)
    assert fv.screening.outliers == ()  # 108 Pa is the fleet's edge, not an outlier


def test_an_interval_crossing_a_bound_is_inconclusive_and_says_how_many_units_would_do(claims, rng):
    units, limits = _accuracy_fleet(claims, rng, [-60.0, -40.0, -20.0, 0.0, 10.0, 30.0, 50.0, 70.0])
    assert {u.verdict for u in units} == {"pass"}
    fv = fleet_verdict(ACCURACY, limits, units)
    assert fv.verdict == "inconclusive" and fv.inconclusive_class == "interval-crosses-bound"
    assert fv.interval.zone == "crossing" and fv.units_needed is not None and fv.units_needed > 8
    assert f"about {fv.units_needed} units" in fv.reason


def test_without_a_traceable_reference_the_fleet_stays_inconclusive_with_the_units_class(claims, rng):
    claim = claims[ACCURACY]
    units = [_unit(claim, f"wt{i}/pressure_upwind", rng.normal(0.0, 2.0, 20), matched=["pressure window"])
             for i in range(8)]
    assert {u.inconclusive_class for u in units} == {"no-traceable-reference"}
    fv = fleet_verdict(ACCURACY, _limits(claim, "point"), units)
    assert fv.verdict == "inconclusive" and fv.inconclusive_class == "no-traceable-reference"
    assert len(fv.condition_unmatched) == 8 and fv.units_graded == ()


def test_units_without_a_value_are_listed_and_left_out(claims, rng):
    units, limits = _accuracy_fleet(claims, rng, list(rng.normal(0.0, 16.0, 6)))
    lost = decide(claims[ACCURACY], Measurement.failed("Pa", "link_lost", "board lost"))
    units.append(UnitResult.from_verdict("wt6/pressure_upwind", lost))
    fv = fleet_verdict(ACCURACY, limits, units)
    assert fv.no_value == ("wt6/pressure_upwind",) and len(fv.units_used) == 6 and fv.units_total == 7


def test_a_fleet_whose_every_unit_lost_its_link_is_an_error_not_a_fail(claims):
    lost = decide(claims[ACCURACY], Measurement.failed("Pa", "link_lost", "board lost"))
    fv = fleet_verdict(ACCURACY, _limits(claims[ACCURACY], "point"),
                       [UnitResult.from_verdict(f"wt{i}/pressure_upwind", lost) for i in range(3)])
    assert fv.verdict == "error" and fv.inconclusive_class is None and "not a fail" in fv.reason
    assert len(fv.no_value) == 3 and fleet_record(fv).verdict == "error"


def _precision_fleet(claims, rng, level: float, n: int) -> tuple[list[UnitResult], PopulationLimits]:
    claim = claims[PRECISION]
    units = [_unit(claim, f"wt{i}/pressure_upwind", level + rng.normal(0.0, 0.02, 10), reference_u=0.0)
             for i in range(n)]
    return units, _limits(claim, "point")


def test_a_typical_value_on_8_units_gets_a_population_verdict(claims, rng):
    units, limits = _precision_fleet(claims, rng, 0.21, 8)
    assert {u.inconclusive_class for u in units} == {"typical-not-guaranteed"}  # one unit cannot decide
    fv = fleet_verdict(PRECISION, limits, units)
    pm = fv.population
    assert fv.rule_kind == "typical" and fv.verdict == "pass" and pm.compatible
    assert pm.n == 8 and pm.u_printed == pytest.approx(0.05 / math.sqrt(3))  # "0.2" stands for 0.15 … 0.25
    assert pm.dof > 7 and pm.k == pytest.approx(stats.t.ppf(0.975, pm.dof))
    assert pm.u_mean == pytest.approx(math.hypot(pm.s / math.sqrt(8), pm.u_printed))
    assert abs(pm.mean_reported - Decimal("0.2")) <= pm.expanded_reported
    units, limits = _precision_fleet(claims, rng, 0.35, 8)
    fv = fleet_verdict(PRECISION, limits, units)
    assert fv.verdict == "fail" and not fv.population.compatible and "not compatible" in fv.reason


def test_a_typical_value_on_fewer_than_5_units_stays_typical_not_guaranteed(claims, rng):
    units, limits = _precision_fleet(claims, rng, 0.21, 4)
    fv = fleet_verdict(PRECISION, limits, units)
    assert fv.verdict == "inconclusive" and fv.inconclusive_class == "typical-not-guaranteed"
    assert fv.population is not None and fv.population.n == 4  # computed and reported, not decided


def test_typical_mean_uncertainty_adds_a_shared_measurement_error_whole():
    units = [UnitResult(f"u{i}", "inconclusive", Decimal(v), Decimal("0.01"), inconclusive_class="typical-not-"
                        "guaranteed") for i, v in enumerate(["1.00", "1.02", "0.98", "1.01", "0.99"])]
    limits = PopulationLimits("point", "V", typical=Decimal("1.05"))
    alone = fleet_verdict("x-typ-claim", limits, units).population
    shared = fleet_verdict("x-typ-claim", limits, units, u_shared=0.03).population
    s, printed = float(np.std([1.00, 1.02, 0.98, 1.01, 0.99], ddof=1)), 0.005 / math.sqrt(3)
    assert alone.u_mean == pytest.approx(math.hypot(s / math.sqrt(5), printed))
    assert shared.u_mean == pytest.approx(math.sqrt(s * s / 5 + 0.03 ** 2 + printed ** 2)) and shared.dof > 4
    assert not alone.compatible and shared.compatible  # a common error can hide a real difference


def _interval(lower: float, upper: float) -> ToleranceInterval:
    return ToleranceInterval("two-sided", 8, 0.9, 0.95, 3.0, (lower + upper) / 2, 1.0, 0.0, 0.0, 1.0, lower, upper,
                             "test")


@pytest.mark.parametrize("lower, upper, zone, reported", [
    (100.0, 200.0, "inside", ("100.0", "200.0")),       # ends on the bounds: inside (closed)
    (100.04, 199.96, "inside", ("100.0", "200.0")),     # rounded outward, still on the bounds
    (99.99, 150.0, "crossing", ("99.9", "150.0")),      # one last-digit step beyond after outward rounding
    (150.0, 200.01, "crossing", ("150.0", "200.1")),
    (200.01, 300.0, "crossing", ("200.0", "300.0")),    # rounded down onto the bound: not wholly outside
    (200.11, 300.0, "outside", ("200.1", "300.0")),
])
def test_interval_ends_are_rounded_outward_then_compared_exactly(lower, upper, zone, reported):
    limits = PopulationLimits("range", "Pa", low=Decimal("100.0"), high=Decimal("200.0"))
    d = _decide_interval(limits, _interval(lower, upper), 1)
    assert (str(d.lower), str(d.upper)) == reported and d.zone == zone


def test_one_sided_bounds_use_the_far_limit_for_wholly_outside():
    high = PopulationLimits("upper_bound", "mA", high=Decimal("6"))
    assert _decide_interval(high, _interval(4.0, 5.9), 1).zone == "inside"
    assert _decide_interval(high, _interval(5.0, 7.0), 1).zone == "crossing"
    assert _decide_interval(high, _interval(6.2, 7.0), 1).zone == "outside"  # ≥ p of parts above the bound
    low = PopulationLimits("lower_bound", "mA", low=Decimal("6"))
    assert _decide_interval(low, _interval(6.0, 9.0), 1).zone == "inside"
    assert _decide_interval(low, _interval(4.0, 5.8), 1).zone == "outside"


def test_too_few_units_keeps_the_per_unit_verdicts(claims, rng):
    units, limits = _accuracy_fleet(claims, rng, [3.0])
    fv = fleet_verdict(ACCURACY, limits, units)
    assert fv.verdict == "inconclusive" and fv.inconclusive_class == "too-few-units" and fv.interval is None
    assert "per-unit verdicts stand" in fv.reason


def test_the_json_record_is_strict_and_carries_the_rule(claims, rng):
    offsets = list(rng.normal(0.0, 16.0, 8))
    offsets[3] += 150.0
    units, limits = _accuracy_fleet(claims, rng, offsets)
    record = fleet_record(fleet_verdict(ACCURACY, limits, units)).model_dump(mode="json")
    text = json.dumps(record, allow_nan=False)
    back = json.loads(text)
    assert back["rule"] == FLEET_RULE_NAME and back["rule_version"] == FLEET_RULE_VERSION
    assert back["limits"] == {"semantics": "range", "unit": "Pa", "low": "-100", "high": "100", "typical": None,
                              "note": "printed band 0 +/- 100 Pa: every part's value within it"}
    assert back["screening"]["outliers"][0]["unit"] == "wt3/pressure_upwind"
    assert set(back["precision"]) >= {"s_r", "s_L", "s_R"} and back["tolerance_interval"]["zone"] == "inside"
    assert back["screening"]["h_critical"]["at_1"] == pytest.approx(2.0649, abs=1e-4)


def test_a_typical_value_is_known_to_its_printed_digits():
    assert printed_step_u(Decimal("0.2")) == pytest.approx(0.05 / math.sqrt(3))
    assert printed_step_u(Decimal("0.20")) == pytest.approx(0.005 / math.sqrt(3))  # trailing zeros count
    assert printed_step_u(Decimal("165")) == pytest.approx(0.5 / math.sqrt(3))


def test_population_limits_from_a_claims_shape():
    band = population_limits("accuracy", "point", unit="Pa", point="0", tolerance="6")
    assert (band.semantics, band.low, band.high) == ("range", Decimal(-6), Decimal(6))
    typ = population_limits("typical", "point", unit="µA", point="2.1", tolerance="0")
    assert (typ.semantics, typ.typical) == ("point", Decimal("2.1"))
    assert population_limits("max_rating", "upper_bound", unit="mA", high="6").sides == "upper"
    with pytest.raises(FleetVerdictError, match="expected low <= high"):
        population_limits("range", "range", unit="hPa", low="1200", high="300")
    with pytest.raises(FleetVerdictError, match="expected a printed band t > 0"):
        population_limits("accuracy", "point", unit="Pa", point="0", tolerance="0")


@pytest.mark.parametrize("make, message", [
    (lambda: UnitResult("u1", "maybe"), "verdict expected pass/inconclusive/fail/error, got 'maybe'"),
    (lambda: UnitResult("u1", "pass", Decimal(1)), "a value needs its standard uncertainty u"),
    (lambda: UnitResult("u1", "pass", Decimal(1), Decimal(-1)), "expected u >= 0"),
    (lambda: UnitResult("u1", "pass", float("nan"), Decimal(1)), "expected a finite number"),
    (lambda: fleet_verdict("c-x", PopulationLimits("point", "V", typical=Decimal(1)), []),
     "expected at least one unit result"),
    (lambda: fleet_verdict("c-x", PopulationLimits("point", "V", typical=Decimal(1)),
                           [UnitResult("a", "error"), UnitResult("a", "error")]), "expected unique unit names"),
    (lambda: fleet_verdict("c-x", PopulationLimits("point", "V", typical=Decimal(1)), [UnitResult("a", "error")],
                           u_shared=-1.0), "u_shared expected a finite number >= 0"),
])
def test_refusals_name_what_was_expected(make, message):
    with pytest.raises(FleetVerdictError, match=message):
        make()


def test_labs_are_scored_against_the_robust_consensus(claims, rng):
    """Eight labs of two chambers each; lab H's chambers read 60 Pa high. Lab A measured against a traceable
    reference (its E_n compares its mean error with the reference's 0 ± 10 Pa). Among four labs the same lab H
    does not stand out: Algorithm A's iterated scale grows with it (s* = 35 Pa against 5 Pa among eight), so
    z-scores need a fair number of labs — robust statistics on few results have little to work with."""
    units, _ = _accuracy_fleet(claims, rng, list(rng.normal(0.0, 5.0, 16)))
    tagged = [replace(u, lab="ABCDEFGH"[i // 2]) for i, u in enumerate(units)]
    tagged[14:] = [replace(u, value=u.value + 60) for u in tagged[14:]]
    comparison = lab_comparison(tagged, {"A": Reference(0.0, 10.0)})
    scores = {s.lab: s for s in comparison.scores}
    assert scores["H"].z_performance == "unsatisfactory"
    assert all(scores[lab].z_performance == "satisfactory" for lab in "ABCDEFG")
    a = lab_results(tagged)[0]
    xs = [float(u.value) for u in tagged[:2]]
    us = [float(u.u) for u in tagged[:2]]
    u_a = math.sqrt(np.var(xs, ddof=1) / 2 + sum(x * x for x in us) / 2)
    assert (a.lab, a.value, a.expanded) == ("A", pytest.approx(np.mean(xs)), pytest.approx(2 * u_a))
    assert scores["A"].en == pytest.approx(a.value / math.hypot(2 * u_a, 10.0)) and scores["B"].en is None
    four = lab_comparison(tagged[:6] + tagged[14:])
    assert four.consensus.s_star > 30 and {s.z_performance for s in four.scores} == {"satisfactory"}
    assert lab_comparison(tagged[:2]) is None  # one lab: nothing to compare
    with pytest.raises(FleetVerdictError, match=r"references: expected labs among \['A', .*'H'\], got \['Z'\]"):
        lab_comparison(tagged, {"Z": Reference(0.0, 1.0)})
