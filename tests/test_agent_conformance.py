"""Provider conformance: replies built from the official SDKs' own response types, served over real HTTP.

Each test is one gap of issue 18: a field the record promises (usage, cache writes, thinking tokens, response
ids, every attempt's request id, stop reasons with the raw value) must arrive in the record faithfully, or as
unknown — never as a fabricated 0 or a mislabelled outcome.
"""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from anthropic.types import Message as AnthropicMessage
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from agent.loop import Budget, run_cell
from agent.models.anthropic_client import AnthropicClient
from agent.models.base import Message, ModelError, ModelRequest, TextBlock, retry_after_seconds
from agent.models.openai_http import OpenAIChatClient, OpenAIResponsesClient
from agent.record import read_record
from agent.tool import Tool, ToolResult
from conformance_server import Reply, replay, sdk_json
from support import SteppingClock, chat_usage, responses_usage

TOOLS = [Tool("search_text", "Find a phrase.", {"type": "object", "properties": {"query": {"type": "string"}}})]
REQUEST = ModelRequest("sys", [Message("user", [TextBlock("find VDD")])], TOOLS)


# ------------------------------------------------------------------------------------------- SDK-typed replies
def _put_usage(data: dict, usage, default: dict) -> None:
    """`usage` into a reply body: "default" puts the test's usual counts, None reports no usage at all."""
    if usage == "default":
        usage = default
    if usage is not None:
        data["usage"] = usage


def responses_reply(*, output=None, usage="default", status="completed", incomplete=None, rid="resp_0001"):
    data = {
        "id": rid, "object": "response", "created_at": 1764633600, "model": "gpt-test", "status": status,
        "output": output if output is not None else [
            {"type": "message", "id": "msg_a", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "done", "annotations": []}]}],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }
    if incomplete:
        data["incomplete_details"] = {"reason": incomplete}
    _put_usage(data, usage, responses_usage(1200, 80, cached=1000, cache_write=150, reasoning=64))
    return sdk_json(Response.model_validate(data))


def chat_reply(*, message=None, finish="stop", usage="default", cid="chatcmpl-0001", extra_choice=None,
               validate=True):
    """A ChatCompletion as the SDK types it; `validate=False` for shapes gateways send outside the SDK's types
    (list content, object arguments, a call without an id)."""
    choice = {"index": 0, "finish_reason": finish,
              "message": message if message is not None else {"role": "assistant", "content": "done"}}
    choice.update(extra_choice or {})
    data = {"id": cid, "object": "chat.completion", "created": 1764633600, "model": "m", "choices": [choice]}
    _put_usage(data, usage, chat_usage(900, 40, cached=700, cache_write=120, reasoning=12))
    if not validate:
        return data
    return sdk_json(ChatCompletion.model_validate(data))


def anthropic_reply(*, content=None, stop="end_turn", usage=None, mid="msg_01AbC"):
    data = {"id": mid, "type": "message", "role": "assistant", "model": "claude-test",
            "content": content if content is not None else [{"type": "text", "text": "done"}],
            "stop_reason": stop, "stop_sequence": None,
            "usage": usage or {"input_tokens": 20, "output_tokens": 300, "cache_read_input_tokens": 4000,
                               "cache_creation_input_tokens": 500,
                               "output_tokens_details": {"thinking_tokens": 250}}}
    return sdk_json(AnthropicMessage.model_validate(data))


def _responses(url, http):
    return OpenAIResponsesClient("gpt-test", api_key="sk-test", base_url=f"{url}/v1", http=http)


def _chat(url, http):
    return OpenAIChatClient("m", base_url=f"{url}/v1", http=http)


def _anthropic(url):
    return AnthropicClient("claude-test", api_key="sk-ant-test", base_url=url)


# ------------------------------------------------------------------------------------------- usage
def test_responses_usage_keeps_cache_reads_writes_and_reasoning_and_the_response_id():
    with replay([Reply(responses_reply(), headers={"x-request-id": "req_A"})]) as (url, _), httpx.Client() as http:
        turn = _responses(url, http).complete(REQUEST)
    u = turn.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens,
            u.reasoning_output_tokens) == (1200, 80, 1000, 150, 64)
    assert turn.response_id == "resp_0001" and turn.request_id == "req_A"


def test_a_missing_usage_is_unknown_not_zero_on_every_transport():
    with replay([Reply(responses_reply(usage=None)), Reply(chat_reply(usage=None))]) as (url, _), \
            httpx.Client() as http:
        turns = [_responses(url, http).complete(REQUEST), _chat(url, http).complete(REQUEST)]
    for turn in turns:
        assert turn.usage.input_tokens is None and turn.usage.output_tokens is None
        assert turn.usage.total_tokens is None


def test_chat_usage_keeps_cache_writes_from_openai_and_from_litellm():
    litellm_usage = {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940,
                     "cache_read_input_tokens": 700, "cache_creation_input_tokens": 120}
    with replay([Reply(chat_reply()), Reply(chat_reply(usage=litellm_usage))]) as (url, _), httpx.Client() as http:
        openai_turn, litellm_turn = _chat(url, http).complete(REQUEST), _chat(url, http).complete(REQUEST)
    for turn in (openai_turn, litellm_turn):
        assert (turn.usage.input_tokens, turn.usage.cache_read_input_tokens,
                turn.usage.cache_creation_input_tokens) == (900, 700, 120)
    assert openai_turn.usage.reasoning_output_tokens == 12 and litellm_turn.usage.reasoning_output_tokens is None
    assert openai_turn.response_id == "chatcmpl-0001"


def test_anthropic_usage_includes_cache_and_thinking_tokens_and_the_message_id():
    with replay([Reply(anthropic_reply(), headers={"request-id": "req_011"})]) as (url, _):
        turn = _anthropic(url).complete(REQUEST)
    u = turn.usage
    assert u.input_tokens == 20 + 4000 + 500 and u.output_tokens == 300
    assert (u.cache_read_input_tokens, u.cache_creation_input_tokens, u.reasoning_output_tokens) == (4000, 500, 250)
    assert turn.response_id == "msg_01AbC" and turn.request_id == "req_011"


def test_anthropic_usage_without_cache_counts_leaves_the_total_unknown():
    with replay([Reply(anthropic_reply(usage={"input_tokens": 20, "output_tokens": 30}))]) as (url, _):
        turn = _anthropic(url).complete(REQUEST)
    assert turn.usage.input_tokens is None and turn.usage.output_tokens == 30
    assert turn.usage.cache_read_input_tokens is None and turn.usage.reasoning_output_tokens is None


# ------------------------------------------------------------------------------------------- in the record
def _tools() -> list[Tool]:
    return [replace(TOOLS[0], handler=lambda args: ToolResult("page 6: VDD 1.7 3.6 V"))]



def _cell(client, tmp_path, claim, *, budget=Budget(), sleeps=None):
    clock = SteppingClock()
    result = run_cell(claim, model=client, datasheet=tmp_path / "none.pdf", record_dir=tmp_path, clock=clock,
                      budget=budget, sleep=(sleeps.append if sleeps is not None else None), tools=_tools(),
                      surface_version="test")
    return result, read_record(result.record)


@pytest.fixture
def claim():
    from protocols.claims import load_claims

    return next(iter(load_claims().values()))


def test_the_record_keeps_unknown_usage_and_the_run_total_is_unknown(tmp_path, claim):
    replies = [Reply(chat_reply(usage=None, finish="stop"))]
    with replay(replies) as (url, _), httpx.Client() as http:
        result, events = _cell(_chat(url, http), tmp_path, claim)
    turn = next(e for e in events if e.kind == "model_turn")
    assert turn.usage.input_tokens is None and turn.response_id == "chatcmpl-0001"
    assert events[-1].usage.input_tokens is None and events[-1].usage.output_tokens is None


def test_every_attempt_of_a_retried_turn_keeps_its_request_id(tmp_path, claim):
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    replies = [Reply(overloaded, 529, {"request-id": "req_1", "retry-after": "3"}),
               Reply(overloaded, 529, {"request-id": "req_2"}),
               Reply(anthropic_reply(), headers={"request-id": "req_3"})]
    sleeps: list[float] = []
    with replay(replies) as (url, _):
        result, events = _cell(_anthropic(url), tmp_path, claim, sleeps=sleeps)
    turn = next(e for e in events if e.kind == "model_turn")
    assert [a.request_id for a in turn.attempts] == ["req_1", "req_2", "req_3"]
    assert [a.http_status for a in turn.attempts] == [529, 529, 200]
    assert turn.request_id == "req_3" and turn.response_id == "msg_01AbC" and turn.retries == 2
    assert sleeps == [3.0, 2.0]  # Retry-After honoured, then the 1 s × 2 backoff
    assert [a.wait_reason for a in turn.attempts] == ["retry-after", "backoff", None]
    from agent.otlp import record_to_otlp

    spans = record_to_otlp(events)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    chat = next(s for s in spans if s["name"].startswith("chat "))
    attrs = {a["key"]: a["value"] for a in chat["attributes"]}
    assert attrs["gen_ai.response.id"] == {"stringValue": "msg_01AbC"}  # not the HTTP request id
    assert [v["stringValue"] for v in attrs["chamberlab.request_ids"]["arrayValue"]["values"]] == [
        "req_1", "req_2", "req_3"]


# ------------------------------------------------------------------------------------------- retry-after
def test_retry_after_forms():
    assert retry_after_seconds({"retry-after": "20"}) == 20.0
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "Tue, 01 Dec 2026 20:00:30 GMT"}, now=1796155200.0) == 30.0
    assert retry_after_seconds({"retry-after": "Tue, 01 Dec 2026 20:00:30 GMT"}) is None  # no clock: unknown
    assert retry_after_seconds({"retry-after": "soon"}) is None and retry_after_seconds({}) is None


def test_a_rate_limit_with_retry_after_waits_what_the_server_asked(tmp_path, claim):
    limited = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    replies = [Reply(limited, 429, {"retry-after": "20", "x-request-id": "req_a"}),
               Reply(responses_reply(), headers={"x-request-id": "req_b"})]
    sleeps: list[float] = []
    with replay(replies) as (url, _), httpx.Client() as http:
        result, events = _cell(_responses(url, http), tmp_path, claim, sleeps=sleeps)
    assert sleeps == [20.0]
    turn = next(e for e in events if e.kind == "model_turn")
    assert [a.request_id for a in turn.attempts] == ["req_a", "req_b"] and turn.stop_reason == "end_turn"


def test_a_retry_after_beyond_the_cap_ends_the_turn_without_hammering(tmp_path, claim):
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    replies = [Reply(overloaded, 529, {"request-id": "req_1", "retry-after": "600"})]
    sleeps: list[float] = []
    with replay(replies) as (url, bodies):
        result, events = _cell(_anthropic(url), tmp_path, claim, sleeps=sleeps,
                               budget=Budget(max_retry_wait_s=60.0))
    assert sleeps == [] and len(bodies) == 1 and result.outcome == "engine_error"
    assert "asked to wait 600 s" in result.detail


# ------------------------------------------------------------------------------------------- stop reasons
def test_a_truncated_responses_function_call_is_max_tokens_and_never_runs(tmp_path, claim):
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "search_text",
            "arguments": "{\"query\": \"VD", "status": "incomplete"}
    replies = [Reply(responses_reply(output=[call], status="incomplete", incomplete="max_output_tokens"))]
    with replay(replies) as (url, _), httpx.Client() as http:
        result, events = _cell(_responses(url, http), tmp_path, claim)
    turn = next(e for e in events if e.kind == "model_turn")
    assert turn.stop_reason == "max_tokens" and turn.raw_stop_reason == "incomplete/max_output_tokens"
    assert result.outcome == "max_tokens" and not [e for e in events if e.kind == "tool_call"]


def test_litellm_context_overflow_flattened_to_stop_is_not_end_turn(tmp_path, claim):
    passthrough = chat_reply(message={"role": "assistant", "content": "partial"},
                             extra_choice={"provider_specific_fields": {"stop_reason": "model_context_window_exceeded"}})
    silent = chat_reply(message={"role": "assistant", "content": None},
                        usage={"prompt_tokens": 199000, "completion_tokens": 0, "total_tokens": 199000})
    litellm = {"x-litellm-call-id": "c1", "x-litellm-model-id": "m1"}
    with replay([Reply(passthrough, headers=litellm)]) as (url, _), httpx.Client() as http:
        result, events = _cell(_chat(url, http), tmp_path / "a", claim)
    turn = next(e for e in events if e.kind == "model_turn")
    assert result.outcome == "context_exceeded" and turn.raw_stop_reason == "stop"
    assert turn.upstream_stop_reason == "model_context_window_exceeded"
    with replay([Reply(silent, headers=litellm)]) as (url, _), httpx.Client() as http:
        result, _ = _cell(_chat(url, http), tmp_path / "b", claim)
    assert result.outcome == "engine_error" and result.outcome != "end_turn_without_submit"


def test_pause_turn_with_a_server_tool_is_continued_not_denied(tmp_path, claim):
    server_call = [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "DPS310"}}]
    replies = [Reply(anthropic_reply(content=server_call, stop="pause_turn", mid=f"msg_{i}")) for i in range(3)]
    with replay(replies) as (url, bodies):
        result, events = _cell(_anthropic(url), tmp_path, claim, budget=Budget(max_pause_turns=2, max_turns=30))
    assert not [e for e in events if e.kind == "tool_call"]  # a server tool is never a denied client call
    assert bodies[1]["messages"][-1]["content"][0]["type"] == "server_tool_use"  # content sent back to continue
    assert result.outcome == "engine_error" and "pause_turn" in result.detail and len(bodies) == 3


# ------------------------------------------------------------------------------------------- chat robustness
def test_chat_list_content_and_object_arguments_are_read():
    message = {"role": "assistant", "content": [{"type": "text", "text": "looking"}],
               "tool_calls": [{"id": "call_9", "type": "function",
                               "function": {"name": "search_text", "arguments": {"query": "VDD"}}}]}
    with replay([Reply(chat_reply(message=message, finish="tool_calls", usage=None, validate=False))]) as (url, _), \
            httpx.Client() as http:
        turn = _chat(url, http).complete(REQUEST)
    assert turn.message.text == "looking" and turn.message.tool_calls[0].arguments == {"query": "VDD"}
    assert turn.stop_reason == "tool_use"


def test_a_chat_tool_call_without_an_id_is_refused():
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"type": "function", "function": {"name": "search_text", "arguments": "{}"}}]}
    with replay([Reply(chat_reply(message=message, finish="tool_calls", usage=None, validate=False))]) as (url, _), \
            httpx.Client() as http:
        with pytest.raises(ModelError, match="has no id") as e:
            _chat(url, http).complete(REQUEST)
    assert e.value.kind == "protocol"


# ------------------------------------------------------------------------------------------- request bodies
def _materialise(value):
    """pydantic validates an SDK `Iterable[...]` lazily; walking it forces every item through the validator."""
    if isinstance(value, dict):
        return {k: _materialise(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    return [_materialise(v) for v in value]


_ADAPTERS: dict = {}  # kept alive: a lazily validated Iterable needs its adapter's definitions


def assert_valid_request(kind: str, body: dict) -> None:
    """The body we sent validates against the official SDK's own request type."""
    from pydantic import TypeAdapter

    if kind == "responses":
        from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming as T
    elif kind == "chat":
        from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming as T
    else:
        from anthropic.types.message_create_params import MessageCreateParamsNonStreaming as T
    adapter = _ADAPTERS.setdefault(kind, TypeAdapter(T))
    _materialise(adapter.validate_python(body))


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
PAGE_TOOL = Tool("inspect_page", "Render a page.", {"type": "object", "properties": {"page": {"type": "integer"}}})


def _page_tools() -> list[Tool]:
    return [replace(PAGE_TOOL, handler=lambda args: ToolResult("PNG of page 6, 68 bytes", images=(("image/png", PNG),)))]


def _chat_page_replies() -> list:
    """A chat model asking for inspect_page on page 6, then answering."""
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "inspect_page", "arguments": "{\"page\": 6}"}}]}
    return [Reply(chat_reply(message=message, finish="tool_calls")), Reply(chat_reply())]


def _page_cell(client, tmp_path, claim):
    result = run_cell(claim, model=client, datasheet=tmp_path / "none.pdf", record_dir=tmp_path, clock=SteppingClock(),
                      tools=_page_tools(), surface_version="test")
    return result, read_record(result.record)


def test_inspect_page_images_reach_the_responses_api_inside_the_function_output(tmp_path, claim):
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "inspect_page",
            "arguments": "{\"page\": 6}", "status": "completed"}
    replies = [Reply(responses_reply(output=[call])), Reply(responses_reply(rid="resp_0002"))]
    with replay(replies) as (url, bodies), httpx.Client() as http:
        result, events = _page_cell(_responses(url, http), tmp_path, claim)
    output = next(i for i in bodies[1]["input"] if i.get("type") == "function_call_output")["output"]
    assert output[0] == {"type": "input_text", "text": "PNG of page 6, 68 bytes"}
    assert output[1]["type"] == "input_image" and output[1]["image_url"] == f"data:image/png;base64,{PNG}"
    tool = next(e for e in events if e.kind == "tool_call")
    assert tool.attachments[0]["delivered_as"] == "tool_result"
    for body in bodies:
        assert_valid_request("responses", body)


def test_inspect_page_images_reach_chat_models_in_a_user_message_after_the_tool_results(tmp_path, claim):
    with replay(_chat_page_replies()) as (url, bodies), httpx.Client() as http:
        result, events = _page_cell(_chat(url, http), tmp_path, claim)
    sent = bodies[1]["messages"]
    assert sent[-2] == {"role": "tool", "tool_call_id": "call_1", "content": "PNG of page 6, 68 bytes"}
    assert sent[-1]["role"] == "user" and sent[-1]["content"][1]["image_url"]["url"].endswith(PNG)
    assert next(e for e in events if e.kind == "tool_call").attachments[0]["delivered_as"] == "user_message"
    for body in bodies:
        assert_valid_request("chat", body)


def test_a_text_only_chat_model_gets_no_image_and_the_read_does_not_count(tmp_path, claim):
    from agent.scoring.cells import facts_from_events

    with replay(_chat_page_replies()) as (url, bodies), httpx.Client() as http:
        client = OpenAIChatClient("m", base_url=f"{url}/v1", http=http, images=False)
        result, events = _page_cell(client, tmp_path, claim)
    assert all(m["role"] != "user" or isinstance(m["content"], str) for m in bodies[1]["messages"])
    assert next(e for e in events if e.kind == "tool_call").attachments[0]["delivered_as"] == "none"
    facts = facts_from_events(events, result.record)
    assert facts.calls[0].empty_output  # the model saw a caption, not the page


def test_anthropic_request_bodies_validate_against_the_sdk_types(tmp_path, claim):
    tool_use = [{"type": "tool_use", "id": "toolu_1", "name": "inspect_page", "input": {"page": 6}}]
    replies = [Reply(anthropic_reply(content=tool_use, stop="tool_use")), Reply(anthropic_reply())]
    with replay(replies) as (url, bodies):
        _page_cell(_anthropic(url), tmp_path, claim)
    assert bodies[1]["messages"][-1]["content"][0]["content"][1]["type"] == "image"
    for body in bodies:
        assert_valid_request("anthropic", body)


# ------------------------------------------------------------------------------------------- reasoning state
def test_chat_sends_reasoning_and_thinking_blocks_back_on_the_next_turn(tmp_path, claim):
    thinking_blocks = [{"type": "thinking", "thinking": "look up VDD", "signature": "EqQBCgIYAhIM"}]
    message = {"role": "assistant", "content": None, "reasoning_content": "look up VDD",
               "thinking_blocks": thinking_blocks, "tool_calls": [
                   {"id": "call_1", "type": "function", "function": {"name": "search_text", "arguments": "{}"}}]}
    replies = [Reply(chat_reply(message=message, finish="tool_calls", validate=False)), Reply(chat_reply())]
    with replay(replies) as (url, bodies), httpx.Client() as http:
        _cell(_chat(url, http), tmp_path, claim)
    sent = next(m for m in bodies[1]["messages"] if m["role"] == "assistant")
    assert sent["reasoning_content"] == "look up VDD" and sent["thinking_blocks"] == thinking_blocks


# ------------------------------------------------------------------------------------------- model options
def test_model_options_from_the_spec_reach_each_api():
    from agent.models import ModelSpecError, client_for

    env = {"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    vllm = client_for("openai-compat:http://127.0.0.1:9/v1#Qwen/Qwen3-8B?extra.chat_template_kwargs.enable_thinking"
                      "=false&max_output_tokens=2048&effort=high", env)
    body = vllm.build_body(REQUEST)
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["max_tokens"] == 2048
    assert body["reasoning_effort"] == "high"
    oa = client_for("openai:gpt-5.1?effort=low", env)
    assert oa.build_body(REQUEST)["reasoning"] == {"summary": "auto", "effort": "low"}
    claude = client_for("claude-sonnet-4-5?thinking=2048&max_output_tokens=8000", env)
    assert claude.thinking == {"type": "enabled", "budget_tokens": 2048} and claude.max_output_tokens == 8000
    with pytest.raises(ModelSpecError, match="temperature do not apply"):  # chat completions only
        client_for("openai:gpt-5.1?temperature=0", env)
    with pytest.raises(ModelSpecError, match="do not apply"):
        client_for("openai:gpt-5.1?images=false", env)


def test_anthropic_thinking_and_effort_are_sent(tmp_path):
    with replay([Reply(anthropic_reply())]) as (url, bodies):
        client = AnthropicClient("claude-test", api_key="k", base_url=url, effort="high", max_output_tokens=9000,
                                 thinking={"type": "enabled", "budget_tokens": 4096})
        client.complete(REQUEST)
    assert bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert bodies[0]["output_config"] == {"effort": "high"} and bodies[0]["max_tokens"] == 9000
    assert_valid_request("anthropic", bodies[0])
