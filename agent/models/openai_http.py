"""OpenAI-style model clients over httpx: the Responses API and chat completions (vLLM, LiteLLM, gateways).

Why two clients: the Responses API carries reasoning between turns (stateless: store=false, encrypted reasoning
included and resent verbatim; summaries kept for the record), while chat-completions passthroughs drop reasoning
silently. Neither ever sends response_format / text.format alongside tools: on open-weights backends a JSON-schema
constraint becomes a decoding mask that can suppress the tool-call token (the seed paper's Section 5). The answer
always arrives through a submit tool call.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

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
    ToolResultBlock,
    Usage,
    parse_arguments,
)

_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context window", "too many tokens")


def _post(http: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float | None):
    try:
        resp = http.post(url, json=body, headers=headers, timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT)
    except httpx.TimeoutException as e:
        raise ModelError("timeout", f"POST {url} timed out: {e}") from e
    except httpx.TransportError as e:
        raise ModelError("connection", f"POST {url} failed: {e}") from e
    request_id = resp.headers.get("x-request-id") or resp.headers.get("request-id")
    if resp.status_code >= 400:
        text = resp.text[:2000]
        kind = "context_exceeded" if any(m in text.lower() for m in _CONTEXT_MARKERS) else "http"
        raise ModelError(kind, f"POST {url} → HTTP {resp.status_code}: {text}", http_status=resp.status_code,
                         request_id=request_id)
    try:
        data = resp.json()
    except ValueError as e:
        raise ModelError("protocol", f"POST {url}: expected a JSON body, got {resp.text[:200]!r}",
                         http_status=resp.status_code, request_id=request_id) from e
    return data, resp.status_code, request_id


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


# --------------------------------------------------------------------------------------------- Responses API
def to_responses_input(messages: list[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant" and m.raw is not None and m.raw_provider == OpenAIResponsesClient.provider:
            items.extend(m.raw)  # reasoning (encrypted), message and function_call items, verbatim
            continue
        for b in m.blocks:
            if isinstance(b, TextBlock):
                items.append({"role": m.role, "content": b.text})
            elif isinstance(b, ImageBlock):
                items.append({"role": m.role, "content": [
                    {"type": "input_image", "image_url": f"data:{b.mime};base64,{b.data}"}]})
            elif isinstance(b, DocumentBlock):
                items.append({"role": m.role, "content": [
                    {"type": "input_file", "filename": b.title or "document.pdf",
                     "file_data": f"data:{b.mime};base64,{b.data}"}]})
            elif isinstance(b, ToolCallBlock):
                items.append({"type": "function_call", "call_id": b.id, "name": b.name,
                              "arguments": json.dumps(b.arguments)})
            elif isinstance(b, ToolResultBlock):
                output = f"Error: {b.content}" if b.is_error and not b.content.startswith("Error") else b.content
                items.append({"type": "function_call_output", "call_id": b.call_id, "output": output})
    return items


def from_responses_output(data: dict[str, Any]) -> tuple[Message, StopReason, str | None, Usage]:
    blocks: list[Any] = []
    refused = False
    output = list(data.get("output") or [])
    for item in output:
        kind = item.get("type")
        if kind == "reasoning":
            summary = " ".join(s.get("text", "") for s in item.get("summary") or [])
            if summary:
                blocks.append(ReasoningBlock(summary))
        elif kind == "message":
            for c in item.get("content") or []:
                if c.get("type") == "output_text":
                    blocks.append(TextBlock(c.get("text", "")))
                elif c.get("type") == "refusal":
                    refused = True
                    blocks.append(TextBlock(c.get("refusal", "")))
        elif kind == "function_call":
            blocks.append(ToolCallBlock(item["call_id"], item["name"], parse_arguments(item.get("arguments"))))
    status = data.get("status")
    reason = (data.get("incomplete_details") or {}).get("reason")
    stop: StopReason
    if any(isinstance(b, ToolCallBlock) for b in blocks):
        stop = "tool_use"
    elif refused or reason == "content_filter":
        stop = "refusal"
    elif status == "incomplete" and reason == "max_output_tokens":
        stop = "max_tokens"
    elif status == "completed":
        stop = "end_turn"
    else:
        stop = "other"
    u = data.get("usage") or {}
    usage = Usage(
        input_tokens=int(u.get("input_tokens") or 0),  # already includes cached tokens
        output_tokens=int(u.get("output_tokens") or 0),
        cache_read_input_tokens=int((u.get("input_tokens_details") or {}).get("cached_tokens") or 0),
        reasoning_output_tokens=(u.get("output_tokens_details") or {}).get("reasoning_tokens"),
    )
    raw_stop = reason or status
    return Message("assistant", blocks, raw=output, raw_provider=OpenAIResponsesClient.provider), stop, raw_stop, usage


class OpenAIResponsesClient:
    """The OpenAI Responses API, stateless: store=false, encrypted reasoning included and carried forward."""

    provider = "openai"
    accepts_pdf = True  # input_file items carry a PDF the service reads itself
    transport = "openai-responses"

    def __init__(self, model: str, *, api_key: str, base_url: str, http: httpx.Client,
                 reasoning: dict[str, Any] | None = None) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.reasoning = reasoning
        self._key = api_key
        self._http = http

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "instructions": request.system,
            "input": to_responses_input(request.messages),
            "max_output_tokens": request.max_tokens,
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if self.reasoning is not None:
            body["reasoning"] = {"summary": "auto", **self.reasoning}
        if request.tools:
            body["tools"] = [{"type": "function", "name": t.name, "description": t.description,
                              "parameters": t.input_schema, "strict": False} for t in request.tools]
            choice = request.tool_choice
            body["tool_choice"] = ({"type": "function", "name": choice["name"]} if isinstance(choice, dict)
                                   else {"any": "required"}.get(choice, choice))
        return body

    def complete(self, request: ModelRequest) -> ModelTurn:
        data, status, request_id = _post(self._http, f"{self.base_url}/responses", self.build_body(request),
                                         _headers(self._key), request.timeout_s)
        message, stop, raw_stop, usage = from_responses_output(data)
        return ModelTurn(message, stop, raw_stop, usage, http_status=status, request_id=request_id,
                         response_model=data.get("model"))


# --------------------------------------------------------------------------------------------- chat completions
_FINISH: dict[str, StopReason] = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens",
                                  "content_filter": "refusal", "function_call": "tool_use"}


def to_chat_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                     for c in m.tool_calls]
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        for b in m.blocks:
            if isinstance(b, TextBlock):
                out.append({"role": "user", "content": b.text})
            elif isinstance(b, ImageBlock):
                out.append({"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": f"data:{b.mime};base64,{b.data}"}}]})
            elif isinstance(b, DocumentBlock):
                raise ModelError("protocol", "chat completions take no document input; send rendered page images instead")
            elif isinstance(b, ToolResultBlock):
                out.append({"role": "tool", "tool_call_id": b.call_id, "content": b.content})
    return out


def from_chat_response(data: dict[str, Any]) -> tuple[Message, StopReason, str | None, Usage]:
    choices = data.get("choices") or []
    if not choices:
        raise ModelError("protocol", f"chat completion without choices: {str(data)[:200]}")
    choice = choices[0]
    msg = choice.get("message") or {}
    blocks: list[Any] = []
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    if reasoning:
        blocks.append(ReasoningBlock(str(reasoning)))
    if msg.get("content"):
        blocks.append(TextBlock(msg["content"]))
    if msg.get("refusal"):
        blocks.append(TextBlock(msg["refusal"]))
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        blocks.append(ToolCallBlock(call.get("id") or "", fn.get("name", ""), parse_arguments(fn.get("arguments"))))
    raw_stop = choice.get("finish_reason")
    stop = _FINISH.get(raw_stop or "", "other")
    if msg.get("refusal"):
        stop = "refusal"
    elif stop != "tool_use" and any(isinstance(b, ToolCallBlock) for b in blocks):
        stop = "tool_use"
    u = data.get("usage") or {}
    usage = Usage(
        input_tokens=int(u.get("prompt_tokens") or 0),
        output_tokens=int(u.get("completion_tokens") or 0),
        cache_read_input_tokens=int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
        reasoning_output_tokens=(u.get("completion_tokens_details") or {}).get("reasoning_tokens"),
    )
    return Message("assistant", blocks, raw=[msg], raw_provider=OpenAIChatClient.provider), stop, raw_stop, usage


class OpenAIChatClient:
    """OpenAI-compatible chat completions (vLLM, LiteLLM). `extra_body` is merged into each request, e.g.
    {"chat_template_kwargs": {"enable_thinking": False}} for Qwen3. response_format is refused: see module doc."""

    provider = "openai-compat"
    accepts_pdf = False  # chat completions (vLLM, LiteLLM) take text and images only
    transport = "chat-completions"

    def __init__(self, model: str, *, base_url: str, http: httpx.Client, api_key: str | None = None,
                 extra_body: dict[str, Any] | None = None) -> None:
        if extra_body and ("response_format" in extra_body or "guided_json" in extra_body):
            raise ValueError("response_format/guided_json together with tools suppresses tool calls; "
                             "deliver the answer through the submit tool instead")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.extra_body = dict(extra_body or {})
        self._key = api_key
        self._http = http

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_chat_messages(request.system, request.messages),
            "max_tokens": request.max_tokens,
        }
        if request.tools:
            body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                               "parameters": t.input_schema}} for t in request.tools]
            choice = request.tool_choice
            body["tool_choice"] = ({"type": "function", "function": {"name": choice["name"]}}
                                   if isinstance(choice, dict) else {"any": "required"}.get(choice, choice))
        body.update(self.extra_body)
        return body

    def complete(self, request: ModelRequest) -> ModelTurn:
        data, status, request_id = _post(self._http, f"{self.base_url}/chat/completions", self.build_body(request),
                                         _headers(self._key), request.timeout_s)
        message, stop, raw_stop, usage = from_chat_response(data)
        return ModelTurn(message, stop, raw_stop, usage, http_status=status, request_id=request_id,
                         response_model=data.get("model"))
