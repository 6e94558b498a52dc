"""The decision rule: a claim and a measurement in, pass / inconclusive / fail / error out, with everything an
auditor needs to recompute it.

The rule (metrology.md; ILAC-G8:2019 §4.2.3 non-binary statement with guard band w = c; fixed before measuring):

    t_eff = t            (tolerance.entry == "as_stated")
          = t / √3       (tolerance.entry == "rectangular": a ±t bound read as a rectangular distribution)
          = 0            (tolerance.meaning == "none")
    c     = sqrt(u² + t_eff²)                      combined standard uncertainty of the comparison

  Bound claims (kind "range", "max_rating"; "accuracy" claims stated as bounds, value None; and "typical" claims
  with a printed Min. and/or Max., graded against those printed limits — the Typ. beside them is not a limit):
    d = max(low − m, m − high)   (two-sided; a missing side is left out: d = m − high or d = low − m)
    d is the signed distance by which m violates the claim: negative inside the bounds, by the margin.
      d < −c        → pass  (zone "pass": the claim holds with margin greater than c)
      −c ≤ d ≤ 0    → inconclusive (zone "conditional_pass")
      0 < d ≤ c     → inconclusive (zone "conditional_fail")
      d > c         → fail  (zone "fail")
    Boundary convention: CLOSED guard band — |d| = c exactly is inconclusive; the band includes its edges.
    m exactly on a bound (d = 0) is in the conditional-pass zone (the bounds are inclusive).

  Point claims (kind "accuracy" with a stated value s and its printed band t; and "typical" with no printed
  Min./Max., see below):
    d = |m − s|; this is the VIM 2.47 metrological-compatibility test at standard-uncertainty level (|E_n| ≤ 1):
      d ≤ c  → pass (zone "pass": m is compatible with s)
      d > c  → fail (zone "fail": incompatible)
    A point has no width, so "holds with margin greater than c" can never happen and the guard-band rule
    above would make every point claim inconclusive or fail; the compatibility test is the rule the standards
    name for it. The equality |m − s| = c is compatible (pass) because the VIM test is "≤". There are no
    conditional zones for a point claim: a numerical point verdict is never inconclusive — but a point claim
    is still inconclusive when a decisive condition is unmatched, like any other.

  Typical-only claims (kind "typical", a Typ. with no printed Min./Max.; rule version 1.1):
    A typical value describes the population of parts, not a guarantee for each one; a single unit that differs
    from it does not falsify it, and one that agrees with it does not confirm it. So the verdict is always
    inconclusive with class "typical-not-guaranteed" (never fail, never pass on one unit). The compatibility
    test is still computed and reported (`numeric_verdict` pass = compatible, fail = incompatible), with the
    signed deviation m − s in `deviation_from_typical` and its expanded uncertainty U = k·c at 95 %.
    Version 1.0 graded these as points and failed three simulated supply currents for one unit's offset.

Exactness: d and c are decided in exact rational arithmetic from the Decimal digits of m, u, the bounds and t
(c is compared through c², so even t/√3 is exact). m = 945.285, u = 0.080 and bounds 945.365 / 945.205 give
|d| = c exactly on both sides. With `resolution` given, d and c are instead first rounded half-even to that
step (the other convention metrology.md allows) and then compared exactly; the step is recorded.

Order of checks:
1. A measurement whose status is not "ok" → "error" (an apparatus problem, never a fail).
2. No measurement at all (`measurement=None`, nothing was staged): a decisive condition the chamber cannot
   realise (`unmatchable`) → inconclusive with that condition's class; otherwise, a claim with no protocol →
   inconclusive "engagement-only" (the chamber does not stage the component); a claim with a protocol but no
   measurement → "error".
3. The numbers (d against c) are always computed when there is a measurement and reported as
   `numeric_verdict`/`numeric_zone`; but a decisive condition that is not matched makes the verdict
   inconclusive with class "no-traceable-reference" (condition kind "reference"), "unmatched-stimulus" (kind
   "stimulus" or "environment": something the chamber cannot apply) or "unmatched-observable" (kind
   "observable"), in that priority when several are missing. Unmatched means: `unmatchable` on the claim
   (unless the measurement names the condition in `matched_conditions`: an instrument realised it), or
   listed in `measurement.unmatched_conditions`, or not confirmed in `measurement.matched_conditions` (by
   condition name or by its chamber variable) — an unconfirmed condition is not assumed. `zone` is then None.
4. A typical-only claim with all decisive conditions matched → inconclusive "typical-not-guaranteed" (above).
5. A numerical inconclusive has class "resolution-limited": the comparison's uncertainty c cannot resolve m
   from the bound (`capability_precheck` tells whether that was foreseeable: an empty pass zone is noted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from typing import Any, Literal, Protocol, Sequence

from calibration.budget import coverage_factor, welch_satterthwaite
from protocols.measurement import Measurement, to_decimal
from protocols.units import SI_PREFIX as _PREFIX  # the one exact prefix table

RULE_NAME = "chamberlab guard-band rule (ILAC-G8:2019 4.2.3, w = c; VIM 2.47 compatibility for point claims)"
RULE_VERSION = "1.1"
BOUNDARY_CONVENTION = "closed: |d| = c is inconclusive for bound claims; |m - s| = c is compatible (pass) for point claims"
COVERAGE = 0.95
RESOLUTION_RATIO_THRESHOLD = Fraction(1)
"""capability_precheck: resolution-limited when (acceptance half-width or t) / achievable c ≤ this ratio.

Why 1: for a bound claim a pass needs m at least c inside both bounds, so when the half-width (high − low)/2
is ≤ c the pass zone is empty — staging can only yield inconclusive or fail. For a point claim with a stated
tolerance t, when u ≥ t the compatibility test cannot tell a unit within tolerance from one outside it."""

VerdictName = Literal["pass", "inconclusive", "fail", "error"]
Zone = Literal["pass", "conditional_pass", "conditional_fail", "fail"]
InconclusiveClass = Literal[
    "engagement-only", "no-traceable-reference", "unmatched-stimulus", "unmatched-observable", "resolution-limited",
    "typical-not-guaranteed", "chamber-not-connected",
]
VERDICT_ORDER: dict[str, int] = {"pass": 0, "inconclusive": 1, "fail": 2}

_PRECISION = 50  # digits for displaying c (the decision itself is exact)
_CLASS_PRIORITY: tuple[str, ...] = ("no-traceable-reference", "unmatched-stimulus", "unmatched-observable")
_KIND_CLASS = {
    "reference": "no-traceable-reference",
    "stimulus": "unmatched-stimulus",
    "environment": "unmatched-stimulus",
    "observable": "unmatched-observable",
}


class VerdictError(ValueError):
    """A claim/measurement pair the rule cannot be applied to (shape or unit), naming what was expected."""


class _Tolerance(Protocol):
    value: Decimal
    meaning: str
    entry: str


class _Condition(Protocol):
    name: str
    decisive: bool
    unmatchable: str | None
    kind: str


class ClaimLike(Protocol):
    """The attributes of protocols.claims.Claim that the rule reads."""

    id: str
    kind: str
    value: Decimal | None
    low: Decimal | None
    high: Decimal | None
    unit: str
    tolerance: _Tolerance
    conditions: Sequence[_Condition]
    protocol: str | None


@dataclass(frozen=True)
class Verdict:
    """The decision and everything needed to recompute it. Decimals are exact; `to_dict` prints them as strings.

    `zone` is the ILAC-G8 zone of a verdict decided by the numbers; it is None when the verdict was decided
    before them (error, engagement-only, an unmatched decisive condition) — `numeric_zone` still says where
    the numbers fell whenever there was a measurement.
    """

    claim_id: str
    verdict: VerdictName
    reason: str
    zone: Zone | None = None
    semantics: str | None = None  # "range" | "upper_bound" | "lower_bound" | "point"
    distance: Decimal | None = None
    combined_uncertainty: Decimal | None = None
    measured: Decimal | None = None
    u: Decimal | None = None
    unit: str | None = None
    tolerance: Decimal | None = None
    tolerance_entry: str | None = None  # how t entered c, in words
    tolerance_contribution: Decimal | None = None  # t_eff
    k: float | None = None
    dof: float | None = None  # ν_eff of c (Welch–Satterthwaite over u's ν and t's ∞)
    expanded_uncertainty: float | None = None  # k·c, for the 95 % statement; not used by the decision
    coverage: float = COVERAGE
    resolution: Decimal | None = None
    inconclusive_class: InconclusiveClass | None = None
    numeric_verdict: VerdictName | None = None  # what d against c alone says (before the condition checks)
    numeric_zone: Zone | None = None
    deviation_from_typical: Decimal | None = None  # signed m − s of a typical-only claim (its U: expanded_uncertainty)
    matched_conditions: tuple[str, ...] = ()
    unmatched_conditions: tuple[str, ...] = ()
    measurement_status: str | None = None
    rule: str = RULE_NAME
    rule_version: str = RULE_VERSION
    boundary_convention: str = BOUNDARY_CONVENTION
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        def s(x: Decimal | None) -> str | None:
            return None if x is None else str(x)

        return {
            "claim_id": self.claim_id,
            "verdict": self.verdict,
            "reason": self.reason,
            "zone": self.zone,
            "semantics": self.semantics,
            "distance": s(self.distance),
            "combined_uncertainty": s(self.combined_uncertainty),
            "measured": s(self.measured),
            "u": s(self.u),
            "unit": self.unit,
            "tolerance": s(self.tolerance),
            "tolerance_entry": self.tolerance_entry,
            "tolerance_contribution": s(self.tolerance_contribution),
            "k": self.k,
            "dof": None if self.dof is None or math.isinf(self.dof) else self.dof,
            "expanded_uncertainty": self.expanded_uncertainty,
            "coverage": self.coverage,
            "resolution": s(self.resolution),
            "inconclusive_class": self.inconclusive_class,
            "numeric_verdict": self.numeric_verdict,
            "numeric_zone": self.numeric_zone,
            "deviation_from_typical": s(self.deviation_from_typical),
            "matched_conditions": list(self.matched_conditions),
            "unmatched_conditions": list(self.unmatched_conditions),
            "measurement_status": self.measurement_status,
            "rule": self.rule,
            "rule_version": self.rule_version,
            "boundary_convention": self.boundary_convention,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class CapabilityCheck:
    """Whether a claim is resolution-limited before anything is staged."""

    claim_id: str
    resolution_limited: bool
    applicable: bool
    ratio: Decimal | None  # half-width (or t) / achievable c (or u)
    threshold: Decimal
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "resolution_limited": self.resolution_limited,
            "applicable": self.applicable,
            "ratio": None if self.ratio is None else str(self.ratio),
            "threshold": str(self.threshold),
            "reason": self.reason,
        }


# ------------------------------------------------------------------------------------------------- helpers
_BASE_UNITS = ("Pa", "A", "V", "W", "Hz", "s", "lx", "bar", "g")


def _split_unit(unit: str) -> tuple[Fraction, str] | None:
    unit = unit.strip()
    for base in sorted(_BASE_UNITS, key=len, reverse=True):
        if unit.endswith(base) and unit[: -len(base)] in _PREFIX:
            return _PREFIX[unit[: -len(base)]], base
    return None


def unit_scale(from_unit: str, to_unit: str) -> Fraction:
    """Exact factor converting a number in `from_unit` into `to_unit` (same unit → 1; Pa → hPa → 1/100)."""
    if from_unit.strip() == to_unit.strip():
        return Fraction(1)
    a, b = _split_unit(from_unit), _split_unit(to_unit)
    if a is None or b is None or a[1] != b[1]:
        raise VerdictError(f"unit: expected the measurement in {to_unit!r} or a prefixed form of it, got {from_unit!r}")
    return a[0] / b[0]


def _frac(x: Decimal) -> Fraction:
    return Fraction(x)


def _dec(x: Fraction) -> Decimal:
    """A Fraction as a Decimal: exact when it terminates (which it does for the sums of decimals used here)."""
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        return Decimal(x.numerator) / Decimal(x.denominator)


def _sqrt_dec(x: Fraction) -> Decimal:
    """√x as a Decimal to 50 digits (exact when x is the square of a terminating decimal)."""
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        return (Decimal(x.numerator) / Decimal(x.denominator)).sqrt()


def _places(*xs: Decimal | None) -> int:
    """The finest decimal place among the reported numbers (for showing exact results with their zeros)."""
    return max([0] + [-int(x.as_tuple().exponent) for x in xs if x is not None])


def _show(x: Decimal, places: int) -> Decimal:
    """x with `places` decimals when that is exact (0.08 → 0.080), else x unchanged (never rounds)."""
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        q = x.quantize(Decimal(1).scaleb(-places))
    return q if q == x else x


def _tolerance_terms(claim: ClaimLike) -> tuple[Fraction, Fraction, str, Decimal]:
    """(t, t_eff², how t entered, t_eff as Decimal) from the claim's tolerance."""
    tol = getattr(claim, "tolerance", None)
    meaning = getattr(tol, "meaning", "none") if tol is not None else "none"
    raw = getattr(tol, "value", None) if tol is not None else None
    if meaning == "none" or raw is None:
        return Fraction(0), Fraction(0), "none: no spec tolerance stated (t = 0)", Decimal(0)
    t = _frac(to_decimal(raw, "tolerance.value"))
    if t < 0:
        raise VerdictError(f"claim {claim.id}: tolerance.value must be >= 0, got {raw}")
    entry = getattr(tol, "entry", "as_stated")
    if entry == "as_stated":
        return t, t * t, f"as stated: t_eff = t = {raw} ({meaning})", to_decimal(raw)
    if entry == "rectangular":
        return t, t * t / 3, f"rectangular: t_eff = t/sqrt(3) = {raw}/sqrt(3) ({meaning})", _sqrt_dec(t * t / 3)
    raise VerdictError(f"claim {claim.id}: tolerance.entry expected 'as_stated' or 'rectangular', got {entry!r}")


def _decisive_unmatched(claim: ClaimLike, measurement: Measurement | None) -> list[tuple[str, str, str]]:
    """(name, class, why) for each decisive condition the measurement did not report as matched.

    A protocol reports a condition as matched by its name or by the chamber variable it staged. A condition
    marked `unmatchable` (by the chamber alone) counts as matched only when the measurement names it as matched
    (an instrument protocol realised it); with no measurement, or one that does not name it, it stays unmatched."""
    matched = set(measurement.matched_conditions) if measurement is not None else set()
    reported_unmatched = set(measurement.unmatched_conditions) if measurement is not None else set()
    out = []
    for cond in getattr(claim, "conditions", None) or []:
        if not getattr(cond, "decisive", False):
            continue
        name = cond.name
        unmatchable = getattr(cond, "unmatchable", None)
        if name in matched and name not in reported_unmatched:
            continue  # reported matched by name: an instrument can realise what the chamber alone cannot
        if unmatchable:
            why = f"unmatchable: {unmatchable}"
        elif name in reported_unmatched:
            why = "reported unmatched by the protocol"
        elif name not in matched and (getattr(cond, "variable", None) or name) not in matched:
            why = "not reported as matched by the protocol"
        else:
            continue
        kind = getattr(cond, "kind", "stimulus")
        out.append((name, _KIND_CLASS.get(kind, "unmatched-stimulus"), why))
    return out


def _bounds(claim: ClaimLike) -> tuple[str, Decimal | None, Decimal | None, Decimal | None]:
    """(semantics, low, high, point value) by claim kind; raises VerdictError on a shape the rule cannot use."""
    kind = claim.kind
    low = None if claim.low is None else to_decimal(claim.low, "claim.low")
    high = None if claim.high is None else to_decimal(claim.high, "claim.high")
    value = None if claim.value is None else to_decimal(claim.value, "claim.value")
    if kind == "typical" and value is not None and low is None and high is None:
        return "point", None, None, value  # typical-only: compared as a point, decided by verdict() (never fail)
    if kind == "accuracy" and value is not None:
        return "point", None, None, value
    if kind in ("range", "max_rating", "typical", "accuracy"):
        if low is None and high is None:
            if kind == "max_rating" and value is not None:  # a rating stated as one number is an upper limit
                return "upper_bound", None, value, None
            raise VerdictError(f"claim {claim.id}: kind {kind!r} needs low and/or high, got neither")
        if low is not None and high is not None:
            if low > high:
                raise VerdictError(f"claim {claim.id}: expected low <= high, got {low} > {high}")
            return "range", low, high, None
        return ("upper_bound", None, high, None) if high is not None else ("lower_bound", low, None, None)
    raise VerdictError(f"claim {claim.id}: kind expected one of typical/range/accuracy/max_rating, got {kind!r}")


bounds = _bounds
"""(semantics, low, high, point value) of a claim as the rule reads it: public, so the fleet rule
(calibration.fleet_verdict.population_limits) is given the same reading instead of a second copy of it."""


def signed_distance(semantics: str, m: Fraction, low: Fraction | None, high: Fraction | None,
                    point: Fraction | None) -> Fraction:
    """d by which m violates the claim (exact). Negative inside bounds by the margin; |m − s| for a point."""
    if semantics == "point":
        assert point is not None
        return abs(m - point)
    candidates = []
    if low is not None:
        candidates.append(low - m)
    if high is not None:
        candidates.append(m - high)
    return max(candidates)


def classify(semantics: str, d: Fraction, c2: Fraction) -> tuple[VerdictName, Zone]:
    """The rule on exact numbers: d compared with c through c² (c ≥ 0), closed guard band."""
    d2 = d * d
    if semantics == "point":
        return ("pass", "pass") if d2 <= c2 else ("fail", "fail")
    if d < 0 and d2 > c2:
        return "pass", "pass"
    if d > 0 and d2 > c2:
        return "fail", "fail"
    return "inconclusive", ("conditional_pass" if d <= 0 else "conditional_fail")


def _round_to(x: Decimal, step: Decimal) -> Decimal:
    """x rounded half-even to a multiple of `step`, shown with the step's decimals."""
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        return _show((x / step).to_integral_value(rounding=ROUND_HALF_EVEN) * step, _places(step))


def _scale_places(scale: Fraction) -> int:
    """Extra decimals a power-of-ten unit conversion adds (Pa → hPa: 2)."""
    places = 0
    while scale.denominator != 1 and places < 12:
        scale *= 10
        places += 1
    return places


# ------------------------------------------------------------------------------------------------- the rule
def verdict(claim: ClaimLike, measurement: Measurement | None, *, resolution: Decimal | float | str | None = None) -> Verdict:
    """Decide `claim` against `measurement` (see the module docstring for the rule and its order of checks)."""
    claim_id = str(claim.id)
    status = None if measurement is None else measurement.status
    if measurement is not None and measurement.status != "ok":
        reason = measurement.details.get("reason") or "the run did not complete"
        return Verdict(claim_id=claim_id, verdict="error", measurement_status=status,
                       reason=f"apparatus status {measurement.status!r}: {reason}; an error is not a fail",
                       matched_conditions=tuple(measurement.matched_conditions),
                       unmatched_conditions=tuple(measurement.unmatched_conditions))
    if measurement is None:
        intrinsic = [x for x in _decisive_unmatched(claim, None) if x[2].startswith("unmatchable")]
        if intrinsic:
            return _condition_inconclusive(claim_id, intrinsic, (), base={"measurement_status": None}, notes=[],
                                           numeric=None)
        if getattr(claim, "protocol", None) is None:
            return Verdict(claim_id=claim_id, verdict="inconclusive", inconclusive_class="engagement-only",
                           reason="no chamber protocol stages this component (engagement only)")
        return Verdict(claim_id=claim_id, verdict="error",
                       reason=f"protocol {claim.protocol!r} produced no measurement")

    semantics, low, high, point = _bounds(claim)
    scale = unit_scale(measurement.unit, claim.unit)
    assert measurement.value is not None and measurement.u is not None  # status "ok" guarantees both
    m = _frac(measurement.value) * scale
    u = _frac(measurement.u) * scale
    t, t_eff2, how_t, t_eff_dec = _tolerance_terms(claim)
    c2 = u * u + t_eff2
    d = signed_distance(semantics, m, None if low is None else _frac(low), None if high is None else _frac(high),
                        None if point is None else _frac(point))
    places = _places(measurement.value, measurement.u, low, high, point,
                     None if t == 0 else to_decimal(claim.tolerance.value)) + _scale_places(scale)
    m_dec, u_dec = _show(_dec(m), places), _show(_dec(u), places)
    d_dec, c_dec = _show(_dec(d), places), _show(_sqrt_dec(c2), places)
    notes: list[str] = []
    if scale != 1:
        notes.append(f"measurement converted from {measurement.unit} to {claim.unit} (exact factor {scale})")
    res_dec = None
    if resolution is not None:
        res_dec = to_decimal(resolution, "resolution")
        if res_dec <= 0:
            raise VerdictError(f"resolution: expected a step > 0, got {resolution!r}")
        d_dec, c_dec = _round_to(_dec(d), res_dec), _round_to(_sqrt_dec(c2), res_dec)
        d_cmp, c2_cmp = _frac(d_dec), _frac(c_dec) ** 2
        notes.append(f"d and c rounded half-even to {res_dec} {claim.unit} before comparison")
    else:
        d_cmp, c2_cmp = d, c2

    # ν of c: u carries the measurement's ν, t_eff is a stated bound (ν = ∞).
    u_float, t_eff_float = float(u), math.sqrt(float(t_eff2))
    dof = welch_satterthwaite([(u_float, measurement.dof), (t_eff_float, math.inf)])
    k = coverage_factor(dof, COVERAGE)
    base = dict(
        claim_id=claim_id, semantics=semantics, distance=d_dec, combined_uncertainty=c_dec,
        measured=m_dec, u=u_dec, unit=claim.unit, tolerance=_dec(t), tolerance_entry=how_t,
        tolerance_contribution=t_eff_dec, k=k, dof=dof, expanded_uncertainty=k * float(c_dec), resolution=res_dec,
        matched_conditions=tuple(measurement.matched_conditions), measurement_status=status,
    )

    numeric, zone = classify(semantics, d_cmp, c2_cmp)
    base.update(numeric_verdict=numeric, numeric_zone=zone)
    unmatched = _decisive_unmatched(claim, measurement)
    if unmatched:
        return _condition_inconclusive(claim_id, unmatched, tuple(measurement.unmatched_conditions), base=base,
                                       notes=notes, numeric=numeric)

    if claim.kind == "typical" and semantics == "point":
        return _typical_inconclusive(claim, base, m, point, places, numeric, notes,
                                     tuple(measurement.unmatched_conditions))

    reason = _describe(semantics, numeric, d_dec, c_dec, claim.unit)
    inconclusive_class = None
    if numeric == "inconclusive":
        inconclusive_class = "resolution-limited"
        if semantics == "range":
            assert low is not None and high is not None
            half_width = _frac(high - low) / 2
            if half_width * half_width <= c2_cmp:
                notes.append("the pass zone is empty: the claim's half-width is not larger than c")
    return Verdict(**base, verdict=numeric, zone=zone, inconclusive_class=inconclusive_class, reason=reason,
                   unmatched_conditions=tuple(measurement.unmatched_conditions), notes=tuple(notes))


def _typical_inconclusive(claim: ClaimLike, base: dict[str, Any], m: Fraction, point: Decimal | None, places: int,
                          numeric: str, notes: list[str], reported_unmatched: tuple[str, ...]) -> Verdict:
    """A typical-only claim on one unit: the deviation from typical and its U, never a pass or a fail."""
    assert point is not None
    dev = _show(_dec(m - _frac(point)), places)
    big_u = base["expanded_uncertainty"]
    words = "compatible with" if numeric == "pass" else "not compatible with"
    reason = (f"typical value {point} {claim.unit} is not a guaranteed limit: this unit deviates from it by "
              f"{dev} {claim.unit} (U = {big_u:.2g} {claim.unit}, k = {base['k']:.3g}, 95 %), {words} typical at "
              f"c = {base['combined_uncertainty']} {claim.unit}; one unit can neither confirm nor falsify a "
              "population typical")
    return Verdict(**base, verdict="inconclusive", zone=None, inconclusive_class="typical-not-guaranteed",
                   deviation_from_typical=dev, reason=reason, notes=tuple(notes),
                   unmatched_conditions=reported_unmatched)


def _condition_inconclusive(claim_id: str, unmatched: list[tuple[str, str, str]], reported: tuple[str, ...], *,
                            base: dict[str, Any], notes: list[str], numeric: str | None) -> Verdict:
    names = tuple(n for n, _, _ in unmatched)
    classes = [cls for _, cls, _ in unmatched]
    cls = next(c for c in _CLASS_PRIORITY if c in classes)
    detail = "; ".join(f"{n} ({why})" for n, _, why in unmatched)
    tail = f"; the numbers alone would say {numeric}" if numeric else ""
    fields = {"claim_id": claim_id, **base}
    return Verdict(**fields, verdict="inconclusive", zone=None, inconclusive_class=cls,
                   unmatched_conditions=tuple(dict.fromkeys(names + reported)),
                   reason=f"decisive condition not matched: {detail}{tail}", notes=tuple(notes))


def _describe(semantics: str, verdict_name: str, d: Decimal, c: Decimal, unit: str) -> str:
    if semantics == "point":
        rel = "<=" if verdict_name == "pass" else ">"
        return f"|m - s| = {d} {unit} {rel} c = {c} {unit}: {'compatible' if verdict_name == 'pass' else 'incompatible'}"
    if verdict_name == "pass":
        return f"inside the claim by {-d} {unit}, more than c = {c} {unit}"
    if verdict_name == "fail":
        return f"outside the claim by {d} {unit}, more than c = {c} {unit}"
    side = "inside" if d <= 0 else "outside"
    return f"{side} the claim by {abs(d)} {unit}, within the guard band c = {c} {unit} (closed)"


def capability_precheck(
    claim: ClaimLike, achievable_u: Decimal | float | str, *, unit: str | None = None
) -> CapabilityCheck:
    """Is the claim resolution-limited before anything is staged (threshold: RESOLUTION_RATIO_THRESHOLD = 1)?

    Bound claims with both bounds: ratio = half-width (high − low)/2 over the achievable c = sqrt(u² + t_eff²);
    ratio ≤ 1 means no measurement can pass (the pass zone is empty). Point claims with a stated tolerance:
    ratio = t / u; ratio ≤ 1 means the compatibility test cannot resolve the tolerance (DPS310 relative
    accuracy ±6 Pa against u ≈ 8 Pa → 0.75: limited). One-sided bounds and point claims without a tolerance
    have nothing to resolve against: not applicable, not limited.
    """
    threshold = RESOLUTION_RATIO_THRESHOLD
    u = _frac(to_decimal(achievable_u, "achievable_u")) * (unit_scale(unit, claim.unit) if unit else 1)
    if u < 0:
        raise VerdictError(f"achievable_u: expected >= 0, got {achievable_u!r}")
    semantics, low, high, _point = _bounds(claim)
    t, t_eff2, _how, _ = _tolerance_terms(claim)
    cid = str(claim.id)
    thr = _dec(threshold)
    if semantics == "range":
        assert low is not None and high is not None
        half = _frac(high - low) / 2
        c2 = u * u + t_eff2
        if c2 == 0:
            return CapabilityCheck(cid, False, True, None, thr, "achievable c is zero: any distance is resolved")
        ratio_dec = _dec(half) / _sqrt_dec(c2) if half else Decimal(0)
        limited = half * half <= (threshold * threshold) * c2
        why = (f"half-width {_dec(half)} {claim.unit} against achievable c = {_sqrt_dec(c2)} {claim.unit}: "
               + ("pass zone empty, resolution-limited" if limited else "resolvable"))
        return CapabilityCheck(cid, limited, True, _round_ratio(ratio_dec), thr, why)
    if semantics == "point" and t > 0:
        if u == 0:
            return CapabilityCheck(cid, False, True, None, thr, "achievable u is zero: the tolerance is resolved")
        ratio = t / u
        limited = ratio <= threshold
        why = (f"tolerance t = {_dec(t)} {claim.unit} against achievable u = {_dec(u)} {claim.unit}: "
               + ("the test cannot resolve the tolerance, resolution-limited" if limited else "resolvable"))
        return CapabilityCheck(cid, limited, True, _round_ratio(_dec(ratio)), thr, why)
    return CapabilityCheck(cid, False, False, None, thr,
                           f"{semantics} claim without a width or tolerance to resolve: not applicable")


def _round_ratio(x: Decimal) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 6
        return +x
