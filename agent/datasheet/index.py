"""Full-text search over a datasheet: exact first, then normalised, then the words of a wrapped table row.

Why: the value a claim names is printed with en-dash minus signs, "ºC", mixed µ/μ, soft hyphens and line-break
hyphenation, and a table row's words may wrap over two lines. Each page is folded once when the index is built, so
a query costs a few string scans (well under 5 ms on a 400-page document).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from .document import Line, PageText
from .normalise import fold, fold_query


@dataclass
class Hit:
    page: int
    snippet: str
    line: int  # index of the matched line in the page's reading-order lines (or row index for row matches)
    y: float
    match: str  # exact | normalised | row | row_words


@dataclass
class _PageIndex:
    number: int
    lines: list[Line]  # reading order, running headers/footers left out
    raw: str  # lines joined with single spaces
    raw_starts: list[int]
    folded: str
    fold_starts: list[int]
    rows: list[Line]  # baseline rows
    rows_folded: list[str]
    rows_compact: list[str]


def _join(texts: list[str], folder) -> tuple[str, list[int]]:
    parts: list[str] = []
    starts: list[int] = []
    pos = 0
    for t in texts:
        t = folder(t)
        if parts and parts[-1].endswith("-") and t[:1].islower() and len(parts[-1]) > 1 and parts[-1][-2].isalpha():
            # line-break hyphenation: "com-" + "mands" -> "commands"
            parts[-1] = parts[-1][:-1]
            pos -= 1
            starts.append(pos)
            parts.append(t)
            pos += len(t)
            continue
        if parts:
            parts.append(" ")
            pos += 1
        starts.append(pos)
        parts.append(t)
        pos += len(t)
    return "".join(parts), starts


class SearchIndex:
    """Folded text of every page, by reading-order line and by baseline row."""

    def __init__(self, pages: list[PageText]):
        self.pages: list[_PageIndex] = []
        for pg in pages:
            lines = pg.body_lines()
            raw, raw_starts = _join([ln.text for ln in lines], lambda t: " ".join(t.split()))
            folded, fold_starts = _join([ln.text for ln in lines], fold)
            rows = pg.rows()
            rows_folded = [fold(r.text) for r in rows]
            self.pages.append(
                _PageIndex(
                    pg.number,
                    lines,
                    raw,
                    raw_starts,
                    folded,
                    fold_starts,
                    rows,
                    rows_folded,
                    [r.replace(" ", "") for r in rows_folded],
                )
            )

    def search(self, query: str, page: int | None = None, max_results: int = 20) -> list[Hit]:
        pages = self.pages if page is None else [self.pages[page - 1]]
        hits: list[Hit] = []
        taken: set[tuple[int, float]] = set()

        def add(h: Hit) -> bool:
            key = (h.page, round(h.y))
            if key in taken:
                return False
            taken.add(key)
            hits.append(h)
            return len(hits) >= max_results

        q_raw = " ".join(query.split())
        q_fold = fold_query(query)
        # A query copied from the PDF may carry line-break hyphenation ("com- mands") that the index has joined.
        q_joined = fold(query)
        q_compact = q_fold.replace(" ", "")
        tokens = [re.escape(t) for t in q_fold.split()]
        token_re = re.compile(r"(?<![\w.])" + r".{0,80}?".join(tokens)) if len(tokens) > 1 else None
        for kind in ("exact", "normalised", "joined", "row", "row_words"):
            for pi in pages:
                if kind == "exact":
                    found = self._scan(pi, pi.raw, pi.raw_starts, q_raw, kind)
                elif kind == "normalised":
                    found = self._scan(pi, pi.folded, pi.fold_starts, q_fold, kind)
                elif kind == "joined":
                    if q_joined == q_fold:
                        continue
                    found = self._scan(pi, pi.folded, pi.fold_starts, q_joined, "normalised")
                elif kind == "row":
                    found = [
                        Hit(pi.number, _snippet_row(pi, k), k, pi.rows[k].y0, kind)
                        for k, rc in enumerate(pi.rows_compact)
                        if q_compact and q_compact in rc
                    ]
                else:
                    if token_re is None:
                        continue
                    found = []
                    for k in range(len(pi.rows)):
                        window = " ".join(pi.rows_folded[k : k + 3])
                        m = token_re.search(window)
                        if m and m.start() < len(pi.rows_folded[k]):
                            found.append(Hit(pi.number, _snippet_row(pi, k, 3), k, pi.rows[k].y0, kind))
                for h in found:
                    if add(h):
                        return hits
        return hits

    @staticmethod
    def _scan(pi: _PageIndex, text: str, starts: list[int], needle: str, kind: str) -> list[Hit]:
        out = []
        if not needle:
            return out
        pos = text.find(needle)
        while pos >= 0:
            k = max(0, bisect.bisect_right(starts, pos) - 1)
            out.append(Hit(pi.number, _snippet_text(pi.raw if kind == "exact" else None, pi, k), k, pi.lines[k].y0, kind))
            pos = text.find(needle, pos + max(1, len(needle)))
        return out


def _snippet_text(_raw: str | None, pi: _PageIndex, k: int, width: int = 240) -> str:
    parts = [pi.lines[j].text for j in range(max(0, k - 1), min(len(pi.lines), k + 2))]
    return _trim(" / ".join(parts), pi.lines[k].text, width)


def _snippet_row(pi: _PageIndex, k: int, span: int = 1, width: int = 240) -> str:
    parts = [pi.rows[j].text for j in range(k, min(len(pi.rows), k + span))]
    return _trim(" / ".join(parts), pi.rows[k].text, width)


def _trim(text: str, centre: str, width: int) -> str:
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    at = max(0, text.find(" ".join(centre.split())[:20]))
    start = max(0, at - width // 3)
    return ("…" if start else "") + text[start : start + width] + "…"
