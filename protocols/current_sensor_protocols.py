"""The ACS70331 engagement protocol: show the part is in the loop, and say why none of its claims can be graded.

Why "engagement only": the wind tunnel reads its fan currents through ACS70331s, so the chamber *engages* the
part — its output responds to the fans — but it cannot stage any of the datasheet's conditions (a controlled
primary current, a VCC stimulus, a MHz observation, a view of the part's own supply current). The protocol
measures the engagement (fan current counts at load 0 and load 1) as evidence, and the verdict is inconclusive
with class "engagement-only", listing the unmatched decisive conditions. The evidence is the rise of the
current with its Type A u, so a planner can stop reading once the rise is beyond doubt.
"""

from __future__ import annotations

import math

import numpy as np

from calibration.budget import UncertaintyBudget, type_a
from protocols.declaration import Declaration, Evaluation, ProtocolOutcome, Step
from protocols.measurement import Measurement
from protocols.verdict import Verdict

INTAKE_OFF = Step("intake fan off", (("load_in", 0.0), ("load_out", 0.0)), ("current_in",))
INTAKE_FULL = Step("intake fan full", (("load_in", 1.0), ("load_out", 0.0)), ("current_in",))


def _evaluate_engagement(e: Evaluation) -> ProtocolOutcome:
    claim = e.claim
    assert claim is not None
    off, full = (np.asarray(e.step(s.label).column("current_in"), dtype=float) for s in (INTAKE_OFF, INTAKE_FULL))
    counts = {0.0: float(np.mean(off)), 1.0: float(np.mean(full))}
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
    return ProtocolOutcome(decided=decided, evidence=_rise(off, full),
                           details={"current_in_counts": {str(k): v for k, v in counts.items()}, "engaged": engaged})


def _rise(off: np.ndarray, full: np.ndarray) -> Measurement | None:
    """current_in at full load minus at load 0, with the Type A u of both means (None when it has no spread)."""
    if len(off) < 2 or len(full) < 2:
        return None
    a, b = type_a("current_in at load 0", off.tolist(), sensitivity=-1.0), type_a("current_in at load 1", full.tolist())
    budget = UncertaintyBudget(quantity="rise of current_in from load 0 to load 1", unit="counts", components=(a, b))
    if not budget.combined > 0 or not math.isfinite(budget.combined):
        return None
    return Measurement.from_budget(float(np.mean(full) - np.mean(off)), budget)


ENGAGEMENT = Declaration(
    key="acs70331.engagement", chamber="wt", unit="counts",
    steps=(INTAKE_OFF, INTAKE_FULL),
    restore=(("load_in", 0.0),),
    evaluate=_evaluate_engagement,
    description="Intake fan off then full: the ACS70331's output responds (engagement), nothing more.",
)

DECLARATIONS: tuple[Declaration, ...] = (ENGAGEMENT,)
