"""The HTTP boundary's pydantic models: request bodies, tool arguments and documented responses.

Why strict models: the caller is an untrusted language model. Every body is a model with `extra="forbid"` and
bounded fields, so a typo or an invented argument is a 422 naming the field (not silently ignored), and no number
reaches the chamber layer unchecked. `jsonable` is the one way results leave the server: Decimals as their
printed digits, NaN/inf as null (JSON has no NaN), numpy scalars as plain numbers.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

ChamberKind = Literal["wt", "lt"]
FiniteNumber = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A JSON number (an integer is fine); strings and booleans are refused rather than coerced."""


def _number_not_bool_or_text(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a whole number, got {type(value).__name__}")
    return value


Count = Annotated[int, BeforeValidator(_number_not_bool_or_text)]
"""A whole number; 10.0 is accepted as 10 (JSON Schema's 'integer'), strings and booleans are refused."""

MAX_SETTINGS = 64
"""How many variables one stage_conditions call may set (a chamber has fewer than 64 inputs)."""
MAX_ROWS = 1000
"""The cap on rows per measure / cross_sensor_check / protocol step (about 2.5 minutes of the real chamber)."""
MAX_SETTLE_ROWS = 1000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------------------------------ sessions
class CreateSession(_Strict):
    claim_id: str = Field(min_length=1, max_length=200, description="id of the datasheet claim, e.g. 'dps310-operating-range'")


class SessionCreated(BaseModel):
    session_id: str
    claim_id: str
    chamber: str | None = Field(description="the chamber the tools use when a call names none")
    connected_chambers: list[str]
    lease_timeout_s: float
    session_idle_s: float = Field(description="a session without a request for this long (and no call in flight) is "
                                              "ended as abandoned and its chambers handed back safe")


class FreezeExtraction(_Strict):
    payload: dict[str, Any] = Field(description="the agent's extraction, frozen as canonical JSON and hashed")


class ExtractionFrozen(BaseModel):
    session_id: str
    sha256: str = Field(description="SHA-256 of the payload's canonical JSON (sorted keys, no spaces, UTF-8)")
    frozen_at: float


class FrozenExtraction(BaseModel):
    session_id: str
    sha256: str
    payload: dict[str, Any]


class SessionStatus(BaseModel):
    session_id: str
    claim_id: str
    chamber: str | None
    frozen: bool
    extraction_sha256: str | None
    ended: bool
    end_reason: str | None
    holds_lease: bool
    outcome: dict[str, Any] | None


class ToolSpecModel(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


# ------------------------------------------------------------------------------------------- tool arguments
class _ToolArgs(_Strict):
    chamber: ChamberKind | None = Field(
        default=None, description="'wt' (wind tunnel) or 'lt' (light tunnel); omit to use the session's chamber")


class DescribeChamberArgs(_ToolArgs):
    pass


class StageConditionsArgs(_ToolArgs):
    settings: dict[Annotated[str, Field(min_length=1, max_length=64)], FiniteNumber] = Field(
        min_length=1, max_length=MAX_SETTINGS,
        description="input variable -> value, e.g. {\"load_in\": 0.5, \"osr_upwind\": 8}. Every value is checked "
                    "against the firmware's allowed values and the operator limits before any is applied; one "
                    "refused value refuses the whole call and nothing is set.")


class MeasureArgs(_ToolArgs):
    n: Count = Field(default=10, ge=1, le=MAX_ROWS, description="number of rows to read (about 7 rows per second on the real chamber)")
    variables: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None, min_length=1, max_length=128,
        description="columns to summarise; omit for every sensor of the chamber")
    statistic: Literal["mean", "median", "raw"] = Field(
        default="mean",
        description="'mean' (with std and standard error s/sqrt(n)), 'median' (standard error ~1.2533 s/sqrt(n)), "
                    "or 'raw' (the mean statistics plus every reading)")


class CrossSensorArgs(_ToolArgs):
    chamber: Literal["wt"] | None = Field(default=None, description="only the wind tunnel 'wt' has redundant barometers")
    n: Count = Field(default=100, ge=2, le=MAX_ROWS, description="rows to read after the settle rows")
    settle_rows: Count = Field(default=0, ge=0, le=MAX_SETTLE_ROWS, description="rows read first and discarded")


class RunProtocolArgs(_Strict):
    rows: Count = Field(default=200, ge=10, le=MAX_ROWS, description="rows per measurement step of the protocol")
    settle_rows: Count = Field(default=20, ge=0, le=MAX_SETTLE_ROWS, description="rows discarded after each staging")


class SubmitOutcomeArgs(_Strict):
    prediction: Literal["pass", "inconclusive", "fail"] = Field(
        description="your own verdict on the claim from what you measured")
    summary: str = Field(min_length=1, max_length=8000, description="what you staged, measured and concluded, and why")
    measured_value: FiniteNumber | None = Field(default=None, description="your best estimate of the claimed quantity")
    uncertainty: FiniteNumber | None = Field(default=None, ge=0, description="its standard uncertainty, same unit")
    unit: str | None = Field(default=None, max_length=64)


# --------------------------------------------------------------------------------------------- conversion
def jsonable(obj: Any) -> Any:
    """A JSON-safe copy: Decimal -> str (the printed digits), NaN/inf -> None, numpy -> Python, tuples -> lists.

    The exact built-in types (what tool results are mostly made of) are dispatched on `type()` first: the
    general isinstance chain below (abstract Mapping checks included) cost more than the chamber call on a
    describe_chamber reply of a few hundred values.
    """
    kind = type(obj)
    if kind is str or kind is int or kind is bool or obj is None:
        return obj
    if kind is float:
        return obj if math.isfinite(obj) else None
    if kind is dict:
        return {k if type(k) is str else str(k): jsonable(v) for k, v in obj.items()}
    if kind is list or kind is tuple:
        return [jsonable(x) for x in obj]
    return _jsonable_other(obj)


def _jsonable_other(obj: Any) -> Any:
    if isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Decimal):
        return str(obj) if obj.is_finite() else None
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, np.ndarray):
        return [jsonable(x) for x in obj.tolist()]
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(x) for x in obj]
    if isinstance(obj, BaseModel):
        return jsonable(obj.model_dump(mode="python"))
    if hasattr(obj, "to_dict"):
        return jsonable(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    return str(obj)


def tool_input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema without pydantic's `title` noise (fewer tokens for the model, same meaning)."""
    return _strip_titles(model.model_json_schema())


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs") and isinstance(value, dict):
                out[key] = {name: _strip_titles(sub) for name, sub in value.items()}  # a property named "title" stays
            else:
                out[key] = _strip_titles(value)
        return out
    if isinstance(node, list):
        return [_strip_titles(x) for x in node]
    return node


class PlannedCall(BaseModel):
    """POST /sessions/{id}/plans/{tool}: what the call would cost, before making it (protocols/api/timing.py)."""

    tool: str
    chambers: list[str] = Field(description="the chambers whose leases the call takes, in the order it takes them")
    planned_s: float = Field(description="planned chamber seconds (rows x row period + setting changes + settles); "
                                         "an estimate (a client adds its margin); 0 for a call that only reads the state")
    row_s: dict[str, float] = Field(description="the seconds per row planned with, per chamber")
    lease_wait_s: float = Field(description="how long the call may also wait for this session's call in flight")
