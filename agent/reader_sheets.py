"""Readings from specification sheets that print a parameter as a label and its value, not in Min/Typ/Max columns.

Why: a product sheet prints "Max. rotational speed (+/-10%)" beside "3000 RPM" (a fan's two-column sheet), and a
component catalogue prints "Independent Linearity ........ ±0.25 %" (a dot leader between label and value). The
table tool shows both as rows of a label cell and a value cell, or as one cell holding both; the reader finds the
label that names the parameter and reads the figure printed in the unit asked for from its value, the way it reads
running text (reader_text.prose_readings), so a "±x" is a range and "<x" an upper limit there too.
"""

from __future__ import annotations

import re

from agent.reader_text import Reading, Table, prose_readings, tokens

_LEADER = re.compile(r"\s*(?:\.{4,}|…+)\s*")  # a run of dots between a label and its value


def label_value_pairs(row: list[str]) -> list[tuple[str, str]]:
    """(label, value) pairs a table row prints: a cell split at its dot leader, or a cell and the next one."""
    cells = [c.strip() for c in row if c and c.strip()]
    pairs: list[tuple[str, str]] = []
    for j, cell in enumerate(cells):
        parts = _LEADER.split(cell, maxsplit=1)
        if len(parts) == 2 and parts[0] and parts[1]:
            pairs.append((parts[0], parts[1]))
        elif j + 1 < len(cells) and not _LEADER.search(cells[j + 1]):
            pairs.append((cell, cells[j + 1]))
    return pairs


def sheet_readings(table: Table, page: int, phrase: str, qualifiers: set[str], head: set[str], unit: str,
                   parameter: str) -> list[Reading]:
    """Readings from the label/value pairs of `table` whose label holds every word of `phrase`: each figure of the
    value printed in `unit`. Scored like a table row (the head words the label echoes, the qualifiers it or the
    value holds), so a sheet reading competes fairly with one from a Min/Typ/Max table."""
    want = tokens(phrase)
    if not want:
        return []
    out: list[Reading] = []
    for row in [table.header] + table.rows:
        for label, value in label_value_pairs(row):
            label_words = tokens(label)
            if not want <= label_words:
                continue
            matched = qualifiers & (label_words | tokens(value))
            for r in prose_readings(value, page, unit, parameter):
                r.prose = False  # quoted as the printed label and value, not as a sentence
                r.score = (10 + 2 * len(head & label_words) + sum(3 if re.match(r"\d", t) else 1 for t in matched))
                r.context_cells = [label, value]
                r.row_cells = [value]
                r.quote = f"{label} {value}"
                r.alternatives = [r.quote, value]
                out.append(r)
    return out
