"""Cross-sensor calibration of the four DPS310s, on a unit-test fake of the chamber driver.

The fake (below) stands in for chamber.driver.Chamber in this one-layer unit test only: it records the SETs it
receives and returns frames whose barometer columns are a shared pressure + a known per-unit offset + seeded
Gaussian noise, with a decaying transient in the first rows after a SET. The staging is the declared calibration
protocol (protocols/barometer_protocols.py) run by protocols/runner.py; the statistics are calibration/'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from scipy import stats

from calibration.cross_sensor import (
    BAROMETERS,
    CalibrationError,
    compute_cross_sensor,
)
from protocols.runner import calibrate


def measure_cross_sensor_offsets(chamber, n=200, osr=8, settle_rows=20):
    """The calibration protocol as the runner runs it (it was a function of calibration/ before it was declared)."""
    return calibrate(chamber, n=n, osr=osr, settle_rows=settle_rows)

TRUE_OFFSETS = {"pressure_upwind": 3.0, "pressure_downwind": -2.5, "pressure_ambient": 1.0, "pressure_intake": -4.0}
NOISE_PA = 0.4  # DPS310 precision at OSR 8 (chamber-facts.md)


@dataclass
class FakeLayout:
    chamber: str = "wt"
    config: str = "standard"


@dataclass
class FakeFrame:
    names: list[str]
    values: np.ndarray
    reconnected: bool = False
    config: str = "standard"

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.names.index(name)]


@dataclass
class FakeWindTunnel:
    """Unit-test fake of the Chamber driver (see module docstring)."""

    rng: np.random.Generator
    chamber: str = "wt"
    transient_pa: float = 40.0
    transient_rows: int = 10
    reconnect: bool = False
    nan_row: int | None = None
    sets: list[dict[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.layout = FakeLayout(self.chamber)
        self.config = "standard"

    def set_many(self, values: dict[str, float]) -> None:
        self.sets.append(dict(values))

    def measure(self, n: int) -> FakeFrame:
        base = 94528.5 + np.zeros(n)
        base[: self.transient_rows] += self.transient_pa * np.exp(-np.arange(min(n, self.transient_rows)) / 3.0)
        cols = [base + TRUE_OFFSETS[name] + self.rng.normal(0.0, NOISE_PA, n) for name in BAROMETERS]
        values = np.column_stack(cols)
        if self.nan_row is not None:
            values[self.nan_row, 1] = np.nan
        return FakeFrame(list(BAROMETERS), values, reconnected=self.reconnect)


def test_staging_turns_fans_off_and_sets_equal_oversampling(rng):
    chamber = FakeWindTunnel(rng)
    measure_cross_sensor_offsets(chamber, n=50, osr=4, settle_rows=12)
    assert chamber.sets == [{
        "load_in": 0.0, "load_out": 0.0,
        "osr_upwind": 4.0, "osr_downwind": 4.0, "osr_ambient": 4.0, "osr_intake": 4.0,
    }]


def test_offsets_recover_the_planted_per_unit_offsets(rng):
    cal = measure_cross_sensor_offsets(FakeWindTunnel(rng), n=400, osr=8, settle_rows=20)
    planted_mean = np.mean(list(TRUE_OFFSETS.values()))
    for name in BAROMETERS:
        expected = TRUE_OFFSETS[name] - planted_mean
        u = cal.offset_u[name]
        # u(offset) = sqrt(3/4) * sigma/sqrt(n) for equal noise: the 3/4 and -1/4 sensitivities of the budget.
        assert u == pytest.approx(math.sqrt(0.75) * NOISE_PA / math.sqrt(400), rel=0.15)  # s vs sigma at n=400
        assert abs(cal.offsets[name] - expected) < 5 * u  # 5 u: a fixed seed, and a wide margin against chance
    assert sum(cal.offsets.values()) == pytest.approx(0.0, abs=1e-9)  # offsets are relative to their own mean


def test_mean_uncertainty_is_scatter_of_four_unit_means_with_three_dof(rng):
    cal = measure_cross_sensor_offsets(FakeWindTunnel(rng), n=100)
    unit_means = np.array([s.mean for s in cal.sensors])
    assert cal.mean == pytest.approx(unit_means.mean())
    assert cal.mean_u == pytest.approx(np.std(unit_means, ddof=1) / 2)
    assert cal.mean_dof == 3
    assert cal.mean_budget.coverage_factor == pytest.approx(stats.t.ppf(0.975, 3))
    assert cal.spread == pytest.approx(unit_means.max() - unit_means.min())


def test_settling_rows_are_discarded(rng):
    # a 40 Pa transient common to all units: it cancels in the offsets but would inflate each unit's s.
    with_settle = measure_cross_sensor_offsets(FakeWindTunnel(np.random.default_rng(7)), n=60, settle_rows=10)
    without = measure_cross_sensor_offsets(FakeWindTunnel(np.random.default_rng(7)), n=70, settle_rows=0)
    assert max(s.std for s in with_settle.sensors) < 2 * NOISE_PA
    assert min(s.std for s in without.sensors) > 2 * NOISE_PA
    assert with_settle.n == 60 and with_settle.settle_rows == 10


def test_refuses_light_tunnel_bad_osr_and_reconnected_or_nan_frames(rng):
    with pytest.raises(CalibrationError, match="wind tunnel"):
        measure_cross_sensor_offsets(FakeWindTunnel(rng, chamber="lt"))
    with pytest.raises(CalibrationError, match="osr"):
        measure_cross_sensor_offsets(FakeWindTunnel(rng), osr=16)
    with pytest.raises(CalibrationError, match="reconnected"):
        measure_cross_sensor_offsets(FakeWindTunnel(rng, reconnect=True), n=20)
    with pytest.raises(CalibrationError, match="pressure_downwind has 1 of 20"):
        measure_cross_sensor_offsets(FakeWindTunnel(rng, nan_row=25), n=20, settle_rows=20)


def test_compute_needs_all_four_barometers():
    with pytest.raises(CalibrationError, match="missing"):
        compute_cross_sensor({"pressure_upwind": np.ones(5)})


def test_to_dict_is_json_ready(rng):
    import json

    cal = measure_cross_sensor_offsets(FakeWindTunnel(rng), n=30)
    data = json.loads(json.dumps(cal.to_dict()))
    assert data["mean_budget"]["effective_dof"] == 3
    assert set(data["offsets"]) == set(BAROMETERS)
