"""The agent's datasheet tools from the command line: build, search, section, table, page, fetch.

Why its own module: each command opens the PDF with the typed open error (missing, not a PDF, encrypted, empty)
before the tool runs and returns a JSON-ready dict; fetching verifies each file's SHA-256. The CLI renders the
dicts with the `*_text` functions here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence


def datasheet_tool(pdf: Path, call: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """Open `pdf` (raising its open error first), call one tool on the session, return its result."""
    from agent.datasheet import DatasheetSession

    with DatasheetSession(pdf, None) as session:
        session.loaded  # noqa: B018 - raises the open error before the tool runs
        return call(session)


def search(pdf: Path, query: str, page: int | None, max_results: int) -> dict[str, Any]:
    return datasheet_tool(pdf, lambda s: {"hits": s.search(query, page, max_results)})


def section(pdf: Path, start: int, end: int) -> dict[str, Any]:
    return datasheet_tool(pdf, lambda s: {"text": s.section_text(start, end)})


def table(pdf: Path, page: int) -> dict[str, Any]:
    return datasheet_tool(pdf, lambda s: {"page": page, "markdown": s.table_markdown(page)})


def page_png(pdf: Path, page: int, out: Path, region: Sequence[float] | None, dpi: int,
             force: bool = False) -> dict[str, Any]:
    """Render a page (or a region of it) to the PNG file `out`: a new file in an existing folder unless `force`
    (checked before rendering), written whole (protocols.files.write_file_atomic)."""
    from protocols.files import check_output_path, write_file_atomic

    check_output_path(out, force=force, option="--out")
    png = datasheet_tool(pdf, lambda s: {"png": s.page_png(page, region, dpi)})["png"]
    write_file_atomic(out, png, force=force)
    return {"page": page, "out": str(out), "bytes": len(png)}


def build(pdf: Path, cache_dir: Path | None) -> dict[str, Any]:
    """The manifest: pages, part, revision, contents (and where they came from), tables per page."""
    from agent.datasheet import ManifestCache, build_datasheet

    m = build_datasheet(pdf, ManifestCache(cache_dir) if cache_dir else None)
    return {"pages": m.pages, "part": m.part, "revision": m.revision, "sha256": m.sha256, "toc_source": m.toc_source,
            "toc_note": m.toc_note, "toc": [t.model_dump() for t in m.toc], "tables": [t.model_dump() for t in m.tables]}


def fetch(part: str | None, folder: Path, mirror: str | None, say: Callable[[str], None] = lambda m: None
          ) -> dict[str, Any]:
    """Download one known datasheet (every one the job uses with `part` None) into `folder`, each hash verified."""
    from agent.datasheet.fetch import fetch_datasheets

    return fetch_datasheets(part, folder, mirror, say=say)


def search_text(d: Mapping[str, Any]) -> str:
    return "\n".join(f"p{h['page']} [{h['section']}] {h['snippet']}" for h in d["hits"]) or "no match"


def build_text(d: Mapping[str, Any]) -> str:
    return "\n".join([f"{d['part']} {d['revision']}: {d['pages']} pages; contents from {d['toc_source']}",
                      d["toc_note"]]
                     + [f"{'  ' * (t['level'] - 1)}{t['title']} .... p{t['page']}" for t in d["toc"]]
                     + [f"tables ({len(d['tables'])}):"] + [f"  p{t['page']}: {t['caption']}" for t in d["tables"]])


def fetch_text(d: Mapping[str, Any]) -> str:
    from agent.datasheet.fetch import fetch_text as text

    return text(d)
