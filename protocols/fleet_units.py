"""A claim's units on a fleet, each with today's verdict, and the fleet verdict and statistics over them.

Why: a chamber-level result grades one measurement (the four-barometer mean, one fan). A claim is about every part
of its type, so each instance of the claim's component that the protocol measured in each chamber is a unit of its
own, named `chamber/position` (`wt3/pressure_upwind`), graded by the same decision rule (protocols/verdict.py) on
its own measurement and budget (protocols/fleet_instances.py). A result that exposes no instances is one unit: the
chamber's own verdict, at the position its protocol reads (`wt3/rpm_in`), or the component's name when it reads
several or none (`wt3/DPS310`).

The fleet verdict of a claim is calibration/fleet_verdict.py's rule on its units (limits from the claim as
protocols.verdict.bounds reads it), with each unit's repeated readings converted to the claim's unit for the
ISO 5725-2 statistics; the labs' z-scores (ISO 13528) pass the fleet's s_R as σ_pt when it is known (with two labs
the labs' own spread always scores ±0.62), and a lab whose units were graded against a traceable reference (a
station's certified instrument) also gets E_n against the assigned value (x_pt, U = 2·u(x_pt); ISO 13528 §9.7).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from calibration.fleet_verdict import (
    CONDITION_CLASSES,
    FLEET_RULE_NAME,
    FLEET_RULE_VERSION,
    FleetVerdictError,
    UnitResult,
    fleet_verdict,
    lab_comparison,
    lab_results,
    population_limits,
)
from calibration.fleet_records import FleetRecord, LimitsRecord, UnitsRecord, fleet_record, lab_comparison_record
from calibration.proficiency import Reference
from protocols.claims import Claim
from protocols.fleet_instances import position_of
from protocols.measurement import Measurement
from protocols.registry import BY_KEY
from protocols.runner import CheckResult
from protocols.verdict import Verdict, VerdictError, bounds, unit_scale, verdict


@dataclass(frozen=True)
class Unit:
    """One unit of a claim: where it is, its verdict (today's rule), its measurement and its readings (claim unit)."""

    chamber: str
    position: str
    lab: str | None
    verdict: Verdict
    measurement: Measurement | None
    readings: tuple[float, ...] = ()
    traceable: bool = False  # graded against a station's certified instrument

    @property
    def name(self) -> str:
        return f"{self.chamber}/{self.position}"

    def result(self) -> UnitResult:
        return UnitResult.from_verdict(self.name, self.verdict, readings=self.readings, lab=self.lab)

    def to_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {"unit": self.name, "chamber": self.chamber, "position": self.position, "lab": self.lab,
                "verdict": v.verdict, "class": v.inconclusive_class,
                "measured": None if v.measured is None else {"value": str(v.measured), "u": str(v.u),
                                                             "unit": v.unit, "k": v.k, "dof": _finite(v.dof)},
                "readings": len(self.readings), "reason": v.reason, "verdict_detail": v.to_dict(),
                "measurement_detail": None if self.measurement is None else self.measurement.to_dict()}


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def default_position(result: CheckResult, station: Any | None) -> str:
    """Where a result without instances was measured: the variable its protocol reads (or the station's rail or
    position reads, for an instrument protocol), else the component's name."""
    m = result.measurement
    reading = m.details.get("reading") if m is not None else None
    if isinstance(reading, str):
        return reading
    declaration = BY_KEY.get(result.protocol or "")
    if declaration is not None and declaration.instruments and station is not None:
        kind, component = declaration.instruments[0], result.claim.component
        try:
            entry = station.rail(component)[0] if kind == "smu" else station.position(kind, component)[0]
            return position_of(entry.reads)
        except Exception:  # the station lacks it: the result itself says why (this only names the unit)
            pass
    if declaration is not None:
        reads = list(dict.fromkeys(n for s in declaration.steps for n in s.reads))
        if len(reads) == 1:
            return reads[0]
        if reads and position_of(reads).startswith("light_"):
            return position_of(reads)
    return result.claim.component


def _readings_in(claim_unit: str, unit: str, readings: Sequence[float]) -> tuple[float, ...]:
    """Readings converted to the claim's unit (none when the units do not convert: the fleet then screens values)."""
    try:
        scale = float(unit_scale(unit, claim_unit))
    except VerdictError:
        return ()
    return tuple(float(x) * scale for x in readings)


def units_of(chamber: str, result: CheckResult, *, lab: str | None = None, station: Any | None = None) -> list[Unit]:
    """The units one chamber's result holds: each instance graded on its own measurement, else the result itself."""
    traceable = result.protocol in BY_KEY and bool(BY_KEY[result.protocol].instruments)
    if not result.instances:
        return [Unit(chamber, default_position(result, station), lab, result.verdict, result.measurement, (),
                     traceable)]
    claim = result.claim
    out = []
    for inst in result.instances:
        out.append(Unit(chamber, inst.position, lab, verdict(claim, inst.measurement), inst.measurement,
                        _readings_in(claim.unit, inst.measurement.unit, inst.readings), traceable))
    return out


# ------------------------------------------------------------------------------------------------ the fleet
def claim_limits(claim: Claim) -> Any:
    """The population limits of a claim (calibration.fleet_verdict.population_limits from verdict.bounds)."""
    semantics, low, high, point = bounds(claim)
    tol = claim.tolerance
    tolerance = tol.value if tol.meaning != "none" and tol.value else None
    return population_limits(claim.kind, semantics, unit=claim.unit, low=low, high=high, point=point,
                             tolerance=tolerance)


def fleet_of(claim: Claim, units: Sequence[Unit]) -> dict[str, Any]:
    """The fleet section of one claim: its fleet record (calibration.fleet_records) and, when units of two or
    more labs were graded on their numbers, the labs' comparison (else `labs: None`)."""
    if not units:
        return {"fleet": None, "labs": None}
    results = [u.result() for u in units]
    try:
        decided = fleet_verdict(claim.id, claim_limits(claim), results)
    except (FleetVerdictError, VerdictError) as exc:
        return {"fleet": None, "labs": None, "fleet_error": f"{type(exc).__name__}: {exc}"}
    record = fleet_record(decided).model_dump(mode="json")
    return {"fleet": record, "labs": labs_of(units, decided.precision.s_R if decided.precision else None)}


def labs_of(units: Sequence[Unit], s_r: float | None) -> dict[str, Any] | None:
    """ISO 13528 scores of the labs (None with fewer than two labs graded on their numbers)."""
    results = [u.result() for u in units]
    labs = {r.lab: r for r in lab_results(results)}
    if len(labs) < 2:
        return None
    traceable = {u.lab for u in units if u.traceable and u.lab is not None}
    sigma = s_r if s_r is not None and s_r > 0 else None
    try:
        first = lab_comparison(results, sigma_pt=sigma)
        assert first is not None
        assigned = Reference(first.consensus.x_star, 2.0 * first.u_x_pt)
        refs: Mapping[str, Reference] = {lab: assigned for lab in labs if lab in traceable and assigned.expanded > 0}
        comparison = lab_comparison(results, refs, sigma_pt=sigma) if refs else first
    except FleetVerdictError as exc:
        return {"error": str(exc)}
    assert comparison is not None
    record = lab_comparison_record(comparison).model_dump(mode="json")
    record["sigma_pt_source"] = "the fleet's reproducibility s_R (ISO 13528 8.5)" if sigma else \
        "the labs' robust spread s* (few labs: see calibration/proficiency.py)"
    record["en_reference"] = ("E_n against the assigned value x_pt with U = 2 u(x_pt) (ISO 13528 9.7), for labs "
                              "graded against a traceable reference" if refs else None)
    return record
