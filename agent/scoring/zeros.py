"""Honest zero counts: "0 flags in N cells" always travels with its one-sided 95 % upper bound and its unit.

Why: a zero observed in a small sample is weak evidence that the rate is zero. With N independent units and no
event, the Clopper–Pearson one-sided 95 % upper bound on the rate is 1 − 0.05^(1/N) (about 3/N, "the rule of
three"). Saying what a unit is (a cell, a claim-by-model group, a claim) matters because repeats of one claim are
not independent of each other.
"""

from __future__ import annotations

from typing import Any

CONFIDENCE = 0.95


def clopper_pearson_zero_bound(n: int, confidence: float = CONFIDENCE) -> float | None:
    """One-sided upper bound on a rate when 0 events were seen in `n` units; None when n is 0 (no evidence)."""
    if n < 0:
        raise ValueError(f"a count of units must be >= 0, got {n}")
    if n == 0:
        return None
    return 1.0 - (1.0 - confidence) ** (1.0 / n)


def count_with_bound(count: int, n: int, unit: str, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """A count out of `n` units of independence. A zero count carries its upper bound (`upper_95`); a non-zero
    count carries its observed rate. `unit` names what one of the n is ("cells", "claim-by-model groups" ...)."""
    if not 0 <= count <= max(n, 0):
        raise ValueError(f"count {count} is outside 0..{n}")
    out: dict[str, Any] = {"count": count, "n": n, "unit": unit}
    if count == 0:
        out["upper_95"] = clopper_pearson_zero_bound(n, confidence)
        out["note"] = (f"0 of {n} {unit}: one-sided {confidence:.0%} Clopper-Pearson upper bound "
                       f"{out['upper_95']:.4f}" if n else f"0 of 0 {unit}: no evidence either way")
    else:
        out["rate"] = count / n
    return out
