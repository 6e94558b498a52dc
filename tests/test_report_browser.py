"""The run report as a reader sees it in headless Chromium (tests/cdp.py), on a real run folder (issue 35, items 1
and 2): every row of the verdict figure shows the same m ± U (k) and c as its table row, draws the band the rule
decided with (the guard band ±c around each limit of a bound claim, s ± c for a point claim) at its width, and
draws no pass outside its limits by its own U unless the row and its table row both say so (the rule decides at c,
so a pass with c < margin ≤ U has its U reaching past the limit: the rule's m ± c is then inside, and that is
asserted); the contents' links land on their headings; no claim id wraps.

The run is the main job on emulated boards with the simulated station (no agent), on claims chosen for their
shapes: a range read in Pa and decided in hPa, an upper and a lower bound, a point claim graded with the station's
reference barometer, the fan's stop (a pass whose U reaches past its limit), two inconclusive classes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench_cli import PROJECT_ROOT
from cdp import find_chromium, headless_page

BROWSER = find_chromium()
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium binary on PATH (apt-get install chromium, or "
                                                        "set CHROMIUM)")
CLAIMS = ("dps310-operating-range", "mcp4151-zero-scale-error-pot-1", "mcp4151-no-missing-codes-pot-1",
          "dps310-absolute-accuracy", "nf-f12-pwm-stops-at-zero-duty-intake", "a4988-blank-time",
          "dps310-relative-accuracy")
PX = 2.0  # drawing tolerance in CSS pixels: a line's width and the SVG's rounding of coordinates


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    out = subprocess.run([sys.executable, str(PROJECT_ROOT / "bench_cli.py"), "run", "--runs-dir", str(runs),
                          "--no-agent", "--claims", ",".join(CLAIMS), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return Path(json.loads(out.stdout)["run_dir"])


_FIGURE_ROWS = """
Array.from(document.querySelectorAll('figure g[data-claim]')).map(g => {
  const id = g.id, part = s => document.getElementById(id + '-' + s);
  const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                     return {left: r.left, right: r.right, cx: (r.left + r.right) / 2, width: r.width}; };
  const bands = []; for (let j = 0; part('band-' + j); j++) bands.push(box(part('band-' + j)));
  return {data: Object.assign({}, g.dataset), title: g.textContent.trim(),
          numbers: (part('numbers') || {textContent: ''}).textContent.trim(),
          ubar: box(part('ubar')), m: box(part('m')), low: box(part('low')), high: box(part('high')), bands};
})
"""

_TABLES = """
Array.from(document.querySelectorAll('table')).map(t => {
  let h = t.previousElementSibling; while (h && !/^H[23]$/.test(h.tagName)) h = h.previousElementSibling;
  return {heading: h ? h.textContent : '', header: Array.from(t.rows[0].cells).map(c => c.textContent),
          rows: Array.from(t.rows).slice(1).map(r => Array.from(r.cells).map(c => c.textContent))};
})
"""

_LAYOUT = """
({ids: Array.from(document.querySelectorAll('td.id')).map(td => {
    const range = document.createRange(); range.selectNodeContents(td);
    const tops = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
    return {text: td.textContent, lines: tops.size, nowrap: getComputedStyle(td).whiteSpace};
  }),
  links: Array.from(document.querySelectorAll('nav.toc a')).map(a => ({href: a.getAttribute('href'),
    target: !!document.getElementById(a.getAttribute('href').slice(1)), text: a.textContent})),
  claimCells: Array.from(document.querySelectorAll('table')).filter(t => t.rows[0].cells[0].textContent === 'claim')
    .flatMap(t => Array.from(t.rows).slice(1).map(r => r.cells[0].className))})
"""


def _open(page: Any, run_dir: Path) -> None:
    page.emulate(1200, 900)
    page.call("Page.navigate", url=(run_dir / "report.html").as_uri())
    deadline = time.monotonic() + 15
    while page.evaluate("document.readyState") != "complete":
        assert time.monotonic() < deadline, "report.html did not finish loading"
        time.sleep(0.05)


def _definitive_tables(tables: list[dict[str, Any]]) -> tuple[dict[str, list[str]], dict[str, list[str]], list[str]]:
    """(chamber rows by claim, station rows by claim, the header) of the two definitive tables."""
    chamber = [t for t in tables if t["heading"].startswith("Definitive (")]
    station = [t for t in tables if t["heading"].startswith("Definitive with the station")]
    assert len(chamber) == 1 and len(station) == 1, [t["heading"] for t in tables]
    header = chamber[0]["header"]
    assert header == station[0]["header"] == ["claim", "verdict", "m ± U (95 %)", "limits", "distance d", "c",
                                              "decision"]
    return ({r[0]: r for r in chamber[0]["rows"]}, {r[0]: r for r in station[0]["rows"]}, header)


def _scale(row: dict[str, Any]) -> tuple[float, float]:
    """(px per unit, px of 0) of a figure row, from the two drawn marks of known value furthest apart."""
    d = row["data"]
    anchors = [(float(d["m"]), row["m"]["cx"])]
    anchors += [(float(d[side]), row[side]["cx"]) for side in ("low", "high") if row[side] is not None and d[side]]
    (v0, x0), (v1, x1) = max(((a, b) for a in anchors for b in anchors if a[0] != b[0]),
                             key=lambda ab: abs(ab[0][1] - ab[1][1]))
    per = (x1 - x0) / (v1 - v0)
    return per, x0 - v0 * per


def test_every_verdict_figure_row_shows_its_table_rows_numbers_and_the_rules_band(run_dir: Path):
    with headless_page(BROWSER) as page:
        _open(page, run_dir)
        rows = page.evaluate(_FIGURE_ROWS)
        tables = page.evaluate(_TABLES)
        errors = page.errors()
    chamber, station, header = _definitive_tables(tables)
    assert rows and len(rows) == len({r["data"]["label"] for r in rows})
    assert {r["data"]["semantics"] for r in rows} >= {"range", "upper_bound", "lower_bound", "point"}
    m_col, c_col, decision_col = header.index("m ± U (95 %)"), header.index("c"), header.index("decision")
    for row in rows:
        d = row["data"]
        label = d["label"]
        table = station if label.endswith(" (station)") else chamber
        cells = table[d["claim"]]
        # the same m ± U (k) and c as the table row, in the figure's own text
        assert cells[m_col] == d["measured"], label
        assert f"m ± U = {cells[m_col]}" in row["numbers"], (label, row["numbers"])
        assert f"c = {cells[c_col]}" in row["numbers"] and cells[c_col] == d["cText"], label
        assert row["title"].startswith(f"{label}: {d['verdict']}") and cells[1] == d["verdict"]
        m, big_u, c = float(d["m"]), float(d["uExpanded"]), float(d["c"])
        printed_u = cells[m_col].split(" ± ")[1].split()[0]  # U at the row's places: the drawn U rounds to it
        step = 10.0 ** -(len(printed_u.split(".")[1]) if "." in printed_u else 0)
        assert abs(float(printed_u) - big_u) <= step / 2 + 1e-12, label
        assert cells[m_col].endswith(f"(k = {float(d['k']):.2f})"), label
        per, zero = _scale(row)
        x = lambda v: zero + v * per  # noqa: E731
        # m ± U drawn at its width, around m
        assert row["m"]["cx"] == pytest.approx(x(m), abs=PX)
        assert row["ubar"]["left"] == pytest.approx(x(m - big_u), abs=PX), label
        assert row["ubar"]["right"] == pytest.approx(x(m + big_u), abs=PX), label
        # the band the rule used: ±c around each limit, or s ± c
        if d["semantics"] == "point":
            centres = [float(d["s"])]
        else:
            centres = [float(d[side]) for side in ("low", "high") if d[side]]
        assert len(row["bands"]) == len(centres), label
        for band, centre in zip(row["bands"], centres):
            assert band["cx"] == pytest.approx(x(centre), abs=PX), label
            assert band["width"] == pytest.approx(2 * c * per, abs=PX), label
        # a pass: m ± U inside its limits, or the row and the table both say it is not (and m ± c is inside)
        low = float(d["low"]) if d["low"] else None
        high = float(d["high"]) if d["high"] else None
        beyond = (low is not None and m - big_u < low) or (high is not None and m + big_u > high)
        assert (d["uBeyondLimits"] == "yes") == beyond, label
        if d["verdict"] == "pass":  # what the rule's pass means, drawn: m in s ± c, or m ± c inside the limits
            if d["semantics"] == "point":
                assert abs(m - float(d["s"])) <= c, label
                assert row["bands"][0]["left"] - PX <= row["m"]["cx"] <= row["bands"][0]["right"] + PX, label
            else:
                assert (low is None or m - c > low) and (high is None or m + c < high), label
                assert all(not (b["left"] + PX < row["m"]["cx"] < b["right"] - PX) for b in row["bands"]), label
            if beyond:
                assert "U reaches past a limit" in row["title"] and "U reaches past a limit" in cells[decision_col]
            else:
                if row["low"] is not None:
                    assert row["ubar"]["left"] >= row["low"]["cx"] - PX, label
                if row["high"] is not None:
                    assert row["ubar"]["right"] <= row["high"]["cx"] + PX, label
    assert any(r["data"]["label"].endswith(" (station)") and r["data"]["semantics"] == "point" for r in rows)
    assert errors == []


def test_the_report_is_navigable_in_chromium(run_dir: Path):
    with headless_page(BROWSER) as page:
        _open(page, run_dir)
        layout = page.evaluate(_LAYOUT)
        headings = page.evaluate("Array.from(document.querySelectorAll('h2, h3')).map(h => h.textContent)")
        order = page.evaluate("Array.from(document.querySelectorAll('h3, figure')).map(e => e.tagName === 'FIGURE'"
                              " ? 'figure' : e.textContent)")
    assert layout["links"] and all(link["target"] for link in layout["links"])  # every contents link lands
    assert [link["text"] for link in layout["links"]] == headings
    assert layout["ids"] and all(i["nowrap"] == "nowrap" and i["lines"] == 1 for i in layout["ids"]), [
        i for i in layout["ids"] if i["lines"] != 1]
    assert set(layout["claimCells"]) == {"id"}  # every claim cell of every table is a claim id kept whole
    definitive = order.index(next(h for h in order if h.startswith("Definitive (")))
    first_inconclusive = order.index(next(h for h in order if h.startswith("Inconclusive: ")))
    assert definitive < order.index("figure") < first_inconclusive  # definitive, its figure, then the rest
