"""Identity of the datasheets the claims are graded against (part, revision, SHA-256, public URL).

Why: the PDFs are the manufacturers' copyright and are never shipped; a claim, a record or a release names its
document by these facts instead, and a fetched or local copy is checked against the SHA-256 before use.
The table lives in package data (protocols/data/datasheets.yaml) so it travels with the package.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class DatasheetError(ValueError):
    """The datasheet table is malformed, or a part is unknown."""


class UnknownDatasheet(DatasheetError, KeyError):
    """No datasheet identity for the requested part."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DatasheetIdentity(BaseModel):
    """One manufacturer datasheet, identified without redistributing it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    part: str = Field(min_length=1)  # "DPS310", "Si115x", "ACS70331", "A4988"
    revision: str = Field(min_length=1)  # as printed in the PDF
    sha256: str  # 64 lowercase hex digits of the exact file
    url: str  # public URL the file can be fetched from
    filename: str  # local file name under the shared datasheets folder
    pages: int = Field(gt=0)

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
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DatasheetError(f"{source}: not valid YAML: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("datasheets"), list):
        raise DatasheetError(f"{source}: expected a mapping with a 'datasheets' list")
    out: list[DatasheetIdentity] = []
    for i, entry in enumerate(doc["datasheets"]):
        try:
            out.append(DatasheetIdentity.model_validate(entry))
        except ValidationError as e:
            name = entry.get("part", f"#{i}") if isinstance(entry, dict) else f"#{i}"
            fields = "; ".join(f"field {'.'.join(map(str, err['loc']))!r}: {err['msg']}" for err in e.errors())
            raise DatasheetError(f"{source}: datasheet {name}: {fields}") from e
    parts = [d.part for d in out]
    dupes = sorted({p for p in parts if parts.count(p) > 1})
    if dupes:
        raise DatasheetError(f"{source}: duplicate part(s) {dupes}")
    return tuple(out)


def known_datasheets() -> list[DatasheetIdentity]:
    """Every datasheet the project grades claims against, in table order."""
    return list(_load_packaged())


def datasheet_for(part: str) -> DatasheetIdentity:
    """The identity of `part` (case-insensitive, e.g. "dps310"); UnknownDatasheet names the known parts."""
    for d in _load_packaged():
        if d.part.lower() == part.strip().lower():
            return d
    known = ", ".join(d.part for d in _load_packaged())
    raise UnknownDatasheet(f"no datasheet for part {part!r}; known: {known}")
