"""The simulator against the real chamber (issue 14): the real figures on the default parameters, the authors'
models where they hold, and the cross-effects the authors' ground-truth graph has.

The figures, their sources and their tolerances (with why each is that wide) are one table,
calibration/real_figures.py FIGURES; the slow tests run the very protocols that recorded the public datasets
(../shared/chamber-data/protocols) on the simulator, SEEDS times, and gate the mean.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.params import authors_params
from simulator.physics import make_model
from calibration.real_figures import FIGURES, SEEDS, all_figures, run_protocol, steady_window
from chamber.protocol_language import load_protocol, parse_protocol
from conftest import shared_path

AUTHORS = authors_params()
BAROS = ("upwind", "downwind", "ambient", "intake")


def col(model, rows, name):
    return rows[:, model.layout.index(name)]


def settle(model, settings, settle_rows=1500, n=1000):
    for name, value in settings.items():
        model.apply(name, value)
    model.sample(settle_rows)
    return model.sample(n)


@pytest.fixture(scope="module")
def protocols():
    return shared_path("chamber-data", "protocols")


@pytest.fixture(scope="module")
def ours(protocols):
    """Every figure on the default parameters, averaged over seeds 0..SEEDS−1 (≈ 20 s)."""
    runs = [all_figures(None, protocols, seed) for seed in range(SEEDS)]
    return {name: float(np.mean([r[name] for r in runs])) for name in runs[0]}


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, f in FIGURES.items() if f.gated])
def test_default_parameters_reproduce_the_real_figure(ours, name):
    figure = FIGURES[name]
    assert figure.accepts(ours[name]), f"{name}: ours {ours[name]:.4g} vs real {figure.real} ± {figure.tolerance} ({figure.why})"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, f in FIGURES.items() if not f.gated])
def test_default_parameters_meet_the_reported_figures_read_off_plots(ours, name):
    figure = FIGURES[name]
    assert figure.accepts(ours[name]), f"{name}: ours {ours[name]:.4g} vs real {figure.real} ± {figure.tolerance}"


@pytest.mark.slow
def test_the_authors_models_miss_the_figures_they_do_not_model(protocols):
    """The comparison is meaningful: on the authors' set the departures listed in issue 14 are outside tolerance."""
    theirs = all_figures(AUTHORS, protocols, seed=0)
    missed = {n for n, f in FIGURES.items() if f.gated and not f.accepts(theirs[n])}
    assert {"validate_sigma", "validate_spread", "validate_exhaust_step", "fans_off_unit_spread",
            "idle_exhaust_rpm_full_intake", "vis_large_small_ratio", "vis_fixed_scatter_std",
            "l_11_vis_1_std", "dark_vis_1_std"} <= missed
    assert FIGURES["d1_up_minus_dw_full_intake"].accepts(theirs["d1_up_minus_dw_full_intake"])  # D1 is theirs


def test_steady_window_is_the_seed_papers_on_the_real_protocol(protocols):
    """The real protocol toggles load_out row by row; rows whose trailing 5 rows share a setting number 198 here,
    against the archive's n = 199 (PROVENANCE.md does not record the rolling window's edge convention; ±2 rows)."""
    model = make_model("wt", seed=0)
    steps = load_protocol(protocols / "wt_validate_v1" / "validate_load_out_pressure_intake.txt")
    rows = run_protocol(model, steps)
    assert rows.shape == (3000, model.layout.row_length)
    assert abs(int(steady_window(rows, model.layout).sum()) - 199) <= 2


def test_run_protocol_keeps_msr_rows_writes_the_flag_and_refuses_what_has_no_in_process_meaning():
    """The operator's parser reads the protocol; SET flag lands in the kept rows, WAIT rows are not kept, and
    WAIT_INPUT / RST (no meaning without an operator or a board) are refused naming the line."""
    model = make_model("wt", seed=0)
    rows = run_protocol(model, parse_protocol(["SET,flag,3", "WAIT,1000", "MSR,4,0", "SET,flag,1", "MSR,2,0"]))
    assert rows.shape == (6, model.layout.row_length)
    assert col(model, rows, "flag").tolist() == [3.0] * 4 + [1.0] * 2
    for extra in ("WAIT_INPUT,press enter", "RST"):
        with pytest.raises(ValueError, match=f"line 2: '{extra}': expected SET, WAIT or MSR"):
            run_protocol(make_model("wt", seed=0), parse_protocol(["MSR,1,0", extra], "q.txt"))


# ------------------------------------------------------------------------------------------------ authors' models
def test_defaults_keep_the_authors_models_where_no_real_figure_departs():
    """C3 downwind, D1 upwind − downwind and B1 current at full intake, ir_1/ir_2/vis_2/vis_3 codes at the
    firmware's default diodes, the light-source current and the angle sensors: identical in both sets."""
    ours, theirs = make_model("wt", seed=1), make_model("wt", seed=1, params=AUTHORS)
    for rpm in (300.0, 1700.0, 3000.0):
        assert ours.static_pressure(np.array([rpm]), 20.0) == pytest.approx(theirs.static_pressure(np.array([rpm]), 20.0), abs=1e-12)
    for load in (0.0, 0.05, 0.5, 1.0):
        assert ours.fan_current_a(load) == theirs.fan_current_a(load)
    lt_ours, lt_theirs = make_model("lt", seed=1), make_model("lt", seed=1, params=AUTHORS)
    for model in (lt_ours, lt_theirs):
        for name, value in {"red": 200, "green": 90, "blue": 30, "pol_1": 10.0, "pol_2": 55.0}.items():
            model.apply(name, value)
    src_ours, _ = lt_ours.light_and_leak_codes()
    src_theirs, _ = lt_theirs.light_and_leak_codes()
    for i in (0, 2, 3, 5):  # ir_1, ir_2, vis_2, vis_3 (vis_1 and ir_3 carry real levels)
        assert src_ours[i] == pytest.approx(src_theirs[i], rel=1e-12)
    a, b = lt_ours.sample(200), lt_theirs.sample(200)
    for name in ("current", "angle_1", "angle_2"):
        # same ADC model and noise in both sets; means of 200 reads agree within 0.2 counts (SE 0.035)
        assert col(lt_ours, a, name).mean() == pytest.approx(col(lt_theirs, b, name).mean(), abs=0.2)


def test_upwind_sits_above_downwind_by_model_d1():
    """The invented 'upwind = half the downwind excess' had the opposite sign (−9.26 Pa at full intake)."""
    model = make_model("wt", seed=3, params=AUTHORS)  # offsets 0: the raw difference is D1
    for b in BAROS:
        model.apply(f"osr_{b}", 8)
    for load in (0.4, 1.0):
        rows = settle(model, {"load_in": load, "load_out": 0.01})
        diff = col(model, rows, "pressure_upwind") - col(model, rows, "pressure_downwind")
        # 1000 differences of two σ = 0.4 Pa readings: SE 0.018 Pa; 0.1 Pa
        assert diff.mean() == pytest.approx(-0.404 + 11.79 * load**2, abs=0.1)


# ------------------------------------------------------------------------------------------------ cross-effects
def test_an_idle_fan_windmills_with_the_other_fan_and_less_with_the_hatch_open():
    model = make_model("wt", seed=4)
    closed = settle(model, {"load_in": 1.0, "load_out": 0.01, "hatch": 0.0})
    opened = settle(model, {"hatch": 45.0})
    alone = settle(model, {"load_in": 0.01, "hatch": 0.0}, settle_rows=3000)
    rpm = {k: col(model, r, "rpm_out").mean() for k, r in (("closed", closed), ("open", opened), ("alone", alone))}
    # tachometer jitter 5 rpm: the means of 1000 rows are within 0.2 rpm of the model; margins are ≥ 100 rpm
    assert rpm["closed"] == pytest.approx(1300, abs=100)
    assert rpm["alone"] < 400 < rpm["open"] < rpm["closed"] - 100
    # the exhaust drives the intake fan too (the graph's load_out → rpm_in)
    back = settle(model, {"load_in": 0.01, "load_out": 1.0})
    assert col(model, back, "rpm_in").mean() > 1000


def test_each_fan_current_depends_on_the_other_fans_load():
    model = make_model("wt", seed=5)
    for fan in ("in", "out"):
        model.apply(f"osr_{fan}", 8)
        model.apply(f"v_{fan}", 1.1)
    idle = col(model, settle(model, {"load_in": 0.01, "load_out": 0.01}, 3000, 3000), "current_out")
    driven = col(model, settle(model, {"load_in": 1.0}, 1500, 3000), "current_out")
    to_amps = 1.16 * 2.5 / 5 / 1023
    # assumed 5 mA drop (params.current_windmill_a); 5 mA current noise → SE of the difference 0.13 mA
    assert (driven.mean() - idle.mean()) * to_amps == pytest.approx(-0.005, abs=0.001)


def test_pressure_intake_depends_on_the_exhaust():
    model = make_model("wt", seed=6)
    for b in BAROS:
        model.apply(f"osr_{b}", 8)
    low = settle(model, {"load_in": 0.1, "load_out": 0.01}, 3000)
    high = settle(model, {"load_out": 1.0})
    rise = (col(model, high, "pressure_intake") - col(model, high, "pressure_ambient")).mean() - (
        col(model, low, "pressure_intake") - col(model, low, "pressure_ambient")
    ).mean()
    # +0.181 × ΔS_r(ω_out) = 3.35 Pa at steady state; the intake noise at full exhaust (2.2 Pa) gives SE 0.07 Pa
    assert rise == pytest.approx(0.181 * 74.8247 * 0.25 * (1 - 0.01), abs=0.3)


def test_a_stopped_fan_keeps_its_last_tachometer_reading():
    model = make_model("wt", seed=7)
    assert np.all(col(model, model.sample(300)[-50:], "rpm_in") > 0)  # spun up to idle after power-on
    rows = settle(model, {"load_in": 0.0, "load_out": 0.0}, 3000, 50)
    held = col(model, rows, "rpm_in")
    assert np.all(held == held[0]) and 0 < held[0] < 200  # its last reading, near the stall speed
    authors = make_model("wt", seed=7, params=AUTHORS)
    assert np.all(col(authors, settle(authors, {"load_in": 0.0, "load_out": 0.0}, 3000, 50), "rpm_in") == 0)
    fresh = make_model("wt", seed=7, params={"power_on": {"load_in": 0.0, "load_out": 0.0}})
    assert np.all(col(fresh, fresh.sample(20), "rpm_in") == 0)  # never turned since power-on: 0


def test_real_vis_ratio_and_pwm_scatter_at_a_fixed_setting():
    model = make_model("lt", seed=8)
    for name in ("red", "green", "blue"):
        model.apply(name, 128)
    means, stds = {}, {}
    for diode in (0, 1):
        model.apply("diode_vis_1", diode)
        v = col(model, model.sample(4000), "vis_1")
        means[diode], stds[diode] = v.mean(), v.std(ddof=1)
    # 4000 rows with 8 % scatter: the ratio's SE is 0.0045, the relative std's 0.001
    assert means[1] / means[0] == pytest.approx(2.55, abs=0.02)
    assert stds[1] / means[1] == pytest.approx(math.hypot(0.08, 1 / math.sqrt(means[1])), abs=0.005)
