"""Issue 31, item 3: an API session that ends or is abandoned hands the chamber back safe, on the in-process sim.

A session that stages `load_in 0.7, hatch 30` and ends (DELETE, submit_chamber_outcome) leaves the chamber with its
fans off and its hatch home at once, read back from the chamber, with a `handback` event in its record and a line
in operator.jsonl. One whose client goes silent is ended "expired" by the sweep once idle for the idle limit (the
wall clock is one only the test moves; the sweep is run by the test on the app's own event loop), and the same
hand-back follows without any other request. The next session's record shows nothing inherited; the inputs the
last session moved beyond the safe state (oversampling, a potentiometer) are back where they were when it took
the chamber. A lapsed lease alone hands nothing back: a session thinking between its staging and its measure
keeps its staging. When the server stops, no new chamber work starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

import chamber
from chamber.errors import LinkLost
from protocols.api import create_app
from protocols.api.lease import ChamberLeases
from protocols.api.sessions import SessionStore
from protocols.service_defaults import DEFAULT_SESSION_IDLE_S
from support import ManualClock, frozen_session as _frozen, tool_call as _tool

CLAIM = "dps310-operating-range"
LOOPBACK = "http://127.0.0.1"
IDLE_S = 300.0
STAGED = {"load_in": 0.7, "hatch": 30.0}


@pytest.fixture
def wt() -> Iterator[chamber.Chamber]:
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=5)
    yield c
    c.close()


def _staged(http: TestClient, settings: dict[str, float] = STAGED) -> str:
    sid = _frozen(http)
    r = _tool(http, sid, "stage_conditions", {"settings": settings})
    assert r.status_code == 200, r.text
    return sid


def _events(app, sid: str, kind: str) -> list[dict]:
    return [e for e in app.state.api.store.get(sid).record.read() if e["kind"] == kind]


def _operator_lines(tmp_path) -> list[dict[str, Any]]:
    path = tmp_path / "operator.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _board(wt: chamber.Chamber) -> dict[str, float]:
    """What the chamber itself reports now: one row read back (not the driver's memory of what it set)."""
    row = wt.read_back()
    return {name: row[name] for name in ("load_in", "load_out", "hatch")}


AT_REST = {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0}


# ------------------------------------------------------------------------------------------ a session that ends
@pytest.mark.parametrize("end", ["delete", "submit"])
def test_a_session_that_ends_hands_the_chamber_back_safe_at_once(wt, tmp_path, claims, end):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _staged(http)
        assert _board(wt)["load_in"] == pytest.approx(0.7) and _board(wt)["hatch"] == 30.0
        if end == "delete":
            r = http.delete(f"/sessions/{a}")
            assert r.status_code == 200 and r.json()["end_reason"] == "deleted", r.text
        else:
            r = _tool(http, a, "submit_chamber_outcome", {"prediction": "pass", "summary": "done"})
            assert r.status_code == 200 and r.json()["ended"], r.text
        assert _board(wt) == AT_REST  # at once: no other request, no sweep
        (back,) = _events(app, a, "handback")
    assert back["chamber"] == "wt" and back["reason"] == ("deleted" if end == "delete" else "submitted")
    assert back["applied"] == {"load_in": 0.0, "hatch": 0.0}  # load_out was off already (the session's start)
    assert back["confirmed"] is True and back["readback"]["hatch"] == 0.0 and back["readback"]["load_in"] == 0.0
    (line,) = [e for e in _operator_lines(tmp_path) if e["kind"] == "handback"]
    assert line["session_id"] == a and line["applied"] == back["applied"] and line["confirmed"] is True


def test_the_next_session_inherits_nothing(wt, tmp_path, claims):
    wt.set("pot_2", 5.0)  # an operator's setting from before the server: no session moved it, it stays
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _staged(http, {**STAGED, "osr_upwind": 8.0, "pot_2": 9.0})
        assert http.delete(f"/sessions/{a}").status_code == 200
        b = _frozen(http)
        state = _tool(http, b, "describe_chamber").json()["state"]
        (started,) = _events(app, b, "safe_state")
    assert started["previous_user"] == a
    assert started["applied"] == {"osr_upwind": 1.0, "pot_2": 5.0}  # A's measurement settings back; fans, hatch
    assert started["not_applied"] == []                               # were already safe at A's end
    assert {k: state[k] for k in ("load_in", "load_out", "hatch", "osr_upwind", "pot_2")} == {
        **AT_REST, "osr_upwind": 1.0, "pot_2": 5.0}


# ------------------------------------------------------------------------------------------ an abandoned session
def test_an_abandoned_session_is_ended_and_its_chamber_made_safe_within_its_idle_limit(wt, tmp_path, claims):
    wall = ManualClock(1.7e9)
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, wall_clock=wall, session_idle_s=IDLE_S)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _staged(http)
        sweep = app.state.api.handback.sweep
        wall.advance(IDLE_S - 1.0)
        assert http.portal.call(sweep) == []  # a second short of the limit: still open, still staged
        assert _board(wt)["load_in"] == pytest.approx(0.7)
        wall.advance(1.0)
        assert http.portal.call(sweep) == [a]  # the client never came back: no request of its own needed
        assert _board(wt) == AT_REST
        assert http.portal.call(sweep) == []  # once is enough: nothing handed back twice
        status = http.get(f"/sessions/{a}").json()
        assert status["ended"] and status["end_reason"] == "expired" and not status["holds_lease"]
        assert _tool(http, a, "measure", {"n": 1}).json()["error"]["code"] == "session_ended"
        b = _frozen(http)
        state = _tool(http, b, "describe_chamber").json()["state"]
        (started,) = _events(app, b, "safe_state")
        (expired,) = _events(app, a, "expired")
        (back,) = _events(app, a, "handback")
    assert expired["idle_s"] == IDLE_S
    assert back["reason"] == "expired" and back["confirmed"] and back["applied"] == {"load_in": 0.0, "hatch": 0.0}
    assert started["previous_user"] == a and started["applied"] == {}  # nothing of A's left to undo
    assert {k: state[k] for k in AT_REST} == AT_REST
    assert [e["session_id"] for e in _operator_lines(tmp_path) if e["kind"] == "handback"] == [a]


def test_the_default_idle_limit_is_minutes_not_an_hour():
    assert 60.0 < DEFAULT_SESSION_IDLE_S <= 600.0


def test_a_lapsed_lease_alone_keeps_a_thinking_sessions_staging(wt, tmp_path, claims):
    clock, wall = ManualClock(), ManualClock(1.7e9)
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, clock=clock, wall_clock=wall,
                     lease_timeout_s=60.0, session_idle_s=IDLE_S)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _staged(http)
        clock.advance(120.0)  # the lease lapsed: a model turn took two minutes
        wall.advance(120.0)
        assert http.portal.call(app.state.api.handback.sweep) == []
        r = _tool(http, a, "measure", {"n": 2, "variables": ["pressure_upwind"]})
        assert r.status_code == 200, r.text
        assert _tool(http, a, "describe_chamber").json()["state"]["load_in"] == pytest.approx(0.7)
        assert _events(app, a, "handback") == []


def test_a_session_with_a_call_in_flight_is_never_idle(tmp_path, claims):
    wall = ManualClock(1.7e9)
    busy: set[str] = set()
    store = SessionStore(claims, tmp_path, connected=["wt"], wall_clock=wall, idle_s=10.0, in_call=busy.__contains__)
    calling, silent = store.create(CLAIM), store.create(CLAIM)
    busy.add(calling.id)
    wall.advance(10.0)
    assert store.expire_idle() == [silent]
    assert not calling.ended and silent.end_reason == "expired"
    busy.clear()
    store.touch(calling)  # its long call just ended: idle from now, not from when the call began
    wall.advance(9.0)
    assert store.expire_idle() == []


def test_the_lease_knows_which_session_is_in_a_call():
    import asyncio

    async def scenario() -> list[bool]:
        leases = ChamberLeases(["wt", "lt"], 60.0, clock=ManualClock())
        seen = [leases.in_call("a")]
        await leases.begin("a", ["wt"])
        seen += [leases.in_call("a"), leases.in_call("b")]
        leases.end("a", ["wt"])
        return seen + [leases.in_call("a")]

    assert asyncio.run(scenario()) == [False, True, False, False]


# ------------------------------------------------------------------------------------------ when it goes wrong
class ReadBackFails:
    """The chamber, whose read-back (one MSR row) fails as a lost link does."""

    def __init__(self, inner: chamber.Chamber) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read_back(self) -> dict[str, float]:
        raise LinkLost("the board stopped answering")


def test_a_hand_back_the_board_does_not_confirm_is_recorded_and_not_retried_every_sweep(wt, tmp_path, claims):
    app = create_app({"wt": ReadBackFails(wt)}, record_dir=tmp_path, claims=claims)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _staged(http)
        assert http.delete(f"/sessions/{a}").status_code == 200
        assert http.portal.call(app.state.api.handback.sweep) == []
        health = http.get("/health").json()
        (back,) = _events(app, a, "handback")
    assert back["confirmed"] is False and back["error"] == "LinkLost: link lost: the board stopped answering"
    assert health["links"]["wt"]["detail"]["last_fault"] == back["error"]
    assert [e["kind"] for e in _operator_lines(tmp_path)] == ["handback"]


def test_a_stopping_server_starts_no_chamber_work(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _staged(http)
        before = dict(wt.state())
        app.state.api.prepare_stop(grace_s=0.5)
        r = _tool(http, a, "stage_conditions", {"settings": {"load_out": 0.5}})
        assert r.status_code == 503 and r.json()["error"]["code"] == "server_stopping", r.text
        assert http.delete(f"/sessions/{a}").status_code == 200  # ends; the exit path makes the chamber safe
        assert _events(app, a, "handback") == []
    assert wt.state() == before


# ------------------------------------------------------------------------------------------ the served app
def test_the_served_app_sweeps_on_its_own(wt, tmp_path, claims):
    """Served (server.serve_in_thread), the sweep runs in the background: a client that stages and goes silent
    finds, without asking anything, its session ended and the chamber safe (the test only reads the record)."""
    import threading
    import time

    import httpx

    from protocols.api import running_api

    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, session_idle_s=0.2, sweep_every_s=0.02) as url:
        with httpx.Client(base_url=url, timeout=10.0) as http:
            sid = http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
            http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}}).raise_for_status()
            http.post(f"/sessions/{sid}/tools/stage_conditions", json={"settings": STAGED}).raise_for_status()
        record = tmp_path / f"{sid}.jsonl"
        deadline = time.monotonic() + 30.0  # a bound on a wait for an outcome, not a duration asserted
        kinds: list[str] = []
        while "handback" not in kinds and time.monotonic() < deadline:
            threading.Event().wait(0.02)
            kinds = [json.loads(line)["kind"] for line in record.read_text().splitlines()]
        assert kinds[-2:] == ["expired", "handback"], kinds
        assert {k: wt.state()[k] for k in AT_REST} == AT_REST


def test_a_session_the_cap_ended_for_being_idle_is_handed_back_by_the_next_sweep(wt, tmp_path, claims):
    """The per-client cap ends a client's idle sessions to make room (sessions.py): those are abandoned sessions
    too, and the sweep hands their chambers back and records their expiry, though it did not end them itself."""
    wall = ManualClock(1.7e9)
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, wall_clock=wall, session_idle_s=IDLE_S,
                     max_sessions_per_client=1)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _staged(http)
        wall.advance(IDLE_S)
        assert http.post("/sessions", json={"claim_id": CLAIM}).status_code == 201  # A ended to make room
        assert http.get(f"/sessions/{a}").json()["end_reason"] == "expired"
        assert http.portal.call(app.state.api.handback.sweep) == [a]
        assert _board(wt) == AT_REST
        assert [e["kind"] for e in app.state.api.store.get(a).record.read()][-2:] == ["expired", "handback"]


def test_the_plans_count_what_a_take_puts_back_and_what_a_submit_hands_back(wt, tmp_path, claims):
    """A client's read timeout follows the plan (timing.py): the inputs a session's take puts back beyond the safe
    settings, and the hand-back of submit_chamber_outcome, are chamber work inside the call."""
    from protocols.planner import FAN_SECONDS, SET_SECONDS

    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims)
    with TestClient(app, base_url=LOOPBACK) as http:
        def plan(sid: str, tool: str, body: dict) -> float:
            r = http.post(f"/sessions/{sid}/plans/{tool}", json=body)
            assert r.status_code == 200, r.text
            return r.json()["planned_s"]

        a = _staged(http, {"load_in": 0.7, "osr_upwind": 8.0})
        rows = plan(a, "measure", {"n": 7})  # A holds the chamber: nothing to take
        assert plan(a, "submit_chamber_outcome", {"prediction": "pass", "summary": "x"}) == pytest.approx(
            SET_SECONDS + FAN_SECONDS + rows / 7, abs=1e-3)  # load_in back to 0 (a fan change), one row read back
        assert http.delete(f"/sessions/{a}").status_code == 200
        b = _frozen(http)
        assert plan(b, "measure", {"n": 7}) == pytest.approx(rows + SET_SECONDS, abs=1e-3)  # osr_upwind back first
        assert plan(b, "submit_chamber_outcome", {"prediction": "pass", "summary": "x"}) == 0.0  # nothing taken
