"""Protocols for the Microchip MCP4151-103 digital potentiometers of the wind tunnel (pot_1, pot_2).

- Zero-scale error (VWZSE, code 00h; 10 kΩ, 8-bit: Max. +3.5 LSb, datasheet p6): the wiper at code 0 and its
  voltage read by the board's 10-bit ADC (signal_k) against the 5 V reference. With the ADC referenced to the
  same 5 V rail that feeds the potentiometer's terminal A (ratiometric: the supply's own value cancels), one
  potentiometer LSb (VDD/256) is 1024/256 = 4 ADC counts, so VWZSE = counts / 4. Budget: Type A of the mean,
  the ADC's quantisation (one count = 0.25 LSb) and its absolute accuracy (±2 ADC counts, ATmega2560 datasheet,
  entered as rectangular ±0.5 LSb — stated, not calibrated).
  Assumed, not measured (named in each verdict's details): terminal A at the 5 V rail and B at ground (the
  chamber's wiring as the simulator models it), VDD inside 3.0–5.5 V. The ADC cannot read below 0 counts, so
  a negative error would read as 0: only the printed Max. is graded.
"""

from __future__ import annotations

import numpy as np

from calibration.budget import UncertaintyBudget, rectangular, resolution, type_a
from protocols.declaration import Declaration, Evaluation, ProtocolOutcome, Step
from protocols.measurement import Measurement

COUNTS_PER_LSB = 1024 / 256
"""ADC counts per potentiometer LSb when the ADC reference is the potentiometer's own supply (10-bit vs 8-bit)."""
ADC_ABSOLUTE_COUNTS = 2.0
"""ATmega2560 ADC absolute accuracy (INL, DNL, quantisation, gain and offset), ±2 LSB."""


def _evaluate_zero_scale(reading: str):
    def evaluate(e: Evaluation) -> ProtocolOutcome:
        counts = np.asarray(e.readings[0].column(reading), dtype=float)
        if counts.size < 2 or not np.all(np.isfinite(counts)):
            raise ValueError(f"{reading}: expected at least 2 finite ADC readings, got {counts.size}")
        per = 1 / COUNTS_PER_LSB
        budget = UncertaintyBudget(
            quantity=f"zero-scale wiper voltage ({reading}) in potentiometer LSb", unit="LSb",
            components=(type_a(f"{reading} scatter (Type A of the mean)", counts.tolist(), sensitivity=per),
                        resolution("ADC quantisation (one count)", 1.0, sensitivity=per),
                        rectangular("ADC absolute accuracy (±2 counts, ATmega2560 datasheet)", ADC_ABSOLUTE_COUNTS,
                                    sensitivity=per)),
        )
        measurement = Measurement.from_budget(
            float(counts.mean()) * per, budget, decimals=2, n=int(counts.size), matched_conditions=list(e.matched),
            details={"reading": reading, "mean_counts": float(counts.mean()),
                     "assumed": "terminal A at the 5 V rail, B at ground; VDD inside 3.0-5.5 V (not measured)",
                     "note": "the ADC reads no negative voltage: a negative zero-scale error would read as 0"},
        )
        return ProtocolOutcome(measurement=measurement)

    return evaluate


def _zero_scale(k: str) -> Declaration:
    step = Step(f"pot_{k} at code 0, ADC on the 5 V reference", ((f"pot_{k}", 0.0), (f"v_{k}", 5.0), (f"osr_{k}", 1.0)),
                (f"signal_{k}",))
    return Declaration(key=f"mcp4151.zero_scale_pot_{k}", chamber="wt", unit="LSb", steps=(step,),
                       evaluate=_evaluate_zero_scale(f"signal_{k}"),
                       description=f"pot_{k} at code 0: its wiper voltage in potentiometer LSb (signal_{k} / 4).")


DECLARATIONS: tuple[Declaration, ...] = (_zero_scale("1"), _zero_scale("2"))
