"""Schemathesis over /openapi.json: generated requests (valid and invalid) never get a 5xx, and every error is
the JSON envelope. Bounded: a few examples per operation and generation mode; tool routes run on live, frozen
sessions of the in-process simulated chamber.

(The generated cases come from tests/support.fuzz_operations, shared with the Remote Lab's fuzzing.)
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from schemathesis import GenerationMode

import chamber
from protocols.api import create_app
from protocols.claims import load_claims
from support import fuzz_operations

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
    with TestClient(api_app) as client:
        def check(case):
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

        operations, checked = fuzz_operations(api_app, mode, check, EXAMPLES_PER_OPERATION)
    assert operations >= 12  # 6 tools + sessions, extraction, tools, health
    assert any("run_protocol" in label for label in checked)
