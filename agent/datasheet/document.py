"""Open a datasheet PDF safely and read its text layer once, as lines with position and font.

Why: every tool (contents, search, section text, tables) needs the same facts about a page: its lines in reading
order, the same lines grouped by baseline (so a table row reads as one line), the font size and weight of each, and
which lines are running headers or footers. Reading them once per page keeps `build_datasheet` close to the cost of
a plain `get_text()`, and refusing bad input here (missing file, not a PDF, encrypted, no pages) keeps the error
messages in one place.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pymupdf

from .normalise import fold

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------- errors
class DatasheetToolError(Exception):
    """Base of every error a datasheet tool reports; the class name is the 'TypeName' of the error envelope."""


class DocumentNotFound(DatasheetToolError):
    pass


class NotAPdf(DatasheetToolError):
    pass


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
@dataclass(slots=True)
class Span:
    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    size: float
    bold: bool


@dataclass
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
    spans: list[Span] = field(default_factory=list)
    running: bool = False  # a running header/footer repeated on many pages
    parts: list["Line"] = field(default_factory=list)  # for a baseline row: its lines, left to right

    @property
    def height(self) -> float:
        return max(self.y1 - self.y0, 1.0)


@dataclass
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


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def open_pdf(path: str | Path) -> pymupdf.Document:
    """Open `path` as a PDF or raise a typed error saying what was expected and what arrived."""
    p = Path(path)
    if not p.exists():
        raise DocumentNotFound(f"no file at {p}")
    if not p.is_file():
        raise NotAPdf(f"{p} is a directory, expected a PDF file")
    with open(p, "rb") as f:
        head = f.read(1024)
    if b"%PDF-" not in head:
        shown = head[:16]
        raise NotAPdf(f"{p} does not start with a PDF header (%PDF-); first bytes {shown!r}")
    try:
        doc = pymupdf.open(p, filetype="pdf")
    except Exception as exc:  # MuPDF raises its own types for broken files
        raise NotAPdf(f"{p} could not be parsed as a PDF: {exc}") from exc
    if doc.needs_pass:
        doc.close()
        raise EncryptedPdf(f"{p} is encrypted and needs a password; supply a decrypted copy")
    if doc.page_count == 0:
        doc.close()
        raise EmptyDocument(f"{p} has zero pages")
    return doc


# ------------------------------------------------------------------------------------------------------- reading
_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)


def _span_is_bold(span: dict, fonts: dict[str, bool]) -> bool:
    if span["flags"] & 16:
        return True
    name = span.get("font", "")
    if name not in fonts:
        fonts[name] = bool(_BOLD_FONT.search(name))
    return fonts[name]


def read_page(page: pymupdf.Page) -> PageText:
    """The page's text lines in reading order with font facts (one text extraction, no images)."""
    number = page.number + 1
    data = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)
    lines: list[Line] = []
    chars = 0
    fonts: dict[str, bool] = {}
    for block in data["blocks"]:
        for ln in block.get("lines", ()):
            spans = []
            for s in ln["spans"]:
                t = s["text"]
                if not t:
                    continue
                b = s["bbox"]
                spans.append(Span(b[0], b[1], b[2], b[3], t, s["size"], _span_is_bold(s, fonts)))
            if not spans:
                continue
            text = "".join(s.text for s in spans)
            if not text.strip():
                continue
            chars += len(text)
            visible = [s for s in spans if s.text.strip()]
            x0, y0, x1, y1 = ln["bbox"]
            lines.append(
                Line(
                    page=number,
                    x0=x0,
                    y0=y0,
                    x1=x1,
                    y1=y1,
                    text=text.strip(),
                    size=max(s.size for s in visible),
                    bold=all(s.bold for s in visible),
                    spans=spans,
                )
            )
    rect = page.rect
    return PageText(number=number, width=rect.width, height=rect.height, lines=lines, chars=chars)


def baseline_rows(lines: list[Line]) -> list[Line]:
    """Group lines that share a baseline into one row, left to right (a table row becomes one line).

    Lines overlap vertically by at least half the smaller height to join; subscripts ("V" + "DD") stay with their row.
    """
    if not lines:
        return []
    ordered = sorted(lines, key=lambda ln: ((ln.y0 + ln.y1) / 2, ln.x0))
    rows: list[list[Line]] = []
    bands: list[tuple[float, float]] = []
    for ln in ordered:
        placed = False
        # compare with the most recent few rows only (rows are built top to bottom)
        for i in range(len(rows) - 1, max(-1, len(rows) - 4), -1):
            b0, b1 = bands[i]
            overlap = min(b1, ln.y1) - max(b0, ln.y0)
            if overlap >= 0.5 * min(b1 - b0, ln.height):
                rows[i].append(ln)
                bands[i] = (min(b0, ln.y0), max(b1, ln.y1)) if ln.height < 1.5 * (b1 - b0) else (b0, b1)
                placed = True
                break
        if not placed:
            rows.append([ln])
            bands.append((ln.y0, ln.y1))
    out = []
    for members in rows:
        members.sort(key=lambda ln: ln.x0)
        spans = [s for m in members for s in m.spans]
        out.append(
            Line(
                page=members[0].page,
                x0=min(m.x0 for m in members),
                y0=min(m.y0 for m in members),
                x1=max(m.x1 for m in members),
                y1=max(m.y1 for m in members),
                text=" ".join(m.text for m in members),
                size=max(m.size for m in members),
                bold=all(m.bold for m in members),
                spans=spans,
                running=all(m.running for m in members),
                parts=members,
            )
        )
    out.sort(key=lambda r: (r.y0, r.x0))
    return out


_DIGITS = re.compile(r"\d+")


def _running_key(line: Line) -> str:
    return _DIGITS.sub("#", fold(line.text))


def mark_running_lines(pages: list[PageText], margin: float = 0.12) -> None:
    """Mark lines in the top/bottom `margin` of the page that repeat (digits ignored) on many pages."""
    n = len(pages)
    if n < 3:
        return
    counts: Counter[str] = Counter()
    for pg in pages:
        seen = set()
        for ln in pg.lines:
            if ln.y1 < pg.height * margin or ln.y0 > pg.height * (1 - margin):
                seen.add(_running_key(ln))
        counts.update(seen)
    threshold = max(3, int(0.4 * n))
    frequent = {k for k, c in counts.items() if c >= threshold}
    for pg in pages:
        for ln in pg.lines:
            if ln.y1 < pg.height * margin or ln.y0 > pg.height * (1 - margin):
                key = _running_key(ln)
                if key in frequent or key in {"#", "page #", "# of #", "page # of #"}:
                    ln.running = True
