"""Small vectorised building blocks shared by both chambers: the ambient walk, ADC reads and stepper angles.

Why separate: these are the parts of the physics that are about the *instrumentation* (a 10-bit ADC averaging
oversampled reads, an A4988 stepper moving in whole microsteps, the weather outside) rather than about fans or
light, and both chamber models need the same behaviour. Every function takes its random generator as an
argument; nothing here keeps state between calls except the explicit walk state the caller carries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_discrete_lyapunov
from scipy.signal import lfilter

ADC_FULL_SCALE = 1023.0


@dataclass
class SmoothWalk:
    """A seeded, smooth, mean-reverting walk: a pressure deviation d driven by a trend r that is itself an OU process.

    Per row (dt seconds): r_k = φ_r·r_{k-1} + σ_r·ε_k and d_k = φ_d·d_{k-1} + dt·r_k. Driving the deviation
    through a trend (instead of white steps) keeps row-to-row changes far below the barometers' noise, as for
    real weather, so noise estimates from consecutive rows stay honest. σ_r is chosen so that the stationary
    SD of d equals `sd`.
    """

    sd: float
    timescale_s: float
    rate_timescale_s: float
    dt: float
    d: float = 0.0
    r: float = 0.0

    def __post_init__(self) -> None:
        self.phi_d = math.exp(-self.dt / self.timescale_s)
        self.phi_r = math.exp(-self.dt / self.rate_timescale_s)
        # stationary covariance of (d, r) for unit innovation on r: P = A P Aᵀ + B Bᵀ
        a = np.array([[self.phi_d, self.dt * self.phi_r], [0.0, self.phi_r]])
        b = np.array([[self.dt], [1.0]])
        p = solve_discrete_lyapunov(a, b @ b.T)
        self.sigma_r = self.sd / math.sqrt(p[0, 0]) if self.sd > 0 else 0.0

    def reset(self) -> None:
        self.d = 0.0
        self.r = 0.0

    def advance(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The next n deviations (Pa); updates the carried state."""
        if self.sigma_r == 0.0 or n == 0:
            return np.zeros(n)
        eps = rng.standard_normal(n) * self.sigma_r
        r, _ = lfilter([1.0], [1.0, -self.phi_r], eps, zi=[self.phi_r * self.r])
        d, _ = lfilter([self.dt], [1.0, -self.phi_d], r, zi=[self.phi_d * self.d])
        self.r = float(r[-1])
        self.d = float(d[-1])
        return d


def adc_counts(
    volts: np.ndarray | float,
    vref_v: float,
    osr: float,
    noise_counts: float,
    n: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """What the firmware's `analog_avg` returns: the mean of `osr` 10-bit reads of `volts` against `vref_v`.

    Each read carries Gaussian noise of `noise_counts` and is an integer clipped to 0..1023, so the average is a
    multiple of 1/osr; the noise of the average shrinks as 1/√osr.
    """
    osr = max(1, int(osr))
    true = np.broadcast_to(np.asarray(volts, dtype=float) / vref_v * ADC_FULL_SCALE, (n,))
    x = true + rng.standard_normal(n) * (noise_counts / math.sqrt(osr))
    x = np.round(x * osr) / osr
    return np.clip(x, 0.0, ADC_FULL_SCALE)


def stepper_angle(target_deg: float, steps_per_rev: int, ratio: float = 1.0) -> float:
    """The angle an A4988 stepper really reaches for a target: the nearest whole microstep (as the firmware rounds)."""
    step_deg = 360.0 * ratio / steps_per_rev
    return round(target_deg / step_deg) * step_deg


def snapshot(rng: np.random.Generator) -> dict:
    """The generator's state, to restore on reset (works for any generator passed in, not only seeds)."""
    return rng.bit_generator.state


def restore(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state
