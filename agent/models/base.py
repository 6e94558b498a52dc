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
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.http_status = http_status
        self.request_id = request_id
        self.retry_after_s = retry_after_s  # what the server asked us to wait (Retry-After), if it said

    @property
    def retryable(self) -> bool:
        if self.kind in ("timeout", "connection"):
            return True
        return self.kind == "http" and self.http_status is not None and (
            self.http_status in (408, 409, 429) or self.http_status >= 500  # 529: Anthropic "overloaded"
        )


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
