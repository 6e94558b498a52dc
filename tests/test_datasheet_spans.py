"""Every claim's verbatim span, as printed in the PDF's text layer, is found again by search_text on its page.

This is what the detector's source-grounding check relies on: a quotation copied from the document — line-break
hyphenation ("com- mands"), dashes and all — must be re-locatable.
"""

from __future__ import annotations

import pytest

from agent.datasheet import DatasheetSession
from conftest import shared_path
from protocols.claims import load_claims

CLAIMS = sorted(load_claims().values(), key=lambda c: c.id)


@pytest.fixture(scope="module")
def sessions():
    opened: dict[str, DatasheetSession] = {}
    yield opened
    for s in opened.values():
        s.close()


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_the_claim_span_is_found_on_its_page(claim, sessions):
    pdf = shared_path("datasheets", claim.identity.filename)
    session = sessions.setdefault(claim.identity.filename, DatasheetSession(pdf))
    hits = session.search(claim.source.span, page=claim.source.page)
    assert hits, f"{claim.id}: span not found on page {claim.source.page}: {claim.source.span!r}"


def test_a_hyphenated_query_matches_the_joined_word():
    shared = shared_path("datasheets", "Si115x.pdf")
    with DatasheetSession(shared) as s:
        joined = s.search("commands", page=48)
        hyphenated = s.search("com- mands", page=48)
    assert joined and hyphenated
    assert {h["page"] for h in hyphenated} == {48}
