"""The loop against chat-completions servers that behave like the real ones (tests/openai_like_servers.py).

Each fault a local open-model server shows is run end to end through run_cell over real HTTP: the strict request
schema of llama-cpp-python (content null refused), tool calls written as text by a template without tools, a
deterministic rejection, a tool-call token repeated to the output limit, a reply that is neither a call nor an
answer. Every record is validated against the schema and its invariants.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.loop import Budget, run_cell
from agent.models import client_for
from agent.models.base import ModelError, ModelRequest, error_line, is_validation_error, server_message
from agent.models.openai_http import OpenAIChatClient
from agent.models.scripted import ScriptedModel, policy_named
from agent.models.text_calls import (
    LIKELY_CAUSE,
    NEITHER_CALL_NOR_ANSWER,
    TOOL_CALL_AS_TEXT,
    TOOL_TOKEN_REPEATED,
    find_text_calls,
    repeated_token,
)
from agent.prompt import project_claim
from agent.record import validate_record
from agent.scoring.attribution import CHARGED_TO, attribute
from agent.scoring.cells import facts_from_events
from conformance_server import Reply, replay
from conftest import shared_path
from openai_like_servers import (
    LLAMA_CPP_LIKE,
    LLAMA_CPP_NO_TOOL_TEMPLATE,
    REPEATED_TOKEN,
    ServerFaults,
    openai_like_server,
)
from support import SteppingClock

CLAIM = "dps310-pressure-precision-high"


def _cell(claim, url: str, http: httpx.Client, tmp_path: Path, *, model: Any = None, **kwargs: Any):
    model = model or client_for(f"openai-compat:{url}#qwen2.5-coder-1.5b", {}, http=http)
    result = run_cell(claim, model=model, datasheet=shared_path("datasheets", claim.identity.filename),
                      record_dir=tmp_path, clock=SteppingClock(), **kwargs)
    return result, validate_record(result.record)


def _served_cell(faults: ServerFaults, policy: str, claim, tmp_path: Path, **kwargs: Any):
    with openai_like_server(faults, policy=policy, task=project_claim(claim)) as server, httpx.Client() as http:
        result, events = _cell(claim, server, http, tmp_path, **kwargs)
    return result, events, server.requests


def _kinds(events, kind: str) -> list:
    return [e for e in events if e.kind == kind]


# --------------------------------------------------------------------------------------------- strict schemas
def test_a_cell_on_a_llama_cpp_like_server_completes_past_turn_two(claims, tmp_path):
    result, events, requests = _served_cell(LLAMA_CPP_LIKE, "reader", claims[CLAIM], tmp_path)
    assert result.outcome == "submitted" and result.turns > 2, result.detail
    assistant = [m for body in requests for m in body["messages"] if m["role"] == "assistant"]
    assert assistant and all(isinstance(m["content"], str) for m in assistant)
    assert any(m["content"] == "" and m.get("tool_calls") for m in assistant)  # a call without text: "" not null
    assert all(t.retries == 0 for t in _kinds(events, "model_turn"))


class _NullContentClient(OpenAIChatClient):
    """What the chat client sent before: content null beside tool calls."""

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body = super().build_body(request)
        for m in body["messages"]:
            if m["role"] == "assistant" and not m["content"]:
                m["content"] = None
        return body


def test_a_5xx_validation_error_is_not_retried_and_its_cause_is_one_line(claims, tmp_path):
    claim = claims[CLAIM]
    with openai_like_server(LLAMA_CPP_LIKE, policy="reader", task=project_claim(claim)) as server, \
            httpx.Client() as http:
        result, events = _cell(claim, server, http, tmp_path, budget=Budget(retries_per_turn=2),
                               model=_NullContentClient("qwen", base_url=server, http=http))
    assert result.outcome == "engine_error" and len(server.requests) == 2  # turn 2 attempted once
    failed = _kinds(events, "model_turn")[-1]
    assert failed.http_status == 500 and len(failed.attempts) == 1 and failed.retries == 0
    cause = _kinds(events, "run_end")[0].detail
    assert "\n" not in cause and len(cause) <= 330
    assert cause.startswith("10 validation errors: ") and "content: Input should be a valid string" in cause
    body = failed.attempts[0].response_body  # the whole body is in the record
    assert body is not None and len(body) > len(cause) and json.loads(body)["error"]["type"] == "internal_server_error"


def test_a_4xx_is_attempted_once_with_the_servers_message_first(claims, tmp_path):
    # skip-search inspects a page: the page image goes to a server that takes no images (HTTP 400)
    result, events, requests = _served_cell(ServerFaults(reject_images=True), "skip-search", claims[CLAIM],
                                            tmp_path, budget=Budget(retries_per_turn=2))
    assert result.outcome == "engine_error"
    failed = _kinds(events, "model_turn")[-1]
    assert failed.http_status == 400 and len(failed.attempts) == 1 and failed.retries == 0
    assert len(requests) == failed.turn  # one request per turn: the rejection was not retried
    cause = _kinds(events, "run_end")[0].detail
    assert cause.startswith("image input is not supported by this model") and "\n" not in cause
    assert "HTTP 400" in cause and len(cause) <= 330
    assert "BadRequestError" in failed.attempts[0].response_body


# --------------------------------------------------------------------------------------------- calls as text
@pytest.mark.parametrize("style, form", [("tools", "tools_tag"), ("tool_call", "tool_call_tag"),
                                         ("fenced", "fenced_json")])
def test_a_tool_call_written_as_text_is_its_own_outcome_never_run(style, form, claims, tmp_path):
    faults = ServerFaults(reject_null_content=True, tools_as_text=True, tools_as_text_style=style)
    result, events, requests = _served_cell(faults, "reader", claims[CLAIM], tmp_path)
    assert result.outcome == TOOL_CALL_AS_TEXT and result.extraction is None
    assert not _kinds(events, "tool_call") and len(requests) == 1  # nothing executed, no second turn
    turn = _kinds(events, "model_turn")[0]
    assert "build_datasheet" in turn.text  # the text is kept
    assert turn.text_tool_calls == [{"name": "build_datasheet", "arguments": {}, "form": form, "protocol": "native"}]
    end = _kinds(events, "run_end")[0]
    assert end.outcome == TOOL_CALL_AS_TEXT and LIKELY_CAUSE in end.detail and "\n" not in end.detail
    assert "--tool-call-parser" in end.detail and "llama.cpp --jinja" in end.detail
    labels = attribute(facts_from_events(events, result.record), fidelity_passed=False)
    assert "serving_stack" in labels.labels and "verification_skipped" not in labels.labels
    assert labels.to_json()["charged_to"] == ["serving_stack"] and CHARGED_TO["serving_stack"] == "serving_stack"


def test_an_invented_submit_written_as_text_is_kept_not_frozen(claims, tmp_path):
    result, events, _ = _served_cell(LLAMA_CPP_NO_TOOL_TEMPLATE, "closed-book", claims[CLAIM], tmp_path)
    assert result.outcome == TOOL_CALL_AS_TEXT and result.extraction is None and result.extraction_sha256 is None
    written = _kinds(events, "model_turn")[0].text_tool_calls[0]
    assert written["name"] == "submit_extraction" and written["arguments"]["value"] == 1.0  # the invented value
    assert not _kinds(events, "phase_change") and not _kinds(events, "tool_call")


def test_the_scripted_markup_policy_in_process_is_a_call_as_text(claims, tmp_path):
    claim = claims[CLAIM]
    result = run_cell(claim, model=ScriptedModel(policy_named("markup"), "scripted:markup"),
                      datasheet=shared_path("datasheets", claim.identity.filename), record_dir=tmp_path,
                      clock=SteppingClock())
    events = validate_record(result.record)
    assert result.outcome == TOOL_CALL_AS_TEXT and not _kinds(events, "tool_call")
    assert _kinds(events, "model_turn")[0].text_tool_calls[0]["form"] == "tool_call_tag"


# --------------------------------------------------------------------------------------------- other replies
def test_a_tool_token_repeated_to_the_output_limit_is_named(claims, tmp_path):
    faults = ServerFaults(repeat_tool_token_over_schema_chars=2000)  # the real extraction schema is larger
    result, events, requests = _served_cell(faults, "reader", claims[CLAIM], tmp_path,
                                            budget=Budget(max_output_tokens=64))
    assert result.outcome == TOOL_TOKEN_REPEATED and len(requests) == 1
    assert REPEATED_TOKEN in result.detail and "\n" not in result.detail
    turn = _kinds(events, "model_turn")[0]
    assert turn.stop_reason == "max_tokens" and turn.text.count(REPEATED_TOKEN) == 64
    labels = attribute(facts_from_events(events, result.record), fidelity_passed=False)
    assert labels.labels[-1] == "serving_stack"


def test_a_reply_that_is_neither_a_call_nor_an_answer_is_named(claims, tmp_path):
    empty = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "", "reasoning_content":
                                      "I should call build_datasheet first."}}],
             "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}}
    with replay([Reply(empty)]) as (url, _), httpx.Client() as http:
        result, events = _cell(claims[CLAIM], f"{url}/v1", http, tmp_path)
    assert result.outcome == NEITHER_CALL_NOR_ANSWER and "only reasoning" in result.detail
    assert _kinds(events, "model_turn")[0].reasoning.startswith("I should call")


def test_prose_without_a_call_is_still_end_turn_without_submit(claims, tmp_path):
    result, _, _ = _served_cell(ServerFaults(), "no-submit", claims[CLAIM], tmp_path)
    assert result.outcome == "end_turn_without_submit"


# --------------------------------------------------------------------------------------------- the pure parts
def test_text_calls_are_found_in_each_form_with_their_arguments():
    names = ["search_text", "submit_extraction"]
    tagged = '<tools>{"type": "function", "function": {"name": "search_text", "arguments": "{\\"query\\": \\"VDD\\"}"}}</tools>'
    assert [(c.name, c.arguments, c.form) for c in find_text_calls(tagged, names)] == [
        ("search_text", {"query": "VDD"}, "tools_tag")]
    two = '<tool_call>{"name": "a", "arguments": {}}\n{"name": "b", "arguments": {"x": 1}}</tool_call>'
    assert [c.name for c in find_text_calls(two)] == ["a", "b"]
    fenced = 'I will submit.\n```json\n{"name": "submit_extraction", "arguments": {"value": 3.3}}\n```'
    assert find_text_calls(fenced, names)[0].arguments == {"value": 3.3}
    python = "```python\nsubmit_extraction(value=1.8, unit='V', page=4)\n```"
    call = find_text_calls(python, names)[0]
    assert (call.name, call.arguments, call.form) == ("submit_extraction", {"value": 1.8, "unit": "V", "page": 4},
                                                      "fenced_call")
    assert find_text_calls('{"name": "search_text", "parameters": {"query": "x"}}', names)[0].form == "bare_json"
    # answers and examples are not calls
    assert not find_text_calls('```json\n{"value": 1.8, "unit": "V"}\n```', names)
    assert not find_text_calls('```json\n{"name": "VDD", "arguments": {"min": 1}}\n```', names)
    assert not find_text_calls("The supply voltage is 1.8 V (page 4).", names)


def test_a_repeated_token_is_told_from_text_with_tags():
    assert repeated_token("<tool_call>" * 30) == ("<tool_call>", 30)
    assert repeated_token("[TOOL_CALLS] " * 12) == ("[TOOL_CALLS]", 12)
    assert repeated_token("<b>bold</b> and more words " * 3) is None
    assert repeated_token("<tool_call>" * 3) is None


@pytest.mark.parametrize("body, first", [
    ('{"error": {"message": "model not found: qwen", "type": "invalid_request_error"}}', "model not found: qwen"),
    ('{"object": "error", "message": "max_tokens is too large", "code": 400}', "max_tokens is too large"),
    ('{"detail": "Not Found"}', "Not Found"),
    ('{"detail": [{"loc": ["body", "messages"], "msg": "Field required", "type": "missing"}]}',
     "1 validation error: body.messages: Field required"),
    ("2 validation errors for Req\nmessages.1.content\n  Input should be a valid string [type=string_type, "
     "input_value=None]\nmodel\n  Field required [type=missing]", "2 validation errors for Req: messages.1.content"),
    ("upstream timed out", "upstream timed out"),
])
def test_the_servers_message_is_extracted_from_common_shapes(body, first):
    line = server_message(body)
    assert line.startswith(first) and "\n" not in line and len(line) <= 300


def test_validation_bodies_are_deterministic_and_error_lines_short():
    assert is_validation_error('{"detail": [{"loc": ["body"], "msg": "bad", "type": "x"}]}')
    assert is_validation_error("'msg': 'Input should be a valid string'")
    assert not is_validation_error('{"error": {"message": "overloaded"}}')
    e = ModelError("http", server_message(json.dumps({"error": {"message": "x" * 5000}})), http_status=500,
                   body="x" * 5000)
    assert e.retryable and len(error_line(e)) <= 330 and error_line(e).endswith("… [http HTTP 500]")
    assert not ModelError("http", "m", http_status=500, body="1 validation error: Input should be 'a'").retryable
    assert not ModelError("http", "m", http_status=422).retryable
    assert ModelError("http", "m", http_status=429).retryable
