"""The dispatch record: one JSONL file per cell, one typed event per line, appended and flushed as it happens.

Why: silent failures (a model that never opened the document, a tool call written as text, a constrained decoder
that swallowed the tool-call token) are only visible afterwards in what was offered, called and returned. So the
record keeps per-turn stop reasons, usage and offered tools, every tool call with its id, status (denied calls
included) and full output (as a content-addressed blob beside the JSONL), and the frozen extraction's hash.
A crash mid-run still leaves every event written so far on disk.

Every line is strict JSON (RFC 8259), so any reader can read every line: a non-finite number is written as the
string "NaN", "Infinity" or "-Infinity" (typed float fields read back as the float; free-form payloads keep the
string), never bare and never silently as null. A line is written whole or not at all: if the write fails (a
full disk, a file-size limit) the bytes already written are cut off again and RecordWriteError is raised, so the
caller never reports a result whose record is missing or half-written.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

SCHEMA_VERSION = "3"  # 2: usage counts may be null (not reported), response ids, per-attempt facts;
# 3: run_start carries the cell's place in its plan (cell_id, arm, repeat) as typed fields. Older records read
# as before (the new fields are None there; agent.scoring.cells recovers arm and repeat the old way for them).
OUTPUT_KEPT_BYTES = 4096  # output text kept inline in the record; the whole output is always in the blob

Phase = Literal["extraction", "chamber"]
Outcome = Literal[
    "submitted", "end_turn_without_submit", "max_tokens", "max_turns", "timeout", "refusal", "context_exceeded",
    "engine_error",
    # the serving stack, not the model's reasoning (agent/models/text_calls.py): a call written as text, a
    # tool-call token repeated to the output limit, a reply that is neither a call nor an answer
    "tool_call_as_text", "tool_token_repeated", "neither_call_nor_answer",
    # the document, not the model: the datasheet the cell's tools read cannot be read (damaged, encrypted, image
    # only, ...); run_end's detail holds the one-line reason (agent.datasheet.document.DocumentUnreadable)
    "document_unreadable",
]
DOCUMENT_UNREADABLE = "document_unreadable"


# Strict JSON for non-finite floats: "NaN"/"Infinity" strings (pydantic's default writes null, which loses the
# value and makes a typed field unreadable by read_record).
_STRICT = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class _Event(BaseModel):
    model_config = _STRICT

    run_id: str
    seq: int = Field(ge=0)
    t: float  # seconds since the epoch, from the injected clock


class ToolSurface(BaseModel):
    model_config = _STRICT

    name: str
    version: str
    sha256: str  # of the canonical JSON of [{name, description, input_schema}, ...]
    tools: list[str]
    # the offered definitions themselves ({name, description, input_schema}), so a trace or an eval log can show
    # what the model was offered and the hash can be checked; empty in records written before they were kept
    specs: list[dict[str, Any]] = []


class CellKey(BaseModel):
    """A cell's place in a plan of cells (agent.cell_runner): its id, the probe arm and the repeat number.

    Typed on run_start so a record alone says which arm and repeat produced it, without parsing its run id or
    its tool surface version."""

    model_config = _STRICT

    cell_id: str = Field(min_length=1)
    arm: str = Field(min_length=1)
    repeat: int = Field(ge=1)


class RunStart(_Event):
    kind: Literal["run_start"] = "run_start"
    schema_version: str = SCHEMA_VERSION
    # the cell's place in its plan (schema 3): cell_id is the record's own id (its file name) for every cell;
    # arm and repeat are None for a cell run outside a plan (a bare run_cell). All three are None in records of
    # schema 1-2, which predate the fields.
    cell_id: str | None = None
    arm: str | None = None
    repeat: int | None = Field(default=None, ge=1)
    claim_id: str
    model: str
    provider: str
    transport: str
    system_prompt: str
    first_user_message: str
    tool_surface: ToolSurface
    datasheet: dict[str, Any]
    chamber: dict[str, Any] | None = None
    config: dict[str, Any]


class TokenUsage(BaseModel):
    """Token counts as the provider reported them; null = not reported (unknown), never a fabricated 0.

    The one usage type: the model clients produce it from their wire format and the loop records it as is."""

    model_config = _STRICT

    input_tokens: int | None = None  # includes cache reads and writes (OpenTelemetry convention)
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    reasoning_output_tokens: int | None = None  # part of output_tokens

    @property
    def total_tokens(self) -> int | None:
        """Input plus output (cache counts are inside input), or None when either is unknown."""
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens

    @classmethod
    def zero(cls) -> TokenUsage:
        """The usage of a run that made no model call: known to be nothing."""
        return cls(input_tokens=0, output_tokens=0, cache_read_input_tokens=0, cache_creation_input_tokens=0,
                   reasoning_output_tokens=0)

    def plus(self, other: TokenUsage | None) -> TokenUsage:
        """Field-wise sum; a count unknown in either is unknown in the sum (a partial sum would understate)."""
        if other is None:
            return TokenUsage()

        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None or b is None else a + b

        return TokenUsage(**{k: add(getattr(self, k), getattr(other, k)) for k in type(self).model_fields})


class Attempt(BaseModel):
    """One HTTP attempt of a model turn: a retried turn keeps every attempt's request id, not just the last."""

    model_config = _STRICT

    request_id: str | None = None
    http_status: int | None = None
    latency_ms: float = Field(ge=0)
    error: str | None = None  # None for the attempt that produced the turn
    waited_s: float | None = None  # the wait before the next attempt, and why: see wait_reason
    wait_reason: Literal["retry-after", "backoff"] | None = None
    response_body: str | None = None  # the server's whole error body (the error line is one line of it)


class ModelTurnEvent(_Event):
    kind: Literal["model_turn"] = "model_turn"
    turn: int = Field(ge=1)
    phase: Phase
    offered_tools: list[str]
    tool_choice: Any  # what the request carried (None: no tools field was sent, the text protocol)
    tool_protocol: Literal["native", "text"] | None = None  # what carried this turn's tool calls (None: a record
    # written before issue 33)
    stop_reason: str | None  # normalised; None when no attempt produced a turn
    raw_stop_reason: str | None = None  # exactly as the wire said (finish_reason, stop_reason, status/reason)
    upstream_stop_reason: str | None = None  # what a gateway (LiteLLM) passed through from the upstream provider
    usage: TokenUsage | None = None
    latency_ms: float
    retries: int = 0  # loop retries + transport retries
    http_status: int | None = None
    request_id: str | None = None  # of the last attempt; every attempt's is in `attempts`
    response_id: str | None = None  # the provider's id of the response (msg_…, resp_…, chatcmpl-…)
    attempts: list[Attempt] = []
    response_model: str | None = None
    text: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = []  # [{id, name}] in the order asked
    # tool calls the model wrote as text instead ({name, arguments, form}): recorded, never executed
    text_tool_calls: list[dict[str, Any]] = []
    errors: list[str] = []  # one line per failed attempt


class ToolCallEvent(_Event):
    kind: Literal["tool_call"] = "tool_call"
    tool_call_id: str
    turn: int = Field(ge=1)
    phase: Phase
    tool: str
    arguments: dict[str, Any]
    status: Literal["ok", "error", "denied"]
    error_type: str | None = None
    output_text: str  # first OUTPUT_KEPT_BYTES bytes (UTF-8) of the output
    output_bytes: int = Field(ge=0)  # size of the whole output
    output_kept_bytes: int = Field(ge=0)
    output_sha256: str
    blob: str  # path of the whole output, relative to the record file's folder
    # images the tool returned: {mime_type, bytes, sha256, blob, delivered_as}; delivered_as says how the model
    # received it (tool_result | user_message | none: not delivered, the model saw the text only)
    attachments: list[dict[str, Any]] = []
    start: float
    end: float
    duration_ms: float = Field(ge=0)


class PhaseChange(_Event):
    kind: Literal["phase_change"] = "phase_change"
    from_phase: Phase = "extraction"
    to_phase: Phase | None  # None: phase two skipped
    extraction_sha256: str
    extraction: dict[str, Any]
    chamber_session_id: str | None = None
    chamber_tool_surface: ToolSurface | None = None
    skipped_reason: str | None = None


class RunEnd(_Event):
    kind: Literal["run_end"] = "run_end"
    outcome: Outcome
    phase: Phase
    detail: str = ""
    extraction: dict[str, Any] | None = None
    extraction_sha256: str | None = None
    chamber_outcome: Any = None
    phase_two: Literal["completed", "skipped", "incomplete", "not_reached"]
    turns: int
    usage: TokenUsage
    tool_time_s: float
    wall_s: float


RecordEvent = Annotated[RunStart | ModelTurnEvent | ToolCallEvent | PhaseChange | RunEnd, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(RecordEvent)


class RecordError(ValueError):
    """A record file that does not follow the schema or its invariants; names the file, line and rule."""


class RecordWriteError(OSError):
    """An event that could not be appended as one whole JSON line; names the file, the event and the cause.
    Nothing of the event stays in the file."""


class RecordWriter:
    """Appends events for one cell to `<record_dir>/<run_id>.jsonl`, flushing each line; blobs go beside it."""

    def __init__(self, record_dir: Path, run_id: str, clock: Callable[[], float]) -> None:
        self.run_id = run_id
        self.clock = clock
        self.dir = Path(record_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"{run_id}.jsonl"
        self.blob_dir = self.dir / f"{run_id}.blobs"
        self._seq = 0
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind_model: type[BaseModel], **fields: Any) -> BaseModel:
        """Build, validate and append one event (validation errors surface here, at the writer, not later).

        The line reaches the file whole (unbuffered, so a crash right after keeps it) or not at all:
        RecordWriteError when it cannot be serialised or written."""
        event = kind_model(run_id=self.run_id, seq=self._seq, t=fields.pop("t", None) or self.clock(), **fields)
        what = f"{self.path}: event {self._seq} ({getattr(event, 'kind', kind_model.__name__)})"
        try:
            line = (event.model_dump_json() + "\n").encode("utf-8")
        except PydanticSerializationError as e:
            raise RecordWriteError(f"{what}: cannot be written as JSON: {e}") from e
        self._append(line, what)
        self._seq += 1
        return event

    def _append(self, line: bytes, what: str) -> None:
        if self._fd is None:
            raise RecordWriteError(f"{what}: the record is closed")
        start = os.fstat(self._fd).st_size
        done = 0
        try:
            while done < len(line):  # os.write may write part of the line (a disk filling up)
                done += os.write(self._fd, line[done:])
        except OSError as e:
            try:
                os.ftruncate(self._fd, start)  # cut the partial line: the file stays valid JSON Lines
                kept = "nothing of it was kept"
            except OSError as cut:
                kept = f"and cutting the {done} bytes written failed too ({cut}): the last line is partial"
            raise RecordWriteError(f"{what}: writing {len(line)} bytes failed after {done}: {e}; {kept}") from e

    def store_blob(self, text: str | bytes, suffix: str = ".txt") -> tuple[str, str, int]:
        """Store a full tool output; returns (relative path, sha256, byte size). Identical outputs share a blob."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        digest = hashlib.sha256(data).hexdigest()
        self.blob_dir.mkdir(exist_ok=True)
        path = self.blob_dir / f"{digest}{suffix}"
        if not path.exists():
            path.write_bytes(data)
        return f"{self.blob_dir.name}/{digest}{suffix}", digest, len(data)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def schema_number(start: RunStart) -> int:
    """The record's schema version as a number (RecordError for one that is not a whole number)."""
    try:
        return int(start.schema_version)
    except ValueError:
        raise RecordError(f"run {start.run_id}: schema_version {start.schema_version!r}, expected a whole "
                          "number") from None


def kept_text(text: str, limit: int = OUTPUT_KEPT_BYTES) -> tuple[str, int]:
    """The first `limit` UTF-8 bytes of `text` (never splitting a character) and how many bytes that is."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, len(data)
    kept = data[:limit].decode("utf-8", errors="ignore")
    return kept, len(kept.encode("utf-8"))


def read_record(path: Path) -> list[Any]:
    """Parse and validate every line of a record file into typed events; RecordError names the bad line."""
    events = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                events.append(_ADAPTER.validate_json(line))
            except ValidationError as e:
                raise RecordError(f"{path}:{n}: not a valid record event: {e.errors()[:3]}") from e
    return events


def validate_record(path: Path, *, check_blobs: bool = True) -> list[Any]:
    """Schema plus invariants: run_start first and run_end last, one run id, consecutive seq, no chamber-phase
    tool call before the phase_change, and every blob present with the recorded hash and size."""
    path = Path(path)
    events = read_record(path)
    if not events:
        raise RecordError(f"{path}: empty record")
    if events[0].kind != "run_start":
        raise RecordError(f"{path}: first event is {events[0].kind!r}, expected 'run_start'")
    if events[-1].kind != "run_end":
        raise RecordError(f"{path}: last event is {events[-1].kind!r}, expected 'run_end' (run cut short?)")
    run_ids = {e.run_id for e in events}
    if len(run_ids) != 1:
        raise RecordError(f"{path}: several run ids {sorted(run_ids)}")
    for i, e in enumerate(events):
        if e.seq != i:
            raise RecordError(f"{path}: event {i} has seq {e.seq}")
    chamber_tools: set[str] = set()
    for e in events:
        if e.kind == "phase_change" and e.chamber_tool_surface is not None:
            chamber_tools.update(e.chamber_tool_surface.tools)
    entered_chamber = False
    for e in events:
        if e.kind == "tool_call" and e.tool in chamber_tools and e.status != "denied" and not entered_chamber:
            raise RecordError(f"{path}: chamber tool {e.tool} ran ({e.tool_call_id}) before the phase_change")
        if e.kind == "phase_change" and e.to_phase == "chamber":
            entered_chamber = True
        if e.kind == "tool_call" and e.phase == "chamber" and not entered_chamber:
            raise RecordError(f"{path}: chamber tool call {e.tool_call_id} ({e.tool}) before the phase_change")
        if e.kind == "tool_call" and check_blobs:
            blob = path.parent / e.blob
            if not blob.exists():
                raise RecordError(f"{path}: blob {e.blob} of tool call {e.tool_call_id} is missing")
            data = blob.read_bytes()
            if hashlib.sha256(data).hexdigest() != e.output_sha256 or len(data) != e.output_bytes:
                raise RecordError(f"{path}: blob {e.blob} does not match the recorded hash/size")
    return events
