"""The operator limits file: what an operator allows to be set on this chamber, narrower than the firmware.

Why a file, validated: the lab decides (for example) that the hatch only moves 0–45° and the fan loads stay in
0–1, and the driver must enforce it on every path, not rely on callers. YAML or JSON, e.g.

    chamber: wt
    variables:
      hatch: {min: 0, max: 45}
      load_in: {min: 0, max: 1}
      osr_upwind: {allowed: [1, 8]}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from chamber.errors import LimitsError
from firmware_bridge.variables import Kind, Layout


class VariableLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min: float | None = None
    max: float | None = None
    allowed: tuple[float, ...] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "VariableLimit":
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.allowed is not None and not self.allowed:
            raise ValueError("allowed must list at least one value")
        return self

    def accepts(self, value: float) -> bool:
        if self.allowed is not None and not any(abs(value - a) < 1e-9 for a in self.allowed):
            return False
        if self.min is not None and value < self.min:
            return False
        if self.max is not None and value > self.max:
            return False
        return True

    def describe(self) -> str:
        parts = []
        if self.allowed is not None:
            parts.append("one of " + ", ".join(f"{a:g}" for a in self.allowed))
        if self.min is not None or self.max is not None:
            low = f"{self.min:g}" if self.min is not None else "-inf"
            high = f"{self.max:g}" if self.max is not None else "inf"
            parts.append(f"{low}..{high}")
        return " and ".join(parts) or "any value"


class OperatorLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    chamber: Literal["wt", "lt"] | None = None
    variables: dict[str, VariableLimit] = {}

    def for_variable(self, name: str) -> VariableLimit | None:
        return self.variables.get(name)

    def check_against(self, layout: Layout) -> None:
        """Refuse limits for a different chamber or for variables the board does not let the host set."""
        if self.chamber is not None and self.chamber != layout.chamber:
            raise LimitsError(f"limits are for chamber {self.chamber!r}, but the board is {layout.chamber!r}")
        for name in self.variables:
            variable = layout.get(name)
            if variable is None or (variable.kind is Kind.BOOKKEEPING and name != "flag"):
                raise LimitsError(f"limits name {name!r}, expected a settable variable of {layout.chamber}/{layout.config}")


def parse_limits(data: Any, source: str = "limits") -> OperatorLimits:
    try:
        return OperatorLimits.model_validate(data)
    except ValidationError as exc:
        raise LimitsError(f"{source}: {exc}") from exc


def load_limits(path: str | Path) -> OperatorLimits:
    """Read a YAML or JSON limits file (by suffix; YAML otherwise)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise LimitsError(f"{path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {exc}") from exc
    return parse_limits(data or {}, str(path))


def as_limits(limits: OperatorLimits | dict | str | Path | None) -> OperatorLimits | None:
    """Accept a model, a plain dict, or a path."""
    if limits is None or isinstance(limits, OperatorLimits):
        return limits
    if isinstance(limits, dict):
        return parse_limits(limits)
    return load_limits(limits)
