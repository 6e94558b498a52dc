"""The six chamber tools: what each one tells a model it does, what it accepts, and what it does to the chamber.

Why here, framework-neutral: each tool is a name, a description written for a language model, a pydantic model of
its arguments (whose JSON schema is the `input_schema` served at GET /tools) and a handler from (environment,
session, arguments) to a JSON-able result. app.py adds HTTP, the freeze rule, the lease and the record around
them; nothing in a handler knows about HTTP except the ApiError it may raise.

Only two tools cause SETs: stage_conditions (validated whole by the SettingGuard before any is applied) and
run_protocol (the claim's declared protocol, run by protocols/runner.py with the same guard: every SET list of the
run checked before it starts, and each SET again). Everything else reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from pydantic import BaseModel

from calibration.budget import coverage_factor
from calibration.cross_sensor import BAROMETER_OSR, BAROMETERS, CalibrationError
from firmware_bridge.variables import Kind
from protocols.registry import declared_protocol
from protocols.runner import ProtocolContext, check_claim, cross_sensor_in_place

from .errors import ApiError
from .guard import SettingGuard
from .schemas import (
    CrossSensorArgs,
    DescribeChamberArgs,
    MeasureArgs,
    RunProtocolArgs,
    StageConditionsArgs,
    SubmitOutcomeArgs,
    jsonable,
    tool_input_schema,
)
from .sessions import Session

MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2.0)
"""Standard error of a median of n normal readings ≈ sqrt(pi/2)·s/sqrt(n) (large-n efficiency 2/pi)."""


@dataclass
class ToolEnvironment:
    """What handlers may use: the connected chambers by kind and the setting guard of each."""

    chambers: Mapping[str, Any]
    guards: Mapping[str, SettingGuard]
    lease_timeout_s: float
    _static: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _claim_parts: dict[str, tuple[dict[str, Any], Any]] = field(default_factory=dict)

    @property
    def connected(self) -> list[str]:
        return sorted(self.chambers)

    def chamber(self, session: Session, requested: str | None, tool: str) -> tuple[str, Any]:
        kind = requested or session.chamber
        if kind is None or kind not in self.chambers:
            have = ", ".join(self.connected) or "none"
            raise ApiError("chamber_not_connected",
                           f"{tool}: chamber {kind!r} is not connected to this server (connected: {have}); "
                           "name a connected chamber in the 'chamber' argument")
        return kind, self.chambers[kind]

    def variables(self, kind: str) -> list[dict[str, Any]]:
        """The static part of describe_chamber for one chamber (built once: the layout does not change)."""
        if kind not in self._static:
            guard = self.guards[kind]
            rows = []
            for v in guard.layout.variables:
                if v.kind is Kind.BOOKKEEPING:
                    continue
                settable = v.kind is Kind.ACTUATOR
                rows.append(jsonable({
                    "name": v.name,
                    "kind": "input" if settable else "sensor",
                    "unit": v.unit,
                    "description": v.description,
                    "allowed": v.describe_allowed() if settable else None,
                    "operator_limit": guard.operator_limit(v.name) if settable else None,
                }))
            self._static[kind] = rows
        return self._static[kind]

    def claim_parts(self, session: Session) -> tuple[dict[str, Any], Any]:
        """The claim summary and its protocol's description for describe_chamber, JSON-safe, built once per claim
        (neither changes while the server runs)."""
        claim = session.claim
        parts = self._claim_parts.get(claim.id)
        if parts is None:
            protocol = declared_protocol(claim)
            parts = (jsonable({"id": claim.id, "component": claim.component, "parameter": claim.parameter,
                               "unit": claim.unit}),
                     None if protocol is None else jsonable(protocol.describe()))
            self._claim_parts[claim.id] = parts
        return parts


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: type[BaseModel]
    uses_chamber: bool  # takes the chamber lease for the call
    run: Callable[[ToolEnvironment, Session, Any], dict[str, Any]]

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": tool_input_schema(self.arguments)}


# ------------------------------------------------------------------------------------------------ handlers
def describe_chamber(env: ToolEnvironment, session: Session, args: DescribeChamberArgs) -> dict[str, Any]:
    kind, chamber = env.chamber(session, args.chamber, "describe_chamber")
    state = jsonable(chamber.state())
    # The static parts (variables, claim, protocol) are JSON-safe already; only the state is converted per call.
    variables = [dict(row, value=state.get(row["name"])) if row["kind"] == "input" else row
                 for row in env.variables(kind)]
    claim, protocol = env.claim_parts(session)
    return {
        "chamber": kind,
        "config": jsonable(chamber.config),
        "connected_chambers": env.connected,
        "variables": variables,
        "state": state,
        "state_note": "values of the inputs set since the chamber was connected; an input absent here is at its "
                      "power-on value",
        "claim": claim,
        "protocol": protocol,
        "lease_timeout_s": jsonable(env.lease_timeout_s),
    }


def stage_conditions(env: ToolEnvironment, session: Session, args: StageConditionsArgs) -> dict[str, Any]:
    kind, chamber = env.chamber(session, args.chamber, "stage_conditions")
    checked = env.guards[kind].check(args.settings)  # raises before anything is sent
    applied = chamber.set_many(checked)
    return jsonable({"chamber": kind, "applied": applied, "state": chamber.state()})


def _summaries(values: np.ndarray, units: list[str], statistic: str) -> list[dict[str, Any]]:
    """Per column of `values` (rows x columns): value, n, std (dof n-1), standard error; NaN (unset) excluded."""
    finite = np.isfinite(values)
    counts = finite.sum(axis=0)
    safe = np.where(finite, values, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = safe.sum(axis=0) / counts
        squares = np.where(finite, (values - means) ** 2, 0.0).sum(axis=0)
        stds = np.sqrt(squares / (counts - 1))
        medians = np.nanmedian(values, axis=0) if statistic == "median" and values.size else means
    out = []
    for j, unit in enumerate(units):
        k = int(counts[j])
        row: dict[str, Any] = {"unit": unit, "n": k, "unset": int(values.shape[0] - k)}
        if k == 0:
            row.update(value=None, std=None, standard_error=None, dof=None,
                       note="no reading: the sensor reported 'unset' (-9999) on every row")
        else:
            std = float(stds[j]) if k > 1 else None
            factor = MEDIAN_SE_FACTOR if statistic == "median" else 1.0
            row.update(value=float(medians[j] if statistic == "median" else means[j]), std=std,
                       standard_error=None if std is None else factor * std / math.sqrt(k), dof=k - 1 if k > 1 else None)
        if statistic == "raw":
            row["values"] = values[:, j].tolist()
        out.append(row)
    return out


def measure(env: ToolEnvironment, session: Session, args: MeasureArgs) -> dict[str, Any]:
    kind, chamber = env.chamber(session, args.chamber, "measure")
    layout = chamber.layout
    if args.variables is None:
        names = [v.name for v in layout.variables if v.kind is Kind.SENSOR]
    else:
        names = list(dict.fromkeys(args.variables))
        unknown = [n for n in names if layout.get(n) is None]
        if unknown:
            raise ApiError("unknown_variable", f"measure: no column(s) {unknown} on {kind}/{layout.config}; "
                                               f"columns: {', '.join(layout.names)}")
    frame = chamber.measure(args.n)
    index = [frame.names.index(name) for name in names]
    summaries = _summaries(frame.values[:, index], [layout.get(name).unit for name in names], args.statistic)
    columns = dict(zip(names, summaries))
    return jsonable({"chamber": kind, "rows": len(frame), "statistic": args.statistic, "variables": columns,
                     "reconnected": bool(frame.reconnected),
                     "note": "std is the sample standard deviation (dof = n - 1); standard_error is for the value"})


def cross_sensor_check(env: ToolEnvironment, session: Session, args: CrossSensorArgs) -> dict[str, Any]:
    kind, chamber = env.chamber(session, "wt", "cross_sensor_check")
    state = chamber.state()
    osrs = {state.get(BAROMETER_OSR[b]) for b in BAROMETERS}
    try:  # the calibration protocol's own function, on the chamber as the caller staged it
        cal, reconnected = cross_sensor_in_place(chamber, state, n=args.n, settle_rows=args.settle_rows)
    except CalibrationError as exc:
        raise ApiError("measurement_refused", f"{exc}. Nothing was computed; check the chamber with "
                                              "describe_chamber and measure again.") from None
    warnings = []
    fans = (state.get("load_in"), state.get("load_out"))
    if fans != (0.0, 0.0):
        warnings.append(f"fans are not known to be off (load_in, load_out = {fans}); the barometers then sit at "
                        "different pressures and the offsets mix sensor offsets with real pressure differences")
    if len(osrs) > 1 or None in osrs:
        warnings.append("the four barometers do not share one known oversampling (osr_*); their noise differs")
    return jsonable({
        "chamber": kind, "unit": cal.unit, "n": cal.n, "settle_rows": cal.settle_rows,
        "sensors": [{"name": s.name, "mean": s.mean, "std": s.std, "n": s.n, "u_mean": s.u_mean} for s in cal.sensors],
        "mean": cal.mean, "mean_u": cal.mean_u, "mean_dof": cal.mean_dof,
        "mean_k95": coverage_factor(cal.mean_dof),
        "offsets": cal.offsets, "offset_u": cal.offset_u, "offset_dof": cal.offset_dof,
        "spread": cal.spread, "between_unit_std": cal.between_unit_std,
        "reconnected": reconnected, "warnings": warnings, "notes": cal.notes,
    })


def run_protocol(env: ToolEnvironment, session: Session, args: RunProtocolArgs) -> dict[str, Any]:
    # The runner checks every SET list of the run against the server-side guard before anything moves (a refusal
    # is an ApiError here, nothing sent), then again before each SET.
    context = ProtocolContext(chambers=env.chambers, calibration=None, rows=args.rows, settle_rows=args.settle_rows,
                              setting_guards=env.guards)
    result = check_claim(session.claim, context)
    return jsonable(result.to_dict())


def submit_chamber_outcome(env: ToolEnvironment, session: Session, args: SubmitOutcomeArgs) -> dict[str, Any]:
    # Storing and ending happen in app.py (they touch the session store and the lease); this shapes the outcome.
    return jsonable({"session_id": session.id, "claim_id": session.claim.id, "outcome": args.model_dump()})


TOOLS: tuple[Tool, ...] = (
    Tool("describe_chamber",
         "Describe the chamber: every variable with its kind (input you can set, or sensor you can read), unit, the "
         "values the firmware allows, the operator's safety limits, and the current value of each input you set. "
         "Also shows the claim under test and the protocol run_protocol would run. Call this first.",
         DescribeChamberArgs, True, describe_chamber),
    Tool("stage_conditions",
         "Set chamber inputs, e.g. {\"settings\": {\"load_in\": 0.5, \"load_out\": 0}}. The whole request is "
         "validated against the firmware's allowed values and the operator limits first; if any value is refused, "
         "nothing is set and the error lists each refused value with what is allowed. Returns the applied values "
         "and the chamber's input state.",
         StageConditionsArgs, True, stage_conditions),
    Tool("measure",
         "Read n rows from the chamber in its current state and summarise the chosen columns: value (mean or "
         "median), n, sample std, standard error. Use after stage_conditions; discard a first measurement if the "
         "chamber needs to settle (fans take a few seconds).",
         MeasureArgs, True, measure),
    Tool("cross_sensor_check",
         "Wind tunnel only: read the four redundant DPS310 barometers together and return each unit's mean, its "
         "offset from the four-unit mean (with standard uncertainty and degrees of freedom), their spread, and the "
         "four-unit mean with u = s_between/sqrt(4) (dof 3) and its 95 % coverage factor. Meaningful with both fans "
         "off (load_in = load_out = 0) and equal oversampling; otherwise the result carries a warning.",
         CrossSensorArgs, True, cross_sensor_check),
    Tool("run_protocol",
         "Run the lab's registered measurement protocol for this session's claim (it stages and measures the "
         "chamber itself, within the operator limits) and return the Measurement with its uncertainty budget and "
         "the lab's verdict under its decision rule. Can take a while on the real chamber (rows/7 seconds per step).",
         RunProtocolArgs, True, run_protocol),
    Tool("submit_chamber_outcome",
         "Finish: report your own prediction for the claim (pass, inconclusive or fail) with a summary of what you "
         "staged and measured. It is stored ungraded and ends the session; no chamber tool works afterwards.",
         SubmitOutcomeArgs, False, submit_chamber_outcome),
)

TOOLS_BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}
