"""The report's verdict sections (issue 35, items 1 and 2, and the review's claim-pool item): one record per
definitive verdict gives its table row and its figure row the same m ± U (the measurement's own U = k·u, never the
comparison's k·c), the claim's limits by the rule's own reading of the claim, and the band the rule decided with;
the rule section states both rules with a worked line each; the inconclusive verdicts come after, grouped by class,
each with what would make it definitive; contents link every heading; one spelling of each unit, times to the
second; and the limits come from the one reader of the run's claim pool, which honours `--claims`.

The run folders are tests/test_report_contents.py's (the project's own calibration code on seeded readings), with
verdict records shaped as the main job writes them."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agent.scoring import report_chamber_figures as cf
from agent.scoring.offline import report_job
from agent.scoring.report import build_blocks, write_report
from agent.scoring.report_format import time_text, unit_text
from agent.scoring.report_render import slug
from agent.scoring.report_rows import expanded_text, verdict_row
from agent.scoring.report_verdicts import what_would_decide
from protocols.claim_sources import GIVEN_CLAIMS, claims_for_run, load_main_job_claims, write_run_pool
from protocols.claims import ClaimFileError
from tests.test_report_contents import ABSOLUTE, BIT_DEPTH, INCONCLUSIVE, OPERATING_RANGE, _section, run_folder

POOL = load_main_job_claims(None)

# A pass whose U reaches past its limit (the rule decides at c = u: margin 0.5 > c = 0.3, but U = 0.59), as the
# main job records the fan's stop; and a fail, built on the same claim.
STOP = {"claim_id": "nf-f12-pwm-stops-at-zero-duty-intake", "verdict": "pass", "class": None,
        "measured": {"value": "0.0", "unit": "updates", "u": "0.3", "k": 1.959963984540054},
        "distance": "-0.5", "combined_uncertainty": "0.3", "reason": "inside the claim by 0.5 updates, more than c",
        "verdict_detail": {"semantics": "upper_bound", "tolerance": "0", "k": 1.959963984540054,
                           "expanded_uncertainty": 0.588, "notes": []}}
STOP_FAIL = {**STOP, "verdict": "fail", "measured": {**STOP["measured"], "value": "3.0"}, "distance": "2.5",
             "reason": "outside the claim by 2.5 updates, more than c = 0.3 updates"}
SPEED = {"claim_id": "nf-f12-max-speed-intake", "verdict": "pass", "class": None,
         "measured": {"value": "2871.8", "unit": "RPM", "u": "0.7", "k": 2.350905596797468},
         "distance": "-171.8", "combined_uncertainty": "0.7",
         "reason": "inside the claim by 171.8 RPM, more than c = 0.7 RPM",
         "verdict_detail": {"semantics": "range", "tolerance": "0", "k": 2.35, "expanded_uncertainty": 1.65},
         "measurement_detail": {"value": "2871.8", "u": "0.7", "k": 2.35, "unit": "RPM", "n": 20,
                                "details": {"reading": "rpm_in", "min": 2858.5, "max": 2877.42, "mean": 2870.42}}}
RESOLUTION = {"claim_id": "dps310-relative-accuracy", "verdict": "inconclusive", "class": "resolution-limited",
              "measured": None, "reason": "decided before staging: tolerance t = 6 Pa against achievable u = 6 Pa",
              "precheck": {"reason": "tolerance t = 6 Pa against achievable u = 6 Pa"}}


def _with_results(run: Path, results: list[dict[str, Any]]) -> Path:
    (run / "checks.json").write_text(json.dumps({"results": results}), encoding="utf-8")
    return run


# ------------------------------------------------------------------------------------------------ one row, both
def test_a_row_is_m_plus_minus_its_own_u_against_the_claims_limits_and_the_rules_band():
    point = verdict_row("dps310-absolute-accuracy (station)", ABSOLUTE, POOL["dps310-absolute-accuracy"])
    assert point.measured == "-1.4 ± 4.9 Pa (k = 1.96)"  # U = k·u = 4.9 Pa, not k·c = 196 Pa
    assert point.U == pytest.approx(1.9599651054872063 * 2.5)
    assert point.semantics == "point" and point.allowed == (-100.0, 100.0) and point.limits == "0 ± 100 Pa"
    assert point.bands == [(pytest.approx(-100.03124511871278), pytest.approx(100.03124511871278))]  # s ± c
    assert not point.u_beyond_limits
    stop = verdict_row("stop", STOP, POOL[STOP["claim_id"]])
    assert stop.limits == "≤ 0.5 updates" and stop.allowed == (None, 0.5)
    assert stop.bands == [(pytest.approx(0.2), pytest.approx(0.8))]  # the guard band ±c around the one limit
    assert stop.u_beyond_limits  # 0.0 + 0.59 > 0.5: said, not hidden
    ranged = verdict_row("range", OPERATING_RANGE, POOL["dps310-operating-range"])
    assert ranged.limits == "300 to 1200 hPa" and len(ranged.bands) == 2 and ranged.measured.endswith("(k = 3.18)")
    unknown = verdict_row("x", {**STOP, "claim_id": "not-in-the-pool"}, None)
    assert unknown.allowed is None and unknown.bands == [] and unknown.limits == "not in the claim pool"
    old = {**STOP, "measured": {"value": "0.0", "unit": "updates", "u": "0.3"}}  # an older record: no k
    assert expanded_text(old) == "0.0 ± 0.3 updates (u; k not recorded)"


def test_the_figure_row_and_the_table_row_print_the_same_numbers(tmp_path: Path):
    run = _with_results(run_folder(tmp_path), [OPERATING_RANGE, STOP, STOP_FAIL | {"claim_id": "x-fail"}])
    (run / "station_checks.json").unlink()
    report = write_report(run).read_text()
    svg = (run / "figures" / "verdicts.svg").read_text()
    rows = dict(re.findall(r'data-label="([^"]+)"[^>]*data-measured="([^"]+)"', svg))
    for label, measured in rows.items():
        line = next(t for t in report.splitlines() if t.startswith(f"| {label} | "))
        assert f"| {measured} |" in line  # the table row's m ± U (k), character for character
    assert rows["nf-f12-pwm-stops-at-zero-duty-intake"] == "0.0 ± 0.6 updates (k = 1.96)"
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)  # matplotlib writes each text as text, in its own tag
    assert any("nf-f12-pwm-stops-at-zero-duty-intake: pass — U reaches past a limit" in t for t in texts)
    assert any(t.startswith("m ± U = 0.0 ± 0.6 updates (k = 1.96); d = -0.5 updates, c = 0.3 updates")
               for t in texts)
    stop = next(t for t in report.splitlines() if t.startswith("| nf-f12-pwm-stops-at-zero-duty-intake | "))
    assert "U reaches past a limit: the rule decides at c" in stop
    assert "| x-fail | fail |" in report and "not in the claim pool" in report  # a claim the pool lacks: no limits


def test_the_figure_draws_limits_bands_and_u_with_its_data(tmp_path: Path):
    rows = [verdict_row(label, r, POOL[r["claim_id"]])
            for label, r in cf.definitive([OPERATING_RANGE, STOP, ABSOLUTE])]
    fig, data = cf.fig_verdicts(rows)
    gids = {a.get_gid() for a in fig.findobj() if a.get_gid()}
    for i, row in enumerate(rows):
        assert {f"verdict-row-{i}", f"verdict-row-{i}-ubar", f"verdict-row-{i}-m"} <= gids
        assert {f"verdict-row-{i}-band-{j}" for j in range(len(row.bands))} <= gids
        assert data[f"verdict-row-{i}"]["measured"] == row.measured
    assert {"verdict-row-0-low", "verdict-row-0-high", "verdict-row-1-high"} <= gids
    assert "verdict-row-1-low" not in gids  # an upper bound has no lower limit to draw
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "guard band ±c (bound claims: inconclusive inside)" in legend and "s ± c (point claims: pass inside)" in legend
    with pytest.raises(ValueError, match="gid 'nothing-here'"):
        from agent.scoring.report_figures import svg_text

        svg_text(fig, {"nothing-here": {"x": "1"}})


# ------------------------------------------------------------------------------------------------ the rule
def test_the_rule_section_states_both_rules_with_a_worked_line_from_the_run(tmp_path: Path):
    report = write_report(run_folder(tmp_path)).read_text()
    rule = _section(report, "How a verdict is decided")
    assert report.index("## How a verdict is decided") < report.index("## Chamber verdicts")
    assert "**Bound claims**" in rule and "**Point claims**" in rule and "typical-not-guaranteed" in rule
    assert ("Worked, from this run — dps310-operating-range: m = 945.257 hPa, u = 0.025 hPa, t = 0 → c = sqrt(u² + "
            "t²) = 0.025 hPa; limits 300 to 1200 hPa → d = max(low − m, m − high) = max(300 − 945.257, 945.257 − "
            "1200) = -254.743 hPa; d < −c → pass.") in rule
    assert ("Worked, from this run — dps310-absolute-accuracy (station): s = 0 Pa, t = 100 Pa, m = -1.4 Pa, u = 2.5 "
            "Pa → c = sqrt(u² + t²) = 100.0 Pa; d = |m − s| = |-1.4 − 0| = 1.4 Pa ≤ c → pass (compatible).") in rule
    assert "m ± U (k = …)" in rule and "the rule decides at c" not in rule.split("Because")[0]


def test_without_such_verdicts_the_rule_section_works_an_example_and_says_so(tmp_path: Path):
    run = _with_results(run_folder(tmp_path), [INCONCLUSIVE])
    (run / "station_checks.json").unlink()
    rule = _section(write_report(run).read_text(), "How a verdict is decided")
    assert "Worked example (no bound verdict in this run)" in rule
    assert "Worked example (no point verdict in this run)" in rule


# ------------------------------------------------------------------------------------------------ navigation
def test_contents_link_every_heading_in_both_renderings(tmp_path: Path):
    run = run_folder(tmp_path)
    report = write_report(run).read_text()
    contents = report.split("**Contents**", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\[([^\]]+)\]\(#([^)]+)\)", contents)
    headings = re.findall(r"^#{2,3} (.+)$", report, flags=re.M)
    assert [title for title, _ in links] == headings and [a for _, a in links] == [slug(h) for h in headings]
    html = (run / "report.html").read_text()
    for _, anchor in links:
        assert f"href='#{anchor}'" in html and f"id='{anchor}'" in html
    assert report.index("**Contents**") < report.index("## Provenance")


def test_definitive_first_then_the_figure_then_the_inconclusive_grouped_by_class(tmp_path: Path):
    run = _with_results(run_folder(tmp_path), [INCONCLUSIVE, RESOLUTION, OPERATING_RANGE, BIT_DEPTH])
    verdicts = _section(write_report(run).read_text(), "Chamber verdicts")
    order = [verdicts.index(x) for x in ("### Definitive (2)", "](figures/verdicts.svg)",
                                         "### Inconclusive: resolution-limited (1)",
                                         "### Inconclusive: unmatched-observable (1)")]
    assert order == sorted(order)  # the closest to a verdict first, then the classes the chamber cannot stage
    resolution = verdicts.split("### Inconclusive: resolution-limited (1)")[1].split("###")[0]
    assert "| claim | reason | would become definitive with |" in resolution
    assert "a smaller uncertainty (tolerance t = 6 Pa against achievable u = 6 Pa)" in resolution
    observable = verdicts.split("### Inconclusive: unmatched-observable (1)")[1]
    assert "| claim | reason |\n" in observable  # no row of the class has an answer: no such column, no dashes


def test_errors_and_a_station_without_chamber_verdicts_have_their_places(tmp_path: Path):
    error = {"claim_id": "dps310-relative-accuracy", "verdict": "error", "class": None, "measured": None,
             "reason": "apparatus status 'link_lost': the link went quiet; an error is not a fail"}
    run = _with_results(run_folder(tmp_path), [error, OPERATING_RANGE])
    verdicts = _section(write_report(run).read_text(), "Chamber verdicts")
    assert "### Errors and verdicts without a value (1)" in verdicts and "link_lost" in verdicts
    (run / "checks.json").unlink()  # the station alone: its figure stands in its own section
    report = write_report(run).read_text()
    assert "](figures/verdicts.svg)" in _section(report, "With the instrument station")


def test_what_would_decide_names_the_instrument_or_the_condition():
    env = {"claim_id": "c", "component": "DPS310", "instruments_present": ["smu"], "would_need": [],
           "blocking_conditions": [], "instrument_protocol": "instruments.supply_current"}
    chamber = {"claim_id": "c", "verdict": "inconclusive", "class": "unmatched-stimulus",
               "unmatched_conditions": ["supply current"]}
    assert what_would_decide(chamber, env, {"claim_id": "c", "verdict": "pass"}) == \
        "the station's smu (with the station: pass, below)"
    assert what_would_decide(chamber, env, {"claim_id": "c", "verdict": "inconclusive",
                                            "class": "typical-not-guaranteed"}).startswith(
        "with the station's smu: still inconclusive (typical-not-guaranteed); then a population of units")
    assert what_would_decide(chamber, {**env, "would_need": ["smu"], "instruments_present": []}, None) == \
        "instruments: smu wired to the DPS310"
    assert what_would_decide(chamber, {**env, "blocking_conditions": ["VDD sweep"]}, None) == \
        "realising VDD sweep (no instrument of this product does)"
    assert what_would_decide(chamber, None, None) == "a way to apply the stimulus: supply current"
    assert what_would_decide({**chamber, "class": "engagement-only", "unmatched_conditions": []}, None, None) == ""


# ------------------------------------------------------------------------------------------------ one spelling
def test_one_unit_spelling_and_times_to_the_second(tmp_path: Path):
    assert unit_text("RPM") == "rpm" and unit_text("hPa") == "hPa" and unit_text("LSb") == "LSb"
    assert time_text("2026-12-05T09:16:54.405406+00:00") == "2026-12-05 09:16:54 UTC"
    assert time_text("2026-12-05T10:16:54+01:00") == "2026-12-05 09:16:54 UTC"
    run = _with_results(run_folder(tmp_path), [SPEED, OPERATING_RANGE])
    report = write_report(run).read_text()
    body = report.split("## Absent inputs")[0]
    assert not re.search(r"\d RPM\b", body)  # the reason's "171.8 RPM" is written as the rest: rpm
    assert "2871.8 ± 1.6 rpm (k = 2.35)" in body and "| 2700 to 3300 rpm |" in body
    svg = (run / "figures" / "verdicts.svg").read_text() + (run / "figures" / "readings.svg").read_text()
    assert "RPM" not in svg and " rpm" in svg
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d", body)  # no microseconds anywhere


def test_the_readings_figure_names_every_series_and_writes_ends_to_four_digits(tmp_path: Path):
    detail = {"value": "94525.6", "u": "2.5", "k": 3.18, "unit": "Pa", "n": 800, "details": {
        "unit_means_pa": {"pressure_upwind": 94531.04, "pressure_downwind": 94519.64, "pressure_ambient": 94528.13,
                          "pressure_intake": 94523.51}}}
    fig = cf.fig_readings([("range", {**OPERATING_RANGE, "measurement_detail": detail}),
                           ("bits", {**BIT_DEPTH, "measurement_detail": {
                               "value": "0.75", "u": "0.20", "k": 2.78, "unit": "LSb",
                               "details": {"largest_step_lsb": 1.375, "mean_step_lsb": 1.0024522}}})])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    for name in ("pressure_upwind", "pressure_downwind", "pressure_ambient", "pressure_intake"):
        assert f"unit mean: {name}" in legend  # the four barometer marks, each named
    from matplotlib.text import Text

    ends = [t.get_text() for t in fig.findobj(Text) if re.fullmatch(r"-?[\d.]+ (Pa|LSb)", t.get_text())]
    assert ends and all(len(re.sub(r"\D", "", e.split()[0]).lstrip("0")) <= 5 for e in ends), ends
    assert "0.1940 LSb" in ends or any(e.endswith(" LSb") and len(e.split()[0]) <= 6 for e in ends)


def test_the_sweep_says_which_bound_it_moved(tmp_path: Path):
    run = run_folder(tmp_path)
    sweep = json.loads((run / "sweep.json").read_text())
    (run / "sweep.json").write_text(json.dumps({**sweep, "bound": "high"}))
    report = write_report(run).read_text()
    text = _section(report, "Perturbation sweep")
    assert "moves the claim's upper bound (stated 1200 hPa) upward through it" in text
    assert "Sweep moving the claim's upper bound (stated 1200 hPa)" in _section(report, "At a glance")


# ------------------------------------------------------------------------------------------------ one pool reader
def _pool_with_high(high: str) -> dict[str, Any]:
    claim = POOL["dps310-operating-range"].model_copy(update={"high": Decimal(high)})
    return {claim.id: claim}


def test_the_reports_limits_come_from_the_runs_pool_or_from_claims_given(tmp_path: Path):
    run = run_folder(tmp_path)
    write_run_pool(run, [POOL["dps310-operating-range"]], ["packaged"])
    assert claims_for_run(run)[1] == str(run / "claim_pool.json")
    assert "limits 300 to 1200 hPa" in json.dumps(build_blocks(run, source=None), default=str)
    given = _pool_with_high("1100")
    assert claims_for_run(run, given=given) == (given, GIVEN_CLAIMS)
    report_job(run, claims=given)  # `report --claims`: the claims given win over the recorded pool
    report = (run / "report.md").read_text()
    assert "| 300 to 1100 hPa |" in report and "| 300 to 1200 hPa |" not in report
    assert "The limits are the claim's, from the claims given with --claims." in report


def test_a_damaged_pool_is_named_not_read_leniently(tmp_path: Path):
    run = run_folder(tmp_path)
    (run / "claim_pool.json").write_text(json.dumps({"claims": [{"id": "dps310-operating-range", "kind": "range",
                                                                 "low": "300", "high": "1100"}]}))
    with pytest.raises(ClaimFileError):
        claims_for_run(run)  # the one reader refuses a pool that is not a run's
    report = write_report(run).read_text()
    assert "claim_pool.json unreadable" in _section(report, "Absent inputs")
    assert "1100" not in report.split("## Absent inputs")[0]  # no limit from the damaged file
    assert "| not in the claim pool |" in report  # drawn without limits, and said so
