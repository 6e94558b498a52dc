"""Uncertainty budgets (GUM, JCGM 100): components, combined u, effective degrees of freedom, coverage, expanded U.

Why a type of its own: a verdict is only auditable when the number behind its uncertainty can be taken apart.
A budget keeps every contribution with its evaluation type (A: from repeated readings; B: from a bound, a
certificate or a resolution step), its degrees of freedom and its sensitivity coefficient, so that a reader can
recompute u_c, ν_eff (Welch–Satterthwaite), k = t_p(ν_eff) and U = k·u_c from the record alone.

Numbers here are binary floats: a budget is statistics, not a decision. The decision (protocols/verdict.py)
rounds u to its reported digits and decides in exact decimal arithmetic.

Infinite degrees of freedom (a bound taken as certain, a certificate without stated ν) are `math.inf` in
memory and `null` in JSON (`to_dict`), because JSON has no infinity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence

from scipy import stats

EvaluationType = Literal["A", "B"]

DEFAULT_COVERAGE = 0.95


class BudgetError(ValueError):
    """A budget component or budget that cannot be built from what was given (says what was expected)."""


@dataclass(frozen=True)
class UncertaintyComponent:
    """One line of a budget: a standard uncertainty u of an input quantity, its ν and sensitivity coefficient.

    `u` is in the unit of the input quantity; `sensitivity` (c_i = ∂y/∂x_i) converts it into the unit of the
    result, so the contribution to the result is |c_i|·u.
    """

    name: str
    u: float
    dof: float
    evaluation: EvaluationType
    basis: str
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.u) or self.u < 0:
            raise BudgetError(f"component {self.name!r}: expected a finite u >= 0, got {self.u!r}")
        if not (self.dof > 0):  # also rejects NaN
            raise BudgetError(f"component {self.name!r}: expected degrees of freedom > 0 (or inf), got {self.dof!r}")
        if not math.isfinite(self.sensitivity):
            raise BudgetError(f"component {self.name!r}: expected a finite sensitivity, got {self.sensitivity!r}")
        if self.evaluation not in ("A", "B"):
            raise BudgetError(f"component {self.name!r}: expected evaluation 'A' or 'B', got {self.evaluation!r}")

    @property
    def contribution(self) -> float:
        """|c_i|·u_i: this component's standard uncertainty in the unit of the result."""
        return abs(self.sensitivity) * self.u

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "u": self.u,
            "dof": None if math.isinf(self.dof) else self.dof,
            "evaluation": self.evaluation,
            "basis": self.basis,
            "sensitivity": self.sensitivity,
            "contribution": self.contribution,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "UncertaintyComponent":
        try:
            dof = data["dof"]
            return cls(
                name=str(data["name"]),
                u=float(data["u"]),
                dof=math.inf if dof is None else float(dof),
                evaluation=data["evaluation"],
                basis=str(data.get("basis", "")),
                sensitivity=float(data.get("sensitivity", 1.0)),
            )
        except KeyError as exc:
            raise BudgetError(f"budget component: missing field {exc.args[0]!r} in {sorted(data)}") from None


# ------------------------------------------------------------------------------------------ component builders
def type_a(name: str, readings: Sequence[float] | Iterable[float], *, sensitivity: float = 1.0) -> UncertaintyComponent:
    """Type A from repeated readings of one quantity: u = s/√n (s with n−1 in the denominator), ν = n − 1.

    The readings must be finite: a NaN (an unset column) would silently shrink n, so it is refused instead.
    """
    values = [float(x) for x in readings]
    n = len(values)
    if n < 2:
        raise BudgetError(f"type A component {name!r}: expected at least 2 readings, got {n}")
    if not all(math.isfinite(x) for x in values):
        raise BudgetError(f"type A component {name!r}: expected finite readings, got a NaN or inf among {n}")
    mean = math.fsum(values) / n
    s = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1))
    return type_a_from_stats(name, s, n, sensitivity=sensitivity)


def type_a_from_stats(name: str, std: float, n: int, *, sensitivity: float = 1.0) -> UncertaintyComponent:
    """Type A from a sample standard deviation s of n readings: u = s/√n, ν = n − 1."""
    if n < 2:
        raise BudgetError(f"type A component {name!r}: expected n >= 2, got {n}")
    return UncertaintyComponent(
        name=name,
        u=float(std) / math.sqrt(n),
        dof=float(n - 1),
        evaluation="A",
        basis=f"s/sqrt(n) of n={n} repeated readings (s={float(std):.6g})",
        sensitivity=sensitivity,
    )


def rectangular(name: str, half_width: float, *, dof: float = math.inf, sensitivity: float = 1.0) -> UncertaintyComponent:
    """Type B from a bound ±a with no reason to prefer any value inside it: u = a/√3 (GUM 4.3.7).

    ν = ∞ by default: the bound is taken as certain (GUM G.4.3); pass a finite ν when it is itself uncertain.
    """
    a = float(half_width)
    if not math.isfinite(a) or a < 0:
        raise BudgetError(f"rectangular component {name!r}: expected a half-width >= 0, got {half_width!r}")
    return UncertaintyComponent(
        name=name, u=a / math.sqrt(3.0), dof=dof, evaluation="B",
        basis=f"rectangular bound +/-{a:.6g}, u = a/sqrt(3)", sensitivity=sensitivity,
    )


def certificate(
    name: str,
    *,
    u: float | None = None,
    expanded: float | None = None,
    k: float | None = None,
    dof: float = math.inf,
    sensitivity: float = 1.0,
) -> UncertaintyComponent:
    """Type B from a calibration certificate: either a standard u, or an expanded U with its stated k (u = U/k).

    ν is the certificate's stated degrees of freedom, ∞ when none is stated (GUM G.4.3 practice).
    """
    if (u is None) == (expanded is None):
        raise BudgetError(f"certificate component {name!r}: expected exactly one of u or expanded (with k)")
    if expanded is not None:
        if k is None or not (k > 0):
            raise BudgetError(f"certificate component {name!r}: expected a coverage factor k > 0 with U, got {k!r}")
        value, basis = float(expanded) / float(k), f"certificate U={float(expanded):.6g} at k={float(k):.6g}"
    else:
        value, basis = float(u), f"certificate standard uncertainty u={float(u):.6g}"
    return UncertaintyComponent(name=name, u=value, dof=dof, evaluation="B", basis=basis, sensitivity=sensitivity)


def resolution(name: str, step: float, *, sensitivity: float = 1.0) -> UncertaintyComponent:
    """Type B from a display/quantisation step q: a rectangular ±q/2, so u = q/√12 (GUM F.2.2.1), ν = ∞."""
    q = float(step)
    if not math.isfinite(q) or q < 0:
        raise BudgetError(f"resolution component {name!r}: expected a step >= 0, got {step!r}")
    return UncertaintyComponent(
        name=name, u=q / math.sqrt(12.0), dof=math.inf, evaluation="B",
        basis=f"resolution step {q:.6g}, rectangular +/-q/2, u = q/sqrt(12)", sensitivity=sensitivity,
    )


# ------------------------------------------------------------------------------------------------------ budget
def coverage_factor(dof: float, coverage: float = DEFAULT_COVERAGE) -> float:
    """k = t_p(ν): the two-sided Student-t quantile for coverage p; the normal quantile when ν = ∞."""
    if not (0 < coverage < 1):
        raise BudgetError(f"coverage probability: expected 0 < p < 1, got {coverage!r}")
    if not (dof > 0):
        raise BudgetError(f"coverage factor: expected degrees of freedom > 0 (or inf), got {dof!r}")
    q = 0.5 + coverage / 2.0
    if math.isinf(dof):
        return float(stats.norm.ppf(q))
    return float(stats.t.ppf(q, dof))


def welch_satterthwaite(contributions: Sequence[tuple[float, float]]) -> float:
    """ν_eff = u_c⁴ / Σ (c_i u_i)⁴/ν_i over (contribution, ν) pairs (GUM G.4.1); ∞ terms add nothing.

    When every finite-ν term contributes zero (or there are none), ν_eff = ∞.
    """
    nonzero = [(c, nu) for c, nu in contributions if c > 0]
    if len(nonzero) == 1:  # one contributor: ν_eff is its ν exactly (the formula would round 3 to 2.9999…)
        return float(nonzero[0][1])
    uc2 = math.fsum(c * c for c, _ in contributions)
    denom = math.fsum(c**4 / nu for c, nu in contributions if not math.isinf(nu) and c > 0)
    if denom == 0.0:
        return math.inf
    return uc2 * uc2 / denom


@dataclass(frozen=True)
class UncertaintyBudget:
    """A result's budget: its components, and the combined, effective-ν, coverage and expanded figures."""

    quantity: str
    unit: str
    components: tuple[UncertaintyComponent, ...] = field(default_factory=tuple)
    coverage: float = DEFAULT_COVERAGE

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.components))
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            raise BudgetError(f"budget {self.quantity!r}: component names must be unique, got {names}")
        if not (0 < self.coverage < 1):
            raise BudgetError(f"budget {self.quantity!r}: expected coverage 0 < p < 1, got {self.coverage!r}")

    @property
    def combined(self) -> float:
        """u_c = sqrt(Σ (c_i u_i)²) — uncorrelated inputs (GUM 5.1.2)."""
        return math.sqrt(math.fsum(c.contribution**2 for c in self.components))

    @property
    def effective_dof(self) -> float:
        return welch_satterthwaite([(c.contribution, c.dof) for c in self.components])

    @property
    def coverage_factor(self) -> float:
        return coverage_factor(self.effective_dof, self.coverage)

    @property
    def expanded(self) -> float:
        """U = k·u_c at the budget's coverage probability."""
        return self.coverage_factor * self.combined

    def to_dict(self) -> dict[str, Any]:
        nu = self.effective_dof
        return {
            "quantity": self.quantity,
            "unit": self.unit,
            "components": [c.to_dict() for c in self.components],
            "combined_u": self.combined,
            "effective_dof": None if math.isinf(nu) else nu,
            "coverage": self.coverage,
            "coverage_factor": self.coverage_factor,
            "expanded_u": self.expanded,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "UncertaintyBudget":
        """Rebuild from `to_dict` output; the derived figures are recomputed, never trusted from the file."""
        try:
            return cls(
                quantity=str(data["quantity"]),
                unit=str(data["unit"]),
                components=tuple(UncertaintyComponent.from_dict(c) for c in data["components"]),
                coverage=float(data.get("coverage", DEFAULT_COVERAGE)),
            )
        except KeyError as exc:
            raise BudgetError(f"budget: missing field {exc.args[0]!r} in {sorted(data)}") from None
