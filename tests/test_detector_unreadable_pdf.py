"""The source-grounding rule on a datasheet that cannot be read (issue 19): the searcher used to turn the open
error into "no hits", so the rule fired on a quotation nobody could check. It is now not_evaluated, with the reason;
a readable datasheet that lacks the quotation still fires."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pymupdf

from agent.record import ModelTurnEvent, PhaseChange, RecordWriter, RunEnd, RunStart, TokenUsage, ToolCallEvent, ToolSurface
from agent.scoring.detector import DatasheetUnreadable, ground_quotation
from agent.scoring.score import score_paths
from protocols.claims import load_claims

CLAIM = "acs70331-bandwidth"
EXTRACTION = {"value": 1.0, "unit": "MHz", "page": 5, "quote": "Bandwidth BW 1 MHz", "conditions": {}}


def _record(folder: Path) -> Path:
    """A fidelity-passing cell that navigated and searched (so only source grounding is left to decide)."""
    clock = itertools.count(1_800_000_000.0, 0.5).__next__
    with RecordWriter(folder, "cell--hand-built--normal--r1", clock) as w:
        w.write(RunStart, claim_id=CLAIM, model="hand-built", provider="test", transport="none", system_prompt="s",
                first_user_message="u", tool_surface=ToolSurface(name="t", version="1+arm=normal", sha256="0" * 64,
                                                                 tools=[]),
                datasheet={"path": "/nonexistent.pdf"}, config={})
        for turn, tool in enumerate(("build_datasheet", "search_text"), start=1):
            w.write(ModelTurnEvent, turn=turn, phase="extraction", offered_tools=[], tool_choice="auto",
                    stop_reason="tool_use", latency_ms=10.0, usage=TokenUsage(input_tokens=100, output_tokens=10))
            blob, digest, size = w.store_blob("page 5: Bandwidth BW 1 MHz")
            w.write(ToolCallEvent, tool_call_id=f"c{turn}", turn=turn, phase="extraction", tool=tool, arguments={},
                    status="ok", output_text="page 5: Bandwidth BW 1 MHz", output_bytes=size, output_kept_bytes=size,
                    output_sha256=digest, blob=blob, start=1.0, end=1.1, duration_ms=100.0)
        w.write(PhaseChange, to_phase=None, extraction_sha256="e" * 64, extraction=EXTRACTION)
        w.write(RunEnd, outcome="submitted", phase="extraction", extraction=EXTRACTION, phase_two="skipped", turns=2,
                usage=TokenUsage(input_tokens=200, output_tokens=20), tool_time_s=0.2, wall_s=2.0)
    return w.path


def _score(tmp_path: Path, pdf_bytes: bytes) -> dict[str, Any]:
    claims = load_claims()
    datasheets = tmp_path / "datasheets"
    datasheets.mkdir()
    (datasheets / claims[CLAIM].identity.filename).write_bytes(pdf_bytes)
    _record(tmp_path / "cells")
    (row,) = score_paths([tmp_path / "cells"], claims=claims, datasheets_dir=datasheets)["cells"]
    assert row["fidelity"]["passed"] is True
    return row


def test_an_unreadable_datasheet_leaves_source_grounding_not_evaluated_with_the_reason(tmp_path: Path):
    row = _score(tmp_path, b"%PDF-1.7\n this is not a PDF body at all \n%%EOF\n")
    check = row["detector"]["checks"]["source_grounding"]
    assert check["status"] == "not_evaluated" and check["fired"] is None
    assert "cannot be read" in check["why"] and "ACS70331.pdf" in check["why"]
    assert row["flags"] == []


def test_a_readable_datasheet_without_the_quotation_still_fires(tmp_path: Path):
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "Supply voltage 3.3 V, operating temperature -40 to 125 C", fontsize=11)
    data = doc.tobytes()
    doc.close()
    row = _score(tmp_path, data)
    assert row["detector"]["checks"]["source_grounding"]["status"] == "evaluated"
    assert row["flags"] == ["source_grounding"]


def test_a_search_that_breaks_is_not_a_miss():
    def broken(query: str) -> list[dict[str, Any]]:
        raise DatasheetUnreadable("searching d.pdf failed: MemoryError")

    g = ground_quotation("Bandwidth BW 1 MHz", broken, lambda q: [])
    assert g.located is None and g.how == "not checked: searching d.pdf failed: MemoryError"
