"""Preparing a chamber for the next experiment: put back its standard settings and read them back, instead of a
board reset, when the previous experiment ended with its safe state confirmed.

Why: a reset costs the board's reboot and announcement, and the hatch or polarizers travelling home; on a
real-pace board the reset and safe state took 2.4 s before an experiment of 2.5 s chamber time. What a reset
gives the next experiment is a known state, and that can be had for less: the settings the chamber had right
after its last reset and safe state (its *standard*, read back from the board itself: every actuator and the
flag) are set again wherever the host set something else since (the driver records every accepted SET), each
sensor override is lifted (SET to -9999), and one row read back must show every actuator and the flag exactly
as in the standard, and no override left. Anything else, and the board is reset as before.

When a reset is still the rule: the chamber's lab entry says `prepare: reset`; no standard is known yet; the
previous experiment did not end with its safe state read back, or the link was re-established during it (the
board may have rebooted); an actuator that was unset after the reset was set since (the firmware cannot unset an
input: er42); the read-back differs. The counter is not a setting: it goes on counting instead of starting at 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from chamber.errors import ChamberError, InvalidSetting
from chamber.safe_state import same_float32
from firmware_bridge.error_text import exception_line
from firmware_bridge.errors import BridgeError
from firmware_bridge.variables import UNSET, Kind


@dataclass(frozen=True)
class Standard:
    """A chamber's settings right after a reset and its safe state, as one row read back showed them."""

    values: dict[str, float]  # every actuator and the flag (NaN: unset)


@dataclass(frozen=True)
class Restored:
    ok: bool
    why: str  # what was done, or why a reset is needed
    sent: dict[str, float]


def _compared(layout: Any) -> list[str]:
    return ["flag"] + [v.name for v in layout.variables if v.kind is Kind.ACTUATOR]


def read_standard(chamber: Any) -> Standard:
    """One row from the board (just reset and made safe): its actuators and flag are the standard."""
    frame = chamber.measure(1)
    row = {name: float(frame.values[0][i]) for i, name in enumerate(frame.names)}
    return Standard({name: row[name] for name in _compared(chamber.layout) if name in row})


def _same(expected: float, seen: float) -> bool:
    if math.isnan(expected):
        return math.isnan(seen)
    return same_float32(expected, seen)


def restore_standard(chamber: Any, standard: Standard) -> Restored:
    """Set back what differs from `standard`, lift sensor overrides, read one row back and compare. Never raises
    for the chamber's faults: a Restored that is not ok says why (the caller then resets)."""
    layout = chamber.layout
    settings: dict[str, float] = {}
    for name, value in chamber.applied().items():
        variable = layout.get(name)
        if variable is None:
            return Restored(False, f"{name} is not a variable of this chamber", {})
        if variable.kind is Kind.SENSOR:
            if value != UNSET:
                settings[name] = UNSET
            continue
        target = standard.values.get(name)
        if target is None:
            return Restored(False, f"{name} has no standard value", {})
        if math.isnan(target):
            return Restored(False, f"{name} was unset after the reset and has been set since", {})
        if not same_float32(target, value):
            settings[name] = target
    try:
        chamber.set_many(settings)
        frame = chamber.measure(1)
    except (InvalidSetting, ChamberError, BridgeError, OSError) as exc:
        return Restored(False, f"{type(exc).__name__}: {exception_line(exc)}", settings)
    row = {name: float(frame.values[0][i]) for i, name in enumerate(frame.names)}
    wrong = [name for name, value in standard.values.items() if name in row and not _same(value, row[name])]
    overridden = [name for name, value in chamber.applied().items() if (variable := layout.get(name)) is not None
                  and variable.kind is Kind.SENSOR and value != UNSET]
    if wrong or overridden:
        shown = ", ".join(f"{n}={row[n]:g} (standard {standard.values[n]:g})" for n in wrong[:4])
        left = f"; overrides left on {', '.join(overridden)}" if overridden else ""
        return Restored(False, f"read back {shown}{left}", settings)
    return Restored(True, f"standard settings restored ({len(settings)} set) and read back", settings)
