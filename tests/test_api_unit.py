"""Chamber tools API, one layer at a time: the freeze, the tools' contracts, the guard, the lease, the record.

The HTTP layer runs in-process (FastAPI's TestClient); the chamber is the real in-process simulator
(`chamber.open_chamber(backend="sim")`), not a mock. The lease is also tested alone with a hand-driven clock.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading

import pytest
from fastapi.testclient import TestClient

import chamber
from chamber.limits import OperatorLimits
from chamber.safe_state import DEFAULT_SAFE
from protocols.api import CODES, TOOLS, create_app
from protocols.api.auth import TokenRequired, is_loopback, resolve_token
from protocols.api.lease import ChamberLease, LeaseBusy
from protocols.api.record import RecordFiles, SessionRecord
from support import ManualClock

CLAIM = "dps310-operating-range"
TOKEN = "t0ken-for-tests-0123456789"
SAFE_WT = DEFAULT_SAFE["wt"]  # the resting state: fans off, hatch home, speaker off
"""What a session's first chamber call applies on the wind tunnel (the resting state)."""
LOOPBACK = "http://127.0.0.1"  # the tokenless server answers loopback hosts only (TestClient says "testserver")
LIMITS = OperatorLimits(chamber="wt", variables={"load_in": {"max": 0.6}, "hatch": {"min": 0, "max": 20},
                                                  "osr_upwind": {"allowed": [1, 8]}})


@pytest.fixture
def wt():
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=7)
    yield c
    c.close()


@pytest.fixture
def clock() -> ManualClock:
    """A monotonic clock the test moves by hand (the lease timeout is measured on it)."""
    return ManualClock()


@pytest.fixture
def app(wt, tmp_path, claims, clock):
    return create_app({"wt": wt}, limits=LIMITS, record_dir=tmp_path / "records", claims=claims, clock=clock,
                      lease_timeout_s=30.0, call_wait_s=5.0)


@pytest.fixture
def client(app):
    with TestClient(app, base_url=LOOPBACK) as c:
        yield c


def new_session(client: TestClient, claim: str = CLAIM) -> str:
    r = client.post("/sessions", json={"claim_id": claim})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def frozen_session(client: TestClient, payload: dict | None = None) -> str:
    sid = new_session(client)
    r = client.post(f"/sessions/{sid}/extraction", json={"payload": payload or {"low": 300, "high": 1200}})
    assert r.status_code == 200, r.text
    return sid


def tool(client: TestClient, sid: str, name: str, body: dict | None = None):
    return client.post(f"/sessions/{sid}/tools/{name}", json=body if body is not None else {})


def assert_error(r, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert CODES[code] == status
    assert body["error"]["message"]
    return body["error"]


# -------------------------------------------------------------------------------------------- sessions
def test_unknown_claim_is_a_404_naming_known_ids(client):
    err = assert_error(client.post("/sessions", json={"claim_id": "nope-nothing"}), 404, "unknown_claim")
    assert CLAIM in err["message"]


def test_session_defaults_to_the_claims_chamber(client):
    r = client.post("/sessions", json={"claim_id": CLAIM})
    assert r.json()["chamber"] == "wt" and r.json()["connected_chambers"] == ["wt"]


def test_unknown_session_is_404(client):
    assert_error(tool(client, "0" * 32, "measure"), 404, "unknown_session")
    assert_error(client.get("/sessions/abc"), 404, "unknown_session")


@pytest.mark.parametrize("name,body", [
    ("describe_chamber", {}), ("stage_conditions", {"settings": {"load_in": 0.1}}), ("measure", {"n": 1}),
    ("cross_sensor_check", {"n": 5}), ("run_protocol", {}), ("submit_chamber_outcome", {"prediction": "pass", "summary": "x"}),
])
def test_every_tool_is_409_before_the_freeze_and_nothing_reaches_the_chamber(client, wt, name, body):
    sent = []
    original = wt.backend.set
    wt.backend.set = lambda n, v: (sent.append((n, v)), original(n, v))[1]
    sid = new_session(client)
    err = assert_error(tool(client, sid, name, body), 409, "extraction_not_frozen")
    assert "/extraction" in err["message"]  # tells the model what to do
    # Even arguments that would not validate are refused by the freeze rule first.
    assert_error(tool(client, sid, name, {"bogus": True}), 409, "extraction_not_frozen")
    assert sent == []


def test_freeze_returns_sha256_of_canonical_json_and_a_second_freeze_is_409(client):
    sid = new_session(client)
    payload = {"value": 1200.5, "unit": "hPa", "conditions": ["T = 25 °C"], "low": None}
    r = client.post(f"/sessions/{sid}/extraction", json={"payload": payload})
    assert r.status_code == 200
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")
    assert r.json()["sha256"] == hashlib.sha256(canonical).hexdigest()
    err = assert_error(client.post(f"/sessions/{sid}/extraction", json={"payload": {"value": 1}}), 409,
                       "extraction_already_frozen")
    assert r.json()["sha256"] in err["message"]
    stored = client.get(f"/sessions/{sid}/extraction").json()
    assert stored["payload"] == payload and stored["sha256"] == r.json()["sha256"]  # unchanged by the refusal


def test_frozen_payload_cannot_be_mutated_through_a_returned_copy(client, app):
    sid = frozen_session(client, {"value": 1})
    session = app.state.api.store.get(sid)
    copy = session.extraction()
    copy["value"] = 999
    assert session.extraction() == {"value": 1}


def test_extraction_body_must_be_an_object_with_payload(client):
    sid = new_session(client)
    assert_error(client.post(f"/sessions/{sid}/extraction", json={"value": 1}), 422, "invalid_arguments")
    assert_error(client.post(f"/sessions/{sid}/extraction", json={"payload": [1, 2]}), 422, "invalid_arguments")
    r = client.post(f"/sessions/{sid}/extraction", content=b'{"payload": {"value": NaN}}',
                    headers={"content-type": "application/json"})
    assert_error(r, 422, "invalid_arguments")
    assert client.get(f"/sessions/{sid}").json()["frozen"] is False


# -------------------------------------------------------------------------------------------- tools
def test_tools_list_matches_the_routes_and_schemas_forbid_extra_fields(client):
    specs = client.get("/tools").json()
    assert [s["name"] for s in specs] == [t.name for t in TOOLS]
    paths = client.get("/openapi.json").json()["paths"]
    for spec in specs:
        assert spec["description"] and spec["input_schema"]["type"] == "object"
        assert spec["input_schema"]["additionalProperties"] is False
        path = f"/sessions/{{session_id}}/tools/{spec['name']}"
        documented = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert documented == _without_nulls(spec["input_schema"])  # OpenAPI output drops `default: null`


def _without_nulls(node):
    if isinstance(node, dict):
        return {k: _without_nulls(v) for k, v in node.items() if v is not None}
    return [_without_nulls(x) for x in node] if isinstance(node, list) else node


def test_describe_chamber_lists_variables_limits_and_state(client):
    sid = frozen_session(client)
    assert tool(client, sid, "stage_conditions", {"settings": {"load_in": 0.25}}).status_code == 200
    d = tool(client, sid, "describe_chamber").json()
    by_name = {v["name"]: v for v in d["variables"]}
    assert by_name["load_in"]["kind"] == "input" and by_name["load_in"]["value"] == 0.25
    assert by_name["load_in"]["operator_limit"] == "-inf..0.6"
    assert by_name["osr_upwind"]["allowed"] == "one of 1, 2, 4, 8"
    assert by_name["pressure_upwind"]["kind"] == "sensor" and by_name["pressure_upwind"]["unit"] == "Pa"
    assert "counter" not in by_name
    assert d["state"] == {**SAFE_WT, "load_in": 0.25} and d["protocol"]["key"] == "dps310.operating_range"


def test_stage_conditions_refuses_the_whole_request_when_one_value_is_outside(client, wt):
    sid = frozen_session(client)
    sent = []
    original = wt.backend.set
    wt.backend.set = lambda n, v: (sent.append((n, v)), original(n, v))[1]
    r = tool(client, sid, "stage_conditions", {"settings": {"load_out": 0.3, "load_in": 0.9, "hatch": 50}})
    err = assert_error(r, 422, "setting_refused")
    assert {d["variable"] for d in err["details"]} == {"load_in", "hatch"}  # every refused value is named
    assert "operator limits" in err["message"] and "0..45" in err["message"]
    assert sent == list(SAFE_WT.items()) and wt.state() == SAFE_WT  # only the session's safe start was sent
    r = tool(client, sid, "stage_conditions", {"settings": {"load_out": 0.3, "osr_upwind": 8}})
    assert r.status_code == 200 and r.json()["applied"] == {"load_out": 0.3, "osr_upwind": 8.0}
    assert sent == [*SAFE_WT.items(), ("load_out", 0.3), ("osr_upwind", 8.0)]


@pytest.mark.parametrize("settings,code", [
    ({"pressure_upwind": 1000.0}, "unknown_variable"),  # sensor overrides are not for the agent
    ({"counter": 1}, "unknown_variable"),
    ({"warp_drive": 1}, "unknown_variable"),
    ({"osr_upwind": 2}, "setting_refused"),  # firmware allows 2, operator limits do not
    ({"osr_downwind": 3}, "setting_refused"),  # firmware does not allow 3
    ({"load_out": -9999}, "setting_refused"),  # an input cannot be unset
])
def test_stage_conditions_refusals(client, settings, code):
    sid = frozen_session(client)
    assert_error(tool(client, sid, "stage_conditions", {"settings": settings}), 422, code)


@pytest.mark.parametrize("body", [
    {"settings": {}}, {"settings": {"load_in": "fast"}}, {"settings": {"load_in": True}}, {"settings": [1]},
    {"settings": {"load_in": 0.1}, "extra": 1}, {"settings": {"load_in": None}}, {"settings": {"load_in": "0.5"}},
])
def test_stage_conditions_bad_types_are_422_with_actionable_message(client, body):
    sid = frozen_session(client)
    err = assert_error(tool(client, sid, "stage_conditions", body), 422, "invalid_arguments")
    assert "input_schema" in err["message"]


def test_measure_statistics(client):
    sid = frozen_session(client)
    r = tool(client, sid, "measure", {"n": 20, "variables": ["pressure_upwind", "rpm_in"]})
    assert r.status_code == 200
    p = r.json()["variables"]["pressure_upwind"]
    assert p["n"] == 20 and p["unit"] == "Pa" and p["dof"] == 19
    assert p["standard_error"] == pytest.approx(p["std"] / 20 ** 0.5)
    raw = tool(client, sid, "measure", {"n": 3, "variables": ["pressure_upwind"], "statistic": "raw"}).json()
    values = raw["variables"]["pressure_upwind"]["values"]
    assert len(values) == 3 and raw["variables"]["pressure_upwind"]["value"] == pytest.approx(sum(values) / 3)
    one = tool(client, sid, "measure", {"n": 1}).json()["variables"]
    assert set(one) >= {"pressure_upwind", "rpm_in", "current_in"}  # default: every sensor
    assert one["pressure_upwind"]["std"] is None and one["pressure_upwind"]["standard_error"] is None


def test_measure_caps_n_and_names_unknown_columns(client):
    sid = frozen_session(client)
    err = assert_error(tool(client, sid, "measure", {"n": 100000}), 422, "invalid_arguments")
    assert "less than or equal to 1000" in err["message"]
    err = assert_error(tool(client, sid, "measure", {"n": 1, "variables": ["nonsense"]}), 422, "unknown_variable")
    assert "pressure_upwind" in err["message"]


def test_cross_sensor_check_reports_offsets_with_dof(client):
    sid = frozen_session(client)
    tool(client, sid, "stage_conditions", {"settings": {"load_in": 0, "load_out": 0}})
    r = tool(client, sid, "cross_sensor_check", {"n": 30, "settle_rows": 5}).json()
    assert r["n"] == 30 and r["mean_dof"] == 3 and r["mean_k95"] == pytest.approx(3.182, abs=1e-3)
    assert sum(r["offsets"].values()) == pytest.approx(0.0, abs=1e-6)  # offsets are relative to the mean
    assert set(r["offset_dof"]) == set(r["offsets"]) and r["spread"] >= 0
    assert not any("fans" in w for w in r["warnings"])
    assert_error(tool(client, sid, "cross_sensor_check", {"chamber": "lt"}), 422, "invalid_arguments")


def test_run_protocol_returns_measurement_and_verdict(client):
    sid = frozen_session(client)
    r = tool(client, sid, "run_protocol", {"rows": 40, "settle_rows": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["claim_id"] == CLAIM and body["verdict"] in ("pass", "inconclusive", "fail", "error")
    assert body["protocol"] == "dps310.operating_range" and body["rule"]["name"]
    assert body["measured"]["value"] is not None and body["measured"]["u"] is not None and body["measured"]["unit"]


def test_run_protocol_refused_when_its_staging_breaks_the_limits(wt, tmp_path, claims):
    strict = OperatorLimits(variables={"osr_upwind": {"allowed": [1]}})  # the protocol stages OSR 8
    app = create_app({"wt": wt}, limits=strict, record_dir=tmp_path, claims=claims)
    with TestClient(app, base_url=LOOPBACK) as c:
        sid = frozen_session(c)
        err = assert_error(tool(c, sid, "run_protocol", {"rows": 20}), 422, "setting_refused")
        assert "osr_upwind" in err["message"]
    assert wt.state() == SAFE_WT  # the session's safe start, nothing of the protocol


def test_submit_stores_the_outcome_ends_the_session_and_frees_the_lease(client, app):
    sid = frozen_session(client)
    tool(client, sid, "measure", {"n": 1})
    assert app.state.api.lease.holds(sid)
    r = tool(client, sid, "submit_chamber_outcome", {"prediction": "pass", "summary": "inside", "measured_value": 945.3})
    assert r.status_code == 200 and r.json()["ended"] is True
    status = client.get(f"/sessions/{sid}").json()
    assert status["ended"] and status["outcome"]["prediction"] == "pass" and not status["holds_lease"]
    assert_error(tool(client, sid, "measure", {"n": 1}), 409, "session_ended")
    assert_error(tool(client, sid, "submit_chamber_outcome", {"prediction": "fail", "summary": "again"}), 409,
                 "session_ended")
    assert_error(client.post(f"/sessions/{sid}/extraction", json={"payload": {}}), 409, "session_ended")


def test_unknown_tool_route_and_method(client):
    sid = frozen_session(client)
    err = assert_error(tool(client, sid, "launch_rocket"), 404, "unknown_tool")
    assert "describe_chamber" in err["message"]
    assert_error(client.get(f"/sessions/{sid}/tools/measure"), 405, "method_not_allowed")
    assert_error(client.get("/nothing/here"), 404, "not_found")


def test_tool_body_that_is_not_json_or_not_an_object(client):
    sid = frozen_session(client)
    r = client.post(f"/sessions/{sid}/tools/measure", content=b"{n: 1", headers={"content-type": "application/json"})
    assert_error(r, 422, "invalid_arguments")
    assert_error(tool(client, sid, "measure", [1, 2]), 422, "invalid_arguments")
    r = client.post(f"/sessions/{sid}/tools/describe_chamber")  # no body: every argument at its default
    assert r.status_code == 200


def test_oversized_body_is_413(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, max_body_bytes=1000)
    with TestClient(app, base_url=LOOPBACK) as c:
        sid = new_session(c)
        r = c.post(f"/sessions/{sid}/extraction", json={"payload": {"text": "x" * 2000}})
        assert_error(r, 413, "payload_too_large")
        assert c.get(f"/sessions/{sid}").json()["frozen"] is False


def test_tool_on_a_chamber_that_is_not_connected(client):
    sid = frozen_session(client)
    assert_error(tool(client, sid, "measure", {"n": 1, "chamber": "lt"}), 409, "chamber_not_connected")


# -------------------------------------------------------------------------------------------- lease
def test_lease_excludes_other_sessions_until_idle_timeout(client, clock):
    a, b = frozen_session(client), frozen_session(client)
    assert tool(client, a, "stage_conditions", {"settings": {"load_in": 0.5}}).headers["x-chamber-lease"] == "acquired"
    r = tool(client, b, "stage_conditions", {"settings": {"load_in": 0.1}})
    assert_error(r, 409, "chamber_busy")
    assert r.headers["retry-after"] == "30"
    clock.now += 29.5
    r = tool(client, b, "measure", {"n": 1})
    assert_error(r, 409, "chamber_busy")
    assert r.headers["retry-after"] == "1"
    assert tool(client, a, "measure", {"n": 1}).headers["x-chamber-lease"] == "held"  # a call renews it
    clock.now += 30.0
    r = tool(client, b, "measure", {"n": 1})
    assert r.status_code == 200 and r.headers["x-chamber-lease"] == "taken_over"
    assert_error(tool(client, a, "measure", {"n": 1}), 409, "chamber_busy")  # a lapsed holder is refused too


def test_deleting_a_session_frees_the_lease(client):
    a, b = frozen_session(client), frozen_session(client)
    tool(client, a, "measure", {"n": 1})
    assert_error(tool(client, b, "measure", {"n": 1}), 409, "chamber_busy")
    assert client.delete(f"/sessions/{a}").json()["ended"] is True
    assert tool(client, b, "measure", {"n": 1}).headers["x-chamber-lease"] == "acquired"


def test_lease_alone_serialises_calls_of_one_session(clock):
    async def scenario():
        lease = ChamberLease(10.0, clock=clock, wait_s=5.0)
        assert (await lease.begin("a")).how == "acquired"
        order = []

        async def second_call():
            grant = await lease.begin("a")  # waits until the first call ends
            order.append(("second", grant.how))
            lease.end("a")

        second = asyncio.create_task(second_call())
        await asyncio.sleep(0)  # the second call is now waiting for the first
        assert not second.done()
        order.append(("first", "end"))
        lease.end("a")
        await asyncio.wait_for(second, timeout=5)
        assert order == [("first", "end"), ("second", "held")]
        with pytest.raises(LeaseBusy):
            await lease.begin("b")
        assert await lease.release("a") and (await lease.begin("b")).how == "acquired"

    asyncio.run(scenario())


def test_lease_busy_session_is_not_stolen_even_after_the_timeout(clock):
    async def scenario():
        lease = ChamberLease(10.0, clock=clock)
        await lease.begin("a")  # a long call in flight
        clock.now += 1000
        with pytest.raises(LeaseBusy) as info:
            await lease.begin("b")
        assert info.value.retry_after_s == 10

    asyncio.run(scenario())


def test_lease_waits_in_arrival_order_and_refuses_when_the_wait_runs_out(clock):
    async def scenario():
        lease = ChamberLease(10.0, clock=clock, wait_s=0.05)
        await lease.begin("a")
        with pytest.raises(LeaseBusy, match="still using the chamber"):
            await lease.begin("a")  # the first call never ends within wait_s
        lease.wait_s = 5.0
        order = []

        async def call(name):
            await lease.begin("a")
            order.append(name)
            await asyncio.sleep(0)  # yield while holding the call slot: nobody may overtake
            lease.end("a")

        waiting = [asyncio.create_task(call(i)) for i in range(5)]
        await asyncio.sleep(0)
        lease.end("a")
        await asyncio.wait_for(asyncio.gather(*waiting), timeout=5)
        assert order == list(range(5))
        releasing = asyncio.create_task(lease.release("a"))  # free: released at once
        assert await releasing and lease.holder is None

    asyncio.run(scenario())


def test_a_deleted_session_waits_for_its_call_in_flight_then_frees_the_lease(clock):
    async def scenario():
        lease = ChamberLease(10.0, clock=clock)
        await lease.begin("a")
        releasing = asyncio.create_task(lease.release("a"))
        await asyncio.sleep(0)
        assert not releasing.done() and lease.holds("a")  # the call in flight finishes first
        lease.end("a")
        assert await asyncio.wait_for(releasing, timeout=5) and lease.holder is None

    asyncio.run(scenario())


def test_chamber_work_runs_inline_for_the_sim_and_on_one_thread_otherwise(wt, tmp_path, claims):
    assert create_app({"wt": wt}, record_dir=tmp_path, claims=claims).state.api.runner.mode == "inline"
    not_a_sim = type("SerialLike", (), {"layout": wt.layout, "limits": None, "backend": object()})()
    assert create_app({"wt": not_a_sim}, record_dir=tmp_path, claims=claims).state.api.runner.mode == "thread"
    with pytest.raises(ValueError, match="chamber_calls"):
        create_app({"wt": wt}, record_dir=tmp_path, claims=claims, chamber_calls="pool")


def test_parallel_calls_of_one_session_on_the_chamber_thread_are_served_in_turn(wt, tmp_path, claims):
    """16 concurrent measure calls of one session with the chamber work on its own thread: every call is served
    (none refused, none interleaved: the backend sees one MSR at a time), and the session holds the lease."""
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, chamber_calls="thread", call_wait_s=30.0)
    in_flight, overlaps = [0], []
    original = wt.backend.measure

    def counting_measure(n):
        in_flight[0] += 1
        overlaps.append(in_flight[0])
        try:
            return original(n)
        finally:
            in_flight[0] -= 1

    wt.backend.measure = counting_measure
    with TestClient(app, base_url=LOOPBACK) as c:
        sid = frozen_session(c)
        results: list[tuple[int, str]] = []
        lock = threading.Lock()

        def call() -> None:
            r = c.post(f"/sessions/{sid}/tools/measure", json={"n": 2})
            with lock:
                results.append((r.status_code, r.headers.get("x-chamber-lease", "")))

        threads = [threading.Thread(target=call) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(status for status, _ in results) == [200] * 16
        assert {how for _, how in results} <= {"acquired", "held"}
        assert max(overlaps) == 1 and len(overlaps) == 16
        assert c.get(f"/sessions/{sid}").json()["holds_lease"] is True
        assert c.delete(f"/sessions/{sid}").json()["holds_lease"] is False


# -------------------------------------------------------------------------------------------- record
def test_every_request_and_response_is_recorded_in_order(client, app):
    sid = new_session(client)
    tool(client, sid, "measure", {"n": 1})  # 409
    client.post(f"/sessions/{sid}/extraction", json={"payload": {"value": 1}})
    tool(client, sid, "measure", {"n": "many"})  # 422
    tool(client, sid, "measure", {"n": 2, "variables": ["rpm_in"]})
    events = app.state.api.store.get(sid).record.read()
    kinds = [(e["kind"], e.get("status")) for e in events]
    assert kinds == [("request", None), ("response", 201), ("request", None), ("response", 409),
                     ("request", None), ("response", 200), ("request", None), ("response", 422),
                     ("request", None), ("safe_state", None), ("response", 200)]  # first lease: safe start
    assert [e["seq"] for e in events] == list(range(1, 12))
    assert events[4]["body"] == {"payload": {"value": 1}}
    assert events[7]["body"]["error"]["code"] == "invalid_arguments"
    assert events[9]["applied"] == SAFE_WT and events[9]["chamber"] == "wt"
    assert events[10]["body"]["variables"]["rpm_in"]["n"] == 2


def test_record_is_on_disk_before_the_response_is_read(client, app):
    sid = frozen_session(client)
    path = app.state.api.store.get(sid).record.path
    tool(client, sid, "describe_chamber")  # the first chamber call also records the session's safe start
    before = len(path.read_text().splitlines())
    tool(client, sid, "describe_chamber")
    lines = path.read_text().splitlines()
    assert len(lines) == before + 2 and json.loads(lines[-1])["status"] == 200


def test_record_files_stay_open_within_a_bound_and_reopen_to_append(tmp_path):
    files = RecordFiles(max_open=2)
    records = [SessionRecord(tmp_path / f"s{i}.jsonl", lambda: 0.0, files) for i in range(3)]
    for round_ in range(2):
        for i, record in enumerate(records):
            record.write("event", round=round_, session=i, text="line\nbreak é")
        assert files.open_count() == 2  # the least recently written file was closed, not leaked
    records[0].write("response", raw_body=b'{"ok":true}', status=200)
    for i, record in enumerate(records):
        events = record.read()
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert [(e["round"], e["session"], e["text"]) for e in events if e["kind"] == "event"] == \
               [(0, i, "line\nbreak é"), (1, i, "line\nbreak é")]
    assert records[0].read()[-1]["body"] == {"ok": True}
    files.close()
    assert files.open_count() == 0
    records[1].write("after_close")  # a write after close reopens and appends
    assert records[1].read()[-1]["kind"] == "after_close" and len(records[1].read()) == 3


# -------------------------------------------------------------------------------------------- auth
def test_token_required_on_every_route(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, token=TOKEN)
    with TestClient(app, base_url=LOOPBACK) as c:
        for method, path in (("get", "/tools"), ("get", "/openapi.json"), ("post", "/sessions")):
            r = getattr(c, method)(path)
            assert_error(r, 401, "unauthorized")
            assert r.headers["www-authenticate"].startswith("Bearer")
        assert_error(c.get("/tools", headers={"Authorization": "Bearer wrong"}), 401, "unauthorized")
        assert c.get("/tools", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert list(tmp_path.iterdir()) == []  # nothing recorded for refused requests


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True),
                                           ("localhost", True), ("0.0.0.0", False), ("::", False),
                                           ("192.168.1.10", False), ("example.org", False)])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_resolve_token_rules(tmp_path):
    assert resolve_token("127.0.0.1", environ={}) is None
    with pytest.raises(TokenRequired, match="CHAMBERLAB_API_TOKEN"):
        resolve_token("0.0.0.0", environ={})
    assert resolve_token("0.0.0.0", environ={"CHAMBERLAB_API_TOKEN": TOKEN}) == TOKEN
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    assert resolve_token("0.0.0.0", token_file=f, environ={}) == TOKEN
    f.write_text("short")
    with pytest.raises(TokenRequired, match="at least"):
        resolve_token("0.0.0.0", token_file=f, environ={})
    with pytest.raises(TokenRequired, match="cannot read"):
        resolve_token("0.0.0.0", token_file=tmp_path / "missing", environ={})
