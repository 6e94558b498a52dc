"""The datasheet tools on the four real PDFs: every claim needle on its correct page, range rows, contents."""

from __future__ import annotations

import re

import pytest
import yaml

from agent.datasheet import DatasheetSession, build_datasheet
from conftest import shared_path

FILES = {"dps310": "DPS310.pdf", "si115x": "Si115x.pdf", "acs70331": "ACS70331.pdf", "a4988": "A4988.pdf"}

# Correct source page of each claim's needles, checked against the PDF text layer (claims-notes.md lists the
# paper's wrong citations: DPS310 operating range is Table 3 on page 6, accuracy rows Table 7 on page 9; physical
# page = printed page in all four PDFs). in_table: the value sits in a table on that page.
# The two DPS310 accuracy claims keep page 1: only there are they printed in hPa ("± 0.06 hPa", "± 1 hPa");
# Table 7 prints them as "+/-6 Pa" and "+/-100 Pa".
CORRECT_PAGE: dict[str, tuple[int, bool]] = {
    "dps310-relative-accuracy": (1, False),
    "dps310-absolute-accuracy": (1, False),
    "dps310-pressure-precision-high": (9, True),
    "dps310-pressure-temp-sensitivity": (9, True),
    "dps310-temperature-accuracy": (8, True),
    "dps310-current-1hz-low-precision": (7, True),
    "dps310-supply-voltage-vdd": (6, True),
    "dps310-meas-time-standard": (9, True),
    "dps310-pressure-rate-range": (9, True),
    "dps310-pressure-data-resolution": (9, True),
    "dps310-operating-range": (6, True),
    "si115x-adc-bit-depth": (1, False),
    "si115x-operating-temperature": (47, True),
    "si115x-supply-voltage-vdd": (47, True),
    "si115x-standby-current-1v8": (47, True),
    "si115x-active-current-3v3": (48, True),
    "si115x-processing-time": (48, True),
    "si115x-vis-response-525nm": (49, True),
    "si115x-als-resolution-mlx": (1, False),
    "si115x-supply-ripple": (47, True),
    "acs70331-bandwidth": (5, True),
    "acs70331-supply-current-max": (5, True),
    "acs70331-rise-time": (5, True),
    "acs70331-primary-resistance-qfn": (5, True),
    "acs70331-saturation-low": (5, True),
    "a4988-logic-supply-voltage-range": (4, True),
    "a4988-load-supply-voltage-range": (4, True),
    "a4988-output-on-resistance": (4, True),
    "a4988-body-diode-forward-voltage": (4, True),
    "a4988-logic-supply-current-max": (4, True),
    "a4988-logic-input-hysteresis": (4, True),
    "a4988-blank-time": (4, True),
    "a4988-fixed-off-time": (4, True),
    "a4988-thermal-shutdown-temperature": (4, True),
    "a4988-operating-ambient-temperature": (2, True),
    "a4988-storage-temperature": (2, True),
    "a4988-reference-input-voltage-range": (4, True),
}


def _claims() -> list[dict]:
    data = shared_path("paper-archive", "data")
    out = []
    for name in ("claims.yaml", "claims_a4988.yaml"):
        out += yaml.safe_load((data / name).read_text(encoding="utf-8"))["claims"]
    return out


@pytest.fixture(scope="module")
def sessions():
    folder = shared_path("datasheets")
    opened = {key: DatasheetSession(folder / name) for key, name in FILES.items()}
    yield opened
    for s in opened.values():
        s.close()


@pytest.fixture(scope="module")
def claims():
    return _claims()


def _numbers(needles: list[str]) -> list[str]:
    return [n for n in needles if re.search(r"\d", n)]


def test_every_claim_has_a_checked_page(claims):
    assert len(claims) == 37
    assert {c["id"] for c in claims} == set(CORRECT_PAGE)


def test_needles_found_by_search_on_their_page(sessions, claims):
    missing = []
    for c in claims:
        page, _ = CORRECT_PAGE[c["id"]]
        s = sessions[c["id"].split("-")[0]]
        for needle in c["value_contains"]:
            hits = s.search(needle, page=page)
            if not hits or any(h["page"] != page for h in hits):
                missing.append((c["id"], needle, page))
    assert missing == []


def test_table_needles_in_markdown_of_their_page(sessions, claims):
    missing = []
    for c in claims:
        page, in_table = CORRECT_PAGE[c["id"]]
        if not in_table:
            continue
        md = sessions[c["id"].split("-")[0]].table_markdown(page)
        missing += [(c["id"], n) for n in c["value_contains"] if n not in md]
    assert missing == []


def test_both_numbers_of_a_range_on_one_markdown_row(sessions, claims):
    checked, broken = 0, []
    for c in claims:
        page, in_table = CORRECT_PAGE[c["id"]]
        nums = _numbers(c["value_contains"])
        if not in_table or len(nums) < 2:
            continue
        checked += 1
        md = sessions[c["id"].split("-")[0]].table_markdown(page)
        rows = [ln for ln in md.splitlines() if ln.startswith("|")]
        if not any(all(n in row for n in nums) for row in rows):
            broken.append(c["id"])
    assert checked >= 10  # every range claim of the set is in a table
    assert broken == []


def test_dps310_page9_numbers_are_not_split(sessions):
    md = sessions["dps310"].table_markdown(9)
    for whole in ("0.06", "27.6", "+/-6", "0.063", "0.35"):
        assert whole in md
    assert "006\n." not in md and "| 006" not in md and "276" not in md


def test_minus_signs_and_units_kept(sessions):
    md47 = sessions["si115x"].table_markdown(47)
    row = next(r for r in md47.splitlines() if r.startswith("| Operating Temperature"))
    assert "| -40 |" in row and "| 85 |" in row and "°C" in row
    # DPS310 Table 5 prints µA only on the first row of the I1Hz group; every row of the group keeps it
    md7 = sessions["dps310"].table_markdown(7)
    for value in ("2.1", "11", "38"):
        row = next(r for r in md7.splitlines() if f"| {value} |" in r)
        assert "µA" in row, row


def test_centred_labels_repeat_on_their_rows(sessions):
    md = sessions["a4988"].table_markdown(4)
    rows = [r for r in md.splitlines() if "RMS" in r]
    assert len(rows) == 3 and all(r.startswith("| Microstep Select") for r in rows)
    on = [r for r in md.splitlines() if "Driver, IOUT" in r]
    assert len(on) == 2 and all(r.startswith("| Output On Resistance") for r in on)


def test_caption_and_test_conditions_kept_with_table(sessions):
    md = sessions["dps310"].table_markdown(9)
    assert "Table 7 Pressure Transfer Function" in md
    assert md.index("Test conditions") < md.index("| Parameter")
    acs = sessions["acs70331"].table_markdown(5)
    assert acs.index("COMMON ELECTRICAL CHARACTERISTICS") < acs.index("| Characteristic")


@pytest.mark.parametrize(
    ("key", "query", "page"),
    [
        ("si115x", "-40", 47),  # printed with an en dash
        ("a4988", "-55 to 150 °C", 2),  # printed "–55 to 150" and "ºC" (U+00BA)
        ("a4988", "1.3 μs", 4),  # Greek mu in the query, micro sign or mu in the text
        ("dps310", "±0.5 °C", 8),  # printed "+/-0.5"
        ("dps310", "Pressure temperature sensitivity of calibrated measurements", 9),  # wrapped table cell
        ("a4988", "Blank Time tBLANK 0.7 1 1.3", 4),  # a table row's words
    ],
)
def test_search_normalises(sessions, key, query, page):
    hits = sessions[key].search(query)
    assert any(h["page"] == page for h in hits), hits


def test_search_hit_names_its_section(sessions):
    hits = sessions["dps310"].search("27.6", page=9)
    assert hits and "Pressure Transfer Function" in (hits[0]["section"] or "")


@pytest.mark.parametrize(
    ("key", "part", "revision", "source", "pages"),
    [
        ("dps310", "DPS310", "V1.1", "pdf_outline", 41),
        ("si115x", "Si115x", "Rev. 1.4", "pdf_outline", 65),
        ("acs70331", "ACS70331", "Rev. 2", "reconstructed", 26),
        ("a4988", "A4988", "Rev. 5", "reconstructed", 20),
    ],
)
def test_manifest_facts(sessions, key, part, revision, source, pages):
    m = sessions[key].manifest
    assert (m.part, m.revision, m.toc_source, m.pages) == (part, revision, source, pages)
    if source == "reconstructed":
        assert "inferred" in m.toc_note


@pytest.mark.parametrize(("key", "page"), [("acs70331", 5), ("a4988", 4)])
def test_reconstructed_toc_points_at_electrical_characteristics(sessions, key, page):
    entries = [e for e in sessions[key].manifest.toc if e.title.upper().startswith("ELECTRICAL CHARACTERISTICS")]
    assert entries and entries[0].page == page


def test_reconstructed_toc_finds_title_case_headings(sessions):
    # A4988 sets its section headings in title case, 12 pt bold over 10 pt body text (checked in the text layer)
    toc = sessions["a4988"].manifest.toc
    where = {e.title: e.page for e in toc}
    assert where.get("Functional Description") == 7
    assert where.get("Absolute Maximum Ratings") == 2
    assert any(t.upper().startswith("ELECTRICAL CHARACTERISTICS") and p == 4 for t, p in where.items())
    # no noise: bold 9 pt group labels inside the page-4 table, and an equation set in a large font
    assert not {"Output Drivers", "Control Logic", "Protection"} & set(where)
    assert not any("=" in t for t in where)
    assert len(toc) <= 25


def test_manifest_lists_captioned_tables(sessions):
    tables = sessions["dps310"].manifest.tables
    assert any(t.page == 9 and (t.caption or "").startswith("Table 7") for t in tables)
    assert any(t.page == 7 and (t.caption or "").startswith("Table 5") for t in tables)


def test_section_text_drops_running_footer_and_marks_pages(sessions):
    text = sessions["dps310"].section_text(8, 9)
    assert text.startswith("=== Page 8 ===") and "=== Page 9 ===" in text
    assert "2019-07-11" not in text  # footer on every page
    assert "Table 7" in text


def test_section_text_notes_continued_table(sessions):
    assert "continues on page 6" in sessions["acs70331"].section_text(5, 5)


def test_build_datasheet_cache_by_sha(tmp_path):
    pdf = shared_path("datasheets", "A4988.pdf")
    from agent.datasheet import ManifestCache

    cache = ManifestCache(tmp_path)
    first = build_datasheet(pdf, cache)
    files = list(tmp_path.glob("*.manifest.json"))
    assert [f.name for f in files] == [f"{first.sha256}.manifest.json"]
    again = build_datasheet(pdf, ManifestCache(tmp_path))  # a new cache object reads the file
    assert again == first
