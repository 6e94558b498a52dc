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

Where each step lives (split along its jobs): page_words.py reads the page (words, rows, cells, rules, rotation),
table_columns.py finds the tables and their columns and places cells in them, table_repair.py mends the grid's text;
this module runs them in order, takes the caption and test conditions above each table, and renders markdown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pymupdf

from .normalise import clean_cell
from .page_words import Cell, Fragment, Row, page_layout, page_rows
from .table_columns import CAPTION, cell_grid, column_bounds, is_caption_row, table_blocks
from .table_repair import (
    fill_down,
    header_index,
    merge_continuations,
    merge_label_rows,
    merge_ruled_rows,
    spread_centred_labels,
    stack_header,
)

__all__ = ["Cell", "Fragment", "Row", "Table", "build_tables", "is_caption_row", "page_tables", "table_blocks"]


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


def build_tables(rows: list[Row], page: int, hrules: list[tuple[float, float, float]] | None = None) -> list[Table]:
    """The tables among a page's rows: blocks, columns, the grid, its repairs (ruled or not), context above."""
    tables = []
    last_end = 0
    for i, j in table_blocks(rows, two_column=True):
        block = rows[i:j]
        cols = column_bounds(block)
        spanning: list[set[int]] = []
        grid = cell_grid(block, cols, spanning)
        grid, block, ruled = merge_ruled_rows(grid, block, cols, hrules or [])
        if not ruled:
            grid, block = stack_header(grid, block, spanning)
        hdr = header_index(grid)
        if not ruled:
            grid, block = merge_continuations(grid, block, hdr + 1)
            grid, block, centred = merge_label_rows(grid, block, hdr + 1)
            if centred:
                spread_centred_labels(grid, hdr + 1)
        fill_down(grid, grid[: hdr + 1], hdr + 1)
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
        if len(r.cells) > 2 and not CAPTION.match(text):
            break
        picked.append(text)
        if CAPTION.match(text):
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
