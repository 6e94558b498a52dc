"""The live view in a real headless Chromium (issues 17, 27 and 35): real plots with a wall-clock time axis per
chamber in 24-hour time and y ticks in the unit (4-5 of them), the barometers overlaid, each series' latest value
with its unit in the legend (the value under the cursor on hover), crisp canvases at devicePixelRatio 2; chambers
side by side on a wide window, "no rows yet" on a panel without rows, compact panels for a fleet, a "rows kept"
figure that is the rows the page holds; rows on the page within a second of being measured on a real-pace
emulated board; old traces dropped when the service restarts; a stale look once the stream stops; during the main
job the claim under measurement named, and after it "finished HH:MM:SS, N verdicts" with a report link that
works once the job has exited, and no more reconnecting; no console error or uncaught exception.

Driven over the DevTools protocol (tests/cdp.py). CI installs Debian's chromium when it is missing (.ci/run); the
tests skip, saying so, only when no Chromium binary is found.
"""

from __future__ import annotations

import queue
import re
import socket
import threading
import time

import httpx
import numpy as np
import pytest

import chamber
from protocols.api import running_api
from protocols.api.live import LiveChamber, LiveFeed, live_app
from protocols.api.server import serve_in_thread
from protocols.bench_job import Quiet
from protocols.claims import load_claims
from cdp import find_chromium, headless_page

CLAIM = "dps310-operating-range"
BROWSER = find_chromium()
PRESSURES = ["pressure_upwind", "pressure_downwind", "pressure_ambient", "pressure_intake"]

pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium binary on PATH (apt-get install chromium, or "
                                                       "set CHROMIUM); the live view's browser tests need one")


def _wait_for(page, expression: str, wanted, timeout_s: float = 5.0):
    """Evaluate `expression` in the page until `wanted(value)` holds, up to a deadline; returns the last value
    (an expression that throws, e.g. before <body> exists, counts as not yet; the last attempt's error is raised)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = page.evaluate(expression)
            if wanted(value):
                return value
        except RuntimeError:
            if time.monotonic() >= deadline:
                raise
            continue
        if time.monotonic() >= deadline:
            return value


def _plot(key: str, what: str) -> str:
    return f"(() => {{ const u = window.livePlots[{key!r}]; return u ? {what} : null; }})()"


def test_plots_have_time_and_unit_axes_overlaid_barometers_hover_values_and_high_dpi(tmp_path):
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=5)
    lt = chamber.open_chamber(backend="sim", chamber="lt", seed=6)
    try:
        with running_api({"wt": wt, "lt": lt}, record_dir=tmp_path, claims=load_claims()) as url, \
                httpx.Client(base_url=url) as http, headless_page(BROWSER) as page:
            page.emulate(1200, 900, scale=2.0)
            page.call("Page.navigate", url=url + "/")
            assert _wait_for(page, "(document.getElementById('status') || {}).textContent", lambda s: s == "live")
            assert page.evaluate("document.body.dataset.rowsPlotted") == "0"

            sid = http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
            http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}})
            http.post(f"/sessions/{sid}/tools/stage_conditions", json={"settings": {"load_in": 0.5}})
            http.post(f"/sessions/{sid}/tools/measure", json={"n": 6})
            assert _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 6) == 6
            http.post(f"/sessions/{sid}/tools/measure", json={"n": 4})
            assert _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 10) == 10
            assert page.evaluate("document.getElementById('rows').textContent") == "10"
            now = page.evaluate("document.getElementById('now').textContent")
            assert f"session claim {CLAIM} on wt: measure" in " ".join(now.split())  # the claim in use now
            assert "load_in=0.5" in page.evaluate("document.querySelector('[data-chamber=wt] .state').textContent")

            # The four barometers on one axis whose label is their unit; the x axis is wall-clock time.
            assert page.evaluate(_plot("wt/pressure", "u.series.slice(1).map(s => s.label)")) == PRESSURES
            assert page.evaluate(_plot("wt/pressure", "u.axes[1].label")) == "Pa"
            assert page.evaluate(_plot("wt/pressure", "u.scales.x.time")) is True
            y_ticks = page.evaluate(_plot("wt/pressure", "u.axes[1]._values"))
            x_ticks = page.evaluate(_plot("wt/pressure", "u.axes[0]._values"))
            assert y_ticks and all(any(ch.isdigit() for ch in t) for t in y_ticks)
            assert x_ticks and all(re.fullmatch(r"\d\d:\d\d:\d\d(\.\d)?", t) for t in x_ticks)  # 24-hour times of day
            assert len(y_ticks) >= 4, y_ticks  # tall enough to read a value off the axis
            # Without hovering, the legend shows each series' latest value with its unit, and that value's time.
            latest = _wait_for(page, _plot("wt/pressure",
                                           "Array.from(u.root.querySelectorAll('.u-value')).map(e => e.textContent)"),
                               lambda v: v is not None and len(v) == 5 and "\u2013" not in "".join(v))
            last_row = page.evaluate(_plot("wt/pressure", "u.data.slice(1).map(d => d[d.length - 1])"))
            assert latest[0].endswith("(latest)") and re.match(r"\d\d:\d\d:\d\d", latest[0])
            assert [float(v.removesuffix(" Pa")) for v in latest[1:]] == pytest.approx(last_row, abs=0.051)
            xs = page.evaluate(_plot("wt/pressure", "u.data[0]"))
            assert len(xs) == 10 and abs(xs[-1] - time.time()) < 60  # seconds since the epoch: the rows' host time
            assert sorted(k for k in page.evaluate("Object.keys(window.livePlots)") if k.startswith("wt/")) == sorted(
                ["wt/current", "wt/rpm", "wt/pressure", "wt/mic", "wt/signal"])
            # Likewise the light tunnel's six light sensors share one axis in their unit.
            assert page.evaluate(_plot("lt/light", "u.series.slice(1).map(s => s.label)")) == [
                "ir_1", "vis_1", "ir_2", "vis_2", "ir_3", "vis_3"]
            assert page.evaluate(_plot("lt/light", "u.axes[1].label")) == "counts"

            # Crisp on high-DPI: the canvas has two device pixels per CSS pixel.
            css_w, dev_w = page.evaluate(_plot("wt/pressure", "[u.over.clientWidth, u.ctx.canvas.width]"))
            assert dev_w >= 2 * css_w - 2

            # Hover: the legend shows the value under the cursor with its unit.
            box = page.evaluate(_plot("wt/pressure", "(() => { const r = u.over.getBoundingClientRect();"
                                                     " return [r.left, r.top, r.width, r.height]; })()"))
            page.mouse_move(box[0] + box[2] * 0.9, box[1] + box[3] / 2)
            legend = _wait_for(page, _plot("wt/pressure",
                                           "Array.from(u.root.querySelectorAll('.u-value')).map(e => e.textContent)"),
                               lambda v: v is not None and len(v) == 5 and v[1].endswith(" Pa"))
            assert legend[1].endswith(" Pa") and ":" in legend[0]
            drawn = page.evaluate(_plot("wt/pressure",  # ink: some pixel of the plot is not transparent
                                        "(() => { const d = u.ctx.getImageData(0, 0, u.ctx.canvas.width,"
                                        " u.ctx.canvas.height).data; for (let i = 3; i < d.length; i += 4)"
                                        " if (d[i] > 0) return true; return false; })()"))
            assert drawn is True
            page.evaluate("1")  # drain events that arrived meanwhile
            assert page.errors() == []
    finally:
        wt.close()
        lt.close()


def test_rows_appear_within_a_second_of_being_measured_on_a_real_pace_board():
    from simulator.board import running_board

    with running_board("wt", pace="real", seed=4) as handle:
        board = chamber.open_chamber(handle.url, backend="serial")
        try:
            feed = LiveFeed()
            wt = LiveChamber(board, "wt", feed)
            with serve_in_thread(live_app(feed)) as url, headless_page(BROWSER) as page:
                page.call("Page.navigate", url=url + "/")
                assert _wait_for(page, "document.getElementById('status').textContent", lambda s: s == "live")
                measured = threading.Thread(target=wt.measure, args=(14,))  # ~2 s at the board's ~7 rows/s
                measured.start()
                first = _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 1, 3.0)
                still_measuring = measured.is_alive()
                measured.join(10)
                assert _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 14) == 14
                latencies = page.evaluate("window.liveLatencies")
                assert page.errors() == []
        finally:
            board.close()
    assert first >= 1 and still_measuring  # rows were on the page while the MSR was still running
    assert len(latencies) == 14 and max(latencies) < 1.0, latencies


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _feed_with_rows(n: int, level: float) -> LiveFeed:
    feed = LiveFeed()
    feed.add_chamber("wt", "standard", [{"name": p, "unit": "Pa"} for p in PRESSURES], {})
    now = time.time()
    feed.record_rows("wt", tuple(PRESSURES), np.full((n, 4), level), now - 0.1 * np.arange(n)[::-1])
    return feed


def test_a_stopped_stream_looks_stale_and_a_restart_clears_the_old_traces():
    port = _free_port()
    old = _feed_with_rows(12, 100.0)
    with headless_page(BROWSER) as page:
        with serve_in_thread(live_app(old), port=port) as url:
            page.call("Page.navigate", url=url + "/")
            assert _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 12) == 12
            assert page.evaluate("document.body.dataset.stale") == "0"
            assert page.evaluate("document.body.dataset.startId") == old.start_id
        # The service stopped: the page says so and greys its plots, keeping the last data and its time.
        assert _wait_for(page, "document.body.dataset.stale", lambda s: s == "1") == "1"
        assert "stopped" in page.evaluate("document.getElementById('status').textContent")
        assert "last row" in page.evaluate("document.getElementById('updated').textContent")
        assert page.evaluate("getComputedStyle(document.querySelector('.plot')).opacity") == "0.45"
        assert page.evaluate(_plot("wt/pressure", "u.data[0].length")) == 12

        new = _feed_with_rows(3, 200.0)
        with serve_in_thread(live_app(new), port=port):
            # The page reconnects by itself, sees another start id and draws only the new service's rows.
            assert _wait_for(page, "document.body.dataset.startId", lambda s: s == new.start_id, 10.0) == new.start_id
            assert _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n == 3) == 3
            assert page.evaluate(_plot("wt/pressure", "u.data[1]")) == [200.0, 200.0, 200.0]
            assert page.evaluate("document.body.dataset.restarts") == "1"
            assert page.evaluate("document.body.dataset.stale") == "0"
            errors = [e for e in page.errors() if "live/stream" not in e]  # the refused reconnects are expected
            assert errors == []


def _panel_boxes(page) -> dict:
    return page.evaluate("Object.fromEntries(Array.from(document.querySelectorAll('.chamber')).map(c => "
                         "[c.dataset.chamber, (r => [r.left, r.top, r.width])(c.getBoundingClientRect())]))")


def _visible(page, selector: str) -> list[bool]:
    return page.evaluate(f"Array.from(document.querySelectorAll({selector!r})).map(e => e.offsetParent !== null)")


def test_chambers_side_by_side_empty_panels_say_no_rows_yet_and_rows_kept_is_what_the_page_holds():
    feed = LiveFeed(ring_rows=5000)
    feed.add_chamber("wt", "standard", [{"name": p, "unit": "Pa"} for p in PRESSURES], {})
    feed.add_chamber("lt", "standard", [{"name": "ir_1", "unit": "counts"}, {"name": "vis_1", "unit": "counts"}], {})
    with serve_in_thread(live_app(feed)) as url, headless_page(BROWSER) as page:
        page.emulate(1400, 900)
        page.call("Page.navigate", url=url + "/")
        assert _wait_for(page, "document.body.dataset.stream", lambda s: s == "open") == "open"
        _wait_for(page, "document.querySelectorAll('.chamber').length", lambda n: n == 2)
        boxes = _panel_boxes(page)
        assert boxes["wt"][1] == boxes["lt"][1] and boxes["lt"][0] > boxes["wt"][0]  # side by side, same top
        assert _visible(page, "[data-chamber=lt] .empty") == [True]  # an empty panel says so
        assert page.evaluate("document.querySelector('[data-chamber=lt] .empty').textContent") == "no rows yet"

        # 4,500 rows over 450 s: the page keeps at most 4,000 per chamber, and says how many it keeps.
        now = time.time()
        feed.record_rows("wt", tuple(PRESSURES), np.full((4500, 4), 94520.0), now - 0.1 * np.arange(4500)[::-1])
        assert _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 4500) == 4500
        assert page.evaluate("document.body.dataset.rowsKept") == "4000"
        assert page.evaluate("document.getElementById('kept').textContent") == "rows kept 4,000 of 4,500 received"
        assert page.evaluate(_plot("wt/pressure", "u.data[0].length")) == 4000
        assert _visible(page, "[data-chamber=wt] .empty") == [False]
        assert _visible(page, "[data-chamber=lt] .empty") == [True]  # still nothing from the light tunnel

        page.emulate(900, 900)  # a narrow window: one chamber below the other
        boxes = _wait_for(page, "(" + "() => { const b = {}; document.querySelectorAll('.chamber').forEach(c => "
                          "b[c.dataset.chamber] = c.getBoundingClientRect().top); return b; })()",
                          lambda b: b["lt"] > b["wt"])
        assert boxes["lt"] > boxes["wt"]
        assert page.errors() == []


def test_a_fleet_of_eight_chambers_gets_compact_panels_three_to_a_row():
    feed = LiveFeed()
    members = [f"wt-{i}" for i in range(1, 5)] + [f"lt-{i}" for i in range(1, 5)]
    sensors = [{"name": p, "unit": "Pa"} for p in PRESSURES] + [{"name": c, "unit": "ADC counts"}
                                                                for c in ("current_in", "current_out")]
    for m in members:
        feed.add_chamber(m, "standard", sensors, {})
        feed.record_rows(m, tuple(PRESSURES), np.full((5, 4), 1.0), time.time() - 0.1 * np.arange(5)[::-1])
    with serve_in_thread(live_app(feed)) as url, headless_page(BROWSER) as page:
        page.emulate(1400, 900)
        page.call("Page.navigate", url=url + "/")
        _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 40)
        assert page.evaluate("document.body.classList.contains('compact')") is True
        boxes = _panel_boxes(page)
        assert sorted(boxes) == sorted(members)
        assert len({round(top) for _, top, _ in boxes.values()}) == 3  # 3 + 3 + 2 panels
        assert page.evaluate(_plot("wt-1/pressure", "u.height")) == 130
        plots = page.evaluate("Array.from(document.querySelectorAll('[data-chamber=\"wt-1\"] .plot'))"
                              ".map(p => Math.round(p.getBoundingClientRect().top))")
        assert len(plots) == 2 and plots[0] == plots[1]  # two plots to a row inside a compact panel
        assert page.errors() == []


class _JobProgress(Quiet):
    """The progress the CLI would render for the main job; it holds the job at the line naming the live view until
    the test's page is watching it, and at each `measuring` event until the test has looked at the page (so a
    fast job cannot end, or measure the next claim, before the page has shown it)."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.announced, self.watching = threading.Event(), threading.Event()
        self.events: queue.Queue = queue.Queue()

    def say(self, message: str) -> None:
        if message.startswith("live view: "):
            self.url = message.removeprefix("live view: ").strip()
            self.announced.set()
            self.watching.wait(30)


    def measuring(self, event) -> None:
        looked = threading.Event()
        self.events.put((event, looked))
        looked.wait(30)


MAIN_JOB_CLAIMS = ["dps310-operating-range", "si115x-adc-bit-depth", "nf-f12-pwm-stops-at-zero-duty-exhaust"]


def test_during_the_main_job_the_page_names_the_claim_under_measurement_then_says_finished_with_its_report(tmp_path):
    from agent.main_job import MainJob, run_main_job

    job = MainJob(runs_dir=tmp_path / "runs", new=True, rows=20, claims=MAIN_JOB_CLAIMS, no_agent=True,
                  no_station=True, datasheets_dir=tmp_path)
    progress, outcome = _JobProgress(), {}
    runner = threading.Thread(target=lambda: outcome.update(summary=run_main_job(job, progress)), daemon=True)
    with headless_page(BROWSER) as page:
        page.emulate(1400, 900)
        runner.start()
        assert progress.announced.wait(60), "the main job never said its live view's URL"
        page.call("Page.navigate", url=progress.url)
        _wait_for(page, "document.body.dataset.stream", lambda s: s == "open", 10)
        progress.watching.set()
        # During the job: at each reading the runner starts, the page names its claims, chamber and what is staged.
        seen = []
        deadline = time.monotonic() + 180
        while (runner.is_alive() or not progress.events.empty()) and time.monotonic() < deadline:
            try:
                event, looked = progress.events.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                claims = [c for c in event.claims if c != "calibration"] or ["the wind tunnel's calibration"]
                text = _wait_for(page, "document.getElementById('now').textContent.replace(/\\s+/g, ' ')",
                                 lambda t: all(c in t for c in claims) and f"staged {event.staged}" in t, 5.0)
                seen.append((event, text))
            finally:
                looked.set()
        runner.join(10)
        assert not runner.is_alive(), "the main job did not end"
        summary = outcome["summary"]
        assert summary["status"] == "finished", summary
        for event, text in seen:
            claims = [c for c in event.claims if c != "calibration"] or ["the wind tunnel's calibration"]
            assert f"measuring {claims[0]}" in text and f" on {event.chamber} " in text, (event, text)
            assert all(c in text for c in claims) and f"staged {event.staged}" in text, (event, text)
        measured = {c for event, _ in seen for c in event.claims}
        assert measured >= set(MAIN_JOB_CLAIMS), measured  # each claim named while it was measured
        assert any(event.chamber == "lt" and "si115x-adc-bit-depth" in event.claims for event, _ in seen)
        # Each legend shows the latest value with its unit (no "–"), on both chambers' panels.
        legend = page.evaluate(_plot("wt/pressure", "Array.from(u.root.querySelectorAll('.u-value'))"
                                                    ".map(e => e.textContent)"))
        assert all(v.endswith(" Pa") and "\u2013" not in v for v in legend[1:]), legend
        light = page.evaluate(_plot("lt/light", "Array.from(u.root.querySelectorAll('.u-value'))"
                                                ".map(e => e.textContent)"))
        assert all(v.endswith(" counts") and "\u2013" not in v for v in light[1:]), light

        ticks = page.evaluate("Object.fromEntries(Object.entries(window.livePlots)"
                              ".map(([k, u]) => [k, (u.axes[1]._values || []).length]))")
        assert len(ticks) == 9 and all(n >= 4 for n in ticks.values()), ticks  # every plot: 4-5 ticks or more

        # After it: "finished HH:MM:SS, N verdicts", a report link that works now the job has exited, no reconnect.
        status = _wait_for(page, "document.getElementById('status').textContent", lambda s: s.startswith("finished"))
        assert re.fullmatch(r"finished \d\d:\d\d:\d\d, 3 verdicts", status), status
        assert sum(summary["verdicts"].values()) == 3
        assert _wait_for(page, "document.body.dataset.stream", lambda s: s == "closed") == "closed"
        link = _wait_for(page, "window.liveReportUrl", lambda u: bool(u) and u.startswith("blob:"))
        assert page.evaluate("document.getElementById('report').offsetParent !== null") is True
        assert page.evaluate("document.getElementById('report').href") == link
        fetched = page.call("Runtime.evaluate", expression=f"fetch({link!r}).then(r => r.text())", awaitPromise=True,
                            returnByValue=True)["result"]["value"]
        report_html = (tmp_path / "runs" / summary["run_id"] / "report.html").read_text(encoding="utf-8")
        assert fetched == report_html and summary["run_id"] in fetched
        time.sleep(2.5)  # longer than the page's reconnect delay (1 s): it must not have tried again
        assert page.evaluate("document.body.dataset.stream") == "closed"
        assert page.evaluate("document.body.dataset.stale") == "0"
        assert page.evaluate("document.getElementById('status').textContent") == status
        assert page.errors() == []
