"""Recorded experiments: public-layout CSVs replayed as a PhysicsModel, and simulator parameters fitted from them."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import bench_cli
from simulator.fit import FitError, fit_recording
from simulator.physics import make_model
from simulator.replay import RecordingLayoutError, ReplayExhausted, read_recording, write_recording

BAROS = ("upwind", "downwind", "ambient", "intake")


def simulated_fans_off_recording(path, seed=21, rows_per_osr=2500):
    """A fans-off experiment like wt_bernoulli_v1/fans_off, at each oversampling in turn, in the public layout."""
    model = make_model("wt", seed=seed)
    model.apply("load_in", 0.0)
    model.apply("load_out", 0.0)
    model.sample(300)  # the idling fans of power-on stop
    blocks = []
    for osr in (1, 2, 4, 8):
        for b in BAROS:
            model.apply(f"osr_{b}", osr)
        blocks.append(model.sample(rows_per_osr))
    rows = np.vstack(blocks)
    rows[:, 0] = np.arange(len(rows))  # the firmware's counter
    write_recording(path, model.layout, rows)
    return model, rows


def test_replayed_csv_comes_back_row_for_row(tmp_path):
    path = tmp_path / "rec.csv"
    model, rows = simulated_fans_off_recording(path, rows_per_osr=50)
    replay = make_model("wt", recording=str(path))
    assert replay.layout == model.layout
    assert replay.rows_per_second == pytest.approx(7.0)
    served = np.vstack([replay.sample(17), replay.sample(len(rows) - 17)])
    np.testing.assert_array_equal(served, rows)  # repr() in the CSV round-trips float64 exactly
    assert replay.state()["osr_upwind"] == 8
    with pytest.raises(ReplayExhausted, match="only 0 left"):
        replay.sample(1)
    replay.reset()
    np.testing.assert_array_equal(replay.sample(3), rows[:3])
    with pytest.raises(ValueError, match="wt/standard recording"):
        make_model("lt", recording=str(path))


def test_csv_in_any_column_order_is_reordered_to_the_layout(tmp_path):
    src, dst = tmp_path / "a.csv", tmp_path / "b.csv"
    model, rows = simulated_fans_off_recording(src, rows_per_osr=5)
    with open(src) as fh:
        table = list(csv.reader(fh))
    order = [0, 1] + list(range(len(table[0]) - 1, 1, -1))
    with open(dst, "w", newline="") as fh:
        csv.writer(fh).writerows([[r[i] for i in order] for r in table])
    np.testing.assert_array_equal(read_recording(dst).rows, rows)


def test_csv_of_no_known_layout_names_missing_and_extra_columns(tmp_path):
    src = tmp_path / "a.csv"
    simulated_fans_off_recording(src, rows_per_osr=3)
    with open(src) as fh:
        table = list(csv.reader(fh))
    drop = table[0].index("pressure_intake")
    bad = tmp_path / "bad.csv"
    with open(bad, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([c for i, c in enumerate(table[0]) if i != drop] + ["humidity"])
        for r in table[1:]:
            w.writerow([c for i, c in enumerate(r) if i != drop] + ["1"])
    with pytest.raises(RecordingLayoutError) as err:
        read_recording(bad)
    assert err.value.missing == ["pressure_intake"] and err.value.extra == ["humidity"]
    assert "closest is wt/standard" in str(err.value)


def test_fit_recovers_offsets_and_noise_of_a_simulated_recording(tmp_path):
    path = tmp_path / "fans_off.csv"
    model, _ = simulated_fans_off_recording(path)
    result = fit_recording(path)
    true_relative = model.offsets - model.offsets.mean()  # fit reports offsets relative to the four-unit mean
    fitted = np.array([result.params.wind_tunnel.barometer_offsets_pa[b] for b in BAROS])
    # 10 % of the largest offset (the tolerance); the SE of each estimate here is < 0.03 Pa
    np.testing.assert_allclose(fitted, true_relative, atol=0.1 * np.abs(true_relative).max())
    for osr, sigma in {1: 2.5, 2: 1.0, 4: 0.5, 8: 0.4}.items():
        # 10 %: with 2500 rows per oversampling the three-cornered-hat estimate has ≈ 3 % relative SE per unit
        assert result.params.wind_tunnel.barometer_noise_pa[osr] == pytest.approx(sigma, rel=0.10)
        for b in BAROS:
            assert result.params.wind_tunnel.barometer_noise_by_unit_pa[b][osr] == pytest.approx(sigma, rel=0.10)
    # the fitted file drives the simulator
    refit = make_model("wt", params=json.loads(result.params.model_dump_json()))
    np.testing.assert_allclose(refit.offsets, fitted)


def test_fit_refuses_a_recording_without_fans_off_rows(tmp_path):
    model = make_model("wt", seed=1)
    model.apply("load_in", 0.5)
    path = tmp_path / "fans_on.csv"
    write_recording(path, model.layout, model.sample(50))
    with pytest.raises(FitError, match="both fans off"):
        fit_recording(path)


def test_fit_recovers_light_sensor_gains(tmp_path):
    lt = {"ir_diode_gains": [1.0, 1.9, 3.7], "vis_diode_gains": [1.0, 2.2], "t_gains_ir": [1.0, 2.1, 4.0, 8.3]}
    model = make_model("lt", seed=8, params={"light_tunnel": lt})
    blocks = []
    for rgb in ((40, 40, 40), (90, 20, 60)):
        for name, value in zip(("red", "green", "blue"), rgb):
            model.apply(name, value)
        for diode_ir, diode_vis, t in ((0, 0, 0), (1, 1, 0), (2, 0, 0), (0, 1, 1), (1, 0, 2), (0, 0, 3)):
            for k in (1, 2, 3):
                model.apply(f"diode_ir_{k}", diode_ir)
                model.apply(f"diode_vis_{k}", diode_vis)
                model.apply(f"t_ir_{k}", t)
                model.apply(f"t_vis_{k}", t)
            blocks.append(model.sample(40))
    path = tmp_path / "gains.csv"
    write_recording(path, model.layout, np.vstack(blocks), rows_per_second=12.0)
    fitted = fit_recording(path).params.light_tunnel
    # group means of 40 rows at ≥ 20 counts: relative SE ≲ 4 % (with the 8 % PWM scatter: 1.3 % more);
    # pooled over sensors and conditions; 10 %
    # gains are identified relative to the lowest step (which keeps its default), so compare ratios
    for name in ("ir_diode_gains", "vis_diode_gains", "t_gains_ir"):
        got = np.array(getattr(fitted, name))
        np.testing.assert_allclose(got / got[0], np.array(lt[name]) / lt[name][0], rtol=0.10, err_msg=name)


def test_cli_sim_fit_writes_a_parameter_file(tmp_path, capsys):
    path, out = tmp_path / "fans_off.csv", tmp_path / "params.json"
    simulated_fans_off_recording(path, rows_per_osr=300)
    assert bench_cli.main(["sim", "fit", str(path), "--json", "-o", str(out)]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert reply["fit"]["offsets_reference"].startswith("mean of the four")
    params = json.loads(out.read_text())
    assert set(params["wind_tunnel"]["barometer_offsets_pa"]) == set(BAROS)
    make_model("wt", params=params)  # loads as-is
    assert bench_cli.main(["sim", "fit", str(tmp_path / "missing.csv"), "--json", "-o", str(out)]) == 2
    assert "not found" in capsys.readouterr().out


def test_fit_recovers_the_flow_parameters_of_a_simulated_recording(tmp_path):
    """D1, the intake's two terms, the tachometer scale, windmilling and the current's unloading, each set away
    from its default, come back from a fans-off block plus a settled grid of loads (the public layout)."""
    wt = {"upwind_d1_intercept_pa": -0.8, "upwind_d1_coef_pa": 9.0, "intake_suction_fraction": 0.05,
          "intake_exhaust_fraction": 0.3, "tach_rpm_per_model_rpm": 0.95, "windmill_gain": 0.3, "current_windmill_a": 0.02}
    model = make_model("wt", seed=31, params={"wind_tunnel": wt})
    for name in [f"osr_{b}" for b in BAROS] + ["osr_in", "osr_out"]:
        model.apply(name, 8)
    for name in ("v_in", "v_out"):
        model.apply(name, 1.1)
    model.apply("load_in", 0.0)
    model.apply("load_out", 0.0)
    model.sample(300)
    blocks = [model.sample(1500)]
    for load_in in (0.1, 0.5, 1.0):
        for load_out in (0.01, 0.5, 1.0):
            model.apply("load_in", load_in)
            model.apply("load_out", load_out)
            blocks.append(model.sample(600))  # 86 s: the last 56 s are settled (fit.SETTLE_S = 30 s)
    rows = np.vstack(blocks)
    rows[:, 0] = np.arange(len(rows))
    path = tmp_path / "flow.csv"
    write_recording(path, model.layout, rows)
    result = fit_recording(path)
    fitted = result.params.wind_tunnel
    assert result.report["flow"]["settled_rows"] > 3000
    # tolerances ≈ 3 × the seed-to-seed SD of each estimate over seeds 31–33 of this recording: D1's intercept
    # 0.03 Pa; the intake fractions 0.005 (the intake's 2.2 Pa flow noise); the rest below 1 % of the value
    tolerances = {"upwind_d1_intercept_pa": 0.1, "intake_suction_fraction": 0.015, "intake_exhaust_fraction": 0.015}
    for name, value in wt.items():
        tolerance = tolerances.get(name, 0.03 * abs(value))
        assert getattr(fitted, name) == pytest.approx(value, abs=tolerance), name
