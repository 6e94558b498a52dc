"""The two-phase loop over the real anthropic SDK and real HTTP (local scripted server), on the real PDFs.

Every record written here is validated against the schema and its invariants (`validate_record`).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from agent.loop import Budget, run_cell
from agent.models.anthropic_client import AnthropicClient
from agent.models.base import ModelClient
from agent.models.scripted import (
    HTTPFailure,
    ScriptedHTTPError,
    ScriptedModel,
    Sequence,
    StopWith,
    call,
    closed_book,
    policy_named,
)
from agent.prompt import project_claim
from agent.record import validate_record
from agent.testserver import serve_scripted
from conftest import shared_path
from support import SteppingClock, reads_the_claim

NAVIGATION = {"build_datasheet", "get_section_text", "inspect_page"}
VERIFICATION = {"search_text", "extract_table_markdown"}


def _pdf(claim) -> Path:
    return shared_path("datasheets", claim.identity.filename)


def _sdk_cell(policy, claim, tmp_path: Path, **kwargs: Any):
    with serve_scripted(policy, project_claim(claim)) as (url, app):
        model = AnthropicClient("scripted-model", api_key="test-key", base_url=url)
        result = run_cell(claim, model=model, datasheet=_pdf(claim), record_dir=tmp_path,
                          clock=kwargs.pop("clock", SteppingClock()), **kwargs)
    events = validate_record(result.record)
    return result, events, app.state.requests


def _tool_calls(events) -> list:
    return [e for e in events if e.kind == "tool_call"]


# --------------------------------------------------------------------------------------------- the reader
def test_reader_extracts_every_dps310_and_si115x_claim_through_the_sdk(claims, tmp_path):
    cells = [c for c in claims.values() if c.component in ("DPS310", "Si115x")]
    assert cells, "no DPS310/Si115x claims loaded"
    wrong = []
    with serve_scripted(policy_named("reader"), project_claim(cells[0])) as (url, app):
        model = AnthropicClient("scripted-reader", api_key="test-key", base_url=url)
        for claim in cells:
            app.state.task = project_claim(claim)  # HTTP carries no claim: the server is told the cell's task
            result = run_cell(claim, model=model, datasheet=_pdf(claim), record_dir=tmp_path, clock=SteppingClock())
            events = validate_record(result.record)
            tools = {e.tool for e in _tool_calls(events)}
            assert result.outcome == "submitted" and result.phase_two == "skipped", (claim.id, result.detail)
            assert {"build_datasheet", "search_text"} <= tools, claim.id
            if not reads_the_claim(claim, result.extraction):
                wrong.append((claim.id, result.extraction))
            turns = [e for e in events if e.kind == "model_turn"]
            assert all(t.http_status == 200 and t.request_id.startswith("req_scripted_") for t in turns)
    assert not wrong, wrong
    # what crossed the wire: tools offered, never an output format, tool choice left to the model
    for body in app.state.requests:
        assert "output_format" not in body and "output_config" not in body and "response_format" not in body
        assert body["tool_choice"] == {"type": "auto"}


def test_reader_quotes_what_it_read(claims, tmp_path):
    claim = claims["dps310-pressure-precision-high"]
    result, events, _ = _sdk_cell(policy_named("reader"), claim, tmp_path)
    quote = result.extraction["quote"]
    # the quote is made of text the tools returned (table cells joined by spaces), not composed from the claim
    outputs = " ".join((tmp_path / e.blob).read_text() for e in _tool_calls(events) if e.tool != "submit_extraction")
    assert all(word in outputs for word in quote.split())
    assert "High Precision" in quote and "0.2" in quote


# --------------------------------------------------------------------------------------------- terminal states
def test_closed_book_submits_without_any_document_tool(claims, tmp_path):
    result, events, _ = _sdk_cell(policy_named("closed-book"), claims["dps310-relative-accuracy"], tmp_path)
    assert result.outcome == "submitted"
    assert [e.tool for e in _tool_calls(events)] == ["submit_extraction"]  # the record shows the bypass


def test_skip_search_navigates_but_never_verifies(claims, tmp_path):
    result, events, _ = _sdk_cell(policy_named("skip-search"), claims["si115x-processing-time"], tmp_path)
    tools = [e.tool for e in _tool_calls(events)]
    assert result.outcome == "submitted"
    assert NAVIGATION & set(tools) and not VERIFICATION & set(tools)
    page_call = next(e for e in _tool_calls(events) if e.tool == "inspect_page")
    assert page_call.attachments and page_call.attachments[0]["mime_type"] == "image/png"
    assert (tmp_path / page_call.attachments[0]["blob"]).stat().st_size == page_call.attachments[0]["bytes"]


@pytest.mark.parametrize("policy, outcome", [
    ("no-submit", "end_turn_without_submit"),
    ("markup", "tool_call_as_text"),  # a call written as text: a serving-stack outcome of its own (issue 26)
    ("max-tokens", "max_tokens"),
    ("refusal", "refusal"),
    ("context-exceeded", "context_exceeded"),
])
def test_each_stop_reason_is_an_engine_outcome(policy, outcome, claims, tmp_path):
    result, events, _ = _sdk_cell(policy_named(policy), claims["dps310-meas-time-standard"], tmp_path)
    assert result.outcome == outcome and result.extraction is None
    end = events[-1]
    assert end.kind == "run_end" and end.outcome == outcome and end.phase_two == "not_reached"
    if policy == "markup":  # the tool call exists only as text: no tool_call event at all
        assert "<tool_call>" in [e for e in events if e.kind == "model_turn"][-1].text
        assert not _tool_calls(events)


def test_pause_turn_is_continued_with_the_assistant_content(claims, tmp_path):
    policy = Sequence(StopWith("pause_turn", "searching..."), closed_book)
    result, events, requests = _sdk_cell(policy, claims["dps310-meas-time-standard"], tmp_path)
    assert result.outcome == "submitted"
    assert requests[1]["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "searching..."}]}


def test_endless_pause_turn_ends_at_max_turns(claims, tmp_path):
    result, events, _ = _sdk_cell(policy_named("pause-turn"), claims["dps310-meas-time-standard"], tmp_path,
                                  budget=Budget(max_turns=4))
    assert result.outcome == "max_turns"
    assert len([e for e in events if e.kind == "model_turn"]) == 4


def test_http_errors_are_retried_a_bounded_number_of_times(claims, tmp_path):
    result, events, requests = _sdk_cell(HTTPFailure(503, "overloaded"), claims["dps310-meas-time-standard"],
                                         tmp_path, budget=Budget(retries_per_turn=2))
    assert result.outcome == "engine_error" and len(requests) == 3
    turn = [e for e in events if e.kind == "model_turn"][0]
    assert turn.stop_reason is None and turn.retries == 2 and turn.http_status == 503 and len(turn.errors) == 3


def test_a_transient_429_is_retried_and_recorded(claims, tmp_path):
    calls = itertools.count()

    def flaky_once(conv):
        if next(calls) == 0:
            raise ScriptedHTTPError(429, "slow down", "rate_limit_error")
        return closed_book(conv)

    result, events, _ = _sdk_cell(flaky_once, claims["dps310-meas-time-standard"], tmp_path)
    turn = [e for e in events if e.kind == "model_turn"][0]
    assert result.outcome == "submitted" and turn.retries == 1 and "429" in turn.errors[0]


def test_prompt_too_long_is_context_exceeded(claims, tmp_path):
    policy = HTTPFailure(400, "prompt is too long: 250000 tokens > 200000 maximum", "invalid_request_error")
    result, _, requests = _sdk_cell(policy, claims["dps310-meas-time-standard"], tmp_path)
    assert result.outcome == "context_exceeded" and len(requests) == 1  # a 400 is never retried


def test_wall_time_budget_ends_the_cell_as_timeout(claims, tmp_path):
    result, events, _ = _sdk_cell(policy_named("reader"), claims["dps310-meas-time-standard"], tmp_path,
                                  clock=SteppingClock(step=10.0), budget=Budget(wall_s=60.0))
    assert result.outcome == "timeout" and result.extraction is None


def test_token_budget_ends_the_cell(claims, tmp_path):
    result, _, _ = _sdk_cell(policy_named("reader"), claims["dps310-meas-time-standard"], tmp_path,
                             budget=Budget(max_total_tokens=500))
    assert result.outcome == "max_tokens" and "token budget" in result.detail


def test_max_turns(claims, tmp_path):
    result, _, _ = _sdk_cell(policy_named("reader"), claims["dps310-meas-time-standard"], tmp_path,
                             budget=Budget(max_turns=2))
    assert result.outcome == "max_turns" and result.turns == 2


def test_unreachable_model_server_is_an_engine_error(claims, tmp_path):
    with serve_scripted(closed_book, project_claim(claims["dps310-meas-time-standard"])) as (url, _):
        pass  # the server is stopped: nothing listens on this port any more
    model = AnthropicClient("m", api_key="k", base_url=url)
    result = run_cell(claims["dps310-meas-time-standard"], model=model, datasheet=_pdf(claims["dps310-meas-time-standard"]),
                      record_dir=tmp_path, clock=SteppingClock(), budget=Budget(retries_per_turn=1))
    events = validate_record(result.record)
    assert result.outcome == "engine_error" and "connection" in events[-1].detail


def test_a_tool_not_offered_in_this_phase_is_denied(claims, tmp_path):
    def wrong_phase(conv):
        if conv.assistant_turns == 0:
            return call(conv, "read_sensor", {"variable": "pressure_upwind"})
        return closed_book(conv)

    result, events, requests = _sdk_cell(wrong_phase, claims["dps310-meas-time-standard"], tmp_path)
    denied = _tool_calls(events)[0]
    assert denied.status == "denied" and denied.phase == "extraction" and denied.tool == "read_sensor"
    assert result.outcome == "submitted"
    result_block = requests[1]["messages"][-1]["content"][0]
    assert result_block["is_error"] is True and "not offered" in result_block["content"]


def test_invalid_submission_is_an_error_the_model_can_fix(claims, tmp_path):
    def bad_then_good(conv):
        if conv.assistant_turns == 0:
            return call(conv, "submit_extraction", {"unit": "ms", "page": 9, "quote": "x"})
        return closed_book(conv)

    result, events, _ = _sdk_cell(bad_then_good, claims["dps310-meas-time-standard"], tmp_path)
    calls = _tool_calls(events)
    assert [c.status for c in calls] == ["error", "ok"] and calls[0].error_type == "ValidationError"
    assert result.outcome == "submitted"


# --------------------------------------------------------------------------------------------- record contents
def test_record_run_start_and_turns_carry_what_was_sent(claims, tmp_path):
    claim = claims["si115x-supply-ripple"]
    result, events, requests = _sdk_cell(policy_named("reader"), claim, tmp_path)
    start = events[0]
    assert start.system_prompt == requests[0]["system"]
    assert start.first_user_message == requests[0]["messages"][0]["content"][0]["text"]
    assert start.provider == "anthropic" and start.transport == "anthropic-sdk"
    assert len(start.tool_surface.sha256) == 64 and "submit_extraction" in start.tool_surface.tools
    turns = [e for e in events if e.kind == "model_turn"]
    assert len(turns) == len(requests)
    for turn, body in zip(turns, requests):
        assert turn.offered_tools == [t["name"] for t in body["tools"]]
        assert turn.usage.input_tokens > 0
    calls = _tool_calls(events)
    ids = [c.tool_call_id for c in calls]
    assert len(ids) == len(set(ids))
    for c in calls:
        blob = (tmp_path / c.blob).read_text()
        assert len(blob.encode()) == c.output_bytes and blob.startswith(c.output_text[:100])
        assert c.end >= c.start and c.duration_ms >= 0
    phase = next(e for e in events if e.kind == "phase_change")
    assert phase.to_phase is None and phase.extraction_sha256 == result.extraction_sha256


def test_in_process_scripted_client_matches_the_sdk_path(claims, tmp_path):
    claim = claims["dps310-pressure-rate-range"]
    sdk, _, _ = _sdk_cell(policy_named("reader"), claim, tmp_path / "sdk")
    local = run_cell(claim, model=ScriptedModel(policy_named("reader"), "scripted:reader"), datasheet=_pdf(claim),
                     record_dir=tmp_path / "local", clock=SteppingClock())
    validate_record(local.record)
    assert local.extraction == sdk.extraction and local.extraction_sha256 == sdk.extraction_sha256


def test_records_are_flushed_line_by_line(claims, tmp_path):
    """A cell cut short by an exception in the model client still leaves a valid record ending in run_end."""

    class Exploding(ModelClient):
        provider, transport, model = "test", "in-process", "exploding"

        def complete(self, request):
            raise RuntimeError("client bug")

    claim = claims["dps310-meas-time-standard"]
    result = run_cell(claim, model=Exploding(), datasheet=_pdf(claim), record_dir=tmp_path, clock=SteppingClock())
    events = validate_record(result.record)
    assert result.outcome == "engine_error" and "client bug" in events[-1].detail
    lines = result.record.read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["run_start", "model_turn", "run_end"]
