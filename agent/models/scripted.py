"""The scripted model: a ModelClient whose policy is a plain function over the loop's own conversation types.

Why: the loop, the record and the detectors must be exercised end to end without a paid model, including the
failure modes that matter (a closed-book answer, skipped verification, a missing submit, a tool call written as
text, a token-limit stop). As in pydantic-ai's FunctionModel and inspect-ai's mockllm, a policy speaks no
provider's wire format: it reads a `Conversation` (the neutral `ModelRequest`, its own earlier tool calls and
their results) and returns a `Reply` (neutral blocks and a stop reason). It gets its task as data — the claim
projection (agent/prompt.py `ClaimView`) that the prompt is built from, carried by `ModelRequest.task` or given
to the constructor — and never reads the prompt's text, so rewording the prompt cannot change what it does.
It still sees only what a real model could: the projection and the tool outputs, never the claim's value.

The reader's datasheet heuristics live in agent/reader.py; serving a policy as an Anthropic Messages endpoint for
the real SDK is agent/testserver.py's job, and the only place that wire format is spoken on the model's side.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass
from typing import Any

from agent.models.base import (
    Message,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelTurn,
    StopReason,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from agent.prompt import SUBMIT_CHAMBER_OUTCOME, SUBMIT_EXTRACTION, ClaimView
from agent.reader import (
    MAX_SEARCH_CALLS,
    QUOTE_ATTEMPTS,
    Reading,
    Table,
    page_lines,
    prose_readings,
    quote_candidates,
    readings_in,
    search_hits,
    search_phrases,
    toc_sections,
)
from agent.reader_text import fold, markdown_tables
from agent.record import TokenUsage
from agent.tool import Tool


class ScriptedHTTPError(Exception):
    """Raised by a policy to fail the call as a provider would (in process: a ModelError with this status; behind
    the test server: an HTTP error response)."""

    def __init__(self, status: int, message: str, error_type: str = "api_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type


class NoTask(ValueError):
    """A scripted model was asked for a turn without the claim projection it works from."""


# --------------------------------------------------------------------------------------------- what a policy reads
@dataclass(frozen=True)
class ToolExchange:
    """One tool call the policy made earlier in the conversation and the result it got back (None: no result)."""

    id: str
    name: str
    arguments: dict[str, Any]
    result: str | None
    is_error: bool


@dataclass(frozen=True)
class Conversation:
    """What a policy decides from: its task (the claim projection), the request as the loop built it, and its own
    earlier tool calls with their results."""

    task: ClaimView
    request: ModelRequest
    exchanges: tuple[ToolExchange, ...]
    assistant_turns: int

    @property
    def offered(self) -> list[str]:
        return [t.name for t in self.request.tools]

    @property
    def phase_two(self) -> bool:
        return SUBMIT_CHAMBER_OUTCOME in self.offered

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.request.tools if t.name == name), None)

    @property
    def results(self) -> list[ToolExchange]:
        """The exchanges that have a result."""
        return [e for e in self.exchanges if e.result is not None]


def read_conversation(request: ModelRequest, task: ClaimView) -> Conversation:
    """The policy's view of a request: tool calls of the assistant turns paired with the results sent back."""
    calls: list[ToolCallBlock] = []
    results: dict[str, ToolResultBlock] = {}
    for message in request.messages:
        for block in message.blocks:
            if isinstance(block, ToolCallBlock):
                calls.append(block)
            elif isinstance(block, ToolResultBlock):
                results[block.call_id] = block
    exchanges = tuple(
        ToolExchange(c.id, c.name, dict(c.arguments), results[c.id].content if c.id in results else None,
                     results[c.id].is_error if c.id in results else False)
        for c in calls
    )
    turns = sum(1 for m in request.messages if m.role == "assistant")
    return Conversation(task=task, request=request, exchanges=exchanges, assistant_turns=turns)


# --------------------------------------------------------------------------------------------- what a policy returns
@dataclass(frozen=True)
class Reply:
    """One assistant turn: text and tool calls, the stop reason, and the usage to report (None: the model's
    deterministic estimate)."""

    blocks: tuple[TextBlock | ToolCallBlock, ...]
    stop_reason: StopReason
    usage: TokenUsage | None = None


Policy = Callable[[Conversation], Reply]
"""A scripted model's whole behaviour: a plain function from the conversation to the next turn."""


def call(conv: Conversation, name: str, arguments: dict[str, Any], text: str = "") -> Reply:
    """A turn that calls one tool, with a deterministic call id (turn number and tool name)."""
    blocks: list[TextBlock | ToolCallBlock] = [TextBlock(text)] if text else []
    blocks.append(ToolCallBlock(f"toolu_{conv.assistant_turns + 1:03d}_{name}", name, arguments))
    return Reply(tuple(blocks), "tool_use")


def end_turn(text: str) -> Reply:
    return Reply((TextBlock(text),), "end_turn")


def stop(reason: StopReason, text: str = "") -> Reply:
    return Reply((TextBlock(text),) if text else (), reason)


# --------------------------------------------------------------------------------------------- the model client
def _estimate_tokens(obj: Any) -> int:
    return max(1, len(json.dumps(obj, default=str)) // 4)  # deterministic stand-in for a tokenizer


def _rendered(request: ModelRequest) -> dict[str, Any]:
    """The request as plain data for the token estimate (the same on every path that rebuilds the request)."""
    return {"system": request.system, "tools": [t.definition() for t in request.tools],
            "messages": [{"role": m.role, "blocks": [asdict(b) for b in m.blocks]} for m in request.messages]}


class ScriptedModel(ModelClient):
    """Runs a policy in process. The task is `request.task` (the loop's own projection of the cell's claim), else
    the `task` given here (a test or the test server that has no loop in front of it)."""

    provider = "scripted"
    transport = "in-process"

    def __init__(self, policy: Policy, model: str, *, task: ClaimView | None = None) -> None:
        self.policy = policy
        self.model = model
        self.task = task

    def complete(self, request: ModelRequest) -> ModelTurn:
        task = request.task or self.task
        if task is None:
            raise NoTask(f"scripted model {self.model!r}: expected the claim projection (ModelRequest.task or the "
                         "constructor's task=), got neither")
        conv = read_conversation(request, task)
        try:
            reply = self.policy(conv)
        except ScriptedHTTPError as e:
            kind = "context_exceeded" if "prompt is too long" in e.message else "http"
            raise ModelError(kind, e.message, http_status=e.status) from e
        blocks = [asdict(b) for b in reply.blocks]
        usage = reply.usage or TokenUsage(input_tokens=_estimate_tokens(_rendered(request)),
                                          output_tokens=_estimate_tokens(blocks),
                                          cache_read_input_tokens=0, cache_creation_input_tokens=0)
        # In process: no HTTP request, so no request id; the response id is the scripted turn's own.
        return ModelTurn(Message("assistant", list(reply.blocks)), reply.stop_reason, reply.stop_reason, usage,
                         http_status=200, request_id=None, response_id=f"msg_scripted_{conv.assistant_turns + 1:03d}",
                         response_model=self.model)


# --------------------------------------------------------------------------------------------- phase two
CHAMBER_STEPS = ("describe_chamber", "run_protocol")
"""What a careful scripted agent does in phase two: look at the chamber, run the claim's own protocol."""


def _chamber_outcome_arguments(conv: Conversation, summary: str) -> dict[str, Any]:
    """Arguments for submit_chamber_outcome built from the schema the service published (required fields)."""
    tool = conv.tool(SUBMIT_CHAMBER_OUTCOME)
    schema = tool.input_schema if tool is not None else {}
    props = schema.get("properties") or {}
    args: dict[str, Any] = {}
    for name in schema.get("required") or []:
        kind = (props.get(name) or {}).get("type", "string")
        enum = (props.get(name) or {}).get("enum")
        args[name] = enum[0] if enum else {"string": summary, "number": 0.0, "integer": 0, "boolean": False,
                                            "object": {}, "array": []}.get(kind if isinstance(kind, str) else "string", summary)
    if "summary" in props and "summary" not in args:
        args["summary"] = summary
    return args


def _protocol_outcome(result: str) -> dict[str, Any]:
    """Outcome fields from run_protocol's JSON: the service's verdict as the prediction, its value and u."""
    try:
        data = json.loads(result)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, Any] = {}
    if data.get("verdict") in ("pass", "inconclusive", "fail"):
        out["prediction"] = data["verdict"]
    measured = data.get("measured") or {}
    try:
        if measured.get("value") is not None:
            out["measured_value"] = float(measured["value"])
            out["unit"] = str(measured.get("unit") or "")[:64] or None
        if measured.get("u") is not None:
            out["uncertainty"] = float(measured["u"])
    except (TypeError, ValueError):
        pass
    return {k: v for k, v in out.items() if v is not None}


def chamber_phase(conv: Conversation) -> Reply:
    """Phase two for the scripted policies: the offered steps of CHAMBER_STEPS in order (no made-up arguments),
    then submit_chamber_outcome carrying the protocol's verdict, value and u when it gave them."""
    called = {e.name for e in conv.exchanges}
    for name in CHAMBER_STEPS:
        if name in conv.offered and name not in called:
            return call(conv, name, {}, text=f"Let me look at the chamber with {name}.")
    protocol = next((e for e in reversed(conv.exchanges) if e.name == "run_protocol" and not e.is_error), None)
    last = next((e for e in reversed(conv.exchanges) if e.name not in (SUBMIT_EXTRACTION, SUBMIT_CHAMBER_OUTCOME)), None)
    summary = f"Chamber tool output: {(last.result or '')[:200]}" if last else "No chamber measurement was taken."
    args = _chamber_outcome_arguments(conv, summary)
    if protocol is not None:
        args.update(_protocol_outcome(protocol.result or ""))
    return call(conv, SUBMIT_CHAMBER_OUTCOME, args, text="The extraction is frozen; I end the chamber phase.")


# --------------------------------------------------------------------------------------------- replayed scripts
Step = tuple[str, dict[str, Any]]  # (tool name, arguments)
Script = Generator[Step, tuple[str, bool], None]


class ReplayPolicy:
    """A policy written as a generator of tool calls, replayed from the start on every turn.

    Each request carries the whole conversation, so the generator is fed the recorded results of its earlier
    calls in order; its next yield is this turn's call. Stateless, hence safe behind an HTTP server. When the
    generator finishes the turn ends; once phase two has begun, `chamber_phase` decides."""

    def __init__(self, script: Callable[[Conversation], Script]) -> None:
        self.script = script

    def __call__(self, conv: Conversation) -> Reply:
        if conv.phase_two:
            return chamber_phase(conv)
        gen = self.script(conv)
        try:
            step = next(gen)
            for ex in conv.exchanges:
                if ex.name != step[0]:
                    break  # the conversation diverged from this script (e.g. a denied call); continue from here
                step = gen.send((ex.result or "", ex.is_error))
        except StopIteration:
            return end_turn("I have nothing more to do.")
        return call(conv, step[0], step[1])


# --------------------------------------------------------------------------------------------- simple policies
def closed_book(conv: Conversation) -> Reply:
    """Answers at once with a plausible figure and an invented quote, without opening the document."""
    if conv.phase_two:
        return chamber_phase(conv)
    if any(e.name == SUBMIT_EXTRACTION and not e.is_error for e in conv.exchanges):
        return end_turn("Submitted.")
    parameter, unit = conv.task.parameter or "the parameter", conv.task.unit
    return call(conv, SUBMIT_EXTRACTION,
                {"value": 1.0, "unit": unit, "page": 1, "quote": f"{parameter}: typ. 1.0 {unit}", "conditions": {}},
                text=f"From my knowledge of this part, the {parameter} is typically 1.0 {unit}.")


def _skip_search_script(conv: Conversation) -> Script:
    yield ("build_datasheet", {})
    yield ("inspect_page", {"page": 1})
    unit = conv.task.unit
    yield (SUBMIT_EXTRACTION, {"value": 1.0, "unit": unit, "page": 1,
                               "quote": f"{conv.task.parameter} 1.0 {unit}", "conditions": {}})


def no_submit(conv: Conversation) -> Reply:
    """Opens the document, then ends its turn with the answer in prose instead of calling the submit tool."""
    if not conv.exchanges:
        return call(conv, "build_datasheet", {})
    return end_turn(f"The {conv.task.parameter or 'value'} is stated in the datasheet; "
                    "I believe I have answered the question.")


def markup(conv: Conversation) -> Reply:
    """Writes the submit call as text (a wrong tool parser's symptom) and ends the turn."""
    payload = {"name": SUBMIT_EXTRACTION, "arguments": {"value": 1.0, "unit": conv.task.unit, "page": 1,
                                                        "quote": "see datasheet"}}
    return end_turn(f"<tool_call>\n{json.dumps(payload)}\n</tool_call>")


def max_tokens(conv: Conversation) -> Reply:
    """Stops on the output token limit in the middle of its reasoning."""
    return stop("max_tokens", "Let me think about where this parameter is listed. "
                              "First, the electrical characteristics table")


class StopWith:
    """Answers every turn with one fixed stop reason (refusal, pause_turn, context_exceeded...)."""

    def __init__(self, stop_reason: StopReason, text: str = "") -> None:
        self.stop_reason = stop_reason
        self.text = text

    def __call__(self, conv: Conversation) -> Reply:
        return stop(self.stop_reason, self.text)


class HTTPFailure:
    """Fails every turn with one HTTP status (in process: ModelError; behind the test server: the response)."""

    def __init__(self, status: int, message: str = "scripted failure", error_type: str = "api_error") -> None:
        self.status, self.message, self.error_type = status, message, error_type

    def __call__(self, conv: Conversation) -> Reply:
        raise ScriptedHTTPError(self.status, self.message, self.error_type)


class Sequence:
    """Delegates turn n (counting assistant turns already in the conversation) to policies[n], then to the last."""

    def __init__(self, *policies: Policy) -> None:
        self.policies = policies

    def __call__(self, conv: Conversation) -> Reply:
        return self.policies[min(conv.assistant_turns, len(self.policies) - 1)](conv)


# --------------------------------------------------------------------------------------------- the reader
def reader_script(conv: Conversation) -> Script:
    """The reader (agent/reader.py's heuristics) as a script: search for the parameter, read the tables on the
    pages found, quote the best figure from the page text and check the quotation with the document's search."""
    parameter, unit = conv.task.parameter, conv.task.unit
    overview, _ = yield ("build_datasheet", {})
    calls = 1
    phrases, qualifiers, head = search_phrases(parameter)
    tables_seen: dict[int, list[Table]] = {}
    best: Reading | None = None
    printed: list[Reading] = []  # figures found only in a unit the parameter names, not in the unit asked for
    # Multi-word phrases first; then the sections whose titles echo the parameter; then single words.
    steps: list[str | None] = [p for p in phrases if " " in p] + [None] + [p for p in phrases if " " not in p]
    for phrase in steps[:14]:
        if calls >= MAX_SEARCH_CALLS:
            break
        candidates: list[Reading] = []
        if phrase is None:
            for page, words in toc_sections(overview, head):
                if page not in tables_seen:
                    md, md_error = yield ("extract_table_markdown", {"page": page})
                    calls += 1
                    tables_seen[page] = [] if md_error else markdown_tables(md)
                for word in words:
                    for table in tables_seen[page]:
                        candidates += readings_in(table, page, word, qualifiers, head, unit, parameter)
        else:
            result, is_error = yield ("search_text", {"query": phrase})
            calls += 1
            if is_error:
                continue
            hits = search_hits(result)
            for page in dict.fromkeys(p for p, _ in hits):
                if page not in tables_seen and len(tables_seen) < 12 and calls < MAX_SEARCH_CALLS:
                    md, md_error = yield ("extract_table_markdown", {"page": page})
                    calls += 1
                    tables_seen[page] = [] if md_error else markdown_tables(md)
                for table in tables_seen.get(page, []):
                    candidates += readings_in(table, page, phrase, qualifiers, head, unit, parameter)
            for page, snippet in hits:  # running text counts only where the phrase itself is printed
                if fold(phrase).lower() in fold(snippet).lower():
                    candidates += prose_readings(snippet, page, unit, parameter, phrase)
        printed += [r for r in candidates if r.unit != unit]
        candidates = [r for r in candidates if r.unit == unit]
        if candidates:
            best = max(candidates, key=lambda r: r.score)  # ties: the first (earliest page, table before prose)
            break
    if best is None and printed:  # e.g. "257 Taps" asked in LSb: report the figure as printed, and say so
        best = max(printed, key=lambda r: r.score)
    if best is None:
        return  # nothing read, nothing submitted: the turn ends without an invented figure
    # Quote the figure as the page prints it, and check with the document's own search that it is there.
    text, text_error = yield ("get_section_text", {"start_page": best.page, "end_page": best.page})
    candidates_q = quote_candidates(best, [] if text_error else page_lines(text))
    quote = candidates_q[0] if candidates_q else best.quote
    for attempt in candidates_q[:QUOTE_ATTEMPTS]:
        result, is_error = yield ("search_text", {"query": attempt[:400], "page": best.page})
        if not is_error and search_hits(result):
            quote = attempt
            break
    payload: dict[str, Any] = {k: getattr(best, k) for k in ("value", "low", "high") if getattr(best, k) is not None}
    payload.update(unit=best.unit, page=best.page, quote=quote[:400])
    if best.conditions:
        payload["conditions"] = best.conditions
    if best.unit != unit:
        payload["notes"] = f"printed in {best.unit}; {unit} is not a conversion of it, so the figure is as printed"
    yield (SUBMIT_EXTRACTION, payload)


# --------------------------------------------------------------------------------------------- registry
POLICIES: dict[str, Callable[[], Policy]] = {
    "reader": lambda: ReplayPolicy(reader_script),
    "closed-book": lambda: closed_book,
    "skip-search": lambda: ReplayPolicy(_skip_search_script),
    "no-submit": lambda: no_submit,
    "markup": lambda: markup,
    "max-tokens": lambda: max_tokens,
    "refusal": lambda: StopWith("refusal", "I can't help with that."),
    "pause-turn": lambda: StopWith("pause_turn"),
    "context-exceeded": lambda: StopWith("context_exceeded"),
}


def policy_named(name: str) -> Policy:
    """The scripted policy called `name`; ValueError lists the known names."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown scripted policy {name!r}; known: {', '.join(POLICIES)}") from None
