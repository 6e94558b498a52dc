"""The Chamber driver's rules on both backends: validate before sending, limits, halting, frames."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chamber import open_chamber
from chamber.driver import Chamber
from chamber.errors import ChamberHalted, FirmwareError, InvalidSetting, LimitsError
from chamber.limits import load_limits
from chamber.serial_backend import SerialBackend
from chamber.sim_backend import SimBackend
from chamber.testing import FAST_TIMING, CountingModel, recording_factory
from firmware_bridge.variables import layout_for
from simulator.board import running_board
from simulator.board_protocol import BoardFaults

LIMITS = {"chamber": "wt", "variables": {"hatch": {"min": 0, "max": 45}, "load_in": {"min": 0, "max": 0.8}}}


@pytest.fixture
def serial_chamber():
    ports = []
    with running_board("wt", "pty", model=CountingModel()) as board:
        backend = SerialBackend(board.url, timing=FAST_TIMING, port_factory=recording_factory(ports))
        chamber = Chamber(backend, limits=LIMITS).connect()
        yield chamber, ports, board
        chamber.close()


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("nonsense", 1, "a settable variable of wt/standard"),
        ("counter", 1, "a settable variable"),
        ("osr_upwind", 3, "one of 1, 2, 4, 8"),
        ("v_in", 3.3, "one of 1.1, 2.56, 5"),
        ("load_in", "fast", "a number"),
        ("load_in", "nan", "a finite number"),
        ("load_in", -9999, "cannot be unset"),
        ("hatch", 50, "0..45"),  # the firmware would take it (no range check): the host refuses
        ("load_in", 0.9, "0..0.8 (operator limits)"),
    ],
)
def test_bad_settings_are_refused_and_nothing_is_sent(serial_chamber, name, value, expected):
    chamber, ports, _ = serial_chamber
    before = bytes(ports[-1].written)
    with pytest.raises(InvalidSetting) as info:
        chamber.set(name, value)
    assert expected in str(info.value) and repr(value) in str(info.value)
    assert bytes(ports[-1].written) == before


def test_an_instruction_over_64_bytes_is_refused_and_nothing_is_sent(serial_chamber):
    chamber, ports, _ = serial_chamber
    before = bytes(ports[-1].written)
    with pytest.raises(InvalidSetting, match="fits the board's 64-byte packet"):
        chamber.set("pressure_downwind", "-3e38")  # 39 digits as a plain decimal, even as a 32-bit float
    assert bytes(ports[-1].written) == before
    assert "pressure_downwind" not in chamber.applied()
    # More digits than the board's float holds are sent as the fewest digits naming the same float.
    assert chamber.set("pressure_downwind", "-123456.7890123") == -123456.79


def test_set_many_refuses_all_if_one_is_bad(serial_chamber):
    chamber, ports, board = serial_chamber
    before = bytes(ports[-1].written)
    with pytest.raises(InvalidSetting):
        chamber.set_many({"load_in": 0.5, "osr_in": 3})
    assert bytes(ports[-1].written) == before
    assert board.firmware.model.state()["load_in"] == 0.0


def test_set_measure_frame_and_state(serial_chamber):
    chamber, _, _ = serial_chamber
    assert chamber.set("load_in", "0.5") == 0.5
    chamber.set_many({"hatch": 30, "flag": 2, "pressure_upwind": 95000})
    frame = chamber.measure(20)
    assert frame.names == layout_for("wt").names
    assert frame.values.shape == (20, 35) and frame.values.dtype == np.float64
    assert np.all(frame.column("load_in") == 0.5) and np.all(frame.column("pressure_upwind") == 95000)
    assert frame.column("counter").tolist() == list(range(20))
    assert frame.config == "standard" and not frame.reconnected
    assert frame.link["segments_received"] > 20
    assert chamber.state() == {"load_in": 0.5, "hatch": 30.0}
    with pytest.raises(KeyError, match="no column"):
        frame.column("nope")
    with pytest.raises(ValueError):
        frame.values[0, 0] = 1.0  # frames are evidence: read-only


def test_unset_reading_becomes_nan():
    chamber = Chamber(SimBackend(model=CountingModel())).connect()
    chamber.set("mic", -9999.0)  # an override to "not available"... then restored
    chamber.set("mic", 12.0)
    assert np.all(chamber.measure(2).column("mic") == 12.0)


def test_firmware_error_halts_the_driver_until_reset(serial_chamber):
    chamber, ports, board = serial_chamber
    board.faults = BoardFaults(error_on="MSR", error_code="er09")
    with pytest.raises(FirmwareError) as info:
        chamber.measure(5)
    assert info.value.code == "er09" and "Si1151" in info.value.meaning
    before = bytes(ports[-1].written)
    with pytest.raises(ChamberHalted, match="er09"):
        chamber.set("load_in", 0.1)
    with pytest.raises(ChamberHalted):
        chamber.measure(1)
    assert bytes(ports[-1].written) == before
    chamber.reset()
    assert chamber.measure(3).column("counter").tolist() == [0, 1, 2]


def test_reset_forgets_settings():
    chamber = Chamber(SimBackend(model=CountingModel())).connect()
    chamber.set("load_in", 0.5)
    chamber.reset()
    assert chamber.state() == {}
    assert np.all(chamber.measure(2).column("load_in") == np.float32(0.01))  # setup()'s set_load_in(0.01)


def test_sim_backend_is_deterministic_per_seed():
    a = open_chamber(backend="sim", chamber="lt", seed=5)
    b = open_chamber(backend="sim", chamber="lt", seed=5)
    for c in (a, b):
        c.set("red", 200)
    fa, fb = a.measure(50), b.measure(50)
    assert np.array_equal(fa.values, fb.values, equal_nan=True)  # unset inputs (-9999) read as NaN
    assert fa.config == "standard" and "ir_1" in fa.names


def test_sim_backend_applies_the_same_firmware_rules():
    chamber = open_chamber(backend="sim", chamber="lt")
    with pytest.raises(InvalidSetting, match="0..255"):
        chamber.set("red", 300)  # the board would ignore it silently; the driver refuses
    with pytest.raises(InvalidSetting, match="64-byte packet"):
        chamber.set("angle_1", "-1234567890123456789012")


def test_limits_file_yaml_and_json(tmp_path):
    (tmp_path / "limits.yaml").write_text("chamber: wt\nvariables:\n  hatch: {min: 0, max: 45}\n")
    (tmp_path / "limits.json").write_text(json.dumps(LIMITS))
    assert load_limits(tmp_path / "limits.yaml").variables["hatch"].max == 45
    assert load_limits(tmp_path / "limits.json").variables["load_in"].max == 0.8
    (tmp_path / "bad.yaml").write_text("variables:\n  hatch: {min: 10, max: 5}\n")
    with pytest.raises(LimitsError, match="min 10.0 is above max 5.0"):
        load_limits(tmp_path / "bad.yaml")
    (tmp_path / "typo.yaml").write_text("variables:\n  hatch: {maximum: 5}\n")
    with pytest.raises(LimitsError, match="maximum"):
        load_limits(tmp_path / "typo.yaml")


def test_limits_for_another_chamber_or_unknown_variable_are_refused():
    with pytest.raises(LimitsError, match="'lt'"):
        open_chamber(backend="sim", chamber="wt", limits={"chamber": "lt"})
    with pytest.raises(LimitsError, match="'red'"):
        open_chamber(backend="sim", chamber="wt", limits={"variables": {"red": {"max": 10}}})


def test_context_manager_connects_and_closes():
    with Chamber(SimBackend(model=CountingModel())) as chamber:
        assert chamber.config == "standard"
    with pytest.raises(Exception, match="closed"):
        chamber.measure(1)
