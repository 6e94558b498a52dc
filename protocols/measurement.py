"""A measurement as a protocol reports it: value and standard uncertainty in stated digits, with budget and status.

Why Decimal: the decision rule compares a distance with an uncertainty, and binary floats move that boundary
(metrology.md, "a trap at the boundary"). So `value` and `u` are `decimal.Decimal` holding exactly the digits
that are reported — the verdict is computed from those digits, and an auditor recomputing it from the printed
numbers gets the same answer. The statistics behind them (the budget) stay in float.

Rounding convention (GUM 7.2.6): u is given to two significant digits and the value to the same decimal place,
unless the caller states the number of decimals.

`status` keeps apparatus trouble apart from the claim: "link_lost" or "aborted" makes the verdict "error",
never "fail". Such a measurement carries no value (a half-received measurement is discarded, never returned).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any, Literal

from calibration.budget import UncertaintyBudget, coverage_factor

Status = Literal["ok", "link_lost", "aborted"]
STATUSES: tuple[str, ...] = ("ok", "link_lost", "aborted")


class MeasurementError(ValueError):
    """A measurement that cannot be built as given (names what was expected and what arrived)."""


def to_decimal(x: Decimal | float | int | str, what: str = "value") -> Decimal:
    """A number as the Decimal of its reported digits: floats via their shortest repr (0.08 → Decimal('0.08'))."""
    if isinstance(x, bool):
        raise MeasurementError(f"{what}: expected a number, got a bool")
    if isinstance(x, Decimal):
        d = x
    elif isinstance(x, float):  # also numpy.float64, whose repr would name the type
        d = Decimal(repr(float(x)))  # the shortest digits that round-trip, i.e. what was printed or typed
    elif isinstance(x, numbers.Integral):
        d = Decimal(int(x))
    elif isinstance(x, str):
        try:
            d = Decimal(str(x).strip())
        except InvalidOperation:
            raise MeasurementError(f"{what}: expected a decimal number, got {x!r}") from None
    else:
        raise MeasurementError(f"{what}: expected Decimal, float, int or str, got {type(x).__name__}")
    if not d.is_finite():
        raise MeasurementError(f"{what}: expected a finite number, got {x!r}")
    return d


def decimals_for(u: float | Decimal, significant: int = 2) -> int:
    """Decimal places that show u with `significant` significant digits (0.0801 → 3; 8.01 → 1; 801 → -1)."""
    u = to_decimal(u, "u")
    if u <= 0:
        raise MeasurementError(f"cannot choose digits from u = {u}; state decimals explicitly")
    exponent = u.adjusted()  # position of the leading digit
    return significant - 1 - exponent


def quantize(x: Decimal, decimals: int) -> Decimal:
    """Round half-even to `decimals` places (negative = tens, hundreds…)."""
    return x.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN)


@dataclass(frozen=True)
class Measurement:
    """One result of a protocol, in `unit`.

    value, u: Decimal, exactly the reported digits (None only when status is not "ok").
    dof: effective degrees of freedom of u (math.inf for a purely Type B u); k: coverage factor for the
    budget's coverage (default 95 %), reported but not used by the decision (which is at standard-uncertainty
    level, guard band w = c). matched/unmatched_conditions: names of the claim's conditions the protocol
    staged or could not stage.
    """

    value: Decimal | None
    unit: str
    u: Decimal | None
    budget: UncertaintyBudget | None = None
    n: int | None = None
    dof: float = math.inf
    k: float | None = None
    matched_conditions: list[str] = field(default_factory=list)
    unmatched_conditions: list[str] = field(default_factory=list)
    status: Status = "ok"
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise MeasurementError(f"status: expected one of {STATUSES}, got {self.status!r}")
        if self.status == "ok":
            if self.value is None or self.u is None:
                raise MeasurementError("a measurement with status 'ok' needs a value and a u")
        if self.value is not None:
            object.__setattr__(self, "value", to_decimal(self.value, "value"))
        if self.u is not None:
            u = to_decimal(self.u, "u")
            if u < 0:
                raise MeasurementError(f"u: expected a standard uncertainty >= 0, got {u}")
            object.__setattr__(self, "u", u)
        if not (self.dof > 0):
            raise MeasurementError(f"dof: expected degrees of freedom > 0 (or inf), got {self.dof!r}")
        overlap = set(self.matched_conditions) & set(self.unmatched_conditions)
        if overlap:
            raise MeasurementError(f"conditions both matched and unmatched: {sorted(overlap)}")

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_values(
        cls,
        value: float | Decimal | str,
        u: float | Decimal | str,
        unit: str,
        *,
        decimals: int | None = None,
        dof: float = math.inf,
        coverage: float = 0.95,
        **kwargs: Any,
    ) -> "Measurement":
        """Round to reported digits: u to 2 significant digits and value to the same place (or `decimals`)."""
        v, uu = to_decimal(value, "value"), to_decimal(u, "u")
        places = decimals if decimals is not None else decimals_for(uu)
        return cls(
            value=quantize(v, places),
            unit=unit,
            u=quantize(uu, places),
            dof=dof,
            k=coverage_factor(dof, coverage),
            **kwargs,
        )

    @classmethod
    def from_budget(
        cls, value: float | Decimal | str, budget: UncertaintyBudget, *, decimals: int | None = None, **kwargs: Any
    ) -> "Measurement":
        """Value plus a budget: u = u_c, dof = ν_eff, k = t_p(ν_eff), all rounded to reported digits."""
        m = cls.from_values(
            value, budget.combined, budget.unit, decimals=decimals, dof=budget.effective_dof,
            coverage=budget.coverage, **kwargs,
        )
        return replace(m, budget=budget)

    @classmethod
    def failed(cls, unit: str, status: Status, reason: str, **details: Any) -> "Measurement":
        """An apparatus failure: no value, a status other than "ok" and the reason."""
        if status == "ok":
            raise MeasurementError("Measurement.failed needs a status other than 'ok'")
        return cls(value=None, unit=unit, u=None, status=status, details={"reason": reason, **details})

    # ------------------------------------------------------------------ reporting
    @property
    def decimals(self) -> int | None:
        """Decimal places of the reported value (from its exponent)."""
        if self.value is None:
            return None
        return -int(self.value.as_tuple().exponent)

    def report(self) -> str:
        """'945.285 ± 0.080 hPa (k = 3.18, ν = 3)' — the reported digits, never re-rounded floats."""
        if self.status != "ok" or self.value is None:
            reason = self.details.get("reason")
            return f"no value ({self.status}: {reason})" if reason else f"no value ({self.status})"
        tail = []
        if self.k is not None:
            tail.append(f"k = {self.k:.2f}")
        tail.append("ν = ∞" if math.isinf(self.dof) else f"ν = {self.dof:.3g}")
        return f"{self.value} ± {self.u} {self.unit} ({', '.join(tail)})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; value and u are strings so that their digits survive (945.280 stays 945.280)."""
        return {
            "value": None if self.value is None else str(self.value),
            "unit": self.unit,
            "u": None if self.u is None else str(self.u),
            "n": self.n,
            "dof": None if math.isinf(self.dof) else self.dof,
            "k": self.k,
            "budget": None if self.budget is None else self.budget.to_dict(),
            "matched_conditions": list(self.matched_conditions),
            "unmatched_conditions": list(self.unmatched_conditions),
            "status": self.status,
            "details": dict(self.details),
        }
