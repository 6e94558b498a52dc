"""Protocols for Si115x claims on the light tunnel's three Si1151 sensors.

- ADC bit depth / output codes: the chamber firmware reads 16-bit codes, so what it can test is that every code
  it receives stays inside the range the claim states (0..2^23−1 for "23-bit"). The protocol drives the codes
  to both ends — LEDs dark, then full white at the largest photodiode and longest integration time, which
  saturates at 65535 — and reports the largest code seen. Codes are integers: the only uncertainty is the
  quantisation step of one count (Type B, q/√12).
"""

from __future__ import annotations

import numpy as np

from calibration.budget import UncertaintyBudget, resolution
from protocols.claims import Claim
from protocols.measurement import Measurement
from protocols.registry import ClaimProtocol, ProtocolContext, ProtocolOutcome, register
from protocols.staging import apparatus_guard, stage_and_measure

LIGHT_READINGS = tuple(f"{kind}_{k}" for k in (1, 2, 3) for kind in ("ir", "vis"))
LARGEST_GAIN = tuple(
    [(f"diode_ir_{k}", 2.0) for k in (1, 2, 3)]
    + [(f"diode_vis_{k}", 1.0) for k in (1, 2, 3)]
    + [(f"t_{kind}_{k}", 3.0) for k in (1, 2, 3) for kind in ("ir", "vis")]
)
DARK = (("red", 0.0), ("green", 0.0), ("blue", 0.0))
WHITE = (("red", 255.0), ("green", 255.0), ("blue", 255.0))


@apparatus_guard("counts")
def measure_output_codes(context: ProtocolContext, claim: Claim) -> ProtocolOutcome:
    chamber = context.chamber("lt")
    codes = []
    for label, light in (("dark", DARK), ("white", WHITE)):
        context.progress(f"{claim.id}: {label} light, largest gain, measure {context.rows} rows")
        frame = stage_and_measure(chamber, dict(LARGEST_GAIN + light), context.rows, context.settle_rows)
        block = np.column_stack([frame.column(name) for name in LIGHT_READINGS])
        if not np.all(np.isfinite(block)):
            raise ValueError("light readings contain unset values; refusing to grade output codes")
        codes.append(block)
    all_codes = np.vstack(codes)
    largest = int(all_codes.max())
    smallest = int(all_codes.min())
    budget = UncertaintyBudget(
        quantity="largest Si1151 output code observed", unit="counts",
        components=(resolution("code quantisation (one count)", 1.0),),
    )
    staged = {name for name, _ in LARGEST_GAIN + WHITE} | set(LIGHT_READINGS)
    matched = [c.name for c in claim.conditions if c.variable and c.variable in staged]
    measurement = Measurement.from_budget(
        largest, budget, n=int(all_codes.size), matched_conditions=matched,
        details={"largest_code": largest, "smallest_code": smallest,
                 "saturated_codes": int(np.count_nonzero(all_codes == 65535)),
                 "note": "the firmware reads 16-bit codes; the test is that codes stay in the stated range"},
    )
    return ProtocolOutcome(measurement=measurement)


register(ClaimProtocol(
    key="si115x.adc_bit_depth", chamber="lt",
    stages=LARGEST_GAIN + DARK + WHITE,
    reads=LIGHT_READINGS,
    description="Dark, then saturating white light at the largest gain; the largest output code seen.",
    run=measure_output_codes,
))
