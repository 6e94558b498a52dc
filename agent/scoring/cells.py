"""One cell as the instruments see it: the facts a detector, a classifier and a cost table need, from either source.

Why a common shape: our own cells come as dispatch records (agent.record), the seed paper's as archived summaries
(tool-call counts, stored fidelity, sometimes a trace). The instruments read `CellFacts`, so the same rules score
both, and each fact says where it came from — an imported cell without per-call detail says so (`calls_known`)
instead of pretending to have it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent.record import RecordError, RunStart, read_record, schema_number

NAVIGATION_TOOLS = frozenset({"build_datasheet", "get_section_text", "search_text", "extract_table_markdown",
                              "inspect_page"})
CROSS_CHECK_TOOLS = frozenset({"search_text", "extract_table_markdown"})
ARM_MARK = "+arm="


@dataclass
class CallFact:
    """One tool call: name, phase, status (ok | error | denied | unknown) and whether its output was empty."""

    tool: str
    phase: str = "extraction"
    status: str = "ok"
    empty_output: bool = False
    error: str = ""


@dataclass
class CellFacts:
    run_id: str
    claim_id: str
    model: str
    arm: str = "normal"
    repeat: int | None = None
    source: str = "record"  # "record" | "archive:<file>"
    outcome: str = "submitted"  # the run_end outcome; "engine_error" for the archive's engine errors
    extraction: dict[str, Any] | None = None
    calls: list[CallFact] = field(default_factory=list)
    calls_known: bool = True  # False: only per-tool counts are known (imported summaries)
    counts: Counter = field(default_factory=Counter)
    final_error: str = ""  # the run ended without a structured answer (not an engine error)
    finals: list[tuple[int, str]] | None = None  # (position among the calls, error) of each final output, when
    # a cell holds several attempts (imported traces); None: one final output after the last call
    usage: dict[str, int] = field(default_factory=dict)
    wall_s: float | None = None
    model_latency_s: float | None = None
    turns: int | None = None
    chamber_verdict: str | None = None
    stored_fidelity: bool | None = None  # fidelity as stored by the archive (re-grading may be impossible)
    role: str = ""  # archive role: planted_fault | clean | matrix | probe | ...
    meta: dict[str, Any] = field(default_factory=dict)
    record: str | None = None
    spec: str = ""  # the full model spec (endpoint, model, options: recorded_spec); "" = the model alone
    tool_protocol: str = "native"  # how tool calls travelled: the API's own (native) or text parsed by the client

    @property
    def model_spec(self) -> str:
        """What cells are grouped by: the full spec, else (an imported cell) the model name."""
        return self.spec or self.model

    @property
    def engine_error(self) -> bool:
        return self.outcome in ("engine_error", "timeout", "context_exceeded")

    def count(self, tools: frozenset[str], phase: str | None = "extraction") -> int:
        """Calls to any of `tools` (chamber-phase calls never count when phase is 'extraction')."""
        if self.calls_known:
            return sum(1 for c in self.calls if c.tool in tools and c.status != "denied"
                       and (phase is None or c.phase == phase))
        return sum(n for t, n in self.counts.items() if t in tools)

    def tool_counts(self) -> dict[str, int]:
        if self.calls_known:
            return dict(Counter(c.tool for c in self.calls))
        return dict(self.counts)


def arm_of_surface(version: str) -> str:
    """The arm recorded in the tool surface version ("<version>+arm=<arm>"), or "normal" (schema 1-2 only)."""
    return version.split(ARM_MARK, 1)[1] if ARM_MARK in version else "normal"


def _repeat_of(run_id: str) -> int | None:
    """The repeat number the matrix runner wrote at the end of a run id ("...--r2") (schema 1-2 only)."""
    m = re.search(r"--r(\d+)$", run_id)
    return int(m.group(1)) if m else None


TYPED_CELL_SCHEMA = 3  # from this record schema on, run_start carries arm and repeat as typed fields


def arm_and_repeat(start: RunStart) -> tuple[str, int | None]:
    """The cell's arm and repeat: typed on run_start from schema 3 on (a cell run outside a plan has neither:
    its arm is "normal", the tools the loop offers by default); recovered from the tool surface version and
    the run id only for records of the older schemas (the archived runs), which predate the typed fields."""
    if schema_number(start) >= TYPED_CELL_SCHEMA:
        return start.arm or "normal", start.repeat
    return arm_of_surface(start.tool_surface.version), (start.config or {}).get("repeat", _repeat_of(start.run_id))


def recorded_spec(start: RunStart) -> str:
    """The full model spec a record was made with, from run_start: `<provider>:<endpoint>#<model>` when the
    client called an endpoint, else the model, then `?<option>=<JSON>&...` for the client's options (as sent:
    e.g. a chat-completions temperature inside extra_body). Cells of one model name at another endpoint or with
    other options are another spec, and are scored apart. A cell run from a plan recorded the --model string
    itself (`model_spec`), the same string the run index holds: that is used; the rest is for older records."""
    config = start.config or {}
    if config.get("model_spec"):
        return _with_protocol(str(config["model_spec"]), config.get("tool_protocol"))
    endpoint = config.get("model_endpoint")
    spec = f"{start.provider}:{endpoint}#{start.model}" if endpoint else start.model
    pairs: list[str] = []

    def flat(prefix: str, node: Any) -> None:
        if isinstance(node, dict) and node:
            for k in sorted(node):
                flat(f"{prefix}.{k}", node[k])
        else:
            pairs.append(f"{prefix}={json.dumps(node, sort_keys=True, separators=(',', ':'))}")

    options = config.get("model_options") or {}
    for key in sorted(options):
        flat(str(key), options[key])
    return _with_protocol(spec + ("?" + "&".join(pairs) if pairs else ""), config.get("tool_protocol"))


def _with_protocol(spec: str, protocol: Any) -> str:
    """`spec` naming the text tool protocol when the cell used it and the spec does not say so (a hand-built
    client's cell): text runs are grouped and scored apart from native ones of the same model."""
    if protocol != "text" or re.search(r"[?&]tools=", spec):
        return spec
    return spec + ("&" if "?" in spec else "?") + "tools=text"


def recorded_protocol(start: RunStart, turns: list[Any]) -> str:
    """The cell's tool protocol: run_start's config, else what its turns' calls say, else native (older
    records, which predate the text protocol)."""
    protocol = (start.config or {}).get("tool_protocol")
    if protocol:
        return str(protocol)
    said = {c.get("protocol") for t in turns for c in t.tool_calls if c.get("protocol")}
    return "text" if said == {"text"} else "native"


def facts_from_events(events: list[Any], record: Path | None = None) -> CellFacts:
    """Facts of one cell from its typed record events (run_start first)."""
    start = events[0]
    if start.kind != "run_start":
        raise RecordError(f"{record}: first event is {start.kind!r}, expected 'run_start'")
    end = events[-1] if events[-1].kind == "run_end" else None
    calls: list[CallFact] = []
    for e in events:
        if e.kind == "tool_call":
            seen_image = any(a.get("delivered_as", "tool_result") != "none" for a in e.attachments)
            # An image-only output the model never received (a text-only model) is an empty read: the
            # caption text ("PNG of page 6, 45189 bytes") is not the page.
            empty = (e.output_bytes == 0 and not e.attachments) or (bool(e.attachments) and not seen_image)
            calls.append(CallFact(e.tool, e.phase, e.status, empty,
                                  e.output_text[:200] if e.status != "ok" else ""))
    turns = [e for e in events if e.kind == "model_turn"]
    extraction = end.extraction if end is not None else next(
        (e.extraction for e in events if e.kind == "phase_change"), None)
    outcome = end.outcome if end is not None else "engine_error"
    usage = end.usage.model_dump() if end is not None else {}
    arm, repeat = arm_and_repeat(start)
    chamber_verdict = None
    if end is not None and isinstance(end.chamber_outcome, dict):
        v = end.chamber_outcome.get("verdict")
        chamber_verdict = str(v) if v is not None else None
    final_error = ""
    if outcome != "submitted":
        final_error = f"{outcome}: {end.detail if end is not None else 'record cut short (no run_end)'}"
    return CellFacts(
        run_id=start.run_id, claim_id=start.claim_id, model=start.model,
        arm=arm, repeat=repeat,
        source="record", outcome=outcome, extraction=extraction, calls=calls, calls_known=True,
        final_error=final_error, usage=usage, wall_s=end.wall_s if end is not None else None,
        model_latency_s=sum(t.latency_ms for t in turns) / 1000.0, turns=len(turns),
        chamber_verdict=chamber_verdict, record=str(record) if record else None,
        meta={"datasheet": start.datasheet, "tool_surface": start.tool_surface.model_dump()},
        spec=recorded_spec(start), tool_protocol=recorded_protocol(start, turns),
    )


def facts_from_record(path: Path) -> CellFacts:
    path = Path(path)
    return facts_from_events(read_record(path), path)


# --------------------------------------------------------------------------------------------- imported cells
class ImportedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str  # "tool_call" | "final_output"
    tool: str = ""
    error: str = ""
    attempt: int = 1


class ImportedCell(BaseModel):
    """One archived cell converted by `agent.scoring.archive`; the file format of `imported_cells.jsonl`."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    source_file: str
    role: str
    arm: str
    claim_id: str
    model: str
    repeat: int | None = None
    fault: str | None = None
    expected_rule: str | None = None
    engine_error: str = ""
    fidelity_pass: bool | None = None
    tool_calls_by_tool: dict[str, int] = {}
    extraction: dict[str, Any] | None = None
    quotes: list[str] = []
    stored_detector_flagged: bool | None = None
    stored_detector_rules: list[str] = []
    stored_attribution: list[str] | None = None
    chamber_verdict: str | None = None
    load_bearing_condition_names: list[str] = []
    extracted_condition_names: list[str] = []
    events: list[ImportedCall] | None = None
    usage: dict[str, int] = {}
    latency_s: float | None = None
    n_steps: int | None = None


def facts_from_imported(cell: ImportedCell) -> CellFacts:
    counts = Counter({k: int(v) for k, v in cell.tool_calls_by_tool.items()})
    calls: list[CallFact] = []
    calls_known = False
    final_error = ""
    if cell.events is not None:
        calls_known = True
        finals: list[tuple[int, str]] | None = []
        for ev in cell.events:
            if ev.kind == "tool_call":
                calls.append(CallFact(ev.tool, "extraction", "error" if ev.error else "ok", False, ev.error))
            else:
                finals.append((len(calls), ev.error))
                final_error = ev.error or final_error
    else:
        finals = None
    # The archive counts input tokens the Anthropic way (cache reads/writes excluded); ours include them.
    cache_read = int(cell.usage.get("cache_read_tokens", 0) or 0)
    cache_write = int(cell.usage.get("cache_creation_tokens", 0) or 0)
    usage = {"input_tokens": int(cell.usage.get("input_tokens", 0) or 0) + cache_read + cache_write,
             "output_tokens": int(cell.usage.get("output_tokens", 0) or 0),
             "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write} if cell.usage else {}
    return CellFacts(
        run_id=cell.run_id, claim_id=cell.claim_id, model=cell.model, arm=cell.arm, repeat=cell.repeat,
        source=f"archive:{cell.source_file}", outcome="engine_error" if cell.engine_error else "submitted",
        extraction=cell.extraction, calls=calls, calls_known=calls_known, counts=counts, final_error=final_error,
        finals=finals,
        usage=usage, wall_s=cell.latency_s, turns=cell.n_steps, chamber_verdict=cell.chamber_verdict,
        stored_fidelity=cell.fidelity_pass, role=cell.role,
        meta={"fault": cell.fault, "expected_rule": cell.expected_rule, "quotes": cell.quotes,
              "stored_detector_flagged": cell.stored_detector_flagged,
              "stored_detector_rules": cell.stored_detector_rules,
              "stored_attribution": cell.stored_attribution,
              "load_bearing_condition_names": cell.load_bearing_condition_names,
              "extracted_condition_names": cell.extracted_condition_names,
              "engine_error_text": cell.engine_error},
    )


def read_imported(path: Path) -> list[ImportedCell]:
    cells = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    cells.append(ImportedCell.model_validate_json(line))
                except ValueError as e:
                    raise RecordError(f"{path}:{n}: not an imported cell: {e}") from e
    return cells


RETIRED_DIR = "retired"  # beside cells/: engine_error attempts a resume ran again (kept for audit, not scored)


def slug(text: str) -> str:
    """A file-name-safe form of a model spec or arm name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def is_record_file(path: Path) -> bool:
    """A JSONL whose first line is a run_start event (other JSONL files in a run directory are skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
        return json.loads(first).get("kind") == "run_start"
    except (OSError, ValueError, AttributeError):
        return False
