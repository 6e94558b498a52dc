"""The datasheet tools' named folds: the search form of a page, of a query, and a readable table cell.

Why: the same value is printed many ways ("–40" with an en dash, "ºC" with an ordinal sign, "µ" and "μ" mixed on one
page, soft hyphens, thin spaces, "com- mands" hyphenated at a line break). A search that compares raw characters
misses them; a table that shows raw characters makes a model read "–40" as a dash and a number. The character rules
live once in protocols/text.py; this module names the options the index and the table reader use.
"""

from __future__ import annotations

import re

from protocols.text import DASHES
from protocols.text import fold as _fold


def map_chars(text: str) -> str:
    """Character-level mapping only (same words, canonical characters, every space character a plain space)."""
    return _fold(text, ligatures=True, symbols=True, spaces="keep")


def fold(text: str) -> str:
    """Canonical search form: mapped characters, joined line-break hyphenation, single spaces, lower case."""
    return _fold(text, ligatures=True, symbols=True, hyphenation=True, case="lower")


def fold_query(text: str) -> str:
    """A query is folded like the text, except hyphens the user typed are kept."""
    return _fold(text, ligatures=True, symbols=True, case="lower")


def clean_cell(text: str) -> str:
    """Readable table-cell text: minus signs as '-', µ/°/Ω unified, invisible characters dropped, one space;
    a dash between words or alone in a cell (meaning "no value") stays as printed, and so do line breaks."""
    return _fold(text, dashes="minus", ligatures=True, spaces="inline")


def is_dash_only(text: str) -> bool:
    """A cell that holds only a dash (en/em dash, hyphen) marks 'no value' in datasheet tables."""
    s = text.strip()
    return bool(s) and all(c in DASHES or c == "-" for c in s)


_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?")


def has_number(text: str) -> bool:
    return bool(_NUMBER.search(map_chars(text)))
