"""Protocols that grade claims with the station's lab instruments, and the envelope of what a station can grade.

Why separate from the chamber protocols: a claim graded with an SMU, a reference barometer or a temperature
controller carries those instruments' certified uncertainty in its budget, and it realises conditions the
chamber alone marks `unmatchable` — the measurement names each realised condition in `matched_conditions`, so
the decision rule (protocols/verdict.py) counts it as matched. `check_claim` picks one of these only when the
station (ProtocolContext.station) has every instrument the protocol needs, wired to the claim's part.

- vdd_sweep: step the sensor's supply across the stated range (each end step a fixed margin inside it); at each
  step the sensor must keep answering within its spec in the chamber rows. Graded quantity: the supply voltage
  at the step nearest a stated limit, as measured at the SMU terminals (u from the SMU certificate).
- supply_current: the fixture holds the sensor in the claim's state (via the SMU's digital lines), the SMU
  sources the claim's supply voltage and averages the current (u: Type A + SMU certificate).
- absolute_pressure: fans off; the DPS310's mean reading minus the reference barometer's (u: both Type A, the
  reference certificate, the reference's drift across the chamber measurement). Graded on the barometers the
  station's position names; with both fans at rest every DPS310 of the wind tunnel sees that one pressure (the
  operating-range protocol's premise), so each of the four is then also an instance of its own (a fleet's units,
  protocols/fleet_instances.py): its rows minus the same reference mean, with the same reference terms. At rest
  means no tachometer update in the rows read (the firmware holds its last rpm between pulses): a fan still
  coasting after an earlier claim ran it moves the in-tunnel pressures, so after the fans-off SET the protocol
  reads short windows (REST_WINDOW_ROWS) until one shows both fans at rest (at most REST_TIMEOUT_S), and if they
  are still turning in the rows read, only the position's barometers are instances.

Instances with repeated readings (for a fleet's ISO 5725-2 statistics): the supply current's SMU readings (in the
claim's unit), the absolute pressure's rows of each barometer minus the reference mean.
- held_temperature: hold the sensor's stage at temperatures across the stated range; the sensor must answer at
  each. Graded quantity: the held temperature at the step nearest a stated limit (u: the controller's
  certificate, Type A over the hold window, and the hold band as a rectangular stage-to-sensor term).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable, Mapping

import numpy as np

from calibration.budget import UncertaintyBudget, UncertaintyComponent, rectangular, type_a
from calibration.cross_sensor import BAROMETERS
from chamber.instruments.base import InstrumentError
from protocols.claims import Claim
from protocols.declaration import ROW_PERIOD_FLOOR_S, Declaration, ProtocolOutcome, Reader
from protocols.fleet_instances import INSTANCES, Instance, mean_instance, position_of
from protocols.measurement import Measurement
from protocols.verdict import Verdict, unit_scale

FANS_OFF = {"load_in": 0.0, "load_out": 0.0}


# ------------------------------------------------------------------------------------------------- helpers

def _realised(claim: Claim, kinds: Iterable[str], variables: Iterable[str] = ()) -> list[str]:
    """Names of the claim's conditions this run realised: by one of its instruments or a staged variable."""
    kinds, variables = set(kinds), set(variables)
    return [c.name for c in claim.conditions
            if (c.instrument is not None and c.instrument in kinds) or (c.variable is not None and c.variable in variables)]


def _certificate_component(name: str, certificate: Any, quantity: str, reading: float,
                           scale: float = 1.0) -> UncertaintyComponent:
    cu = certificate.standard_uncertainty(quantity, reading)
    return UncertaintyComponent(name=name, u=cu.u * scale, dof=cu.dof, evaluation="B", basis=cu.basis)


def _answering(component: str, frame: Any, reads: Iterable[str]) -> tuple[bool, str]:
    """Does the sensor keep answering within its spec? Every reading finite and inside the part's output range."""
    bounds = {"DPS310": (30_000.0, 120_000.0, "Pa (300..1200 hPa)"),
              "Si115x": (0.0, 65_535.0, "counts (16-bit output)"),
              "ACS70331": (0.0, 1023.0, "ADC counts")}
    lo, hi, label = bounds.get(component, (-math.inf, math.inf, ""))
    problems = []
    for name in reads:
        values = np.asarray(frame.column(name), dtype=float)
        if values.size == 0 or not np.all(np.isfinite(values)):
            problems.append(f"{name}: missing readings")
        elif values.min() < lo or values.max() > hi:
            problems.append(f"{name}: {values.min():g}..{values.max():g} outside {lo:g}..{hi:g} {label}")
    return (not problems), ("; ".join(problems) or "all readings finite and in range")


def _range_steps(low: float, high: float, margin: float, n: int = 5) -> list[float]:
    if high - low <= 2 * margin:
        raise ValueError(f"range {low}..{high} is too narrow for a {margin} margin at each end")
    return [round(float(x), 6) for x in np.linspace(low + margin, high - margin, n)]


def _failed_step_verdict(claim: Claim, value: float, u: float, unit: str, matched: list[str], why: str) -> Verdict:
    """The sensor stopped answering at `value` inside the stated range: fail beyond c, inconclusive within it."""
    assert claim.low is not None and claim.high is not None
    margin = min(value - float(claim.low), float(claim.high) - value)
    if margin > u:
        name, reason = "fail", (f"the sensor stopped answering at {value:.4g} {unit}, inside the stated range by "
                                f"{margin:.4g} {unit} (> c = {u:.2g} {unit}): {why}")
        zone = "fail"
    else:
        name, reason = "inconclusive", (f"the sensor stopped answering at {value:.4g} {unit}, within c = {u:.2g} "
                                        f"{unit} of a stated limit: {why}")
        zone = None
    return Verdict(claim_id=claim.id, verdict=name, reason=reason, zone=zone, measured=Decimal(repr(round(value, 6))),
                   u=Decimal(repr(round(u, 9))), unit=unit, matched_conditions=tuple(matched),
                   inconclusive_class=None if name == "fail" else "resolution-limited", measurement_status="ok")


# ------------------------------------------------------------------------------------------------ VDD sweep
SWEEP_MARGIN_V = 0.02
"""Each end step sits 20 mV inside the stated limit: far more than the SMU's source error (≈0.6 mV), so a step
meant to be inside the range is inside it."""


def run_vdd_sweep(context: Reader, claim: Claim) -> ProtocolOutcome:
    rail, smu = context.station.rail(claim.component)
    context.chamber(rail.chamber)  # refused now, before the SMU moves, when that chamber is not connected
    assert claim.low is not None and claim.high is not None
    steps = _range_steps(float(claim.low), float(claim.high), SWEEP_MARGIN_V)
    if "chamber" in rail.states:
        smu.set_lines(rail.states["chamber"])
    rows = max(10, context.rows // 4)
    certificate = context.station.certificates[rail.instrument]

    def at_each(measured_v: float) -> tuple[bool, str]:
        context.progress(f"{claim.id}: VDD {measured_v:.4f} V on {rail.name}, {rows} rows of {', '.join(rail.reads)}")
        context.stage(rail.chamber, {}, context.settle_rows, f"VDD {measured_v:.4f} V")
        return _answering(claim.component, context.read(rail.chamber, rows), rail.reads)

    results = smu.sweep(steps, at_each)
    matched = _realised(claim, ("smu",))
    table = [{"set_v": s.set_v, "measured_v": s.measured_v, "answering": s.result[0], "check": s.result[1],
              "u_v": certificate.standard_uncertainty("voltage", s.measured_v).u} for s in results]
    details = {"rail": rail.name, "steps": table, "margin_v": SWEEP_MARGIN_V,
               "criterion": "every reading of " + ", ".join(rail.reads) + " finite and inside the part's output range"}
    failed = [row for row in table if not row["answering"]]
    if failed:
        worst = failed[0]
        decided = _failed_step_verdict(claim, worst["measured_v"], worst["u_v"], "V", matched, worst["check"])
        return ProtocolOutcome(decided=decided, details=details)
    # the graded value: the answered step with the least margin to a stated limit, after its own uncertainty
    low, high = float(claim.low), float(claim.high)
    edge = min(table, key=lambda r: min(r["measured_v"] - low, high - r["measured_v"]) - r["u_v"])
    budget = UncertaintyBudget(
        quantity=f"supply voltage at the {claim.component} rail, step nearest a stated limit", unit="V",
        components=(_certificate_component("SMU voltage measurement (certificate)", certificate, "voltage",
                                           edge["measured_v"]),))
    measurement = Measurement.from_budget(edge["measured_v"], budget, decimals=4, n=len(table),
                                          matched_conditions=matched,
                                          details={"basis": "the sensor answered at every step; graded at the step "
                                                   "nearest a stated limit", **details})
    return ProtocolOutcome(measurement=measurement, details=details)


# ------------------------------------------------------------------------------------------- supply current
@dataclass(frozen=True)
class CurrentSetup:
    """How a supply-current claim is staged: the fixture state, the supply voltages, and what is graded."""

    state: str
    volts: tuple[float, ...]
    aggregate: str  # "mean" (one voltage) or "max" (the largest mean over the voltages: a Max. over VCC)
    source: str


SUPPLY_CURRENT_SETUPS: dict[str, CurrentSetup] = {
    "dps310-current-1hz-low-precision": CurrentSetup(
        "1hz_low_precision", (1.8,), "mean", "DPS310 Table 5 (p7), VDD = VDDIO = 1.8 V (test conditions, p6)"),
    "si115x-standby-current-1v8": CurrentSetup("standby", (1.8,), "mean", "Si115x Table 8.2 (p47), VDD = 1.8 V"),
    "si115x-active-current-3v3": CurrentSetup("active", (3.3,), "mean", "Si115x Table 8.2 (p48), VDD = 3.3 V"),
    "acs70331-supply-current-max": CurrentSetup(
        "chamber", (3.0, 3.3, 3.75, 4.5), "max",
        "ACS70331 p5: ICC over VCC(min) 3.0 V .. VCC(max) 4.5 V (Supply Voltage row), fuses powered down"),
}
FUSE_POWER_DOWN_WAIT_S = 0.01
"""Wait after power-up before measuring ICC: ≫ tFPD (80 µs typ., 120 µs max., ACS70331 p5), so the fuses are
powered down (ICC_START_UP no longer applies)."""
CURRENT_READINGS = 20


def run_supply_current(context: Reader, claim: Claim) -> ProtocolOutcome:
    setup = SUPPLY_CURRENT_SETUPS.get(claim.id)
    if setup is None:
        raise InstrumentError(f"{claim.id}: no supply-current setup; known: {sorted(SUPPLY_CURRENT_SETUPS)}")
    rail, smu = context.station.rail(claim.component)
    if setup.state not in rail.states:
        raise InstrumentError(f"{claim.id}: rail {rail.name!r} cannot hold the sensor in state {setup.state!r}; "
                              f"its fixture states: {sorted(rail.states)}")
    certificate = context.station.certificates[rail.instrument]
    per_voltage = []
    try:
        smu.set_lines(rail.states[setup.state])
        for volts in setup.volts:
            context.progress(f"{claim.id}: {rail.name} at {volts} V, state {setup.state}, {CURRENT_READINGS} readings")
            smu.output(False)
            terminal_v = smu.power(volts, settle_s=FUSE_POWER_DOWN_WAIT_S)
            readings = smu.measure_current(CURRENT_READINGS)
            per_voltage.append({"set_v": volts, "measured_v": terminal_v, "readings": readings,
                                "mean_a": float(np.mean(readings))})
    finally:
        smu.safe()
    chosen = max(per_voltage, key=lambda r: r["mean_a"]) if setup.aggregate == "max" else per_voltage[0]
    scale = float(unit_scale("A", claim.unit))  # report in the claim's unit (µA, nA, mA), so digits read naturally
    budget = UncertaintyBudget(
        quantity=f"{claim.component} supply current, state {setup.state}, at {chosen['set_v']} V", unit=claim.unit,
        components=(type_a("repeated current readings (Type A)", [r * scale for r in chosen["readings"]]),
                    _certificate_component("SMU current measurement (certificate)", certificate, "current",
                                           chosen["mean_a"], scale=scale)))
    details = {"rail": rail.name, "state": setup.state, "setup_source": setup.source, "aggregate": setup.aggregate,
               "per_voltage": [{k: v for k, v in r.items() if k != "readings"} for r in per_voltage],
               "fuse_wait_s": FUSE_POWER_DOWN_WAIT_S}
    measurement = Measurement.from_budget(chosen["mean_a"] * scale, budget, n=CURRENT_READINGS * len(per_voltage),
                                          matched_conditions=_realised(claim, ("smu",)), details=details)
    instance = Instance(position_of(rail.reads), measurement, tuple(r * scale for r in chosen["readings"]))
    return ProtocolOutcome(measurement=measurement, details={**details, INSTANCES: (instance,)})


# --------------------------------------------------------------------------------------- absolute pressure
REFERENCE_READINGS = 10


def run_absolute_pressure(context: Reader, claim: Claim) -> ProtocolOutcome:
    position, barometer = context.station.position("reference_barometer", claim.component)
    context.progress(f"{claim.id}: fans off; reference before, {context.rows} rows of {position.reads}, reference after")
    context.stage(position.chamber, dict(FANS_OFF), context.settle_rows, "fans off")
    _until_fans_rest(context, position.chamber)
    before = barometer.read_pressure_pa(REFERENCE_READINGS)
    frame = context.read(position.chamber, context.rows)
    after = barometer.read_pressure_pa(REFERENCE_READINGS)
    ok, check = _answering(claim.component, frame, position.reads)
    if not ok:
        raise InstrumentError(f"{claim.id}: the DPS310 readings are not usable: {check}")
    dut = np.concatenate([np.asarray(frame.column(n), dtype=float) for n in position.reads])
    reference = before + after
    ref_mean = float(np.mean(reference))
    error = float(np.mean(dut)) - ref_mean
    drift = abs(float(np.mean(after)) - float(np.mean(before)))
    budget = UncertaintyBudget(
        quantity="DPS310 absolute pressure error (DPS310 mean - reference mean)", unit="Pa",
        components=(
            type_a("DPS310 readings (Type A)", dut),
            type_a("reference readings (Type A)", reference),
            _certificate_component("reference barometer (certificate)", barometer.certificate, "pressure", ref_mean),
            rectangular("room-pressure drift across the measurement (half the before/after change)", drift / 2),
        ))
    in_window = 30_000.0 <= float(np.mean(dut)) <= 120_000.0
    matched = _realised(claim, ("reference_barometer",), position.reads if in_window else ())
    details = {"position": position.name, "dut_mean_pa": float(np.mean(dut)), "reference_mean_pa": ref_mean,
               "reference_drift_pa": drift, "reference_idn": barometer.identity.raw,
               "certificate": barometer.certificate.certificate_number}
    measurement = Measurement.from_budget(error, budget, n=int(dut.size), matched_conditions=matched, details=details)
    reference_terms = budget.components[1:]  # the reference's Type A, certificate and drift: shared by every unit
    instances = []
    for name in BAROMETERS if _fans_at_rest(frame) else [n for n in BAROMETERS if n in position.reads]:
        if name not in frame.columns:
            continue
        column = np.asarray(frame.column(name), dtype=float)
        if column.size < 2 or not np.all(np.isfinite(column)):
            continue  # an unset barometer is no instance (the graded one was checked above)
        window = 30_000.0 <= float(np.mean(column)) <= 120_000.0
        instances.append(mean_instance(
            name, column, offset=ref_mean, quantity=f"{name} absolute pressure error ({name} mean - reference mean)",
            unit="Pa", extra=reference_terms, matched=_realised(claim, ("reference_barometer",),
                                                                BAROMETERS if window else ())))
    return ProtocolOutcome(measurement=measurement, details={**details, INSTANCES: tuple(instances)})


REST_WINDOW_ROWS = 7
"""Rows of one at-rest check (~1 s on the real wind tunnel): a fan turning faster than ~30 RPM updates in it."""
REST_TIMEOUT_S = 60.0
"""The longest wait for both fans at rest after the fans-off SET (a coast-down from full speed: simulator ~15 s)."""


def _until_fans_rest(context: Reader, kind: str) -> None:
    """Read REST_WINDOW_ROWS windows until one shows neither fan turning, or REST_TIMEOUT_S of rows have passed
    (by the chamber's shortest row): a chamber whose fans never moved costs one window."""
    waited, floor = 0.0, ROW_PERIOD_FLOOR_S.get(kind, 0.0)
    while waited < REST_TIMEOUT_S:
        window = context.read(kind, REST_WINDOW_ROWS)
        if _fans_at_rest(window) or floor == 0.0:  # a chamber without fans (no row floor) has nothing to wait for
            return
        waited += window.seconds
        context.progress(f"{kind}: a fan is still turning after the fans-off SET; waiting for rest ({waited:.0f} s)")


def _fans_at_rest(frame: Any) -> bool:
    """No tachometer update (a row whose rpm differs from the row before) on either fan in the rows read."""
    for name in ("rpm_in", "rpm_out"):
        rpm = np.asarray(frame.columns[name], dtype=float) if name in frame.columns else None
        if rpm is None or rpm.size < 2 or not np.all(np.isfinite(rpm)) or np.any(np.diff(rpm) != 0):
            return False
    return True


# ---------------------------------------------------------------------------------------- held temperature
TEMPERATURE_MARGIN_C = 2.0
"""End setpoints sit 2 °C inside the stated limits: well beyond the controller's u (≈0.15 °C) and hold band."""
HOLD_TOLERANCE_C = 0.3
HOLD_STABLE_S = 60.0


def run_held_temperature(context: Reader, claim: Claim) -> ProtocolOutcome:
    position, controller = context.station.position("temperature_controller", claim.component)
    context.chamber(position.chamber)  # refused now, before the controller moves, when it is not connected
    assert claim.low is not None and claim.high is not None
    setpoints = _range_steps(float(claim.low), float(claim.high), TEMPERATURE_MARGIN_C, n=3)
    rows = max(10, context.rows // 4)
    table = []
    try:
        for setpoint in setpoints:
            context.progress(f"{claim.id}: hold {setpoint} °C at {position.name}, then {rows} rows of {position.reads}")
            held = controller.hold(setpoint, tolerance_c=HOLD_TOLERANCE_C, stable_for_s=HOLD_STABLE_S)
            context.stage(position.chamber, {}, context.settle_rows, f"held {setpoint} °C")
            frame = context.read(position.chamber, rows)
            ok, check = _answering(claim.component, frame, position.reads)
            table.append({"setpoint_c": setpoint, "readings_c": list(held.readings_c),
                          "mean_c": float(np.mean(held.readings_c)), "settled_after_s": held.settled_after_s,
                          "answering": ok, "check": check})
    finally:
        controller.release()
    certificate = controller.certificate

    def budget_for(row: dict[str, Any]) -> UncertaintyBudget:
        return UncertaintyBudget(
            quantity=f"held temperature at {position.name}", unit="°C",
            components=(
                _certificate_component("temperature controller sensor (certificate)", certificate, "temperature",
                                       row["mean_c"]),
                type_a("readings over the hold window (Type A)", row["readings_c"]),
                rectangular("stage-to-sensor difference within the hold band", HOLD_TOLERANCE_C),
            ))

    matched = _realised(claim, ("temperature_controller",))
    details = {"position": position.name, "hold_tolerance_c": HOLD_TOLERANCE_C, "stable_for_s": HOLD_STABLE_S,
               "steps": [{k: v for k, v in r.items() if k != "readings_c"} for r in table]}
    failed = [r for r in table if not r["answering"]]
    if failed:
        row = failed[0]
        decided = _failed_step_verdict(claim, row["mean_c"], budget_for(row).combined, "°C", matched, row["check"])
        return ProtocolOutcome(decided=decided, details=details)
    low, high = float(claim.low), float(claim.high)
    edge = min(table, key=lambda r: min(r["mean_c"] - low, high - r["mean_c"]))
    measurement = Measurement.from_budget(edge["mean_c"], budget_for(edge), n=len(edge["readings_c"]),
                                          matched_conditions=matched,
                                          details={"basis": "the sensor answered at every held temperature; graded "
                                                   "at the one nearest a stated limit", **details})
    return ProtocolOutcome(measurement=measurement, details=details)


# ---------------------------------------------------------------------------------------------- declarations
VDD_SWEEP = Declaration(
    key="instruments.vdd_sweep", chamber=None, unit="V", instruments=("smu",), procedure=run_vdd_sweep,
    description="SMU steps the sensor's supply across the stated range (20 mV inside each limit); the sensor "
                "must answer within its output range at each step.",
)
SUPPLY_CURRENT = Declaration(
    key="instruments.supply_current", chamber=None, unit="A", instruments=("smu",), procedure=run_supply_current,
    description="Fixture holds the sensor in the claim's state; the SMU sources the claim's supply voltage and "
                "averages the current (Type A + SMU certificate).",
)
ABSOLUTE_PRESSURE = Declaration(
    key="instruments.absolute_pressure", chamber="wt", unit="Pa", instruments=("reference_barometer",),
    procedure=run_absolute_pressure, stagings=(tuple(FANS_OFF.items()),),
    description="Fans off; DPS310 mean minus the reference barometer's mean, with the reference's certificate.",
)
HELD_TEMPERATURE = Declaration(
    key="instruments.held_temperature", chamber=None, unit="°C", instruments=("temperature_controller",),
    procedure=run_held_temperature,
    description="Temperature controller holds the sensor at temperatures across the stated range; the sensor "
                "must answer at each.",
)

DECLARATIONS: tuple[Declaration, ...] = (VDD_SWEEP, SUPPLY_CURRENT, ABSOLUTE_PRESSURE, HELD_TEMPERATURE)
_BY_KEY: dict[str, Declaration] = {d.key: d for d in DECLARATIONS}
"""The instrument protocols by key: what the envelope below needs (no registry import, so no import cycle)."""


# ------------------------------------------------------------------------------------------------ envelope
def gradable_envelope(claims: Iterable[Claim] | Mapping[str, Claim], station: Any | None) -> list[dict[str, Any]]:
    """Which claims this station (None: the chamber alone) can grade, and what would make the others gradable.

    A claim is *gradable* when every decisive condition is realised: by a chamber variable, or by an instrument
    the station has wired to the claim's part through a registered instrument protocol. For each claim that is
    not, `would_need` lists the instruments that would make it gradable (empty with `blocking` when no
    instrument of this product would: the listed conditions stay unmatchable).
    """
    items = list(claims.values()) if isinstance(claims, Mapping) else list(claims)
    out = []
    for claim in items:
        decisive_unmatchable = [c for c in claim.conditions if c.decisive and c.unmatchable]
        blocking = [c.name for c in decisive_unmatchable if c.instrument is None]
        needed = claim.instruments_needed()
        ip = _BY_KEY.get(claim.instrument_protocol) if claim.instrument_protocol else None
        if ip is not None:
            needed = list(dict.fromkeys(needed + list(ip.instruments)))
        present = [k for k in needed if station is not None and station.provides(k, claim.component)]
        missing = [k for k in needed if k not in present]
        chamber_gradable = not decisive_unmatchable and claim.protocol is not None
        station_gradable = chamber_gradable or (ip is not None and not blocking and not missing)
        if chamber_gradable:
            note = "gradable with the chamber alone"
        elif not decisive_unmatchable and not needed:
            note = "no protocol measures this claim (the chamber only engages the part)"
        elif station_gradable:
            note = f"gradable with the station's {', '.join(needed)} ({ip.key})"
        elif blocking:
            note = "not gradable with these instruments: " + "; ".join(
                f"{c.name} ({c.unmatchable})" for c in decisive_unmatchable if c.instrument is None)
        elif ip is None:
            note = f"needs {', '.join(needed)} and an instrument protocol this product does not have yet"
        else:
            note = f"would be gradable with: {', '.join(f'{k} wired to the {claim.component}' for k in missing)}"
        out.append({
            "claim_id": claim.id, "component": claim.component, "parameter": claim.parameter,
            "chamber_protocol": claim.protocol, "instrument_protocol": claim.instrument_protocol,
            "gradable_with_chamber": chamber_gradable, "gradable_with_station": station_gradable,
            "instruments_needed": needed, "instruments_present": present,
            "would_need": [] if station_gradable or blocking or ip is None else missing,
            "blocking_conditions": blocking, "note": note,
        })
    return out
