"""A page's words as fragments, rows and cells, with its horizontal ruling lines, text turned upright.

Why a module of its own: this is the only part of table reading that talks to PyMuPDF (words with their boxes, the
drawings that give the rules); everything above it (tables.py, table_columns.py, table_repair.py, manifest.py) works
on plain Fragment/Cell/Row values, so it can be tested and reasoned about without a PDF. Words are grouped by baseline
(which keeps every number whole and both ends of a range on one line), and a row is cut into cells at gaps wider
than a word space. A landscape table (vertical text) is turned upright here, so the row and column logic above never
sees rotation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pymupdf

@dataclass
class Fragment:
    """A word (or a MuPDF line) with its box; `group` identifies the MuPDF line it came from."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    group: tuple[int, int]

    @property
    def height(self) -> float:
        return max(self.y1 - self.y0, 1.0)


@dataclass
class Cell:
    x0: float
    x1: float
    text: str
    frags: list[Fragment] = field(default_factory=list)


@dataclass
class Row:
    y0: float
    y1: float
    cells: list[Cell]

    @property
    def ymid(self) -> float:
        return (self.y0 + self.y1) / 2

    @property
    def height(self) -> float:
        return max(self.y1 - self.y0, 1.0)


# ------------------------------------------------------------------------------------------------------ fragments
_FILLER = re.compile(r"^(?:[.\u2026\u00b7_=\-\u2013\u2014]{3,}|(?:\. ?){3,})$")


@dataclass
class PageLayout:
    """What table reconstruction needs from one page: its words and its horizontal rules, text upright."""

    frags: list[Fragment]
    hrules: list[tuple[float, float, float]]  # (y, x0, x1), merged where collinear segments touch


def _orientation(words: list) -> int:
    """0 for horizontal text, +1 when most characters run bottom-to-top, -1 when top-to-bottom.

    A landscape table on a portrait page (or a page with /Rotate) is printed with vertical lines of text; turning its
    coordinates upright lets the same row and column logic read it.
    """
    lines: dict[tuple[int, int], list] = {}
    for w in words:
        lines.setdefault((w[5], w[6]), []).append(w)
    horizontal = up = down = 0
    for ws in lines.values():
        chars = sum(len(w[4]) for w in ws)
        if len(ws) >= 2:
            dx = abs((ws[-1][0] + ws[-1][2]) - (ws[0][0] + ws[0][2]))
            dy = (ws[-1][1] + ws[-1][3]) - (ws[0][1] + ws[0][3])
            if abs(dy) > dx:
                if dy < 0:
                    up += chars
                else:
                    down += chars
            else:
                horizontal += chars
        else:
            w = ws[0]
            if len(w[4]) >= 3 and (w[3] - w[1]) > 1.5 * (w[2] - w[0]):
                up += chars  # direction unknown from one word: bottom-to-top is the common landscape layout
            else:
                horizontal += chars
    vertical = up + down
    if vertical <= horizontal:
        return 0
    return 1 if up >= down else -1


def page_layout(page: pymupdf.Page, rules: bool = True) -> PageLayout:
    """The page's words (leader dots and typed rules left out) and, optionally, its horizontal ruling lines."""
    words = page.get_text("words", flags=pymupdf.TEXTFLAGS_WORDS)
    turn = _orientation(words) if words else 0
    rect = page.cropbox if page.rotation else page.rect
    W, H = max(rect.x1, max((w[2] for w in words), default=0)), max(rect.y1, max((w[3] for w in words), default=0))

    def box(x0: float, y0: float, x1: float, y1: float) -> tuple[float, float, float, float]:
        if turn == 1:
            return H - y1, x0, H - y0, x1
        if turn == -1:
            return y0, W - x1, y1, W - x0
        return x0, y0, x1, y1

    frags = []
    for w in words:
        t = w[4]
        if not t.strip() or _FILLER.match(t):
            continue
        if turn:
            wide = (w[2] - w[0]) > (w[3] - w[1])
            if wide and len(t) > 1:
                continue  # a horizontal line on a turned page (header, footer, page number) is not in the table
        x0, y0, x1, y1 = box(w[0], w[1], w[2], w[3])
        frags.append(Fragment(x0, y0, x1, y1, t, (w[5], w[6])))
    hrules = _horizontal_rules(page, box) if rules else []
    return PageLayout(frags, hrules)


def _horizontal_rules(page: pymupdf.Page, box) -> list[tuple[float, float, float]]:
    """Horizontal ruling lines: stroked lines, hairline rectangles, and the top/bottom edges of shaded cells."""
    segs: list[tuple[float, float, float]] = []
    try:
        drawings = page.get_cdrawings()
    except Exception:  # a broken content stream still has words; tables are then read without rules
        return []
    for d in drawings:
        fill = d.get("fill")
        if d.get("type") == "f" and fill and min(fill) > 0.95:
            continue  # white fill: invisible
        for it in d["items"]:
            kind = it[0]
            if kind == "l":
                x0, y0, x1, y1 = box(min(it[1][0], it[2][0]), min(it[1][1], it[2][1]),
                                     max(it[1][0], it[2][0]), max(it[1][1], it[2][1]))
                if y1 - y0 < 1.0 and x1 - x0 > 3:
                    segs.append(((y0 + y1) / 2, x0, x1))
            elif kind == "re":
                r = it[1]
                x0, y0, x1, y1 = box(min(r[0], r[2]), min(r[1], r[3]), max(r[0], r[2]), max(r[1], r[3]))
                if x1 - x0 <= 3:
                    continue
                if y1 - y0 < 2.5:
                    segs.append(((y0 + y1) / 2, x0, x1))
                else:
                    segs.append((y0, x0, x1))
                    segs.append((y1, x0, x1))
    segs.sort()
    merged: list[list[float]] = []
    for y, a, b in segs:
        joined = False
        for m in reversed(merged):
            if y - m[0] > 1.0:
                break
            if a <= m[2] + 2 and b >= m[1] - 2:
                m[1], m[2] = min(m[1], a), max(m[2], b)
                joined = True
                break
        if not joined:
            merged.append([y, a, b])
    return [(m[0], m[1], m[2]) for m in merged]


def group_rows(frags: list[Fragment]) -> list[list[Fragment]]:
    """Fragments grouped by baseline, top to bottom, each row left to right."""
    ordered = sorted(frags, key=lambda f: ((f.y0 + f.y1) / 2, f.x0))
    rows: list[list[Fragment]] = []
    bands: list[list[float]] = []
    for f in ordered:
        placed = False
        for i in range(len(rows) - 1, max(-1, len(rows) - 3), -1):
            b0, b1, bh = bands[i]
            overlap = min(b1, f.y1) - max(b0, f.y0)
            if overlap >= 0.5 * min(bh, f.height):
                rows[i].append(f)
                placed = True
                break
        if not placed:
            rows.append([f])
            bands.append([f.y0, f.y1, f.height])
    for r in rows:
        r.sort(key=lambda f: f.x0)
    return rows


def split_cells(row: list[Fragment]) -> list[Cell]:
    """Cut a row into cells at gaps wider than a word space (or where MuPDF saw separate lines)."""
    cells: list[Cell] = []
    cur: list[Fragment] = []
    for f in row:
        if cur:
            prev = cur[-1]
            gap = f.x0 - prev.x1
            h = min(prev.height, f.height)
            if gap > 0.9 * h or (f.group != prev.group and gap > 0.2 * h):
                cells.append(_cell(cur))
                cur = []
        cur.append(f)
    if cur:
        cells.append(_cell(cur))
    return cells


def _cell(frags: list[Fragment]) -> Cell:
    return Cell(min(f.x0 for f in frags), max(f.x1 for f in frags), " ".join(f.text for f in frags), list(frags))


def page_rows(frags: list[Fragment]) -> list[Row]:
    out = []
    for r in group_rows(frags):
        out.append(Row(min(f.y0 for f in r), max(f.y1 for f in r), split_cells(r)))
    return out
