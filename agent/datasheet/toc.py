"""A datasheet's table of contents: its PDF bookmarks, or one rebuilt from the page layout without a model.

Why: an agent navigates a 400-page datasheet by its contents. Allegro's ACS70331 and A4988 ship no bookmarks, so the
contents are reconstructed from what a reader sees: numbered headings ("3.5 Pressure Transfer Function"), bold or
large all-caps titles ("ELECTRICAL CHARACTERISTICS"), and table captions ("Table 8.1. ..."). Reconstructed page
numbers are inferred and the manifest says so.
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
            for s in ln.spans:
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


def reconstruct_toc(pages: list[PageText], part: str | None = None) -> list[TocEntry]:
    """Headings found from layout: numbered headings, bold/large all-caps titles, table captions."""
    body = body_font_size(pages)
    entries: list[TocEntry] = []
    seen: set[str] = set()
    part_key = (part or "").lower()
    for pg in pages:
        for row in pg.rows():
            text = " ".join(row.text.split())
            if len(text) < 3:
                continue
            emphasised = row.bold or row.size >= body * 1.15
            entry = None
            m = _NUMBERED.match(text)
            if m and emphasised and len(text) <= 90 and not text.endswith(".") and not _looks_like_data(m.group(2)):
                entry = TocEntry(level=m.group(1).count(".") + 1, title=text, page=pg.number, y=row.y0)
            elif _CAPTION.match(text) and len(text) <= 140:
                entry = TocEntry(level=3, title=text, page=pg.number, y=row.y0)
            else:
                lead = _leading_bold(row) if row.spans and row.spans[0].bold else ""
                cand = lead if lead else (text if row.size >= body * 1.15 else "")
                cand = _FUSED_FOOTNOTE.sub("", cand).strip(" :")
                if cand and len(cand) <= 80 and _is_caps_title(cand) and (row.bold or lead or row.size >= body * 1.15):
                    level = 1 if row.size >= body * 1.25 else 2
                    entry = TocEntry(level=level, title=cand, page=pg.number, y=row.y0)
            if entry is None:
                continue
            key = re.sub(r"\W+", " ", entry.title.lower()).strip()
            if key in seen or key == part_key:
                continue
            seen.add(key)
            entries.append(entry)
    return entries
