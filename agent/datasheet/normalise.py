"""Text folding for datasheet text: one place that knows the typographic traps of manufacturer PDFs.

Why: the same value is printed many ways ("–40" with an en dash, "ºC" with an ordinal sign, "µ" and "μ" mixed on one
page, soft hyphens, thin spaces, "com- mands" hyphenated at a line break). A search that compares raw characters
misses them; a table that shows raw characters makes a model read "–40" as a dash and a number. `fold` maps text to
a canonical search form; `clean_cell` makes a table cell readable without changing what it says.
"""

from __future__ import annotations

import re

# Characters that print as a minus or a hyphen.
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
# Characters that are spaces of some width (thin, narrow no-break, en/em spaces, no-break space).
_SPACES = "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000\t"

_CHAR_MAP: dict[int, str] = {}
for _c in _DASHES:
    _CHAR_MAP[ord(_c)] = "-"
for _c in _SPACES:
    _CHAR_MAP[ord(_c)] = " "
_CHAR_MAP.update(
    {
        0x00AD: "",  # soft hyphen
        0x200B: "",  # zero-width space
        0x200C: "",
        0x200D: "",
        0xFEFF: "",
        0x0305: "",  # combining overline (pin names such as RESET with a bar)
        0x203E: "",  # overline character
        0x03BC: "\u00b5",  # Greek mu -> micro sign
        0x00BA: "\u00b0",  # masculine ordinal printed as a degree sign ("ºC")
        0x02DA: "\u00b0",  # ring above used as degree
        0xF0B0: "\u00b0",  # Symbol-font degree in the private-use area
        0xF057: "\u03a9",  # Symbol-font Omega in the private-use area
        0x2126: "\u03a9",  # Ohm sign -> Greek capital omega
        0xFB00: "ff",
        0xFB01: "fi",
        0xFB02: "fl",
        0xFB03: "ffi",
        0xFB04: "ffl",
        0xFB05: "st",
        0xFB06: "st",
        0x2018: "'",
        0x2019: "'",
        0x201C: '"',
        0x201D: '"',
        0x2032: "'",
        0x00B1: "+/-",  # "±" and "+/-" are both printed; fold to one spelling
        0x2264: "<=",
        0x2265: ">=",
        0x00D7: "x",
        0x2022: " ",  # bullets
        0x25CF: " ",
    }
)

_WS = re.compile(r"\s+")
# "com- mands" / "com-\nmands": a hyphen at the end of a line followed by a lower-case continuation.
_HYPHEN_BREAK = re.compile(r"([a-z])- *\n *([a-z])")
_HYPHEN_SPACE = re.compile(r"([a-z])- ([a-z])")


def map_chars(text: str) -> str:
    """Character-level mapping only (same words, canonical characters)."""
    return text.translate(_CHAR_MAP)


def fold(text: str) -> str:
    """Canonical search form: mapped characters, joined line-break hyphenation, single spaces, lower case."""
    t = map_chars(text)
    t = _HYPHEN_BREAK.sub(r"\1\2", t)
    t = _HYPHEN_SPACE.sub(r"\1\2", t)
    t = _WS.sub(" ", t)
    return t.strip().lower()


def fold_query(text: str) -> str:
    """A query is folded like the text, except hyphens the user typed are kept."""
    t = map_chars(text)
    t = _WS.sub(" ", t)
    return t.strip().lower()


# A dash printed before a number means minus: "–40", "—0.3", "−2". A dash alone in a cell means "no value".
_MINUS_BEFORE_NUMBER = re.compile(r"(^|[\s(=<>/,;:\[])[" + _DASHES + r"](?=\d|\.\d)")
_CELL_SPACES = re.compile(r"[ " + _SPACES + r"]+")


def clean_cell(text: str) -> str:
    """Readable table-cell text: minus signs as '-', µ/°/Ω unified, invisible characters dropped, one space."""
    t = text
    t = _MINUS_BEFORE_NUMBER.sub(lambda m: m.group(1) + "-", t)
    t = t.translate(_CELL_MAP)
    t = _CELL_SPACES.sub(" ", t)
    return t.strip()


_CELL_MAP: dict[int, str] = {
    0x00AD: "",
    0x200B: "",
    0x0305: "",
    0x203E: "",
    0x03BC: "\u00b5",
    0x00BA: "\u00b0",
    0x02DA: "\u00b0",
    0xF0B0: "\u00b0",
    0xF057: "\u03a9",
    0x2126: "\u03a9",
    0x2212: "-",
    0xFB00: "ff",
    0xFB01: "fi",
    0xFB02: "fl",
    0xFB03: "ffi",
    0xFB04: "ffl",
}


def is_dash_only(text: str) -> bool:
    """A cell that holds only a dash (en/em dash, hyphen) marks 'no value' in datasheet tables."""
    s = text.strip()
    return bool(s) and all(c in _DASHES or c == "-" for c in s)


_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?")


def has_number(text: str) -> bool:
    return bool(_NUMBER.search(map_chars(text)))
