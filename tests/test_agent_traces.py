"""Traces over OTLP/HTTP protobuf into a real receiver on 127.0.0.1, decoded with opentelemetry-proto's types.

The receiver behaves as Phoenix's OTLP endpoint does: it takes `application/x-protobuf` on /v1/traces and
refuses JSON with 415. A cell is run against the real Anthropic SDK (SDK-typed replies over real HTTP), its
record is exported, and the test reads back what a trace backend would show: the prompts, the tool calls and
their whole outputs, and the token counts, under OpenInference and OTel GenAI names both.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from agent.loop import Budget, run_cell
from agent.models.anthropic_client import AnthropicClient
from agent.otlp import (
    OPENAI_COMPATIBLE,
    OtlpExportError,
    genai_provider_name,
    otlp_headers,
    otlp_requests,
    otlp_traces_endpoint,
    record_to_otlp,
    send_otlp,
)
from agent.record import read_record
from agent.testserver import serve_app
from agent.tool import Tool, ToolResult
from conformance_server import Reply, replay, sdk_json
from support import SteppingClock

BIG = "row " * 3000  # 12 kB: larger than the record's 4 kB inline prefix, so only the blob has all of it


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[ExportTraceServiceRequest], list[dict]]]:
    """A real OTLP/HTTP receiver: decodes each protobuf body with ExportTraceServiceRequest; 415 for JSON."""
    app = FastAPI()
    received: list[ExportTraceServiceRequest] = []
    seen: list[dict] = []

    @app.post("/v1/traces")
    async def traces(request: Request) -> Response:
        body = await request.body()
        seen.append({"content_type": request.headers.get("content-type"), "bytes": len(body),
                     "authorization": request.headers.get("authorization")})
        if request.headers.get("content-type") != "application/x-protobuf":
            return Response("unsupported content type", status_code=415)
        received.append(ExportTraceServiceRequest.FromString(body))
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    with serve_app(app) as url:
        yield url, received, seen



def _tools() -> list[Tool]:
    return [Tool("search_text", "Find a phrase in the datasheet.",
                 {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
                 lambda a: ToolResult(f"hits for {a['query']}: " + BIG))]


def _message(content, stop, mid, usage):
    from anthropic.types import Message

    return sdk_json(Message.model_validate({
        "id": mid, "type": "message", "role": "assistant", "model": "claude-test", "content": content,
        "stop_reason": stop, "stop_sequence": None, "usage": usage}))


@pytest.fixture
def record(tmp_path):
    from protocols.claims import load_claims

    claim = next(iter(load_claims().values()))
    submit = {"value": 1.5, "low": None, "high": None, "unit": "V", "page": 3, "quote": "VDD 1.5 V",
              "conditions": {}}
    replies = [
        Reply(_message([{"type": "text", "text": "Searching."},
                        {"type": "tool_use", "id": "toolu_1", "name": "search_text", "input": {"query": "VDD"}}],
                       "tool_use", "msg_1", {"input_tokens": 1000, "output_tokens": 40,
                                             "cache_read_input_tokens": 200, "cache_creation_input_tokens": 30})),
        Reply(_message([{"type": "tool_use", "id": "toolu_2", "name": "submit_extraction", "input": submit}],
                       "tool_use", "msg_2", {"input_tokens": 4000, "output_tokens": 60,
                                             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0})),
    ]
    with replay(replies) as (url, _):
        model = AnthropicClient("claude-test", api_key="sk-ant-test", base_url=url)
        result = run_cell(claim, model=model, datasheet=tmp_path / "none.pdf", record_dir=tmp_path,
                          clock=SteppingClock(1_800_000_000.0), budget=Budget(), tools=_tools(), surface_version="test")
    return result.record


def _attrs(span) -> dict:
    def value(v):
        kind = v.WhichOneof("value")
        if kind == "array_value":
            return [value(x) for x in v.array_value.values]
        return getattr(v, kind)

    return {a.key: value(a.value) for a in span.attributes}


def test_a_record_lands_in_an_otlp_receiver_with_prompts_tool_calls_and_token_counts(record):
    with otlp_receiver() as (url, received, seen), httpx.Client() as http:
        sent = send_otlp(record, otlp_traces_endpoint(url, {}), http=http,
                         headers=otlp_headers({"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20t0k"}))
    assert seen[0]["content_type"] == "application/x-protobuf" and seen[0]["authorization"] == "Bearer t0k"
    spans = [s for req in received for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == sent["spans"] == 5  # agent, 2 chat, 2 tool
    assert {s.trace_id.hex() for s in spans} == {sent["trace_id"]}
    by_kind = {}
    for s in spans:
        by_kind.setdefault(_attrs(s)["openinference.span.kind"], []).append(s)
    root = by_kind["AGENT"][0]
    chat1, chat2 = sorted(by_kind["LLM"], key=lambda s: s.start_time_unix_nano)
    search = next(s for s in by_kind["TOOL"] if _attrs(s)["tool.name"] == "search_text")
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)

    a1, a2, t = _attrs(chat1), _attrs(chat2), _attrs(search)
    # the prompt the model saw, and what it answered (OpenInference flattened messages)
    assert a1["llm.input_messages.0.message.role"] == "system" and a1["llm.input_messages.0.message.content"]
    assert a1["llm.input_messages.1.message.role"] == "user"
    assert a1["llm.output_messages.0.message.content"] == "Searching."
    assert a1["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == "search_text"
    assert json.loads(a1["llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments"]) == {
        "query": "VDD"}
    # turn two was sent the tool result whole (12 kB, not the record's 4 kB prefix)
    assert a2["llm.input_messages.3.message.role"] == "tool"
    assert a2["llm.input_messages.3.message.tool_call_id"] == "toolu_1"
    assert a2["llm.input_messages.3.message.content"] == "hits for VDD: " + BIG
    tools = [json.loads(a1[f"llm.tools.{i}.tool.json_schema"])["function"] for i in range(2)]
    assert [f["name"] for f in tools] == ["search_text", "submit_extraction"]
    assert tools[0]["parameters"]["required"] == ["query"]
    # token counts, both conventions; the provider's standard name
    assert (a1["llm.token_count.prompt"], a1["llm.token_count.completion"], a1["llm.token_count.total"]) == (
        1230, 40, 1270)  # Anthropic's input excludes cache reads/writes; the record normalises (OTel convention)
    assert a1["gen_ai.usage.input_tokens"] == 1230 and a1["llm.token_count.prompt_details.cache_read"] == 200
    assert a1["llm.token_count.prompt_details.cache_write"] == 30
    assert a1["gen_ai.provider.name"] == "anthropic" and a1["llm.provider"] == "anthropic"
    assert a1["gen_ai.response.id"] == "msg_1"
    # the tool call: arguments and the whole output, flagged as not cut
    assert t["gen_ai.tool.call.id"] == "toolu_1" and json.loads(t["input.value"]) == {"query": "VDD"}
    assert t["output.value"] == "hits for VDD: " + BIG and t["chamberlab.tool.output_truncated"] is False
    assert t["chamberlab.tool.output_kept_bytes"] == t["chamberlab.tool.output_bytes"]
    assert _attrs(root)["llm.token_count.prompt"] == 5230


def test_the_receiver_refuses_json_and_the_exporter_says_so_instead_of_reporting_it_sent(record):
    with otlp_receiver() as (url, _, _), httpx.Client() as http:
        r = http.post(f"{url}/v1/traces", json=record_to_otlp(read_record(record)))
        assert r.status_code == 415  # as Phoenix does: OTLP/HTTP means protobuf
        with pytest.raises(OtlpExportError, match="HTTP 404"):
            send_otlp(record, f"{url}/elsewhere", http=http)


def test_large_traces_are_split_into_requests_never_cut(record):
    data = record_to_otlp(read_record(record), record_dir=record.parent)
    requests = otlp_requests(data, max_bytes=20_000)
    assert len(requests) > 1
    spans = [s for body in requests for rs in ExportTraceServiceRequest.FromString(body).resource_spans
             for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == 5 and len({s.span_id for s in spans}) == 5


def test_without_the_blobs_the_trace_says_the_output_was_cut(record):
    data = record_to_otlp(read_record(record))  # no record_dir: the kept prefix only
    tool = next(s for s in data["resourceSpans"][0]["scopeSpans"][0]["spans"]
                if s["name"] == "execute_tool search_text")
    attrs = {a["key"]: a["value"] for a in tool["attributes"]}
    assert attrs["chamberlab.tool.output_truncated"] == {"boolValue": True}
    assert attrs["chamberlab.tool.output_kept_bytes"] == {"intValue": "4096"}


def test_endpoint_from_flag_or_the_standard_environment_variables():
    assert otlp_traces_endpoint("http://127.0.0.1:6006", {}) == "http://127.0.0.1:6006/v1/traces"
    assert otlp_traces_endpoint("http://h:4318/v1/traces", {}) == "http://h:4318/v1/traces"
    assert otlp_traces_endpoint(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318/"}) == "http://h:4318/v1/traces"
    assert otlp_traces_endpoint(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h/x",
                                       "OTEL_EXPORTER_OTLP_ENDPOINT": "http://other"}) == "http://h/x"
    assert otlp_traces_endpoint(None, {}) is None


def test_provider_names_are_the_genai_well_known_values():
    assert genai_provider_name("anthropic") == "anthropic" and genai_provider_name("openai") == "openai"
    assert genai_provider_name("openai-compat", "https://api.deepseek.com/v1") == "deepseek"
    # a local vLLM or a LiteLLM proxy: no vendor's name it may not be
    assert genai_provider_name("openai-compat", "http://127.0.0.1:8000/v1") == OPENAI_COMPATIBLE
    assert genai_provider_name("scripted") == "chamberlab.scripted"


def test_traces_land_in_a_running_phoenix(record):
    """Against a real Arize Phoenix when one runs (CHAMBERLAB_PHOENIX_URL, e.g. http://127.0.0.1:6006): too
    heavy for CI (about 190 MB of wheels, 850 MB installed), so CI runs the in-process receiver above instead."""
    import os

    base = os.environ.get("CHAMBERLAB_PHOENIX_URL")
    if not base:
        pytest.skip("set CHAMBERLAB_PHOENIX_URL to a running Phoenix (pip install arize-phoenix; phoenix serve)")
    with httpx.Client(timeout=30.0) as http:
        sent = send_otlp(record, otlp_traces_endpoint(base, {}), http=http)
        spans = []
        for _ in range(100):  # Phoenix ingests asynchronously; poll its REST API (no sleeping: each GET waits)
            r = http.get(f"{base}/v1/projects/default/spans", params={"limit": 1000})
            r.raise_for_status()
            spans = [s for s in r.json()["data"] if s["context"]["trace_id"] == sent["trace_id"]]
            if len(spans) == sent["spans"]:
                break
    assert len(spans) == sent["spans"]
    llm = [s for s in spans if s["span_kind"] == "LLM"]
    assert llm and all(s["attributes"].get("llm.token_count.prompt") for s in llm)
    first = min(llm, key=lambda s: s["start_time"])
    assert first["attributes"]["llm.input_messages.0.message.role"] == "system"  # the REST API shows keys flat
    assert first["attributes"]["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == "search_text"
    assert first["attributes"]["llm.token_count.prompt"] == 1230
    tool = next(s for s in spans if s["span_kind"] == "TOOL" and s["name"] == "execute_tool search_text")
    assert tool["attributes"]["output.value"].endswith(BIG)


def test_extract_sends_its_trace_to_the_endpoint_of_the_flag(tmp_path, capsys):
    import bench_cli
    from conftest import shared_path

    shared_path("datasheets", "DPS310.pdf")
    with otlp_receiver() as (url, received, _):
        code = bench_cli.main(["extract", "dps310-pressure-rate-range", "--model", "scripted:reader", "--no-chamber",
                               "--record", str(tmp_path), "--json", "--otlp-endpoint", url])
    out = json.loads(capsys.readouterr().out)
    spans = [s for req in received for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert code == 0 and out["otlp_sent"]["spans"] == len(spans) > 2
    assert {_attrs(s)["openinference.span.kind"] for s in spans} == {"AGENT", "LLM", "TOOL"}
