"""ISO 13528 between-lab statistics (calibration/proficiency.py): Algorithm A, z, z' and E_n.

Source of the worked example: the ISO 13528:2015 Algorithm A example (12 results), as reproduced step by step
in S. Subramanian, "The Algorithm A in Detail" (slideorbit.com, 2025, citing ISO 5725-5 §6.2 and ISO 13528:2015):
initial x* = 1.510, s* = 0.3559; after the first update x* = 1.475, s* = 0.4072; after the second x* = 1.460,
s* = 0.4486 (printed to those digits). The slides stop there; the converged values (1.453, 0.496) are checked
as Algorithm A's fixed point, not against a printed figure.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from calibration.proficiency import (
    LabResult,
    ProficiencyError,
    Reference,
    algorithm_a,
    compare_labs,
    en_number,
    z_performance,
)

ISO13528_EXAMPLE = [1.69, 0.74, 2.05, 1.14, 2.19, 1.39, 1.52, 1.50, 1.58, 0.80, 1.21, 1.63]


def test_algorithm_a_follows_the_worked_example_step_by_step():
    first = algorithm_a(ISO13528_EXAMPLE, max_iterations=1)
    assert (first.initial_x, round(first.initial_s, 4)) == (1.51, 0.3559)
    assert (round(first.x_star, 3), round(first.s_star, 4)) == (1.475, 0.4072) and not first.converged
    second = algorithm_a(ISO13528_EXAMPLE, max_iterations=2)
    assert (round(second.x_star, 3), round(second.s_star, 4)) == (1.460, 0.4486)
    final = algorithm_a(ISO13528_EXAMPLE)
    assert final.converged and (round(final.x_star, 3), round(final.s_star, 3)) == (1.453, 0.496)


def _fixed_point(values, x_star, s_star):
    delta = 1.5 * s_star
    clipped = np.clip(values, x_star - delta, x_star + delta)
    return clipped.mean(), 1.134 * clipped.std(ddof=1)


def test_algorithm_a_converges_to_its_fixed_point(rng):
    for _ in range(20):
        values = np.concatenate([rng.normal(10.0, 1.0, 15), rng.normal(25.0, 1.0, 2)])  # two gross outliers
        est = algorithm_a(list(values))
        assert est.converged
        x, s = _fixed_point(values, est.x_star, est.s_star)
        assert (x, s) == pytest.approx((est.x_star, est.s_star), rel=1e-10)
        assert abs(est.x_star - 10.0) < abs(values.mean() - 10.0)  # the outliers pull the mean, not x*


def test_algorithm_a_is_consistent_with_sigma_for_normal_data(rng):
    """1.134 and 1.483 make s* estimate σ for normal data: over 400 seeded samples of 200, the mean s*/σ is 1
    within 0.01 (its sampling s.e. is about 0.003)."""
    ratios = [algorithm_a(list(rng.normal(0.0, 2.0, 200))).s_star / 2.0 for _ in range(400)]
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.01)


def test_z_scores_against_the_robust_consensus():
    labs = [LabResult(f"lab{i}", v, 0.1) for i, v in enumerate(ISO13528_EXAMPLE)]
    comparison = compare_labs(labs)
    est = comparison.consensus
    assert comparison.sigma_pt == est.s_star
    assert comparison.u_x_pt == pytest.approx(1.25 * est.s_star / math.sqrt(12))
    assert comparison.use_z_prime == (comparison.u_x_pt > 0.3 * est.s_star)  # 0.36 > 0.3: z' is asked for
    by_lab = {s.lab: s for s in comparison.scores}
    lab1 = by_lab["lab1"]  # 0.74
    assert lab1.z == pytest.approx((0.74 - est.x_star) / est.s_star)
    assert lab1.z_prime == pytest.approx((0.74 - est.x_star) / math.hypot(est.s_star, comparison.u_x_pt))
    assert lab1.en is None and lab1.en_performance is None


def test_performance_classes_at_their_boundaries():
    assert [z_performance(z) for z in (2.0, -2.0001, 2.999, 3.0, -3.5)] == [
        "satisfactory", "questionable", "questionable", "unsatisfactory", "unsatisfactory"]


def test_en_number_of_a_lab_with_a_traceable_reference():
    """E_n = (x_lab − x_ref)/√(U_lab² + U_ref²): 0.5/√(0.3² + 0.4²) = 1 exactly (satisfactory: |E_n| ≤ 1)."""
    assert en_number(10.5, 0.3, 10.0, 0.4) == pytest.approx(1.0)
    labs = [LabResult("a", 10.5, 0.3, Reference(10.0, 0.4)), LabResult("b", 10.1, 0.2), LabResult("c", 9.9, 0.2),
            LabResult("d", 11.2, 0.2, Reference(10.0, 0.4))]
    scores = {s.lab: s for s in compare_labs(labs).scores}
    assert scores["a"].en_performance == "satisfactory"
    assert scores["d"].en == pytest.approx(1.2 / math.hypot(0.2, 0.4)) and scores["d"].en_performance == "unsatisfactory"


@pytest.mark.parametrize("call, message", [
    (lambda: algorithm_a([1.0]), "expected at least 2 results, got 1"),
    (lambda: algorithm_a([1.0, 1.0, 1.0, 2.0]), "median absolute deviation of 4 results is 0"),
    (lambda: algorithm_a([1.0, math.nan]), "expected finite values"),
    (lambda: en_number(1.0, 0.0, 1.0, 0.0), "expected U_lab or U_ref > 0, got both 0"),
    (lambda: compare_labs([LabResult("a", 1.0, 0.1), LabResult("a", 2.0, 0.1)]), "expected unique lab names"),
    (lambda: compare_labs([LabResult("a", 1.0, 0.1), LabResult("b", 2.0, 0.1)], sigma_pt=0), "sigma_pt"),
])
def test_refusals_name_what_was_expected(call, message):
    with pytest.raises(ProficiencyError, match=message):
        call()


def test_two_labs_always_score_the_same_unless_sigma_pt_is_given():
    """With two labs, x* is their midpoint and s* = 1.134·d/√2 for any difference d: z = ±√2/(2·1.134) = ±0.624
    whatever the labs measured. A σ_pt from elsewhere (a precision study's s_R, ISO 13528 §8.5) is needed."""
    for a, b in ((0.0, 1.0), (0.0, 1000.0), (5.0, 5.001)):
        zs = sorted(s.z for s in compare_labs([LabResult("a", a, 0.1), LabResult("b", b, 0.1)]).scores)
        assert zs == pytest.approx([-math.sqrt(2) / 2.268, math.sqrt(2) / 2.268])
    scores = compare_labs([LabResult("a", 0.0, 0.1), LabResult("b", 9.0, 0.1)], sigma_pt=1.5).scores
    assert [s.z_performance for s in scores] == ["unsatisfactory", "unsatisfactory"]  # z = ∓3
