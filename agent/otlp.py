"""Export a dispatch record as OTLP spans, with OpenTelemetry GenAI and OpenInference attributes both.

Why both: Langfuse and generic OTLP back ends read the GenAI semantic conventions (`execute_tool {tool}`,
`gen_ai.*`), Phoenix reads OpenInference (`openinference.span.kind`, `llm.input_messages`, `llm.tools`,
`llm.token_count.*`). One record, one trace: an AGENT root span for the cell, an LLM span per model turn (with
the whole conversation the model was sent, rebuilt from the record, and what it answered), a TOOL span per
tool call. Ids are derived from the run id, so exporting the same record twice gives the same trace.

Two encodings of the same spans: OTLP/JSON (a file, `export_otlp`) and OTLP/HTTP protobuf, the encoding every
OTLP receiver accepts (Phoenix refuses JSON with 415), built with opentelemetry-proto's own message types and
posted by `send_otlp`. Nothing is cut: tool outputs come whole from the record's blobs; only when a blob is
missing does a span carry the record's kept prefix, and then it says so (`chamberlab.tool.output_truncated`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from agent.record import read_record

# gen_ai.provider.name: the OpenTelemetry GenAI well-known values, by our provider name or, for a
# chat-completions endpoint, by its host. An endpoint we cannot attribute (a local vLLM, a LiteLLM proxy) gets
# the custom value below, never a provider's name it may not be.
_GENAI_PROVIDER = {"anthropic": "anthropic", "openai": "openai"}
_GENAI_HOSTS = {
    "api.openai.com": "openai", "api.anthropic.com": "anthropic", "api.deepseek.com": "deepseek",
    "api.groq.com": "groq", "api.mistral.ai": "mistral_ai", "api.x.ai": "x_ai", "api.perplexity.ai": "perplexity",
    "api.cohere.com": "cohere",
}
# OpenInference llm.provider / llm.system values for the same providers
_OI_PROVIDER = {"anthropic": "anthropic", "openai": "openai", "deepseek": "deepseek", "mistral_ai": "mistralai",
                "x_ai": "xai", "cohere": "cohere"}
OPENAI_COMPATIBLE = "openai_compatible"  # custom gen_ai.provider.name: an OpenAI-compatible server, vendor unknown
MAX_REQUEST_BYTES = 4 * 1024 * 1024  # spans are sent in requests of at most this size (one span may exceed it)


def genai_provider_name(provider: str, base_url: str | None = None) -> str:
    """The gen_ai.provider.name of a record's provider (and, for chat completions, its endpoint)."""
    if provider in _GENAI_PROVIDER:
        return _GENAI_PROVIDER[provider]
    if provider == "openai-compat":
        host = (urlsplit(base_url).hostname or "") if base_url else ""
        return _GENAI_HOSTS.get(host, OPENAI_COMPATIBLE)
    return f"chamberlab.{provider}"  # scripted, offline: no provider at all


def _id(run_id: str, label: str, nbytes: int) -> str:
    return hashlib.sha256(f"{run_id}/{label}".encode()).hexdigest()[: nbytes * 2]


def _ns(t: float) -> str:
    return str(int(round(t * 1e9)))


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        v: dict[str, Any] = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    elif isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
        v = {"arrayValue": {"values": [{"stringValue": x} for x in value]}}
    elif isinstance(value, str):
        v = {"stringValue": value}
    else:
        v = {"stringValue": json.dumps(value, ensure_ascii=False, default=str)}
    return {"key": key, "value": v}


def _attrs(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [_attr(k, v) for k, v in pairs.items() if v is not None]


def _turn_error_type(e: Any) -> str | None:
    """OTel `error.type` of a failed chat span: the HTTP status, else the failure kind of the last attempt."""
    if e.stop_reason is not None:
        return None
    if e.http_status:
        return str(e.http_status)
    last = e.errors[-1] if e.errors else ""
    return last.split(":", 1)[0].split(" ", 1)[0] or "_OTHER"


def tool_output_text(e: Any, record_dir: Path | None) -> tuple[str, bool]:
    """A tool call's whole output (from its blob) and whether only the record's kept prefix was available."""
    if record_dir is not None:
        blob = Path(record_dir) / e.blob
        if blob.is_file():
            data = blob.read_bytes()
            if hashlib.sha256(data).hexdigest() == e.output_sha256:
                return data.decode("utf-8", errors="replace"), False
    return e.output_text, e.output_kept_bytes < e.output_bytes


def tool_message(e: Any, text: str) -> dict[str, Any]:
    note = "".join(f"\n[image {a['mime_type']}, {a['bytes']} bytes, sha256 {a['sha256']}, delivered as "
                   f"{a.get('delivered_as', 'tool_result')}]" for a in e.attachments)
    return {"role": "tool", "tool_call_id": e.tool_call_id, "name": e.tool, "content": text + note}


def conversation(events: list[Any], record_dir: Path | None = None) -> dict[int, tuple[list[dict], dict | None]]:
    """Per model turn (by seq): the messages the model was sent and the assistant message it answered (None
    for a failed turn), rebuilt from the record in the loop's order — system, first user message, then each
    answer followed by its tool results. Tool-call arguments come from the tool_call events (by turn and id)."""
    start = next(e for e in events if e.kind == "run_start")
    args = {(e.turn, e.tool_call_id): e.arguments for e in events if e.kind == "tool_call"}
    messages: list[dict[str, Any]] = [{"role": "system", "content": start.system_prompt},
                                      {"role": "user", "content": start.first_user_message}]
    turns: dict[int, tuple[list[dict], dict | None]] = {}
    for e in events:
        if e.kind == "model_turn":
            sent = list(messages)
            if e.stop_reason is None:
                turns[e.seq] = (sent, None)
                continue
            answer: dict[str, Any] = {"role": "assistant", "content": e.text}
            if e.tool_calls:
                answer["tool_calls"] = [{"id": c["id"], "name": c["name"],
                                         "arguments": args.get((e.turn, c["id"]))} for c in e.tool_calls]
            turns[e.seq] = (sent, answer)
            messages.append(answer)
        elif e.kind == "tool_call":
            messages.append(tool_message(e, tool_output_text(e, record_dir)[0]))
    return turns


def _oi_messages(prefix: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenInference's flattened message attributes: `<prefix>.<i>.message.role`, `.content`, `.tool_calls...`."""
    out: dict[str, Any] = {}
    for i, m in enumerate(messages):
        p = f"{prefix}.{i}.message"
        out[f"{p}.role"] = m["role"]
        if m.get("content"):
            out[f"{p}.content"] = m["content"]
        if m.get("tool_call_id"):
            out[f"{p}.tool_call_id"] = m["tool_call_id"]
            out[f"{p}.name"] = m["name"]
        for j, c in enumerate(m.get("tool_calls") or []):
            q = f"{p}.tool_calls.{j}.tool_call"
            out[f"{q}.id"] = c["id"]
            out[f"{q}.function.name"] = c["name"]
            if c.get("arguments") is not None:
                out[f"{q}.function.arguments"] = json.dumps(c["arguments"], ensure_ascii=False)
    return out


def _oi_tools(surface: Any) -> dict[str, Any]:
    """`llm.tools.<i>.tool.json_schema`: each offered tool as a function definition (names only for records
    written before the definitions were kept)."""
    specs = surface.specs or [{"name": n} for n in surface.tools]
    return {f"llm.tools.{i}.tool.json_schema": json.dumps(
        {"type": "function", "function": {"name": d["name"], "description": d.get("description"),
                                          "parameters": d.get("input_schema")}}, ensure_ascii=False)
        for i, d in enumerate(specs)}


def record_to_otlp(events: list[Any], *, include_content: bool = True,
                   record_dir: Path | None = None) -> dict[str, Any]:
    """Typed record events → one OTLP/JSON `ExportTraceServiceRequest` object. With `record_dir` (the record
    file's folder) tool outputs are read whole from their blobs; without, the kept prefix is used and flagged."""
    start = next(e for e in events if e.kind == "run_start")
    end = next((e for e in events if e.kind == "run_end"), None)
    run_id = start.run_id
    trace_id = _id(run_id, "trace", 16)
    root_id = _id(run_id, "root", 8)
    provider = genai_provider_name(start.provider, start.config.get("model_endpoint"))
    oi_provider = _OI_PROVIDER.get(provider)
    surfaces = {"extraction": start.tool_surface}
    for e in events:
        if e.kind == "phase_change" and e.chamber_tool_surface is not None:
            surfaces["chamber"] = e.chamber_tool_surface
    budget = start.config.get("budget") or {}
    invocation = {"max_tokens": budget.get("max_output_tokens"), "tool_choice": "auto",
                  **(start.config.get("model_options") or {})}
    turns = conversation(events, record_dir) if include_content else {}
    spans: list[dict[str, Any]] = []
    for e in events:
        if e.kind == "model_turn":
            span_id = _id(run_id, f"turn/{e.turn}", 8)
            u = e.usage
            attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": start.model,
                "gen_ai.request.max_tokens": budget.get("max_output_tokens"),
                "gen_ai.response.model": e.response_model,
                "gen_ai.response.id": e.response_id,  # the provider's response id, not the HTTP request id
                "chamberlab.request_ids": [a.request_id for a in e.attempts if a.request_id] or None,
                "gen_ai.response.finish_reasons": [e.raw_stop_reason or e.stop_reason or "error"],
                "chamberlab.stop_reason": e.stop_reason,
                "gen_ai.usage.input_tokens": u.input_tokens if u else None,
                "gen_ai.usage.output_tokens": u.output_tokens if u else None,
                "gen_ai.usage.cache_read.input_tokens": u.cache_read_input_tokens if u else None,
                "gen_ai.usage.cache_creation.input_tokens": u.cache_creation_input_tokens if u else None,
                "gen_ai.usage.reasoning.output_tokens": u.reasoning_output_tokens if u else None,
                "openinference.span.kind": "LLM",
                "llm.model_name": start.model,
                "llm.provider": oi_provider,
                "llm.system": oi_provider,
                "llm.invocation_parameters": json.dumps(invocation, ensure_ascii=False),
                "llm.token_count.prompt": u.input_tokens if u else None,
                "llm.token_count.completion": u.output_tokens if u else None,
                "llm.token_count.total": (u.input_tokens + u.output_tokens)
                if u and u.input_tokens is not None and u.output_tokens is not None else None,
                "llm.token_count.prompt_details.cache_read": u.cache_read_input_tokens if u else None,
                "llm.token_count.prompt_details.cache_write": u.cache_creation_input_tokens if u else None,
                "llm.token_count.completion_details.reasoning": u.reasoning_output_tokens if u else None,
                "session.id": run_id,
                "chamberlab.phase": e.phase,
                "chamberlab.offered_tools": list(e.offered_tools),
                "chamberlab.retries": e.retries,
                "http.response.status_code": e.http_status,
                **_oi_tools(surfaces.get(e.phase, start.tool_surface)),
            }
            if include_content:
                sent, answer = turns[e.seq]
                attrs.update(_oi_messages("llm.input_messages", sent))
                attrs["input.value"] = json.dumps(sent[-1], ensure_ascii=False)
                attrs["input.mime_type"] = "application/json"
                if answer is not None:
                    attrs.update(_oi_messages("llm.output_messages", [answer]))
                    attrs["output.value"] = json.dumps(answer, ensure_ascii=False)
                    attrs["output.mime_type"] = "application/json"
                attrs["chamberlab.reasoning"] = e.reasoning or None
            spans.append({
                "traceId": trace_id, "spanId": span_id, "parentSpanId": root_id,
                "name": f"chat {start.model}", "kind": 3,  # CLIENT
                "startTimeUnixNano": _ns(e.t - e.latency_ms / 1000.0), "endTimeUnixNano": _ns(e.t),
                "attributes": _attrs({**attrs, "error.type": _turn_error_type(e)}),
                "status": {"code": 2, "message": "; ".join(e.errors)} if e.stop_reason is None else {"code": 1},
            })
        elif e.kind == "tool_call":
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": e.tool,
                "gen_ai.tool.call.id": e.tool_call_id,
                "gen_ai.tool.type": "function",
                "openinference.span.kind": "TOOL",
                "tool.name": e.tool,
                "tool_call.id": e.tool_call_id,
                "session.id": run_id,
                "chamberlab.phase": e.phase,
                "chamberlab.tool.status": e.status,
                "chamberlab.tool.output_bytes": e.output_bytes,
                "chamberlab.tool.output_sha256": e.output_sha256,
                "error.type": (e.error_type or e.status) if e.status != "ok" else None,
            }
            truncated = e.output_kept_bytes < e.output_bytes
            if include_content:
                text, truncated = tool_output_text(e, record_dir)
                args = json.dumps(e.arguments, ensure_ascii=False)
                attrs.update({"gen_ai.tool.call.arguments": args, "gen_ai.tool.call.result": text,
                              "input.value": args, "input.mime_type": "application/json", "output.value": text})
            # Cut output is flagged, never silent: the kept and whole sizes, and the blob holding all of it.
            attrs["chamberlab.tool.output_truncated"] = truncated
            attrs["chamberlab.tool.output_kept_bytes"] = e.output_bytes if not truncated else e.output_kept_bytes
            attrs["chamberlab.tool.blob"] = e.blob
            # A tool runs after the model turn that asked for it has ended, so it is the agent's child (a
            # sibling of that chat span), not a child that would start after its parent ended.
            spans.append({
                "traceId": trace_id, "spanId": _id(run_id, f"tool/{e.tool_call_id}/{e.seq}", 8),
                "parentSpanId": root_id,
                "name": f"execute_tool {e.tool}", "kind": 1,  # INTERNAL
                "startTimeUnixNano": _ns(e.start), "endTimeUnixNano": _ns(e.end),
                "attributes": _attrs(attrs),
                "status": {"code": 1} if e.status == "ok" else {"code": 2, "message": e.status},
            })
    root_attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "chamberlab-extractor",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": start.model,
        "openinference.span.kind": "AGENT",
        "session.id": run_id,
        "chamberlab.claim_id": start.claim_id,
        "chamberlab.tool_surface.sha256": start.tool_surface.sha256,
        "chamberlab.outcome": end.outcome if end else "incomplete",
        "chamberlab.extraction_sha256": end.extraction_sha256 if end else None,
    }
    if end is not None:
        root_attrs.update({
            "gen_ai.usage.input_tokens": end.usage.input_tokens, "gen_ai.usage.output_tokens": end.usage.output_tokens,
            "llm.token_count.prompt": end.usage.input_tokens, "llm.token_count.completion": end.usage.output_tokens,
        })
    if include_content:
        root_attrs["input.value"] = start.first_user_message
        if end is not None and end.extraction is not None:
            root_attrs["output.value"] = json.dumps(end.extraction, ensure_ascii=False)
            root_attrs["output.mime_type"] = "application/json"
    root = {
        "traceId": trace_id, "spanId": root_id, "name": "invoke_agent chamberlab-extractor", "kind": 1,
        "startTimeUnixNano": _ns(start.t), "endTimeUnixNano": _ns(end.t if end else events[-1].t),
        "attributes": _attrs(root_attrs),
        "status": {"code": 1} if end is not None and end.outcome == "submitted" else {"code": 2, "message": end.outcome if end else "incomplete"},
    }
    return {"resourceSpans": [{
        "resource": {"attributes": _attrs({"service.name": "chamberlab-agent"})},
        "scopeSpans": [{"scope": {"name": "chamberlab.agent.record", "version": "2"}, "spans": [root, *spans]}],
    }]}


# --------------------------------------------------------------------------------------------- OTLP/HTTP protobuf
def _hex_ids_to_base64(span: dict[str, Any]) -> dict[str, Any]:
    """OTLP/JSON writes ids as hex, proto3's JSON mapping of `bytes` as base64: convert before ParseDict."""
    out = dict(span)
    for key in ("traceId", "spanId", "parentSpanId"):
        if out.get(key):
            out[key] = base64.b64encode(bytes.fromhex(out[key])).decode("ascii")
    return out


def otlp_json_to_proto(data: dict[str, Any]) -> Any:
    """An OTLP/JSON ExportTraceServiceRequest → opentelemetry-proto's ExportTraceServiceRequest message."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    converted = {"resourceSpans": [
        {**rs, "scopeSpans": [{**ss, "spans": [_hex_ids_to_base64(sp) for sp in ss["spans"]]}
                              for ss in rs["scopeSpans"]]} for rs in data["resourceSpans"]]}
    return json_format.ParseDict(converted, ExportTraceServiceRequest())


def otlp_requests(data: dict[str, Any], *, max_bytes: int = MAX_REQUEST_BYTES) -> list[bytes]:
    """The serialised protobuf requests carrying every span of `data`, split so each stays under `max_bytes`
    (receivers cap request sizes; a split is lossless, unlike cutting attributes). A single span larger than
    the cap goes alone, whole."""
    message = otlp_json_to_proto(data)
    out: list[bytes] = []
    for rs in message.resource_spans:
        for ss in rs.scope_spans:
            batch: list[Any] = []
            size = 0
            for span in ss.spans:
                n = span.ByteSize()
                if batch and size + n > max_bytes:
                    out.append(_one_request(rs, ss, batch))
                    batch, size = [], 0
                batch.append(span)
                size += n
            if batch:
                out.append(_one_request(rs, ss, batch))
    return out


def _one_request(rs: Any, ss: Any, spans: list[Any]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    r = req.resource_spans.add()
    r.resource.CopyFrom(rs.resource)
    s = r.scope_spans.add()
    s.scope.CopyFrom(ss.scope)
    s.spans.extend(spans)
    return req.SerializeToString()


class OtlpExportError(RuntimeError):
    """The receiver refused a trace request: carries the endpoint, HTTP status and the receiver's words."""


def otlp_traces_endpoint(endpoint: str | None, env: Mapping[str, str]) -> str | None:
    """Where traces go: an explicit endpoint (a base URL gets `/v1/traces`), else the standard
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is), else OTEL_EXPORTER_OTLP_ENDPOINT + `/v1/traces`; None
    when none is set (no export)."""
    if endpoint:
        return endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    return None


def otlp_headers(env: Mapping[str, str]) -> dict[str, str]:
    """OTEL_EXPORTER_OTLP_HEADERS / _TRACES_HEADERS (`k=v,k2=v2`, values URL-encoded), as the spec defines."""
    headers: dict[str, str] = {}
    for var in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        for item in (env.get(var) or "").split(","):
            if "=" in item:
                k, v = item.split("=", 1)
                headers[k.strip()] = unquote(v.strip())
    return headers


def send_otlp(record_path: Path, endpoint: str, *, http: httpx.Client, headers: Mapping[str, str] | None = None,
              include_content: bool = True, max_bytes: int = MAX_REQUEST_BYTES) -> dict[str, Any]:
    """Post one record's trace to an OTLP/HTTP receiver as protobuf; returns {endpoint, trace_id, spans,
    requests}. A refusal (non-2xx) or partial success raises OtlpExportError: an export that did not land is
    never reported as sent."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    record_path = Path(record_path)
    data = record_to_otlp(read_record(record_path), include_content=include_content, record_dir=record_path.parent)
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
    requests = otlp_requests(data, max_bytes=max_bytes)
    for body in requests:
        r = http.post(endpoint, content=body,
                      headers={"Content-Type": "application/x-protobuf", **dict(headers or {})})
        if not 200 <= r.status_code < 300:
            raise OtlpExportError(f"OTLP receiver {endpoint} answered HTTP {r.status_code}: {r.text[:300]}")
        if r.content and r.headers.get("content-type", "").startswith("application/x-protobuf"):
            reply = ExportTraceServiceResponse.FromString(r.content)
            if reply.partial_success.rejected_spans:
                raise OtlpExportError(f"OTLP receiver {endpoint} rejected {reply.partial_success.rejected_spans} "
                                      f"span(s): {reply.partial_success.error_message}")
    return {"endpoint": endpoint, "trace_id": spans[0]["traceId"], "spans": len(spans), "requests": len(requests)}


def export_otlp(record_path: Path, out_path: Path, *, include_content: bool = True) -> Path:
    """Write the OTLP/JSON export of one record file; returns out_path."""
    data = record_to_otlp(read_record(Path(record_path)), include_content=include_content,
                          record_dir=Path(record_path).parent)
    Path(out_path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return Path(out_path)
