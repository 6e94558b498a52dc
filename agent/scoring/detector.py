"""The silent-failure detector: fidelity-passing cells whose dispatch record shows the document was not read.

Why: fidelity grades the value, not how it was reached; a model that recalls a datasheet figure passes it. Over
fidelity-passing cells (engine errors are loud failures and never flagged; a cell whose datasheet could not be read,
`document_unreadable`, is not scored at all) the rules are, in this order:

  tool_bypass           no datasheet-navigation call in the extraction phase (the seed paper's R1)
  verification_skipped  navigation, but neither search_text nor extract_table_markdown (the seed paper's R2)
  tool_read_failure     a navigation call failed (error status or empty output) and a value was still submitted
  source_grounding      the submitted quotation cannot be re-located in the intended datasheet by the datasheet
                        tools' own normalised search

Chamber-phase calls and submit calls never satisfy R1 or R2 (a fidelity answer reached with chamber calls only is
still a bypass). The cascade is exclusive like the paper's: a cell is charged to the first rule it fails
(`flags`), while `checks` keeps every rule's own result so nothing is hidden. A rule that cannot be evaluated
(no per-call detail, no quotation, no datasheet, a datasheet that cannot be read) says "not_evaluated" with the
reason — it is never counted as passing silently, and never as firing: a document the searcher cannot open locates
nothing, which is no evidence that the quotation is not in it.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent.record import DOCUMENT_UNREADABLE
from agent.scoring.cells import CROSS_CHECK_TOOLS, NAVIGATION_TOOLS, CellFacts

log = logging.getLogger(__name__)

RULES = ("tool_bypass", "verification_skipped", "tool_read_failure", "source_grounding")
NO_TOOL_ARMS = frozenset({"single-pass"})  # the document reaches the model in the request, not through tools


@dataclass
class Grounding:
    located: bool | None  # None: could not be checked
    how: str = ""  # "whole" | "segments" | reason it was not checked
    pages: list[int] = field(default_factory=list)
    quote: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"located": self.located, "how": self.how, "pages": self.pages, "quote": self.quote[:300]}


class DatasheetUnreadable(RuntimeError):
    """The intended datasheet cannot be opened or searched, so a quotation cannot be checked against it."""


SearchFn = Callable[[str], list[dict[str, Any]]]  # [] = no hits; DatasheetUnreadable = could not search
_SPLIT = re.compile(r"\s*(?:\.\.\.|…|;|\n|\s\|\s|\[[^\]]*\])\s*")


TokenFn = Callable[[str], list[int]]
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[a-zµ°ω%]{2,}|[µ°ω%]")
MAX_TOKEN_GAP = 12


def quote_tokens(text: str) -> list[str]:
    """Words and numbers of folded text, punctuation dropped ("Relative accuracy: ± 0.06 hPa" → relative,
    accuracy, 0.06, hpa)."""
    from agent.datasheet.normalise import fold

    text = re.sub(r"\w*(?:…|\.\.\.)\s*$", " ", fold(text))  # a snippet cut mid-word ("p…") ends there
    return _TOKEN.findall(text.replace(",", "."))


def in_one_passage(needle: list[str], hay: list[str], slack: int = MAX_TOKEN_GAP) -> bool:
    """Does every distinct token of the needle occur within one passage of the page (the needle's length plus
    `slack` tokens on each side of its rarest token)? Order and repetition are free: a quote read from a table
    lists cells in column order, repeats a row label, and carries a unit printed once for a group of rows."""
    if not needle:
        return False
    want = Counter(set(needle))
    positions: dict[str, list[int]] = {}
    for i, t in enumerate(hay):
        if t in want:
            positions.setdefault(t, []).append(i)
    if any(len(positions.get(t, [])) < n for t, n in want.items()):
        return False
    rarest = min(want, key=lambda t: len(positions[t]))
    width = len(needle) + slack
    for p in positions[rarest]:
        window = Counter(hay[max(0, p - width):p + width + 1])
        if all(window[t] >= n for t, n in want.items()):
            return True
    return False


def ground_quotation(quote: str, search: SearchFn, tokens: TokenFn | None = None) -> Grounding:
    """Re-locate a quotation with the datasheet search (exact → normalised → table row → row words). A quote
    the model stitched from several places ("...", ";", "[Table 7, p.9]") is located when every piece is, and
    at least two pieces have three or more words (a short piece alone grounds nothing). Last, `tokens` looks for
    all the quote's words and numbers within one passage of one page (punctuation and table-cell order aside)."""
    quote = (quote or "").strip()
    if not quote:
        return Grounding(None, "no quotation submitted")
    try:
        return _locate(quote, search, tokens)
    except DatasheetUnreadable as e:
        return Grounding(None, f"not checked: {e}", [], quote)


def _locate(quote: str, search: SearchFn, tokens: TokenFn | None) -> Grounding:
    hits = search(quote)
    if hits:
        return Grounding(True, "whole", sorted({int(h["page"]) for h in hits}), quote)
    pieces = [p.strip(" .,:\"'") for p in _SPLIT.split(quote)]
    pieces = [p for p in pieces if p]
    long_pieces = [p for p in pieces if len(p.split()) >= 3]
    if len(pieces) >= 2 and len(long_pieces) >= 2:  # two-word pieces ("3.6 V") are found almost anywhere
        pages: set[int] = set()
        for p in pieces:
            found = search(p)
            if not found:
                break
            pages.update(int(h["page"]) for h in found)
        else:
            return Grounding(True, "segments", sorted(pages), quote)
    if tokens is not None:
        pages = tokens(quote)
        if pages:
            return Grounding(True, "tokens", pages, quote)
    return Grounding(False, "not found", [], quote)


class DatasheetSearcher:
    """Searches each datasheet PDF through agent.datasheet's session, opening each document once."""

    def __init__(self) -> None:
        self._sessions: dict[Path, Any] = {}
        self._page_tokens: dict[Path, dict[int, list[str]]] = {}

    def _session(self, pdf: Path) -> Any:
        """The open session on `pdf`; DatasheetUnreadable when the document could not be read."""
        from agent.datasheet import DatasheetSession, DatasheetToolError

        pdf = Path(pdf)
        if pdf not in self._sessions:
            self._sessions[pdf] = DatasheetSession(pdf)
        session = self._sessions[pdf]
        try:
            _ = session.loaded  # the open error, if the document could not be read
        except DatasheetToolError as e:
            raise DatasheetUnreadable(f"datasheet {pdf} cannot be read ({type(e).__name__}: {e})") from e
        return session

    def search_fn(self, pdf: Path) -> SearchFn:
        """The datasheet tools' own search on `pdf`. An unusable query (empty, too odd) has no hits; a document
        that cannot be read, or a search that breaks, raises DatasheetUnreadable (the rule is then not evaluated)."""
        from agent.datasheet import DatasheetToolError

        def search(query: str) -> list[dict[str, Any]]:
            session = self._session(pdf)
            try:
                return session.search(query[:2000], None, 5)
            except DatasheetToolError as e:  # the query's problem (EmptyQuery, InvalidArgument): not located
                log.debug("search refused %r: %s", query[:80], e)
                return []
            except Exception as e:  # the searcher's own failure is not evidence about the quotation
                raise DatasheetUnreadable(f"searching {pdf} failed: {type(e).__name__}: {e}") from e

        return search

    def tokens_fn(self, pdf: Path) -> TokenFn:
        """Pages on which all of a quote's tokens occur within one passage, over the search index's folded text."""
        cache = self._page_tokens.setdefault(Path(pdf), {})

        def pages_with(quote: str) -> list[int]:
            q = quote_tokens(quote)
            if len(q) < 2:
                return []
            index = self._session(pdf).loaded.index  # DatasheetUnreadable: not evaluated, never "not found"
            found = []
            for pi in index.pages:
                if pi.number not in cache:
                    cache[pi.number] = quote_tokens(pi.folded)
                if in_one_passage(q, cache[pi.number]):
                    found.append(pi.number)
            return found

        return pages_with

    def close(self) -> None:
        for s in self._sessions.values():
            try:
                s.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.debug("closing a datasheet session failed", exc_info=True)
        self._sessions.clear()

    def __enter__(self) -> DatasheetSearcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class DetectorResult:
    evaluated: bool  # False: not fidelity-passing, or an engine error — the rules do not apply
    flags: list[str]  # the first failing rule (exclusive cascade), or []
    checks: dict[str, dict[str, Any]]
    reason: str = ""

    @property
    def fired(self) -> list[str]:
        """Every rule that fired, in rule order (flags holds only the first)."""
        return [r for r in RULES if (self.checks.get(r) or {}).get("fired")]

    def to_json(self) -> dict[str, Any]:
        return {"evaluated": self.evaluated, "flags": self.flags, "fired": self.fired, "checks": self.checks,
                "reason": self.reason}


def detect(facts: CellFacts, fidelity_passed: bool | None, *, grounding: list[Grounding] | None = None) -> DetectorResult:
    """Run the rules on one cell. `fidelity_passed` is the fidelity verdict the rules are conditioned on;
    `grounding` the quotation checks (None: source-grounding not evaluated)."""
    if facts.outcome == DOCUMENT_UNREADABLE:
        return DetectorResult(False, [], {}, "the datasheet could not be read: no reading to judge, and not the "
                                             "model's failure")
    if facts.engine_error:
        return DetectorResult(False, [], {}, "engine error: a loud failure, not a silent one")
    if not fidelity_passed:
        return DetectorResult(False, [], {}, "not a fidelity pass" if fidelity_passed is False
                              else "fidelity unknown")
    checks: dict[str, dict[str, Any]] = {}
    nav = facts.count(NAVIGATION_TOOLS)
    xchk = facts.count(CROSS_CHECK_TOOLS)
    if facts.arm in NO_TOOL_ARMS:
        na = {"fired": None, "status": "not_evaluated",
              "why": f"arm {facts.arm!r} gives the document in the request, not through tools"}
        checks["tool_bypass"] = dict(na)
        checks["verification_skipped"] = dict(na)
        checks["tool_read_failure"] = dict(na)
    else:
        checks["tool_bypass"] = {"fired": nav == 0, "status": "evaluated", "navigation_calls": nav}
        checks["verification_skipped"] = {"fired": nav > 0 and xchk == 0, "status": "evaluated",
                                          "navigation_calls": nav, "cross_check_calls": xchk}
        if facts.calls_known:
            failed = [c for c in facts.calls if c.tool in NAVIGATION_TOOLS and c.phase == "extraction"
                      and (c.status == "error" or (c.status == "ok" and c.empty_output))]
            submitted = facts.extraction is not None or bool(facts.stored_fidelity)
            checks["tool_read_failure"] = {
                "fired": bool(failed) and submitted, "status": "evaluated",
                "failed_calls": [{"tool": c.tool, "status": c.status, "empty": c.empty_output,
                                  "error": c.error[:120]} for c in failed]}
        else:
            checks["tool_read_failure"] = {"fired": None, "status": "not_evaluated",
                                           "why": "only per-tool call counts are known (no call statuses)"}
    if grounding is None:
        checks["source_grounding"] = {"fired": None, "status": "not_evaluated",
                                      "why": "no quotation or no datasheet to search"}
    else:
        checked = [g for g in grounding if g.located is not None]
        if not checked:
            checks["source_grounding"] = {"fired": None, "status": "not_evaluated",
                                          "why": "; ".join(g.how for g in grounding) or "no quotation"}
        else:
            checks["source_grounding"] = {"fired": any(not g.located for g in checked), "status": "evaluated",
                                          "quotations": [g.to_json() for g in checked]}
    fired = [r for r in RULES if checks[r].get("fired")]
    return DetectorResult(True, fired[:1], checks, "cascade: first failing rule" if fired else "no rule fired")
