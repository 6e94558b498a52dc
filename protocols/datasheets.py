"""The parts claims are made about, as data: each part's datasheet identity (revision, SHA-256, public URL) and
which chamber variables carry the part.

Why: the PDFs are the manufacturers' copyright and are never shipped; a claim, a record or a release names its
document by these facts instead, and a fetched or local copy is checked against the SHA-256 before use.
The table lives in package data (protocols/data/datasheets.yaml) so it travels with the package; a user's claim
file may add parts of its own with the same fields (protocols.claims), so a new part needs no code change.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from firmware_bridge.model_file import ModelFileError, parse_data_text, validate_model
from firmware_bridge.variables import LAYOUTS


class DatasheetError(ValueError):
    """The datasheet table is malformed, or a part is unknown."""


class DatasheetFileError(DatasheetError, ModelFileError):
    """A datasheet table that is not valid YAML or whose entries do not validate (the one configuration-file
    error: names the source, the entry, the field, what was expected and what arrived)."""


class UnknownDatasheet(DatasheetError, KeyError):
    """No datasheet identity for the requested part."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class Carrier(BaseModel):
    """One chamber that carries the part, and the chamber variables that read or drive it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chamber: str  # "wt" or "lt", as in firmware_bridge.variables.LAYOUTS
    variables: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _known(self) -> Carrier:
        names = {v.name for (chamber, _), layout in LAYOUTS.items() if chamber == self.chamber for v in layout.variables}
        if not names:
            raise ValueError(f"unknown chamber {self.chamber!r}; known: {sorted({c for c, _ in LAYOUTS})}")
        unknown = [v for v in self.variables if v not in names]
        if unknown:
            raise ValueError(f"chamber {self.chamber} has no variable(s) {unknown}")
        return self


class DatasheetIdentity(BaseModel):
    """One manufacturer datasheet, identified without redistributing it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    part: str = Field(min_length=1)  # "DPS310", "Si115x", "ACS70331", "A4988"
    revision: str = Field(min_length=1)  # as printed in the PDF
    sha256: str  # 64 lowercase hex digits of the exact file
    url: str  # public URL the file can be fetched from
    filename: str  # local file name under the shared datasheets folder
    pages: int = Field(gt=0)
    carried_by: tuple[Carrier, ...] = ()  # empty: no chamber carries the part (claims on it are engagement-only)

    @field_validator("sha256")
    @classmethod
    def _hex64(cls, v: str) -> str:
        v = v.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{64}", v):
            raise ValueError(f"expected 64 hex digits, got {v!r}")
        return v

    @field_validator("url")
    @classmethod
    def _https(cls, v: str) -> str:
        if not v.startswith("https://"):
            raise ValueError(f"expected an https:// URL, got {v!r}")
        return v

    def matches(self, data: bytes) -> bool:
        """Is this byte string exactly the identified document?"""
        return hashlib.sha256(data).hexdigest() == self.sha256

    def verify_file(self, path: Path) -> None:
        """Raise DatasheetError naming both hashes if the file at `path` is not this document."""
        got = sha256_of(path)
        if got != self.sha256:
            raise DatasheetError(f"{path}: SHA-256 {got} does not match {self.part} {self.revision} ({self.sha256})")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_RESOURCE = ("data", "datasheets.yaml")


@lru_cache(maxsize=1)
def _load_packaged() -> tuple[DatasheetIdentity, ...]:
    text = resources.files("protocols").joinpath(*_RESOURCE).read_text(encoding="utf-8")
    return parse_datasheets(text, source="protocols/data/datasheets.yaml")


def parse_datasheets(text: str, source: str = "<string>") -> tuple[DatasheetIdentity, ...]:
    """Parse a datasheet table (YAML with a top-level `datasheets:` list); errors name the source and entry."""
    doc = parse_data_text(text, source=source, error=DatasheetFileError)
    if not isinstance(doc, dict) or not isinstance(doc.get("datasheets"), list):
        raise DatasheetFileError(source, "expected a mapping with a 'datasheets' list")
    out: list[DatasheetIdentity] = []
    for i, entry in enumerate(doc["datasheets"]):
        name = entry.get("part", f"#{i}") if isinstance(entry, dict) else f"#{i}"
        out.append(validate_model(entry, DatasheetIdentity, source=f"{source}: datasheet {name}",
                                  error=DatasheetFileError))
    parts = [d.part for d in out]
    dupes = sorted({p for p in parts if parts.count(p) > 1})
    if dupes:
        raise DatasheetFileError(source, f"duplicate part(s) {dupes}")
    return tuple(out)


def known_datasheets() -> list[DatasheetIdentity]:
    """Every datasheet the project grades claims against, in table order."""
    return list(_load_packaged())


def datasheet_for(part: str, table: tuple[DatasheetIdentity, ...] | None = None) -> DatasheetIdentity:
    """The identity of `part` (case-insensitive, e.g. "dps310") in `table` (default: the packaged parts);
    UnknownDatasheet names the known parts."""
    parts = _load_packaged() if table is None else table
    for d in parts:
        if d.part.lower() == part.strip().lower():
            return d
    known = ", ".join(d.part for d in parts)
    raise UnknownDatasheet(f"no datasheet for part {part!r}; known: {known}")
