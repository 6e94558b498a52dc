"""The live view of the chamber tools API (issue 17): the feed, GET /live, the SSE stream GET /live/stream, the page.

What must hold: every SET and MSR the service makes reaches the feed (and a refused SET does not), the ring stays
bounded, an unset reading is null, nothing a tool call would not show is in the feed (no session id, no
bookkeeping column), the stream starts with the snapshot and then carries only new rows, stopping the server ends
an open stream, and with a token the live routes need it like every other route.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

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
        assert snap["chambers"]["wt"]["state"] == {"load_in": 0.25, "load_out": 0.0}  # after the session's safe start
        assert len(snap["rows"]) == 4 and "pressure_upwind" in snap["rows"][0]["values"]
        assert snap["claim"]["id"] == CLAIM and snap["claim"]["activity"] == "measure"
        assert sid not in r.text


def test_page_is_self_contained(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims) as url, httpx.Client(base_url=url) as http:
        r = http.get("/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert 'getContext("2d")' in r.text  # the plot is drawn on canvases by the inline script
        assert 'EventSource("live/stream")' in r.text
        assert "http://" not in r.text and "https://" not in r.text  # no CDN, nothing fetched from elsewhere


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
        started = time.monotonic()
    assert ended.wait(10), "the stream kept the server from stopping"
    assert time.monotonic() - started < 5
    thread.join(5)


def test_live_routes_need_the_token_when_one_is_set(wt, tmp_path, claims):
    with running_api({"wt": wt}, record_dir=tmp_path, claims=claims, token=TOKEN) as url, \
            httpx.Client(base_url=url) as http:
        for path in ("/", "/live", "/live/stream"):
            assert http.get(path).status_code == 401
        assert http.get("/live", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
