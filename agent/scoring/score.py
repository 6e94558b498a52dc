"""Score recorded cells offline: fidelity, detector flags, attribution, cost and latency, with an honest summary.

Why one entry point: the matrix runner, the CLI `score` command and the report all re-score from what is on disk
(dispatch records, imported archive cells), so every figure can be recomputed without a model. When a scored
folder holds the imported paper archive, the summary reproduces the paper's detector and classifier figures from
it (planted faults, clean cells, kappa) and says where a figure cannot be re-derived. A cell whose datasheet could
not be read (outcome document_unreadable) is graded by nobody: fidelity not scored, the detector not evaluated, its
events charged to the document; the summary counts such cells apart (`document_unreadable`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from agent.record import DOCUMENT_UNREADABLE
from agent.scoring import archive as archive_mod
from agent.scoring.attribution import (
    attribute,
    cell_flagged_from_labels,
    cohens_kappa,
    conditions_omitted,
    human_cell_label,
)
from agent.scoring.cells import (RETIRED_DIR, CellFacts, facts_from_imported, facts_from_record, is_record_file,
                                  read_imported)
from agent.scoring.detector import DatasheetSearcher, DatasheetUnreadable, Grounding, detect, ground_quotation
from agent.scoring.fidelity import score_claim
from agent.scoring.pricing import PriceTable
from agent.scoring.zeros import count_with_bound

log = logging.getLogger(__name__)

MAIN_FAULT_FILE = "fault_injection.json"


class ScoreInputError(ValueError):
    """A path given to the scorer holds no record and no imported archive."""


@dataclass
class _Inputs:
    records: list[Path]
    imported: list[Path]
    gold: list[Path]
    checks: dict[str, dict[str, Any]]



def model_group(row: dict[str, Any]) -> str:
    """What a scored cell is grouped by: its full model spec (endpoint and options, the tool protocol among them:
    a text-protocol run is never pooled with a native one), else the model name."""
    return str(row.get("model_spec") or row["model"])

def _collect(paths: Iterable[Path]) -> _Inputs:
    inp = _Inputs([], [], [], {})
    for p in map(Path, paths):
        if p.is_file():
            if p.name == archive_mod.CELLS:
                inp.imported.append(p)
                if (p.parent / archive_mod.GOLD).exists():
                    inp.gold.append(p.parent / archive_mod.GOLD)
            elif is_record_file(p):
                inp.records.append(p)
            else:
                raise ScoreInputError(f"{p}: neither a dispatch record (run_start first) nor {archive_mod.CELLS}")
            continue
        if not p.is_dir():
            raise ScoreInputError(f"{p}: no such file or folder")
        found = False
        if (p / archive_mod.CELLS).exists():
            inp.imported.append(p / archive_mod.CELLS)
            found = True
            if (p / archive_mod.GOLD).exists():
                inp.gold.append(p / archive_mod.GOLD)
        for f in sorted(p.rglob("*.jsonl")):
            if ".blobs" in f.parent.name or f.name == archive_mod.CELLS:
                continue
            if RETIRED_DIR in f.relative_to(p).parts[:-1]:  # an engine_error attempt a resume ran again: kept for
                continue                                    # audit, never scored beside the attempt that replaced it
            if is_record_file(f):
                inp.records.append(f)
                found = True
        checks = p / "checks.json"
        if checks.exists():
            try:
                for r in json.loads(checks.read_text(encoding="utf-8")).get("results") or []:
                    if r.get("claim_id"):
                        inp.checks[str(r["claim_id"])] = r
            except ValueError:
                log.warning("%s is not JSON; chamber verdicts ignored", checks)
        if not found:
            raise ScoreInputError(f"{p}: no dispatch record (*.jsonl with run_start) and no {archive_mod.CELLS}")
    return inp


def _pdf_for(claim: Any, facts: CellFacts, datasheets_dir: Path | None) -> Path | None:
    if claim is not None and datasheets_dir is not None:
        p = Path(datasheets_dir) / claim.identity.filename
        if p.exists():
            return p
    path = (facts.meta.get("datasheet") or {}).get("path")
    return Path(path) if path and Path(path).exists() else None


def _printed_pages(claim: Any, facts: CellFacts, searcher: DatasheetSearcher | None,
                   datasheets_dir: Path | None) -> list[int] | None:
    """Pages on which the datasheet's own search finds the claim's whole span or the submitted quotation whole (a
    figure may be printed twice, e.g. on the front page and in its table); None without a searcher or the document,
    and then the cited page is not checked."""
    pdf = _pdf_for(claim, facts, datasheets_dir) if searcher is not None else None
    if pdf is None:
        return None
    search = searcher.search_fn(pdf)
    quote = str((facts.extraction or {}).get("quote") or "")
    try:
        return sorted({int(h["page"]) for text in (str(claim.source.span), quote) if text for h in search(text)
                       if "page" in h})
    except DatasheetUnreadable:  # the detector says not_evaluated with the reason; the page stays unchecked
        return None


def _decisive_names(claim: Any) -> list[str]:
    return [c.name for c in getattr(claim, "conditions", []) or [] if c.decisive]


def score_cell(facts: CellFacts, claim: Any, *, searcher: DatasheetSearcher | None, datasheets_dir: Path | None,
               verdict: str | None = None, prices: PriceTable | None = None) -> dict[str, Any]:
    """Every instrument on one cell; the JSON row of `score`'s output."""
    if facts.outcome == DOCUMENT_UNREADABLE:  # nothing was read, so nothing is graded or charged to the model
        fidelity = {"scored": False, "passed": None,
                    "reason": f"not scored: {facts.final_error[:300]}"}
        passed, omitted = None, False
    elif facts.source == "record":
        fid = score_claim(claim, facts.extraction,
                          printed_pages=_printed_pages(claim, facts, searcher, datasheets_dir)) \
            if claim is not None else None
        fidelity = fid.to_json() if fid is not None else {"scored": False, "passed": None,
                                                          "reason": f"claim {facts.claim_id!r} is not in the claim set"}
        passed = fid.passed if fid is not None and fid.scored else None
        omitted = conditions_omitted(_decisive_names(claim), (facts.extraction or {}).get("conditions")) \
            if claim is not None else False
    else:
        passed = facts.stored_fidelity
        fidelity = {"scored": True, "passed": passed, "basis": "archive",
                    "reason": "fidelity as graded at run time by the paper (its extractions are not all stored)"}
        lb = [n.lower() for n in facts.meta.get("load_bearing_condition_names") or []]
        names = {n.lower() for n in facts.meta.get("extracted_condition_names") or [] if n}
        omitted = any(n not in names for n in lb) if lb else not names
    grounding: list[Grounding] | None = None
    quotes = ([str(facts.extraction.get("quote"))] if facts.extraction and facts.extraction.get("quote")
              and facts.source == "record" else list(facts.meta.get("quotes") or []))
    if passed and not facts.engine_error and quotes and searcher is not None:
        pdf = _pdf_for(claim, facts, datasheets_dir)
        if pdf is not None:
            fn, tok = searcher.search_fn(pdf), searcher.tokens_fn(pdf)
            grounding = [ground_quotation(q, fn, tok) for q in quotes]
    det = detect(facts, passed, grounding=grounding)
    verdict = verdict if verdict is not None else facts.chamber_verdict
    attr = attribute(facts, fidelity_passed=passed, condition_omitted=omitted, verdict=verdict)
    row: dict[str, Any] = {
        "run_id": facts.run_id, "claim_id": facts.claim_id, "model": facts.model, "model_spec": facts.model_spec,
        "tool_protocol": facts.tool_protocol, "arm": facts.arm,
        "repeat": facts.repeat, "source": facts.source, "outcome": facts.outcome, "role": facts.role or None,
        "fidelity": fidelity, "flags": det.flags, "detector": det.to_json(), "attribution": attr.labels,
        "attribution_detail": attr.to_json(), "tool_calls_by_tool": facts.tool_counts(),
        "usage": facts.usage, "latency_s": facts.wall_s, "model_latency_s": facts.model_latency_s,
        "turns": facts.turns, "chamber_verdict": verdict,
        "cost": prices.cost(facts.model, facts.usage) if prices is not None else None,
    }
    if facts.record:
        row["record"] = facts.record
    if facts.meta.get("expected_rule"):
        row["expected_rule"] = facts.meta["expected_rule"]
    if facts.meta.get("stored_detector_flagged") is not None:
        row["stored_detector"] = {"flagged": facts.meta["stored_detector_flagged"],
                                  "rules": facts.meta.get("stored_detector_rules") or []}
    if facts.meta.get("stored_attribution") is not None:
        row["stored_attribution"] = facts.meta["stored_attribution"]
    return row


STABILITY_MIN_REPEATS = 2


def stability(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-to-run stability per full model spec (endpoint and options) and arm: of the claims with at least two
    submitted repeats, those whose fidelity verdict is the same in every submitted repeat. A repeat that ended in
    an engine error, a timeout or without a submission says nothing about stability and is not counted; a claim
    left with fewer than two submitted repeats is counted apart (`fewer`; stability_text says it in words)."""
    out = {}
    for key, claims in _stability_groups(rows).items():
        multi = {c: v for c, v in claims.items() if len(v) >= STABILITY_MIN_REPEATS}
        flipped = sorted(c for c, v in multi.items() if len(set(v)) > 1)
        out[key] = {"claims": len(multi), "stable": len(multi) - len(flipped), "flipped": flipped,
                    "repeats": max((len(v) for v in multi.values()), default=0), "fewer": len(claims) - len(multi)}
    return out


def stability_text(groups: dict[str, Any]) -> dict[str, str]:
    """stability()'s figures in words, per group (the groups are made once, by stability): 'stable: 3 of 3
    claims with >= 2 submitted repeats; 2 claims had fewer'."""
    out = {}
    for key, g in groups.items():
        n, fewer = g["claims"], g["fewer"]
        out[key] = (f"stable: {g['stable']} of {n} claim{'s' * (n != 1)} with >= {STABILITY_MIN_REPEATS} submitted "
                    "repeats; " + (f"{fewer} claim{'s' * (fewer != 1)} had fewer" if fewer else "none had fewer"))
    return out


def _stability_groups(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[bool]]]:
    """`<model spec>|<arm>` → claim → the fidelity verdicts of its submitted repeats (cells of a plan only)."""
    groups: dict[str, dict[str, list[bool]]] = defaultdict(dict)
    for r in rows:
        if r.get("repeat") is None:
            continue
        verdicts = groups[f"{model_group(r)}|{r['arm']}"].setdefault(r["claim_id"], [])
        if r["outcome"] == "submitted":
            verdicts.append(bool(r["fidelity"].get("passed")))
    return dict(sorted(groups.items()))


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    evaluated = [r for r in rows if r["detector"]["evaluated"]]
    flagged = [r for r in evaluated if r["flags"]]
    by_flag = Counter(f for r in flagged for f in r["flags"])
    costs = [r["cost"] for r in rows if r.get("cost") is not None]
    lat = [r["latency_s"] for r in rows if r.get("latency_s") is not None]
    return {
        "cells": len(rows),
        "fidelity_passed": sum(1 for r in rows if r["fidelity"].get("passed")),
        "fidelity_pass_on_quote_only": sum(1 for r in rows if r["fidelity"].get("basis") == "quote"),
        "fidelity_page_checked": sum(1 for r in rows if (r["fidelity"].get("page") or {}).get("matched") is not None),
        "fidelity_wrong_page": sum(1 for r in rows if (r["fidelity"].get("page") or {}).get("matched") is False),
        "engine_errors": sum(1 for r in rows if r["outcome"] in ("engine_error", "timeout", "context_exceeded")),
        "document_unreadable": sum(1 for r in rows if r["outcome"] == DOCUMENT_UNREADABLE),
        "detector_evaluated": len(evaluated),
        "flagged": count_with_bound(len(flagged), len(evaluated), "fidelity-passing cells"),
        "flags_by_rule": dict(by_flag),
        "attribution_counts": dict(Counter(x for r in rows for x in r["attribution"])),
        "cost_total": sum(costs) if costs else None,
        "cost_per_cell_mean": sum(costs) / len(costs) if costs else None,
        "latency_per_cell_mean_s": sum(lat) / len(lat) if lat else None,
        "stability": (groups := stability(rows)),
        "stability_text": stability_text(groups),  # the same groups, in words
    }


def archive_summary(rows: list[dict[str, Any]], gold_files: list[Path]) -> dict[str, Any]:
    """The paper's figures re-derived from its imported archive by our instruments."""
    arch = [r for r in rows if r["source"].startswith("archive:")]
    out: dict[str, Any] = {}
    main = [r for r in arch if r["role"] == "planted_fault" and r["source"] == f"archive:{MAIN_FAULT_FILE}"]
    out["planted_faults_total"] = len(main)
    out["planted_faults_flagged"] = sum(1 for r in main if r["flags"])
    out["planted_faults_flagged_with_expected_rule"] = sum(1 for r in main if r["flags"] == [r.get("expected_rule")])
    per_file = {}
    for src in sorted({r["source"] for r in arch if r["role"] == "planted_fault"}):
        cells = [r for r in arch if r["role"] == "planted_fault" and r["source"] == src]
        silent = [r for r in cells if r["detector"]["evaluated"]]
        per_file[src.split(":", 1)[1]] = {
            "planted": len(cells), "engine_errors": sum(1 for r in cells if r["outcome"] == "engine_error"),
            "silent_failures": len(silent), "flagged": sum(1 for r in silent if r["flags"]),
            "flagged_with_expected_rule": sum(1 for r in silent if r["flags"] == [r.get("expected_rule")])}
    out["planted_faults_by_file"] = per_file
    clean = [r for r in arch if r["role"] == "clean_repeat" and r["detector"]["evaluated"]]
    out["clean_cells_total"] = len(clean)
    out["clean_cells_flagged"] = sum(1 for r in clean if r["flags"])
    out["clean_cells_flagged_bound"] = count_with_bound(out["clean_cells_flagged"], len(clean), "cells")
    groups = {(r["claim_id"], model_group(r)) for r in clean}
    out["clean_claim_model_groups"] = count_with_bound(
        len({(r["claim_id"], model_group(r)) for r in clean if r["flags"]}), len(groups), "claim-by-model groups")
    matrix = [r for r in arch if r["role"] == "matrix" and r["arm"] == "normal" and r["detector"]["evaluated"]]
    out["matrix_agentic_fidelity_passing"] = len(matrix)
    out["matrix_agentic_process_flags"] = sum(
        1 for r in matrix if set(r["detector"]["fired"]) & {"tool_bypass", "verification_skipped"})
    quotes = [q for r in matrix for q in (r["detector"]["checks"].get("source_grounding") or {}).get("quotations") or []]
    out["matrix_quotations_checked"] = len(quotes)
    out["matrix_quotations_unlocatable"] = sum(1 for q in quotes if not q["located"])
    out["matrix_cells_source_grounding_fired"] = sum(1 for r in matrix if "source_grounding" in r["detector"]["fired"])
    probes: dict[str, Any] = {}
    for r in arch:
        if not r["role"].startswith("probe"):
            continue
        key = r["source"].split(":", 1)[1]
        p = probes.setdefault(key, {"arm": r["arm"], "cells": 0, "engine_errors": 0, "corrupt_successes": 0,
                                    "detector_caught": 0, "fabricated_quotation": 0})
        p["cells"] += 1
        p["engine_errors"] += r["outcome"] == "engine_error"
        if r["detector"]["evaluated"]:
            p["corrupt_successes"] += 1
            p["detector_caught"] += bool(r["flags"])
            p["fabricated_quotation"] += "source_grounding" in r["detector"]["fired"]
    out["probe_arms"] = probes
    stored = [r for r in arch if "stored_detector" in r]
    def paper_rules(r: dict[str, Any]) -> list[str]:
        return [f for f in r["detector"]["fired"] if f in ("tool_bypass", "verification_skipped")][:1]

    agree = sum(1 for r in stored if paper_rules(r) == list(r["stored_detector"]["rules"][:1])
                and bool(paper_rules(r)) == bool(r["stored_detector"]["flagged"]))
    out["stored_detector_decisions"] = {
        "cells": len(stored), "reproduced": agree,
        "note": "the paper's two rules recomputed vs the decision stored at run time (our extra rules excluded)"}
    out["stability_clean_repeats"] = stability([r for r in arch if r["role"] == "clean_repeat"])
    if gold_files:
        out.update(_kappa(rows, gold_files))
    return out


def _kappa(rows: list[dict[str, Any]], gold_files: list[Path]) -> dict[str, Any]:
    by_id = {r["run_id"]: r for r in rows}
    pairs_ours: list[tuple[str, str]] = []
    pairs_paper: list[tuple[str, str]] = []
    abstained, missing, event_match, event_total, cells = [], [], 0, 0, []
    label_counts: Counter = Counter()
    for gf in gold_files:
        gold = json.loads(Path(gf).read_text(encoding="utf-8"))
        for g in gold.get("cells") or []:
            r = by_id.get(g["run_id"])
            if r is None:
                missing.append(g["cell_id"])
                continue
            if not g["gold"]:
                abstained.append(g["cell_id"])
                continue
            engine = r["outcome"] == "engine_error"
            ours = "PROBLEMATIC" if cell_flagged_from_labels(r["attribution"], engine) else "CLEAN"
            stored = r.get("stored_attribution") or []
            paper = "PROBLEMATIC" if cell_flagged_from_labels(stored, engine) else "CLEAN"
            human = human_cell_label(g["gold"], paper == "PROBLEMATIC")
            pairs_ours.append((ours, human))
            pairs_paper.append((paper, human))
            label_counts.update(g["gold"])
            same_len = len(stored) == len(r["attribution"])
            if same_len:
                event_total += len(stored)
                event_match += sum(a == b for a, b in zip(stored, r["attribution"]))
            cells.append({"cell_id": g["cell_id"], "gold": g["gold"], "human": human, "ours": ours, "paper": paper,
                          "events_ours": len(r["attribution"]), "events_paper": len(stored)})
    k = cohens_kappa(pairs_ours)
    kp = cohens_kappa(pairs_paper)
    return {
        "kappa": k["kappa"], "kappa_detail": {**k, "rater_a": "our classifier (cell level)",
                                              "rater_b": "human, from gold labels"},
        "kappa_paper_classifier": kp["kappa"],
        "gold_cells": len(pairs_ours), "gold_abstained": abstained, "gold_missing": missing,
        "gold_label_counts": dict(label_counts),
        "events_agreeing_with_paper_labels": {"agree": event_match, "compared": event_total,
                                              "note": "cells whose parsed trace has as many events as the paper's labels"},
        "kappa_cells": cells,
    }


GIVEN_POOL = "the claims given to the scorer (the run's own pool when the run scored; `--claims` offline)"


class _Pools:
    """The claims each scored file is graded against: the caller's `claims` for all, else per file the pool its
    run recorded (protocols.claim_sources.claims_for_run), loaded once per run folder; remembers which were used."""

    def __init__(self, claims: Mapping[str, Any] | None) -> None:
        self.given = claims
        self.loaded: dict[str, Mapping[str, Any]] = {}
        self.used: set[str] = set()

    def claims_for(self, path: Path) -> Mapping[str, Any]:
        if self.given is not None:
            self.used.add(GIVEN_POOL)
            return self.given
        from protocols.claim_sources import RUN_POOL_FILE, MAIN_JOB_POOL, claims_for_run, run_pool_dir

        folder = run_pool_dir(path)
        key = str(folder / RUN_POOL_FILE) if folder is not None else MAIN_JOB_POOL
        if key not in self.loaded:
            self.loaded[key] = claims_for_run(path)[0]
        self.used.add(key)
        return self.loaded[key]


def score_paths(paths: Iterable[Path | str], *, claims: Mapping[str, Any] | None = None,
                datasheets_dir: Path | None = None, prices: PriceTable | None = None,
                ground: bool = True) -> dict[str, Any]:
    """Score every record and imported archive cell under `paths`. `claims` (given) grades every cell; by default
    each cell is graded against the claim pool its run folder recorded (claim_pool.json), and a cell of a folder
    without one against the pool `run` grades (the packaged claims plus the chamber parts'). `datasheets_dir`
    holds the PDFs the source-grounding check searches (None: the records' own paths). With `ground=False` no
    document is opened, so fidelity does not check the cited page. The summary names the pools used."""
    pools = _Pools(claims)
    inp = _collect(paths)
    rows: list[dict[str, Any]] = []
    with DatasheetSearcher() as searcher:
        s = searcher if ground else None
        for path in inp.records:
            facts = facts_from_record(path)
            verdict = (inp.checks.get(facts.claim_id) or {}).get("verdict")
            rows.append(score_cell(facts, pools.claims_for(path).get(facts.claim_id), searcher=s,
                                   datasheets_dir=datasheets_dir, verdict=verdict, prices=prices))
        for path in inp.imported:
            pool = pools.claims_for(path)
            for cell in read_imported(path):
                facts = facts_from_imported(cell)
                rows.append(score_cell(facts, pool.get(facts.claim_id), searcher=s,
                                       datasheets_dir=datasheets_dir, prices=prices))
    summary = _summary(rows)
    summary["claim_pools"] = sorted(pools.used)
    if inp.imported:
        summary.update(archive_summary(rows, inp.gold))
    summary["grounding"] = "evaluated" if ground else "skipped (ground=False)"
    return {"cells": rows, "summary": summary}
