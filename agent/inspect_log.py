"""Export dispatch records as inspect-ai eval logs (the `.json` log format), one log per model.

Why: inspect-ai's log viewer and its analysis tools (`read_eval_log`, `samples_df`) are where many researchers
already look at agent runs. Each record becomes one sample: the conversation rebuilt from the record (tool
outputs whole, from the blobs), a ModelEvent per turn (input, offered tools, output with usage, request ids,
retries, error) and a ToolEvent per call (arguments, result, typed error, truncation as (raw bytes, kept bytes)
only when a blob is missing). Nothing here imports inspect-ai: the log is plain JSON in its schema, and the
tests check it with inspect-ai's own reader.

Usage follows inspect-ai's convention, which differs from the record's: its `input_tokens` excludes cache reads
and writes (the record's includes them) and `total_tokens` adds all four. A turn whose usage the provider did
not report has no usage in the log (inspect-ai has no "unknown" count) and says so in its metadata.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agent.otlp import conversation, tool_message, tool_output_text
from agent.record import read_record

LOG_VERSION = 2
TASK = "chamberlab-extraction"

_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "max_tokens", "context_exceeded": "model_length",
         "tool_use": "tool_calls", "refusal": "content_filter"}
_TOOL_ERROR = {"denied": "permission", "InvalidArgument": "parsing", "ValidationError": "parsing",
               "PermissionError": "permission"}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat()


def inspect_usage(u: Any) -> dict[str, Any] | None:
    """The record's TokenUsage → inspect-ai's ModelUsage, or None when input or output is unknown."""
    if u is None or u.input_tokens is None or u.output_tokens is None:
        return None
    read, write = u.cache_read_input_tokens, u.cache_creation_input_tokens
    return {"input_tokens": u.input_tokens - (read or 0) - (write or 0), "output_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens, "input_tokens_cache_read": read,
            "input_tokens_cache_write": write, "reasoning_tokens": u.reasoning_output_tokens}


def _message(m: dict[str, Any], model: str, tool_errors: dict[str, dict]) -> dict[str, Any]:
    if m["role"] == "assistant":
        return {"role": "assistant", "content": m["content"], "model": model, "source": "generate",
                "tool_calls": [{"id": c["id"], "function": c["name"], "arguments": c.get("arguments") or {},
                                "type": "function"} for c in m.get("tool_calls") or []] or None}
    if m["role"] == "tool":
        return {"role": "tool", "content": m["content"], "tool_call_id": m["tool_call_id"], "function": m["name"],
                "error": tool_errors.get(m["tool_call_id"])}
    return {"role": m["role"], "content": m["content"]}


def _tool_info(spec: dict[str, Any]) -> dict[str, Any]:
    schema = spec.get("input_schema") or {}
    return {"name": spec["name"], "description": spec.get("description") or "",
            "parameters": {"type": "object", "properties": schema.get("properties") or {},
                           "required": schema.get("required") or [],
                           "additionalProperties": schema.get("additionalProperties", False)}}


def record_to_sample(record_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """One record file → (an EvalSample as JSON, facts for the log header: model, times, usage)."""
    record_path = Path(record_path)
    events = read_record(record_path)
    start = next(e for e in events if e.kind == "run_start")
    end = next((e for e in events if e.kind == "run_end"), None)
    model = f"{start.provider}/{start.model}"
    turns = conversation(events, record_path.parent)
    tool_errors = {e.tool_call_id: {"type": _TOOL_ERROR.get(e.error_type or e.status, "unknown"),
                                    "message": e.output_text[:2000]}
                   for e in events if e.kind == "tool_call" and e.status != "ok"}
    surfaces = {"extraction": start.tool_surface}
    budget = start.config.get("budget") or {}
    sample_events: list[dict[str, Any]] = []
    last_output: dict[str, Any] | None = None
    for e in events:
        if e.kind == "phase_change" and e.chamber_tool_surface is not None:
            surfaces["chamber"] = e.chamber_tool_surface
        elif e.kind == "model_turn":
            sent, answer = turns[e.seq]
            usage = inspect_usage(e.usage)
            output: dict[str, Any] = {"model": e.response_model or start.model, "response_id": e.response_id,
                                      "time": e.latency_ms / 1000.0, "usage": usage,
                                      "metadata": {"raw_stop_reason": e.raw_stop_reason,
                                                   "upstream_stop_reason": e.upstream_stop_reason,
                                                   "usage_reported": usage is not None}}
            if answer is not None:
                output["choices"] = [{"message": _message(answer, start.model, tool_errors),
                                      "stop_reason": _STOP.get(e.stop_reason or "", "unknown")}]
                last_output = output
            else:
                output["choices"] = []
                output["error"] = "; ".join(e.errors)
            surface = surfaces.get(e.phase, start.tool_surface)
            sample_events.append({
                "event": "model", "timestamp": _iso(e.t - e.latency_ms / 1000.0), "completed": _iso(e.t),
                "working_start": e.t - e.latency_ms / 1000.0 - start.t, "working_time": e.latency_ms / 1000.0,
                "model": model, "input": [_message(m, start.model, tool_errors) for m in sent],
                "tools": [_tool_info(s) for s in surface.specs] or
                         [{"name": n, "description": "", "parameters": {"type": "object", "properties": {}}}
                          for n in e.offered_tools],
                "tool_choice": "auto", "config": {"max_tokens": budget.get("max_output_tokens")},
                "output": output, "retries": e.retries,
                "request_ids": [{"id": a.request_id, "status": a.http_status} for a in e.attempts if a.request_id]
                or None,
                "error": "; ".join(e.errors) if e.stop_reason is None else None,
                "metadata": {"turn": e.turn, "phase": e.phase},
            })
        elif e.kind == "tool_call":
            text, cut = tool_output_text(e, record_path.parent)
            sample_events.append({
                "event": "tool", "type": "function", "id": e.tool_call_id, "function": e.tool,
                "arguments": e.arguments, "result": text, "error": tool_errors.get(e.tool_call_id),
                "truncated": [e.output_bytes, e.output_kept_bytes] if cut else None,
                "timestamp": _iso(e.start), "completed": _iso(e.end), "working_start": e.start - start.t,
                "working_time": e.duration_ms / 1000.0,
                "metadata": {"phase": e.phase, "status": e.status, "blob": e.blob, "attachments": e.attachments},
            })
    messages = []
    if turns:
        last_sent, last_answer = turns[max(turns)]
        messages = last_sent + ([last_answer] if last_answer is not None else [])
    messages += [m for m in _trailing_tool_messages(events, record_path.parent, turns)]
    total = inspect_usage(end.usage) if end is not None else None
    outcome = end.outcome if end is not None else "incomplete"
    sample = {
        "id": start.run_id, "epoch": 1, "input": start.first_user_message, "target": "",
        "messages": [_message(m, start.model, tool_errors) for m in messages],
        "output": last_output or {"model": start.model, "choices": []},
        "scores": {"outcome": {"value": outcome, "answer": json.dumps(end.extraction) if end and end.extraction else None,
                               "explanation": end.detail if end else "no run_end: the run was cut short"}},
        "metadata": {"claim_id": start.claim_id, "outcome": outcome, "phase_two": end.phase_two if end else None,
                     "extraction": end.extraction if end else None,
                     "extraction_sha256": end.extraction_sha256 if end else None,
                     "chamber_outcome": end.chamber_outcome if end else None,
                     "tool_surface_sha256": start.tool_surface.sha256, "record": str(record_path),
                     "usage_reported": total is not None},
        "events": sample_events,
        "model_usage": {model: total} if total is not None else {},
        "total_time": end.wall_s if end else None, "working_time": end.wall_s if end else None,
        "uuid": start.run_id,
    }
    facts = {"model": model, "start": start.t, "end": end.t if end else events[-1].t, "usage": total,
             "config": start.config, "model_name": start.model}
    return sample, facts


def _trailing_tool_messages(events: list[Any], record_dir: Path, turns: dict) -> list[dict[str, Any]]:
    """Tool results after the last model turn (the run ended on a submit): part of the conversation too."""
    last_turn_seq = max(turns) if turns else -1
    return [tool_message(e, tool_output_text(e, record_dir)[0]) for e in events
            if e.kind == "tool_call" and e.seq > last_turn_seq]


def _add(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    if a is None:
        return dict(b)
    out = {}
    for k in set(a) | set(b):
        x, y = a.get(k), b.get(k)
        out[k] = None if x is None and y is None else (x or 0) + (y or 0)
    return out


def records_to_eval_logs(record_paths: list[Path], *, task: str = TASK) -> dict[str, dict[str, Any]]:
    """Records → {model: EvalLog as JSON}; samples in the order given."""
    by_model: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for p in record_paths:
        sample, facts = record_to_sample(Path(p))
        by_model[facts["model"]].append((sample, facts))
    logs = {}
    for model, items in by_model.items():
        usage: dict[str, Any] | None = None
        for _, f in items:
            if f["usage"] is not None:
                usage = _add(usage, f["usage"])
        started = min(f["start"] for _, f in items)
        completed = max(f["end"] for _, f in items)
        outcomes = defaultdict(int)
        for s, _ in items:
            outcomes[s["metadata"]["outcome"]] += 1
        logs[model] = {
            "version": LOG_VERSION, "status": "success",
            "eval": {"task": task, "task_id": task, "run_id": items[0][0]["id"], "created": _iso(started),
                     "model": model, "dataset": {"name": "chamberlab-claims", "samples": len(items),
                                                 "sample_ids": [s["id"] for s, _ in items]},
                     "config": {}, "metadata": {"source": "chamberlab dispatch records"}},
            "plan": {"name": "chamberlab-two-phase-loop", "steps": [{"solver": "chamberlab.agent.loop", "params": {}}]},
            "results": {"total_samples": len(items), "completed_samples": len(items),
                        "scores": [{"name": "outcome", "scorer": "outcome", "params": {},
                                    "metrics": {}, "metadata": {"counts": dict(outcomes)}}]},
            "stats": {"started_at": _iso(started), "completed_at": _iso(completed),
                      "model_usage": {model: usage} if usage is not None else {}},
            "samples": [s for s, _ in items],
        }
    return logs


def export_eval_logs(record_paths: list[Path], out_dir: Path, *, task: str = TASK) -> list[Path]:
    """Write one `<task>_<model>.json` inspect-ai eval log per model under out_dir; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for model, log in records_to_eval_logs(record_paths, task=task).items():
        safe = "".join(ch if ch.isalnum() or ch in "-._" else "-" for ch in model)
        path = out_dir / f"{task}_{safe}.json"
        path.write_text(json.dumps(log, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
        paths.append(path)
    return paths
