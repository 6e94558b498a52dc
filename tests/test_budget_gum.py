"""The uncertainty budget against the GUM's definitions (JCGM 100): Type A/B components, u_c, ν_eff, k, U."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from calibration.budget import (
    BudgetError,
    UncertaintyBudget,
    UncertaintyComponent,
    certificate,
    coverage_factor,
    rectangular,
    resolution,
    type_a,
    welch_satterthwaite,
)


def test_type_a_is_s_over_root_n_with_n_minus_1_dof(rng):
    readings = rng.normal(100.0, 0.4, size=50)
    comp = type_a("noise", readings)
    assert comp.evaluation == "A"
    assert comp.dof == 49
    assert comp.u == pytest.approx(np.std(readings, ddof=1) / math.sqrt(50), rel=1e-12)


def test_type_a_refuses_nan_and_single_reading():
    with pytest.raises(BudgetError, match="finite readings"):
        type_a("x", [1.0, float("nan"), 2.0])
    with pytest.raises(BudgetError, match="at least 2"):
        type_a("x", [1.0])


def test_type_b_rectangular_certificate_and_resolution():
    assert rectangular("bound", 6.0).u == pytest.approx(6.0 / math.sqrt(3))
    assert math.isinf(rectangular("bound", 6.0).dof)
    cert = certificate("ref", expanded=0.2, k=2.0, dof=50)
    assert (cert.u, cert.dof, cert.evaluation) == (pytest.approx(0.1), 50, "B")
    assert certificate("ref", u=0.05).u == 0.05
    assert resolution("display", 0.01).u == pytest.approx(0.01 / math.sqrt(12))
    with pytest.raises(BudgetError, match="exactly one"):
        certificate("ref", u=0.1, expanded=0.2, k=2)
    with pytest.raises(BudgetError, match="coverage factor"):
        certificate("ref", expanded=0.2)


def test_combined_uses_sensitivity_coefficients():
    b = UncertaintyBudget("y", "Pa", (
        UncertaintyComponent("a", u=3.0, dof=10, evaluation="A", basis="", sensitivity=2.0),
        UncertaintyComponent("b", u=8.0, dof=math.inf, evaluation="B", basis="", sensitivity=-1.0),
    ))
    assert b.combined == pytest.approx(math.hypot(6.0, 8.0))


def test_welch_satterthwaite_matches_the_formula():
    # u_c^4 / sum(u_i^4 / nu_i): two finite terms and one infinite term (which adds nothing to the sum).
    contributions = [(0.3, 4.0), (0.4, 9.0), (0.5, math.inf)]
    uc2 = 0.3**2 + 0.4**2 + 0.5**2
    expected = uc2**2 / (0.3**4 / 4.0 + 0.4**4 / 9.0)
    assert welch_satterthwaite(contributions) == pytest.approx(expected)
    assert math.isinf(welch_satterthwaite([(0.5, math.inf)]))


def test_coverage_factor_is_student_t_and_normal_at_infinity():
    assert coverage_factor(3) == pytest.approx(stats.t.ppf(0.975, 3))
    assert coverage_factor(3) > 3.18 > 2  # four DPS310s: a 95 % statement needs k ≈ 3.18, not 2 (metrology.md)
    assert coverage_factor(math.inf) == pytest.approx(stats.norm.ppf(0.975))
    assert coverage_factor(math.inf, 0.6827) == pytest.approx(1.0, abs=1e-3)


def test_four_unit_type_a_budget_expands_with_k_of_three_dof(rng):
    means = rng.normal(94528.5, 16.0, size=4)
    b = UncertaintyBudget("mean", "Pa", (type_a("scatter", means),))
    assert b.effective_dof == 3
    assert b.expanded == pytest.approx(stats.t.ppf(0.975, 3) * np.std(means, ddof=1) / 2)


def test_round_trip_through_json_recomputes_derived_figures():
    b = UncertaintyBudget("y", "hPa", (type_a("noise", [1.0, 1.2, 0.9, 1.1]), rectangular("t", 0.06)))
    text = json.dumps(b.to_dict())
    data = json.loads(text)
    assert data["components"][1]["dof"] is None  # infinity is null in JSON
    again = UncertaintyBudget.from_dict(data)
    assert again == b
    assert again.expanded == pytest.approx(b.expanded)


def test_duplicate_component_names_and_bad_values_are_refused():
    with pytest.raises(BudgetError, match="unique"):
        UncertaintyBudget("y", "Pa", (rectangular("a", 1.0), rectangular("a", 2.0)))
    with pytest.raises(BudgetError, match="u >= 0"):
        UncertaintyComponent("a", u=-1.0, dof=3, evaluation="A", basis="")
    with pytest.raises(BudgetError, match="degrees of freedom"):
        UncertaintyComponent("a", u=1.0, dof=0, evaluation="A", basis="")
    with pytest.raises(BudgetError, match="missing field 'components'"):
        UncertaintyBudget.from_dict({"quantity": "y", "unit": "Pa"})
