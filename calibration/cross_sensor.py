"""Cross-sensor calibration of the wind tunnel's four DPS310 barometers against their own mean.

Why: with both fans off the four barometers sit in one pressure (chamber-facts.md), so any difference between
their readings is a per-unit offset (relative accuracy ±6 Pa), not physics. The chamber has no traceable
pressure reference, so the best available estimate of "the" pressure is the four-sensor mean, and the offsets
are stated relative to it. Because they sum to zero, they are not subtracted before a four-unit mean (it would
not change) nor before comparing one unit with a reference (it would hide the error under test); a protocol uses
the calibration for the between-unit scatter it measures (protocols/barometer_protocols.py says where).

This module is the statistics only: the staging (fans off, equal OSR, settle rows discarded) is the declared
calibration protocol in protocols/barometer_protocols.py, run by protocols/runner.py; this module never touches
a chamber.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibration.budget import UncertaintyBudget, UncertaintyComponent, type_a, type_a_from_stats
from firmware_bridge.variables import OSR_LEVELS

log = logging.getLogger(__name__)

BAROMETERS: tuple[str, ...] = ("pressure_upwind", "pressure_downwind", "pressure_ambient", "pressure_intake")
"""The four DPS310 readings (Pa), in the firmware's row order."""

BAROMETER_OSR: dict[str, str] = {
    "pressure_upwind": "osr_upwind",
    "pressure_downwind": "osr_downwind",
    "pressure_ambient": "osr_ambient",
    "pressure_intake": "osr_intake",
}

ALLOWED_OSR = OSR_LEVELS
DEFAULT_SETTLE_ROWS = 20
"""Rows discarded after the SETs: fans spin down and the pressure field relaxes (≈ a few seconds of rows)."""


class CalibrationError(RuntimeError):
    """A calibration that could not be completed; nothing partial is returned."""


@dataclass(frozen=True)
class SensorStatistics:
    """One barometer over the calibration window (Pa)."""

    name: str
    mean: float
    std: float  # sample standard deviation of the n readings (ν = n − 1)
    n: int

    @property
    def u_mean(self) -> float:
        """Type A standard uncertainty of the unit's mean: s/√n."""
        return self.std / math.sqrt(self.n)


@dataclass(frozen=True)
class CrossSensorCalibration:
    """The result of one cross-sensor calibration, in Pa.

    offsets[name] = unit mean − four-sensor mean; subtract it from a unit's reading to put it on the common
    (four-sensor mean) scale. `offset_budgets` and `mean_budget` carry the full GUM budgets.
    """

    chamber: str
    config: str
    osr: int
    n: int
    settle_rows: int
    unit: str
    sensors: tuple[SensorStatistics, ...]
    offsets: dict[str, float]
    offset_budgets: dict[str, UncertaintyBudget]
    mean: float
    mean_budget: UncertaintyBudget
    spread: float  # max − min of the four unit means
    between_unit_std: float  # sample std of the four unit means (ν = 3)
    notes: list[str] = field(default_factory=list)

    @property
    def offset_u(self) -> dict[str, float]:
        return {k: b.combined for k, b in self.offset_budgets.items()}

    @property
    def offset_dof(self) -> dict[str, float]:
        return {k: b.effective_dof for k, b in self.offset_budgets.items()}

    @property
    def mean_u(self) -> float:
        return self.mean_budget.combined

    @property
    def mean_dof(self) -> float:
        return self.mean_budget.effective_dof

    def to_dict(self) -> dict[str, Any]:
        return {
            "chamber": self.chamber,
            "config": self.config,
            "osr": self.osr,
            "n": self.n,
            "settle_rows": self.settle_rows,
            "unit": self.unit,
            "sensors": [
                {"name": s.name, "mean": s.mean, "std": s.std, "n": s.n, "u_mean": s.u_mean} for s in self.sensors
            ],
            "offsets": dict(self.offsets),
            "offset_u": self.offset_u,
            "offset_budgets": {k: b.to_dict() for k, b in self.offset_budgets.items()},
            "mean": self.mean,
            "mean_u": self.mean_u,
            "mean_budget": self.mean_budget.to_dict(),
            "spread": self.spread,
            "between_unit_std": self.between_unit_std,
            "notes": list(self.notes),
        }


def compute_cross_sensor(
    readings: dict[str, np.ndarray],
    *,
    chamber: str = "wt",
    config: str = "standard",
    osr: int = 8,
    settle_rows: int = 0,
    unit: str = "Pa",
) -> CrossSensorCalibration:
    """The statistics of a calibration from already-settled readings (one array of n rows per barometer).

    Offsets: offset_i = p̄_i − (1/4)Σ_j p̄_j = (3/4)p̄_i − (1/4)Σ_{j≠i} p̄_j. Its budget has one Type A component
    per unit mean (u = s_j/√n, ν = n − 1) with sensitivity 3/4 for the unit itself and −1/4 for the others;
    the readings of different units are treated as uncorrelated (a common-mode drift of the room pressure
    cancels in the offset but inflates each s_j, so this errs on the side of a larger u).

    Cross-sensor mean: its uncertainty is the Type A uncertainty of the mean of the FOUR UNIT MEANS,
    s_between/√4 with ν = 3, not a pooled s/√(4n). Why: there is no traceable reference, so the quantity we
    report ("the pressure in the tunnel") is estimated by four instruments each carrying an unknown offset of
    a few Pa (relative accuracy ±6 Pa). Those offsets, not the 0.4 Pa RMS reading noise, dominate; treating the
    four units as a sample of DPS310 offsets, their scatter is the honest Type A evaluation, and there are only
    four of them: ν = 3, so a 95 % statement needs k = t_0.975(3) ≈ 3.18. The within-unit noise is already
    inside that scatter (each unit mean carries σ²/n), so it is not added a second time.
    """
    missing = [name for name in BAROMETERS if name not in readings]
    if missing:
        raise CalibrationError(f"cross-sensor calibration: expected readings of {list(BAROMETERS)}, missing {missing}")
    arrays = {name: np.asarray(readings[name], dtype=np.float64) for name in BAROMETERS}
    lengths = {name: a.shape for name, a in arrays.items()}
    n = arrays[BAROMETERS[0]].shape[0] if arrays[BAROMETERS[0]].ndim == 1 else -1
    if any(a.ndim != 1 or a.shape[0] != n for a in arrays.values()):
        raise CalibrationError(f"cross-sensor calibration: expected four 1-D arrays of equal length, got {lengths}")
    if n < 2:
        raise CalibrationError(f"cross-sensor calibration: expected at least 2 rows per barometer, got {n}")
    for name, a in arrays.items():
        bad = int(np.count_nonzero(~np.isfinite(a)))
        if bad:
            raise CalibrationError(
                f"cross-sensor calibration: {name} has {bad} of {n} readings that are not numbers "
                "(unset or overridden sensor); refusing to calibrate on a partial window"
            )

    sensors = tuple(
        SensorStatistics(name=name, mean=float(np.mean(a)), std=float(np.std(a, ddof=1)), n=n)
        for name, a in arrays.items()
    )
    unit_means = np.array([s.mean for s in sensors])
    grand_mean = float(np.mean(unit_means))
    between = float(np.std(unit_means, ddof=1))
    k = len(sensors)

    per_unit_components = {s.name: type_a_from_stats(f"mean of {s.name}", s.std, s.n) for s in sensors}
    offsets: dict[str, float] = {}
    offset_budgets: dict[str, UncertaintyBudget] = {}
    for s in sensors:
        offsets[s.name] = s.mean - grand_mean
        comps = []
        for other in sensors:
            base = per_unit_components[other.name]
            weight = (k - 1) / k if other.name == s.name else -1.0 / k
            comps.append(
                UncertaintyComponent(
                    name=base.name, u=base.u, dof=base.dof, evaluation="A", basis=base.basis, sensitivity=weight
                )
            )
        offset_budgets[s.name] = UncertaintyBudget(quantity=f"offset of {s.name}", unit=unit, components=tuple(comps))

    mean_budget = UncertaintyBudget(
        quantity="cross-sensor mean pressure",
        unit=unit,
        components=(type_a(f"scatter of the {k} unit means", unit_means.tolist()),),
    )
    notes = [
        "offsets relative to the four-sensor mean; no traceable pressure reference",
        f"mean u = s_between/sqrt({k}), dof = {k - 1}",
    ]
    return CrossSensorCalibration(
        chamber=chamber,
        config=config,
        osr=osr,
        n=n,
        settle_rows=settle_rows,
        unit=unit,
        sensors=sensors,
        offsets=offsets,
        offset_budgets=offset_budgets,
        mean=grand_mean,
        mean_budget=mean_budget,
        spread=float(np.max(unit_means) - np.min(unit_means)),
        between_unit_std=between,
        notes=notes,
    )
