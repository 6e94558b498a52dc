"""The report's figures and tables as a reader sees them (issue 27, "Report"): the verdict, calibration and readings
figures inline as SVG in report.html, text at least 10 pt at the size shown, no table cell that can break a number,
units on the numeric columns, reasons in full, cost said to be absent, the sweep's direction stated and its legend
off the data, the git commit (or "unknown") in provenance, and no empty placeholders. The run folder is the one
tests/test_report_contents.py builds (the project's own calibration code on seeded readings) plus a claim pool."""

from __future__ import annotations

import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any


from agent.scoring import report_chamber_figures as cf
from agent.scoring import report_figures as figs
from agent.scoring.report import write_report
from agent.scoring.report_git import UNKNOWN, SourceState, read_source_state
from agent.scoring.report_rows import verdict_row
from protocols.claim_sources import load_main_job_claims, write_run_pool
from tests.test_report_contents import ABSOLUTE, BIT_DEPTH, OPERATING_RANGE, _cell, run_folder

COMMIT = SourceState("0123456789abcdef0123456789abcdef01234567", True)
LONG_REASON = ("inside the claim by 254.744 hPa, more than c = 0.025 hPa; " + "the words of a long reason go on " * 8
               + "and end here")


def _run(tmp_path: Path, **kw: Any) -> Path:
    run = run_folder(tmp_path, **kw)
    checks = json.loads((run / "checks.json").read_text())
    checks["results"][0] = {**OPERATING_RANGE, "reason": LONG_REASON,
                            "verdict_detail": {**OPERATING_RANGE["verdict_detail"], "semantics": "range",
                                               "k": 3.18, "expanded_uncertainty": 0.0796},
                            "measurement_detail": {**OPERATING_RANGE["measurement_detail"], "value": "94525.7",
                                                   "unit": "Pa", "u": "2.5", "n": 800, "k": 3.18, "details": {
                                                       "unit_means_pa": {"pressure_upwind": 94531.0,
                                                                         "pressure_downwind": 94519.6}}}}
    checks["results"][2] = {**checks["results"][2], "reason": LONG_REASON}  # the inconclusive row's reason
    (run / "checks.json").write_text(json.dumps(checks))
    pool = load_main_job_claims(None)
    write_run_pool(run, [pool[c] for c in ("dps310-operating-range", "si115x-adc-bit-depth",
                                           "dps310-absolute-accuracy", "a4988-blank-time")], ["packaged"])
    return run


class _Page(HTMLParser):
    """The report page's tables (each cell: its classes, its text, the texts of its no-wrap spans) and figures."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict[str, Any]] = []
        self.headers: list[str] = []
        self.figures: list[dict[str, Any]] = []
        self.stack: list[str] = []
        self.style = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.stack.append(tag)
        if tag == "td":
            self.cells.append({"classes": (a.get("class") or "").split(), "text": "", "spans": []})
        elif tag == "th":
            self.headers.append("")
        elif tag == "span" and "n" in (a.get("class") or "").split() and self.cells:
            self.cells[-1]["spans"].append("")
        elif tag == "figure":
            self.figures.append({"label": a.get("aria-label", ""), "svg": 0, "img": 0})
        elif tag in ("svg", "img") and self.figures:
            self.figures[-1][tag] += 1

    def handle_endtag(self, tag: str) -> None:
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        if "style" in self.stack:
            self.style += data
        elif "th" in self.stack:
            self.headers[-1] += data
        elif "td" in self.stack:
            self.cells[-1]["text"] += data
            if "span" in self.stack and self.cells[-1]["spans"]:
                self.cells[-1]["spans"][-1] += data


def _page(run: Path) -> _Page:
    page = _Page()
    page.feed((run / "report.html").read_text(encoding="utf-8"))
    return page


_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")


def test_the_verdict_calibration_and_readings_figures_are_inline_svg(tmp_path: Path):
    run = _run(tmp_path)
    write_report(run, source=COMMIT)
    page = _page(run)
    labels = {f["label"].split(":")[0].split(" ")[0] for f in page.figures}
    assert {"Definitive", "Calibration", "Readings"} <= labels, labels
    assert all(f["svg"] == 1 and f["img"] == 0 for f in page.figures)  # vectors, no raster
    html = (run / "report.html").read_text()
    assert "data:image/png" not in html and "<?xml" not in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # two figures never share an id (clip paths, glyphs)
    assert {p.name for p in (run / "figures").iterdir()} >= {"verdicts.svg", "offsets.svg", "readings.svg"}
    md = (run / "report.md").read_text()
    assert "](figures/verdicts.svg)" in md and ".png)" not in md


def test_no_table_cell_can_break_a_number(tmp_path: Path):
    run = _run(tmp_path)
    write_report(run, source=COMMIT)
    page = _page(run)
    assert page.cells
    for c in page.cells:
        numbers = _NUMBER.findall(c["text"])
        if not numbers:
            continue
        if "num" in c["classes"]:
            continue  # the whole cell is on one line
        kept = " ".join(c["spans"])
        for n in numbers:  # a number inside prose is inside a no-wrap span
            assert n in kept, (n, c)
    css = page.style.replace(" ", "")
    assert re.search(r"td\.num,\.n\{white-space:nowrap;font-variant-numeric:tabular-nums\}", css)
    assert "anywhere" not in css and "break-all" not in css  # nothing breaks a word anywhere
    assert re.search(r"th\{[^}]*overflow-wrap:normal", css)  # headers break between words only
    numeric = [c for c in page.cells if "num" in c["classes"]]
    assert any(c["text"] == "-254.743 hPa" for c in numeric)  # distance in the claim's unit, one cell, no wrap


def test_distance_and_c_carry_the_claims_unit_and_reasons_are_whole(tmp_path: Path):
    run = _run(tmp_path)
    report = write_report(run, source=COMMIT).read_text()
    row = next(line for line in report.splitlines() if line.startswith("| dps310-operating-range | pass"))
    assert "| 945.257 ± 0.080 hPa (k = 3.18) | 300 to 1200 hPa | -254.743 hPa | 0.025 hPa |" in row
    blank = next(line for line in report.splitlines() if line.startswith("| a4988-blank-time |"))
    assert LONG_REASON in blank and "…" not in report.split("## Absent inputs")[0].split("## Chamber verdicts")[1]
    header = next(line for line in report.splitlines() if line.startswith("| claim | verdict | m ± U"))
    assert header == "| claim | verdict | m ± U (95 %) | limits | distance d | c | decision |"


def test_provenance_has_the_commit_and_dirty_flag_or_unknown(tmp_path: Path):
    run = _run(tmp_path)
    prov = write_report(run, source=COMMIT).read_text().split("## At a glance")[0]
    assert f"| git commit | {COMMIT.commit} (dirty: uncommitted changes in the tree)" in prov
    prov = write_report(run, source=SourceState(UNKNOWN, None)).read_text().split("## At a glance")[0]
    assert "| git commit | unknown" in prov
    summary = json.loads((run / "summary.json").read_text())
    summary["provenance"]["git_commit"] = "fedcba9876543210fedcba9876543210fedcba98"
    summary["provenance"]["git_dirty"] = False
    (run / "summary.json").write_text(json.dumps(summary))
    prov = write_report(run, source=COMMIT).read_text().split("## At a glance")[0]
    assert "| git commit | fedcba9876543210fedcba9876543210fedcba98 (clean tree) |" in prov  # the run's own first


def test_reading_the_commit_tolerates_no_git(tmp_path: Path):
    def no_git(*a: Any, **kw: Any) -> Any:
        raise FileNotFoundError("git")

    assert read_source_state(tmp_path, run=no_git) == SourceState(UNKNOWN, None)
    assert read_source_state(tmp_path).commit == UNKNOWN  # a folder that is no repository

    calls: list[list[str]] = []

    def fake(args: list[str], **kw: Any) -> Any:
        calls.append(args)
        out = {"rev-parse": "0123456789abcdef0123456789abcdef01234567\n", "status": " M agent/x.py\n"}[args[1]]
        return subprocess.CompletedProcess(args, 0, out, "")

    assert read_source_state(tmp_path, run=fake) == COMMIT
    assert calls == [["git", "rev-parse", "HEAD"], ["git", "status", "--porcelain"]]


def test_no_empty_placeholders_in_the_text(tmp_path: Path):
    run = _run(tmp_path)
    md = write_report(run, source=COMMIT).read_text()
    html = (run / "report.html").read_text()
    body = re.sub(r"<style>.*?</style>", "", html, flags=re.S)
    body = re.sub(r"<svg.*?</svg>", "", body, flags=re.S)
    for text in (md, body):
        assert "{}" not in text and "[]" not in text and "None" not in text
    assert "by rule: none fired" in md


def test_cost_is_said_to_be_absent_and_the_latency_chart_is_not_called_cost(tmp_path: Path):
    run = _run(tmp_path)
    md = write_report(run, source=COMMIT).read_text()
    agent = md.split("## The agent")[1]
    assert "Cost: not known for any of the 1 cells" in agent
    assert "![latency per cell (1 cells); no cost" in agent and "![cost" not in agent
    assert "not priced" in agent
    priced = [{**_cell("c", "m", "normal", True, []), "cost": 0.0125}]
    fig, caption = figs.fig_cost(priced)
    assert caption.startswith("cost against latency per cell (1 of 1 cells priced")


def test_fidelity_is_a_compact_grid_not_a_bar_per_claim(tmp_path: Path):
    cells = [_cell(f"claim-{i:02d}", "scripted:reader", "normal", True, []) for i in range(49)]
    run = _run(tmp_path, cells=cells)
    md = write_report(run, source=COMMIT).read_text()
    assert not list((run / "figures").glob("fidelity*"))
    grid = [line for line in md.splitlines() if line.startswith("| claim | fidelity | claim | fidelity |")]
    assert grid
    rows = md.split(grid[0])[1].split("\n\n")[0].strip().splitlines()[1:]
    assert len(rows) == 17  # 49 claims in three column pairs


def test_chamber_figures_are_legible_and_fit_the_page(tmp_path: Path):
    from matplotlib.text import Text

    results = [OPERATING_RANGE, BIT_DEPTH, ABSOLUTE]
    pool = load_main_job_claims(None)
    rows = [verdict_row(label, r, pool[r["claim_id"]]) for label, r in cf.definitive(results)]
    built = [cf.fig_verdicts(rows)[0], cf.fig_readings([("bit", BIT_DEPTH), ("range", {
        **OPERATING_RANGE, "measurement_detail": {"value": "94525.6", "u": "2.5", "k": 3.18, "unit": "Pa", "n": 800,
                                                  "details": {"unit_means_pa": {"a": 94531.0, "b": 94519.6}}}})]),
             cf.fig_offsets(["p1", "p2"], {"p1": 1.5, "p2": -1.5}, {"p1": 0.05, "p2": 0.05}, "Pa")]
    for fig in built:
        assert fig is not None
        text = figs.svg_text(fig)
        assert text.lstrip().startswith("<?xml") and "<svg" in text
        sizes = [float(s) for s in re.findall(r"font-size: ([\d.]+)px", text)]  # what the browser draws
        assert sizes and min(sizes) >= figs.FONT_PT >= 10
        assert fig.get_figwidth() <= figs.MAX_WIDTH_IN
    titles = [t.get_text() for t in built[0].findobj(Text) if t.get_text().startswith("m ± U = ")]
    assert len(titles) == 3  # one row per definitive claim, each with the table's numbers
    assert titles[0] == "m ± U = 945.257 ± 0.080 hPa (k = 3.18); d = -254.743 hPa, c = 0.025 hPa"
    assert titles[2] == "m ± U = -1.4 ± 4.9 Pa (k = 1.96); |m − s| = 1.4 Pa ≤ c = 100.0 Pa"  # own U, not k·c


def test_a_claim_graded_by_both_the_chamber_and_the_station_is_one_row(tmp_path: Path):
    run = _run(tmp_path)
    write_report(run, source=COMMIT)
    svg = (run / "figures" / "verdicts.svg").read_text()
    labels = re.findall(r'data-label="([^"]+)"', svg)
    assert labels.count("dps310-operating-range") == 1  # the chamber's verdict; the station's copy is not repeated
    assert "dps310-operating-range (station)" not in labels
    assert "dps310-absolute-accuracy (station)" in labels  # definitive only with the station: shown, and said so


def test_the_sweep_states_its_direction_and_its_legend_is_off_the_data(tmp_path: Path):
    run = _run(tmp_path)
    md = write_report(run, source=COMMIT).read_text()
    caption = md.split("## Perturbation sweep")[1].split("![")[1].split("](")[0]
    assert "the x-axis increases to the right" in caption and "upward" in caption
    sweep = json.loads((run / "sweep.json").read_text())
    fig = figs.fig_sweep(sweep)
    figs.svg_text(fig)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer() if hasattr(fig.canvas, "get_renderer") else None
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.x0 >= ax.get_window_extent(renderer).x1  # beside the plot, not on it
    names = [t.get_text() for t in ax.get_legend().get_texts()]
    assert names[:2] == ["pass", "fail"] and "d = ±c" in names
    for coll in ax.collections:  # solid colours only: every colour drawn is one the legend names
        assert all(a == 1.0 for a in coll.get_facecolors()[:, 3])


def test_counts_text_never_prints_an_empty_container():
    from agent.scoring.report import _counts_text

    assert "{}" not in _counts_text({}) and _counts_text({"tool_bypass": 2}) == "tool_bypass 2"
