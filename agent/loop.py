"""The two-phase agent loop for one cell (one claim, one model, one datasheet), recorded event by event.

Phase one ("extraction") offers the datasheet tools and submit_extraction. A valid submission is frozen with
the chamber service (which returns its SHA-256) and the loop then offers the chamber tools the service lists;
submit_chamber_outcome ends the run. Without a chamber the run ends at the freeze and the record says phase two
was skipped. Every way a run can end — end_turn without a submit, max_tokens, pause_turn loops, refusal, context
overflow, timeouts, HTTP errors, budgets — becomes an explicit `run_end` outcome, and only "submitted" means the
model delivered its answer through the tool; nothing here scores it. A reply that shows a serving-stack fault
instead (a tool call written as text, a tool-call token repeated to the output limit, neither a call nor an
answer: agent/models/text_calls.py) ends the run under that outcome; a call found in text is never executed —
unless the client carries calls as text by design (the text tool protocol, agent/models/text_protocol.py: the
tools described in the prompt, the calls parsed from the reply); each recorded call names the protocol that
carried it, and run_start's config the cell's protocol.
A datasheet that cannot be read (damaged, encrypted, image only: agent.datasheet's DocumentUnreadable) is not the
model's doing either: the run ends `document_unreadable` with the reason, before the model is asked when the
surface's DOCUMENT_PROBE says so, else as soon as a tool (or the single-pass request) meets it.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.chamber_client import ChamberClient, ChamberError
from agent.models.base import (
    Message,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelTurn,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    error_line,
    one_line,
)
from agent.models.text_calls import ReplyFault, classify_reply
from agent.models.text_protocol import tool_protocol_of
from agent.prompt import (
    SUBMIT_CHAMBER_OUTCOME,
    SUBMIT_EXTRACTION,
    ExtractionPayload,
    default_chamber_outcome_tool,
    first_user_message,
    project_claim,
    submit_extraction_tool,
    system_prompt,
)
from agent.record import (
    DOCUMENT_UNREADABLE,
    Attempt,
    CellKey,
    ModelTurnEvent,
    PhaseChange,
    RecordWriter,
    RunEnd,
    RunStart,
    TokenUsage,
    ToolCallEvent,
    ToolSurface,
    kept_text,
)
from agent.tool import Tool, ToolResult
from protocols.canonical import canonical_sha256

if TYPE_CHECKING:
    from agent.datasheet.manifest import ManifestCache
    from protocols.claims import Claim

log = logging.getLogger(__name__)

TOOL_SURFACE_NAME = "chamberlab-datasheet"
DOCUMENT_PROBE = "build_datasheet"
"""The phase-one tool the loop asks once, before the first model turn, whether the document the surface reads can
be read at all: it takes no argument and answers from the opened document alone. An arm that offers no such tool
(closed-book, withhold-navigation) or answers it empty (null-tool) reads no document, so nothing is probed."""


def unreadable_document(result: ToolResult) -> bool:
    """Does a tool's refusal say the whole document cannot be read (its error_type one of agent.datasheet's
    DocumentUnreadable classes), rather than that this call was wrong?"""
    if not result.is_error or result.error_type is None:
        return False
    from agent.datasheet.document import unreadable_error_types

    return result.error_type in unreadable_error_types()


def _is_unreadable(error: Exception) -> bool:
    """Is `error` agent.datasheet's DocumentUnreadable (raised while building a request that carries the document)?"""
    from agent.datasheet.document import DocumentUnreadable

    return isinstance(error, DocumentUnreadable)


@dataclass(frozen=True)
class Budget:
    """Limits of one cell. `max_total_tokens` counts input + output over all turns; `wall_s` uses the injected
    clock; `retries_per_turn` bounds the loop's retries of a failed model call (429, 5xx, timeouts)."""

    max_turns: int = 30
    max_total_tokens: int | None = None
    wall_s: float | None = 900.0
    max_output_tokens: int = 4096
    retries_per_turn: int = 2
    backoff_s: float = 1.0
    max_retry_wait_s: float = 60.0  # the longest single wait before a retry (Retry-After or backoff)
    max_pause_turns: int = 5  # consecutive pause_turn continuations before the run ends as engine_error


@dataclass
class CellResult:
    run_id: str
    outcome: str
    extraction: dict[str, Any] | None
    extraction_sha256: str | None
    chamber_outcome: Any
    phase_two: str
    record: Path
    detail: str = ""
    turns: int = 0
    tool_time_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["record"] = str(self.record)
        return d


# --------------------------------------------------------------------------------------------- datasheet tools
def datasheet_local_tools(pdf_path: Path, cache: ManifestCache | None = None) -> tuple[list[Tool], str]:
    """Open a datasheet session on `pdf_path`; returns the phase-one tools and the tool surface version.
    `cache` lets sessions on the same document share one reading of it."""
    from agent.datasheet.tools import TOOL_SURFACE_VERSION, DatasheetSession, datasheet_tools

    return datasheet_tools(DatasheetSession(pdf_path, cache)), TOOL_SURFACE_VERSION


def tool_surface(tools: list[Tool], name: str, version: str) -> ToolSurface:
    schema = [t.definition() for t in tools]
    return ToolSurface(name=name, version=version, sha256=canonical_sha256(schema), tools=[t.name for t in tools],
                       specs=schema)


# --------------------------------------------------------------------------------------------- the loop
class _RunEnded(Exception):
    def __init__(self, outcome: str, detail: str = "") -> None:
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail


_STOP_OUTCOMES = {
    "end_turn": "end_turn_without_submit",
    "stop_sequence": "end_turn_without_submit",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
    "context_exceeded": "context_exceeded",
}
_ERROR_OUTCOMES = {"timeout": "timeout", "context_exceeded": "context_exceeded"}


class _Cell:
    """The state of one run; `run_cell` is the public entry point."""

    def __init__(self, claim: Claim, model: ModelClient, tools: list[Tool], surface_version: str,
                 writer: RecordWriter, chamber: ChamberClient | None, budget: Budget,
                 clock: Callable[[], float], sleep: Callable[[float], None] | None, datasheet: dict[str, Any],
                 config: dict[str, Any], key: CellKey | None = None) -> None:
        self.claim = claim
        self.key = key
        self.view = project_claim(claim)  # the allowlist projection: the prompt's source, and the request's task
        self.model = model
        self.writer = writer
        self.chamber = chamber
        self.budget = budget
        self.clock = clock
        self.sleep = sleep
        self.datasheet = datasheet
        self.config = config
        phase_one = [*tools, submit_extraction_tool()]
        self.surface = tool_surface(phase_one, TOOL_SURFACE_NAME, surface_version)
        self.phase = "extraction"
        self.offered: list[Tool] = phase_one
        self.session_id: str | None = None
        self.extraction: dict[str, Any] | None = None
        self.extraction_sha256: str | None = None
        self.chamber_outcome: Any = None
        self.phase_two = "not_reached"
        self.turns = 0
        self.tool_time_s = 0.0
        self.usage = TokenUsage.zero()
        self.reply_fault: ReplyFault | None = None  # what the last reply without a structured call showed
        self._known_input_tokens = 0  # what the budget can count even when some turn's usage is unknown
        self._known_output_tokens = 0
        self.started = clock()

    # -- budgets
    def remaining_s(self) -> float | None:
        return None if self.budget.wall_s is None else self.budget.wall_s - (self.clock() - self.started)

    def _add_usage(self, turn: ModelTurn) -> None:
        self.usage = self.usage.plus(turn.usage)
        self._known_input_tokens += turn.usage.input_tokens or 0  # an unknown count adds nothing it can count
        self._known_output_tokens += turn.usage.output_tokens or 0

    # -- the run
    def run(self) -> None:
        view = self.view
        system, user = system_prompt(), first_user_message(view)
        chamber_info = None
        error = self._document_probe()  # an unreadable document: no chamber session, no model turn
        if self.chamber is not None:
            chamber_info = {"url": self.chamber.base_url, "session_id": None}
            try:
                if error is None:
                    self.session_id = self.chamber.create_session(view.claim_id)
                    chamber_info["session_id"] = self.session_id
            except ChamberError as e:
                error = _RunEnded("engine_error", f"chamber session could not be created: {e}")
        self.writer.write(
            RunStart, claim_id=view.claim_id, model=self.model.model, provider=self.model.provider,
            transport=self.model.transport, system_prompt=system, first_user_message=user,
            tool_surface=self.surface, datasheet=self.datasheet, chamber=chamber_info, config=self.config,
            cell_id=self.writer.run_id, arm=self.key.arm if self.key else None,
            repeat=self.key.repeat if self.key else None,
        )
        if error is not None:
            raise error
        messages = [Message("user", [TextBlock(user)])]
        pauses = 0  # consecutive pause_turn continuations
        while True:
            if self.turns >= self.budget.max_turns:
                raise _RunEnded("max_turns", f"{self.turns} turns used, the budget is {self.budget.max_turns}")
            remaining = self.remaining_s()
            if remaining is not None and remaining <= 0:
                raise _RunEnded("timeout", f"wall-time budget of {self.budget.wall_s} s used up")
            if self.budget.max_total_tokens is not None and self._known_input_tokens + self._known_output_tokens >= self.budget.max_total_tokens:
                raise _RunEnded("max_tokens", f"token budget of {self.budget.max_total_tokens} used up")
            self.turns += 1
            turn = self._model_turn(system, messages)
            messages.append(turn.message)
            calls = turn.message.tool_calls
            if calls and turn.stop_reason != "max_tokens":
                pauses = 0
                results = [self._tool_call(call) for call in calls]
                messages.append(Message("user", results))
                if self.chamber_outcome is not None:
                    self.phase_two = "completed"
                    raise _RunEnded("submitted", "chamber outcome submitted")
                if self.extraction is not None and self.chamber is None:
                    raise _RunEnded("submitted", "extraction submitted; phase two skipped (no chamber)")
                continue
            stop = turn.stop_reason
            if calls and stop == "max_tokens":
                raise _RunEnded("max_tokens", f"stop reason {turn.raw_stop_reason!r}: the tool call was cut off "
                                              f"at the output limit and is not run (phase {self.phase})")
            if self.reply_fault is not None:  # a call written as text, a token loop, an empty reply
                raise _RunEnded(self.reply_fault.outcome, self.reply_fault.detail)
            if stop == "pause_turn":
                # A server tool (web search, code execution) paused the turn; the assistant content is already
                # appended, and resending it lets the provider continue. Bounded: a provider that keeps
                # pausing is an engine fault, not max_turns of a model that never answered.
                pauses += 1
                if pauses > self.budget.max_pause_turns:
                    raise _RunEnded("engine_error", f"{pauses - 1} consecutive pause_turn continuations and "
                                                    f"the provider paused again (limit {self.budget.max_pause_turns})")
                continue
            pauses = 0
            if stop == "tool_use":
                raise _RunEnded("engine_error", "stop reason tool_use without any tool call in the content")
            outcome = _STOP_OUTCOMES.get(stop)
            if outcome is None:
                raise _RunEnded("engine_error", f"unhandled stop reason {turn.raw_stop_reason!r}")
            raise _RunEnded(outcome, f"stop reason {turn.raw_stop_reason!r} in phase {self.phase}")

    def _document_probe(self) -> _RunEnded | None:
        """The run's end when the surface's DOCUMENT_PROBE says the document cannot be read, else None (no probe
        offered, or the document reads)."""
        probe = next((t for t in self.offered if t.name == DOCUMENT_PROBE and t.runs_here), None)
        if probe is None:
            return None
        try:
            out = probe({})
        except Exception as e:  # a tool that raises instead of answering: the model will meet it, as before
            log.warning("probing the document with %s failed: %s", DOCUMENT_PROBE, e)
            return None
        return _RunEnded(DOCUMENT_UNREADABLE, out.text) if unreadable_document(out) else None

    def _model_turn(self, system: str, messages: list[Message]) -> ModelTurn:
        """One model turn with bounded retries. Every attempt is recorded (request id, status, latency, error,
        the wait before the next); a server's Retry-After is honoured up to `budget.max_retry_wait_s`, beyond
        which the turn gives up instead of hammering a server that asked for patience."""
        errors: list[str] = []
        attempts: list[Attempt] = []
        attempt = 0
        while True:
            remaining = self.remaining_s()
            request = ModelRequest(system=system, messages=list(messages), tools=list(self.offered),
                                   tool_choice="auto", max_tokens=self.budget.max_output_tokens,
                                   timeout_s=remaining, task=self.view)
            t0 = self.clock()
            try:
                turn = self.model.complete(request)
            except ModelError as e:
                latency = self.clock() - t0
                line = error_line(e)  # one line, the server's own message first; the whole body on the attempt
                errors.append(line)
                record = Attempt(request_id=e.request_id, http_status=e.http_status, latency_ms=latency * 1000.0,
                                 error=line, response_body=e.body)
                attempts.append(record)
                remaining = self.remaining_s()
                wait, reason, refusal = self._retry_wait(e, attempt, remaining)
                if refusal is None:
                    record.waited_s, record.wait_reason = wait, reason
                    attempt += 1
                    if self.sleep is not None and wait > 0:
                        self.sleep(wait)
                    continue
                if refusal:
                    errors.append(refusal)
                self._record_turn(None, attempts, errors)
                outcome = _ERROR_OUTCOMES.get(e.kind, "engine_error")
                raise _RunEnded(outcome, refusal or errors[-1]) from e
            except Exception as e:  # a client bug or a refused request shape: recorded, never a pass
                latency = self.clock() - t0
                errors.append(one_line(f"{type(e).__name__}: {e}", 500))
                attempts.append(Attempt(latency_ms=latency * 1000.0, error=errors[-1]))
                self._record_turn(None, attempts, errors)
                if _is_unreadable(e):  # the request carries the document (single-pass) and it cannot be read
                    raise _RunEnded(DOCUMENT_UNREADABLE, errors[-1]) from e
                raise _RunEnded("engine_error", errors[-1]) from e
            attempts.append(Attempt(request_id=turn.request_id, http_status=turn.http_status,
                                    latency_ms=(self.clock() - t0) * 1000.0))
            self.reply_fault = None if turn.message.tool_calls else classify_reply(
                turn.message.text, turn.stop_reason, [t.name for t in self.offered], phase=self.phase,
                has_reasoning=any(isinstance(b, ReasoningBlock) and b.text for b in turn.message.blocks),
                protocol=turn.tool_protocol)
            self._record_turn(turn, attempts, errors)
            self._add_usage(turn)
            return turn

    def _retry_wait(self, e: ModelError, attempt: int, remaining: float | None) -> tuple[float, str, str | None]:
        """(seconds to wait, why, None) to retry, or (0, "", reason text or "") to give up."""
        if not e.retryable or attempt >= self.budget.retries_per_turn:
            return 0.0, "", ""
        if remaining is not None and remaining <= 0:
            return 0.0, "", ""
        if e.retry_after_s is not None:
            wait, reason = e.retry_after_s, "retry-after"
            if wait > self.budget.max_retry_wait_s:
                return 0.0, "", (f"the server asked to wait {wait:g} s (Retry-After), more than the "
                                 f"{self.budget.max_retry_wait_s:g} s this cell may wait; not retried")
        else:
            wait, reason = min(self.budget.backoff_s * 2 ** attempt, self.budget.max_retry_wait_s), "backoff"
        if remaining is not None and wait >= remaining:
            return 0.0, "", (f"waiting {wait:g} s before a retry would exceed the {remaining:g} s of wall time "
                             f"left; not retried")
        return wait, reason, None

    def _record_turn(self, turn: ModelTurn | None, attempts: list[Attempt], errors: list[str]) -> None:
        fields: dict[str, Any] = {}
        if turn is not None:
            fields = dict(
                stop_reason=turn.stop_reason, raw_stop_reason=turn.raw_stop_reason,
                upstream_stop_reason=turn.upstream_stop_reason, usage=turn.usage, response_id=turn.response_id,
                response_model=turn.response_model, text=turn.message.text,
                reasoning="\n".join(b.text for b in turn.message.blocks if isinstance(b, ReasoningBlock)),
                # each call says which protocol carried it: the API's own tool calls or text the client parsed
                tool_calls=[{"id": c.id, "name": c.name, "protocol": turn.tool_protocol}
                            for c in turn.message.tool_calls],
                text_tool_calls=[{**c.to_json(), "protocol": turn.tool_protocol}
                                 for c in self.reply_fault.calls] if self.reply_fault else [],
            )
        else:
            fields = dict(stop_reason=None)
        last = attempts[-1] if attempts else Attempt(latency_ms=0.0)
        protocol = turn.tool_protocol if turn is not None else tool_protocol_of(self.model)
        self.writer.write(
            ModelTurnEvent, turn=self.turns, phase=self.phase, offered_tools=[s.name for s in self.offered],
            tool_choice="auto" if protocol == "native" else None, tool_protocol=protocol,
            latency_ms=sum(a.latency_ms for a in attempts),
            retries=(len(attempts) - 1) + (turn.retries if turn is not None else 0), http_status=last.http_status,
            request_id=last.request_id, attempts=attempts, errors=errors, **fields,
        )

    # -- tools
    def _tool_call(self, call: ToolCallBlock) -> ToolResultBlock:
        offered = {t.name: t for t in self.offered}
        phase = self.phase
        start = self.clock()
        ended: _RunEnded | None = None
        tool = offered.get(call.name)
        if tool is None:
            out = ToolResult.error("PermissionError", f"tool {call.name!r} is not offered in the {phase} phase; "
                                                      f"offered: {', '.join(sorted(offered))}")
            status = "denied"
        else:
            try:
                out = self._execute(tool, call)
            except _RunEnded as e:  # recorded as this call's error, then the run ends
                ended, out = e, ToolResult.error("EngineError", e.detail)
            if ended is None and tool.runs_here and unreadable_document(out):  # recorded, then the run ends
                ended = _RunEnded(DOCUMENT_UNREADABLE, out.text)
            status = "error" if out.is_error else "ok"
        end = self.clock()
        self.tool_time_s += end - start
        blob, digest, size = self.writer.store_blob(out.text)
        attachments = []
        delivery = self.model.image_delivery
        for mime, data in out.images:
            raw = base64.b64decode(data)
            a_blob, a_digest, a_size = self.writer.store_blob(raw, "." + mime.split("/")[-1])
            attachments.append({"mime_type": mime, "bytes": a_size, "sha256": a_digest, "blob": a_blob,
                                "delivered_as": delivery})
        text, kept = kept_text(out.text)
        self.writer.write(
            ToolCallEvent, tool_call_id=call.id, turn=self.turns, phase=phase, tool=call.name,
            arguments=call.arguments, status=status, error_type=out.error_type, output_text=text,
            output_bytes=size, output_kept_bytes=kept, output_sha256=digest, blob=blob, attachments=attachments,
            start=start, end=end,
            duration_ms=(end - start) * 1000.0,
        )
        if ended is not None:
            raise ended
        return ToolResultBlock(call.id, out.text, out.is_error, out.images)

    def _execute(self, tool: Tool, call: ToolCallBlock) -> ToolResult:
        if "_raw" in call.arguments and len(call.arguments) == 1:
            return ToolResult.error("InvalidArgument",
                                    f"arguments are not a JSON object: {str(call.arguments['_raw'])[:200]}")
        if call.name == SUBMIT_EXTRACTION:
            return self._submit_extraction(call.arguments)
        if tool.runs_here:
            try:
                return tool(call.arguments)
            except Exception as e:  # a tool that raised instead of returning its result
                return ToolResult.from_exception(e)
        return self._chamber_tool(call)

    def _submit_extraction(self, arguments: dict[str, Any]) -> ToolResult:
        if self.extraction is not None:
            return ToolResult.error("AlreadySubmitted", "the extraction is frozen already")
        try:
            payload = ExtractionPayload.model_validate(arguments).model_dump(mode="json")
        except Exception as e:
            return ToolResult.error("ValidationError", str(e))
        chamber_specs: list[Tool] | None = None
        if self.chamber is not None and self.session_id is not None:
            try:
                digest = self.chamber.freeze_extraction(self.session_id, payload)
                chamber_specs = self.chamber.list_tools()
            except ChamberError as e:
                raise _RunEnded("engine_error", f"freezing the extraction with the chamber failed: {e}") from e
            if not any(s.name == SUBMIT_CHAMBER_OUTCOME for s in chamber_specs):
                log.warning("chamber service lists no %s; offering a default definition", SUBMIT_CHAMBER_OUTCOME)
                chamber_specs.append(default_chamber_outcome_tool())
        else:
            digest = canonical_sha256(payload)
        self.extraction, self.extraction_sha256 = payload, digest
        if chamber_specs is None:
            self.phase_two = "skipped"
            self.writer.write(PhaseChange, to_phase=None, extraction_sha256=digest, extraction=payload,
                              skipped_reason="no chamber service given; phase two skipped")
            return ToolResult(f"Extraction frozen (SHA-256 {digest}). No chamber is attached; the run ends here.")
        surface = tool_surface(chamber_specs, "chamber-tools", "service")
        self.writer.write(PhaseChange, to_phase="chamber", extraction_sha256=digest, extraction=payload,
                          chamber_session_id=self.session_id, chamber_tool_surface=surface)
        self.phase, self.offered, self.phase_two = "chamber", chamber_specs, "incomplete"
        return ToolResult(f"Extraction frozen (SHA-256 {digest}). Chamber tools now offered: "
                          f"{', '.join(s.name for s in chamber_specs)}. Finish with {SUBMIT_CHAMBER_OUTCOME}.")

    def _chamber_tool(self, call: ToolCallBlock) -> ToolResult:
        assert self.chamber is not None and self.session_id is not None
        try:
            answer = self.chamber.call_tool(self.session_id, call.name, call.arguments)
        except ChamberError as e:
            raise _RunEnded("engine_error", f"chamber tool {call.name} failed in transport: {e}") from e
        if answer.ok and call.name == SUBMIT_CHAMBER_OUTCOME:
            self.chamber_outcome = answer.body if answer.body is not None else {}
        return answer.result

    def release_session(self) -> None:
        """End the chamber session of a cell that did not submit its outcome (which ends it on the server): an
        open session holds a place under the service's per-client cap until it idles out, so a run of cells
        that stop early would otherwise lock its own client out."""
        if self.chamber is None or self.session_id is None or self.chamber_outcome is not None:
            return
        try:
            self.chamber.end_session(self.session_id)
        except ChamberError as e:
            log.info("could not end chamber session %s: %s", self.session_id, e)

    def finish(self, outcome: str, detail: str) -> RunEnd:
        return self.writer.write(
            RunEnd, outcome=outcome, phase=self.phase, detail=detail[:2000], extraction=self.extraction,
            extraction_sha256=self.extraction_sha256, chamber_outcome=self.chamber_outcome,
            phase_two=self.phase_two, turns=self.turns, usage=self.usage, tool_time_s=self.tool_time_s,
            wall_s=self.clock() - self.started,
        )


def run_cell(
    claim: Claim,
    *,
    model: ModelClient,
    datasheet: Path,
    record_dir: Path,
    clock: Callable[[], float],
    chamber: ChamberClient | None = None,
    budget: Budget = Budget(),
    sleep: Callable[[float], None] | None = None,
    run_id: str | None = None,
    tools: list[Tool] | None = None,
    surface_version: str | None = None,
    model_spec: str | None = None,
    cell: CellKey | None = None,
) -> CellResult:
    """Run one cell end to end and return its outcome; the record is `<record_dir>/<run_id>.jsonl`.

    `claim` is protocols' Claim (only its allowlist projection reaches the model). `datasheet` is the PDF the
    phase-one tools open (`tools` overrides them, for tests of the loop alone). `clock` returns seconds (epoch)
    and drives the wall budget and every timestamp; `sleep`, if given, backs off between retries. `chamber`
    None runs phase one only. `cell` (agent.cell_runner) is the cell's place in its plan, typed on run_start;
    its cell_id is the run id (a different `run_id` is refused)."""
    from protocols.datasheets import sha256_of

    if cell is not None and run_id is not None and run_id != cell.cell_id:
        raise ValueError(f"run_id {run_id!r} differs from the cell's id {cell.cell_id!r}: expected one id")
    run_id = run_id or (cell.cell_id if cell is not None else f"{claim.id}-{uuid.uuid4().hex[:12]}")
    datasheet = Path(datasheet)
    if tools is None:
        tools, version = datasheet_local_tools(datasheet)
        surface_version = surface_version or version
    not_here = [t.name for t in tools if not t.runs_here]
    if not_here:  # refused before a record is opened: phase one has no service to answer them
        raise ValueError(f"phase-one tools run in process: expected a handler on every tool, {not_here} have none")
    ds_info = {"path": str(datasheet), "sha256": sha256_of(datasheet) if datasheet.exists() else None}
    config = {"budget": asdict(budget), "chamber": chamber.base_url if chamber is not None else None,
              "model_options": dict(model.options),
              "model_endpoint": model.base_url,
              "model_spec": model_spec,  # the --model string as given (scoring groups by it)
              "tool_protocol": tool_protocol_of(model),  # native | text (agent/models/text_protocol.py)
              "phase_two": "enabled" if chamber is not None else "skipped"}
    with RecordWriter(Path(record_dir), run_id, clock) as writer:
        cell = _Cell(claim, model, tools, surface_version or "unversioned", writer, chamber, budget, clock, sleep,
                     ds_info, config, cell)
        try:
            cell.run()
            outcome, detail = "engine_error", "the loop returned without an outcome"
        except _RunEnded as end:
            outcome, detail = end.outcome, end.detail
        except Exception as e:  # recorded as an engine outcome, then re-raised for the caller to see
            cell.finish("engine_error", f"{type(e).__name__}: {e}")
            raise
        finally:
            cell.release_session()
        cell.finish(outcome, detail)
    return CellResult(run_id=run_id, outcome=outcome, extraction=cell.extraction,
                      extraction_sha256=cell.extraction_sha256, chamber_outcome=cell.chamber_outcome,
                      phase_two=cell.phase_two, record=writer.path, detail=detail, turns=cell.turns,
                      tool_time_s=cell.tool_time_s)
