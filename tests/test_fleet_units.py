"""A claim's units on a fleet (protocols/fleet_units.py), the chamber wrapper a fleet campaign polls its stop request
through, and which chamber kind a claim is graded on (protocols/fleet_campaign.py).

Units are built from the runner's own CheckResults on real claims; the chamber is the in-process simulator (real
firmware logic, no mock); a result's instances are made with protocols.fleet_instances as the protocols make them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import chamber
from chamber.instruments import open_station, sim_station_file
from chamber.stop import StopRequest
from protocols.claim_sources import load_main_job_claims
from protocols.fleet_campaign import StoppableChamber, claim_kind, component_kinds
from protocols.fleet_instances import mean_instance, position_of, take_instances
from protocols.fleet_units import Unit, default_position, fleet_of, labs_of, units_of
from protocols.measurement import Measurement
from protocols.runner import CheckResult
from protocols.verdict import Verdict, verdict


@pytest.fixture(scope="module")
def pool():
    return load_main_job_claims()


def _barometers(rng, offsets=(0.0, 3.0, -8.5, -4.6), mean=94_528.5, n=20):
    return {f"pressure_{b}": mean + off + rng.normal(0.0, 0.4, n)
            for b, off in zip(("upwind", "downwind", "ambient", "intake"), offsets)}


def test_each_instance_is_a_unit_graded_on_its_own_measurement_with_readings_in_the_claims_unit(pool, rng):
    claim = pool["dps310-operating-range"]  # hPa; the instances are measured in Pa
    columns = _barometers(rng)
    matched = [c.name for c in claim.conditions if c.decisive]
    instances = tuple(mean_instance(b, c, quantity=f"mean {b}", unit="Pa", matched=matched)
                      for b, c in columns.items())
    aggregate = Measurement.from_values(94_527.0, 2.0, "Pa", matched_conditions=matched)
    result = CheckResult(claim, verdict(claim, aggregate), aggregate, "dps310.operating_range", instances=instances)
    units = units_of("wt3", result, lab="north")
    assert [u.name for u in units] == [f"wt3/{b}" for b in columns]
    for u, (b, c) in zip(units, columns.items()):
        assert u.lab == "north" and u.verdict.verdict == "pass"
        assert u.verdict.measured == verdict(claim, u.measurement).measured  # its own value, not the mean of four
        assert len(u.readings) == 20 and math.isclose(u.readings[0], c[0] / 100)  # Pa → hPa
        record = u.to_dict()
        assert record["unit"] == f"wt3/{b}" and record["measured"]["unit"] == "hPa" and record["readings"] == 20
        assert record["measurement_detail"]["budget"]["components"]  # each unit keeps its budget


def test_a_result_without_instances_is_one_unit_named_where_its_protocol_reads(pool):
    claim = pool["nf-f12-max-speed-intake"]
    m = Measurement.from_values(2990.0, 5.0, "RPM", details={"reading": "rpm_in"})
    result = CheckResult(claim, verdict(claim, m), m, "nf_f12.max_speed_intake")
    assert [u.name for u in units_of("wt1", result)] == ["wt1/rpm_in"]
    engaged = pool["acs70331-bandwidth"]  # decided without a measurement; its protocol reads current_in
    decided = Verdict(claim_id=engaged.id, verdict="inconclusive", inconclusive_class="engagement-only", reason="r")
    assert default_position(CheckResult(engaged, decided, None, "acs70331.engagement"), None) == "current_in"
    none = pool["a4988-blank-time"]  # no protocol at all: the part's name
    assert default_position(CheckResult(none, verdict(none, None), None, None), None) == "A4988"
    with open_station(sim_station_file()) as station:  # an instrument protocol: the station's rail names it
        current = pool["si115x-standby-current-1v8"]
        assert default_position(CheckResult(current, verdict(current, None), None, "instruments.supply_current"),
                                station) == "light_1"


def test_positions_of_reads():
    assert position_of(["ir_2", "vis_2"]) == "light_2"
    assert position_of(["pressure_ambient"]) == "pressure_ambient"
    assert position_of(["a", "b"]) == "a+b"


def test_instances_are_taken_out_of_a_protocols_details(rng):
    inst = mean_instance("pressure_upwind", rng.normal(0, 1, 5), quantity="q", unit="Pa", matched=())
    rest, found = take_instances({"x": 1, "instances": (inst,)})
    assert rest == {"x": 1} and found == (inst,)
    with pytest.raises(TypeError, match="Instance objects"):
        take_instances({"instances": ("not one",)})


@pytest.mark.parametrize("claim_id, cls", [("acs70331-rise-time", "engagement-only"),
                                           ("dps310-relative-accuracy", "resolution-limited")])
def test_units_decided_without_a_value_give_an_inconclusive_fleet_not_an_error(pool, claim_id, cls):
    claim = pool[claim_id]
    decided = Verdict(claim_id=claim.id, verdict="inconclusive", inconclusive_class=cls, reason="decided")
    units = [Unit(f"wt{i}", claim.component, None, decided, None) for i in range(1, 9)]
    f = fleet_of(claim, units)["fleet"]
    assert (f["verdict"], f["inconclusive_class"]) == ("inconclusive", cls)
    assert f["units"]["total"] == 8 and f["rule_version"]


def test_two_labs_are_scored_with_the_fleets_reproducibility_not_their_own_spread(pool, rng):
    claim = pool["dps310-absolute-accuracy"]
    names = [c.name for c in claim.conditions if c.decisive]
    units = []
    for lab, shift in (("north", 0.0), ("south", 6.0)):
        for i in range(4):
            readings = shift + rng.normal(0.0, 3.0) + rng.normal(0.0, 0.5, 20)
            m = Measurement.from_values(float(np.mean(readings)), 2.5, "Pa", dof=50.0, matched_conditions=names)
            units.append(Unit(f"{lab}{i}", "pressure_upwind", lab, verdict(claim, m), m, tuple(readings),
                              traceable=lab == "north"))
    section = fleet_of(claim, units)
    s_r = section["fleet"]["precision"]["s_R"]
    labs = section["labs"]
    assert labs["sigma_pt"] == pytest.approx(s_r) and "s_R" in labs["sigma_pt_source"]
    z = {s["lab"]: s["z"] for s in labs["scores"]}
    assert set(z) == {"north", "south"} and abs(abs(z["north"]) - 0.624) > 0.05  # not the two-lab ±0.62
    en = {s["lab"]: s["en"] for s in labs["scores"]}
    assert en["north"] is not None and en["south"] is None  # E_n only where a traceable reference was used
    assert labs_of(units[:4], s_r) is None  # one lab: nothing to compare


def test_a_stoppable_chamber_reads_in_chunks_and_stops_between_them():
    sim = chamber.open_chamber(backend="sim", chamber="wt", seed=3)
    try:
        stop = StopRequest()
        wrapped = StoppableChamber(sim, stop, chunk=25)
        frame = wrapped.measure(60)
        assert frame.values.shape == (60, len(frame.names)) and len(frame.host_timestamps) == 60
        assert wrapped.config == sim.config  # everything else is the chamber
        stop.request("SIGINT")
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            wrapped.measure(10)
        with pytest.raises(KeyboardInterrupt):
            wrapped.set_many({"load_in": 0.5})
        assert sim.state().get("load_in", 0.0) != 0.5  # a refused SET is never sent
    finally:
        sim.close()


def test_each_claim_is_routed_to_the_chamber_kind_its_protocol_runs_on(pool):
    parts = component_kinds(pool.values())
    assert parts["DPS310"] == "wt" and parts["Si115x"] == "lt" and "A4988" not in parts
    with open_station(sim_station_file()) as station:
        assert claim_kind(pool["dps310-absolute-accuracy"], station, parts) == "wt"  # the reference's position
        assert claim_kind(pool["si115x-standby-current-1v8"], station, parts) == "lt"  # the SMU rail's chamber
        assert claim_kind(pool["a4988-blank-time"], station, parts) is None  # no protocol: every chamber
    assert claim_kind(pool["dps310-absolute-accuracy"], None, parts) == "wt"  # no station: its part's kind
