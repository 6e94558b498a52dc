"""The one small interface every model client implements, and the provider-neutral conversation it speaks.

Why: the loop, the record and the scripted policies must not care whether a turn came from Anthropic, the OpenAI
Responses API or a chat-completions passthrough. Each client translates this neutral conversation to its wire
format and back, keeping the provider's own output items (`Message.raw`) so that opaque state — thinking
signatures, encrypted reasoning — is sent back verbatim on the next turn. The tools offered are the agent's one
`Tool` type (agent/tool.py) and a turn's usage is the record's own `TokenUsage`, so nothing is copied field by
field between the client, the loop and the record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from types import MappingProxyType
from typing import Any, Literal, Protocol

from agent.prompt import ClaimView
from agent.record import TokenUsage
from agent.tool import JsonObject, Tool

# Normalised stop reasons. Anything else a provider returns is kept verbatim in ModelTurn.raw_stop_reason and
# normalised to "other" so the loop can still refuse to score it as a pass.
StopReason = Literal[
    "tool_use", "end_turn", "max_tokens", "pause_turn", "refusal", "context_exceeded", "stop_sequence", "other"
]


@dataclass(frozen=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ToolCallBlock:
    """One tool call a model asked for; `arguments` is the parsed JSON object (or {"_raw": text} if unparsable)."""

    id: str
    name: str
    arguments: JsonObject
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True)
class ToolResultBlock:
    """A tool's output as the model receives it; `images` are (mime type, base64 data) pairs."""

    call_id: str
    content: str
    is_error: bool = False
    images: tuple[tuple[str, str], ...] = ()
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class Base64Content:
    """Bytes sent inline as base64 with their MIME type: what an image and a whole document share."""

    mime: str
    data: str


@dataclass(frozen=True)
class ImageBlock(Base64Content):
    """An image in a user message, e.g. a rendered datasheet page for the single-pass baseline."""

    type: Literal["image"] = "image"


@dataclass(frozen=True)
class DocumentBlock(Base64Content):
    """A whole document in a user message, for providers that read PDFs themselves."""

    title: str = ""
    type: Literal["document"] = "document"


@dataclass(frozen=True)
class ReasoningBlock:
    """Reasoning a provider chose to show (thinking text or a reasoning summary); kept for the record."""

    text: str
    type: Literal["reasoning"] = "reasoning"


Block = TextBlock | ToolCallBlock | ToolResultBlock | ReasoningBlock | ImageBlock | DocumentBlock


@dataclass
class Message:
    """One conversation message. `raw` holds the provider's own items for an assistant message (resent verbatim
    to the same provider) together with the provider name in `raw_provider`."""

    role: Literal["user", "assistant"]
    blocks: list[Block]
    raw: list[dict[str, Any]] | None = None
    raw_provider: str | None = None

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        return [b for b in self.blocks if isinstance(b, ToolCallBlock)]

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if isinstance(b, TextBlock))


ImageDelivery = Literal["tool_result", "user_message", "none"]

ToolChoice = Literal["auto", "any", "none"] | dict[str, str]  # {"name": tool} forces one tool


@dataclass(frozen=True)
class ModelRequest:
    """Everything one model turn needs. `timeout_s` is the most this turn may take (the loop's remaining wall).
    `task` is the claim projection the prompt was built from, as data for an offline model (the scripted model
    reads it instead of the prompt's text); provider clients never send it."""

    system: str
    messages: list[Message]
    tools: list[Tool]
    tool_choice: ToolChoice = "auto"
    max_tokens: int = 4096
    timeout_s: float | None = None
    task: ClaimView | None = None
    stop: tuple[str, ...] = ()  # stop sequences (the text tool protocol stops after a call's closing tag)


def reported_int(value: Any) -> int | None:
    """A provider's token count as an int, or None when it is absent or not a number (never a made-up 0)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


@dataclass
class ModelTurn:
    """What one successful model call returned, with the transport facts the record keeps (the loop times it)."""

    message: Message
    stop_reason: StopReason
    raw_stop_reason: str | None
    usage: TokenUsage
    http_status: int | None = None
    request_id: str | None = None
    retries: int = 0  # retries the transport made on its own (the loop's retries are counted separately)
    response_model: str | None = None
    response_id: str | None = None  # the provider's own id of this response: msg_…, resp_…, chatcmpl-…
    upstream_stop_reason: str | None = None  # a gateway's pass-through of the upstream provider's stop reason
    tool_protocol: str = "native"  # what carried this turn's tool calls: the API's own (native) or text


class ModelError(Exception):
    """A model call that did not produce a turn. `kind` tells the loop whether to retry and how to end the run."""

    def __init__(
        self,
        kind: Literal["http", "timeout", "connection", "context_exceeded", "protocol"],
        message: str,
        *,
        http_status: int | None = None,
        request_id: str | None = None,
        retry_after_s: float | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.http_status = http_status
        self.request_id = request_id
        self.retry_after_s = retry_after_s  # what the server asked us to wait (Retry-After), if it said
        self.body = body  # the server's whole error body, for the record (the message is one line of it)

    @property
    def retryable(self) -> bool:
        """Transient faults only: timeouts, lost connections, 408/409/429 and 5xx — but not a 5xx whose body is a
        request-validation error (llama-cpp-python answers a request its schema refuses with HTTP 500): the same
        request would be refused again."""
        if self.kind in ("timeout", "connection"):
            return True
        if self.kind != "http" or self.http_status is None:
            return False
        if self.http_status in (408, 409, 429):
            return True
        return self.http_status >= 500 and not is_validation_error(self.body)  # 529: Anthropic "overloaded"


# --------------------------------------------------------------------------------------------- error lines
CAUSE_CHARS = 300
"""The most characters of a server's message an error line carries; the whole body goes to the record."""
_VALIDATION_MARKERS = ("input should be", "validation error", "field required", "extra inputs are not permitted")
_LITERAL = re.compile(r"^Input should be '")
_REPR_ERROR = re.compile(r"'loc': \(([^)]*)\),\s*'msg': (?:'([^']*)'|\"([^\"]*)\")")
_PYDANTIC_TEXT = re.compile(r"^(\S[^\n]*)\n\s+([^\n]+?)\s*\[type=", re.MULTILINE)


def one_line(text: str, limit: int = CAUSE_CHARS) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `limit` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 1].rstrip() + "…"


def is_validation_error(body: str | None) -> bool:
    """True when an error body is a request-validation error (pydantic's "Input should be", "validation error",
    FastAPI's {"detail": [{"loc": ...}]}): deterministic, so never worth a retry."""
    if not body:
        return False
    low = body.lower()
    if any(m in low for m in _VALIDATION_MARKERS):
        return True
    data = _json_or_none(body)
    detail = data.get("detail") if isinstance(data, dict) else None
    return isinstance(detail, list) and any(isinstance(d, dict) and "loc" in d for d in detail)


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _loc(parts: Any) -> str:
    items = parts if isinstance(parts, (list, tuple)) else [p.strip(" '\"") for p in str(parts).split(",")]
    return ".".join(str(p) for p in items if str(p) not in ("", "typed-dict"))


def _first_validation_error(errors: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The most telling (loc, msg) of a list: a type or value error before a union member's role-literal
    mismatch or a missing field, which only say the input matched another member."""
    ranked = sorted(enumerate(errors), key=lambda ie: (
        2 if _LITERAL.match(ie[1][1]) else 1 if ie[1][1] in ("Field required", "Extra inputs are not permitted")
        else 0, ie[0]))
    return ranked[0][1] if ranked else None


def _validation_summary(message: str, errors: list[tuple[str, str]]) -> str:
    best = _first_validation_error(errors)
    if best is None:
        return message
    head = message.split("\n", 1)[0].strip().rstrip(":") if "\n" in message else ""
    count = head if head and len(head) < 80 else f"{len(errors)} validation error{'s' if len(errors) > 1 else ''}"
    return f"{count}: {best[0]}: {best[1]}"


def server_message(body: str | None) -> str:
    """The server's own message from an error body, as one line: {"error": {"message"}} (OpenAI, LiteLLM,
    llama.cpp), {"error": "..."}, {"detail": ...} (FastAPI), {"message"} (vLLM); a pydantic validation dump is
    reduced to its count and most telling error. Plain text bodies are kept as they are."""
    if not body:
        return "(empty body)"
    data = _json_or_none(body)
    message: Any = body
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            message = err["message"]
        elif isinstance(err, str) and err:
            message = err
        elif "detail" in data:
            detail = data["detail"]
            if isinstance(detail, list) and detail and all(isinstance(d, dict) for d in detail):
                pairs = [(_loc(d.get("loc", ())), str(d.get("msg", ""))) for d in detail]
                return one_line(_validation_summary("", pairs))
            message = detail
        elif data.get("message"):
            message = data["message"]
    if not isinstance(message, str):
        message = json.dumps(message, default=str)
    pairs = [(_loc(m.group(1)), m.group(2) or m.group(3) or "") for m in _REPR_ERROR.finditer(message)]
    pairs = pairs or [(m.group(1).strip(), m.group(2).strip()) for m in _PYDANTIC_TEXT.finditer(message)]
    if pairs:
        message = _validation_summary(message, pairs)
    return one_line(message)


def error_line(e: ModelError) -> str:
    """One readable line for a failed call: the message (the server's own first) and then what kind it was."""
    text = one_line(str(e))
    status = f"HTTP {e.http_status}" if e.http_status else ""
    return f"{text} [{e.kind}{' ' + status if status and status not in text else ''}]"


def retry_after_seconds(headers: Any, now: float | None = None) -> float | None:
    """Seconds a server asked us to wait, from `retry-after-ms` or `retry-after` (seconds or an HTTP date);
    None when it said nothing usable. `now` (epoch seconds) resolves an HTTP date; without it the wait is
    unknown rather than guessed from a clock this module does not own."""
    if headers is None:
        return None
    get = headers.get
    ms = get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    text = get("retry-after")
    if text is None:
        return None
    try:
        value = float(text)
        return value if value >= 0 else None
    except ValueError:
        pass
    if now is None:
        return None
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None
    return max(when - now, 0.0)


class MissingApiKey(RuntimeError):
    """The environment mapping lacks the variable a client needs."""

    def __init__(self, variable: str, model: str) -> None:
        super().__init__(f"model {model!r} needs the environment variable {variable}, which is not set")
        self.variable = variable


class ModelClient(Protocol):
    """One call, one turn. `provider` and `transport` name where turns come from, for the record.

    A client that subclasses this protocol explicitly inherits the defaults below (an in-process client with no
    options that speaks the Anthropic wire format's image placement); the loop reads every attribute directly."""

    provider: str
    transport: str
    model: str
    # How images a tool returns reach the model: inside the tool result, in a user message after the tool
    # results, or not at all (a text-only model). The record copies it onto every attachment.
    image_delivery: ImageDelivery = "tool_result"
    # The model options the client was built with (thinking, effort, ...) and the endpoint it calls, for the
    # record's config; an in-process client has none.
    options: Mapping[str, Any] = MappingProxyType({})
    base_url: str | None = None
    accepts_pdf: bool = False  # reads a whole PDF in a user message (DocumentBlock) itself
    # How tool calls travel: the API's own tool calls ("native") or text in the model's format, parsed by the
    # client (agent/models/text_protocol.py, "text").
    tool_protocol: str = "native"


    def complete(self, request: ModelRequest) -> ModelTurn: ...


def parse_arguments(text: Any) -> JsonObject:
    """Tool-call arguments arrive as a JSON string from OpenAI-style APIs (some gateways send the object itself);
    keep unparsable text visible."""
    if isinstance(text, dict):
        return text
    if text is None or text == "":
        return {}
    if not isinstance(text, str):
        return {"_raw": json.dumps(text, default=str)}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}
