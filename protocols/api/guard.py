"""The server-side check of every SET an API caller can cause: firmware allowed values AND operator limits.

Why on the server, again: the driver validates too, but the API must not depend on how a chamber object was
opened (with or without limits), and an agent must never be able to reach an actuator outside the lab's safe
range. `SettingGuard.check` validates a whole request before anything is applied and lists every refused entry
(what was sent, what is allowed), so one refused value means nothing at all is sent. The protocol runner calls the
same check before a protocol's SETs (which come from trusted code but must still respect the limits).

A setting is not the only way to move an actuator: in the pressure-control configuration the board's PID drives
every fan the host has not set, up to load 1 whatever the gains. `GuardedChamber` therefore refuses every
measurement (the PID runs only while the board measures) while a fan the controller would drive could leave its
operator limit (chamber.limits.check_controller), for a tool and for run_protocol alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chamber.limits import ControllerUnbounded, check_controller
from firmware_bridge.setting_rules import SettingRefused, encode_setting
from firmware_bridge.variables import Kind, Layout, Variable

from .errors import ApiError


class SettingGuard:
    """The rules for one connected chamber: its layout plus every operator-limits object that applies."""

    def __init__(self, layout: Layout, limits: Iterable[Any] = ()) -> None:
        self.layout = layout
        self.limits = [lim for lim in limits if lim is not None]

    def settable(self) -> list[str]:
        """The variables an API caller may set: the chamber's inputs (never sensor overrides or bookkeeping)."""
        return [v.name for v in self.layout.variables if v.kind is Kind.ACTUATOR]

    def operator_limit(self, name: str) -> str | None:
        """The operator limits on one variable, as text ('0..0.5 (operator limits)'), or None."""
        parts = []
        for lim in self.limits:
            rule = lim.for_variable(name)
            if rule is not None:
                parts.append(rule.describe())
        return " and ".join(parts) if parts else None

    def problem(self, name: str, value: Any, *, inputs_only: bool = True) -> dict[str, Any] | None:
        """Why `name = value` is refused (variable, value, expected), or None when it may be sent."""
        variable: Variable | None = self.layout.get(name)
        if variable is None or variable.kind is Kind.BOOKKEEPING or (inputs_only and variable.kind is not Kind.ACTUATOR):
            return {"variable": name, "value": value, "code": "unknown_variable",
                    "expected": f"an input variable of {self.layout.chamber}/{self.layout.config}: "
                                + ", ".join(self.settable())}
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return {"variable": name, "value": value, "code": "setting_refused", "expected": "a number"}
        try:  # the driver's own rule (firmware allowed values, the board's float, the 64-byte packet)
            number = encode_setting(variable, value).value
        except SettingRefused as exc:
            return {"variable": name, "value": value, "code": "setting_refused", "expected": f"{exc.expected} (firmware)"}
        if variable.kind is Kind.SENSOR:
            return None  # only reachable with inputs_only=False (a protocol's sensor override / restore)
        for lim in self.limits:
            rule = lim.for_variable(name)
            if rule is not None and not rule.accepts(number):
                return {"variable": name, "value": value, "code": "setting_refused",
                        "expected": f"{rule.describe()} (operator limits)"}
        return None

    def check(self, settings: Mapping[str, Any], *, inputs_only: bool = True) -> dict[str, float]:
        """Every setting as a float, or ApiError listing every refused one (nothing may be applied then)."""
        problems = [p for name, value in settings.items() if (p := self.problem(name, value, inputs_only=inputs_only))]
        if problems:
            code = "unknown_variable" if any(p["code"] == "unknown_variable" for p in problems) else "setting_refused"
            lines = "; ".join(f"{p['variable']}={p['value']!r}: expected {p['expected']}" for p in problems)
            raise ApiError(code, f"nothing was set: {len(problems)} of {len(settings)} setting(s) refused on "
                                 f"{self.layout.chamber}: {lines}. Correct them and send the whole request again.",
                           details=[{k: v for k, v in p.items() if k != "code"} for p in problems])
        return {name: float(value) for name, value in settings.items()}

    def check_measurable(self, state: Mapping[str, float]) -> None:
        """ApiError `controller_unbounded` when the pressure controller could drive a fan beyond a limit."""
        try:
            for lim in self.limits:
                check_controller(self.layout, lim, dict(state))
        except ControllerUnbounded as exc:
            raise ApiError("controller_unbounded", f"{self.layout.chamber}: {exc}",
                           details=[{"variable": fan, "expected": f"set explicitly within {rule.describe()} "
                                                                 "(operator limits)"}
                                    for fan, rule in exc.fans.items()]) from None


class GuardedChamber:
    """A connected chamber whose measurements pass `SettingGuard.check_measurable` first; the rest is the chamber."""

    def __init__(self, chamber: Any, guard: SettingGuard) -> None:
        self._chamber, self._guard = chamber, guard

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chamber, name)

    def measure(self, n: int) -> Any:
        self._guard.check_measurable(self._chamber.state())
        return self._chamber.measure(n)
