"""The live view of the chamber tools API (issue 17): the feed, GET /live, the SSE stream GET /live/stream, the page.

What must hold: every SET and MSR the service makes reaches the feed (and a refused SET does not), the ring stays
bounded, an unset reading is null, nothing a tool call would not show is in the feed (no session id, no
bookkeeping column), the stream starts with the snapshot and then carries only new rows, stopping the server ends
an open stream, and with a token the live routes need it like every other route. The job's side (issue 35): what
is measured now names its claims until another stage begins; the end of a job is in the snapshot, and the stream
sends it, then the report, and ends; the job's view serves the report once it is written.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

from chamber.safe_state import DEFAULT_SAFE

import chamber
from chamber.errors import InvalidSetting
from protocols.api import running_api
from protocols.api.live import LiveChamber, LiveFeed
from protocols.claims import load_claims

CLAIM = "dps310-operating-range"
TOKEN = "live-view-token-0123456789abcdef"


@pytest.fixture(scope="module")
def claims():
    return load_claims()


@pytest.fixture
def wt():
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=17)
    yield c
    c.close()


def _frozen_session(http: httpx.Client) -> str:
    sid = http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
    assert http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}}).status_code == 200
    return sid


def _events(lines) -> dict:
    """The next SSE `update` event's data from an iterator of lines (comments skipped)."""
    data = []
    for line in lines:
        if line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and data:
            return json.loads("".join(data))
    raise AssertionError("the stream ended before an update")


# ------------------------------------------------------------------------------------------- the feed itself
def test_ring_keeps_the_latest_rows_with_their_sequence_numbers():
    feed = LiveFeed(ring_rows=5, wall_clock=lambda: 100.0)
    feed.add_chamber("wt", "standard", [{"name": "a", "unit": "Pa"}], {})
    values = np.arange(16, dtype=float).reshape(8, 2)
    values[7, 0] = np.nan  # the sensor's 'unset'
    feed.record_rows("wt", ("a", "counter"), values, np.arange(8, dtype=float))
    snap = feed.snapshot()
    assert snap["seq"] == 8 and [r["seq"] for r in snap["rows"]] == [4, 5, 6, 7, 8]
    assert snap["rows"][0]["values"] == {"a": 6.0}  # the bookkeeping column is not in the feed
    assert snap["rows"][-1]["values"] == {"a": None}
    assert snap["chambers"]["wt"]["rows"] == 8
    assert [r["seq"] for r in feed.snapshot(since=7)["rows"]] == [8]
    assert feed.snapshot(since=8)["rows"] == [] and [r["seq"] for r in feed.snapshot(since=2)["rows"]] == [4, 5, 6,
                                                                                                         7, 8]


def test_refused_setting_never_reaches_the_feed(wt):
    feed = LiveFeed()
    proxy = LiveChamber(wt, "wt", feed)
    with pytest.raises(InvalidSetting):
        proxy.set_many({"load_in": 0.5, "hatch": 1000})
    assert feed.snapshot()["chambers"]["wt"]["state"] == {}
    proxy.set_many({"load_in": 0.5})
    proxy.measure(3)
    snap = feed.snapshot()
    assert snap["chambers"]["wt"]["state"] == {"load_in": 0.5} and len(snap["rows"]) == 3
    assert proxy.wrapped is wt and proxy.layout is wt.layout


# ------------------------------------------------------------------------------------------- over HTTP
def test_snapshot_shows_state_rows_and_claim_but_no_session_id(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        assert http.get("/live").json()["rows"] == []
        sid = _frozen_session(http)
        http.post(f"/sessions/{sid}/tools/stage_conditions", json={"settings": {"load_in": 0.25}})
        http.post(f"/sessions/{sid}/tools/measure", json={"n": 4})
        r = http.get("/live")
        assert r.status_code == 200
        snap = r.json()
        assert snap["chambers"]["wt"]["state"] == {**DEFAULT_SAFE["wt"], "load_in": 0.25}  # after its safe start
        assert len(snap["rows"]) == 4 and "pressure_upwind" in snap["rows"][0]["values"]
        assert snap["claim"]["id"] == CLAIM and snap["claim"]["activity"] == "measure"
        assert sid not in r.text


def test_page_is_self_contained(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        r = http.get("/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert 'src="live/static/uPlot.iife.min.js"' in r.text  # the vendored charting library, relative
        assert 'EventSource("live/stream")' in r.text
        assert "http://" not in r.text and "https://" not in r.text  # no CDN, nothing fetched from elsewhere
        lib = http.get("/live/static/uPlot.iife.min.js")
        assert lib.status_code == 200 and "javascript" in lib.headers["content-type"] and "uPlot" in lib.text[:200]
        assert http.get("/live/static/uPlot.min.css").status_code == 200
        assert "MIT" in http.get("/live/static/uPlot.LICENSE").text
        assert http.get("/live/static/..%2Fapp.py").status_code == 404  # only the vendored files, nothing else


def test_each_feed_has_its_own_start_id_and_the_snapshot_carries_it():
    a, b = LiveFeed(), LiveFeed()
    assert a.start_id != b.start_id and a.snapshot()["start_id"] == a.start_id
    assert LiveFeed(start_id="fixed").snapshot()["start_id"] == "fixed"


def test_claim_line_has_stage_bound_and_result_with_its_reason_once_known():
    feed = LiveFeed(wall_clock=lambda: 5.0)
    feed.record_stage("checks", done=2, total=40, note="wt: stage fans off")
    feed.record_claim({"id": "x-range", "bound": "300 … 1200 hPa"}, chamber=None, activity="graded")
    snap = feed.snapshot()
    assert snap["stage"] == {"name": "checks", "done": 2, "total": 40, "note": "wt: stage fans off", "at": 5.0}
    assert snap["claim"]["bound"] == "300 … 1200 hPa" and "result" not in snap["claim"]
    feed.record_verdicts([{"claim_id": "x-range", "verdict": "pass", "claim_unit": "hPa", "class": None,
                           "reason": "inside the claim by 86.8 hPa, more than c = 0.4 hPa",
                           "measured": {"value": "1013.2", "u": "0.4", "unit": "hPa"}}])
    assert feed.snapshot()["claim"]["result"] == {"verdict": "pass", "value": "1013.2", "u": "0.4", "unit": "hPa",
                                                  "reason": "inside the claim by 86.8 hPa, more than c = 0.4 hPa"}
    feed.record_verdicts([{"claim_id": "x-range", "verdict": "inconclusive", "claim_unit": "hPa", "measured": None,
                           "class": "unmatched-stimulus", "reason": "decisive condition not matched: temperature"}])
    result = feed.snapshot()["claim"]["result"]  # an inconclusive verdict says why, with its class
    assert result["reason"] == "decisive condition not matched: temperature" and result["class"] == "unmatched-stimulus"


def test_what_is_measured_now_names_its_claims_and_the_first_ones_bound_until_another_stage():
    feed = LiveFeed(wall_clock=lambda: 7.0)
    feed.record_bounds({"a-range": "300 … 1200 hPa"})
    feed.record_stage("calibration and checks", total=3)
    assert feed.snapshot()["measuring"] is None
    feed.record_measuring(("a-range", "b-noise"), chamber="wt", staged="fans off, OSR 8", rows=200)
    assert feed.snapshot()["measuring"] == {"claims": ["a-range", "b-noise"], "chamber": "wt",
                                            "staged": "fans off, OSR 8", "rows": 200, "at": 7.0,
                                            "bound": "300 … 1200 hPa"}
    feed.record_stage("calibration and checks", done=1, total=3, note="a-range")  # a step of the same stage
    assert feed.snapshot()["measuring"]["claims"] == ["a-range", "b-noise"]
    feed.record_stage("sweep", total=2)  # another stage: nothing of the last one is measured any more
    assert feed.snapshot()["measuring"] is None


def test_the_end_of_a_job_is_in_the_snapshot_and_the_stream_sends_it_then_the_report_and_ends(tmp_path):
    from protocols.api.live import live_app
    from protocols.api.server import serve_in_thread

    report = tmp_path / "report.html"
    report.write_text("<!doctype html><title>Run report: r1</title><p>53 claims</p>", encoding="utf-8")
    feed = LiveFeed(wall_clock=lambda: 9.0)
    feed.record_measuring(("a-range",), chamber="wt", staged="fans off", rows=20)
    with serve_in_thread(live_app(feed)) as url, httpx.Client(base_url=url, timeout=10) as http:
        missing = http.get("/report")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "no_report"
        feed.record_end("finished", verdicts={"inconclusive": 39, "pass": 14}, report=report,
                        note="results in /runs/r1")
        snap = http.get("/live").json()
        assert snap["end"] == {"status": "finished", "at": 9.0, "verdicts": 53, "counts": {"inconclusive": 39,
                               "pass": 14}, "note": "results in /runs/r1", "report": "report",
                               "report_name": "report.html"}
        assert snap["measuring"] is None  # nothing is measured once the job has ended
        served = http.get("/report")  # the view serves the report it links, while it is up
        assert served.status_code == 200 and served.text == report.read_text(encoding="utf-8")
        with http.stream("GET", "/live/stream") as stream:
            events = [line for line in stream.iter_lines() if line.startswith("event: ")]
            # The stream ended by itself (iter_lines returned): the update with the end, then the report.
        assert events == ["event: update", "event: report"]
        with http.stream("GET", "/live/stream") as stream:
            lines = list(stream.iter_lines())
        data = json.loads(lines[lines.index("event: report") + 1][len("data: "):])
        assert data == {"name": "report.html", "html": report.read_text(encoding="utf-8")}


def test_a_job_that_ended_without_a_report_says_so_and_its_stream_ends_without_one():
    feed = LiveFeed(wall_clock=lambda: 3.0)
    feed.record_end("interrupted", verdicts={"pass": 12})
    assert feed.snapshot()["end"]["report"] is None and feed.report_file is None

    async def collect() -> list[str]:
        return [chunk async for chunk in feed.stream()]

    import asyncio

    chunks = asyncio.run(collect())
    assert [c.split("\n", 1)[0] for c in chunks] == ["retry: 1000", "event: update"]


def test_a_nested_view_shows_its_claims_on_the_outer_one_and_rows_once_each(wt):
    outer, inner = LiveFeed(), LiveFeed()
    api_side = LiveChamber(LiveChamber(wt, "wt", outer), "wt", inner)  # the agent's API inside the main job
    api_side.measure(3)
    assert outer.snapshot()["seq"] == 3 and inner.snapshot()["seq"] == 3
    inner.record_claim({"id": CLAIM}, chamber="wt", activity="measure")
    assert outer.snapshot()["claim"]["id"] == CLAIM and outer.snapshot()["claim"]["activity"] == "measure"


def test_rows_of_a_real_pace_board_are_published_one_by_one_as_the_link_delivers_them():
    from simulator.board import running_board

    with running_board("wt", pace="real", seed=3) as handle:
        board = chamber.open_chamber(handle.url, backend="serial")
        try:
            feed = LiveFeed()
            proxy = LiveChamber(board, "wt", feed)
            seen: list[tuple[int, bool]] = []  # (seq, whether the MSR had returned when it reached the feed)
            done = threading.Event()

            def watch() -> None:
                since, last = 0, False
                while not last:
                    last = done.is_set()  # one more read after the MSR returned
                    snap = feed.snapshot(since)
                    seen.extend((r["seq"], last) for r in snap["rows"])
                    since = snap["seq"]
                    time.sleep(0.005)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            started = time.time()
            frame = proxy.measure(8)
            ended = time.time()
            done.set()
            watcher.join(5)
        finally:
            board.close()
    assert [s for s, _ in seen] == list(range(1, 9)) and len(frame) == 8  # each row once, in order
    assert seen[0][1] is False  # the first row was on the feed while the MSR was still running (an order, not a time)
    rows = feed.snapshot()["rows"]
    assert [r["t"] for r in rows] == sorted(r["t"] for r in rows) and started <= rows[0]["t"] <= rows[-1]["t"] <= ended
    # The pace of the whole MSR: the span of its rows' host times over its row count
    assert feed.row_seconds("wt") == pytest.approx((rows[-1]["t"] - rows[0]["t"]) / 7, rel=1e-6)


def test_stream_sends_the_snapshot_then_only_new_rows(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        sid = _frozen_session(http)
        http.post(f"/sessions/{sid}/tools/measure", json={"n": 2})
        with httpx.Client(base_url=url, timeout=10) as watcher, watcher.stream("GET", "/live/stream") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            first = _events(lines)
            assert [r["seq"] for r in first["rows"]] == [1, 2]
            http.post(f"/sessions/{sid}/tools/measure", json={"n": 3})
            update = _events(lines)
            while update["seq"] < 5:  # a claim update may come first; rows arrive by the deadline of the read
                update = _events(lines)
            assert [r["seq"] for r in update["rows"]] == [3, 4, 5]
            assert first["verdicts"] == {} and update["verdicts"] is None  # resent only when one is recorded


def test_stopping_the_server_ends_an_open_stream(wt, tmp_path, claims):
    ended = threading.Event()
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url:
        opened = threading.Event()

        def watch() -> None:
            with httpx.Client(base_url=url, timeout=30) as client, client.stream("GET", "/live/stream") as stream:
                for line in stream.iter_lines():
                    if line.startswith("data: "):
                        opened.set()
            ended.set()

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        assert opened.wait(10)
    assert ended.wait(10), "the stream kept the server from stopping"  # a bound on the wait, not a measured time
    thread.join(5)


def test_live_routes_need_the_token_when_one_is_set(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, token=TOKEN) as url, \
            httpx.Client(base_url=url) as http:
        for path in ("/", "/live", "/live/stream"):
            assert http.get(path).status_code == 401
        assert http.get("/live", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
