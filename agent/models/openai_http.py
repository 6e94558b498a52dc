"""OpenAI-style model clients over httpx: the Responses API and chat completions (vLLM, LiteLLM, gateways).

Why two clients: the Responses API carries reasoning between turns (stateless: store=false, encrypted reasoning
included and resent verbatim; summaries kept for the record), while chat-completions passthroughs drop reasoning
silently. Neither ever sends response_format / text.format alongside tools: on open-weights backends a JSON-schema
constraint becomes a decoding mask that can suppress the tool-call token (the seed paper's Section 5). The answer
always arrives through a submit tool call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
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
    parse_arguments,
    reported_int,
    retry_after_seconds,
    server_message,
)
from agent.record import TokenUsage
from agent.tool import Tool

BODY_KEPT_CHARS = 65536  # of an error body, kept on the ModelError for the record
_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context window", "too many tokens")


def _post(http: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float | None,
          now: Callable[[], float] = time.time):
    """POST one request; HTTP errors become ModelError with the request id and the server's Retry-After."""
    try:
        resp = http.post(url, json=body, headers=headers, timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT)
    except httpx.TimeoutException as e:
        raise ModelError("timeout", f"POST {url} timed out: {e}") from e
    except httpx.TransportError as e:
        raise ModelError("connection", f"POST {url} failed: {e}") from e
    request_id = resp.headers.get("x-request-id") or resp.headers.get("request-id")
    if resp.status_code >= 400:
        text = resp.text
        kind = "context_exceeded" if any(m in text.lower() for m in _CONTEXT_MARKERS) else "http"
        # One line, the server's own message first (a validation dump reduced to its telling error); the whole
        # body travels on the error for the record.
        raise ModelError(kind, f"{server_message(text)} (HTTP {resp.status_code} from POST {httpx.URL(url).path})",
                         http_status=resp.status_code, request_id=request_id,
                         retry_after_s=retry_after_seconds(resp.headers, now()), body=text[:BODY_KEPT_CHARS])
    try:
        data = resp.json()
    except ValueError as e:
        raise ModelError("protocol", f"POST {url}: expected a JSON body, got {resp.text[:200]!r}",
                         http_status=resp.status_code, request_id=request_id) from e
    if not isinstance(data, dict):
        raise ModelError("protocol", f"POST {url}: expected a JSON object, got {str(data)[:200]!r}",
                         http_status=resp.status_code, request_id=request_id)
    return data, resp.status_code, request_id, resp.headers


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
                output: Any = f"Error: {b.content}" if b.is_error and not b.content.startswith("Error") else b.content
                if b.images:  # function_call_output takes text and images together (input_text, input_image)
                    output = [{"type": "input_text", "text": output}] + [
                        {"type": "input_image", "image_url": f"data:{mime};base64,{data}", "detail": "auto"}
                        for mime, data in b.images]
                items.append({"type": "function_call_output", "call_id": b.call_id, "output": output})
    return items


def from_responses_output(data: dict[str, Any]) -> tuple[Message, StopReason, str | None, TokenUsage]:
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
    # An incomplete response wins over any function call in it: a call cut off at max_output_tokens has
    # truncated arguments and must not run as if the model had finished asking for it.
    if status == "incomplete" and reason == "max_output_tokens":
        stop = "max_tokens"
    elif status == "incomplete" and reason == "content_filter":
        stop = "refusal"
    elif status == "incomplete":
        stop = "other"
    elif any(isinstance(b, ToolCallBlock) for b in blocks):
        stop = "tool_use"
    elif refused:
        stop = "refusal"
    elif status == "completed":
        stop = "end_turn"
    else:
        stop = "other"
    raw_stop = f"{status}/{reason}" if status == "incomplete" and reason else status
    return Message("assistant", blocks, raw=output, raw_provider=OpenAIResponsesClient.provider), stop, raw_stop, \
        responses_usage(data.get("usage"))


def responses_usage(u: Any) -> TokenUsage:
    """Responses `usage` → TokenUsage (input_tokens already includes cached tokens); unreported counts stay None."""
    if not isinstance(u, dict):
        return TokenUsage()
    inp = u.get("input_tokens_details") if isinstance(u.get("input_tokens_details"), dict) else {}
    out = u.get("output_tokens_details") if isinstance(u.get("output_tokens_details"), dict) else {}
    return TokenUsage(input_tokens=reported_int(u.get("input_tokens")), output_tokens=reported_int(u.get("output_tokens")),
                 cache_read_input_tokens=reported_int(inp.get("cached_tokens")),
                 cache_creation_input_tokens=reported_int(inp.get("cache_write_tokens")),
                 reasoning_output_tokens=reported_int(out.get("reasoning_tokens")))


class OpenAIResponsesClient:
    """The OpenAI Responses API, stateless: store=false, encrypted reasoning included and carried forward."""

    provider = "openai"
    accepts_pdf = True  # input_file items carry a PDF the service reads itself
    transport = "openai-responses"
    image_delivery = "tool_result"  # images go inside function_call_output

    def __init__(self, model: str, *, api_key: str, base_url: str, http: httpx.Client,
                 reasoning: dict[str, Any] | None = None, now: Callable[[], float] = time.time,
                 max_output_tokens: int | None = None) -> None:
        self.now = now  # resolves an HTTP-date Retry-After
        self.max_output_tokens = max_output_tokens
        self.options = {k: v for k, v in (("reasoning", reasoning), ("max_output_tokens", max_output_tokens))
                        if v is not None}
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
            "max_output_tokens": self.max_output_tokens or request.max_tokens,
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
        data, status, request_id, _ = _post(self._http, f"{self.base_url}/responses", self.build_body(request),
                                            _headers(self._key), request.timeout_s, self.now)
        message, stop, raw_stop, usage = from_responses_output(data)
        return ModelTurn(message, stop, raw_stop, usage, http_status=status, request_id=request_id,
                         response_model=data.get("model"), response_id=data.get("id"))


# --------------------------------------------------------------------------------------------- chat completions
_FINISH: dict[str, StopReason] = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens",
                                  "content_filter": "refusal", "function_call": "tool_use"}


# What chat-completions servers return as reasoning and need back on the next turn: LiteLLM's Claude
# `thinking_blocks` (with signatures; without them Anthropic rejects turn 2 with HTTP 400), `reasoning_content`
# (DeepSeek, vLLM's reasoning parsers, Qwen3 templates that re-render it) and `reasoning` (newer vLLM, gpt-oss).
_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking_blocks")


def _reasoning_state(m: Message) -> dict[str, Any]:
    """The reasoning fields of an assistant message this transport returned, to send back verbatim."""
    if m.raw_provider != OpenAIChatClient.provider or not m.raw or not isinstance(m.raw[0], dict):
        return {}
    return {k: m.raw[0][k] for k in _REASONING_KEYS if m.raw[0].get(k) is not None}


def to_chat_messages(system: str, messages: list[Message], *, images: bool = True) -> list[dict[str, Any]]:
    """Neutral messages → chat `messages`. A `tool` message carries text only, so images a tool returned follow
    the turn's tool messages in one user message naming each call (`images=False`: a text-only model, the
    images are left out and the record says so)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m.role == "assistant":
            # content is always a string: "" beside tool calls, never null, which strict servers refuse
            # (llama-cpp-python answers HTTP 500 "Input should be a valid string"); OpenAI and vLLM accept "".
            entry: dict[str, Any] = {"role": "assistant", "content": m.text}
            calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                     for c in m.tool_calls]
            if calls:
                entry["tool_calls"] = calls
            entry.update(_reasoning_state(m))
            out.append(entry)
            continue
        tool_images: list[dict[str, Any]] = []
        for b in m.blocks:
            if isinstance(b, TextBlock):
                out.append({"role": "user", "content": b.text})
            elif isinstance(b, ImageBlock):
                if not images:
                    raise ModelError("protocol", "this chat model takes no images (images=False)")
                out.append({"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": f"data:{b.mime};base64,{b.data}"}}]})
            elif isinstance(b, DocumentBlock):
                raise ModelError("protocol", "chat completions take no document input; send rendered page images instead")
            elif isinstance(b, ToolResultBlock):
                out.append({"role": "tool", "tool_call_id": b.call_id, "content": b.content})
                if b.images and images:
                    tool_images.append({"type": "text", "text": f"Image(s) returned by tool call {b.call_id}:"})
                    tool_images += [{"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
                                    for mime, data in b.images]
        if tool_images:
            out.append({"role": "user", "content": tool_images})
    return out


def _content_text(content: Any) -> str:
    """Chat `content` as text: a string, or a list of parts (LiteLLM and some servers send [{type: text, ...}])."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content
                       if isinstance(p, dict) and p.get("type") in ("text", "output_text"))
    return str(content)


def _upstream_stop(choice: dict[str, Any], msg: dict[str, Any]) -> str | None:
    """The upstream provider's own stop reason when a gateway passes it through (LiteLLM's
    `provider_specific_fields`), so that a reason the gateway flattened to `stop` is not lost."""
    for holder in (choice, msg):
        fields = holder.get("provider_specific_fields")
        if isinstance(fields, dict):
            for key in ("stop_reason", "finish_reason"):
                value = fields.get(key)
                if isinstance(value, str) and value:
                    return value
    return None


_UPSTREAM: dict[str, StopReason] = {
    "model_context_window_exceeded": "context_exceeded", "pause_turn": "pause_turn", "refusal": "refusal",
    "max_tokens": "max_tokens", "end_turn": "end_turn", "tool_use": "tool_use", "stop_sequence": "stop_sequence",
}


def chat_stop_reason(finish: str | None, choice: dict[str, Any], msg: dict[str, Any], has_calls: bool,
                     has_text: bool, usage: TokenUsage, gateway: str | None) -> tuple[StopReason, str | None]:
    """finish_reason (and what a gateway says about the upstream) → (normalised stop reason, upstream reason).

    LiteLLM flattens Anthropic's model_context_window_exceeded (and pause_turn) to `stop`; with the upstream
    reason passed through it is mapped from that. Without it, an LiteLLM `stop` that produced nothing at all
    (no text, no tool call, no output tokens) is not a model deciding to end its turn: it is "other", which the
    loop records as an engine error rather than scoring it end_turn_without_submit. vLLM's `abort` is "other".
    """
    upstream = _upstream_stop(choice, msg)
    if upstream is not None and upstream in _UPSTREAM:
        mapped = _UPSTREAM[upstream]
        if mapped in ("end_turn", "stop_sequence") and has_calls:
            mapped = "tool_use"
        return mapped, upstream
    stop = _FINISH.get(finish or "", "other")
    if msg.get("refusal"):
        return "refusal", upstream
    if finish == "length":
        return "max_tokens", upstream  # a tool call in a truncated turn has truncated arguments
    if stop != "tool_use" and has_calls:
        return "tool_use", upstream
    if (gateway == "litellm" and finish == "stop" and not has_calls and not has_text
            and usage.output_tokens in (0, None)):
        return "other", upstream
    return stop, upstream


def _tool_call_block(call: Any) -> ToolCallBlock:
    """One chat `tool_calls` entry → ToolCallBlock. A call without an id cannot be answered (the result must
    name it), so it is refused as a protocol error instead of being accepted as ""."""
    if not isinstance(call, dict):
        raise ModelError("protocol", f"tool call is not an object: {str(call)[:200]!r}")
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise ModelError("protocol", f"tool call {fn.get('name')!r} has no id: {str(call)[:200]!r}")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ModelError("protocol", f"tool call {call_id} has no function name: {str(call)[:200]!r}")
    return ToolCallBlock(call_id, name, parse_arguments(fn.get("arguments")))


def chat_usage(u: Any) -> TokenUsage:
    """Chat `usage` → TokenUsage. prompt_tokens includes cached tokens (OpenAI convention; LiteLLM follows it);
    cache writes come as prompt_tokens_details.cache_write_tokens or LiteLLM's cache_creation_input_tokens."""
    if not isinstance(u, dict):
        return TokenUsage()
    pd = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
    cd = u.get("completion_tokens_details") if isinstance(u.get("completion_tokens_details"), dict) else {}
    read = reported_int(pd.get("cached_tokens"))
    if read is None:
        read = reported_int(u.get("cache_read_input_tokens"))
    write = reported_int(pd.get("cache_write_tokens"))
    if write is None:
        write = reported_int(u.get("cache_creation_input_tokens"))
    return TokenUsage(input_tokens=reported_int(u.get("prompt_tokens")),
                 output_tokens=reported_int(u.get("completion_tokens")),
                 cache_read_input_tokens=read, cache_creation_input_tokens=write,
                 reasoning_output_tokens=reported_int(cd.get("reasoning_tokens")))


def detect_gateway(headers: Any) -> str | None:
    """Which OpenAI-compatible server answered, from its response headers: "litellm" or None (unknown)."""
    if headers is None:
        return None
    if any(str(k).lower().startswith("x-litellm-") for k in headers.keys()):
        return "litellm"
    return None


def parse_chat_response(data: dict[str, Any], gateway: str | None = None
                        ) -> tuple[Message, StopReason, str | None, TokenUsage, str | None]:
    """A chat completion → (message, stop reason, raw finish_reason, usage, upstream stop reason)."""
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ModelError("protocol", f"chat completion without choices: {str(data)[:200]}")
    choice = choices[0]
    msg = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    blocks: list[Any] = []
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    if reasoning:
        blocks.append(ReasoningBlock(str(reasoning)))
    text = _content_text(msg.get("content"))
    if text:
        blocks.append(TextBlock(text))
    if msg.get("refusal"):
        blocks.append(TextBlock(str(msg["refusal"])))
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ModelError("protocol", f"tool_calls is not a list: {str(calls)[:200]!r}")
    for call in calls:
        blocks.append(_tool_call_block(call))
    usage = chat_usage(data.get("usage"))
    raw_stop = choice.get("finish_reason")
    stop, upstream = chat_stop_reason(raw_stop, choice, msg, bool(calls), bool(text), usage, gateway)
    message = Message("assistant", blocks, raw=[msg], raw_provider=OpenAIChatClient.provider)
    return message, stop, raw_stop, usage, upstream


class OpenAIChatClient:
    """OpenAI-compatible chat completions (vLLM, LiteLLM). `extra_body` is merged into each request, e.g.
    {"chat_template_kwargs": {"enable_thinking": False}} for Qwen3. response_format is refused: see module doc."""

    provider = "openai-compat"
    accepts_pdf = False  # chat completions (vLLM, LiteLLM) take text and images only
    transport = "chat-completions"
    image_delivery = "user_message"  # a tool message is text only: images follow in a user message

    def __init__(self, model: str, *, base_url: str, http: httpx.Client, api_key: str | None = None,
                 extra_body: dict[str, Any] | None = None, now: Callable[[], float] = time.time,
                 images: bool = True, max_output_tokens: int | None = None) -> None:
        self.now = now  # resolves an HTTP-date Retry-After
        self.images = images
        self.max_output_tokens = max_output_tokens
        self.options = {k: v for k, v in (("extra_body", extra_body or None), ("images", None if images else False),
                                          ("max_output_tokens", max_output_tokens)) if v is not None}
        if not images:
            self.image_delivery = "none"
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
            "messages": to_chat_messages(request.system, request.messages, images=self.images),
            "max_tokens": self.max_output_tokens or request.max_tokens,
        }
        if request.tools:
            body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                               "parameters": t.input_schema}} for t in request.tools]
            choice = request.tool_choice
            body["tool_choice"] = ({"type": "function", "function": {"name": choice["name"]}}
                                   if isinstance(choice, dict) else {"any": "required"}.get(choice, choice))
        if request.stop:
            body["stop"] = list(request.stop)
        body.update(self.extra_body)
        return body

    def complete(self, request: ModelRequest) -> ModelTurn:
        data, status, request_id, headers = _post(self._http, f"{self.base_url}/chat/completions",
                                                  self.build_body(request), _headers(self._key), request.timeout_s,
                                                  self.now)
        message, stop, raw_stop, usage, upstream = parse_chat_response(data, detect_gateway(headers))
        return ModelTurn(message, stop, raw_stop, usage, http_status=status, request_id=request_id,
                         response_model=data.get("model"), response_id=data.get("id"),
                         upstream_stop_reason=upstream)


# ------------------------------------------------------------------ the server's side (tests/openai_like_servers.py)
_WIRE_FINISH: dict[str, str] = {"tool_use": "tool_calls", "end_turn": "stop", "stop_sequence": "stop",
                                "max_tokens": "length", "refusal": "content_filter"}
_TOOL_IMAGES = "Image(s) returned by tool call "


def _data_url_image(url: str) -> ImageBlock:
    head, _, data = url.partition(",")
    return ImageBlock(head.removeprefix("data:").split(";")[0] or "image/png", data)


def request_from_chat(body: dict[str, Any]) -> ModelRequest:
    """A chat-completions request body → the loop's neutral ModelRequest: the inverse of build_body and
    to_chat_messages, so a test server answers what the client sent through the same neutral types. Consecutive
    user-side chat messages (text, tool results, the images a tool returned) become one neutral user message."""
    system = ""
    messages: list[Message] = []

    def user_blocks() -> list[Any]:
        if not messages or messages[-1].role != "user":
            messages.append(Message("user", []))
        return messages[-1].blocks

    for m in body.get("messages") or []:
        role, content = m.get("role"), m.get("content")
        if role in ("system", "developer"):
            system += _content_text(content)
        elif role == "assistant":
            blocks: list[Any] = [TextBlock(_content_text(content))] if _content_text(content) else []
            blocks += [_tool_call_block(c) for c in m.get("tool_calls") or []]
            messages.append(Message("assistant", blocks))
        elif role == "tool":
            user_blocks().append(ToolResultBlock(str(m.get("tool_call_id")), _content_text(content)))
        elif isinstance(content, list) and content and isinstance(content[0], dict) \
                and str(content[0].get("text", "")).startswith(_TOOL_IMAGES):
            blocks = user_blocks()  # the images a tool returned go back onto its result block
            call_id = str(content[0]["text"]).removeprefix(_TOOL_IMAGES).rstrip(":")
            images = tuple((i.mime, i.data) for i in (_data_url_image(p["image_url"]["url"]) for p in content[1:]
                                                      if p.get("type") == "image_url"))
            for k, b in enumerate(blocks):
                if isinstance(b, ToolResultBlock) and b.call_id == call_id:
                    blocks[k] = ToolResultBlock(b.call_id, b.content, b.is_error, b.images + images)
        elif isinstance(content, list):
            for p in content:
                if p.get("type") == "image_url":
                    user_blocks().append(_data_url_image(p["image_url"]["url"]))
                elif p.get("type") == "text":
                    user_blocks().append(TextBlock(str(p.get("text", ""))))
        else:
            user_blocks().append(TextBlock(_content_text(content)))
    tools = [Tool(t["function"]["name"], t["function"].get("description", ""), t["function"].get("parameters") or {})
             for t in body.get("tools") or []]
    choice = body.get("tool_choice", "auto")
    tool_choice: Any = ({"name": choice["function"]["name"]} if isinstance(choice, dict)
                        else {"required": "any"}.get(choice, choice))
    return ModelRequest(system, messages, tools, tool_choice,
                        int(body.get("max_tokens") or body.get("max_completion_tokens") or 4096))


def chat_response(turn: ModelTurn, model: str, *, response_id: str = "chatcmpl-scripted") -> dict[str, Any]:
    """A neutral turn → a chat completion body, as vLLM and llama.cpp's servers write it (content null beside
    tool calls; reasoning as `reasoning_content`)."""
    msg: dict[str, Any] = {"role": "assistant", "content": turn.message.text or None}
    calls = turn.message.tool_calls
    if calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in calls]
    reasoning = "\n".join(b.text for b in turn.message.blocks if isinstance(b, ReasoningBlock))
    if reasoning:
        msg["reasoning_content"] = reasoning
    u = turn.usage
    usage = {"prompt_tokens": u.input_tokens or 0, "completion_tokens": u.output_tokens or 0,
             "total_tokens": (u.input_tokens or 0) + (u.output_tokens or 0)}
    return {"id": response_id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": msg, "finish_reason": _WIRE_FINISH.get(turn.stop_reason, "stop")}],
            "usage": usage}
