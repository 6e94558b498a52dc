"""Rebuild a page's tables from its words and their positions, and render them as markdown.

Why: PyMuPDF's `find_tables()` reads cell text out of ruling-line cells and splits numbers ("006\n." for 0.06 on
DPS310 page 9), and a layout model costs seconds per page. The words of a page grouped by baseline keep every number
whole and put both ends of a range on one line; gaps between words give the cells, and the x-extent of the cells of
many rows gives the columns. Label cells printed once for several rows (vertically centred) are repeated on each row
of their group, and the unit and parameter of a group are carried down to rows that leave them blank, so every
markdown row can be read on its own.

Multi-line cells: where the page draws a rule under every row, the lines between two rules are one row (a rule
crossing only some columns marks a label cell spanning sub-rows); without rules, a line that sets no value of its
own and either leaves the key column empty or carries on the text above joins the row above, and a column heading
printed over several lines is joined. Leader dots and typed rules are dropped, numbers set one space apart are kept
in their own columns, two-column tables (a label beside a value or a description) are found, and a landscape table
(vertical text) is turned upright before it is read.
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
        and not _is_caption_row(r)
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
    rich = [k for k in range(n) if (len(rows[k].cells) >= min_cells or k in seeds) and not _is_caption_row(rows[k])]
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
            if r.y0 - rows[end - 1].y1 > 1.2 * r.height or _is_caption_row(r):
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


def _is_caption_row(r: Row) -> bool:
    if not r.cells or r.cells[0].text[:3].lower() != "tab":
        return False  # every caption starts "Table"/"Tab." (checked first: this runs on every row of a document)
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
            # a cell of several numbers ("960 1,040 1,120" set with one space) covers only its words, so the
            # columns the other rows show are not bridged by it (_grid then splits it between them)
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


_NUMERIC_CELL = re.compile(r"^[-+\u2013\u2212(]?[$\u20ac\u00a3]?\d[\d.,]*%?[)*]?(?:\s*[-\u2013]\s*\d[\d.,]*%?\)?)?$")


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


def _grid(
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


def _stack_header(
    grid: list[list[str]], rows: list[Row], spanning: list[set[int]]
) -> tuple[list[list[str]], list[Row]]:
    """Join a column heading printed over several lines ("Body / Weight / (g)") into one cell.

    The header is the rows above the first row with a value. In each column, the lines of one heading sit right
    under each other; a group heading spanning several columns stays on its own row. The joined heading is put on
    the lowest of its lines, and header rows left empty are dropped.
    """
    first = next((i for i, line in enumerate(grid) if any(_numeric_text(v) for v in line)), 0)
    while first > 0 and grid[first - 1][0] and not any(grid[first - 1][1:]):
        first -= 1  # a group label above the first values ("Real estate loans") belongs to the body
    if first < 2 or first > 6:
        return grid, rows
    grid = [list(line) for line in grid]
    ncol = len(grid[0])
    for k in range(ncol):
        top = None  # row index holding the heading being built in column k
        for i in range(first):
            if not grid[i][k]:
                continue
            if k in spanning[i]:
                top = None
                continue
            # "Values" centred over "Min. Typ. Max." names the group, not the column under it
            under_group = _HEADER_WORDS.match(grid[i][k]) is not None
            if (
                top is not None
                and not under_group
                and rows[i].ymid - rows[top].ymid <= 1.75 * max(rows[i].height, rows[top].height)
            ):
                grid[i][k] = _join_lines(grid[top][k], grid[i][k])
                grid[top][k] = ""
            top = i
    keep = [i for i in range(len(grid)) if i >= first or any(grid[i])]
    return [grid[i] for i in keep], [rows[i] for i in keep]


# ------------------------------------------------------------------------------------------------------ repair
def _join_lines(upper: str, lower: str) -> str:
    """Text of a cell that wraps onto another line: joined with a space, or without the hyphen of "Volt-" + "age"."""
    if not upper:
        return lower
    if not lower:
        return upper
    if upper.endswith("-") and len(upper) > 1 and upper[-2].isalpha() and lower[:1].islower():
        return upper[:-1] + lower
    return upper + " " + lower


def _crossing(rule: tuple[float, float, float], col: tuple[float, float]) -> bool:
    mid = (col[0] + col[1]) / 2
    return rule[1] - 1 <= mid <= rule[2] + 1


def _merge_ruled_rows(
    grid: list[list[str]], rows: list[Row], cols: list[tuple[float, float]], hrules: list[tuple[float, float, float]]
) -> tuple[list[list[str]], list[Row], bool]:
    """In a table with a ruling line under every row, the text lines between two rules are one row.

    A multi-line cell ("Test Conditions" wrapped over three lines) then stays in its row, and a value printed
    beside the second line of its label stays with the label. Where a rule crosses only some columns (a label cell
    spanning two sub-rows), the label is repeated on each sub-row. Returns whether the table was read as ruled:
    tables ruled only above and below the header keep their line-per-row reading.
    """
    n = len(rows)
    if n < 3 or not hrules:
        return grid, rows, False
    left, right = cols[0][0], cols[-1][1]
    inside = [r for r in hrules if r[2] > left + 2 and r[1] < right - 2 and rows[0].y0 - 3 <= r[0] <= rows[-1].y1 + 3]
    if not inside:
        return grid, rows, False
    # rules between consecutive rows, as the set of columns each boundary crosses
    boundary: list[set[int]] = [set()]
    for i in range(1, n):
        a, b = rows[i - 1].ymid, rows[i].ymid
        crossed: set[int] = set()
        for r in inside:
            if a < r[0] < b:
                crossed.update(k for k, c in enumerate(cols) if _crossing(r, c))
        boundary.append(crossed)
    bands: list[list[int]] = []
    for i in range(n):
        if i == 0 or boundary[i]:
            bands.append([i])
        else:
            bands[-1].append(i)
    # a band holding two rows with a number alone in the same column holds two records: the rules only frame a
    # header or a body (booktabs style), so each line stays a row
    stacked = 0
    for b in bands:
        seen: set[int] = set()
        for i in b:
            nums = {k for k, v in enumerate(grid[i]) if _NUMERIC_CELL.match(v.strip())}
            if nums & seen:
                stacked += len(b)
                break
            seen |= nums
    if len(bands) < 3 or len(bands) == n or stacked > 0.15 * n:
        return grid, rows, False
    ncol = len(cols)
    out_grid: list[list[str]] = []
    out_rows: list[Row] = []
    for b in bands:
        line = [""] * ncol
        for i in b:
            for k in range(ncol):
                line[k] = _join_lines(line[k], grid[i][k])
        out_grid.append(line)
        members = [rows[i] for i in b]
        cells = [c for r in members for c in r.cells]
        out_rows.append(Row(min(r.y0 for r in members), max(r.y1 for r in members), cells))
    # a column without a rule between two bands holds one cell spanning both: repeat its only text on each
    starts = [b[0] for b in bands]
    for k in range(ncol):
        group = [0]
        for q in range(1, len(bands) + 1):
            if q < len(bands) and k not in boundary[starts[q]]:
                group.append(q)
                continue
            filled = [g for g in group if out_grid[g][k]]
            if len(group) > 1 and len(filled) == 1:
                for g in group:
                    out_grid[g][k] = out_grid[filled[0]][k]
            group = [q]
    return out_grid, out_rows, True


def _is_value(text: str) -> bool:
    t = text.strip()
    return bool(_NUMERIC_CELL.match(t)) or is_dash_only(t)


def _numeric_text(text: str) -> bool:
    """Mostly figures: "11 (3.2%)", "1,022", "-0.3" (a value, not a heading)."""
    digits = sum(ch.isdigit() for ch in text)
    return digits > 0 and sum(ch.isalpha() for ch in text) <= digits


def _continues(upper: str, lower: str) -> bool:
    """Does `lower` read as the next line of the same cell as `upper` (a sentence or phrase carried on)?"""
    if not upper or not lower:
        return False
    if upper.endswith(("-", ",", "/", "(", "&")) or upper.split()[-1].lower() in _JOINERS:
        return True
    return lower[0].islower() or (lower[0] in "([" and not upper.endswith((".", ":")))


_JOINERS = {"and", "or", "of", "the", "in", "to", "for", "with", "by", "at", "a", "an", "from", "on", "per", "than"}


def _merge_continuations(grid: list[list[str]], rows: list[Row], first_data: int) -> tuple[list[list[str]], list[Row]]:
    """Join the wrapped lines of multi-line cells in a table without ruling lines.

    A line is the continuation of the row above when it sits right under it (no blank line), sets no value
    (number or dash) in a column where the row above has one, and either leaves the key (first) column empty while
    adding text to columns the row above fills, or carries on the text of the row above (a lower-case word, an
    unfinished "... of"). Rows of values under a label printed once (a group) set values and stay rows.
    """
    if len(grid) < 2:
        return grid, rows
    out_g = [list(grid[i]) for i in range(first_data)]
    out_r = list(rows[:first_data])
    for i in range(first_data, len(grid)):
        line = grid[i]
        if not out_g or i == first_data:
            out_g.append(list(line))
            out_r.append(rows[i])
            continue
        prev, prow, row = out_g[-1], out_r[-1], rows[i]
        filled = [k for k, v in enumerate(line) if v]
        above = rows[i - 1]
        close = row.ymid - above.ymid <= 1.75 * max(row.height, above.height) and row.y0 - prow.y1 < 0.8 * row.height
        clash = any(_is_value(line[k]) and prev[k] for k in filled)
        if not filled or not close or clash or not any(prev):
            out_g.append(list(line))
            out_r.append(row)
            continue
        shared = [k for k in filled if prev[k]]
        texty = all(not _is_value(line[k]) for k in filled)
        keyless = not line[0] and shared and texty
        carried = shared and all(_continues(prev[k], line[k]) or not prev[k] for k in filled) and any(
            _continues(prev[k], line[k]) for k in shared
        )
        if keyless or carried:
            for k in filled:
                prev[k] = _join_lines(prev[k], line[k])
            out_r[-1] = Row(min(prow.y0, row.y0), max(prow.y1, row.y1), prow.cells + row.cells)
        else:
            out_g.append(list(line))
            out_r.append(row)
    return out_g, out_r


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


def build_tables(rows: list[Row], page: int, hrules: list[tuple[float, float, float]] | None = None) -> list[Table]:
    tables = []
    last_end = 0
    for i, j in table_blocks(rows, two_column=True):
        block = rows[i:j]
        cols = column_bounds(block)
        spanning: list[set[int]] = []
        grid = _grid(block, cols, spanning)
        grid, block, ruled = _merge_ruled_rows(grid, block, cols, hrules or [])
        if not ruled:
            grid, block = _stack_header(grid, block, spanning)
        hdr = _header_index(grid)
        if not ruled:
            grid, block = _merge_continuations(grid, block, hdr + 1)
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
    """Every table found on the page, rebuilt from its words (and its ruling lines, where it has them)."""
    layout = page_layout(page)
    return build_tables(page_rows(layout.frags), page.number + 1, layout.hrules)
