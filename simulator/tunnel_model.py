"""What the two chamber physics models share: construction from parameters, a row layout and a seeded generator;
the power-on state; and the actuator values a fresh board reports.

Why one base: the wind tunnel and the light tunnel built their layout, generator, actuator list and power-on
settings, and reset them, in the same lines. "reset() replays the same readings" (simulator/model.py) is one rule,
so it is written once: the generator's state is kept after the subclass's own setup (`_setup`, where the wind
tunnel draws its barometer offsets, so those draws are part of power-on) and restored on every reset, before the
subclass resets its own physics state (`_reset_physics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from firmware_bridge.variables import UNSET, Kind, layout_for
from simulator.noise import restore, snapshot
from simulator.params import SimParams


class TunnelModel:
    """Base of WindTunnelModel and LightTunnelModel (a PhysicsModel once a subclass adds `apply` and `sample`)."""

    KIND: ClassVar[str]
    """The chamber kind whose layout the model fills ("wt" or "lt")."""
    POWER_ON: ClassVar[Mapping[str, float]]
    """The firmware's actuator values at power-on (params may override them)."""
    UNSET_AT_POWER_ON: ClassVar[frozenset[str]]
    """Actuators the real board reports as -9999 until the host sets them (when params.power_on_reports_unset)."""

    def __init__(
        self,
        params: SimParams | None = None,
        *,
        config: str = "standard",
        rng: np.random.Generator | None = None,
        seed: int = 0,
    ) -> None:
        self.params = params or SimParams()
        self.layout = layout_for(self.KIND, config)
        self.config = config
        self._rng = rng if rng is not None else np.random.default_rng(seed)
        self._actuators = [v.name for v in self.layout.variables if v.kind is Kind.ACTUATOR]
        self._col = {name: i for i, name in enumerate(self.layout.names)}
        self._power_on = self.params.power_on_settings(self._actuators, self.POWER_ON)
        self._setup()
        self._rng_state = snapshot(self._rng)
        self.reset()

    def _setup(self) -> None:
        """The subclass's own construction (parameters, rates, draws made once at power-on)."""

    def _reset_physics(self) -> None:
        """The subclass's own power-on state (called by reset after the shared part)."""

    def reset(self) -> None:
        """Power-on state: firmware defaults, time 0, generator back to its state at power-on."""
        restore(self._rng, self._rng_state)
        self._settings = dict(self._power_on)
        unset = self.params.power_on_reports_unset
        self._reported = {n: (UNSET if unset and n in self.UNSET_AT_POWER_ON else v) for n, v in self._settings.items()}
        self._time = 0.0
        self._reset_physics()

    def state(self) -> dict[str, float]:
        """Current actuator values by name (what a fresh board would report in its first row)."""
        return dict(self._reported)
