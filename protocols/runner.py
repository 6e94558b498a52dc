"""The one runner of declared protocols: stage, read, evaluate and grade — for one claim or a planned batch.

Why one: the CLI (`check`, `calibrate`), the main job and the chamber tools API (`run_protocol`,
`cross_sensor_check`) must grade a claim the same way, and every one of them must treat trouble the same way:

- the apparatus guard: any exception while staging, reading or evaluating becomes the claim's verdict "error"
  naming the exception's type (a lost link is status "link_lost", anything else "aborted"); the half-taken
  measurement is discarded, and the rest of the batch goes on (an apparatus problem is not evidence against a
  datasheet, and one broken claim must not cost the others their verdicts). A link lost once and brought back at
  once by the driver is not such a problem: the staging (or procedure) is staged and read once more after the
  reconnect (protocols.staging.Chambers.once_more_if_lost); a second loss, or a board lost for good, is. The
  claim guard extends this to everything else done for one claim (choosing its protocol, its pre-check, the rule
  on its measurement);
- a chamber that is not connected: its claims are inconclusive, "chamber not connected", naming the chamber — the
  lab did not try, which is neither evidence nor an apparatus error;
- the setting guard (the API's server-side limits): every SET list of the whole run — the planned stagings, the
  restores, and every SET list a procedure declares — is checked before anything moves, and again before each SET
  (a procedure may send only the SET lists it declared);
- progress: one line per staging and one "[i/N] claim" line as each claim is graded; a lost board's story
  (each reconnection attempt, the give-up) from the driver, through `link` (chamber.driver.Chamber.observed);
- a board lost for good (chamber.driver.BoardLost: not reconnected within the driver's window) fails every later
  step on that chamber at once, so the rest of its claims end as `error` in moments, not minutes each;
- an interrupt (Ctrl-C, SIGTERM) keeps what was decided: BatchInterrupted carries the results graded before it
  and the claims not graded, and `on_result` has seen each result as it was decided (a run records them);
- row totals: every row read, settles and procedures included, counted per chamber (protocols/staging.py, which
  also times a settle in seconds, `Step.settle_s`).

A batch is planned (protocols/planner.py): claims whose steps stage the same conditions share one read, stagings
are ordered to spare actuator moves, and a claim keeps a short first read when more rows cannot change its
verdict (recorded per claim under details["plan"]). `check_claim` grades one claim exactly as declared, with
the default rows and nothing shared.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from calibration.cross_sensor import BAROMETER_OSR, BAROMETERS, CalibrationError, CrossSensorCalibration
from calibration.records import CalibrationRecord, record_from_calibration
from chamber.driver import BoardLost
from firmware_bridge.errors import LinkLost
from protocols import barometer_protocols
from protocols.claims import Claim
from protocols.declaration import (
    ChamberLike,
    Declaration,
    Evaluation,
    Inputs,
    ProtocolOutcome,
    ProtocolUnavailable,
    StepReadings,
)
from protocols.fleet_instances import Instance, take_instances
from protocols.measurement import Measurement
from protocols.plan_reading import apply_restores, read_stagings, restore
from protocols.planner import PROBE_ROWS, Plan, PlanItem, StopDecision, plan, stop_reason
from protocols.registry import selected_protocol
from protocols.staging import Chambers, Measuring, ProcedureReader, ProtocolContext
from protocols.verdict import CapabilityCheck, Verdict, verdict

log = logging.getLogger(__name__)

CALIBRATION_KEY = "calibration"


class CalibrationMismatch(ValueError):
    """A calibration record of another chamber configuration than the one connected (names both)."""


@dataclass(frozen=True)
class CheckResult:
    claim: Claim
    verdict: Verdict
    measurement: Measurement | None
    protocol: str | None
    precheck: CapabilityCheck | None = None
    details: dict[str, Any] = field(default_factory=dict)
    instances: tuple[Instance, ...] = ()  # each instance of the part the protocol measured (a fleet's units)

    def to_dict(self) -> dict[str, Any]:
        # The verdict's and the measurement's own dicts already hold their values as JSON-ready strings; the
        # summary fields are taken from them rather than converted a second time.
        v = self.verdict
        vd = v.to_dict()
        md = None if self.measurement is None else self.measurement.to_dict()
        return {
            "claim_id": self.claim.id,
            "component": self.claim.component,
            "parameter": self.claim.parameter,
            "verdict": vd["verdict"],
            "class": vd["inconclusive_class"],
            "measured": None if md is None else self._measured_in_claim_unit(vd, md),
            "distance": vd["distance"],
            "combined_uncertainty": vd["combined_uncertainty"],
            "claim_unit": self.claim.unit,
            "matched_conditions": list(v.matched_conditions),
            "unmatched_conditions": list(v.unmatched_conditions),
            "rule": {"name": v.rule, "version": v.rule_version, "boundary": v.boundary_convention},
            "reason": v.reason,
            "protocol": self.protocol,
            "precheck": None if self.precheck is None else self.precheck.to_dict(),
            "verdict_detail": vd,
            "measurement_detail": md,
            "details": self.details,
        }

    @staticmethod
    def _measured_in_claim_unit(vd: dict[str, Any], md: dict[str, Any]) -> dict[str, Any]:
        """The measurement as the decision rule saw it: converted to the claim's unit, reported digits kept."""
        converted = vd["measured"] is not None
        return {
            "value": vd["measured"] if converted else md["value"],
            "unit": vd["unit"] if converted else md["unit"],
            "u": vd["u"] if converted else md["u"],
            "k": md["k"],
            "dof": md["dof"],
            "n": md["n"],
            "as_measured": {"value": md["value"], "u": md["u"], "unit": md["unit"]},
        }


@dataclass(frozen=True)
class BatchResult:
    """A graded batch: results in claim order, the calibration measured (or given), and what the chambers did."""

    results: list[CheckResult]
    calibration: CrossSensorCalibration | None
    record: CalibrationRecord | None
    calibration_error: str | None
    stagings: int
    rows: dict[str, int]  # rows read per chamber kind, settle rows included
    plan: list[dict[str, Any]]


class BatchInterrupted(KeyboardInterrupt):
    """A batch stopped by Ctrl-C or SIGTERM (it is a KeyboardInterrupt, so every exit path treats it as one):
    `results` are the claims graded before it (in claim order), `not_graded` the ids of the others, `record` the
    calibration measured by then (None if none)."""

    def __init__(self, results: list[CheckResult], not_graded: list[str], record: CalibrationRecord | None,
                 signal: str = "") -> None:
        self.results = results
        self.not_graded = not_graded
        self.record = record
        super().__init__(signal or f"interrupted after {len(results)} of {len(results) + len(not_graded)} claims")


@contextlib.contextmanager
def _observing(chambers: Mapping[str, Any], sink: Callable[[str], None]) -> Iterator[None]:
    """Each chamber that can say its link's story (Chamber.observed) says it to `sink`, prefixed by its kind."""
    with contextlib.ExitStack() as stack:
        for kind, chamber in chambers.items():
            observed = getattr(chamber, "observed", None)
            if callable(observed):
                stack.enter_context(observed(lambda message, kind=kind: sink(f"{kind}: {message}")))
        yield


def _failed(unit: str, exc: BaseException) -> Measurement:
    """The apparatus guard's measurement: link_lost for a lost link, aborted (naming the type) for anything else."""
    if isinstance(exc, LinkLost):  # a board lost for good was said once, by the driver: not again per claim
        log.log(logging.INFO if isinstance(exc, BoardLost) else logging.WARNING, "link lost during protocol: %s", exc)
        return Measurement.failed(unit, "link_lost", str(exc), error_type=type(exc).__name__)
    log.warning("error during protocol: %s: %s", type(exc).__name__, exc)
    return Measurement.failed(unit, "aborted", f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__)


# ------------------------------------------------------------------------------------------- grading
def _grade(claim: Claim, declaration: Declaration, outcome: ProtocolOutcome,
           precheck: CapabilityCheck | None, details: dict[str, Any]) -> CheckResult:
    key = declaration.key
    details, instances = take_instances({**outcome.details, **details})
    if outcome.decided is not None:
        return CheckResult(claim, outcome.decided, outcome.measurement, key, precheck, details, instances)
    realised = set(declaration.instruments)
    intrinsic = [c for c in claim.conditions if c.decisive and c.unmatchable and c.instrument not in realised]
    if outcome.measurement is None and intrinsic:
        return CheckResult(claim, verdict(claim, None), None, key, precheck, details)
    return CheckResult(claim, verdict(claim, outcome.measurement), outcome.measurement, key, precheck, details,
                       instances)


def _resolution_limited(claim: Claim, key: str, precheck: CapabilityCheck) -> CheckResult:
    decided = Verdict(
        claim_id=claim.id, verdict="inconclusive", inconclusive_class="resolution-limited",
        reason=f"decided before staging: {precheck.reason}", unit=claim.unit,
        notes=("capability pre-check: nothing was staged",),
    )
    return CheckResult(claim, decided, None, key, precheck=precheck)


def _unavailable(claim: Claim, key: str | None, exc: ProtocolUnavailable) -> CheckResult:
    """A claim whose chamber is not connected: inconclusive (nothing was tried), the reason names the chamber."""
    decided = Verdict(claim_id=claim.id, verdict="inconclusive", inconclusive_class="chamber-not-connected",
                      reason=f"chamber not connected: {exc}",
                      unit=claim.unit, notes=("nothing was staged for this claim",))
    return CheckResult(claim, decided, None, key)


def _claim_error(claim: Claim, key: str | None, unit: str | None, exc: Exception) -> CheckResult:
    """The claim guard: an exception while handling one claim is that claim's "error", naming the exception."""
    measurement = _failed(unit or claim.unit, exc)
    return CheckResult(claim, verdict(claim, measurement), measurement, key)


def _evaluate(declaration: Declaration, claim: Claim | None, readings: tuple[StepReadings, ...],
              record: CalibrationRecord | None, config: str) -> ProtocolOutcome:
    """The declaration's pure function, inside the apparatus guard (an exception is a failed measurement)."""
    assert declaration.evaluate is not None
    matched = () if claim is None else declaration.matched(claim)
    try:
        return declaration.evaluate(Evaluation(claim, readings, matched, record, config))
    except Exception as exc:  # the apparatus guard: any exception is this claim's error, never the batch's
        if claim is None:
            raise
        return ProtocolOutcome(measurement=_failed(declaration.unit, exc))


def _config(chamber: Any) -> str:
    config = getattr(chamber, "config", None)
    if not isinstance(config, str):  # a richer config object: the layout names it
        config = getattr(getattr(chamber, "layout", None), "config", None) or "standard"
    return config


def check_claim(claim: Claim, context: ProtocolContext) -> CheckResult:
    """Grade one claim exactly as declared: its own stagings, the context's rows, no early stop, nothing shared."""
    return run_batch([claim], context, calibrate=False, stop_early=False).results[0]


def run_batch(claims: Sequence[Claim], context: ProtocolContext, *, calibrate: bool = False,
              stop_early: bool = True, probe_rows: int = PROBE_ROWS,
              reuse: Mapping[str, CheckResult] | None = None,
              on_result: Callable[[CheckResult], None] = lambda result: None,
              link: Callable[[str], None] | None = None) -> BatchResult:
    """Grade `claims` (results in their order); with `calibrate`, the cross-sensor calibration is measured in the
    same plan (its fans-off staging is shared with the claims that stage the same conditions).

    `reuse`: results of an earlier batch on the same chambers; a claim graded there by the same protocol keeps
    its result (the main job's station pass re-grades only what the station changes). `on_result` receives each
    result as soon as it is decided (an exception from it stops the batch: a run that cannot record is failing);
    `link` the chambers' link events (default: the context's progress). Ctrl-C or SIGTERM raises BatchInterrupted
    with the results decided so far.
    """
    record = context.calibration
    if record is not None and "wt" in context.chambers and record.config != _config(context.chambers["wt"]):
        raise CalibrationMismatch(f"calibration record of configuration {record.config!r}; the connected wind "
                                  f"tunnel is {_config(context.chambers['wt'])!r}")
    done: dict[int, CheckResult] = {}
    state: dict[str, CalibrationRecord | None] = {"record": record}
    try:
        with _observing(context.chambers, link or context.progress):
            return _run_batch(claims, context, calibrate, stop_early, probe_rows, reuse, on_result, done, state)
    except BatchInterrupted:
        raise
    except KeyboardInterrupt as exc:
        raise BatchInterrupted([done[i] for i in sorted(done)], [c.id for i, c in enumerate(claims) if i not in done],
                               state["record"], str(exc)) from exc


def _run_batch(claims: Sequence[Claim], context: ProtocolContext, calibrate: bool, stop_early: bool,
               probe_rows: int, reuse: Mapping[str, CheckResult] | None, on_result: Callable[[CheckResult], None],
               done: dict[int, CheckResult], state: dict[str, CalibrationRecord | None]) -> BatchResult:
    """run_batch's work; `done` and `state["record"]` are filled as it goes (what an interrupt keeps)."""
    runner = Chambers(context)
    record = context.calibration
    keys: dict[str, int] = {}  # plan item key (the claim id) -> index in `claims`
    declared: dict[int, Declaration] = {}
    procedures: list[int] = []
    items: list[PlanItem] = []
    calibrating = calibrate and record is None and "wt" in context.chambers
    if calibrating:
        cal_decl = barometer_protocols.cross_sensor_calibration(8)
        items.append(PlanItem(CALIBRATION_KEY, cal_decl, None, may_stop_early=False))

    def finish(i: int, result: CheckResult) -> None:
        done[i] = result
        on_result(result)
        context.graded(claims[i])
        context.progress(f"[{len(done)}/{len(claims)}] {claims[i].id}")

    def admit(i: int, claim: Claim) -> None:
        """Decide the claim now (no protocol, reused, pre-check, no steps, no chamber) or plan its steps."""
        declaration = selected_protocol(claim, context.station)
        if declaration is None:
            finish(i, CheckResult(claim, verdict(claim, None), None, None))
            return
        earlier = (reuse or {}).get(claim.id)
        if earlier is not None and earlier.protocol == declaration.key and not declaration.instruments:
            finish(i, replace(earlier, details={**earlier.details, "reused": "graded by the same protocol earlier "
                                                                             "in this run, on the same chambers"}))
            return
        declared[i] = declaration
        precheck = declaration.precheck(claim, Inputs(record)) if declaration.precheck else None
        if precheck is not None and precheck.resolution_limited:
            finish(i, _resolution_limited(claim, declaration.key, precheck))
        elif declaration.procedure is not None:
            procedures.append(i)
        elif not declaration.steps:
            finish(i, _grade(claim, declaration, ProtocolOutcome(), precheck, {}))
        elif declaration.chamber not in context.chambers:
            finish(i, _unavailable(claim, declaration.key, _chamber_missing(context, declaration.chamber)))
        else:
            key = claim.id if claim.id not in keys else f"{claim.id}#{i}"
            keys[key] = i
            items.append(PlanItem(key, declaration, claim, may_stop_early=stop_early))

    def guarded(i: int, step: Callable[[], None]) -> None:
        """The claim guard around one claim's step: an exception is that claim's error, the batch goes on."""
        try:
            step()
        except Exception as exc:
            if i in done:  # graded already: the exception came from a progress hook, not from the claim
                raise
            declaration = declared.get(i)
            finish(i, _claim_error(claims[i], declaration.key if declaration else claims[i].protocol,
                                   declaration.unit if declaration else None, exc))

    for i, claim in enumerate(claims):
        guarded(i, lambda i=i, claim=claim: admit(i, claim))

    start = {k: dict(getattr(c, "state", lambda: {})() or {}) for k, c in context.chambers.items()}
    the_plan = plan(items, rows=context.rows, settle_rows=context.settle_rows, probe_rows=probe_rows, start=start)
    for staging in the_plan.stagings:  # the setting guard on the whole run, before anything moves
        runner.guarded(staging.chamber, staging.settings)
    for kind, settings in the_plan.restores.items():
        runner.guarded(kind, settings)
    for i in procedures:  # a procedure's declared SET lists too: a refusal here means nothing moved
        for settings in declared[i].all_settings():
            runner.guarded(declared[i].chamber or "", settings)

    reads: dict[int, StepReadings] = {}
    failures: dict[int, BaseException] = {}
    served = {item.key: item.claim.id if item.claim is not None else CALIBRATION_KEY for item in items}
    read_stagings(runner, the_plan, range(len(the_plan.stagings)), reads, failures, served, full=False)

    calibration, calibration_error = None, None
    if calibrating:
        try:
            outcome = _item_outcome(the_plan, items[0], reads, failures, None, _config(context.chambers["wt"]))
            calibration = outcome.calibration
            record = record_from_calibration(calibration, date=context.clock()) if calibration else None
            state["record"] = record
        except Exception as exc:  # the batch goes on without a calibration; the reason is kept
            calibration_error = f"{type(exc).__name__}: {exc}"
            log.warning("calibration failed: %s", calibration_error)

    pending: dict[int, tuple[PlanItem, StopDecision]] = {}

    def grade_first(i: int, item: PlanItem) -> None:
        assert item.claim is not None
        declaration = declared[i]
        precheck = declaration.precheck(item.claim, Inputs(record)) if declaration.precheck else None
        if precheck is not None and precheck.resolution_limited:  # the batch's own calibration decided it
            finish(i, _resolution_limited(item.claim, declaration.key, precheck))
            return
        outcome = _item_outcome(the_plan, item, reads, failures, record, _config(context.chambers[declaration.chamber]))
        result = _grade(item.claim, declaration, outcome, precheck, {})
        decision = _decide_stop(the_plan, item, reads, outcome, result)
        if decision is None or decision.stop:
            finish(i, _with_plan(result, the_plan, item, reads, decision))
        else:
            pending[i] = (item, decision)

    def grade_topped_up(i: int, item: PlanItem, first: StopDecision) -> None:
        assert item.claim is not None
        declaration = declared[i]
        outcome = _item_outcome(the_plan, item, reads, failures, record, _config(context.chambers[declaration.chamber]))
        result = _grade(item.claim, declaration, outcome, None, {})
        finish(i, _with_plan(result, the_plan, item, reads, StopDecision(
            False, "default rows", f"read at the default rows: after {probe_rows} rows, {first.why}")))

    for item in items:
        if item.claim is not None:
            guarded(keys[item.key], lambda item=item: grade_first(keys[item.key], item))

    if pending:  # top up what the stopping rule could not spare to the default rows, and grade again
        needed = sorted({index for item, _ in pending.values() for index in the_plan.stagings_of(item.key).values()})
        apply_restores(runner, the_plan)
        read_stagings(runner, the_plan, needed, reads, failures, served, full=True)
        for i, (item, first) in pending.items():
            guarded(i, lambda i=i, item=item, first=first: grade_topped_up(i, item, first))
    apply_restores(runner, the_plan)

    def procedure(i: int) -> None:
        runner.serving = (claims[i].id,)
        try:
            context.measuring(Measuring(runner.serving, declared[i].chamber or "", declared[i].description, 0))
            finish(i, _run_procedure(claims[i], declared[i], context, runner))
        finally:
            runner.serving = ()

    for i in procedures:
        guarded(i, lambda i=i: procedure(i))

    return BatchResult(
        results=[done[i] for i in range(len(claims))], calibration=calibration,
        record=record, calibration_error=calibration_error, stagings=runner.stagings, rows=dict(runner.rows),
        plan=[s.to_dict() for s in the_plan.stagings],
    )


def _chamber_missing(context: ProtocolContext, kind: str | None) -> ProtocolUnavailable:
    try:
        context.chamber(kind or "?")
    except ProtocolUnavailable as exc:
        return exc
    raise AssertionError("unreachable: the chamber is connected")


def _item_outcome(the_plan: Plan, item: PlanItem, reads: dict[int, StepReadings], failures: dict[int, BaseException],
                  record: CalibrationRecord | None, config: str) -> ProtocolOutcome:
    where = the_plan.stagings_of(item.key)
    readings = []
    for use in the_plan.uses_of(item.key):
        index = where[use.step.label]
        if index in failures:
            if item.claim is None:
                raise failures[index]
            return ProtocolOutcome(measurement=_failed(item.declaration.unit, failures[index]))
        got = reads[index].first(use.full_rows)  # what the staging read, up to what this step asks for
        readings.append(replace(got, label=use.step.label, settings=use.step.settings,
                                columns={n: got.columns[n] for n in use.step.reads}))
    order = [s.label for s in item.declaration.steps]
    readings.sort(key=lambda r: order.index(r.label))
    return _evaluate(item.declaration, item.claim, tuple(readings), record, config)


def _decide_stop(the_plan: Plan, item: PlanItem, reads: dict[int, StepReadings], outcome: ProtocolOutcome,
                 result: CheckResult) -> StopDecision | None:
    """None when the item already read its default rows (nothing to decide)."""
    where = the_plan.stagings_of(item.key)
    short = [u for u in the_plan.uses_of(item.key)
             if where[u.step.label] in reads and reads[where[u.step.label]].n < u.full_rows]
    if not short:
        return None
    assert item.claim is not None
    return stop_reason(item.claim, item.declaration, outcome, result.verdict)


def _with_plan(result: CheckResult, the_plan: Plan, item: PlanItem, reads: dict[int, StepReadings],
               decision: StopDecision | None) -> CheckResult:
    where = the_plan.stagings_of(item.key)
    uses = the_plan.uses_of(item.key)
    shared = sorted({u.item for i in where.values() for u in the_plan.stagings[i].uses if u.item != item.key})
    plan_details = {
        "stagings": sorted(set(where.values())),
        "shared_with": ["calibration" if k == CALIBRATION_KEY else k for k in shared],
        "rows_read": {u.step.label: min(reads[where[u.step.label]].n, u.full_rows) if where[u.step.label] in reads
                      else 0 for u in uses},
        "default_rows": {u.step.label: u.full_rows for u in uses},
        "stopping": ({"rule": "default rows", "why": "every step was read at its default rows"} if decision is None
                     else {"rule": decision.rule, "why": decision.why}),
    }
    return replace(result, details={**result.details, "plan": plan_details})


def _run_procedure(claim: Claim, declaration: Declaration, context: ProtocolContext, runner: Chambers) -> CheckResult:
    """A procedure with the runner's staging, inside the apparatus guard; its declared `restore` is applied after
    it, however it ended (as the batch applies its steps' restores), so a procedure need not restore itself."""
    reader = ProcedureReader(runner, declaration, context.rows, context.settle_rows, context.station)
    try:
        outcome = runner.once_more_if_lost(  # a second try runs the procedure again from its first SET
            declaration.chamber or "", f"protocol {declaration.key}",
            lambda first: declaration.procedure(reader, claim))  # type: ignore[misc]
    except ProtocolUnavailable as exc:
        return _unavailable(claim, declaration.key, exc)
    except Exception as exc:  # the apparatus guard
        outcome = ProtocolOutcome(measurement=_failed(declaration.unit, exc))
    finally:
        if declaration.restore and declaration.chamber in context.chambers:
            restore(runner, declaration.chamber, dict(declaration.restore), f"protocol {declaration.key}")
    return _grade(claim, declaration, outcome, None, {})


# ---------------------------------------------------------------------------------------- calibration
def calibrate(chamber: ChamberLike, *, n: int = 200, osr: int = 8, settle_rows: int = 20,
              progress: Callable[[str], None] = lambda message: None) -> CrossSensorCalibration:
    """The cross-sensor calibration alone (the `calibrate` command): its declaration, run by this runner.

    Refused before anything is staged on anything but a wind tunnel; a read that spans a reconnect or holds an
    unset reading raises CalibrationError (nothing partial is returned).
    """
    kind = getattr(getattr(chamber, "layout", None), "chamber", None)
    if kind != "wt":
        raise CalibrationError(f"cross-sensor calibration needs a wind tunnel (chamber 'wt'), got {kind!r}")
    declaration = barometer_protocols.cross_sensor_calibration(osr, n, settle_rows)
    context = ProtocolContext(chambers={"wt": chamber}, rows=n, settle_rows=settle_rows, progress=progress)
    runner = Chambers(context)
    (step,) = declaration.steps
    progress(f"calibrating: {step.label}, settle {settle_rows} rows, {n} rows")
    chamber.set_many(step.settings_dict())
    got = runner.read("wt", n, step.reads, settle_rows)
    readings = StepReadings(step.label, step.settings, got.columns, got.reconnected, settle_rows)
    outcome = _evaluate(declaration, None, (readings,), None, _config(chamber))
    assert outcome.calibration is not None
    return outcome.calibration


def cross_sensor_in_place(chamber: ChamberLike, state: Mapping[str, float], *, n: int,
                          settle_rows: int) -> tuple[CrossSensorCalibration, bool]:
    """The calibration's function on the chamber as it stands (nothing staged: the API's cross_sensor_check).

    The OSR is the one all four barometers share in `state` (0 when they do not share a known one). Returns the
    calibration and whether the read spanned a reconnect.
    """
    osrs = {state.get(BAROMETER_OSR[b]) for b in BAROMETERS}
    osr = int(osrs.pop()) if len(osrs) == 1 and None not in osrs else 0
    declaration = barometer_protocols.CROSS_SENSOR
    (step,) = declaration.steps
    got = Chambers(ProtocolContext(chambers={"wt": chamber})).read("wt", n, step.reads, settle_rows)
    settings = tuple((BAROMETER_OSR[b], float(osr)) for b in BAROMETERS) if osr else ()
    readings = StepReadings("as staged by the caller", settings, got.columns, got.reconnected, settle_rows)
    outcome = _evaluate(declaration, None, (readings,), None, _config(chamber))
    assert outcome.calibration is not None
    return outcome.calibration, got.reconnected


def operating_range_from_columns(claim: Claim, columns: Mapping[str, np.ndarray], config: str) -> Measurement:
    """The operating-range protocol's own function on recorded columns (a public-dataset CSV, fans off)."""
    declaration = barometer_protocols.OPERATING_RANGE
    (step,) = declaration.steps
    readings = StepReadings(step.label, step.settings, {b: np.asarray(columns[b], dtype=np.float64) for b in BAROMETERS})
    outcome = declaration.evaluate(Evaluation(claim, (readings,), declaration.matched(claim), None, config))  # type: ignore[misc]
    assert outcome.measurement is not None
    return outcome.measurement
