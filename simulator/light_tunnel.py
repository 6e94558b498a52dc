"""Light-tunnel physics: three Si1151 light sensors behind two polarizers, the light-source current, angle sensors.

Why this shape: the chamber authors' deterministic sensor model of the causalchamber package (response matrix S,
distances, polarizer transmissions, Malus's law) fixes the *mean* code; a realistic chamber adds what the model
leaves out and what verdicts depend on — 16-bit codes that saturate at 65535, the scatter of the light source's
PWM, internal-LED leakage, a dark level and read-out noise — and corrects it where the real validate_* figures
depart from it (issue 14; each correction is a field of LightTunnelParams naming its figure; the authors'
model exactly is `simulator/params_authors.json`).

The model (numbers in simulator/params.py, sources there and in ../shared/docs/chamber-facts.md), for
RGB = (red, green, blue) of the 37 LEDs:
- sensor 1: light = g_diode · g_t · (S · RGB) · channel_scale, with relative gains g_diode = ir (1, 2, 4) /
  visible (2/2.55, 2: the real large/small ratio is 2.55) and g_t = 2^t for the integration time 48.8 µs·2^t;
- sensor 2: the same with diag(Ts)·RGB (polarizer 1) and (d1/d2)²;
- sensor 3: diag(Tc + (Tp − Tc)·cos²(θ1 − θ2))·RGB (both polarizers, Malus) and (d1/d3)²;
- internal LEDs l_j1, l_j2 (lit only while sensor j is read) add g·`led_*_per_level`·(l_j1 + l_j2) counts;
- every reading adds the dark level `dark_mean_counts`.

Noise: the light part of each reading is scaled by (1 + pwm_scatter_rel·ε) — the LEDs' ~2 kHz PWM against the
µs-long integration (real: ~8 % at a fixed setting) — then shot noise, shot_gain·Poisson(level/shot_gain)
(variance shot_gain·level; shot_gain assumed: no public figure; Poisson so that the real dark level of a third
of a count comes out right), then Gaussian read-out noise dark_sd, rounded to an integer and clipped to
0..65535, so 65535 means saturated exactly as on the chip.

Light-source current: counts = (Q·RGB + C0)·5/v_c on the 10-bit ADC (causalchamber model), averaged over osr_c
reads; a unit's ACS70331 sensitivity error scales the part above its 0.25 V zero-current output, and its offset
voltage adds (both nil for today's unit). Angle sensors: counts = (A·θ + a_k)·5/v_angle_k, capped at 1023. Polarizer angles θ are the angles the
A4988 steppers really reach (nearest 1/8 microstep through the 25:50 gear, 0.1125°).
"""

from __future__ import annotations

import math

import numpy as np

from simulator.noise import ADC_FULL_SCALE, stepper_angle
from simulator.tunnel_model import TunnelModel

CODE_MAX = 65535.0

POWER_ON: dict[str, float] = {
    # causal-chamber light_tunnel.ino setup(): internal LEDs off, diode_ir 2 / diode_vis 1 / t 3 on every sensor,
    # polarizers homed to 0; LED colour, ADC oversampling (1) and references (DEFAULT = 5 V) untouched.
    "red": 0.0,
    "green": 0.0,
    "blue": 0.0,
    "osr_c": 1.0,
    "v_c": 5.0,
    "pol_1": 0.0,
    "pol_2": 0.0,
    "osr_angle_1": 1.0,
    "osr_angle_2": 1.0,
    "v_angle_1": 5.0,
    "v_angle_2": 5.0,
    **{f"l_{j}{k}": 0.0 for j in (1, 2, 3) for k in (1, 2)},
    **{f"diode_ir_{k}": 2.0 for k in (1, 2, 3)},
    **{f"diode_vis_{k}": 1.0 for k in (1, 2, 3)},
    **{f"t_ir_{k}": 3.0 for k in (1, 2, 3)},
    **{f"t_vis_{k}": 3.0 for k in (1, 2, 3)},
}

UNSET_AT_POWER_ON = frozenset(("red", "green", "blue", "osr_c", "v_c", "osr_angle_1", "osr_angle_2", "v_angle_1", "v_angle_2"))
"""Actuators the real board reports as -9999 until the host sets them (used when params.power_on_reports_unset)."""


class LightTunnelModel(TunnelModel):
    """PhysicsModel of the Mk1 light tunnel (config "standard")."""

    KIND = "lt"
    POWER_ON = POWER_ON
    UNSET_AT_POWER_ON = UNSET_AT_POWER_ON

    def _setup(self) -> None:
        self.p = self.params.light_tunnel
        self.rows_per_second = self.p.rows_per_second
        self._code_cols = [self._col[f"{ch}_{k}"] for k in (1, 2, 3) for ch in ("ir", "vis")]

    def apply(self, name: str, value: float) -> None:
        if name not in self._settings:
            raise KeyError(f"light tunnel has no actuator {name!r}; actuators: {', '.join(self._actuators)}")
        self._settings[name] = float(value)
        self._reported[name] = float(value)

    # ------------------------------------------------------------------------------------------ physics
    def polarizer_angle(self, k: int) -> float:
        p = self.p
        return stepper_angle(self._settings[f"pol_{k}"], p.polarizer_steps_per_rev, p.polarizer_gear_ratio)

    def light_and_leak_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """Noiseless, unclipped codes (ir_1, vis_1, ir_2, vis_2, ir_3, vis_3), split into the light-source part
        (the authors' Deterministic model times `channel_scale`) and the internal-LED leakage. Why split: only the
        light source's PWM makes the real readings scatter (`pwm_scatter_rel`); the internal LEDs do not."""
        p = self.p
        s = self._settings
        rgb = np.array([s["red"], s["green"], s["blue"]], dtype=float)
        S = np.array(p.response_matrix)
        d1, d2, d3 = p.distances
        delta = math.radians(self.polarizer_angle(1) - self.polarizer_angle(2))
        tp, tc = np.array(p.t_parallel), np.array(p.t_crossed)
        light = (
            S @ rgb,
            S @ (np.array(p.t_single) * rgb) * (d1 / d2) ** 2,
            S @ ((tc + (tp - tc) * math.cos(delta) ** 2) * rgb) * (d1 / d3) ** 2,
        )
        source, leak = np.empty(6), np.empty(6)
        for j, (ir, vis) in enumerate(light, start=1):
            leds = s[f"l_{j}1"] + s[f"l_{j}2"]
            g_ir = p.ir_diode_gains[int(s[f"diode_ir_{j}"])] * p.t_gains_ir[int(s[f"t_ir_{j}"])]
            g_vis = p.vis_diode_gains[int(s[f"diode_vis_{j}"])] * p.t_gains_vis[int(s[f"t_vis_{j}"])]
            i_ir, i_vis = 2 * (j - 1), 2 * (j - 1) + 1
            source[i_ir], source[i_vis] = g_ir * ir * p.channel_scale[i_ir], g_vis * vis * p.channel_scale[i_vis]
            leak[i_ir], leak[i_vis] = g_ir * p.led_ir_per_level * leds, g_vis * p.led_vis_per_level * leds
        return source, leak

    def mean_codes(self) -> np.ndarray:
        """Noiseless, unclipped mean codes (ir_1, vis_1, ir_2, vis_2, ir_3, vis_3): light + leakage + dark level."""
        source, leak = self.light_and_leak_codes()
        return source + leak + self.p.dark_mean_counts

    def current_counts_at_5v(self, rgb: np.ndarray) -> float:
        """The light-source current reading (counts at a 5 V reference): the authors' Q·RGB + C0, with this unit's
        sensor sensitivity scaling what lies above the zero-current output and its offset voltage added (a gain
        of 1 and 0 V add exactly nothing: today's unit)."""
        p = self.p
        counts = float(np.dot(p.current_q, rgb)) + p.current_c0
        return (counts + (p.current_sensitivity_gain - 1.0) * (counts - p.current_zero_counts)
                + p.current_offset_v / 5.0 * ADC_FULL_SCALE)

    def _adc(self, counts_at_5v: float, vref: float, osr: float, n: int) -> np.ndarray:
        """A 10-bit read given the count the model predicts for a 5 V reference, averaged over osr reads."""
        osr = max(1, int(osr))
        true = counts_at_5v * 5.0 / vref
        x = true + self._rng.standard_normal(n) * (self.p.adc_noise_counts / math.sqrt(osr))
        return np.clip(np.round(x * osr) / osr, 0.0, ADC_FULL_SCALE)

    def sample(self, n: int) -> np.ndarray:
        if n < 0:
            raise ValueError(f"sample needs n >= 0, got {n}")
        p = self.p
        s = self._settings
        col = self._col
        out = np.zeros((n, self.layout.row_length))
        for name in self._actuators:
            out[:, col[name]] = self._reported[name]
        source, leak = self.light_and_leak_codes()
        mean = source + leak + p.dark_mean_counts
        # light-source PWM scatter per reading, then shot noise (Poisson in units of shot_gain: exact at the
        # dark level of a fraction of a count, where a Gaussian would be wrong), then the read-out floor
        level = np.maximum(mean + source * (p.pwm_scatter_rel * self._rng.standard_normal((n, 6))), 0.0)
        if p.shot_gain > 0:
            level = p.shot_gain * self._rng.poisson(level / p.shot_gain)
        codes = level + self._rng.standard_normal((n, 6)) * p.dark_sd_counts
        out[:, self._code_cols] = np.clip(np.round(codes), 0.0, CODE_MAX)

        rgb = np.array([s["red"], s["green"], s["blue"]])
        out[:, col["current"]] = self._adc(self.current_counts_at_5v(rgb), s["v_c"], s["osr_c"], n)
        for k in (1, 2):
            counts = p.angle_counts_per_deg * self.polarizer_angle(k) + p.angle_zero_counts[k - 1]
            out[:, col[f"angle_{k}"]] = self._adc(counts, s[f"v_angle_{k}"], s[f"osr_angle_{k}"], n)
        out[:, col["camera"]] = 0.0
        out[:, col["v_board"]] = p.v_board_counts
        out[:, col["v_reg"]] = p.v_reg_counts
        self._time += n / self.rows_per_second
        return out
