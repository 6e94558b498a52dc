"""The five datasheet tools as framework-neutral definitions bound to one document per session.

Why: the agent reads a datasheet only through these tools, with the seed paper's names and meaning so its
detector rules (tool-bypass, verification-skipped) carry over. Each definition carries a description written for a
model, a JSON schema and a handler that never raises: every result is a ToolResult (agent/tool.py), and an error
reads "TypeName: message" with the type name also in its `error_type` field. They are the agent's one Tool type,
which each model client turns into its own wire shape.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any, Callable

import pymupdf

from agent.tool import JsonObject, Tool, ToolResult

from .document import (
    MUPDF_ERRORS,
    DamagedPdf,
    DatasheetToolError,
    InvalidArgument,
    NoTextLayer,
    PageOutOfRange,
    RegionOutsidePage,
    damaged,
    mupdf_reason,
)
from .manifest import LoadedDatasheet, Manifest, ManifestCache, load_datasheet
from .tables import page_tables

log = logging.getLogger(__name__)

TOOL_SURFACE_VERSION = "chamberlab-datasheet-tools/1"


class EmptyQuery(DatasheetToolError):
    pass


class DatasheetSession:
    """One datasheet opened for one agent session; every tool call reads this document only.

    Opening never raises: a file that cannot be read (missing, not a PDF, damaged, encrypted, no pages, image only:
    a DocumentUnreadable) makes every tool return that error envelope, so the agent loop sees the same shape
    whatever went wrong, and `open_error` says so before any tool is called.
    """

    def __init__(self, pdf_path: str | Path, cache: ManifestCache | None = None):
        self.pdf_path = Path(pdf_path)
        self._loaded: LoadedDatasheet | None = None
        self._open_error: DatasheetToolError | None = None
        try:
            self._loaded = load_datasheet(self.pdf_path, cache)
        except DatasheetToolError as exc:
            self._open_error = exc
        except MUPDF_ERRORS as exc:  # a MuPDF failure the open checks did not foresee: the document is damaged
            log.debug("MuPDF failed reading %s", self.pdf_path, exc_info=True)
            self._open_error = DamagedPdf(damaged(self.pdf_path, mupdf_reason(exc)))
        except Exception as exc:  # our own fault, not the document's: reported, not raised, and not called damaged
            log.warning("could not load %s: %s", self.pdf_path, exc, exc_info=True)
            self._open_error = DatasheetToolError(f"could not read {self.pdf_path}: {type(exc).__name__}: {exc}")
        self._tables: dict[int, list] = {}

    @property
    def open_error(self) -> DatasheetToolError | None:
        """Why the document could not be opened and read (None: it was)."""
        return self._open_error

    # -------------------------------------------------------------------------------- plain API (raises typed errors)
    @property
    def loaded(self) -> LoadedDatasheet:
        if self._open_error is not None:
            raise self._open_error
        assert self._loaded is not None
        return self._loaded

    @property
    def manifest(self) -> Manifest:
        return self.loaded.manifest

    def close(self) -> None:
        if self._loaded is not None:
            self._loaded.close()

    def __enter__(self) -> "DatasheetSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _page(self, page: Any, name: str = "page") -> int:
        n = self.loaded.manifest.pages
        if isinstance(page, bool) or not isinstance(page, int):
            if isinstance(page, str) and page.strip().isdigit():
                page = int(page)
            else:
                raise InvalidArgument(f"{name} must be a whole page number 1..{n}, got {page!r}")
        if not 1 <= page <= n:
            raise PageOutOfRange(f"{name} {page} is outside the document's pages 1..{n}")
        return page

    def build(self) -> dict[str, Any]:
        m = self.manifest
        data = m.model_dump(mode="json")
        if m.toc_source == "none":
            data["hint"] = "No table of contents: use search_text to find the parameter, then read its page."
        return data

    def search(self, query: Any, page: Any = None, max_results: Any = 20) -> list[dict[str, Any]]:
        if not isinstance(query, str) or not query.strip():
            raise EmptyQuery("query must be a non-empty string (a value, a parameter name or a phrase)")
        p = None if page is None else self._page(page)
        if isinstance(max_results, bool) or not isinstance(max_results, int) or not 1 <= max_results <= 200:
            raise InvalidArgument(f"max_results must be an integer 1..200, got {max_results!r}")
        L = self.loaded
        return [
            {"page": h.page, "snippet": h.snippet, "section": L.section_of(h.page, h.y), "match": h.match}
            for h in L.index.search(query, p, max_results)
        ]

    def section_text(self, start_page: Any, end_page: Any) -> str:
        a = self._page(start_page, "start_page")
        b = self._page(end_page, "end_page")
        if b < a:
            raise InvalidArgument(f"end_page {b} is before start_page {a}")
        if b - a >= 30:
            raise InvalidArgument(f"at most 30 pages per call, asked for {b - a + 1} ({a}..{b}); read in parts")
        L = self.loaded
        out = []
        for n in range(a, b + 1):
            pg = L.pages[n - 1]
            out.append(f"=== Page {n} ===")
            body = pg.body_lines()
            if not body:
                out.append("[no text layer on this page: use inspect_page to see it]")
                continue
            out.extend(ln.text for ln in body)
            note = self._continuation_note(n)
            if note:
                out.append(note)
        return "\n".join(out)

    def _continuation_note(self, n: int) -> str | None:
        L = self.loaded
        pg = L.pages[n - 1]
        text = " ".join(ln.text for ln in pg.lines[-6:]).lower()
        if n < L.manifest.pages and ("continued on next page" in text or "continued on the next page" in text):
            return f"[the table continues on page {n + 1}]"
        if n >= L.manifest.pages:
            return None
        here = self.tables(n)
        nxt = self.tables(n + 1)
        if here and nxt and nxt[0].header == here[-1].header and nxt[0].caption is None:
            return f"[the table continues on page {n + 1} (same header row)]"
        return None

    def _pdf_page(self, n: int) -> pymupdf.Page:
        """Page `n` (1-based, checked) of the open document; a page MuPDF cannot load makes it DamagedPdf."""
        try:
            return self.loaded.doc.load_page(n - 1)
        except MUPDF_ERRORS as exc:
            raise DamagedPdf(damaged(self.pdf_path, f"page {n} cannot be loaded: {mupdf_reason(exc)}")) from exc

    def tables(self, page: int) -> list:
        if page not in self._tables:
            self._tables[page] = page_tables(self._pdf_page(page))
        return self._tables[page]

    def table_markdown(self, page: Any) -> str:
        n = self._page(page)
        L = self.loaded
        if L.pages[n - 1].chars == 0:
            raise NoTextLayer(f"page {n} has no text layer (scanned or drawn); use inspect_page to see it")
        tables = self.tables(n)
        if not tables:
            return f"No table found on page {n}. Use get_section_text({n}, {n}) to read the page's text."
        parts = [f"Page {n}: {len(tables)} table(s)."]
        for k, t in enumerate(tables, 1):
            parts.append(f"\n### Table {k} of {len(tables)} on page {n}\n")
            parts.append(t.to_markdown())
        note = self._continuation_note(n)
        if note:
            parts.append("\n" + note)
        return "\n".join(parts)

    def page_png(self, page: Any, region: Any = None, dpi: Any = 100) -> bytes:
        n = self._page(page)
        if isinstance(dpi, bool) or not isinstance(dpi, (int, float)) or not 36 <= dpi <= 300:
            raise InvalidArgument(f"dpi must be a number 36..300, got {dpi!r}")
        p = self._pdf_page(n)
        clip = None
        if region is not None:
            if not isinstance(region, (list, tuple)) or len(region) != 4 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in region
            ):
                raise InvalidArgument(f"region must be [x0, y0, x1, y1] in PDF points, got {region!r}")
            clip = pymupdf.Rect(*region)
            rect = p.rect
            if clip.is_empty or clip.x0 < rect.x0 - 0.5 or clip.y0 < rect.y0 - 0.5 or clip.x1 > rect.x1 + 0.5 or clip.y1 > rect.y1 + 0.5:
                raise RegionOutsidePage(
                    f"region {list(region)} is not inside page {n} (0, 0, {rect.width:.0f}, {rect.height:.0f}) "
                    "or is empty"
                )
        try:
            return p.get_pixmap(dpi=int(dpi), clip=clip).tobytes("png")
        except MUPDF_ERRORS as exc:
            raise DamagedPdf(damaged(self.pdf_path, f"page {n} cannot be rendered: {mupdf_reason(exc)}")) from exc


# ------------------------------------------------------------------------------------------------------ definitions
def _guard(fn: Callable[[JsonObject], ToolResult]) -> Callable[[JsonObject], ToolResult]:
    def handler(args: JsonObject) -> ToolResult:
        try:
            if not isinstance(args, dict):
                raise InvalidArgument(f"arguments must be a JSON object, got {type(args).__name__}")
            return fn(args)
        except Exception as exc:  # no exception escapes a tool: the model reads the error instead
            if not isinstance(exc, DatasheetToolError):
                log.warning("datasheet tool failed: %s", exc, exc_info=True)
            return ToolResult.from_exception(exc)

    return handler


def _unknown(args: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(args) - allowed)
    if extra:
        raise InvalidArgument(f"unknown argument(s) {extra}; expected {sorted(allowed)}")


def datasheet_tools(session: DatasheetSession) -> list[Tool]:
    """The five tools bound to `session` (build_datasheet, get_section_text, search_text, extract_table_markdown,
    inspect_page)."""

    def build(args: JsonObject) -> ToolResult:
        _unknown(args, set())
        return ToolResult(json.dumps(session.build(), ensure_ascii=False))

    def section(args: JsonObject) -> ToolResult:
        _unknown(args, {"start_page", "end_page"})
        return ToolResult(session.section_text(args.get("start_page"), args.get("end_page", args.get("start_page"))))

    def search(args: JsonObject) -> ToolResult:
        _unknown(args, {"query", "page", "max_results"})
        hits = session.search(args.get("query"), args.get("page"), args.get("max_results", 20))
        payload: dict[str, Any] = {"query": args.get("query"), "hits": hits}
        if not hits:
            payload["hint"] = "No match. Try a shorter query (a number alone, or one word of the parameter name)."
        return ToolResult(json.dumps(payload, ensure_ascii=False))

    def table(args: JsonObject) -> ToolResult:
        _unknown(args, {"page"})
        return ToolResult(session.table_markdown(args.get("page")))

    def inspect(args: JsonObject) -> ToolResult:
        _unknown(args, {"page", "region", "dpi"})
        png = session.page_png(args.get("page"), args.get("region"), args.get("dpi", 100))
        return ToolResult(f"PNG of page {args.get('page')}, {len(png)} bytes",
                          images=(("image/png", base64.b64encode(png).decode("ascii")),))

    page_prop = {"type": "integer", "minimum": 1, "description": "1-based physical page number"}
    return [
        Tool(
            "build_datasheet",
            "Overview of the datasheet bound to this session: page count, part, revision, table of contents with "
            "page numbers and where it came from (toc_source: pdf_outline = exact bookmarks, reconstructed = "
            "inferred from layout, none), and the tables on each page with their captions. Call this first.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            _guard(build),
        ),
        Tool(
            "get_section_text",
            "The text of pages start_page..end_page (at most 30) in reading order, with '=== Page N ===' markers, "
            "running headers and footers removed, and a note when a table continues onto the next page.",
            {
                "type": "object",
                "properties": {"start_page": page_prop, "end_page": page_prop},
                "required": ["start_page", "end_page"],
                "additionalProperties": False,
            },
            _guard(section),
        ),
        Tool(
            "search_text",
            "Find a value, parameter name or phrase. Tries an exact match, then a normalised one (dashes/minus, "
            "µ/μ, °/º, ±/+/-, ligatures, hyphenation and spacing ignored), then the words of a table row even when "
            "they wrap. Each hit gives page, snippet and the section it is in. Optionally restrict to one page.",
            {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "page": page_prop,
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            _guard(search),
        ),
        Tool(
            "extract_table_markdown",
            "The tables of one page as markdown, rebuilt from the words' positions: numbers kept whole, minus signs "
            "as '-', the caption and test conditions printed above each table kept with it, and a group's label and "
            "unit repeated on every row they apply to. Use it to read the exact row of a parameter.",
            {
                "type": "object",
                "properties": {"page": page_prop},
                "required": ["page"],
                "additionalProperties": False,
            },
            _guard(table),
        ),
        Tool(
            "inspect_page",
            "A PNG image of a page, or of a region [x0, y0, x1, y1] in PDF points (origin top-left), to check a "
            "figure, a drawn table or a page without a text layer.",
            {
                "type": "object",
                "properties": {
                    "page": page_prop,
                    "region": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4},
                    "dpi": {"type": "integer", "minimum": 36, "maximum": 300, "default": 100},
                },
                "required": ["page"],
                "additionalProperties": False,
            },
            _guard(inspect),
        ),
    ]
