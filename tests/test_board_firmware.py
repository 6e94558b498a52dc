"""The emulated firmware's rules (no wire): allowed values, error codes, quirks, counter, flag, interventions."""

from __future__ import annotations

import numpy as np
import pytest

from chamber.testing import CountingModel
from firmware_bridge.variables import COUNTER_MAX, UNSET, layout_for
from simulator.firmware import EmulatedFirmware, FirmwareFault
from simulator.physics import make_model


def booted(chamber: str = "wt") -> EmulatedFirmware:
    fw = EmulatedFirmware(CountingModel(layout_for(chamber)))
    fw.boot()
    return fw


def test_boot_announces_config_and_the_real_variable_list():
    fw = EmulatedFirmware(CountingModel())
    config, variables = fw.boot()
    assert config == "CHAMBER_CONFIG,standard"
    assert variables == "VARIABLES_LIST," + ",".join(layout_for("wt").names)


@pytest.mark.parametrize(
    "message, report",
    [
        ("SET,osr_upwind,3", b"<ERR,er03>"),  # fail("er03") has no detail
        ("SET,v_in,3.3", b"<ERR,er03>"),
        ("SET,load_in,1.5", b"<ERR,er03>"),
        ("SET,nonsense,1", b"<ERR,er04,nonsense>"),
        ("SET,counter,5", b"<ERR,er04,counter>"),
        ("SET,load_in,-9999", b"<ERR,er42>"),
        ("SET,load_in", b"<ERR,er01,SET,load_in>"),
        ("MSR,1,2,3", b"<ERR,er01,MSR,1,2,3>"),
        ("WAIT,100", b"<ERR,er01,WAIT,100>"),
    ],
)
def test_bad_commands_raise_the_firmware_error_and_halt(message, report):
    fw = booted()
    with pytest.raises(FirmwareFault) as info:
        fw.handle(message)
    assert info.value.report == report
    assert fw.handle("MSR,1,0") is None  # halted: nothing is answered until the next boot
    fw.boot()
    assert fw.handle("MSR,1,0") is not None


@pytest.mark.parametrize(
    "message, reply",
    [
        ("SET,load_in,abc", "OK,SET,load_in=0.00"),  # String::toFloat(): no number is 0
        ("SET,load_in,0.125", "OK,SET,load_in=0.13"),  # dtostrf rounds half up
        ("SET,flag,123456789", "OK,SET,flag=123456790.00"),  # a 32-bit float, 8 significant digits
        ("MSR,2.9,7", "OK,MSR,n=2,wait=7"),
        ("MSR,ten,0", "OK,MSR,n=0,wait=0"),
        ("RSTX", "OK,RST"),
    ],
)
def test_commands_are_parsed_as_the_firmware_parses_them(message, reply):
    assert booted().handle(message).replies == (reply,)


def test_hatch_is_unchecked_and_red_out_of_range_is_silently_ignored():
    wt = booted("wt")
    assert wt.handle("SET,hatch,90").replies == ("OK,SET,hatch=90.00",)
    assert wt.model.state()["hatch"] == 90.0
    lt = booted("lt")
    assert lt.handle("SET,red,300").replies == ("OK,SET,red=300.00",)
    assert lt.variables["red"] == UNSET  # acknowledged, not applied ...
    assert lt.rows(1)[0, 2] == 1.0  # ... yet the next row is marked as an intervention
    with pytest.raises(FirmwareFault, match="er03"):
        lt.handle("SET,green,300")


def test_power_on_rows_report_the_firmware_variable_table():
    wt = booted("wt")
    row = dict(zip(wt.layout.names, wt.rows(1)[0].tolist()))
    assert (row["flag"], row["hatch"], row["osr_in"], row["v_1"], row["res_in"]) == (UNSET,) * 5
    assert (row["pot_1"], row["load_in"]) == (0.0, np.float32(0.01))
    lt = booted("lt")
    row = dict(zip(lt.layout.names, lt.rows(1)[0].tolist()))
    assert (row["red"], row["osr_c"], row["v_angle_1"]) == (UNSET,) * 3
    assert (row["osr_angle_1"], row["pol_1"], row["diode_ir_1"], row["t_vis_3"], row["camera"]) == (1, 0, 2, 3, 0)


def test_intervention_marks_the_first_row_after_a_set_and_flag_is_copied():
    fw = booted()
    fw.handle("SET,flag,7")
    rows = fw.rows(3)
    assert rows[:, 2].tolist() == [1, 0, 0]
    assert rows[:, 1].tolist() == [7, 7, 7]
    assert fw.rows(2)[:, 2].tolist() == [0, 0]


def test_sensor_override_and_restore_with_minus_9999():
    fw = booted()
    col = fw.layout.index("pressure_downwind")
    fw.handle("SET,pressure_downwind,95000")
    assert np.all(fw.rows(4)[:, col] == 95000)
    fw.handle(f"SET,pressure_downwind,{UNSET:g}")
    restored = fw.rows(2)[:, col]
    assert np.all(restored != 95000)
    assert restored.tolist() == (1000.0 * col + np.arange(4, 6)).tolist()  # rows 4 and 5: the model's own reading again


def test_counter_continues_across_msrs_wraps_and_restarts_on_boot():
    fw = booted()
    assert fw.rows(3)[:, 0].tolist() == [0, 1, 2]
    assert fw.rows(2)[:, 0].tolist() == [3, 4]
    fw.counter = COUNTER_MAX - 1
    assert fw.rows(3)[:, 0].tolist() == [COUNTER_MAX - 1, COUNTER_MAX, 0]
    fw.boot()
    assert fw.rows(1)[0, 0] == 0


def test_msr_and_rst_responses():
    fw = booted()
    response = fw.handle("MSR,5,20")
    assert (response.replies, response.measure, response.after) == (("OK,MSR,n=5,wait=20",), 5, ("OK,DONE",))
    assert fw.handle("RST").reboot


@pytest.mark.parametrize("chamber", ["wt", "lt"])
def test_the_board_model_is_seeded_and_reset_replays(chamber):
    a = make_model(chamber, seed=4)
    b = make_model(chamber, seed=4)
    first = a.sample(20)
    assert np.array_equal(first, b.sample(20))
    a.reset()
    assert np.array_equal(first, a.sample(20))
