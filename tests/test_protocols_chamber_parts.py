"""Claims on the chamber's other parts (issue 16): the NF-F12 fans and the MCP4151 potentiometers, from
protocols/data/chamber_parts, graded by the chamber alone on the simulator with what each verdict assumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_cli import PROJECT_ROOT
from chamber import open_chamber
from protocols.claim_sources import load_checked_claims
from protocols.claims import normalise_text
from protocols.bench_job import grade_claims
from protocols.registry import protocol_for

FOLDER = PROJECT_ROOT / "protocols" / "data" / "chamber_parts"


@pytest.fixture(scope="module")
def claims():
    return load_checked_claims([FOLDER])


@pytest.fixture(scope="module")
def graded(claims):
    chambers = {kind: open_chamber(backend="sim", chamber=kind, seed=3) for kind in ("wt", "lt")}
    try:
        return {r.claim.id: r for r in grade_claims(list(claims.values()), chambers, rows=60)}
    finally:
        for c in chambers.values():
            c.close()


def test_every_span_is_verbatim_on_its_page_of_the_identified_pdf(claims):
    import pymupdf

    from conftest import shared_path

    for claim in claims.values():
        pdf = shared_path("datasheets", claim.identity.filename)
        claim.identity.verify_file(Path(pdf))  # the SHA-256 the claim file names
        with pymupdf.open(pdf) as doc:
            text = normalise_text(doc[claim.source.page - 1].get_text())
        assert normalise_text(claim.source.span) in text, claim.id


def test_each_claim_names_a_declared_protocol_on_the_chamber_that_carries_the_part(claims):
    for claim in claims.values():
        declaration = protocol_for(claim)
        if declaration is None:
            assert claim.decisive_unmatched(), claim.id  # no protocol only where the chamber cannot stage it
            continue
        carriers = {c.chamber: set(c.variables) for c in claim.identity.carried_by}
        assert declaration.chamber in carriers, claim.id


def test_the_chamber_alone_grades_twelve_new_claims_definitively(graded):
    verdicts = {cid: r.verdict for cid, r in graded.items()}
    definitive = sorted(cid for cid, v in verdicts.items() if v.verdict in ("pass", "fail"))
    assert definitive == ["mcp4151-inl-pot-1", "mcp4151-inl-pot-2",
                          "mcp4151-no-missing-codes-pot-1", "mcp4151-no-missing-codes-pot-2",
                          "mcp4151-zero-scale-error-pot-1", "mcp4151-zero-scale-error-pot-2",
                          "nf-f12-max-speed-exhaust", "nf-f12-max-speed-intake",
                          "nf-f12-pwm-runs-below-20-percent-exhaust", "nf-f12-pwm-runs-below-20-percent-intake",
                          "nf-f12-pwm-stops-at-zero-duty-exhaust", "nf-f12-pwm-stops-at-zero-duty-intake"]
    for k in ("1", "2"):
        codes = graded[f"mcp4151-no-missing-codes-pot-{k}"]
        assert codes.verdict.verdict == "pass" and codes.measurement.details["non_positive_steps"] == 0
        assert "100h" in codes.measurement.details["not_exercised"]
        assert abs(graded[f"mcp4151-inl-pot-{k}"].verdict.measured) < 1
    for fan in ("intake", "exhaust"):
        v = verdicts[f"nf-f12-max-speed-{fan}"]
        assert v.verdict == "pass" and 2700 < v.measured < 3300 and v.semantics == "range"  # Typ. with limits
        assert "12 V" in graded[f"nf-f12-max-speed-{fan}"].measurement.details["not_measured"]
    full = verdicts["mcp4151-full-scale-error"]
    assert (full.verdict, full.inconclusive_class) == ("inconclusive", "unmatched-stimulus")
    assert "assumed" in graded["mcp4151-zero-scale-error-pot-1"].measurement.details


def test_a_fan_below_the_band_fails(claims):
    """The band is a guaranteed limit (+/-10 %), unlike a bare Typ.: a slow unit is failed, not excused."""
    from protocols.measurement import Measurement
    from protocols.verdict import verdict

    claim = claims["nf-f12-max-speed-intake"]
    slow = Measurement(value=2650, u=2, unit="RPM", matched_conditions=["full PWM duty", "other fan stopped"])
    assert verdict(claim, slow).verdict == "fail"


def test_angle_linearity_on_half_the_travel_can_fail_but_not_pass(claims, graded):
    """The polarizer covers about half the 3600° travel: within the bound is inconclusive, beyond it is a fail."""
    import numpy as np

    from protocols.angle_sensor_protocols import ANGLES, DECLARATIONS
    from protocols.declaration import Evaluation, StepReadings
    from protocols.verdict import verdict

    for k in ("1", "2"):
        v = graded[f"bourns-3590s-linearity-angle-{k}"].verdict
        assert (v.verdict, v.inconclusive_class, v.numeric_verdict) == ("inconclusive", "unmatched-stimulus", "pass")
        assert v.unmatched_conditions == ("full electrical travel",)
    claim = claims["bourns-3590s-linearity-angle-1"]
    declaration = DECLARATIONS[0]
    rng = np.random.default_rng(0)
    bow = 8.0 * (1 - (np.asarray(ANGLES) / 180.0) ** 2)  # a bowed track: 8 counts (0.78 %) off the line at mid-range
    readings = tuple(
        StepReadings(step.label, step.settings, {"angle_1": 507 + 1.4226 * a + b + rng.normal(0, 0.2, 10)})
        for step, a, b in zip(declaration.steps, ANGLES, bow))
    outcome = declaration.evaluate(Evaluation(claim, readings, declaration.matched(claim)))
    bad = verdict(claim, outcome.measurement)
    assert bad.verdict == "fail" and "full electrical travel" in bad.matched_conditions


def test_a_missing_code_and_a_bowed_track_fail(claims):
    """The code sweep can falsify: a code that reads a lower tap than the code below it (a step of -1 LSb), a track
    2 LSb off its end-point line. A code that exactly repeats its neighbour's tap (a step of 0 LSb, on the bound)
    is inconclusive, not failed: the rule cannot tell 0 from a step just above 0 within c."""
    import numpy as np

    from protocols.declaration import Evaluation, StepReadings
    from protocols.potentiometer_protocols import CODES, DECLARATIONS
    from protocols.verdict import verdict

    rng = np.random.default_rng(1)
    by_key = {d.key: d for d in DECLARATIONS}
    codes = np.asarray(CODES, dtype=float)
    for key, cid, counts in (
            ("mcp4151.missing_codes_pot_1", "mcp4151-no-missing-codes-pot-1", np.where(codes == 100, 98, codes) * 4.0),
            ("mcp4151.inl_pot_1", "mcp4151-inl-pot-1", codes * 4.0 + 8.0 * np.sin(np.pi * codes / 255))):
        declaration, claim = by_key[key], claims[cid]
        readings = tuple(StepReadings(step.label, step.settings, {"signal_1": c + rng.normal(0, 0.3, 2)})
                         for step, c in zip(declaration.steps, counts))
        outcome = declaration.evaluate(Evaluation(claim, readings, declaration.matched(claim)))
        assert verdict(claim, outcome.measurement).verdict == "fail", cid
    repeated = by_key["mcp4151.missing_codes_pot_1"]
    flat = np.where(codes == 100, 99, codes) * 4.0
    readings = tuple(StepReadings(step.label, step.settings, {"signal_1": c + rng.normal(0, 0.3, 2)})
                     for step, c in zip(repeated.steps, flat))
    claim = claims["mcp4151-no-missing-codes-pot-1"]
    outcome = repeated.evaluate(Evaluation(claim, readings, repeated.matched(claim)))
    assert verdict(claim, outcome.measurement).verdict == "inconclusive"


def test_the_main_job_grades_the_chamber_parts_and_the_report_counts_them():
    """`run` without --claims grades the packaged 37 plus the chamber-parts claims; the report splits the envelope."""
    from agent.scoring.report import _chamber_envelope
    from protocols.claim_sources import load_checked_claims, load_main_job_claims

    main = load_main_job_claims(None)
    packaged, parts = load_checked_claims(None), load_checked_claims([FOLDER])
    assert set(main) == set(packaged) | set(parts) and len(main) == len(packaged) + len(parts)
    assert set(load_main_job_claims([FOLDER])) == set(parts)  # --claims PATH still replaces the default
    seed_id, part_id = sorted(packaged)[0], "nf-f12-max-speed-intake"
    line = _chamber_envelope([{"claim_id": seed_id, "verdict": "pass", "component": packaged[seed_id].component},
                              {"claim_id": part_id, "verdict": "pass", "component": "NF-F12"},
                              {"claim_id": "mcp4151-full-scale-error", "verdict": "inconclusive",
                               "component": "MCP4151"}])
    assert line is not None and "2 definitive" in line and "1 of the 2 claims outside it (MCP4151, NF-F12)" in line
    assert _chamber_envelope([{"claim_id": seed_id, "verdict": "pass"}]) is None  # the packaged set alone: no line
