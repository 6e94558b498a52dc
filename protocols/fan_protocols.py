"""Protocols for the Noctua NF-F12 industrialPPC-3000 PWM fans of the wind tunnel (intake and exhaust).

- Max. rotational speed (3000 RPM, +/-10 %, datasheet p1): the fan under test at full PWM duty, the other fan
  stopped, the hatch closed, after a settle long enough for the spin-up (the A2 dynamics reach full speed in
  about 3 s); the mean of the chamber's own tachometer reading (rpm_in or rpm_out) over the rows. Budget: Type A
  of the mean, and the tachometer's quantisation (rpm = 30e6/Δt with Δt in whole µs: at 3000 RPM one µs moves
  the reading by about 0.3 RPM, entered as a resolution step).
  What is not matched, and said so in every verdict: the datasheet's speed is at 12 V; the chamber does not
  measure its fan supply (a condition marked non-decisive in the claim file: a ±5 % supply moves the speed by a
  few percent against a ±10 % band, which is why the verdict can still be definitive, and why a result within a
  few percent of a limit should be read with that in mind). The tachometer is the fan's own (2 pulses/rev),
  not an independent reference.
"""

from __future__ import annotations

import numpy as np

from calibration.budget import UncertaintyBudget, resolution, type_a
from protocols.declaration import Declaration, Evaluation, ProtocolOutcome, Step
from protocols.measurement import Measurement

SETTLE_ROWS = 40
"""Rows discarded after the load change: the spin-up to full speed takes about 3 s, 40 rows are about 5.7 s."""
TACH_STEP_RPM = 0.3
"""rpm = 30e6/Δt with Δt in whole µs: at 3000 RPM (Δt = 10000 µs) one µs is 0.3 RPM."""


def _evaluate_speed(reading: str):
    def evaluate(e: Evaluation) -> ProtocolOutcome:
        rpm = np.asarray(e.readings[0].column(reading), dtype=float)
        if rpm.size < 2 or not np.all(np.isfinite(rpm)):
            raise ValueError(f"{reading}: expected at least 2 finite tachometer readings, got {rpm.size} "
                             f"({int(np.count_nonzero(~np.isfinite(rpm)))} unset)")
        budget = UncertaintyBudget(
            quantity=f"mean {reading} at full PWM duty", unit="RPM",
            components=(type_a(f"{reading} scatter (Type A of the mean)", rpm.tolist()),
                        resolution("tachometer quantisation (30e6/Δt, whole µs)", TACH_STEP_RPM)),
        )
        measurement = Measurement.from_budget(
            float(rpm.mean()), budget, decimals=1, n=int(rpm.size), matched_conditions=list(e.matched),
            details={"reading": reading, "min": float(rpm.min()), "max": float(rpm.max()),
                     "not_measured": "the 12 V fan supply (the datasheet's condition) is not measured by the chamber",
                     "reference": "the fan's own tachometer (2 pulses/rev), not an independent speed reference"},
        )
        return ProtocolOutcome(measurement=measurement)

    return evaluate


def _max_speed(fan: str, load: str, other: str, reading: str) -> Declaration:
    step = Step(f"{fan} fan at full duty, {other} stopped, hatch closed",
                ((load, 1.0), (other, 0.0), ("hatch", 0.0)), (reading,), settle_rows=SETTLE_ROWS)
    return Declaration(
        key=f"nf_f12.max_speed_{fan}", chamber="wt", unit="RPM", steps=(step,), evaluate=_evaluate_speed(reading),
        restore=((load, 0.0),),
        description=f"The {fan} fan at full PWM duty (the other stopped): the mean of its tachometer reading.",
    )


DECLARATIONS: tuple[Declaration, ...] = (
    _max_speed("intake", "load_in", "load_out", "rpm_in"),
    _max_speed("exhaust", "load_out", "load_in", "rpm_out"),
)
