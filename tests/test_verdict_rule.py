"""The decision rule on real claims (protocols.claims): bound and point semantics, the exact boundary on both
sides, tolerance entry, condition classes, apparatus errors and the capability pre-check."""

from __future__ import annotations

import json
from decimal import Decimal as D

import pytest
from scipy import stats

from protocols.claims import Condition, Tolerance, load_claims
from protocols.measurement import Measurement
from protocols.verdict import (
    RULE_VERSION,
    VerdictError,
    capability_precheck,
    verdict,
)

STAGED = ["load_in", "load_out"]  # the operating-range claim's decisive conditions, confirmed by variable


@pytest.fixture(scope="module")
def claims():
    return load_claims()


def bound_claim(claims, low="300", high="1200", **update):
    """The packaged DPS310 operating-range claim with its bounds moved (an unvalidated pydantic copy)."""
    fields = {"low": None if low is None else D(low), "high": None if high is None else D(high), **update}
    return claims["dps310-operating-range"].model_copy(update=fields)


def measured(value="945.285", u="0.080", unit="hPa", dof=3.0, matched=STAGED, **kw):
    return Measurement(value=D(value), u=D(u), unit=unit, dof=dof, matched_conditions=list(matched), **kw)


# ---------------------------------------------------------------------------------------- the exact boundary
def test_the_float_trap_exists_and_the_rule_does_not_fall_into_it(claims):
    # metrology.md: in binary floats the two sides of one band disagree ...
    assert abs(945.365 - 945.285) > 0.080 > abs(945.205 - 945.285)
    # ... the rule decides on the reported digits, so |d| = c exactly on both sides.
    upper = verdict(bound_claim(claims, high="945.365"), measured())
    lower = verdict(bound_claim(claims, low="945.205"), measured())
    assert upper.distance == lower.distance == D("-0.080")  # both inside by exactly c
    assert upper.combined_uncertainty == lower.combined_uncertainty == D("0.080")
    assert (upper.verdict, upper.zone) == ("inconclusive", "conditional_pass")
    assert (lower.verdict, lower.zone) == ("inconclusive", "conditional_pass")


@pytest.mark.parametrize(
    ("side", "bound", "expected"),
    [
        # upper bound above m: d = m - high < 0
        ("high", "945.365", ("inconclusive", "conditional_pass")),  # d = -c exactly: closed band
        ("high", "945.366", ("pass", "pass")),  # one last-digit step further out
        ("high", "945.364", ("inconclusive", "conditional_pass")),  # one step in
        # upper bound below m: d > 0
        ("high", "945.205", ("inconclusive", "conditional_fail")),  # d = +c exactly
        ("high", "945.204", ("fail", "fail")),
        ("high", "945.206", ("inconclusive", "conditional_fail")),
        # lower bound below m: d = low - m < 0
        ("low", "945.205", ("inconclusive", "conditional_pass")),
        ("low", "945.204", ("pass", "pass")),
        ("low", "945.206", ("inconclusive", "conditional_pass")),
        # lower bound above m: d > 0
        ("low", "945.365", ("inconclusive", "conditional_fail")),
        ("low", "945.366", ("fail", "fail")),
        ("low", "945.364", ("inconclusive", "conditional_fail")),
    ],
)
def test_at_c_and_one_last_digit_step_each_side_of_both_bounds(claims, side, bound, expected):
    claim = bound_claim(claims, high=bound) if side == "high" else bound_claim(claims, low=bound)
    v = verdict(claim, measured())
    assert (v.verdict, v.zone) == expected
    assert abs(v.distance) in (D("0.080"), D("0.081"), D("0.079"))


def test_the_seed_papers_definitive_verdict(claims):
    v = verdict(claims["dps310-operating-range"], measured())
    assert v.verdict == "pass" and v.zone == "pass"
    assert v.distance == D("945.285") - D("1200")  # the nearer bound
    assert v.dof == 3 and v.k == pytest.approx(stats.t.ppf(0.975, 3))
    assert v.expanded_uncertainty == pytest.approx(v.k * 0.080)
    assert v.rule_version == RULE_VERSION and v.boundary_convention.startswith("closed")


def test_measurement_in_pa_is_converted_exactly(claims):
    in_pa = verdict(bound_claim(claims, high="945.205"), measured(value="94528.5", u="8.0", unit="Pa"))
    assert in_pa.distance == D("0.080") and in_pa.combined_uncertainty == D("0.080")
    assert in_pa.verdict == "inconclusive"
    with pytest.raises(VerdictError, match="expected the measurement in 'hPa'"):
        verdict(bound_claim(claims), measured(unit="V"))


# ------------------------------------------------------------------------------------------------ tolerance
def test_tolerance_as_stated_and_rectangular_enter_c_exactly(claims):
    as_stated = Tolerance(value=D("0.060"), meaning="symmetric_bound", entry="as_stated")
    v = verdict(bound_claim(claims, high="945.185", tolerance=as_stated), measured())
    assert v.combined_uncertainty == D("0.100")  # sqrt(0.080² + 0.060²)
    assert v.verdict == "inconclusive" and v.distance == D("0.100")  # exactly at c
    assert "as stated" in v.tolerance_entry

    rect = Tolerance(value=D("0.060"), meaning="symmetric_bound", entry="rectangular")
    # c² = 0.0064 + 0.0036/3 = 0.0076 exactly; c is irrational (0.08717...): 0.0871² < c² < 0.0872².
    inside = verdict(bound_claim(claims, high="945.1979", tolerance=rect), measured())
    outside = verdict(bound_claim(claims, high="945.1978", tolerance=rect), measured())
    assert (inside.distance, inside.verdict) == (D("0.0871"), "inconclusive")
    assert (outside.distance, outside.verdict) == (D("0.0872"), "fail")
    assert "t/sqrt(3)" in inside.tolerance_entry
    assert inside.dof > 3  # the tolerance adds an infinite-ν component to c (Welch–Satterthwaite)


# ------------------------------------------------------------------------------------------- point claims
def test_point_claim_is_the_compatibility_test(claims):
    claim = claims["dps310-relative-accuracy"]  # accuracy: value 0 Pa, tolerance ±6 Pa as stated
    conds = ["pressure_ambient", "load_in", "load_out"]
    m = lambda v: Measurement(value=D(v), u=D("8"), unit="Pa", matched_conditions=conds)  # noqa: E731
    assert verdict(claim, m("10")).combined_uncertainty == D("10")  # sqrt(8² + 6²)
    assert (verdict(claim, m("10")).verdict, verdict(claim, m("-10")).verdict) == ("pass", "pass")  # |m-s| = c
    assert (verdict(claim, m("10.1")).verdict, verdict(claim, m("-10.1")).verdict) == ("fail", "fail")
    assert verdict(claim, m("0")).verdict == "pass"
    assert verdict(claim, m("10.1")).zone == "fail" and verdict(claim, m("3")).semantics == "point"


# ------------------------------------------------------------------------------------------ typical values
ALL_MATCHED = ["supply current", "measurement rate and precision", "supply voltage"]  # as an SMU protocol reports


def test_a_typical_only_claim_is_never_failed_on_one_unit(claims):
    claim = claims["dps310-current-1hz-low-precision"]  # Typ. 2.1 µA, no Min./Max. printed
    def at(value="2.1767", matched=ALL_MATCHED):
        return Measurement(value=D(value), u=D("0.0019"), unit="µA", dof=9.0, matched_conditions=list(matched))

    v = verdict(claim, at())
    assert (v.verdict, v.inconclusive_class, v.zone) == ("inconclusive", "typical-not-guaranteed", None)
    assert v.numeric_verdict == "fail"  # the compatibility test alone: incompatible at c
    assert v.deviation_from_typical == D("0.0767") and v.expanded_uncertainty > float(v.combined_uncertainty)
    assert "not a guaranteed limit" in v.reason and "0.0767" in v.reason
    near = verdict(claim, at("2.1019"))  # |m - s| = c exactly: compatible
    assert (near.verdict, near.numeric_verdict, near.deviation_from_typical) == ("inconclusive", "pass", D("0.0019"))
    below = verdict(claim, at("2.0"))
    assert below.deviation_from_typical == D("-0.1") and below.verdict == "inconclusive"
    assert verdict(claim, at(matched=[])).inconclusive_class == "unmatched-stimulus"  # conditions first
    assert json.loads(json.dumps(v.to_dict()))["deviation_from_typical"] == "0.0767"


def test_a_typical_with_printed_limits_is_graded_against_the_limits(claims):
    claim = claims["dps310-current-1hz-low-precision"].model_copy(update={"high": D("2.15")})  # Typ. 2.1, Max. 2.15
    m = lambda v: Measurement(value=D(v), u=D("0.0019"), unit="µA", dof=9.0, matched_conditions=ALL_MATCHED)  # noqa: E731
    assert (verdict(claim, m("2.1767")).verdict, verdict(claim, m("2.1767")).semantics) == ("fail", "upper_bound")
    assert verdict(claim, m("2.1")).verdict == "pass"  # 0.05 inside the Max.: the Typ. itself is not the limit
    assert verdict(claim, m("2.1519")).verdict == "inconclusive"  # d = c exactly (closed band)
    assert verdict(claim, m("2.1520")).verdict == "fail"
    assert verdict(claim, m("2.1")).deviation_from_typical is None


def test_one_sided_bounds(claims):
    rating = bound_claim(claims, low=None, high="10", kind="max_rating")
    assert verdict(rating, measured(value="9.5", u="0.1")).verdict == "pass"
    assert verdict(rating, measured(value="10.2", u="0.1")).verdict == "fail"
    assert verdict(rating, measured(value="10.1", u="0.1")).verdict == "inconclusive"
    minimum = bound_claim(claims, low="10", high=None, kind="max_rating")
    v = verdict(minimum, measured(value="9.5", u="0.1"))
    assert (v.verdict, v.semantics, v.distance) == ("fail", "lower_bound", D("0.5"))


# -------------------------------------------------------------------------------- before the numbers
def test_lost_link_or_abort_is_an_error_never_a_fail(claims):
    claim = bound_claim(claims, high="900")  # the numbers would say fail
    for status in ("link_lost", "aborted"):
        v = verdict(claim, Measurement.failed("hPa", status, "serial link dropped at row 120"))
        assert v.verdict == "error" and v.zone is None and "not a fail" in v.reason


def test_unconfirmed_decisive_condition_is_inconclusive(claims):
    v = verdict(claims["dps310-operating-range"], measured(matched=["load_in"]))
    assert v.verdict == "inconclusive" and v.inconclusive_class == "unmatched-stimulus"
    assert v.numeric_verdict == "pass" and v.zone is None
    assert v.unmatched_conditions == ("same pressure at every barometer (exhaust fan off)",)
    by_name = [c.name for c in claims["dps310-operating-range"].conditions if c.decisive]
    assert verdict(claims["dps310-operating-range"], measured(matched=by_name)).verdict == "pass"


def _condition(name, kind):
    return Condition(name=name, value="x", decisive=True, unmatchable="the chamber cannot", kind=kind)


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        (["stimulus"], "unmatched-stimulus"),
        (["environment"], "unmatched-stimulus"),
        (["observable"], "unmatched-observable"),
        (["reference"], "no-traceable-reference"),
        (["observable", "stimulus", "reference"], "no-traceable-reference"),  # priority when several
        (["observable", "stimulus"], "unmatched-stimulus"),
    ],
)
def test_condition_kind_sets_the_inconclusive_class(claims, kinds, expected):
    base = claims["dps310-operating-range"]
    claim = base.model_copy(update={"conditions": base.conditions + [_condition(f"c{i}", k) for i, k in enumerate(kinds)]})
    v = verdict(claim, measured())
    assert (v.verdict, v.inconclusive_class) == ("inconclusive", expected)
    assert v.numeric_verdict == "pass"


def test_reported_unmatched_condition_wins_over_a_pass(claims):
    m = Measurement(value=D("945.285"), u=D("0.080"), unit="hPa", matched_conditions=["load_in"],
                    unmatched_conditions=["same pressure at every barometer (exhaust fan off)"])
    v = verdict(claims["dps310-operating-range"], m)
    assert v.verdict == "inconclusive" and "reported unmatched" in v.reason


def test_without_measurement_engagement_only_or_intrinsic_class(claims):
    no_protocol = bound_claim(claims, protocol=None, conditions=[])
    assert verdict(no_protocol, None).inconclusive_class == "engagement-only"
    assert verdict(claims["dps310-absolute-accuracy"], None).inconclusive_class == "no-traceable-reference"
    assert verdict(claims["dps310-operating-range"], None).verdict == "error"


def test_numerical_inconclusive_is_resolution_limited(claims):
    narrow = bound_claim(claims, low="945.2", high="945.35")
    v = verdict(narrow, measured())
    assert (v.verdict, v.inconclusive_class) == ("inconclusive", "resolution-limited")
    assert any("pass zone is empty" in n for n in v.notes)  # half-width 0.075 <= c = 0.080


def test_stated_resolution_rounds_d_and_c_first(claims):
    claim = bound_claim(claims, high="945.2045")  # d = 0.0805 > c: fail on the exact digits
    assert verdict(claim, measured()).verdict == "fail"
    rounded = verdict(claim, measured(), resolution="0.001")  # d → 0.080 (half-even), c → 0.080: closed band
    assert (rounded.verdict, rounded.distance, rounded.resolution) == ("inconclusive", D("0.080"), D("0.001"))


def test_verdict_serialises_to_json(claims):
    data = json.loads(json.dumps(verdict(claims["dps310-operating-range"], measured()).to_dict()))
    assert data["distance"] == "-254.715" and data["combined_uncertainty"] == "0.080"
    assert data["zone"] == "pass" and data["dof"] == 3


# ------------------------------------------------------------------------------------- capability pre-check
def test_capability_precheck(claims):
    rel = capability_precheck(claims["dps310-relative-accuracy"], 8)  # ±6 Pa against u ≈ 8 Pa (metrology.md)
    assert rel.resolution_limited and rel.ratio == D("0.75")
    assert not capability_precheck(claims["dps310-relative-accuracy"], 1).resolution_limited
    assert not capability_precheck(claims["dps310-operating-range"], "0.080").resolution_limited
    assert capability_precheck(claims["dps310-operating-range"], "8", unit="Pa").ratio == D("5625")
    assert capability_precheck(bound_claim(claims, low="945.2", high="945.35"), "0.080").resolution_limited
    one_sided = capability_precheck(claims["dps310-pressure-data-resolution"], "0.01")
    assert not one_sided.applicable and not one_sided.resolution_limited
