"""The main job's own live view: the in-process grading is watched through the same feed and page as `serve`.

The stage and what is measured come from the job's own calls (issue 35): `start` and `stage` name the stage, the
runner's `measuring` event names the claims a reading serves; a line the job prints never moves the view. When
the job ends, the view says how, with the verdict count and the report it serves.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import httpx
import pytest

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

            progress.say("station: opening the simulated station")  # a line printed is never read for the stage
            assert httpx.get(view.url + "live").json()["stage"]["name"] == "calibration and checks"
            progress.stage("station", "opening the simulated station")
            assert httpx.get(view.url + "live").json()["stage"] == {
                "name": "station", "done": 0, "total": 0, "note": "opening the simulated station",
                "at": pytest.approx(time.time(), abs=60)}
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


@dataclass
class Recorder:
    """The progress the CLI would render: what the job called, in order, and the view's `measuring` at each call."""

    feed: object
    calls: list = None

    def __post_init__(self):
        self.calls = []

    def start(self, label, total):
        self.calls.append(("start", label))

    def stage(self, name, note=""):
        self.calls.append(("stage", name))

    def advance(self, note):
        self.calls.append(("advance", note))

    def detail(self, message):
        pass

    def say(self, message):
        self.calls.append(("say", message))

    def measuring(self, event):
        self.calls.append(("measuring", event, self.feed.snapshot()["measuring"]))


def test_the_runners_events_name_the_claims_under_measurement_and_what_is_staged():
    """A planned staging names every claim it serves, a procedure (the fan stop) its claim at each of its stagings;
    the view shows the same, with the bound of the first claim."""
    from protocols.api.live_job import start_job_live_view
    from protocols.claim_sources import load_main_job_claims

    claims = load_main_job_claims(None)  # the packaged claims and the chamber's own parts (the fans)
    chosen = [claims["dps310-operating-range"], claims["nf-f12-pwm-stops-at-zero-duty-exhaust"]]
    wt = open_chamber(backend="sim", chamber="wt", seed=4)
    try:
        with contextlib.ExitStack() as stack:
            view = start_job_live_view(stack, {"wt": wt}, chosen)
            recorder = Recorder(view.feed)
            progress = view.progress(recorder)
            progress.start("checks", len(chosen))
            run_batch(chosen, ProtocolContext(chambers=view.chambers, rows=5, settle_rows=1, graded=view.graded,
                                              measuring=progress.measuring))
    finally:
        wt.close()
    events = [(c[1], c[2]) for c in recorder.calls if c[0] == "measuring"]
    event, shown = next((e, shown) for e, shown in events if "dps310-operating-range" in e.claims)
    assert event.claims == ("dps310-operating-range",) and event.chamber == "wt" and event.rows == 5
    assert event.staged  # the step's own words: what is set on the chamber
    assert shown == {"claims": ["dps310-operating-range"], "chamber": "wt", "staged": event.staged, "rows": 5,
                     "at": shown["at"], "bound": "300 … 1200 hPa"}
    fan = [e for e, _ in events if e.claims == ("nf-f12-pwm-stops-at-zero-duty-exhaust",)]
    assert len(fan) >= 2 and all(e.chamber == "wt" for e in fan)  # the procedure's start, then each of its stagings
    assert len({e.staged for e in fan}) >= 2  # what it stages changes as it goes, and the view says so


def test_the_end_says_how_the_job_ended_with_its_verdicts_and_serves_its_report(tmp_path):
    from protocols.api.live_job import start_job_live_view

    (tmp_path / "report.md").write_text("# Run report\n", encoding="utf-8")
    (tmp_path / "report.html").write_text("<!doctype html><title>Run report: r7</title>", encoding="utf-8")
    with contextlib.ExitStack() as stack:
        view = start_job_live_view(stack, {})
        view.ended({"status": "finished", "verdicts": {"pass": 14, "inconclusive": 39},
                    "report": str(tmp_path / "report.md"), "run_dir": str(tmp_path)})
        end = httpx.get(view.url + "live").json()["end"]
        assert (end["status"], end["verdicts"], end["report"]) == ("finished", 53, "report")
        assert end["counts"] == {"inconclusive": 39, "pass": 14}
        assert httpx.get(view.url + "report").text == "<!doctype html><title>Run report: r7</title>"
    with contextlib.ExitStack() as stack:  # failed before any report: the error, and no link
        view = start_job_live_view(stack, {})
        view.ended({"status": "failed", "error": "BoardLost: wt did not answer", "run_dir": str(tmp_path / "x")})
        end = httpx.get(view.url + "live").json()["end"]
        assert (end["status"], end["verdicts"], end["report"], end["note"]) == (
            "failed", 0, None, "BoardLost: wt did not answer")
