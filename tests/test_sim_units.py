"""Units that differ, in the simulator (issue 34, item 4): `emulated:wt?unit=SERIAL` serves the unit
simulator/units.py draws from the one table UNIT_PARAMETERS.

What is checked: serial 0 is today's unit exactly (parameters and rows); a serial is the same unit on every call
and host (pinned draws) and two serials differ; over many serials each parameter spreads with its stated σ; the
barometer offsets of 8 units spread like the real chamber's four (SD 5.045 Pa, range 11.45 Pa); each drawn
parameter shows in the reading it belongs to; a planted +150 Pa barometer reads 150 Pa above its unplanted self
through the emulated board and the serial driver; the emulated URL parser; `chamberlab sim units`.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

from chamber import open_chamber
from chamber.emulated import (EmulatedSpec, EmulatedUrlError, emulated_params, parse_emulated_url,
                              start_emulated_board, start_emulated_boards)
from simulator.params import BAROMETERS, SimParams, dump_params, params_from
from simulator.physics import make_model
from simulator.units import (PLANTABLE, REAL_OFFSET_RANGE_PA, REAL_OFFSET_SD_PA, UNIT_PARAMETERS, UnitError,
                             describe_unit, parameters_of, planted, unit_params, unit_seed)
from support import run_cli

WT, LT = "wind_tunnel", "light_tunnel"


def rows(kind: str, params, seed: int = 0, settings: dict[str, float] | None = None, n: int = 400) -> np.ndarray:
    model = make_model(kind, params=params, seed=seed)
    for name, value in (settings or {}).items():
        model.apply(name, value)
    return model.sample(n)


def col(kind: str, block: np.ndarray, name: str) -> np.ndarray:
    return block[:, make_model(kind).layout.index(name)]


# ------------------------------------------------------------------------------------------------ serial 0
@pytest.mark.parametrize("kind", ["wt", "lt"])
def test_serial_zero_is_todays_unit_byte_for_byte(kind):
    """Serial 0 is the defaults (or the given base, untouched); the rows it gives are today's rows, bit for bit."""
    assert params_from(unit_params(kind, 0)) == SimParams()
    base = {"wind_tunnel": {"rpm_noise_rpm": 7.0}}
    assert unit_params(kind, 0, base) == base and unit_params(kind, 0, base) is not base
    settings = {"load_in": 0.7, "pot_1": 100.0, "osr_intake": 8.0} if kind == "wt" else {"red": 200.0, "pol_2": 30.0}
    today = rows(kind, None, seed=5, settings=settings)
    assert np.array_equal(rows(kind, unit_params(kind, 0), seed=5, settings=settings), today)
    # the board path: unit 0 unplanted serves the very parameters start_emulated_boards always did
    assert emulated_params(EmulatedSpec(kind), None) is None and unit_seed(5, 0) == 5


# ------------------------------------------------------------------------------------------------ identity
def test_a_serial_is_the_same_unit_on_every_call_and_host_and_two_serials_differ():
    """Pinned draws: each parameter's generator is seeded by (34, serial, CRC-32 of its key) only, so these
    numbers are what every host computes (numpy's PCG64 and SeedSequence are platform independent)."""
    assert unit_params("wt", 7) == unit_params("wt", 7)
    assert describe_unit("lt", 3) == describe_unit("lt", 3)
    offsets = unit_params("wt", 7)[WT]["barometer_offsets_pa"]
    assert offsets == pytest.approx({"upwind": -0.12622, "downwind": -1.69705, "ambient": 1.58826,
                                     "intake": -7.44767}, abs=1e-5)
    assert unit_params("wt", 7)[WT]["fan_speed_gain"] == pytest.approx({"in": 0.973447, "out": 1.007787}, abs=1e-6)
    one, two = unit_params("wt", 1)[WT], unit_params("wt", 2)[WT]
    for row in parameters_of("wt"):
        if row.low is None and row.high is None:  # a clipped draw may sit on its bound in both units
            assert row.shown(one) != row.shown(two), row.key
    # a unit's draws do not depend on the base it is drawn over (only a factor scales the base's value)
    fitted = {"wind_tunnel": {"barometer_offsets_pa": {b: 50.0 for b in BAROMETERS}, "rpm_noise_rpm": 9.0}}
    assert unit_params("wt", 7, fitted)[WT]["barometer_offsets_pa"] == offsets
    assert unit_params("wt", 7, fitted)[WT]["rpm_noise_rpm"] == 9.0


def test_a_unit_changes_only_the_parameters_of_the_table():
    today, unit = unit_params("wt", 11), unit_params("wt", 0)
    assert today["light_tunnel"] == unit["light_tunnel"] and today["power_on"] == unit["power_on"]
    drawn = {row.field for row in parameters_of("wt")}
    changed = {name for name, value in today[WT].items() if value != unit[WT][name]}
    assert changed <= drawn and changed >= {"barometer_offsets_pa", "fan_speed_gain"}


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, True, "7"])
def test_a_serial_out_of_range_is_refused_naming_the_range(bad):
    with pytest.raises(UnitError, match=r"a unit serial is a whole number 0\.\.4294967295"):
        unit_params("wt", bad)
    with pytest.raises(UnitError, match="unknown chamber kind 'xx'; expected one of wt, lt"):
        unit_params("xx", 1)


# ------------------------------------------------------------------------------------------------ spreads
SERIALS = range(1, 2001)


@pytest.mark.parametrize("row", [r for r in UNIT_PARAMETERS if r.low is None and r.high is None], ids=lambda r: r.key)
def test_each_parameters_spread_matches_its_stated_sigma(row):
    """2000 units (serials 1..2000, deterministic): the sample SD of a normal draw has relative SE 1/√(2·1999) =
    1.6 %, its mean SE σ/√2000 = 2.2 % of σ; the gates are 5 % and 8 % of σ (beyond 3 SE)."""
    draws = np.array([row.draw(s) for s in SERIALS])
    assert np.std(draws, ddof=1) == pytest.approx(row.sigma, rel=0.05)
    assert abs(np.mean(draws) - row.mean) < 0.08 * row.sigma
    assert np.max(np.abs(draws - row.mean)) <= 5 * row.sigma + 1e-12  # clipped at ±5σ


@pytest.mark.parametrize("row", [r for r in UNIT_PARAMETERS if r.low is not None or r.high is not None],
                         ids=lambda r: r.key)
def test_a_clipped_parameter_keeps_its_distribution_on_the_free_side(row):
    """The wiper errors: normal(typ, (max − typ)/3) clipped at 0. Expected share on the bound Φ(−0.1/1.133) =
    0.465 (SE 0.011 over 2000 units; gate 0.04); the median is the typical value (SE 0.032 LSb; gate 0.1); and the
    printed max is the draw's 3σ point (99.87 %: over 2000 units about 3 beyond it; gate ≤ 10)."""
    draws = np.array([row.draw(s) for s in SERIALS])
    bound = row.low if row.low is not None else row.high
    on_bound = np.mean(draws == bound)
    assert on_bound == pytest.approx(0.5 * math.erfc(abs(row.mean) / row.sigma / math.sqrt(2)), abs=0.04)
    assert np.median(draws) == pytest.approx(row.mean, abs=0.1)
    assert np.sum(np.abs(draws) > 3.5) <= 10
    assert (draws >= 0).all() if row.low is not None else (draws <= 0).all()


def test_the_barometer_offsets_of_8_units_spread_like_the_real_chambers_four():
    """The real chamber's four offsets (+2.99, −8.46, 0, −4.61 Pa) have SD 5.045 Pa and range 11.45 Pa. Units 1..8:
    the pooled within-unit SD (24 degrees of freedom, relative SE 14 %) is within 25 % of 5.045 Pa, and the mean
    within-unit range within 30 % of the real 11.45 Pa (a normal's expected 4-unit range is 2.059σ = 10.4 Pa)."""
    assert REAL_OFFSET_SD_PA == pytest.approx(5.045, abs=0.001) and REAL_OFFSET_RANGE_PA == pytest.approx(11.45)
    offsets = np.array([[unit_params("wt", s)[WT]["barometer_offsets_pa"][b] for b in BAROMETERS]
                        for s in range(1, 9)])
    pooled = math.sqrt(np.mean(np.var(offsets, axis=1, ddof=1)))
    ranges = np.ptp(offsets, axis=1)
    assert pooled == pytest.approx(REAL_OFFSET_SD_PA, rel=0.25), (pooled, offsets)
    assert np.mean(ranges) == pytest.approx(REAL_OFFSET_RANGE_PA, rel=0.30), ranges
    assert np.std(offsets.ravel(), ddof=1) == pytest.approx(REAL_OFFSET_SD_PA, rel=0.25)


# ------------------------------------------------------------------------------------------------ the readings
def test_a_units_barometer_offsets_and_noise_show_in_its_fans_off_readings():
    settings = {"load_in": 0.0, "load_out": 0.0} | {f"osr_{b}": 8.0 for b in BAROMETERS}
    params = unit_params("wt", 4)
    block = rows("wt", params, settings=settings, n=6000)[600:]  # the idle fans coast to a stop first
    ambient = col("wt", block, "pressure_ambient")
    for b in ("upwind", "downwind", "intake"):
        # the offsets' difference to the ambient unit; the noise of a 5400-row mean difference is 0.008 Pa
        want = params[WT]["barometer_offsets_pa"][b] - params[WT]["barometer_offsets_pa"]["ambient"]
        assert np.mean(col("wt", block, f"pressure_{b}") - ambient) == pytest.approx(want, abs=0.05)
    for b in BAROMETERS:  # row-to-row differences cancel the slow ambient walk: SD √2·σ (SE 1 %)
        sd = np.std(np.diff(col("wt", block, f"pressure_{b}")), ddof=1) / math.sqrt(2)
        assert sd == pytest.approx(params[WT]["barometer_noise_by_unit_pa"][b]["8"], rel=0.05)


def test_a_units_fan_speed_current_sensor_and_wiper_errors_show_in_their_readings():
    serial = next(s for s in range(1, 100) if unit_params("wt", s)[WT]["pot_zero_scale_lsb"]["1"] > 1.0)
    p = unit_params("wt", serial)[WT]
    unit = rows("wt", unit_params("wt", serial), settings={"load_in": 1.0, "load_out": 0.0, "pot_1": 0.0,
                                                           "pot_2": 255.0, "osr_1": 8.0, "osr_2": 8.0}, n=3000)[1500:]
    today = rows("wt", None, settings={"load_in": 1.0, "load_out": 0.0}, n=3000)[1500:]
    # rpm at load 1, the exhaust off (no windmilling): today's 2870 rpm × the unit's gain (tachometer jitter 5 rpm,
    # quantisation < 1 rpm: the means of 1500 rows agree within 0.5 rpm)
    assert np.mean(col("wt", unit, "rpm_in")) == pytest.approx(np.mean(col("wt", today, "rpm_in")) * p["fan_speed_gain"]["in"], abs=3)
    # pot_1 at code 0 reads its zero-scale error: 1023/256 counts per LSb (ADC noise of the mean: 0.01 counts)
    assert np.mean(col("wt", unit, "signal_1")) == pytest.approx(p["pot_zero_scale_lsb"]["1"] * 1023 / 256, abs=0.1)
    # pot_2 at code 255 reads full scale plus its full-scale error (≤ 0), below the ADC's 1023 ceiling
    assert np.mean(col("wt", unit, "signal_2")) == pytest.approx(1023 * (1 + p["pot_full_scale_lsb"]["2"] / 256), abs=0.1)
    # the fan current: today's volts × the sensitivity gain, plus the offset voltage (authors' chain, 5 V reference)
    model = make_model("wt", params=unit_params("wt", serial))
    volts = 2.0 * model.fan_current_a(1.0)
    want = (volts * p["current_sensitivity_gain"]["in"] + p["current_offset_v"]["in"]) / 5.0 * 1023
    assert model._current_volts(model.fan_current_a(1.0), "in") / 5.0 * 1023 == pytest.approx(want, rel=1e-12)
    assert np.mean(col("wt", unit, "current_in")) == pytest.approx(want, abs=0.6)  # windmill/noise ≪ 0.6 counts


def test_a_light_units_sensor_gains_and_current_sensor_show_in_its_readings():
    p, q = unit_params("lt", 9)[LT], SimParams().light_tunnel
    unit, today = make_model("lt", params=unit_params("lt", 9)), make_model("lt")
    for model in (unit, today):
        for name, value in {"red": 120.0, "green": 80.0, "blue": 40.0}.items():
            model.apply(name, value)
    ratio = unit.light_and_leak_codes()[0] / today.light_and_leak_codes()[0]
    gains = [p["channel_scale"][i] / q.channel_scale[i] for i in range(6)]
    assert ratio == pytest.approx(gains, rel=1e-12) and gains[0] == gains[1] and gains[0] != gains[2]
    rgb = np.array([120.0, 80.0, 40.0])
    above = today.current_counts_at_5v(rgb) - q.current_zero_counts
    want = q.current_zero_counts + above * p["current_sensitivity_gain"] + p["current_offset_v"] / 5 * 1023
    assert unit.current_counts_at_5v(rgb) == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------------------------------------ planting
def test_planted_offsets_add_to_the_named_variable_and_nothing_else():
    base = unit_params("wt", 3)
    plant = planted(base, "wt", {"pressure_upwind": 150})
    assert plant[WT]["barometer_offsets_pa"]["upwind"] == base[WT]["barometer_offsets_pa"]["upwind"] + 150
    plant[WT]["barometer_offsets_pa"]["upwind"] = base[WT]["barometer_offsets_pa"]["upwind"]
    assert plant == base
    lt = planted(None, "lt", {"angle_2": -12.5})
    assert lt[LT]["angle_zero_counts"] == [SimParams().light_tunnel.angle_zero_counts[0], 510.983 - 12.5]
    assert set(PLANTABLE["wt"]) == {f"pressure_{b}" for b in BAROMETERS}


@pytest.mark.parametrize("kind, offsets, message", [
    ("wt", {"rpm_in": 100}, "cannot plant rpm_in on a wt unit; expected some of pressure_upwind, pressure_downwind"),
    ("lt", {"pressure_upwind": 1}, "cannot plant pressure_upwind on a lt unit; expected some of angle_1, angle_2"),
    ("wt", {"pressure_upwind": float("nan")}, "planted offset pressure_upwind: expected a finite number, got nan"),
    ("wt", {"pressure_upwind": "150"}, "expected a finite number, got '150'"),
])
def test_planting_what_cannot_be_planted_is_refused_in_one_line(kind, offsets, message):
    with pytest.raises(UnitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        planted(None, kind, offsets)


def test_planting_on_offsets_drawn_from_the_seed_is_refused():
    with pytest.raises(UnitError, match="draw the barometer offsets from the seed"):
        planted({"wind_tunnel": {"barometer_offsets_pa": None}}, "wt", {"pressure_intake": 1.0})


def test_a_planted_barometer_reads_150_pa_above_its_unplanted_self_through_the_board_and_driver():
    """Two emulated boards of unit 3 on ptys, the same noise seed, one planted: every fans-off row of the planted
    board's upwind unit reads 150 Pa more, its other units the same (the rows are float32 on the wire: 0.01 Pa)."""
    with contextlib.ExitStack() as stack:
        urls = [start_emulated_board(stack, parse_emulated_url("emulated:wt?unit=3", offsets), seed=2)
                for offsets in ({}, {"pressure_upwind": 150.0})]
        frames = []
        for url in urls:
            chamber = stack.enter_context(contextlib.closing(open_chamber(url, backend="serial")))
            chamber.set_many({"load_in": 0.0, "load_out": 0.0, "osr_upwind": 8, "osr_ambient": 8})
            chamber.measure(100)  # the idle fans coast to a stop
            frames.append(chamber.measure(200))
    plain, plant = frames
    shift = plant.column("pressure_upwind") - plain.column("pressure_upwind")
    assert np.allclose(shift, 150.0, atol=0.02), shift[:5]
    assert np.allclose(plant.column("pressure_ambient"), plain.column("pressure_ambient"), atol=0.02)
    offsets = unit_params("wt", 3)[WT]["barometer_offsets_pa"]
    above = np.mean(plant.column("pressure_upwind") - plant.column("pressure_ambient"))
    # 200 rows of two σ ≈ 0.4 Pa units: SE 0.04 Pa
    assert above == pytest.approx(150.0 + offsets["upwind"] - offsets["ambient"], abs=0.2)


def test_two_units_on_boards_differ_and_unit_zero_is_todays_board():
    """Boards of units 1 and 2 serve their own offsets; unit 0's board serves the very rows start_emulated_boards'
    board serves (same seed)."""
    with contextlib.ExitStack() as stack:
        urls = {"u0": start_emulated_board(stack, EmulatedSpec("wt"), seed=4),
                "today": start_emulated_boards(stack, ["wt"], seed=4)["wt"],
                "u1": start_emulated_board(stack, EmulatedSpec("wt", unit=1), seed=4),
                "u2": start_emulated_board(stack, EmulatedSpec("wt", unit=2), seed=4)}
        got = {}
        for name, url in urls.items():
            chamber = stack.enter_context(contextlib.closing(open_chamber(url, backend="serial")))
            got[name] = chamber.measure(20)
    up = {name: frame.column("pressure_upwind") for name, frame in got.items()}
    assert np.array_equal(up["u0"], up["today"])
    assert not np.allclose(up["u1"], up["u2"], atol=1.0)
    assert unit_seed(4, 1) != unit_seed(4, 2) != 4


# ------------------------------------------------------------------------------------------------ URLs
@pytest.mark.parametrize("url, spec", [
    ("emulated:wt", EmulatedSpec("wt")),
    ("emulated:wt?unit=7", EmulatedSpec("wt", unit=7)),
    ("emulated:lt?unit=3&pace=real", EmulatedSpec("lt", unit=3, pace="real")),
    ("emulated:lt?pace=fast&unit=0", EmulatedSpec("lt")),
    ("emulated:wt?pace=real", EmulatedSpec("wt", pace="real")),
])
def test_emulated_urls_name_kind_unit_and_pace(url, spec):
    assert parse_emulated_url(url) == spec
    assert parse_emulated_url(spec.url) == spec  # the canonical URL reads back as the same board


@pytest.mark.parametrize("url, message", [
    ("/dev/ttyACM0", "expected an emulated board URL emulated:wt or emulated:lt"),
    ("emulated:xx", "emulated:xx: expected emulated:wt or emulated:lt, got kind 'xx'"),
    ("emulated:wt?unit=-1", "unit expected a whole number 0..4294967295 (the unit's serial), got '-1'"),
    ("emulated:wt?unit=4294967296", "got '4294967296'"),
    ("emulated:wt?unit=seven", "got 'seven'"),
    ("emulated:wt?unit=1&unit=2", "unit given twice; expected it once"),
    ("emulated:wt?pace=slow", "pace expected fast or real, got 'slow'"),
    ("emulated:wt?seed=3", "expected query keys unit=N and pace=fast|real, got 'seed=3'"),
    ("emulated:wt?unit", "expected query keys unit=N and pace=fast|real, got 'unit'"),
])
def test_a_bad_emulated_url_is_refused_in_one_line(url, message):
    with pytest.raises(EmulatedUrlError) as caught:
        parse_emulated_url(url)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_planted_offsets_in_a_spec_are_checked_against_the_kind():
    spec = parse_emulated_url("emulated:wt?unit=2", {"pressure_intake": 150})
    assert spec.offsets == {"pressure_intake": 150.0} and spec.url == "emulated:wt?unit=2"
    assert {spec: 1}[EmulatedSpec("wt", 2, offsets={"pressure_intake": 150.0})] == 1  # a spec can key a dict
    with pytest.raises(EmulatedUrlError, match="planted offsets pressure_intake: not on a lt board; expected some "
                                               "of angle_1, angle_2"):
        parse_emulated_url("emulated:lt", {"pressure_intake": 150})
    with pytest.raises(EmulatedUrlError, match="expected a finite number, got inf"):
        EmulatedSpec("wt", offsets={"pressure_intake": math.inf})


# ------------------------------------------------------------------------------------------------ the command
def test_sim_units_prints_every_parameter_with_its_source(capsys):
    r = run_cli(capsys, "sim", "units", "--kind", "wt", "--unit", "7")
    assert r.code == 0, r.err
    for row in parameters_of("wt"):
        assert row.parameter in r.out
    assert "emulated:wt?unit=7: unit 7 of the wt chamber" in r.out
    assert "real: the SD (ddof 1) of the real chamber's four barometer offsets, 5.05 Pa" in r.out
    assert "ACS70331EESA-2P5U3" in r.out and "MCP4151 DS22060B p6" in r.out and "NF-F12" in r.out
    r = run_cli(capsys, "sim", "units", "--kind", "lt", "--unit", "3", "--json")
    data = r.json()
    assert data["url"] == "emulated:lt?unit=3" and data["parameters"] == describe_unit("lt", 3)
    assert {row["key"] for row in data["parameters"]} == {row.key for row in parameters_of("lt")}
    today = run_cli(capsys, "sim", "units", "--json").json()
    assert today["today"] and all(row["value"] == row["today"] for row in today["parameters"])
    bad = run_cli(capsys, "sim", "units", "--unit", "-1")
    assert bad.code == 2 and "argument --unit: expected a whole number 0..4294967295, got '-1'" in bad.err


def test_the_table_is_complete_and_every_row_names_a_source():
    assert len({row.key for row in UNIT_PARAMETERS}) == len(UNIT_PARAMETERS)
    for row in UNIT_PARAMETERS:
        assert row.source.startswith(("real:", "datasheet:", "assumed:")), row.key
        assert row.sigma > 0
        section = dump_params(SimParams())[WT if row.kind == "wt" else LT]
        assert row.field in section, row.key
