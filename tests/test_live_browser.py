"""The live view in a real headless Chromium (issue 17): the page loads, the plot updates as rows arrive through
the API, and the browser reports no console error or uncaught exception.

Driven over the DevTools protocol (tests/cdp.py). CI installs Debian's chromium when it is missing (.ci/run); the
test skips, saying so, only when no Chromium binary is found.
"""

from __future__ import annotations

import time

import httpx
import pytest

import chamber
from protocols.api import running_api
from protocols.claims import load_claims
from cdp import find_chromium, headless_page

CLAIM = "dps310-operating-range"
BROWSER = find_chromium()

pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium binary on PATH (apt-get install chromium, or "
                                                       "set CHROMIUM); the live view's browser test needs one")


def _wait_for(page, expression: str, wanted, timeout_s: float = 5.0):
    """Evaluate `expression` in the page until `wanted(value)` holds, up to a deadline; returns the last value."""
    deadline = time.monotonic() + timeout_s
    value = page.evaluate(expression)
    while not wanted(value) and time.monotonic() < deadline:
        value = page.evaluate(expression)
    return value


def test_page_plots_rows_as_they_arrive_without_console_errors(tmp_path):
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=5)
    try:
        with running_api({"wt": wt}, record_dir=tmp_path, claims=load_claims()) as url, \
                httpx.Client(base_url=url) as http, headless_page(BROWSER) as page:
            page.call("Page.navigate", url=url + "/")
            status = _wait_for(page, "(document.getElementById('status') || {}).textContent", lambda s: s == "live")
            assert status == "live"
            assert page.evaluate("document.body.dataset.rowsPlotted") == "0"

            sid = http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
            http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}})
            http.post(f"/sessions/{sid}/tools/stage_conditions", json={"settings": {"load_in": 0.5}})
            http.post(f"/sessions/{sid}/tools/measure", json={"n": 6})
            plotted = _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 6)
            assert plotted == 6
            http.post(f"/sessions/{sid}/tools/measure", json={"n": 4})
            assert _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 10) == 10

            assert page.evaluate("document.getElementById('rows').textContent") == "10"
            assert CLAIM in page.evaluate("document.getElementById('claim-text').textContent")
            assert "load_in=0.5" in page.evaluate("document.querySelector('[data-chamber=wt] .state').textContent")
            canvases = page.evaluate("document.querySelectorAll('canvas[data-sensor^=\"wt/\"]').length")
            assert canvases >= 4  # one per wind-tunnel sensor
            drawn = page.evaluate(  # the pressure plot has ink on it: some pixel is not transparent
                "(() => { const c = document.querySelector('canvas[data-sensor=\"wt/pressure_upwind\"]');"
                " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                " for (let i = 3; i < d.length; i += 4) if (d[i] > 0) return true; return false; })()")
            assert drawn is True
            page.evaluate("1")  # drain events that arrived meanwhile
            assert page.errors() == []
    finally:
        wt.close()
