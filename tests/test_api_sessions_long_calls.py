"""Issue 24, item 6: a long chamber call never becomes an engine error when the chamber did the work.

The agent's client asks the service for a call's planned chamber seconds (POST /sessions/{id}/plans/{tool}) and
waits its base read timeout plus PLAN_FACTOR times the plan. Checked against the emulated board at the real
board's pace (7 rows/s, through the real serial driver) with a deliberately short base timeout of 1 s: a measure
and a protocol run that take seconds return their results, and a whole agent cell at that pace ends submitted.
A call that really hangs (a chamber that never answers) still times out, a bounded time after its plan.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import chamber
from agent.chamber_client import PLAN_FACTOR, ChamberClient, ChamberError
from agent.models.scripted import call, closed_book
from agent.record import validate_record
from conftest import shared_path
from protocols.api import running_api
from support import scripted_cell, serial_chamber

CLAIM = "dps310-operating-range"
BASE_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def real_pace(tmp_path_factory, claims) -> Iterator[str]:
    """The API over the emulated wind tunnel at the real board's pace; yields its URL."""
    with serial_chamber("wt", pace="real", seed=8) as wt, \
            running_api({"wt": wt}, record_dir=tmp_path_factory.mktemp("api"), claims=claims) as url:
        yield url


@pytest.fixture
def client(real_pace) -> Iterator[ChamberClient]:
    with httpx.Client(base_url=real_pace, timeout=BASE_TIMEOUT_S) as http:
        yield ChamberClient(http)


def _frozen(client: ChamberClient) -> str:
    sid = client.create_session(CLAIM)
    client.freeze_extraction(sid, {"low": 300, "high": 1200})
    return sid


def test_the_service_plans_rows_at_the_real_pace(client):
    sid = _frozen(client)
    assert client.planned_seconds(sid, "measure", {"n": 21}) == pytest.approx(3.0)  # 21 rows at 7 rows/s
    assert client.planned_seconds(sid, "cross_sensor_check", {"n": 14, "settle_rows": 7}) == pytest.approx(3.0)
    assert client.planned_seconds(sid, "describe_chamber", {}) == 0.0
    assert client.planned_seconds(sid, "run_protocol", {"rows": 10, "settle_rows": 0}) > 2.0
    assert client.planned_seconds(sid, "measure", {"n": 0}) is None  # refused (422): the base timeout stays
    assert client.call_timeout(3.0).read == pytest.approx(BASE_TIMEOUT_S + PLAN_FACTOR * 3.0)
    client.end_session(sid)


def test_a_measure_longer_than_the_base_timeout_returns_its_result(client):
    sid = _frozen(client)
    started = time.monotonic()
    answer = client.call_tool(sid, "measure", {"n": 21, "variables": ["pressure_upwind"]})
    took = time.monotonic() - started
    assert answer.ok, answer.body
    assert answer.body["variables"]["pressure_upwind"]["n"] == 21
    assert took > 2 * BASE_TIMEOUT_S  # it really outlasted the base timeout (21 rows at 7 rows/s: ~3 s)
    client.end_session(sid)


def test_the_base_timeout_alone_would_have_lost_the_call(real_pace):
    with httpx.Client(base_url=real_pace, timeout=BASE_TIMEOUT_S) as http:
        sid = _frozen(ChamberClient(http))
        with pytest.raises(httpx.ReadTimeout):  # what the agent's fixed timeout did before (issue 24)
            http.post(f"/sessions/{sid}/tools/measure", json={"n": 21})
        http.delete(f"/sessions/{sid}", timeout=30)  # waits for the measure the server still runs


def test_a_protocol_run_at_the_real_pace_returns_its_verdict(client):
    sid = _frozen(client)
    started = time.monotonic()
    answer = client.call_tool(sid, "run_protocol", {"rows": 10, "settle_rows": 0})
    took = time.monotonic() - started
    assert answer.ok, answer.body
    assert answer.body["claim_id"] == CLAIM and answer.body["verdict"] in ("pass", "inconclusive", "fail")
    assert took > BASE_TIMEOUT_S
    client.end_session(sid)


def test_an_agent_cell_at_the_real_pace_loses_nothing_to_a_timeout(client, claims, tmp_path):
    def runs_the_protocol(conv):
        if "run_protocol" in conv.offered and not any(e.name == "run_protocol" for e in conv.exchanges):
            return call(conv, "run_protocol", {"rows": 10, "settle_rows": 0})
        return closed_book(conv)

    claim = claims[CLAIM]
    result, _ = scripted_cell(claim, runs_the_protocol, client, tmp_path / "cells",
                              shared_path("datasheets", claim.identity.filename))
    assert result.outcome == "submitted", result.detail
    assert result.phase_two == "completed"
    run = [e for e in validate_record(result.record) if e.kind == "tool_call" and e.tool == "run_protocol"]
    assert [e.status for e in run] == ["ok"]


# ------------------------------------------------------------------------------------------- a real hang
class Hanging:
    """A chamber whose measure never answers until the test lets it go."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.release = inner, threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def measure(self, n: int) -> Any:
        self.release.wait(timeout=60)
        return self.inner.measure(n)


def test_a_call_that_really_hangs_still_times_out(tmp_path, claims):
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=8)
    hanging = Hanging(wt)
    try:
        with running_api({"wt": hanging}, record_dir=tmp_path, claims=claims, chamber_calls="thread") as url, \
                httpx.Client(base_url=url, timeout=BASE_TIMEOUT_S) as http:
            client = ChamberClient(http)
            sid = _frozen(client)
            planned = client.planned_seconds(sid, "measure", {"n": 7})
            assert planned == pytest.approx(1.0)  # the simulator is planned at the real board's pace
            started = time.monotonic()
            with pytest.raises(ChamberError, match="ReadTimeout"):
                client.call_tool(sid, "measure", {"n": 7})
            took = time.monotonic() - started
            assert took >= BASE_TIMEOUT_S + PLAN_FACTOR * planned  # it waited the plan out; that it gave up at all
            # (ReadTimeout, not the chamber's answer 60 s later) is the behaviour: no upper bound on a busy machine
            hanging.release.set()
    finally:
        hanging.release.set()
        wt.close()
