"""Anthropic Messages through the official SDK, plus the pure translations to and from its wire format.

Why the translations are separate functions, both directions in this one module: the local test server
(agent/testserver.py) reads requests and writes responses in the same wire format when it answers the SDK with
the scripted policies, so the server and the real SDK path share one reader and one writer of content blocks, one
stop-reason table and one usage rule, and cannot drift. The in-process scripted model (agent/models/scripted.py)
speaks no wire format.
The SDK's own retries are switched off (max_retries=0) so that every retry is the loop's, and recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic

from agent.models.base import (
    Block,
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


def block_to_anthropic(b: Block) -> dict[str, Any] | None:
    """One neutral block → an Anthropic content item (what the SDK sends, and what the test server answers with);
    None for reasoning, which without a provider signature cannot be resent to Anthropic (it stays in the record)."""
    if isinstance(b, TextBlock):
        return {"type": "text", "text": b.text}
    if isinstance(b, ImageBlock):
        return {"type": "image", "source": _base64_source(b.mime, b.data)}
    if isinstance(b, DocumentBlock):
        doc: dict[str, Any] = {"type": "document", "source": _base64_source(b.mime, b.data)}
        if b.title:
            doc["title"] = b.title
        return doc
    if isinstance(b, ToolCallBlock):
        return {"type": "tool_use", "id": b.id, "name": b.name, "input": b.arguments}
    if isinstance(b, ToolResultBlock):
        result: Any = b.content
        if b.images:
            result = [{"type": "text", "text": b.content}] + [
                {"type": "image", "source": _base64_source(mime, data)} for mime, data in b.images]
        return {"type": "tool_result", "tool_use_id": b.call_id, "content": result, "is_error": b.is_error}
    return None


def block_from_anthropic(item: dict[str, Any]) -> Block | None:
    """One Anthropic content item → a neutral block, in a response (text, tool calls, thinking) or a request
    (tool results, images, documents); None for kinds the loop does not read (server-tool blocks)."""
    kind = item.get("type")
    if kind == "text":
        return TextBlock(item.get("text", ""))
    if kind == "tool_use":
        args = item.get("input")
        return ToolCallBlock(item["id"], item["name"], args if isinstance(args, dict) else {"_raw": args})
    if kind == "thinking":
        return ReasoningBlock(item.get("thinking", ""))
    if kind == "redacted_thinking":
        return ReasoningBlock("[redacted thinking]")
    if kind == "tool_result":
        content = item.get("content")
        return ToolResultBlock(item["tool_use_id"], _text_of(content), bool(item.get("is_error")), _images_of(content))
    if kind == "image":
        return ImageBlock(item["source"]["media_type"], item["source"]["data"])
    if kind == "document":
        return DocumentBlock(item["source"]["media_type"], item["source"]["data"], item.get("title", ""))
    return None


def _base64_source(mime: str, data: str) -> dict[str, str]:
    return {"type": "base64", "media_type": mime, "data": data}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _images_of(content: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(content, str):
        return ()
    return tuple((b["source"]["media_type"], b["source"]["data"]) for b in content or []
                 if isinstance(b, dict) and b.get("type") == "image")


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Neutral messages → the `messages` array of a Messages request (assistant raw content resent verbatim)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant" and m.raw is not None and m.raw_provider == PROVIDER:
            out.append({"role": "assistant", "content": m.raw})
            continue
        content = [item for item in map(block_to_anthropic, m.blocks) if item is not None]
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
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    return body


def from_anthropic_response(data: dict[str, Any]) -> tuple[Message, StopReason, str | None, TokenUsage, str | None]:
    """A Messages response body → (assistant message, stop reason, raw stop reason, usage, response model)."""
    raw_content = list(data.get("content") or [])
    blocks = [b for b in map(block_from_anthropic, raw_content) if b is not None]
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


# ------------------------------------------------------------------------- the server's side (agent/testserver.py)
_WIRE_STOP_REASONS: dict[str, str] = {ours: wire for wire, ours in _STOP_REASONS.items()}


class WireError(ValueError):
    """A request body that cannot be read as a Messages request."""


def request_from_anthropic(body: dict[str, Any]) -> ModelRequest:
    """A Messages request body → the loop's neutral request (what the scripted model behind the test server reads)."""
    try:
        messages = []
        for m in body.get("messages") or []:
            content = m.get("content")
            items = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            messages.append(Message(m["role"], [b for b in map(block_from_anthropic, items) if b is not None]))
        tools = [Tool(t["name"], t.get("description", ""), t.get("input_schema") or {}) for t in body.get("tools") or []]
    except (KeyError, TypeError, AttributeError) as e:
        raise WireError(f"expected a Messages request body (messages with typed content blocks, tools with "
                        f"names), got a field that does not read as one: {type(e).__name__}: {e}") from e
    choice = body.get("tool_choice") or {"type": "auto"}
    system = body.get("system") or ""
    return ModelRequest(system=_text_of(system), messages=messages, tools=tools,
                        tool_choice={"name": choice["name"]} if choice.get("type") == "tool" else choice["type"],
                        max_tokens=int(body.get("max_tokens") or 0))


def anthropic_response(turn: ModelTurn, model: str) -> dict[str, Any]:
    """A turn → a Messages response body (the inverse of from_anthropic_response)."""
    return {
        "id": turn.response_id, "type": "message", "role": "assistant", "model": model,
        "content": [item for item in map(block_to_anthropic, turn.message.blocks) if item is not None],
        "stop_reason": _WIRE_STOP_REASONS.get(turn.stop_reason, turn.stop_reason), "stop_sequence": None,
        "usage": usage_to_anthropic(turn.usage),
    }


def usage_to_anthropic(u: TokenUsage) -> dict[str, int]:
    """TokenUsage → Messages `usage` (the inverse of anthropic_usage: the wire's input_tokens exclude cache reads
    and writes, the record's include them; an unknown count is sent as 0)."""
    return {"input_tokens": (u.input_tokens or 0) - (u.cache_read_input_tokens or 0)
            - (u.cache_creation_input_tokens or 0), "output_tokens": u.output_tokens or 0,
            "cache_read_input_tokens": u.cache_read_input_tokens or 0,
            "cache_creation_input_tokens": u.cache_creation_input_tokens or 0}


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
