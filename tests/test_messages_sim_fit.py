"""`sim fit` never writes a value it could not fit (issue 24): on a fans-off recording where only the upwind barometer
ran at OSR 8 beside three units at OSR 1, the OSR-8 noise is not resolved (its variance is within twice its
standard error, or negative), so every OSR-8 entry keeps the base value and the result says why, per parameter —
where the fit used to write 0.000 Pa for all four units. The recordings come from the emulated board's physics
(simulator.physics, seeded), written in the public CSV layout."""

from __future__ import annotations

import json

import numpy as np
import pytest

import bench_cli
from simulator.fit import fit_recording
from simulator.params import SimParams
from simulator.physics import make_model
from simulator.replay import write_recording

BAROS = ("upwind", "downwind", "ambient", "intake")
BASE_NOISE = {1: 3.0, 2: 1.5, 4: 0.7, 8: 0.55}  # not the simulator's own (2.5, 1.0, 0.5, 0.4): a kept value shows


def _recording(path, seed: int, blocks: list[tuple[dict[str, int], int]]):
    """Fans off; each block sets the four oversamplings and records `rows` rows."""
    model = make_model("wt", seed=seed)
    model.apply("load_in", 0.0)
    model.apply("load_out", 0.0)
    model.sample(300)
    parts = []
    for osr, rows in blocks:
        for b in BAROS:
            model.apply(f"osr_{b}", osr[b])
        parts.append(model.sample(rows))
    rows = np.vstack(parts)
    rows[:, 0] = np.arange(len(rows))
    write_recording(path, model.layout, rows)
    return path


ONE_AT_8 = {"upwind": 8, "downwind": 1, "ambient": 1, "intake": 1}


def _base() -> SimParams:
    base = SimParams()
    base.wind_tunnel.barometer_noise_pa = dict(BASE_NOISE)
    return base


@pytest.mark.parametrize("seed", [1, 0])  # seed 1: the variance comes out negative (was clipped to 0.000 Pa)
def test_only_one_unit_at_osr_8_keeps_every_osr_8_noise_at_its_base_value(tmp_path, seed):
    result = fit_recording(_recording(tmp_path / "r.csv", seed, [(ONE_AT_8, 400)]), base=_base())
    wt, kept = result.params.wind_tunnel, result.report["kept"]
    (group,) = result.report["groups"]
    assert group["variance_pa2"]["upwind"] <= 2 * group["variance_se_pa2"]["upwind"]
    assert (seed == 1) == (group["variance_pa2"]["upwind"] < 0)
    assert wt.barometer_noise_pa[8] == BASE_NOISE[8]
    assert all(wt.barometer_noise_by_unit_pa[b][8] == BASE_NOISE[8] for b in BAROS)
    assert kept["barometer_noise_by_unit_pa.upwind.8"].startswith("kept base value: not resolved by 399 steps at osr 8")
    assert kept["barometer_noise_by_unit_pa.downwind.8"] == (
        "kept base value: no run of 10+ fans-off steps with downwind at osr 8")
    assert kept["barometer_noise_pa.8"] == "kept base value: no unit's noise at osr 8 was resolved"
    # what the recording does resolve is fitted: the three units at OSR 1 (simulated 2.5 Pa, base 3.0)
    for b in ("downwind", "ambient", "intake"):
        assert f"barometer_noise_by_unit_pa.{b}.1" not in kept
        assert wt.barometer_noise_by_unit_pa[b][1] == pytest.approx(2.5, rel=0.15)
    assert result.report["osr_fitted"] == [1] and result.report["osr_kept_default"] == [2, 4, 8]
    noise = [v for d in wt.barometer_noise_by_unit_pa.values() for v in d.values()] + list(wt.barometer_noise_pa.values())
    assert min(noise) > 0.3  # nothing written as 0.000


def test_a_resolved_osr_8_is_fitted_and_not_reported_as_kept(tmp_path):
    all_8 = dict.fromkeys(BAROS, 8)
    result = fit_recording(_recording(tmp_path / "r.csv", 3, [(all_8, 2500)]), base=_base())
    wt, kept = result.params.wind_tunnel, result.report["kept"]
    assert not [k for k in kept if k.endswith(".8")]
    assert wt.barometer_noise_pa[8] == pytest.approx(0.4, rel=0.1)  # the simulated noise, not the base 0.55
    assert all(wt.barometer_noise_by_unit_pa[b][8] == pytest.approx(0.4, rel=0.15) for b in BAROS)
    assert wt.barometer_noise_by_unit_pa["upwind"][1] == BASE_NOISE[1]  # never recorded at OSR 1: kept


def test_a_setting_with_too_few_rows_keeps_its_base_value(tmp_path):
    all_1, all_2 = dict.fromkeys(BAROS, 1), dict.fromkeys(BAROS, 2)
    result = fit_recording(_recording(tmp_path / "r.csv", 4, [(all_1, 1500), (all_2, 8)]), base=_base())
    wt, kept = result.params.wind_tunnel, result.report["kept"]
    assert wt.barometer_noise_pa[2] == BASE_NOISE[2] and wt.barometer_noise_by_unit_pa["ambient"][2] == BASE_NOISE[2]
    assert kept["barometer_noise_by_unit_pa.ambient.2"] == (
        "kept base value: no run of 10+ fans-off steps with ambient at osr 2")
    assert wt.barometer_noise_pa[1] == pytest.approx(2.5, rel=0.1)


def test_cli_sim_fit_writes_the_base_value_not_zero(tmp_path, capsys):
    path = _recording(tmp_path / "r.csv", 1, [(ONE_AT_8, 400)])
    out = tmp_path / "params.json"
    code = bench_cli.main(["sim", "fit", str(path), "-o", str(out), "--json"])
    fit = json.loads(capsys.readouterr().out)["fit"]
    written = json.loads(out.read_text())["wind_tunnel"]
    assert code == 0 and fit["kept"]["barometer_noise_pa.8"].startswith("kept base value: ")
    assert written["barometer_noise_pa"]["8"] == SimParams().wind_tunnel.barometer_noise_pa[8]
    assert all(d["8"] > 0 for d in written["barometer_noise_by_unit_pa"].values())
