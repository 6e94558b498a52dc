"""The simulator's own parameter file: every number the chamber physics uses, with defaults and their sources.

Why a file of its own: the physics must be reproducible from published numbers (defaults below, from
../shared/docs/chamber-facts.md) *and* adjustable from a user's recorded data (`bench_cli.py sim fit` writes
this format; `make_model(params=...)` reads it). It is a pydantic model because it crosses a boundary (a JSON
file). Unknown keys are refused so that a typo cannot silently leave a default in force. The simulator never
reads claim files: nothing here is a datasheet claim to be graded, only the chamber's physics.

File format (JSON), every key optional:
    {"version": 1, "source": "...", "wind_tunnel": {...WindTunnelParams...}, "light_tunnel": {...}}
Noise tables are keyed by oversampling / step as strings in JSON ("1", "2", "4", "8").

Two parameter sets (issue 14):
- the defaults below reproduce the real-chamber figures recorded from the public datasets (each field says which
  figure and where it is recorded; "real:" marks them, "authors:" marks the chamber authors' models, "assumed:"
  marks numbers nobody has published);
- `simulator/params_authors.json` (`authors_params()`) is the chamber authors' own models exactly — A1, A2, B1,
  C3, D1 and the light tunnel's `Deterministic`, with offsets 0 and no cross-effects — so the two can be
  compared side by side (benchmarks/bench_sim_figures.py prints both beside the real figures).

Units (issue 34): these defaults are today's unit (serial 0). simulator/units.py draws another unit's values of the
per-part fields (barometer offsets and noise, fan_speed_gain, the current sensors' gains and offsets, the pots'
wiper errors, the light sensors' channel scales) from its one table; each such field enters the physics so that
today's value adds exactly nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from firmware_bridge.model_file import load_model_file
from firmware_bridge.variables import OSR_LEVELS

BAROMETERS = ("upwind", "downwind", "ambient", "intake")
"""The four DPS310 units, by the suffix of their `pressure_*` / `osr_*` variables."""


class _Strict(BaseModel):
    """Unknown keys refused (a typo must not leave a default in force), and NaN or Infinity too (issue 31): a NaN
    offset or gain compares false with every bound, so it would pass each check and poison every row."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class WindTunnelParams(_Strict):
    """Wind-tunnel physics. Defaults: chamber-facts.md (DPS310 datasheet, causalchamber models A1, A2, B1, C3)."""

    rows_per_second: float = Field(7.0, gt=0, description="real board's pace (each barometer waits OSR-8 time + 10 ms)")
    # ambient pressure: smooth, seeded, mean-reverting walk (weather), see simulator/noise.py
    ambient_mean_pa: float = Field(
        94_528.24,
        description="real: mean pressure_ambient of validate_load_out_pressure_intake (wt_validate_v1), the "
        "cross_sensor_check tool output quoted in ../shared/paper-archive/data/classifier_gold.yaml",
    )
    ambient_walk_sd_pa: float = Field(30.0, ge=0, description="stationary SD of the ambient deviation from its mean")
    ambient_walk_timescale_s: float = Field(6 * 3600.0, gt=0, description="mean-reversion time of the deviation")
    ambient_rate_timescale_s: float = Field(1800.0, gt=0, description="correlation time of the pressure trend")
    # barometers
    barometer_offsets_pa: dict[str, float] | None = Field(
        default_factory=lambda: {"upwind": 2.99, "downwind": -8.46, "ambient": 0.0, "intake": -4.61},
        description="fixed per-unit offsets (Pa, ambient = 0). real: solved from the four figures of "
        "validate_load_out_pressure_intake by the seed paper's method (sigma 0.0801 hPa, spread 0.0969 hPa, offset "
        "0.0506 hPa; ../shared/paper-archive/archive/baseline_chamber.json) with the 3000-row means of the tool "
        "output (intake − ambient = −3.02 Pa, classifier_gold.yaml) and model C3; they put the units 11.45 Pa apart, "
        "upwind highest, as the real fans-off readings are (~10–11.5 Pa, issue 14). Not reproduced: D1's fans-off "
        "offset downwind − upwind of −7.10 Pa (wt_bernoulli_v1, another recording); with C3 and that difference "
        "the validate figures cannot all hold (the spread needs the ambient above the upwind unit). authors: 0. "
        "None = drawn "
        "uniformly in ±barometer_offset_bound_pa from the seed (ambient 0). Fitted files hold offsets relative to "
        "the mean of the four units.",
    )
    barometer_offset_bound_pa: float = Field(6.0, ge=0, description="half-width of the random draw when offsets are None")
    barometer_noise_pa: dict[int, float] = Field(
        default_factory=lambda: {1: 2.5, 2: 1.0, 4: 0.5, 8: 0.4},
        description="Gaussian noise RMS by DPS310 oversampling (datasheet precision table)",
    )
    barometer_noise_by_unit_pa: dict[str, dict[int, float]] | None = Field(
        None, description="optional per-unit override of barometer_noise_pa (written by `sim fit`)"
    )
    barometer_flow_noise_pa: dict[str, float] = Field(
        default_factory=lambda: {"upwind": 0.0, "downwind": 0.0, "ambient": 0.0, "intake": 2.15},
        description="extra Gaussian noise (Pa RMS) with the *exhaust* fan at full speed, scaled by q_out² with "
        "q_out = its driven ω/ω_max (turbulence ∝ dynamic pressure). real: intake − mean(others) has std ~2.2 Pa at "
        "full exhaust in validate_load_out_pressure_intake (issue 14) against 0.46 Pa from the osr-8 noise alone: "
        "√(2.2² − 0.46²) = 2.15 Pa, all given to the intake unit (the figure constrains only the combination). "
        "Until issue 34 q was the faster fan's, which put these 2.15 Pa on full-intake rows too (the hatch-move "
        "figure read 2.13 Pa against the real 0.89 Pa; see barometer_flow_noise_in_pa). authors: 0.",
    )
    barometer_flow_noise_in_pa: dict[str, float] = Field(
        default_factory=lambda: {"upwind": 0.0, "downwind": 0.0, "ambient": 0.0, "intake": 0.65},
        description="extra Gaussian noise (Pa RMS) with the *intake* fan at full speed, scaled by q_in², added in "
        "quadrature to barometer_flow_noise_pa's. real: pressure_intake has std 0.888 Pa over the 50 rows of "
        "validate_hatch_pressures (full intake, idle exhaust, osr 8, hatch 0 ↔ 45°; tool output in "
        "classifier_gold.annotator2.yaml). That protocol run on the simulator gives 0.66 Pa without this term (the "
        "hatch's own ~1.1 Pa step of the intake mean over a 26/24 split, and the osr-8 noise); 0.65 Pa brings the "
        "mean over seeds 0..7 to 0.889 Pa (calibration/real_figures.py hatch_move_intake_std gates it). authors: 0.",
    )
    temperature_drift_k_per_hour: float = Field(0.0, description="optional linear temperature drift; 0 = off")
    barometer_temperature_pa_per_k: float = Field(0.5, description="DPS310 temperature sensitivity")
    # fans (A1 steady state, A2 dynamics) and currents (B1)
    fan_l_min: float = Field(0.1, description="authors: model A1 L_min (tutorial_ModelsAB.py)")
    fan_rpm_max: float = Field(3000.0, description="authors: model A1 ω_max; also C3's ω_max")
    fan_inertia_kg_m2: float = Field(3.481e-5, description="authors: model A2 I (tutorial_ModelsAB.py)")
    fan_drag_k: float = Field(5.2687e-8, description="authors: model A2 K (tutorial_ModelsAB.py)")
    fan_speed_gain: dict[str, float] = Field(
        default_factory=lambda: {"in": 1.0, "out": 1.0},
        description="each fan's steady speed relative to model A1's (ω∞ = max(L, L_min)·ω_max·gain), so a unit's "
        "fast fan also pumps more (C3: S ∝ ω²). 1 for today's unit; a unit of issue 34 draws it from the NF-F12's "
        "+/−10 % maximum speed (simulator/units.py)",
    )
    fan_stall_rpm: float = Field(60.0, ge=0, description="below this an unpowered fan is taken as stopped (assumed)")
    fan_friction_torque_nm: float = Field(
        2e-4,
        ge=0,
        description="assumed: the bearing's dry friction, which stops an unpowered fan (A2 has drag K ω² only, "
        "under which a fan at 0 % duty never stops: 3000 rpm → 60 rpm takes ~100 s). 0.2 mN·m is 4 % of A2's drag "
        "at full speed (K·(314 rad/s)² = 5.2 mN·m), so the fitted high-speed dynamics are unchanged, and stops a fan "
        "from full speed in ~15 s, from 300 rpm in ~5 s. Driven speeds are unchanged (the drive overcomes it). "
        "authors: 0",
    )
    rpm_noise_rpm: float = Field(5.0, ge=0, description="tachometer jitter, Gaussian SD (assumed; not published)")
    tach_rpm_per_model_rpm: float = Field(
        2870.0 / 3000.0,
        gt=0,
        description="tachometer reading per model-A1 rpm. real (reported, read off the authors' plots, not gated): "
        "a fan at load 1 reads ~2810–2930 rpm, not 3000; 2870 is the middle. authors: 1. Pressures use the model "
        "speed (C3 was fitted on loads through A1), so this changes only rpm_*",
    )
    windmill_gain: float = Field(
        0.392,
        ge=0,
        description="a fan's rpm rises by this × the other fan's driven speed × (1 − own ω/ω_max) × hatch factor "
        "(air driven through it). real: an idle exhaust (load 0.01) windmills to ~1300 rpm at full intake "
        "(issue 14; authors' ground-truth graph load_in → rpm_out, load_out → rpm_in): 300 + g·3000·0.9 = "
        "1300/tach_rpm_per_model_rpm gives g = 0.392. authors: 0",
    )
    windmill_hatch_exponent: float = Field(
        0.5,
        description="assumed: the windmilling scales with ((1 − r(H))/(1 − r₀))^this — the flow through the other "
        "fan ∝ √(pressure across it) and C3's pressure ∝ (1 − r(H)); ground-truth graph hatch → rpm_in, rpm_out",
    )
    rpm_hold_when_stopped: bool = Field(
        True,
        description="real (issue 14): the firmware updates rpm only on tachometer ticks, so a fan that stops keeps "
        "reporting its last reading (0 only if it never turned since power-on). authors: False (reads 0)",
    )
    current_min_a: float = Field(0.166, description="authors: model B1 C_min")
    current_max_a: float = Field(0.27, description="authors: model B1 C_max")
    current_noise_a: float = Field(
        0.005, ge=0, description="Gaussian row-to-row fan-current noise (A). real (reported, read off the authors' "
        "plots, not gated): ~5 mA. authors: 0 (ADC noise only)",
    )
    current_windmill_a: float = Field(
        0.015,
        description="assumed magnitude, sign from physics: air driven through a fan unloads its motor, so its current "
        "drops by this × (windmill rpm / ω_max); ground-truth graph load_in → current_out, load_out → current_in "
        "(validate_load_in_current_out / validate_load_out_current_in show the effect; no figure is published). "
        "At full intake an idle exhaust draws ~5 mA less. authors: 0",
    )
    current_chain: Literal["authors", "acs70331"] = Field(
        "authors",
        description="'authors': counts = A·1023/(V_ref_cal·2.5/5), the inverse of the chamber authors' conversion, "
        "so their formula recovers model B1; 'acs70331': V = 0.25 V + 0.8 V/A · A read against V_ref_cal",
    )
    acs_zero_v: float = 0.25
    acs_sensitivity_v_per_a: float = 0.8
    current_sensitivity_gain: dict[str, float] = Field(
        default_factory=lambda: {"in": 1.0, "out": 1.0},
        description="each fan current sensor's sensitivity relative to nominal (ACS70331 sensitivity error E_sens; "
        "1 for today's unit, whose chain the authors' B1 fit already holds)",
    )
    current_offset_v: dict[str, float] = Field(
        default_factory=lambda: {"in": 0.0, "out": 0.0},
        description="each fan current sensor's offset voltage V_OE added to its output (V; 0 for today's unit)",
    )
    vref_calibrated: dict[str, float] = Field(
        default_factory=lambda: {"1.1": 1.16, "2.56": 2.65, "5": 5.0},
        description="nominal ADC reference (V) → calibrated value (V)",
    )
    adc_noise_counts: float = Field(0.5, ge=0, description="per-read ADC noise SD before averaging (assumed)")
    # pressures (C3 downwind, D1 upwind, intake)
    fan_static_pressure_max_pa: float = Field(74.8247, description="authors: model C3 S_max")
    fan_flow_max_m3_s: float = Field(186.7 / 3600.0, description="authors: model C3 Q_max")
    airflow_ratio_r0: float = Field(0.75, description="authors: model C3 r₀")
    airflow_ratio_beta: float = Field(0.15, description="authors: model C3 β")
    upwind_d1_intercept_pa: float = Field(
        -0.404,
        description="authors' model D1 (fitted on real wt_bernoulli_v1): P_up − P_dw = this + upwind_d1_coef_pa·"
        "(ω_in/ω_max)² while the intake fan turns (0 with it stopped: then all four share one pressure)",
    )
    upwind_d1_coef_pa: float = Field(11.79, description="authors' model D1 coefficient (see upwind_d1_intercept_pa)")
    intake_suction_fraction: float = Field(
        0.1, description="assumed (no public model): pressure_intake − ambient includes −this × S_r(ω_in)"
    )
    intake_exhaust_fraction: float = Field(
        0.181,
        description="pressure_intake − ambient includes +this × S_r(ω_out) (ground-truth graph load_out → "
        "pressure_intake). real: the exhaust step 0.01 → 1 moves intake − mean(others) by ~15.4–16 Pa in "
        "validate_load_out_pressure_intake (issue 14); with C3 and D1 the others fall by 12.35 Pa, so the intake "
        "rises by 3.35 Pa = this × 18.52 Pa. authors: 0 (they publish no intake model)",
    )
    # microphone and potentiometer read-back (no public model: assumed, documented in wind_tunnel.py)
    mic_bias_v: float = 0.6
    mic_fan_v: float = 0.8
    mic_speaker_v: float = 0.5
    mic_noise_v: float = 0.02
    supply_v: float = 5.0
    pot_zero_scale_lsb: dict[str, float] = Field(
        default_factory=lambda: {"1": 0.0, "2": 0.0},
        description="each MCP4151's zero-scale error VWZSE (LSb = supply/256): the wiper voltage at code 0. The "
        "error falls linearly to pot_full_scale_lsb at code 255. 0 for today's unit (signal_k = pot_k/255 of the "
        "supply)",
    )
    pot_full_scale_lsb: dict[str, float] = Field(
        default_factory=lambda: {"1": 0.0, "2": 0.0},
        description="each MCP4151's full-scale error VWFSE (LSb; ≤ 0: the wiper cannot rise above terminal A), "
        "reached at code 255. 0 for today's unit",
    )
    # pressure-control configuration (firmware PID)
    pid_gains: tuple[float, float, float] = (-0.5, -1e-3, -0.1)  # Kp, Ki, Kd
    # hatch stepper (A4988, 1/16 step, 3200 steps per revolution)
    hatch_steps_per_rev: int = 3200

    @field_validator("barometer_noise_pa")
    @classmethod
    def _all_osr(cls, v: dict[int, float]) -> dict[int, float]:
        missing = [o for o in OSR_LEVELS if o not in v]
        if missing:
            raise ValueError(f"barometer_noise_pa needs oversampling {list(OSR_LEVELS)}, missing {missing}")
        return v

    @field_validator("barometer_flow_noise_pa", "barometer_flow_noise_in_pa")
    @classmethod
    def _known_units(cls, v: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        unknown = sorted(set(v) - set(BAROMETERS))
        if unknown:
            raise ValueError(f"{info.field_name} keys must be among {list(BAROMETERS)}, got {unknown}")
        return v

    @field_validator("barometer_offsets_pa")
    @classmethod
    def _all_units(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is not None and set(v) != set(BAROMETERS):
            raise ValueError(f"barometer_offsets_pa needs exactly {list(BAROMETERS)}, got {sorted(v)}")
        return v

    @field_validator("fan_speed_gain", "current_sensitivity_gain", "current_offset_v")
    @classmethod
    def _both_fans(cls, v: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        if set(v) != {"in", "out"}:
            raise ValueError(f"{info.field_name} needs exactly the fans ['in', 'out'], got {sorted(v)}")
        if info.field_name != "current_offset_v" and not all(g > 0 for g in v.values()):
            raise ValueError(f"{info.field_name} needs gains > 0, got {v}")
        return v

    @field_validator("pot_zero_scale_lsb", "pot_full_scale_lsb")
    @classmethod
    def _both_pots(cls, v: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        if set(v) != {"1", "2"}:
            raise ValueError(f"{info.field_name} needs exactly the potentiometers ['1', '2'], got {sorted(v)}")
        return v


class LightTunnelParams(_Strict):
    """Light-tunnel physics: causalchamber `simulators.lt.sensors.Deterministic` (chamber-facts.md), corrected
    where the real validate_* figures depart from it (vis diode ratio, channel levels, LED leakage, PWM scatter,
    dark level; each field names its figure).

    Noise: each reading's LED light is scaled by (1 + pwm_scatter_rel·ε), then shot noise shot_gain·Poisson(
    level/shot_gain), then Gaussian read-out noise dark_sd, then rounding and clipping to 0..65535. shot_gain is
    assumed (no public figure); the dark level and the PWM scatter are real figures.
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
    vis_diode_gains: tuple[float, float] = Field(
        (2.0 / 2.55, 2.0),
        description="relative gain of the small / large visible photodiode. real: the large/small ratio is ~2.55 "
        "in validate_diode_vis_1 (issue 14; mean 7238.6, std 3140.1 counts over 23 small + 27 large rows, "
        "tool output in classifier_gold.yaml), not the 2× of the authors' model and the datasheet. The large "
        "diode (the firmware default, where the authors fitted S) keeps the authors' gain 2. authors: (1, 2)",
    )
    t_gains_ir: tuple[float, float, float, float] = (1.0, 2.0, 4.0, 8.0)
    t_gains_vis: tuple[float, float, float, float] = (1.0, 2.0, 4.0, 8.0)
    channel_scale: tuple[float, float, float, float, float, float] = Field(
        (1.0, 0.9477, 1.0, 1.0, 2774.0 / 3389.0, 1.0),
        description="real level / authors' model level per channel (ir_1, vis_1, ir_2, vis_2, ir_3, vis_3). "
        "vis_1 0.9477: the large-diode level 10027 counts (from light) that validate_diode_vis_1's mean and std "
        "imply with the 2.55 ratio and 8 % scatter, against the authors' 10581 (RGB 128, diode 1, t 3). ir_3: the "
        "real Malus amplitude for white 255 is ~2774 counts against 3389 in the authors' parameters (reported, "
        "read off the authors' plots, not gated). Others: no figure, 1. authors: all 1",
    )
    pwm_scatter_rel: float = Field(
        0.08,
        ge=0,
        description="relative SD of the LED light a reading integrates (the NeoPixels' ~2 kHz PWM against a "
        "48.8 µs·2^t integration): real ~8 % at a fixed setting — vis_1 std 784 / 821 / 822 counts in "
        "validate_t_vis_3 / diode_vis_2 / diode_vis_3 (issue 14); measured at RGB 128, diode 1, t 3 only and "
        "assumed the same elsewhere. authors: 0",
    )
    dark_mean_counts: float = Field(
        0.34,
        ge=0,
        description="mean dark code with the LEDs off. real: vis_1 in validate_osr_c (all light off, 1000 rows) "
        "has std 0.58 counts and range 0–4 (classifier_gold.yaml), as for a Poisson dark count of mean 0.34 "
        "(√0.34 = 0.58). authors: 0",
    )
    dark_sd_counts: float = Field(
        0.0, ge=0, description="Gaussian read-out floor (counts) on top of the shot term. real: 0 (the dark std "
        "is the shot noise of dark_mean_counts alone); the old assumed default was 2",
    )
    shot_gain: float = Field(1.0, ge=0, description="assumed Poisson-like variance per count")
    led_ir_per_level: float = Field(0.05, ge=0, description="assumed counts (gain 1) per internal-LED level, IR")
    led_vis_per_level: float = Field(
        0.00233,
        ge=0,
        description="counts (gain 1) per internal-LED level on the visible diode. real: validate_l_11 (light off, "
        "l_11 0 ↔ 255 in 26 + 24 rows, diode 1, t 3) has vis_1 std 5.26 counts and max 15 (classifier_gold.yaml): "
        "with the shot noise of the step itself that is a step of ~9.5 counts = 255 × 16 × this. The old assumed "
        "0.02 gave std 40.8",
    )
    current_q: tuple[float, float, float] = (0.12834946, 0.12870338, 0.13078523)
    current_c0: float = 58.133
    current_zero_counts: float = Field(
        0.25 / 5.0 * 1023.0,
        description="the ACS70331's zero-current output (0.25 V) in counts at a 5 V reference: the part of "
        "current_c0 a sensitivity error does not scale",
    )
    current_sensitivity_gain: float = Field(
        1.0, gt=0, description="the light-source current sensor's sensitivity relative to the authors' fit "
        "(ACS70331 E_sens; 1 for today's unit): counts above current_zero_counts scale by it",
    )
    current_offset_v: float = Field(0.0, description="the light-source current sensor's offset voltage V_OE (V; 0 for "
                                    "today's unit)")
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
    """Read and validate a parameter file (JSON by suffix, YAML otherwise) with the one strict reader: a key given
    twice, an empty file (`{}` is the file of defaults), a boolean where a number is meant or a file above
    SETTINGS_MAX_BYTES is refused; ModelFileError names the file, the field, what was expected and what arrived."""
    return load_model_file(path, SimParams, what="simulator parameters")


AUTHORS_PARAMS_PATH = Path(__file__).with_name("params_authors.json")
"""The chamber authors' exact models as a parameter file (load with `authors_params()` or `--params`)."""


def authors_params() -> SimParams:
    """The causalchamber package's models exactly (A1, A2, B1, C3, D1, Deterministic): no per-unit offsets, no
    cross-effects, the datasheet's gains, no PWM scatter. Why a file: the real-figure defaults and the authors'
    models must stay comparable side by side (benchmarks/bench_sim_figures.py), and a user can serve either."""
    return load_params(AUTHORS_PARAMS_PATH)


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
