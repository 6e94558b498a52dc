"""Measurement: reported digits (GUM 7.2.6 rounding), Decimal exactness, apparatus status, and its report."""

from __future__ import annotations

import json
import math
from decimal import Decimal as D

import pytest
from scipy import stats

from calibration.budget import UncertaintyBudget, type_a
from protocols.measurement import Measurement, MeasurementError, decimals_for, to_decimal


def test_floats_become_their_printed_digits():
    assert to_decimal(0.08) == D("0.08")  # not 0.08000000000000000166...
    assert to_decimal("945.280") == D("945.280")
    with pytest.raises(MeasurementError, match="finite"):
        to_decimal(float("nan"))


def test_u_to_two_significant_digits_and_value_to_the_same_place():
    m = Measurement.from_values(945.2850808731155, 0.08014870759895294, "hPa", dof=3)
    assert (m.value, m.u) == (D("945.285"), D("0.080"))
    assert m.k == pytest.approx(stats.t.ppf(0.975, 3))
    assert m.report() == "945.285 ± 0.080 hPa (k = 3.18, ν = 3)"
    assert decimals_for(8.01) == 1 and decimals_for(801) == -1
    assert Measurement.from_values(94528.5081, 8.0148, "Pa").u == D("8.0")
    assert Measurement.from_values("945.2851", "0.08", "hPa", decimals=4).value == D("945.2851")


def test_from_budget_carries_dof_and_k(rng):
    means = rng.normal(94528.5, 16.0, 4)
    budget = UncertaintyBudget("cross-sensor mean", "Pa", (type_a("scatter", means),))
    m = Measurement.from_budget(means.mean(), budget, n=4)
    assert m.dof == 3 and m.budget is budget and m.n == 4
    assert m.k == pytest.approx(budget.coverage_factor)
    assert float(m.u) == pytest.approx(budget.combined, rel=0.05)  # rounded to 2 significant digits


def test_status_rules():
    failed = Measurement.failed("hPa", "link_lost", "no reply after 3 retries")
    assert failed.value is None and failed.report() == "no value (link_lost: no reply after 3 retries)"
    with pytest.raises(MeasurementError, match="needs a value and a u"):
        Measurement(value=None, u=None, unit="hPa")
    with pytest.raises(MeasurementError, match="status"):
        Measurement(value=D(1), u=D(1), unit="hPa", status="timeout")  # type: ignore[arg-type]
    with pytest.raises(MeasurementError, match="both matched and unmatched"):
        Measurement(value=D(1), u=D(1), unit="hPa", matched_conditions=["a"], unmatched_conditions=["a"])
    with pytest.raises(MeasurementError, match=">= 0"):
        Measurement(value=D(1), u=D(-1), unit="hPa")


def test_to_dict_keeps_digits_as_strings():
    m = Measurement.from_values("945.280", "0.080", "hPa")
    data = json.loads(json.dumps(m.to_dict()))
    assert data["value"] == "945.280" and data["u"] == "0.080" and data["dof"] is None
    assert math.isinf(m.dof)
