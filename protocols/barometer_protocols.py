"""Protocols for the wind tunnel's four DPS310 barometers: the cross-sensor calibration and the DPS310 claims.

- cross-sensor calibration: fans off, equal OSR; each unit's offset from the four-unit mean
  (calibration/cross_sensor.py has the statistics). One declaration serves `calibrate`, the main job, a planned
  batch, the chamber tools API's cross_sensor_check and a recorded CSV.
- operating range: the same fans-off staging; the four-unit mean is the tunnel's pressure, and its Type A
  uncertainty over four units (ν = 3) is the honest u. It shares its staging with the calibration, so a
  planned batch measures both from one read.
- pressure precision: fans off; each unit's RMS noise per OSR with the common-mode (room pressure drift) removed
  row by row, so the ambient random walk does not masquerade as sensor noise.
- relative accuracy: decided before staging. The claim is a ±6 Pa agreement for 1 hPa steps; the chamber's fans
  make at most ≈75 Pa, and its only references are other DPS310s carrying the same ±6 Pa spec, so the achievable
  u of the comparison is at least t itself (t/u ≤ 1: resolution-limited, verdict.capability_precheck). A
  calibration on hand (a record or the batch's own) raises the achievable u to its between-unit scatter when
  that is larger.
- absolute accuracy: needs a traceable pressure reference the chamber does not have; nothing is staged.

Instances (a fleet's units, protocols/fleet_instances.py): the operating range and the pressure precision read all
four DPS310s in one fans-off staging, so each is graded on its own as well — its mean pressure (Type A of the mean,
its rows kept as readings), its common-mode-removed RMS noise at OSR 8 (u = s/√(2ν); as readings, the same noise
estimated in PRECISION_BLOCKS consecutive blocks of the rows).

Why the calibration's offsets are not subtracted anywhere here: they are relative to the four-unit mean, so
subtracting them before taking that mean changes nothing, and subtracting them from one unit before comparing it
with a reference would hide the very error under test. Where the calibration enters a verdict, it enters as
evidence of the between-unit scatter (relative accuracy), never as a correction.
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np

from calibration.budget import UncertaintyBudget, UncertaintyComponent
from calibration.cross_sensor import (
    ALLOWED_OSR,
    BAROMETER_OSR,
    BAROMETERS,
    CalibrationError,
    compute_cross_sensor,
)
from protocols.claims import Claim
from protocols.declaration import Declaration, Evaluation, Inputs, ProtocolOutcome, Settings, Step
from protocols.fleet_instances import INSTANCES, Instance, mean_instance
from protocols.measurement import Measurement
from protocols.verdict import CapabilityCheck, capability_precheck

FANS_OFF: Settings = (("load_in", 0.0), ("load_out", 0.0))


def fans_off_at(osr: int) -> Settings:
    """Both fans off (one pressure at every barometer) and the same oversampling on all four."""
    return FANS_OFF + tuple((BAROMETER_OSR[b], float(osr)) for b in BAROMETERS)


def fans_off_step(osr: int, rows: int | None = None, settle_rows: int | None = None) -> Step:
    return Step(f"fans off, OSR {osr}", fans_off_at(osr), BAROMETERS, rows=rows, settle_rows=settle_rows)


# ---------------------------------------------------------------------------------------- calibration
def _evaluate_calibration(e: Evaluation) -> ProtocolOutcome:
    (readings,) = e.readings
    if readings.reconnected:
        raise CalibrationError(
            "cross-sensor calibration: the link reconnected during the read; rows discarded, run it again")
    osr = int(dict(readings.settings).get(BAROMETER_OSR[BAROMETERS[0]], 0))
    cal = compute_cross_sensor({b: readings.column(b) for b in BAROMETERS}, chamber="wt", config=e.config,
                               osr=osr, settle_rows=_settle_of(e))
    return ProtocolOutcome(calibration=cal, details={"calibration": cal.to_dict()})


def _settle_of(e: Evaluation) -> int:
    return e.readings[0].settle_rows if e.readings else 0


def cross_sensor_calibration(osr: int = 8, rows: int | None = None, settle_rows: int | None = None) -> Declaration:
    """The calibration as a declaration (osr, rows, settle_rows: its sizes; None = the run's)."""
    if isinstance(osr, bool) or int(osr) != osr or int(osr) not in ALLOWED_OSR:
        raise CalibrationError(f"cross-sensor calibration: expected osr in {ALLOWED_OSR}, got {osr!r}")
    if rows is not None and (int(rows) != rows or rows < 2):
        raise CalibrationError(f"cross-sensor calibration: expected n >= 2 rows, got {rows!r}")
    if settle_rows is not None and (int(settle_rows) != settle_rows or settle_rows < 0):
        raise CalibrationError(f"cross-sensor calibration: expected settle_rows >= 0, got {settle_rows!r}")
    return Declaration(
        key="calibration.cross_sensor", chamber="wt", unit="Pa",
        steps=(fans_off_step(int(osr), rows, settle_rows),),
        evaluate=_evaluate_calibration,
        description="Fans off, equal OSR: each DPS310's offset from the four-unit mean, with GUM budgets.",
    )


CROSS_SENSOR = cross_sensor_calibration(8)


# ------------------------------------------------------------------------------------------- claims
def _evaluate_operating_range(e: Evaluation) -> ProtocolOutcome:
    (readings,) = e.readings
    cal = compute_cross_sensor({b: readings.column(b) for b in BAROMETERS}, chamber="wt", config=e.config, osr=8,
                               settle_rows=_settle_of(e))
    measurement = Measurement.from_budget(
        cal.mean, cal.mean_budget, n=readings.n * len(BAROMETERS), matched_conditions=list(e.matched),
        details={"basis": "mean of the four DPS310 unit means (u: s_between/sqrt(4), nu = 3)",
                 "unit_means_pa": {s.name: s.mean for s in cal.sensors}, "spread_pa": cal.spread,
                 "reconnected": e.reconnected},
    )
    instances = tuple(mean_instance(b, readings.column(b), quantity=f"mean {b}, fans off", unit="Pa",
                                    matched=e.matched) for b in BAROMETERS)
    return ProtocolOutcome(measurement=measurement, details={"calibration": cal.to_dict(), INSTANCES: instances})


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


PRECISION_OSRS = ALLOWED_OSR
PRECISION_BLOCKS = 4
"""Consecutive blocks a unit's OSR-8 rows are cut into for its repeated noise readings (each needs 5 rows)."""


def _precision_instances(columns: dict[str, np.ndarray], matched: tuple[str, ...]) -> tuple[Instance, ...]:
    """Each DPS310's RMS noise at OSR 8 (common mode removed) with u = s/√(2ν), and the same noise estimated in
    PRECISION_BLOCKS consecutive blocks as its readings (none when a block would hold fewer than 5 rows)."""
    noise = common_mode_removed_noise(columns)
    n = len(next(iter(columns.values())))
    size = n // PRECISION_BLOCKS
    blocks = [common_mode_removed_noise({b: c[i * size:(i + 1) * size] for b, c in columns.items()})
              for i in range(PRECISION_BLOCKS)] if size >= 5 else []
    out = []
    for b, s in noise.items():
        budget = UncertaintyBudget(
            quantity=f"{b} RMS noise at OSR 8", unit="Pa",
            components=(UncertaintyComponent(name=f"{b} RMS noise (Type A of s)", u=s / math.sqrt(2 * (n - 1)),
                                             dof=float(n - 1), evaluation="A", basis="s/sqrt(2*nu), one unit"),))
        m = Measurement.from_budget(s, budget, n=n, matched_conditions=list(matched))
        out.append(Instance(b, m, tuple(block[b] for block in blocks)))
    return tuple(out)


def _evaluate_pressure_precision(e: Evaluation) -> ProtocolOutcome:
    per_osr = {osr: common_mode_removed_noise({b: e.step(f"fans off, OSR {osr}").column(b) for b in BAROMETERS})
               for osr in PRECISION_OSRS}
    rows = {osr: e.step(f"fans off, OSR {osr}").n for osr in PRECISION_OSRS}
    best = per_osr[8]
    n = rows[8]
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
    measurement = Measurement.from_budget(
        pooled, budget, n=n * len(best), matched_conditions=list(e.matched),
        details={"rms_pa_by_osr": {str(k): v for k, v in per_osr.items()},
                 "rows_by_osr": {str(k): v for k, v in rows.items()},
                 "note": "OSR 8 is the chamber firmware's maximum; the claim's 64x mode cannot be staged"},
    )
    best_columns = {b: e.step("fans off, OSR 8").column(b) for b in BAROMETERS}
    return ProtocolOutcome(measurement=measurement, details={INSTANCES: _precision_instances(best_columns, e.matched)})


def relative_accuracy_precheck(claim: Claim, inputs: Inputs) -> CapabilityCheck:
    """Achievable u ≥ t: the references are DPS310s of the same ±t spec (and the measured spread, if larger)."""
    t = Decimal(claim.tolerance.value)
    achievable = t
    calibration = inputs.calibration
    if calibration is not None and Decimal(repr(calibration.between_unit_std)) > achievable:
        achievable = Decimal(repr(round(calibration.between_unit_std, 3)))
    return capability_precheck(claim, achievable, unit="Pa")


OPERATING_RANGE = Declaration(
    key="dps310.operating_range", chamber="wt", unit="Pa",
    steps=(fans_off_step(8),),
    evaluate=_evaluate_operating_range,
    description="Fans off so all four DPS310s see one pressure; the four-unit mean with u = s_between/sqrt(4).",
)
PRESSURE_PRECISION = Declaration(
    key="dps310.pressure_precision", chamber="wt", unit="Pa",
    steps=tuple(fans_off_step(osr) for osr in PRECISION_OSRS),
    evaluate=_evaluate_pressure_precision,
    description="Fans off; RMS noise of each DPS310 per OSR 1/2/4/8 with the common-mode pressure removed.",
)
RELATIVE_ACCURACY = Declaration(
    key="dps310.relative_accuracy", chamber="wt", unit="Pa",
    precheck=relative_accuracy_precheck,
    description="Capability pre-check only: the references are DPS310s of the same spec (t/u <= 1).",
)
ABSOLUTE_ACCURACY = Declaration(
    key="dps310.absolute_accuracy", chamber=None, unit="Pa",
    description="Not staged: absolute accuracy needs a traceable pressure reference the chamber lacks.",
)

DECLARATIONS: tuple[Declaration, ...] = (OPERATING_RANGE, PRESSURE_PRECISION, RELATIVE_ACCURACY, ABSOLUTE_ACCURACY)
