"""The typed variable catalogue of a connected chamber: what may be set, and the check every SET passes first.

Why here and not in callers: the firmware accepts some values it should not (the light tunnel's `red`, the
`hatch`), so the host is the last line of defence. A value is refused here, with what was expected, before a
single byte goes out; operator limits narrow the physical ranges further.
"""

from __future__ import annotations

from dataclasses import dataclass

from chamber.errors import InvalidSetting
from chamber.limits import OperatorLimits, check_controller
from firmware_bridge.setting_rules import SettingRefused, encode_setting
from firmware_bridge.variables import Kind, Layout, Variable


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
        """The float to send (an allowed value's canonical number, else the value as the board's 32-bit float
        will hold it), or InvalidSetting naming what was expected. The text on the wire is `format_value` of it."""
        variable = self.variable(name)
        try:
            number = encode_setting(variable, value).value
        except SettingRefused as exc:
            raise InvalidSetting(name, value, exc.expected) from None
        if variable.kind is Kind.ACTUATOR:
            limit = self.limits.for_variable(name) if self.limits is not None else None
            if limit is not None and not limit.accepts(number):
                raise InvalidSetting(name, value, f"{limit.describe()} (operator limits)")
        return number

    def inputs_after(self, state: dict[str, float], numbers: dict[str, float]) -> dict[str, float]:
        """The inputs (actuators) once the validated `numbers` are set on top of `state`: what check_measurable
        judges (sensor overrides and the flag are not inputs)."""
        return {**state, **{name: value for name, value in numbers.items()
                            if (variable := self.layout.get(name)) is not None and variable.kind is Kind.ACTUATOR}}

    def check_measurable(self, state: dict[str, float]) -> None:
        """Refuse a measurement the pressure controller could spend driving a fan beyond its operator limit
        (ControllerUnbounded, naming the fans to pin); `state` is what the host has set since the last reset."""
        check_controller(self.layout, self.limits, state)
