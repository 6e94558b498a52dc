"""protocols.text.fold and its named uses, checked against the folding rules on the real corpus.

The corpus is every text the folds meet: each page's text layer, reading-order lines, get_section_text and
get_table_markdown output of the nine datasheets, every raw table cell handed to clean_cell, and every claim's span,
needles, unit, parameter and table caption. Each named fold (the datasheet index's, the table reader's, the claim
files', the scripted reader's, the fidelity scorer's) must, on all of it, leave none of the characters its options
fold, have the space and case shape its options promise, keep every letter and digit, and be idempotent. When the
five old folds were replaced, a test ran old and new side by side on this corpus and found them identical (commit
"protocols/text.fold and protocols/units"); these properties are what that equality rested on.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable

import pytest

import agent.datasheet.tables as tables_mod
from agent.datasheet import DatasheetSession, normalise
from agent.datasheet.document import DatasheetToolError
from agent.reader_text import fold as reader_fold
from agent.scoring.fidelity import fold_text
from conftest import shared_path
from protocols.claims import load_claims, normalise_text
from protocols.text import DASHES, INVISIBLE, LIGATURES, SIGNS, SPACES, SUPERSCRIPTS, SYMBOLS, fold
from protocols.units import fold_unit


@pytest.fixture(scope="module")
def corpus(monkeypatch_module) -> list[str]:
    texts: list[str] = []
    real_clean = normalise.clean_cell

    def recording_clean_cell(t: str) -> str:
        texts.append(t)
        return real_clean(t)

    monkeypatch_module.setattr(tables_mod, "clean_cell", recording_clean_cell)
    for pdf in sorted(shared_path("datasheets").glob("*.pdf")):
        with DatasheetSession(pdf) as s:
            for n in range(1, s.loaded.manifest.pages + 1):
                texts.append(s.loaded.doc[n - 1].get_text())
                texts.extend(ln.text for ln in s.loaded.pages[n - 1].lines)
                texts.append(s.section_text(n, n))
                try:
                    texts.append(s.table_markdown(n))
                except DatasheetToolError:  # a page without a text layer
                    pass
    for c in load_claims().values():
        texts += [c.source.span, *c.source.needles, c.unit, c.parameter, c.source.table or ""]
    return texts


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


# name -> (the fold as its callers call it, the options it was built with)
NAMED: dict[str, tuple[Callable[[str], str], dict]] = {
    "index page (normalise.fold)": (normalise.fold, dict(ligatures=True, symbols=True, hyphenation=True,
                                                          case="lower")),
    "index query (normalise.fold_query)": (normalise.fold_query, dict(ligatures=True, symbols=True, case="lower")),
    "characters (normalise.map_chars)": (normalise.map_chars, dict(ligatures=True, symbols=True, spaces="keep")),
    "table cell (normalise.clean_cell)": (normalise.clean_cell, dict(dashes="minus", ligatures=True,
                                                                     spaces="inline")),
    "claim text (normalise_text)": (normalise_text, dict(signs=False)),
    "claim text, signs (normalise_text)": (lambda t: normalise_text(t, signs=True), dict()),
    "claim text, dashes kept (normalise_text)": (lambda t: normalise_text(t, dashes=False),
                                                 dict(dashes="keep", signs=False)),
    "reader (reader_text.fold)": (reader_fold, dict()),
    "fidelity text (fold_text)": (fold_text, dict(ligatures=True, symbols=True, superscripts=True, case="lower")),
}


def _spelled(text: str, opts: dict) -> str:
    """The text with the spellings its options choose written out (ligatures, symbols, superscripts), case folded."""
    t = unicodedata.normalize("NFC", text)
    for wanted, mapping in (("ligatures", LIGATURES), ("symbols", SYMBOLS), ("superscripts", SUPERSCRIPTS)):
        if opts.get(wanted):
            t = "".join(mapping.get(c, c) for c in t)
    return t.lower() if opts.get("case") == "lower" else t


def _alnum(text: str) -> str:
    """The letters and digits a fold must keep (the look-alike signs and superscripts are folded, not kept)."""
    return "".join(c for c in text if c.isalnum() and c not in SIGNS and c not in SUPERSCRIPTS
                   and c not in SIGNS.values())


@pytest.mark.parametrize("name", list(NAMED))
def test_each_named_fold_is_its_options_and_keeps_to_its_rules(name, corpus):
    named, opts = NAMED[name]
    dashes, spaces = opts.get("dashes", "all"), opts.get("spaces", "collapse")
    gone = set(INVISIBLE)
    gone |= set(DASHES) if dashes == "all" else {"\u2212"} if dashes == "minus" else set()
    for wanted, mapping in (("signs", SIGNS), ("ligatures", LIGATURES), ("symbols", SYMBOLS),
                            ("superscripts", SUPERSCRIPTS)):
        if opts.get(wanted, wanted == "signs"):
            gone |= set(mapping)
    gone |= set(SPACES) if spaces in ("collapse", "keep", "inline") else set()
    for text in corpus:
        out = named(text)
        assert out == fold(text, **opts), (name, text[:80])
        # idempotent, except hyphenation: joining "ip- ip- vcc" once leaves a pair the next pass would join
        assert opts.get("hyphenation") or fold(out, **opts) == out, (name, text[:80])
        assert not gone & set(out), (name, sorted(gone & set(out)), text[:80])
        assert _alnum(out) == _alnum(_spelled(text, opts)), (name, text[:80])
        if dashes == "keep":
            assert [c for c in out if c in DASHES] == [c for c in text if c in DASHES], (name, text[:80])
        if dashes == "minus":
            assert not re.search(r"(^|[\s(=<>/,;:\[])[" + DASHES + r"](?=\d|\.\d)", out), (name, text[:80])
        if spaces == "collapse":
            assert out == out.strip() and "  " not in out and not re.search(r"[^\S ]", out), (name, text[:80])
        if spaces == "inline":
            assert out == out.strip() and "  " not in out and out.count("\n") <= text.count("\n"), name
        if spaces == "keep":
            assert len(re.findall(r"\s", out)) == len(re.findall(r"\s", _spelled(text, opts))), (name, text[:80])
        if opts.get("case") == "lower":
            assert out == out.lower(), (name, text[:80])


def test_fold_unit_on_every_claim_unit_and_needle(corpus):
    for text in corpus:
        out = fold_unit(text)
        assert out == out.lower() and not re.search(r"\s", out) and not set(INVISIBLE) & set(out), text[:80]
    # idempotent on units (not on running text: "VOH m" folds to "vohm", which a second pass would read as "vω")
    for c in load_claims().values():
        for unit in (c.unit, *c.source.needles):
            assert fold_unit(fold_unit(unit)) == fold_unit(unit), (c.id, unit)
    assert {fold_unit(u) for u in ("kΩ", "k Ω", "kOhm", "k\u2126", "kohm")} == {"kω"}
    assert fold_unit("µA") == fold_unit("μA") == fold_unit("\u00b5 A") and fold_unit("ºC") == fold_unit("°C")
    assert fold_unit("m²") == "m2" and fold_unit("Pa RMS") == "parms"


@pytest.mark.parametrize("text, opts, want", [
    ("–40 ºC", {}, "-40 °C"),
    ("–40 ºC", dict(dashes="keep", signs=False), "–40 ºC"),
    ("1.7 – 3.6 V, –40 to (—0.3)", dict(dashes="minus", spaces="inline"), "1.7 – 3.6 V, -40 to (-0.3)"),
    ("–", dict(dashes="minus", spaces="inline"), "–"),  # a dash alone in a cell means "no value"
    ("2 \u2212 1", dict(dashes="minus"), "2 - 1"),
    ("com- mands and com-\nmands", dict(hyphenation=True), "commands and commands"),
    ("com- mands", {}, "com- mands"),
    ("a\u00a0\u2009b\n\tc", {}, "a b c"),
    ("a  b\nc", dict(spaces="inline"), "a b\nc"),
    ("a \u2009b", dict(spaces="drop"), "ab"),
    ("a \u2009b", dict(spaces="keep"), "a  b"),
    ("RESET\u0305 soft\u00adhyphen\u200b\ufeff", {}, "RESET softhyphen"),
    ("\ufb01rst ± 5 ≤ 6 × 2 “q”", dict(ligatures=True, symbols=True), 'first +/- 5 <= 6 x 2 "q"'),
    ("\ufb01rst", {}, "\ufb01rst"),
    ("m² μA \u2126", dict(superscripts=True), "m2 µA Ω"),
    ("e\u0301", {}, "\u00e9"),  # NFC
    ("Max. VDD", dict(case="lower"), "max. vdd"),
])
def test_fold_option_examples(text, opts, want):
    assert fold(text, **opts) == want


def test_the_reader_fold_folds_the_ohm_sign_like_every_other():
    """The scripted reader's old fold left U+2126 as printed, so "10 k\u2126" in a datasheet's text never equalled
    a claim's "10 kΩ"; now all folds spell it one way (the reader's 37 cells read the same as before)."""
    assert reader_fold("10 k\u2126") == reader_fold("10 kΩ") == "10 kΩ"


def test_claim_text_folds_every_dash_and_drops_overlines():
    """normalise_text had its own dash set without U+FE58 and kept overlines; it now uses the one set."""
    assert normalise_text("\ufe5840 RESET\u0305") == "-40 RESET"


def test_a_cell_drops_every_invisible_character():
    """clean_cell kept zero-width joiners and the BOM; it now drops what every fold drops."""
    assert normalise.clean_cell("1\u200c0\u200d0\ufeff") == "100"
