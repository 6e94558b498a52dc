"""A small seeded stand-in physics model, and the one place that picks the real physics when it exists.

Why: the serial stack must be testable before (and independently of) the full physics in simulator/physics.py.
This model follows the same PhysicsModel contract with deliberately simple, documented relations (fan speed
and current from the load, Bernoulli-free pressures with DPS310-like noise, light codes from the R,G,B response
matrix). Its numbers are plausible, not fitted; do not use it to grade a datasheet.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import numpy as np

from firmware_bridge.variables import Kind, Layout, layout_for
from simulator.model import PhysicsModel

log = logging.getLogger(__name__)

ROWS_PER_SECOND = {"wt": 7.0, "lt": 12.0}
_WT_DEFAULTS = {"osr": 8.0, "v": 5.0}
_LT_DEFAULTS = {"diode_ir": 2.0, "diode_vis": 1.0, "t_ir": 3.0, "t_vis": 3.0, "osr": 1.0, "v": 5.0}
_DPS310_NOISE_PA = {1.0: 2.5, 2.0: 1.0, 4.0: 0.5, 8.0: 0.4}  # datasheet precision, Pa RMS, by oversampling
_S_RESPONSE = np.array([[4.34165202, 2.8594438, 1.91565691], [0.89410569, 1.58679242, 2.68477163]])


def _default_value(chamber: str, name: str) -> float:
    if name.startswith("osr"):
        return 1.0 if chamber == "lt" else _WT_DEFAULTS["osr"]
    if name.startswith("v_"):
        return 5.0
    if chamber == "lt":
        for prefix in ("diode_ir", "diode_vis", "t_ir", "t_vis"):
            if name.startswith(prefix + "_"):
                return _LT_DEFAULTS[prefix]
    if name in ("gain_p", "gain_i", "gain_d", "input"):
        return {"gain_p": -0.5, "gain_i": -1e-3, "gain_d": -0.1, "input": 0.0}[name]
    return 0.0


class PlaceholderModel:
    """Seeded, vectorised, simple physics for a wind tunnel or light tunnel layout."""

    def __init__(self, layout: Layout, *, seed: int = 0, rows_per_second: float | None = None,
                 ambient_pa: float = 101_325.0):
        self.layout = layout
        self.rows_per_second = rows_per_second or ROWS_PER_SECOND.get(layout.chamber, 10.0)
        self._seed = seed
        self._ambient = ambient_pa
        self._index = {n: i for i, n in enumerate(layout.names)}
        self._actuators = [v.name for v in layout.variables if v.kind is Kind.ACTUATOR]
        self.reset()

    def reset(self) -> None:
        self._rng = np.random.default_rng(self._seed)
        self._state = {n: _default_value(self.layout.chamber, n) for n in self._actuators}

    def apply(self, name: str, value: float) -> None:
        if name in self._state:
            self._state[name] = float(value)

    def state(self) -> dict[str, float]:
        return dict(self._state)

    def sample(self, n: int) -> np.ndarray:
        out = np.zeros((n, self.layout.row_length))
        for name, value in self._state.items():
            out[:, self._index[name]] = value
        if self.layout.chamber == "wt":
            self._wind_tunnel(out, n)
        else:
            self._light_tunnel(out, n)
        return out

    def _put(self, out: np.ndarray, name: str, values: np.ndarray | float) -> None:
        if name in self._index:
            out[:, self._index[name]] = values

    def _wind_tunnel(self, out: np.ndarray, n: int) -> None:
        s, rng = self._state, self._rng
        rpm = {}
        for side in ("in", "out"):
            load = s[f"load_{side}"]
            rpm[side] = 0.0 if load <= 0 else max(load, 0.1) * 3000.0
            amps = 0.166 + (max(load, 0.1) ** 3 if load > 0 else 0.0) * (0.27 - 0.166)
            volts = 0.25 + 0.8 * amps
            counts = np.clip(volts / s[f"v_{side}"] * 1023 + rng.normal(0, 1.0, n), 0, 1023)
            self._put(out, f"current_{side}", np.round(counts))
            self._put(out, f"rpm_{side}", rpm[side] + rng.normal(0, 15.0, n) * (rpm[side] > 0))
        opening = min(1.0, 0.75 + 0.15 * s["hatch"] / 45.0)
        rise = 20.0 * ((rpm["in"] / 3000.0) ** 2 - (rpm["out"] / 3000.0) ** 2) * opening
        base = {"upwind": rise * 0.5, "downwind": rise, "ambient": 0.0, "intake": -rise * 0.3}
        for where, delta in base.items():
            sigma = _DPS310_NOISE_PA.get(s[f"osr_{where}"], 0.4)
            self._put(out, f"pressure_{where}", self._ambient + delta + rng.normal(0, sigma, n))
        noise = 5.0 + 40.0 * (rpm["in"] + rpm["out"]) / 6000.0
        self._put(out, "mic", np.clip(np.round(512 + rng.normal(0, noise, n)), 0, 1023))
        for k in (1, 2):
            level = s[f"pot_{k}"] / 255.0 * 5.0 / s[f"v_{k}"] * 1023
            self._put(out, f"signal_{k}", np.clip(np.round(level + rng.normal(0, 0.5, n)), 0, 1023))

    def _light_tunnel(self, out: np.ndarray, n: int) -> None:
        s, rng = self._state, self._rng
        rgb = np.array([s["red"], s["green"], s["blue"]])
        current = (np.array([0.12834946, 0.12870338, 0.13078523]) @ rgb + 58.133) * 5.0 / s["v_c"]
        self._put(out, "current", np.clip(np.round(current + rng.normal(0, 1.0, n)), 0, 1023))
        for k, offset in ((1, 506.805), (2, 510.983)):
            angle = (1.42261211 * s[f"pol_{k}"] + offset) * 5.0 / s[f"v_angle_{k}"]
            self._put(out, f"angle_{k}", np.clip(np.round(angle + rng.normal(0, 0.5, n)), 0, 1023))
        ir, vis = _S_RESPONSE @ rgb
        malus = 0.3 * np.cos(np.radians(s["pol_1"] - s["pol_2"])) ** 2 + 0.01
        for k, factor in ((1, 1.0), (2, 0.42 * (0.1 / 0.17) ** 2), (3, malus * (0.1 / 0.25) ** 2)):
            for kind, base in (("ir", ir), ("vis", vis)):
                gain = 2.0 ** (s[f"diode_{kind}_{k}"] + s[f"t_{kind}_{k}"])
                code = gain * base * factor * (1 + rng.normal(0, 0.01, n)) + rng.normal(0, 2.0, n)
                self._put(out, f"{kind}_{k}", np.clip(np.round(code), 0, 65535))
        self._put(out, "camera", 0.0)
        self._put(out, "v_board", 1023.0)
        self._put(out, "v_reg", 1023.0)


def make_placeholder_model(chamber: str, *, config: str = "standard", seed: int = 0,
                           params: dict[str, Any] | None = None) -> PlaceholderModel:
    params = params or {}
    return PlaceholderModel(layout_for(chamber, config), seed=seed,
                            rows_per_second=params.get("rows_per_second"),
                            ambient_pa=float(params.get("ambient_pa", 101_325.0)))


def make_model(chamber: str, *, config: str = "standard", seed: int = 0,
               params: dict[str, Any] | None = None, prefer_physics: bool = True) -> PhysicsModel:
    """The full physics (simulator.physics.make_model) when it is importable, else the placeholder."""
    if prefer_physics:
        try:
            physics = importlib.import_module("simulator.physics")
        except ImportError as exc:
            log.info("simulator.physics not importable (%s); using the placeholder model", exc)
        else:
            return physics.make_model(chamber, config=config, seed=seed, params=params)
    return make_placeholder_model(chamber, config=config, seed=seed, params=params)
