"""Export a dispatch record as OTLP/JSON spans, with OpenTelemetry GenAI and OpenInference attributes both.

Why both: Langfuse and generic OTLP back ends read the GenAI semantic conventions (`execute_tool {tool}`,
`gen_ai.*`), Phoenix reads OpenInference (`openinference.span.kind`, `tool.name`, `llm.token_count.*`). One
record, one trace: an AGENT root span for the cell, an LLM span per model turn, a TOOL span per tool call.
Ids are derived from the run id, so exporting the same record twice gives the same trace.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agent.record import read_record


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


def record_to_otlp(events: list[Any], *, include_content: bool = True) -> dict[str, Any]:
    """Typed record events → one OTLP/JSON `ExportTraceServiceRequest` object."""
    start = next(e for e in events if e.kind == "run_start")
    end = next((e for e in events if e.kind == "run_end"), None)
    run_id = start.run_id
    trace_id = _id(run_id, "trace", 16)
    root_id = _id(run_id, "root", 8)
    spans: list[dict[str, Any]] = []
    turn_spans: dict[int, str] = {}
    for e in events:
        if e.kind == "model_turn":
            span_id = _id(run_id, f"turn/{e.turn}", 8)
            turn_spans[e.turn] = span_id
            u = e.usage
            attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": start.provider,
                "gen_ai.request.model": start.model,
                "gen_ai.response.model": e.response_model,
                "gen_ai.response.id": e.response_id,  # the provider's response id, not the HTTP request id
                "chamberlab.request_ids": [a.request_id for a in e.attempts if a.request_id] or None,
                "gen_ai.response.finish_reasons": [e.raw_stop_reason or e.stop_reason or "error"],
                "gen_ai.usage.input_tokens": u.input_tokens if u else None,
                "gen_ai.usage.output_tokens": u.output_tokens if u else None,
                "gen_ai.usage.cache_read.input_tokens": u.cache_read_input_tokens if u else None,
                "gen_ai.usage.reasoning.output_tokens": u.reasoning_output_tokens if u else None,
                "openinference.span.kind": "LLM",
                "llm.model_name": start.model,
                "llm.provider": start.provider,
                "llm.token_count.prompt": u.input_tokens if u else None,
                "llm.token_count.completion": u.output_tokens if u else None,
                "llm.token_count.total": (u.input_tokens + u.output_tokens)
                if u and u.input_tokens is not None and u.output_tokens is not None else None,
                "gen_ai.usage.cache_creation.input_tokens": u.cache_creation_input_tokens if u else None,
                "session.id": run_id,
                "chamberlab.phase": e.phase,
                "chamberlab.offered_tools": list(e.offered_tools),
                "chamberlab.retries": e.retries,
                "http.response.status_code": e.http_status,
            }
            if include_content:
                attrs["output.value"] = e.text or None
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
                "session.id": run_id,
                "chamberlab.phase": e.phase,
                "chamberlab.tool.status": e.status,
                "chamberlab.tool.output_bytes": e.output_bytes,
                "chamberlab.tool.output_sha256": e.output_sha256,
                "error.type": e.error_type if e.status != "ok" else None,
            }
            if include_content:
                args = json.dumps(e.arguments, ensure_ascii=False)
                attrs.update({"gen_ai.tool.call.arguments": args, "gen_ai.tool.call.result": e.output_text,
                              "input.value": args, "output.value": e.output_text})
            # Cut output is flagged, never silent: the kept and whole sizes, and the blob holding all of it.
            attrs["chamberlab.tool.output_truncated"] = e.output_kept_bytes < e.output_bytes
            attrs["chamberlab.tool.output_kept_bytes"] = e.output_kept_bytes
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
        "gen_ai.provider.name": start.provider,
        "gen_ai.request.model": start.model,
        "openinference.span.kind": "AGENT",
        "session.id": run_id,
        "chamberlab.claim_id": start.claim_id,
        "chamberlab.tool_surface.sha256": start.tool_surface.sha256,
        "chamberlab.outcome": end.outcome if end else "incomplete",
        "chamberlab.extraction_sha256": end.extraction_sha256 if end else None,
    }
    if include_content:
        root_attrs["input.value"] = start.first_user_message
        if end is not None and end.extraction is not None:
            root_attrs["output.value"] = json.dumps(end.extraction, ensure_ascii=False)
    root = {
        "traceId": trace_id, "spanId": root_id, "name": "invoke_agent chamberlab-extractor", "kind": 1,
        "startTimeUnixNano": _ns(start.t), "endTimeUnixNano": _ns(end.t if end else events[-1].t),
        "attributes": _attrs(root_attrs),
        "status": {"code": 1} if end is not None and end.outcome == "submitted" else {"code": 2, "message": end.outcome if end else "incomplete"},
    }
    return {"resourceSpans": [{
        "resource": {"attributes": _attrs({"service.name": "chamberlab-agent"})},
        "scopeSpans": [{"scope": {"name": "chamberlab.agent.record", "version": "1"}, "spans": [root, *spans]}],
    }]}


def export_otlp(record_path: Path, out_path: Path, *, include_content: bool = True) -> Path:
    """Write the OTLP/JSON export of one record file; returns out_path."""
    data = record_to_otlp(read_record(Path(record_path)), include_content=include_content)
    Path(out_path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return Path(out_path)
