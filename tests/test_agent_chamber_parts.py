"""The scripted reader on the chamber-part claims (issue 16: NF-F12 fans, MCP4151 potentiometers, Bourns 3590S angle
sensors, XP38 polarizer film), through the real loop on their real PDFs, then scored offline like the packaged 37.

The reader sees only each claim's projection and the tool outputs. The oracle here is the claim file: the figures
its needles say the page prints, its fields, its source page and its verbatim span. A claim whose datasheet prints
no figure for it (only words) cannot be extracted as a figure; the reader must then submit nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.datasheet import DatasheetSession
from agent.datasheet.normalise import fold
from agent.loop import CellResult
from agent.reader_text import unit_factor
from agent.scoring.fidelity import classify_needle, score_claim
from conftest import shared_path
from protocols.claim_sources import CHAMBER_PARTS_DIR, load_checked_claims
from protocols.claims import load_claims
from support import ReaderRun, read_with_reader

CLAIMS = load_checked_claims([CHAMBER_PARTS_DIR])


def _printed_numbers(claim) -> list[float]:
    return [classify_needle(n).number for n in claim.source.needles if classify_needle(n).kind == "number"]


PRINTED = {cid: c for cid, c in CLAIMS.items() if _printed_numbers(c)}
WORDS_ONLY = {cid: c for cid, c in CLAIMS.items() if cid not in PRINTED}


def _close(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


def _figures_match(claim, extraction: dict[str, Any]) -> bool:
    """Every figure the claim's needles say is printed was submitted (a "±x" as its bound), and every submitted
    field the claim also carries equals it when the answer is in the claim's unit."""
    got = {k: float(extraction[k]) for k in ("value", "low", "high") if extraction.get(k) is not None}
    if not all(any(_close(g, n) for g in got.values()) for n in _printed_numbers(claim)):
        return False
    if extraction["unit"] != claim.unit:
        return True
    return all(_close(v, getattr(claim, k)) for k, v in got.items() if getattr(claim, k) is not None)


@pytest.fixture(scope="module")
def parts_run(tmp_path_factory) -> ReaderRun:
    return read_with_reader(CLAIMS, shared_path("datasheets"), tmp_path_factory.mktemp("parts-records"))


def _blob(result: CellResult, event) -> str:
    return (result.record.parent / event.blob).read_text(encoding="utf-8")


def test_the_chamber_part_claims_are_outside_the_packaged_37():
    assert len(PRINTED) >= 12 and not set(CLAIMS) & set(load_claims())
    assert {c.component for c in PRINTED.values()} >= {"NF-F12", "MCP4151", "Bourns-3590S", "XP38"}


def test_reader_submits_the_printed_figure_from_the_claims_page(parts_run):
    wrong = {}
    for cid, claim in PRINTED.items():
        r = parts_run.results[cid]
        if r.outcome != "submitted" or not _figures_match(claim, r.extraction) \
                or r.extraction["page"] != claim.source.page:
            wrong[cid] = (r.outcome, r.extraction)
            continue
        unit = r.extraction["unit"]
        # in the unit asked, or (257 Taps, asked in LSb) the printed unit it cannot be converted to, said so
        assert unit == claim.unit or (unit_factor(unit, claim.unit) is None and unit in claim.source.needles
                                      and unit in r.extraction["notes"]), (cid, unit)
    assert not wrong


def test_the_record_shows_the_calls_that_found_the_figure(parts_run):
    """Before submitting, a table or search call on the submitted page printed the figure, then the page's text
    was read and the quotation searched for on that page."""
    for cid, claim in PRINTED.items():
        result, events = parts_run.results[cid], parts_run.events[cid]
        calls = [e for e in events if e.kind == "tool_call"]
        tools = [e.tool for e in calls]
        assert tools[0] == "build_datasheet" and tools[-1] == "submit_extraction" and len(tools) < 30, (cid, tools)
        page = result.extraction["page"]
        figures = [fold(n) for n in claim.source.needles if classify_needle(n).kind == "number"]
        found_by = [e for e in calls[:-1] if e.tool in ("extract_table_markdown", "search_text")
                    and (e.arguments.get("page") in (page, None))
                    and all(f.lstrip("+±<") in fold(_blob(result, e)) for f in figures)]
        assert found_by, (cid, tools)
        shown = [e for e in calls if e.tool == "get_section_text"]
        assert [e.arguments for e in shown] == [{"start_page": page, "end_page": page}], cid
        last_search = [e for e in calls if e.tool == "search_text"][-1]
        assert last_search.arguments == {"query": result.extraction["quote"][:400], "page": page}, cid
        assert page in {h["page"] for h in json.loads(_blob(result, last_search))["hits"]}, cid


def test_quotes_are_printed_text_found_whole_on_the_submitted_page(parts_run):
    for cid in PRINTED:
        result = parts_run.results[cid]
        (shown,) = [e for e in parts_run.events[cid] if e.kind == "tool_call" and e.tool == "get_section_text"]
        page_text = "\n".join(_blob(result, shown).splitlines()[1:])
        assert fold(result.extraction["quote"]) in fold(page_text), cid
        grounding = parts_run.scored[cid]["detector"]["checks"]["source_grounding"]
        (q,) = grounding["quotations"]
        assert grounding["status"] == "evaluated" and q["how"] == "whole", (cid, grounding)
        assert result.extraction["page"] in q["pages"], (cid, q)


def test_fidelity_passes_on_the_fields_and_the_page_for_every_chamber_part_claim(parts_run):
    for cid, claim in PRINTED.items():
        fid = parts_run.scored[cid]["fidelity"]
        assert fid["passed"] and fid["basis"] == "fields", (cid, fid["reason"])
        assert fid["page"] == {"cited": claim.source.page, "accepted": fid["page"]["accepted"], "matched": True}
        assert claim.source.page in fid["page"]["accepted"]
        for needle in fid["needles"]:  # figures and units in the committed fields; only row labels in the quote
            assert needle["matched_in"] == "fields" or needle["kind"] == "label", (cid, needle)
        row = parts_run.scored[cid]
        assert row["flags"] == [] and row["detector"]["fired"] == [], (cid, row["detector"])


def test_a_wrong_figure_fails_fidelity_and_a_wrong_page_is_reported(parts_run):
    with_doc: dict[str, DatasheetSession] = {}
    try:
        for cid, claim in PRINTED.items():
            ex = dict(parts_run.results[cid].extraction)
            session = with_doc.setdefault(claim.identity.filename,
                                          DatasheetSession(parts_run.datasheets / claim.identity.filename))
            printed = {h["page"] for text in (claim.source.span, ex["quote"]) for h in session.search(text)}
            assert score_claim(claim, ex, printed_pages=printed).page_matched is True, cid

            shifted = {k: float(ex[k]) * 1.5 + 0.5 for k in ("value", "low", "high") if ex.get(k) is not None}
            # the wrong figure, its quotation left as read: never a pass on the fields
            assert score_claim(claim, {**ex, **shifted}, printed_pages=printed).basis != "fields", cid
            # the wrong figure with a quotation that does not print the right one: a fidelity failure
            wrong = score_claim(claim, {**ex, **shifted, "quote": "see the datasheet"}, printed_pages=printed)
            assert not wrong.passed and "not matched" in wrong.reason, cid

            other = next(p for p in range(1, claim.identity.pages + 2) if p not in printed)
            moved = score_claim(claim, {**ex, "page": other}, printed_pages=printed)
            assert moved.page_matched is False, cid
            assert any(w.startswith(f"wrong_page: page {other} cited") for w in moved.warnings), cid
    finally:
        for s in with_doc.values():
            s.close()


def test_a_claim_whose_page_prints_no_figure_gets_no_invented_one(parts_run):
    if not WORDS_ONLY:
        pytest.skip("every chamber-part claim has a printed figure")
    for cid in WORDS_ONLY:
        r = parts_run.results[cid]
        tools = [e.tool for e in parts_run.events[cid] if e.kind == "tool_call"]
        assert r.outcome == "end_turn_without_submit" and r.extraction is None, (cid, r.extraction)
        assert "search_text" in tools and "submit_extraction" not in tools, (cid, tools)
