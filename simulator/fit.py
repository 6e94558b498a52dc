"""Estimate simulator parameters from a recorded experiment (public CSV layout): barometer offsets and noise,
light-sensor gains.

Why: so that "built from the public chamber data" holds when a user has the data. `bench_cli.py sim fit` calls
`fit_recording` and writes the result as a parameter file (simulator/params.py) for `sim serve --params`.

Methods, stated so a reader can check them:
- Wind tunnel, from the rows with both fans off (load_in = load_out = 0; other rows are ignored):
  * offsets: mean over rows of (reading − mean of the four readings in that row). Offsets are therefore
    RELATIVE TO THE MEAN OF THE FOUR UNITS (they sum to 0): no single unit is a traceable reference.
    `ambient_mean_pa` is the mean of the four-unit average.
  * noise per unit and oversampling: rows are grouped by their four `osr_*` settings; within each group the
    pair differences p_i − p_j cancel the common ambient pressure exactly, and their first differences cancel
    slow relative drift, so var(Δ(p_i − p_j))/2 = σ_i² + σ_j². The six pairs are solved for the four σ² by
    least squares (the "three-cornered hat"), pooled over groups by steps. A unit's entry is written only when
    the recording resolves it (enough steps, variance above twice its standard error); otherwise, and for every
    unit and oversampling absent from the recording, it keeps its base value and the report's `kept` says why,
    per parameter — a noise the recording did not measure is never written as 0. The pooled table entry for an
    oversampling is the RMS over the units resolved at it (none: the base value, kept).
- Wind tunnel, from the rows with a fan on whose loads and hatch have been unchanged for `SETTLE_S` seconds
  (time from the timestamps, else from the counter at 7 rows/s), each estimate only when the recording varies
  what it needs (else the base value is kept and the report says why):
  * D1: (upwind − downwind) minus the fitted fans-off offset difference = c₀ + c₁·(ω_in/ω_max)², least squares
    over rows with the intake fan on, ω_in from model A1 of the load (as the authors fitted D1);
  * intake: (intake − ambient) minus its fans-off offset difference = −κ_in·S_r(ω_in) + κ_out·S_r(ω_out),
    least squares, S_r from model C3 (base parameters) at each row's hatch;
  * tachometer and windmilling: rpm_x = t·[A1(L_x) + g·A1(L_other)·(1 − A1(L_x)/ω_max)·h(H)], linear in
    (t, t·g), over rows with both fans powered;
  * current unloading: amps_x − B1(L_x) = −γ·windmill_x/ω_max (amps by the chamber authors' conversion).
- Light tunnel: log(mean code) = condition effect + log g_diode + log g_t, fitted by least squares over groups of
  rows with equal settings, per channel (ir, vis) and pooled over the three sensors; groups with any saturated
  (65535) code or a mean below 20 counts are left out whole. Gains are relative to the lowest step observed, which keeps its default.
  Steps that the recording does not vary keep their defaults (listed in the report).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from firmware_bridge.variables import OSR_LEVELS
from simulator.params import BAROMETERS, SimParams
from simulator.replay import Recording, read_recording

log = logging.getLogger(__name__)

CODE_SATURATED = 65535.0
CODE_FLOOR = 20.0
SETTLE_S = 30.0
"""Seconds a fans-on setting must have held before its rows inform the flow fits: a fan spinning down to idle
(model A2) is within 10 % of its idle speed after ~30 s."""
MIN_SETTLED_ROWS = 20
MIN_NOISE_STEPS = 10
"""Row-to-row steps (at unchanged oversampling, fans off) below which a group of settings informs no noise."""


class FitError(ValueError):
    """The recording cannot support the requested estimate (says what rows it needed and what it had)."""


@dataclass
class FitResult:
    params: SimParams
    report: dict = field(default_factory=dict)


def fit_recording(recording: str | Path | Recording, base: SimParams | None = None) -> FitResult:
    """Fit what the recording supports; parameters it cannot inform keep `base` (defaults if None)."""
    rec = recording if isinstance(recording, Recording) else read_recording(recording)
    params = (base or SimParams()).model_copy(deep=True)
    params.source = f"sim fit of {Path(rec.path).name} ({len(rec.rows)} rows)"
    if rec.layout.chamber == "wt":
        report = _fit_wind_tunnel(rec, params)
    else:
        report = _fit_light_tunnel(rec, params)
    report["recording"] = str(rec.path)
    report["layout"] = f"{rec.layout.chamber}/{rec.layout.config}"
    report["rows"] = int(len(rec.rows))
    return FitResult(params, report)


# ------------------------------------------------------------------------------------------------ wind tunnel
def _fit_wind_tunnel(rec: Recording, params: SimParams) -> dict:
    wt = params.wind_tunnel
    pressures = np.column_stack([rec.column(f"pressure_{b}") for b in BAROMETERS])
    osrs = np.column_stack([rec.column(f"osr_{b}") for b in BAROMETERS])
    fans_off = (rec.column("load_in") == 0) & (rec.column("load_out") == 0) & np.all(np.isfinite(pressures), axis=1)
    n_off = int(fans_off.sum())
    if n_off < 10:
        raise FitError(
            f"{rec.path}: barometer offsets and noise need at least 10 rows with both fans off "
            f"(load_in = load_out = 0); the recording has {n_off} of {len(rec.rows)}"
        )
    p = pressures[fans_off]
    row_mean = p.mean(axis=1)
    offsets = (p - row_mean[:, None]).mean(axis=0)
    wt.barometer_offsets_pa = {b: float(o) for b, o in zip(BAROMETERS, offsets)}
    wt.ambient_mean_pa = float(row_mean.mean())

    noise = _fit_noise(rec, pressures, osrs, fans_off, params)
    flow_report = _fit_wind_tunnel_flow(rec, params)
    return {
        "flow": flow_report,
        "fans_off_rows": n_off,
        "offsets_pa": wt.barometer_offsets_pa,
        "offsets_reference": "mean of the four barometers (offsets sum to 0)",
        "ambient_mean_pa": wt.ambient_mean_pa,
        **noise,
    }


def _noise_groups(rec: Recording, osrs: np.ndarray, fans_off: np.ndarray) -> dict[tuple, list[np.ndarray]]:
    """Contiguous fans-off runs (counter steps of 1) with unchanged oversampling, by their four osr settings."""
    idx = np.flatnonzero(fans_off)
    counters = rec.column("counter")
    breaks = np.flatnonzero(
        (np.diff(idx) != 1) | np.any(np.diff(osrs[idx], axis=0) != 0, axis=1) | (np.diff(counters[idx]) != 1)
    )
    by_key: dict[tuple, list[np.ndarray]] = {}
    for run in np.split(idx, breaks + 1):
        if len(run) >= 3:
            by_key.setdefault(tuple(int(round(x)) for x in osrs[run[0]]), []).append(run)
    return by_key


def _pair_var_cov(pairs: list[tuple[int, int]], pair_var: np.ndarray, var: np.ndarray, n: int) -> np.ndarray:
    """Covariance of the six pair estimates v_ij = var(Δ(p_i − p_j))/2 from n steps of Gaussian white noise: the
    differenced series has lag-1 correlation −½, so var(v_ij) = 3·v_ij²/n; two pairs sharing unit k co-vary by
    3·σ_k⁴/n (σ_k² from the fit, negatives as 0), disjoint pairs not at all. (A Monte Carlo of 2000 recordings
    at σ = 0.4, 2.5, 2.5, 2.5 Pa and n = 400 matches the propagated standard errors within 3 %.)"""
    shared = np.zeros((len(pairs), len(pairs)))
    clipped = np.clip(var, 0.0, None)
    for a, pa in enumerate(pairs):
        for b, pb in enumerate(pairs):
            common = set(pa) & set(pb)
            shared[a, b] = pair_var[a] if a == b else (clipped[common.pop()] if common else 0.0)
    return 3.0 * shared ** 2 / n


def _fit_noise(rec: Recording, pressures: np.ndarray, osrs: np.ndarray, fans_off: np.ndarray,
               params: SimParams) -> dict:
    """Per unit and oversampling: the three-cornered hat over each group of four settings, pooled over groups
    (weighted by steps), written only where the recording resolves it; every other entry keeps its base value and
    `kept` says why, per parameter. Resolved: at least MIN_NOISE_STEPS steps, and the pooled variance more than
    twice its standard error (_pair_var_cov propagated through the least-squares solution)."""
    wt = params.wind_tunnel
    base_pooled = dict(wt.barometer_noise_pa)
    base_unit = {b: {o: (wt.barometer_noise_by_unit_pa or {}).get(b, {}).get(o, base_pooled[o]) for o in OSR_LEVELS}
                 for b in BAROMETERS}
    pairs = list(itertools.combinations(range(4), 2))
    design = np.zeros((len(pairs), 4))
    for row, (i, j) in enumerate(pairs):
        design[row, i] = design[row, j] = 1.0
    solve = np.linalg.pinv(design)
    est: dict[tuple[str, int], list[tuple[int, float, float]]] = {}  # (unit, osr) -> [(steps, σ², SE(σ²))]
    group_report = []
    for key, runs in _noise_groups(rec, osrs, fans_off).items():
        n_steps = sum(len(run) - 1 for run in runs)
        if n_steps < MIN_NOISE_STEPS:
            continue
        pair_var = np.array([np.var(np.concatenate([np.diff(pressures[r][:, i] - pressures[r][:, j]) for r in runs]),
                                    ddof=1) / 2.0 for i, j in pairs])
        var = solve @ pair_var
        se = np.sqrt(np.diag(solve @ _pair_var_cov(pairs, pair_var, var, n_steps) @ solve.T))
        for u, b in enumerate(BAROMETERS):
            if key[u] in OSR_LEVELS:
                est.setdefault((b, key[u]), []).append((n_steps, float(var[u]), float(se[u])))
        group_report.append({"osr": dict(zip(BAROMETERS, key)), "steps": n_steps,
                             "variance_pa2": dict(zip(BAROMETERS, var.round(5).tolist())),
                             "variance_se_pa2": dict(zip(BAROMETERS, se.round(5).tolist()))})
    if not group_report:
        raise FitError(f"{rec.path}: noise needs at least {MIN_NOISE_STEPS} consecutive fans-off rows at unchanged "
                       "oversampling")
    by_unit = {b: dict(base_unit[b]) for b in BAROMETERS}
    kept: dict[str, str] = {}
    fitted_var: dict[int, list[tuple[int, float]]] = {o: [] for o in OSR_LEVELS}
    for b in BAROMETERS:
        for o in OSR_LEVELS:
            name = f"barometer_noise_by_unit_pa.{b}.{o}"
            found = est.get((b, o))
            if not found:
                kept[name] = f"kept base value: no run of {MIN_NOISE_STEPS}+ fans-off steps with {b} at osr {o}"
                continue
            steps = sum(n for n, _, _ in found)
            v = sum(n * x for n, x, _ in found) / steps
            se = float(np.sqrt(sum((n * e) ** 2 for n, _, e in found))) / steps
            if v <= 2.0 * se:
                kept[name] = (f"kept base value: not resolved by {steps} steps at osr {o} (variance {v:.4f} ± "
                              f"{se:.4f} Pa², needs more than twice its standard error; more rows, or the other "
                              "units at a quieter oversampling)")
                continue
            by_unit[b][o] = float(np.sqrt(v))
            fitted_var[o].append((steps, v))
    pooled = dict(base_pooled)
    fitted_osr, kept_osr = [], []
    for o in OSR_LEVELS:
        if fitted_var[o]:
            pooled[o] = float(np.sqrt(sum(n * v for n, v in fitted_var[o]) / sum(n for n, _ in fitted_var[o])))
            fitted_osr.append(o)
        else:
            kept_osr.append(o)
            kept[f"barometer_noise_pa.{o}"] = f"kept base value: no unit's noise at osr {o} was resolved"
    for name, why in kept.items():
        log.info("%s: %s %s", rec.path, name, why)
    wt.barometer_noise_pa = pooled
    wt.barometer_noise_by_unit_pa = by_unit
    return {
        "noise_pa_by_osr": {str(o): pooled[o] for o in OSR_LEVELS},
        "noise_pa_by_unit": {b: {str(o): v for o, v in d.items()} for b, d in by_unit.items()},
        "osr_fitted": fitted_osr,
        "osr_kept_default": kept_osr,
        "kept": kept,
        "groups": group_report,
    }


def _settled_fans_on(rec: Recording) -> np.ndarray:
    """Rows with a fan on whose loads and hatch have held for SETTLE_S seconds."""
    settings = np.column_stack([rec.column(n) for n in ("load_in", "load_out", "hatch")])
    stamps = rec.timestamps
    if not np.all(np.isfinite(stamps)):
        stamps = rec.column("counter") / 7.0
    changed = np.ones(len(settings), dtype=bool)
    changed[1:] = np.any(settings[1:] != settings[:-1], axis=1)
    since = stamps - stamps[np.maximum.accumulate(np.where(changed, np.arange(len(stamps)), 0))]
    return (since >= SETTLE_S) & ((settings[:, 0] > 0) | (settings[:, 1] > 0))


def _lstsq(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return coef


def _fit_wind_tunnel_flow(rec: Recording, params: SimParams) -> dict:
    """The fans-on estimates (module docstring); each is skipped, with the reason, when the rows cannot inform it."""
    from simulator.wind_tunnel import WindTunnelModel  # the model's own A1, B1, C3 and windmill formulas

    wt = params.wind_tunnel
    model = WindTunnelModel(params)
    rows = _settled_fans_on(rec)
    report: dict = {"settled_rows": int(rows.sum()), "settle_s": SETTLE_S}
    if rows.sum() < MIN_SETTLED_ROWS:
        report["skipped"] = f"needs {MIN_SETTLED_ROWS} rows with a fan on, settled {SETTLE_S:.0f} s; has {int(rows.sum())}"
        return report
    col = lambda name: rec.column(name)[rows]  # noqa: E731
    off = wt.barometer_offsets_pa
    loads = {fan: col(f"load_{fan}") for fan in ("in", "out")}
    hatch = col("hatch")
    rpm_a1 = {fan: np.array([model.steady_rpm(x) for x in loads[fan]]) for fan in loads}
    s_r = {fan: np.array([model.static_pressure(np.array([w]), h)[0] for w, h in zip(rpm_a1[fan], hatch)]) for fan in loads}

    # D1
    on = rpm_a1["in"] > 0
    x = (rpm_a1["in"][on] / wt.fan_rpm_max) ** 2
    if len(np.unique(np.round(x, 9))) >= 2:
        y = (col("pressure_upwind") - col("pressure_downwind"))[on] - (off["upwind"] - off["downwind"])
        c0, c1 = _lstsq(np.column_stack([np.ones_like(x), x]), y)
        wt.upwind_d1_intercept_pa, wt.upwind_d1_coef_pa = float(c0), float(c1)
        report["d1"] = {"intercept_pa": float(c0), "coef_pa": float(c1), "rows": int(on.sum())}
    else:
        report["d1"] = "kept: needs at least two intake-fan loads"

    # intake
    y = col("pressure_intake") - col("pressure_ambient") - (off["intake"] - off["ambient"])
    terms = [("intake_suction_fraction", -s_r["in"]), ("intake_exhaust_fraction", s_r["out"])]
    used = [(name, v) for name, v in terms if np.max(np.abs(v)) > 1e-9]
    design = np.column_stack([v for _, v in used]) if used else np.zeros((len(y), 0))
    if used and np.linalg.matrix_rank(design) == len(used):
        coef = _lstsq(design, y)
        for (name, _), c in zip(used, coef):
            setattr(wt, name, float(c))
        report["intake"] = {name: float(c) for (name, _), c in zip(used, coef)}
        report["intake_kept"] = [name for name, v in terms if np.max(np.abs(v)) <= 1e-9]
    else:
        report["intake"] = "kept: needs intake and exhaust loads that are not proportional"

    # tachometer scale and windmilling, then the current's unloading
    h = np.array([((1 - model.airflow_ratio(a)) / (1 - wt.airflow_ratio_r0)) ** wt.windmill_hatch_exponent for a in hatch])
    both = (loads["in"] > 0) & (loads["out"] > 0)
    ys, xs, assists = [], [], {}
    for fan, other in (("in", "out"), ("out", "in")):
        assist = assists[fan] = rpm_a1[other] * (1 - np.clip(rpm_a1[fan] / wt.fan_rpm_max, 0, 1)) * h
        ys.append(col(f"rpm_{fan}")[both])
        xs.append(np.column_stack([rpm_a1[fan], assist])[both])
    design, y = np.vstack(xs), np.concatenate(ys)
    if len(y) >= MIN_SETTLED_ROWS and np.linalg.matrix_rank(design) == 2:
        t, tg = _lstsq(design, y)
        wt.tach_rpm_per_model_rpm, wt.windmill_gain = float(t), float(tg / t)
        report["rpm"] = {"tach_rpm_per_model_rpm": float(t), "windmill_gain": float(tg / t)}
        ys, xs = [], []
        for fan in ("in", "out"):
            windmill = wt.windmill_gain * assists[fan]
            vref = np.array([model.vref_calibrated(v) for v in col(f"v_{fan}")])
            amps = col(f"current_{fan}") / 1023.0 * vref * 2.5 / 5.0
            b1 = np.array([model.fan_current_a(x) for x in loads[fan]])
            ys.append((amps - b1)[both])
            xs.append((-windmill / wt.fan_rpm_max)[both])
        x = np.concatenate(xs)
        if np.ptp(x) > 1e-9:
            gamma = float(_lstsq(x[:, None], np.concatenate(ys))[0])
            wt.current_windmill_a = gamma
            report["current_windmill_a"] = gamma
    else:
        report["rpm"] = "kept: needs settled rows with both fans powered at varied loads"
    return report


# ------------------------------------------------------------------------------------------------ light tunnel
def _fit_light_tunnel(rec: Recording, params: SimParams) -> dict:
    lt = params.light_tunnel
    report: dict = {}
    for channel, diode_field, t_field, n_diode in (
        ("ir", "ir_diode_gains", "t_gains_ir", 3),
        ("vis", "vis_diode_gains", "t_gains_vis", 2),
    ):
        keys, values = [], []
        for k in (1, 2, 3):
            code = rec.column(f"{channel}_{k}")
            cond = np.column_stack(
                [rec.column(n) for n in ("red", "green", "blue", "pol_1", "pol_2", f"l_{k}1", f"l_{k}2")]
            )
            diode = rec.column(f"diode_{channel}_{k}")
            t = rec.column(f"t_{channel}_{k}")
            groups: dict[tuple, list[float]] = {}
            for i in np.flatnonzero(np.isfinite(code)):
                key = (k, *cond[i].tolist(), int(diode[i]), int(t[i]))
                groups.setdefault(key, []).append(code[i])
            for key, codes in groups.items():
                # whole groups are kept or left out (never single rows: that would bias the mean)
                if max(codes) >= CODE_SATURATED or np.mean(codes) < CODE_FLOOR:
                    continue
                keys.append(key)
                values.append(float(np.mean(codes)))
        diode_gains = list(getattr(lt, diode_field))
        t_gains = list(getattr(lt, t_field))
        if not keys:
            report[channel] = {"fitted": False, "reason": "no unsaturated codes above the floor"}
            continue
        conditions = sorted({key[:-2] for key in keys})
        d_levels = sorted({key[-2] for key in keys})
        t_levels = sorted({key[-1] for key in keys})
        # columns: one per condition, then diode levels and t levels except the lowest observed (reference)
        cols = len(conditions) + (len(d_levels) - 1) + (len(t_levels) - 1)
        a = np.zeros((len(keys), cols))
        cond_at = {c: i for i, c in enumerate(conditions)}
        for row, key in enumerate(keys):
            a[row, cond_at[key[:-2]]] = 1.0
            if key[-2] != d_levels[0]:
                a[row, len(conditions) + d_levels.index(key[-2]) - 1] = 1.0
            if key[-1] != t_levels[0]:
                a[row, len(conditions) + len(d_levels) - 1 + t_levels.index(key[-1]) - 1] = 1.0
        if np.linalg.matrix_rank(a) < cols:
            report[channel] = {"fitted": False, "reason": "gain steps are confounded with other settings"}
            continue
        coef, *_ = np.linalg.lstsq(a, np.log(values), rcond=None)
        base = len(conditions)
        for i, level in enumerate(d_levels[1:]):
            diode_gains[level] = diode_gains[d_levels[0]] * float(np.exp(coef[base + i]))
        base += len(d_levels) - 1
        for i, level in enumerate(t_levels[1:]):
            t_gains[level] = t_gains[t_levels[0]] * float(np.exp(coef[base + i]))
        setattr(lt, diode_field, tuple(diode_gains))
        setattr(lt, t_field, tuple(t_gains))
        report[channel] = {
            "fitted": True,
            "diode_gains": diode_gains,
            "t_gains": t_gains,
            "diode_steps_seen": d_levels,
            "t_steps_seen": t_levels,
            "reference": f"diode {d_levels[0]} and t {t_levels[0]} keep their defaults",
            "kept_default": {"diode": [d for d in range(n_diode) if d not in d_levels], "t": [t for t in range(4) if t not in t_levels]},
        }
    if not any(r.get("fitted") for r in report.values()):
        raise FitError(f"{rec.path}: light-sensor gains need rows that vary diode_* or t_* with unsaturated codes")
    return report
