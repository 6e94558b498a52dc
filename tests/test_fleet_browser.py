"""What people see of a fleet, in headless Chromium (tests/cdp.py): the report's fleet figures render (each unit's
m ± U against the bounds with the fleet's interval, Mandel's h and k with their critical lines), and the live view
shows every chamber of a fleet, each with what it is doing.

The report is written from a real fleet campaign (two emulated wind tunnels with the simulated station, fast pace);
the live view is fed by in-process simulated chambers shown under fleet ids, as `run --fleet` shows its chambers.
"""

from __future__ import annotations

import contextlib
import json
import time

import pytest

import chamber
from chamber.instruments import sim_station_file
from cdp import find_chromium, headless_page
from protocols.api.live_job import start_job_live_view
from protocols.claim_sources import load_main_job_claims
from protocols.fleet_job import check_fleet

BROWSER = find_chromium()
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium binary on PATH (apt-get install chromium, or "
                                                        "set CHROMIUM)")
CLAIMS = ("dps310-absolute-accuracy", "dps310-operating-range", "dps310-current-1hz-low-precision")


def _wait_for(page, expression: str, wanted, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    value = None
    while time.monotonic() < deadline:
        value = page.evaluate(expression)
        if wanted(value):
            return value
        time.sleep(0.05)
    raise AssertionError(f"{expression}: last value {value!r}")


def test_the_reports_fleet_figures_render_in_chromium(tmp_path):
    from agent.scoring.report import write_report

    pool = load_main_job_claims()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("chambers:\n" + "".join(
        f"  wt{i}: {{board: 'emulated:wt?unit={i}', station: '{sim_station_file()}'}}\n" for i in (1, 2)))
    result = check_fleet([pool[c] for c in CLAIMS], fleet, rows=20, say=lambda line: None)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "fleet.json").write_text(json.dumps(result), encoding="utf-8")
    write_report(run_dir, source=lambda: None)
    svgs = sorted(p.name for p in (run_dir / "figures").glob("fleet_*.svg"))
    assert "fleet_units_dps310-absolute-accuracy.svg" in svgs and "fleet_mandel_dps310-absolute-accuracy.svg" in svgs
    with headless_page(BROWSER) as page:
        page.emulate(1200, 900)
        page.call("Page.navigate", url=(run_dir / "report.html").as_uri())
        _wait_for(page, "document.readyState", lambda s: s == "complete")
        figures = page.evaluate(
            "Array.from(document.querySelectorAll('figure')).filter(f => f.getAttribute('aria-label')"
            ".includes(': each unit') || f.getAttribute('aria-label').includes(\"Mandel's h\")).map(f => {"
            " const s = f.querySelector('svg').getBoundingClientRect();"
            " return {label: f.getAttribute('aria-label'), w: s.width, h: s.height,"
            " texts: Array.from(f.querySelectorAll('svg text')).map(t => t.textContent),"
            " tiny: Array.from(f.querySelectorAll('svg text')).filter(t => t.getBoundingClientRect().height > 0"
            " && t.getBoundingClientRect().height < 9).length}; })")
        assert len(figures) == len(svgs)  # every fleet figure on the page, each drawn
        for f in figures:
            assert f["w"] > 300 and f["h"] > 150, f["label"]
            assert f["tiny"] == 0, f["label"]  # no text below about 9 px: legible at 100 %
        units = next(f for f in figures if f["label"].startswith("dps310-absolute-accuracy: each unit"))
        texts = " ".join(units["texts"])
        assert "wt1/pressure_upwind" in texts and "wt2/pressure_intake" in texts and "tolerance interval" in texts
        assert "upper bound 100" in texts and "value (Pa)" in texts
        mandel = next(f for f in figures if "Mandel" in f["label"] and "absolute" in f["label"])
        assert "critical 1 %" in " ".join(mandel["texts"]) and "Mandel's k" in " ".join(mandel["texts"])
        table = page.evaluate("Array.from(document.querySelectorAll('table')).map(t => t.rows[0].textContent)")
        assert any("s_r" in head and "s_R" in head and "excluded" in head for head in table)
        assert page.errors() == []


def test_the_live_view_shows_every_chamber_of_a_fleet(tmp_path):
    pool = load_main_job_claims()
    members = {"wt1": ("wt", 1), "wt2": ("wt", 2), "lt1": ("lt", 3)}
    opened = {name: chamber.open_chamber(backend="sim", chamber=kind, seed=seed)
              for name, (kind, seed) in members.items()}
    try:
        with contextlib.ExitStack() as stack, headless_page(BROWSER) as page:
            view = start_job_live_view(stack, {}, pool.values())
            watched = {name: view.watch(name, c) for name, c in opened.items()}
            page.emulate(1200, 900)
            page.call("Page.navigate", url=view.url)
            _wait_for(page, "(document.getElementById('status') || {}).textContent", lambda s: s == "live")
            for name, c in watched.items():
                c.measure(5)
                view.graded_on(name, pool["si115x-adc-bit-depth" if name < "w" else "dps310-operating-range"])
            shown = _wait_for(page, "Array.from(document.querySelectorAll('[data-chamber]')).map(e =>"
                                    " [e.dataset.chamber, e.querySelector('.note').textContent])",
                              lambda v: v and len(v) == 3 and all(n for _, n in v))
            assert sorted(name for name, _ in shown) == ["lt1", "wt1", "wt2"]
            assert all(note.startswith("1 claim(s) graded; last: ") for _, note in shown)
            _wait_for(page, "Number(document.body.dataset.rowsPlotted)", lambda n: n >= 15)
            assert "on lt1: graded" in page.evaluate("document.getElementById('claim-text').textContent")
            assert page.errors() == []
    finally:
        for c in opened.values():
            c.close()
