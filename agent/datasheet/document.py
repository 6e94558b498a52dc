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

from firmware_bridge.error_text import exception_line


log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------- errors
class DatasheetToolError(Exception):
    """Base of every error a datasheet tool reports; the class name is the 'TypeName' of the error envelope."""


class DocumentUnreadable(DatasheetToolError):
    """The document as a whole cannot be read (missing, not a PDF, damaged, encrypted, empty, image only): every
    tool on it fails the same way, so no reading of it can be judged. A command names the file and the reason and
    exits 2; an agent cell ends `document_unreadable` (not a model outcome)."""


class DocumentNotFound(DocumentUnreadable):
    pass


class NotAPdf(DocumentUnreadable):
    pass


class DamagedPdf(NotAPdf):
    """A file that starts as a PDF but cannot be read whole: truncated (a cut download) or damaged (its page tree
    loops or its /Count lies, MuPDF refuses it, a page cannot be loaded)."""


class EncryptedPdf(DocumentUnreadable):
    pass


class EmptyDocument(DocumentUnreadable):
    pass


class ImageOnlyPdf(DocumentUnreadable):
    """Every page is an image (a scan) or a drawing: no page has a text layer, so nothing can be searched or quoted."""


class PageOutOfRange(DatasheetToolError):
    pass


class NoTextLayer(DatasheetToolError):
    """One page has no text layer (the document has others; a document with none is ImageOnlyPdf)."""


class InvalidArgument(DatasheetToolError):
    pass


class RegionOutsidePage(DatasheetToolError):
    pass


def unreadable_error_types() -> frozenset[str]:
    """The class names of DocumentUnreadable and all its subclasses: a tool result whose `error_type` is one of them
    says the whole document cannot be read (agent/tool.py keeps the exception's class name in that field)."""
    names: set[str] = set()
    todo: list[type] = [DocumentUnreadable]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(names)


MUPDF_ERRORS: tuple[type[Exception], ...] = (pymupdf.mupdf.FzErrorBase, RuntimeError, ValueError)
"""What MuPDF raises on a broken file: its own FzError* types, RuntimeError (pymupdf.FileDataError, "code=7:
Invalid number of pages") and ValueError ("page not in document"). Caught only around MuPDF calls."""

_MUPDF_CODE = re.compile(r"^\s*code=\d+:\s*")


def mupdf_reason(exc: BaseException) -> str:
    """MuPDF's own words for what is wrong, as one line, without its error code ("code=7: cycle in page tree" →
    "cycle in page tree"); the exception's class name when it says nothing."""
    return _MUPDF_CODE.sub("", exception_line(exc)) or type(exc).__name__


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
    NotAPdf (no %PDF- header; a folder), EncryptedPdf, DamagedPdf (truncated: no %%EOF in the last 1024 bytes;
    MuPDF refuses it; its page tree loops or its /Count disagrees with the pages it holds; no page survives its
    repair), EmptyDocument (a sound PDF with no page). Each message is one line naming the file and the reason."""
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
        raise DamagedPdf(damaged(p, mupdf_reason(exc))) from exc
    try:
        _check_opened(p, doc, size, tail)
    except BaseException:
        doc.close()
        raise
    return doc


def _check_opened(p: Path, doc: pymupdf.Document, size: int, tail: bytes) -> None:
    """The checks of an opened document, in the order a reader meets the faults (open_pdf closes it on refusal)."""
    if doc.needs_pass:
        raise EncryptedPdf(f"{p}: an encrypted PDF (it needs a password); expected an unencrypted one: supply a "
                           "decrypted copy")
    if b"%%EOF" not in tail:
        raise DamagedPdf(damaged(p, f"it ends after {size} bytes without the closing %%EOF marker"))
    fault = page_tree_fault(doc)
    if fault is not None:
        raise DamagedPdf(damaged(p, fault, "damaged page tree"))
    try:
        repaired, pages = doc.is_repaired, doc.page_count
    except MUPDF_ERRORS as exc:
        raise DamagedPdf(damaged(p, mupdf_reason(exc), "damaged page tree")) from exc
    if pages == 0:
        if repaired:
            raise DamagedPdf(damaged(p, "no page found, even after rebuilding its cross-reference table"))
        raise EmptyDocument(f"{p}: a PDF without pages; expected at least one")


TAIL_BYTES = 1024
"""A PDF ends with %%EOF within its last 1024 bytes (the readers' customary tolerance); a file without it was cut."""


def damaged(path: Path, reason: str, kind: str = "truncated or damaged") -> str:
    """The one wording of a PDF that cannot be read: the file, then what is broken and why."""
    return f"{path}: not a readable PDF ({kind}: {reason})"


def image_only(path: Path, pages: int) -> ImageOnlyPdf:
    """The refusal of a document none of whose `pages` has a text layer (a scan, or pages of drawings)."""
    return ImageOnlyPdf(f"{path}: image only, no text layer on any of its {pages} page{'s' * (pages != 1)} (a "
                        "scan?); expected a PDF with a text layer: run OCR on it first (e.g. ocrmypdf)")


_REF = re.compile(r"(\d+)\s+\d+\s+R")


def page_tree_fault(doc: pymupdf.Document) -> str | None:
    """What is wrong with the document's page tree, or None when it is sound: a node that is its own ancestor (a
    cycle: MuPDF then drops or cannot find pages), or a node whose /Count is not the number of pages under it (a
    lying /Count: MuPDF believes it, so pages are lost or made up). Walked from the catalogue over the raw objects
    (each node once, so a tree that shares a subtree costs no more than one that does not)."""
    try:
        kind, value = doc.xref_get_key(doc.pdf_catalog(), "Pages")
        top = _REF.fullmatch(value.strip()) if kind == "xref" else None
        if top is None:
            return f"the catalogue's /Pages is {kind} {value!r}, expected a reference to the page tree"
        return _walk_page_tree(doc, int(top.group(1)))
    except MUPDF_ERRORS as exc:
        return f"its page tree cannot be walked ({mupdf_reason(exc)})"


def _kids(doc: pymupdf.Document, node: int) -> list[int] | None:
    """The object numbers in a node's /Kids (an array, or a reference to one); None for a node without /Kids (a
    page)."""
    kind, value = doc.xref_get_key(node, "Kids")
    if kind == "xref":
        ref = _REF.fullmatch(value.strip())
        kind, value = ("array", doc.xref_object(int(ref.group(1)), compressed=True)) if ref else (kind, value)
    if kind != "array":
        return None
    return [int(m.group(1)) for m in _REF.finditer(value)]


def _count(doc: pymupdf.Document, node: int) -> int | str:
    """A node's /Count (a whole number, or a reference to one), else what stands there instead."""
    kind, value = doc.xref_get_key(node, "Count")
    if kind == "xref" and (ref := _REF.fullmatch(value.strip())):
        kind, value = "resolved", doc.xref_object(int(ref.group(1)), compressed=True).strip()
    return int(value) if kind in ("int", "resolved") and value.lstrip("-").isdigit() else f"{kind} {value!r}"


def _walk_page_tree(doc: pymupdf.Document, top: int) -> str | None:
    pages: dict[int, int] = {}  # node -> pages under it, once the node is finished
    path: list[int] = []  # the nodes from the root to the one being walked
    on_path: set[int] = set()
    stack: list[tuple[int, list[int] | None]] = [(top, None)]  # (node, its kids once entered)
    while stack:
        node, kids = stack.pop()
        if kids is None:  # entering the node
            if node in on_path:
                parent = path[-1]
                return (f"a cycle: object {parent} lists object {node} among its kids, which "
                        + ("is itself" if parent == node else "is its own ancestor"))
            if node in pages:
                continue
            kids = _kids(doc, node)
            if kids is None:  # a page (a leaf)
                pages[node] = 1
                continue
            stack.append((node, kids))
            path.append(node)
            on_path.add(node)
            stack.extend((k, None) for k in reversed(kids))
            continue
        path.pop()  # leaving the node: its kids are finished
        on_path.discard(node)
        held = sum(pages.get(k, 0) for k in kids)
        count = _count(doc, node)
        if count != held:
            where = f"the root (object {node})" if node == top else f"object {node}"
            said = f"/Count {count}" if isinstance(count, int) else f"no whole /Count ({count})"
            return f"{where} says {said}, its /Kids hold {held} page{'s' * (held != 1)}"
        pages[node] = held
    return None


def _printable(data: bytes) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "." for c in data.decode("latin-1"))


# ------------------------------------------------------------------------------------------------------- reading
_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)


def read_pages(doc: pymupdf.Document, path: Path) -> list[PageText]:
    """Every page's text (read_page). A page MuPDF cannot load or read makes the document DamagedPdf (naming the
    page and MuPDF's reason), and a document in which no page has a text layer is ImageOnlyPdf: the tools would
    find nothing in it, and an agent would be asked to read a blank."""
    pages: list[PageText] = []
    for i in range(doc.page_count):
        try:
            page = doc.load_page(i)
            data = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)
        except MUPDF_ERRORS as exc:
            raise DamagedPdf(damaged(path, f"page {i + 1} cannot be read: {mupdf_reason(exc)}")) from exc
        pages.append(read_page(page, data))
    if pages and not any(pg.chars for pg in pages):
        raise image_only(path, len(pages))
    return pages


def read_page(page: pymupdf.Page, data: dict | None = None) -> PageText:
    """The page's text lines in reading order with font facts (one text extraction, no images); `data` is the
    page's text dict when the caller has extracted it already.

    This runs on every page of every document, so it is written as one flat pass over MuPDF's dict: a line of one
    span (most lines) takes a short path, and a font's boldness is decided once per font name.
    """
    number = page.number + 1
    if data is None:
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
