"""Schemathesis over /openapi.json: generated requests (valid and invalid) never get a 5xx, and every error is
the JSON envelope. Bounded: a few examples per operation and generation mode; tool routes run on live, frozen
sessions of the in-process simulated chamber.

(schemathesis' pytest fixture loader does not work with this pytest version, so each operation's Hypothesis
strategy is drawn directly: same generator, same call path.)
"""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

import chamber
from protocols.api import create_app
from protocols.claims import load_claims

CLAIM = "dps310-operating-range"
EXAMPLES_PER_OPERATION = 12


@pytest.fixture(scope="module")
def api_app(tmp_path_factory):
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=5)
    app = create_app({"wt": wt}, record_dir=tmp_path_factory.mktemp("records"), claims=load_claims(),
                     lease_timeout_s=0.05, call_wait_s=5.0, allowed_hosts=("testserver",),  # the ASGI client's Host
                     max_sessions_per_client=100_000)  # every fuzzed session comes from the one test client
    yield app
    wt.close()


def _frozen_session(client: TestClient) -> str:
    sid = client.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
    client.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}})
    return sid


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
def test_no_server_errors_on_any_operation(api_app, mode):
    schema = schemathesis.openapi.from_asgi("/openapi.json", api_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12  # 6 tools + sessions, extraction, tools, health
    checked: list[str] = []
    with TestClient(api_app) as client:
        for operation in operations:
            @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case):
                params = case.path_parameters or {}
                if "session_id" in params and len(str(params["session_id"])) % 2 == 0:
                    params["session_id"] = _frozen_session(client)  # half live sessions, half unknown ids
                response = case.call()
                assert response.status_code < 500, (
                    f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}")
                if response.status_code >= 400:
                    body = response.json()
                    assert set(body) == {"error"} and body["error"]["code"] and body["error"]["message"]
                    if mode is GenerationMode.POSITIVE:  # a body valid by the published schema is never malformed
                        assert body["error"]["code"] != "invalid_arguments", (case.formatted_path, case.body, body)

            try:
                run()
            except Unsatisfiable:
                if mode is GenerationMode.POSITIVE:
                    raise
                continue  # e.g. GET /health takes no input, so there is no invalid request to make
            checked.append(operation.label)
    assert any("run_protocol" in label for label in checked)
