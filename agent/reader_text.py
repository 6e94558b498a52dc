"""Text primitives of the scripted reader: folding, word tokens, units, printed figures, readings.

Folding and the SI prefixes are protocols/text.py's and protocols/units.py's (re-exported here as `fold` and
`SI_PREFIX`, the float view of the one exact table).

Why a module of its own: the reader's table heuristics (agent/reader.py) and its specification-sheet heuristics
(agent/reader_sheets.py) read the same printed text the same way; both import these, so each rule is written once
and neither module imports the other's internals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from protocols.text import fold  # the reader's fold is the default one: dashes as "-", µ/°/Ω unified, one space
from protocols.units import SI_PREFIX_FLOAT as SI_PREFIX

STOP_WORDS = {"the", "of", "at", "and", "a", "an", "in", "per", "to", "for", "mode", "not", "with", "on", "or", "is"}
NUM = r"[-+–−]?\d+(?:[.,]\d+)?"


def tokens(text: str) -> set[str]:
    return {t for t in re.findall(r"[a-z0-9µ°]+(?:\.[0-9]+)?", fold(text, case="lower")) if t not in STOP_WORDS}


def unit_key(unit: str) -> str:
    u = fold(unit, spaces="drop").replace("RMS", "").replace("rms", "")
    return u.replace("u", "µ") if u.startswith("u") else u


def unit_factor(found: str, wanted: str) -> float | None:
    """Factor converting a figure printed in `found` to `wanted` (same unit up to an SI prefix), else None."""
    f, w = unit_key(found), unit_key(wanted)
    if not f or not w:
        return None
    if f.lower() == w.lower():
        return 1.0
    for pf, vf in SI_PREFIX.items():
        for pw, vw in SI_PREFIX.items():
            if f.startswith(pf) and w.startswith(pw) and f[len(pf):] == w[len(pw):] and f[len(pf):]:
                return vf / vw
    return None


@dataclass
class Table:
    caption: str
    header: list[str]
    rows: list[list[str]]


def markdown_tables(text: str) -> list[Table]:
    """Markdown tables in a tool output, each with the caption line above it (if any)."""
    tables: list[Table] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|"):
            caption = ""
            for back in range(i - 1, max(i - 4, -1), -1):
                if lines[back].strip() and not lines[back].lstrip().startswith("|"):
                    caption = lines[back].strip().strip("*#").strip()
                    break
            block = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                block.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            block = [r for r in block if not all(re.fullmatch(r":?-{2,}:?", c) or not c for c in r)]
            if block:
                tables.append(Table(caption, block[0], block[1:]))
        else:
            i += 1
    return tables


_SYMMETRIC = re.compile(r"^(?:±|\+/-|\+-)\s*(\d+(?:[.,]\d+)?)$")
_SPAN = re.compile(r"^(" + NUM + r")\s*to\s*(" + NUM + r")$")


def to_float(text: str) -> float:
    return float(fold(text, signs=False).replace(",", "."))


def cell_value(cell: str) -> tuple[str, Any] | None:
    """A printed figure: ("num", x), ("sym", x) for ±x, or ("span", (a, b)) for "a to b"; None for text or "–"."""
    c = fold(cell)
    m = _SPAN.match(c)
    if m:
        return "span", (to_float(m.group(1)), to_float(m.group(2)))
    c = c.replace(" ", "")
    if not c or c in ("-", "—"):
        return None
    m = _SYMMETRIC.match(c)
    if m:
        return "sym", to_float(m.group(1))
    if re.fullmatch(r"[<>≤≥]?\d{1,3}(?:,\d{3})+", c):  # thousands separators: 10,000
        return "num", float(re.sub(r"[<>≤≥,]", "", c))
    if re.fullmatch(r"[<>≤≥]?" + NUM, c):
        return "num", to_float(re.sub(r"[<>≤≥]", "", c))
    return None


@dataclass
class Reading:
    page: int
    quote: str  # the text read, as the tool that showed it returned it
    value: float | None = None
    low: float | None = None
    high: float | None = None
    unit: str = ""
    score: float = 0.0
    evidence: list[str] = field(default_factory=list)  # pieces a quotation must hold (row cells, the figure)
    context_cells: list[str] = field(default_factory=list)  # the figure's row and its continuation lines
    row_cells: list[str] = field(default_factory=list)  # the figure's own table row
    figure_cells: list[str] = field(default_factory=list)  # that row from its first figure on (figures, unit, option)
    alternatives: list[str] = field(default_factory=list)  # other ways to quote it, best first
    prose: bool = False
    conditions: dict[str, str] = field(default_factory=dict)


def prose_readings(snippet: str, page: int, unit: str, parameter: str, phrase: str = "") -> list[Reading]:
    """Readings from running text: "<100 mlx", "0.5Pa/K", "1.7 – 3.6 V", "± 0.06 hPa", "23-bit"."""
    text = fold(snippet)
    out: list[Reading] = []
    if "bit" in parameter.lower() and "count" in unit.lower():
        m = re.search(r"(\d+)-bit", text)
        if m:  # an N-bit converter's codes run from 0 to 2^N - 1
            return [Reading(page, text, low=0.0, high=float(2 ** int(m.group(1)) - 1), unit=unit, score=5,
                            evidence=[m.group(0)], alternatives=[text], prose=True)]
    pattern = re.compile(
        r"(?P<pre>[<>≤≥]|±|\+/-)?\s*(?P<a>" + NUM + r")\s*(?:(?:-|to)\s*(?P<b>[+]?\d+(?:[.,]\d+)?)\s*)?"
        r"(?P<unit>[A-Za-zµ°/%]+(?:/[A-Za-z]+)?)")
    for m in pattern.finditer(text):
        # In running text only the unit asked for counts: a converted figure there is usually another quantity
        # ("ambient light levels < 1 klx" is not a resolution in mlx).
        factor = 1.0 if unit_key(m.group("unit")).lower() == unit_key(unit).lower() else None
        if factor is None:
            continue
        a = float(m.group("a").replace(",", ".")) * factor
        evidence = [m.group(0).strip()] + ([phrase] if phrase else [])
        r = Reading(page, text, unit=unit, score=3, evidence=evidence, alternatives=[text], prose=True)
        pre = m.group("pre")
        if m.group("b"):
            r.low, r.high = a, float(m.group("b").replace(",", ".")) * factor
        elif pre in ("±", "+/-"):
            r.low, r.high = -abs(a), abs(a)
        elif pre in ("<", "≤"):
            r.high = a
        elif pre in (">", "≥"):
            r.low = a
        else:
            r.value = a
        out.append(r)
    return out


