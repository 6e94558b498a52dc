"""The ACS70331 engagement protocol: show the part is in the loop, and say why none of its claims can be graded.

Why "engagement only": the wind tunnel reads its fan currents through ACS70331s, so the chamber *engages* the
part — its output responds to the fans — but it cannot stage any of the datasheet's conditions (a controlled
primary current, a VCC stimulus, a MHz observation, a view of the part's own supply current). The protocol
measures the engagement (fan current counts at load 0 and load 1) as evidence, and the verdict is inconclusive
with class "engagement-only", listing the unmatched decisive conditions.
"""

from __future__ import annotations

import numpy as np

from protocols.claims import Claim
from protocols.registry import ClaimProtocol, ProtocolContext, ProtocolOutcome, register
from protocols.staging import apparatus_guard, stage_and_measure
from protocols.verdict import Verdict


@apparatus_guard("counts")
def measure_engagement(context: ProtocolContext, claim: Claim) -> ProtocolOutcome:
    chamber = context.chamber("wt")
    counts = {}
    for load in (0.0, 1.0):
        context.progress(f"{claim.id}: intake fan load {load:g}, measure {context.rows} rows of current_in")
        frame = stage_and_measure(chamber, {"load_in": load, "load_out": 0.0}, context.rows, context.settle_rows)
        counts[load] = float(np.mean(frame.column("current_in")))
    chamber.set_many({"load_in": 0.0})
    engaged = counts[1.0] > counts[0.0]
    unmatched = tuple(c.name for c in claim.conditions if c.decisive and (c.unmatchable or not c.variable))
    reason = (
        f"the ACS70331 is {'engaged' if engaged else 'NOT seen responding'} in the chamber (current_in "
        f"{counts[0.0]:.1f} counts at load 0, {counts[1.0]:.1f} at load 1), but the chamber cannot stage this "
        f"claim's decisive conditions: " + "; ".join(
            f"{c.name} ({c.unmatchable})" for c in claim.conditions if c.decisive and c.unmatchable)
    )
    decided = Verdict(claim_id=claim.id, verdict="inconclusive", inconclusive_class="engagement-only",
                      reason=reason, unit=claim.unit, unmatched_conditions=unmatched)
    return ProtocolOutcome(decided=decided, details={"current_in_counts": {str(k): v for k, v in counts.items()},
                                                     "engaged": engaged})


register(ClaimProtocol(
    key="acs70331.engagement", chamber="wt",
    stages=(("load_out", 0.0), ("load_in", 0.0), ("load_in", 1.0), ("load_in", 0.0)),
    reads=("current_in",),
    description="Intake fan off then full: the ACS70331's output responds (engagement), nothing more.",
    run=measure_engagement,
))
