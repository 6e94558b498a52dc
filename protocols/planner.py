"""Plan a batch of declared protocols on the chambers: share stagings, order them, and know when to stop reading.

Why: a real chamber is the scarce resource (the wind tunnel delivers ~7 rows/s). Graded one claim at a time, a
batch re-stages the same conditions again and again (the calibration, the operating range and the precision at
OSR 8 are one fans-off staging; five ACS70331 claims stage the same two fan loads) and reads rows that cannot
change any verdict. The planner is pure: declarations in, a plan out; protocols/runner.py executes it.

- Sharing: two steps share a staging when their settings agree wherever both name a variable (a step declares
  every setting its readings depend on, protocols/declaration.py); the staging applies the union and reads the
  union of the columns, as many rows as its most demanding user asks for, after the longest settle any user
  asks for (rows and seconds: a step settled in seconds, `Step.settle_s`, takes no default settle rows).
- Order: per chamber, nearest neighbour from the chamber's known state, by the seconds a change costs: a stepper
  move (hatch, polarizers) as long as the firmware takes to move it, a fan change the seconds a fan needs to
  spin up or down, any other SET one round trip.
- Stopping (`stop_reason`): a claim first gets `probe_rows` rows of each step; it keeps them, instead of the
  default rows, only when more rows cannot change its verdict — the verdict is decided by an unmatched decisive
  condition, or the same verdict holds with the measured value moved by Z Type-A u either way and the Type A
  part anywhere between nothing and twice its estimate. Otherwise it is measured at the default rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Callable, Mapping, Sequence

from firmware_bridge.motion import motion_seconds
from protocols.claims import Claim
from protocols.declaration import Declaration, ProtocolOutcome, Step
from protocols.verdict import Verdict, verdict

PROBE_ROWS = 20
"""Rows a claim that may stop early reads of each step first: enough for a sample s with ν = 19."""
Z_MARGIN = 4
"""How many Type-A standard uncertainties the measured value may still move with more rows (|z| > 4 has a
two-sided normal probability of 6e-5)."""
TYPE_A_NEGLIGIBLE = 0.01
"""The Type A part of u² below this fraction of u_c² is negligible: more rows change u by under 0.5 %."""
SET_SECONDS = 0.15
"""One SET round trip (the wind tunnel reads its line between measurements, about every 140 ms)."""
FAN_SECONDS = 3.0
"""A fan load change: seconds for the fan to spin up or down (the settle rows cover it; a change still costs)."""
FANS = ("load_in", "load_out")
NOMINAL_ROW_S: Mapping[str, float] = {"wt": 1.0 / 7.0, "lt": 1.0 / 12.0}
"""The real boards' pace: the wind tunnel reads about 7 rows/s, the light tunnel 12 (simulator/params.py)."""
CONDITION_CLASSES = ("no-traceable-reference", "unmatched-stimulus", "unmatched-observable", "engagement-only")


@dataclass(frozen=True)
class PlanItem:
    """One thing to measure in the batch: a claim (or the calibration: claim None) with its declaration."""

    key: str
    declaration: Declaration
    claim: Claim | None
    may_stop_early: bool


@dataclass(frozen=True)
class Use:
    """One item's step as served by a staging: the rows it reads first, and the rows it needs at most."""

    item: str
    step: Step
    first_rows: int
    full_rows: int


@dataclass
class Staging:
    """One SET list on one chamber, read once for every step it serves."""

    chamber: str
    settings: dict[str, float]
    settle_rows: int
    reads: list[str]
    uses: list[Use] = field(default_factory=list)
    settle_s: float = 0.0

    @property
    def first_rows(self) -> int:
        return max(u.first_rows for u in self.uses)

    @property
    def full_rows(self) -> int:
        return max(u.full_rows for u in self.uses)

    def accepts(self, chamber: str, settings: Mapping[str, float]) -> bool:
        return chamber == self.chamber and all(self.settings.get(k, v) == v for k, v in settings.items())

    def label(self) -> str:
        return ", ".join(dict.fromkeys(u.step.label for u in self.uses))

    def to_dict(self) -> dict[str, object]:
        return {"chamber": self.chamber, "settings": dict(self.settings), "settle_rows": self.settle_rows,
                "settle_s": self.settle_s, "reads": list(self.reads), "serves": [{"item": u.item, "step": u.step.label} for u in self.uses]}


@dataclass
class Plan:
    stagings: list[Staging]
    restores: dict[str, dict[str, float]]  # per chamber, applied once its stagings are read

    def stagings_of(self, item: str) -> dict[str, int]:
        """step label → index of the staging that serves it, for one item."""
        return {u.step.label: i for i, s in enumerate(self.stagings) for u in s.uses if u.item == item}

    def uses_of(self, item: str) -> list[Use]:
        """One item's uses, in staging order (what the runner evaluates, stops on and reports per item)."""
        return [u for s in self.stagings for u in s.uses if u.item == item]


def change_seconds(state: Mapping[str, float], settings: Mapping[str, float]) -> float:
    """What moving the chamber from `state` to `settings` costs. An unknown value counts as a change; for the
    time of a fan or motor change an unknown value is taken as its power-on value (fans off, motors at 0)."""
    total = 0.0
    for name, value in settings.items():
        before = state.get(name)
        if before is None and name in FANS:
            total += SET_SECONDS + (FAN_SECONDS if float(value) != 0.0 else 0.0)
            continue
        if before is not None and float(before) == float(value):
            continue
        total += SET_SECONDS
        if before is not None:
            total += motion_seconds(name, float(before), float(value))
        else:
            total += motion_seconds(name, 0.0, float(value))  # after a boot every motor is at 0
        if name in FANS:
            total += FAN_SECONDS
    return total


def reading_seconds(staging: Staging, state: Mapping[str, float], rows: int,
                    row_s: Mapping[str, float] = NOMINAL_ROW_S) -> float:
    """The planned chamber seconds of reading `rows` rows of `staging` from `state` (the chamber's settings before
    it): the change of settings, the settle seconds and settle rows, and the rows at the chamber's row period."""
    period = row_s.get(staging.chamber, max(row_s.values()))
    return change_seconds(state, staging.settings) + staging.settle_s + (staging.settle_rows + rows) * period


def plan(items: Sequence[PlanItem], *, rows: int, settle_rows: int, probe_rows: int = PROBE_ROWS,
         start: Mapping[str, Mapping[str, float]] | None = None) -> Plan:
    """Share stagings between the items' steps and order them per chamber (see the module docstring)."""
    stagings: list[Staging] = []
    restores: dict[str, dict[str, float]] = {}
    for item in items:
        d = item.declaration
        assert d.chamber is not None
        for step in d.steps:
            full = step.rows if step.rows is not None else rows
            first = min(full, probe_rows) if item.may_stop_early else full
            settle = step.settle_rows if step.settle_rows is not None else 0 if step.settle_s else settle_rows
            settings = step.settings_dict()
            target = next((s for s in stagings if s.accepts(d.chamber, settings)), None)
            if target is None:
                target = Staging(d.chamber, dict(settings), settle, [])
                stagings.append(target)
            target.settings.update(settings)
            target.settle_rows = max(target.settle_rows, settle)
            target.settle_s = max(target.settle_s, step.settle_s or 0.0)
            target.reads.extend(r for r in step.reads if r not in target.reads)
            target.uses.append(Use(item.key, step, first, full))
        if d.restore:
            restores.setdefault(d.chamber, {}).update({n: float(v) for n, v in d.restore})
    return Plan(_ordered(stagings, start or {}), restores)


def _ordered(stagings: list[Staging], start: Mapping[str, Mapping[str, float]]) -> list[Staging]:
    out: list[Staging] = []
    for chamber in dict.fromkeys(s.chamber for s in stagings):
        left = [s for s in stagings if s.chamber == chamber]
        state = dict(start.get(chamber, {}))
        while left:
            best = min(left, key=lambda s: (change_seconds(state, s.settings), left.index(s)))
            left.remove(best)
            out.append(best)
            state.update(best.settings)
    return out


# --------------------------------------------------------------------------------------------- stopping
@dataclass(frozen=True)
class StopDecision:
    stop: bool
    rule: str
    why: str


def stop_reason(claim: Claim, declaration: Declaration, outcome: ProtocolOutcome, decided: Verdict,
                verdict_of: Callable[..., Verdict] = verdict) -> StopDecision:
    """Can more rows change this claim's verdict? `decided`: the verdict at the rows read so far."""
    m = outcome.measurement
    if m is not None and m.status != "ok":
        return StopDecision(True, "apparatus", "an apparatus error is reported as such, not measured again")
    if decided.verdict == "error":
        return StopDecision(True, "apparatus", "the protocol could not be run; more rows would not run it")
    if outcome.decided is not None:
        ev = outcome.evidence
        if ev is None or ev.value is None or ev.u is None:
            return StopDecision(True, "decided", "the protocol's verdict does not rest on a measured number")
        if ev.u == 0 or abs(ev.value) > Z_MARGIN * ev.u:
            z = "∞" if ev.u == 0 else f"{float(abs(ev.value) / ev.u):.0f}"
            return StopDecision(True, "decided with margin",
                                f"the evidence {ev.value} ± {ev.u} {ev.unit} is {z} u from zero (> {Z_MARGIN})")
        return StopDecision(False, "needs rows", f"the evidence {ev.value} ± {ev.u} {ev.unit} is within "
                                                 f"{Z_MARGIN} u of zero")
    if m is None:
        return StopDecision(True, "decided", "nothing was measured")
    if decided.verdict == "inconclusive" and decided.zone is None and decided.inconclusive_class in CONDITION_CLASSES:
        return StopDecision(True, "condition-decided",
                            f"a decisive condition is unmatched ({decided.inconclusive_class}): the verdict is "
                            "inconclusive whatever more rows show")
    if declaration.stop_rule is not None:
        stop, why = declaration.stop_rule(outcome)
        return StopDecision(stop, "at the ceiling" if stop else "needs rows", why)
    budget = m.budget
    if budget is None or m.value is None:
        return StopDecision(False, "needs rows", "no budget to tell how the value moves with more rows")
    u_a = math.sqrt(sum(c.contribution ** 2 for c in budget.components if c.evaluation == "A"))
    u_b = math.sqrt(sum(c.contribution ** 2 for c in budget.components if c.evaluation == "B"))
    for shift in (-Z_MARGIN * u_a, Z_MARGIN * u_a):
        for u in (u_b, math.sqrt(u_b ** 2 + (2 * u_a) ** 2)):
            moved = replace(m, value=m.value + Decimal(repr(shift)), u=Decimal(repr(u)))
            if verdict_of(claim, moved).verdict != decided.verdict:
                return StopDecision(False, "needs rows",
                                    f"with the value moved by {Z_MARGIN} Type-A u ({u_a:.3g} {m.unit}) or the Type A "
                                    f"part between 0 and twice its estimate the verdict could change")
    share = (u_a ** 2) / (budget.combined ** 2) if budget.combined > 0 else 0.0
    if share <= TYPE_A_NEGLIGIBLE:
        return StopDecision(True, "type-a-negligible",
                            f"the Type A part is {share:.1%} of u² (u_A = {u_a:.3g} {m.unit}); the verdict holds "
                            f"with the value moved by {Z_MARGIN} u_A")
    return StopDecision(True, "decided with margin",
                        f"{decided.verdict} holds with the value moved by {Z_MARGIN} u_A ({u_a:.3g} {m.unit}) either "
                        "way and the Type A part anywhere between 0 and twice its estimate")
