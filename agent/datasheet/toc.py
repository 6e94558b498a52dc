"""A datasheet's table of contents: its PDF bookmarks, or one rebuilt from the page layout without a model.

Why: an agent navigates a 400-page datasheet by its contents. Allegro's ACS70331 and A4988 ship no bookmarks, so the
contents are reconstructed from what a reader sees: numbered headings ("3.5 Pressure Transfer Function"), bold or
large all-caps titles ("ELECTRICAL CHARACTERISTICS"), title-case headings set bolder or larger than the body text
("Functional Description"), and table captions ("Table 8.1. ..."). Reconstructed page numbers are inferred and the
manifest says so.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import pymupdf

from .document import Line, PageText


@dataclass
class TocEntry:
    level: int
    title: str
    page: int
    y: float = 0.0  # top of the heading on its page (0 when only the page is known)


def outline_toc(doc: pymupdf.Document) -> list[TocEntry]:
    out = []
    for level, title, page, *_ in doc.get_toc(simple=True):
        if page < 1:
            continue
        out.append(TocEntry(level=int(level), title=" ".join(str(title).split()), page=int(page)))
    return out


def body_font_size(pages: list[PageText]) -> float:
    """The font size most characters are set in."""
    sizes: Counter[float] = Counter()
    for pg in pages:
        for ln in pg.lines:
            if not ln.runs:  # a line in one font
                sizes[round(ln.size * 2) / 2] += len(ln.text)
                continue
            for s in ln.runs:
                sizes[round(s.size * 2) / 2] += len(s.text)
    return sizes.most_common(1)[0][0] if sizes else 10.0


_NUMBERED = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,3})\.?\s+([A-Z][^.]{1,90})$")
_CAPTION = re.compile(r"^(table|tab\.)\s*(\d+[-.\d]*[a-z]?)\s*[:.]?\s*(\S.{0,120})$", re.IGNORECASE)
_FUSED_FOOTNOTE = re.compile(r"(?<=[A-Z])\d+$")


def _looks_like_data(title: str) -> bool:
    """Axis labels and table rows ("Time To Fuse (ms) SOIC-8 (OL)") are not headings."""
    return sum(c.isdigit() for c in title) > 2 or title.count("(") > 1


def _leading_bold(row: Line) -> str:
    parts: list[str] = []
    prev_x1 = None
    for s in row.spans:
        if s.text.strip() and not s.bold:
            break
        if prev_x1 is not None and s.x0 - prev_x1 > 1.0:
            parts.append(" ")
        parts.append(s.text)
        prev_x1 = s.x1
    return " ".join("".join(parts).split())


def _is_caps_title(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    if len(letters) < 6:
        return False
    upper = sum(1 for c in letters if c.isupper())
    words = [w for w in text.split() if sum(c.isalpha() for c in w) >= 3]
    visible = sum(1 for c in text if not c.isspace())
    return upper >= 0.9 * len(letters) and len(words) >= 2 and len(letters) >= 0.7 * visible


_SENTENCE_END = (".", ",", ";", ":", "?", "!")
_FOOTNOTE_MARK = re.compile(r"\(\d\)")
_VALUE_HEADING = re.compile(r"^(min|typ|max|nom|units?)\.?$", re.IGNORECASE)


def _is_title_case(text: str) -> bool:
    """A heading set in title case: "Functional Description", "Absolute Maximum Ratings", "Pin-out Diagram".

    Capitalised first word, most longer words capitalised, a few words, no sentence punctuation at the end.
    """
    words = text.split()
    if not 1 <= len(words) <= 8 or len(text) > 60 or text.endswith(_SENTENCE_END):
        return False
    letters = sum(c.isalpha() for c in text)
    if not words[0][:1].isupper() or letters < 6 or "=" in text or "[" in text or _FOOTNOTE_MARK.search(text):
        return False  # units in brackets and footnote marks "(1)" belong to table headings
    if letters < 0.7 * sum(1 for c in text if not c.isspace()):
        return False  # an equation or a label full of symbols
    if sum(1 for w in words if _VALUE_HEADING.match(w)) >= 2:
        return False  # "Min. Typ. Max. Units": the header row of a table
    long_words = [w for w in words if sum(c.isalpha() for c in w) >= 4]
    if not long_words:
        return False
    capitals = sum(1 for w in long_words if w[:1].isupper())
    return capitals >= 0.6 * len(long_words) and not _looks_like_data(text)


def _spaced_like_cells(line: Line) -> bool:
    """Words set apart by wide gaps within one line ("Port     Pin", "Min.   Typ.   Max.") are table headings."""
    prev_x1 = None
    for sp in line.spans:
        if not sp.text.strip():
            continue
        if prev_x1 is not None and sp.x0 - prev_x1 > 1.5 * sp.size:
            return True
        prev_x1 = sp.x1
    return False


def _heads_a_table(row: Line, below: list[Line]) -> bool:
    """A row of cells right above rows of cells is the header row of a table, not a heading."""
    for nxt in below:
        if nxt.y0 - row.y1 > 2 * row.height:
            return False
        if len(nxt.parts) >= 3:
            return True
        if len(nxt.parts) == 2 and min(q.x1 - q.x0 for q in nxt.parts) < 0.3 * (nxt.x1 - nxt.x0):
            return True  # a narrow cell beside another: a table row (two columns of prose are both wide)
    return False


def _heading_continuation(row: Line, nxt: Line | None) -> str:
    """The second line of a heading wrapped in two ("Current Sensing Method using GMR and" / "Stray Field
    Immunity"): right below, same size and weight, a short line on its own."""
    if nxt is None or nxt.parts or nxt.y0 - row.y1 > 0.6 * row.height:
        return ""
    if abs(nxt.size - row.size) > 0.3 or nxt.bold != row.bold:
        return ""
    text = " ".join(nxt.text.split())
    return text if 0 < len(text) <= 60 and not text.endswith(_SENTENCE_END) else ""


def reconstruct_toc(pages: list[PageText], part: str | None = None) -> list[TocEntry]:
    """Headings found from layout: numbered headings, bold/large all-caps titles, title-case headings set larger or
    bolder than the body text, and table captions.

    A title-case heading must stand on its own line (or lead a row, like a column heading on a two-column front
    page) and be set in bold at body size or larger, or in a font at least 15 % larger than the body; bold rows in a
    smaller font are table section labels ("Output Drivers"), not headings. A row that is neither emphasised nor
    starts in bold can only be a table caption, so the other tests are skipped for it.
    """
    body = body_font_size(pages)
    large = body * 1.15
    entries: list[TocEntry] = []
    seen: set[str] = set()
    part_key = (part or "").lower()
    for pg in pages:
        rows = pg.rows()
        skip = -1
        for r_index, row in enumerate(rows):
            if r_index == skip:
                continue
            starts_bold = row.runs[0].bold if row.runs else row.bold
            emphasised = row.bold or row.size >= large
            if not emphasised and not starts_bold:
                if row.text[:3].lower() != "tab" and row.text[:4].lower() != " tab":
                    continue
            text = " ".join(row.text.split())
            if len(text) < 3:
                continue
            entry = None
            m = _NUMBERED.match(text)
            if m and emphasised and len(text) <= 90 and not text.endswith(".") and not _looks_like_data(m.group(2)):
                entry = TocEntry(level=m.group(1).count(".") + 1, title=text, page=pg.number, y=row.y0)
            elif _CAPTION.match(text) and len(text) <= 140:
                entry = TocEntry(level=3, title=text, page=pg.number, y=row.y0)
            else:
                lead = _leading_bold(row) if starts_bold else ""
                cand = lead if lead else (text if row.size >= large else "")
                cand = _FUSED_FOOTNOTE.sub("", cand).strip(" :")
                if cand and len(cand) <= 80 and _is_caps_title(cand) and (row.bold or lead or row.size >= large):
                    level = 1 if row.size >= body * 1.25 else 2
                    entry = TocEntry(level=level, title=cand, page=pg.number, y=row.y0)
                elif len(row.parts) <= 2 and (row.size >= large or (row.bold and row.size >= body - 0.25)):
                    first = row.parts[0] if row.parts else row
                    head = " ".join(first.text.split())
                    if (
                        (first.bold or first.size >= large)
                        and _is_title_case(head)
                        and (first.size >= large or len(head.split()) >= 2)
                        and not _spaced_like_cells(first)
                        and not (row.parts and _heads_a_table(row, rows[r_index + 1 : r_index + 3]))
                    ):
                        level = 1 if first.size >= body * 1.25 else 2
                        nxt = _heading_continuation(row, rows[r_index + 1] if r_index + 1 < len(rows) else None)
                        if nxt:
                            head, skip = f"{head} {nxt}", r_index + 1
                        entry = TocEntry(level=level, title=head, page=pg.number, y=row.y0)
            if entry is None:
                continue
            key = re.sub(r"\W+", " ", entry.title.lower()).strip()
            if key in seen or key == part_key:
                continue
            seen.add(key)
            entries.append(entry)
    return entries
