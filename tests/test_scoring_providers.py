"""End to end, per supported provider: what the provider reported is what the offline re-score says.

For each transport — Anthropic Messages (official SDK), OpenAI Responses, chat completions as OpenAI sends
them and as LiteLLM does, and the offline scripted model — a two-turn cell (a search, then the submit) runs
against replies built from the SDKs' own types on 127.0.0.1. The servers are then gone, and `score_paths`
re-scores the record offline. Its usage, cost, turns, tool calls, outcome and fidelity must be the numbers
the provider reported (summed in the record's convention: input includes cache reads and writes), and the
two exports — the OTLP trace and the inspect-ai eval log — must carry the same totals.
"""

from __future__ import annotations

import json

import httpx
import pytest

from agent.inspect_log import records_to_eval_logs
from agent.loop import Budget, run_cell
from agent.models.anthropic_client import AnthropicClient, anthropic_usage
from agent.models.base import ToolCallBlock
from agent.models.openai_http import OpenAIChatClient, OpenAIResponsesClient
from agent.models.scripted import Reply as ScriptedReply
from agent.models.scripted import ScriptedModel
from agent.otlp import record_to_otlp
from agent.record import read_record, validate_record
from agent.scoring.pricing import Price, PriceTable
from agent.scoring.score import score_paths
from agent.tool import Tool, ToolResult
from conformance_server import Reply, replay
from support import SteppingClock, chat_usage, responses_usage
from test_agent_conformance import anthropic_reply, chat_reply, responses_reply

CLAIM = "dps310-operating-range"
SUBMIT = {"low": 300, "high": 1200, "unit": "hPa", "page": 1, "quote": "Operating range 300 – 1200 hPa",
          "conditions": {}}
SEARCH = {"query": "operating range"}
PRICES = PriceTable({"model-under-test": Price(3.0, 15.0, 0.3, 3.75)})


def _tools() -> list[Tool]:
    return [Tool("search_text", "Find a phrase.", {"type": "object", "properties": {"query": {"type": "string"}}},
                 lambda a: ToolResult("page 1: Operating range 300 – 1200 hPa"))]



# ------------------------------------------------------------------------------------------- per provider
def _anthropic(url, _http):
    return AnthropicClient("model-under-test", api_key="sk-ant-test", base_url=url)


def _anthropic_replies():
    usage = [{"input_tokens": 1500, "output_tokens": 60, "cache_read_input_tokens": 800,
              "cache_creation_input_tokens": 200, "output_tokens_details": {"thinking_tokens": 25}},
             {"input_tokens": 300, "output_tokens": 90, "cache_read_input_tokens": 2500,
              "cache_creation_input_tokens": 0, "output_tokens_details": {"thinking_tokens": 40}}]
    replies = [
        anthropic_reply(content=[{"type": "tool_use", "id": "toolu_1", "name": "search_text", "input": SEARCH}],
                        stop="tool_use", usage=usage[0], mid="msg_1"),
        anthropic_reply(content=[{"type": "tool_use", "id": "toolu_2", "name": "submit_extraction",
                                  "input": SUBMIT}], stop="tool_use", usage=usage[1], mid="msg_2"),
    ]
    # Anthropic's input_tokens excludes cache reads and writes: the record's total adds them
    expected = {"input_tokens": 1500 + 800 + 200 + 300 + 2500, "output_tokens": 150,
                "cache_read_input_tokens": 3300, "cache_creation_input_tokens": 200, "reasoning_output_tokens": 65}
    return replies, expected


def _responses(url, http):
    return OpenAIResponsesClient("model-under-test", api_key="sk-test", base_url=f"{url}/v1", http=http)


def _responses_replies():
    def call(cid, name, args):
        return [{"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": name,
                 "arguments": json.dumps(args), "status": "completed"}]

    usage = [responses_usage(2000, 70, cached=1500, cache_write=100, reasoning=30),
             responses_usage(2600, 110, cached=2000, cache_write=0, reasoning=50)]
    replies = [responses_reply(output=call("call_1", "search_text", SEARCH), usage=usage[0], rid="resp_1"),
               responses_reply(output=call("call_2", "submit_extraction", SUBMIT), usage=usage[1], rid="resp_2")]
    expected = {"input_tokens": 4600, "output_tokens": 180, "cache_read_input_tokens": 3500,
                "cache_creation_input_tokens": 100, "reasoning_output_tokens": 80}
    return replies, expected


def _chat(url, http):
    return OpenAIChatClient("model-under-test", base_url=f"{url}/v1", http=http)


def _chat_message(cid, name, args):
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def _chat_search_then_submit(usage):
    """Two chat turns, search_text then submit_extraction, each reporting its `usage` entry."""
    return [chat_reply(message=_chat_message("call_1", "search_text", SEARCH), finish="tool_calls",
                       usage=usage[0], cid="chatcmpl-1"),
            chat_reply(message=_chat_message("call_2", "submit_extraction", SUBMIT), finish="tool_calls",
                       usage=usage[1], cid="chatcmpl-2")]


def _chat_replies():
    usage = [chat_usage(1800, 50, cached=1000, cache_write=300, reasoning=20),
             chat_usage(2300, 80, cached=1800, cache_write=0, reasoning=10)]
    replies = _chat_search_then_submit(usage)
    expected = {"input_tokens": 4100, "output_tokens": 130, "cache_read_input_tokens": 2800,
                "cache_creation_input_tokens": 300, "reasoning_output_tokens": 30}
    return replies, expected


def _litellm_replies():
    usage = [{"prompt_tokens": 1700, "completion_tokens": 45, "total_tokens": 1745,
              "cache_read_input_tokens": 900, "cache_creation_input_tokens": 400},
             {"prompt_tokens": 2100, "completion_tokens": 75, "total_tokens": 2175,
              "cache_read_input_tokens": 1700, "cache_creation_input_tokens": 0}]
    replies = _chat_search_then_submit(usage)
    # LiteLLM reports no reasoning count here: unknown in the record, so unknown in the sum
    expected = {"input_tokens": 3800, "output_tokens": 120, "cache_read_input_tokens": 2600,
                "cache_creation_input_tokens": 400, "reasoning_output_tokens": None}
    return replies, expected


def _scripted_two_turns(conv):
    """The offline model: the same two turns, stating the usage the Messages replies report."""
    replies, _ = _anthropic_replies()
    reply = replies[min(conv.assistant_turns, 1)]
    calls = tuple(ToolCallBlock(b["id"], b["name"], b["input"]) for b in reply["content"])
    return ScriptedReply(calls, "tool_use", usage=anthropic_usage(reply["usage"]))


PROVIDERS = {
    "anthropic": (_anthropic, _anthropic_replies),
    "openai-responses": (_responses, _responses_replies),
    "openai-compat-chat": (_chat, _chat_replies),
    "openai-compat-litellm": (_chat, _litellm_replies),
}


def _expected_cost(u):
    fresh = u["input_tokens"] - u["cache_read_input_tokens"] - u["cache_creation_input_tokens"]
    return (fresh * 3.0 + u["output_tokens"] * 15.0 + u["cache_read_input_tokens"] * 0.3
            + u["cache_creation_input_tokens"] * 3.75) / 1e6


@pytest.fixture(scope="module")
def claim():
    from protocols.claims import load_claims

    return load_claims()[CLAIM]


def _run(model, claim, tmp_path):
    return run_cell(claim, model=model, datasheet=tmp_path / "none.pdf", record_dir=tmp_path / "cells",
                    clock=SteppingClock(), budget=Budget(), tools=_tools(), surface_version="test",
                    run_id=f"{CLAIM}--cell")


@pytest.mark.parametrize("provider", [*PROVIDERS, "scripted"])
def test_a_record_re_scores_offline_with_the_numbers_the_provider_reported(provider, claim, tmp_path):
    if provider == "scripted":
        _, expected = _anthropic_replies()
        result = _run(ScriptedModel(_scripted_two_turns, model="model-under-test"), claim, tmp_path)
    else:
        make, replies_of = PROVIDERS[provider]
        replies, expected = replies_of()
        with replay([Reply(r, headers={"x-request-id": f"req_{i}", "request-id": f"req_{i}"})
                     for i, r in enumerate(replies)]) as (url, _), httpx.Client() as http:
            result = _run(make(url, http), claim, tmp_path)
    # the servers are gone: everything below reads the record only
    assert result.outcome == "submitted"
    events = validate_record(result.record)
    turns = [e for e in events if e.kind == "model_turn"]
    if provider != "scripted":
        assert all(t.response_id for t in turns) and [t.request_id for t in turns] == ["req_0", "req_1"]

    scores = score_paths([tmp_path / "cells"], ground=False, prices=PRICES)
    (row,) = scores["cells"]
    assert row["usage"] == expected
    assert row["turns"] == 2 and row["tool_calls_by_tool"] == {"search_text": 1, "submit_extraction": 1}
    assert row["outcome"] == "submitted" and row["fidelity"]["passed"] is True
    if expected["cache_read_input_tokens"] is not None:
        assert row["cost"] == pytest.approx(_expected_cost(expected), rel=1e-12)
    assert score_paths([tmp_path / "cells"], ground=False, prices=PRICES)["cells"] == scores["cells"]

    # the same totals in both exports
    root = record_to_otlp(read_record(result.record))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    attrs = {a["key"]: a["value"] for a in root["attributes"]}
    assert attrs["gen_ai.usage.input_tokens"] == {"intValue": str(expected["input_tokens"])}
    assert attrs["gen_ai.usage.output_tokens"] == {"intValue": str(expected["output_tokens"])}
    (log,) = records_to_eval_logs([result.record]).values()
    total = next(iter(log["samples"][0]["model_usage"].values()))
    assert total["total_tokens"] == expected["input_tokens"] + expected["output_tokens"]
    assert total["input_tokens_cache_read"] == expected["cache_read_input_tokens"]


def test_a_price_table_is_read_by_the_one_configuration_loader(tmp_path):
    """YAML or JSON by suffix, a bare mapping of models with its currency, and every refusal a ModelFileError
    naming the file and the model's field on one line."""
    from agent.scoring.pricing import PriceTableError, load_price_table
    from firmware_bridge.model_file import ModelFileError

    bare = tmp_path / "bare.yaml"
    bare.write_text("currency: EUR\nm: {input_per_mtok: 1, output_per_mtok: 2, note: ignored}\n")
    table = load_price_table(bare)
    assert table.currency == "EUR" and table.prices == {"m": Price(1.0, 2.0)} and table.source == str(bare)
    negative = tmp_path / "negative.json"
    negative.write_text('{"models": {"m": {"input_per_mtok": -1, "output_per_mtok": 2}}}')
    with pytest.raises(PriceTableError) as got:
        load_price_table(negative)
    assert isinstance(got.value, ModelFileError)
    assert str(got.value) == (f"price table {negative}: field 'models.m.input_per_mtok': Input should be greater "
                              "than or equal to 0 (got -1)")
    broken = tmp_path / "broken.json"
    broken.write_text("{models")
    with pytest.raises(PriceTableError, match=r"broken.json: not JSON \(.* at line 1, column 2\)$"):
        load_price_table(broken)
