"""Issue 19, the chamber tools API's safety items: the pressure controller's reach, recovering a halted board,
whole-call validation before the first SET, and run_protocol's pre-check of every stage.

Everything runs over HTTP against the API under uvicorn on 127.0.0.1 (`running_api`) with the in-process
simulator as the chamber; a spy around it lists every SET and MSR that reached it.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

import chamber
from chamber.catalogue import VariableCatalogue
from chamber.errors import InvalidSetting
from chamber.limits import ControllerUnbounded, OperatorLimits, controller_overreach
from firmware_bridge.variables import layout_for
from protocols.api import running_api
from chamber.safe_state import DEFAULT_SAFE, SafeState
from support import ChamberSpy

CLAIM = "dps310-operating-range"
FAN_CAP = OperatorLimits(chamber="wt", variables={"load_out": {"min": 0, "max": 0.3}})
SAFE_WT = DEFAULT_SAFE["wt"]  # the resting state: fans off, hatch home, speaker off
SAFE_START = ("set_many", SAFE_WT)
"""What a session's first wind-tunnel call applies (the default safe state) before the call itself."""


@pytest.fixture
def pc():
    """The wind tunnel in its pressure-control configuration (the firmware's PID drives both fans)."""
    c = chamber.open_chamber(backend="sim", chamber="wt", config="pressure-control", seed=11)
    yield c
    c.close()


@pytest.fixture
def wt():
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=7)
    yield c
    c.close()


def _frozen(http: httpx.Client, claim: str = CLAIM) -> str:
    sid = http.post("/sessions", json={"claim_id": claim}).json()["session_id"]
    assert http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}}).status_code == 200
    return sid


def _tool(http: httpx.Client, sid: str, name: str, body: dict) -> httpx.Response:
    return http.post(f"/sessions/{sid}/tools/{name}", json=body)


# ------------------------------------------------------------------------- 1. the pressure controller's reach
def test_the_issues_controller_settings_are_refused_and_nothing_moves(pc, tmp_path, claims):
    spy = ChamberSpy(pc)
    with running_api({"wt": spy}, limits=FAN_CAP, record_dir=tmp_path, claims=claims) as url, \
            httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        r = _tool(http, sid, "stage_conditions", {"settings": {"gain_p": 1e12, "gain_i": -1e12, "input": -1e12}})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "setting_refused"
        assert {d["variable"] for d in error["details"]} == {"gain_p", "gain_i", "input"}
        assert "-5..0" in error["message"] and "30000..120000" in error["message"]
    assert spy.calls == [SAFE_START] and pc.state() == SAFE_WT  # the session's safe start, nothing refused


def test_catalogue_ranges_of_the_controller_settings():
    catalogue = VariableCatalogue(layout_for("wt", "pressure-control"))
    assert catalogue.validate("gain_p", -0.5) == -0.5 and catalogue.validate("input", 94500) == 94500
    for name, value in (("gain_p", 0.01), ("gain_p", -5.01), ("gain_i", -0.0101), ("gain_d", 1e-6),
                        ("input", 29999), ("input", 120001)):
        with pytest.raises(InvalidSetting):
            catalogue.validate(name, value)


def test_in_range_target_cannot_make_the_controller_exceed_the_fan_cap(pc, tmp_path, claims):
    # Firmware gains and a target 4.5 kPa below ambient: the PID's output saturates at -1, i.e. load_out 1.
    # An empty safe state: the fans stay unset (a session's safe start would pin them at 0 and bound the PID).
    spy = ChamberSpy(pc)
    with running_api({"wt": spy}, limits=FAN_CAP, record_dir=tmp_path, claims=claims, safe=SafeState({})) as url, \
            httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        assert _tool(http, sid, "stage_conditions", {"settings": {"input": 90000, "gain_p": -0.5}}).status_code == 200
        for tool, body in (("measure", {"n": 20}), ("cross_sensor_check", {"n": 10})):
            r = _tool(http, sid, tool, body)
            assert r.status_code == 409, r.text
            error = r.json()["error"]
            assert error["code"] == "controller_unbounded" and "load_out" in error["message"]
            assert "0..0.3" in error["message"] and error["details"][0]["variable"] == "load_out"
        assert [c for c in spy.calls if c[0] == "measure"] == []  # refused before a single row
        assert _tool(http, sid, "stage_conditions", {"settings": {"load_out": 0.3}}).status_code == 200
        r = _tool(http, sid, "measure", {"n": 40, "variables": ["load_out", "output"], "statistic": "raw"})
        assert r.status_code == 200, r.text
        rows = r.json()["variables"]
    assert min(rows["output"]["values"]) == -1.0  # the controller is saturated ...
    assert max(rows["load_out"]["values"]) <= float(np.float32(0.3))  # ... the pinned exhaust stays at the cap (float32)


def test_no_in_range_gains_and_target_drive_a_pinned_fan_past_its_cap(pc, rng):
    # Seeded sweep over the catalogue's whole controller ranges, exhaust pinned at the cap, PID on the intake.
    pc.set("load_out", 0.3)
    layout = pc.layout
    for _ in range(12):
        settings = {name: float(rng.uniform(layout.get(name).low, layout.get(name).high))
                    for name in ("gain_p", "gain_i", "gain_d", "input")}
        pc.set_many(settings)
        frame = pc.measure(15)
        assert np.all(frame.column("load_out") <= np.float32(0.3)), settings


def test_controller_overreach_names_only_fans_the_limits_cap_below_its_reach():
    layout = layout_for("wt", "pressure-control")
    assert list(controller_overreach(layout, FAN_CAP)) == ["load_out"]
    whole = OperatorLimits(chamber="wt", variables={"load_in": {"min": 0, "max": 1}, "hatch": {"max": 20}})
    assert controller_overreach(layout, whole) == {}
    assert controller_overreach(layout_for("wt", "standard"), FAN_CAP) == {}  # no controller, nothing to bound
    catalogue = VariableCatalogue(layout, FAN_CAP)
    with pytest.raises(ControllerUnbounded, match="load_out"):
        catalogue.check_measurable({})
    catalogue.check_measurable({"load_out": 0.3})


# ------------------------------------------------------------------------------- 2. recovering a halted board
def test_a_halted_board_is_recovered_without_a_restart(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        assert _tool(http, sid, "stage_conditions", {"settings": {"load_in": 0.4}}).status_code == 200
        wt.backend.firmware.fail("er03")  # the board halts (as on a value its setter refuses)
        for _ in range(2):
            r = _tool(http, sid, "measure", {"n": 3})
            assert r.status_code == 503 and r.json()["error"]["code"] == "apparatus_error", r.text
        assert "/operator/recover" in r.json()["error"]["message"]
        r = http.post("/operator/recover", json={})
        assert r.status_code == 200, r.text
        (report,) = r.json()["recovered"]
        assert report["chamber"] == "wt" and report["reset"] is True
        assert report["settings_before"] == {**SAFE_WT, "load_in": 0.4}
        assert report["applied"] == SAFE_WT and "ChamberHalted" in report["last_fault"]
        r = _tool(http, sid, "measure", {"n": 3, "variables": ["load_in"]})
        assert r.status_code == 200, r.text
        assert r.json()["variables"]["load_in"]["value"] == 0.0
        other = _frozen(http)  # and for every other session too
        assert _tool(http, other, "describe_chamber", {}).status_code == 409  # the lease is still sid's
    lines = (tmp_path / "operator.jsonl").read_text().splitlines()
    assert [line.split('"kind": "')[1].split('"')[0] for line in lines] == ["recover_request", "recover_response"]


def test_recover_with_last_reapplies_the_inputs_in_force(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        assert _tool(http, sid, "stage_conditions", {"settings": {"load_in": 0.4, "hatch": 9}}).status_code == 200
        wt.backend.firmware.fail("er03")
        assert _tool(http, sid, "measure", {"n": 2}).status_code == 503
        r = http.post("/operator/recover", json={"chamber": "wt", "restore": "last"})
        assert r.status_code == 200, r.text
        assert r.json()["recovered"][0]["applied"] == {**SAFE_WT, "load_in": 0.4, "hatch": 9.0}
        assert wt.state() == {**SAFE_WT, "load_in": 0.4, "hatch": 9.0}
        assert http.post("/operator/recover", json={"chamber": "lt"}).status_code == 409  # not connected


def test_recover_needs_the_token_like_every_route(wt, tmp_path, claims):
    token = "operator-token-0123456789"
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, token=token) as url, \
            httpx.Client(base_url=url) as http:
        assert http.post("/operator/recover", json={}).status_code == 401
        ok = http.post("/operator/recover", json={}, headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200, ok.text


# ------------------------------------------------------------------- 3. whole-call validation before any SET
@pytest.mark.parametrize("tiny", [1e-300, 1e-40, 5e-324])
def test_a_value_the_board_cannot_hold_refuses_the_whole_call(wt, tmp_path, claims, tiny):
    spy = ChamberSpy(wt)
    with running_api({"wt": spy}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        sid = _frozen(http)
        r = _tool(http, sid, "stage_conditions", {"settings": {"load_in": 0.3, "hatch": tiny}})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"] == [{"variable": "hatch", "value": tiny, "expected": r.json()["error"][
            "details"][0]["expected"]}] and "32-bit float" in r.json()["error"]["message"]
    assert spy.calls == [SAFE_START] and wt.state() == SAFE_WT  # only the session's safe start


# --------------------------------------------------------------- 4. run_protocol checks every stage before any
@pytest.mark.parametrize("claim,limits,refused", [
    ("acs70331-bandwidth", {"load_in": {"max": 0.5}}, "load_in"),  # stage 2 of 2 sets load_in 1
    ("dps310-pressure-precision-high", {"osr_upwind": {"allowed": [1, 2, 4]}}, "osr_upwind"),  # stage 4 of 4: osr 8
])
def test_run_protocol_refuses_a_later_stage_before_any_set_or_measurement(wt, tmp_path, claims, claim, limits,
                                                                           refused):
    spy = ChamberSpy(wt)
    with running_api({"wt": spy}, limits=OperatorLimits(chamber="wt", variables=limits), record_dir=tmp_path,
                     claims=claims) as url, httpx.Client(base_url=url) as http:
        sid = _frozen(http, claim)
        r = _tool(http, sid, "run_protocol", {"rows": 10, "settle_rows": 0})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "setting_refused" and refused in r.json()["error"]["message"]
    assert spy.calls == [SAFE_START] and wt.state() == SAFE_WT  # only the session's safe start


def test_the_driver_itself_refuses_a_measurement_the_controller_could_drive_past_a_limit():
    # Not only the API: `chamber measure/run --limits` go straight to the driver, which must refuse too.
    c = chamber.open_chamber(backend="sim", chamber="wt", config="pressure-control", seed=11, limits=FAN_CAP)
    try:
        with pytest.raises(ControllerUnbounded, match="load_out"):
            c.measure(3)
        c.set("load_out", 0.3)
        assert np.all(c.measure(5).column("load_out") <= np.float32(0.3))
    finally:
        c.close()


def test_a_limits_file_is_read_once_and_its_safe_section_is_what_recover_applies(wt, tmp_path, claims, monkeypatch):
    import chamber.limits as limits_module
    from fastapi.testclient import TestClient

    from protocols.api import create_app

    limits_file = tmp_path / "limits.yaml"
    limits_file.write_text("chamber: wt\nvariables: {pot_2: {min: 0, max: 40}}\nsafe: {load_in: 0, pot_2: 5}\n")
    reads: list[str] = []
    real_load = limits_module.load_model_file
    monkeypatch.setattr(limits_module, "load_model_file", lambda path, *a, **k: reads.append(str(path)) or
                        real_load(path, *a, **k))
    app = create_app({"wt": wt}, limits=str(limits_file), record_dir=tmp_path / "records", claims=claims)
    assert reads == [str(limits_file)]  # the guard's limits and recovery's safe state come from one read
    with TestClient(app, base_url="http://127.0.0.1") as http:
        r = http.post("/operator/recover", json={})
    assert r.status_code == 200, r.text
    assert r.json()["recovered"][0]["applied"] == {**SAFE_WT, "pot_2": 5.0}  # its section adds to the rest
