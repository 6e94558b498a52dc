"""Anthropic Messages through the official SDK, plus the pure translations to and from its wire format.

Why the translations are separate functions: the local test server (agent/testserver.py) reads and writes the same
wire format when it answers the SDK with the scripted policies, so the server and the real SDK path share one
translation and cannot drift. The in-process scripted model (agent/models/scripted.py) speaks no wire format.
The SDK's own retries are switched off (max_retries=0) so that every retry is the loop's, and recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic

from agent.models.base import (
    DocumentBlock,
    ImageBlock,
    Message,
    ModelError,
    ModelRequest,
    ModelTurn,
    ReasoningBlock,
    StopReason,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolResultBlock,
    reported_int,
    retry_after_seconds,
)
from agent.record import TokenUsage
from agent.tool import Tool

PROVIDER = "anthropic"

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    "model_context_window_exceeded": "context_exceeded",
}


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Neutral messages → the `messages` array of a Messages request (assistant raw content resent verbatim)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant" and m.raw is not None and m.raw_provider == PROVIDER:
            out.append({"role": "assistant", "content": m.raw})
            continue
        content: list[dict[str, Any]] = []
        for b in m.blocks:
            if isinstance(b, TextBlock):
                content.append({"type": "text", "text": b.text})
            elif isinstance(b, ImageBlock):
                content.append({"type": "image", "source": {"type": "base64", "media_type": b.mime, "data": b.data}})
            elif isinstance(b, DocumentBlock):
                doc: dict[str, Any] = {"type": "document",
                                       "source": {"type": "base64", "media_type": b.mime, "data": b.data}}
                if b.title:
                    doc["title"] = b.title
                content.append(doc)
            elif isinstance(b, ToolCallBlock):
                content.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.arguments})
            elif isinstance(b, ToolResultBlock):
                result: Any = b.content
                if b.images:
                    result = [{"type": "text", "text": b.content}] + [
                        {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
                        for mime, data in b.images
                    ]
                content.append({"type": "tool_result", "tool_use_id": b.call_id, "content": result,
                                "is_error": b.is_error})
            # Reasoning without a provider signature cannot be resent to Anthropic; it stays in the record only.
        out.append({"role": m.role, "content": content})
    return out


def to_anthropic_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    return [t.definition() for t in tools]


def to_anthropic_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    if isinstance(choice, dict):
        return {"type": "tool", "name": choice["name"]}
    return {"type": choice}


def to_anthropic_request(request: ModelRequest, model: str) -> dict[str, Any]:
    """The JSON body of a Messages request (what the SDK sends, and what the test server receives)."""
    body: dict[str, Any] = {
        "model": model,
        "system": request.system,
        "messages": to_anthropic_messages(request.messages),
        "max_tokens": request.max_tokens,
    }
    if request.tools:
        body["tools"] = to_anthropic_tools(request.tools)
        body["tool_choice"] = to_anthropic_tool_choice(request.tool_choice)
    return body


def from_anthropic_response(data: dict[str, Any]) -> tuple[Message, StopReason, str | None, TokenUsage, str | None]:
    """A Messages response body → (assistant message, stop reason, raw stop reason, usage, response model)."""
    blocks: list[Any] = []
    raw_content = list(data.get("content") or [])
    for item in raw_content:
        kind = item.get("type")
        if kind == "text":
            blocks.append(TextBlock(item.get("text", "")))
        elif kind == "tool_use":
            args = item.get("input")
            blocks.append(ToolCallBlock(item["id"], item["name"], args if isinstance(args, dict) else {"_raw": args}))
        elif kind == "thinking":
            blocks.append(ReasoningBlock(item.get("thinking", "")))
        elif kind == "redacted_thinking":
            blocks.append(ReasoningBlock("[redacted thinking]"))
    raw_stop = data.get("stop_reason")
    stop = _STOP_REASONS.get(raw_stop or "", "other")
    usage = anthropic_usage(data.get("usage"))
    message = Message("assistant", blocks, raw=raw_content, raw_provider=PROVIDER)
    return message, stop, raw_stop, usage, data.get("model")


def anthropic_usage(u: Any) -> TokenUsage:
    """Messages `usage` → TokenUsage. Anthropic's input_tokens EXCLUDES cache reads and writes; the record's includes
    them, so they are added — but only when reported: an unreported cache count makes the total unknown too,
    because the fresh-input part alone would understate it. Thinking tokens are
    `output_tokens_details.thinking_tokens` (already inside output_tokens)."""
    if not isinstance(u, dict):
        return TokenUsage()
    fresh = reported_int(u.get("input_tokens"))
    read = reported_int(u.get("cache_read_input_tokens"))
    write = reported_int(u.get("cache_creation_input_tokens"))
    details = u.get("output_tokens_details")
    thinking = reported_int(details.get("thinking_tokens")) if isinstance(details, dict) else None
    total = None if fresh is None or read is None or write is None else fresh + read + write
    return TokenUsage(input_tokens=total, output_tokens=reported_int(u.get("output_tokens")),
                 cache_read_input_tokens=read, cache_creation_input_tokens=write, reasoning_output_tokens=thinking)


def _is_context_overflow(status: int | None, message: str) -> bool:
    text = message.lower()
    return status in (400, 413) and ("prompt is too long" in text or "context window" in text or "too many tokens" in text)


class AnthropicClient:
    """Anthropic Messages via the official SDK. `base_url` may point at a gateway, vLLM's /v1/messages, or the
    local test server. `thinking` (e.g. {"type": "enabled", "budget_tokens": 2048}) forbids forced tool choice."""

    provider = PROVIDER
    accepts_pdf = True  # Messages API document blocks read a base64 PDF
    transport = "anthropic-sdk"
    image_delivery = "tool_result"  # images inside the tool_result content

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str,
        thinking: dict[str, Any] | None = None,
        effort: str | None = None,
        max_output_tokens: int | None = None,
        default_timeout_s: float = 600.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.now = now  # resolves an HTTP-date Retry-After
        self.model = model
        self.base_url = base_url
        self.thinking = thinking
        self.effort = effort  # output_config.effort (never output_config.format: answers come by tool call)
        self.max_output_tokens = max_output_tokens
        self.options = {k: v for k, v in (("thinking", thinking), ("effort", effort),
                                          ("max_output_tokens", max_output_tokens)) if v is not None}
        self._sdk = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=default_timeout_s)

    def complete(self, request: ModelRequest) -> ModelTurn:
        body = to_anthropic_request(request, self.model)
        if self.max_output_tokens is not None:
            body["max_tokens"] = self.max_output_tokens
        if self.effort is not None:
            body["output_config"] = {"effort": self.effort}
        if self.thinking and self.thinking.get("type") != "disabled":
            if request.tool_choice not in ("auto", "none"):
                raise ValueError(
                    f"forced tool choice {request.tool_choice!r} is rejected when extended thinking is on; use 'auto'"
                )
            body["thinking"] = self.thinking
        kwargs: dict[str, Any] = {}
        if request.timeout_s is not None:
            kwargs["timeout"] = max(request.timeout_s, 0.001)
        try:
            raw = self._sdk.messages.with_raw_response.create(**body, **kwargs)
        except anthropic.APITimeoutError as e:
            raise ModelError("timeout", f"Anthropic request timed out: {e}") from e
        except anthropic.APIConnectionError as e:
            raise ModelError("connection", f"Anthropic connection failed: {e}") from e
        except anthropic.APIStatusError as e:
            msg = str(e)
            kind = "context_exceeded" if _is_context_overflow(e.status_code, msg) else "http"
            raise ModelError(kind, msg, http_status=e.status_code, request_id=e.request_id,
                             retry_after_s=retry_after_seconds(e.response.headers, self.now())) from e
        parsed = raw.parse()
        data = parsed.model_dump(mode="json", exclude_none=True)
        message, stop, raw_stop, usage, response_model = from_anthropic_response(data)
        wire = raw.http_response.json()
        if not isinstance(wire, dict) or not isinstance(wire.get("usage"), dict):
            usage = TokenUsage()  # whatever the SDK filled in, the wire reported no usage: unknown
        return ModelTurn(
            message=message,
            stop_reason=stop,
            raw_stop_reason=raw_stop,
            usage=usage,
            http_status=raw.status_code,
            request_id=raw.request_id,
            retries=raw.retries_taken,
            response_model=response_model,
            response_id=data.get("id"),
        )
