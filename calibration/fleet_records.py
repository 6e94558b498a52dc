"""The fleet statistics as JSON: pydantic models for what `--json` lists under `fleet`, built from the dataclasses
of calibration/fleet_verdict.py, precision.py, tolerance.py and proficiency.py.

Why a module of its own: the statistics are computed in plain dataclasses; what leaves the process is validated
once, here, with every decimal that decided something kept as the string of its digits (945.280 stays 945.280),
floats finite (an infinite ν is null, as calibration/budget.py writes it) and the rule's name and version in
every record. `fleet_record(verdict)` and `lab_comparison_record(comparison)` are the two entry points;
`.model_dump(mode="json")` gives the dict.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from calibration.fleet_verdict import FleetVerdict, IntervalDecision, PopulationLimits, PopulationMean
from calibration.precision import Critical, PrecisionEstimate, Screening
from calibration.proficiency import LabComparison


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _s(x: Decimal | None) -> str | None:
    return None if x is None else str(x)


def _f(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


class LimitsRecord(_Record):
    semantics: Literal["range", "upper_bound", "lower_bound", "point"]
    unit: str
    low: str | None
    high: str | None
    typical: str | None
    note: str


class CriticalRecord(_Record):
    at_5: float
    at_1: float
    tail: Literal["upper", "lower"]


class FindingRecord(_Record):
    step: int
    test: str
    units: list[str]
    statistic: float
    critical_5: float
    critical_1: float
    level: Literal["ok", "straggler", "outlier"]
    note: str


class ExclusionRecord(_Record):
    unit: str
    test: str
    statistic: float
    critical_1: float
    reason: str


class ScreeningRecord(_Record):
    exclude_by: list[str]
    outliers: list[ExclusionRecord] = Field(description="left out of the population statistics")
    flagged: list[str] = Field(description="beyond 1 % on a test that does not exclude (h, k): named, kept")
    stragglers: list[str] = Field(description="between the 5 % and 1 % values: named, kept")
    h: dict[str, float | None]
    k: dict[str, float | None]
    h_critical: CriticalRecord | None
    k_critical: CriticalRecord | None
    findings: list[FindingRecord]
    notes: list[str]


class PrecisionRecord(_Record):
    units: list[str]
    p: int
    n_total: int
    n_bar: float
    general_mean: float
    s_r: float
    dof_r: int
    s_d: float
    s_L: float
    s_R: float
    repeatability_limit: float
    reproducibility_limit: float
    notes: list[str]


class IntervalRecord(_Record):
    sides: Literal["two-sided", "upper", "lower"]
    n: int
    coverage: float
    confidence: float
    k: float
    dof: int
    mean: float
    s: float
    u_measurement: float
    extra_u: float
    s_combined: float
    lower: float
    upper: float
    lower_reported: str = Field(description="rounded down to `places` decimals: the end the rule compared")
    upper_reported: str = Field(description="rounded up to `places` decimals: the end the rule compared")
    places: int
    zone: Literal["inside", "crossing", "outside"]
    method: str


class PopulationMeanRecord(_Record):
    n: int
    mean: float
    s: float
    u_scatter: float
    u_shared: float
    u_printed: float
    u_mean: float
    dof: float | None
    k: float
    expanded: float
    mean_reported: str
    expanded_reported: str
    typical: str
    deviation: str
    compatible: bool


class UnitsRecord(_Record):
    total: int
    graded: list[str] = Field(description="units whose own verdict was decided by their numbers")
    used: list[str] = Field(description="graded units in the population statistics (outliers left out)")
    no_value: list[str]
    condition_unmatched: list[str]
    failing: list[str]


class FleetRecord(_Record):
    claim_id: str
    verdict: Literal["pass", "inconclusive", "fail", "error"]
    reason: str
    inconclusive_class: str | None
    rule: str
    rule_version: str
    rule_kind: Literal["limits", "typical"]
    coverage: float
    confidence: float
    limits: LimitsRecord
    units: UnitsRecord
    tolerance_interval: IntervalRecord | None
    population_mean: PopulationMeanRecord | None
    units_needed: int | None = Field(description="units an interval inside the bounds would need at today's "
                                                 "mean and spread (null: none would, or not asked)")
    precision: PrecisionRecord | None = Field(description="ISO 5725-2 s_r, s_L, s_R without the outliers")
    precision_with_outliers: PrecisionRecord | None
    screening: ScreeningRecord | None
    notes: list[str]


class ConsensusRecord(_Record):
    x_star: float
    s_star: float
    p: int
    iterations: int
    converged: bool
    u_x_pt: float


class LabScoreRecord(_Record):
    lab: str
    value: float
    z: float
    z_prime: float
    z_performance: Literal["satisfactory", "questionable", "unsatisfactory"]
    en: float | None
    en_performance: Literal["satisfactory", "unsatisfactory"] | None


class LabComparisonRecord(_Record):
    consensus: ConsensusRecord
    sigma_pt: float
    use_z_prime: bool
    scores: list[LabScoreRecord]
    method: str


# ------------------------------------------------------------------------------------------------ builders
def _limits(limits: PopulationLimits) -> LimitsRecord:
    return LimitsRecord(semantics=limits.semantics, unit=limits.unit, low=_s(limits.low), high=_s(limits.high),
                        typical=_s(limits.typical), note=limits.note)


def _critical(c: Critical | None) -> CriticalRecord | None:
    return None if c is None else CriticalRecord(at_5=c.at_5, at_1=c.at_1, tail=c.tail)


def screening_record(s: Screening) -> ScreeningRecord:
    return ScreeningRecord(
        exclude_by=list(s.exclude_by),
        outliers=[ExclusionRecord(unit=e.unit, test=e.test, statistic=e.statistic, critical_1=e.critical_1,
                                  reason=e.reason) for e in s.exclusions],
        flagged=list(s.flagged), stragglers=list(s.stragglers), h=dict(s.h), k=dict(s.k),
        h_critical=_critical(s.h_critical), k_critical=_critical(s.k_critical),
        findings=[FindingRecord(step=f.step, test=f.test, units=list(f.units), statistic=f.statistic,
                                critical_5=f.critical.at_5, critical_1=f.critical.at_1, level=f.level, note=f.note)
                  for f in s.findings],
        notes=list(s.notes))


def precision_record(e: PrecisionEstimate | None) -> PrecisionRecord | None:
    if e is None:
        return None
    return PrecisionRecord(units=list(e.units), p=e.p, n_total=e.n_total, n_bar=e.n_bar,
                           general_mean=e.general_mean, s_r=e.s_r, dof_r=e.dof_r, s_d=e.s_d, s_L=e.s_L, s_R=e.s_R,
                           repeatability_limit=e.repeatability_limit,
                           reproducibility_limit=e.reproducibility_limit, notes=list(e.notes))


def _interval(d: IntervalDecision | None) -> IntervalRecord | None:
    if d is None:
        return None
    iv = d.interval
    return IntervalRecord(sides=iv.sides, n=iv.n, coverage=iv.coverage, confidence=iv.confidence, k=iv.k,
                          dof=iv.dof, mean=iv.mean, s=iv.s, u_measurement=iv.u_measurement, extra_u=iv.extra_u,
                          s_combined=iv.s_combined, lower=iv.lower, upper=iv.upper, lower_reported=str(d.lower),
                          upper_reported=str(d.upper), places=d.places, zone=d.zone, method=iv.method)


def _population(p: PopulationMean | None) -> PopulationMeanRecord | None:
    if p is None:
        return None
    return PopulationMeanRecord(n=p.n, mean=p.mean, s=p.s, u_scatter=p.u_scatter, u_shared=p.u_shared,
                                u_printed=p.u_printed, u_mean=p.u_mean, dof=_f(p.dof),
                                k=p.k, expanded=p.expanded, mean_reported=str(p.mean_reported),
                                expanded_reported=str(p.expanded_reported), typical=str(p.typical),
                                deviation=str(p.deviation), compatible=p.compatible)


def fleet_record(v: FleetVerdict) -> FleetRecord:
    """The JSON record of one claim's fleet verdict."""
    return FleetRecord(
        claim_id=v.claim_id, verdict=v.verdict, reason=v.reason, inconclusive_class=v.inconclusive_class,
        rule=v.rule, rule_version=v.rule_version, rule_kind=v.rule_kind, coverage=v.coverage,
        confidence=v.confidence, limits=_limits(v.limits),
        units=UnitsRecord(total=v.units_total, graded=list(v.units_graded), used=list(v.units_used),
                          no_value=list(v.no_value), condition_unmatched=list(v.condition_unmatched),
                          failing=list(v.failing_units)),
        tolerance_interval=_interval(v.interval), population_mean=_population(v.population),
        units_needed=v.units_needed, precision=precision_record(v.precision),
        precision_with_outliers=precision_record(v.precision_with_outliers),
        screening=None if v.screening is None else screening_record(v.screening), notes=list(v.notes))


def lab_comparison_record(c: LabComparison) -> LabComparisonRecord:
    """The JSON record of a between-lab comparison (ISO 13528)."""
    return LabComparisonRecord(
        consensus=ConsensusRecord(x_star=c.consensus.x_star, s_star=c.consensus.s_star, p=c.consensus.p,
                                  iterations=c.consensus.iterations, converged=c.consensus.converged,
                                  u_x_pt=c.u_x_pt),
        sigma_pt=c.sigma_pt, use_z_prime=c.use_z_prime,
        scores=[LabScoreRecord(lab=s.lab, value=s.value, z=s.z, z_prime=s.z_prime, z_performance=s.z_performance,
                               en=s.en, en_performance=s.en_performance) for s in c.scores],
        method=c.method)
