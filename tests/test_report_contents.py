"""What the run report says (issue 19, "The report"): provenance first, the calibration and one budget in full,
a true "Absent inputs", a model × arm table, readable figures, numbers at the claim's resolution, tables that fit,
and the caveats on the two weak passes. Each test builds a small run folder in tmp_path (the calibration record
with the project's own calibration code, from seeded readings) and reads report.md / report.html."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.scoring import report_figures as figs
from agent.scoring.report import MAX_COLUMNS, write_report
from agent.scoring.report_format import number, places_for_u, verdict_places
from calibration.budget import UncertaintyBudget
from calibration.cross_sensor import compute_cross_sensor
from calibration.records import record_from_calibration, save_record

PROVENANCE = {"software_version": "0.1.0+test", "started_utc": "2026-12-01T21:30:40Z",
              "finished_utc": "2026-12-01T21:31:02Z", "seconds": 22.4, "seed": 7, "model": "scripted:reader",
              "chambers": [{"kind": "wt", "port": "/dev/pts/7", "emulated": True, "config": "standard"},
                           {"kind": "lt", "port": "/dev/serial/by-id/usb-Arduino-lt", "emulated": False,
                            "config": "standard"}],
              "station": "chamber/instruments/sim/station.yaml", "limits": None, "claims_sources": ["packaged"]}

# Verdict records as checks.json carries them (fields the report reads), from a real run of the main job.
OPERATING_RANGE = {
    "claim_id": "dps310-operating-range", "verdict": "pass", "class": None,
    "measured": {"value": "945.257", "unit": "hPa", "u": "0.025", "k": 3.1824463052837078, "dof": 3.0},
    "distance": "-254.743",
    "combined_uncertainty": "0.025", "reason": "inside the claim by 254.743 hPa, more than c = 0.025 hPa",
    "verdict_detail": {"measured": "945.257", "u": "0.025", "resolution": None},
    "measurement_detail": {"budget": {"quantity": "cross-sensor mean pressure", "unit": "Pa", "components": [
        {"name": "scatter of the 4 unit means", "u": 2.5273119686278505, "dof": 3.0, "evaluation": "A",
         "basis": "s/sqrt(n) of n=4", "sensitivity": 1.0}]}}}
BIT_DEPTH = {
    "claim_id": "si115x-adc-bit-depth", "verdict": "pass", "class": None,
    "measured": {"value": "65535.00", "unit": "counts", "u": "0.29", "k": 1.959963984540054},
    "distance": "-65535.00",
    "combined_uncertainty": "0.29", "reason": "inside the claim by 65535.00 counts, more than c = 0.29 counts",
    "verdict_detail": {"measured": "65535.00", "u": "0.29", "resolution": None},
    "measurement_detail": {"details": {"largest_code": 65535}}}
INCONCLUSIVE = {"claim_id": "a4988-blank-time", "verdict": "inconclusive", "class": "unmatched-observable",
                "measured": None, "reason": "decisive condition not matched: blanking interval"}
# The station's absolute-accuracy pass: c = sqrt(2.5² + 100²) is irrational and the verdict carries 50 digits.
ABSOLUTE = {"claim_id": "dps310-absolute-accuracy", "verdict": "pass", "class": None,
            "measured": {"value": "-1.4", "unit": "Pa", "u": "2.5", "k": 1.9599651054872063}, "distance": "1.4",
            "combined_uncertainty": "100.03124511871278312045039089434960422855629932206",
            "verdict_detail": {"measured": "-1.4", "u": "2.5", "resolution": None}}


def _cell(claim: str, model: str, arm: str, passed: bool | None, fired: list[str], repeat: int = 1) -> dict[str, Any]:
    return {"run_id": f"{claim}--{model}--{arm}--r{repeat}", "claim_id": claim, "model": model, "arm": arm,
            "repeat": repeat, "outcome": "submitted", "fidelity": {"passed": passed}, "flags": fired,
            "detector": {"fired": fired}, "tool_calls_by_tool": {"search_text": 2}, "latency_s": 0.25, "cost": None}


def _scores(cells: list[dict[str, Any]]) -> dict[str, Any]:
    flagged = sum(bool(c["flags"]) for c in cells)
    return {"cells": cells, "summary": {"cells": len(cells), "fidelity_passed": sum(bool(c["fidelity"]["passed"])
                                                                                    for c in cells),
                                        "engine_errors": 0, "flagged": {"count": flagged, "n": len(cells)}}}


def _calibration(path: Path) -> Any:
    rng = np.random.default_rng(20261201)
    readings = {name: rng.normal(94525.0 + offset, 0.4, 200) for name, offset in
                (("pressure_upwind", 5.5), ("pressure_downwind", -6.0), ("pressure_ambient", 2.5),
                 ("pressure_intake", -2.0))}
    record = record_from_calibration(compute_cross_sensor(readings, settle_rows=20),
                                     date=datetime(2026, 12, 1, 21, 30, tzinfo=timezone.utc), software_version="0.1.0")
    save_record(record, path)
    return record


def run_folder(tmp_path: Path, *, cells: list[dict[str, Any]] | None = None, provenance: bool = True,
               skip: tuple[str, ...] = ()) -> Path:
    """A complete run folder (every input the report reads), minus the files named in `skip`."""
    run = tmp_path / "20261201T213041Z"
    run.mkdir()
    files: dict[str, Any] = {
        "summary.json": {"run_id": run.name, "backend": "emulated boards on ptys",
                         **({"provenance": PROVENANCE} if provenance else {})},
        "checks.json": {"results": [OPERATING_RANGE, BIT_DEPTH, INCONCLUSIVE]},
        "station_checks.json": {"station": "station.yaml", "results": [ABSOLUTE, OPERATING_RANGE], "envelope": []},
        "sweep.json": {"claim_id": "dps310-operating-range", "measured": {"value": "945.257", "u": "0.025",
                                                                         "unit": "hPa"},
                       "combined_uncertainty": "0.025", "flip_points": ["945.282", "945.232"],
                       "rows": [{"bound": "945.2", "distance": "0.057", "verdict": "fail"},
                                {"bound": "945.3", "distance": "-0.043", "verdict": "pass"}]},
        "scores.json": _scores(cells if cells is not None else [_cell("a4988-blank-time", "scripted:reader",
                                                                      "normal", True, [])]),
        "link.json": {"wt": {"resends": 0, "crc_failures": 0}, "lt": {"resends": 1, "crc_failures": 0}},
    }
    for name, data in files.items():
        if name not in skip:
            (run / name).write_text(json.dumps(data), encoding="utf-8")
    if "calibration.json" not in skip:
        _calibration(run / "calibration.json")
    return run


def _section(report: str, title: str) -> str:
    return report.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _tables(report: str) -> list[list[list[str]]]:
    tables, current = [], []
    for line in report.splitlines() + [""]:
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


# ------------------------------------------------------------------------------------------------ 1. provenance
def test_provenance_comes_first_with_chambers_ports_seed_model_version_date_and_duration(tmp_path: Path):
    report = write_report(run_folder(tmp_path)).read_text()
    assert report.index("## Provenance") < report.index("## At a glance")
    prov = _section(report, "Provenance")
    assert "wt: emulated board on /dev/pts/7, config standard" in prov
    assert "lt: real chamber on /dev/serial/by-id/usb-Arduino-lt" in prov
    for expected in ("| seed | 7 |", "| model | scripted:reader |", "| software version | 0.1.0+test |",
                     "| date | 2026-12-01 21:30:40 UTC to 2026-12-01 21:31:02 UTC |",  # to the second, one clock
                     "| duration | 22.4 s |", "| limits file | none |"):
        assert expected in prov, expected


def test_an_older_folder_without_provenance_says_not_recorded(tmp_path: Path):
    report = write_report(run_folder(tmp_path, provenance=False)).read_text()
    prov = _section(report, "Provenance")
    assert "emulated boards on ptys (ports not recorded)" in prov
    assert "| seed | not recorded |" in prov and "| duration | not recorded |" in prov
    assert "0.1.0 (from calibration.json)" in prov  # what the folder does record is used
    assert "provenance in summary.json" in _section(report, "Absent inputs")


# ------------------------------------------------------------------------------------------------ 2. calibration
def test_calibration_offsets_and_one_budget_in_full(tmp_path: Path):
    run = run_folder(tmp_path)
    record = json.loads((run / "calibration.json").read_text())
    report = write_report(run).read_text()
    cal = _section(report, "Calibration and an uncertainty budget")
    for name, offset in record["parameters"]["offsets"].items():
        u = record["parameters"]["offset_u"][name]
        p = places_for_u(u)
        k = UncertaintyBudget.from_dict(record["budgets"]["offsets"][name]).coverage_factor
        assert (f"| {name} | {number(offset, places=p)} ± {number(k * u, places=p)} (k = {k:.2f}) | "
                f"{number(u, places=p)} |") in cal  # m ± U (k) as every table writes it, then its u
    assert "2026-12-01 21:30:00 UTC" in cal and "T21:30" not in cal  # the calibration's time to the second
    budget = UncertaintyBudget.from_dict(record["budgets"]["offsets"]["pressure_ambient"])
    rows = [t for t in _tables(cal) if t[0][0] == "component x_i"][0][2:]
    assert len(rows) == 4 and sorted(r[4] for r in rows) == ["-0.250", "-0.250", "-0.250", "0.750"]
    uc = float(re.search(r"u_c = sqrt\(Σ u_i\(y\)²\) = ([0-9.]+) Pa", cal).group(1))
    k = float(re.search(r"k = t_\{0.95\}\(ν_eff\) = ([0-9.]+)", cal).group(1))
    big_u = float(re.search(r"U = k·u_c = ([0-9.]+) Pa", cal).group(1))
    assert uc == pytest.approx(math.sqrt(sum(float(r[5]) ** 2 for r in rows)), abs=2e-4)  # the rows add up
    assert uc == pytest.approx(budget.combined, abs=1e-4) and k == pytest.approx(budget.coverage_factor, abs=1e-3)
    assert big_u == pytest.approx(k * uc, abs=2e-4)
    assert "ν_eff (Welch–Satterthwaite) = " in cal


def test_without_a_calibration_the_budget_behind_a_definitive_verdict_is_shown(tmp_path: Path):
    report = write_report(run_folder(tmp_path, skip=("calibration.json",))).read_text()
    cal = _section(report, "Calibration and an uncertainty budget")
    assert "The budget behind dps310-operating-range in full" in cal and "scatter of the 4 unit means" in cal
    assert "U = k·u_c = 8.04 Pa" in cal  # k = t_0.975(3) = 3.182 times u_c = 2.527 Pa


# ------------------------------------------------------------------------------------------------ 3. absent inputs
def test_absent_inputs_is_none_when_every_input_is_present(tmp_path: Path):
    report = write_report(run_folder(tmp_path)).read_text()
    assert _section(report, "Absent inputs").strip() == "- none"


def test_absent_inputs_names_each_missing_or_unreadable_file(tmp_path: Path):
    run = run_folder(tmp_path, skip=("calibration.json", "station_checks.json", "scores.json"))
    (run / "checks.json").write_text("{not json", encoding="utf-8")
    absent = _section(write_report(run).read_text(), "Absent inputs")
    assert "calibration.json (no cross-sensor calibration shown)" in absent
    assert "station_checks.json (not graded with an instrument station)" in absent
    assert "checks.json unreadable: JSONDecodeError" in absent  # unreadable is not the same as absent
    assert "scores.json (no fidelity and detector scores)" in absent and "cells/ (no agent cells)" in absent
    assert "figure" not in absent  # a figure with nothing to plot is not a missing input


# ------------------------------------------------------------------------------------------------ 4. model × arm
def test_matrix_report_has_a_model_by_arm_table(tmp_path: Path):
    cells = [_cell("a4988-blank-time", "model-a", "normal", True, []),
             _cell("a4988-blank-time", "model-a", "normal", True, [], repeat=2),
             _cell("a4988-blank-time", "model-a", "closed-book", False, []),
             _cell("a4988-blank-time", "model-b", "normal", True, ["tool_bypass"]),
             _cell("a4988-blank-time", "model-b", "closed-book", None, [])]
    report = write_report(run_folder(tmp_path, cells=cells)).read_text()
    table = [t for t in _tables(_section(report, "The agent")) if t[0][0] == "model"][0]
    assert table[0] == ["model", "closed-book", "normal"]
    assert table[2] == ["model-a", "fidelity 0/1; flagged 0; cells 1", "fidelity 2/2; flagged 0; cells 2"]
    assert table[3] == ["model-b", "fidelity 0/0; flagged 0; cells 1", "fidelity 1/1; flagged 1; cells 1"]


# ------------------------------------------------------------------------------------------------ 5. figures
def test_no_empty_detector_figure_when_nothing_fired(tmp_path: Path):
    run = run_folder(tmp_path)
    report = write_report(run).read_text()
    assert not (run / "figures" / "detector_flags.svg").exists()
    assert "Detector: no flags — no rule fired in any of the 1 cells." in report
    (tmp_path / "b").mkdir()
    run2 = run_folder(tmp_path / "b", cells=[_cell("a4988-blank-time", "m", "normal", True, ["tool_bypass"])])
    write_report(run2)
    assert (run2 / "figures" / "detector_flags.svg").exists()


@pytest.mark.parametrize("build", [figs.fig_tools, lambda rows: figs.fig_cost(rows)[0], figs.fig_flags])
def test_every_text_in_the_agent_figures_is_at_least_10_pt(tmp_path: Path, build):
    from matplotlib.text import Text

    cells = [_cell(f"claim-{i}", m, a, i % 2 == 0, ["tool_bypass"] if i % 3 == 0 else [])
             for i in range(12) for m in ("model-a", "model-b") for a in ("normal", "closed-book")]
    fig = build(cells)
    figs.save(fig, tmp_path / "f.svg")
    sizes = {t.get_text(): t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip()}
    assert sizes and min(sizes.values()) >= 10, sorted(sizes.items(), key=lambda kv: kv[1])[:3]
    assert fig.get_figwidth() <= figs.MAX_WIDTH_IN  # shown at its own size: 10 pt in the figure is 10 pt on the page


def test_the_fallback_sweep_figure_has_units_and_no_offset_label(tmp_path: Path):
    sweep = ({"claim_id": "c", "measured": {"value": "945.257", "u": "0.025", "unit": "hPa"},
                                   "combined_uncertainty": "0.025",
                                   "rows": [{"bound": str(945.2 + i / 100), "distance": str(0.057 - i / 100),
                                             "verdict": "pass" if i > 8 else "fail"} for i in range(12)]})
    fig = figs.fig_sweep(sweep)
    figs.save(fig, tmp_path / "s.svg")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "claimed bound as moved (hPa), increasing →" and ax.get_ylabel() == "distance d (hPa)"
    fig = figs.fig_sweep({**sweep, "bound": "high"})
    assert fig.axes[0].get_xlabel() == "upper bound as moved (hPa), increasing →"  # the bound it moved
    assert ax.xaxis.get_offset_text().get_text() == "" and ax.yaxis.get_offset_text().get_text() == ""


# ------------------------------------------------------------------------------------------------ 6. numbers, tables
def test_numbers_are_shown_at_the_claims_resolution_by_one_function():
    assert number("100.03124511871278312045039089434960422855629932206", places=1) == "100.0"
    assert number("0.0250", places=3) == "0.025" and number("0.125", places=2) == "0.12"  # half-even
    assert number("945.257") == "945.257"  # an exact decimal at its digits is kept
    assert number(0.029008268968440075) == "0.0290" and number(3.1824463052837078, places=3) == "3.182"
    assert number(None) == "—" and number(float("nan")) == "—"
    assert verdict_places(ABSOLUTE) == 1 and verdict_places(BIT_DEPTH) == 2


def test_no_long_decimals_and_every_table_fits_the_page(tmp_path: Path):
    run = run_folder(tmp_path)
    report = write_report(run).read_text()
    station = _section(report, "With the instrument station")
    # m ± U (k) with the measurement's own U (k·u = 4.9 Pa, not k·c = 196 Pa), the printed band, d and c
    assert "| dps310-absolute-accuracy | pass | -1.4 ± 4.9 Pa (k = 1.96) | 0 ± 100 Pa | 1.4 Pa | 100.0 Pa |" in station
    assert not re.search(r"\d\.\d{9,}", report)  # no float or 50-digit Decimal spilled into the text
    assert "…" not in station
    for table in _tables(report):
        assert len(table[0]) <= MAX_COLUMNS, table[0]
    link = [t for t in _tables(_section(report, "Serial link"))][0]
    assert link[0] == ["counter (events)", "wt", "lt"] and ["resends", "0", "1"] in link
    css = (run / "report.html").read_text()
    assert "white-space:nowrap" in css and "@media print" in css


# ------------------------------------------------------------------------------------------------ 7. caveats
def test_the_two_weak_passes_carry_their_caveats_next_to_the_claim(tmp_path: Path):
    report = write_report(run_folder(tmp_path)).read_text()
    verdicts = _section(report, "Chamber verdicts")
    bit_row = next(line for line in verdicts.splitlines() if line.startswith("| si115x-adc-bit-depth |"))
    range_row = next(line for line in verdicts.splitlines() if line.startswith("| dps310-operating-range |"))
    assert "Weak pass: see its caveat under the table" in bit_row and "Weak pass" in range_row
    table_end = verdicts.index("\n\n", verdicts.index(range_row))  # the caveats in full, right under the table
    caveats = verdicts[table_end:].split("\n\n")[1].splitlines()
    bit = next(line for line in caveats if line.startswith("- si115x-adc-bit-depth: **caveat — "))
    assert "cannot show that the ADC reaches 23 bits" in bit and "largest code seen 65535" in bit
    assert any(line.startswith("- dps310-operating-range: **caveat — ") and
               "one ambient reading (945.257 ± 0.080 hPa (k = 3.18))" in line for line in caveats)
    glance = _section(report, "At a glance")
    assert glance.count("caveat:") == 2
    blank = next(line for line in verdicts.splitlines() if line.startswith("| a4988-blank-time |"))
    assert "Caveat" not in blank
    html = (tmp_path / "20261201T213041Z" / "report.html").read_text()
    assert "<b>caveat — weak pass: the chamber firmware reads" in html


def test_caveats_are_keyed_by_real_claim_ids_and_only_on_a_pass():
    from agent.scoring.report_run import WEAK_PASS_CAVEATS, caveat
    from protocols.claim_sources import load_checked_claims

    assert set(WEAK_PASS_CAVEATS) <= set(load_checked_claims(None))
    assert caveat({**BIT_DEPTH, "verdict": "inconclusive"}) is None
    assert caveat({**BIT_DEPTH, "verdict": "fail"}) is None
