"""Read a datasheet once into everything the tools need, and summarise it as a manifest.

Why: the manifest is the agent's first view of a document (pages, part, revision, contents and where they came
from, tables per page). It is cached by the file's SHA-256 so a second session on the same bytes costs nothing,
and the cache location is passed in (in memory by default) rather than reached for.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pymupdf
from pydantic import BaseModel

from protocols.datasheets import sha256_of

from .document import (
    PageText,
    baseline_rows,
    image_only,
    mark_running_lines,
    open_pdf,
    read_pages,
)
from .index import SearchIndex
from .page_words import Cell, Row
from .table_columns import is_caption_row, table_blocks
from .toc import TocEntry, outline_toc, reconstruct_toc

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1


class TocItem(BaseModel):
    level: int
    title: str
    page: int


class TableItem(BaseModel):
    page: int
    caption: str | None


class Manifest(BaseModel):
    """What an agent learns about a datasheet before reading it."""

    version: int = MANIFEST_VERSION
    sha256: str
    pages: int
    part: str | None
    revision: str | None
    toc_source: Literal["pdf_outline", "reconstructed", "none"]
    toc_note: str
    toc: list[TocItem]
    tables: list[TableItem]
    pages_without_text: list[int]


@dataclass
class LoadedDatasheet:
    """A datasheet read and indexed: the open document, its page text, search index, contents and manifest."""

    path: Path
    doc: pymupdf.Document
    pages: list[PageText]
    toc: list[TocEntry]
    manifest: Manifest
    _index: SearchIndex | None = None

    @property
    def index(self) -> SearchIndex:
        """Built on first use: a manifest alone does not need it."""
        if self._index is None:
            self._index = SearchIndex(self.pages)
        return self._index

    def section_of(self, page: int, y: float = 0.0) -> str | None:
        """Title of the contents entry a position on a page falls under (deepest, latest)."""
        best = None
        for e in self.toc:
            if (e.page, e.y) <= (page, y):
                best = e
            else:
                break
        return best.title if best else None

    def close(self) -> None:
        self.doc.close()


@dataclass(frozen=True)
class _Reading:
    """What reading a document produced, shared by every later session on the same bytes: pages, contents,
    manifest and the search index (all read-only once built; each session still opens its own document)."""

    pages: list[PageText]
    toc: list[TocEntry]
    manifest: Manifest
    index: SearchIndex


class ManifestCache:
    """Manifests by file SHA-256: in memory, and also as JSON files when a directory is given.

    With `keep_readings`, the whole reading (page text, contents, search index) is kept in memory too, so many
    sessions on the same datasheet — a matrix runs dozens at once — read and index it once instead of each
    paying for it (and contending for the interpreter while doing so)."""

    def __init__(self, directory: Path | None = None, *, keep_readings: bool = False):
        self.directory = Path(directory) if directory else None
        self._memory: dict[str, Manifest] = {}
        self.keep_readings = keep_readings
        self._readings: dict[str, _Reading] = {}
        self._lock = threading.Lock()

    def reading(self, sha256: str) -> _Reading | None:
        return self._readings.get(sha256)

    def get(self, sha256: str) -> Manifest | None:
        if sha256 in self._memory:
            return self._memory[sha256]
        if self.directory:
            f = self.directory / f"{sha256}.manifest.json"
            if f.exists():
                try:
                    m = Manifest.model_validate_json(f.read_text(encoding="utf-8"))
                except ValueError:
                    log.warning("ignoring unreadable cached manifest %s", f)
                    return None
                if m.version == MANIFEST_VERSION and m.sha256 == sha256:
                    self._memory[sha256] = m
                    return m
        return None

    def put(self, manifest: Manifest) -> None:
        self._memory[manifest.sha256] = manifest
        if self.directory:
            self.directory.mkdir(parents=True, exist_ok=True)
            f = self.directory / f"{manifest.sha256}.manifest.json"
            tmp = f.with_suffix(".tmp")
            tmp.write_text(json.dumps(manifest.model_dump(mode="json")), encoding="utf-8")
            tmp.replace(f)


def load_datasheet(pdf: str | Path, cache: ManifestCache | None = None) -> LoadedDatasheet:
    """Open, read and index a datasheet; a document that cannot be read raises its DocumentUnreadable error (missing,
    not a PDF, damaged, encrypted, empty, image only), one line naming the file and the reason."""
    path = Path(pdf)
    doc = open_pdf(path)
    try:
        return _read(path, doc, sha256_of(path), cache)
    except Exception:
        doc.close()
        raise


def _read(path: Path, doc: pymupdf.Document, sha: str, cache: ManifestCache | None) -> LoadedDatasheet:
    """Read and index an open document whose file hash is `sha` (the caller closes `doc` if this raises)."""
    kept = cache.reading(sha) if cache else None
    if kept is not None:
        return LoadedDatasheet(path, doc, kept.pages, kept.toc, kept.manifest, kept.index)
    if cache is not None and cache.keep_readings:
        with cache._lock:  # one thread reads a document; the others wait for its reading instead of repeating it
            kept = cache.reading(sha)
            if kept is None:
                loaded = _read_pages(path, doc, sha, cache)
                cache._readings[sha] = _Reading(loaded.pages, loaded.toc, loaded.manifest, loaded.index)
                return loaded
        return LoadedDatasheet(path, doc, kept.pages, kept.toc, kept.manifest, kept.index)
    return _read_pages(path, doc, sha, cache)


def _read_pages(path: Path, doc: pymupdf.Document, sha: str, cache: ManifestCache | None) -> LoadedDatasheet:
    pages = read_pages(doc, path)  # DamagedPdf, ImageOnlyPdf
    mark_running_lines(pages)
    cached = cache.get(sha) if cache else None
    part = cached.part if cached else _part(doc, pages)
    outline = outline_toc(doc)
    if outline:
        toc, source, note = outline, "pdf_outline", "Contents from the PDF bookmarks; page numbers are exact."
    else:
        toc = reconstruct_toc(pages, part)
        if toc:
            source = "reconstructed"
            note = (
                "The PDF has no bookmarks: these contents were inferred from the page layout (numbered headings, "
                "bold or large all-caps and title-case headings, table captions). Page numbers are inferred; "
                "confirm with search_text or get_section_text."
            )
        else:
            source = "none"
            note = "No bookmarks and no recognisable headings: navigate with search_text."
    if cached:
        manifest = cached
    else:
        manifest = Manifest(
            sha256=sha,
            pages=doc.page_count,
            part=part,
            revision=_revision(doc, pages),
            toc_source=source,
            toc_note=note,
            # plain dicts: the Manifest validates every item in one call
            toc=[{"level": e.level, "title": e.title, "page": e.page} for e in toc],
            tables=_table_list(pages),
            pages_without_text=[p.number for p in pages if p.chars == 0],
        )
        if cache:
            cache.put(manifest)
    return LoadedDatasheet(path, doc, pages, toc, manifest)


def build_datasheet(pdf: str | Path, cache: ManifestCache | None = None) -> Manifest:
    """The manifest of a datasheet; with a cache, a file already seen (same SHA-256) is not read again."""
    path = Path(pdf)
    if not cache:
        loaded = load_datasheet(path)
        loaded.close()
        return loaded.manifest
    doc = open_pdf(path)  # same typed errors as an uncached build; a miss reads this same open document
    try:
        sha = sha256_of(path)
        cached = cache.get(sha)
        if cached is not None and cached.pages and len(cached.pages_without_text) == cached.pages:
            raise image_only(path, cached.pages)  # a manifest kept before image-only documents were refused
        return cached or _read(path, doc, sha, cache).manifest
    finally:
        doc.close()


# ------------------------------------------------------------------------------------------------------- facts
_PART = re.compile(
    r"\b([A-Z]{1,5}[0-9]{2,}[A-Z0-9]*(?:[-/][A-Z0-9]+)?x?|[A-Z][a-z]?[0-9]{3,}[a-z]?x?|[A-Z]{1,3}[a-z]{2,6}[0-9]{2,}[A-Z0-9]*)\b"
)


def _part(doc: pymupdf.Document, pages: list[PageText]) -> str | None:
    """The part number printed largest on the first page (falling back to the PDF title)."""
    best: tuple[float, int, str] | None = None
    for ln in pages[0].lines if pages else []:
        for s in ln.spans:
            for m in _PART.finditer(s.text):
                cand = (s.size, -int(ln.y0), m.group(1))
                if best is None or cand > best:
                    best = cand
    if best:
        return best[2]
    title = (doc.metadata or {}).get("title") or ""
    m = _PART.search(title)
    return m.group(1) if m else (title.strip() or None)


_REVISION = re.compile(r"\b(Rev(?:ision)?\.?\s*[0-9]+(?:\.[0-9]+)?[A-Za-z]?|V[0-9]+\.[0-9]+)\b")


def _revision(doc: pymupdf.Document, pages: list[PageText]) -> str | None:
    """The revision printed most often in running headers/footers, else on the first or last pages."""
    counts: Counter[str] = Counter()
    for pg in pages:
        for ln in pg.lines:
            if ln.running:
                for m in _REVISION.finditer(ln.text):
                    counts[" ".join(m.group(1).split())] += 1
    if not counts:
        for pg in pages[:2] + pages[-2:]:
            for ln in pg.lines:
                for m in _REVISION.finditer(ln.text):
                    counts[" ".join(m.group(1).split())] += 1
    return counts.most_common(1)[0][0] if counts else None


def _table_list(pages: list[PageText]) -> list[dict]:
    """Tables per page from the lines' positions: captioned ('Table 5 ...') or found as a grid of cells."""
    out: list[dict] = []  # TableItem fields; the Manifest validates them all in one call
    for pg in pages:
        rows = [_row_of(r) for r in pg.rows()]
        captions = [
            (r.y0, " ".join(c.text for c in r.cells))
            for r in rows
            if is_caption_row(r)
        ]
        used = set()
        for i, _j in table_blocks(rows):
            above = [c for c in captions if c[0] <= rows[i].y0 + 1]
            if above:
                cap = above[-1]
                used.add(cap)
                caption = " ".join(cap[1].split())
            else:
                caption = _untitled_caption(rows, i)
            out.append({"page": pg.number, "caption": caption})
        for cap in captions:
            if cap not in used:
                out.append({"page": pg.number, "caption": " ".join(cap[1].split())})
    return out


def _row_of(line) -> Row:
    """A baseline row as table cells: its lines, joined where MuPDF split them with only a word space."""
    if not line.parts:
        return Row(line.y0, line.y1, [Cell(line.x0, line.x1, line.text)])
    cells: list[Cell] = []
    for m in line.parts:
        if cells and m.x0 - cells[-1].x1 < 0.25 * m.height:
            cells[-1] = Cell(cells[-1].x0, m.x1, cells[-1].text + " " + m.text)
        else:
            cells.append(Cell(m.x0, m.x1, m.text))
    return Row(line.y0, line.y1, cells)


def _untitled_caption(rows, i: int) -> str | None:
    for j in range(i - 1, max(-1, i - 3), -1):
        text = " ".join(c.text for c in rows[j].cells).strip()
        if text and len(rows[j].cells) <= 2 and len(text) <= 120:
            return " ".join(text.split())
    header = " | ".join(c.text for c in rows[i].cells)
    return f"(untitled; header: {header[:100]})"


__all__ = ["Manifest", "ManifestCache", "LoadedDatasheet", "load_datasheet", "build_datasheet", "baseline_rows"]
