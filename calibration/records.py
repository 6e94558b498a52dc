"""Calibration records: a cross-sensor calibration saved as JSON, loaded back, and applied to readings.

Why a file: a verdict made tomorrow must say which calibration corrected its readings, when it was taken and by
which software, and a reader must be able to re-apply it. The record is a pydantic model because it crosses a
boundary (disk); loading anything else fails with an error that names the field. The date is passed in (the
caller owns the clock) and must carry a time zone.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from calibration.cross_sensor import BAROMETERS, CrossSensorCalibration
from firmware_bridge.model_file import ModelFileError, describe_validation, load_model_file
from firmware_bridge.variables import OSR_LEVELS

RECORD_SCHEMA = "chamberlab.calibration/1"


class RecordError(ValueError):
    """A calibration record that cannot be loaded or applied; the message names the offending field."""


class RecordFileError(RecordError, ModelFileError):
    """A calibration record file that cannot be read or is not a record: names the file, the field, what was
    expected and what arrived (the one configuration-file error, firmware_bridge.model_file)."""


class CrossSensorParameters(BaseModel):
    """The calibration's numbers (all in `unit`, Pa by default). Protocols use the between-unit scatter as
    evidence, never the offsets as a correction (protocols/barometer_protocols.py says why); `correct` is for a
    reader re-applying the record to a unit's readings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    unit: str = "Pa"
    osr: Literal[OSR_LEVELS]  # type: ignore[valid-type]  # a tuple inside Literal[] stands for its members
    n: int = Field(ge=2, description="rows per barometer after settling")
    settle_rows: int = Field(ge=0)
    offsets: dict[str, float] = Field(description="unit mean − four-sensor mean; subtract to correct")
    offset_u: dict[str, float] = Field(description="standard uncertainty of each offset")
    offset_dof: dict[str, float | None] = Field(description="effective ν of each offset; null = infinite")
    mean: float = Field(description="four-sensor mean over the window")
    mean_u: float = Field(ge=0, description="s_between/√4")
    mean_dof: float | None = Field(description="3 for four units; null = infinite")
    spread: float = Field(ge=0, description="max − min of the unit means")

    @field_validator("offsets", "offset_u")
    @classmethod
    def _finite(cls, value: dict[str, float]) -> dict[str, float]:
        for key, x in value.items():
            if not math.isfinite(x):
                raise ValueError(f"{key}: expected a finite number, got {x!r}")
        return value

    @model_validator(mode="after")
    def _same_sensors(self) -> "CrossSensorParameters":
        expected = sorted(BAROMETERS)
        for name in ("offsets", "offset_u", "offset_dof"):
            got = sorted(getattr(self, name))
            if got != expected:
                raise ValueError(f"{name}: expected keys {expected}, got {got}")
        return self


class CalibrationRecord(BaseModel):
    """One saved calibration of one chamber."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record_schema: Literal["chamberlab.calibration/1"] = Field(default=RECORD_SCHEMA, alias="schema")
    kind: Literal["cross_sensor"] = "cross_sensor"
    chamber: Literal["wt"]
    config: str
    date: AwareDatetime
    software_version: str
    parameters: CrossSensorParameters
    budgets: dict[str, Any] = Field(default_factory=dict, description="the GUM budgets, for the auditor")

    @property
    def between_unit_std(self) -> float:
        """Sample std of the unit means (ν = k − 1): the record keeps mean_u = s_between/√k, so s_between = mean_u·√k.

        Why a property: a pre-check asks a record and a live calibration the same question (how far apart the
        units are), and the record must not store the same fact twice."""
        return self.parameters.mean_u * math.sqrt(len(self.parameters.offsets))

    # ------------------------------------------------------------------ applying
    def offset(self, name: str) -> float:
        try:
            return self.parameters.offsets[name]
        except KeyError:
            raise RecordError(
                f"calibration record has no offset for {name!r}; it covers {sorted(self.parameters.offsets)}"
            ) from None

    def correct(self, name: str, values: np.ndarray | float) -> np.ndarray | float:
        """Readings of barometer `name` put on the four-sensor-mean scale: value − offset."""
        offset = self.offset(name)
        if np.isscalar(values):
            return float(values) - offset
        return np.asarray(values, dtype=np.float64) - offset


def record_from_calibration(
    calibration: CrossSensorCalibration, *, date: datetime, software_version: str | None = None
) -> CalibrationRecord:
    """Wrap a calibration result in a record; `date` comes from the caller's clock."""

    def dof(x: float) -> float | None:
        return None if math.isinf(x) else x

    params = CrossSensorParameters(
        unit=calibration.unit,
        osr=calibration.osr,
        n=calibration.n,
        settle_rows=calibration.settle_rows,
        offsets=dict(calibration.offsets),
        offset_u=calibration.offset_u,
        offset_dof={k: dof(v) for k, v in calibration.offset_dof.items()},
        mean=calibration.mean,
        mean_u=calibration.mean_u,
        mean_dof=dof(calibration.mean_dof),
        spread=calibration.spread,
    )
    try:
        return CalibrationRecord(
            chamber=calibration.chamber,
            config=calibration.config,
            date=date,
            software_version=software_version or _installed_version(),
            parameters=params,
            budgets={
                "mean": calibration.mean_budget.to_dict(),
                "offsets": {k: b.to_dict() for k, b in calibration.offset_budgets.items()},
            },
        )
    except ValidationError as exc:
        raise RecordError(f"calibration record: {describe_validation(exc, CalibrationRecord)}") from None


def save_record(record: CalibrationRecord, path: Path) -> Path:
    """Write the record as indented JSON (by alias, so the file says `"schema": ...`); returns the path."""
    path = Path(path)
    path.write_text(record.model_dump_json(by_alias=True, indent=2) + "\n", encoding="utf-8")
    return path


def load_record(path: Path) -> CalibrationRecord:
    """Read a record; a missing file, non-JSON or a wrong file raises RecordFileError naming the file and field."""
    return load_model_file(path, CalibrationRecord, what="calibration record", error=RecordFileError)


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("chamberlab")
    except PackageNotFoundError:  # pragma: no cover - the project is installed editable
        return "unknown"
