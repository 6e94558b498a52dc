"""Properties of the decision rule (hypothesis): symmetric, monotone in distance, exact at the boundary.

Numbers are drawn as decimals with three places (the reported digits of a hPa measurement); hypothesis is
seeded via its database-less derandomised mode so that runs are reproducible.
"""

from __future__ import annotations

from decimal import Decimal as D

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.claims import load_claims
from protocols.measurement import Measurement
from protocols.verdict import VERDICT_ORDER, verdict

STEP = D("0.001")
values = st.decimals(min_value=D("500"), max_value=D("1100"), places=3, allow_nan=False, allow_infinity=False)
uncertainties = st.decimals(min_value=D("0.001"), max_value=D("5"), places=3, allow_nan=False, allow_infinity=False)
offsets = st.decimals(min_value=D("0"), max_value=D("20"), places=3, allow_nan=False, allow_infinity=False)
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)


@pytest.fixture(scope="module")
def base():
    return load_claims()["dps310-operating-range"]


def _m(value, u):
    return Measurement(value=value, u=u, unit="hPa", dof=3.0, matched_conditions=["load_in", "load_out"])


def _with(base, low, high):
    return base.model_copy(update={"low": low, "high": high})


@SETTINGS
@given(m=values, u=uncertainties, delta=offsets)
def test_symmetric_between_upper_and_lower_bound(base, m, u, delta):
    # An upper bound at m + δ and a lower bound at m − δ are the same situation mirrored: same d, same verdict.
    up = verdict(_with(base, D("300"), m + delta), _m(m, u))
    down = verdict(_with(base, m - delta, D("1200")), _m(m, u))
    assert (up.verdict, up.zone, up.distance) == (down.verdict, down.zone, down.distance)
    # ... and a bound δ outside on either side mirrors too.
    up_out = verdict(_with(base, D("300"), m - delta), _m(m, u))
    down_out = verdict(_with(base, m + delta, D("1200")), _m(m, u))
    assert (up_out.verdict, up_out.distance) == (down_out.verdict, down_out.distance)


@SETTINGS
@given(m=values, u=uncertainties, a=offsets, b=offsets)
def test_monotone_in_distance(base, m, u, a, b):
    # Lowering the upper bound can only move the verdict pass → inconclusive → fail, never back.
    near, far = sorted((a, b))
    loose = verdict(_with(base, D("300"), m + far - D("10")), _m(m, u))
    tight = verdict(_with(base, D("300"), m + near - D("10")), _m(m, u))
    assert tight.distance >= loose.distance
    assert VERDICT_ORDER[tight.verdict] >= VERDICT_ORDER[loose.verdict]


@SETTINGS
@given(m=values, u=uncertainties)
def test_exact_at_the_boundary_on_both_sides_of_both_bounds(base, m, u):
    cases = {
        # (low, high): expected verdict
        (D("300"), m + u): "inconclusive",  # d = −c
        (D("300"), m + u + STEP): "pass",
        (D("300"), m - u): "inconclusive",  # d = +c
        (D("300"), m - u - STEP): "fail",
        (m - u, D("1200")): "inconclusive",
        (m - u - STEP, D("1200")): "pass",
        (m + u, D("1200")): "inconclusive",
        (m + u + STEP, D("1200")): "fail",
    }
    for (low, high), expected in cases.items():
        v = verdict(_with(base, low, high), _m(m, u))
        assert v.verdict == expected, (low, high, v.distance, v.combined_uncertainty)


@SETTINGS
@given(m=values, u=uncertainties, delta=offsets)
def test_point_claim_symmetric_and_binary(base, m, u, delta):
    point = base.model_copy(update={"kind": "accuracy", "value": m + delta, "low": None, "high": None})
    mirror = base.model_copy(update={"kind": "accuracy", "value": m - delta, "low": None, "high": None})
    a, b = verdict(point, _m(m, u)), verdict(mirror, _m(m, u))
    assert a.verdict == b.verdict and a.verdict in ("pass", "fail")
    assert (a.verdict == "pass") == (delta <= u)


@SETTINGS
@given(m=values, u=uncertainties, delta=offsets)
def test_a_typical_only_claim_is_never_decided_on_one_unit(base, m, u, delta):
    typical = base.model_copy(update={"kind": "typical", "value": m + delta, "low": None, "high": None})
    v = verdict(typical, _m(m, u))
    assert (v.verdict, v.inconclusive_class) == ("inconclusive", "typical-not-guaranteed")
    assert (v.numeric_verdict == "pass") == (delta <= u)  # the compatibility test is still reported
    assert v.deviation_from_typical == -delta
