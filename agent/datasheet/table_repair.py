"""Text repairs on a table's grid so every markdown row can be read on its own.

Why a module of its own: these are the rules that change cell text once the cells sit in columns (table_columns.py),
each a datasheet habit named in its docstring: a column heading printed over several lines is joined; where the
page draws a rule under every row, the lines between two rules are one row (a rule crossing only some columns marks
a label cell spanning sub-rows); without rules, a line that sets no value of its own and either leaves the key
column empty or carries on the text above joins the row above; labels printed once for several rows (vertically
centred) are repeated on each row of their group; and a group's unit and parameter are carried down to rows that
leave them blank. tables.py applies them in that order.
"""

from __future__ import annotations

import re

from .normalise import has_number, is_dash_only
from .page_words import Row

_NUMERIC_CELL = re.compile(r"^[-+\u2013\u2212(]?[$\u20ac\u00a3]?\d[\d.,]*%?[)*]?(?:\s*[-\u2013]\s*\d[\d.,]*%?\)?)?$")
"""A cell that is one value: a number, a percentage, a price, a range "1.7 - 3.6"."""


def stack_header(
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


def merge_ruled_rows(
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


def merge_continuations(grid: list[list[str]], rows: list[Row], first_data: int) -> tuple[list[list[str]], list[Row]]:
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


def merge_label_rows(
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


def spread_centred_labels(grid: list[list[str]], first_data: int) -> None:
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


def header_index(grid: list[list[str]]) -> int:
    """Index of the last header row (the one naming Min/Typ/Max/Unit), or 0."""
    best = 0
    for i, line in enumerate(grid[:4]):
        hits = sum(1 for v in line for w in v.split() if _HEADER_WORDS.match(w))
        if hits >= 2:
            best = i
    return best


_CONTINUATION = re.compile(r"^[a-z(]")
_VALUE_HEADER = re.compile(r"^(min|typ|max|nom|values?|rating|limits?)\b", re.IGNORECASE)


def fill_down(grid: list[list[str]], header_rows: list[list[str]], first_data: int) -> None:
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
