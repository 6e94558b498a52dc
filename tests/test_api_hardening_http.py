"""Issue 19, the chamber tools API's record and HTTP items: deep JSON, 500s and NaN in the record, a record that
cannot be written, the lease's maximum hold, the cap on sessions, Host/Origin and the JSON content type.

Over HTTP under uvicorn on 127.0.0.1; the chamber is the in-process simulator; clocks are injected (no sleeps).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chamber.safe_state import DEFAULT_SAFE

import chamber
from protocols.api import create_app, running_api, serve_in_thread
from protocols.api.record import RecordFiles
from support import ChamberSpy, FullDisk, ManualClock

CLAIM = "dps310-operating-range"


@pytest.fixture
def wt():
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=5)
    yield c
    c.close()


def _frozen(http: httpx.Client) -> str:
    r = http.post("/sessions", json={"claim_id": CLAIM})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    assert http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}}).status_code == 200
    return sid


def _refuse(name: str) -> None:
    raise ValueError(f"bare {name}")


def _strict_lines(path: Path) -> list[dict]:
    """Every line of a record through a strict JSON parser (NaN/Infinity refused); the file ends with a newline."""
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), "a half-written last line"
    return [json.loads(line, parse_constant=_refuse) for line in text.splitlines()]


def _paired(lines: list[dict]) -> None:
    kinds = [e["kind"] for e in lines if e["kind"] in ("request", "response")]
    assert kinds == ["request", "response"] * (len(kinds) // 2), kinds


# ------------------------------------------------------------------------------------------------ 5. records
def test_deeply_nested_json_is_a_400_everywhere_and_the_server_stays_up(wt, tmp_path, claims):
    deep_list = "[" * 600 + "]" * 600  # 1.2 KB
    deep_object = '{"a":' * 600 + "1" + "}" * 600
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        for path in (f"/sessions/{sid}/tools/measure", f"/sessions/{sid}/extraction", "/sessions"):
            for body in (deep_list, deep_object):
                r = http.post(path, content=body, headers={"content-type": "application/json"})
                assert r.status_code == 400, (path, r.status_code, r.text[:200])
                error = r.json()["error"]
                assert error["code"] == "body_too_deep" and "600 levels" in error["message"]
                assert "at most 64" in error["message"]
        assert http.post(f"/sessions/{sid}/tools/measure", json={"n": 2}).status_code == 200
    lines = _strict_lines(tmp_path / f"{sid}.jsonl")
    _paired(lines)
    assert [e["status"] for e in lines if e["kind"] == "response"][-5:] == [400, 400, 400, 400, 200]


def test_an_exception_that_escapes_the_app_still_gets_its_500_and_response_line(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims)

    async def boom(session_id: str):
        raise RuntimeError("a bug")

    app.add_api_route("/sessions/{session_id}/boom", boom, methods=["POST"])
    try:
        with serve_in_thread(app) as url, httpx.Client(base_url=url) as http:
            sid = _frozen(http)
            r = http.post(f"/sessions/{sid}/boom", json={})
            assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
            assert "RuntimeError" in r.json()["error"]["message"]
            assert http.get("/health").status_code == 200
    finally:
        app.state.api.close()
    lines = _strict_lines(tmp_path / f"{sid}.jsonl")
    _paired(lines)
    assert lines[-1]["kind"] == "response" and lines[-1]["status"] == 500 and lines[-1]["path"].endswith("/boom")


def test_nan_and_infinity_are_never_written_bare(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        for body in ('{"n": NaN}', '{"settings": {"load_in": Infinity}}', '{"n": -Infinity}'):
            r = http.post(f"/sessions/{sid}/tools/stage_conditions", content=body,
                          headers={"content-type": "application/json"})
            assert r.status_code == 422, r.text
        r = http.post(f"/sessions/{sid}/tools/measure", json={"n": 3, "variables": ["pressure_upwind"]})
        assert r.status_code == 200
    lines = _strict_lines(tmp_path / f"{sid}.jsonl")  # the strict parser reads every line
    _paired(lines)
    requests = [e["body"] for e in lines if e["kind"] == "request" and e["path"].endswith("stage_conditions")]
    assert requests == [{"unparsed": '{"n": NaN}'}, {"unparsed": '{"settings": {"load_in": Infinity}}'},
                        {"unparsed": '{"n": -Infinity}'}]


def test_a_request_that_cannot_be_recorded_never_reaches_the_chamber(wt, tmp_path, claims):
    disk, spy = FullDisk(), ChamberSpy(wt)
    with running_api({"wt": spy}, record_dir=tmp_path, claims=claims, record_files=RecordFiles(opener=disk)) as url, \
            httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        disk.armed = True
        r = http.post(f"/sessions/{sid}/tools/stage_conditions", json={"settings": {"load_in": 0.5}})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "record_unavailable" and "No space left" in r.json()["error"]["message"]
        assert http.post("/sessions", json={"claim_id": CLAIM}).status_code == 503  # no unrecorded session either
        assert spy.calls == [] and wt.state() == {}  # refused before the lease: not even the safe start
        disk.armed = False
        assert http.post(f"/sessions/{sid}/tools/stage_conditions",
                         json={"settings": {"load_in": 0.5}}).status_code == 200
    lines = _strict_lines(tmp_path / f"{sid}.jsonl")  # no half line anywhere
    _paired(lines)
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert spy.calls == [("set_many", DEFAULT_SAFE["wt"]), ("set_many", {"load_in": 0.5})]


# -------------------------------------------------------------------------------------- 6. the lease's max hold
@contextlib.contextmanager
def _lease_api(wt, tmp_path, claims) -> Iterator[tuple[ManualClock, httpx.Client]]:
    """The API on a clock only the test moves: a lease lapses after 10 s idle and is held at most 30 s."""
    clock = ManualClock()
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, clock=clock, lease_timeout_s=10.0,
                     lease_max_hold_s=30.0) as url, httpx.Client(base_url=url) as http:
        yield clock, http


def test_a_holder_that_keeps_calling_loses_the_lease_after_the_max_hold(wt, tmp_path, claims):
    with _lease_api(wt, tmp_path, claims) as (clock, http):
        a, b = _frozen(http), _frozen(http)
        tool = "/sessions/{}/tools/describe_chamber"
        assert http.post(tool.format(a), json={}).status_code == 200
        refused = 0
        for _ in range(14):  # A calls every 2 s (never idle for 10 s); B asks each time
            clock.now += 2.0
            assert http.post(tool.format(a), json={}).status_code == 200
            r = http.post(tool.format(b), json={})
            assert r.status_code == 409 and r.json()["error"]["code"] == "chamber_busy"
            assert 1 <= int(r.headers["Retry-After"]) <= 10
            refused += 1
        clock.now += 2.0  # 30 s held while B waits
        r = http.post(tool.format(a), json={})
        assert r.status_code == 409 and "maximum of 30 s" in r.json()["error"]["message"], r.text
        r = http.post(tool.format(b), json={})
        assert r.status_code == 200 and r.headers["X-Chamber-Lease"] == "taken_over"
        assert http.get(f"/sessions/{b}").json()["holds_lease"] is True
    assert refused == 14


def test_a_lone_holder_keeps_the_lease_past_the_max_hold(wt, tmp_path, claims):
    with _lease_api(wt, tmp_path, claims) as (clock, http):
        a = _frozen(http)
        for _ in range(30):
            clock.now += 5.0
            r = http.post(f"/sessions/{a}/tools/describe_chamber", json={})
            assert r.status_code == 200 and r.headers["X-Chamber-Lease"] in ("acquired", "held")


# ------------------------------------------------------------------------------------------ 6. sessions capped
def test_open_sessions_are_capped_with_a_429_naming_the_cap(wt, tmp_path, claims):
    wall = ManualClock(1.7e9)
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, max_sessions=3, session_idle_s=600.0,
                     wall_clock=wall) as url, httpx.Client(base_url=url) as http:
        sids = [http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"] for _ in range(3)]
        r = http.post("/sessions", json={"claim_id": CLAIM})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "too_many_sessions" and "max_sessions = 3" in r.json()["error"]["message"]
        assert len(list(tmp_path.glob("*.jsonl"))) == 3  # the refused one left no record file
        assert http.delete(f"/sessions/{sids[0]}").status_code == 200
        assert http.post("/sessions", json={"claim_id": CLAIM}).status_code == 201
        wall.now += 300.0
        assert http.get(f"/sessions/{sids[1]}").status_code == 200  # activity: sids[1] is not idle
        wall.now += 400.0  # sids[2] and the fourth idle for 700 s > 600 s
        assert http.post("/sessions", json={"claim_id": CLAIM}).status_code == 201
        assert http.get(f"/sessions/{sids[2]}").json()["end_reason"] == "expired"
        assert http.get(f"/sessions/{sids[1]}").json()["ended"] is False


# --------------------------------------------------------------------------- 6. Host, Origin and content type
def test_host_and_origin_must_be_loopback_without_a_token(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        port = url.rsplit(":", 1)[1]
        r = http.get("/health", headers={"Host": f"rebound.example:{port}"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_host"
        assert "rebound.example" in r.json()["error"]["message"]
        r = http.post("/sessions", json={"claim_id": CLAIM}, headers={"Origin": "http://rebound.example"})
        assert r.status_code == 403 and "Origin" in r.json()["error"]["message"]
        assert list(tmp_path.glob("*.jsonl")) == []
        assert http.get("/health", headers={"Host": f"localhost:{port}"}).status_code == 200
        assert http.get("/health", headers={"Origin": f"http://127.0.0.1:{port}"}).status_code == 200
    token = "a-token-of-enough-length"
    with running_api({"wt": wt}, record_dir=tmp_path / "t", claims=claims, token=token) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http:
        assert http.get("/health", headers={"Host": "lab-host.example"}).status_code == 200  # the token is the check


def test_tool_bodies_must_be_application_json(wt, tmp_path, claims):
    spy = ChamberSpy(wt)
    with running_api({"wt": spy}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        body = json.dumps({"settings": {"load_in": 0.5}})
        for media in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"content-type": media} if media else {}
            r = http.post(f"/sessions/{sid}/tools/stage_conditions", content=body.encode(), headers=headers)
            assert r.status_code == 415, (media, r.text)
            assert r.json()["error"]["code"] == "unsupported_media_type"
        assert spy.calls == []
        ok = http.post(f"/sessions/{sid}/tools/stage_conditions", content=body,
                       headers={"content-type": "application/json; charset=utf-8"})
        assert ok.status_code == 200, ok.text
        assert http.post(f"/sessions/{sid}/tools/describe_chamber").status_code == 200  # no body: no type needed
