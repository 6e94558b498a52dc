"""Model clients: wire translations, key handling, and the OpenAI-style clients against a local HTTP stand-in."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from agent.models import MissingApiKey, client_for, parse_model_spec
from agent.models.anthropic_client import AnthropicClient, from_anthropic_response
from agent.models.base import Message, ModelError, ModelRequest, TextBlock, ToolResultBlock
from agent.models.openai_http import OpenAIChatClient, OpenAIResponsesClient
from agent.testserver import serve_app
from agent.tool import Tool

TOOLS = [Tool("search_text", "Find a phrase.", {"type": "object", "properties": {"query": {"type": "string"}}})]


def test_model_strings_name_their_client():
    assert parse_model_spec("scripted:reader") == ("scripted", "reader", None)
    assert parse_model_spec("openai:gpt-5.1") == ("openai", "gpt-5.1", None)
    assert parse_model_spec("openai-compat:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B") == (
        "openai-compat", "Qwen/Qwen3-8B", "http://127.0.0.1:8000/v1")
    assert parse_model_spec("claude-sonnet-4-5") == ("anthropic", "claude-sonnet-4-5", None)
    with pytest.raises(ValueError, match="openai-compat"):
        parse_model_spec("openai-compat:no-model-here")
    with pytest.raises(ValueError, match="unknown scripted policy 'nope'"):
        client_for("scripted:nope", {})


@pytest.mark.parametrize("spec, variable", [("claude-sonnet-4-5", "ANTHROPIC_API_KEY"), ("openai:gpt-5.1", "OPENAI_API_KEY")])
def test_a_missing_key_names_the_variable(spec, variable):
    with pytest.raises(MissingApiKey, match=variable):
        client_for(spec, {})


def test_anthropic_usage_is_normalised_to_include_cache():
    msg, stop, raw, usage, _ = from_anthropic_response({
        "content": [{"type": "thinking", "thinking": "plan", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "search_text", "input": {"query": "VDD"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                  "cache_creation_input_tokens": 7},
    })
    assert stop == "tool_use" and usage.input_tokens == 117 and usage.cache_read_input_tokens == 100
    assert msg.tool_calls[0].arguments == {"query": "VDD"} and msg.raw[0]["signature"] == "sig"
    _, stop, raw, _, _ = from_anthropic_response({"content": [], "stop_reason": "model_context_window_exceeded"})
    assert stop == "context_exceeded" and raw == "model_context_window_exceeded"


def test_forced_tool_choice_is_refused_when_thinking_is_on():
    client = AnthropicClient("m", api_key="k", base_url="http://127.0.0.1:9", thinking={"type": "enabled",
                                                                                     "budget_tokens": 1024})
    request = ModelRequest("sys", [Message("user", [TextBlock("hi")])], TOOLS, tool_choice={"name": "search_text"})
    with pytest.raises(ValueError, match="thinking"):
        client.complete(request)


def _openai_standin() -> FastAPI:
    """A stand-in for the two OpenAI-style endpoints: answers with a tool call, then text; keeps what it got."""
    app = FastAPI()
    app.state.bodies = []

    @app.post("/v1/responses")
    def responses(body: dict):
        app.state.bodies.append(body)
        if body["model"] == "too-long":
            return JSONResponse({"error": {"code": "context_length_exceeded", "message": "too long"}}, 400)
        if len(app.state.bodies) == 1:
            output = [{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look it up"}],
                       "encrypted_content": "ENC123"},
                      {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "search_text",
                       "arguments": "{\"query\": \"VDD\"}"}]
        else:
            output = [{"type": "message", "id": "m1", "role": "assistant",
                       "content": [{"type": "output_text", "text": "done"}]}]
        return JSONResponse({"model": body["model"], "status": "completed", "output": output,
                             "usage": {"input_tokens": 50, "output_tokens": 9,
                                       "input_tokens_details": {"cached_tokens": 20},
                                       "output_tokens_details": {"reasoning_tokens": 4}}},
                            headers={"x-request-id": "req_oa"})

    @app.post("/v1/chat/completions")
    def chat(body: dict):
        app.state.bodies.append(body)
        return {"model": body["model"], "choices": [{"finish_reason": "stop", "message": {
            "role": "assistant", "content": "<tool_call>{...}</tool_call>", "reasoning_content": "hmm"}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 12}}

    return app


def test_responses_client_is_stateless_and_carries_encrypted_reasoning():
    app = _openai_standin()
    with serve_app(app) as url, httpx.Client() as http:
        client = OpenAIResponsesClient("gpt-test", api_key="sk-test", base_url=f"{url}/v1", http=http,
                                       reasoning={"effort": "low"})
        messages = [Message("user", [TextBlock("find VDD")])]
        first = client.complete(ModelRequest("sys", messages, TOOLS))
        assert first.stop_reason == "tool_use" and first.request_id == "req_oa"
        assert first.usage.reasoning_output_tokens == 4 and first.usage.cache_read_input_tokens == 20
        assert first.message.blocks[0].text == "look it up"
        messages += [first.message, Message("user", [ToolResultBlock("call_1", "page 47: VDD 1.62 3.6 V")])]
        second = client.complete(ModelRequest("sys", messages, TOOLS))
        assert second.stop_reason == "end_turn" and second.message.text == "done"
        with pytest.raises(ModelError) as e:
            OpenAIResponsesClient("too-long", api_key="k", base_url=f"{url}/v1", http=http).complete(
                ModelRequest("sys", messages, TOOLS))
        assert e.value.kind == "context_exceeded" and e.value.http_status == 400
    body = app.state.bodies[1]
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert body["input"][1]["encrypted_content"] == "ENC123"  # the reasoning item went back verbatim
    assert body["input"][-1] == {"type": "function_call_output", "call_id": "call_1",
                                 "output": "page 47: VDD 1.62 3.6 V"}
    assert "text" not in body and "response_format" not in body and body["tool_choice"] == "auto"


def test_chat_client_reports_markup_as_end_turn_and_never_sends_response_format():
    app = _openai_standin()
    with serve_app(app) as url, httpx.Client() as http:
        client = OpenAIChatClient("qwen", base_url=f"{url}/v1", http=http,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        turn = client.complete(ModelRequest("sys", [Message("user", [TextBlock("find VDD")])], TOOLS))
    assert turn.stop_reason == "end_turn" and not turn.message.tool_calls  # a tool call written as text
    body = app.state.bodies[0]
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and "response_format" not in body
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    with pytest.raises(ValueError, match="response_format"):
        OpenAIChatClient("q", base_url="http://x", http=httpx.Client(), extra_body={"response_format": {}})
