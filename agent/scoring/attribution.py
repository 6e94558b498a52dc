"""Failure attribution: the seed paper's fixed rubric as deterministic rules over a cell's events, and agreement
with human labels as Cohen's kappa.

Why fixed and deterministic: an attribution that an LLM fills in cannot be re-scored offline, and one whose rules
move cannot be compared across runs. The rubric (one label per tool call and one for the final output):

  tool_output           a tool call errored                              charged to the tool
  tool_selection        fidelity failed although the document was cross-checked, or a call the
                        surface did not offer was made (denied)           charged to reasoning
  condition_omission    fidelity failed and a decisive condition is missing from the extraction
                                                                          charged to reasoning
  verification_skipped  fidelity failed with no verification call, or the run ended without a
                        structured answer (that label then stands)        charged to reasoning
  engine_error          the cell hit an engine error (every otherwise unlabelled event)
                                                                          charged to the engine
  serving_stack         the run ended on a serving-stack fault: a tool call written as text, a
                        tool-call token repeated to the output limit, a reply that is neither a
                        call nor an answer (every otherwise unlabelled event)
                                                                          charged to the serving stack
  document_unreadable   the run ended because the datasheet cannot be read (damaged, encrypted,
                        image only): every event but a denied call, the failed reads included
                                                                          charged to the document
  ok                    the cell passed fidelity and the chamber verdict (if any) is pass/inconclusive
  unclassified          none of the rules applied

Verification tools follow the paper's classifier (search_text, extract_table_markdown, cross_sensor_check) — a
broader set than the detector's, as in the paper.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from agent.models.text_calls import SERVING_STACK_OUTCOMES
from agent.record import DOCUMENT_UNREADABLE
from agent.scoring.cells import CellFacts

LABELS = ("ok", "tool_output", "tool_selection", "condition_omission", "verification_skipped", "engine_error",
          "serving_stack", "document_unreadable", "unclassified")
CHARGED_TO = {"tool_output": "tool", "tool_selection": "reasoning", "condition_omission": "reasoning",
              "verification_skipped": "reasoning", "engine_error": "engine", "serving_stack": "serving_stack",
              "document_unreadable": "document", "ok": None, "unclassified": None}
VERIFICATION_TOOLS = frozenset({"search_text", "extract_table_markdown", "cross_sensor_check"})
GOLD_LABELS = ("classifier_correct", "classifier_missed_tool_output", "classifier_missed_tool_selection",
               "classifier_missed_condition_omission", "classifier_missed_verification_skipped",
               "classifier_overflagged")


@dataclass
class Attribution:
    labels: list[str]  # one per event: tool calls in order, then the final output
    events: list[str]  # what each label is about ("tool:<name>" | "final_output")
    cell_label: str  # "PROBLEMATIC" | "CLEAN"
    notes: list[str]

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(self.labels))

    def to_json(self) -> dict[str, Any]:
        return {"labels": self.labels, "events": self.events, "counts": self.counts, "cell": self.cell_label,
                "charged_to": sorted({CHARGED_TO[x] for x in self.labels if CHARGED_TO[x]}), "notes": self.notes}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", str(text).lower()) if len(w) >= 3}


def conditions_omitted(decisive_names: Iterable[str], extracted: dict[str, Any] | Iterable[str] | None) -> bool:
    """True when a decisive condition has no counterpart in the extraction's conditions (names compared by shared
    words of three or more letters, keys and values alike). With no decisive condition: True only when nothing
    at all was extracted (the paper's conservative fallback)."""
    if isinstance(extracted, dict):
        texts = [f"{k} {v}" for k, v in extracted.items()]
    else:
        texts = [str(x) for x in (extracted or [])]
    have = [_words(t) for t in texts]
    names = [n for n in decisive_names if n]
    if not names:
        return not texts
    return any(not any(_words(n) & h for h in have) for n in names)


def attribute(facts: CellFacts, *, fidelity_passed: bool | None, condition_omitted: bool = False,
              verdict: str | None = None) -> Attribution:
    """Label every event of one cell. `verdict` is the chamber verdict (None: no chamber phase, which does not
    stop the ok tail rule)."""
    events: list[str] = []
    labels: list[str | None] = []
    notes: list[str] = []
    finals = facts.finals if facts.finals is not None else [(len(facts.calls), facts.final_error)]
    final_at: list[int] = []
    final_errors: list[str] = []

    def add_finals(position: int) -> None:
        for pos, err in finals:
            if pos == position:
                final_at.append(len(labels))
                final_errors.append(err)
                events.append("final_output")
                labels.append(None)

    for i, c in enumerate(facts.calls):
        add_finals(i)
        events.append(f"tool:{c.tool}")
        labels.append("tool_output" if c.status == "error" else "tool_selection" if c.status == "denied" else None)
    add_finals(len(facts.calls))
    if not facts.calls_known:
        notes.append("per-call detail unknown: only the final output is labelled")
    engine = facts.engine_error
    serving = facts.outcome in SERVING_STACK_OUTCOMES
    unreadable = facts.outcome == DOCUMENT_UNREADABLE
    if unreadable:  # the document failed the model: the failed reads are the document's, not the tool's
        labels = ["tool_selection" if x == "tool_selection" else "document_unreadable" for x in labels]
        notes.append(f"the datasheet could not be read ({facts.final_error[:200]})")
    elif engine:
        labels = [x or "engine_error" for x in labels]
        notes.append("engine error: unlabelled events charged to the engine")
    elif serving:  # the parser, template or decoding failed the model: not a reasoning failure
        labels = [x or "serving_stack" for x in labels]
        notes.append(f"serving-stack fault ({facts.outcome}): {facts.final_error[:160]}")
    else:
        for k, err in zip(final_at, final_errors):
            if err:
                labels[k] = "verification_skipped"
                notes.append(f"ended without a structured answer: {err[:120]}")
    cut_short = engine or serving or unreadable
    if not fidelity_passed and not cut_short:  # reasoning rules: only for a cell nothing cut short
        used = (sum(1 for c in facts.calls if c.tool in VERIFICATION_TOOLS) if facts.calls_known
                else sum(n for t, n in facts.counts.items() if t in VERIFICATION_TOOLS))
        if not used:
            label, why = "verification_skipped", "fidelity failed and no verification tool was called"
        elif condition_omitted:
            label, why = "condition_omission", "fidelity failed with a decisive condition missing"
        else:
            label, why = "tool_selection", "fidelity failed although the document was cross-checked"
        for k, err in zip(final_at, final_errors):
            if not err:  # a final output that already ended without an answer keeps verification_skipped
                labels[k] = label
        notes.append(why)
    if fidelity_passed and (verdict is None or str(verdict).lower() in ("pass", "inconclusive")):
        labels = [x or "ok" for x in labels]
    final = [x or "unclassified" for x in labels]
    problematic = cut_short or any(x != "ok" for x in final)
    return Attribution(final, events, "PROBLEMATIC" if problematic else "CLEAN", notes)


def cell_flagged_from_labels(labels: Iterable[str], engine_error: bool = False) -> bool:
    """The paper's cell-level reduction: PROBLEMATIC if any event is not ok or the cell had an engine error."""
    return engine_error or any(x != "ok" for x in labels)


def normalise_gold(raw: Any) -> list[str]:
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        return [raw.strip()] if raw.strip() else []
    return [str(x).strip() for x in raw if str(x).strip()]


def human_cell_label(gold: list[str], reference_flagged: bool) -> str:
    """The human's CLEAN/PROBLEMATIC call from a gold label that judges a reference classifier's output:
    classifier_correct → same as that classifier; overflagged → CLEAN; any missed_* → PROBLEMATIC."""
    if gold == ["classifier_correct"]:
        return "PROBLEMATIC" if reference_flagged else "CLEAN"
    if gold == ["classifier_overflagged"]:
        return "CLEAN"
    return "PROBLEMATIC"


def cohens_kappa(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Cohen's kappa of (rater A, rater B) label pairs, with observed and chance agreement, the confusion matrix
    (A rows × B columns) and per-class counts of each rater."""
    pairs = list(pairs)
    n = len(pairs)
    cats = sorted({a for a, _ in pairs} | {b for _, b in pairs})
    confusion = {a: {b: 0 for b in cats} for a in cats}
    for a, b in pairs:
        confusion[a][b] += 1
    count_a = Counter(a for a, _ in pairs)
    count_b = Counter(b for _, b in pairs)
    if n == 0:
        return {"kappa": None, "n": 0, "p_observed": None, "p_chance": None, "confusion": confusion,
                "per_class": {}}
    po = sum(confusion[c][c] for c in cats) / n
    pe = sum(count_a[c] * count_b[c] for c in cats) / (n * n)
    kappa = (po - pe) / (1 - pe) if pe < 1 else None
    return {"kappa": kappa, "n": n, "p_observed": po, "p_chance": pe, "confusion": confusion,
            "per_class": {c: {"rater_a": count_a[c], "rater_b": count_b[c], "both": confusion[c][c]} for c in cats}}
