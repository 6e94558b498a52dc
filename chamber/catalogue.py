"""The typed variable catalogue of a connected chamber: what may be set, and the check every SET passes first.

Why here and not in callers: the firmware accepts some values it should not (the light tunnel's `red`, the
`hatch`), so the host is the last line of defence. A value is refused here, with what was expected, before a
single byte goes out; operator limits narrow the physical ranges further.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chamber.errors import InvalidSetting
from chamber.limits import OperatorLimits
from firmware_bridge.variables import UNSET, Kind, Layout, Variable


@dataclass(frozen=True)
class VariableCatalogue:
    layout: Layout
    limits: OperatorLimits | None = None

    def settable(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.layout.variables
                     if v.settable and (v.kind is not Kind.BOOKKEEPING or v.name == "flag"))

    def variable(self, name: str) -> Variable:
        variable = self.layout.get(name)
        if variable is None or name not in self.settable():
            known = ", ".join(self.settable())
            raise InvalidSetting(name, name, f"a settable variable of {self.layout.chamber}/{self.layout.config} ({known})")
        return variable

    def validate(self, name: str, value: float | str) -> float:
        """The float to send, or InvalidSetting naming what was expected."""
        variable = self.variable(name)
        number = _as_number(name, value)
        if variable.kind is Kind.SENSOR:
            return number  # an override; -9999 restores the reading
        if name == "flag":
            return number
        if number == UNSET:
            raise InvalidSetting(name, value, f"a value for the input {name} (it cannot be unset with -9999)")
        if not variable.accepts(number):
            raise InvalidSetting(name, value, f"{variable.describe_allowed()} ({variable.unit or 'no unit'})")
        limit = self.limits.for_variable(name) if self.limits is not None else None
        if limit is not None and not limit.accepts(number):
            raise InvalidSetting(name, value, f"{limit.describe()} (operator limits)")
        return number


def _as_number(name: str, value: float | str) -> float:
    if isinstance(value, bool):
        raise InvalidSetting(name, value, "a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidSetting(name, value, "a number") from None
    if not math.isfinite(number):
        raise InvalidSetting(name, value, "a finite number")
    return number
