"""The scripted reader's heuristics: how a careful person with a search box finds one figure in a datasheet.

Why a module of its own: these rules (search phrases from a parameter name, reading Min/Typ/Max rows and their
sub-rows, the table of contents, quoting a figure as the page prints it) are about datasheets, not about models;
the scripted model (agent/models/scripted.py) drives them as one policy among others. They read only tool outputs
and the parameter and unit the claim projection names, never the claim's value.

The reader turns the parameter name into search phrases, opens the table on each page that matches, finds the
row (and the sub-row whose conditions match the parameter's qualifiers), and reads Min/Typ/Max (or an
absolute-maximum Rating) in a unit it can convert. Then it reads that page's text to quote the figure as it is
printed there, and searches for its quotation to make sure the document holds it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent.reader_sheets import sheet_readings
from agent.reader_text import STOP_WORDS, Reading, Table, prose_readings, unit_factor
from agent.reader_text import cell_value as _cell_value
from agent.reader_text import fold as _fold
from agent.reader_text import tokens as _tokens
from agent.reader_text import unit_key as _unit_key

__all__ = [
    "MAX_SEARCH_CALLS", "QUOTE_ATTEMPTS", "Reading", "Table", "join_lines", "page_lines", "prose_readings",
    "quote_candidates", "quote_window", "readings_in", "search_hits", "search_phrases", "symbol_runs",
    "table_readings", "toc_sections",
]

_ACRONYMS = {"adc": "analog-to-digital", "als": "ambient light"}
# Words that attach an operating point to a parameter name: "Current consumption at 1 Hz", "tOFF with OSC tied".
_CONNECTORS = re.compile(r"\s+(?:at|with|while|when)\s+", re.I)
# Column headers as datasheets print them ("Typ.2" carries a footnote mark; "Rating" is an absolute maximum).
_COLUMN_NAMES = {"min": "min", "minimum": "min", "typ": "typ", "typical": "typ", "max": "max", "maximum": "max",
                 "unit": "unit", "units": "unit", "rating": "rating", "ratings": "rating", "value": "rating",
                 "limit": "rating", "limits": "rating"}
_VALUE_COLUMNS = ("min", "typ", "max", "rating")
MAX_SEARCH_CALLS = 22  # calls spent finding the figure; the loop's default budget is 30 turns in all
QUOTE_ATTEMPTS = 3  # quotations tried with search_text before the best untested one is submitted


def _is_symbol(word: str) -> bool:
    """A printed symbol such as tOFF, TTSD, VSAT_LOW or IDD: a capital after the first letter, or an underscore."""
    return bool(re.search(r"[A-Za-z][A-Z]|_", word))


def search_phrases(parameter: str) -> tuple[list[str], set[str], set[str]]:
    """Search phrases from a parameter name, most specific first; the qualifier tokens that pick a sub-row; and
    the head phrase's tokens (which a table caption or row may echo).

    "Fixed off-time tOFF with OSC tied to VDD or GND" → head "Fixed off-time tOFF" (also searched without its
    symbol) and qualifiers {osc, tied, vdd, gnd}; "(...)", text after a comma and after at/with/while/when qualify."""
    text = _fold(parameter)
    qualifiers = re.findall(r"\(([^)]*)\)", text)
    head = re.sub(r"\([^)]*\)", " ", text)
    parts = [p.strip() for p in head.split(",")]
    head, qualifiers = parts[0], qualifiers + [p for p in parts[1:] if p]
    pieces = _CONNECTORS.split(head)
    head, qualifiers = pieces[0], qualifiers + pieces[1:]
    head = " ".join(head.split())
    words = head.split()
    phrases: list[str] = [head]
    plain = [w for w in words if not _is_symbol(w)]
    if plain and len(plain) < len(words):  # the name without its symbol, as a running-text mention reads
        phrases.append(" ".join(plain))
    if "bit" in [w.lower() for w in words]:  # a bit depth is printed as "N-bit <thing>"
        rest = [(_ACRONYMS.get(w.lower(), w)) for w in words if w.lower() not in ("bit", "depth")]
        phrases.append("bit " + " ".join(rest))
    expanded = " ".join(_ACRONYMS.get(w.lower(), w) for w in words)
    if expanded != head:
        phrases.append(expanded)
    for n in range(len(words) - 1, 0, -1):  # shorter windows of the head phrase, longest first
        for i in range(len(words) - n + 1):
            window = words[i:i + n]
            short = len(window[0]) < 4 and not _is_symbol(window[0])  # a printed symbol (TC, INL) names a row
            if n == 1 and (short or window[0].lower() in STOP_WORDS):
                continue
            phrases.append(" ".join(window))
    seen: set[str] = set()
    ordered = [p for p in phrases if not (p.lower() in seen or seen.add(p.lower()))]
    head_tokens = _tokens(head)
    qual = set().union(*(_tokens(q) for q in qualifiers)) - head_tokens if qualifiers else set()
    return ordered, qual, head_tokens


_PAGE_RE = re.compile(r"(?:\bpage\b|\bp\.?)\s*[:=]?\s*(\d+)", re.I)


def search_hits(text: str) -> list[tuple[int, str]]:
    """(page, snippet) pairs from a search_text output: JSON hit objects, or lines naming their page."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    hits: list[tuple[int, str]] = []
    if isinstance(data, dict):
        data = data.get("hits") or data.get("results") or data.get("matches") or []
    if isinstance(data, list):
        for h in data:
            if isinstance(h, dict) and "page" in h:
                hits.append((int(h["page"]), str(h.get("snippet") or h.get("text") or h.get("line") or "")))
        return hits
    for line in text.splitlines():
        m = _PAGE_RE.search(line)
        if m:
            hits.append((int(m.group(1)), line[m.end():] if m.start() < 3 else line))
    return hits


def _columns(table: Table) -> dict[str, int]:
    """Where Min/Typ/Max (or a single Rating), Unit and the test conditions are, from the header rows."""
    cols: dict[str, int] = {}
    for row in [table.header] + table.rows[:2]:
        for j, cell in enumerate(row):
            key = re.sub(r"[\s.\d*\[\]]+$", "", cell.lower())  # "Typ.2", "Max.", "Units" → typ, max, units
            if key in _COLUMN_NAMES:
                cols.setdefault(_COLUMN_NAMES[key], j)
            elif "condition" in key and "cond" not in cols:
                cols["cond"] = j
    if {"min", "typ", "max"} & set(cols):
        cols.pop("rating", None)  # "Values" over Min/Typ/Max is a group heading, not a column of its own
    return cols


def _cell(row: list[str], j: int | None) -> str:
    return row[j] if j is not None and j < len(row) else ""


def _values(row: list[str], cols: dict[str, int]) -> dict[str, tuple[str, Any]]:
    got = {c: _cell_value(_cell(row, cols.get(c))) for c in _VALUE_COLUMNS if c in cols}
    return {c: v for c, v in got.items() if v is not None}


def _label(row: list[str], cols: dict[str, int]) -> str:
    """The cells that name a row (parameter, symbol), left of the conditions and the figures."""
    firsts = [cols[c] for c in ("cond",) + _VALUE_COLUMNS if c in cols]
    end = min(firsts) if firsts else 1
    return " ".join(c for c in row[:max(1, end)] if c)


def _continues_label(cell: str) -> bool:
    """A first cell that carries on the name above rather than starting a new parameter: a wrapped word
    ("sponse" after "Re-") or a single setting such as "ADCMUX=0x11"."""
    c = cell.strip()
    return bool(re.match(r"[a-z]", c)) or (" " not in c and "=" in c)


def symbol_runs(table: Table, cols: dict[str, int]) -> tuple[list[int], list[str]]:
    """For each row, the first row of its run and the run's name. A run is the adjacent rows that print the same
    symbol: one parameter whose name wraps over its sub-rows ("Potentiometer" / "Integral Non-linearity", both
    INL). Without a symbol column, or with an empty symbol, a row is a run of its own, named by its label."""
    sym = next((j for j, c in enumerate(table.header) if re.sub(r"[\s.]+$", "", c.lower()) in ("sym", "symbol")),
               None)
    starts: list[int] = []
    for i, row in enumerate(table.rows):
        same = sym is not None and i > 0 and bool(_cell(row, sym)) and _cell(row, sym) == _cell(table.rows[i - 1], sym)
        starts.append(starts[-1] if same else i)
    names: dict[int, list[str]] = {}
    for i, start in enumerate(starts):  # the run's label, then the first cells of its other rows
        cell = _label(table.rows[i], cols) if i == start else (table.rows[i][0] if table.rows[i] else "")
        names.setdefault(start, []).append(cell)
    return starts, [" ".join(c for c in names[start] if c) for start in starts]


def table_readings(table: Table, page: int, phrase: str, qualifiers: set[str], head: set[str],
                   unit: str, printed_units: frozenset[str] = frozenset()) -> list[Reading]:
    """Readings from the rows of `table` that belong to the parameter named by `phrase`: rows whose name holds
    every word of the phrase (else rows holding it anywhere), their group of sub-rows, one reading per sub-row.
    A figure printed in a unit that is not a conversion of `unit` is read only if its unit is one of
    `printed_units` (words the parameter itself uses, such as "taps"); its reading keeps the printed unit."""
    cols = _columns(table)
    if not set(_VALUE_COLUMNS) & set(cols):
        return []
    want = _tokens(phrase)
    if not want:
        return []
    rows = table.rows
    starts, run_names = symbol_runs(table, cols)
    by_label = sorted({starts[i] for i in range(len(rows)) if want <= _tokens(run_names[i])})
    key = _fold(phrase).lower()  # elsewhere in a row, only the phrase as printed counts (not its words apart)
    anchors = by_label or [i for i, r in enumerate(rows) if key in _fold(" ".join(r)).lower()]
    caption_tokens = _tokens(table.caption)
    found: dict[int, Reading] = {}
    for anchor in anchors:
        labels = {rows[anchor][0]} if rows[anchor] and rows[anchor][0] else set()
        group: list[int] = []
        for i in range(anchor, len(rows)):
            first = rows[i][0] if rows[i] else ""
            # A row after a valueless one carries on its name, unless that row was a whole parameter (it prints a
            # unit: "Extinction Ratio | % | Up to 7,500:1" is not the first line of "Polarizing efficiency").
            prev_valueless = (bool(group) and not _values(rows[group[-1]], cols)
                              and not _cell(rows[group[-1]], cols.get("unit")))
            if (i == anchor or starts[i] == anchor or not first or want <= _tokens(first) or first in labels
                    or prev_valueless or not _values(rows[i], cols) or _continues_label(first)):
                group.append(i)
                if first:
                    labels.add(first)
                continue
            break
        value_rows = [i for i in group if _values(rows[i], cols)]
        for n, i in enumerate(value_rows):
            nxt = value_rows[n + 1] if n + 1 < len(value_rows) else group[-1] + 1
            context_rows = [rows[k] for k in range(i, nxt)]
            row_unit = _cell(rows[i], cols.get("unit"))
            if not row_unit:  # the unit may sit on a continuation line, or be carried from the group's first row
                for r in context_rows[1:] + [rows[k] for k in range(i - 1, anchor - 1, -1)]:
                    if _cell(r, cols.get("unit")):
                        row_unit = _cell(r, cols.get("unit"))
                        break
            factor, read_unit = unit_factor(row_unit, unit), unit
            if factor is None and _fold(row_unit).lower() in printed_units:
                factor, read_unit = 1.0, row_unit  # not convertible: reported in the unit the page prints
            if factor is None:
                continue
            got = _values(rows[i], cols)
            r = Reading(page=page, quote=" ".join(" ".join(c for c in row if c) for row in context_rows),
                        unit=read_unit)
            spans = [v for kind, v in got.values() if kind == "span"]
            sym = next((v for kind, v in got.values() if kind == "sym"), None)
            if spans:
                r.low, r.high = spans[0][0] * factor, spans[0][1] * factor
            elif sym is not None and not ("min" in got and "max" in got):
                r.low, r.high = -sym * factor, sym * factor
            else:  # a Typ. printed as ±x between a Min. and a Max. is a typical spread, not a figure of its own
                if "typ" in got and got["typ"][0] == "num":
                    r.value = got["typ"][1] * factor
                if "min" in got:
                    r.low = got["min"][1] * factor
                if "max" in got or "rating" in got:  # a lone rating is a limit not to exceed
                    r.high = got.get("max", got.get("rating"))[1] * factor
            if r.value is None and r.low is None and r.high is None:
                continue
            if starts.count(starts[i]) > 1:  # a wrapped name is the run's, shared by its rows: it decides nothing
                context = (_tokens(" ".join(" ".join(row[1:]) for row in context_rows)) | _tokens(run_names[i])
                           | caption_tokens)
            else:
                context = _tokens(" ".join(" ".join(row) for row in context_rows)) | caption_tokens
            named = _tokens(run_names[i] + " " + run_names[anchor])
            matched = qualifiers & context  # a number in a condition (3.3 V, 525 nm) decides between sub-rows
            r.score = (10 + 2 * len(head & (context | named)) + (2 if by_label else 0)
                       + sum(3 if re.match(r"\d", t) else 1 for t in matched)
                       + (1 if _unit_key(row_unit) == _unit_key(unit) else 0))
            cells = [c for c in rows[i] if c]
            context_cells = list(dict.fromkeys(c for row in context_rows for c in row if c))
            anchor_label = rows[anchor][0] if rows[anchor] and rows[anchor][0] else ""
            r.evidence = ([anchor_label] if anchor_label and anchor_label not in cells else []) + context_cells
            r.context_cells = context_cells
            r.row_cells = cells
            first_figure = min(cols[c] for c in _VALUE_COLUMNS if c in cols)
            r.figure_cells = [c for c in rows[i][first_figure:] if c]
            r.alternatives = [" ".join(cells), r.quote]
            cond_col = cols.get("cond")
            if cond_col is not None:
                cond = " ".join(_cell(row, cond_col) for row in context_rows if _cell(row, cond_col))
                if cond:
                    r.conditions["test conditions"] = cond
            if table.caption:
                r.conditions["table"] = table.caption[:200]
            if i not in found or found[i].score < r.score or (found[i].score == r.score and i == anchor):
                found[i] = r  # on a tie, the row read as its own anchor (its quotation needs no other row's name)
    return [found[i] for i in sorted(found)]


def toc_sections(overview: str, head: set[str]) -> list[tuple[int, list[str]]]:
    """Pages of the sections whose titles echo the parameter, each with the parameter's other words (the row
    label to look for there), best match first. `overview` is build_datasheet's JSON."""
    try:
        toc = json.loads(overview).get("toc") or []
    except (ValueError, AttributeError):
        return []
    found: list[tuple[int, int, list[str]]] = []
    for entry in toc:
        title = {t for t in _tokens(str(entry.get("title", ""))) if not re.fullmatch(r"[\d.]+", t)}
        overlap = title & head
        if overlap and (title <= head or len(overlap) >= 2) and isinstance(entry.get("page"), int):
            rest = sorted(head - title)
            if rest:
                found.append((len(overlap), entry["page"], rest))
    found.sort(key=lambda f: -f[0])
    return [(page, rest) for _, page, rest in found[:3]]


# --------------------------------------------------------------------------------------------- quoting
def page_lines(section_text: str) -> list[str]:
    """The printed lines of a get_section_text output (page markers and the tool's own notes left out)."""
    return [ln.strip() for ln in section_text.splitlines()
            if ln.strip() and not re.match(r"^=== Page \d+ ===$", ln.strip())
            and not re.match(r"^\[.*\]$", ln.strip())]


def join_lines(lines: list[str]) -> str:
    """Lines as running text: single spaces, and a word hyphenated at a line break ("com-" / "mands") read whole,
    the way the document's search reads it."""
    out = ""
    for line in lines:
        line = " ".join(line.split())
        if out.endswith("-") and len(out) > 1 and out[-2].isalpha() and line[:1].islower():
            out = out[:-1] + line
        else:
            out = f"{out} {line}" if out else line
    return out


def _piece_pattern(piece: str) -> re.Pattern[str] | None:
    p = _fold(piece).lower()
    if not p or re.fullmatch(r"[-—]+", p):
        return None  # a dash alone is an empty cell: nothing to look for
    before = r"(?<![\w.])" if re.match(r"[\w.]", p) else ""
    after = r"(?![\w]|\.\d)" if re.search(r"\w$", p) else ""
    return re.compile(before + re.escape(p) + after)


def quote_window(lines: list[str], pieces: list[str], *, max_lines: int = 14, max_chars: int = 400,
                 sentence: bool = False) -> str | None:
    """The shortest run of consecutive printed lines that holds every piece (order free: a table's cells are
    printed column by column), as running text; a run that opens with the first piece (the row's name) is
    preferred to a shorter one that opens on a stray cell of the row above. With `sentence`, widened to whole
    sentences of running text."""
    patterns = [p for p in (_piece_pattern(x) for x in pieces) if p is not None]
    if not patterns or not lines:
        return None
    folded = [_fold(ln).lower() for ln in lines]
    runs: list[tuple[bool, int, int, int]] = []  # (does not open with the first piece, characters, i, j)
    for i in range(len(lines)):
        if not any(p.search(folded[i]) for p in patterns):
            continue  # a quotation starts at a line that holds one of the pieces
        for j in range(i, min(len(lines), i + max_lines)):
            text = " ".join(folded[i:j + 1])
            whole = _fold(join_lines(lines[i:j + 1])).lower()  # a cell may show "com-" / "mands" read whole
            if all(p.search(text) or p.search(whole) for p in patterns):
                runs.append((not patterns[0].search(folded[i]), len(text), i, j))
                break
    if not runs:
        return None
    _, _, i, j = min(runs)
    if sentence:
        return _sentences(lines, i, j, patterns, max_chars)
    quote = join_lines(lines[i:j + 1])
    return quote if len(quote) <= max_chars else None


_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z(•])|\s*•\s*")


def _sentences(lines: list[str], i: int, j: int, patterns: list[re.Pattern[str]], max_chars: int) -> str | None:
    """The whole sentences of lines[i-2 .. j+2] that hold every pattern, cut verbatim out of the running text."""
    lo, hi = max(0, i - 2), min(len(lines), j + 3)
    text = join_lines(lines[lo:hi])
    cuts = [0]
    for m in _SENTENCE_BREAK.finditer(text):
        cuts += [m.start(), m.end()]
    cuts.append(len(text))
    segments = [(cuts[k], cuts[k + 1]) for k in range(0, len(cuts) - 1, 2)]
    best: str | None = None
    for a in range(len(segments)):
        for b in range(a, len(segments)):
            quote = text[segments[a][0]:segments[b][1]].strip()
            if all(p.search(_fold(quote).lower()) for p in patterns):
                if best is None or len(quote) < len(best):
                    best = quote
                break
    return best if best is not None and len(best) <= max_chars else None


def quote_candidates(reading: Reading, lines: list[str]) -> list[str]:
    """Ways to quote a reading, best first: the printed text around the figure (all of the row's cells, then the
    figure's own row), then the row as the table tool showed it."""
    out: list[str] = []
    if reading.prose:
        out.append(quote_window(lines, reading.evidence, sentence=True) or "")
        out.append(quote_window(lines, reading.evidence[:1], sentence=True) or "")
    else:  # the table tool may repeat a group's name on every row: a name the page prints once is let go
        for pieces in (reading.evidence, reading.context_cells, reading.row_cells, reading.row_cells[1:]):
            out.append(quote_window(lines, pieces) or "")
        # Last, the figure's own cells that the page prints (a cell the table tool reassembled out of order,
        # "≤ ≤ 3.0V VDD 5.5V", is not printed text): "+0.1 +3.5 LSb 10 kΩ 8-bit 3.0V ≤ VDD ≤ 5.5V".
        page = _fold(" ".join(lines)).lower()
        printed = [c for c in reading.figure_cells if (pat := _piece_pattern(c)) is None or pat.search(page)]
        out.append(quote_window(lines, printed) or "")
    out += reading.alternatives
    seen: set[str] = set()
    return [q for q in out if q and not (q in seen or seen.add(q))]


def readings_in(table: Table, page: int, phrase: str, qualifiers: set[str], head: set[str], unit: str,
                 parameter: str) -> list[Reading]:
    """A Min/Typ/Max (or Rating) table's readings; a table without such columns is read as a specification sheet
    of labels and values. A figure in a unit the parameter names (and `unit` is not a conversion of) is kept too."""
    if set(_VALUE_COLUMNS) & set(_columns(table)):
        return table_readings(table, page, phrase, qualifiers, head, unit, frozenset(_tokens(parameter)))
    return sheet_readings(table, page, phrase, qualifiers, head, unit, parameter)

