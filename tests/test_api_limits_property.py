"""Property: no sequence of requests makes the chamber's backend receive a SET outside the firmware's allowed
values or the operator limits, and a refused request sends nothing at all.

The spy sits on the backend (below the driver's own checks), and the chamber is opened WITHOUT limits: the
operator limits live only on the server, so the property tests the server's guard, not the driver's.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chamber
from chamber.limits import OperatorLimits
from firmware_bridge.variables import layout_for
from protocols.api import create_app

LIMITS = OperatorLimits(chamber="wt", variables={
    "load_in": {"min": 0, "max": 0.6}, "load_out": {"max": 0.4}, "hatch": {"min": 5, "max": 20},
    "pot_1": {"max": 100}, "osr_upwind": {"allowed": [1, 8]}, "v_1": {"allowed": [5]},
})
LAYOUT = layout_for("wt")
NAMES = [v.name for v in LAYOUT.variables] + ["bogus", "hatch ", ""]
CLAIMS = ["dps310-operating-range", "dps310-pressure-precision-high", "acs70331-bandwidth", "a4988-blank-time"]

values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-2, max_value=300),
    st.integers(min_value=-10_000, max_value=10_000),
    st.sampled_from([0, 1, 2, 4, 8, 5, 20, 20.000001, 45, 45.5, 0.6, 0.6000001, 0.4, 100, 255, 256, -9999, 1e308]),
    st.booleans(), st.text(max_size=4), st.none(),
)
stage = st.builds(lambda s: ("stage", {"settings": s}), st.dictionaries(st.sampled_from(NAMES), values, max_size=5))
raw_stage = st.sampled_from([
    b'{"settings": {"load_in": NaN}}', b'{"settings": {"load_in": 1e400}}', b'{"settings": {"hatch": -1e400}}',
    b'{"settings": {"load_in": 0.5, "load_in": 0.9}}', b'{"settings": {"load_in": "0.5"}}', b'{"settings": 7}',
]).map(lambda raw: ("raw_stage", raw))
other = st.sampled_from([("measure", {"n": 1}), ("describe_chamber", {}), ("run_protocol", {"rows": 10, "settle_rows": 0}),
                         ("cross_sensor_check", {"n": 2})])
actions = st.lists(st.one_of(stage, stage, raw_stage, other), min_size=1, max_size=8)


@pytest.fixture(scope="module")
def spied_chamber():
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=3)  # no driver-side limits on purpose
    sent: list[tuple[str, float]] = []
    original = c.backend.set
    c.backend.set = lambda name, value: (sent.append((name, value)), original(name, value))[1]
    yield c, sent
    c.close()


def allowed(name: str, value: float) -> bool:
    variable = LAYOUT.get(name)
    if variable is None or not variable.accepts(value):
        return False
    rule = LIMITS.for_variable(name)
    return rule is None or rule.accepts(value)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(claim=st.sampled_from(CLAIMS), sequence=actions)
def test_no_request_sequence_sends_an_out_of_limit_set(spied_chamber, claims, tmp_path_factory, claim, sequence):
    wt, sent = spied_chamber
    sent.clear()
    app = create_app({"wt": wt}, limits=LIMITS, record_dir=tmp_path_factory.mktemp("rec"), claims=claims)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        sid = client.post("/sessions", json={"claim_id": claim}).json()["session_id"]
        assert client.post(f"/sessions/{sid}/extraction", json={"payload": {"x": 1}}).status_code == 200
        for kind, body in sequence:
            before = len(sent)
            if kind == "raw_stage":
                r = client.post(f"/sessions/{sid}/tools/stage_conditions", content=body,
                                headers={"content-type": "application/json"})
            else:
                name = "stage_conditions" if kind == "stage" else kind
                r = client.post(f"/sessions/{sid}/tools/{name}", json=body)
            assert r.status_code < 500, r.text
            if r.status_code >= 400:
                assert set(r.json()) == {"error"}
                if kind in ("stage", "raw_stage"):
                    assert len(sent) == before  # a refused request sent nothing
            elif kind == "stage":
                expected = {k: float(v) for k, v in body["settings"].items()}
                assert sent[before:] == list(expected.items())
                assert all(allowed(k, v) for k, v in expected.items())
    bad = [(name, value) for name, value in sent if not allowed(name, value)]
    assert bad == [], f"SETs outside the limits reached the backend: {bad}; requests: {json.dumps(sequence, default=str)[:500]}"
