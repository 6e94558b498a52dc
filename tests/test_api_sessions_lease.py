"""Issue 24, item 4: a lease per chamber. A session holding the wind tunnel does not keep another off the light
tunnel, not even while its call is in flight; a call that needs several chambers takes their leases in one fixed
order, all or none, so two such calls can never deadlock.

Over HTTP (uvicorn on 127.0.0.1) with both simulated chambers; chamber work on worker threads ("thread" mode, as
for a serial board), where a call really is in flight while another arrives. No sleeps: a gate the test opens.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

import chamber
from protocols.api import running_api
from protocols.api.lease import ChamberLeases, LeaseBusy
from protocols.api.schemas import MeasureArgs, RunProtocolArgs
from protocols.api.timing import chambers_touched
from support import ManualClock

WT_CLAIM = "dps310-operating-range"
LT_CLAIM = "si115x-adc-bit-depth"


class GatedChamber:
    """A chamber whose measure waits for the test to open `gate` (and says it started through `entered`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.entered, self.gate = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def measure(self, n: int) -> Any:
        self.entered.set()
        if not self.gate.wait(timeout=30):
            raise TimeoutError("the test never opened the gate")
        return self.inner.measure(n)


@pytest.fixture
def chambers():
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=4)
    lt = chamber.open_chamber(backend="sim", chamber="lt", seed=4)
    yield wt, lt
    wt.close()
    lt.close()


def _frozen(http: httpx.Client, claim: str) -> str:
    r = http.post("/sessions", json={"claim_id": claim})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    assert http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 1}}).status_code == 200
    return sid


def test_a_call_in_flight_on_the_wind_tunnel_does_not_hold_up_the_light_tunnel(chambers, tmp_path, claims):
    wt, lt = chambers
    gated = GatedChamber(wt)
    answers: list[httpx.Response] = []
    with running_api({"wt": gated, "lt": lt}, record_dir=tmp_path, claims=claims, chamber_calls="thread") as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        a, b = _frozen(http, WT_CLAIM), _frozen(http, LT_CLAIM)
        worker = threading.Thread(target=lambda: answers.append(
            http.post(f"/sessions/{a}/tools/measure", json={"n": 3})))
        worker.start()
        try:
            assert gated.entered.wait(timeout=30)  # A's measure is on the wind tunnel now
            r = http.post(f"/sessions/{b}/tools/measure", json={"n": 3})
            assert r.status_code == 200 and r.json()["chamber"] == "lt", r.text
            busy = http.post(f"/sessions/{b}/tools/describe_chamber", json={"chamber": "wt"})
            assert busy.status_code == 409 and busy.json()["error"]["code"] == "chamber_busy"
            assert "chamber wt" in busy.json()["error"]["message"]
            assert not answers  # A's call is still in flight
        finally:
            gated.gate.set()
            worker.join(timeout=30)
        assert answers[0].status_code == 200 and answers[0].json()["chamber"] == "wt"
        assert http.get(f"/sessions/{a}").json()["holds_lease"] is True
        assert http.get(f"/sessions/{b}").json()["holds_lease"] is True


def test_an_idle_holder_of_one_chamber_leaves_the_other_free(chambers, tmp_path, claims):
    wt, lt = chambers
    clock = ManualClock()
    with running_api({"wt": wt, "lt": lt}, record_dir=tmp_path, claims=claims, clock=clock,
                     lease_timeout_s=10.0) as url, httpx.Client(base_url=url, timeout=30) as http:
        a, b = _frozen(http, WT_CLAIM), _frozen(http, LT_CLAIM)
        assert http.post(f"/sessions/{a}/tools/stage_conditions", json={"settings": {"load_in": 0.3}}).status_code == 200
        r = http.post(f"/sessions/{b}/tools/stage_conditions", json={"settings": {"red": 10}})
        assert r.status_code == 200 and r.headers["X-Chamber-Lease"] == "acquired", r.text
        r = http.post(f"/sessions/{b}/tools/stage_conditions", json={"chamber": "wt", "settings": {"load_in": 0.1}})
        assert r.status_code == 409 and 1 <= int(r.headers["Retry-After"]) <= 10
        r = http.post(f"/sessions/{a}/tools/describe_chamber", json={"chamber": "lt"})
        assert r.status_code == 409 and "chamber lt" in r.json()["error"]["message"]
        assert wt.state()["load_in"] == 0.3 and lt.state()["red"] == 10.0


def test_calls_reach_for_the_chambers_they_use():
    connected = ["lt", "wt"]
    from protocols.claims import load_claims

    claims = load_claims()
    assert chambers_touched("measure", MeasureArgs(), "wt", connected, claims[WT_CLAIM]) == ["wt"]
    assert chambers_touched("measure", MeasureArgs(chamber="lt"), "wt", connected, claims[WT_CLAIM]) == ["lt"]
    assert chambers_touched("measure", MeasureArgs(chamber="lt"), "wt", ["wt"], claims[WT_CLAIM]) == []
    assert chambers_touched("run_protocol", RunProtocolArgs(), "wt", connected, claims[LT_CLAIM]) == ["lt"]
    no_chamber = claims["a4988-logic-supply-voltage-range"]  # decided without a chamber: no lease needed
    assert chambers_touched("run_protocol", RunProtocolArgs(), "wt", connected, no_chamber) == []


# ----------------------------------------------------------------------------------- the leases themselves
def test_a_two_chamber_call_takes_both_or_neither():
    async def scenario() -> None:
        leases = ChamberLeases(["wt", "lt"], 10.0, clock=ManualClock())
        await leases.begin("x", ["lt"])
        leases.end("x", ["lt"])  # x holds lt, idle
        with pytest.raises(LeaseBusy, match="chamber lt"):
            await leases.begin("y", ["wt", "lt"])
        assert not leases.holds("y") and leases.holders() == {"lt": "x", "wt": None}  # wt was not taken
        grants = await leases.begin("x", ["wt", "lt"])
        assert {k: g.how for k, g in grants.items()} == {"lt": "held", "wt": "acquired"}
        leases.end("x", ["wt", "lt"])
        assert await leases.release("x") and leases.holders() == {"lt": None, "wt": None}

    asyncio.run(scenario())


def test_two_sessions_asking_for_both_chambers_in_opposite_orders_never_deadlock():
    async def scenario() -> list[str]:
        leases = ChamberLeases(["wt", "lt"], 10.0, clock=ManualClock(), wait_s=1.0)
        gate = asyncio.Event()

        async def call(session: str, kinds: list[str]) -> str:
            try:
                await leases.begin(session, kinds)
            except LeaseBusy:
                return f"{session}: busy"
            await gate.wait()  # hold both while the other asks
            leases.end(session, kinds)
            return f"{session}: ran"

        first = asyncio.ensure_future(call("x", ["wt", "lt"]))
        second = asyncio.ensure_future(call("y", ["lt", "wt"]))
        await asyncio.sleep(0)
        gate.set()
        return sorted(await asyncio.wait_for(asyncio.gather(first, second), timeout=5.0))

    assert asyncio.run(scenario()) == ["x: ran", "y: busy"]


def test_an_operator_action_waits_only_for_the_chambers_it_names():
    async def scenario() -> None:
        leases = ChamberLeases(["wt", "lt"], 10.0, clock=ManualClock())
        await leases.begin("x", ["wt"])  # a wind-tunnel call in flight
        async with leases.exclusive(["lt"]):  # recovering the light tunnel does not wait for it
            pass
        entered = asyncio.Event()

        async def recover_wt() -> None:
            async with leases.exclusive(["wt"]):
                entered.set()

        waiting = asyncio.ensure_future(recover_wt())
        await asyncio.sleep(0)
        assert not entered.is_set()  # the wind-tunnel call is still in flight
        leases.end("x", ["wt"])
        await asyncio.wait_for(waiting, timeout=5.0)
        assert entered.is_set()

    asyncio.run(scenario())
