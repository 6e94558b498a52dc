"""The one small interface every model client implements, and the provider-neutral conversation it speaks.

Why: the loop, the record and the scripted policies must not care whether a turn came from Anthropic, the OpenAI
Responses API or a chat-completions passthrough. Each client translates this neutral conversation to its wire
format and back, keeping the provider's own output items (`Message.raw`) so that opaque state — thinking
signatures, encrypted reasoning — is sent back verbatim on the next turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

# Normalised stop reasons. Anything else a provider returns is kept verbatim in ModelTurn.raw_stop_reason and
# normalised to "other" so the loop can still refuse to score it as a pass.
StopReason = Literal[
    "tool_use", "end_turn", "max_tokens", "pause_turn", "refusal", "context_exceeded", "stop_sequence", "other"
]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as offered to a model: the name, the description written for the model, and a JSON schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ToolCallBlock:
    """One tool call a model asked for; `arguments` is the parsed JSON object (or {"_raw": text} if unparsable)."""

    id: str
    name: str
    arguments: dict[str, Any]
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
class ImageBlock:
    """An image in a user message (base64 data), e.g. a rendered datasheet page for the single-pass baseline."""

    mime: str
    data: str
    type: Literal["image"] = "image"


@dataclass(frozen=True)
class DocumentBlock:
    """A whole document in a user message (base64 data), for providers that read PDFs themselves."""

    mime: str
    data: str
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


ToolChoice = Literal["auto", "any", "none"] | dict[str, str]  # {"name": tool} forces one tool


@dataclass(frozen=True)
class ModelRequest:
    """Everything one model turn needs. `timeout_s` is the most this turn may take (the loop's remaining wall)."""

    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    tool_choice: ToolChoice = "auto"
    max_tokens: int = 4096
    timeout_s: float | None = None


@dataclass(frozen=True)
class Usage:
    """Token counts normalised the OpenTelemetry way: `input_tokens` INCLUDES cache reads and writes."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    reasoning_output_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class ModelTurn:
    """What one successful model call returned, with the transport facts the record keeps (the loop times it)."""

    message: Message
    stop_reason: StopReason
    raw_stop_reason: str | None
    usage: Usage
    http_status: int | None = None
    request_id: str | None = None
    retries: int = 0  # retries the transport made on its own (the loop's retries are counted separately)
    response_model: str | None = None


class ModelError(Exception):
    """A model call that did not produce a turn. `kind` tells the loop whether to retry and how to end the run."""

    def __init__(
        self,
        kind: Literal["http", "timeout", "connection", "context_exceeded", "protocol"],
        message: str,
        *,
        http_status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.http_status = http_status
        self.request_id = request_id

    @property
    def retryable(self) -> bool:
        if self.kind in ("timeout", "connection"):
            return True
        return self.kind == "http" and self.http_status is not None and (
            self.http_status in (408, 409, 429) or self.http_status >= 500
        )


class MissingApiKey(RuntimeError):
    """The environment mapping lacks the variable a client needs."""

    def __init__(self, variable: str, model: str) -> None:
        super().__init__(f"model {model!r} needs the environment variable {variable}, which is not set")
        self.variable = variable


class ModelClient(Protocol):
    """One call, one turn. `provider` and `transport` name where turns come from, for the record."""

    provider: str
    transport: str
    model: str

    def complete(self, request: ModelRequest) -> ModelTurn: ...


def parse_arguments(text: str | None) -> dict[str, Any]:
    """Tool-call arguments arrive as a JSON string from OpenAI-style APIs; keep unparsable text visible."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}
