"""Read a configuration file (YAML, or JSON by its suffix) into a pydantic model, or say in one line what is wrong.

Why one function: the simulator's parameters, the instrument simulator's parameters, calibration records, operator
limits and safe states, station files, instrument certificates and the datasheet table were each read, parsed,
validated and their errors worded their own way (one named the first field, one pasted pydantic's multi-line text,
one refused a list but not an empty file). `load_model_file(path, Model)` is the one rule: it reads the file, parses
it by suffix, validates it, and on any failure raises ModelFileError naming the file, the field path, what was
expected and what arrived, on one line. A loader that has its own error type passes a subclass of both
(`class RecordFileError(RecordError, ModelFileError)`), so its callers keep catching what they caught and every
file failure is also one ModelFileError.

Why on this floor: it must sit below every loader that uses it, and the lowest is simulator/params.py (floor 2);
agent/ may not import simulator/ or chamber/ and reads configuration files too (price tables), so the one floor
every folder may import is firmware_bridge/. Nothing here touches the wire: it depends on pydantic and PyYAML only.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ModelFileError(ValueError):
    """A configuration file (or already parsed data) that cannot be read, parsed or validated.

    `source` names the file (with what kind of file it is), `problem` says which field, what was expected and
    what arrived; the message is `"<source>: <problem>"` on one line.
    """

    def __init__(self, source: str, problem: str) -> None:
        self.source, self.problem = str(source), " ".join(str(problem).split())
        super().__init__(f"{self.source}: {self.problem}")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def read_data_file(path: str | Path, *, what: str = "file", error: type[ModelFileError] = ModelFileError) -> Any:
    """The parsed content of a YAML or JSON file (JSON when the suffix is .json, YAML otherwise); an empty YAML
    file is {}. Raises `error` naming `what` and the path when the file cannot be read or parsed."""
    path = Path(path)
    source = f"{what} {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(source, "cannot read (does not exist)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(source, f"cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    return parse_data_text(text, source=source, json_format=path.suffix.lower() == ".json", error=error)


def parse_data_text(text: str, *, source: str, json_format: bool = False,
                    error: type[ModelFileError] = ModelFileError) -> Any:
    """`text` parsed as JSON or YAML; `error(source, ...)` saying where the parser stopped when it is neither."""
    if json_format:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise error(source, f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise error(source, f"not valid YAML ({_one_line(problem)}{where})") from None
    return {} if data is None else data


def validate_model(data: Any, model: type[M], *, source: str, error: type[ModelFileError] = ModelFileError,
                   context: dict[str, Any] | None = None) -> M:
    """`data` validated as `model`; `error(source, ...)` naming every bad field when it does not fit."""
    if not isinstance(data, dict):
        raise error(source, f"expected a mapping of {model.__name__} fields at the top level, "
                            f"got {type(data).__name__}")
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise error(source, describe_validation(exc, model)) from None


def load_model_file(path: str | Path, model: type[M], *, what: str = "file",
                    error: type[ModelFileError] = ModelFileError, context: dict[str, Any] | None = None) -> M:
    """Read `path` (YAML, or JSON by suffix) and validate it as `model`.

    Raises `error` (ModelFileError or a subclass) as "<what> <path>: <problem>" on one line, where the problem is
    "cannot read (...)", "not JSON (...)", "not valid YAML (...)", or the fields: "missing field 'a'; unexpected
    field 'b' (expected one of: x, y); field 'c.d': <what was expected> (got <what arrived>)".
    """
    data = read_data_file(path, what=what, error=error)
    return validate_model(data, model, source=f"{what} {Path(path)}", error=error, context=context)


# ------------------------------------------------------------------------------------------------- wording
def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """pydantic's location as a field path: ('rails', 0, 'instrument') -> 'rails[0].instrument'."""
    out = ""
    for item in loc:
        if isinstance(item, int):
            out += f"[{item}]"
        else:
            out += ("." if out else "") + str(item)
    return out or "(top level)"


def describe_validation(exc: ValidationError, model: type[BaseModel] | None = None, most: int = 5) -> str:
    """Missing and unexpected fields named in two lists, every other problem as "field <path>: <expected> (got
    <input>)"; with `model`, an unexpected field also lists the fields expected where it sits."""
    missing, other = [], []
    unexpected: dict[tuple[Any, ...], list[str]] = {}  # by the mapping they sit in, which says what it expects
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = field_path(loc)
        if err["type"] == "missing":
            missing.append(f"field {field!r}")
        elif err["type"] == "extra_forbidden":
            unexpected.setdefault(loc[:-1], []).append(f"field {field!r}")
        else:
            got = err.get("input")
            shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
            if len(shown) > 60:
                shown = shown[:57] + "..."
            msg = str(err["msg"]).removeprefix("Value error, ")
            other.append(f"field {field!r}: {msg} (got {shown})" if loc else msg)  # a model-wide check names its own
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    if unexpected:
        groups = []
        for parent, fields in unexpected.items():
            known = _fields_at(model, parent) if model is not None else None
            groups.append(", ".join(fields) + (f" (expected one of: {', '.join(known)})" if known else ""))
        parts.append("unexpected " + ", ".join(groups))
    parts += other[:most]
    if len(other) > most:
        parts.append(f"(+{len(other) - most} more)")
    return _one_line("; ".join(parts))


def _fields_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str] | None:
    """The field names (aliases where set) of the model reached by following `loc` from `model`, if one is."""
    annotation: Any = model
    for item in loc:
        annotation = _step(annotation, item)
        if annotation is None:
            return None
    annotation = _unwrap_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [f.alias or name for name, f in annotation.model_fields.items()]
    return None


def _step(annotation: Any, item: Any) -> Any:
    """The annotation of `item` inside a value annotated `annotation` (a model's field, a dict's value, a list's
    item), or None when it cannot be followed."""
    annotation = _unwrap_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        info = annotation.model_fields.get(str(item)) or next(
            (f for f in annotation.model_fields.values() if f.alias == item), None)
        return info.annotation if info is not None else None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (list, set, frozenset, tuple) and args:
        return args[0]
    return None


def _unwrap_optional(annotation: Any) -> Any:
    """`X | None` -> X; a union of several types -> its first pydantic model, if any."""
    while typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            annotation = args[0]
            continue
        return next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), annotation)
    return annotation
