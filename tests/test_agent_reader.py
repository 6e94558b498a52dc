"""The scripted reader on every packaged claim: the real loop (run_cell + in-process ScriptedModel) on the real
PDFs. The reader sees only the claim's projection and the tool outputs; the expected values are compared here,
never inside the agent. The records are then scored offline: every reader cell passes fidelity, the detector
raises nothing, and each quotation is located whole by the datasheet's own search.

Also unit tests of the reader's reading helpers on printed text shapes taken from the datasheets (a footnoted
"Typ.2" header, an absolute-maximum "Rating" column, a wrapped and hyphenated table cell).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from agent.datasheet.normalise import fold
from agent.loop import run_cell
from agent.record import validate_record
from agent.models.base import ModelRequest
from agent.models.scripted import NoTask, ScriptedModel, policy_named
from agent.prompt import ClaimView
from agent.reader import _columns, quote_window, search_phrases, table_readings
from agent.reader import Table as _Table
from agent.reader_text import cell_value as _cell_value
from agent.reader_text import markdown_tables
from conftest import shared_path
from protocols.claims import load_claims
from support import ReaderRun, SteppingClock, read_with_reader, reads_the_claim


@pytest.fixture(scope="module")
def reader_run(tmp_path_factory) -> ReaderRun:
    """Every packaged claim read once by the reader (about 15 s), then scored with source grounding."""
    return read_with_reader(load_claims(), shared_path("datasheets"), tmp_path_factory.mktemp("reader-records"))


def test_reader_submits_the_right_figure_for_every_claim(reader_run):
    assert len(reader_run.results) == len(reader_run.claims) >= 37
    not_submitted = {cid: (r.outcome, r.detail) for cid, r in reader_run.results.items() if r.outcome != "submitted"}
    assert not not_submitted
    wrong = {cid: r.extraction for cid, r in reader_run.results.items()
             if not reads_the_claim(reader_run.claims[cid], r.extraction)}
    assert not wrong
    for cid, r in reader_run.results.items():  # it answers in the unit asked, from a page of the document
        claim = reader_run.claims[cid]
        assert r.extraction["unit"] == claim.unit and 1 <= r.extraction["page"] <= claim.identity.pages, cid


def test_reader_navigates_and_verifies_before_submitting(reader_run):
    for cid, events in reader_run.events.items():
        tools = [e.tool for e in events if e.kind == "tool_call"]
        assert tools[0] == "build_datasheet" and tools[-1] == "submit_extraction", (cid, tools)
        assert "search_text" in tools and "get_section_text" in tools, (cid, tools)
        assert len(tools) < 30, (cid, len(tools))  # inside the loop's default turn budget


def test_reader_cells_pass_fidelity_and_raise_no_detector_flag(reader_run):
    assert set(reader_run.scored) == set(reader_run.claims)
    failing = {cid: row["fidelity"].get("reason") for cid, row in reader_run.scored.items()
               if not row["fidelity"].get("passed")}
    assert not failing
    flagged = {cid: row["detector"]["fired"] for cid, row in reader_run.scored.items()
               if row["flags"] or row["detector"]["fired"]}
    assert not flagged
    basis = {cid: row["fidelity"]["basis"] for cid, row in reader_run.scored.items()
             if row["fidelity"]["basis"] != "fields"}
    assert not basis  # every needle matched the submitted numbers and unit, none only the quotation


def test_reader_quotes_are_found_whole_on_the_submitted_page(reader_run):
    """The detector re-locates each quotation as one piece (not by its segments or scattered words), and the
    reader's own last search_text call, restricted to the submitted page, found it too."""
    not_whole = {}
    for cid, row in reader_run.scored.items():
        grounding = row["detector"]["checks"]["source_grounding"]
        quotations = grounding.get("quotations") or []
        page = reader_run.results[cid].extraction["page"]
        if grounding["status"] != "evaluated" or [q["how"] for q in quotations] != ["whole"] \
                or page not in quotations[0]["pages"]:
            not_whole[cid] = grounding
    assert not not_whole
    for cid, events in reader_run.events.items():
        quote, page = reader_run.results[cid].extraction["quote"], reader_run.results[cid].extraction["page"]
        last_search = [e for e in events if e.kind == "tool_call" and e.tool == "search_text"][-1]
        assert last_search.arguments["query"] == quote[:400], cid
        output = json.loads((reader_run.results[cid].record.parent / last_search.blob).read_text(encoding="utf-8"))
        assert page in {h["page"] for h in output["hits"]}, cid


def test_reader_quote_comes_from_the_page_text_not_the_claim(reader_run):
    """The quotation is printed text the reader was shown by get_section_text for the submitted page (whitespace
    aside, and a word hyphenated at a line break read whole), and it carries a figure that was submitted."""
    for cid, result in reader_run.results.items():
        page, quote = result.extraction["page"], result.extraction["quote"]
        (shown,) = [e for e in reader_run.events[cid] if e.kind == "tool_call" and e.tool == "get_section_text"]
        assert shown.arguments == {"start_page": page, "end_page": page}, cid
        lines = (result.record.parent / shown.blob).read_text(encoding="utf-8").splitlines()[1:]
        # Oracle independent of the reader's own joining: the datasheet index's fold of the page text.
        assert quote in " ".join(" ".join(lines).split()) or fold(quote) in fold("\n".join(lines)), (cid, quote)
        assert _number_printed(quote, result.extraction), (cid, quote)


def _number_printed(quote: str, extraction: dict[str, Any]) -> bool:
    """Some submitted figure (or, for an N-bit code range, N) is printed in the quote, dashes read as minus."""
    printed = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", quote)]
    figures = [abs(float(extraction[k])) for k in ("value", "low", "high") if extraction.get(k) is not None]
    bits = [float(b.bit_length()) for b in (int(f) for f in figures if f >= 1 and float(f).is_integer())]
    return any(abs(p - f) <= 1e-9 * max(1.0, f) for p in printed for f in figures + bits)


def test_reader_ends_its_turn_when_the_document_does_not_print_the_parameter(tmp_path):
    claims = load_claims()
    claim = claims["a4988-blank-time"].model_copy(update={"parameter": "Flux capacitor charging interval"})
    datasheet = shared_path("datasheets", claim.identity.filename)
    result = run_cell(claim, model=ScriptedModel(policy_named("reader"), "scripted:reader"), datasheet=datasheet,
                      record_dir=tmp_path, clock=SteppingClock())
    events = validate_record(result.record)
    assert result.outcome == "end_turn_without_submit" and result.extraction is None
    tools = [e.tool for e in events if e.kind == "tool_call"]
    assert "submit_extraction" not in tools and "search_text" in tools  # it looked, found nothing, invented nothing


# --------------------------------------------------------------------------------------------- reading helpers
def test_search_phrases_split_the_operating_point_from_the_name():
    phrases, qualifiers, head = search_phrases("Fixed off-time tOFF with OSC tied to VDD or GND")
    assert phrases[:2] == ["Fixed off-time tOFF", "Fixed off-time"]
    assert {"osc", "tied", "vdd", "gnd"} <= qualifiers and "toff" in head and "osc" not in head
    phrases, qualifiers, _ = search_phrases("I active (responding to commands, not measuring) at VDD = 3.3 V")
    assert phrases[0] == "I active" and {"3.3", "responding", "measuring"} <= qualifiers


def test_columns_read_footnoted_headers_and_a_rating_column():
    electrical = _Table("", ["Characteristics", "Symbol", "Test Conditions", "Min.", "Typ.2", "Max.", "Units"], [])
    assert _columns(electrical) == {"cond": 2, "min": 3, "typ": 4, "max": 5, "unit": 6}
    ratings = _Table("Absolute Maximum Ratings", ["Characteristic", "Symbol", "", "Notes", "Rating", "Units"], [])
    assert _columns(ratings) == {"rating": 4, "unit": 5}
    grouped = _Table("", ["Parameter", "Symbol", "Values", "", "", "Unit", "Note / Test Condition"],
                     [["", "", "Min.", "Typ.", "Max.", "", ""]])
    assert _columns(grouped) == {"min": 2, "typ": 3, "max": 4, "unit": 5, "cond": 6}


@pytest.mark.parametrize("cell, expected", [
    ("–20 to 85", ("span", (-20.0, 85.0))), ("-0.3 to 5.5", ("span", (-0.3, 5.5))), ("±2", ("sym", 2.0)),
    ("+/-100", ("sym", 100.0)), ("10,000", ("num", 10000.0)), ("<1.0", ("num", 1.0)), ("–", None), ("—", None),
    ("VDD×0.7", None),
])
def test_cell_values_as_printed(cell, expected):
    assert _cell_value(cell) == expected


RATINGS_MD = """Absolute Maximum Ratings

| Characteristic | Symbol |  | Notes | Rating | Units |
|---|---|---|---|---|---|
| Load Supply Voltage | VBB |  |  | 35 | V |
| Operating Ambient Temperature | TA | Range S |  | -20 to 85 | °C |
| Maximum Junction | TJ(max) |  |  | 150 | °C |
| Storage Temperature | Tstg |  |  | -55 to 150 | °C |
"""


def test_a_rating_column_gives_a_rated_band_or_a_limit():
    table = markdown_tables(RATINGS_MD)[0]
    _, qualifiers, head = search_phrases("Storage temperature (absolute maximum rating)")
    (storage,) = table_readings(table, 2, "Storage temperature", qualifiers, head, "°C")
    assert (storage.low, storage.high, storage.value) == (-55.0, 150.0, None)
    _, qualifiers, head = search_phrases("Load supply voltage")
    (load,) = table_readings(table, 2, "Load Supply Voltage", qualifiers, head, "mV")
    assert load.high == 35000.0 and load.low is None  # a lone rating is an upper limit, converted to the unit asked


PAGE_LINES = ["mA", "I active, but not measuring", "I active", "Responding to com-", "mands, Preparing and",
              "calculating results of", "readings.", "VDD = 1.8 V", "4.25", "—", "mA", "I active", "Responding to com-",
              "mands, Preparing and", "calculating results of", "readings.", "VDD = 3.3 V", "4.5", "—", "mA"]


def test_quote_window_is_the_printed_run_that_holds_the_row():
    # The cells as the table tool shows them (a wrapped cell merged and read whole) are found in the printed lines,
    # the run opens on the row's name rather than on the unit of the row above, and "4.5" is not read in "4.25".
    quote = quote_window(PAGE_LINES, ["I active", "Responding to commands, Preparing and calculating results of "
                                                   "readings. VDD = 3.3 V", "4.5", "—", "mA"])
    assert quote == ("I active Responding to commands, Preparing and calculating results of readings. "
                     "VDD = 3.3 V 4.5 — mA")
    assert quote_window(PAGE_LINES, ["I active", "Responding to com-", "4.5", "mA"]) == quote
    assert quote_window(PAGE_LINES, ["I active", "4.7"]) is None


def test_quote_window_in_running_text_is_whole_sentences():
    lines = ["AB09/AB9X).", "• Ambient light sensor", "• <100 mlx resolution possible, allowing",
             "operation under dark glass.", "• Up to 128 klx"]
    assert quote_window(lines, ["<100 mlx"], sentence=True) == \
        "<100 mlx resolution possible, allowing operation under dark glass."


INL_MD = """| Parameters | Sym | Min | Typ | Max | Units |  | Conditions |
|---|---|---|---|---|---|---|---|
| Potentiometer | INL | -1 | ±0.5 | +1 | LSb | 8-bit | 3.0V ≤ VDD ≤ 5.5V |
| Integral Non-linearity | INL | -0.5 | ±0.25 | +0.5 | LSb | 7-bit (Note | MCP4XX1 devices only 2) |
| Potentiometer | DNL | -0.5 | ±0.25 | +0.5 | LSb | 8-bit | 3.0V ≤ VDD ≤ 5.5V |
"""


def test_rows_printing_one_symbol_are_one_parameter_and_its_min_max_are_the_range():
    # MCP4151 p6: the name wraps over the INL sub-rows; the 8-bit row is read, and Typ. "±0.5" between Min. and
    # Max. leaves the range to them. A short printed symbol is a search phrase of its own.
    phrases, qualifiers, head = search_phrases("Potentiometer integral non-linearity INL, 8-bit, pot_1")
    assert "INL" in phrases
    readings = table_readings(markdown_tables(INL_MD)[0], 6, "Potentiometer integral non-linearity INL",
                              qualifiers, head, "LSb")
    best = max(readings, key=lambda r: r.score)
    assert (best.low, best.high, best.value) == (-1.0, 1.0, None) and "8-bit" in best.row_cells
    dnl = [r for r in readings if "DNL" in r.row_cells]  # the next parameter, absorbed by its repeated first cell
    assert all(r.score < best.score for r in dnl)


# --------------------------------------------------------------------------------------------- task as data
def test_the_reader_works_from_the_claim_projection_not_the_prompt_text(monkeypatch, tmp_path):
    """Prompts reworded to name neither the parameter nor the unit: the reader still submits the right figure,
    because its task is the claim projection the loop passes as data (ModelRequest.task), not the prompt's text."""
    import agent.loop

    monkeypatch.setattr(agent.loop, "system_prompt", lambda: "Read the open document with the tools you have.")
    monkeypatch.setattr(agent.loop, "first_user_message", lambda view: "Find the specification and submit it.")
    claims = load_claims()
    for cid in ("dps310-pressure-precision-high", "a4988-blank-time", "si115x-supply-voltage-vdd"):
        claim = claims[cid]
        result = run_cell(claim, model=ScriptedModel(policy_named("reader"), "scripted:reader"),
                          datasheet=shared_path("datasheets", claim.identity.filename), record_dir=tmp_path,
                          clock=SteppingClock())
        start = validate_record(result.record)[0]
        assert start.first_user_message == "Find the specification and submit it.", cid
        assert claim.parameter not in start.system_prompt + start.first_user_message, cid
        assert result.outcome == "submitted" and reads_the_claim(claim, result.extraction), (cid, result.extraction)


def test_a_scripted_model_without_a_task_refuses_naming_what_it_expected():
    request = ModelRequest(system="- parameter: Operating range\n- unit: hPa", messages=[], tools=[])
    with pytest.raises(NoTask, match=r"expected the claim projection \(ModelRequest.task or the constructor"):
        ScriptedModel(policy_named("closed-book"), "scripted:closed-book").complete(request)
    view = ClaimView("c", "DPS310", "Operating range", "hPa", ())
    turn = ScriptedModel(policy_named("closed-book"), "scripted:closed-book", task=view).complete(request)
    (submit,) = turn.message.tool_calls
    assert submit.arguments["unit"] == "hPa" and "Operating range" in submit.arguments["quote"]
    other = ClaimView("d", "A4988", "Blank time", "µs", ())
    turn = ScriptedModel(policy_named("closed-book"), "m", task=view).complete(replace(request, task=other))
    assert turn.message.tool_calls[0].arguments["unit"] == "µs"  # the loop's task for this cell wins
