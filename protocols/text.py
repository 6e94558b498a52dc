"""Text folding: the one place that knows the typographic traps of manufacturer PDFs.

Why: the same value is printed many ways ("–40" with an en dash, "ºC" with an ordinal sign, "µ" and "μ" mixed on one
page, soft hyphens, thin spaces, "com- mands" hyphenated at a line break). The claim files, the datasheet index, the
table reader, the scripted reader and the fidelity scorer all compare such text, and each needs a slightly different
strength of folding (a search form is lower case, a table cell stays readable, a unit loses its spaces). They are
all options of `fold`, so every character rule below is written once; the callers name the options they use.

It lives in protocols/ because the claim model (protocols/claims.py) is its lowest user; agent/ imports it from here.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Literal

# Characters that print as a minus or a hyphen.
DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
# Characters that are spaces of some width (thin, narrow no-break, en/em spaces, no-break space) and the tab.
SPACES = "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000\t"
# Characters that print nothing (soft hyphen, zero-width spaces and joiners, BOM) and the overlines that mark an
# active-low pin name (RESET with a bar): dropped by every fold.
INVISIBLE = "\u00ad\u200b\u200c\u200d\ufeff\u0305\u203e"

# Look-alike signs: one spelling each for micro, degree and ohm.
SIGNS = {
    "\u03bc": "\u00b5",  # Greek mu -> micro sign
    "\u00ba": "\u00b0",  # masculine ordinal printed as a degree sign ("ºC")
    "\u02da": "\u00b0",  # ring above used as degree
    "\uf0b0": "\u00b0",  # Symbol-font degree in the private-use area
    "\uf057": "\u03a9",  # Symbol-font Omega in the private-use area
    "\u2126": "\u03a9",  # Ohm sign -> Greek capital omega
}
LIGATURES = {"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl", "\ufb05": "st",
             "\ufb06": "st"}
# Symbols with a plain-keyboard spelling a search should also find: quotes, ±, ≤, ≥, ×, bullets.
SYMBOLS = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2032": "'", "\u00b1": "+/-",
           "\u2264": "<=", "\u2265": ">=", "\u00d7": "x", "\u2022": " ", "\u25cf": " "}
SUPERSCRIPTS = {"\u00b2": "2", "\u00b3": "3"}

Dashes = Literal["all", "minus", "keep"]
Spaces = Literal["collapse", "inline", "drop", "keep"]
Case = Literal["keep", "lower"]

# A dash printed before a number means minus: "–40", "—0.3", "−2". A dash alone in a cell means "no value".
_MINUS_BEFORE_NUMBER = re.compile(r"(^|[\s(=<>/,;:\[])[" + DASHES + r"](?=\d|\.\d)")
# "com- mands" / "com-\nmands": a hyphen at the end of a line followed by a lower-case continuation.
_HYPHEN_BREAK = re.compile(r"([a-z])- *\n *([a-z])")
_HYPHEN_SPACE = re.compile(r"([a-z])- ([a-z])")
_WS = re.compile(r"\s+")
_INLINE_WS = re.compile(r"[ " + SPACES + r"]+")


@lru_cache(maxsize=None)
def _table(dashes: Dashes, signs: bool, ligatures: bool, symbols: bool, superscripts: bool,
           spaces: Spaces) -> dict[int, str | None]:
    table: dict[int, str | None] = dict.fromkeys(map(ord, INVISIBLE), None)
    if dashes == "all":
        table.update(dict.fromkeys(map(ord, DASHES), "-"))
    elif dashes == "minus":
        table[ord("\u2212")] = "-"  # the minus sign is a minus wherever it stands
    if spaces != "inline":  # "inline" collapses these with the space (keeping line breaks)
        table.update(dict.fromkeys(map(ord, SPACES), " "))
    for wanted, mapping in ((signs, SIGNS), (ligatures, LIGATURES), (symbols, SYMBOLS),
                            (superscripts, SUPERSCRIPTS)):
        if wanted:
            table.update({ord(k): v for k, v in mapping.items()})
    return table


def fold(text: str, *, dashes: Dashes = "all", signs: bool = True, ligatures: bool = False, symbols: bool = False,
         superscripts: bool = False, hyphenation: bool = False, spaces: Spaces = "collapse",
         case: Case = "keep") -> str:
    """Canonical form of printed text; invisible characters are always dropped and the text is NFC-composed.

    dashes: "all" every dash is "-"; "minus" a dash before a number (and U+2212 anywhere) is "-", a dash between
    words or alone stays as printed; "keep" none. signs: µ/μ, º/°, Ω spellings unified. ligatures: "ﬁ" as "fi".
    symbols: quotes, ±, ≤, ≥, ×, bullets in their keyboard spelling. superscripts: "²" as "2". hyphenation: a word
    hyphenated at a line break ("com- mands", "com-\\nmands") joined again. spaces: "collapse" every run of white
    space is one space, stripped; "inline" only runs of spaces within a line; "drop" none left; "keep" every space
    character is a plain space, nothing collapsed. case: "lower" folds case last.
    """
    t = unicodedata.normalize("NFC", text)
    if dashes == "minus":
        t = _MINUS_BEFORE_NUMBER.sub(lambda m: m.group(1) + "-", t)
    t = t.translate(_table(dashes, signs, ligatures, symbols, superscripts, spaces))
    if hyphenation:
        t = _HYPHEN_BREAK.sub(r"\1\2", t)
        t = _HYPHEN_SPACE.sub(r"\1\2", t)
    if spaces == "collapse":
        t = _WS.sub(" ", t).strip()
    elif spaces == "inline":
        t = _INLINE_WS.sub(" ", t).strip()
    elif spaces == "drop":
        t = _WS.sub("", t)
    return t.lower() if case == "lower" else t
