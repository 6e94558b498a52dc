"""Issue 24, item 2: GET /health reports each chamber's link ("up", "down", "halted") as the driver knows it.

Overall: "ok" (200) when every chamber is up, "degraded" (200: the other chamber still serves) when one is not,
"down" (503: no chamber work is possible) when none is. A lost link is made by the emulated board closing its
port mid-measurement (the real serial driver sees it); a halt by the simulator's firmware halting (er03).
"""

from __future__ import annotations

import httpx
from fastapi.testclient import TestClient

import chamber
from protocols.api import create_app, running_api
from simulator.board_faults import BoardFaults
from support import serial_chamber

CLAIM = "dps310-operating-range"
LOOPBACK = "http://127.0.0.1"


def _frozen(http) -> str:
    sid = http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
    assert http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}}).status_code == 200
    return sid


def test_health_reports_each_link_and_a_halted_chamber_degrades_it(tmp_path, claims):
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=1)
    lt = chamber.open_chamber(backend="sim", chamber="lt", seed=1)
    try:
        app = create_app({"wt": wt, "lt": lt}, record_dir=tmp_path, claims=claims)
        with TestClient(app, base_url=LOOPBACK) as http:
            r = http.get("/health")
            assert r.status_code == 200 and r.json()["status"] == "ok"
            assert {k: v["link"] for k, v in r.json()["links"].items()} == {"lt": "up", "wt": "up"}
            assert r.json()["chambers"] == ["lt", "wt"]
            sid = _frozen(http)
            wt.backend.firmware.fail("er03")  # the board halts
            assert http.post(f"/sessions/{sid}/tools/measure", json={"n": 2}).status_code == 503
            r = http.get("/health")
            assert r.status_code == 200 and r.json()["status"] == "degraded", r.text
            link = r.json()["links"]["wt"]
            assert link["link"] == "halted" and "er03" in link["detail"]["reason"]
            assert "er03" in link["detail"]["last_fault"]  # the apparatus error the failed call met
            assert r.json()["links"]["lt"]["link"] == "up"
            assert http.post("/operator/recover", json={"chamber": "wt"}).status_code == 200
            r = http.get("/health")
            assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["links"]["wt"]["link"] == "up"
            assert r.json()["links"]["wt"]["detail"]["last_fault"] is None
    finally:
        wt.close()
        lt.close()


def test_a_lost_serial_link_is_down_and_the_only_chamber_down_is_a_503(tmp_path, claims):
    with serial_chamber("wt", faults=BoardFaults(vanish_after_rows=3)) as wt:
        with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, \
                httpx.Client(base_url=url, timeout=60) as http:
            up = http.get("/health")
            assert up.status_code == 200 and up.json()["links"]["wt"]["link"] == "up"
            assert set(up.json()["links"]["wt"]["detail"]["stats"]) >= {"reconnects"}
            sid = _frozen(http)
            r = http.post(f"/sessions/{sid}/tools/measure", json={"n": 10})
            assert r.status_code == 503 and r.json()["error"]["code"] == "apparatus_error", r.text
            r = http.get("/health")
            assert r.status_code == 503, r.text
            assert r.json()["status"] == "down" and r.json()["links"]["wt"]["link"] == "down"
            assert "LinkLost" in r.json()["links"]["wt"]["detail"]["reason"]
