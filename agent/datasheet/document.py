"""Open a datasheet PDF safely and read its text layer once, as lines with position and font.

Why: every tool (contents, search, section text, tables) needs the same facts about a page: its lines in reading
order, the same lines grouped by baseline (so a table row reads as one line), the font size and weight of each, and
which lines are running headers or footers. Reading them once per page keeps `build_datasheet` close to the cost of
a plain `get_text()`, and refusing bad input here (missing file, not a PDF, encrypted, no pages) keeps the error
messages in one place, each one line naming the file, what was expected and what arrived.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import pymupdf


log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------- errors
class DatasheetToolError(Exception):
    """Base of every error a datasheet tool reports; the class name is the 'TypeName' of the error envelope."""


class DocumentNotFound(DatasheetToolError):
    pass


class NotAPdf(DatasheetToolError):
    pass


class DamagedPdf(NotAPdf):
    """A file that starts as a PDF but cannot be read whole: truncated (a cut download) or damaged."""


class EncryptedPdf(DatasheetToolError):
    pass


class EmptyDocument(DatasheetToolError):
    pass


class PageOutOfRange(DatasheetToolError):
    pass


class NoTextLayer(DatasheetToolError):
    pass


class InvalidArgument(DatasheetToolError):
    pass


class RegionOutsidePage(DatasheetToolError):
    pass


# ------------------------------------------------------------------------------------------------------- model
class Span(NamedTuple):
    """One run of text in one font. A tuple of plain values: tens of thousands per document, and the garbage
    collector does not track tuples that hold no containers."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    size: float
    bold: bool


@dataclass(slots=True)
class Line:
    """One MuPDF text line (reading order), or one baseline row (several lines side by side)."""

    page: int  # 1-based
    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    size: float  # largest font size in the line
    bold: bool  # every non-blank span is bold
    runs: Sequence[Span] = ()  # the spans of a line set in several fonts (empty for a line in one font)
    running: bool = False  # a running header/footer repeated on many pages
    parts: Sequence["Line"] = ()  # a row of several lines: its lines, left to right (a line alone on its
    # baseline is its own row and has no parts)

    @property
    def spans(self) -> Sequence[Span]:
        """The line's runs of text with their fonts; a line in one font is its own single run (made on demand:
        most lines are, and most are never asked)."""
        return self.runs or (Span(self.x0, self.y0, self.x1, self.y1, self.text, self.size, self.bold),)

    @property
    def height(self) -> float:
        return max(self.y1 - self.y0, 1.0)


@dataclass(slots=True)
class PageText:
    number: int  # 1-based
    width: float
    height: float
    lines: list[Line]  # reading order (MuPDF block order)
    chars: int  # characters of text on the page

    _rows: list[Line] | None = None

    def body_lines(self) -> list[Line]:
        return [ln for ln in self.lines if not ln.running]

    def rows(self) -> list[Line]:
        """Body lines grouped by baseline (computed once; running headers/footers must be marked first)."""
        if self._rows is None:
            self._rows = baseline_rows(self.body_lines())
        return self._rows




def open_pdf(path: str | Path) -> pymupdf.Document:
    """Open `path` as a PDF or raise a typed error saying what was expected and what arrived: DocumentNotFound,
    NotAPdf (no %PDF- header; a folder), DamagedPdf (truncated or damaged: no %%EOF in the last 1024 bytes, MuPDF
    refuses it, or no page survives its repair), EncryptedPdf, EmptyDocument (a sound PDF with no page)."""
    p = Path(path)
    if not p.exists():
        raise DocumentNotFound(f"no file at {p}")
    if not p.is_file():
        raise NotAPdf(f"{p} is a directory, expected a PDF file")
    size = p.stat().st_size
    with open(p, "rb") as f:
        head = f.read(1024)
        f.seek(max(0, size - TAIL_BYTES))
        tail = f.read()
    if b"%PDF-" not in head:
        raise NotAPdf(f"{p}: not a PDF (expected the header %PDF- in its first 1024 bytes; it starts with "
                      f"\"{_printable(head[:16])}\")")
    try:
        doc = pymupdf.open(p, filetype="pdf")
    except Exception as exc:  # MuPDF raises its own types for broken files
        raise DamagedPdf(damaged(p, " ".join(str(exc).split()) or type(exc).__name__)) from exc
    if doc.needs_pass:
        doc.close()
        raise EncryptedPdf(f"{p}: an encrypted PDF (it needs a password); expected an unencrypted one: supply a "
                           "decrypted copy")
    repaired, pages = doc.is_repaired, doc.page_count
    if b"%%EOF" not in tail:
        doc.close()
        raise DamagedPdf(damaged(p, f"it ends after {size} bytes without the closing %%EOF marker"))
    if pages == 0:
        doc.close()
        if repaired:
            raise DamagedPdf(damaged(p, "no page found, even after rebuilding its cross-reference table"))
        raise EmptyDocument(f"{p}: a PDF without pages; expected at least one")
    return doc


TAIL_BYTES = 1024
"""A PDF ends with %%EOF within its last 1024 bytes (the readers' customary tolerance); a file without it was cut."""


def damaged(path: Path, reason: str) -> str:
    """The one wording of a PDF that cannot be read: the file, then why."""
    return f"{path}: not a readable PDF (truncated or damaged: {reason})"


def _printable(data: bytes) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "." for c in data.decode("latin-1"))


# ------------------------------------------------------------------------------------------------------- reading
_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)


def read_page(page: pymupdf.Page) -> PageText:
    """The page's text lines in reading order with font facts (one text extraction, no images).

    This runs on every page of every document, so it is written as one flat pass over MuPDF's dict: a line of one
    span (most lines) takes a short path, and a font's boldness is decided once per font name.
    """
    number = page.number + 1
    data = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)
    lines: list[Line] = []
    chars = 0
    fonts: dict[str, bool] = {}
    bold_font = _BOLD_FONT.search
    append = lines.append

    def span_bold(s: dict) -> bool:
        """A span is bold when its font's name says so (decided once per name) or its flags carry MuPDF's bold bit (16)."""
        name = s["font"]
        b = fonts.get(name)
        if b is None:
            b = fonts[name] = bool(bold_font(name))
        return b or bool(s["flags"] & 16)

    for block in data["blocks"]:
        for ln in block.get("lines", ()):
            raw = ln["spans"]
            if len(raw) == 1:  # most lines: one span, no joining
                s = raw[0]
                text = s["text"]
                stripped = text.strip()
                if not stripped:
                    continue
                b = span_bold(s)
                size = s["size"]
                spans: Sequence[Span] = ()
            else:
                span_list: list[Span] = []
                size = 0.0
                bold = True
                parts: list[str] = []
                for s in raw:
                    t = s["text"]
                    if not t:
                        continue
                    b = span_bold(s)
                    sz = s["size"]
                    x0, y0, x1, y1 = s["bbox"]
                    span_list.append(Span(x0, y0, x1, y1, t, sz, b))
                    parts.append(t)
                    if not t.isspace():
                        if sz > size:
                            size = sz
                        bold = bold and b
                text = "".join(parts)
                stripped = text.strip()
                if not stripped:
                    continue
                b = bold
                spans = tuple(span_list)
            chars += len(text)
            x0, y0, x1, y1 = ln["bbox"]
            append(Line(number, x0, y0, x1, y1, stripped, size, b, spans))
    rect = page.rect
    return PageText(number=number, width=rect.width, height=rect.height, lines=lines, chars=chars)


def baseline_rows(lines: list[Line]) -> list[Line]:
    """Group lines that share a baseline into one row, left to right (a table row becomes one line).

    Lines overlap vertically by at least half the smaller height to join; subscripts ("V" + "DD") stay with their row.
    """
    if not lines:
        return []
    ordered = sorted(lines, key=lambda ln: (ln.y0 + ln.y1, ln.x0))
    rows: list[list[Line]] = []
    bands: list[list[float]] = []  # [y0, y1] of each row
    for ln in ordered:
        ly0, ly1 = ln.y0, ln.y1
        lh = ly1 - ly0 if ly1 - ly0 > 1.0 else 1.0
        # compare with the most recent few rows only (rows are built top to bottom)
        n = len(rows)
        for i in range(n - 1, n - 4 if n > 3 else -1, -1):
            band = bands[i]
            b0, b1 = band
            bh = b1 - b0
            overlap = (b1 if b1 < ly1 else ly1) - (b0 if b0 > ly0 else ly0)
            if overlap >= 0.5 * (bh if bh < lh else lh):
                rows[i].append(ln)
                if lh < 1.5 * bh:
                    band[0] = b0 if b0 < ly0 else ly0
                    band[1] = b1 if b1 > ly1 else ly1
                break
        else:
            rows.append([ln])
            bands.append([ly0, ly1])
    out = []
    for members in rows:
        if len(members) == 1:
            out.append(members[0])  # a line alone on its baseline is its own row (no parts)
            continue
        members.sort(key=lambda ln: ln.x0)
        first = members[0]
        x0, y0, x1, y1, size = first.x0, first.y0, first.x1, first.y1, first.size
        bold, running = first.bold, first.running
        texts = [first.text]
        spans = list(first.spans)
        for m in members[1:]:
            if m.y0 < y0:
                y0 = m.y0
            if m.x1 > x1:
                x1 = m.x1
            if m.y1 > y1:
                y1 = m.y1
            if m.size > size:
                size = m.size
            bold = bold and m.bold
            running = running and m.running
            texts.append(m.text)
            spans.extend(m.spans)
        out.append(Line(first.page, x0, y0, x1, y1, " ".join(texts), size, bold, tuple(spans), running, members))
    out.sort(key=lambda r: (r.y0, r.x0))
    return out


_DIGITS = re.compile(r"\d+")


def _running_key(line: Line) -> str:
    return _DIGITS.sub("#", " ".join(line.text.lower().split()))


_PAGE_NUMBER_KEYS = frozenset({"#", "page #", "# of #", "page # of #"})


def mark_running_lines(pages: list[PageText], margin: float = 0.12) -> None:
    """Mark lines in the top/bottom `margin` of the page that repeat (digits ignored) on many pages.

    Each margin line's key is computed once; lines in the body of the page are never looked at twice.
    """
    n = len(pages)
    if n < 3:
        return
    counts: Counter[str] = Counter()
    keyed: list[tuple[Line, str]] = []
    for pg in pages:
        top, bottom = pg.height * margin, pg.height * (1 - margin)
        seen = set()
        for ln in pg.lines:
            if ln.y1 < top or ln.y0 > bottom:
                key = _running_key(ln)
                keyed.append((ln, key))
                seen.add(key)
        counts.update(seen)
    threshold = max(3, int(0.4 * n))
    for ln, key in keyed:
        if counts[key] >= threshold or key in _PAGE_NUMBER_KEYS:
            ln.running = True
