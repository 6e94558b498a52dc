"""The chamber tools API over real HTTP: uvicorn on 127.0.0.1 (a free port, a background thread), httpx clients,
the in-process simulated chamber. Also `bench_cli.py serve` as a subprocess.

What must hold on the wire: the two-pass freeze, the lease under 50 concurrent clients (every request served or
409, never a 5xx, never two sessions' SETs interleaved), the token rule, and the record on disk.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

import chamber
from protocols.api import TokenRequired, running_api

PROJECT = Path(__file__).resolve().parents[1]
CLAIM = "dps310-operating-range"
TOKEN = "integration-token-0123456789abcdef"


class SetSpy:
    """Records every SET that reaches the chamber's backend (below the driver's own validation)."""

    def __init__(self, chamber_obj) -> None:
        self.calls: list[tuple[str, str, float]] = []  # (op, name, value)
        self._lock = threading.Lock()
        backend = chamber_obj.backend
        original_set, original_measure = backend.set, backend.measure

        def spy_set(name, value):
            with self._lock:
                self.calls.append(("set", name, value))
            return original_set(name, value)

        def spy_measure(n):
            with self._lock:
                self.calls.append(("measure", "", float(n)))
            return original_measure(n)

        backend.set, backend.measure = spy_set, spy_measure


@pytest.fixture
def wt():
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=11)
    yield c
    c.close()


def test_full_session_over_http(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        assert url.startswith("http://127.0.0.1:")
        tools = http.get("/tools").json()
        assert "run_protocol" in {t["name"] for t in tools}
        sid = http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
        r = http.post(f"/sessions/{sid}/tools/measure", json={"n": 1})
        assert r.status_code == 409 and r.json()["error"]["code"] == "extraction_not_frozen"
        digest = http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300, "high": 1200}}).json()["sha256"]
        r = http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 1}})
        assert r.status_code == 409 and r.json()["error"]["code"] == "extraction_already_frozen"
        r = http.post(f"/sessions/{sid}/tools/stage_conditions", json={"settings": {"load_in": 0, "load_out": 0}})
        assert r.status_code == 200 and r.json()["applied"] == {"load_in": 0.0, "load_out": 0.0}
        r = http.post(f"/sessions/{sid}/tools/measure", json={"n": 5, "variables": ["pressure_downwind"]})
        assert r.json()["variables"]["pressure_downwind"]["n"] == 5
        r = http.post(f"/sessions/{sid}/tools/submit_chamber_outcome", json={"prediction": "pass", "summary": "ok"})
        assert r.status_code == 200
        assert http.get("/openapi.json").json()["info"]["title"].startswith("chamberlab")
    events = [json.loads(line) for line in (tmp_path / f"{sid}.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events].count("response") == 7
    assert events[-1]["body"]["ended"] is True
    assert any(e.get("body", {}) and e["body"].get("sha256") == digest for e in events if e["kind"] == "response")


def test_agent_chamber_client_speaks_the_contract(wt, tmp_path, claims):
    from agent import chamber_client as client_module  # it exists: an import error must fail, not skip

    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        client = client_module.ChamberClient(http)
        sid = client.create_session(CLAIM)
        refused = client.call_tool(sid, "describe_chamber", {})
        assert not refused.ok and refused.status == 409
        assert len(client.freeze_extraction(sid, {"value": 1})) == 64
        names = [t.name for t in client.list_tools()]
        assert names[-1] == "submit_chamber_outcome"
        assert client.call_tool(sid, "describe_chamber", {}).ok
        bad = client.call_tool(sid, "stage_conditions", {"settings": {"hatch": 400}})
        assert not bad.ok and bad.body["error"]["code"] == "setting_refused"
        assert client.call_tool(sid, "submit_chamber_outcome", {"prediction": "fail", "summary": "x"}).ok


@pytest.mark.parametrize("chamber_calls", ["inline", "thread"])
def test_fifty_concurrent_clients_never_interleave_and_never_see_5xx(wt, tmp_path, claims, chamber_calls):
    """Each client i: own session; stage pot_1=i+1, measure, stage pot_2=i+1, describe (must show them), submit.
    (i+1, never 0: the SETs of 0 are the sessions' ends and starts putting the pots back at rest.)

    Both places chamber work can run: inline on the event loop (the in-process sim's default) and on the one
    chamber thread (a serial chamber's default), where calls really are in flight while others arrive.
    Retries on 409 chamber_busy with a short seeded jittered back-off (a polling loop, not a timed assertion)."""
    spy = SetSpy(wt)
    statuses: list[int] = []
    states: dict[int, dict] = {}
    failures: list[str] = []
    lock = threading.Lock()
    n_clients = 50

    def client(i: int, url: str) -> None:
        rng = random.Random(1000 + i)
        try:
            with httpx.Client(base_url=url, timeout=30.0) as http:
                def call(path, body):
                    while True:
                        r = http.post(path, json=body)
                        with lock:
                            statuses.append(r.status_code)
                        if r.status_code == 409 and r.json()["error"]["code"] == "chamber_busy":
                            threading.Event().wait(rng.uniform(0.01, 0.05))  # back off, then ask again
                            continue
                        return r

                sid = call("/sessions", {"claim_id": CLAIM}).json()["session_id"]
                call(f"/sessions/{sid}/extraction", {"payload": {"client": i}})
                tools = f"/sessions/{sid}/tools"
                assert call(f"{tools}/stage_conditions", {"settings": {"pot_1": i + 1}}).status_code == 200
                assert call(f"{tools}/measure", {"n": 1, "variables": ["signal_1"]}).status_code == 200
                assert call(f"{tools}/stage_conditions", {"settings": {"pot_2": i + 1}}).status_code == 200
                state = call(f"{tools}/describe_chamber", {}).json()["state"]
                with lock:
                    states[i] = state
                assert call(f"{tools}/submit_chamber_outcome", {"prediction": "pass", "summary": str(i)}).status_code == 200
        except Exception as exc:  # collected and asserted in the main thread
            with lock:
                failures.append(f"client {i}: {type(exc).__name__}: {exc}")

    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, lease_timeout_s=30.0,
                     chamber_calls=chamber_calls, max_sessions_per_client=n_clients) as url:  # all on 127.0.0.1
        threads = [threading.Thread(target=client, args=(i, url)) for i in range(n_clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert failures == []
    assert set(statuses) <= {200, 201, 409}, sorted(set(statuses))
    assert len(states) == n_clients
    for i, state in states.items():  # nobody else's SET landed between a client's stage and its describe
        assert state["pot_1"] == i + 1 and state["pot_2"] == i + 1
    sets = [(name, value) for op, name, value in spy.calls
            if op == "set" and name in ("pot_1", "pot_2") and value != 0]
    assert len(sets) == 2 * n_clients  # (the ends and starts also set the pots back to 0: not counted)
    for k in range(0, len(sets), 2):  # the backend saw each client's two SETs back to back
        assert sets[k][0] == "pot_1" and sets[k + 1] == ("pot_2", sets[k][1])
    ops = spy.calls
    for k, (op, name, value) in enumerate(ops):  # and its measure between them
        if op == "set" and name == "pot_1" and value != 0:
            assert ops[k + 1][0] == "measure" and ops[k + 2] == ("set", "pot_2", value)


def test_token_enforced_over_http_and_non_loopback_without_token_refuses(wt, tmp_path, claims):
    with pytest.raises(TokenRequired):
        with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, host="0.0.0.0"):
            pass  # pragma: no cover - must not start
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, token=TOKEN) as url:
        r = httpx.get(f"{url}/tools")
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = httpx.get(f"{url}/tools", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200


def _cli(*args: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    full_env = {k: v for k, v in os.environ.items() if k != "CHAMBERLAB_API_TOKEN"}
    full_env.update(env or {})
    return subprocess.Popen([sys.executable, str(PROJECT / "bench_cli.py"), *args], cwd=PROJECT, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_cli_serve_refuses_a_non_loopback_bind_without_token(tmp_path):
    proc = _cli("serve", "--host", "0.0.0.0", "--listen-port", "0", "--record", str(tmp_path), "--json")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert json.loads(out)["error"]["type"] == "ServeRefused" and "token" in json.loads(out)["error"]["message"]
    assert list(tmp_path.iterdir()) == []


def test_cli_serve_runs_under_uvicorn_and_stops_on_sigterm(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    proc = _cli("serve", "--listen-port", "0", "--chamber", "wt", "--record", str(tmp_path / "rec"),
                "--token-file", str(token_file), "--json")
    try:
        started = json.loads(proc.stdout.readline())  # printed once the server is listening
        assert started["chambers"] == ["wt"] and started["auth"] == "bearer token"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{started['url']}/health").status_code == 401
        assert httpx.get(f"{started['url']}/health", headers=headers).json()["chambers"] == ["wt"]
        r = httpx.post(f"{started['url']}/sessions", json={"claim_id": CLAIM}, headers=headers)
        assert r.status_code == 201
        assert (tmp_path / "rec" / f"{r.json()['session_id']}.jsonl").exists()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode == 0
