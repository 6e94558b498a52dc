"""A tool's error type travels as a field from whoever refused the call to the record, never parsed from text.

Three producers fill `ToolResult.error_type`: a datasheet tool (its exception class), the chamber client (the
chamber tools API's error code, or HTTP<status> when the body names none) and the loop itself (denied calls,
bad arguments). Each case here is read back from the validated record. The chamber cases run the real API on an
in-process simulated wind tunnel, reached only over HTTP as the agent reaches it.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import chamber
from agent.chamber_client import ChamberClient, ChamberError, tool_call_answer
from agent.loop import datasheet_local_tools, run_cell
from agent.models.scripted import ScriptedModel, call, closed_book
from agent.record import validate_record
from agent.tool import NotRunHere, Tool, ToolResult
from conftest import shared_path
from protocols.api import running_api
from support import SteppingClock

CLAIM = "dps310-relative-accuracy"


class Calls:
    """Calls the given tools in order, one per turn (phase one), then behaves like closed-book."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = calls

    def __call__(self, conv):
        if conv.assistant_turns < len(self.calls):
            return call(conv, *self.calls[conv.assistant_turns])
        return closed_book(conv)


def _tool_calls(record) -> dict[str, Any]:
    return {e.tool: e for e in validate_record(record) if e.kind == "tool_call"}


def test_a_datasheet_tool_error_reaches_the_record_as_its_exception_class(claims, tmp_path):
    claim = claims[CLAIM]
    pdf = shared_path("datasheets", claim.identity.filename)
    policy = Calls(("inspect_page", {"page": 999}), ("extract_table_markdown", {"page": "two"}),
                   ("search_text", {"query": "relative accuracy"}))
    result = run_cell(claim, model=ScriptedModel(policy, "scripted:calls"), datasheet=pdf, record_dir=tmp_path,
                      clock=SteppingClock())
    calls = _tool_calls(result.record)
    page, arg, search = calls["inspect_page"], calls["extract_table_markdown"], calls["search_text"]
    assert (page.status, page.error_type) == ("error", "PageOutOfRange")
    assert page.output_text.startswith("PageOutOfRange: page 999 is outside the document's pages 1..")
    assert (arg.status, arg.error_type) == ("error", "InvalidArgument")
    assert (search.status, search.error_type) == ("ok", None)


def test_the_record_takes_error_type_from_the_field_not_from_the_text(claims, tmp_path):
    """Texts whose head looks like a type name: the old text split would have recorded 'see' and 'Note'."""
    schema = {"type": "object", "properties": {}}
    tools = [Tool("lookup", "Look a figure up.", schema, lambda a: ToolResult("see: page 3 has it", True, "NoMatch")),
             Tool("note", "Read a note.", schema, lambda a: ToolResult("Note: values are typical"))]
    result = run_cell(claims[CLAIM], model=ScriptedModel(Calls(("lookup", {}), ("note", {})), "scripted:calls"),
                      datasheet=tmp_path / "absent.pdf", record_dir=tmp_path, clock=SteppingClock(), tools=tools,
                      surface_version="test/1")
    calls = _tool_calls(result.record)
    assert (calls["lookup"].status, calls["lookup"].error_type) == ("error", "NoMatch")
    assert (calls["note"].status, calls["note"].error_type) == ("ok", None)


def test_a_handler_that_raises_is_recorded_under_the_exception_class(claims, tmp_path):
    def broken(arguments: dict[str, Any]) -> ToolResult:
        raise KeyError("page")

    tools = [Tool("lookup", "Look a figure up.", {"type": "object"}, broken)]
    result = run_cell(claims[CLAIM], model=ScriptedModel(Calls(("lookup", {})), "scripted:calls"),
                      datasheet=tmp_path / "absent.pdf", record_dir=tmp_path, clock=SteppingClock(), tools=tools)
    call = _tool_calls(result.record)["lookup"]
    assert (call.status, call.error_type, call.output_text) == ("error", "KeyError", "KeyError: 'page'")


def test_a_phase_one_tool_without_a_handler_is_refused_before_any_record(claims, tmp_path):
    tools = [Tool("measure", "Measure.", {"type": "object"})]
    with pytest.raises(ValueError, match=r"expected a handler on every tool, \['measure'\] have none"):
        run_cell(claims[CLAIM], model=ScriptedModel(closed_book, "scripted:closed-book"),
                 datasheet=tmp_path / "absent.pdf", record_dir=tmp_path / "cells", clock=SteppingClock(), tools=tools)
    assert not (tmp_path / "cells").exists()
    with pytest.raises(NotRunHere, match="'measure' has no handler in process"):
        tools[0]({})


def test_a_result_cannot_name_an_error_type_without_being_an_error():
    with pytest.raises(ValueError, match="error_type 'NoMatch' must have is_error=True"):
        ToolResult("nothing", error_type="NoMatch")


# --------------------------------------------------------------------------------------------- the chamber side
def refused(conv):
    """Phase one: closed-book. Phase two: a SET out of range and an unknown variable, then the outcome."""
    if "stage_conditions" not in conv.offered:
        return closed_book(conv)
    if len(conv.results) == 1:
        return call(conv, "stage_conditions", {"settings": {"hatch": 400}})
    if len(conv.results) == 2:
        return call(conv, "measure", {"n": 1, "variables": ["nonsense"]})
    return call(conv, "submit_chamber_outcome", {"prediction": "inconclusive", "summary": "refused"})


def test_a_chamber_api_refusal_reaches_the_record_as_the_api_error_code(claims, tmp_path):
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=11)
    try:
        with running_api({"wt": wt}, record_dir=tmp_path / "api", claims=claims) as url, \
                httpx.Client(base_url=url, timeout=30) as http:
            claim = claims[CLAIM]
            result = run_cell(claim, model=ScriptedModel(refused, "scripted:refused"),
                              datasheet=shared_path("datasheets", claim.identity.filename),
                              record_dir=tmp_path / "cells", clock=SteppingClock(), chamber=ChamberClient(http))
    finally:
        wt.close()
    calls = _tool_calls(result.record)
    staged, measured = calls["stage_conditions"], calls["measure"]
    assert (staged.status, staged.error_type) == ("error", "setting_refused")
    assert json.loads(staged.output_text)["error"]["code"] == "setting_refused"  # the model reads the API's body
    assert (measured.status, measured.error_type) == ("error", "unknown_variable")
    assert (calls["submit_chamber_outcome"].status, calls["submit_chamber_outcome"].error_type) == ("ok", None)
    assert result.outcome == "submitted" and result.phase_two == "completed"


@pytest.mark.parametrize(("status", "body", "error_type"), [
    (409, {"error": {"code": "extraction_not_frozen", "message": "freeze first"}}, "extraction_not_frozen"),
    (503, {"detail": "upstream down"}, "HTTP503"),  # no error object: named by the status
    (200, {"error": {"message": "no code"}}, "HTTP200"),  # a body that is only an error object is a refusal
    (200, {"error": None}, "HTTP200"),
])
def test_the_chamber_client_names_each_refusal(status, body, error_type):
    answer = tool_call_answer(status, body)
    assert not answer.ok and answer.result.is_error and answer.error_type == error_type
    assert answer.result.text == json.dumps(body, ensure_ascii=False)


def test_a_chamber_answer_with_an_error_key_beside_data_is_a_result():
    answer = tool_call_answer(200, {"error": None, "value": 945.2})
    assert answer.ok and answer.result == ToolResult('{"error": null, "value": 945.2}')


def _listing(entries: Any) -> ChamberClient:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=entries))
    return ChamberClient(httpx.Client(transport=transport, base_url="http://chamber.test"))


def test_listed_chamber_tools_are_tools_without_a_handler():
    tools = _listing([{"name": "measure", "description": "Read.", "input_schema": {"type": "object"}},
                      {"name": "describe_chamber"}]).list_tools()
    assert tools == [Tool("measure", "Read.", {"type": "object"}), Tool("describe_chamber", "", {})]
    assert not any(t.runs_here for t in tools)


@pytest.mark.parametrize(("entries", "expected"), [
    ([{"description": "no name"}], r"tool 0 is not \{name, description, input_schema\}: name: Field required"),
    ([{"name": "ok"}, {"name": "x", "input_schema": [1]}], r"tool 1 .*input_schema: Input should be a valid dict"),
    ({"name": "measure"}, r"expected a list of tools, got dict"),
])
def test_a_malformed_tool_listing_is_refused_naming_the_entry_and_field(entries, expected):
    with pytest.raises(ChamberError, match=expected):
        _listing(entries).list_tools()


def test_the_datasheet_tools_are_offered_as_they_were(claims):
    """The tool surface the model is offered: five tools in process, definitions as {name, description, schema}."""
    tools, version = datasheet_local_tools(shared_path("datasheets", claims[CLAIM].identity.filename))
    assert version == "chamberlab-datasheet-tools/1" and all(t.runs_here for t in tools)
    assert [list(t.definition()) for t in tools] == [["name", "description", "input_schema"]] * 5
