"""Protocols for the Noctua NF-F12 industrialPPC-3000 PWM fans of the wind tunnel (intake and exhaust).

Why settles in seconds: what a fan does after a duty change is a matter of time (spin-up, coast down), not of
rows, and the row rate is the board's. Every settle and counting window here is timed in seconds by the one rule
of protocols/declaration.py (`covered_seconds`: the rows' host timestamps, never below rows × the wind tunnel's
shortest real row), through the run's own staging code, so the rows count in the batch's totals and every SET goes
through the setting guard.

Why one declared step and two procedures: the full-duty speed depends only on its staging and the seconds since
it (a steady state), so it is a plain step (`Step.settle_s`) the planner may share and order like any other. The
low-duty and stop protocols depend on what came before their staging (the fan at rest before 10 %, turning before
0 %) and wait until a window shows no update — a SET that depends on what was read, which a planned, reorderable
step cannot express (the planner could put another claim's full-duty staging between the rest and the 10 % step,
and a coasting fan would then pass "runs below 20 %"). They stay procedures that declare every SET list they send
(`Declaration.stagings`), so the run's pre-check refuses a limits-breaking one before anything moves and
`describe()` lists them.

- Max. rotational speed (3000 RPM, +/-10 %, datasheet p1): the fan under test at full PWM duty, the other
  stopped, the hatch closed, `MAX_SPEED_SETTLE_S` after the SET; the median of the fan's own tachometer reading
  (rpm_in or rpm_out) over `MAX_SPEED_ROWS` rows. Why the median, not the mean: the firmware's rpm is one pulse interval,
  timed by micros() when its interrupt runs, so an interrupt that runs late moves that reading down and the next
  one up by the same lateness: isolated outliers both ways, whatever the fan does. On the firmware harness an
  interrupt runs late whenever the loaded host deschedules the board process (measured, 200 rows at full duty,
  idle / three extra busy loops on 2 cores: sd 164 / 317 RPM, rows more than 10 % off 3 / 30, mean 2998 / 3059,
  median 2989 / 2996, MAD 11 / 14 RPM). The mean follows such rows and its Type A grows
  with them, so the verdict depended on machine load; the median does not move while fewer than half the rows are
  hit. Budget: Type A of the median from the MAD (`median_type_a`), and the tachometer's quantisation (rpm =
  30e6/Δt with Δt in whole µs: at 3000 RPM one µs moves the reading by about 0.3 RPM, a resolution step). A
  reading held from row to row in most of the rows is no speed (the firmware holds its last rpm when no pulse
  comes: a stalled fan would keep its full-speed reading, with no scatter at all): an error, never a pass.
- Below 20 % duty and at 0 % (Noctua PWM white paper p7: "most Noctua PWM fans can be operated at below 20% and
  will stop at 0% duty-cycle"; the NF-F12 is not among the three models it names as holding their minimum speed):
  the chamber cannot count tachometer pulses, only read the firmware's rpm, which it rewrites on every pulse and
  otherwise holds (a stopped fan keeps reporting its last reading). So the measurand is the number of tachometer
  updates — rows whose rpm differs from the row before — in a window of `WINDOW_S` seconds: at least one means
  the rotor turned in the window; none means it made less than half a turn (2 pulses/rev), i.e. it turned slower
  than 30/`WINDOW_S` RPM, if at all. The count is whole, entered with a resolution of one update.
  - operation below 20 %: the fan at 0 % until at rest (as below), then at `LOW_DUTY` (10 %), the other stopped,
    hatch closed, `LOW_DUTY_SETTLE_S` after the SET; starting from rest, any update is the 10 % drive's and not a
    coast-down's. Claim: more than 0.5 updates (any update).
  - stop at 0 %: first the fan at full duty for `RUNNING_CHECK_S`, which must show updates (a dead tachometer
    would otherwise read as a stopped fan: that is an error, never a pass); then 0 %, the other stopped, and
    `WINDOW_S` windows one after another until one shows no update or `STOP_TIMEOUT_S` have passed (the coast-down
    takes what it takes). Claim: at most 0.5 updates (none) in the last window.

What is not matched, and said so in every verdict: the datasheet's speed is at 12 V; the chamber does not measure
its fan supply (marked non-decisive in the claim file: a ±5 % supply moves the speed by a few percent against a
±10 % band, and does not decide whether a fan turns or stops). The tachometer is the fan's own (2 pulses/rev),
not an independent reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calibration.budget import UncertaintyBudget, UncertaintyComponent, resolution
from protocols.claims import Claim
from protocols.declaration import Declaration, Evaluation, ProtocolOutcome, Reader, Settings, Step, StepReadings
from protocols.fleet_instances import INSTANCES, Instance
from protocols.measurement import Measurement


MAX_SPEED_SETTLE_S = 8.0
"""Spin-up to full speed. A2 (I = 3.481e-5 kg·m², K = 5.2687e-8): from rest, ω/ω_max = tanh(Kω_max·t/I), within
0.5 % (15 RPM, a twentieth of the ±10 % band) after atanh(0.995)·I/(Kω_max) = 6.3 s; the firmware harness's fan
(first-order, 0.7 s) after 3.7 s. 8 s covers both."""
MAX_SPEED_ROWS = 50
"""Rows of the full-duty read, declared rather than the run's (~7 s at ~7 rows/s). Why: on a loaded harness the
rpm scatter is broad, not only a few outliers (MAD up to ~150 RPM seen in 8 rows with three busy loops); 8 rows
then give ν = 2.6, k ≈ 3.5 and a guard band of ~360 RPM, wider than the ±300 RPM band: inconclusive for a fan at
3000 RPM. 50 rows give ν = 18, k = 2.1 and ~80 RPM at that scatter; on an idle board or the simulator a few RPM.
In a batch the planner may still stop at its probe rows (20) when more rows could not change the verdict."""
LOW_DUTY = 0.1
"""10 % PWM duty: below the white paper's 20 % and at A1's L_min (the authors' model keeps such a fan at 300 RPM)."""
LOW_DUTY_SETTLE_S = 10.0
"""From rest to turning at 10 %: the first tachometer pulses come once the rotor passes the stall speed (simulator,
A2 at 10 %: ω = 300 RPM·tanh(Kω∞t/I) passes 60 RPM after 4.3 s; harness 0.2 s). The step starts from rest, so
any update after it is the 10 % drive's, not a coast-down's."""
STOP_TIMEOUT_S = 60.0
"""The longest wait for a fan at 0 % duty to show a window without updates. Coast-down from full speed: simulator
(A2 drag plus its assumed bearing friction) ~15 s, harness (first-order, 0.7 s) ~2.7 s; A2's drag alone never
stops it (still ~100 RPM after 60 s), which is why the simulator carries a friction term. A fan still turning
after 60 s at 0 % is a fail of "will stop at 0% duty-cycle", the time being ours, not printed."""
RUNNING_CHECK_S = 2.0
"""The fan at full duty before the stop: a window long enough for many pulses (at 300 RPM, 10 per second)."""
WINDOW_S = 5.0
"""The counting window: no update in 5 s means less than half a turn, slower than 30/5 = 6 RPM."""
TACH_STEP_RPM = 0.3
"""rpm = 30e6/Δt with Δt in whole µs: at 3000 RPM (Δt = 10000 µs) one µs is 0.3 RPM."""
NORMAL_MAD = 1.4826
"""σ = 1.4826·MAD for normally distributed readings (1/Φ⁻¹(3/4))."""
MEDIAN_EFFICIENCY = math.pi / 2
"""Var(median) ≈ (π/2)·σ²/n for normal readings (asymptotic), so u(median) = √(π/2)·σ/√n ≈ 1.2533·σ/√n."""
MAD_DOF_PER_ROW = 0.3675
"""The MAD's efficiency relative to s for normal readings: an MAD-based σ from n rows is worth about
0.3675·(n − 1) degrees of freedom (s would be worth n − 1), so the coverage factor is that of the fewer."""
OUTLIER_SIGMAS = 3.5
"""Rows further than this many MAD-based σ from the median are counted as outlying in the details (not dropped:
the median needs no rejection rule, the count is for the auditor)."""
NOT_MEASURED = "the 12 V fan supply (the datasheet's condition) is not measured by the chamber"
REFERENCE = "the fan's own tachometer (2 pulses/rev), not an independent speed reference"


class FanProtocolError(RuntimeError):
    """A fan reading that cannot serve as evidence (unset readings, a reconnect mid-settle, a dead tachometer)."""


def read_window(reader: Reader, seconds: float, reading: str) -> StepReadings:
    """`seconds` of `reading` (at least 2 rows); a reconnect in them makes them no evidence."""
    window = reader.read_for("wt", seconds, (reading,))
    if window.reconnected:
        raise FanProtocolError(f"the link was re-established while reading {reading} for {seconds:g} s: the time "
                               "since the SET and the fan's state are unknown")
    return window


def settle(reader: Reader, settings: dict[str, float], seconds: float, label: str) -> dict[str, float | int]:
    """SET (a declared SET list, through the run's setting guard), then discard rows for `seconds`."""
    settled = reader.stage("wt", settings, 0, label, settle_s=seconds)
    if settled.reconnected:
        raise FanProtocolError(f"the link was re-established while settling {seconds:g} s after {label}")
    return {**settled.to_dict(), "asked_s": seconds}


def tach_updates(rpm: np.ndarray, reading: str) -> int:
    """Rows whose reading differs from the row before: each is at least one tachometer pulse."""
    if rpm.size < 2 or not np.all(np.isfinite(rpm)):
        raise FanProtocolError(f"{reading}: expected at least 2 set tachometer readings, got {rpm.size} "
                               f"({int(np.count_nonzero(~np.isfinite(rpm)))} unset)")
    return int(np.count_nonzero(np.diff(rpm) != 0))


def median_abs_deviation(readings: np.ndarray) -> float:
    """The MAD: the median distance of the readings from their median."""
    return float(np.median(np.abs(readings - np.median(readings))))


def median_type_a(name: str, readings: np.ndarray) -> UncertaintyComponent:
    """Type A of the median of `readings`: u = √(π/2)·1.4826·MAD/√n, ν = 0.3675·(n − 1) (see the constants).

    Robust where s/√n is not: one reading far off moves the MAD by at most one rank, not by its distance."""
    n = int(readings.size)
    if n < 2 or not np.all(np.isfinite(readings)):
        raise FanProtocolError(f"{name}: expected at least 2 finite readings, got {n}")
    mad = median_abs_deviation(readings)
    sigma = NORMAL_MAD * mad
    return UncertaintyComponent(
        name=name, u=math.sqrt(MEDIAN_EFFICIENCY) * sigma / math.sqrt(n), dof=MAD_DOF_PER_ROW * (n - 1),
        evaluation="A", basis=f"sqrt(pi/2)*1.4826*MAD/sqrt(n) of n={n} readings (MAD={mad:.6g}), "
                              f"nu = 0.3675*(n-1)")


def _matched(claim: Claim, variables: set[str]) -> list[str]:
    return [c.name for c in claim.conditions if c.variable is not None and c.variable in variables]


@dataclass(frozen=True)
class Fan:
    name: str  # "intake" / "exhaust"
    load: str
    other: str
    reading: str

    def staging(self, duty: float) -> dict[str, float]:
        return {self.load: duty, self.other: 0.0, "hatch": 0.0}

    def settings(self, duty: float) -> Settings:
        return tuple(self.staging(duty).items())

    @property
    def variables(self) -> set[str]:
        return {self.load, self.other, "hatch", self.reading}

    @property
    def full_duty_label(self) -> str:
        return f"{self.name} fan at full duty, {self.other} stopped, hatch closed"


def _max_speed(fan: Fan):
    def evaluate(e: Evaluation) -> ProtocolOutcome:
        got = e.step(fan.full_duty_label)
        if got.reconnected:
            raise FanProtocolError(f"the link was re-established while settling or reading {fan.reading}: the time "
                                   "since the SET and the fan's state are unknown")
        rpm = got.column(fan.reading)
        held = rpm.size - 1 - tach_updates(rpm, fan.reading)  # also refuses fewer than 2 or unset readings
        if 2 * held > rpm.size - 1:
            raise FanProtocolError(f"{fan.reading}: expected a tachometer update between most rows at full duty, "
                                   f"got the reading held in {held} of {rpm.size - 1} row steps: a held reading is "
                                   "the firmware's last rpm, not the fan's speed")
        median = float(np.median(rpm))
        spread = median_type_a(f"{fan.reading} scatter (Type A of the median, from the MAD)", rpm)
        outlying = int(np.count_nonzero(np.abs(rpm - median) > OUTLIER_SIGMAS * NORMAL_MAD * median_abs_deviation(rpm)))
        budget = UncertaintyBudget(
            quantity=f"median {fan.reading} at full PWM duty", unit="RPM",
            components=(spread, resolution("tachometer quantisation (30e6/Δt, whole µs)", TACH_STEP_RPM)),
        )
        measurement = Measurement.from_budget(
            median, budget, decimals=1, n=int(rpm.size), matched_conditions=list(e.matched),
            details={"reading": fan.reading, "estimator": "median", "mean": float(rpm.mean()),
                     "min": float(rpm.min()), "max": float(rpm.max()), "held_row_steps": held,
                     "outlying_rows": outlying,
                     "settle": {"rows": got.settle_rows, "seconds": round(got.settled_s, 3),
                                "asked_s": MAX_SPEED_SETTLE_S},
                     "not_measured": NOT_MEASURED, "reference": REFERENCE},
        )
        # the fan as a fleet's unit, its rows its repeated readings (protocols/fleet_instances.py)
        return ProtocolOutcome(measurement=measurement,
                               details={INSTANCES: (Instance(fan.reading, measurement, tuple(map(float, rpm))),)})

    return evaluate


def _updates_measurement(fan: Fan, claim: Claim, window: StepReadings, duty: float, details: dict) -> Measurement:
    rpm = window.column(fan.reading)
    updates = tach_updates(rpm, fan.reading)
    budget = UncertaintyBudget(
        quantity=f"tachometer updates of {fan.reading} in {window.seconds:.1f} s at {duty:.0%} duty", unit="updates",
        components=(resolution("whole updates (a count)", 1.0),),
    )
    return Measurement.from_budget(
        updates, budget, decimals=1, n=window.n, matched_conditions=_matched(claim, fan.variables),
        details={"reading": fan.reading, "duty": duty, "window": {**window.timing(), "asked_s": WINDOW_S},
                 "slowest_seen_rpm": round(30.0 / window.seconds, 2),
                 "rpm_first": float(rpm[0]), "rpm_last": float(rpm[-1]), "distinct_readings": int(np.unique(rpm).size),
                 "not_measured": NOT_MEASURED, "reference": REFERENCE,
                 "counts": "rows whose rpm differs from the row before; the firmware holds its last rpm between "
                           "pulses, so no update in the window means under half a turn in it", **details},
    )


@dataclass(frozen=True)
class Rest:
    """The wait for a fan at 0 % duty to come to rest: the last window read, its updates, the time waited."""

    window: StepReadings
    updates: int
    seconds: float
    windows: int

    def to_dict(self) -> dict:
        return {"seconds": round(self.seconds, 3), "windows": self.windows, "last_window": self.window.timing(),
                "last_window_updates": self.updates, "timeout_s": STOP_TIMEOUT_S}


def wait_for_rest(reader: Reader, fan: Fan, label: str) -> Rest:
    """0 % duty (the other fan stopped), then `WINDOW_S` windows one after another until one shows no update or
    `STOP_TIMEOUT_S` have passed; returns the last window (with updates when the fan never came to rest)."""
    reader.stage("wt", fan.staging(0.0), 0, label)
    reader.progress(f"wt: {label}: wait up to {STOP_TIMEOUT_S:g} s for {WINDOW_S:g} s without a tachometer update")
    waited, windows = 0.0, 0
    while True:
        window = read_window(reader, WINDOW_S, fan.reading)
        updates = tach_updates(window.column(fan.reading), fan.reading)
        waited += window.seconds
        windows += 1
        if updates == 0 or waited >= STOP_TIMEOUT_S:
            return Rest(window, updates, waited, windows)


def _low_duty(fan: Fan):
    def run(reader: Reader, claim: Claim) -> ProtocolOutcome:
        rest = wait_for_rest(reader, fan, f"{fan.name} fan at 0 % duty until at rest, {fan.other} stopped")
        if rest.updates:
            raise FanProtocolError(f"{fan.reading}: expected the fan at rest at 0 % duty before the {LOW_DUTY:.0%} "
                                   f"step, got {rest.updates} updates in the last {rest.window.seconds:.1f} s after "
                                   f"{rest.seconds:.1f} s: turning at {LOW_DUTY:.0%} could not be told from coasting")
        settled = settle(reader, fan.staging(LOW_DUTY), LOW_DUTY_SETTLE_S,
                         f"{fan.name} fan at {LOW_DUTY:.0%} duty from rest, {fan.other} stopped, hatch closed")
        window = read_window(reader, WINDOW_S, fan.reading)
        return ProtocolOutcome(measurement=_updates_measurement(
            fan, claim, window, LOW_DUTY, {"settle": settled, "rest_before": rest.to_dict()}))

    return run


def _stop(fan: Fan):
    def run(reader: Reader, claim: Claim) -> ProtocolOutcome:
        reader.stage("wt", fan.staging(1.0), 0, f"{fan.name} fan at full duty (it must turn before the stop)")
        running = read_window(reader, RUNNING_CHECK_S, fan.reading)
        before = tach_updates(running.column(fan.reading), fan.reading)
        if before < 1:
            raise FanProtocolError(f"{fan.reading}: expected tachometer updates at full duty before the stop, "
                                   f"got none in {running.seconds:.1f} s: a fan or tachometer that never turns "
                                   "is not evidence that it stops")
        rest = wait_for_rest(reader, fan, f"{fan.name} fan at 0 % duty, {fan.other} stopped, hatch closed")
        return ProtocolOutcome(measurement=_updates_measurement(
            fan, claim, rest.window, 0.0,
            {"coast_down": rest.to_dict(), "running_before": {**running.timing(), "updates": before}}))

    return run


def _declarations(fan: Fan) -> tuple[Declaration, ...]:
    restore = ((fan.load, 0.0),)
    return (
        Declaration(
            key=f"nf_f12.max_speed_{fan.name}", chamber="wt", unit="RPM", evaluate=_max_speed(fan), restore=restore,
            steps=(Step(fan.full_duty_label, fan.settings(1.0), (fan.reading,), rows=MAX_SPEED_ROWS,
                        settle_s=MAX_SPEED_SETTLE_S),),
            description=f"The {fan.name} fan at full PWM duty ({fan.other} 0, hatch 0), {MAX_SPEED_SETTLE_S:g} s after "
                        f"the SET: the median of {fan.reading}.",
        ),
        Declaration(
            key=f"nf_f12.low_duty_{fan.name}", chamber="wt", unit="updates", procedure=_low_duty(fan), restore=restore,
            stagings=(fan.settings(0.0), fan.settings(LOW_DUTY)),
            description=f"The {fan.name} fan at rest at 0 %, then at {LOW_DUTY:.0%} duty ({fan.other} 0, hatch 0) for "
                        f"{LOW_DUTY_SETTLE_S:g} s: the updates of {fan.reading} in {WINDOW_S:g} s.",
        ),
        Declaration(
            key=f"nf_f12.stop_{fan.name}", chamber="wt", unit="updates", procedure=_stop(fan), restore=restore,
            stagings=(fan.settings(1.0), fan.settings(0.0)),
            description=f"The {fan.name} fan at full duty ({RUNNING_CHECK_S:g} s, it must turn), then 0 % "
                        f"({fan.other} 0, hatch 0) until a {WINDOW_S:g} s window of {fan.reading} shows no update "
                        f"or {STOP_TIMEOUT_S:g} s have passed: the updates in that window.",
        ),
    )


INTAKE = Fan("intake", "load_in", "load_out", "rpm_in")
EXHAUST = Fan("exhaust", "load_out", "load_in", "rpm_out")
DECLARATIONS: tuple[Declaration, ...] = (*_declarations(INTAKE), *_declarations(EXHAUST))
