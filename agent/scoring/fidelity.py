"""Fidelity: does the submitted extraction carry the figures the datasheet prints (the claim's needles)?

Why this is stricter than a substring test: the seed paper joined the extracted numbers into one string and looked
for each needle in it, so a needle "1" matched inside "1.7" and a needle "Pa" inside "PaRMS" or "hPa". Here a
numeric needle is compared as a number against the structured fields (value, low, high), a unit needle against the
unit field after Unicode folding (dashes, µ/μ, º/°, ², spacing), and a unit needle found only inside a longer unit
token is accepted (the paper would have) but flagged. The model's own quotation is consulted last: a pass that
needs it is reported with basis "quote", because a quotation is text the model wrote, not a value it committed to.

A text needle that is not the unit asked for ("10 kΩ" naming the resistance option of an LSb figure, the symbol
"INL", "No Missing Codes") is a label: it names the printed row, no structured field can carry it, so it is looked
for in the unit field, the recorded conditions and the quotation, and finding it in the quotation does not by
itself make the pass rest on the quotation. A pass with no needle matched in the fields still does.

The page, when the scorer has the document: the cited page should print the claim's verbatim span (its source
page, or another page where the datasheet's search finds the whole span) or the quotation submitted (the same
figure on the front page and in a table). The check is reported (`page`, a `wrong_page` warning, `page_matched`)
but does not change `passed`: `passed` stays the seed paper's value fidelity, the population the silent-failure
detector is defined over (a closed-book answer with the right value is a corrupt success the detector must catch,
whatever page it names). Without the document the page is not checked (`page` is None), never failed by guess.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Collection, Iterable

from agent.datasheet.normalise import map_chars
from protocols.text import fold
from protocols.units import fold_unit

_NUM = r"[-+]?\d+(?:[.,]\d+)?"
_NUMERIC_NEEDLE = re.compile(r"^(?:<=|>=|[<>~]|\+/-)?\s*(?P<num>" + _NUM + r")$")
_BIT_NEEDLE = re.compile(r"^(?P<bits>\d+)\s*-?\s*bits?$", re.I)
_NUM_IN_TEXT = re.compile(r"(?<![\d.,])(" + _NUM + r")(?![\d]|[.,]\d)")
_REL_TOL = 1e-9


def fold_text(text: str) -> str:
    """Running text folded for needle search: mapped characters, superscripts as digits, single spaces, lower case
    (a unit is folded by protocols.units.fold_unit: the same, with no spaces and "ohm" as Ω)."""
    return fold(str(text), ligatures=True, symbols=True, superscripts=True, case="lower")


def _number(text: str) -> float:
    return float(text.replace(",", "."))


@dataclass(frozen=True)
class Needle:
    text: str
    kind: str  # "number" | "bits" | "unit" | "label"
    number: float | None = None


def _unit_related(needle: str, unit: str) -> bool:
    """Is the needle a spelling of `unit`: equal, one inside the other (Pa, hPa, PaRMS), or an SI prefix apart?"""
    n, u = fold_unit(needle), fold_unit(unit)
    if not n or not u:
        return False
    return n == u or n in u or u in n or (len(n) > 1 and n[1:] == u) or (len(u) > 1 and u[1:] == n) \
        or (len(n) > 1 and len(u) > 1 and n[1:] == u[1:])


def classify_needle(needle: str, asked_unit: str | None = None) -> Needle:
    """A needle is a number (with an optional <, >, ± prefix), an "N-bit" width, a unit, or — when the unit asked
    for is known and the text is no spelling of it — a label naming the printed row."""
    folded = map_chars(needle).strip()
    m = _BIT_NEEDLE.match(folded)
    if m:
        return Needle(needle, "bits", float(m.group("bits")))
    m = _NUMERIC_NEEDLE.match(folded.replace(" ", ""))
    if m:
        return Needle(needle, "number", _number(m.group("num")))
    if asked_unit is not None and not _unit_related(needle, asked_unit):
        return Needle(needle, "label")
    return Needle(needle, "unit")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-12)


def _bits_match(bits: float, numbers: Iterable[float]) -> bool:
    """An N-bit width is printed as "N-bit"; a structured answer gives N or the code range's end (2^N − 1 or 2^N)."""
    n = int(bits)
    return any(_close(x, n) or _close(x, 2 ** n - 1) or _close(x, 2 ** n) for x in numbers)


@dataclass
class NeedleResult:
    needle: str
    kind: str
    matched_in: str | None  # "fields" | "quote" | None
    detail: str = ""
    longer_token: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"needle": self.needle, "kind": self.kind, "matched_in": self.matched_in, "detail": self.detail,
                "longer_token": self.longer_token}


@dataclass
class FidelityResult:
    """`passed`: every needle matched, in the fields or (basis "quote") only with the quotation's help."""

    scored: bool
    passed: bool
    basis: str | None  # "fields" | "quote" | None (not passed / not scored)
    needles: list[NeedleResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reason: str = ""
    page: dict[str, Any] | None = None  # {"cited", "accepted", "matched"}; None: the page was not checked

    @property
    def page_matched(self) -> bool | None:
        """Does the cited page print the claim's span or the quotation? None: not checked."""
        return None if self.page is None else bool(self.page["matched"])

    def to_json(self) -> dict[str, Any]:
        return {"scored": self.scored, "passed": self.passed, "basis": self.basis, "reason": self.reason,
                "warnings": list(self.warnings), "needles": [n.to_json() for n in self.needles],
                "page": self.page}


def _unit_match(needle: str, unit: str, asked_unit: str | None) -> tuple[bool, bool, str]:
    """(matched, longer_token, detail) for a unit needle against the submitted unit field."""
    n, u = fold_unit(needle), fold_unit(unit)
    if not n or not u:
        return False, False, "no unit submitted" if not u else "empty needle"
    if n == u:
        return True, False, "unit equal"
    if asked_unit is not None and u == fold_unit(asked_unit) and n.startswith(u):
        # The prompt asked for this unit; the needle is the printed spelling with a qualifier (PaRMS for Pa).
        return True, False, f"unit {unit!r} is the unit asked for (printed as {needle!r})"
    if n in u:
        return True, True, f"needle {needle!r} only inside the longer unit token {unit!r}"
    return False, False, f"unit {unit!r} does not match {needle!r}"


def _quote_has_number(quote: str, x: float) -> bool:
    return any(_close(_number(m.group(1)), x) or _close(abs(_number(m.group(1))), abs(x))
               for m in _NUM_IN_TEXT.finditer(fold_text(quote)))


def _quote_has_token(quote: str, needle: str) -> tuple[bool, bool]:
    """(found bounded, found only inside a longer token) for a text needle in the quotation."""
    q, n = fold_text(quote), fold_text(needle)
    if not n:
        return False, False
    bounded = re.search(r"(?<![a-z0-9µ°Ω])" + re.escape(n) + r"(?![a-z0-9µ°Ω])", q)
    if bounded:
        return True, False
    return False, n in q


def _label_match(needle: str, unit: str, conditions: Any, quote: str) -> tuple[str | None, str]:
    """Where a label needle is found: the unit field ("fields"), else the recorded conditions or the quotation."""
    if fold_unit(needle) and fold_unit(needle) == fold_unit(unit):
        return "fields", f"label {needle!r} is the submitted unit"
    texts = [str(v) for v in conditions.values()] if isinstance(conditions, dict) else []
    for where, text in [("the recorded conditions", " ".join(texts)), ("the quotation", quote)]:
        found, _ = _quote_has_token(text, needle) if text else (False, False)
        if found:
            return "quote", f"label {needle!r} is in {where}"
    return None, f"label {needle!r} is neither the unit, in the conditions, nor in the quotation"


def score_fidelity(needles: Iterable[str], extraction: dict[str, Any] | None, *,
                   asked_unit: str | None = None, pages: Collection[int] | None = None) -> FidelityResult:
    """Score one frozen extraction ({value, low, high, unit, page, quote, ...}) against the claim's needles and,
    when `pages` is given, the pages its span is printed on."""
    needles = list(needles)
    if not needles:
        return FidelityResult(False, False, None, reason="the claim has no needles")
    if not extraction:
        return FidelityResult(True, False, None, reason="no extraction was submitted")
    numbers = [float(extraction[k]) for k in ("value", "low", "high")
               if isinstance(extraction.get(k), (int, float)) and not isinstance(extraction.get(k), bool)]
    unit = str(extraction.get("unit") or "")
    quote = str(extraction.get("quote") or "")
    results: list[NeedleResult] = []
    warnings: list[str] = []
    for raw in needles:
        nd = classify_needle(raw, asked_unit)
        r = NeedleResult(raw, nd.kind, None)
        if nd.kind == "number":
            hit = next((x for x in numbers if _close(x, nd.number)), None)
            if hit is not None:
                r.matched_in, r.detail = "fields", f"{hit:g} equals {raw!r}"
            elif quote and _quote_has_number(quote, nd.number):
                r.matched_in, r.detail = "quote", f"{raw!r} appears only in the quotation"
            else:
                r.detail = f"no submitted number equals {raw!r} (got {', '.join(f'{x:g}' for x in numbers) or 'none'})"
        elif nd.kind == "bits":
            if _bits_match(nd.number, numbers):
                r.matched_in, r.detail = "fields", f"a submitted number is {int(nd.number)} or its code range"
            elif quote and re.search(rf"(?<!\d){int(nd.number)}\s*-?\s*bit", fold_text(quote)):
                r.matched_in, r.detail = "quote", f"{raw!r} appears only in the quotation"
            else:
                r.detail = f"no submitted number is a {int(nd.number)}-bit width or range"
        elif nd.kind == "label":
            r.matched_in, r.detail = _label_match(raw, unit, extraction.get("conditions"), quote)
        else:
            ok, longer, detail = _unit_match(raw, unit, asked_unit)
            if ok:
                r.matched_in, r.longer_token, r.detail = "fields", longer, detail
            else:
                found, q_longer = _quote_has_token(quote, raw) if quote else (False, False)
                if found:
                    r.matched_in, r.detail = "quote", f"{raw!r} appears only in the quotation ({detail})"
                elif q_longer:
                    r.matched_in, r.longer_token = "quote", True
                    r.detail = f"{raw!r} only inside a longer token of the quotation ({detail})"
                else:
                    r.detail = detail
        if r.longer_token:
            warnings.append(f"unit_needle_in_longer_token: {r.detail}")
        results.append(r)
    page = None
    if pages is not None:
        cited = extraction.get("page")
        ok = isinstance(cited, int) and not isinstance(cited, bool) and cited in pages
        page = {"cited": cited, "accepted": sorted(pages), "matched": ok}
        if not ok:
            warnings.append(f"wrong_page: page {cited!r} cited; the claim's span or the quotation is printed on "
                            f"page(s) {sorted(pages)}")
    missing = [r.needle for r in results if r.matched_in is None]
    if missing:
        return FidelityResult(True, False, None, results, warnings, reason=f"needle(s) not matched: {missing}",
                              page=page)
    quote_only = [r.needle for r in results if r.matched_in == "quote" and r.kind != "label"]
    if not any(r.matched_in == "fields" for r in results):
        quote_only = [r.needle for r in results]  # labels alone: nothing the model committed to carries a needle
    if quote_only:
        warnings.append(f"pass_rests_on_quotation: {quote_only} matched only in the model's own quotation")
        return FidelityResult(True, True, "quote", results, warnings,
                              reason=f"passes only with the quotation's help for {quote_only}", page=page)
    labels = [r.needle for r in results if r.kind == "label" and r.matched_in == "quote"]
    reason = "every needle matched the fields" + (f" (labels {labels} in the quotation or conditions)" if labels else "")
    return FidelityResult(True, True, "fields", results, warnings, reason=reason, page=page)


def score_claim(claim: Any, extraction: dict[str, Any] | None, *,
                printed_pages: Iterable[int] | None = None) -> FidelityResult:
    """`score_fidelity` with protocols' Claim: its source.needles, the unit the prompt asked for and, when the
    scorer searched the document (`printed_pages`: where it found the whole span or quotation), the right pages:
    those and the claim's source page."""
    pages = None if printed_pages is None else {int(claim.source.page)} | {int(p) for p in printed_pages}
    return score_fidelity(claim.source.needles, extraction, asked_unit=str(claim.unit), pages=pages)
