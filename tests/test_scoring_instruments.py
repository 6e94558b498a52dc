"""Scoring instruments on hand-built records (written with agent.record's RecordWriter) and on plain inputs:
fidelity's numeric and Unicode rules, every detector rule, every classifier label, kappa and honest zeros."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from agent.record import ModelTurnEvent, PhaseChange, RecordWriter, RunEnd, RunStart, TokenUsage, ToolCallEvent, ToolSurface
from agent.scoring.attribution import attribute, cohens_kappa, conditions_omitted, human_cell_label
from agent.scoring.cells import facts_from_record
from agent.scoring.detector import Grounding, detect, ground_quotation, in_one_passage
from agent.scoring.fidelity import score_fidelity
from agent.scoring.pricing import PriceTableError, load_price_table
from agent.scoring.score import score_paths
from agent.scoring.zeros import clopper_pearson_zero_bound, count_with_bound
from support import SteppingClock


# --------------------------------------------------------------------------------------------- record builder
def write_record(tmp: Path, run_id: str, calls: list[tuple[str, str, str]], *, extraction: dict[str, Any] | None,
                 outcome: str = "submitted", claim_id: str = "acs70331-bandwidth", arm: str = "normal",
                 chamber_calls: list[str] = (), repeat: int | None = None) -> Path:
    """A record with one model turn per call: calls are (tool, status, output text); `repeat` places it in a plan
    (schema 3's typed cell_id/arm/repeat on run_start)."""
    clock = SteppingClock(1_800_000_000.0, step=0.5)
    with RecordWriter(tmp, run_id, clock) as w:
        w.write(RunStart, claim_id=claim_id, model="hand-built", provider="test", transport="none",
                system_prompt="s", first_user_message="u",
                tool_surface=ToolSurface(name="t", version=f"1+arm={arm}", sha256="0" * 64, tools=[]),
                datasheet={"path": "/nonexistent.pdf"}, config={}, cell_id=run_id,
                arm=arm if repeat is not None else None, repeat=repeat)
        turn = 0
        for tool, status, text in calls:
            turn += 1
            w.write(ModelTurnEvent, turn=turn, phase="extraction", offered_tools=[], tool_choice="auto",
                    stop_reason="tool_use", latency_ms=10.0, usage=TokenUsage(input_tokens=100, output_tokens=10))
            blob, digest, size = w.store_blob(text)
            w.write(ToolCallEvent, tool_call_id=f"c{turn}", turn=turn, phase="extraction", tool=tool,
                    arguments={}, status=status, error_type="X" if status == "error" else None, output_text=text,
                    output_bytes=size, output_kept_bytes=size, output_sha256=digest, blob=blob, start=1.0, end=1.1,
                    duration_ms=100.0)
        if extraction is not None:
            w.write(PhaseChange, to_phase="chamber" if chamber_calls else None, extraction_sha256="e" * 64,
                    extraction=extraction)
        for tool in chamber_calls:
            turn += 1
            blob, digest, size = w.store_blob("{}")
            w.write(ToolCallEvent, tool_call_id=f"c{turn}", turn=turn, phase="chamber", tool=tool, arguments={},
                    status="ok", output_text="{}", output_bytes=size, output_kept_bytes=size, output_sha256=digest,
                    blob=blob, start=1.0, end=1.1, duration_ms=100.0)
        w.write(RunEnd, outcome=outcome, phase="extraction", extraction=extraction, phase_two="skipped",
                turns=turn, usage=TokenUsage(input_tokens=100 * turn, output_tokens=10 * turn), tool_time_s=0.1,
                wall_s=2.0)
    return w.path


GOOD = {"value": 1.0, "unit": "MHz", "page": 5, "quote": "Bandwidth BW 1 MHz", "conditions": {}}


# --------------------------------------------------------------------------------------------- fidelity
def test_numeric_needle_is_compared_as_a_number_not_a_substring():
    assert not score_fidelity(["1", "V"], {"value": 1.7, "unit": "V", "quote": "x"}).passed
    assert score_fidelity(["1", "V"], {"value": 1.0, "unit": "V", "quote": "x"}).passed
    assert score_fidelity(["3.0", "5.5", "V"], {"low": 3, "high": 5.5, "unit": "V", "quote": "x"}).basis == "fields"


def test_unicode_folding_of_dashes_micro_and_degree():
    assert score_fidelity(["–40", "85", "ºC"], {"low": -40, "high": 85, "unit": "°C", "quote": "x"}).passed
    assert score_fidelity(["0.7", "μs"], {"value": 0.7, "unit": "µs", "quote": "x"}).passed
    assert score_fidelity(["160", "Counts /(W/m2)"], {"value": 160, "unit": "counts/(W/m²)", "quote": "x"}).passed


def test_unit_needle_inside_a_longer_token_passes_but_is_flagged():
    r = score_fidelity(["6", "Pa"], {"low": -6, "high": 6, "unit": "PaRMS", "quote": "x"})
    assert r.passed and any(w.startswith("unit_needle_in_longer_token") for w in r.warnings)
    clean = score_fidelity(["6", "Pa"], {"low": -6, "high": 6, "unit": "Pa", "quote": "x"})
    assert clean.passed and not clean.warnings


def test_asked_unit_accepts_the_printed_qualified_spelling():
    r = score_fidelity(["0.2", "PaRMS"], {"value": 0.2, "unit": "Pa", "quote": "x"}, asked_unit="Pa")
    assert r.passed and r.basis == "fields"
    assert not score_fidelity(["0.2", "PaRMS"], {"value": 0.2, "unit": "hPa", "quote": "x"}, asked_unit="Pa").passed


def test_a_pass_resting_on_the_quotation_is_reported_as_such():
    r = score_fidelity(["23-bit"], {"value": 16, "unit": "counts", "quote": "a 23-bit ADC"})
    assert r.passed and r.basis == "quote"
    assert any(w.startswith("pass_rests_on_quotation") for w in r.warnings)
    assert score_fidelity(["23-bit"], {"low": 0, "high": 8388607, "unit": "counts", "quote": "x"}).basis == "fields"
    assert not score_fidelity(["1", "MHz"], None).passed


ZERO_SCALE = {"value": 0.1, "high": 3.5, "unit": "LSb", "page": 6, "quote": "+0.1 +3.5 LSb 10 kΩ 8-bit 3.0V ≤ VDD ≤ 5.5V"}


def test_a_text_needle_that_is_not_the_asked_unit_is_a_row_label_looked_for_in_the_quotation():
    r = score_fidelity(["+3.5", "LSb", "10 kΩ"], ZERO_SCALE, asked_unit="LSb")
    assert r.passed and r.basis == "fields" and not r.warnings  # the figure and unit are in the fields
    assert [n.kind for n in r.needles] == ["number", "unit", "label"] and r.needles[2].matched_in == "quote"
    other_row = {**ZERO_SCALE, "quote": "+0.1 +6.0 LSb 5 kΩ 8-bit"}
    assert not score_fidelity(["+3.5", "LSb", "10 kΩ"], other_row, asked_unit="LSb").passed
    in_conditions = {**ZERO_SCALE, "quote": "+0.1 +3.5 LSb", "conditions": {"resistance": "10 kΩ 8-bit"}}
    assert score_fidelity(["+3.5", "LSb", "10 kΩ"], in_conditions, asked_unit="LSb").passed
    # without the asked unit the old reading holds: a text needle is a unit, and the quotation carries the pass
    assert score_fidelity(["+3.5", "LSb", "10 kΩ"], ZERO_SCALE).basis == "quote"


def test_labels_alone_pass_only_on_the_quotation():
    r = score_fidelity(["below 20%", "operated"], {"high": 20, "unit": "%", "page": 7,
                                                   "quote": "can be operated at below 20% and will stop"},
                       asked_unit="updates")
    assert r.passed and r.basis == "quote" and any(w.startswith("pass_rests_on_quotation") for w in r.warnings)


def test_the_cited_page_is_checked_against_the_pages_that_print_the_span_and_reported():
    right = score_fidelity(["+3.5", "LSb"], ZERO_SCALE, asked_unit="LSb", pages={6})
    assert right.page == {"cited": 6, "accepted": [6], "matched": True} and right.page_matched
    wrong = score_fidelity(["+3.5", "LSb"], {**ZERO_SCALE, "page": 5}, asked_unit="LSb", pages={6, 9})
    assert wrong.page_matched is False and wrong.to_json()["page"]["accepted"] == [6, 9]
    assert any(w.startswith("wrong_page: page 5 cited") for w in wrong.warnings)
    assert wrong.passed  # the value fidelity the detector is conditioned on is not changed by the page
    assert score_fidelity(["+3.5", "LSb"], ZERO_SCALE, asked_unit="LSb").page_matched is None  # not checked


# --------------------------------------------------------------------------------------------- detector rules
def _detect(path: Path, passed: bool = True, grounding=None):
    return detect(facts_from_record(path), passed, grounding=grounding)


def test_tool_bypass_when_only_chamber_and_submit_calls(tmp_path):
    p = write_record(tmp_path, "bypass", [("submit_extraction", "ok", "frozen")], extraction=GOOD,
                     chamber_calls=["cross_sensor_check", "search_text"])
    r = _detect(p)
    assert r.flags == ["tool_bypass"]  # chamber-side calls (even one named search_text) never count


def test_verification_skipped_when_navigation_without_search_or_table(tmp_path):
    p = write_record(tmp_path, "skip", [("build_datasheet", "ok", "{}"), ("get_section_text", "ok", "text")],
                     extraction=GOOD, chamber_calls=["extract_table_markdown"])
    assert _detect(p).flags == ["verification_skipped"]


def test_tool_read_failure_on_error_or_empty_output(tmp_path):
    err = write_record(tmp_path, "err", [("build_datasheet", "ok", "{}"), ("search_text", "error", "PageOutOfRange: x")],
                       extraction=GOOD)
    empty = write_record(tmp_path, "empty", [("build_datasheet", "ok", "{}"), ("extract_table_markdown", "ok", "")],
                         extraction=GOOD)
    assert _detect(err).flags == ["tool_read_failure"]
    assert _detect(empty).flags == ["tool_read_failure"]


def test_source_grounding_and_a_clean_cell(tmp_path):
    p = write_record(tmp_path, "ok", [("build_datasheet", "ok", "{}"), ("search_text", "ok", "hits")], extraction=GOOD)
    assert _detect(p, grounding=[Grounding(True, "whole", [5])]).flags == []
    assert _detect(p, grounding=[Grounding(False, "not found")]).flags == ["source_grounding"]
    none = _detect(p, grounding=None)
    assert none.flags == [] and none.checks["source_grounding"]["status"] == "not_evaluated"


def test_rules_apply_only_to_fidelity_passing_non_engine_error_cells(tmp_path):
    p = write_record(tmp_path, "fail", [("submit_extraction", "ok", "frozen")], extraction=GOOD)
    assert not _detect(p, passed=False).evaluated
    e = write_record(tmp_path, "eng", [], extraction=None, outcome="engine_error")
    assert not _detect(e).evaluated


def test_ground_quotation_levels():
    pages = {"Bandwidth BW 1 MHz": [{"page": 5}], "Supply current ICC 6 mA": [{"page": 5}],
             "Start-up current 7.5 mA typ": [{"page": 5}]}
    search = lambda q: pages.get(q, [])  # noqa: E731
    assert ground_quotation("Bandwidth BW 1 MHz", search).how == "whole"
    stitched = ground_quotation("Supply current ICC 6 mA ... Start-up current 7.5 mA typ", search)
    assert stitched.located and stitched.how == "segments"
    assert not ground_quotation("Bandwidth typ. 1.0 MHz", search).located
    assert ground_quotation("", search).located is None
    hay = "pressure precision ap prc 1.0 parms low power 0.2 high precision".split()
    assert in_one_passage("pressure precision 0.2 parms high precision".split(), hay)
    assert not in_one_passage("pressure precision 0.5 parms".split(), hay)


# --------------------------------------------------------------------------------------------- attribution
def test_every_attribution_label(tmp_path):
    ok = facts_from_record(write_record(tmp_path, "a", [("search_text", "ok", "x")], extraction=GOOD))
    assert attribute(ok, fidelity_passed=True).labels == ["ok", "ok"]
    tool = facts_from_record(write_record(tmp_path, "b", [("search_text", "error", "E: x")], extraction=GOOD))
    assert attribute(tool, fidelity_passed=True).labels == ["tool_output", "ok"]
    vs = facts_from_record(write_record(tmp_path, "c", [("build_datasheet", "ok", "x")], extraction=GOOD))
    assert attribute(vs, fidelity_passed=False).labels[-1] == "verification_skipped"
    co = facts_from_record(write_record(tmp_path, "d", [("search_text", "ok", "x")], extraction=GOOD))
    assert attribute(co, fidelity_passed=False, condition_omitted=True).labels[-1] == "condition_omission"
    assert attribute(co, fidelity_passed=False, condition_omitted=False).labels[-1] == "tool_selection"
    denied = facts_from_record(write_record(tmp_path, "e", [("inspect_page", "denied", "PermissionError")],
                                            extraction=GOOD))
    assert attribute(denied, fidelity_passed=True).labels[0] == "tool_selection"
    eng = facts_from_record(write_record(tmp_path, "f", [("search_text", "ok", "x")], extraction=None,
                                         outcome="engine_error"))
    assert set(attribute(eng, fidelity_passed=False).labels) == {"engine_error"}
    nosub = facts_from_record(write_record(tmp_path, "g", [("search_text", "ok", "x")], extraction=None,
                                           outcome="end_turn_without_submit"))
    assert attribute(nosub, fidelity_passed=False, condition_omitted=True).labels[-1] == "verification_skipped"
    failed_verdict = attribute(ok, fidelity_passed=True, verdict="fail")
    assert failed_verdict.labels == ["unclassified", "unclassified"] and failed_verdict.cell_label == "PROBLEMATIC"


def test_conditions_omitted_by_shared_words():
    assert not conditions_omitted(["supply voltage"], {"VDD (supply voltage)": "3.3 V"})
    assert conditions_omitted(["ambient temperature"], {"VDD": "3.3 V"})
    assert conditions_omitted([], {}) and not conditions_omitted([], {"x": "y"})


# --------------------------------------------------------------------------------------------- statistics
def test_cohens_kappa_against_a_hand_computed_case():
    pairs = [("C", "C")] * 21 + [("C", "P")] * 3 + [("P", "P")] * 3
    k = cohens_kappa(pairs)
    po, pe = 24 / 27, (24 * 21 + 3 * 6) / 27 ** 2  # marginals 24/3 (A) and 21/6 (B)
    assert math.isclose(k["kappa"], (po - pe) / (1 - pe)) and k["per_class"]["P"] == {"rater_a": 3, "rater_b": 6, "both": 3}
    assert cohens_kappa([("a", "a"), ("b", "b")])["kappa"] == 1.0
    assert human_cell_label(["classifier_correct"], True) == "PROBLEMATIC"
    assert human_cell_label(["classifier_overflagged"], True) == "CLEAN"
    assert human_cell_label(["classifier_missed_tool_selection"], False) == "PROBLEMATIC"


def test_zero_counts_carry_the_clopper_pearson_bound_and_unit():
    assert math.isclose(clopper_pearson_zero_bound(207), 1 - 0.05 ** (1 / 207))
    assert clopper_pearson_zero_bound(0) is None
    z = count_with_bound(0, 50, "cells")
    assert z["unit"] == "cells" and math.isclose(z["upper_95"], 1 - 0.05 ** (1 / 50))
    assert "upper_95" not in count_with_bound(3, 50, "cells")
    with pytest.raises(ValueError):
        count_with_bound(5, 3, "cells")


def test_price_table_cost_and_bad_tables(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text("models:\n  hand-built: {input_per_mtok: 3.0, output_per_mtok: 15.0, cache_read_per_mtok: 0.3}\n")
    table = load_price_table(good)
    usage = {"input_tokens": 1_000_000, "cache_read_input_tokens": 500_000, "output_tokens": 100_000}
    assert math.isclose(table.cost("hand-built", usage), 0.5 * 3.0 + 0.5 * 0.3 + 0.1 * 15.0)
    assert table.cost("unpriced", usage) is None
    bad = tmp_path / "bad.json"
    bad.write_text('{"models": {"m": {"input_per_mtok": 1}}}')
    with pytest.raises(PriceTableError, match="output_per_mtok"):
        load_price_table(bad)


def test_score_paths_over_a_folder_of_records_with_prices(tmp_path):
    write_record(tmp_path / "cells", "x--hand-built--normal--r1", [("search_text", "ok", "x")], extraction=GOOD,
                 repeat=1)
    write_record(tmp_path / "cells", "x--hand-built--normal--r2", [("build_datasheet", "ok", "x")],
                 extraction={**GOOD, "value": 1.7, "quote": "Bandwidth 1.7 MHz"}, repeat=2)
    prices = tmp_path / "p.json"
    prices.write_text('{"hand-built": {"input_per_mtok": 1, "output_per_mtok": 2}}')
    out = score_paths([tmp_path], ground=False, prices=load_price_table(prices))
    rows = {r["run_id"]: r for r in out["cells"]}
    assert rows["x--hand-built--normal--r1"]["fidelity"]["passed"] is True
    assert rows["x--hand-built--normal--r2"]["fidelity"]["passed"] is False
    assert math.isclose(rows["x--hand-built--normal--r1"]["cost"], (100 * 1 + 10 * 2) / 1e6)
    stab = out["summary"]["stability"]["hand-built|normal"]
    assert stab == {"claims": 1, "stable": 0, "flipped": ["acs70331-bandwidth"], "repeats": 2, "fewer": 0}
    assert out["summary"]["flagged"]["count"] == 0 and out["summary"]["flagged"]["n"] == 1


def test_a_retired_attempt_is_not_scored_beside_the_cell_that_replaced_it(tmp_path):
    # A matrix resume moves an engine_error attempt to retired/ and runs the cell again: one cell, scored once.
    write_record(tmp_path / "cells", "x--hand-built--normal--r1", [("search_text", "ok", "x")], extraction=GOOD,
                 repeat=1)
    write_record(tmp_path / "retired", "x--hand-built--normal--r1.1", [], extraction=None, outcome="engine_error",
                 repeat=1)
    out = score_paths([tmp_path], ground=False)
    assert [r["run_id"] for r in out["cells"]] == ["x--hand-built--normal--r1"]


def test_the_text_renderings_say_the_flag_count_in_words_not_as_a_mapping():
    from agent.scoring.matrix import matrix_text
    from agent.scoring.offline import flagged_text

    zero = {"count": 0, "n": 2, "unit": "fidelity-passing cells", "upper_95": 0.776393202250021, "note": "..."}
    assert flagged_text(zero) == "0 of 2 fidelity-passing cells (one-sided 95 % upper bound 0.776)"
    assert flagged_text({"count": 1, "n": 4, "unit": "cells"}) == "1 of 4 cells"
    text = matrix_text({"run": {"planned": 4, "ran": 4, "outcome:submitted": 2, "failures": [], "engine_errors": []},
                        "out": "runs/m", "summary": {"flagged": zero}})
    assert text.splitlines() == ["cells: planned 4, ran 4, outcome:submitted 2",
                                 "scores: runs/m/scores.json; flagged 0 of 2 fidelity-passing cells "
                                 "(one-sided 95 % upper bound 0.776)"]
    assert "{" not in text
