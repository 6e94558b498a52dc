"""The operator limits file: what an operator allows to be set on this chamber, narrower than the firmware.

Why a file, validated: the lab decides (for example) that the hatch only moves 0–45° and the fan loads stay in
0–1, and the driver must enforce it on every path, not rely on callers. YAML or JSON, e.g.

    chamber: wt
    variables:
      hatch: {min: 0, max: 45}
      load_in: {min: 0, max: 1}
      osr_upwind: {allowed: [1, 8]}
      safe: {load_in: 0, load_out: 0}      # the state every command leaves the chamber in (chamber/safe_state.py)

One file may cover both chambers: top-level keys `wt` and `lt`, each holding `variables` (and `safe`) as above.
A bound must be a finite number: NaN compares false with everything, so a NaN bound would let every value pass;
and a number, not a boolean (pydantic would read `max: true` as 1). The file is read by the one strict reader
(firmware_bridge.model_file): a key given twice, an empty file or a file above SETTINGS_MAX_BYTES is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

from chamber.errors import LimitsError
from firmware_bridge.model_file import (
    SETTINGS_MAX_BYTES,
    ModelFileError,
    load_model_file,
    read_data_file,
    refuse_bool,
    validate_model,
)
from firmware_bridge.variables import Kind, Layout, describe_range, describe_set, in_range, snap_to


Number = Annotated[float, BeforeValidator(refuse_bool)]
"""A bound, allowed value or safe setting: a number, not a boolean (also inside the two-chamber form, which the
model reshapes before validation, out of the reach of model_file's own boolean check)."""


class VariableLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    min: Number | None = None
    max: Number | None = None
    allowed: tuple[Number, ...] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "VariableLimit":
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.allowed is not None and not self.allowed:
            raise ValueError("allowed must list at least one value")
        return self

    def accepts(self, value: float) -> bool:
        """An operator's limit applies both: a value must be in the allowed set (if any) AND within min..max."""
        if self.allowed is not None and snap_to(value, self.allowed) is None:
            return False
        return in_range(value, self.min, self.max)

    def describe(self) -> str:
        parts = []
        if self.allowed is not None:
            parts.append(describe_set(self.allowed))
        if self.min is not None or self.max is not None:
            parts.append(describe_range(self.min, self.max))
        return " and ".join(parts) or "any value"


class OperatorLimits(BaseModel):
    """Limits of one chamber (`chamber`, `variables`, `safe`), or of both (`per_chamber`, from top-level wt/lt keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    chamber: Literal["wt", "lt"] | None = None
    variables: dict[str, VariableLimit] = {}
    safe: dict[str, Number] | None = None
    per_chamber: dict[Literal["wt", "lt"], "OperatorLimits"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _both_chambers(cls, data: Any) -> Any:
        """`{wt: {...}, lt: {...}}` is the two-chamber form; each part names its chamber implicitly."""
        if isinstance(data, dict) and data and set(data) <= {"wt", "lt"}:
            parts = {}
            for kind, part in data.items():
                part = dict(part or {})
                if part.get("chamber") not in (None, kind):
                    raise ValueError(f"section {kind!r} says chamber {part['chamber']!r}")
                part["chamber"] = kind
                parts[kind] = part
            return {"per_chamber": parts}
        return data

    @model_validator(mode="after")
    def _one_form(self) -> "OperatorLimits":
        if self.per_chamber is not None and (self.chamber is not None or self.variables or self.safe is not None):
            raise ValueError("give either top-level wt/lt sections or one chamber's chamber/variables/safe, not both")
        return self

    @property
    def chambers(self) -> tuple[str, ...]:
        """The chambers this file names (empty: it applies to whichever chamber is connected)."""
        if self.per_chamber is not None:
            return tuple(self.per_chamber)
        return (self.chamber,) if self.chamber else ()

    def for_chamber(self, kind: str) -> "OperatorLimits | None":
        """The limits that apply to a board of this kind (None: this file says nothing about that chamber)."""
        if self.per_chamber is not None:
            return self.per_chamber.get(kind)  # type: ignore[call-overload]
        return self if self.chamber in (None, kind) else None

    def covering(self) -> "OperatorLimits":
        """The same limits as a two-chamber file, so that one file for one chamber can be given while both are
        connected (the other chamber then has no operator limits). A file naming no chamber applies to both."""
        if self.per_chamber is not None or self.chamber is None:
            return self
        return OperatorLimits(per_chamber={self.chamber: self})

    def for_variable(self, name: str) -> VariableLimit | None:
        if self.per_chamber is not None:
            raise LimitsError("a two-chamber limits file has no single rule per variable; use for_chamber(kind) first")
        return self.variables.get(name)

    def check_against(self, layout: Layout) -> None:
        """Refuse limits for a different chamber or for variables the board does not let the host set."""
        if self.per_chamber is not None:
            part = self.per_chamber.get(layout.chamber)  # type: ignore[call-overload]
            if part is not None:
                part.check_against(layout)
            return
        if self.chamber is not None and self.chamber != layout.chamber:
            raise LimitsError(f"limits are for chamber {self.chamber!r}, but the board is {layout.chamber!r}")
        for what, names in (("limits name", self.variables), ("the safe state names", self.safe or {})):
            for name in names:
                variable = layout.get(name)
                if variable is None or (variable.kind is Kind.BOOKKEEPING and name != "flag"):
                    raise LimitsError(f"{what} {name!r}, expected a settable variable of {layout.chamber}/{layout.config}")
        for name, value in (self.safe or {}).items():
            limit = self.variables.get(name)
            if limit is not None and not limit.accepts(value):
                raise LimitsError(f"the safe state sets {name}={value:g}, outside its own limit {limit.describe()}")


CONTROLLED_FANS = ("load_in", "load_out")
"""What the pressure-control configuration's PID drives: a fan the host has not set explicitly (an explicit load
overrides the PID for that fan, on the board as in the simulator)."""

CONTROLLER_REACH = (0.0, 1.0)
"""The loads the PID can drive a fan to: its output saturates at +-1 (intake up to 1 for a positive output, exhaust
up to 1 for a negative one, the other fan at 0.01 or 0). Any nonzero gain reaches a bound under a large or lasting
error (the integral term grows without limit), so no choice of gains or target keeps a fan below 1."""


class ControllerUnbounded(LimitsError):
    """The pressure controller could drive a fan outside its operator limit: pin that fan first."""

    def __init__(self, fans: dict[str, "VariableLimit"]):
        self.fans = dict(fans)
        listed = ", ".join(f"{name} (limit {rule.describe()})" for name, rule in fans.items())
        self.reason = (f"the pressure controller drives every fan the host has not set, anywhere in "
                       f"{CONTROLLER_REACH[0]:g}..{CONTROLLER_REACH[1]:g} (its output saturates at +-1 whatever the "
                       f"gains), beyond the operator limits of {listed}")
        super().__init__(
            f"{self.reason}; set {' and '.join(fans)} explicitly within the limits "
            "(that overrides the controller for the fan) before measuring; nothing was measured")


def controller_overreach(layout: Layout, limits: "OperatorLimits | None") -> dict[str, VariableLimit]:
    """The fans whose operator limit is narrower than what the pressure controller may drive ({} outside the
    pressure-control configuration, or when the limits allow the controller's whole reach)."""
    if limits is None or layout.config != "pressure-control":
        return {}
    low, high = CONTROLLER_REACH
    out = {}
    for fan in CONTROLLED_FANS:
        rule = limits.for_variable(fan)
        if rule is None:
            continue
        covers = rule.allowed is None and (rule.min is None or rule.min <= low) and (rule.max is None or rule.max >= high)
        if not covers:
            out[fan] = rule
    return out


def check_controller(layout: Layout, limits: "OperatorLimits | None", state: dict[str, float]) -> None:
    """ControllerUnbounded when a fan the controller would drive (not in `state`, the inputs the host set) could
    leave its operator limit. Called before every measurement: the PID only runs while the board measures."""
    loose = {fan: rule for fan, rule in controller_overreach(layout, limits).items() if fan not in state}
    if loose:
        raise ControllerUnbounded(loose)


class LimitsFileError(LimitsError, ModelFileError):
    """A limits, safe-state or other operator settings file that cannot be read or does not validate: names the
    file, the field, what was expected and what arrived (the one configuration-file error)."""


LIMITS_EXPECTED = ("a mapping with chamber/variables/safe (variables: {name: {min, max, allowed}}), or top-level "
                   "wt/lt sections holding those")


def _as_written(exc: LimitsFileError) -> LimitsFileError:
    """The two-chamber form is validated as `per_chamber`: name its keys as the file writes them (`wt.variables`)."""
    return LimitsFileError(exc.source, exc.problem.replace("'per_chamber.", "'"))


def parse_limits(data: Any, source: str = "limits") -> OperatorLimits:
    """Limits from already parsed data (a mapping, as a file holds it); LimitsFileError names `source` and field."""
    try:
        return validate_model(data, OperatorLimits, source=source, error=LimitsFileError)
    except LimitsFileError as exc:
        raise _as_written(exc) from None


def read_settings_file(path: str | Path, what: str = "settings file",
                       expected: str = "a mapping of settings by chamber (wt: {variable: value}, lt: {...})") -> Any:
    """The content of an operator's YAML or JSON file (limits, safe state; JSON by suffix, YAML otherwise) read by
    the one strict reader (at most SETTINGS_MAX_BYTES, no key twice, not empty), or LimitsFileError naming the
    file and what is wrong with it."""
    return read_data_file(path, what=what, error=LimitsFileError, expected=expected, max_bytes=SETTINGS_MAX_BYTES)


def load_limits(path: str | Path) -> OperatorLimits:
    """Read a YAML or JSON limits file (by suffix; YAML otherwise) with the one strict reader."""
    try:
        return load_model_file(path, OperatorLimits, what="limits file", error=LimitsFileError,
                               expected=LIMITS_EXPECTED, max_bytes=SETTINGS_MAX_BYTES)
    except LimitsFileError as exc:
        raise _as_written(exc) from None


def as_limits(limits: OperatorLimits | dict | str | Path | None) -> OperatorLimits | None:
    """Accept a model, a plain dict, or a path."""
    if limits is None or isinstance(limits, OperatorLimits):
        return limits
    if isinstance(limits, dict):
        return parse_limits(limits)
    return load_limits(limits)
