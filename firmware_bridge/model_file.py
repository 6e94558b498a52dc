"""Read a configuration file (YAML, or JSON by its suffix) into a pydantic model, or say in one line what is wrong.

Why one function: the simulator's parameters, the instrument simulator's parameters, calibration records, operator
limits and safe states, station files, instrument certificates and the datasheet table were each read, parsed,
validated and their errors worded their own way (one named the first field, one pasted pydantic's multi-line text,
one refused a list but not an empty file). `load_model_file(path, Model)` is the one rule: it reads the file, parses
it by suffix, validates it, and on any failure raises ModelFileError naming the file, the field path, what was
expected and what arrived, on one line. A loader that has its own error type passes a subclass of both
(`class RecordFileError(RecordError, ModelFileError)`), so its callers keep catching what they caught and every
file failure is also one ModelFileError.

Why strict (issue 24): YAML and JSON both let a key appear twice and keep the last one, so a limits file saying
`load_in: {max: 0.1}` and later `load_in: {max: 1}` silently allowed 1; an empty file read as "no limits"; pydantic
turns `true` into 1.0 where a number is meant; and a 9 MB file was parsed for minutes before it was refused. So the
reader here refuses, each in one line naming the file and the key: a file larger than its cap (checked with stat()
before a byte is read), a key given twice in one mapping (with both lines), an empty document, a YAML document
whose aliases make it recursive or stand for more than MAX_EXPANDED_VALUES values, and a boolean where the model
wants a number. YAML 1.1's surprising scalars are not resolved: only true/false are booleans (yes, no,
on, off stay text, so `max: yes` is refused as "not a number" rather than read as 1), a leading-zero number is not
octal and 1:30 is not sexagesimal (both stay text), and 1e3 is a float as in YAML 1.2 and JSON.

Why numbers are checked as they are parsed (issue 31): a NaN compares false with everything, so a NaN bound or
gain passes every check after it; and a 5,000-digit integer made Python's own int conversion fail with "Exceeds
the limit (4300 digits)", naming no file. So NaN, Infinity (JSON's tokens, YAML's .nan/.inf), a number beyond a
64-bit float (1e400) and an integer of more than MAX_INTEGER_DIGITS digits are refused here (the rule:
firmware_bridge/data_numbers.py), naming the file and the key path, before any model sees them. A reader whose files carry NaN on purpose (the seed paper's scoring
archives write bare NaN tokens) says so with `allow_non_finite=True`; oversized numbers are refused for all.

Why on this floor: it must sit below every loader that uses it, and the lowest is simulator/params.py (floor 2);
agent/ may not import simulator/ or chamber/ and reads configuration files too (price tables), so the one floor
every folder may import is firmware_bridge/. Nothing here touches the wire: it depends on pydantic and PyYAML only.
"""

from __future__ import annotations

import json
import re
import stat
import types
import typing
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from firmware_bridge.data_numbers import JsonNumbers, yaml_bad_number

M = TypeVar("M", bound=BaseModel)

SETTINGS_MAX_BYTES = 256 * 1024
"""The cap of an operator's settings file (limits, safe state, station, certificate, simulator parameters,
calibration record). The largest real ones are 2-4 KB (the packaged instrument simulator parameters 2.8 KB, a full
simulator parameter file as `sim fit` writes it 3.5 KB); a hand-written settings file is a page. 256 KiB is
seventy times that and bounds the worst case: a 256 KiB limits file of 9,000 variables is read, checked and
refused in about 2 s on a loaded 2-core machine (libyaml's parser, Python's resolver), where the 9 MB limits file
of issue 24 took 175 s and 1.4 GB; a file over the cap is refused by stat() in well under a millisecond."""

DATA_MAX_BYTES = 1 << 20
"""The default cap of any other file read here, and of a claim file: the largest real ones are 0.8 MB (a scoring
archive in /work/shared/paper-archive) and 48 KB (the paper's claim file). A larger data file passes its own cap."""


class ModelFileError(ValueError):
    """A configuration file (or already parsed data) that cannot be read, parsed or validated.

    `source` names the file (with what kind of file it is), `problem` says which field, what was expected and
    what arrived; the message is `"<source>: <problem>"` on one line.
    """

    def __init__(self, source: str, problem: str) -> None:
        self.source, self.problem = str(source), " ".join(str(problem).split())
        super().__init__(f"{self.source}: {self.problem}")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that also derives from an error whose __init__ comes first in its MRO (RuntimeError, say)
        would print `(source, problem)` as a tuple: it gets this class's __init__ unless one of ours is first."""
        super().__init_subclass__(**kwargs)
        owner = next(k for k in cls.__mro__ if "__init__" in k.__dict__)
        if not issubclass(owner, ModelFileError):
            cls.__init__ = ModelFileError.__init__  # type: ignore[method-assign]


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


# ------------------------------------------------------------------------------------------------ reading
def read_text_capped(path: str | Path, *, source: str, error: type[ModelFileError] = ModelFileError,
                     max_bytes: int = DATA_MAX_BYTES) -> str:
    """The UTF-8 text of `path`, refused without reading it when stat() says it is larger than `max_bytes`
    (and, for a file that grows or a device, when more than `max_bytes` arrive)."""
    path = Path(path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise error(source, "cannot read (a folder; expected a file)")
        if info.st_size > max_bytes:
            raise error(source, f"{info.st_size} bytes ({_size(info.st_size)}); expected a file of at most "
                                f"{max_bytes} bytes ({_size(max_bytes)})")
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise error(source, f"more than {max_bytes} bytes; expected a file of at most {max_bytes} bytes "
                                f"({_size(max_bytes)})")
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise error(source, "cannot read (does not exist)") from None
    except UnicodeDecodeError as exc:
        raise error(source, f"expected UTF-8 text, byte {exc.object[exc.start]:#04x} at offset {exc.start} is "
                            "not UTF-8") from None
    except OSError as exc:
        raise error(source, f"cannot read ({exc.strerror or exc})") from None


def read_data_file(path: str | Path, *, what: str = "file", error: type[ModelFileError] = ModelFileError,
                   expected: str = "a mapping", max_bytes: int = DATA_MAX_BYTES, allow_non_finite: bool = False
                   ) -> Any:
    """The parsed content of a YAML or JSON file (JSON when the suffix is .json, YAML otherwise). Raises `error`
    naming `what` and the path when the file is larger than `max_bytes`, cannot be read or parsed, repeats a key,
    holds NaN or Infinity (unless `allow_non_finite`) or an oversized number (naming its key), or is empty
    (`expected` says what it should hold)."""
    path = Path(path)
    source = f"{what} {path}"
    text = read_text_capped(path, source=source, error=error, max_bytes=max_bytes)
    return parse_data_text(text, source=source, json_format=path.suffix.lower() == ".json", error=error,
                           expected=expected, allow_non_finite=allow_non_finite)


def parse_data_text(text: str, *, source: str, json_format: bool = False,
                    error: type[ModelFileError] = ModelFileError, expected: str | None = "a mapping",
                    loader: type[yaml.SafeLoader] | None = None, allow_non_finite: bool = False) -> Any:
    """`text` parsed as JSON or YAML (with `loader`, a StrictLoader subclass); `error(source, ...)` saying where
    the parser stopped, which key is repeated, which key holds NaN/Infinity (unless `allow_non_finite`) or a number
    too large (beyond a 64-bit float, or an integer of more than MAX_INTEGER_DIGITS digits), or (unless `expected`
    is None: then {}) that the document is empty."""
    if json_format:
        data = _parse_json(text, source, error, allow_non_finite)
    else:
        data = _parse_yaml(text, source, error, loader or StrictLoader, allow_non_finite)
    if data is None:
        if expected is None:
            return {}
        raise error(source, f"empty document; expected {expected}")
    return data


def _parse_json(text: str, source: str, error: type[ModelFileError], allow_non_finite: bool = False) -> Any:
    if not text.strip():
        return None
    numbers = JsonNumbers(allow_non_finite)
    repeated: dict[int, str] = {}  # id of an object -> the first key it was given twice (json keeps the last)
    holding: list[dict[str, Any]] = []  # those objects, kept alive so that no other object takes their id

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out and id(out) not in repeated:
                repeated[id(out)] = key
                holding.append(out)
            out[key] = value
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs, **numbers.hooks())
    except json.JSONDecodeError as exc:
        raise error(source, f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise error(source, "not JSON we can read (nested too deeply); expected a document of a few levels") from None
    if repeated:
        loc, key = _first_repeated(data, repeated)
        raise error(source, f"key {field_path((*loc, key))!r} appears more than once; expected each key once in "
                            "an object")
    if numbers.refused:
        loc, number = numbers.first_refused(data)
        raise error(source, f"field {field_path(loc)!r}: expected {number.expected}, got {number.got}")
    return data


def _first_repeated(data: Any, repeated: dict[int, str]) -> tuple[tuple[Any, ...], str]:
    """(where, key) of the first object, depth first in file order, that was given a key twice."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict) and id(item) in repeated:
            return where, repeated[id(item)]
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        stack.extend(reversed([(child, (*where, k)) for k, child in children]))
    raise AssertionError("a repeated key was recorded in an object that is not in the document")


# ------------------------------------------------------------------------------------------------ YAML
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOL, _INT, _FLOAT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_STR = "tag:yaml.org,2002:str"


class StrictLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader (libyaml's when installed) with the YAML 1.2 core schema's booleans and numbers:
    only true/false are booleans; decimal, 0x and 0b integers; floats with a dot or an exponent, .inf, .nan.
    Everything else YAML 1.1 would resolve (yes/no/on/off, 012 as octal, 1:30 as sexagesimal) stays text.
    Repeated keys are refused by `parse_data_text`, which composes the document before constructing it."""

    yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
                               for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


StrictLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
StrictLoader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?0b[01_]+|[-+]?0x[0-9a-fA-F_]+|[-+]?(?:0|[1-9][0-9_]*))$"), list("-+0123456789"))
StrictLoader.add_implicit_resolver(_FLOAT, re.compile(
    r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
    r"|[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))


def _parse_yaml(text: str, source: str, error: type[ModelFileError], loader_class: type,
                allow_non_finite: bool = False) -> Any:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, source, error)
        bad = yaml_bad_number(node, allow_non_finite)  # before any key is constructed: 5,000 digits would raise
        if bad is not None:
            loc, line, expected, got = bad
            raise error(source, f"field {field_path(loc)!r} (line {line}): expected {expected}, got {got}")
        repeated = _yaml_duplicate(loader, node)
        if repeated is not None:
            loc, key, first, again = repeated
            raise error(source, f"key {field_path((*loc, key))!r} appears twice (line {first} and line {again}); "
                                "expected each key once in a mapping")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise error(source, f"not valid YAML ({_one_line(problem)}{where})") from None
    except (ValueError, TypeError, RecursionError) as exc:  # a constructor's own refusal, e.g. a date 2024-13-01
        if isinstance(exc, ModelFileError):
            raise
        raise error(source, f"not valid YAML ({_one_line(exc) or type(exc).__name__})") from None
    finally:
        loader.dispose()


MAX_EXPANDED_VALUES = 1_000_000
"""The most values a YAML document may stand for once its aliases are expanded. A file under its size cap can
still stand for billions of values through nested anchors (`a: &a [1, 1]`, `b: &b [*a, *a]`, ...): the YAML
parser shares them, but validating them visits every one. A settings file at its cap holds about 100,000."""


def _check_expansion(root: yaml.Node, source: str, error: type[ModelFileError]) -> None:
    """Refuse a document whose aliases refer to a node that contains them, or expand it beyond
    MAX_EXPANDED_VALUES (each node's expanded size is counted once, so this costs one pass over the nodes)."""
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        children = _node_children(node)
        if finished:
            open_nodes.discard(id(node))
            size[id(node)] = min(1 + sum(size[id(c)] for c in children), MAX_EXPANDED_VALUES + 1)
            continue
        if id(node) in size:
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise error(source, f"an alias at line {child.start_mark.line + 1} refers to a node that contains it; "
                                    "expected a tree of values")
            if id(child) not in size:
                stack.append((child, False))
    if size[id(root)] > MAX_EXPANDED_VALUES:
        raise error(source, f"its aliases expand it to more than {MAX_EXPANDED_VALUES} values; expected at most "
                            f"{MAX_EXPANDED_VALUES}")


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _yaml_duplicate(loader: Any, root: yaml.Node) -> tuple[tuple[Any, ...], Any, int, int] | None:
    """(where, key, first line, repeated line) of the first key given twice in one mapping, in file order. A key
    is compared as constructed (so `1` and `1.0`, or `1` and `true`, collide as they would in the dict); merge
    keys (`<<`) may be overridden, as YAML says. Each node is visited once, so aliases cost nothing."""
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        children: list[tuple[yaml.Node, tuple[Any, ...]]] = []
        if isinstance(node, yaml.MappingNode):
            keys: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    children.append((value_node, loc))
                    continue
                if not isinstance(key_node, yaml.ScalarNode):
                    children.append((value_node, (*loc, "?")))
                    continue  # a complex key: the constructor refuses it as unhashable
                key = key_node.value if key_node.tag == _STR else loader.construct_object(key_node)
                line = key_node.start_mark.line + 1
                if key in keys:
                    return loc, key if isinstance(key, str) else str(key), keys[key], line
                keys[key] = line
                children.append((value_node, (*loc, key if isinstance(key, str) else str(key))))
        elif isinstance(node, yaml.SequenceNode):
            children = [(child, (*loc, i)) for i, child in enumerate(node.value)]
        stack.extend(reversed(children))
    return None


# ------------------------------------------------------------------------------------------------ validating
def validate_model(data: Any, model: type[M], *, source: str, error: type[ModelFileError] = ModelFileError,
                   context: dict[str, Any] | None = None) -> M:
    """`data` validated as `model`; `error(source, ...)` naming every bad field when it does not fit, and every
    boolean where the model wants a number (pydantic's lax mode would read `true` as 1)."""
    if not isinstance(data, dict):
        raise error(source, f"expected a mapping of {model.__name__} fields at the top level, "
                            f"got {type(data).__name__}")
    booleans = bool_where_number(data, model)
    if booleans:
        raise error(source, describe_booleans(booleans))
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise error(source, describe_validation(exc, model)) from None


def load_model_file(path: str | Path, model: type[M], *, what: str = "file",
                    error: type[ModelFileError] = ModelFileError, context: dict[str, Any] | None = None,
                    expected: str | None = None, max_bytes: int = SETTINGS_MAX_BYTES) -> M:
    """Read `path` (YAML, or JSON by suffix; at most `max_bytes`) and validate it as `model`.

    Raises `error` (ModelFileError or a subclass) as "<what> <path>: <problem>" on one line, where the problem is
    "cannot read (...)", "<size>; expected a file of at most <cap>", "not JSON (...)", "not valid YAML (...)",
    "key 'a.b' appears twice (line 2 and line 4); ...", "empty document; expected <expected>" (default: the
    model's fields), or the fields: "missing field 'a'; unexpected field 'b' (expected one of: x, y); field 'c.d':
    <what was expected> (got <what arrived>)".
    """
    expected = expected or f"a mapping of {model.__name__} fields ({', '.join(_field_names(model))})"
    data = read_data_file(path, what=what, error=error, expected=expected, max_bytes=max_bytes)
    return validate_model(data, model, source=f"{what} {Path(path)}", error=error, context=context)


def bool_where_number(data: Any, model: type[BaseModel]) -> list[tuple[tuple[Any, ...], bool]]:
    """(field location, value) of every boolean in `data` sitting where `model` wants a number (int, float,
    Decimal, a Literal of numbers; not where a bool is one of the choices). Fields the model does not name are
    left to its own validation."""
    out: list[tuple[tuple[Any, ...], bool]] = []
    seen: set[int] = set()
    stack: list[tuple[Any, Any, tuple[Any, ...]]] = [(data, model, ())]
    while stack:
        value, annotation, loc = stack.pop()
        if isinstance(value, bool):
            if _wants_number(annotation):
                out.append((loc, value))
            continue
        if not isinstance(value, (dict, list)) or id(value) in seen:
            continue
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        if isinstance(value, dict):
            key_type = _dict_key_type(annotation)
            out.extend(((*loc, key), key) for key in value if isinstance(key, bool) and _wants_number(key_type))
        uniform = _item_type(annotation)  # a dict's values or a list's items share one annotation: look it up once
        children = [(child, inner, (*loc, key)) for key, child in items if isinstance(child, (bool, dict, list))
                    and (inner := uniform if uniform is not None else _step(annotation, key)) is not None]
        stack.extend(reversed(children))
    return out


def _item_type(annotation: Any) -> Any:
    """The one annotation of every value of a dict / item of a list or homogeneous tuple, else None."""
    annotation = _unwrap_optional(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (list, set, frozenset) and args or origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


def describe_booleans(found: list[tuple[tuple[Any, ...], bool]], most: int = 5) -> str:
    """"field 'a.b': expected a number, got true (a boolean)" for each of `found` (bool_where_number)."""
    parts = [f"field {field_path(loc)!r}: expected a number, got {str(value).lower()} (a boolean)"
             for loc, value in found[:most]]
    return "; ".join(parts) + (f" (+{len(found) - most} more)" if len(found) > most else "")


def refuse_bool(value: Any) -> Any:
    """A pydantic before-validator for a number field whose data a model reshapes before validation (so that
    bool_where_number cannot follow it): a boolean is refused, anything else goes on to the number check."""
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    return value


def _wants_number(annotation: Any) -> bool:
    annotation = _strip_annotated(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        arms = [_strip_annotated(a) for a in typing.get_args(annotation)]
        if any(a in (bool, Any, object) or _literal_has_bool(a) for a in arms):
            return False
        return any(_wants_number(a) for a in arms)
    if origin is typing.Literal:
        values = _literal_values(annotation)
        return not any(isinstance(v, bool) for v in values) and any(isinstance(v, (int, float)) for v in values)
    return isinstance(annotation, type) and annotation is not bool and issubclass(annotation, (int, float, Decimal))


def _dict_key_type(annotation: Any) -> Any:
    annotation = _unwrap_optional(annotation)
    args = typing.get_args(annotation)
    return args[0] if typing.get_origin(annotation) is dict and len(args) == 2 else None


def _literal_values(annotation: Any) -> list[Any]:
    out: list[Any] = []
    for v in typing.get_args(annotation):
        out.extend(v if isinstance(v, tuple) else [v])  # a tuple inside Literal[] stands for its members
    return out


def _literal_has_bool(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not typing.Literal:
        return False
    return any(isinstance(v, bool) for v in _literal_values(annotation))


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


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
            shown = repr(got)
            if isinstance(got, (dict, list)) and len(shown) > 40:
                shown = f"a {'mapping' if isinstance(got, dict) else 'list'} of {len(got)} item(s)"
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
        if not isinstance(item, str):
            return None
        info = annotation.model_fields.get(item) or next(
            (f for f in annotation.model_fields.values() if f.alias == item), None)
        return info.annotation if info is not None else None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is tuple and args and args[-1] is not Ellipsis:
        return args[item] if isinstance(item, int) and 0 <= item < len(args) else None
    if origin in (list, set, frozenset, tuple) and args:
        return args[0]
    return None


def _unwrap_optional(annotation: Any) -> Any:
    """`X | None` -> X; a union of several types -> its first pydantic model, if any; Annotated[X, ...] -> X."""
    annotation = _strip_annotated(annotation)
    while typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            annotation = _strip_annotated(args[0])
            continue
        return next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), annotation)
    return annotation
