"""The simulator's own parameter file: every number the chamber physics uses, with defaults and their sources.

Why a file of its own: the physics must be reproducible from published numbers (defaults below, from
../shared/docs/chamber-facts.md) *and* adjustable from a user's recorded data (`bench_cli.py sim fit` writes
this format; `make_model(params=...)` reads it). It is a pydantic model because it crosses a boundary (a JSON
file). Unknown keys are refused so that a typo cannot silently leave a default in force. The simulator never
reads claim files: nothing here is a datasheet claim to be graded, only the chamber's physics.

File format (JSON), every key optional:
    {"version": 1, "source": "...", "wind_tunnel": {...WindTunnelParams...}, "light_tunnel": {...}}
Noise tables are keyed by oversampling / step as strings in JSON ("1", "2", "4", "8").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

BAROMETERS = ("upwind", "downwind", "ambient", "intake")
"""The four DPS310 units, by the suffix of their `pressure_*` / `osr_*` variables."""

OSR_VALUES = (1, 2, 4, 8)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WindTunnelParams(_Strict):
    """Wind-tunnel physics. Defaults: chamber-facts.md (DPS310 datasheet, causalchamber models A1, A2, B1, C3)."""

    rows_per_second: float = Field(7.0, gt=0, description="real board's pace (each barometer waits OSR-8 time + 10 ms)")
    # ambient pressure: smooth, seeded, mean-reverting walk (weather), see simulator/noise.py
    ambient_mean_pa: float = 94_528.5
    ambient_walk_sd_pa: float = Field(30.0, ge=0, description="stationary SD of the ambient deviation from its mean")
    ambient_walk_timescale_s: float = Field(6 * 3600.0, gt=0, description="mean-reversion time of the deviation")
    ambient_rate_timescale_s: float = Field(1800.0, gt=0, description="correlation time of the pressure trend")
    # barometers
    barometer_offsets_pa: dict[str, float] | None = Field(
        None,
        description="fixed per-unit offsets; None = ambient 0 (the ambient reading is the true ambient) and the "
        "other three drawn uniformly in ±barometer_offset_bound_pa from the seed. Fitted files hold offsets "
        "relative to the mean of the four units.",
    )
    barometer_offset_bound_pa: float = Field(6.0, ge=0, description="DPS310 relative accuracy ±0.06 hPa")
    barometer_noise_pa: dict[int, float] = Field(
        default_factory=lambda: {1: 2.5, 2: 1.0, 4: 0.5, 8: 0.4},
        description="Gaussian noise RMS by DPS310 oversampling (datasheet precision table)",
    )
    barometer_noise_by_unit_pa: dict[str, dict[int, float]] | None = Field(
        None, description="optional per-unit override of barometer_noise_pa (written by `sim fit`)"
    )
    temperature_drift_k_per_hour: float = Field(0.0, description="optional linear temperature drift; 0 = off")
    barometer_temperature_pa_per_k: float = Field(0.5, description="DPS310 temperature sensitivity")
    # fans (A1 steady state, A2 dynamics) and currents (B1)
    fan_l_min: float = 0.1
    fan_rpm_max: float = 3000.0
    fan_inertia_kg_m2: float = 3.481e-5
    fan_drag_k: float = 5.2687e-8
    fan_stall_rpm: float = Field(60.0, ge=0, description="below this an unpowered fan is taken as stopped (assumed)")
    rpm_noise_rpm: float = Field(5.0, ge=0, description="tachometer jitter, Gaussian SD (assumed; not published)")
    current_min_a: float = 0.166
    current_max_a: float = 0.27
    current_chain: Literal["authors", "acs70331"] = Field(
        "authors",
        description="'authors': counts = A·1023/(V_ref_cal·2.5/5), the inverse of the chamber authors' conversion, "
        "so their formula recovers model B1; 'acs70331': V = 0.25 V + 0.8 V/A · A read against V_ref_cal",
    )
    acs_zero_v: float = 0.25
    acs_sensitivity_v_per_a: float = 0.8
    vref_calibrated: dict[str, float] = Field(
        default_factory=lambda: {"1.1": 1.16, "2.56": 2.65, "5": 5.0},
        description="nominal ADC reference (V) → calibrated value (V)",
    )
    adc_noise_counts: float = Field(0.5, ge=0, description="per-read ADC noise SD before averaging (assumed)")
    # pressures (C3)
    fan_static_pressure_max_pa: float = 74.8247
    fan_flow_max_m3_s: float = 186.7 / 3600.0
    airflow_ratio_r0: float = 0.75
    airflow_ratio_beta: float = 0.15
    upwind_fraction: float = Field(
        0.5, description="assumed: pressure_upwind − ambient = this × (pressure_downwind − ambient)"
    )
    intake_suction_fraction: float = Field(
        0.1, description="assumed: pressure_intake − ambient = −this × S_r(ω_in) (suction before the intake fan)"
    )
    # microphone and potentiometer read-back (no public model: assumed, documented in wind_tunnel.py)
    mic_bias_v: float = 0.6
    mic_fan_v: float = 0.8
    mic_speaker_v: float = 0.5
    mic_noise_v: float = 0.02
    supply_v: float = 5.0
    # pressure-control configuration (firmware PID)
    pid_gains: tuple[float, float, float] = (-0.5, -1e-3, -0.1)  # Kp, Ki, Kd
    # hatch stepper (A4988, 1/16 step, 3200 steps per revolution)
    hatch_steps_per_rev: int = 3200

    @field_validator("barometer_noise_pa")
    @classmethod
    def _all_osr(cls, v: dict[int, float]) -> dict[int, float]:
        missing = [o for o in OSR_VALUES if o not in v]
        if missing:
            raise ValueError(f"barometer_noise_pa needs oversampling {list(OSR_VALUES)}, missing {missing}")
        return v

    @field_validator("barometer_offsets_pa")
    @classmethod
    def _all_units(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is not None and set(v) != set(BAROMETERS):
            raise ValueError(f"barometer_offsets_pa needs exactly {list(BAROMETERS)}, got {sorted(v)}")
        return v


class LightTunnelParams(_Strict):
    """Light-tunnel physics. Defaults: causalchamber `simulators.lt.sensors.Deterministic` (chamber-facts.md).

    Noise is *assumed* (no public figures): Gaussian with variance dark_sd² + shot_gain · counts in code units,
    i.e. a read-out floor plus a Poisson-like term, then rounding and clipping to 0..65535.
    """

    rows_per_second: float = Field(12.0, gt=0)
    response_matrix: tuple[tuple[float, float, float], tuple[float, float, float]] = (
        (4.34165202, 2.8594438, 1.91565691),
        (0.89410569, 1.58679242, 2.68477163),
    )
    distances: tuple[float, float, float] = (0.1, 0.17, 0.25)
    t_single: tuple[float, float, float] = (0.42685688, 0.41231782, 0.46652526)
    t_parallel: tuple[float, float, float] = (0.2909342, 0.29624314, 0.30526271)
    t_crossed: tuple[float, float, float] = (0.00431032, 0.01447611, 0.02041075)
    ir_diode_gains: tuple[float, float, float] = (1.0, 2.0, 4.0)
    vis_diode_gains: tuple[float, float] = (1.0, 2.0)
    t_gains_ir: tuple[float, float, float, float] = (1.0, 2.0, 4.0, 8.0)
    t_gains_vis: tuple[float, float, float, float] = (1.0, 2.0, 4.0, 8.0)
    dark_sd_counts: float = Field(2.0, ge=0, description="assumed read-out noise floor (counts)")
    shot_gain: float = Field(1.0, ge=0, description="assumed Poisson-like variance per count")
    led_ir_per_level: float = Field(0.05, ge=0, description="assumed counts (gain 1) per internal-LED level, IR")
    led_vis_per_level: float = Field(0.02, ge=0, description="assumed counts (gain 1) per internal-LED level, visible")
    current_q: tuple[float, float, float] = (0.12834946, 0.12870338, 0.13078523)
    current_c0: float = 58.133
    angle_counts_per_deg: float = 1.42261211
    angle_zero_counts: tuple[float, float] = (506.805, 510.983)
    adc_noise_counts: float = Field(0.5, ge=0)
    polarizer_steps_per_rev: int = 1600  # A4988 1/8 step on a 200-step motor
    polarizer_gear_ratio: float = 0.5  # 25:50 teeth
    v_board_counts: float = Field(1023.0, description="diagnostic column, constant (assumed)")
    v_reg_counts: float = Field(675.0, description="diagnostic column, constant (assumed: 3.3 V on a 5 V reference)")


class SimParams(_Strict):
    """The whole parameter file."""

    version: Literal[1] = 1
    source: str = "defaults from docs/chamber-facts.md"
    wind_tunnel: WindTunnelParams = Field(default_factory=WindTunnelParams)
    light_tunnel: LightTunnelParams = Field(default_factory=LightTunnelParams)
    power_on: dict[str, float] = Field(
        default_factory=dict,
        description="overrides of the power-on actuator values (wind_tunnel.POWER_ON, light_tunnel.POWER_ON)",
    )
    power_on_reports_unset: bool = Field(
        False,
        description="report -9999 for the actuators the real firmware leaves unset until the host sets them "
        "(the physics still runs at the firmware's effective power-on settings)",
    )

    def power_on_settings(self, actuators: list[str], defaults: dict[str, float]) -> dict[str, float]:
        """Each actuator's power-on value: the chamber's default (0 if none), overridden by `power_on`.

        Why here: both chamber models resolve their power-on state the same way; overrides naming another
        chamber's actuators are ignored, so one parameter file serves both.
        """
        settings = {n: defaults.get(n, 0.0) for n in actuators}
        for name, value in self.power_on.items():
            if name in settings:
                settings[name] = float(value)
        return settings


def load_params(path: str | Path) -> SimParams:
    """Read and validate a parameter file; pydantic's error names the offending key."""
    text = Path(path).read_text(encoding="utf-8")
    return SimParams.model_validate(json.loads(text))


def params_from(data: dict | SimParams | None) -> SimParams:
    """What make_model(params=...) accepts: None (defaults), a loaded dict, or a SimParams."""
    if data is None:
        return SimParams()
    if isinstance(data, SimParams):
        return data
    return SimParams.model_validate(data)


def dump_params(params: SimParams) -> dict:
    """JSON-ready dict (noise keys become strings, tuples lists)."""
    return params.model_dump(mode="json")
