"""What one definitive verdict says in the report, computed once: its table row and its figure row print these.

Why one record: a reader checks a figure row against its table row, and found different numbers when each was
worked out on its own (the figure drew k·c, the comparison's uncertainty with the claim's tolerance folded in, as if
it were the measurement's U). Here the measurement is m ± U, its own expanded uncertainty (U = k·u, k the
measurement's coverage factor for 95 %), written once at the verdict's resolution; the claim's limits are read
from the claim by the decision rule's own reading (protocols.verdict.bounds); and the decision band is the one the
rule used: the guard band ±c around each bound for a bound claim, the compatibility band s ± c for a point claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agent.scoring.report_format import DASH, k_text, number, places_of, unit_text, verdict_places, with_u


def _float(x: Any) -> float | None:
    try:
        return float(x) if x is not None and x != "" and not isinstance(x, bool) else None
    except (TypeError, ValueError):
        return None


def measurement_text(m: dict[str, Any] | None, places: int | None = None) -> str:
    """A measurement ({value, u, k, unit}) as the report writes it everywhere: 'm ± U unit (k = …)', U = k·u its
    own expanded uncertainty (95 %), both at `places` (default: the places of the reported m); a record without k:
    'm ± u unit (u; k not recorded)'. A dash when nothing was measured."""
    m = m or {}
    if m.get("value") is None:
        return DASH
    unit = unit_text(m.get("unit"))
    if places is None:
        places = places_of(m["value"])
    k, u = _float(m.get("k")), _float(m.get("u"))
    if k is None or u is None:
        return f"{with_u(m['value'], m.get('u'), unit, places=places)} (u; k not recorded)"
    return f"{with_u(m['value'], k * u, unit, places=places)} ({k_text(k)})"


def expanded_text(r: dict[str, Any]) -> str:
    """A verdict's measurement (its `measured`, in the claim's unit) at the verdict's resolution: 'm ± U (k = …)'."""
    return measurement_text(r.get("measured"), verdict_places(r))


@dataclass(frozen=True)
class VerdictRow:
    """One definitive verdict as drawn and tabled. Numbers in the claim's unit; texts at the verdict's resolution."""

    label: str  # the claim id, and " (station)" when only the station's verdict is definitive
    claim_id: str
    verdict: str
    unit: str
    semantics: str | None  # "range" | "upper_bound" | "lower_bound" | "point" (None: the claim is not in the pool)
    m: float
    U: float  # the measurement's expanded uncertainty (its u when k is not recorded)
    k: float | None
    c: float | None
    d: float | None
    low: float | None
    high: float | None
    point: float | None  # s of a point claim
    t: float | None  # the printed tolerance of a point claim (its band s ± t)
    measured: str  # 'm ± U unit (k = …)'
    c_text: str
    d_text: str
    limits: str  # the claim's limits in words ('300 to 1200 hPa', '≤ 0.5 updates', '0 ± 100 Pa')
    stated: dict[str, str]  # each limit as the claim states it ('low': '300'), and its tolerance ('t': '100')

    @property
    def bands(self) -> list[tuple[float, float]]:
        """The decision zone the rule used, as intervals in the claim's unit: around each bound its guard band
        [b − c, b + c] (inconclusive inside, closed), or for a point claim the compatibility band [s − c, s + c]."""
        if self.c is None:
            return []
        if self.semantics == "point":
            return [] if self.point is None else [(self.point - self.c, self.point + self.c)]
        return [(b - self.c, b + self.c) for b in (self.low, self.high) if b is not None]

    @property
    def allowed(self) -> tuple[float | None, float | None] | None:
        """The interval the claim allows (a missing side: unbounded); None when the claim is not known."""
        if self.semantics is None:
            return None
        if self.semantics == "point":
            if self.point is None:
                return None
            return (self.point - (self.t or 0.0), self.point + (self.t or 0.0))
        return (self.low, self.high)

    @property
    def u_beyond_limits(self) -> bool:
        """m ± U reaches past a limit the claim states. For a pass this is what a guard band of c (the rule decides
        at standard-uncertainty level, w = c) allows when c < margin ≤ U: said in the row, never hidden."""
        allowed = self.allowed
        if allowed is None:
            return False
        lo, hi = allowed
        return (lo is not None and self.m - self.U < lo) or (hi is not None and self.m + self.U > hi)


def limits_text(semantics: str | None, low: Decimal | None, high: Decimal | None, point: Decimal | None,
                t: Decimal | None, unit: str) -> str:
    """The claim's limits as a reader says them, in the claim's stated digits."""
    tail = f" {unit}" if unit else ""
    if semantics == "range":
        return f"{low} to {high}{tail}"
    if semantics == "upper_bound":
        return f"≤ {high}{tail}"
    if semantics == "lower_bound":
        return f"≥ {low}{tail}"
    if semantics == "point":
        return f"{point} ± {t}{tail}" if t else f"= {point}{tail}"
    return "not in the claim pool"


def verdict_row(label: str, r: dict[str, Any], claim: Any | None) -> VerdictRow:
    """The row of verdict record `r` (checks.json / station_checks.json) against `claim` (a protocols.claims.Claim
    from the run's claim pool, or None when the pool does not hold it)."""
    from protocols.verdict import VerdictError, bounds

    measured = r.get("measured") or {}
    places = verdict_places(r)
    unit = unit_text(measured.get("unit") or r.get("claim_unit"))
    m, u, k = float(measured["value"]), _float(measured.get("u")) or 0.0, _float(measured.get("k"))
    semantics, low, high, point, t = None, None, None, None, None
    if claim is not None:
        try:
            semantics, low, high, point = bounds(claim)
        except VerdictError:
            semantics = None
        tol = getattr(claim, "tolerance", None)
        if semantics == "point" and tol is not None and getattr(tol, "meaning", "none") != "none":
            t = tol.value
    stated = {name: str(v) for name, v in (("low", low), ("high", high), ("s", point)) if v is not None}
    if point is not None and t is not None:  # a point claim allows s ± t: its limits as the claim's digits give them
        stated.update(low=str(point - t), high=str(point + t))
    tol = getattr(claim, "tolerance", None)
    if tol is not None and getattr(tol, "meaning", "none") != "none":
        stated["t"] = str(tol.value)
    return VerdictRow(
        label=label, claim_id=str(r.get("claim_id")), verdict=str(r.get("verdict")), unit=unit,
        semantics=semantics, m=m, U=k * u if k is not None else u, k=k,
        c=_float(r.get("combined_uncertainty")), d=_float(r.get("distance")),
        low=_float(low), high=_float(high), point=_float(point), t=_float(t),
        measured=expanded_text(r),
        c_text=_in_unit(r.get("combined_uncertainty"), places, unit), d_text=_in_unit(r.get("distance"), places, unit),
        limits=limits_text(semantics, low, high, point, t, unit), stated=stated)


def _in_unit(x: Any, places: int | None, unit: str) -> str:
    text = number(x, places=places)
    return f"{text} {unit}" if unit and text != DASH else text
