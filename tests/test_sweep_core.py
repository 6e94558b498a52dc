"""The perturbation sweep: the verdict changes exactly at the flip points m ± c, in the documented direction."""

from __future__ import annotations

import csv
import json
import sys
from decimal import Decimal as D

import pytest

from protocols.claims import Tolerance, load_claims
from protocols.sweep import SweepError, plot_sweep, sweep, write_sweep_csv
from protocols.verdict import VERDICT_ORDER


@pytest.fixture(scope="module")
def claims():
    return load_claims()


def assert_flips_only_at_flip_points(result):
    c = result.combined_uncertainty
    for before, after in zip(result.rows, result.rows[1:]):
        if before.verdict != after.verdict:
            assert before.flip_point or after.flip_point, (before, after)
    for row in result.rows:
        if row.flip_point:
            assert abs(row.distance) == c or len(c.as_tuple().digits) > 40  # exact unless c is irrational


def test_acceptance_operating_range_flips_exactly_at_plus_minus_c(claims):
    result = sweep(claims["dps310-operating-range"], "945.285", "0.080")
    assert result.flip_points == (D("945.365"), D("945.205"))
    bounds = [r.bound for r in result.rows]
    assert bounds == sorted(bounds, reverse=True)  # the upper bound shrinks through m
    assert set(result.flip_points) <= set(bounds)
    verdicts = [r.verdict for r in result.rows]
    assert [VERDICT_ORDER[v] for v in verdicts] == sorted(VERDICT_ORDER[v] for v in verdicts)
    assert {"pass", "inconclusive", "fail"} == set(verdicts)
    assert_flips_only_at_flip_points(result)
    by_bound = {r.bound: r for r in result.rows}
    assert by_bound[D("945.365")].verdict == by_bound[D("945.205")].verdict == "inconclusive"  # closed band
    last_pass = max(r.bound for r in result.rows if r.verdict == "pass")
    first_fail = max(r.bound for r in result.rows if r.verdict == "fail")
    assert last_pass > D("945.365") and first_fail < D("945.205")
    for r in result.rows:  # every row obeys the rule on its own numbers
        expected = "pass" if r.distance < -D("0.080") else "fail" if r.distance > D("0.080") else "inconclusive"
        assert r.verdict == expected


def test_output_shape_and_json(claims):
    data = json.loads(json.dumps(sweep(claims["dps310-operating-range"], 945.285, 0.080, steps=4).to_dict()))
    assert data["claim_id"] == "dps310-operating-range"
    assert data["measured"] == {"value": "945.285", "u": "0.080", "unit": "hPa"}
    assert data["combined_uncertainty"] == "0.080"
    assert len(data["rows"]) == 6  # 4 grid points (none at m ± c) + the 2 flip points
    assert set(data["rows"][0]) >= {"bound", "distance", "verdict"}


def test_lower_bound_rises_through_the_measurement(claims):
    result = sweep(claims["dps310-operating-range"], "945.285", "0.080", bound="low", steps=9)
    bounds = [r.bound for r in result.rows]
    assert bounds == sorted(bounds)
    assert [r.verdict for r in result.rows][0] == "pass" and result.rows[-1].verdict == "fail"
    assert_flips_only_at_flip_points(result)


def test_measurement_in_pa_against_a_hpa_claim(claims):
    result = sweep(claims["dps310-operating-range"], "94528.5", "8.0", unit="Pa", steps=5)
    assert result.flip_points == (D("945.365"), D("945.205")) and result.unit == "hPa"


def test_point_claim_goes_fail_pass_fail(claims):
    result = sweep(claims["dps310-relative-accuracy"], "3", "8", steps=11)  # c = sqrt(8² + 6²) = 10 Pa
    assert result.bound_name == "value" and result.flip_points == (D("13"), D("-7"))
    verdicts = [r.verdict for r in result.rows]
    assert verdicts[0] == verdicts[-1] == "fail" and "pass" in verdicts and "inconclusive" not in verdicts
    assert all(r.verdict == "pass" for r in result.rows if r.flip_point)  # |m − s| = c is compatible
    assert_flips_only_at_flip_points(result)


def test_irrational_c_still_flips_between_the_rows_around_m_plus_minus_c(claims):
    rect = Tolerance(value=D("0.060"), meaning="symmetric_bound", entry="rectangular")
    claim = claims["dps310-operating-range"].model_copy(update={"tolerance": rect})
    result = sweep(claim, "945.285", "0.080", steps=21)
    assert any("irrational" in n for n in result.notes)
    assert_flips_only_at_flip_points(result)


def test_unmatchable_decisive_condition_keeps_every_row_inconclusive(claims):
    result = sweep(claims["dps310-absolute-accuracy"], "0", "8", steps=5)
    assert {r.verdict for r in result.rows} == {"inconclusive"}


def test_bad_requests_are_refused(claims):
    with pytest.raises(SweepError, match="at least 2"):
        sweep(claims["dps310-operating-range"], "945.285", "0.080", steps=1)
    with pytest.raises(SweepError, match="point claim"):
        sweep(claims["dps310-operating-range"], "945.285", "0.080", bound="value")
    with pytest.raises(SweepError, match="crosses the other bound"):
        sweep(claims["dps310-operating-range"], "945.285", "0.080", span="700")


def test_csv_round_trip(tmp_path, claims):
    result = sweep(claims["dps310-operating-range"], "945.285", "0.080", steps=7)
    path = write_sweep_csv(result, tmp_path / "sweep.csv")
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["verdict"] for r in rows] == [r.verdict for r in result.rows]
    assert [D(r["bound"]) for r in rows] == [r.bound for r in result.rows]
    assert sum(int(r["flip_point"]) for r in rows) == 2


def test_plot_writes_a_png_without_pyplot_figures(tmp_path, claims):
    result = sweep(claims["dps310-operating-range"], "945.285", "0.080")
    path = plot_sweep(result, tmp_path / "sweep.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if "matplotlib.pyplot" in sys.modules:  # whoever imported pyplot: we must not have left a figure in it
        assert sys.modules["matplotlib.pyplot"].get_fignums() == []


def _texts_and_sizes(fig):
    fig.canvas.draw()  # tick labels and offset texts are filled in at draw time
    (ax,) = fig.axes
    ticks = [t for axis in (ax.xaxis, ax.yaxis) for t in axis.get_ticklabels() if t.get_text()]
    legend = ax.get_legend().get_texts()
    return ax, ticks, legend


@pytest.mark.parametrize("claim_id, measured, u, x_label", [
    ("dps310-operating-range", "945.259", "0.016", "stated high bound (hPa)"),
    ("acs70331-bandwidth", "1.05", "0.02", "stated value (MHz)"),
])
def test_the_figure_reads_without_an_offset_with_units_on_both_axes_and_8_pt_text(claims, claim_id, measured, u,
                                                                                  x_label):
    from protocols.sweep import sweep_figure

    result = sweep(claims[claim_id], measured, u)
    ax, ticks, legend = _texts_and_sizes(sweep_figure(result))
    assert ax.xaxis.get_offset_text().get_text() == "" and ax.yaxis.get_offset_text().get_text() == ""
    assert ax.get_xlabel() == x_label
    assert ax.get_ylabel() == f"signed distance d ({result.unit})"
    x_values = [float(t.get_text().replace("\u2212", "-")) for t in ax.xaxis.get_ticklabels() if t.get_text()]
    lo, hi = sorted(float(r.bound) for r in (result.rows[0], result.rows[-1]))
    assert x_values and all(lo - 1 <= v <= hi + 1 for v in x_values)  # plain bound values, not offsets from one
    assert min(t.get_fontsize() for t in [*ticks, *legend, ax.xaxis.label, ax.yaxis.label, ax.title]) >= 8
