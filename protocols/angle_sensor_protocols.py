"""Protocols for the Bourns 3590S 10-turn potentiometers that sense the light tunnel's polarizer angles.

- Independent linearity (±0.25 %, datasheet p1): the polarizer stepped across the chamber's whole range
  (−180..180° in 30° steps), the angle sensor read at each step (angle_k, ADC on the 5 V reference that also
  feeds the potentiometer: ratiometric), a least-squares line through the step means against the commanded
  angle, and the largest residual as a percentage of the applied voltage (1024 counts).
  Budget: Type A of the worst step's mean, the ADC's own integral non-linearity (±1 count, assumed from the
  ATmega2560 datasheet's ±0.5 LSB typical, doubled; stated, not calibrated) and the open-loop reference (the
  commanded microstep, ±half a step of 0.1125°).
  What the chamber cannot do, and how the verdict says it: the claim is over the full 3600° electrical travel,
  while the polarizer range covers about half of it (≈ 512 of 1024 counts). A line fitted to a sub-range fits
  it at least as well as the best line over the whole travel, so a sub-range residual beyond the bound
  falsifies the claim, but one within it does not confirm it. The protocol therefore reports the travel
  condition as matched only when the sub-range residual alone exceeds the bound by more than c (a definitive
  fail); otherwise it reports it unmatched, and the verdict is inconclusive with the numbers shown.
"""

from __future__ import annotations

import numpy as np

from calibration.budget import UncertaintyBudget, rectangular, type_a
from protocols.declaration import Declaration, Evaluation, ProtocolOutcome, Step
from protocols.measurement import Measurement

ANGLES = tuple(float(a) for a in range(-180, 181, 30))
FULL_SCALE_COUNTS = 1024.0
"""The applied voltage in ADC counts when the ADC reference is the potentiometer's own supply (10-bit)."""
ADC_INL_COUNTS = 1.0
COUNTS_PER_DEG = 1.42261211
"""Angle counts per polarizer degree (the chamber authors' fit), only to express the reference's step in counts."""
HALF_MICROSTEP_DEG = 0.1125 / 2
TRAVEL = "full electrical travel"


def _evaluate_linearity(k: str):
    reading = f"angle_{k}"

    def evaluate(e: Evaluation) -> ProtocolOutcome:
        means, stds, ns = [], [], []
        for r in e.readings:
            col = np.asarray(r.column(reading), dtype=float)
            if col.size < 2 or not np.all(np.isfinite(col)):
                raise ValueError(f"{reading} at step {r.label!r}: expected at least 2 finite readings, got {col.size}")
            means.append(float(col.mean()))
            stds.append(col.tolist())
            ns.append(col.size)
        x, y = np.asarray(ANGLES), np.asarray(means)
        slope, intercept = np.polyfit(x, y, 1)
        residuals = y - (slope * x + intercept)
        worst = int(np.argmax(np.abs(residuals)))
        per = 100.0 / FULL_SCALE_COUNTS
        budget = UncertaintyBudget(
            quantity=f"largest residual of {reading} from its least-squares line, % of applied voltage", unit="%",
            components=(type_a(f"{reading} scatter at {ANGLES[worst]:g}° (Type A of the mean)", stds[worst],
                               sensitivity=per),
                        rectangular("ADC integral non-linearity (±1 count, assumed)", ADC_INL_COUNTS, sensitivity=per),
                        rectangular("open-loop reference: ± half a microstep", HALF_MICROSTEP_DEG * COUNTS_PER_DEG,
                                    sensitivity=per)),
        )
        value = float(abs(residuals[worst])) * per
        travel = [c.name for c in (e.claim.conditions if e.claim else ()) if c.name == TRAVEL]
        exceeds = e.claim is not None and e.claim.high is not None and value - float(e.claim.high) > budget.combined
        matched = list(e.matched) + (travel if exceeds else [])
        measurement = Measurement.from_budget(
            value, budget, decimals=3, n=int(sum(ns)), matched_conditions=matched,
            unmatched_conditions=[] if exceeds else travel,
            details={"reading": reading, "angles_deg": list(ANGLES), "step_means_counts": means,
                     "slope_counts_per_deg": float(slope), "span_counts": float(y.max() - y.min()),
                     "sub_range": f"{y.max() - y.min():.0f} of {FULL_SCALE_COUNTS:.0f} counts of the travel: a residual "
                                  "beyond the bound falsifies the claim, one within it does not confirm it",
                     "reference": "the stepper's commanded angle (open loop), not an independent encoder"},
        )
        return ProtocolOutcome(measurement=measurement)

    return evaluate


def _linearity(k: str) -> Declaration:
    steps = tuple(Step(f"pol_{k} at {a:g}°", ((f"pol_{k}", a), (f"v_angle_{k}", 5.0), (f"osr_angle_{k}", 8.0)),
                       (f"angle_{k}",), rows=10, settle_rows=2) for a in ANGLES)
    return Declaration(key=f"bourns3590.linearity_angle_{k}", chamber="lt", unit="%", steps=steps,
                       evaluate=_evaluate_linearity(k), restore=((f"pol_{k}", 0.0),),
                       description=f"pol_{k} stepped over −180..180°: the largest residual of angle_{k} from a line.")


DECLARATIONS: tuple[Declaration, ...] = (_linearity("1"), _linearity("2"))
