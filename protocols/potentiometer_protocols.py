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

from calibration.budget import UncertaintyBudget, rectangular, resolution, type_a, type_a_from_stats
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


# -- the code sweep: no missing codes (257 taps) and integral non-linearity, from one reading per code ----------

CODES = tuple(range(256))
"""Every code the firmware can set (00h..FFh); code 100h, the 257th tap, cannot be set."""
SWEEP_ROWS = 2
"""Rows per code: 256 codes x (1 settle + 2) rows is about 110 s at the wind tunnel's ~7 rows/s, both pots together
(the planner shares the pot_1 and pot_2 stagings of the same sweep)."""
ADC_STEP_COUNTS = 1.0
"""ADC differential error between neighbouring readings, ±1 count (assumed, as the Bourns INL term: the ATmega2560's
±2-count absolute accuracy bounds it; its offset and gain cancel in a difference or an end-point line)."""


def _sweep_means(e: Evaluation, reading: str) -> tuple[np.ndarray, float, int]:
    """The mean of `reading` at each code, the pooled within-code SD and the rows per code."""
    means, resid, n = [], [], None
    for r in e.readings:
        col = np.asarray(r.column(reading), dtype=float)
        if col.size < 2 or not np.all(np.isfinite(col)):
            raise ValueError(f"{reading} at step {r.label!r}: expected at least 2 finite readings, got {col.size}")
        means.append(float(col.mean()))
        resid.extend((col - col.mean()).tolist())
        n = col.size if n is None else min(n, col.size)
    dof = len(resid) - len(means)
    pooled = float(np.sqrt(np.sum(np.square(resid)) / dof)) if dof > 0 else 0.0
    return np.asarray(means), pooled, int(n or 0)


def _evaluate_missing_codes(k: str):
    reading = f"signal_{k}"

    def evaluate(e: Evaluation) -> ProtocolOutcome:
        means, pooled, n = _sweep_means(e, reading)
        steps = np.diff(means) / COUNTS_PER_LSB
        worst = int(np.argmin(steps))
        per = 1 / COUNTS_PER_LSB
        budget = UncertaintyBudget(
            quantity=f"smallest code-to-code step of {reading} (pot_{k} 00h..FFh), potentiometer LSb", unit="LSb",
            components=(type_a_from_stats(f"{reading} difference of two code means (pooled within-code SD)",
                                          pooled * np.sqrt(2.0), n, sensitivity=per),
                        rectangular("ADC differential error between neighbouring readings (±1 count, assumed)",
                                    ADC_STEP_COUNTS, sensitivity=per)),
        )
        measurement = Measurement.from_budget(
            float(steps[worst]), budget, decimals=2, n=int(n * len(means)), matched_conditions=list(e.matched),
            details={"reading": reading, "codes": f"{CODES[0]}..{CODES[-1]} ({len(means)} codes, {len(steps)} steps)",
                     "smallest_step_between_codes": [CODES[worst], CODES[worst + 1]],
                     "largest_step_lsb": float(steps.max()), "mean_step_lsb": float(steps.mean()),
                     "non_positive_steps": int(np.count_nonzero(steps <= 0)),
                     "not_exercised": "code 100h (the 257th tap): the firmware sets 0..255, so step FFh->100h is not tested",
                     "assumed": "terminal A at the 5 V rail, B at ground; VDD inside 3.0-5.5 V (not measured)"},
        )
        return ProtocolOutcome(measurement=measurement)

    return evaluate


def _evaluate_inl(k: str):
    reading = f"signal_{k}"

    def evaluate(e: Evaluation) -> ProtocolOutcome:
        means, pooled, n = _sweep_means(e, reading)
        codes = np.asarray(CODES, dtype=float)
        slope = (means[-1] - means[0]) / (codes[-1] - codes[0])  # counts per code: the measured LSb
        if not slope > 0:
            raise ValueError(f"{reading}: the end-point line has no positive slope ({slope:.4g} counts/code)")
        residuals = (means - (means[0] + slope * (codes - codes[0]))) / slope
        worst = int(np.argmax(np.abs(residuals)))
        per = 1 / slope
        budget = UncertaintyBudget(
            quantity=f"largest deviation of {reading} from the end-point line (codes 00h, FFh), potentiometer LSb",
            unit="LSb",
            components=(type_a_from_stats(f"{reading} code mean (pooled within-code SD)", pooled, n, sensitivity=per),
                        rectangular("ADC integral non-linearity (±1 count, assumed)", ADC_STEP_COUNTS, sensitivity=per),
                        resolution("ADC quantisation (one count)", 1.0, sensitivity=per)),
        )
        measurement = Measurement.from_budget(
            float(residuals[worst]), budget, decimals=2, n=int(n * len(means)), matched_conditions=list(e.matched),
            details={"reading": reading, "worst_code": CODES[worst], "counts_per_code": float(slope),
                     "line": "end-point line through the means at codes 00h and FFh (code 100h cannot be set)",
                     "assumed": "terminal A at the 5 V rail, B at ground (the datasheet's Note 2: VA = VDD, VB = VSS); "
                                "VDD inside 3.0-5.5 V (not measured)"},
        )
        return ProtocolOutcome(measurement=measurement)

    return evaluate


def _sweep_steps(k: str) -> tuple[Step, ...]:
    return tuple(Step(f"pot_{k} at code {c}", ((f"pot_{k}", float(c)), (f"v_{k}", 5.0), (f"osr_{k}", 1.0)),
                      (f"signal_{k}",), rows=SWEEP_ROWS, settle_rows=1) for c in CODES)


def _missing_codes(k: str) -> Declaration:
    return Declaration(key=f"mcp4151.missing_codes_pot_{k}", chamber="wt", unit="LSb", steps=_sweep_steps(k),
                       evaluate=_evaluate_missing_codes(k), restore=((f"pot_{k}", 0.0),),
                       description=f"pot_{k} swept over codes 0..255: the smallest step of signal_{k} in LSb.")


def _inl(k: str) -> Declaration:
    return Declaration(key=f"mcp4151.inl_pot_{k}", chamber="wt", unit="LSb", steps=_sweep_steps(k),
                       evaluate=_evaluate_inl(k), restore=((f"pot_{k}", 0.0),),
                       description=f"pot_{k} swept over codes 0..255: the largest deviation of signal_{k} from the "
                                   "end-point line, in LSb.")


DECLARATIONS = DECLARATIONS + (_missing_codes("1"), _missing_codes("2"), _inl("1"), _inl("2"))
