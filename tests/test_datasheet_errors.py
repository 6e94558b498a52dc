"""Bad input never escapes a datasheet tool: each case returns one `is_error` result naming the problem, its type
in the `error_type` field and again at the head of the text the model reads."""

from __future__ import annotations

import base64
import json

import pymupdf
import pytest

from agent.datasheet import DatasheetSession, datasheet_tools
from agent.tool import ToolResult


def _tools(path) -> dict:
    return {t.name: t for t in datasheet_tools(DatasheetSession(path))}


def _error(result: ToolResult) -> str:
    assert result.is_error is True and result.images == ()
    text = result.text
    assert result.error_type and text.startswith(f"{result.error_type}: ")
    return text


def _text_pdf(path, pages: int = 2) -> None:
    doc = pymupdf.open()
    for k in range(pages):
        page = doc.new_page()
        page.insert_text((72, 72), f"Supply voltage VDD 1.7 3.6 V page {k + 1}")
        page.insert_htmlbox(pymupdf.Rect(72, 90, 500, 130), "Operating temperature \u201340 to 85 \u00baC")
    doc.save(path)
    doc.close()


@pytest.fixture
def small_pdf(tmp_path):
    p = tmp_path / "small.pdf"
    _text_pdf(p)
    return p


def test_five_tools_with_schemas(small_pdf):
    tools = datasheet_tools(DatasheetSession(small_pdf))
    assert [t.name for t in tools] == [
        "build_datasheet",
        "get_section_text",
        "search_text",
        "extract_table_markdown",
        "inspect_page",
    ]
    for t in tools:
        assert t.description and t.input_schema["type"] == "object"


def test_missing_file_every_tool_errors(tmp_path):
    tools = _tools(tmp_path / "nope.pdf")
    for name, args in [("build_datasheet", {}), ("search_text", {"query": "x"}), ("inspect_page", {"page": 1})]:
        assert _error(tools[name](args)).startswith("DocumentNotFound: ")


def test_not_a_pdf(tmp_path):
    p = tmp_path / "notes.pdf"
    p.write_text("just some text, not a PDF")
    assert _error(_tools(p)["build_datasheet"]({})).startswith("NotAPdf: ")


def test_encrypted_pdf(tmp_path):
    p = tmp_path / "locked.pdf"
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret")
    doc.save(p, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="user", owner_pw="owner")
    doc.close()
    assert _error(_tools(p)["build_datasheet"]({})).startswith("EncryptedPdf: ")


def test_zero_pages(tmp_path):
    # PyMuPDF refuses to save a document without pages, so write the smallest valid page tree by hand.
    p = tmp_path / "empty.pdf"
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for k, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % k + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 3\n0000000000 65535 f \n" + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size 3 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    p.write_bytes(bytes(out))
    msg = _error(_tools(p)["build_datasheet"]({}))
    assert msg.startswith(("EmptyDocument: ", "NotAPdf: "))


def test_page_without_text_layer(tmp_path):
    """One drawn page in a document that has text: that page is served page by page (a document with no text at
    all is image-only and refused whole: tests/test_damaged_datasheets.py)."""
    p = tmp_path / "scan.pdf"
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "Supply voltage VDD 1.7 3.6 V", fontsize=11)
    doc.new_page().draw_rect(pymupdf.Rect(50, 50, 200, 200), color=(0, 0, 0), fill=(0.5, 0.5, 0.5))
    doc.save(p)
    doc.close()
    tools = _tools(p)
    msg = _error(tools["extract_table_markdown"]({"page": 2}))
    assert msg.startswith("NoTextLayer: ") and "inspect_page" in msg
    manifest = json.loads(tools["build_datasheet"]({}).text)
    assert manifest["pages_without_text"] == [2]
    assert "inspect_page" in tools["get_section_text"]({"start_page": 2, "end_page": 2}).text


@pytest.mark.parametrize("page", [0, 3, -1, 1000])
def test_page_out_of_range(small_pdf, page):
    tools = _tools(small_pdf)
    assert _error(tools["extract_table_markdown"]({"page": page})).startswith("PageOutOfRange: ")
    assert _error(tools["inspect_page"]({"page": page})).startswith("PageOutOfRange: ")
    assert _error(tools["search_text"]({"query": "VDD", "page": page})).startswith("PageOutOfRange: ")


def test_bad_argument_types(small_pdf):
    tools = _tools(small_pdf)
    assert _error(tools["extract_table_markdown"]({"page": "two"})).startswith("InvalidArgument: ")
    assert _error(tools["extract_table_markdown"]({})).startswith("InvalidArgument: ")
    assert _error(tools["search_text"]({"query": "x", "colour": 1})).startswith("InvalidArgument: ")
    assert _error(tools["get_section_text"]({"start_page": 2, "end_page": 1})).startswith("InvalidArgument: ")


@pytest.mark.parametrize("query", ["", "   ", None, 5])
def test_empty_query(small_pdf, query):
    assert _error(_tools(small_pdf)["search_text"]({"query": query})).startswith("EmptyQuery: ")


@pytest.mark.parametrize("region", [[0, 0, 9999, 100], [-50, 0, 100, 100], [100, 100, 100, 100], [1, 2, 3]])
def test_region_outside_page(small_pdf, region):
    msg = _error(_tools(small_pdf)["inspect_page"]({"page": 1, "region": region}))
    assert msg.startswith(("RegionOutsidePage: ", "InvalidArgument: "))


def test_inspect_page_region_png(small_pdf):
    res = _tools(small_pdf)["inspect_page"]({"page": 1, "region": [50, 50, 300, 120], "dpi": 72})
    assert res.is_error is False and res.error_type is None
    (mime, data), = res.images
    assert mime == "image/png" and res.text == f"PNG of page 1, {len(base64.b64decode(data))} bytes"
    png = base64.b64decode(data)
    assert png.startswith(b"\x89PNG")
    pix = pymupdf.Pixmap(png)
    assert (pix.width, pix.height) == (250, 70)


def test_search_on_made_pdf_normalises(small_pdf):
    res = _tools(small_pdf)["search_text"]({"query": "-40 to 85 °C", "page": 2})
    hits = json.loads(res.text)["hits"]
    assert [h["page"] for h in hits] == [2]


def test_library_never_imports_a_layout_engine():
    """Importing pymupdf-layout / pymupdf4llm switches find_tables() to another engine for the whole process.

    PyMuPDF 2.0 as installed here already loads pymupdf.layout when `pymupdf` is imported, so the check is on our
    own code: no module of agent/datasheet imports either, and none relies on find_tables() (whose engine that
    switch changes); tables are rebuilt from words.
    """
    import ast
    from pathlib import Path

    import agent.datasheet as pkg

    for src in Path(pkg.__file__).parent.glob("*.py"):
        tree = ast.parse(src.read_text(encoding="utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in names if m.startswith(("pymupdf4llm", "pymupdf_layout", "pymupdf.layout"))], src
        calls = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
        assert "find_tables" not in calls, src
