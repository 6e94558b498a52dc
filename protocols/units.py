"""Units: the SI prefix table and the canonical spelling of a printed unit.

Why: the decision rule converts a measurement into the claim's unit exactly (Pa -> hPa is 1/100, a Fraction), the
scripted reader converts a printed figure into the unit asked for (a float), and the fidelity scorer compares a
submitted unit with a needle. One table of prefixes, exact, serves all three; the float view is derived from it so
the two can never disagree. It lives in protocols/ because the decision rule (protocols/verdict.py) is its lowest
user; agent/ imports it from here.
"""

from __future__ import annotations

from fractions import Fraction
from types import MappingProxyType
from typing import Mapping

from protocols.text import fold

SI_PREFIX: Mapping[str, Fraction] = MappingProxyType({
    "": Fraction(1), "k": Fraction(1000), "h": Fraction(100), "da": Fraction(10), "d": Fraction(1, 10),
    "c": Fraction(1, 100), "m": Fraction(1, 1000), "µ": Fraction(1, 10**6), "μ": Fraction(1, 10**6),
    "u": Fraction(1, 10**6), "n": Fraction(1, 10**9), "M": Fraction(10**6),
})
"""Prefix -> exact factor. Micro has three spellings (micro sign, Greek mu, "u")."""

SI_PREFIX_FLOAT: Mapping[str, float] = MappingProxyType({p: float(f) for p, f in SI_PREFIX.items()})
"""The same table as floats (each the float nearest the exact factor), for code that computes in floats."""


def fold_unit(text: str) -> str:
    """A unit in a canonical form for comparison: dashes, µ/μ, º/°, Ω spellings, ligatures and symbols folded,
    superscripts as digits, the word "ohm" as Ω, no spaces, lower case ("kOhm" and "k Ω" are both "kω")."""
    t = fold(str(text), ligatures=True, symbols=True, superscripts=True, spaces="keep")
    t = t.replace("ohm", "Ω").replace("Ohm", "Ω")
    return fold(t, signs=False, spaces="drop", case="lower")
