"""Which numbers a YAML or JSON data file may hold: finite ones, within a 64-bit float, integers of a sane length.

Why (issue 31): a NaN compares false with everything, so a NaN bound, gain or offset passes every check after it
and poisons every figure computed from it; Infinity and 1e400 (which a float reads as Infinity) do the same; and a
5,000-digit integer made Python's own int conversion fail with "Exceeds the limit (4300 digits)", naming no file
and no key. The one reader of data files (model_file.py) applies these rules while it parses, so that the file and
the key path can be named before any model, default or limit sees the value:

- JSON: `JsonNumbers` gives json.loads its number hooks; a refused number is left in its place as a marker, and
  after parsing `first_refused` finds the first one in file order with its key path.
- YAML: `yaml_bad_number` walks the composed node tree (before anything is constructed: constructing a key of
  5,000 digits would itself raise) and names the first refused scalar with its key path and line.

NaN and Infinity are allowed where a caller says so (`allow_non_finite`: the seed paper's scoring archives write
bare NaN tokens); a number beyond a float or an over-long integer is refused everywhere.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import yaml

MAX_INTEGER_DIGITS = 40
"""The most decimal digits an integer in a data file may have. Every count, seed (2^64 has 20 digits), port, size
and setting fits with room to spare (2^128 has 39); a longer one is a mistake, and above 4,300 digits Python
itself refuses to convert it (with an error that names no file)."""

FINITE = "a finite number"
WITHIN_FLOAT = "a number within a 64-bit float's range (about ±1.8e308)"
SHORT_INTEGER = f"an integer of at most {MAX_INTEGER_DIGITS} digits"

_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_NON_FINITE = {".nan", "nan", ".inf", "inf", "infinity"}  # YAML's spellings, and what float() reads as NaN/Inf


def shown(text: str) -> str:
    """A number's text as a message quotes it: whole when short, else its ends and its length."""
    return text if len(text) <= 24 else f"{text[:12]}...{text[-8:]} ({len(text)} characters)"


def integer_digits(text: str) -> int:
    """Decimal digits of an integer written in decimal (sign, underscores and leading zeros not counted)."""
    return len(text.lstrip("+-").replace("_", "").lstrip("0") or "0")


class Refused:
    """A number the reader refuses, left in its place while parsing so that the walk after it can name its key."""

    __slots__ = ("got", "expected")

    def __init__(self, got: str, expected: str) -> None:
        self.got, self.expected = got, expected


class JsonNumbers:
    """json.loads's number hooks under these rules; `refused` lists what was refused (empty: the data is clean)."""

    def __init__(self, allow_non_finite: bool = False) -> None:
        self.allow_non_finite = allow_non_finite
        self.refused: list[Refused] = []

    def hooks(self) -> dict[str, Callable[[str], Any]]:
        return {"parse_constant": self._constant, "parse_int": self._integer, "parse_float": self._real}

    def _refuse(self, got: str, expected: str) -> Refused:
        self.refused.append(Refused(got, expected))
        return self.refused[-1]

    def _constant(self, name: str) -> Any:  # NaN, Infinity, -Infinity
        return float(name) if self.allow_non_finite else self._refuse(name, FINITE)

    def _integer(self, text: str) -> Any:
        digits = integer_digits(text)
        return int(text) if digits <= MAX_INTEGER_DIGITS else self._refuse(f"an integer of {digits} digits",
                                                                           SHORT_INTEGER)

    def _real(self, text: str) -> Any:
        value = float(text)
        return self._refuse(shown(text), WITHIN_FLOAT) if math.isinf(value) else value

    @staticmethod
    def first_refused(data: Any) -> tuple[tuple[Any, ...], Refused]:
        """(where, number) of the first refused number in `data`, depth first in file order."""
        stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
        while stack:
            item, where = stack.pop()
            if isinstance(item, Refused):
                return where, item
            children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
            stack.extend(reversed([(child, (*where, k)) for k, child in children]))
        raise AssertionError("a refused number was recorded that is not in the document")


def yaml_number_problem(node: yaml.ScalarNode, allow_non_finite: bool = False) -> tuple[str, str] | None:
    """(expected, got) when a scalar resolved (or tagged) as a number is NaN or Infinity (unless allowed), beyond
    a float, or an integer of more than MAX_INTEGER_DIGITS digits; None for any other scalar."""
    text = str(node.value).strip()
    if node.tag == _INT:
        body = text.lstrip("+-").replace("_", "").lower()
        if body.startswith(("0x", "0b", "0o")):
            digits = int((len(body) - 2) * {"x": 4, "b": 1, "o": 3}[body[1]] * math.log10(2)) + 1
        else:
            digits = integer_digits(text)
        return (SHORT_INTEGER, f"an integer of {digits} digits") if digits > MAX_INTEGER_DIGITS else None
    if node.tag == _FLOAT:
        plain = text.replace("_", "").lower()
        if plain.lstrip("+-") in _NON_FINITE:  # written as NaN or Infinity
            return None if allow_non_finite else (FINITE, text)
        try:
            value = float(plain)
        except ValueError:
            return None  # not a number after all: the constructor says so
        if math.isinf(value):
            return WITHIN_FLOAT, shown(text)
    return None


def yaml_bad_number(root: yaml.Node, allow_non_finite: bool = False
                    ) -> tuple[tuple[Any, ...], int, str, str] | None:
    """(where, line, expected, got) of the first refused number in file order, keys included (a key is named by
    its text: nothing is constructed yet). Each node is visited once, so aliases cost nothing."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            problem = yaml_number_problem(node, allow_non_finite)
            if problem is not None:
                return (loc, node.start_mark.line + 1, *problem)
            continue
        children: list[tuple[yaml.Node, tuple[Any, ...]]] = []
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                name = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
                children += [(key_node, (*loc, shown(name))), (value_node, (*loc, name))]
        elif isinstance(node, yaml.SequenceNode):
            children = [(child, (*loc, i)) for i, child in enumerate(node.value)]
        stack.extend(reversed(children))
    return None
