"""The main job's own live view: the in-process grading is watched through the same feed and page as `serve`."""

from __future__ import annotations

import httpx

from chamber import open_chamber
from protocols.api.live import LiveChamber, LiveFeed, live_app, report_graded
from protocols.api.server import serve_in_thread
from protocols.claims import load_claims
from protocols.runner import ProtocolContext, run_batch


def test_the_main_job_view_shows_the_rows_measured_and_the_claim_just_graded():
    claims = load_claims()
    feed = LiveFeed()
    chamber = LiveChamber(open_chamber(backend="sim", chamber="wt"), "wt", feed)
    with serve_in_thread(live_app(feed)) as url:
        assert httpx.get(url + "/").status_code == 200  # the same page as serve's
        assert httpx.get(url + "/live").json()["rows"] == [] and httpx.get(url + "/live").json()["claim"] is None
        chamber.set("load_in", 0.5)
        chamber.measure(4)
        snap = httpx.get(url + "/live").json()
        assert len(snap["rows"]) == 4 and snap["chambers"]["wt"]["state"]["load_in"] == 0.5
        # The runner reports each claim as its verdict is ready; the view shows it.
        run_batch([claims["dps310-operating-range"]],
                  ProtocolContext(chambers={"wt": chamber}, rows=5, settle_rows=1, graded=report_graded(feed)))
        snap = httpx.get(url + "/live").json()
        assert snap["claim"]["id"] == "dps310-operating-range" and snap["claim"]["activity"] == "graded"
        assert len(snap["rows"]) > 4  # the protocol's rows reached the view through the wrapped chamber
        assert httpx.get(url + "/tools").status_code == 404  # a view only: nothing here can move the chamber


def test_one_view_for_the_whole_job_shows_the_stage_the_bound_the_verdict_and_the_agents_calls(tmp_path):
    import contextlib

    from protocols.api import running_api
    from protocols.api.live_job import start_job_live_view
    from protocols.bench_job import Quiet

    claims = load_claims()
    claim = claims["dps310-operating-range"]
    wt = open_chamber(backend="sim", chamber="wt", seed=2)
    try:
        with contextlib.ExitStack() as stack:
            view = start_job_live_view(stack, {"wt": wt}, [claim])
            progress = view.progress(Quiet())
            progress.start("checks", 1)
            results = run_batch([claim], ProtocolContext(chambers=view.chambers, rows=5, settle_rows=1,
                                                         graded=view.graded))
            progress.advance(claim.id)
            snap = httpx.get(view.url + "live").json()
            assert snap["stage"]["name"] == "calibration and checks" and snap["stage"]["done"] == 1
            assert snap["claim"]["id"] == claim.id and snap["claim"]["bound"] == "300 … 1200 hPa"
            view.verdicts([r.to_dict() for r in results.results], source="chamber only")
            result = httpx.get(view.url + "live").json()["claim"]["result"]
            assert result["verdict"] in ("pass", "fail", "inconclusive") and result["source"] == "chamber only"
            assert result["value"] is not None and result["u"] is not None and result["unit"] == "hPa"

            progress.say("station: opening the simulated station")
            assert httpx.get(view.url + "live").json()["stage"]["name"] == "station"
            progress.start("agent", 3)
            # The agent's chamber tools API nests in the job's view: its calls show there, on the same URL.
            with running_api(view.chambers, record_dir=tmp_path, claims=claims) as api, \
                    httpx.Client(base_url=api) as http:
                rows_before = httpx.get(view.url + "live").json()["seq"]
                sid = http.post("/sessions", json={"claim_id": claim.id}).json()["session_id"]
                http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}})
                http.post(f"/sessions/{sid}/tools/measure", json={"n": 3})
            snap = httpx.get(view.url + "live").json()
            assert snap["stage"]["name"] == "agent" and snap["stage"]["total"] == 3
            assert snap["claim"]["activity"] == "measure" and snap["claim"]["chamber"] == "wt"
            assert snap["claim"]["bound"] == "300 … 1200 hPa"  # the API names no bound; the job's view knows it
            assert snap["seq"] == rows_before + 3  # each row once, however many views wrap the chamber
    finally:
        wt.close()
