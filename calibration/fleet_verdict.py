"""The fleet verdict: a claim decided for the population of units a fleet measured, from the units' own verdicts.

Why: one unit's verdict is about that part; a datasheet promises something about every part of its type (a
limit) or about the type's population (a typical value). This rule turns the units' verdicts and values into
the population's, and says why, in the terms of protocols/verdict.py: the rule's name and version, the exact
comparison on reported digits, and "inconclusive" as a decision, never as a fail.

The rule (FLEET_RULE_NAME, version FLEET_RULE_VERSION; decided in this order):
 1. Units without a value (an apparatus error, or a verdict decided without one: engagement-only ...) and units
    whose own verdict was decided by an unmatched decisive condition (no traceable reference, a stimulus the
    chamber cannot apply …) give no evidence about the population: they are listed and left out. When no unit is
    left, the fleet verdict is inconclusive with the units' class, or "error" when every unit lost its value to
    an apparatus error (an error is not a fail).
 2. Outliers (calibration/precision.py: ISO 5725-2 Cochran and Grubbs at 1 %) are named and left out of the
    population statistics; their own verdicts stand.
 Limits (range, max rating, a one-sided bound; a printed accuracy band ±t around s, read as [s − t, s + t]):
 3. Any unit's definitive fail fails the claim for the fleet, naming the unit(s) — outliers included: a part
    out of its specification falsifies "every part" whatever the others do.
 4. Fewer than MIN_SAMPLE_SIZE (2) units left: inconclusive "too-few-units", the per-unit verdicts stand.
 5. Otherwise the ISO 16269-6 tolerance interval of the units' values (p = 0.90, γ = 0.95; two-sided for a
    range, one-sided for a bound; widened by the units' measurement u, calibration/tolerance.py) is compared
    with the bounds: inside (closed: an end on a bound is inside) → pass for the population; wholly beyond a
    bound (for a one-sided claim: its far one-sided limit beyond the bound, i.e. at least a proportion p of the
    parts beyond it) → fail; crossing a bound → inconclusive "interval-crosses-bound".
 Typical values (a Typ. with no printed Min./Max.):
 3. Fewer than MIN_UNITS_TYPICAL (5) units left: inconclusive "typical-not-guaranteed", as for one unit.
 4. Otherwise the population mean x̄ of the units' values with its 95 % interval x̄ ± U, U = t_{95}(ν)·u(x̄),
    u²(x̄) = s²/n + u_shared² + u_printed²: the scatter s of the unit values holds the between-unit variance
    and each unit's own measurement noise (s² estimates s_L² + s_r²/n_readings, ISO 5725-2), so s²/n is the
    variance of their mean; a measurement error every unit shares (one reference for the whole fleet) does not
    average out and is added whole (u_shared, 0 by default: each unit measured on its own); and the typical
    value itself is only known to its printed digits — "0.2 Pa" stands for anything that rounds to it, ±0.05,
    read as a rectangular bound: u_printed = (step/2)/√3 (GUM 4.3.7, F.2.2.1). Without it a fleet whose mean is
    0.208 Pa would "falsify" a typical printed as 0.2. ν by Welch–Satterthwaite (n − 1 for the scatter, ∞ for
    the two Type B terms). |x̄ − typical| ≤ U → pass (the typical value holds for this population); > U → fail.

Between labs (`lab_comparison`): units tagged with a lab give one result per lab, scored with ISO 13528 z (and
E_n where the lab measured against a traceable reference) by calibration/proficiency.py; with few labs pass a
σ_pt from elsewhere (the fleet's s_R) — that module says why.

Exactness: the interval ends are rounded outward (lower down, upper up) to the finest decimal place of the units'
reported values and the bounds, then compared with the bounds in exact decimal arithmetic; x̄ and U are rounded
half-even to U's second significant digit (GUM 7.2.6, as protocols/measurement.py reports a value) and compared
exactly. Rounding outward can only move a limit verdict towards inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any, Literal, Mapping, Protocol, Sequence

from calibration.budget import coverage_factor, welch_satterthwaite
from calibration.precision import (
    ISO_EXCLUDING_TESTS,
    PrecisionEstimate,
    PrecisionError,
    Screening,
    precision_analysis,
    screen_values,
)
from calibration.proficiency import LabComparison, LabResult, ProficiencyError, Reference, compare_labs
from calibration.tolerance import (
    DEFAULT_CONFIDENCE,
    DEFAULT_COVERAGE,
    MIN_SAMPLE_SIZE,
    Sides,
    ToleranceInterval,
    smallest_sample_size,
    tolerance_interval,
)

FLEET_RULE_NAME = ("chamberlab fleet rule (any unit's fail fails; ISO 16269-6 normal tolerance interval, p = 0.90, "
                   "gamma = 0.95, inside the bounds for limits; population mean at 95 % compatible with a typical "
                   "value; ISO 5725-2 outliers at 1 % left out)")
FLEET_RULE_VERSION = "1.0"
MIN_UNITS_TYPICAL = 5
TYPICAL_COVERAGE = 0.95

Semantics = Literal["range", "upper_bound", "lower_bound", "point"]
FleetVerdictName = Literal["pass", "inconclusive", "fail", "error"]
CONDITION_CLASSES: tuple[str, ...] = ("no-traceable-reference", "unmatched-stimulus", "unmatched-observable",
                                      "engagement-only", "chamber-not-connected")
"""Unit inconclusive classes decided before the numbers (protocols/verdict.py), in its order of priority."""


class FleetVerdictError(ValueError):
    """Unit results or limits the fleet rule cannot be applied to; names the unit or field and what arrived."""


def _dec(x: Decimal | float | int | str | None, what: str) -> Decimal | None:
    if x is None:
        return None
    if isinstance(x, bool):
        raise FleetVerdictError(f"{what}: expected a number, got a bool")
    try:
        d = x if isinstance(x, Decimal) else Decimal(repr(float(x)) if isinstance(x, float) else str(x))
    except (InvalidOperation, ValueError):
        raise FleetVerdictError(f"{what}: expected a decimal number, got {x!r}") from None
    if not d.is_finite():
        raise FleetVerdictError(f"{what}: expected a finite number, got {x!r}")
    return d


def _places(*xs: Decimal | None) -> int:
    return max([0] + [-int(x.as_tuple().exponent) for x in xs if x is not None])


# --------------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class PopulationLimits:
    """What the population is graded against: bounds (limits) or a typical value (point), in `unit`."""

    semantics: Semantics
    unit: str
    low: Decimal | None = None
    high: Decimal | None = None
    typical: Decimal | None = None
    note: str = ""

    @property
    def sides(self) -> Sides:
        return {"range": "two-sided", "upper_bound": "upper", "lower_bound": "lower"}[self.semantics]  # type: ignore[return-value]


def population_limits(kind: str, semantics: str, *, unit: str, low: Any = None, high: Any = None, point: Any = None,
                      tolerance: Any = None) -> PopulationLimits:
    """Limits from a claim's shape as protocols/verdict.py reads it (its `_bounds`: semantics, low, high, point).

    A typical-only claim (kind "typical", semantics "point") is graded by the typical rule; a point claim with a
    printed band ±t (kind "accuracy") is the range [s − t, s + t] every part's value must lie in (t as printed:
    the band is a limit on each part, not an uncertainty); bound semantics pass through."""
    lo, hi, pt, t = (_dec(low, "low"), _dec(high, "high"), _dec(point, "point"), _dec(tolerance, "tolerance"))
    if semantics == "point":
        if pt is None:
            raise FleetVerdictError("point claim: expected its stated value, got none")
        if kind == "typical":
            return PopulationLimits("point", unit, typical=pt, note="typical value: graded on the population mean")
        if t is None or t <= 0:
            raise FleetVerdictError(f"point claim of kind {kind!r}: expected a printed band t > 0, got {tolerance!r}")
        return PopulationLimits("range", unit, low=pt - t, high=pt + t,
                                note=f"printed band {pt} +/- {t} {unit}: every part's value within it")
    if semantics == "range":
        if lo is None or hi is None or lo > hi:
            raise FleetVerdictError(f"range claim: expected low <= high, got low={low!r}, high={high!r}")
        return PopulationLimits("range", unit, low=lo, high=hi)
    if semantics == "upper_bound" and hi is not None:
        return PopulationLimits("upper_bound", unit, high=hi)
    if semantics == "lower_bound" and lo is not None:
        return PopulationLimits("lower_bound", unit, low=lo)
    raise FleetVerdictError(f"semantics: expected range, upper_bound (with high), lower_bound (with low) or point, "
                            f"got {semantics!r} with low={low!r}, high={high!r}")


class _VerdictLike(Protocol):
    verdict: str
    measured: Decimal | None
    u: Decimal | None
    dof: float | None
    inconclusive_class: str | None
    reason: str


@dataclass(frozen=True)
class UnitResult:
    """One unit's verdict for the claim: its value m and standard uncertainty u in the claim's unit, and (for
    the ISO 5725-2 statistics) its repeated readings of the same quantity in the same unit."""

    unit: str
    verdict: str
    value: Decimal | None = None
    u: Decimal | None = None
    dof: float = math.inf
    inconclusive_class: str | None = None
    readings: tuple[float, ...] = ()
    lab: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in ("pass", "inconclusive", "fail", "error"):
            raise FleetVerdictError(f"unit {self.unit!r}: verdict expected pass/inconclusive/fail/error, "
                                    f"got {self.verdict!r}")
        object.__setattr__(self, "value", _dec(self.value, f"unit {self.unit!r} value"))
        object.__setattr__(self, "u", _dec(self.u, f"unit {self.unit!r} u"))
        if self.u is not None and self.u < 0:
            raise FleetVerdictError(f"unit {self.unit!r}: expected u >= 0, got {self.u}")
        if self.value is not None and self.u is None:
            raise FleetVerdictError(f"unit {self.unit!r}: a value needs its standard uncertainty u")
        readings = tuple(float(x) for x in self.readings)
        if not all(math.isfinite(x) for x in readings):
            raise FleetVerdictError(f"unit {self.unit!r}: expected finite readings, got a NaN or inf")
        object.__setattr__(self, "readings", readings)

    @classmethod
    def from_verdict(cls, unit: str, verdict: _VerdictLike, *, readings: Sequence[float] = (),
                     lab: str | None = None) -> UnitResult:
        """From a protocols.verdict.Verdict (its measured value and u are already in the claim's unit)."""
        dof = verdict.dof if verdict.dof is not None else math.inf
        return cls(unit=unit, verdict=verdict.verdict, value=verdict.measured, u=verdict.u, dof=dof,
                   inconclusive_class=verdict.inconclusive_class, readings=tuple(readings), lab=lab,
                   reason=verdict.reason)


# -------------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class IntervalDecision:
    """The tolerance interval, its ends rounded outward to `places` decimals, and where it fell."""

    interval: ToleranceInterval
    lower: Decimal
    upper: Decimal
    places: int
    zone: Literal["inside", "crossing", "outside"]


@dataclass(frozen=True)
class PopulationMean:
    """The population mean of the unit values with its 95 % interval, against the typical value."""

    n: int
    mean: float
    s: float
    u_scatter: float  # s/√n
    u_shared: float
    u_printed: float  # the typical value's printed step, ±half of it read as rectangular
    u_mean: float  # √(u_scatter² + u_shared² + u_printed²)
    dof: float
    k: float
    expanded: float
    mean_reported: Decimal
    expanded_reported: Decimal
    typical: Decimal
    deviation: Decimal
    compatible: bool


@dataclass(frozen=True)
class FleetVerdict:
    """The decision for the population and everything needed to recompute it (to JSON: fleet_records)."""

    claim_id: str
    verdict: FleetVerdictName
    reason: str
    inconclusive_class: str | None
    rule_kind: Literal["limits", "typical"]
    limits: PopulationLimits
    units_total: int
    units_graded: tuple[str, ...]
    units_used: tuple[str, ...]
    no_value: tuple[str, ...]
    condition_unmatched: tuple[str, ...]
    failing_units: tuple[str, ...]
    screening: Screening | None
    precision: PrecisionEstimate | None
    precision_with_outliers: PrecisionEstimate | None
    interval: IntervalDecision | None
    population: PopulationMean | None
    units_needed: int | None
    coverage: float
    confidence: float
    rule: str = FLEET_RULE_NAME
    rule_version: str = FLEET_RULE_VERSION
    notes: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------------------------------- the rule
def _screen(units: Sequence[UnitResult], exclude_by: frozenset[str], notes: list[str]) -> tuple[
        Screening | None, PrecisionEstimate | None, PrecisionEstimate | None]:
    if len(units) < 2:
        notes.append(f"outlier screening needs at least 2 units, {len(units)} graded")
        return None, None, None
    if all(len(u.readings) >= 2 for u in units):
        result = precision_analysis({u.unit: u.readings for u in units}, exclude_by=exclude_by)
        return result.screening, result.estimate, result.estimate_all
    missing = [u.unit for u in units if len(u.readings) < 2]
    notes.append(f"no repeated readings from {', '.join(missing)}: screened on unit values (h, Grubbs); "
                 "s_r, s_L and s_R need every unit's readings")
    return screen_values({u.unit: float(u.value) for u in units}, exclude_by=exclude_by), None, None  # type: ignore[arg-type]


def _decide_interval(limits: PopulationLimits, interval: ToleranceInterval, places: int) -> IntervalDecision:
    step = Decimal(1).scaleb(-places)
    lower = Decimal(repr(interval.lower)).quantize(step, rounding=ROUND_FLOOR)
    upper = Decimal(repr(interval.upper)).quantize(step, rounding=ROUND_CEILING)
    low, high = limits.low, limits.high
    if limits.semantics == "range":
        assert low is not None and high is not None
        inside = low <= lower and upper <= high
        outside = upper < low or lower > high
    elif limits.semantics == "upper_bound":
        assert high is not None
        inside, outside = upper <= high, lower > high
    else:
        assert low is not None
        inside, outside = lower >= low, upper < low
    zone: Literal["inside", "crossing", "outside"] = "inside" if inside else ("outside" if outside else "crossing")
    return IntervalDecision(interval, lower, upper, places, zone)


def _units_needed(limits: PopulationLimits, interval: ToleranceInterval, coverage: float,
                  confidence: float) -> int | None:
    """How many units an interval inside the bounds would need at today's mean and spread (None: none would)."""
    if interval.s_combined == 0:
        return None
    margins = []
    if limits.low is not None:
        margins.append(interval.mean - float(limits.low))
    if limits.high is not None:
        margins.append(float(limits.high) - interval.mean)
    margin = min(margins)
    if margin <= 0:
        return None
    return smallest_sample_size(margin / interval.s_combined, limits.sides, coverage, confidence)


def printed_step_u(value: Decimal) -> float:
    """(step/2)/√3 for a number printed with the step of its last digit (0.2 → 0.05/√3; 165 → 0.5/√3)."""
    step = float(Decimal(1).scaleb(int(value.as_tuple().exponent)))
    return step / 2.0 / math.sqrt(3.0)


def _population_mean(values: Sequence[float], typical: Decimal, u_shared: float, places: int) -> PopulationMean:
    n = len(values)
    mean = math.fsum(values) / n
    s = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1))
    u_scatter, u_printed = s / math.sqrt(n), printed_step_u(typical)
    u_mean = math.sqrt(u_scatter ** 2 + u_shared ** 2 + u_printed ** 2)
    dof = welch_satterthwaite([(u_scatter, float(n - 1)), (u_shared, math.inf), (u_printed, math.inf)])
    k = coverage_factor(dof, TYPICAL_COVERAGE)
    big_u = k * u_mean
    if big_u > 0:
        dp = 1 - Decimal(repr(big_u)).adjusted()  # two significant digits of U
    else:
        dp = places
    step = Decimal(1).scaleb(-dp)
    mean_r = Decimal(repr(mean)).quantize(step, rounding=ROUND_HALF_EVEN)
    u_r = Decimal(repr(big_u)).quantize(step, rounding=ROUND_HALF_EVEN)
    deviation = mean_r - typical
    return PopulationMean(n, mean, s, u_scatter, float(u_shared), u_printed, u_mean, float(dof), k, big_u, mean_r,
                          u_r, typical, deviation, abs(deviation) <= u_r)


def _condition_class(units: Sequence[UnitResult]) -> str:
    classes = {u.inconclusive_class for u in units}
    return next(c for c in CONDITION_CLASSES if c in classes)


def fleet_verdict(claim_id: str, limits: PopulationLimits, units: Sequence[UnitResult], *,
                  coverage: float = DEFAULT_COVERAGE, confidence: float = DEFAULT_CONFIDENCE,
                  exclude_by: frozenset[str] = ISO_EXCLUDING_TESTS, u_shared: float = 0.0,
                  extra_u: float = 0.0) -> FleetVerdict:
    """Decide `claim_id` for the population of `units` (module docstring: the rule, in its order).

    `extra_u` widens the tolerance interval in quadrature like the units' u (the claim's t_eff, if the caller
    wants the one-unit guard band in it); `u_shared` is a measurement uncertainty every unit shares (typical
    rule). Nothing is decided from a unit's value unless its own verdict was decided by its numbers."""
    names = [u.unit for u in units]
    if not names:
        raise FleetVerdictError(f"claim {claim_id}: expected at least one unit result, got none")
    if len(set(names)) != len(names):
        raise FleetVerdictError(f"claim {claim_id}: expected unique unit names, got {names}")
    for what, x in (("u_shared", u_shared), ("extra_u", extra_u)):
        if not (math.isfinite(x) and x >= 0):
            raise FleetVerdictError(f"claim {claim_id}: {what} expected a finite number >= 0, got {x!r}")
    notes: list[str] = []
    no_value = tuple(u.unit for u in units if u.verdict == "error" or u.value is None)
    unmatched = [u for u in units if u.unit not in no_value and u.inconclusive_class in CONDITION_CLASSES]
    graded = [u for u in units if u.unit not in no_value and u not in unmatched]
    typical = limits.semantics == "point"
    kind: Literal["limits", "typical"] = "typical" if typical else "limits"
    base: dict[str, Any] = dict(
        claim_id=claim_id, rule_kind=kind, limits=limits, units_total=len(units),
        units_graded=tuple(u.unit for u in graded), no_value=no_value,
        condition_unmatched=tuple(u.unit for u in unmatched), coverage=coverage, confidence=confidence)
    if not graded:
        empty: dict[str, Any] = dict(units_used=(), failing_units=(), screening=None, precision=None,
                                     precision_with_outliers=None, interval=None, population=None, units_needed=None)
        undecided = [u for u in units if u.unit in no_value and u.verdict != "error"]  # decided without a value
        if unmatched or undecided:  # (engagement-only, resolution-limited ...): not an apparatus error
            cls = _condition_class(unmatched) if unmatched else \
                sorted({u.inconclusive_class or "inconclusive" for u in undecided})[0]
            return FleetVerdict(**base, **empty, verdict="inconclusive", inconclusive_class=cls, notes=tuple(notes),
                                reason=f"no unit was graded on its numbers: {len(unmatched)} with an unmatched "
                                       f"decisive condition, {len(undecided)} decided without a value, "
                                       f"{len(no_value) - len(undecided)} apparatus errors ({cls})")
        return FleetVerdict(**base, **empty, verdict="error", inconclusive_class=None, notes=tuple(notes),
                            reason=f"no unit gave a value ({len(no_value)} apparatus errors); an error is not a fail")
    try:
        screening, precision, precision_all = _screen(graded, exclude_by, notes)
    except PrecisionError as exc:
        raise FleetVerdictError(f"claim {claim_id}: {exc}") from None
    excluded = set(screening.outliers) if screening else set()
    used = [u for u in graded if u.unit not in excluded]
    values = [float(u.value) for u in used]  # type: ignore[arg-type]
    places = _places(*(u.value for u in used), limits.low, limits.high, limits.typical)
    failing = tuple(u.unit for u in units if u.verdict == "fail") if not typical else ()
    base.update(units_used=tuple(u.unit for u in used), failing_units=failing, screening=screening,
                precision=precision, precision_with_outliers=precision_all)
    if excluded:
        notes.append(f"left out of the population statistics: {', '.join(sorted(excluded))} "
                     "(ISO 5725-2 outliers; their own verdicts stand)")
    if typical:
        return _typical(base, limits, used, values, places, u_shared, notes)
    return _limits(base, limits, used, values, places, failing, coverage, confidence, extra_u, notes)


def _limits(base: dict[str, Any], limits: PopulationLimits, used: Sequence[UnitResult], values: list[float],
            places: int, failing: tuple[str, ...], coverage: float, confidence: float, extra_u: float,
            notes: list[str]) -> FleetVerdict:
    decision, needed = None, None
    if len(used) >= MIN_SAMPLE_SIZE:
        interval = tolerance_interval(values, [float(u.u) for u in used], sides=limits.sides, coverage=coverage,
                                      confidence=confidence, extra_u=extra_u)  # type: ignore[arg-type]
        decision = _decide_interval(limits, interval, places)
        if decision.zone == "crossing":
            needed = _units_needed(limits, interval, coverage, confidence)
    tail: dict[str, Any] = dict(interval=decision, population=None, units_needed=needed, notes=tuple(notes))
    if failing:
        return FleetVerdict(**base, **tail, verdict="fail", inconclusive_class=None,
                            reason=f"{len(failing)} unit(s) failed the claim on their own: {', '.join(failing)} "
                                   "(a part outside its specification falsifies the claim for every part)")
    if decision is None:
        return FleetVerdict(**base, **tail, verdict="inconclusive", inconclusive_class="too-few-units",
                            reason=f"{len(used)} unit(s) left; a tolerance interval needs at least "
                                   f"{MIN_SAMPLE_SIZE}: the per-unit verdicts stand")
    iv = decision.interval
    what = (f"{'two-sided' if iv.sides == 'two-sided' else 'one-sided'} tolerance interval "
            f"[{decision.lower}, {decision.upper}] {limits.unit} (n = {iv.n}, k = {iv.k:.4g}, p = {coverage}, "
            f"gamma = {confidence})")
    bounds = _bounds_text(limits)
    if decision.zone == "inside":
        return FleetVerdict(**base, **tail, verdict="pass", inconclusive_class=None,
                            reason=f"{what} inside {bounds}: at least {coverage:.0%} of parts within the claim "
                                   f"with {confidence:.0%} confidence")
    if decision.zone == "outside":
        return FleetVerdict(**base, **tail, verdict="fail", inconclusive_class=None,
                            reason=f"{what} wholly outside {bounds}: at least {coverage:.0%} of parts outside "
                                   f"the claim with {confidence:.0%} confidence")
    more = f"; at today's mean and spread about {needed} units would settle it" if needed else ""
    return FleetVerdict(**base, **tail, verdict="inconclusive", inconclusive_class="interval-crosses-bound",
                        reason=f"{what} crosses {bounds}{more}")


def _bounds_text(limits: PopulationLimits) -> str:
    if limits.semantics == "range":
        return f"[{limits.low}, {limits.high}] {limits.unit}"
    if limits.semantics == "upper_bound":
        return f"the upper bound {limits.high} {limits.unit}"
    return f"the lower bound {limits.low} {limits.unit}"


def _typical(base: dict[str, Any], limits: PopulationLimits, used: Sequence[UnitResult], values: list[float],
             places: int, u_shared: float, notes: list[str]) -> FleetVerdict:
    assert limits.typical is not None
    population = _population_mean(values, limits.typical, u_shared, places) if len(used) >= 2 else None
    tail: dict[str, Any] = dict(interval=None, population=population, units_needed=None, notes=tuple(notes))
    if len(used) < MIN_UNITS_TYPICAL:
        return FleetVerdict(**base, **tail, verdict="inconclusive", inconclusive_class="typical-not-guaranteed",
                            reason=f"{len(used)} unit(s): a typical value is a statement about the population and "
                                   f"needs at least {MIN_UNITS_TYPICAL} units to be confirmed or falsified")
    assert population is not None
    pm = population
    rel = "<=" if pm.compatible else ">"
    text = (f"population mean {pm.mean_reported} +/- {pm.expanded_reported} {limits.unit} (95 %, k = {pm.k:.3g}, "
            f"n = {pm.n}): |mean - typical {limits.typical}| = {abs(pm.deviation)} {rel} U")
    if pm.compatible:
        return FleetVerdict(**base, **tail, verdict="pass", inconclusive_class=None,
                            reason=f"{text}: the typical value holds for this population")
    return FleetVerdict(**base, **tail, verdict="fail", inconclusive_class=None,
                        reason=f"{text}: the population is not compatible with the typical value")


# ------------------------------------------------------------------------------------------- between labs
LAB_COVERAGE_FACTOR = 2.0
"""k for a lab's expanded uncertainty in E_n (ISO 13528 §9.7 works with U at k = 2)."""


def lab_results(units: Sequence[UnitResult], references: Mapping[str, Reference] | None = None) -> list[LabResult]:
    """One result per lab from its units graded on their numbers (units without a `lab` are left out).

    A lab's value is the mean of its units' values; its standard uncertainty √(s²/n + ū²): the scatter of its
    units over their number, plus the root-mean-square of their own u taken whole (a lab's units share its
    reference and its room, so their measurement errors need not average out); U = 2·u. `references` gives
    the traceable reference value (and its U) of the labs that measured against one, for E_n."""
    refs = dict(references or {})
    by_lab: dict[str, list[UnitResult]] = {}
    for u in units:
        if u.lab is not None and u.value is not None and u.verdict != "error" \
                and u.inconclusive_class not in CONDITION_CLASSES:
            by_lab.setdefault(u.lab, []).append(u)
    unknown = sorted(set(refs) - set(by_lab))
    if unknown:
        raise FleetVerdictError(f"references: expected labs among {sorted(by_lab)}, got {unknown}")
    out = []
    for lab, members in by_lab.items():
        xs = [float(m.value) for m in members]  # type: ignore[arg-type]
        n = len(xs)
        mean = math.fsum(xs) / n
        s2 = math.fsum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
        u_bar2 = math.fsum(float(m.u) ** 2 for m in members) / n  # type: ignore[arg-type]
        out.append(LabResult(lab, mean, LAB_COVERAGE_FACTOR * math.sqrt(s2 / n + u_bar2), refs.get(lab)))
    return out


def lab_comparison(units: Sequence[UnitResult], references: Mapping[str, Reference] | None = None,
                   *, sigma_pt: float | None = None) -> LabComparison | None:
    """ISO 13528 z (and z', E_n) of every lab against the robust consensus; None with fewer than 2 labs."""
    labs = lab_results(units, references)
    if len(labs) < 2:
        return None
    try:
        return compare_labs(labs, sigma_pt=sigma_pt)
    except ProficiencyError as exc:
        raise FleetVerdictError(f"lab comparison: {exc}") from None
