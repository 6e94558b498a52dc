"""Phase two against the real chamber tools API (protocols.api) over an in-process simulated wind tunnel.

The API runs under uvicorn on 127.0.0.1 exactly as the main job starts it (`running_api`), and the agent reaches
it only through its HTTP client, so these tests hold the agent to the contract the service really keeps: sessions,
the freeze (a second one is 409), every chamber tool 409 before the freeze, refusals as tool errors the model
sees. What reached the service is read back from the API's own per-session record, not from a test double.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import chamber
from agent.chamber_client import ChamberClient, ChamberError
from agent.models.scripted import call, closed_book, policy_named
from agent.record import validate_record
from conftest import shared_path
from protocols.api import running_api
from protocols.api.tools import TOOLS
from protocols.canonical import canonical_json, sha256_hex
from support import engine_error_before_a_turn, scripted_cell

CLAIM = "dps310-relative-accuracy"
TOOL_NAMES = [t.name for t in TOOLS]


@dataclass
class Api:
    client: ChamberClient
    http: httpx.Client
    record_dir: Path

    def requests(self, session_id: str) -> list[tuple[str, str]]:
        """(method, path after /sessions/{id}) of every request the service recorded for the session."""
        lines = (self.record_dir / f"{session_id}.jsonl").read_text(encoding="utf-8").splitlines()
        prefix = f"/sessions/{session_id}"
        return [(e["method"], e["path"].removeprefix(prefix) or "/") for e in map(json.loads, lines)
                if e["kind"] == "request"]

    def tool_requests(self, session_id: str) -> list[str]:
        return [path.removeprefix("/tools/") for _, path in self.requests(session_id) if path.startswith("/tools/")]


@pytest.fixture()
def api(tmp_path, claims) -> Iterator[Api]:
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=11)
    try:
        with running_api({"wt": wt}, record_dir=tmp_path / "api", claims=claims) as url, \
                httpx.Client(base_url=url, timeout=30) as http:
            yield Api(ChamberClient(http), http, tmp_path / "api")
    finally:
        wt.close()


def _cell(claim, policy, api: Api, tmp_path: Path):
    return scripted_cell(claim, policy, api.client, tmp_path / "cells",
                         shared_path("datasheets", claim.identity.filename))[0]


def test_client_follows_the_contract(api):
    client = api.client
    sid = client.create_session(CLAIM)
    early = client.call_tool(sid, "measure", {"n": 1})
    assert not early.ok and early.status == 409 and early.body["error"]["code"] == "extraction_not_frozen"
    payload = {"low": -6, "high": 6}
    assert client.freeze_extraction(sid, payload) == sha256_hex(canonical_json(payload))
    with pytest.raises(ChamberError) as e:
        client.freeze_extraction(sid, {"low": -1, "high": 1})
    assert e.value.status == 409 and e.value.code == "extraction_already_frozen"
    assert api.http.get(f"/sessions/{sid}/extraction").json()["payload"] == payload  # the first freeze stands
    assert [t.name for t in client.list_tools()] == TOOL_NAMES
    ok = client.call_tool(sid, "measure", {"n": 3, "variables": ["pressure_upwind"]})
    assert ok.ok and ok.body["variables"]["pressure_upwind"]["n"] == 3
    assert api.tool_requests(sid) == ["measure", "measure"]  # the refused early call is on the record too


def test_unknown_session_is_404_and_an_ended_session_refuses_tools(api):
    client = api.client
    missing = client.call_tool("no-such-session", "measure", {"n": 1})
    assert missing.status == 404 and missing.body["error"]["code"] == "unknown_session"
    sid = client.create_session(CLAIM)
    client.freeze_extraction(sid, {"value": 1})
    done = client.call_tool(sid, "submit_chamber_outcome", {"prediction": "inconclusive", "summary": "x"})
    assert done.ok and done.body["ended"] is True
    late = client.call_tool(sid, "measure", {"n": 1})
    assert late.status == 409 and late.body["error"]["code"] == "session_ended"


def test_reader_runs_both_phases(claims, api, tmp_path):
    result = _cell(claims[CLAIM], policy_named("reader"), api, tmp_path)
    events = validate_record(result.record)
    assert result.outcome == "submitted" and result.phase_two == "completed"
    assert result.chamber_outcome["stored"] is True and result.chamber_outcome["ended"] is True
    sid = events[0].chamber["session_id"]
    status = api.http.get(f"/sessions/{sid}").json()
    assert status["ended"] and status["end_reason"] == "submitted"
    assert status["extraction_sha256"] == result.extraction_sha256
    assert api.http.get(f"/sessions/{sid}/extraction").json()["payload"] == result.extraction
    assert api.tool_requests(sid)[-1] == "submit_chamber_outcome"
    kinds = [e.kind for e in events]
    change = kinds.index("phase_change")
    chamber_calls = [i for i, e in enumerate(events) if e.kind == "tool_call" and e.phase == "chamber"]
    assert chamber_calls and min(chamber_calls) > change  # no chamber tool call before the freeze
    assert events[change].extraction_sha256 == result.extraction_sha256
    assert events[change].chamber_tool_surface.tools == TOOL_NAMES
    # after the freeze, the turns offer only the chamber tools
    later_turns = [e for e in events[change:] if e.kind == "model_turn"]
    assert later_turns and all(t.offered_tools == TOOL_NAMES for t in later_turns)


def test_chamber_tool_in_phase_one_is_denied_and_never_reaches_the_service(claims, api, tmp_path):
    def eager(conv):
        if conv.assistant_turns == 0:
            return call(conv, "measure", {"n": 1})
        return closed_book(conv)

    result = _cell(claims[CLAIM], eager, api, tmp_path)
    events = validate_record(result.record)
    first = [e for e in events if e.kind == "tool_call"][0]
    assert (first.tool, first.status, first.phase) == ("measure", "denied", "extraction")
    sid = events[0].chamber["session_id"]
    paths = [path for _, path in api.requests(sid)]
    freeze = paths.index("/extraction")
    assert not any(p.startswith("/tools/") for p in paths[:freeze])  # the denied call never reached the service
    sent = [e.tool for e in events if e.kind == "tool_call" and e.phase == "chamber"]
    assert api.tool_requests(sid) == sent and "measure" not in sent  # only phase two's own calls arrived
    assert result.phase_two == "completed"


def test_chamber_refusal_is_a_tool_error_the_model_sees(claims, api, tmp_path):
    def bad_variable(conv):
        if "measure" not in conv.offered:
            return closed_book(conv)
        if len(conv.results) == 1:
            return call(conv, "measure", {"n": 1, "variables": ["nonsense"]})
        return call(conv, "submit_chamber_outcome", {"prediction": "inconclusive", "summary": "could not read"})

    result = _cell(claims[CLAIM], bad_variable, api, tmp_path)
    calls = [e for e in validate_record(result.record) if e.kind == "tool_call"]
    refused = next(c for c in calls if c.tool == "measure")
    assert refused.status == "error" and refused.error_type == "unknown_variable"
    assert result.outcome == "submitted" and result.phase_two == "completed"


def test_chamber_down_at_session_start_is_an_engine_error(claims, tmp_path):
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=11)
    try:
        with running_api({"wt": wt}, record_dir=tmp_path / "api", claims=claims) as url:
            pass  # stopped: nothing listens any more
    finally:
        wt.close()
    claim = claims[CLAIM]
    detail = engine_error_before_a_turn(claim, url, tmp_path, shared_path("datasheets", claim.identity.filename),
                                        timeout_s=2)
    assert "session" in detail
