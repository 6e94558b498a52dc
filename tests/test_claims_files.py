"""The packaged claim files: they load, they are the agreed set, and every span and needle is in the real PDF."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pymupdf
import pytest

from protocols.claims import get_claim, load_claims, normalise_text
from protocols.datasheets import datasheet_for

PAPER_IDS = {
    "DPS310": {
        "dps310-relative-accuracy", "dps310-absolute-accuracy", "dps310-pressure-precision-high",
        "dps310-pressure-temp-sensitivity", "dps310-temperature-accuracy", "dps310-current-1hz-low-precision",
        "dps310-supply-voltage-vdd", "dps310-meas-time-standard", "dps310-pressure-rate-range",
        "dps310-pressure-data-resolution", "dps310-operating-range",
    },
    "Si115x": {
        "si115x-adc-bit-depth", "si115x-operating-temperature", "si115x-supply-voltage-vdd",
        "si115x-standby-current-1v8", "si115x-active-current-3v3", "si115x-processing-time",
        "si115x-vis-response-525nm", "si115x-als-resolution-mlx", "si115x-supply-ripple",
    },
    "ACS70331": {
        "acs70331-bandwidth", "acs70331-supply-current-max", "acs70331-rise-time",
        "acs70331-primary-resistance-qfn", "acs70331-saturation-low",
    },
    "A4988": {
        "a4988-logic-supply-voltage-range", "a4988-load-supply-voltage-range", "a4988-output-on-resistance",
        "a4988-body-diode-forward-voltage", "a4988-logic-supply-current-max", "a4988-logic-input-hysteresis",
        "a4988-blank-time", "a4988-fixed-off-time", "a4988-thermal-shutdown-temperature",
        "a4988-operating-ambient-temperature", "a4988-storage-temperature", "a4988-reference-input-voltage-range",
    },
}


@pytest.fixture(scope="module")
def claims():
    return load_claims()


@pytest.fixture(scope="module")
def pages(request):
    """Page texts of the real PDFs, keyed by (part, page), read once per module."""
    from conftest import shared_path

    cache: dict[tuple[str, int], str] = {}

    def get(part: str, page: int) -> str:
        key = (part, page)
        if key not in cache:
            ident = datasheet_for(part)
            path = shared_path("datasheets", ident.filename)
            with pymupdf.open(path) as doc:
                assert doc.page_count == ident.pages
                cache[key] = doc[page - 1].get_text()
        return cache[key]

    return get


def test_all_37_claims_load_with_the_papers_ids(claims):
    assert len(claims) == 37
    assert set(claims) == set().union(*PAPER_IDS.values())


def test_counts_per_component(claims):
    counts = Counter(c.component for c in claims.values())
    assert counts == {"DPS310": 11, "Si115x": 9, "ACS70331": 5, "A4988": 12}
    for component, ids in PAPER_IDS.items():
        assert {c.id for c in claims.values() if c.component == component} == ids


def test_ids_unique_across_files(claims):
    ids = [c.id for c in claims.values()]
    assert len(ids) == len(set(ids))


def test_every_claim_names_a_known_datasheet_identity(claims):
    for c in claims.values():
        ident = c.identity
        assert ident.part == c.component
        assert len(ident.sha256) == 64 and ident.url.startswith("https://")
        assert 1 <= c.source.page <= ident.pages


@pytest.mark.parametrize("claim_id", sorted(set().union(*PAPER_IDS.values())))
def test_span_is_on_its_source_page_and_needles_in_span(claims, pages, claim_id):
    c = claims[claim_id]
    page_text = normalise_text(pages(c.datasheet, c.source.page))
    # whitespace- and dash-normalised match against the page's text layer
    assert normalise_text(c.source.span) in page_text, f"{claim_id}: span not on page {c.source.page}"
    # the span is kept verbatim: it also matches with only whitespace normalised (dashes, µ/μ, º/° as printed)
    assert c.source.span in normalise_text(pages(c.datasheet, c.source.page), dashes=False)
    for needle in c.source.needles:
        assert needle in c.source.span


def test_table_caption_is_on_the_page_or_the_one_before(claims, pages):
    for c in claims.values():
        if c.source.table is None:
            continue
        here = normalise_text(pages(c.datasheet, c.source.page))
        before = normalise_text(pages(c.datasheet, c.source.page - 1)) if c.source.page > 1 else ""
        caption = normalise_text(c.source.table)
        assert caption in here or caption in before, f"{c.id}: caption {c.source.table!r} not found"


def test_numeric_values_are_exact_decimals(claims):
    res = claims["dps310-pressure-data-resolution"]
    assert isinstance(res.high, Decimal) and res.high == Decimal("0.06") and str(res.high) == "0.06"
    assert claims["dps310-relative-accuracy"].tolerance.value == Decimal("6")


def test_every_value_needle_is_a_printed_number_of_the_claim(claims):
    """A numeric needle must be one of the claim's own numbers (value, bounds or tolerance), dash-normalised."""
    for c in claims.values():
        numbers = {x for x in (c.value, c.low, c.high, c.tolerance.value) if x is not None}
        # a printed bit depth "N-bit" stands for the derived code bound 2^N - 1
        needles = [str(2 ** int(n[:-4]) - 1) if n.endswith("-bit") else n for n in c.source.needles]
        numeric = [n for n in needles if normalise_text(n).lstrip("<-").replace(".", "", 1).isdigit()]
        assert numeric, f"{c.id}: no numeric needle"
        for n in numeric:
            as_number = Decimal(normalise_text(n).lstrip("<"))
            assert as_number in numbers, f"{c.id}: needle {n!r} is not one of {sorted(numbers)}"


def test_protocol_keys_follow_the_contract(claims):
    def of_component(name):
        return [c for c in claims.values() if c.component.lower() == name.lower()]

    assert of_component("ACS70331") and all(c.protocol == "acs70331.engagement" for c in of_component("ACS70331"))
    assert of_component("A4988") and all(c.protocol is None for c in of_component("A4988"))
    op = get_claim("dps310-operating-range", claims)
    assert (op.protocol, op.kind, op.low, op.high, op.unit) == ("dps310.operating_range", "range", 300, 1200, "hPa")
    assert {c.variable for c in op.conditions if c.decisive and c.matched} == {"load_in", "load_out"}
    assert get_claim("si115x-adc-bit-depth", claims).protocol == "si115x.adc_bit_depth"
    assert "16-bit" in get_claim("si115x-adc-bit-depth", claims).notes
    for key in ("dps310.relative_accuracy", "dps310.absolute_accuracy", "dps310.pressure_precision"):
        assert any(c.protocol == key for c in claims.values()), key


def test_known_paper_mistakes_are_fixed(claims):
    rel = claims["dps310-relative-accuracy"]
    assert rel.source.page == 9 and any("1.8V" in c.value for c in rel.conditions)
    assert claims["dps310-operating-range"].source.page == 6
    assert claims["dps310-absolute-accuracy"].source.page == 9
    res = claims["dps310-pressure-data-resolution"]
    assert res.kind == "max_rating" and res.value is None
    cur = claims["dps310-current-1hz-low-precision"]
    assert (cur.source.page, cur.value) == (7, Decimal("2.1"))
    assert "23-bit" in claims["si115x-adc-bit-depth"].source.needles
    assert "AB00" in claims["si115x-vis-response-525nm"].source.table
    als = claims["si115x-als-resolution-mlx"]
    assert als.kind == "max_rating" and als.high == 100
    assert claims["acs70331-supply-current-max"].high == 6
    assert "VSAT_LOW" not in claims["acs70331-saturation-low"].source.needles
    assert "º" in claims["a4988-operating-ambient-temperature"].source.span


def test_every_unmatched_condition_says_why(claims):
    for c in claims.values():
        assert c.conditions, c.id
        for cond in c.conditions:
            assert (cond.variable is None) != (cond.unmatchable is None)
            if cond.unmatchable is not None:
                assert len(cond.unmatchable) > 10
