"""The real-chamber figures the simulator must reproduce (issue 14), and how to compute ours the same way.

Why a module: the figures are facts recorded elsewhere (the seed paper's archive, the tool outputs quoted in its
gold file, the chamber authors' model D1), each with a tolerance that says how closely a simulation can be
expected to meet it. The tests (tests/test_sim_real_figures.py) gate on them and the benchmark
(benchmarks/bench_sim_figures.py) prints ours beside the real figure and the authors' model; both must use one
table and one way of computing, so a figure cannot be computed one way in a test and another in a report.
It lives on the calibration floor, not in simulator/, because computing ours applies the cross-sensor method
(calibration/cross_sensor.py) to the simulator's rows: the simulator must not import the floor above it.

How ours are computed: by running the *same experiment protocol* that recorded the public dataset
(../shared/chamber-data/protocols/<dataset>/<experiment>.txt: SET, WAIT, MSR lines) on an in-process model,
then applying the seed paper's method to the rows (`seed_paper_cross_sensor`, as its PROVENANCE.md §4 states
it). WAIT advances the model's own time (fans spin up, the weather walks); MSR n keeps the next n rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibration.cross_sensor import compute_cross_sensor
from chamber.protocol_language import (
    MeasureInstruction,
    Protocol,
    SetInstruction,
    WaitInstruction,
    load_protocol,
)
from firmware_bridge.variables import Kind
from simulator.model import PhysicsModel
from simulator.physics import make_model


@dataclass(frozen=True)
class RealFigure:
    """One real-chamber figure: its value, where it is recorded, and the tolerance a simulation must meet."""

    name: str
    unit: str
    real: float | tuple[float, float]  # a value, or a (low, high) range when the record gives one
    tolerance: float  # on the mean of our figure over SEEDS runs (see `SEEDS`)
    why: str  # why the tolerance is this wide
    source: str
    before: float | None = None  # our figure before issue 14 (as the issue measured it)
    gated: bool = True  # False: reported in issue 14 as "read off the authors' plots, not yet gated"

    def accepts(self, value: float) -> bool:
        low, high = self.real if isinstance(self.real, tuple) else (self.real, self.real)
        return low - self.tolerance <= value <= high + self.tolerance


ARCHIVE = "paper-archive/archive/baseline_chamber.json (dps310-relative-accuracy, dps310-operating-range)"
GOLD = "paper-archive/data/classifier_gold.yaml (tool outputs)"

FIGURES: dict[str, RealFigure] = {
    f.name: f
    for f in (
        RealFigure(
            "d1_up_minus_dw_full_intake", "Pa", -0.404 + 11.79, 0.2,
            "the reading resolution: half the DPS310's osr-8 precision (0.4 Pa); our mean over 2000 rows has SE 0.02",
            "authors' model D1 fitted on real wt_bernoulli_v1 (issue 14): −0.404 + 11.79·(ω_in/ω_max)², offsets removed",
            before=-9.26,
        ),
        RealFigure(
            "fans_off_unit_spread", "Pa", (10.0, 11.5), 0.3,
            "the record gives a range (~10–11.5 Pa); 0.3 Pa is the SE of a 4-unit spread from 500 osr-8 rows ×10",
            "real fans-off readings (issue 14): the four units up to ~10–11.5 Pa apart, upwind highest",
            before=None,
        ),
        RealFigure(
            "validate_sigma", "Pa", 8.0149, 0.4,
            "the real figure is one run: 0.4 Pa ≈ 3 × the run-to-run SD of ours (0.13 Pa over 8 seeds; the window "
            "and its mix of exhaust states are the real protocol's, so only noise varies)",
            ARCHIVE + ": measured_sigma 0.08015 hPa (n 199, validate_load_out_pressure_intake)",
            before=4.6,
        ),
        RealFigure(
            "validate_spread", "Pa", 9.6932, 0.2,
            "half the DPS310's osr-8 precision (the reading resolution); ours varies by only 0.014 Pa run to run "
            "(the real protocol fixes the window), so the gate is on the offsets solved from the real figures",
            ARCHIVE + ": cross_sensor_spread 0.09693 hPa",
            before=6.5,
        ),
        RealFigure(
            "validate_offset", "Pa", 5.0631, 0.25,
            "the real figure is one run: 2.5 × the run-to-run SD of ours (0.09 Pa over 8 seeds)",
            ARCHIVE + ": measured_value 0.05063 hPa",
            before=-1.0,
        ),
        RealFigure(
            "validate_intake_mean", "Pa", 94528.508, 30.0,
            "the absolute level is the weather on the day: our ambient walk has a stationary SD of 30 Pa (its mean is "
            "the real experiment's whole-run ambient mean; ours varies by 14 Pa over 8 seeds); a tighter gate would "
            "only test the seed",
            ARCHIVE + ": measured_value 945.2851 hPa (dps310-operating-range, same window)",
            before=None,
        ),
        RealFigure(
            "validate_exhaust_step", "Pa", (15.4, 16.0), 0.5,
            "the record gives a range; 0.5 Pa ≈ 2 × the run-to-run SD of ours (0.23 Pa over 8 seeds)",
            "issue 14: the exhaust step 0.01 → 1 moves intake − mean(others) by ~15.4–16 Pa in the real chamber",
            before=9.3,
        ),
        RealFigure(
            "validate_full_exhaust_noise", "Pa", 2.2, 0.6,
            "the real figure is one run: 2.5 × the run-to-run SD of ours (0.24 Pa over 8 seeds)",
            "issue 14: real intake − mean(others) std ~2.2 Pa at full exhaust",
            before=0.47,
        ),
        RealFigure(
            "hatch_move_intake_std", "Pa", 0.8884, 0.09,
            "the real figure is one 50-row run: 2.5 × the run-to-run SD of ours (0.035 Pa over 8 seeds)",
            "paper-archive/data/classifier_gold.annotator2.yaml (tool outputs): validate_hatch_pressures "
            "pressure_intake sample_std 0.8884 (n 50, osr 8, full intake, hatch 0 ↔ 45°)",
            before=2.13,
        ),
        RealFigure(
            "idle_exhaust_rpm_full_intake", "rpm", 1300.0, 100.0,
            "the record says ~1300 rpm; ±100 rpm is the precision a reading-off implies (tachometer jitter is 5 rpm)",
            "issue 14: an idle exhaust (load 0.01) windmills to ~1300 rpm at full intake",
            before=300.0,
        ),
        RealFigure(
            "fan_rpm_load_1", "rpm", (2810.0, 2930.0), 10.0,
            "the record gives a range read off the authors' plots; 10 rpm ≈ 2× the tachometer jitter",
            "issue 14 (reported, not gated): real fan speed at load 1 is ~2810–2930 rpm",
            before=3000.0, gated=False,
        ),
        RealFigure(
            "current_noise", "A", 0.005, 0.0015,
            "read off a plot (~5 mA): 30 %",
            "issue 14 (reported, not gated): real current noise ~5 mA",
            before=0.0003, gated=False,
        ),
        RealFigure(
            "diode_vis_1_mean", "counts", 7238.64, 225.0,
            "the 23/27 split is fixed by the protocol, so only the 8 % scatter is random: 2.5 × the run-to-run SD "
            "of ours (90 counts over 8 seeds)",
            ARCHIVE + " (si115x-adc-bit-depth: 7238.64 counts, n 50, validate_diode_vis_1)",
            before=8280.0,
        ),
        RealFigure(
            "diode_vis_1_std", "counts", 3140.13, 280.0,
            "2.5 × the run-to-run SD of ours (111 counts over 8 seeds)",
            GOLD + ": validate_diode_vis_1 vis_1 sample_std 3140.13",
            before=2711.0,
        ),
        RealFigure(
            "vis_large_small_ratio", "", 2.55, 0.18,
            "a ratio of a 27-row and a 23-row mean with 8 % scatter each: 2.5 × the run-to-run SD of ours (0.071)",
            "issue 14: the real small/large visible photodiode ratio is ~2.55 (validate_diode_vis_1)",
            before=2.0,
        ),
        RealFigure(
            "vis_fixed_scatter_std", "counts", 809.0, 165.0,
            "mean of three 50-row stds: 2.5 × the run-to-run SD of ours (66 counts over 8 seeds)",
            "issue 14: vis_1 std 784 / 821 / 822 counts in validate_t_vis_3 / diode_vis_2 / diode_vis_3 (mean 809)",
            before=100.0,
        ),
        RealFigure(
            "l_11_vis_1_std", "counts", 5.256, 0.65,
            "a 50-row std of a 26/24 two-level mixture with shot noise: 2.5 × the run-to-run SD of ours (0.26)",
            GOLD + ": validate_l_11 vis_1 sample_std 5.256 (max 15)",
            before=40.8,
        ),
        RealFigure(
            "dark_vis_1_std", "counts", 0.5812, 0.075,
            "a 1000-row std of a Poisson(0.34) count: 2.5 × the run-to-run SD of ours (0.029)",
            GOLD + ": validate_osr_c vis_1 sample_std 0.5812 (n 1000, all light off)",
            before=1.23,
        ),
        RealFigure(
            "malus_amplitude_white_255", "counts", 2774.0, 140.0,
            "read off the authors' plot: 5 %",
            "issue 14 (reported, not gated): real Malus amplitude (ir_3, white 255, diode 2, t 3) ~2774 counts",
            before=3389.0, gated=False,
        ),
    )
}


SEEDS = 8
"""Runs (seeds 0..SEEDS−1) whose mean figure is gated: the real figure is a single run, so each tolerance is
about 2.5 × our run-to-run SD (the real figure's own sampling error, which ours estimates), or the precision of
the record where it is coarser (a range, a figure read off a plot)."""


# ------------------------------------------------------------------------------------------------ protocols
def run_protocol(model: PhysicsModel, protocol: Protocol) -> np.ndarray:
    """The rows an experiment protocol (chamber.protocol_language.load_protocol, the operator's own parser)
    collects on `model` (in-process, no port).

    SET applies the value to the model when it is one of its actuators; `flag` (firmware bookkeeping) is kept by
    this runner and written into the rows' flag column, as the firmware would; other names (camera) are ignored.
    WAIT ms advances the model by the rows it would produce meanwhile; MSR n keeps the next n rows. WAIT_INPUT
    and RST have no in-process meaning and are refused.
    """
    actuators = set(model.state())
    has_flag = "flag" in model.layout.names
    flag_col = model.layout.index("flag") if has_flag else None
    flag = 0.0
    kept = []
    for step in protocol.instructions:
        if isinstance(step, SetInstruction):
            name, value = step.variable, float(step.value)
            if name == "flag":
                flag = value
            elif name in actuators:
                model.apply(name, value)
        elif isinstance(step, WaitInstruction):
            model.sample(int(round(step.ms / 1000.0 * model.rows_per_second)))
        elif isinstance(step, MeasureInstruction):
            rows = model.sample(step.rows)
            if flag_col is not None:
                rows[:, flag_col] = flag
            kept.append(rows)
        else:
            raise ValueError(
                f"{protocol.source}: line {step.line}: {step.text!r}: expected SET, WAIT or MSR (an in-process run)"
            )
    width = model.layout.row_length
    return np.vstack(kept) if kept else np.zeros((0, width))


# ------------------------------------------------------------------------------------------------ the method
@dataclass(frozen=True)
class CrossSensorFigures:
    """The seed paper's cross-sensor statistics (Pa) over its steady-state window."""

    n: int
    sigma: float  # sample std (ddof 1) of primary − mean(redundants)
    offset: float  # mean of primary − mean(redundants)
    spread: float  # mean over rows of the row-wise std (ddof 1) of the redundants
    primary_mean: float
    window: np.ndarray  # boolean mask of the window's rows
    residual: np.ndarray  # primary − mean(redundants) on the window's rows


def steady_window(rows: np.ndarray, layout, *, width: int = 5) -> np.ndarray:
    """Rows where the trailing `width`-row std (ddof 1) of every actuator is below max(1 % of its range, 1e-6),
    as the seed paper's uncertainty.py selects them (PROVENANCE.md §4); the first width − 1 rows are never in it."""
    names = [v.name for v in layout.variables if v.kind is Kind.ACTUATOR]
    if "flag" in layout.names:
        names.append("flag")
    n = len(rows)
    ok = np.zeros(n, dtype=bool)
    if n < width:
        return ok
    ok[width - 1 :] = True
    for name in names:
        x = rows[:, layout.index(name)]
        windows = np.lib.stride_tricks.sliding_window_view(x, width)
        std = windows.std(axis=1, ddof=1)
        threshold = max(0.01 * (np.max(x) - np.min(x)), 1e-6)
        ok[width - 1 :] &= std < threshold
    return ok


def seed_paper_cross_sensor(rows: np.ndarray, layout, primary: str, redundants: list[str]) -> CrossSensorFigures:
    """The seed paper's cross-sensor figures for `primary` against `redundants` (PROVENANCE.md §4).

    The spread's ddof is not stated there; ddof 1 (the pandas default) is the one under which the real
    experiment's figures agree with the real fans-off unit spread (simulator/params.py, barometer_offsets_pa).
    """
    window = steady_window(rows, layout)
    if window.sum() < 50:
        raise ValueError(f"the seed paper's method needs a steady window of at least 50 rows, got {int(window.sum())}")
    p = rows[window, layout.index(primary)]
    r = np.column_stack([rows[window, layout.index(name)] for name in redundants])
    residual = p - r.mean(axis=1)
    return CrossSensorFigures(
        n=int(window.sum()),
        sigma=float(np.std(residual, ddof=1)),
        offset=float(np.mean(residual)),
        spread=float(np.mean(np.std(r, axis=1, ddof=1))),
        primary_mean=float(np.mean(p)),
        window=window,
        residual=residual,
    )


# ------------------------------------------------------------------------------------------------ our figures
BAROMETER_COLUMNS = ("pressure_upwind", "pressure_downwind", "pressure_ambient", "pressure_intake")


def _steady(model: PhysicsModel, settings: dict[str, float], settle: int, n: int) -> np.ndarray:
    for name, value in settings.items():
        model.apply(name, value)
    model.sample(settle)
    return model.sample(n)


def wt_validate_figures(params, protocols_dir: str | Path, seed: int = 0) -> dict[str, float]:
    """validate_load_out_pressure_intake run as recorded, then the seed paper's method (intake vs the others)."""
    model = make_model("wt", params=params, seed=seed)
    rows = run_protocol(model, load_protocol(Path(protocols_dir) / "wt_validate_v1" / "validate_load_out_pressure_intake.txt"))
    layout = model.layout
    cs = seed_paper_cross_sensor(rows, layout, "pressure_intake", list(BAROMETER_COLUMNS[:3]))
    load_out = rows[cs.window, layout.index("load_out")]
    full, idle = load_out > 0.5, load_out < 0.5
    return {
        "validate_n": float(cs.n),
        "validate_sigma": cs.sigma,
        "validate_spread": cs.spread,
        "validate_offset": cs.offset,
        "validate_intake_mean": cs.primary_mean,
        "validate_exhaust_step": float(cs.residual[full].mean() - cs.residual[idle].mean()),
        "validate_full_exhaust_noise": float(np.std(cs.residual[full], ddof=1)),
    }


def wt_hatch_figures(params, protocols_dir: str | Path, seed: int = 0) -> dict[str, float]:
    """validate_hatch_pressures run as recorded (full intake, the hatch moved 0 ↔ 45° row by row): the intake
    unit's sample std over its 50 rows, as the tool output quoted in the gold file computed it."""
    model = make_model("wt", params=params, seed=seed)
    rows = run_protocol(model, load_protocol(Path(protocols_dir) / "wt_validate_v1" / "validate_hatch_pressures.txt"))
    return {"hatch_move_intake_std": float(np.std(rows[:, model.layout.index("pressure_intake")], ddof=1))}


def wt_steady_figures(params, seed: int = 0) -> dict[str, float]:
    """Fans-off unit spread, D1 at full intake, the idle exhaust's windmilling, rpm at load 1 and current noise."""
    model = make_model("wt", params=params, seed=seed)
    col = model.layout.index
    osr8 = {f"osr_{b}": 8.0 for b in ("upwind", "downwind", "ambient", "intake")} | {"osr_in": 8.0, "v_in": 1.1}
    off = _steady(model, osr8 | {"load_in": 0.0, "load_out": 0.0}, 300, 5000)
    cal = compute_cross_sensor({name: off[:, col(name)] for name in BAROMETER_COLUMNS})
    on = _steady(model, {"load_in": 1.0, "load_out": 0.01, "hatch": 0.0}, 1500, 2000)
    up_dw = lambda rows: float(np.mean(rows[:, col("pressure_upwind")] - rows[:, col("pressure_downwind")]))  # noqa: E731
    amps = on[:, col("current_in")] / 1023.0 * 1.16 * 2.5 / 5.0  # the chamber authors' conversion at v_in 1.1
    return {
        "fans_off_unit_spread": cal.spread,
        "fans_off_highest_unit": float(np.argmax([s.mean for s in cal.sensors])),  # index into BAROMETER_COLUMNS
        "fans_off_dw_minus_up": cal.offsets["pressure_downwind"] - cal.offsets["pressure_upwind"],
        "d1_up_minus_dw_full_intake": up_dw(on) - up_dw(off),
        "idle_exhaust_rpm_full_intake": float(np.mean(on[:, col("rpm_out")])),
        "fan_rpm_load_1": float(np.mean(on[:, col("rpm_in")])),
        "current_noise": float(np.std(amps, ddof=1)),
    }


def lt_validate_figures(params, protocols_dir: str | Path, seed: int = 0) -> dict[str, float]:
    """The light-tunnel validation experiments as recorded (vis_1 statistics), plus the Malus amplitude."""
    root = Path(protocols_dir) / "lt_validate_v1"

    def vis_1(experiment: str) -> tuple[np.ndarray, np.ndarray, PhysicsModel]:
        model = make_model("lt", params=params, seed=seed)
        rows = run_protocol(model, load_protocol(root / f"validate_{experiment}.txt"))
        return rows[:, model.layout.index("vis_1")], rows, model

    v, rows, model = vis_1("diode_vis_1")
    diode = rows[:, model.layout.index("diode_vis_1")]
    figures = {
        "diode_vis_1_mean": float(v.mean()),
        "diode_vis_1_std": float(np.std(v, ddof=1)),
        "vis_large_small_ratio": float(v[diode == 1].mean() / v[diode == 0].mean()),
        "vis_fixed_scatter_std": float(np.mean([np.std(vis_1(e)[0], ddof=1) for e in ("t_vis_3", "diode_vis_2", "diode_vis_3")])),
        "l_11_vis_1_std": float(np.std(vis_1("l_11")[0], ddof=1)),
        "dark_vis_1_std": float(np.std(vis_1("osr_c")[0], ddof=1)),
    }
    model = make_model("lt", params=params, seed=seed)
    ir_3 = model.layout.index("ir_3")
    white = {"red": 255.0, "green": 255.0, "blue": 255.0, "pol_1": 0.0}
    parallel = _steady(model, white | {"pol_2": 0.0}, 0, 2000)[:, ir_3].mean()
    crossed = _steady(model, {"pol_2": 90.0}, 0, 2000)[:, ir_3].mean()
    figures["malus_amplitude_white_255"] = float(parallel - crossed)
    return figures


def all_figures(params, protocols_dir: str | Path, seed: int = 0) -> dict[str, float]:
    """Every figure of FIGURES (and a few diagnostics) for one parameter set and seed."""
    return (
        wt_validate_figures(params, protocols_dir, seed)
        | wt_hatch_figures(params, protocols_dir, seed)
        | wt_steady_figures(params, seed)
        | lt_validate_figures(params, protocols_dir, seed)
    )
