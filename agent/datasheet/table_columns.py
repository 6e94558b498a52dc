"""Where a page's tables are (row ranges) and where their columns are (x-ranges), and cells placed in them.

Why a module of its own: finding a table and its columns is a question of geometry over rows of cells (seeds of
rows with several cells, aligned two-cell rows, gaps in the cells' x-coverage); it does not change any text. The
text repairs that follow (table_repair.py) and the assembly into a Table (tables.py) build on the grid placed here.
manifest.py uses table_blocks and is_caption_row to list a document's tables without building them.
"""

from __future__ import annotations

import re

from .normalise import has_number
from .page_words import Cell, Fragment, Row

CAPTION = re.compile(r"^(table|tab\.)\s*[0-9ivx]+[-.:0-9a-z]*", re.IGNORECASE)
"""A table caption: "Table 5", "Tab. 3-1:" (also ends a table block and heads its context)."""


# ------------------------------------------------------------------------------------------------------ blocks
def _two_column_seeds(rows: list[Row]) -> set[int]:
    """Rows of two cells that line up with other such rows nearby: a label column beside a value or description.

    Two columns of running text (a two-column page) are left out: there the left cell is as wide as the right one
    and the right one is a line of prose.
    """
    cand = [
        k
        for k, r in enumerate(rows)
        if len(r.cells) == 2
        and not is_caption_row(r)
        and len(r.cells[0].text.split()) <= 7
        and not _list_item(r.cells[0].text, r.cells[1].text)
        and (
            (
                r.cells[0].x1 - r.cells[0].x0 <= 0.45 * (r.cells[1].x1 - r.cells[0].x0)
                and len(r.cells[0].text.split()) <= 4
            )
            or len(r.cells[1].text.split()) <= 4
        )
    ]
    seeds: set[int] = set()
    for a in cand:
        ca = rows[a].cells[1]
        peers = 0
        for b in cand:
            if b != a and abs(b - a) <= 8:
                cb = rows[b].cells[1]
                if abs(cb.x0 - ca.x0) <= 2 or abs(cb.x1 - ca.x1) <= 2:
                    peers += 1
        if peers >= 2:
            seeds.add(a)
    return seeds


def _list_item(left: str, right: str) -> bool:
    """A bullet or a section number before a line of text ("•  Operation range ...", "4.1  Operating Modes")."""
    if not any(ch.isalnum() for ch in left):
        return True
    return bool(_HEADING_NUMBER.match(left.strip())) and sum(ch.isalpha() for ch in right) >= 3


def table_blocks(rows: list[Row], min_cells: int = 3, two_column: bool = False) -> list[tuple[int, int]]:
    """Index ranges [i, j) of rows that form a table.

    A table is seeded by rows of at least `min_cells` cells (and, with `two_column`, by aligned rows of two cells);
    seeds join while at most three other rows and no wide vertical gap separate them, and a caption line
    ("Table 5 ...") always ends a table. Up to three narrow rows right below the last seed (wrapped text of its
    cells) are kept with it.
    """
    n = len(rows)
    seeds = _two_column_seeds(rows) if two_column else set()
    rich = [k for k in range(n) if (len(rows[k].cells) >= min_cells or k in seeds) and not is_caption_row(rows[k])]
    blocks: list[tuple[int, int]] = []
    k = 0
    while k < len(rich):
        i = rich[k]
        last = i
        k += 1
        while k < len(rich):
            nxt = rich[k]
            between = rows[last + 1 : nxt]
            if nxt - last > 6 or any(is_caption_row(r) for r in between):
                break
            if any(rows[q + 1].y0 - rows[q].y1 > 2.2 * max(rows[q].height, rows[q + 1].height) for q in range(last, nxt)):
                break
            last = nxt
            k += 1
        if last == i:
            continue
        left = min(c.x0 for r in rows[i : last + 1] for c in r.cells)
        right = max(c.x1 for r in rows[i : last + 1] for c in r.cells)
        end = last + 1
        while end < n and end - last <= 3:
            r = rows[end]
            if r.y0 - rows[end - 1].y1 > 1.2 * r.height or is_caption_row(r):
                break
            if len(r.cells) >= min_cells or end in seeds:
                break
            if _HEADING_NUMBER.match(r.cells[0].text) and r.cells[0].x0 < left + 5:
                break
            cells_w = max(c.x1 - c.x0 for c in r.cells)
            if r.cells[0].x0 < left - 2 or r.cells[-1].x1 > right + 2 or cells_w > 0.5 * (right - left):
                break
            end += 1
        blocks.append((i, end))
    return blocks


_HEADING_NUMBER = re.compile(r"^\d+(\.\d+)*\.?$")


def is_caption_row(r: Row) -> bool:
    if not r.cells or r.cells[0].text[:3].lower() != "tab":
        return False  # every caption starts "Table"/"Tab." (checked first: this runs on every row of a document)
    return bool(CAPTION.match(" ".join(c.text for c in r.cells)))


def column_bounds(rows: list[Row]) -> list[tuple[float, float]]:
    """Column x-ranges from where the cells of the table's fuller rows sit (gaps in their coverage split columns).

    Header rows are left out when the body is long enough: a header such as "Typ. Max." set tight above two columns
    would otherwise bridge the gap between them. A header word that then falls in a gap opens a column of its own
    (a column empty in every body row still has a name).
    """
    first_num = next((k for k, r in enumerate(rows) if any(has_number(c.text) for c in r.cells)), 0)
    body = rows[first_num:] if len(rows) - first_num >= 3 else rows
    maxc = max(len(r.cells) for r in body)
    use = [r for r in body if len(r.cells) >= max(2, min(3, maxc))] or body
    x_min = min(c.x0 for r in rows for c in r.cells)
    x_max = max(c.x1 for r in rows for c in r.cells)
    width = int(x_max - x_min) + 2
    cover = [0] * width
    for r in use:
        for c in r.cells:
            # a cell of several numbers ("960 1,040 1,120" set with one space) covers only its words, so the
            # columns the other rows show are not bridged by it (cell_grid then splits it between them)
            spans = [(f.x0, f.x1) for f in c.frags] if len(c.frags) > 1 and _all_numbers(c) else [(c.x0, c.x1)]
            for x0, x1 in spans:
                a = int(x0 - x_min)
                b = int(x1 - x_min) + 1
                for k in range(a, min(b, width)):
                    cover[k] += 1
    thr = max(1, round(0.08 * len(use)))
    cols: list[tuple[float, float]] = []
    start = None
    for k, v in enumerate(cover + [0]):
        if v >= thr and start is None:
            start = k
        elif v < thr and start is not None:
            for a, b in _split_valleys(cover, start, k):
                cols.append((a + x_min, b - 1 + x_min))
            start = None
    body_cols = list(cols)
    for r in rows[:first_num] if body is not rows else ():
        for c in r.cells:
            for f in c.frags:
                mid = (f.x0 + f.x1) / 2
                inside = sum(max(0.0, min(b, f.x1) - max(a, f.x0)) for a, b in body_cols)
                # a header word in a gap between body columns names a column of its own, unless it straddles
                # body columns (a spanning header such as "American Indian/Alaska Native" over three columns)
                if not any(a - 1 <= mid <= b + 1 for a, b in cols) and inside <= 0.25 * (f.x1 - f.x0):
                    cols.append((f.x0, f.x1))
    cols.sort()
    merged: list[tuple[float, float]] = []
    for a, b in cols:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged or [(x_min, x_max)]


def _split_valleys(cover: list[int], start: int, end: int) -> list[tuple[int, int]]:
    """Cut a covered x-range [start, end) where few rows bridge two well-filled columns.

    One long label or a header over two columns must not join them: a stretch covered by at most a sixth of the
    rows of the columns on both sides (and by at least two rows fewer) separates them. A sparse column (a Min
    column with two values) is its own range and is never cut away.
    """
    out: list[tuple[int, int]] = []
    seg_start = start
    k = start
    while k < end:
        peak_left = max(cover[seg_start:k], default=0)
        v = cover[k]
        if peak_left and v <= peak_left / 6 and v <= peak_left - 2:
            j = k
            while j < end and cover[j] <= v:
                j += 1
            peak_right = max(cover[j:end], default=0)
            if j - k >= 2 and j < end and v <= peak_right / 6 and v <= peak_right - 2:
                out.append((seg_start, k))
                seg_start = j
                k = j
                continue
        k += 1
    out.append((seg_start, end))
    return out


_NUMBER_WORD = re.compile(r"^[-+\u2013\u2212(]?[$\u20ac\u00a3]?\d[\d.,]*%?\)?\*?$")


def _all_numbers(cell: Cell) -> bool:
    return all(_NUMBER_WORD.match(f.text) for f in cell.frags)


def _column_of(cell: Cell, cols: list[tuple[float, float]]) -> int:
    best, best_ov = -1, 0.0
    for k, (a, b) in enumerate(cols):
        ov = min(b, cell.x1) - max(a, cell.x0)
        if ov > best_ov:
            best, best_ov = k, ov
    if best >= 0:
        return best
    mid = (cell.x0 + cell.x1) / 2
    return min(range(len(cols)), key=lambda k: abs((cols[k][0] + cols[k][1]) / 2 - mid))


def cell_grid(
    rows: list[Row], cols: list[tuple[float, float]], spanning: list[set[int]] | None = None
) -> list[list[str]]:
    """Place cells in columns; a cell whose words sit in different columns (a tight header) is split between them.

    With `spanning`, also note per row the columns holding a cell that stretches over several columns (a group
    header such as "Coronary heart disease" over "No. | Rate | 95% CI").
    """
    grid = []
    for r in rows:
        line = [""] * len(cols)
        wide: set[int] = set()
        for c in r.cells:
            parts: list[tuple[int, list[Fragment]]] = []
            k_cell = _column_of(c, cols)
            for f in c.frags:
                mid = (f.x0 + f.x1) / 2
                inside = [k for k, (a, b) in enumerate(cols) if a - 0.5 <= mid <= b + 0.5]
                k = inside[0] if inside else k_cell
                if parts and parts[-1][0] == k:
                    parts[-1][1].append(f)
                else:
                    parts.append((k, [f]))
            every_inside = all(any(a - 0.5 <= (f.x0 + f.x1) / 2 <= b + 0.5 for a, b in cols) for f in c.frags)
            if every_inside and len({k for k, _ in parts}) > 1 and len(parts) == len({k for k, _ in parts}):
                pieces = [(k, " ".join(f.text for f in fs)) for k, fs in parts]
            else:
                pieces = [(k_cell, c.text)]
                if sum(1 for a, b in cols if min(b, c.x1) - max(a, c.x0) > 2) > 1:
                    wide.add(k_cell)
            for k, text in pieces:
                line[k] = (line[k] + " " + text).strip() if line[k] else text
        grid.append(line)
        if spanning is not None:
            spanning.append(wide)
    return grid
