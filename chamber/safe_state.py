"""The safe state: the settings every command leaves a chamber in, however it ends.

Why: a protocol ends wherever its last step left the fans, hatch and LEDs; a run stopped with Ctrl-C or by a
lost link ends anywhere. An unattended chamber should not keep its fans at full load or its LEDs lit. The safe
state is applied on every exit path of `run`, `check`, `chamber run/shell/measure`, `serve` and the Remote Lab.

Applied is not enough: a Ctrl-C that cut an exchange short leaves the board owing a reply or rows, and a SET sent
then is misread or ignored (issue 24). So the exchange in flight is settled first (Chamber.settle), and the safe
state counts as confirmed only when one row read back from the board shows each safe value (`same_float32`);
otherwise the outcome names what may be left running.

What it is: the chamber's built-in resting state (RESTING: every actuator that moves, sounds, lights or draws power
at its resting value) plus whatever an operator adds. A safe section (a `--safe` file, the limits file's `safe:`,
a lab file's `safe:`) only *adds* settings to it: it cannot change a resting value, so no file can leave a fan on
(issue 31: a `--safe` naming only `lt:` left the wind tunnel's fans at 0.8 and said "nothing to set"). A chamber
a section leaves out keeps its resting state. Every added setting is checked before anything opens: a variable of
that chamber, an actuator the host may set (a "safe" value for a sensor would only fake its reading), a value the
firmware accepts, within the operator limits; and the resting values themselves must be within those limits. A
`--safe` file is YAML or JSON by chamber:

    wt: {pot_2: 0, res_in: 0}
    lt: {diode_ir_1: 2}
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Mapping, Sequence

import numpy as np
from pydantic import AllowInfNan, BaseModel, ConfigDict, Strict, model_validator

from chamber.backend import SETTLE_TIMEOUT_S
from chamber.errors import ChamberError, ChamberHalted, InvalidSetting
from chamber.limits import LimitsFileError, OperatorLimits, read_settings_file
from chamber.stop import signals_deferred
from firmware_bridge.messages import format_value
from firmware_bridge.model_file import validate_model
from firmware_bridge.variables import LAYOUTS, Kind, Variable

log = logging.getLogger(__name__)

RESTING: dict[str, dict[str, float]] = {
    "wt": {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0, "pot_1": 0.0},
    "lt": {"red": 0.0, "green": 0.0, "blue": 0.0,  # all three: an unset colour reaches the LEDs as 241
           **{f"l_{j}{k}": 0.0 for j in (1, 2, 3) for k in (1, 2)},  # the light sensors' own LEDs
           "pol_1": 0.0, "pol_2": 0.0, "camera": 0.0},
}
"""Each chamber's resting state: the actuators that move, sound, light or draw power, at the value the firmware's
own setup() gives them (wt_mk_1.ino / lt_mk_1.ino): both fans off, the hatch home at 0 degrees, potentiometer 1 at 0
(the firmware's white noise on the speaker is off while pot_1 is 0), the LEDs and the light sensors' LEDs off, the
polarizers home, the camera off. Measurement settings (oversampling, references, diode sizes) draw nothing and are
left as they are."""

DEFAULT_SAFE = RESTING
"""The safe state when no file adds to it."""

RESTING_TEXT = "built-in (fans off, hatch home, speaker, LEDs and camera off, polarizers home)"


@dataclass(frozen=True)
class SafeState:
    """Settings by chamber kind, and where they came from (for the summary)."""

    settings: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: DEFAULT_SAFE)
    source: str = RESTING_TEXT

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


def _variable(kind: str, name: str) -> Variable | None:
    """The variable `name` of chamber `kind` in any configuration we know (the config is announced at connect)."""
    return next((v for (k, _), layout in LAYOUTS.items() if k == kind
                 for v in layout.variables if v.name == name), None)


def _refusal(kind: str, name: str, value: float, limits: OperatorLimits | None) -> str | None:
    """Why `name=value` cannot be part of chamber `kind`'s safe state (None: it can)."""
    shown = format_value(value) if math.isfinite(value) else str(value)
    variable = _variable(kind, name)
    if variable is None:
        return (f"{name}: expected an actuator of the {kind} chamber (e.g. {', '.join(RESTING[kind])}), got a "
                "variable it does not have")
    if variable.kind is not Kind.ACTUATOR or not variable.settable:
        return (f"{name}={shown}: {name} is a {variable.kind.value}, expected an actuator (a safe value for a "
                "sensor would only override its reading and make nothing safe)")
    if not variable.accepts(value):
        return f"{name}={shown}: expected {variable.describe_allowed()} (what the firmware accepts)"
    rest = RESTING[kind].get(name)
    if rest is not None and not same_float32(rest, value):
        return (f"{name}={shown}: {name} rests at {format_value(rest)} in the built-in safe state; a safe section "
                "may add settings, not change a resting value")
    part = limits.for_chamber(kind) if limits is not None else None
    rule = part.variables.get(name) if part is not None else None
    if rule is not None and not rule.accepts(value):
        return f"{name}={shown}: outside the operator limit {rule.describe()}"
    return None


def _added(kind: str, section: Mapping[str, float], source: str, limits: OperatorLimits | None) -> dict[str, float]:
    """A safe section's settings for chamber `kind`, each checked (LimitsFileError names `source` and the key)."""
    for name, value in section.items():
        if (why := _refusal(kind, name, float(value), limits)) is not None:
            raise LimitsFileError(source, f"field '{kind}.{name}': {why}")
    return {name: float(value) for name, value in section.items()}


def _check_resting_within(limits: OperatorLimits | None, source: str) -> None:
    """Refuse limits that exclude a resting value: the chamber could then never be made safe."""
    for kind, resting in RESTING.items():
        part = limits.for_chamber(kind) if limits is not None else None
        if part is None:
            continue
        for name, value in resting.items():
            rule = part.variables.get(name)
            if rule is not None and not rule.accepts(value):
                raise LimitsFileError(source, f"field '{kind}.variables.{name}': the limit {rule.describe()} "
                                      f"excludes {name}={format_value(value)}, its value in the safe state; expected "
                                      "limits that let the chamber rest")


def safe_state_from(sections: Mapping[str, Mapping[str, float] | None], source: str,
                    limits: OperatorLimits | None = None, base: SafeState | None = None) -> SafeState:
    """The safe state: `base` (default the resting state) plus `sections` ({kind: {variable: value}}), each setting
    checked against the chamber's variables and `limits`. A setting `base` already holds with another value is
    refused (two files disagreeing). LimitsFileError names `source` and the key at fault."""
    base = base or SafeState(RESTING, RESTING_TEXT)
    settings = {kind: dict(base.settings.get(kind, {})) for kind in RESTING}
    for kind, section in sections.items():
        if section is None:
            continue
        for name, value in _added(kind, section, source, limits).items():
            held = settings[kind].get(name)
            if held is not None and not same_float32(held, value):
                raise LimitsFileError(source, f"field '{kind}.{name}': {format_value(value)}, but {base.source} "
                                      f"sets {name}={format_value(held)}; expected one value")
            settings[kind][name] = value
    named = any(section for section in sections.values())
    return SafeState(settings, f"{base.source} + {source}" if named else base.source)


def parse_safe_state(data: Any, source: str, limits: OperatorLimits | None = None,
                     base: SafeState | None = None) -> SafeState:
    """The safe state from parsed data ({wt: {...}, lt: {...}}) added to `base` (default: the resting state);
    LimitsFileError names `source`, the field, what was expected and got."""
    parsed = validate_model(data, SafeStateFile, source=source, error=LimitsFileError)
    return safe_state_from({"wt": parsed.wt, "lt": parsed.lt}, source, limits, base)


def load_safe_state(path: str | Path, limits: OperatorLimits | None = None, base: SafeState | None = None
                    ) -> SafeState:
    """A --safe file (YAML, or JSON by suffix) added to `base` (default: the resting state); LimitsFileError as
    every settings file words it."""
    return parse_safe_state(read_settings_file(path, "safe-state file"), f"safe-state file {Path(path)}", limits,
                            base)


def _limits_sections(limits: OperatorLimits) -> dict[str, Mapping[str, float] | None]:
    """The limits file's `safe:` sections by chamber. A file naming no chamber applies to whichever is connected:
    its section goes to each chamber that has every variable it names."""
    if limits.chambers:
        return {kind: part.safe for kind in RESTING if (part := limits.for_chamber(kind)) is not None}
    if not limits.safe:
        return {}
    fits = [kind for kind in RESTING if all(_variable(kind, name) is not None for name in limits.safe)]
    return {kind: limits.safe for kind in fits} or {"wt": limits.safe}  # none fits: refused, named for wt


def resolve_safe_state(safe_file: str | Path | None = None, limits: OperatorLimits | None = None) -> SafeState:
    """The resting state, plus the limits file's `safe:` sections, plus the --safe file; all checked before any
    chamber opens (LimitsFileError naming the file and key)."""
    _check_resting_within(limits, "operator limits file")
    safe = SafeState(RESTING, RESTING_TEXT)
    if limits is not None:
        safe = safe_state_from(_limits_sections(limits), "operator limits file (safe:)", limits)
    if safe_file is not None:
        safe = load_safe_state(safe_file, limits, safe)
    return safe


LOCK_WAIT_S = 5.0
"""How long the exit path waits for a command another thread has in flight on the chamber (an API call)."""


@dataclass(frozen=True)
class SafeOutcome:
    """What applying the safe state did on one chamber: the settings applied, the error if it failed, and whether
    the board's own read-back confirms it. `readback`: each actuator as one MSR row reported it after the safe
    settings; `left_running`: for each safe setting not confirmed, the value it may still have (the read-back, else
    the last value the host knows it set; None when neither is known)."""

    chamber: str
    applied: dict[str, float]
    error: str | None = None
    reset_first: bool = False
    confirmed: bool = False
    readback: dict[str, float] = field(default_factory=dict)
    left_running: dict[str, float | None] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """One line: confirmed, or what may still be running and why."""
        if self.confirmed:
            values = ", ".join(f"{n}={format_value(v)}" for n, v in self.applied.items())
            return f"safe state confirmed on {self.chamber}: {values or 'nothing to set'} (read back)"
        parts = [f"{n} may still be {format_value(v)}" if v is not None else f"{n} unknown"
                 for n, v in self.left_running.items()]
        return f"safe state NOT confirmed on {self.chamber}: {', '.join(parts) or 'state unknown'} ({self.error})"

    def to_dict(self) -> dict[str, Any]:
        return {"chamber": self.chamber, "applied": self.applied, "error": self.error, "reset_first": self.reset_first,
                "confirmed": self.confirmed, "left_running": self.left_running,
                "readback": {n: v if math.isfinite(v) else None for n, v in self.readback.items()},  # None: unset
                "text": self.text}


class SafeStateUnconfirmed(ChamberError):
    """Leaving the chambers, the safe state could not be confirmed on at least one of them (its read-back did not
    show the safe values, or it could not be applied): something may be left running. `outcomes`: every chamber's
    SafeOutcome (confirmed or not); `unconfirmed`: those not confirmed. Raised from the error that was already
    propagating (KeyboardInterrupt or any other), never on a clean exit."""

    def __init__(self, outcomes: Sequence[SafeOutcome]):
        self.outcomes = list(outcomes)
        self.unconfirmed = [o for o in self.outcomes if not o.confirmed]
        super().__init__("; ".join(o.text for o in self.unconfirmed) or "safe state not confirmed")


def same_float32(expected: float, reported: float) -> bool:
    """Whether a row's value shows the board applied `expected`. Why this tolerance: the host sends the shortest
    decimal that names float32(expected) (messages.format_value); the firmware parses it with avr-libc strtod into
    its 32-bit float (correctly rounded but for AVR-specific corner cases: one ulp) and the row carries that very
    float32 back. So the two agree within one float32 ulp of the expected value, and any wider gap means the board
    runs a different value. NaN (the firmware's unset, -9999) never matches."""
    if not math.isfinite(reported):
        return False
    want = np.float32(expected)
    return bool(abs(np.float32(reported) - want) <= np.spacing(abs(want)))


def check_safe_state(chamber: Any, safe: SafeState) -> None:
    """Validate the safe settings against the connected chamber before any work, so that a typo in them is found
    at the start, not at the exit. InvalidSetting names the setting."""
    for name, value in safe.for_chamber(chamber.layout.chamber).items():
        try:
            chamber.catalogue.validate(name, value)
        except InvalidSetting as exc:
            raise InvalidSetting(name, value, f"{exc.expected} (safe state from {safe.source})") from None


def apply_safe_state(chamber: Any, safe: SafeState, *, lock_wait: float = LOCK_WAIT_S,
                     settle_timeout: float = SETTLE_TIMEOUT_S) -> SafeOutcome:
    """Settle, set, read back, compare. Best effort, never raises (it runs on exit paths, where the original error
    matters more).

    Holding the chamber (waiting at most `lock_wait` for another thread's command): finish the exchange an
    interrupt cut short (Chamber.settle: within `settle_timeout`, else the board is reset by reopening the port);
    set the safe values (a halted board is reset first); read one row back and compare each safe setting with it
    (`same_float32`). Bounded: the lock wait (5 s), the settle budget (15 s), one reconnection (boot timeout,
    then RST for twice that: 18 s by default) and the SETs' resend budgets (10 resends each); seconds in practice
    (a settled MSR: its rows left at the board's pace)."""
    try:
        kind = chamber.layout.chamber
    except ChamberError as exc:
        return SafeOutcome("?", {}, f"{type(exc).__name__}: {exc}")
    settings = safe.for_chamber(kind)
    applied: dict[str, float] = {}
    readback: dict[str, float] = {}
    reset_first = False
    error: str | None = None
    known = dict(chamber.state())  # what the host last set, should nothing more be learnt
    try:
        with chamber.exclusive(timeout=lock_wait, take_over=True):
            settled = chamber.settle(settle_timeout)
            if settled.how != "idle":
                log.info("%s: the exchange in flight was %s before the safe state", kind,
                         "finished" if settled.how == "finished" else "abandoned: the board was reset")
            known = dict(chamber.state())
            try:
                applied = chamber.set_many(settings)
            except ChamberHalted:
                reset_first = True
                chamber.reset()
                known = {}
                applied = chamber.set_many(settings)
            known.update(chamber.state())
            readback = chamber.read_back()
    except Exception as exc:  # reported in the summary; the exit path goes on to close the port
        error = f"{type(exc).__name__}: {exc}"
        try:
            known.update(chamber.state())
        except Exception:  # the driver's own view, best effort
            pass
    wrong = {n: v for n, v in settings.items() if not (n in readback and same_float32(v, readback[n]))}
    left: dict[str, float | None] = {}
    for name, value in wrong.items():
        last = readback.get(name, known.get(name))
        if last is None or not math.isfinite(last) or not same_float32(value, last):
            left[name] = last if last is not None and math.isfinite(last) else None
    if error is None and wrong:
        seen = {n: "not in the row" if n not in readback else "unset" if not math.isfinite(readback[n])
                else format_value(readback[n]) for n in wrong}
        error = "read back " + ", ".join(f"{n}={v}" for n, v in seen.items()) + ", expected " + ", ".join(
            f"{n}={format_value(v)}" for n, v in wrong.items())
    outcome = SafeOutcome(kind, applied, error, reset_first, confirmed=error is None, readback=readback,
                          left_running=left if error is not None else {})
    if not outcome.confirmed:
        log.warning("%s", outcome.text)
    return outcome


def safe_state_of(chamber: Any) -> SafeState:
    """The safe state a chamber's own limits give (its `safe:` section), else the default: resolve_safe_state on
    the limits the driver kept for this chamber (already this chamber's part of a two-chamber file)."""
    return resolve_safe_state(None, getattr(chamber, "limits", None))


def safe_close(chamber: Any, safe: SafeState | None = None) -> SafeOutcome:
    """Apply the safe state (given, else the chamber's own limits' or the default), then close the chamber."""
    with signals_deferred() as received:  # Ctrl-C / SIGTERM wait until the chamber is safe and closed
        outcome = apply_safe_state(chamber, safe or safe_state_of(chamber))
        try:
            chamber.close(timeout=LOCK_WAIT_S)
        except Exception:  # closing is best effort
            log.debug("closing chamber failed", exc_info=True)
    if received:  # deferred, not dropped: the operator asked to stop
        raise KeyboardInterrupt(received[0])
    return outcome
