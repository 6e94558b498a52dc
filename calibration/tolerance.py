"""Statistical tolerance intervals for a normal population (ISO 16269-6, unknown mean and variance).

Why: a datasheet limit is a promise about every part of a type, and a fleet of chambers measures a sample of those
parts. A tolerance interval turns the sample into a statement about the population: "with confidence γ, at least a
proportion p of all parts lies in [x̄ − k·s, x̄ + k·s]" (two-sided) or "below x̄ + k·s" / "above x̄ − k·s" (one-sided).
The fleet verdict (calibration/fleet_verdict.py) compares that interval with the claim's bounds.

The factors, both exact (no approximation, no table typed in):

  one-sided  k1 = t'_{n−1, δ}(γ) / √n,  δ = z_p·√n   (the γ-quantile of the noncentral t distribution with n − 1
             degrees of freedom and noncentrality δ; z_p the standard normal p-quantile);
  two-sided  k2 solves  γ = 2·√(n/2π) ∫₀^∞ Q_{χ²,n−1}((n − 1)·r²(x) / k2²) · exp(−n·x²/2) dx,
             r²(x) the p-quantile of the noncentral χ² with 1 degree of freedom and noncentrality x²
             (Odeh & Owen's exact factor, the one ISO 16269-6:2014 tabulates in its Annex F for m = 1).

The integral is a 96-node Gauss–Legendre rule on [0, 10/√n] (the weight exp(−n·x²/2) is below e⁻⁵⁰ beyond it);
doubling the nodes changes k2 by less than 1e-12 relative for n = 2 … 10⁵. k2 is the root of a monotone function
of k, found by Brent's method. Results equal ISO 16269-6:2014 Tables F.1, F.4 (p = 0.90, γ = 0.95), F.5 and F.9
to their four printed decimals (the standard rounds up); see tests/test_interlab_tolerance.py.

The measurement uncertainty of the units. Each unit's value x_i carries its own standard uncertainty u_i. Their
sample standard deviation s already contains the part of the measurement noise that differs from unit to unit,
but not a part they share (one reference, one calibration, a common Type B bound), which shifts every value
together and never shows in the scatter. The two cannot be told apart from the values alone, so the interval is
widened by the root-mean-square u in quadrature, s_c = √(s² + ū²), ū² = Σu_i²/n, before the factor is applied:
it covers a fully shared measurement error (the case the scatter cannot reveal) at the price of counting the
independent noise twice (the safe side: a wider interval can only move a verdict towards inconclusive). A claim's
spec tolerance t_eff (protocols/verdict.py's guard band term) may be added the same way (`extra_u`). k keeps
n − 1 degrees of freedom: ū is treated as known (its Type B part has ν = ∞; its Type A part has many readings).

Sample size: an interval needs an estimate of the spread, so n ≥ 2 (MIN_SAMPLE_SIZE); `smallest_sample_size`
answers the planning question "how many units until k drops below a given factor".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Sequence

import numpy as np
from scipy import optimize, special, stats

Sides = Literal["two-sided", "upper", "lower"]

DEFAULT_COVERAGE = 0.90
"""p: the proportion of the population the interval must contain (issue 34: 0.90)."""
DEFAULT_CONFIDENCE = 0.95
"""γ: the confidence that it does (issue 34: 0.95)."""
MIN_SAMPLE_SIZE = 2
"""The smallest n for which a tolerance interval exists: n − 1 ≥ 1 degree of freedom for s."""

_NODES = 96
_X_SPAN = 10.0  # integrate x over [0, _X_SPAN/√n]: exp(−n x²/2) < 2e-22 beyond
_K_BRACKET = (1e-6, 1e7)
_METHOD_ONE = "exact: noncentral t quantile (ISO 16269-6 one-sided, k1 = t'(n-1, z_p sqrt(n); gamma)/sqrt(n))"
_METHOD_TWO = ("exact: Odeh-Owen integral (ISO 16269-6 Annex F, m = 1), 96-node Gauss-Legendre, "
               "Brent root in k")


class ToleranceError(ValueError):
    """A tolerance factor or interval that cannot be computed from what was given (says what was expected)."""


def _check(n: int, coverage: float, confidence: float) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < MIN_SAMPLE_SIZE:
        raise ToleranceError(f"sample size: expected an integer n >= {MIN_SAMPLE_SIZE}, got {n!r}")
    for name, x in (("coverage p", coverage), ("confidence gamma", confidence)):
        if not (0.0 < float(x) < 1.0):
            raise ToleranceError(f"{name}: expected 0 < value < 1, got {x!r}")


@lru_cache(maxsize=512)
def one_sided_factor(n: int, coverage: float = DEFAULT_COVERAGE, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """k1: x̄ + k1·s is an upper (x̄ − k1·s a lower) limit for a proportion `coverage` at `confidence`."""
    _check(n, coverage, confidence)
    delta = float(stats.norm.ppf(coverage)) * math.sqrt(n)
    return float(stats.nct.ppf(confidence, n - 1, delta)) / math.sqrt(n)


@lru_cache(maxsize=512)
def two_sided_factor(n: int, coverage: float = DEFAULT_COVERAGE, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """k2: [x̄ − k2·s, x̄ + k2·s] contains a proportion `coverage` of the population with `confidence` (exact)."""
    _check(n, coverage, confidence)
    nu = n - 1
    t, w = np.polynomial.legendre.leggauss(_NODES)
    span = _X_SPAN / math.sqrt(n)
    x = (t + 1.0) * span / 2.0
    weights = w * span / 2.0 * 2.0 * math.sqrt(n / (2.0 * math.pi)) * np.exp(-n * x * x / 2.0)
    r2 = stats.ncx2.ppf(coverage, 1, x * x)  # Φ(x + r) − Φ(x − r) = p  ⇔  r² = χ'²₁(p; x²)

    def achieved(k: float) -> float:
        return float(np.sum(weights * special.chdtrc(nu, nu * r2 / (k * k)))) - confidence

    lo, hi = _K_BRACKET
    if achieved(lo) > 0 or achieved(hi) < 0:  # pragma: no cover - outside any p, γ in (0, 1)
        raise ToleranceError(f"two-sided factor: no k in [{lo}, {hi}] for n={n}, p={coverage}, gamma={confidence}")
    return float(optimize.brentq(achieved, lo, hi, xtol=1e-13, rtol=1e-14))


def tolerance_factor(n: int, sides: Sides, coverage: float = DEFAULT_COVERAGE,
                     confidence: float = DEFAULT_CONFIDENCE) -> float:
    """The factor for `sides`: k2 for "two-sided", k1 for "upper" or "lower"."""
    _check(n, coverage, confidence)
    if sides == "two-sided":
        return two_sided_factor(int(n), float(coverage), float(confidence))
    if sides in ("upper", "lower"):
        return one_sided_factor(int(n), float(coverage), float(confidence))
    raise ToleranceError(f"sides: expected 'two-sided', 'upper' or 'lower', got {sides!r}")


def limiting_factor(sides: Sides, coverage: float = DEFAULT_COVERAGE) -> float:
    """k as n → ∞: z_p (one-sided) or z_{(1+p)/2} (two-sided); no finite sample reaches it."""
    if not (0.0 < coverage < 1.0):
        raise ToleranceError(f"coverage p: expected 0 < value < 1, got {coverage!r}")
    q = (1.0 + coverage) / 2.0 if sides == "two-sided" else coverage
    return float(stats.norm.ppf(q))


def smallest_sample_size(max_factor: float, sides: Sides, coverage: float = DEFAULT_COVERAGE,
                         confidence: float = DEFAULT_CONFIDENCE, *, n_max: int = 10**5) -> int | None:
    """The smallest n ≥ 2 whose factor is ≤ `max_factor` (k falls as n grows), or None when no n ≤ n_max does
    (always None when max_factor ≤ the limiting factor). A planning aid: with spread s and margin d to the
    nearest bound, an interval fits inside once k ≤ d/s."""
    if not math.isfinite(max_factor):
        raise ToleranceError(f"max_factor: expected a finite number, got {max_factor!r}")
    if max_factor <= limiting_factor(sides, coverage):
        return None
    if tolerance_factor(MIN_SAMPLE_SIZE, sides, coverage, confidence) <= max_factor:
        return MIN_SAMPLE_SIZE
    lo, hi = MIN_SAMPLE_SIZE, MIN_SAMPLE_SIZE
    while tolerance_factor(hi, sides, coverage, confidence) > max_factor:  # exponential search, then bisection
        lo, hi = hi, hi * 2
        if hi > n_max:
            if tolerance_factor(n_max, sides, coverage, confidence) > max_factor:
                return None
            hi = n_max
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tolerance_factor(mid, sides, coverage, confidence) <= max_factor:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class ToleranceInterval:
    """A population interval from n unit values, widened by their measurement uncertainty (module docstring).

    `lower` and `upper` are the one-sided limits x̄ ∓ k·s_c for "upper"/"lower" intervals (each end a one-sided
    limit at p, γ: the fleet rule uses the far end to decide "wholly outside") and the two ends of the two-sided
    interval for "two-sided". The numbers are floats: the fleet rule rounds them outward to the reported digits
    before it decides.
    """

    sides: Sides
    n: int
    coverage: float
    confidence: float
    k: float
    mean: float
    s: float  # sample standard deviation of the unit values (n − 1)
    u_measurement: float  # ū: root-mean-square of the units' standard uncertainties
    extra_u: float  # a further term added in quadrature (e.g. the claim's t_eff), 0 if none
    s_combined: float  # √(s² + ū² + extra_u²)
    lower: float
    upper: float
    method: str

    @property
    def dof(self) -> int:
        return self.n - 1


def tolerance_interval(values: Sequence[float], uncertainties: Sequence[float] | None = None, *, sides: Sides,
                       coverage: float = DEFAULT_COVERAGE, confidence: float = DEFAULT_CONFIDENCE,
                       extra_u: float = 0.0) -> ToleranceInterval:
    """The tolerance interval of `values` (one per unit), widened by their standard `uncertainties`."""
    xs = [float(x) for x in values]
    n = len(xs)
    if n < MIN_SAMPLE_SIZE:
        raise ToleranceError(f"tolerance interval: expected at least {MIN_SAMPLE_SIZE} unit values, got {n}")
    if not all(math.isfinite(x) for x in xs):
        raise ToleranceError(f"tolerance interval: expected finite values, got {xs}")
    us = [0.0] * n if uncertainties is None else [float(u) for u in uncertainties]
    if len(us) != n:
        raise ToleranceError(f"tolerance interval: expected {n} uncertainties (one per value), got {len(us)}")
    if not all(math.isfinite(u) and u >= 0 for u in us):
        raise ToleranceError(f"tolerance interval: expected finite uncertainties >= 0, got {us}")
    if not (math.isfinite(extra_u) and extra_u >= 0):
        raise ToleranceError(f"extra_u: expected a finite number >= 0, got {extra_u!r}")
    k = tolerance_factor(n, sides, coverage, confidence)
    mean = math.fsum(xs) / n
    s = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    u_bar = math.sqrt(math.fsum(u * u for u in us) / n)
    s_c = math.sqrt(s * s + u_bar * u_bar + extra_u * extra_u)
    return ToleranceInterval(
        sides=sides, n=n, coverage=float(coverage), confidence=float(confidence), k=k, mean=mean, s=s,
        u_measurement=u_bar, extra_u=float(extra_u), s_combined=s_c, lower=mean - k * s_c, upper=mean + k * s_c,
        method=_METHOD_TWO if sides == "two-sided" else _METHOD_ONE,
    )
