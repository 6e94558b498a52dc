"""Datasheet identities: the packaged table matches the real PDFs byte for byte, and lookups fail clearly."""

from __future__ import annotations

import pytest

from protocols.datasheets import (
    DatasheetError,
    UnknownDatasheet,
    datasheet_for,
    known_datasheets,
    parse_datasheets,
    sha256_of,
)


def test_four_parts_with_public_urls():
    parts = [d.part for d in known_datasheets()]
    assert parts == ["DPS310", "Si115x", "ACS70331", "A4988"]
    for d in known_datasheets():
        assert d.url.startswith("https://raw.githubusercontent.com/juangamella/causal-chamber/main/hardware/datasheets/")


def test_sha256_and_pages_match_the_real_pdfs(datasheets_dir):
    import pymupdf

    for d in known_datasheets():
        path = datasheets_dir / d.filename
        assert sha256_of(path) == d.sha256
        d.verify_file(path)  # does not raise
        with pymupdf.open(path) as doc:
            assert doc.page_count == d.pages


def test_verify_file_rejects_another_document(datasheets_dir):
    with pytest.raises(DatasheetError, match="does not match DPS310"):
        datasheet_for("DPS310").verify_file(datasheets_dir / "A4988.pdf")


def test_lookup_is_case_insensitive_and_unknown_names_the_known_parts():
    assert datasheet_for("si115x").part == "Si115x"
    with pytest.raises(UnknownDatasheet, match="'TPS6594'.*DPS310, Si115x, ACS70331, A4988"):
        datasheet_for("TPS6594")


def test_bad_table_names_entry_and_field():
    text = "datasheets:\n  - {part: X, revision: r, sha256: abc, url: 'https://x', filename: x.pdf, pages: 1}\n"
    with pytest.raises(DatasheetError, match="datasheet X: field 'sha256'"):
        parse_datasheets(text, source="t.yaml")
