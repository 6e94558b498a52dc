"""The VISA drivers against the simulated bench (pyvisa-sim YAML + dynamics layer), and certificate files."""

from __future__ import annotations

import math

import pytest
import yaml

from chamber.instruments import (ComplianceError, IdentityMismatch, InstrumentRefused, NotSettled,
                                 ReferenceBarometer, SourceMeter, TemperatureController, UnsafeSetting,
                                 VisaInstrument, load_certificate, sim_station_file)
from chamber.instruments.certificate import CertificateError
from chamber.instruments.sim import SimClock, load_sim_params, open_sim_bench

CERTS = sim_station_file().parent / "certificates"
DPS_RAIL, SI_RAIL, BARO, TC = "GPIB0::24::INSTR", "GPIB0::25::INSTR", "GPIB0::5::INSTR", "GPIB0::7::INSTR"


@pytest.fixture
def bench():
    clock = SimClock()
    b = open_sim_bench(seed=1, clock=clock)
    yield b
    b.close()


def _smu(bench, resource=DPS_RAIL, **kw):
    args = dict(max_voltage=4.0, current_limit=1e-3, sleep=bench.clock.sleep,
                expect=("KEITHLEY INSTRUMENTS", "MODEL 2450"))
    args.update(kw)
    smu = SourceMeter(bench, resource, **args)
    smu.configure()
    return smu


def test_identity_is_checked_at_construction(bench):
    with pytest.raises(IdentityMismatch, match="MODEL 2400"):
        VisaInstrument(bench, DPS_RAIL, expect=("KEITHLEY INSTRUMENTS", "MODEL 2400"))
    ok = VisaInstrument(bench, DPS_RAIL, expect=("keithley", "2450"))
    assert ok.identity.model == "MODEL 2450"
    ok.close()


def test_voltage_above_the_rail_limit_is_refused_before_it_is_sent(bench):
    smu = _smu(bench)
    smu.set_voltage(1.8)
    with pytest.raises(UnsafeSetting):
        smu.set_voltage(4.5)
    with pytest.raises(UnsafeSetting):  # a sweep is checked whole before its first step
        smu.sweep([1.0, 5.0], lambda v: v)
    assert smu.source_voltage() == pytest.approx(1.8)


def test_a_setting_the_instrument_rejects_raises_from_the_error_queue(bench):
    smu = _smu(bench)
    with pytest.raises(InstrumentRefused, match="-100"):
        smu.write(":SOUR:VOLT:ILIM 5", check_errors=True)  # outside the YAML's accepted range
    assert smu.errors() == []  # the queue was drained


def test_supply_current_follows_the_fixture_state_and_params(bench):
    params = load_sim_params()
    rail = params.rails[DPS_RAIL]
    smu = _smu(bench)
    smu.power(1.8)
    currents = {}
    for name, state in rail.states.items():
        smu.set_lines(state.code)
        currents[name] = sum(smu.measure_current(20)) / 20
    # the 1 Hz state adds rate × charge per measurement on top of the standby current (noise 0.4 %: 5 % margin)
    expected_extra = rail.states["1hz_low_precision"].rate_hz * rail.states["1hz_low_precision"].charge_per_measurement_c
    assert currents["1hz_low_precision"] - currents["standby"] == pytest.approx(expected_extra, rel=0.05)
    assert currents["chamber"] > currents["1hz_low_precision"]


def test_current_at_the_limit_is_compliance_not_a_reading(bench):
    smu = _smu(bench, resource=SI_RAIL, current_limit=1e-4)
    smu.power(3.3)
    smu.set_lines(2)  # active: about 4 mA, far above the 0.1 mA limit
    with pytest.raises(ComplianceError):
        smu.measure_current(3)


def test_output_off_after_a_sweep_and_on_close(bench):
    smu = _smu(bench)
    steps = smu.sweep([1.8, 2.5], lambda v: round(v, 1))
    assert [s.result for s in steps] == [1.8, 2.5]
    assert not smu.output_enabled()


def test_temperature_settles_on_the_simulated_clock(bench):
    tc = TemperatureController(bench, TC, certificate=load_certificate(CERTS / "temperature_controller.yaml"),
                               clock=bench.clock.now, sleep=bench.clock.sleep)
    held = tc.hold(60.0, tolerance_c=0.3, stable_for_s=60.0, poll_s=5.0)
    assert all(abs(t - 60.0) <= 0.3 for t in held.readings_c)
    tau = load_sim_params().temperature_controller.time_constant_s
    # first-order approach from the room: it cannot be inside ±0.3 °C before ln(ΔT/0.3)·τ minus noise slack
    assert held.settled_after_s >= tau * math.log((60.0 - 23.0) / 0.35)
    with pytest.raises(NotSettled):
        tc.hold(-40.0, tolerance_c=0.3, stable_for_s=60.0, poll_s=5.0, timeout_s=60.0)
    with pytest.raises(Exception, match="refused setpoint"):
        tc.set_setpoint(200.0)
    tc.close()


def test_barometer_reads_pa_whatever_the_front_panel_unit(bench):
    params = load_sim_params()
    baro = ReferenceBarometer(bench, BARO, certificate=load_certificate(CERTS / "reference_barometer.yaml"))
    pa = baro.read_pressure_pa(20)
    baro.write(":UNIT:PRES HPA")
    hpa_path = baro.read_pressure_pa(20)
    truth = params.room.pressure_pa + params.reference_barometer.offset_pa
    # noise 0.6 Pa per reading: the mean of 20 is within 1 Pa (≈7 σ of the mean)
    assert sum(pa) / 20 == pytest.approx(truth, abs=1.0)
    assert sum(hpa_path) / 20 == pytest.approx(truth, abs=1.0)


def test_state_is_reset_when_a_bench_is_reopened():
    b = open_sim_bench()
    smu = _smu(b)
    smu.set_voltage(2.2)
    smu.output(True)
    b.close()
    b2 = open_sim_bench()
    raw = VisaInstrument(b2, DPS_RAIL)
    assert float(raw.query(":SOUR:VOLT?")) == 0.0 and raw.query(":OUTP?") == "0"
    b2.close()


def test_certificate_uncertainty_forms(tmp_path):
    smu_cert = load_certificate(CERTS / "smu_2450.yaml")
    small = smu_cert.standard_uncertainty("current", 2.0e-6)  # 10 µA range: ±(0.025 % rdg + 1.5 nA)
    assert small.u == pytest.approx((0.00025 * 2.0e-6 + 1.5e-9) / math.sqrt(3))
    baro = load_certificate(CERTS / "reference_barometer.yaml").standard_uncertainty("pressure", 94_500.0)
    assert baro.u == pytest.approx(2.5) and math.isinf(baro.dof)
    with pytest.raises(CertificateError, match="beyond the largest certified range"):
        smu_cert.standard_uncertainty("current", 1.0)
    with pytest.raises(CertificateError, match="has no 'pressure'"):
        smu_cert.require("pressure")
    bad = tmp_path / "bad.yaml"
    data = yaml.safe_load((CERTS / "reference_barometer.yaml").read_text())
    del data["quantities"]["pressure"]["coverage_factor"]
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(CertificateError, match="coverage_factor"):
        load_certificate(bad)
