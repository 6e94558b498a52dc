"""Declared protocols, the one runner and the batch planner (issue 15), on the in-process simulator.

What is checked: every protocol is a declaration in one explicit list and protocols/ has no import cycle; the
planner measures shared conditions once, orders stagings by actuator cost and keeps a short read only when the
stopping rule says more rows cannot change the verdict; a planned batch gives the same verdict classes as
grading claim by claim; an exception inside a run is that claim's error, never the batch's; the setting guard
refuses before anything moves; `check --calibration FILE` grades with the record.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from bench_cli import PROJECT_ROOT
from calibration.budget import UncertaintyBudget, type_a
from chamber import open_chamber
from protocols import registry
from protocols.claims import get_claim, load_claims
from protocols.declaration import Declaration, Step
from protocols.measurement import Measurement
from protocols.planner import PlanItem, plan, stop_reason
from protocols.runner import ProtocolContext, check_claim, run_batch
from protocols.verdict import verdict

PROTOCOLS_DIR = PROJECT_ROOT / "protocols"


def _sim(seed: int = 7) -> dict:
    return {kind: open_chamber(backend="sim", chamber=kind, seed=seed) for kind in ("wt", "lt")}


def _close(chambers: dict) -> None:
    for c in chambers.values():
        c.close()


# ------------------------------------------------------------------------------------------ structure
def _imports(path: Path) -> set[str]:
    """Modules of protocols/ a file imports (at any depth: function-level imports count too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if node.level == 0 else "protocols.api." + node.module if node.module else ""
            if node.level == 0 and node.module == "protocols":
                out |= {f"protocols.{a.name}" for a in node.names}
            elif base.startswith("protocols"):
                out.add(base)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("protocols")}
    return out


def test_protocols_has_no_import_cycle_and_no_registration_by_side_effect():
    modules = {}
    for path in PROTOCOLS_DIR.rglob("*.py"):
        rel = path.relative_to(PROJECT_ROOT).with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        modules[name] = {m for m in _imports(path) if m != name}
    seen, stack = set(), []

    def visit(name: str) -> None:
        if name in stack:
            raise AssertionError(f"import cycle: {' -> '.join(stack[stack.index(name):] + [name])}")
        if name in seen or name not in modules:
            return
        stack.append(name)
        for dep in modules[name]:
            visit(dep)
        stack.pop()
        seen.add(name)

    for name in modules:
        visit(name)
    assert "register(" not in (PROTOCOLS_DIR / "registry.py").read_text()


def test_every_claim_names_a_declared_protocol_and_describe_comes_from_the_declaration():
    keys = {d.key for d in registry.PROTOCOLS}
    assert len(keys) == len(registry.PROTOCOLS)
    for claim in load_claims().values():
        for key in (claim.protocol, claim.instrument_protocol):
            assert key is None or key in keys, (claim.id, key)
    precision = registry.BY_KEY["dps310.pressure_precision"].describe()
    assert [s["label"] for s in precision["steps"]] == [f"fans off, OSR {o}" for o in (1, 2, 4, 8)]
    assert {"variable": "osr_ambient", "value": 2.0} in precision["steps"][1]["settings"]
    claim = get_claim("dps310-operating-range")
    assert set(registry.BY_KEY["dps310.operating_range"].matched(claim)) == {
        c.name for c in claim.conditions if c.variable}


# --------------------------------------------------------------------------------------------- planner
def test_the_planner_measures_shared_conditions_once():
    claims = [c for c in load_claims().values() if c.protocol in (
        "dps310.operating_range", "dps310.pressure_precision", "acs70331.engagement")]
    items = [PlanItem("calibration", registry.barometer_protocols.CROSS_SENSOR, None, False)]
    items += [PlanItem(c.id, registry.protocol_for(c), c, True) for c in claims]
    p = plan(items, rows=200, settle_rows=20)
    # fans off at OSR 8 serves the calibration, the operating range, the precision's OSR 8 step and the five
    # engagement claims' load-0 step; OSR 1/2/4 and the full intake load are one staging each
    assert len(p.stagings) == 5
    first = p.stagings[0]
    assert first.settings["osr_ambient"] == 8.0 and first.full_rows == 200 and first.first_rows == 200
    assert {u.item for u in first.uses} >= {"calibration", "dps310-operating-range", "dps310-pressure-precision-high"}
    assert p.stagings[-1].settings == {"load_in": 1.0, "load_out": 0.0}  # the fan change last: it costs most
    assert p.restores == {"wt": {"load_in": 0.0}}


def test_each_reading_announces_the_planned_chamber_time_still_ahead_of_its_pass():
    """The ETA of `check --all` and `run` (issue 35): the first reading of a pass carries the planner's seconds of
    the whole pass (reading_seconds over its stagings, in order), each later one what is left scaled by the pace
    measured so far (a fake timer: the chamber runs exactly twice as slow as planned), and a procedure none."""
    from protocols.planner import reading_seconds

    claims = [get_claim(i) for i in ("dps310-operating-range", "dps310-pressure-precision-high",
                                     "acs70331-bandwidth")]
    chambers = _sim()
    seen = []
    now = [0.0]
    try:
        context = ProtocolContext(chambers=chambers, rows=30, timer=lambda: now[0])
        items = [PlanItem(c.id, registry.protocol_for(c), c, True) for c in claims if registry.protocol_for(c).steps]
        start = {k: dict(c.state()) for k, c in chambers.items()}
        first_pass = plan(items, rows=30, settle_rows=context.settle_rows, start=start)
        state, planned = {k: dict(v) for k, v in start.items()}, []
        for staging in first_pass.stagings:
            planned.append(reading_seconds(staging, state.setdefault(staging.chamber, {}), staging.first_rows))
            state[staging.chamber].update(staging.settings)

        def measuring(event):  # the reading this event announces takes twice its planned seconds
            staged = sum(e.planned_left_s is not None for e in seen)
            seen.append(event)
            if event.planned_left_s is not None and staged < len(planned):
                now[0] += 2.0 * planned[staged]

        context.measuring = measuring
        run_batch(claims, context)
    finally:
        _close(chambers)
    staged = [e for e in seen if e.planned_left_s is not None]
    assert len(staged) >= len(planned) >= 2
    assert staged[0].planned_left_s == pytest.approx(sum(planned))  # no pace measured yet: the plan itself
    assert staged[1].planned_left_s == pytest.approx(2.0 * sum(planned[1:]))  # twice as slow as planned so far
    assert all(e.planned_left_s is None for e in seen if e.rows == 0)  # a procedure: not planned


def test_stagings_are_ordered_to_spare_hatch_moves():
    steps = tuple(Step(f"hatch {h}", (("hatch", float(h)),), ("pressure_upwind",)) for h in (45, 0, 40, 5))
    d = Declaration(key="test.hatch", chamber="wt", unit="Pa", steps=steps, evaluate=lambda e: None,
                    description="hatch positions")
    p = plan([PlanItem("x", d, None, False)], rows=10, settle_rows=0, start={"wt": {"hatch": 0.0}})
    assert [s.settings["hatch"] for s in p.stagings] == [0.0, 5.0, 40.0, 45.0]


def _measurement(value: str, u_a_readings: list[float], unit: str = "hPa") -> Measurement:
    budget = UncertaintyBudget(quantity="q", unit=unit, components=(type_a("readings", u_a_readings),))
    return Measurement.from_budget(Decimal(value), budget, matched_conditions=[
        c.name for c in get_claim("dps310-operating-range").conditions if c.variable])


def test_the_stopping_rule_stops_only_when_more_rows_cannot_change_the_verdict():
    claim = get_claim("dps310-operating-range")  # 300..1200 hPa
    declaration = registry.BY_KEY["dps310.operating_range"]
    from protocols.declaration import ProtocolOutcome

    far = _measurement("945.3", [945.2, 945.3, 945.4, 945.3])
    decision = stop_reason(claim, declaration, ProtocolOutcome(measurement=far), verdict(claim, far))
    assert decision.stop and decision.rule == "decided with margin"
    near = _measurement("1199.9", [1199.8, 1199.9, 1200.0, 1199.9])  # m ± 4 u_A crosses the bound's guard band
    decision = stop_reason(claim, declaration, ProtocolOutcome(measurement=near), verdict(claim, near))
    assert not decision.stop and "could change" in decision.why


def test_a_planned_batch_grades_like_claim_by_claim_and_records_why_fewer_rows_sufficed():
    claims = list(load_claims().values())
    chambers = _sim()
    try:
        batch = run_batch(claims, ProtocolContext(chambers=chambers, rows=200), calibrate=True)
    finally:
        _close(chambers)
    chambers = _sim()
    try:
        context = ProtocolContext(chambers=chambers, rows=200)
        one_by_one = [check_claim(c, context) for c in claims]
    finally:
        _close(chambers)
    classes = lambda results: [(r.claim.id, r.verdict.verdict, r.verdict.inconclusive_class) for r in results]  # noqa: E731
    assert classes(batch.results) == classes(one_by_one)
    assert batch.calibration is not None and batch.record is not None
    assert batch.stagings == 7  # per claim: 1 + 4 + 5 * 2 + 2 = 17, plus the calibration's
    by_id = {r.claim.id: r for r in batch.results}
    op = by_id["dps310-operating-range"].details["plan"]
    assert op["rows_read"] == {"fans off, OSR 8": 200} and "calibration" in op["shared_with"]
    precision = by_id["dps310-pressure-precision-high"].details["plan"]
    assert precision["stopping"]["rule"] == "condition-decided"
    assert precision["rows_read"]["fans off, OSR 1"] == 20 and precision["default_rows"]["fans off, OSR 1"] == 200
    # the budget of a claim read in full is the per-claim one: same n, same kind of u
    a, b = by_id["dps310-operating-range"].measurement, one_by_one[[c.id for c in claims].index(
        "dps310-operating-range")].measurement
    assert a.n == b.n == 800 and a.dof == b.dof == 3.0


# ----------------------------------------------------------------------------------------------- guards
class _Wrapped:
    """A chamber with some methods overridden; everything else is the wrapped chamber (`_c`)."""

    def __init__(self, chamber) -> None:
        self._c = chamber

    def __getattr__(self, name):
        return getattr(self._c, name)


class _Breaks(_Wrapped):
    """A chamber whose read raises an unexpected error once the intake fan is at full load."""

    def __init__(self, chamber) -> None:
        super().__init__(chamber)
        self.full = False

    def set_many(self, settings):
        if "load_in" in settings:
            self.full = settings["load_in"] == 1.0
        return self._c.set_many(settings)

    def measure(self, n):
        if self.full:
            raise ZeroDivisionError("a bug in the read path")
        return self._c.measure(n)


def test_an_exception_inside_a_run_is_that_claims_error_naming_its_type_never_the_batchs():
    chambers = _sim()
    try:
        chambers["wt"] = _Breaks(chambers["wt"])
        claims = [get_claim("acs70331-bandwidth"), get_claim("dps310-operating-range"), get_claim("si115x-adc-bit-depth")]
        results = run_batch(claims, ProtocolContext(chambers=chambers, rows=40), calibrate=True).results
    finally:
        _close({k: getattr(c, "_c", c) for k, c in chambers.items()})
    acs, op, codes = results
    assert acs.verdict.verdict == "error" and "ZeroDivisionError" in acs.measurement.details["reason"]
    assert (op.verdict.verdict, codes.verdict.verdict) == ("pass", "pass")


class _Sets:
    config = "standard"

    def __init__(self) -> None:
        self.sets: list[dict] = []

    def set_many(self, values):
        self.sets.append(dict(values))
        return dict(values)

    def measure(self, n):
        raise AssertionError("this procedure reads nothing")


def test_a_procedure_s_declared_restore_is_applied_by_the_runner_even_when_it_raises(monkeypatch):
    def breaks_after_a_set(reader, claim):
        reader.stage("wt", {"load_in": 0.5}, 0, "half load")
        raise ZeroDivisionError("mid-procedure")

    declaration = Declaration(key="test.breaks", chamber="wt", description="", unit="A", restore=(("load_in", 0.0),),
                              procedure=breaks_after_a_set, stagings=((("load_in", 0.5),),))
    monkeypatch.setattr("protocols.runner.selected_protocol", lambda claim, station: declaration)
    chamber = _Sets()
    (result,) = run_batch([get_claim("acs70331-bandwidth")], ProtocolContext(chambers={"wt": chamber})).results
    assert result.verdict.verdict == "error" and "ZeroDivisionError" in result.measurement.details["reason"]
    assert chamber.sets == [{"load_in": 0.5}, {"load_in": 0.0}]  # the procedure never restored it itself


class _Refuses:
    def __init__(self) -> None:
        self.checked = []

    def check(self, settings, *, inputs_only=True):
        self.checked.append(dict(settings))
        if settings.get("load_in") == 1.0:
            raise PermissionError("load_in=1.0: expected 0..0.5 (operator limits)")
        return dict(settings)


class _NoSets(_Wrapped):
    def __init__(self, chamber) -> None:
        super().__init__(chamber)
        self.sets = []

    def set_many(self, settings):
        self.sets.append(settings)
        return self._c.set_many(settings)


def test_the_setting_guard_refuses_the_whole_run_before_anything_moves():
    chambers = _sim()
    try:
        wt = _NoSets(chambers["wt"])
        context = ProtocolContext(chambers={"wt": wt}, rows=20, setting_guards={"wt": _Refuses()})
        with pytest.raises(PermissionError, match="operator limits"):
            check_claim(get_claim("acs70331-bandwidth"), context)
        assert wt.sets == []
    finally:
        _close(chambers)


# ------------------------------------------------------------------------------------------ calibration
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROJECT_ROOT / "bench_cli.py"), *args], capture_output=True,
                          text=True, timeout=300)


def test_check_with_a_calibration_file_grades_with_the_record(tmp_path: Path):
    from calibration.records import load_record
    from protocols.claim_sources import load_main_job_claims

    path = tmp_path / "cal.json"
    assert _cli("calibrate", "--backend", "sim", "--seed", "5", "-n", "60", "-o", str(path), "--json").returncode == 0
    record = load_record(path)
    assert record.between_unit_std == pytest.approx(record.parameters.mean_u * 2)
    out = _cli("check", "--all", "--backend", "sim", "--rows", "40", "--calibration", str(path), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    results = {r["claim_id"]: r for r in json.loads(out.stdout)["results"]}
    assert set(results) == set(load_main_job_claims())  # check --all grades the pool `run` grades
    assert not [k for k, r in results.items() if r["verdict"] == "error"]
    rel = results["dps310-relative-accuracy"]
    assert (rel["verdict"], rel["class"]) == ("inconclusive", "resolution-limited")
    assert results["dps310-operating-range"]["verdict"] == "pass"


def test_a_calibration_record_of_another_configuration_is_refused_before_staging(tmp_path: Path):
    from calibration.records import load_record, save_record

    path = tmp_path / "cal.json"
    assert _cli("calibrate", "--backend", "sim", "-n", "20", "-o", str(path), "--json").returncode == 0
    other = load_record(path).model_copy(update={"config": "pressure-control"})
    save_record(other, tmp_path / "other.json")
    out = _cli("check", "dps310-operating-range", "--backend", "sim", "--calibration", str(tmp_path / "other.json"),
               "--json")
    assert out.returncode == 2
    err = json.loads(out.stdout)["error"]
    assert err["type"] == "CalibrationMismatch" and "pressure-control" in err["message"]


def test_relative_accuracy_precheck_reads_the_scatter_of_a_record_or_a_live_calibration():
    from protocols.barometer_protocols import relative_accuracy_precheck
    from protocols.declaration import Inputs

    claim = get_claim("dps310-relative-accuracy")
    chambers = _sim()
    try:
        batch = run_batch([claim], ProtocolContext(chambers=chambers, rows=30), calibrate=True)
    finally:
        _close(chambers)
    record = batch.record
    assert record is not None
    assert record.between_unit_std == pytest.approx(batch.calibration.between_unit_std)
    check = relative_accuracy_precheck(claim, Inputs(record))
    assert check.resolution_limited
    assert np.isfinite(record.between_unit_std)
