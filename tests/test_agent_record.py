"""The record schema and its invariants, and the OTLP export."""

from __future__ import annotations

import json

import pytest

from agent.otlp import record_to_otlp
from agent.record import (
    ModelTurnEvent,
    PhaseChange,
    RecordError,
    RecordWriter,
    RunEnd,
    RunStart,
    TokenUsage,
    ToolCallEvent,
    ToolSurface,
    read_record,
    validate_record,
)
from support import SteppingClock


def _write_run(tmp_path, chamber_call_before_freeze=False):
    w = RecordWriter(tmp_path, "run-1", SteppingClock(1_800_000_000.0, step=0.5))
    surface = ToolSurface(name="s", version="1", sha256="0" * 64, tools=["search_text", "submit_extraction"])
    w.write(RunStart, claim_id="c", model="m", provider="p", transport="t", system_prompt="sys",
            first_user_message="u", tool_surface=surface, datasheet={}, config={})
    w.write(ModelTurnEvent, turn=1, phase="extraction", offered_tools=surface.tools, tool_choice="auto",
            stop_reason="tool_use", usage=TokenUsage(input_tokens=10, output_tokens=3), latency_ms=5.0)

    def call(tool, phase, call_id):
        blob, digest, size = w.store_blob(f"output of {tool}")
        w.write(ToolCallEvent, tool_call_id=call_id, turn=1, phase=phase, tool=tool, arguments={}, status="ok",
                output_text=f"output of {tool}", output_bytes=size, output_kept_bytes=size, output_sha256=digest,
                blob=blob, start=1.0, end=1.5, duration_ms=500.0)

    call("search_text", "extraction", "t1")
    if chamber_call_before_freeze:
        call("read_sensor", "extraction", "t2")
    w.write(PhaseChange, to_phase="chamber", extraction_sha256="a" * 64, extraction={"value": 1},
            chamber_tool_surface=ToolSurface(name="c", version="1", sha256="1" * 64, tools=["read_sensor"]))
    call("read_sensor", "chamber", "t3")
    w.write(RunEnd, outcome="submitted", phase="chamber", phase_two="completed", turns=1,
            usage=TokenUsage(input_tokens=10, output_tokens=3), tool_time_s=1.0, wall_s=3.0)
    w.close()
    return w.path


def test_a_complete_record_validates_and_round_trips(tmp_path):
    events = validate_record(_write_run(tmp_path))
    assert [e.kind for e in events] == ["run_start", "model_turn", "tool_call", "phase_change", "tool_call", "run_end"]
    assert [e.seq for e in events] == list(range(6))


def test_a_chamber_tool_run_before_the_freeze_is_rejected(tmp_path):
    with pytest.raises(RecordError, match="before the phase_change"):
        validate_record(_write_run(tmp_path, chamber_call_before_freeze=True))


def test_schema_violations_name_the_line(tmp_path):
    path = _write_run(tmp_path)
    lines = path.read_text().splitlines()
    bad = json.loads(lines[2])
    bad["status"] = "maybe"
    path.write_text("\n".join(lines[:2] + [json.dumps(bad)] + lines[3:]) + "\n")
    with pytest.raises(RecordError, match=r"run-1.jsonl:3"):
        read_record(path)


def test_a_tampered_blob_is_detected(tmp_path):
    path = _write_run(tmp_path)
    blob = next((tmp_path / "run-1.blobs").iterdir())
    blob.write_text("something else")
    with pytest.raises(RecordError, match="does not match"):
        validate_record(path)


def test_a_run_without_run_end_is_reported_as_cut_short(tmp_path):
    path = _write_run(tmp_path)
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(RecordError, match="cut short"):
        validate_record(path)


def test_otlp_export_carries_genai_and_openinference_attributes(tmp_path):
    events = validate_record(_write_run(tmp_path))
    spans = record_to_otlp(events)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    attrs = [{a["key"]: a["value"] for a in s["attributes"]} for s in spans]
    root, turn, tool = spans[0], spans[1], spans[2]
    assert attrs[0]["openinference.span.kind"] == {"stringValue": "AGENT"}
    assert turn["parentSpanId"] == root["spanId"] and attrs[1]["gen_ai.usage.input_tokens"] == {"intValue": "10"}
    assert attrs[1]["llm.token_count.total"] == {"intValue": "13"}
    # the tool runs after its chat span ended: a sibling under the agent span, never a child outliving its parent
    assert tool["name"] == "execute_tool search_text" and tool["parentSpanId"] == root["spanId"]
    assert attrs[2]["chamberlab.tool.output_truncated"] == {"boolValue": False}
    assert attrs[2]["gen_ai.tool.call.id"] == {"stringValue": "t1"}
    assert attrs[2]["openinference.span.kind"] == {"stringValue": "TOOL"}
    assert attrs[2]["tool.name"] == {"stringValue": "search_text"}
    assert len({s["traceId"] for s in spans}) == 1 and len(root["traceId"]) == 32
    assert int(tool["endTimeUnixNano"]) - int(tool["startTimeUnixNano"]) == 500_000_000


def test_otlp_flags_a_cut_tool_output_and_types_a_failed_turn(tmp_path):
    from agent.record import Attempt, ModelTurnEvent, ToolCallEvent

    events = validate_record(_write_run(tmp_path))
    tool = next(e for e in events if e.kind == "tool_call")
    cut = ToolCallEvent(**{**tool.model_dump(), "output_bytes": 9000, "output_kept_bytes": 4096})
    failed = ModelTurnEvent(run_id=tool.run_id, seq=99, t=tool.t, turn=1, phase="extraction", offered_tools=[],
                            tool_choice="auto", stop_reason=None, latency_ms=5.0, http_status=529,
                            attempts=[Attempt(latency_ms=5.0, http_status=529, error="http HTTP 529: Overloaded")],
                            errors=["http HTTP 529: Overloaded"])
    spans = record_to_otlp([events[0], failed, cut, events[-1]])["resourceSpans"][0]["scopeSpans"][0]["spans"]
    attrs = [{a["key"]: a["value"] for a in s["attributes"]} for s in spans]
    assert attrs[1]["error.type"] == {"stringValue": "529"} and spans[1]["status"]["code"] == 2
    assert attrs[2]["chamberlab.tool.output_truncated"] == {"boolValue": True}
    assert attrs[2]["chamberlab.tool.output_kept_bytes"] == {"intValue": "4096"}
