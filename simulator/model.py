"""The contract between the emulated firmware and a chamber's physics: what a physics model must provide.

Why a contract: the same physics serves the emulated board (behind a real serial port) and the in-process
backend (no port), and a replayed recording must be able to stand in for the physics. The firmware logic
(validation, counter, flag, intervention, sensor overrides, error codes) lives in simulator/firmware.py and never
in a model; a model only turns actuator settings and time into sensor readings.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from firmware_bridge.variables import Layout


@runtime_checkable
class PhysicsModel(Protocol):
    """Turns actuator settings into sensor readings.

    - `layout` is the full row layout (bookkeeping columns first); `sample` returns an array of that width whose
      bookkeeping columns the firmware overwrites.
    - `apply` receives values the firmware already validated.
    - `sample(n)` advances the model's own simulated time by n rows at `rows_per_second` and returns float64
      readings of shape (n, layout.row_length). It must be vectorised: the in-process backend draws 10^5 rows/s.
    - `reset()` returns to power-on state *including* re-seeding the random generator it was given, so a reset
      board replays the same readings (deterministic tests).
    """

    layout: Layout
    rows_per_second: float

    def apply(self, name: str, value: float) -> None: ...

    def sample(self, n: int) -> np.ndarray: ...

    def reset(self) -> None: ...

    def state(self) -> dict[str, float]:
        """Current actuator values by name (what a fresh board would report in its first row)."""
        ...
