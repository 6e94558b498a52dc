"""Import the seed paper's archive (../shared/paper-archive) into the shape our instruments score.

Why: the paper's tables rest on its archive, and our detector and classifier should re-derive them from it rather
than trust the run-time decisions stored beside each cell. The archive mostly keeps per-tool call counts, stored
fidelity and quotations (no per-call statuses, no tool outputs); the 30 gold-labelled cells also keep a commented
per-event trace in data/classifier_gold.yaml, which is parsed so the classifier has events to label. Nothing is
invented: a fact the archive lacks stays absent and the scorer reports the rule as not evaluated.

Output folder: `imported_cells.jsonl` (one ImportedCell per line), `gold_labels.json`, `archive_import.json` (the
manifest: files read with their SHA-256, cell counts per role, and what could not be imported).
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

from agent.scoring.cells import ImportedCall, ImportedCell
from firmware_bridge.model_file import ModelFileError, read_data_file
from protocols.datasheets import sha256_of

log = logging.getLogger(__name__)

MANIFEST = "archive_import.json"
CELLS = "imported_cells.jsonl"
GOLD = "gold_labels.json"
ARCHIVE_MAX_BYTES = 64 << 20
"""The paper's archive files reach 0.8 MB; the one reader's 1 MiB default for data files would be too close."""

_FAULT_ARMS = {"F1": "withhold-navigation", "F5": "withhold-crosscheck"}
_PROBE_ARMS = {"closed_book": "closed-book", "null_tool_injection": "null-tool", "wrong_content": "wrong-content"}


class ArchiveError(ValueError):
    """The folder is not the paper archive, or a file in it does not have the expected shape."""


class ArchiveFileError(ArchiveError, ModelFileError):
    """An archive file that cannot be read or parsed (the one configuration-file reader's error, naming the file)."""


def _load_json(path: Path) -> Any:
    # JSON by its suffix; the seed paper's archives write bare NaN tokens (a missing score), so they are let in here
    # and nowhere else (every settings file refuses NaN and infinity)
    return read_data_file(path, what="archive file", error=ArchiveFileError, max_bytes=ARCHIVE_MAX_BYTES,
                          allow_non_finite=True)


def _cell(**kw: Any) -> ImportedCell:
    return ImportedCell(**{k: v for k, v in kw.items() if v is not None})


def _quotes_of(claim_result: dict[str, Any] | None) -> list[str]:
    extracted = (claim_result or {}).get("extracted") or {}
    return [str(v.get("source_text")) for v in extracted.get("values") or [] if v.get("source_text")]


def _extraction_of(claim_result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The first extracted value as our payload shape (kept for re-scoring; the archive's own grading stays the
    fidelity of record)."""
    extracted = (claim_result or {}).get("extracted") or {}
    values = extracted.get("values") or []
    if not values:
        return None
    v = values[0]
    out = {"value": v.get("typical_value"), "low": v.get("min_value"), "high": v.get("max_value"),
           "unit": v.get("unit") or "", "quote": v.get("source_text") or extracted.get("source_text") or ""}
    return {k: x for k, x in out.items() if x is not None}


def _fault_cells(path: Path) -> list[ImportedCell]:
    data = _load_json(path)
    model = str(data.get("model"))
    out = []
    for fault, arm in sorted((data.get("arm_a") or {}).items()):
        for i, c in enumerate(arm.get("cells") or []):
            out.append(_cell(
                run_id=f"archive/{path.name}/{fault}/{model}/{c['claim_id']}/{i}", source_file=path.name,
                role="planted_fault", arm=_FAULT_ARMS.get(fault, fault), claim_id=c["claim_id"], model=model,
                fault=fault, expected_rule=arm.get("expected_rule"), engine_error=str(c.get("engine_error") or ""),
                fidelity_pass=bool(c.get("fidelity_pass")), tool_calls_by_tool=c.get("n_tool_calls_by_tool") or {},
                stored_detector_flagged=c.get("detector_flagged"), stored_detector_rules=c.get("detector_rules") or [],
                latency_s=c.get("latency_s"), n_steps=c.get("n_steps")))
    return out


def _variance_cells(path: Path) -> list[ImportedCell]:
    data = _load_json(path)
    out = []
    for model, runs in (data.get("runs") or {}).items():
        for run in runs:
            for claim_id, c in (run.get("cells") or {}).items():
                fid = c.get("fidelity") or {}
                engine = str(c.get("engine_error") or "") or ("engine error" if fid.get("engine_error") else "")
                out.append(_cell(
                    run_id=f"archive/{path.name}/{model}/{claim_id}/r{run['repeat']}", source_file=path.name,
                    role="clean_repeat", arm="normal", claim_id=claim_id, model=model, repeat=int(run["repeat"]),
                    engine_error=engine, fidelity_pass=bool(fid.get("overall_pass")),
                    tool_calls_by_tool=c.get("n_tool_calls_by_tool") or {}, usage=c.get("usage") or {},
                    latency_s=c.get("latency_s"), n_steps=c.get("n_steps")))
    return out


def _matrix_cells(path: Path) -> list[ImportedCell]:
    data = _load_json(path)
    out = []
    for claim_id, engines in (data.get("results") or {}).items():
        for engine, models in engines.items():
            for model, c in models.items():
                fid = c.get("fidelity") or {}
                cr = c.get("claim_result") or {}
                engine_err = str(c.get("engine_error") or "") or ("engine error" if fid.get("engine_error") else "")
                out.append(_cell(
                    run_id=f"archive/{path.name}/{engine}/{model}/{claim_id}", source_file=path.name,
                    role="matrix", arm="normal" if engine == "agentic" else "single-pass", claim_id=claim_id,
                    model=model, engine_error=engine_err, fidelity_pass=bool(fid.get("overall_pass")),
                    tool_calls_by_tool=c.get("n_tool_calls_by_tool") or {}, extraction=_extraction_of(cr),
                    quotes=_quotes_of(cr), chamber_verdict=(c.get("reproducibility") or {}).get("verdict"),
                    load_bearing_condition_names=list(c.get("load_bearing_condition_names") or []),
                    extracted_condition_names=[str(x.get("name") or "") for x in cr.get("extracted_conditions") or []],
                    usage=c.get("usage") or {}, latency_s=c.get("latency_s"), n_steps=c.get("n_steps")))
    return out


def _probe_cells(path: Path, family: str) -> list[ImportedCell]:
    data = _load_json(path)
    model = str(data.get("model"))
    variant = path.name.split(".json")[0].split(".")[-1] if "thinking_on" in path.name else None
    out = []
    for i, c in enumerate(data.get("cells") or []):
        quote = str(c.get("submitted_source_text") or "")
        out.append(_cell(
            run_id=f"archive/{path.name}/{model}/{c['claim_id']}/{i}", source_file=path.name,
            role="probe" if variant is None else f"probe-{variant}", arm=_PROBE_ARMS[family], claim_id=c["claim_id"],
            model=model, engine_error=str(c.get("engine_error") or ""), fidelity_pass=bool(c.get("fidelity_pass")),
            tool_calls_by_tool=c.get("n_tool_calls_by_tool") or {}, quotes=[quote] if quote else [],
            stored_detector_flagged=c.get("detector_flagged"), stored_detector_rules=c.get("detector_rules") or [],
            latency_s=c.get("latency_s")))
    return out


def _a4988_cells(path: Path) -> list[ImportedCell]:
    data = _load_json(path)
    model = str(data.get("model"))
    out = []
    for i, c in enumerate(data.get("cells") or []):
        ex = c.get("extracted") if isinstance(c.get("extracted"), dict) else None
        out.append(_cell(
            run_id=f"archive/{path.name}/{model}/{c['claim_id']}/{i}", source_file=path.name, role="a4988",
            arm="normal", claim_id=c["claim_id"], model=model, engine_error=str(c.get("engine_error") or ""),
            fidelity_pass=bool(c.get("fidelity_pass")), tool_calls_by_tool=c.get("n_tool_calls_by_tool") or {},
            quotes=_quotes_of({"extracted": ex}) if ex else [],
            stored_detector_flagged=c.get("detector_flagged"), stored_detector_rules=c.get("detector_rules") or [],
            latency_s=c.get("latency_s")))
    return out


# --------------------------------------------------------------------------------------------- gold labels
_EVENT = re.compile(r"^\s*#\s*\[\s*\d+\]\s+turn=\d+\s+(?P<kind>tool_call|final_output)\s+tool=(?P<tool>\S+)")
_ERROR = re.compile(r"^\s*#\s+ERROR:\s*(?P<err>.*)$")
_ATTEMPT = re.compile(r"^\s*#\s+---\s+ATTEMPT\s+(?P<n>\d+)/")


def parse_gold_traces(text: str) -> dict[str, list[ImportedCall]]:
    """The per-event traces commented above each cell of classifier_gold.yaml, keyed by cell_id."""
    traces: dict[str, list[ImportedCall]] = {}
    events: list[ImportedCall] = []
    attempt = 1
    for line in text.splitlines():
        m = re.match(r"^\s*-\s*cell_id:\s*'?(?P<id>[^'\s]+)'?", line)
        if m:
            traces[m.group("id")] = events
            events, attempt = [], 1
            continue
        if m := _ATTEMPT.match(line):
            attempt = int(m.group("n"))
        elif m := _EVENT.match(line):
            tool = m.group("tool")
            events.append(ImportedCall(kind=m.group("kind"), tool="" if tool == "-" else tool, attempt=attempt))
        elif (m := _ERROR.match(line)) and events:
            events[-1].error = m.group("err").strip()
    return traces


def _gold(data_dir: Path, archive_dir: Path) -> tuple[list[ImportedCell], dict[str, Any]]:
    from agent.scoring.attribution import normalise_gold

    gold_path = data_dir / "classifier_gold.yaml"
    doc = read_data_file(gold_path, what="gold labels", error=ArchiveFileError, max_bytes=ARCHIVE_MAX_BYTES)
    traces = parse_gold_traces(gold_path.read_text(encoding="utf-8"))  # the comments YAML drops
    sample = _load_json(archive_dir / "sampled_cells.json").get("sample") or []
    autos: dict[str, dict[str, Any]] = {}
    for p in sorted(archive_dir.glob("classifier_auto.*.json")):
        model = p.name[len("classifier_auto."):-len(".json")]
        autos[model] = _load_json(p).get("results") or {}
    cells: list[ImportedCell] = []
    gold_rows = []
    for i, g in enumerate(doc.get("cells") or []):
        cid, model, engine = g["claim_id"], g["model"], g.get("engine", "agentic")
        if i < len(sample) and (sample[i]["claim_id"], sample[i]["model"]) != (cid, model):
            raise ArchiveError(f"gold cell {i} ({cid}|{model}) is not sampled cell {i} ({sample[i]})")
        auto = (autos.get(model) or {}).get(f"{cid}|{engine}")
        if auto is None:
            raise ArchiveError(f"no classifier_auto cell for {cid}|{engine}|{model}")
        fid = auto.get("fidelity") or {}
        cr = auto.get("claim_result") or {}
        engine_err = str(auto.get("engine_error") or "") or ("engine error" if fid.get("engine_error") else "")
        events = traces.get(g["cell_id"])
        cells.append(_cell(
            run_id=f"archive/gold/{g['cell_id']}", source_file=f"classifier_auto.{model}.json", role="gold_sample",
            arm="normal", claim_id=cid, model=model, engine_error=engine_err, fidelity_pass=bool(fid.get("overall_pass")),
            tool_calls_by_tool=auto.get("n_tool_calls_by_tool") or {}, chamber_verdict=(auto.get("reproducibility") or {}).get("verdict"),
            load_bearing_condition_names=list(auto.get("load_bearing_condition_names") or []),
            extracted_condition_names=[str(x.get("name") or "") for x in cr.get("extracted_conditions") or []],
            stored_attribution=list(auto.get("attribution") or []), events=events, quotes=_quotes_of(cr),
            usage=auto.get("usage") or {}, latency_s=auto.get("latency_s"), n_steps=auto.get("n_steps")))
        gold_rows.append({"cell_id": g["cell_id"], "run_id": cells[-1].run_id, "claim_id": cid, "model": model,
                          "gold": normalise_gold(g.get("gold_label")), "n_events": g.get("n_events"),
                          "trace_events": len(events) if events is not None else None,
                          "stored_attribution_events": len(auto.get("attribution") or [])})
    meta = doc.get("metadata") or {}
    return cells, {"annotator": meta.get("annotator"), "rubric_version": meta.get("rubric_version"),
                   "source": str(gold_path.name), "cells": gold_rows}


def import_archive(root: Path, out: Path) -> dict[str, Any]:
    """Convert the archive at `root` (the folder holding archive/ and data/) into `out`; returns the manifest."""
    root = Path(root)
    archive_dir, data_dir = root / "archive", root / "data"
    if not archive_dir.is_dir() or not (archive_dir / "fault_injection.json").exists():
        raise ArchiveError(f"{root}: expected the paper archive (archive/fault_injection.json not found)")
    cells: list[ImportedCell] = []
    files: dict[str, str] = {}
    skipped: dict[str, str] = {}

    def take(path: Path, fn: Any, *args: Any) -> None:
        try:
            got = fn(path, *args)
        except ArchiveError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise ArchiveError(f"{path.name}: unexpected shape: {e}") from e
        cells.extend(got)
        files[f"archive/{path.name}"] = sha256_of(path)

    for p in sorted(archive_dir.glob("fault_injection*.json")):
        take(p, _fault_cells)
    if (archive_dir / "variance_chamber.json").exists():
        take(archive_dir / "variance_chamber.json", _variance_cells)
    if (archive_dir / "baseline_chamber.json").exists():
        take(archive_dir / "baseline_chamber.json", _matrix_cells)
    for family in _PROBE_ARMS:
        for p in sorted(archive_dir.glob(f"{family}.*.json")):
            take(p, _probe_cells, family)
    for p in sorted(archive_dir.glob("a4988_fidelity*.json")):
        take(p, _a4988_cells)
    for p in sorted(archive_dir.glob("latest_chamber.*.json")):
        skipped[f"archive/{p.name}"] = "same cells as baseline_chamber.json (README: byte-identical copies)" \
            if "qwen3.5" not in p.name else "older Qwen3.5 run outside the published matrix; not imported"
    gold: dict[str, Any] = {}
    if (data_dir / "classifier_gold.yaml").exists():
        gold_cells, gold = _gold(data_dir, archive_dir)
        cells.extend(gold_cells)
        files["data/classifier_gold.yaml"] = sha256_of(data_dir / "classifier_gold.yaml")
        files["archive/sampled_cells.json"] = sha256_of(archive_dir / "sampled_cells.json")
        for p in sorted(archive_dir.glob("classifier_auto.*.json")):
            files[f"archive/{p.name}"] = sha256_of(p)
    a2 = data_dir / "classifier_gold.annotator2.yaml"
    if a2.exists():
        labelled = sum(1 for c in read_data_file(a2, what="gold labels", error=ArchiveFileError,
                                                 max_bytes=ARCHIVE_MAX_BYTES).get("cells") or []
                       if c.get("gold_label"))
        skipped["data/classifier_gold.annotator2.yaml"] = (
            f"second annotator: {labelled} of 30 cells labelled — no inter-annotator agreement can be computed"
            if labelled == 0 else f"{labelled} cells labelled (not used)")
    skipped["archive/latest_traces.*.jsonl"] = "not in the local copy (PROVENANCE.md): per-call statuses unknown"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / CELLS, "w", encoding="utf-8") as f:
        for c in cells:
            f.write(c.model_dump_json(exclude_defaults=False) + "\n")
    (out / GOLD).write_text(json.dumps(gold, indent=2, ensure_ascii=False), encoding="utf-8")
    manifest = {"source": str(root), "files": files, "not_imported": skipped, "cells": len(cells),
                "by_role": dict(Counter(c.role for c in cells)),
                "by_file": dict(Counter(c.source_file for c in cells)), "gold_cells": len(gold.get("cells") or [])}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest
