"""The main job's own live view: the in-process grading is watched through the same feed and page as `serve`."""

from __future__ import annotations

import httpx

from chamber import open_chamber
from protocols.api.live import LiveChamber, LiveFeed, claim_from_progress, live_app
from protocols.api.server import serve_in_thread
from protocols.claims import load_claims


def test_the_main_job_view_shows_the_rows_measured_and_the_claim_being_graded():
    claims = load_claims()
    feed = LiveFeed()
    chamber = LiveChamber(open_chamber(backend="sim", chamber="wt"), "wt", feed)
    with serve_in_thread(live_app(feed)) as url:
        assert httpx.get(url + "/").status_code == 200  # the same page as serve's
        assert httpx.get(url + "/live").json()["rows"] == []
        chamber.set("load_in", 0.5)
        chamber.measure(4)
        claim_from_progress(feed, "[3/37] dps310-operating-range", claims)
        claim_from_progress(feed, "wt: fans off: settle 20 rows", claims)  # not a claim line: ignored
        snap = httpx.get(url + "/live").json()
        assert len(snap["rows"]) == 4 and snap["chambers"]["wt"]["state"]["load_in"] == 0.5
        assert snap["claim"]["id"] == "dps310-operating-range" and snap["claim"]["activity"] == "graded"
        assert httpx.get(url + "/tools").status_code == 404  # a view only: nothing here can move the chamber
