"""The safe state: the settings every command leaves a chamber in, however it ends.

Why: a protocol ends wherever its last step left the fans, hatch and LEDs; a run stopped with Ctrl-C or by a
lost link ends anywhere. An unattended chamber should not keep its fans at full load or its LEDs lit. The safe
state is applied on every exit path of `run`, `check`, `chamber run/shell/measure` and `serve`.

Where it comes from, first match wins: a `--safe` settings file, the operator limits file's `safe:` section for
that chamber, else the default below (fans off, LEDs off). A `--safe` file is YAML or JSON by chamber:

    wt: {load_in: 0, load_out: 0, hatch: 0}
    lt: {red: 0, green: 0, blue: 0}
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Mapping

from pydantic import AllowInfNan, BaseModel, ConfigDict, Strict, model_validator

from chamber.errors import ChamberError, ChamberHalted, InvalidSetting
from chamber.limits import LimitsFileError, OperatorLimits, read_settings_file
from firmware_bridge.model_file import validate_model

log = logging.getLogger(__name__)

DEFAULT_SAFE: dict[str, dict[str, float]] = {
    "wt": {"load_in": 0.0, "load_out": 0.0},
    "lt": {"red": 0.0, "green": 0.0, "blue": 0.0},  # all three: an unset colour reaches the LEDs as 241
}
"""Fans off (0 % PWM on both fans), LEDs off. Everything else stays as it was."""


@dataclass(frozen=True)
class SafeState:
    """Settings by chamber kind, and where they came from (for the summary)."""

    settings: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: DEFAULT_SAFE)
    source: str = "default (fans off, LEDs off)"

    def for_chamber(self, kind: str) -> dict[str, float]:
        return dict(self.settings.get(kind, {}))


FiniteNumber = Annotated[float, Strict(), AllowInfNan(False)]
"""A safe setting: a number (not a bool, not a string), finite."""


class SafeStateFile(BaseModel):
    """A --safe file: settings by chamber kind, at least one kind."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wt: dict[str, FiniteNumber] | None = None
    lt: dict[str, FiniteNumber] | None = None

    @model_validator(mode="after")
    def _some_chamber(self) -> "SafeStateFile":
        if self.wt is None and self.lt is None:
            raise ValueError("expected a mapping with keys wt and/or lt, each {variable: value}")
        return self


def _safe_state(parsed: SafeStateFile, source: str) -> SafeState:
    return SafeState({kind: dict(values) for kind in ("wt", "lt") if (values := getattr(parsed, kind)) is not None},
                     source)


def parse_safe_state(data: Any, source: str) -> SafeState:
    """Safe settings from parsed data; LimitsFileError names `source`, the field, what was expected and got."""
    return _safe_state(validate_model(data, SafeStateFile, source=source, error=LimitsFileError), source)


def load_safe_state(path: str | Path) -> SafeState:
    """A --safe file (YAML, or JSON by suffix); LimitsFileError as every settings file words it."""
    data = read_settings_file(path, "safe-state file")
    parsed = validate_model(data, SafeStateFile, source=f"safe-state file {Path(path)}", error=LimitsFileError)
    return _safe_state(parsed, str(path))


def resolve_safe_state(safe_file: str | Path | None = None, limits: OperatorLimits | None = None) -> SafeState:
    """The --safe file, else the limits file's safe sections (per chamber, default for a chamber it omits), else
    the default."""
    if safe_file is not None:
        return load_safe_state(safe_file)
    if limits is not None:
        settings = dict(DEFAULT_SAFE)
        named = False
        for kind in ("wt", "lt"):
            part = limits.for_chamber(kind)
            if part is not None and part.safe is not None:
                settings[kind] = dict(part.safe)
                named = True
        if named:
            return SafeState(settings, "operator limits file (safe:)")
    return SafeState()


@dataclass(frozen=True)
class SafeOutcome:
    """What applying the safe state did on one chamber: the settings applied, and the error if it failed."""

    chamber: str
    applied: dict[str, float]
    error: str | None = None
    reset_first: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"chamber": self.chamber, "applied": self.applied, "error": self.error, "reset_first": self.reset_first}


def check_safe_state(chamber: Any, safe: SafeState) -> None:
    """Validate the safe settings against the connected chamber before any work, so that a typo in them is found
    at the start, not at the exit. InvalidSetting names the setting."""
    for name, value in safe.for_chamber(chamber.layout.chamber).items():
        try:
            chamber.catalogue.validate(name, value)
        except InvalidSetting as exc:
            raise InvalidSetting(name, value, f"{exc.expected} (safe state from {safe.source})") from None


def apply_safe_state(chamber: Any, safe: SafeState) -> SafeOutcome:
    """Best effort, never raises (it runs on exit paths, where the original error matters more): a halted board is
    reset first; a lost link is reconnected by the driver's own back-off."""
    try:
        kind = chamber.layout.chamber
    except ChamberError as exc:
        return SafeOutcome("?", {}, f"{type(exc).__name__}: {exc}")
    settings = safe.for_chamber(kind)
    applied: dict[str, float] = {}
    reset_first = False
    try:
        try:
            applied = chamber.set_many(settings)
        except ChamberHalted:
            reset_first = True
            chamber.reset()
            applied = chamber.set_many(settings)
    except Exception as exc:  # reported in the summary; the exit path goes on to close the port
        log.warning("could not apply the safe state on %s: %s", kind, exc)
        return SafeOutcome(kind, applied, f"{type(exc).__name__}: {exc}", reset_first)
    return SafeOutcome(kind, applied, None, reset_first)


def safe_state_of(chamber: Any) -> SafeState:
    """The safe state a chamber's own limits give (its `safe:` section), else the default: resolve_safe_state on
    the limits the driver kept for this chamber (already this chamber's part of a two-chamber file)."""
    return resolve_safe_state(None, getattr(chamber, "limits", None))


def safe_close(chamber: Any, safe: SafeState | None = None) -> SafeOutcome:
    """Apply the safe state (given, else the chamber's own limits' or the default), then close the chamber."""
    outcome = apply_safe_state(chamber, safe or safe_state_of(chamber))
    try:
        chamber.close()
    except Exception:  # closing is best effort
        log.debug("closing chamber failed", exc_info=True)
    return outcome
