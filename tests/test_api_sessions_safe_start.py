"""Issue 24, item 1: each new API session starts from the chamber's safe state, and its record says so.

A session that stages `hatch 40, load_in 0.7` and ends (or goes idle past the lease) must not hand that staging to
the next session: the next one's first chamber call finds the safe state applied, and a `safe_state` event in its
record names what was applied. The chamber is the in-process simulator behind the real app; the lease runs on a
clock only the test moves.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import chamber
from chamber.limits import OperatorLimits
from chamber.safe_state import SafeState
from protocols.api import create_app
from support import ChamberSpy, ManualClock, frozen_session as _frozen, tool_call as _tool

LOOPBACK = "http://127.0.0.1"
SAFE = SafeState({"wt": {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0}}, "test: fans off, hatch closed")


@pytest.fixture
def wt() -> Iterator[chamber.Chamber]:
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=3)
    yield c
    c.close()


def _events(app, sid: str, kind: str) -> list[dict]:
    return [e for e in app.state.api.store.get(sid).record.read() if e["kind"] == kind]


def test_the_next_session_starts_safe_after_the_last_one_ended(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, safe=SAFE)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _frozen(http)
        r = _tool(http, a, "stage_conditions", {"settings": {"hatch": 40, "load_in": 0.7}})
        assert r.status_code == 200, r.text
        assert http.delete(f"/sessions/{a}").status_code == 200
        b = _frozen(http)
        first = _tool(http, b, "describe_chamber")
        assert first.status_code == 200, first.text
        assert first.json()["state"] == {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0}  # not A's 40 and 0.7
        (back,) = _events(app, a, "handback")  # A's end handed the chamber back at once (issue 31)
        assert back["applied"] == {"load_in": 0.0, "hatch": 0.0} and back["confirmed"]
        (started,) = _events(app, b, "safe_state")
        assert started["chamber"] == "wt" and started["previous_user"] == a
        assert started["applied"] == {}  # nothing left to do: A's end did it
        assert started["not_applied"] == [] and started["state"] == first.json()["state"]
    assert wt.state() == {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0}


def test_the_default_safe_state_turns_the_fans_off_and_sends_the_hatch_home(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims)  # the default: the chamber's resting state
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _frozen(http)
        assert _tool(http, a, "stage_conditions", {"settings": {"hatch": 40, "load_in": 0.7}}).status_code == 200
        assert _tool(http, a, "submit_chamber_outcome", {"prediction": "pass", "summary": "done"}).status_code == 200
        b = _frozen(http)
        state = _tool(http, b, "describe_chamber").json()["state"]
    assert state == {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0, "pot_1": 0.0}  # the resting state, hatch home


def test_two_sessions_alternating_each_find_the_chamber_safe(wt, tmp_path, claims):
    clock = ManualClock()
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, safe=SAFE, clock=clock, lease_timeout_s=10.0)
    with TestClient(app, base_url=LOOPBACK) as http:
        a, b = _frozen(http), _frozen(http)
        assert _tool(http, a, "stage_conditions", {"settings": {"hatch": 40, "load_in": 0.7}}).status_code == 200
        assert _tool(http, b, "describe_chamber").status_code == 409  # A holds the lease
        clock.advance(10.0)  # A idle past the lease
        r = _tool(http, b, "describe_chamber")
        assert r.status_code == 200 and r.headers["X-Chamber-Lease"] == "taken_over"
        assert r.json()["state"] == {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0}
        assert _tool(http, b, "stage_conditions", {"settings": {"load_out": 0.4}}).status_code == 200
        clock.advance(10.0)  # B idle past the lease: A takes the chamber back
        r = _tool(http, a, "describe_chamber")
        assert r.status_code == 200 and r.headers["X-Chamber-Lease"] == "taken_over"
        assert r.json()["state"] == {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0}  # neither B's 0.4 nor A's own 40
        assert [e["previous_user"] for e in _events(app, a, "safe_state")] == [None, b]
        assert [e["applied"] for e in _events(app, a, "safe_state")] == [{"load_in": 0.0, "load_out": 0.0,
                                                                         "hatch": 0.0}, {"load_out": 0.0}]
        assert [e["previous_user"] for e in _events(app, b, "safe_state")] == [a]


def test_a_session_taking_its_own_lapsed_lease_back_keeps_its_staging(wt, tmp_path, claims):
    clock = ManualClock()
    spy = ChamberSpy(wt)
    app = create_app({"wt": spy}, record_dir=tmp_path, claims=claims, safe=SAFE, clock=clock, lease_timeout_s=10.0)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _frozen(http)
        assert _tool(http, a, "stage_conditions", {"settings": {"load_in": 0.5}}).status_code == 200
        clock.advance(60.0)  # lapsed, but nobody else used the chamber meanwhile
        assert _tool(http, a, "describe_chamber").json()["state"]["load_in"] == 0.5
        assert len(_events(app, a, "safe_state")) == 1
    assert spy.calls == [("set_many", {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0}), ("set_many", {"load_in": 0.5})]


def test_a_safe_setting_the_limits_refuse_is_left_out_and_recorded(wt, tmp_path, claims):
    limits = OperatorLimits(chamber="wt", variables={"hatch": {"min": 10, "max": 45}})
    app = create_app({"wt": wt}, limits=limits, record_dir=tmp_path, claims=claims, safe=SAFE)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _frozen(http)
        assert _tool(http, a, "describe_chamber").status_code == 200
        (started,) = _events(app, a, "safe_state")
    assert started["applied"] == {"load_in": 0.0, "load_out": 0.0}
    assert [(x["variable"], x["value"]) for x in started["not_applied"]] == [("hatch", 0.0)]
    assert "operator limits" in started["not_applied"][0]["expected"]


def test_a_new_session_does_not_move_a_chamber_another_session_holds(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, safe=SAFE)
    with TestClient(app, base_url=LOOPBACK) as http:
        a = _frozen(http)
        assert _tool(http, a, "stage_conditions", {"settings": {"load_in": 0.6}}).status_code == 200
        b = _frozen(http)  # created while A holds the chamber: creating a session moves nothing
        assert _tool(http, b, "measure", {"n": 2}).status_code == 409
        assert _events(app, b, "safe_state") == []
        assert _tool(http, a, "describe_chamber").json()["state"]["load_in"] == 0.6
