"""The datasheet claims the lab grades, as validated pydantic models loaded from the packaged YAML files.

Why: the decision rule, the protocols and the agent's scoring all read the same claims, so one model fixes what a
claim *is* (kind, value or bounds, unit, spec tolerance, operating conditions, where it is printed) and refuses a
malformed file before anything is measured. Numbers are `Decimal` so that a verdict exactly at the boundary is
decided on the digits the datasheet printed, not on a binary float near them.

Conventions the files follow (the decision rule relies on them):
- `typical`: `value` is the printed Typ.; `low`/`high` may carry the printed Min./Max. around it.
- `range`: `low` and `high` are the printed limits (low <= high); `value` may carry a printed Typ. inside them.
- `accuracy`: the claim bounds an *error*; `value` is its nominal (0) and `tolerance` is the printed band
  (e.g. +/-6 Pa -> value 0, tolerance 6, meaning "symmetric_bound").
- `max_rating`: a one-sided limit (a Max. or an absolute maximum rating, "<100 mlx") in `high`; `low` for a
  minimum; both for a rated band (e.g. storage temperature).
- A tolerance with meaning "none" has value 0: the datasheet printed no spread, and none is invented.
- `component` is a part in the parts table (protocols/data/datasheets.yaml, plus the `parts:` a claim file adds);
  a `datasheet_sha256` in a file or claim must equal that part's SHA-256, so a claim written against another
  revision of the document is refused rather than graded against the wrong page.
- A condition maps to a chamber variable (from firmware_bridge.variables) or says why it cannot
  ("unmatchable: <reason>"), and `kind` names what is missing then (stimulus, observable, reference, environment).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from firmware_bridge.model_file import (
    DATA_MAX_BYTES,
    ModelFileError,
    StrictLoader,
    bool_where_number,
    field_path,
    parse_data_text,
    read_text_capped,
)
from firmware_bridge.variables import LAYOUTS

from .datasheets import DatasheetIdentity, UnknownDatasheet, datasheet_for, known_datasheets
from .text import fold

log = logging.getLogger(__name__)

Component = str
"""A part name from the parts table (data, not a fixed list: see protocols.datasheets and a file's `parts:`)."""
ClaimKind = Literal["typical", "range", "accuracy", "max_rating"]

PACKAGED_DIR = "protocols/data/claims"
"""How packaged claim files are named in messages (the files themselves are read through importlib.resources)."""

CLAIM_MAX_BYTES = DATA_MAX_BYTES
"""A claim file larger than this (1 MiB) is refused before it is read: the largest real one is 48 KB (the paper's
claims.yaml, 25 claims with their quotes), the packaged ones 3-15 KB."""

_ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")
_PROTOCOL_RE = re.compile(r"^[a-z0-9_]+\.[a-z0-9_]+$")


# --------------------------------------------------------------------------------------------------- errors
class ClaimError(ValueError):
    """Base class for claim problems."""


class ClaimFileError(ClaimError):
    """A claim file is malformed; the message names the file, the claim id and the field."""

    def __init__(self, file: str, claim_id: str | None, field: str | None, problem: str) -> None:
        self.file = file
        self.claim_id = claim_id
        self.field = field
        self.problem = problem
        parts = [file]
        if claim_id is not None:
            parts.append(f"claim {claim_id}")
        if field is not None:
            parts.append(f"field {field!r}")
        super().__init__(": ".join(parts + [problem]))


class UnknownClaim(ClaimError, KeyError):
    """No claim with this id; the message lists the known ids."""

    def __init__(self, claim_id: str, known: list[str]) -> None:
        self.claim_id = claim_id
        self.known = known
        super().__init__(f"unknown claim id {claim_id!r}; known ids: {', '.join(known)}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def _problem(field: str, detail: str) -> PydanticCustomError:
    """A model-level validation error that still names the field it is about."""
    return PydanticCustomError("claim_consistency", "{detail}", {"field": field, "detail": detail})


# ------------------------------------------------------------------------------------------ chamber variables
@lru_cache(maxsize=1)
def chamber_variable_names() -> frozenset[str]:
    """Every variable name in any chamber layout (the names a condition may map to)."""
    return frozenset(v.name for layout in LAYOUTS.values() for v in layout.variables)


# ----------------------------------------------------------------------------------------------- the models
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tolerance(_Strict):
    """The claim's spec tolerance t and how it enters the combined half-width c = sqrt(u^2 + t^2)."""

    value: Decimal = Field(ge=0)  # in the claim's unit
    meaning: Literal["symmetric_bound", "one_sided_bound", "none"]  # how the datasheet states it
    entry: Literal["as_stated", "rectangular"]  # t as stated, or t/sqrt(3)
    note: str = ""

    @model_validator(mode="after")
    def _none_means_zero(self) -> Tolerance:
        if self.meaning == "none" and self.value != 0:
            raise _problem("value", f"meaning 'none' needs value 0, got {self.value}")
        if self.meaning != "none" and self.value == 0:
            raise _problem("value", f"meaning {self.meaning!r} needs a value > 0")
        return self


class Condition(_Strict):
    """A stated operating condition, and whether (and how) the chamber realises it."""

    name: str = Field(min_length=1)
    value: str = Field(min_length=1)  # as printed, e.g. "VDD= 1.8V and VDDIO=1.8V"
    decisive: bool  # would the claimed value change if this condition were not met?
    variable: str | None = None  # a chamber variable from firmware_bridge.variables
    unmatchable: str | None = None  # why the chamber cannot realise or observe it
    kind: Literal["stimulus", "observable", "reference", "environment"] = "stimulus"
    # Which external lab instrument would realise a condition the chamber alone cannot (chamber.instruments);
    # None when no instrument of the station would.
    instrument: Literal["smu", "reference_barometer", "temperature_controller"] | None = None

    @field_validator("variable")
    @classmethod
    def _known_variable(cls, v: str | None) -> str | None:
        if v is not None and v not in chamber_variable_names():
            known = ", ".join(sorted(chamber_variable_names()))
            raise ValueError(f"unknown chamber variable {v!r}; known: {known}")
        return v

    @model_validator(mode="after")
    def _exactly_one_mapping(self) -> Condition:
        if (self.variable is None) == (self.unmatchable is None):
            raise _problem("variable", "set exactly one of 'variable' and 'unmatchable'")
        if self.unmatchable is not None and not self.unmatchable.strip():
            raise _problem("unmatchable", "empty reason")
        return self

    @property
    def matched(self) -> bool:
        return self.variable is not None


class Source(_Strict):
    """Where the claim is printed: page, the verbatim span (whitespace-normalised) and the fidelity needles."""

    page: int = Field(ge=1)
    span: str = Field(min_length=1)
    needles: list[str] = Field(min_length=1)  # value and unit, each a substring of span
    table: str | None = None  # caption of the table it sits in
    # False for a claim the chamber grades from a sentence that prints no figure of the claim's own (the Noctua
    # white paper's "will stop at 0% duty-cycle"): nothing for an agent to extract, so the agent part skips it.
    prints_figure: bool = True

    @field_validator("span")
    @classmethod
    def _normalised_whitespace(cls, v: str) -> str:
        if v != " ".join(v.split()):
            raise ValueError("span must have normalised whitespace (single spaces, no line breaks)")
        return v

    @model_validator(mode="after")
    def _needles_in_span(self) -> Source:
        missing = [n for n in self.needles if not n or n not in self.span]
        if missing:
            raise _problem("needles", f"needle(s) {missing} do not occur in span {self.span!r}")
        return self


class Claim(_Strict):
    """One quantitative datasheet claim."""

    id: str
    component: Component  # a part in the parts table (validated against it)
    parameter: str = Field(min_length=1)
    kind: ClaimKind
    value: Decimal | None = None
    low: Decimal | None = None
    high: Decimal | None = None
    unit: str = Field(min_length=1)
    tolerance: Tolerance
    conditions: list[Condition]
    source: Source
    datasheet: str  # part key into the parts table
    datasheet_sha256: str | None = None  # when given, must be the part's datasheet SHA-256 (the document written against)
    protocol: str | None = None  # protocol registry key, e.g. "dps310.operating_range"
    instrument_protocol: str | None = None  # protocol used instead when the station has the instruments it needs
    resolution_limited_hint: bool = False
    notes: str = ""
    _identity: DatasheetIdentity | None = PrivateAttr(default=None)

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not _ID_RE.match(v):
            raise ValueError(f"claim id {v!r} must be lowercase words joined by '-', e.g. 'dps310-operating-range'")
        return v

    @field_validator("unit")
    @classmethod
    def _unit_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("unit is blank")
        return v

    @field_validator("component", "datasheet")
    @classmethod
    def _known_part(cls, v: str, info: ValidationInfo) -> str:
        try:
            return datasheet_for(v, _parts_in(info)).part
        except UnknownDatasheet as e:
            raise ValueError(str(e)) from None

    @field_validator("protocol", "instrument_protocol")
    @classmethod
    def _protocol_shape(cls, v: str | None) -> str | None:
        if v is not None and not _PROTOCOL_RE.match(v):
            raise ValueError(f"protocol key {v!r} must look like 'component.name'")
        return v

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Claim:
        prefix = self.component.lower() + "-"
        if not self.id.startswith(prefix):
            raise _problem("id", f"id {self.id!r} of a {self.component} claim must start with {prefix!r}")
        if self.datasheet != self.component:
            raise _problem("datasheet", f"datasheet {self.datasheet!r} is not the {self.component} datasheet")
        identity = datasheet_for(self.datasheet, _parts_in(info))
        if self.datasheet_sha256 is not None and self.datasheet_sha256.strip().lower() != identity.sha256:
            raise _problem("datasheet_sha256", f"SHA-256 {self.datasheet_sha256} is not the {identity.part} "
                           f"{identity.revision} datasheet the parts table names ({identity.sha256})")
        self._identity = identity
        pages = identity.pages
        if self.source.page > pages:
            raise _problem("source.page", f"page {self.source.page} is beyond the {pages}-page datasheet")
        self._check_numbers()
        return self

    def _check_numbers(self) -> None:
        v, lo, hi = self.value, self.low, self.high
        if lo is not None and hi is not None and lo > hi:
            raise _problem("low", f"inverted range: low {lo} > high {hi}")
        if v is not None and lo is not None and v < lo:
            raise _problem("value", f"value {v} is below low {lo}")
        if v is not None and hi is not None and v > hi:
            raise _problem("value", f"value {v} is above high {hi}")
        if self.kind == "typical" and v is None:
            raise _problem("value", "a typical claim needs 'value'")
        if self.kind == "range":
            for name, x in (("low", lo), ("high", hi)):
                if x is None:
                    raise _problem(name, f"a range claim needs both 'low' and 'high'; {name!r} is missing")
        if self.kind == "accuracy":
            if v is None:
                raise _problem("value", "an accuracy claim needs 'value' (the nominal error, usually 0)")
            if self.tolerance.meaning == "none":
                raise _problem("tolerance", "an accuracy claim needs its printed band as a tolerance")
        if self.kind == "max_rating" and lo is None and hi is None:
            raise _problem("high", "a max_rating claim needs 'high' (or 'low' for a minimum rating)")

    # -- conveniences for the decision rule and the reports
    @property
    def identity(self) -> DatasheetIdentity:
        """The datasheet's identity: part, revision, SHA-256, public URL (from the table the claim was checked with)."""
        return self._identity if self._identity is not None else datasheet_for(self.datasheet)

    def decisive_unmatched(self) -> list[Condition]:
        """Decisive conditions the chamber cannot realise (each forces 'inconclusive')."""
        return [c for c in self.conditions if c.decisive and not c.matched]

    def instruments_needed(self) -> list[str]:
        """The instruments named by decisive conditions the chamber alone cannot realise, in file order."""
        return list(dict.fromkeys(c.instrument for c in self.conditions if c.decisive and c.instrument))

    def matched_variables(self) -> list[str]:
        return [c.variable for c in self.conditions if c.variable is not None]


def _parts_in(info: ValidationInfo) -> tuple[DatasheetIdentity, ...] | None:
    """The parts table a claim is validated against: the loader's (packaged + the file's own), else packaged."""
    context = info.context if isinstance(info.context, dict) else None
    return None if context is None else context.get("parts")


# ---------------------------------------------------------------------------------------------- loading
class _DecimalLoader(StrictLoader):
    """The one strict YAML loader (firmware_bridge.model_file: YAML 1.2 booleans and numbers; repeated keys are
    refused by parse_data_text) reading floats as the Decimal of the digits written (0.06 stays 0.06)."""


def _construct_decimal(loader: Any, node: yaml.ScalarNode) -> Any:
    text = str(loader.construct_scalar(node)).replace("_", "")
    try:
        return Decimal(text)
    except InvalidOperation:
        return loader.construct_yaml_float(node)  # .inf, .nan


_DecimalLoader.add_constructor("tag:yaml.org,2002:float", _construct_decimal)


def _loc_to_field(loc: tuple[Any, ...], ctx: dict[str, Any] | None) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(str(item))
    if ctx and "field" in ctx:
        parts.append(str(ctx["field"]))
    return ".".join(parts) or "<claim>"


def _describe(err: dict[str, Any]) -> str:
    if err["type"] == "missing":
        return "missing"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] in ("literal_error", "enum", "string_type", "decimal_parsing", "int_parsing", "bool_parsing"):
        msg += f" (got {err.get('input')!r})"
    return msg


def parse_claim(entry: Any, file: str, defaults: Mapping[str, Any] | None = None,
                parts: tuple[DatasheetIdentity, ...] | None = None,
                known_protocols: Collection[str] | None = None) -> Claim:
    """Validate one claim mapping against `parts` (default: the packaged parts table) and, when given, the
    protocol keys this product declares; ClaimFileError names the file, the claim and the (first) bad field."""
    if not isinstance(entry, dict):
        raise ClaimFileError(file, None, None, f"a claim must be a mapping, got {type(entry).__name__}")
    data = {**(defaults or {}), **entry}
    claim_id = entry.get("id")
    label = str(claim_id) if claim_id is not None else "<no id>"
    booleans = bool_where_number(data, Claim)
    if booleans:  # pydantic would read `page: true` as page 1
        (loc, value), *more = booleans
        also = f" (also: {', '.join(field_path(x) for x, _ in more)})" if more else ""
        raise ClaimFileError(file, label, field_path(loc), f"expected a number, got {str(value).lower()} (a boolean)"
                             f"{also}")
    try:
        claim = Claim.model_validate(data, context={"parts": parts if parts is not None else known_datasheets()})
    except ValidationError as e:
        errors = e.errors()
        first = errors[0]
        field = _loc_to_field(tuple(first["loc"]), first.get("ctx"))
        problem = _describe(first)
        if len(errors) > 1:
            others = ", ".join(_loc_to_field(tuple(x["loc"]), x.get("ctx")) for x in errors[1:])
            problem += f" (also: {others})"
        raise ClaimFileError(file, label, field, problem) from e
    if known_protocols is not None:
        for name in ("protocol", "instrument_protocol"):
            key = getattr(claim, name)
            if key is not None and key not in known_protocols:
                raise ClaimFileError(file, claim.id, name, f"unknown protocol {key!r}; known: {', '.join(sorted(known_protocols))}")
    return claim


def _file_parts(doc: dict[str, Any], file: str) -> tuple[DatasheetIdentity, ...]:
    """The packaged parts plus the parts this file declares (`parts:`, the fields of protocols/data/datasheets.yaml)."""
    packaged = tuple(known_datasheets())
    entries = doc.get("parts") or []
    if not isinstance(entries, list):
        raise ClaimFileError(file, None, "parts", f"expected a list of parts, got {type(entries).__name__}")
    out = list(packaged)
    for i, entry in enumerate(entries):
        try:
            part = DatasheetIdentity.model_validate(entry)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(map(str, err["loc"]))
            raise ClaimFileError(file, None, f"parts[{i}].{where}", str(err["msg"])) from e
        if any(p.part.lower() == part.part.lower() for p in out):
            raise ClaimFileError(file, None, f"parts[{i}].part", f"part {part.part!r} is already in the parts table")
        out.append(part)
    return tuple(out)


def parse_claim_file(text: str, file: str, known_protocols: Collection[str] | None = None) -> list[Claim]:
    """Parse one claim file's text. Top level: optional `component`/`datasheet`/`datasheet_sha256` defaults, the
    `parts` it adds to the parts table, and a `claims` list."""
    try:
        doc = parse_data_text(text, source=file, loader=_DecimalLoader, expected="a mapping with a 'claims' list")
    except ModelFileError as e:  # not YAML, a key given twice, an empty document: model_file's one line
        raise ClaimFileError(file, None, None, e.problem) from None
    if not isinstance(doc, dict):
        raise ClaimFileError(file, None, None, "expected a mapping with a 'claims' list")
    unknown = sorted(set(doc) - {"component", "datasheet", "datasheet_sha256", "parts", "claims", "notes"})
    if unknown:
        raise ClaimFileError(file, None, unknown[0], "unknown top-level key (expected component, datasheet, "
                             "datasheet_sha256, parts, claims, notes)")
    if not isinstance(doc.get("claims"), list) or not doc["claims"]:
        raise ClaimFileError(file, None, "claims", "missing or empty list")
    defaults = {k: doc[k] for k in ("component", "datasheet", "datasheet_sha256") if k in doc}
    parts = _file_parts(doc, file)
    claims = [parse_claim(entry, file, defaults, parts, known_protocols) for entry in doc["claims"]]
    seen: set[str] = set()
    for c in claims:
        if c.id in seen:
            raise ClaimFileError(file, c.id, "id", "duplicate claim id")
        seen.add(c.id)
    return claims


def _packaged_files() -> list[tuple[str, Traversable]]:
    folder = resources.files("protocols").joinpath("data", "claims")
    files = [f for f in folder.iterdir() if f.name.endswith((".yaml", ".yml"))]
    return [(f"{PACKAGED_DIR}/{f.name}", f) for f in sorted(files, key=lambda f: f.name)]


def _files_at(path: Path) -> list[tuple[str, Traversable]]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        if not files:
            raise ClaimFileError(str(path), None, None, "no .yaml claim files in this folder")
        return [(str(p), p) for p in files]
    if not path.exists():
        raise ClaimFileError(str(path), None, None, "no such file or folder")
    return [(str(path), path)]


def _claim_text(name: str, f: Traversable) -> str:
    """A claim file's text; a file on disk is refused above CLAIM_MAX_BYTES before it is read."""
    if not isinstance(f, Path):
        return f.read_text(encoding="utf-8")  # packaged data inside an archive: ours, and small
    try:
        return read_text_capped(f, source=name, max_bytes=CLAIM_MAX_BYTES)
    except ModelFileError as e:
        raise ClaimFileError(name, None, None, e.problem) from None


def load_claims(path_or_dir: str | Path | None = None, *,
                known_protocols: Collection[str] | None = None) -> dict[str, Claim]:
    """All claims from one file, a folder of files, or (None) the packaged files; keyed by id, in file order."""
    return load_claim_sources(None if path_or_dir is None else [path_or_dir], known_protocols=known_protocols)


def load_claim_sources(paths: Sequence[str | Path] | None, *,
                       known_protocols: Collection[str] | None = None) -> dict[str, Claim]:
    """All claims from several files and folders (the `--claims PATH` of every command; None or empty: the
    packaged set). An id found twice, in one file or across them, is refused naming both files."""
    sources = _packaged_files() if not paths else [s for p in paths for s in _files_at(Path(p))]
    out: dict[str, Claim] = {}
    origin: dict[str, str] = {}
    for name, f in sources:
        for claim in parse_claim_file(_claim_text(name, f), name, known_protocols):
            if claim.id in out:
                raise ClaimFileError(name, claim.id, "id", f"duplicate claim id (also in {origin[claim.id]})")
            out[claim.id] = claim
            origin[claim.id] = name
    log.debug("loaded %d claims from %d file(s)", len(out), len(sources))
    return out


def get_claim(claim_id: str, claims: Mapping[str, Claim] | None = None) -> Claim:
    """One claim by id from `claims` (default: the packaged set); UnknownClaim names the known ids."""
    pool = dict(claims) if claims is not None else load_claims()
    if claim_id not in pool:
        raise UnknownClaim(claim_id, list(pool))
    return pool[claim_id]


# ------------------------------------------------------------------------------------- text normalisation
def normalise_text(text: str, *, dashes: bool = True, signs: bool = False) -> str:
    """Text for comparing against a PDF text layer (protocols.text.fold): collapsed whitespace (incl. thin/no-break
    spaces), no soft hyphens; optionally every dash as '-' and the look-alike signs (ºC, μ, Ω) in one spelling."""
    return fold(text, dashes="all" if dashes else "keep", signs=signs)
