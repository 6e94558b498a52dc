"""The safe state: the settings every command leaves a chamber in, however it ends.

Why: a protocol ends wherever its last step left the fans, hatch and LEDs; a run stopped with Ctrl-C or by a
lost link ends anywhere. An unattended chamber should not keep its fans at full load or its LEDs lit. The safe
state is applied on every exit path of `run`, `check`, `chamber run/shell/measure` and `serve`.

Applied is not enough: a Ctrl-C that cut an exchange short leaves the board owing a reply or rows, and a SET sent
then is misread or ignored (issue 24). So the exchange in flight is settled first (Chamber.settle), and the safe
state counts as confirmed only when one row read back from the board shows each safe value (`same_float32`);
otherwise the outcome names what may be left running.

Where it comes from, first match wins: a `--safe` settings file, the operator limits file's `safe:` section for
that chamber, else the default below (fans off, LEDs off). A `--safe` file is YAML or JSON by chamber:

    wt: {load_in: 0, load_out: 0, hatch: 0}
    lt: {red: 0, green: 0, blue: 0}
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
