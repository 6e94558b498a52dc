"""Between-lab comparison (ISO 13528): a robust consensus of the labs' results, each lab's z-score against it, and
the E_n number of a lab that measured against a traceable reference.

Why: labs that own chambers of the same kind can measure the same claim; whether a lab's result belongs with the
others is the proficiency-testing question. The consensus must not be pulled by the lab that is off, so it is the
robust mean and standard deviation of ISO 13528 Algorithm A (Huber's estimator with iterated scale), not the plain
mean and standard deviation.

Algorithm A (ISO 13528:2015 Annex C.3; Annex C.1 of the 2005 edition; from ISO 5725-5 §6.2), p results x_i:
  x* = median(x_i),  s* = 1.483·median|x_i − x*|                       initial values
  repeat:  δ = 1.5·s*;  x_i' = x_i clipped to [x* − δ, x* + δ]
           x* = mean(x_i'),  s* = 1.134·sd(x_i')  (sd with p − 1)
  until neither changes (here: both within 1e-12 relative, a stricter reading of the standard's "no change in the
  third significant figure"; at most MAX_ITERATIONS, the count recorded). 1.134 makes s* consistent with σ for
  normal data clipped at 1.5σ; 1.483 does the same for the median absolute deviation.

Scores (ISO 13528:2015 §9):
  z  = (x_i − x_pt) / σ_pt, with x_pt = x* and σ_pt = s* (the standard deviation for proficiency assessment taken
       from the participants' own robust spread, §8.7 … when no fitness-for-purpose value is given);
  u(x_pt) = 1.25·s*/√p (§7.7.3); when u(x_pt) > 0.3·σ_pt the standard asks for
  z' = (x_i − x_pt) / √(σ_pt² + u²(x_pt)) (§9.5), reported alongside z;
  E_n = (x_lab − x_ref) / √(U_lab² + U_ref²) (§9.7), U the expanded (k = 2) uncertainties.
  Interpretation (§9.4, §9.7): |z| ≤ 2 satisfactory, 2 < |z| < 3 questionable, |z| ≥ 3 unsatisfactory;
  |E_n| ≤ 1 satisfactory, > 1 unsatisfactory.

Few labs: σ_pt taken from the labs themselves says little when they are few. With two labs x* is their midpoint
and s* = 1.134·d/√2 for any difference d, so z = ±0.624 whatever they measured; with four labs one lab 60 Pa off
drags s* to 35 Pa and scores "satisfactory" (tests/test_fleet_verdict.py). Pass `sigma_pt` from elsewhere then —
the fleet's reproducibility s_R (calibration/precision.py; ISO 13528 §8.5 allows σ_pt from a precision
experiment) or a fitness-for-purpose value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Literal, Mapping

Performance = Literal["satisfactory", "questionable", "unsatisfactory"]

MAX_ITERATIONS = 200
_TOLERANCE = 1e-12
MAD_FACTOR = 1.483
CLIP_FACTOR = 1.5
SD_FACTOR = 1.134
U_PT_FACTOR = 1.25
Z_PRIME_THRESHOLD = 0.3


class ProficiencyError(ValueError):
    """Lab results the ISO 13528 statistics cannot use; names the lab or value and what was expected."""


@dataclass(frozen=True)
class RobustEstimate:
    """Algorithm A's result: robust mean x*, robust standard deviation s*, and how it got there."""

    x_star: float
    s_star: float
    p: int
    iterations: int
    converged: bool
    initial_x: float
    initial_s: float

    @property
    def u_x_star(self) -> float:
        """u(x_pt) = 1.25·s*/√p (ISO 13528:2015 §7.7.3)."""
        return U_PT_FACTOR * self.s_star / math.sqrt(self.p)


def _values(values: Mapping[str, float] | list[float] | tuple[float, ...]) -> list[float]:
    items = list(values.values()) if isinstance(values, Mapping) else list(values)
    try:
        xs = [float(x) for x in items]
    except (TypeError, ValueError):
        raise ProficiencyError(f"expected numbers, got {items!r}") from None
    if not all(math.isfinite(x) for x in xs):
        raise ProficiencyError(f"expected finite values, got {xs}")
    return xs


def algorithm_a(values: Mapping[str, float] | list[float] | tuple[float, ...], *,
                max_iterations: int = MAX_ITERATIONS) -> RobustEstimate:
    """ISO 13528 Algorithm A on at least 2 results; refuses data whose median absolute deviation is zero (more
    than half the results equal), where the algorithm has no scale to start from. `max_iterations` stops it
    early (to follow the standard's worked example step by step); `converged` says whether it had settled."""
    if max_iterations < 1:
        raise ProficiencyError(f"max_iterations: expected >= 1, got {max_iterations}")
    xs = _values(values)
    p = len(xs)
    if p < 2:
        raise ProficiencyError(f"Algorithm A: expected at least 2 results, got {p}")
    x_star = median(xs)
    s_star = MAD_FACTOR * median(abs(x - x_star) for x in xs)
    if s_star == 0:
        raise ProficiencyError(f"Algorithm A: the median absolute deviation of {p} results is 0 (more than half "
                               "are equal); there is no robust scale to start from")
    initial = (x_star, s_star)
    for iteration in range(1, max_iterations + 1):
        delta = CLIP_FACTOR * s_star
        clipped = [min(max(x, x_star - delta), x_star + delta) for x in xs]
        new_x = math.fsum(clipped) / p
        new_s = SD_FACTOR * math.sqrt(math.fsum((x - new_x) ** 2 for x in clipped) / (p - 1))
        done = (abs(new_x - x_star) <= _TOLERANCE * max(abs(new_x), s_star)
                and abs(new_s - s_star) <= _TOLERANCE * s_star)
        x_star, s_star = new_x, new_s
        if done:
            return RobustEstimate(x_star, s_star, p, iteration, True, *initial)
    return RobustEstimate(x_star, s_star, p, max_iterations, False, *initial)


def z_performance(z: float) -> Performance:
    a = abs(z)
    return "satisfactory" if a <= 2.0 else ("questionable" if a < 3.0 else "unsatisfactory")


def en_number(x_lab: float, expanded_lab: float, x_ref: float, expanded_ref: float) -> float:
    """E_n = (x_lab − x_ref)/√(U_lab² + U_ref²); refuses a zero denominator."""
    for name, u in (("U_lab", expanded_lab), ("U_ref", expanded_ref)):
        if not (math.isfinite(u) and u >= 0):
            raise ProficiencyError(f"E_n: expected {name} >= 0 and finite, got {u!r}")
    denom = math.hypot(expanded_lab, expanded_ref)
    if denom == 0:
        raise ProficiencyError("E_n: expected U_lab or U_ref > 0, got both 0")
    return (float(x_lab) - float(x_ref)) / denom


@dataclass(frozen=True)
class Reference:
    """A traceable reference value a lab measured against, with its expanded uncertainty (k = 2)."""

    value: float
    expanded: float


@dataclass(frozen=True)
class LabResult:
    """One lab's result for one claim: value and expanded uncertainty U (k = 2), and its reference if it had one."""

    lab: str
    value: float
    expanded: float
    reference: Reference | None = None


@dataclass(frozen=True)
class LabScore:
    lab: str
    value: float
    z: float
    z_prime: float
    z_performance: Performance
    en: float | None
    en_performance: Literal["satisfactory", "unsatisfactory"] | None


@dataclass(frozen=True)
class LabComparison:
    """The consensus and every lab's scores; `use_z_prime` says whether the standard asks for z' (u(x_pt) large)."""

    consensus: RobustEstimate
    sigma_pt: float
    u_x_pt: float
    use_z_prime: bool
    scores: tuple[LabScore, ...]
    method: str = "ISO 13528:2015 Algorithm A (Annex C.3); z and z' (9.4, 9.5); E_n (9.7)"


def compare_labs(results: Mapping[str, LabResult] | list[LabResult], *, sigma_pt: float | None = None) -> LabComparison:
    """Scores of every lab against the robust consensus of all of them (at least 2 labs).

    `sigma_pt` defaults to the consensus s*; pass a fitness-for-purpose value to use it instead."""
    labs = list(results.values()) if isinstance(results, Mapping) else list(results)
    names = [r.lab for r in labs]
    if len(set(names)) != len(names):
        raise ProficiencyError(f"lab comparison: expected unique lab names, got {names}")
    consensus = algorithm_a([r.value for r in labs])
    sigma = consensus.s_star if sigma_pt is None else float(sigma_pt)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ProficiencyError(f"sigma_pt: expected a finite value > 0, got {sigma_pt!r}")
    u_pt = consensus.u_x_star
    scores = []
    for r in labs:
        z = (r.value - consensus.x_star) / sigma
        z_prime = (r.value - consensus.x_star) / math.hypot(sigma, u_pt)
        en = None
        if r.reference is not None:
            en = en_number(r.value, r.expanded, r.reference.value, r.reference.expanded)
        scores.append(LabScore(r.lab, r.value, z, z_prime, z_performance(z), en,
                               None if en is None else ("satisfactory" if abs(en) <= 1.0 else "unsatisfactory")))
    return LabComparison(consensus, sigma, u_pt, u_pt > Z_PRIME_THRESHOLD * sigma, tuple(scores))
