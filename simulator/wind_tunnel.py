"""Wind-tunnel physics: fans, fan currents, four DPS310 barometers, microphone and potentiometer read-back.

Why this shape: verdicts computed on the simulator must behave like the real chamber, so the barometers carry
what makes the real ones hard to use — a fixed per-unit offset (they agree only with the fans off), noise set by
each unit's oversampling and a flow-dependent part — on top of the chamber authors' mechanistic models of the
causalchamber package: A1 (steady fan speed), A2 (spin-up/down dynamics), B1 (drawn current), C3 (downwind
pressure from both fans and the hatch) and D1 (upwind − downwind). Where the real chamber departs from those
models (issue 14: the real figures of wt_validate_v1 and the authors' validation experiments), the defaults in
simulator/params.py follow the real figures and name them; `simulator/params_authors.json` turns every
departure off, giving the authors' models exactly.

Modelling choices, stated so they can be checked:
- Fan speed: A1 gives the steady state ω∞(L); A2's equation dω/dt = a − Kω²/I is solved in closed form with a
  chosen so that its steady state is A1's (A2's own torque law would give ω∞ ∝ L^1.5, contradicting A1). An
  unpowered fan (0 % duty) coasts under A2's drag plus an assumed bearing friction (`fan_friction_torque_nm`;
  drag alone never stops it: ω0/(1 + Kω0t/I)) and is stopped below `fan_stall_rpm` (assumed): from full speed in
  ~15 s. Below L_min (10 %) a powered fan holds A1's L_min·ω_max, as the Noctua white paper (p7) says of most
  of its PWM fans (they run below 20 % duty and stop at 0 %). This *driven* speed sets the pressures (C3 was
  fitted on loads through A1).
- Cross-effects (authors' ground-truth graph; real figures in params): each fan also turns by `windmill_rpm`,
  the air the other fan drives through it (an idle exhaust reads ~1300 rpm at full intake), less with the hatch
  open; that unloads its motor, so its current drops by `current_windmill_a`·(windmill/ω_max).
- rpm readings: the speed times `tach_rpm_per_model_rpm` (the real tachometer reads ~2870 at load 1), jittered
  by `rpm_noise_rpm` (assumed) and quantised as 30e6/Δt (Δt in whole µs, `res`=1) or 30000/Δt (whole ms,
  `res`=0), as the firmware computes them. The firmware updates only on ticks, so a stopped fan keeps its last
  reading (`rpm_hold_when_stopped`; 0 if it never turned since power-on).
- C3 with fan affinity laws (S_max ∝ ω², Q_max ∝ ω) gives the closed form S_r(ω) = S_max·(ω/ω_max)²·(1 − r(H)).
  downwind = ambient + S_r(ω_in) − S_r(ω_out); upwind = downwind + D1 (c₀ + c₁·(ω_in/ω_max)², while the intake
  fan turns); intake = ambient − `intake_suction_fraction`·S_r(ω_in) + `intake_exhaust_fraction`·S_r(ω_out)
  (no public model; the exhaust term is fitted to the real exhaust step). With both fans stopped all four read
  the ambient pressure plus their offset and noise.
- Barometers: reading = true pressure + unit offset + N(0, σ(osr)² + (σ_in,unit·q_in²)² + (σ_out,unit·q_out²)²)
  + `barometer_temperature_pa_per_k`·ΔT(t), q_fan = that fan's driven ω/ω_max (turbulence ∝ dynamic pressure;
  each fan's own σ because the real intake unit is noisy at full exhaust, 2.2 Pa, and quiet at full intake, 0.89 Pa
  with the hatch moving), ΔT drifting linearly at `temperature_drift_k_per_hour` (0 = off; the firmware
  compensates with a temperature read once at start-up, so a drift shows as a pressure error).
- Fan current: B1 in amperes (minus the windmill term, plus `current_noise_a` row noise), through
  `current_chain` (see params) into a 10-bit ADC read against the *calibrated* reference, averaged over
  `osr_in`/`osr_out` reads.
- Microphone (assumed, no public model): bias + fan hum ∝ mean (ω/ω_max)² + speaker white noise scaled by
  pot_1 (and pot_2 as amplification), read on the ADC. signal_k = pot_k/255 of the supply plus the unit's wiper
  error (zero-scale error at code 0 falling linearly to the full-scale error at 255), read on the ADC.
- Units (issue 34): a unit's parameters differ from today's only in the fields simulator/units.py draws (barometer
  offsets and noise, `fan_speed_gain`, the current sensors' `current_sensitivity_gain`/`current_offset_v`, the
  pots' `pot_zero_scale_lsb`/`pot_full_scale_lsb`); each enters so that today's values add exactly nothing.
- Ambient pressure: simulator/noise.py SmoothWalk around `ambient_mean_pa`.
- Hatch: the A4988 stepper reaches the nearest 1/16 microstep (0.1125°).
- pressure-control configuration: the firmware's PID (error = downwind − input; output in −1..1; positive
  drives the intake fan, negative the exhaust, the other fan at 0.01) runs row by row; a load set explicitly
  (not -9999) overrides the PID for that fan, as on the board.
"""

from __future__ import annotations

import math

import numpy as np

from firmware_bridge.variables import UNSET
from simulator.noise import SmoothWalk, adc_counts, stepper_angle
from simulator.params import BAROMETERS
from simulator.tunnel_model import TunnelModel

RAD_PER_RPM = math.pi / 30.0

POWER_ON: dict[str, float] = {
    # What the Mk1 wind-tunnel firmware's setup() leaves in force (causal-chamber wind_tunnel.ino): loads 0.01
    # (fans idle at L_min), pots 0, hatch homed at 0, barometers at oversampling setting 0x0 (= 1 sample),
    # ADC oversampling 1, ADC reference DEFAULT (5 V), tachometer high resolution.
    "hatch": 0.0,
    "pot_1": 0.0,
    "pot_2": 0.0,
    "osr_1": 1.0,
    "osr_2": 1.0,
    "osr_mic": 1.0,
    "osr_in": 1.0,
    "osr_out": 1.0,
    "osr_upwind": 1.0,
    "osr_downwind": 1.0,
    "osr_ambient": 1.0,
    "osr_intake": 1.0,
    "v_1": 5.0,
    "v_2": 5.0,
    "v_mic": 5.0,
    "v_in": 5.0,
    "v_out": 5.0,
    "load_in": 0.01,
    "load_out": 0.01,
    "res_in": 1.0,
    "res_out": 1.0,
    # pressure-control only
    "input": float("nan"),  # the firmware sets the target to the first downwind reading (filled at reset)
    "gain_p": -0.5,
    "gain_i": -1e-3,
    "gain_d": -0.1,
}

UNSET_AT_POWER_ON = frozenset(
    name for name in POWER_ON if name not in ("load_in", "load_out", "pot_1", "pot_2", "input", "gain_p", "gain_i", "gain_d")
)
"""Actuators the real board reports as -9999 until the host sets them (used when params.power_on_reports_unset)."""


class WindTunnelModel(TunnelModel):
    """PhysicsModel of the Mk1 wind tunnel (configs "standard" and "pressure-control")."""

    KIND = "wt"
    POWER_ON = POWER_ON
    UNSET_AT_POWER_ON = UNSET_AT_POWER_ON

    def _setup(self) -> None:
        p = self.params.wind_tunnel
        self.p = p
        self.rows_per_second = p.rows_per_second
        self._dt = 1.0 / p.rows_per_second
        self._vref_cal = {float(k): float(v) for k, v in p.vref_calibrated.items()}
        # Offsets are drawn once from the generator, before the base keeps its state, so reset() replays the
        # same noise after them.
        if p.barometer_offsets_pa is not None:
            self.offsets = np.array([p.barometer_offsets_pa[b] for b in BAROMETERS], dtype=float)
        else:
            bound = p.barometer_offset_bound_pa
            drawn = self._rng.uniform(-bound, bound, size=len(BAROMETERS))
            drawn[BAROMETERS.index("ambient")] = 0.0  # the ambient reading is the true ambient
            self.offsets = drawn
        self._walk = SmoothWalk(p.ambient_walk_sd_pa, p.ambient_walk_timescale_s, p.ambient_rate_timescale_s, self._dt)

    # ------------------------------------------------------------------------------------------ contract
    def _reset_physics(self) -> None:
        """Power-on physics: fans at rest, the ambient walk and the controller's memory cleared."""
        self._walk.reset()
        self._load_override: dict[str, bool] = {"load_in": False, "load_out": False}
        self._omega = {"in": 0.0, "out": 0.0}
        self._last_rpm = {"in": 0.0, "out": 0.0}  # a fan that never turned since power-on reads 0
        self._pid_prev_error = 0.0
        self._pid_sum_error = 0.0
        if "input" in self._settings:
            target = self.p.ambient_mean_pa + self.offsets[BAROMETERS.index("downwind")]
            self._settings["input"] = target
            self._reported["input"] = target

    def apply(self, name: str, value: float) -> None:
        """Take a validated actuator value. Sensor overrides and bookkeeping are the firmware's, not ours."""
        if name not in self._settings:
            raise KeyError(f"wind tunnel ({self.config}) has no actuator {name!r}; actuators: {', '.join(self._actuators)}")
        value = float(value)
        if name in self._load_override and self.config == "pressure-control":
            self._load_override[name] = value != UNSET
            if value == UNSET:
                return
        self._settings[name] = value
        self._reported[name] = value

    def sample(self, n: int) -> np.ndarray:
        if n < 0:
            raise ValueError(f"sample needs n >= 0, got {n}")
        if self.config == "pressure-control":
            return self._sample_pressure_control(n)
        return self._sample_standard(n)

    # ------------------------------------------------------------------------------------------ physics
    def steady_rpm(self, load: float, fan: str | None = None) -> float:
        """Model A1: ω∞ = max(L, L_min)·ω_max, 0 when L = 0; times `fan`'s unit speed gain when a fan is named
        (fan_speed_gain, issue 34: 1 for today's unit)."""
        if load <= 0.0:
            return 0.0
        speed = max(load, self.p.fan_l_min) * self.p.fan_rpm_max
        return speed * self.p.fan_speed_gain[fan] if fan is not None else speed

    def fan_current_a(self, load: float) -> float:
        """Model B1: C = C_min + max(L, L_min)³·(C_max − C_min); C_min when L = 0."""
        p = self.p
        if load <= 0.0:
            return p.current_min_a
        return p.current_min_a + max(load, p.fan_l_min) ** 3 * (p.current_max_a - p.current_min_a)

    def airflow_ratio(self, hatch_deg: float) -> float:
        return min(1.0, self.p.airflow_ratio_r0 + self.p.airflow_ratio_beta * hatch_deg / 45.0)

    def static_pressure(self, rpm: np.ndarray, hatch_deg: float) -> np.ndarray:
        """Model C3's S_r(ω) in closed form: S_max·(ω/ω_max)²·(1 − r(H))."""
        s = np.asarray(rpm, dtype=float) / self.p.fan_rpm_max
        return self.p.fan_static_pressure_max_pa * s * s * (1.0 - self.airflow_ratio(hatch_deg))

    def vref_calibrated(self, nominal: float) -> float:
        for k, v in self._vref_cal.items():
            if abs(k - nominal) < 1e-6:
                return v
        raise KeyError(f"no calibrated value for ADC reference {nominal} V; known: {sorted(self._vref_cal)}")

    def _fan_trajectory(self, fan: str, load: float, times: np.ndarray) -> np.ndarray:
        """ω (rad/s) at `times` seconds after now, from the current ω; updates the carried state."""
        p = self.p
        b = p.fan_drag_k / p.fan_inertia_kg_m2
        w0 = self._omega[fan]
        w_ss = self.steady_rpm(load, fan) * RAD_PER_RPM
        if w_ss <= 0.0:
            w = self._coast_down(w0, times)
        elif abs(w0 - w_ss) < 1e-12 * w_ss:
            w = np.full_like(times, w_ss)
        else:
            k = b * w_ss
            if w0 < w_ss:
                w = w_ss * np.tanh(k * times + math.atanh(w0 / w_ss))
            else:
                w = w_ss / np.tanh(k * times + math.atanh(w_ss / w0))
        if len(w):
            self._omega[fan] = float(w[-1])
        return w

    def _coast_down(self, w0: float, times: np.ndarray) -> np.ndarray:
        """An unpowered fan, dω/dt = −f − bω² (f = bearing friction / I, b = K/I), in closed form; 0 once stopped.

        With friction, ω = s·tan(atan(ω0/s) − b·s·t), s = √(f/b): it stops at t = atan(ω0/s)/(b·s). Without (the
        authors' A2), ω0/(1 + b·ω0·t), taken as stopped below `fan_stall_rpm`."""
        p = self.p
        b = p.fan_drag_k / p.fan_inertia_kg_m2
        f = p.fan_friction_torque_nm / p.fan_inertia_kg_m2
        if f > 0.0:
            s = math.sqrt(f / b)
            w = s * np.tan(np.clip(math.atan(w0 / s) - b * s * times, 0.0, None))
        else:
            w = w0 / (1.0 + b * w0 * times)
        return np.where(w < p.fan_stall_rpm * RAD_PER_RPM, 0.0, w)

    def windmill_rpm(self, own_rpm: np.ndarray, other_rpm: np.ndarray, hatch_deg: float) -> np.ndarray:
        """Speed (model rpm) that the other fan's air adds to a fan: g·ω_other·(1 − ω_own/ω_max)·h(H).

        Why: the real chamber's fans are coupled through the air they move (an idle exhaust windmills to ~1300 rpm
        at full intake); h(H) = ((1 − r(H))/(1 − r₀))^windmill_hatch_exponent, since an open hatch lets the air
        out before it reaches the other fan. Pressures do not use it: a windmilling fan does not pump."""
        p = self.p
        h = ((1.0 - self.airflow_ratio(hatch_deg)) / (1.0 - p.airflow_ratio_r0)) ** p.windmill_hatch_exponent
        own = np.clip(np.asarray(own_rpm, dtype=float) / p.fan_rpm_max, 0.0, 1.0)
        return p.windmill_gain * np.asarray(other_rpm, dtype=float) * (1.0 - own) * h

    def _rpm_reading(self, fan: str, rpm: np.ndarray, res: float, n: int) -> np.ndarray:
        """Tachometer readings for model speeds `rpm`: scaled to what the real tachometer reads, jittered and
        quantised as the firmware computes them; a stopped fan reports 0 or, with rpm_hold_when_stopped, the last
        reading it produced while turning (the firmware updates only on ticks)."""
        p = self.p
        true = rpm * p.tach_rpm_per_model_rpm
        noisy = true + self._rng.standard_normal(n) * p.rpm_noise_rpm
        ticks_per_s = 1e6 if res >= 0.5 else 1e3
        with np.errstate(divide="ignore", invalid="ignore"):
            dt_ticks = np.round(30.0 * ticks_per_s / noisy)
            quantised = np.clip(30.0 * ticks_per_s / dt_ticks, 0.0, None)
        moving = rpm >= max(p.fan_stall_rpm, 1e-9)
        if not p.rpm_hold_when_stopped:
            return np.where(moving, quantised, 0.0)
        # forward-fill each stopped row with the last moving row's reading (or the carried one)
        last = np.where(moving, np.arange(n), -1)
        np.maximum.accumulate(last, out=last)
        out = np.where(last >= 0, quantised[np.clip(last, 0, None)], self._last_rpm[fan])
        if n:
            self._last_rpm[fan] = float(out[-1])
        return out

    def _current_volts(self, amps: np.ndarray | float, fan: str) -> np.ndarray | float:
        """The current sensor's output for `amps`, with this unit's sensitivity error and offset voltage (issue 34;
        a gain of 1 and 0 V add exactly nothing, so today's unit reads as before)."""
        p = self.p
        signal = 2.0 * amps if p.current_chain == "authors" else p.acs_sensitivity_v_per_a * amps
        base = signal if p.current_chain == "authors" else p.acs_zero_v + signal  # authors: inverse of A = counts/1023·V_ref·2.5/5
        return base + (p.current_sensitivity_gain[fan] - 1.0) * signal + p.current_offset_v[fan]

    def wiper_volts(self, k: str, code: float) -> float:
        """pot_k's wiper voltage at `code`: code/255 of the supply, plus this unit's zero-scale error at code 0
        falling linearly to its full-scale error at code 255 (MCP4151 VWZSE, VWFSE, in LSb = supply/256)."""
        p = self.p
        frac = code / 255.0
        error_lsb = p.pot_zero_scale_lsb[k] * (1.0 - frac) + p.pot_full_scale_lsb[k] * frac
        return p.supply_v * code / 255.0 + p.supply_v * error_lsb / 256.0

    def _sample_standard(self, n: int) -> np.ndarray:
        p = self.p
        s = self._settings
        rng = self._rng
        out = np.zeros((n, self.layout.row_length))
        col = self._col
        for name in self._actuators:
            out[:, col[name]] = self._reported[name]

        times = self._dt * np.arange(1, n + 1)
        hatch = stepper_angle(s["hatch"], p.hatch_steps_per_rev)
        # driven speeds (models A1/A2, model rpm) set the pressures; the air adds windmilling to what turns
        driven = {
            "in": self._fan_trajectory("in", s["load_in"], times) / RAD_PER_RPM,
            "out": self._fan_trajectory("out", s["load_out"], times) / RAD_PER_RPM,
        }
        t_now = self._time + times
        self._time += n * self._dt

        for fan, other in (("in", "out"), ("out", "in")):
            windmill = self.windmill_rpm(driven[fan], driven[other], hatch)
            out[:, col[f"rpm_{fan}"]] = self._rpm_reading(fan, driven[fan] + windmill, s[f"res_{fan}"], n)
            amps = (
                self.fan_current_a(s[f"load_{fan}"])
                - p.current_windmill_a * windmill / p.fan_rpm_max
                + rng.standard_normal(n) * p.current_noise_a
            )
            out[:, col[f"current_{fan}"]] = adc_counts(
                self._current_volts(amps, fan), self.vref_calibrated(s[f"v_{fan}"]), s[f"osr_{fan}"], p.adc_noise_counts, n, rng
            )

        ambient = p.ambient_mean_pa + self._walk.advance(n, rng)
        s_in = self.static_pressure(driven["in"], hatch)
        s_out = self.static_pressure(driven["out"], hatch)
        downwind = ambient + s_in - s_out
        d1 = np.where(driven["in"] > 0.0, p.upwind_d1_intercept_pa + p.upwind_d1_coef_pa * (driven["in"] / p.fan_rpm_max) ** 2, 0.0)
        true = {
            "upwind": downwind + d1,
            "downwind": downwind,
            "ambient": ambient,
            "intake": ambient - p.intake_suction_fraction * s_in + p.intake_exhaust_fraction * s_out,
        }
        flow_in, flow_out = (np.clip(driven[fan] / p.fan_rpm_max, 0.0, 1.0) ** 2 for fan in ("in", "out"))
        drift = p.barometer_temperature_pa_per_k * p.temperature_drift_k_per_hour * t_now / 3600.0
        for i, unit in enumerate(BAROMETERS):
            turbulence = np.hypot(p.barometer_flow_noise_in_pa.get(unit, 0.0) * flow_in,
                                  p.barometer_flow_noise_pa.get(unit, 0.0) * flow_out)
            sigma = np.hypot(self._noise_sd(unit, s[f"osr_{unit}"]), turbulence)
            out[:, col[f"pressure_{unit}"]] = true[unit] + self.offsets[i] + drift + rng.standard_normal(n) * sigma

        w_in, w_out = driven["in"], driven["out"]
        hum = p.mic_fan_v * 0.5 * ((w_in / p.fan_rpm_max) ** 2 + (w_out / p.fan_rpm_max) ** 2)
        speaker = p.mic_speaker_v * (s["pot_1"] / 255.0) * (0.5 + 0.5 * s["pot_2"] / 255.0)
        mic_v = p.mic_bias_v + hum + speaker * np.abs(rng.standard_normal(n)) + p.mic_noise_v * rng.standard_normal(n)
        out[:, col["mic"]] = adc_counts(mic_v, self.vref_calibrated(s["v_mic"]), s["osr_mic"], p.adc_noise_counts, n, rng)
        for k in ("1", "2"):
            volts = self.wiper_volts(k, s[f"pot_{k}"])
            out[:, col[f"signal_{k}"]] = adc_counts(
                volts, self.vref_calibrated(s[f"v_{k}"]), s[f"osr_{k}"], p.adc_noise_counts, n, rng
            )
        return out

    def _noise_sd(self, unit: str, osr: float) -> float:
        by_unit = self.p.barometer_noise_by_unit_pa
        table = by_unit[unit] if by_unit and unit in by_unit else self.p.barometer_noise_pa
        key = int(round(osr))
        if key not in table:
            raise KeyError(f"no barometer noise for oversampling {osr} (unit {unit}); table has {sorted(table)}")
        return table[key]

    def _sample_pressure_control(self, n: int) -> np.ndarray:
        """The firmware's PID, row by row: read downwind, compute the output, drive the fans for the next row."""
        col = self._col
        out = np.zeros((n, self.layout.row_length))
        for i in range(n):
            row = self._sample_standard(1)[0]
            s = self._settings
            pressure = row[col["pressure_downwind"]]
            error = pressure - s["input"]
            delta = error - self._pid_prev_error
            output = s["gain_p"] * error + s["gain_d"] * delta + s["gain_i"] * self._pid_sum_error
            output = max(-1.0, min(1.0, output))
            self._pid_prev_error = error
            self._pid_sum_error += error
            control_in, control_out = (output, 0.01) if output > 0 else (0.01, -output)
            for name, value in (("load_in", control_in), ("load_out", control_out)):
                if not self._load_override[name]:
                    s[name] = value
                    self._reported[name] = value
                row[col[name]] = self._reported[name]
            row[col["error"]] = error
            row[col["delta_error"]] = delta
            row[col["sum_error"]] = self._pid_sum_error
            row[col["output"]] = output
            out[i] = row
        return out
