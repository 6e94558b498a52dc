"""Rebuild a page's tables from its words and their positions, and render them as markdown.

Why: PyMuPDF's `find_tables()` reads cell text out of ruling-line cells and splits numbers ("006\n." for 0.06 on
DPS310 page 9), and a layout model costs seconds per page. The words of a page grouped by baseline keep every number
whole and put both ends of a range on one line; gaps between words give the cells, and the x-extent of the cells of
many rows gives the columns. Label cells printed once for several rows (vertically centred) are repeated on each row
of their group, and the unit and parameter of a group are carried down to rows that leave them blank, so every
markdown row can be read on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pymupdf

from .normalise import clean_cell, has_number, is_dash_only


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


@dataclass
class Table:
    page: int
    caption: str | None
    context: list[str]  # caption and test-condition lines printed above the table
    header: list[str]
    rows: list[list[str]]
    bbox: tuple[float, float, float, float]
    notes: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        out = []
        for line in self.context:
            out.append(f"**{line}**" if line == self.caption else line)
        if out:
            out.append("")
        ncol = len(self.header)
        out.append("| " + " | ".join(_md(c) for c in self.header) + " |")
        out.append("|" + "---|" * ncol)
        for r in self.rows:
            out.append("| " + " | ".join(_md(c) for c in r) + " |")
        for n in self.notes:
            out.append("")
            out.append(n)
        return "\n".join(out)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# ------------------------------------------------------------------------------------------------------ fragments
def word_fragments(page: pymupdf.Page) -> list[Fragment]:
    words = page.get_text("words", flags=pymupdf.TEXTFLAGS_WORDS)
    return [Fragment(w[0], w[1], w[2], w[3], w[4], (w[5], w[6])) for w in words if w[4].strip()]


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


# ------------------------------------------------------------------------------------------------------ blocks
def table_blocks(rows: list[Row], min_cells: int = 3) -> list[tuple[int, int]]:
    """Index ranges [i, j) of rows that form a table.

    A table is seeded by rows of at least `min_cells` cells; seeds join while at most three other rows and no wide
    vertical gap separate them, and a caption line ("Table 5 ...") always ends a table. Up to three narrow rows
    right below the last seed (wrapped text of its cells) are kept with it.
    """
    n = len(rows)
    rich = [k for k in range(n) if len(rows[k].cells) >= min_cells and not _is_caption_row(rows[k])]
    blocks: list[tuple[int, int]] = []
    k = 0
    while k < len(rich):
        i = rich[k]
        last = i
        k += 1
        while k < len(rich):
            nxt = rich[k]
            between = rows[last + 1 : nxt]
            if nxt - last > 6 or any(_is_caption_row(r) for r in between):
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
            if r.y0 - rows[end - 1].y1 > 1.2 * r.height or _is_caption_row(r) or len(r.cells) >= min_cells:
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


def _is_caption_row(r: Row) -> bool:
    return bool(_CAPTION.match(" ".join(c.text for c in r.cells)))


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
            a = int(c.x0 - x_min)
            b = int(c.x1 - x_min) + 1
            for k in range(a, min(b, width)):
                cover[k] += 1
    thr = max(1, round(0.08 * len(use)))
    cols: list[tuple[float, float]] = []
    start = None
    for k, v in enumerate(cover + [0]):
        if v >= thr and start is None:
            start = k
        elif v < thr and start is not None:
            cols.append((start + x_min, k - 1 + x_min))
            start = None
    for r in rows[:first_num] if body is not rows else ():
        for c in r.cells:
            for f in c.frags:
                mid = (f.x0 + f.x1) / 2
                if not any(a - 1 <= mid <= b + 1 for a, b in cols):
                    cols.append((f.x0, f.x1))
    cols.sort()
    merged: list[tuple[float, float]] = []
    for a, b in cols:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged or [(x_min, x_max)]


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


def _grid(rows: list[Row], cols: list[tuple[float, float]]) -> list[list[str]]:
    """Place cells in columns; a cell whose words sit in different columns (a tight header) is split between them."""
    grid = []
    for r in rows:
        line = [""] * len(cols)
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
            if len({k for k, _ in parts}) > 1 and len(parts) == len({k for k, _ in parts}):
                pieces = [(k, " ".join(f.text for f in fs)) for k, fs in parts]
            else:
                pieces = [(k_cell, c.text)]
            for k, text in pieces:
                line[k] = (line[k] + " " + text).strip() if line[k] else text
        grid.append(line)
    return grid


# ------------------------------------------------------------------------------------------------------ repair
def _merge_label_rows(
    grid: list[list[str]], rows: list[Row], first_data: int
) -> tuple[list[list[str]], list[Row], bool]:
    """Repeat labels printed once beside several rows (vertically centred) on every row they label.

    Also returns whether the table centres its labels (then a label on a data row may belong to rows around it).
    """
    centred = False
    n = len(grid)
    drop: set[int] = set()
    for i in range(first_data, n):
        filled = [k for k, v in enumerate(grid[i]) if v]
        if not filled or any(has_number(grid[i][k]) and not _is_symbolish(grid[i][k]) for k in filled):
            continue
        above = [j for j in range(i - 1, first_data - 1, -1) if j not in drop and _free(grid[j], filled)]
        below = [j for j in range(i + 1, n) if _free(grid[j], filled)]
        # only rows directly adjacent (in order) with the label's columns empty can share the label
        above = _contiguous(above, i, -1, drop)
        below = _contiguous(below, i, +1, drop)
        if not above and not below:
            continue
        y = rows[i].ymid
        group: list[int] = []
        if above and below:
            a, b = above[0], below[0]
            if abs((rows[a].ymid + rows[b].ymid) / 2 - y) <= 0.45 * rows[i].height:
                group = [a, b]
                centred = True
        if not group:
            cand = [j for j in (above[:1] + below[:1])]
            nearest = min(cand, key=lambda j: abs(rows[j].ymid - y))
            if abs(rows[nearest].ymid - y) > 1.6 * rows[i].height:
                continue
            group = [nearest]
        if any(not any(grid[j]) for j in group):
            continue
        for j in group:
            for k in filled:
                grid[j][k] = grid[i][k]
        drop.add(i)
    keep = [i for i in range(n) if i not in drop]
    return [grid[i] for i in keep], [rows[i] for i in keep], centred


def _spread_centred_labels(grid: list[list[str]], first_data: int) -> None:
    """In a table with centred labels, a label on row m with k unlabelled rows both above and below labels them."""
    n = len(grid)
    for m in range(first_data, n):
        if not grid[m][0]:
            continue
        up = 0
        while m - up - 1 >= first_data and not grid[m - up - 1][0] and any(grid[m - up - 1]):
            up += 1
        down = 0
        while m + down + 1 < n and not grid[m + down + 1][0] and any(grid[m + down + 1]):
            down += 1
        k = min(up, down)
        for j in list(range(m - k, m)) + list(range(m + 1, m + k + 1)):
            grid[j][0] = grid[m][0]


def _contiguous(cands: list[int], i: int, step: int, drop: set[int]) -> list[int]:
    out = []
    want = i + step
    for j in cands:
        while want in drop:
            want += step
        if j != want:
            break
        out.append(j)
        want = j + step
    return out


def _free(line: list[str], cols: list[int]) -> bool:
    return all(not line[k] for k in cols) and any(line)


_SYMBOLISH = re.compile(r"^[A-Za-z]{1,4}[_A-Za-z0-9(),]*$")


def _is_symbolish(text: str) -> bool:
    return all(_SYMBOLISH.match(w) for w in text.split())


_HEADER_WORDS = re.compile(r"^(min\.?|typ\.?\d*|max\.?|units?|values?|nom\.?)$", re.IGNORECASE)


def _header_index(grid: list[list[str]]) -> int:
    """Index of the last header row (the one naming Min/Typ/Max/Unit), or 0."""
    best = 0
    for i, line in enumerate(grid[:4]):
        hits = sum(1 for v in line for w in v.split() if _HEADER_WORDS.match(w))
        if hits >= 2:
            best = i
    return best


_CONTINUATION = re.compile(r"^[a-z(]")
_VALUE_HEADER = re.compile(r"^(min|typ|max|nom|values?|rating|limits?)\b", re.IGNORECASE)


def _fill_down(grid: list[list[str]], header_rows: list[list[str]], first_data: int) -> None:
    """Carry a group's unit (and parameter name) down to the rows of the group that leave them blank.

    A row belongs to the group above when it has a value in a value column (Min/Typ/Max) but no symbol or parameter
    of its own; wrapped note text ("to reach 90% of final") is not a value row.
    """
    unit_col = None
    value_cols: set[int] = set()
    for line in header_rows:
        for k, v in enumerate(line):
            t = v.strip()
            if re.fullmatch(r"units?\.?", t, re.IGNORECASE) or t.lower().startswith("unit "):
                unit_col = k
            if _VALUE_HEADER.match(t):
                value_cols.add(k)
    ncol = len(grid[0]) if grid else 0
    if not value_cols:
        value_cols = set(range(1, ncol - 1)) - {unit_col}
    for i in range(first_data + 1, len(grid)):
        line, prev = grid[i], grid[i - 1]
        values = [line[k] for k in value_cols if k < ncol and line[k]]
        if not values or not any(has_number(v) or is_dash_only(v) for v in values):
            continue
        label = line[0] if not _CONTINUATION.match(line[0]) else ""
        same_group = (not label or label == prev[0]) and (ncol < 4 or not line[1] or line[1] == prev[1])
        if unit_col is not None and not line[unit_col] and prev[unit_col] and same_group:
            line[unit_col] = prev[unit_col]
        if not line[0] and prev[0] and ncol > 2 and (ncol < 4 or not line[1]):
            line[0] = prev[0]


def build_tables(rows: list[Row], page: int) -> list[Table]:
    tables = []
    last_end = 0
    for i, j in table_blocks(rows):
        block = rows[i:j]
        cols = column_bounds(block)
        grid = _grid(block, cols)
        hdr = _header_index(grid)
        grid, block, centred = _merge_label_rows(grid, block, hdr + 1)
        if centred:
            _spread_centred_labels(grid, hdr + 1)
        _fill_down(grid, grid[: hdr + 1], hdr + 1)
        grid = [[clean_cell(v) for v in line] for line in grid]
        # drop columns that are empty everywhere
        keep = [k for k in range(len(cols)) if any(line[k] for line in grid)]
        grid = [[line[k] for k in keep] for line in grid]
        context, caption = _context_above(rows, i, last_end)
        bbox = (
            min(c.x0 for r in block for c in r.cells),
            block[0].y0,
            max(c.x1 for r in block for c in r.cells),
            block[-1].y1,
        )
        header = grid[0]
        tables.append(Table(page, caption, context, header, grid[1:], bbox))
        last_end = j
    return tables


_CAPTION = re.compile(r"^(table|tab\.)\s*[0-9ivx]+[-.:0-9a-z]*", re.IGNORECASE)
_CONDITION = re.compile(r"test condition|unless otherwise|conditions?:|valid over|at t\s*a\s*=", re.IGNORECASE)


def _context_above(rows: list[Row], i: int, floor: int) -> tuple[list[str], str | None]:
    """The caption and test-condition lines printed just above row i (never reaching into the previous table)."""
    picked: list[str] = []
    caption = None
    j = i - 1
    prev_top = rows[i].y0
    while j >= floor and len(picked) < 5:
        r = rows[j]
        if prev_top - r.y1 > 2.2 * r.height:
            break
        text = clean_cell(" ".join(c.text for c in r.cells))
        if len(r.cells) > 2 and not _CAPTION.match(text):
            break
        picked.append(text)
        if _CAPTION.match(text):
            caption = text
            # a test-condition paragraph printed above the caption belongs to the table too
            extra: list[str] = []
            top = r.y0
            for q in range(j - 1, max(floor - 1, j - 4), -1):
                rq = rows[q]
                if top - rq.y1 > 2.2 * rq.height or len(rq.cells) > 2:
                    break
                extra.append(clean_cell(" ".join(c.text for c in rq.cells)))
                top = rq.y0
            if any(_CONDITION.search(t) for t in extra):
                cut = max(k for k, t in enumerate(extra) if _CONDITION.search(t))
                picked.extend(extra[: cut + 1])
            break
        prev_top = r.y0
        j -= 1
    picked.reverse()
    if caption is None:
        for t in picked:
            if _CONDITION.search(t) or t.isupper():
                caption = t
                break
    return picked, caption


def page_tables(page: pymupdf.Page) -> list[Table]:
    """Every table found on the page, rebuilt from its words."""
    return build_tables(page_rows(word_fragments(page)), page.number + 1)
