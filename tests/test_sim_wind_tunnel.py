"""Wind-tunnel physics against the numbers it is built from (DPS310 table, causalchamber models A1, B1, C3)."""

from __future__ import annotations

import numpy as np
import pytest

from firmware_bridge.variables import UNSET
from simulator.params import authors_params
from simulator.physics import make_model
from simulator.wind_tunnel import POWER_ON

AUTHORS = authors_params()  # the chamber authors' models exactly (simulator/params_authors.json)

BAROS = ("upwind", "downwind", "ambient", "intake")
DPS310_PRECISION = {1: 2.5, 2: 1.0, 4: 0.5, 8: 0.4}  # Pa RMS, datasheet table


def col(model, rows, name):
    return rows[:, model.layout.index(name)]


def fans_off(model):
    model.apply("load_in", 0.0)
    model.apply("load_out", 0.0)


@pytest.mark.parametrize("osr", [1, 2, 4, 8])
def test_barometer_noise_follows_oversampling_table(osr):
    model = make_model("wt", seed=11)
    fans_off(model)
    for b in BAROS:
        model.apply(f"osr_{b}", osr)
    rows = model.sample(5000)
    for b in BAROS:
        # first differences remove the offset and the (smooth) ambient walk: var(Δp) = 2σ².
        # 10 % tolerance (the issue's); the sampling error of this estimate over 5000 rows is about 1.2 %.
        sigma = np.std(np.diff(col(model, rows, f"pressure_{b}")), ddof=1) / np.sqrt(2)
        assert sigma == pytest.approx(DPS310_PRECISION[osr], rel=0.10), b


def test_fans_off_barometers_differ_only_by_their_offsets():
    model = make_model("wt", seed=5)
    fans_off(model)
    for b in BAROS:
        model.apply(f"osr_{b}", 8)
    model.sample(300)  # let the idling fans of power-on (load 0.01) stop
    for hatch in (0.0, 45.0):  # with both fans stopped the hatch must not matter
        model.apply("hatch", hatch)
        rows = model.sample(3000)
        amb = col(model, rows, "pressure_ambient")
        offsets = dict(zip(BAROS, model.offsets))
        assert offsets["ambient"] == 0.0  # the ambient reading is the true ambient (the offsets' reference)
        for b in BAROS:
            diff = col(model, rows, f"pressure_{b}") - amb
            # mean of 3000 differences of two σ=0.4 Pa readings: SE ≈ 0.01 Pa; 0.05 Pa is 5 SE
            assert diff.mean() == pytest.approx(offsets[b] - offsets["ambient"], abs=0.05), (b, hatch)
    # the default offsets are the real ones (simulator/params.py): upwind highest, the units ≤ 11.5 Pa apart
    assert model.offsets.argmax() == BAROS.index("upwind")
    assert model.offsets.max() - model.offsets.min() <= 11.5


def c3_static_pressure(rpm, hatch):
    """C3 from its definition: where the impedance curve S = Z·Q² meets the fan's linear PQ line at this speed."""
    s_max, q_max, w_max = 74.8247, 186.7 / 3600, 3000.0
    r = min(1.0, 0.75 + 0.15 * hatch / 45)
    z = s_max / q_max**2 * (1 - r) / r**2
    sm, qm = s_max * (rpm / w_max) ** 2, q_max * rpm / w_max  # affinity laws
    roots = np.roots([z, sm / qm, -sm])  # Z Q² = S_m (1 − Q/Q_m)
    q = max(x.real for x in roots if abs(x.imag) < 1e-12)
    return z * q * q


@pytest.mark.parametrize("params", ["defaults", "authors"])
@pytest.mark.parametrize("load_in,load_out,hatch", [(1.0, 0.0, 0.0), (0.8, 0.3, 20.0), (0.2, 0.9, 45.0)])
def test_fans_on_downwind_follows_c3(load_in, load_out, hatch, params):
    """Downwind follows C3 in both parameter sets (the real chamber's does, as C3 was fitted on it); rpm follows
    A1 exactly only in the authors' set (the defaults add windmilling and the real tachometer scale)."""
    model = make_model("wt", seed=2, params=AUTHORS if params == "authors" else None)
    for b in BAROS:
        model.apply(f"osr_{b}", 8)
    model.apply("load_in", load_in)
    model.apply("load_out", load_out)
    model.apply("hatch", hatch)
    model.sample(1500)  # spin-up: the slowest fan here settles within ~60 s (A2 time constant 1/(K ω∞ / I))
    rows = model.sample(2000)
    off = dict(zip(BAROS, model.offsets))
    a1 = lambda load: max(load, 0.1) * 3000 if load > 0 else 0.0  # model A1  # noqa: E731
    rpm_in, rpm_out = a1(load_in), a1(load_out)
    expected = c3_static_pressure(rpm_in, hatch) - (c3_static_pressure(rpm_out, hatch) if rpm_out else 0.0)
    measured = (col(model, rows, "pressure_downwind") - off["downwind"]) - (col(model, rows, "pressure_ambient") - off["ambient"])
    # 2000 differences of σ=0.4 Pa readings: SE ≈ 0.013 Pa; 0.1 Pa allows for the residual spin-up
    assert measured.mean() == pytest.approx(expected, abs=0.1)
    if params != "authors":
        return
    # rpm readings follow A1 (tachometer jitter 5 rpm, quantisation well below that at res 1)
    assert col(model, rows, "rpm_in").mean() == pytest.approx(rpm_in, abs=3)
    assert col(model, rows, "rpm_out").mean() == pytest.approx(rpm_out, abs=3)


def test_fan_current_counts_invert_the_authors_conversion_of_b1():
    model = make_model("wt", seed=4, params=AUTHORS)  # B1 alone: no current noise, no windmill unloading
    for fan, load, v, vcal in (("in", 1.0, 1.1, 1.16), ("out", 0.5, 2.56, 2.65)):
        model.apply(f"load_{fan}", load)
        model.apply(f"v_{fan}", v)
        model.apply(f"osr_{fan}", 8)
    rows = model.sample(500)
    for fan, load, vcal in (("in", 1.0, 1.16), ("out", 0.5, 2.65)):
        counts = col(model, rows, f"current_{fan}")
        assert counts.min() >= 0 and counts.max() <= 1023
        amps = counts.mean() / 1023 * vcal * 2.5 / 5  # the chamber authors' conversion
        b1 = 0.166 + max(load, 0.1) ** 3 * (0.27 - 0.166)
        assert amps == pytest.approx(b1, abs=0.5 / 1023 * vcal)  # within half an ADC count


def test_power_on_state_and_reset_replays_the_same_readings():
    model = make_model("wt", seed=9)
    assert model.state() == {k: v for k, v in POWER_ON.items() if k in model.state()}
    assert model.rows_per_second == pytest.approx(7.0)
    first = model.sample(50)
    model.apply("load_in", 0.7)
    model.sample(20)
    model.reset()
    assert model.state()["load_in"] == POWER_ON["load_in"]
    np.testing.assert_array_equal(model.sample(50), first)
    np.testing.assert_array_equal(make_model("wt", seed=9).sample(50), first)
    assert not np.array_equal(make_model("wt", seed=10).sample(50), first)


def test_rows_report_actuators_and_the_real_firmware_unset_option():
    model = make_model("wt", seed=1, params={"power_on_reports_unset": True})
    rows = model.sample(2)
    assert col(model, rows, "osr_upwind")[0] == UNSET  # the real board reports unset settings as -9999
    assert col(model, rows, "load_in")[0] == pytest.approx(0.01)
    model.apply("osr_upwind", 4)
    assert col(model, model.sample(1), "osr_upwind")[0] == 4
    assert model.sample(7).shape == (7, model.layout.row_length)
    assert model.sample(0).shape == (0, model.layout.row_length)


def test_unknown_chamber_config_and_actuator_are_refused():
    with pytest.raises(ValueError, match="chamber"):
        make_model("xx")
    with pytest.raises(ValueError, match="config"):
        make_model("wt", config="camera")
    with pytest.raises(KeyError, match="pressure_ambient"):
        make_model("wt").apply("pressure_ambient", 1.0)
    with pytest.raises(Exception, match="barometer_noise_pa"):
        make_model("wt", params={"wind_tunnel": {"barometer_noise_pa": {"1": 2.0}}})


def test_pressure_control_drives_downwind_towards_the_target():
    model = make_model("wt", config="pressure-control", seed=3)
    target = model.state()["input"] + 5.0
    model.apply("input", target)
    rows = model.sample(1500)
    out = col(model, rows, "output")
    assert np.all((out >= -1) & (out <= 1))
    late = col(model, rows, "pressure_downwind")[-300:]
    # a PID with the firmware's gains holds the set point to within the barometer noise plus fan jitter
    assert late.mean() == pytest.approx(target, abs=1.0)
