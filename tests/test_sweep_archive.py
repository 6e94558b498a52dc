"""Reproduce the seed paper's perturbation sweep (../shared/paper-archive/archive/perturbation_sweep.json).

The archive holds, per step, the stated upper bound (`claimed_max`), the divergence m − bound, the combined
uncertainty and the seed paper's verdict. We recompute every step with our rule from the archived digits.

What reproduces exactly: the distance and c of every step, and the verdict per step once our ILAC zone is read
the way the seed paper's rule read it. The seed paper guarded only the fail side: any bound still above m was
"pass" (our zones pass AND conditional_pass), a violation within c was "inconclusive" (conditional_fail) and
beyond c "fail". Our rule (metrology.md: pass needs a margin greater than c) differs exactly on the steps with
−c ≤ d ≤ 0, which it calls inconclusive; the test pins those steps down so the difference stays visible.
"""

from __future__ import annotations

import json
from decimal import Decimal as D

import pytest

from conftest import shared_path
from protocols.claims import load_claims
from protocols.measurement import Measurement, to_decimal
from protocols.verdict import verdict

SEED_READING_OF_ZONE = {"pass": "pass", "conditional_pass": "pass", "conditional_fail": "inconclusive", "fail": "fail"}


@pytest.fixture(scope="module")
def archive():
    return json.loads(shared_path("paper-archive", "archive", "perturbation_sweep.json").read_text())


def test_every_step_reproduces(archive):
    claim = load_claims()[archive["claim_id"]]
    assert archive["measured_unit"] == claim.unit
    m = Measurement(value=to_decimal(archive["measured_value"]), u=to_decimal(archive["measured_sigma"]),
                    unit=archive["measured_unit"], dof=3.0, matched_conditions=["load_in", "load_out"])
    ours_differ = []
    for row in archive["rows"]:
        v = verdict(claim.model_copy(update={"high": to_decimal(row["claimed_max"])}), m)
        # float(d) and float(c) match the archive's float arithmetic to its precision (1e-9 hPa).
        assert float(v.distance) == pytest.approx(row["divergence"], abs=1e-9)
        assert float(v.combined_uncertainty) == pytest.approx(row["combined_uncertainty"], abs=1e-12)
        assert SEED_READING_OF_ZONE[v.zone] == row["verdict"], row
        if v.verdict != row["verdict"]:
            ours_differ.append(row["claimed_max"])
            assert (row["verdict"], v.verdict, v.zone) == ("pass", "inconclusive", "conditional_pass")
            assert -v.combined_uncertainty <= v.distance <= 0
    # the steps inside the band but above m: the seed's "pass" is our conditional pass
    band_above = [r["claimed_max"] for r in archive["rows"]
                  if -r["combined_uncertainty"] <= r["divergence"] <= 0]
    assert ours_differ == band_above and len(band_above) > 0


def test_the_archived_walk_is_pass_then_inconclusive_then_fail(archive):
    order = {"pass": 0, "inconclusive": 1, "fail": 2}
    walk = [order[r["verdict"]] for r in archive["rows"]]
    assert walk == sorted(walk) and set(walk) == {0, 1, 2}
    assert D(str(archive["rows"][0]["claimed_max"])) > D(str(archive["rows"][-1]["claimed_max"]))
