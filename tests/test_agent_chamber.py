"""Phase two against a stand-in of the chamber tools API (issue #5 is not written yet).

The stand-in below is a tiny FastAPI app served by uvicorn on 127.0.0.1 that follows the HTTP contract the agent
is built against; replace it with the real service's app when that lands.
"""

from __future__ import annotations

import hashlib
import itertools
import json

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from agent.chamber_client import ChamberClient, ChamberError
from agent.loop import run_cell
from agent.models.anthropic_client import AnthropicClient
from agent.record import validate_record
from agent.scripted import ClosedBook, policy_named, tool_use
from agent.testserver import serve_app, serve_scripted
from conftest import shared_path
from protocols.claims import load_claims
from test_agent_loop import Clock

CHAMBER_TOOLS = [
    {"name": "read_sensor", "description": "Read one chamber variable.",
     "input_schema": {"type": "object", "properties": {"variable": {"type": "string"}}, "required": ["variable"]}},
    {"name": "submit_chamber_outcome", "description": "End the chamber phase.",
     "input_schema": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}},
]


def chamber_standin() -> FastAPI:
    """STAND-IN for the chamber tools API (issue #5): sessions, freeze (409 twice), tools (409 before the freeze)."""
    app = FastAPI()
    sessions: dict[str, dict] = {}
    ids = itertools.count(1)
    app.state.sessions = sessions

    def error(status: int, code: str, message: str) -> JSONResponse:
        return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)

    @app.post("/sessions")
    def create(body: dict):
        sid = f"s{next(ids)}"
        sessions[sid] = {"claim_id": body["claim_id"], "payload": None, "calls": [], "ended": False}
        return {"session_id": sid}

    @app.post("/sessions/{sid}/extraction")
    def freeze(sid: str, body: dict):
        s = sessions.get(sid)
        if s is None:
            return error(404, "unknown_session", sid)
        if s["payload"] is not None:
            return error(409, "already_frozen", "the extraction is frozen already")
        s["payload"] = body["payload"]
        canonical = json.dumps(body["payload"], sort_keys=True, separators=(",", ":")).encode()
        return {"sha256": hashlib.sha256(canonical).hexdigest()}

    @app.get("/tools")
    def tools():
        return CHAMBER_TOOLS

    @app.post("/sessions/{sid}/tools/{name}")
    def call(sid: str, name: str, args: dict):
        s = sessions.get(sid)
        if s is None:
            return error(404, "unknown_session", sid)
        if s["payload"] is None:
            return error(409, "not_frozen", "submit the extraction first")
        if s["ended"]:
            return error(409, "session_ended", "the session has ended")
        s["calls"].append((name, args))
        if name == "read_sensor":
            if args.get("variable") != "pressure_upwind":
                return error(400, "unknown_variable", f"no variable {args.get('variable')!r}")
            return {"variable": "pressure_upwind", "value": 96012.5, "unit": "Pa"}
        if name == "submit_chamber_outcome":
            s["ended"] = True
            return {"accepted": True, "summary": args.get("summary", "")}
        return error(404, "unknown_tool", name)

    return app


@pytest.fixture()
def chamber():
    app = chamber_standin()
    with serve_app(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        yield ChamberClient(http), app


@pytest.fixture(scope="module")
def claims():
    return load_claims()


def test_client_follows_the_contract(chamber):
    client, _ = chamber
    sid = client.create_session("dps310-relative-accuracy")
    early = client.call_tool(sid, "read_sensor", {"variable": "pressure_upwind"})
    assert not early.ok and early.status == 409 and early.body["error"]["code"] == "not_frozen"
    digest = client.freeze_extraction(sid, {"low": -6, "high": 6})
    assert len(digest) == 64
    with pytest.raises(ChamberError) as e:
        client.freeze_extraction(sid, {"low": -1, "high": 1})
    assert e.value.status == 409 and e.value.code == "already_frozen"
    assert [t.name for t in client.list_tools()] == ["read_sensor", "submit_chamber_outcome"]
    ok = client.call_tool(sid, "read_sensor", {"variable": "pressure_upwind"})
    assert ok.ok and ok.body["value"] == 96012.5


def test_reader_runs_both_phases(claims, chamber, tmp_path):
    client, app = chamber
    claim = claims["dps310-relative-accuracy"]
    with serve_scripted(policy_named("reader")) as (url, _):
        model = AnthropicClient("scripted-reader", api_key="k", base_url=url)
        result = run_cell(claim, model=model, datasheet=shared_path("datasheets", claim.identity.filename),
                          record_dir=tmp_path, clock=Clock(), chamber=client)
    events = validate_record(result.record)
    assert result.outcome == "submitted" and result.phase_two == "completed"
    assert result.chamber_outcome["accepted"] is True
    session = app.state.sessions[events[0].chamber["session_id"]]
    assert session["payload"] == result.extraction and session["ended"]
    kinds = [e.kind for e in events]
    change = kinds.index("phase_change")
    chamber_calls = [i for i, e in enumerate(events) if e.kind == "tool_call" and e.phase == "chamber"]
    assert chamber_calls and min(chamber_calls) > change  # no chamber tool call before the freeze
    assert events[change].extraction_sha256 == result.extraction_sha256
    assert events[change].chamber_tool_surface.tools == ["read_sensor", "submit_chamber_outcome"]
    # after the freeze, the turns offer only the chamber tools
    later_turns = [e for e in events[change:] if e.kind == "model_turn"]
    assert later_turns and all(t.offered_tools == ["read_sensor", "submit_chamber_outcome"] for t in later_turns)


def test_chamber_tool_in_phase_one_is_denied_and_never_reaches_the_service(claims, chamber, tmp_path):
    client, app = chamber

    class Eager:
        def respond(self, request):
            if not any(m["role"] == "assistant" for m in request["messages"]):
                return tool_use(request, "read_sensor", {"variable": "pressure_upwind"})
            return ClosedBook().respond(request)

    claim = claims["dps310-relative-accuracy"]
    with serve_scripted(Eager()) as (url, _):
        result = run_cell(claim, model=AnthropicClient("m", api_key="k", base_url=url),
                          datasheet=shared_path("datasheets", claim.identity.filename), record_dir=tmp_path,
                          clock=Clock(), chamber=client)
    events = validate_record(result.record)
    first = [e for e in events if e.kind == "tool_call"][0]
    assert first.status == "denied" and first.phase == "extraction"
    session = app.state.sessions[events[0].chamber["session_id"]]
    # the denied phase-one call never reached the service; only the phase-two submit did
    assert [name for name, _ in session["calls"]] == ["submit_chamber_outcome"]
    assert result.phase_two == "completed"


def test_chamber_refusal_is_a_tool_error_the_model_sees(claims, chamber, tmp_path):
    client, _ = chamber

    class BadVariable:
        def respond(self, request):
            names = [t["name"] for t in request["tools"]]
            done = [b for m in request["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                    for b in m["content"] if b.get("type") == "tool_result"]
            if "read_sensor" not in names:
                return ClosedBook().respond(request)
            if len(done) == 1:
                return tool_use(request, "read_sensor", {"variable": "nonsense"})
            return tool_use(request, "submit_chamber_outcome", {"summary": "could not read"})

    claim = claims["dps310-relative-accuracy"]
    with serve_scripted(BadVariable()) as (url, _):
        result = run_cell(claim, model=AnthropicClient("m", api_key="k", base_url=url),
                          datasheet=shared_path("datasheets", claim.identity.filename), record_dir=tmp_path,
                          clock=Clock(), chamber=client)
    calls = [e for e in validate_record(result.record) if e.kind == "tool_call"]
    refused = next(c for c in calls if c.tool == "read_sensor")
    assert refused.status == "error" and refused.error_type == "unknown_variable"
    assert result.outcome == "submitted"


def test_chamber_down_at_session_start_is_an_engine_error(claims, tmp_path):
    with serve_app(chamber_standin()) as url:
        pass  # stopped: nothing listens any more
    claim = claims["dps310-relative-accuracy"]
    with httpx.Client(base_url=url, timeout=2) as http, serve_scripted(ClosedBook()) as (murl, app):
        result = run_cell(claim, model=AnthropicClient("m", api_key="k", base_url=murl),
                          datasheet=shared_path("datasheets", claim.identity.filename), record_dir=tmp_path,
                          clock=Clock(), chamber=ChamberClient(http))
        assert app.state.requests == []  # no model turn was spent
    events = validate_record(result.record)
    assert result.outcome == "engine_error" and "session" in events[-1].detail
