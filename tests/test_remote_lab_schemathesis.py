"""Schemathesis over the Remote Lab's /openapi.json: generated requests (valid and invalid, with a real account)
never get a 5xx and every refusal is the JSON body the authors' client reads (message, request_id,
scheduler_id). The lab behind it is the demo lab with live workers on emulated boards, so a generated protocol that
passes the checks really runs. Bounded: a few examples per operation and generation mode.
"""

from __future__ import annotations

import base64
import threading
import time

import pytest
from fastapi.testclient import TestClient
from schemathesis import GenerationMode

from protocols.remote_lab import store
from protocols.remote_lab.accounts import Accounts
from protocols.remote_lab.app import create_app
from protocols.remote_lab.lab_file import demo_lab
from protocols.remote_lab.service import Workers
from support import fuzz_operations

EXAMPLES_PER_OPERATION = 10
AUTH = {"Authorization": "Basic " + base64.b64encode(b"fuzz:fuzz-password").decode()}


@pytest.fixture(scope="module")
def lab_app(tmp_path_factory):
    engine = store.open_store(f"sqlite:///{tmp_path_factory.mktemp('lab') / 'lab.sqlite'}")
    lab = demo_lab()
    store.register_chambers(engine, lab.spec.chambers)
    accounts = Accounts(engine, time.time)
    accounts.add("fuzz", "fuzz-password", max_queued=100_000)
    workers = Workers(engine, lab, ["wt-queue-1", "wt-rt-1"], say=lambda line: None).start()
    deadline = time.monotonic() + 20
    while any(store.chamber_rows(engine)[c]["status"] != "READY" for c in ("wt-queue-1", "wt-rt-1")):
        assert time.monotonic() < deadline, "workers did not become ready"
        time.sleep(0.05)
    yield create_app(engine, lab, accounts, scheduler_id="fuzz-lab", call_timeout_s=20,
                     wakeups=workers.wakeups)  # the workers' wake-ups: a queued call wakes its worker at once
    workers.stop()
    engine.dispose()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
def test_no_server_errors_and_every_refusal_is_the_clients_error_body(lab_app, mode):
    with TestClient(lab_app) as client:
        session_id = client.post("/v0/sessions", json={"chamber_id": "wt-rt-1", "chamber_config": "standard"},
                                 headers=AUTH).json()["session_id"]

        def check(case):
            params = case.path_parameters or {}
            if "session_id" in params and len(str(params["session_id"])) % 2 == 0:
                params["session_id"] = session_id  # half a live session, half unknown ids
            if "chamber_id" in params and len(str(params["chamber_id"])) % 2 == 0:
                params["chamber_id"] = "wt-queue-1"
            response = case.call(headers=AUTH)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}")
            if response.status_code >= 400:
                body = response.json()
                assert set(body) == {"message", "request_id", "scheduler_id"} and body["message"], body
                assert body["scheduler_id"] == "fuzz-lab"

        operations, checked = fuzz_operations(lab_app, mode, check, EXAMPLES_PER_OPERATION)
    assert operations >= 10 and len(checked) >= (10 if mode is GenerationMode.POSITIVE else 5)
