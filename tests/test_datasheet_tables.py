"""Table reconstruction on real pages: ruled multi-line cells, continuation lines, and ICDAR-2013 cell recall."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pymupdf
import pytest

from agent.datasheet import DatasheetSession
from agent.datasheet.normalise import fold
from agent.datasheet.tables import page_tables
from conftest import shared_path


@pytest.fixture(scope="module")
def acs():
    with DatasheetSession(shared_path("datasheets", "ACS70331.pdf")) as s:
        yield s


@pytest.fixture(scope="module")
def si115x():
    with DatasheetSession(shared_path("datasheets", "Si115x.pdf")) as s:
        yield s


def _rows(md: str) -> list[str]:
    return [ln for ln in md.splitlines() if ln.startswith("| ")]


def test_ruled_multiline_conditions_stay_in_their_row(acs):
    # ACS70331 page 5 draws a rule under every row; the test conditions wrap over two or three lines
    rows = _rows(acs.table_markdown(5))
    icc = next(r for r in rows if "| ICC |" in r)
    assert "no load on VIOUT, fuses powered down" in icc and "| 6 | mA |" in icc
    start = next(r for r in rows if "ICC_START_UP" in r)
    assert "VCC rises above VCC(min) to tFPD)" in start and "| 7.5 | mA |" in start
    # the label cell spans both sub-rows (no rule under it in the first column): it is repeated on each
    assert icc.startswith("| Supply Current |") and start.startswith("| Supply Current |")
    sat = next(r for r in rows if "VSAT_LOW" in r)
    assert "RL = 22 kΩ to VIOUT" in sat and "| 20 | 200 | mV |" in sat
    # no row is left holding only the wrapped tail of a condition
    assert not any(r.startswith("| Supply Current |  | VIOUT") for r in rows)


def test_si115x_value_beside_second_line_of_its_label(si115x):
    rows = _rows(si115x.table_markdown(47))
    ripple = next(r for r in rows if r.startswith("| VDD Supply Ripple Voltage"))
    assert "1 kHz – 10 MHz" in ripple and "| 50 | mVpp |" in ripple
    assert sum(r.startswith("| VDD Supply Ripple Voltage") for r in rows) == 1
    label = next(r for r in rows if "I2CVIH" in r)
    assert label.startswith("| SCL, SDA, Input High Logic Voltage |")  # "Volt-" + "age" joined


def test_si115x_page48_conditions_in_one_cell(si115x):
    rows = _rows(si115x.table_markdown(48))
    active = [r for r in rows if "I active" in r and "Responding to commands" in r]
    assert len(active) == 2
    assert all("calculating results of readings." in r for r in active)
    assert any("VDD = 1.8 V" in r and "| 4.25 |" in r for r in active)
    assert any("VDD = 3.3 V" in r and "| 4.5 |" in r for r in active)


# Five ICDAR-2013 documents that each exercise one repair: us-025 (a group header over three columns), eu-015
# (a landscape table on a /Rotate 90 page), us-016 (two columns with multi-line cells), us-034 (leader dots and
# numbers set one space apart), us-037 (column headings over three to five lines).
ICDAR_SUBSET = ["competition-dataset-us/us-025", "competition-dataset-eu/eu-015", "competition-dataset-us/us-016",
                "competition-dataset-us/us-034", "competition-dataset-us/us-037"]
# Recall measured on this subset when the repairs landed: 1628 of 1693 cells (0.962); before them 738 (0.436).
# Tolerance 0.01 (about 17 cells): the extraction is deterministic, so the margin only lets a small, deliberate
# trade-off elsewhere pass; each repair that this test guards moved 50 to 200 cells of the subset.
ICDAR_SUBSET_RECALL = 0.962
ICDAR_TOLERANCE = 0.01


def _icdar_cells(stem) -> tuple[int, int]:
    """(found, total): ground-truth cells whose folded text equals a cell of a table we rebuild on that page."""
    xml = shared_path("icdar2013", f"{stem}-str.xml")
    found = total = 0
    with pymupdf.open(xml.with_name(xml.name.replace("-str.xml", ".pdf"))) as doc:
        cache: dict[int, set[str]] = {}
        for region in ET.parse(xml).getroot().iter("region"):
            page = int(region.get("page"))
            if page not in cache:
                tables = page_tables(doc[page - 1])
                cache[page] = {fold(c) for t in tables for row in [t.header, *t.rows] for c in row if c}
            for cell in region.iter("cell"):
                text = fold(cell.findtext("content") or "")
                if text:
                    total += 1
                    found += text in cache[page]
    return found, total


def test_icdar_subset_cell_recall():
    found = total = 0
    for stem in ICDAR_SUBSET:
        f, t = _icdar_cells(stem)
        found, total = found + f, total + t
    assert total == 1693  # the ground truth itself (guards against reading the wrong files)
    assert found / total >= ICDAR_SUBSET_RECALL - ICDAR_TOLERANCE, f"{found}/{total}"
