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
