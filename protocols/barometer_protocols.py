"""Protocols for DPS310 claims on the wind tunnel's four barometers.

- operating range: fans off, equal OSR; the four-unit mean is the tunnel's pressure, and its Type A uncertainty
  over four units (ν = 3) is the honest u (calibration/cross_sensor.py explains why).
- pressure precision: fans off; each unit's RMS noise per OSR with the common-mode (room pressure drift) removed
  row by row, so the ambient random walk does not masquerade as sensor noise.
- relative accuracy: decided before staging. The claim is a ±6 Pa agreement for 1 hPa steps; the chamber's fans
  make at most ≈75 Pa, and its only references are other DPS310s carrying the same ±6 Pa spec, so the achievable
  u of the comparison is at least t itself (t/u ≤ 1: resolution-limited, verdict.capability_precheck).
- absolute accuracy: needs a traceable pressure reference the chamber does not have; nothing is staged.
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np

from calibration.budget import UncertaintyBudget, UncertaintyComponent
from calibration.cross_sensor import BAROMETER_OSR, BAROMETERS, compute_cross_sensor
from protocols.claims import Claim
from protocols.measurement import Measurement
from protocols.registry import ClaimProtocol, ProtocolContext, ProtocolOutcome, register
from protocols.staging import apparatus_guard, stage_and_measure
from protocols.verdict import CapabilityCheck, capability_precheck

FANS_OFF = (("load_in", 0.0), ("load_out", 0.0))


def _fans_off_with_osr(osr: int) -> dict[str, float]:
    settings = dict(FANS_OFF)
    settings.update({BAROMETER_OSR[b]: float(osr) for b in BAROMETERS})
    return settings


def _matched(claim: Claim, staged: set[str]) -> list[str]:
    """Names of the claim's conditions whose chamber variable this protocol staged or read."""
    return [c.name for c in claim.conditions if c.variable and c.variable in staged]


@apparatus_guard("Pa")
def measure_operating_range(context: ProtocolContext, claim: Claim) -> ProtocolOutcome:
    chamber = context.chamber("wt")
    context.progress(f"{claim.id}: fans off, OSR 8, settle {context.settle_rows} rows, measure {context.rows}")
    frame = stage_and_measure(chamber, _fans_off_with_osr(8), context.rows, context.settle_rows)
    readings = {b: frame.column(b) for b in BAROMETERS}
    cal = compute_cross_sensor(readings, chamber="wt", config=chamber.config, osr=8, settle_rows=context.settle_rows)
    staged = {"load_in", "load_out", *BAROMETER_OSR.values(), *BAROMETERS}
    measurement = Measurement.from_budget(
        cal.mean,
        cal.mean_budget,
        n=len(readings[BAROMETERS[0]]) * len(BAROMETERS),
        matched_conditions=_matched(claim, staged),
        details={"basis": "mean of the four DPS310 unit means (u: s_between/sqrt(4), nu = 3)",
                 "unit_means_pa": {s.name: s.mean for s in cal.sensors}, "spread_pa": cal.spread,
                 "reconnected": bool(getattr(frame, "reconnected", False))},
    )
    return ProtocolOutcome(measurement=measurement, details={"calibration": cal.to_dict()})


def common_mode_removed_noise(readings: dict[str, np.ndarray]) -> dict[str, float]:
    """Each unit's noise σ with the row-wise four-unit mean removed.

    For k units of equal σ, Var(p_i − mean_row) = σ²(1 − 1/k), so σ̂_i = std(p_i − mean_row)/√(1 − 1/k).
    The slow room-pressure walk is common to all units and cancels; per-unit offsets only shift the mean.
    """
    names = list(readings)
    stacked = np.vstack([np.asarray(readings[n], dtype=np.float64) for n in names])
    residual = stacked - stacked.mean(axis=0, keepdims=True)
    k = len(names)
    scale = math.sqrt(1.0 - 1.0 / k)
    return {n: float(np.std(residual[i], ddof=1) / scale) for i, n in enumerate(names)}


@apparatus_guard("Pa")
def measure_pressure_precision(context: ProtocolContext, claim: Claim) -> ProtocolOutcome:
    chamber = context.chamber("wt")
    per_osr: dict[int, dict[str, float]] = {}
    for osr in (1, 2, 4, 8):
        context.progress(f"{claim.id}: fans off, OSR {osr}, measure {context.rows} rows")
        frame = stage_and_measure(chamber, _fans_off_with_osr(osr), context.rows, context.settle_rows)
        per_osr[osr] = common_mode_removed_noise({b: frame.column(b) for b in BAROMETERS})
    best = per_osr[8]
    n = context.rows
    pooled = math.sqrt(sum(s * s for s in best.values()) / len(best))
    dof = len(best) * (n - 1)
    # Standard uncertainty of a sample standard deviation: s / sqrt(2 ν) (normal readings).
    budget = UncertaintyBudget(
        quantity="DPS310 pressure precision (RMS noise) at OSR 8",
        unit="Pa",
        components=(
            UncertaintyComponent(name="pooled RMS noise at OSR 8 (Type A of s)", u=pooled / math.sqrt(2 * dof),
                                 dof=float(dof), evaluation="A", basis="s/sqrt(2*nu), four units pooled"),
        ),
    )
    staged = {"load_in", "load_out", *BAROMETER_OSR.values()}
    measurement = Measurement.from_budget(
        pooled, budget, n=n * len(best), matched_conditions=_matched(claim, staged),
        details={"rms_pa_by_osr": {str(k): v for k, v in per_osr.items()},
                 "note": "OSR 8 is the chamber firmware's maximum; the claim's 64x mode cannot be staged"},
    )
    return ProtocolOutcome(measurement=measurement)


def relative_accuracy_precheck(context: ProtocolContext, claim: Claim) -> CapabilityCheck:
    """Achievable u ≥ t: the references are DPS310s of the same ±t spec (and the measured spread, if larger)."""
    t = Decimal(claim.tolerance.value)
    achievable = t
    calibration = context.calibration
    if calibration is not None and Decimal(repr(calibration.between_unit_std)) > achievable:
        achievable = Decimal(repr(round(calibration.between_unit_std, 3)))
    return capability_precheck(claim, achievable, unit="Pa")


def _not_staged(context: ProtocolContext, claim: Claim) -> ProtocolOutcome:
    return ProtocolOutcome(measurement=None)


def _run_relative_accuracy(context: ProtocolContext, claim: Claim) -> ProtocolOutcome:
    # Only reached when the pre-check says the claim is resolvable (a future reference barometer).
    return ProtocolOutcome(measurement=None)


register(ClaimProtocol(
    key="dps310.operating_range", chamber="wt",
    stages=FANS_OFF + tuple((BAROMETER_OSR[b], 8.0) for b in BAROMETERS),
    reads=BAROMETERS,
    description="Fans off so all four DPS310s see one pressure; the four-unit mean with u = s_between/sqrt(4).",
    run=measure_operating_range,
))
register(ClaimProtocol(
    key="dps310.pressure_precision", chamber="wt",
    stages=FANS_OFF + tuple((BAROMETER_OSR[b], float(o)) for o in (1, 2, 4, 8) for b in BAROMETERS),
    reads=BAROMETERS,
    description="Fans off; RMS noise of each DPS310 per OSR 1/2/4/8 with the common-mode pressure removed.",
    run=measure_pressure_precision,
))
register(ClaimProtocol(
    key="dps310.relative_accuracy", chamber="wt", stages=(), reads=(),
    description="Capability pre-check only: the references are DPS310s of the same spec (t/u <= 1).",
    run=_run_relative_accuracy, precheck=relative_accuracy_precheck,
))
register(ClaimProtocol(
    key="dps310.absolute_accuracy", chamber=None, stages=(), reads=(),
    description="Not staged: absolute accuracy needs a traceable pressure reference the chamber lacks.",
    run=_not_staged,
))
