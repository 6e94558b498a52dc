"""The text tool protocol (issue 33): tools described in the prompt in the model family's format, calls parsed from
the reply by the client, results sent back as user messages; every turn's calls name the protocol that carried
them; text runs are labelled, recorded and scored apart from native ones.

The parser's tolerance is checked on the shapes a 1.5B model writes on real servers (docs agent-notes.md): fenced
JSON, single quotes, a template's doubled braces, a prompt HTML-escaped by llama-cpp-python's
chatml-function-calling, a colon left out. End to end, cells run through tests/openai_like_servers.py's
stand-ins for the real setups where native calls cannot work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.loop import run_cell
from agent.models import ModelSpecError, client_for, split_model_options, with_model_options
from agent.models.base import (ImageBlock, Message, ModelRequest, ModelTurn, TextBlock, ToolCallBlock,
                               ToolResultBlock)
from agent.models.text_calls import find_text_calls
from agent.models.text_protocol import (STOPS, TextToolClient, from_text_reply, request_from_text_protocol,
                                        to_text_request, tool_protocol_of)
from agent.prompt import project_claim
from agent.record import TokenUsage, validate_record
from agent.scoring.attribution import attribute
from agent.scoring.cells import facts_from_events
from agent.tool import Tool, ToolResult
from conftest import shared_path
from openai_like_servers import (
    HELD_OUT_LLAMA_CPP_LIKE,
    LLAMA_CPP_PYTHON_FUNCTION_CALLING,
    LLAMA_SERVER_JINJA_SMALL_MODEL,
    ServerFaults,
    openai_like_server,
)
from support import SteppingClock, run_cli

CLAIM = "dps310-pressure-precision-high"
SEARCH = Tool("search_text", "Find a phrase.", {"type": "object", "properties": {"query": {"type": "string"}},
                                                "required": ["query"]})


# --------------------------------------------------------------------------------------------- the parser
@pytest.mark.parametrize("text, name, arguments", [
    ('<tool_call>\n{"name": "search_text", "arguments": {"query": "VDD"}}\n</tool_call>', "search_text",
     {"query": "VDD"}),
    ('I will search.\n```json\n{"name": "search_text", "arguments": {"query": \'VDD\'}}\n```', "search_text",
     {"query": "VDD"}),  # fenced, a single-quoted value (issue 33: not recognised before)
    ("<tool_call>{'name': 'search_text', 'arguments': {'query': 'it\\'s', 'exact': True}}</tool_call>",
     "search_text", {"query": "it's", "exact": True}),
    ('<tool_call>\n{{"name": "search_text", "arguments": {"query": "VDD"}}}\n</tool_call>', "search_text",
     {"query": "VDD"}),  # the template's escaped braces, copied
    ('&lt;tool_call&gt;\n{&#34;name&#34;: &#34;search_text&#34;, &#34;arguments&#34;: {&#34;query&#34;: '
     '&#34;VDD&#34;}}\n&lt;/tool_call&gt;', "search_text", {"query": "VDD"}),  # an autoescaped template
    ('<tool_call>\n{"name": "search_text", "arguments" {"query": "pressure range", "page": 6}}', "search_text",
     {"query": "pressure range", "page": 6}),  # seen on llama-cpp-python: a colon left out, the tag not closed
    ('<tools>{"type": "function", "function": {"name": "search_text", "arguments": "{\\"query\\": \\"VDD\\"}"}}'
     '</tools>', "search_text", {"query": "VDD"}),
    ('{"name": "search_text", "arguments": {"query": "VDD", "page": null}}', "search_text",
     {"query": "VDD", "page": None}),
])
def test_calls_are_read_in_the_shapes_small_models_write(text, name, arguments):
    (call,) = find_text_calls(text, ["search_text"])
    assert (call.name, call.arguments) == (name, arguments)


def test_what_is_not_a_call_stays_text():
    names = ["search_text"]
    assert not find_text_calls('```json\n{"value": 1.8, "unit": "V"}\n```', names)
    assert not find_text_calls("The supply voltage is 1.8 V (page 4).", names)
    # Python would glue "pressure range" "page" into one string: a missing comma is not a value
    assert not find_text_calls('<tool_call>{"name": "search_text", "arguments": {"query": "a" "b"}}</tool_call>')


# --------------------------------------------------------------------------------------------- the translation
def _request(messages: list[Message], tools: list[Tool] | None = None) -> ModelRequest:
    return ModelRequest("You extract specifications.", messages, tools if tools is not None else [SEARCH])


def test_the_request_carries_tools_in_the_prompt_and_results_as_user_messages():
    call = ToolCallBlock("call_1", "search_text", {"query": "VDD"})
    png = ("image/png", "iVBORw0KGgo=")
    request = _request([Message("user", [TextBlock("Find VDD.")]), Message("assistant", [call]),
                        Message("user", [ToolResultBlock("call_1", "VDD 1.7 V to 3.6 V", images=(png,))])])
    sent = to_text_request(request)
    assert sent.tools == [] and set(STOPS) <= set(sent.stop)
    assert "<tools>\n" in sent.system and '"name": "search_text"' in sent.system and "<tool_call>" in sent.system
    assert sent.system.startswith("You extract specifications.\n\n# Tools")
    assistant, results = sent.messages[1], sent.messages[2]
    assert assistant.text == '<tool_call>\n{"name": "search_text", "arguments": {"query": "VDD"}}\n</tool_call>'
    assert not assistant.tool_calls and results.role == "user"
    assert results.blocks[0] == TextBlock("<tool_response>\nVDD 1.7 V to 3.6 V\n</tool_response>")
    assert results.blocks[1] == ImageBlock("image/png", "iVBORw0KGgo=")
    text_only = to_text_request(request, images=False).messages[2].blocks
    assert len(text_only) == 1 and "1 image(s) not shown: this model reads text only" in text_only[0].text
    # the model's side reads it back: the same tools, call and result
    back = request_from_text_protocol(sent)
    assert back is not None and [t.name for t in back.tools] == ["search_text"] and back.system == request.system
    assert back.messages[1].tool_calls[0].arguments == {"query": "VDD"}
    result = back.messages[2].blocks[0]
    assert isinstance(result, ToolResultBlock) and result.call_id == back.messages[1].tool_calls[0].id
    assert result.content == "VDD 1.7 V to 3.6 V" and result.images == (png,)


def _reply(text: str, stop: str = "end_turn", raw: str = "stop") -> ModelTurn:
    return ModelTurn(Message("assistant", [TextBlock(text)]), stop, raw, TokenUsage())  # type: ignore[arg-type]


def test_a_reply_becomes_calls_named_by_turn_with_the_protocol_on_the_turn():
    request = _request([Message("user", [TextBlock("Find VDD.")])])
    cut = from_text_reply(_reply('<tool_call>\n{"name": "search_text", "arguments": {"query": "VDD"}}\n'), request)
    (call,) = cut.message.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_text_001_1", "search_text", {"query": "VDD"})
    assert cut.stop_reason == "tool_use" and cut.raw_stop_reason == "stop" and cut.tool_protocol == "text"
    assert not cut.message.text.endswith("</tool_call>")  # kept as written (cut at the stop sequence) ...
    history = to_text_request(_request([Message("user", [TextBlock("Find VDD.")]), cut.message])).messages[1]
    assert history.text == '<tool_call>\n{"name": "search_text", "arguments": {"query": "VDD"}}\n</tool_call>'
    sloppy = from_text_reply(_reply('Let me look.\n<tool_call>\n{"name": "search_text", "arguments" {"query": '
                                    '"VDD"}}\n\n\n\n'), request)  # ... and goes back canonical, not copied
    assert to_text_request(_request([sloppy.message])).messages[0].text == f"Let me look.\n{history.text}"
    # a model that goes on past its call (here to the output limit) and imagines the result: only the call counts
    rambling = from_text_reply(_reply('<tool_call>{"name": "search_text", "arguments": {"query": "a"}}</tool_call>'
                                      '\n<tool_response>{"name": "search_text", "arguments": {"query": "b"}}',
                                      "max_tokens", "length"), request)
    assert [c.arguments for c in rambling.message.tool_calls] == [{"query": "a"}]
    assert rambling.stop_reason == "tool_use" and "<tool_response>" in rambling.message.text  # the record keeps it
    # seen on llama-cpp-python's own template: the call written inside the tag results come back in
    wrapped = from_text_reply(_reply('<tool_response>\n{\n  "name": "search_text",\n  "arguments": {"query": "VDD"}'
                                     '\n}\n</tool_response>'), request)
    assert [(c.name, c.arguments) for c in wrapped.message.tool_calls] == [("search_text", {"query": "VDD"})]
    prose = from_text_reply(_reply("VDD is 1.7 V."), request)
    assert not prose.message.tool_calls and prose.stop_reason == "end_turn"
    broken = from_text_reply(_reply('<tool_call>{"name": "search_text", "arguments": {"query": "a" "b"}}'), request)
    assert broken.message.tool_calls[0].name == "search_text" and "_raw" in broken.message.tool_calls[0].arguments


def test_the_spec_option_and_flags_choose_the_protocol():
    base = "openai-compat:http://127.0.0.1:9/v1#qwen"
    client = client_for(f"{base}?tools=text&images=false", {})
    assert isinstance(client, TextToolClient) and tool_protocol_of(client) == "text"
    assert client.image_delivery == "none" and client.options == {"images": False, "tools": "text"}
    assert tool_protocol_of(client_for(base, {})) == "native" and tool_protocol_of(client_for(f"{base}?tools=native",
                                                                                              {})) == "native"
    assert split_model_options(f"{base}?tools=text")[1] == {"tools": "text"}
    assert with_model_options(base, {"tools": "text", "temperature": 0}) == f"{base}?temperature=0&tools=text"
    with pytest.raises(ModelSpecError, match="tools='json': expected text or native"):
        split_model_options(f"{base}?tools=json")
    with pytest.raises(ModelSpecError, match="scripted models take no model options"):
        client_for("scripted:reader?tools=text", {})


# --------------------------------------------------------------------------------------------- cells, end to end
def _cell(claims, faults: ServerFaults, tmp_path: Path, options: str = "tools=text", policy: str = "reader"):
    claim = claims[CLAIM]
    with openai_like_server(faults, policy=policy, task=project_claim(claim)) as server, httpx.Client() as http:
        spec = f"openai-compat:{server}#qwen2.5-coder-1.5b?{options}"
        result = run_cell(claim, model=client_for(spec, {}, http=http), model_spec=spec,
                          datasheet=shared_path("datasheets", claim.identity.filename), record_dir=tmp_path,
                          clock=SteppingClock())
        return result, validate_record(result.record), list(server.requests)


@pytest.mark.parametrize("faults", [LLAMA_CPP_PYTHON_FUNCTION_CALLING, LLAMA_SERVER_JINJA_SMALL_MODEL,
                                    HELD_OUT_LLAMA_CPP_LIKE],
                         ids=["llama-cpp-python-function-calling", "llama-server-jinja", "held-out"])
def test_a_cell_submits_with_the_text_protocol_where_native_calls_cannot_work(claims, tmp_path, faults):
    result, events, requests = _cell(claims, faults, tmp_path, "tools=text&images=false")
    assert result.outcome == "submitted" and result.extraction is not None, result.detail
    turns = [e for e in events if e.kind == "model_turn"]
    assert len(turns) > 2 and all(c["protocol"] == "text" for t in turns for c in t.tool_calls)
    assert all(t.tool_protocol == "text" and t.tool_choice is None for t in turns)  # every turn, calls or none
    assert all(t.tool_calls for t in turns)  # every turn carried a call, and said how
    assert events[0].config["tool_protocol"] == "text"
    assert not any(b.get("tools") or b.get("tool_choice") for b in requests)  # nothing for a parser to miss
    assert not any(m["role"] == "tool" for b in requests for m in b["messages"])  # results as user messages
    results = [m["content"] for m in requests[-1]["messages"] if m["role"] == "user"][1:]
    assert results and all(r.startswith("<tool_response>\n") for r in results)
    calls = [e for e in events if e.kind == "tool_call"]
    assert calls[-1].tool == "submit_extraction" and calls[-1].status == "ok"


def test_native_calls_on_the_held_out_server_still_end_as_the_serving_stacks_fault(claims, tmp_path):
    result, events, _ = _cell(claims, HELD_OUT_LLAMA_CPP_LIKE, tmp_path, "images=false")
    assert result.outcome == "tool_call_as_text" and "--tool-protocol text" in result.detail
    turns = [e for e in events if e.kind == "model_turn"]
    assert turns[0].tool_calls[0]["protocol"] == "native" and turns[-1].text_tool_calls[0]["protocol"] == "native"
    assert all(t.tool_protocol == "native" and t.tool_choice == "auto" for t in turns)
    assert events[0].config["tool_protocol"] == "native"
    labels = attribute(facts_from_events(events, result.record), fidelity_passed=False)
    assert labels.to_json()["charged_to"] == ["serving_stack"]


class _Writes:
    """An in-process model that writes the given replies in turn (what a small model says, as text)."""

    provider, transport, model, image_delivery, options, base_url, accepts_pdf = (
        "test", "in-process", "writer", "tool_result", {}, None, False)
    tool_protocol = "native"

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelTurn:
        self.requests.append(request)
        return _reply(self.replies.pop(0))


def test_a_broken_call_is_answered_with_an_error_the_model_can_act_on(claims, tmp_path):
    seen: list[dict[str, Any]] = []
    probe = Tool("build_datasheet", "Open the document.", {"type": "object", "properties": {}},
                 lambda a: ToolResult('{"pages": 41}'))
    search = Tool("search_text", "Find a phrase.", SEARCH.input_schema, lambda a: seen.append(a) or ToolResult("hit"))
    writer = _Writes('<tool_call>{"name": "search_text", "arguments": {"query": "VDD" "page"}}',
                     '<tool_call>{"name": "search_text", "arguments": {"query": "VDD"}}',
                     "I could not find it.")
    claim = claims[CLAIM]
    result = run_cell(claim, model=TextToolClient(writer), datasheet=shared_path("datasheets", claim.identity.filename),
                      record_dir=tmp_path, clock=SteppingClock(), tools=[probe, search])
    events = validate_record(result.record)
    calls = [e for e in events if e.kind == "tool_call"]
    assert [c.status for c in calls] == ["error", "ok"] and calls[0].error_type == "InvalidArgument"
    assert seen == [{"query": "VDD"}]  # the broken call never ran; the rewritten one did
    told = writer.requests[1].messages[-1].blocks[0].text
    assert told.startswith("<tool_response>\nInvalidArgument: arguments are not a JSON object")
    assert result.outcome == "end_turn_without_submit"  # prose under the text protocol is the model's answer


# --------------------------------------------------------------------------------------------- scores and the CLI
def test_a_matrix_keeps_text_and_native_runs_apart_in_ids_records_and_scores(claims, tmp_path, capsys):
    from agent.scoring.score import score_paths

    out = tmp_path / "m"
    claim = claims["acs70331-bandwidth"]
    shared_path("datasheets", claim.identity.filename)
    with openai_like_server(ServerFaults(), policy="reader", task=project_claim(claim)) as server:
        native = f"openai-compat:{server}#qwen"
        r = run_cli(capsys, "matrix", "--models", f"{native},{native}?tools=text", "--claims", claim.id, "--out",
                    str(out), "--no-chamber", "--no-preflight", "--json")
        flagged = run_cli(capsys, "matrix", "--models", native, "--claims", claim.id, "--out", str(tmp_path / "t"),
                          "--no-chamber", "--no-preflight", "--tool-protocol", "text", "--json")
    assert r.code == 0 and flagged.code == 0, r.out + r.err + flagged.err
    assert r.json()["run"]["outcome:submitted"] == 2
    ids = sorted(p.stem for p in (out / "cells").glob("*.jsonl"))
    assert ids == [f"{claim.id}--qwen--normal--r1", f"{claim.id}--qwen_text--normal--r1"]
    scores = score_paths([out], claims=claims, datasheets_dir=None)
    by_id = {row["run_id"]: row for row in scores["cells"]}
    assert by_id[ids[0]]["tool_protocol"] == "native" and by_id[ids[1]]["tool_protocol"] == "text"
    assert by_id[ids[1]]["model_spec"] == f"{native}?tools=text" != by_id[ids[0]]["model_spec"]
    (flag_cell,) = (tmp_path / "t" / "cells").glob("*.jsonl")
    start = json.loads(flag_cell.read_text().splitlines()[0])
    assert flag_cell.stem.endswith("--qwen_text--normal--r1") and start["config"]["tool_protocol"] == "text"
    assert start["config"]["model_spec"] == f"{native}?tools=text"


def test_a_hand_built_text_client_is_still_scored_apart(claims, tmp_path):
    claim = claims[CLAIM]
    with openai_like_server(ServerFaults(), policy="reader", task=project_claim(claim)) as server, \
            httpx.Client() as http:
        model = client_for(f"openai-compat:{server}#qwen?tools=text", {}, http=http)
        result = run_cell(claim, model=model, datasheet=shared_path("datasheets", claim.identity.filename),
                          record_dir=tmp_path, clock=SteppingClock())  # no model_spec: the record alone says it
    facts = facts_from_events(validate_record(result.record), result.record)
    assert facts.tool_protocol == "text" and facts.model_spec.endswith("#qwen?tools=\"text\"")  # options as sent


def test_a_spec_that_does_not_say_text_is_marked_when_the_cell_used_it(claims, tmp_path):
    claim = claims[CLAIM]
    with openai_like_server(ServerFaults(), policy="reader", task=project_claim(claim)) as server, \
            httpx.Client() as http:
        spec = f"openai-compat:{server}#qwen?temperature=0"
        model = TextToolClient(client_for(spec, {}, http=http))  # a caller that wrapped the client itself
        result = run_cell(claim, model=model, model_spec=spec, record_dir=tmp_path, clock=SteppingClock(),
                          datasheet=shared_path("datasheets", claim.identity.filename))
    facts = facts_from_events(validate_record(result.record), result.record)
    assert facts.model_spec == f"{spec}&tools=text" and facts.tool_protocol == "text"


def test_an_echoed_signature_is_refused_with_what_to_write_and_bare_arguments_fit_one_tool():
    from agent.prompt import submit_extraction_tool

    pages = Tool("get_section_text", "Pages as text.", {
        "type": "object", "properties": {"start_page": {"type": "integer"}, "end_page": {"type": "integer"}},
        "required": ["start_page", "end_page"], "additionalProperties": False})
    request = _request([Message("user", [TextBlock("Extract.")])], [pages, submit_extraction_tool()])
    # seen on llama-server: the model writes a <tools> signature back as its "call"
    echo = from_text_reply(_reply('<tools>\n{"type": "function", "function": {"name": "get_section_text", '
                                  '"description": "Pages as text.", "parameters": ' + json.dumps(pages.input_schema)
                                  + '}}\n</tools>'), request)
    (call,) = echo.message.tool_calls
    assert call.name == "get_section_text" and set(call.arguments) == {"_raw"}
    assert "the tool's definition, not a call" in call.arguments["_raw"]
    # ... and its answer as submit_extraction's payload alone: the one tool whose arguments it is
    bare = from_text_reply(_reply('```json\n{"value": "1 MHz", "unit": "MHz", "page": 1, "quote": "1 MHz bandwidth"}'
                                  '\n```'), request)
    assert [(c.name, c.arguments["unit"]) for c in bare.message.tool_calls] == [("submit_extraction", "MHz")]
    assert not from_text_reply(_reply('```json\n{"unit": "MHz", "colour": "red"}\n```'), request).message.tool_calls
