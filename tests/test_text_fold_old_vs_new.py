"""Old folding functions vs protocols.text.fold on the real corpus (temporary: proves the move before deletion)."""

from __future__ import annotations

import pytest

from agent.datasheet import DatasheetSession
from agent.datasheet import normalise as old_norm
from agent import reader_text as old_reader
from agent.scoring import fidelity as old_fid
from conftest import shared_path
from protocols import claims as old_claims
from protocols.claims import load_claims
from protocols.text import fold
from protocols.units import SI_PREFIX_FLOAT, fold_unit


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    texts: list[str] = []
    cells: list[str] = []
    real_clean = old_norm.clean_cell

    def spy(t: str) -> str:
        cells.append(t)
        return real_clean(t)

    import agent.datasheet.tables as tables_mod
    tables_mod.clean_cell = spy
    try:
        root = shared_path("datasheets")
        for pdf in sorted(root.glob("*.pdf")):
            with DatasheetSession(pdf) as s:
                L = s.loaded
                for n in range(1, L.manifest.pages + 1):
                    texts.append(L.doc[n - 1].get_text())
                    texts.extend(ln.text for ln in L.pages[n - 1].lines)
                    texts.append(s.section_text(n, n))
                    try:
                        texts.append(s.table_markdown(n))
                    except Exception:  # a page with no text layer
                        pass
    finally:
        tables_mod.clean_cell = real_clean
    for c in load_claims().values():
        texts += [c.source.span, *c.source.needles, c.unit, c.parameter, c.source.table or ""]
    return texts + cells


def test_every_old_fold_equals_its_new_options(corpus):
    diffs: dict[str, list[tuple[str, str, str]]] = {}

    def same(name: str, old: str, new: str, t: str) -> None:
        if old != new:
            diffs.setdefault(name, []).append((t[:80], old[:80], new[:80]))

    for t in corpus:
        same("map_chars", old_norm.map_chars(t), fold(t, ligatures=True, symbols=True, spaces="keep"), t)
        same("normalise.fold", old_norm.fold(t),
             fold(t, ligatures=True, symbols=True, hyphenation=True, case="lower"), t)
        same("fold_query", old_norm.fold_query(t), fold(t, ligatures=True, symbols=True, case="lower"), t)
        same("clean_cell", old_norm.clean_cell(t), fold(t, dashes="minus", ligatures=True, spaces="inline"), t)
        for d in (True, False):
            for sg in (True, False):
                same(f"normalise_text({d},{sg})", old_claims.normalise_text(t, dashes=d, signs=sg),
                     fold(t, dashes="all" if d else "keep", signs=sg), t)
        # the one widening: the reader's fold left the Ohm sign (U+2126) as printed; every other fold made it Ω
        same("reader.fold", old_reader.fold(t.replace("\u2126", "\u03a9")), fold(t), t)
        same("fold_unit", old_fid.fold_unit(t), fold_unit(t), t)
        same("fold_text", old_fid.fold_text(t),
             fold(t, ligatures=True, symbols=True, superscripts=True, case="lower"), t)
    summary = {k: (len(v), v[:3]) for k, v in diffs.items()}
    assert not diffs, summary


def test_si_prefix_floats_equal_the_old_reader_table():
    for p, v in old_reader.SI_PREFIX.items():
        assert SI_PREFIX_FLOAT[p] == v, p
