"""Protocols for Si115x claims on the light tunnel's three Si1151 sensors.

- ADC bit depth / output codes: the chamber firmware reads 16-bit codes, so what it can test is that every code
  it receives stays inside the range the claim states (0..2^23−1 for "23-bit"). The protocol drives the codes
  to both ends — LEDs dark, then full white at the largest photodiode and longest integration time, which
  saturates at 65535 — and reports the largest code seen. Codes are integers: the only uncertainty is the
  quantisation step of one count (Type B, q/√12). Each of the three sensors is also an instance of its own (a
  fleet's units, protocols/fleet_instances.py): the largest code of its ir_k and vis_k.
"""

from __future__ import annotations

import numpy as np

from calibration.budget import UncertaintyBudget, resolution
from protocols.declaration import Declaration, Evaluation, ProtocolOutcome, Step
from protocols.fleet_instances import INSTANCES, Instance
from protocols.measurement import Measurement

LIGHT_READINGS = tuple(f"{kind}_{k}" for k in (1, 2, 3) for kind in ("ir", "vis"))
LARGEST_GAIN = tuple(
    [(f"diode_ir_{k}", 2.0) for k in (1, 2, 3)]
    + [(f"diode_vis_{k}", 1.0) for k in (1, 2, 3)]
    + [(f"t_{kind}_{k}", 3.0) for k in (1, 2, 3) for kind in ("ir", "vis")]
)
DARK = (("red", 0.0), ("green", 0.0), ("blue", 0.0))
WHITE = (("red", 255.0), ("green", 255.0), ("blue", 255.0))
STEPS = (Step("dark light, largest gain", LARGEST_GAIN + DARK, LIGHT_READINGS),
         Step("white light, largest gain", LARGEST_GAIN + WHITE, LIGHT_READINGS))


def _evaluate_output_codes(e: Evaluation) -> ProtocolOutcome:
    codes = []
    for readings in e.readings:
        block = np.column_stack([readings.column(name) for name in LIGHT_READINGS])
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
    measurement = Measurement.from_budget(
        largest, budget, n=int(all_codes.size), matched_conditions=list(e.matched),
        details={"largest_code": largest, "smallest_code": smallest,
                 "saturated_codes": int(np.count_nonzero(all_codes == 65535)),
                 "note": "the firmware reads 16-bit codes; the test is that codes stay in the stated range"},
    )
    instances = []
    for k in (1, 2, 3):
        columns = [i for i, name in enumerate(LIGHT_READINGS) if name.endswith(f"_{k}")]
        top = int(all_codes[:, columns].max())
        instances.append(Instance(f"light_{k}", Measurement.from_budget(
            top, budget, n=int(all_codes[:, columns].size), matched_conditions=list(e.matched),
            details={"largest_code": top})))
    return ProtocolOutcome(measurement=measurement, details={INSTANCES: tuple(instances)})


def largest_code_at_ceiling(outcome: ProtocolOutcome) -> tuple[bool, str]:
    """The largest code seen can only grow with more rows, unless it is already the firmware's 16-bit ceiling."""
    m = outcome.measurement
    largest = None if m is None else m.details.get("largest_code")
    if largest == 65535:
        return True, "the largest code is already 65535, the top of the firmware's 16-bit reading: more rows cannot raise it"
    return False, f"the largest code ({largest}) is below the 16-bit ceiling and can still grow with more rows"


OUTPUT_CODES = Declaration(
    key="si115x.adc_bit_depth", chamber="lt", unit="counts",
    steps=STEPS,
    evaluate=_evaluate_output_codes,
    stop_rule=largest_code_at_ceiling,
    description="Dark, then saturating white light at the largest gain; the largest output code seen.",
)

DECLARATIONS: tuple[Declaration, ...] = (OUTPUT_CODES,)
