"""Calibration certificates of the station's instruments, read from YAML files, giving standard uncertainties.

Why a file per instrument: the uncertainty a reference contributes to a verdict belongs to the calibrated unit
(its certificate: an expanded U with its k, or a ±(gain·reading + offset) accuracy specification per range),
and an auditor must be able to find where each number came from. This module turns a certificate into plain
numbers (u, ν, basis); the budget layer above (calibration/) turns them into budget components.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from firmware_bridge.model_file import SETTINGS_MAX_BYTES, ModelFileError, read_data_file, validate_model


class CertificateError(ValueError):
    """A certificate file that is missing, malformed, or lacks the quantity asked for (names which)."""


class CertificateFileError(CertificateError, ModelFileError):
    """A certificate file that cannot be read or does not validate (the one configuration-file error)."""


class AccuracyRow(BaseModel):
    """±(gain·|reading| + offset) on ranges up to `range_max` (a manufacturer-style accuracy line)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    range_max: float = Field(gt=0)
    gain: float = Field(ge=0)
    offset: float = Field(ge=0)


class CertifiedQuantity(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    unit: str
    expanded_uncertainty: float | None = Field(default=None, ge=0)
    coverage_factor: float | None = Field(default=None, gt=0)
    dof: float | None = Field(default=None, gt=0)  # None: not stated (taken as infinite)
    accuracy: list[AccuracyRow] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_form(self) -> "CertifiedQuantity":
        has_u = self.expanded_uncertainty is not None
        if has_u == bool(self.accuracy):
            raise ValueError("give either expanded_uncertainty (with coverage_factor) or accuracy rows, not both")
        if has_u and self.coverage_factor is None:
            raise ValueError("expanded_uncertainty needs its coverage_factor")
        return self


class Certificate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    instrument: str
    serial: str
    certificate_number: str
    laboratory: str
    issued: date
    valid_until: date | None = None
    quantities: dict[str, CertifiedQuantity]
    source: str = ""  # the file it was read from (filled by load_certificate)

    def require(self, quantity: str) -> CertifiedQuantity:
        if quantity not in self.quantities:
            raise CertificateError(f"certificate {self.certificate_number} ({self.source or 'in memory'}) has no "
                                   f"{quantity!r}; it certifies: {', '.join(sorted(self.quantities))}")
        return self.quantities[quantity]

    def standard_uncertainty(self, quantity: str, reading: float) -> "CertifiedUncertainty":
        """u of one reading of `quantity`: U/k, or the accuracy line of the smallest range holding it, /√3."""
        q = self.require(quantity)
        where = f"certificate {self.certificate_number} ({self.laboratory}, {self.issued})"
        if q.expanded_uncertainty is not None:
            assert q.coverage_factor is not None
            return CertifiedUncertainty(q.expanded_uncertainty / q.coverage_factor,
                                        math.inf if q.dof is None else q.dof, "B",
                                        f"{where}: U = {q.expanded_uncertainty:g} {q.unit} at k = {q.coverage_factor:g}",
                                        q.unit, "normal")
        size = abs(reading)
        rows = sorted(q.accuracy, key=lambda r: r.range_max)
        row = next((r for r in rows if size <= r.range_max), None)
        if row is None:
            raise CertificateError(f"{where}: reading {reading:g} {q.unit} is beyond the largest certified range "
                                   f"{rows[-1].range_max:g} {q.unit}")
        half_width = row.gain * size + row.offset
        return CertifiedUncertainty(half_width / math.sqrt(3.0), math.inf, "B",
                                    f"{where}: ±({row.gain:g}·|reading| + {row.offset:g} {q.unit}) on the "
                                    f"{row.range_max:g} {q.unit} range, rectangular, u = a/√3",
                                    q.unit, "rectangular", half_width)


@dataclass(frozen=True)
class CertifiedUncertainty:
    u: float
    dof: float
    evaluation: str
    basis: str
    unit: str
    distribution: str
    half_width: float | None = None


def load_certificate(path: str | Path) -> Certificate:
    """A certificate file (YAML); CertificateFileError names the file, the field, what was expected and arrived."""
    p = Path(path)
    data = read_data_file(p, what="certificate file", error=CertificateFileError, max_bytes=SETTINGS_MAX_BYTES,
                          expected="a mapping with instrument, serial, certificate_number, laboratory, issued and "
                                   "quantities")
    if isinstance(data, dict):
        data = {**data, "source": str(p)}
    return validate_model(data, Certificate, source=f"certificate file {p}", error=CertificateFileError)
