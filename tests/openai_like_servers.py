"""OpenAI-compatible chat-completions test servers that behave like the real ones where those differ.

Why: the chat client and the loop were only ever run against servers that accept what OpenAI accepts. Real local
servers do not (docs agent-notes.md, "A real open model on a local server"): llama-cpp-python validates requests
strictly and answers an assistant turn with `content: null` with HTTP 500 and a pydantic error; a chat template
without tools makes the model write its call as text; vLLM's guided decoding masks the tool-call token when
response_format comes with tools; some stacks drop reasoning, reject PDFs or images, omit usage, ignore
tool_choice, or let a model repeat a tool-call token to the output limit when the tool schema is large. Each
`ServerFaults` switch reproduces one of them over real HTTP (uvicorn on 127.0.0.1, port 0).

The responder: with `policy` (an agent/models/scripted.py policy name) and the claim projection `task`, the request
is read back into the loop's neutral ModelRequest (agent/models/openai_http.request_from_chat, the inverse of the
client's translation), the scripted model answers it and its turn is written as a chat completion
(chat_response), as agent/testserver.py does for the Anthropic shape; a fault then changes the request check or
the reply. Without a policy, a generic responder calls the tool that tool_choice names (else the first tool) with
arguments built from its JSON schema, and answers text when no tools are offered.

Use: `with openai_like_server(ServerFaults(reject_null_content=True)) as server:` — `server` is the base URL
(a str ending in /v1) with `.requests` (every request body received), `.faults` and a settable `.task`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.models.base import Message, ModelError, ModelTurn, TextBlock, ToolCallBlock
from agent.models.openai_http import chat_response, request_from_chat
from agent.models.scripted import ScriptedHTTPError, ScriptedModel, policy_named
from agent.prompt import ClaimView
from agent.record import TokenUsage
from agent.testserver import serve_app

TextCallStyle = Literal["tools", "tool_call", "fenced"]


@dataclass
class ServerFaults:
    """What a server does differently from OpenAI's API; all off is a correct server (vLLM with its tool parser)."""

    reject_null_content: bool = False  # llama-cpp-python: assistant content null -> HTTP 500, pydantic error
    tools_as_text: bool = False  # chat template without tools: the call comes back as text, finish "stop"
    tools_as_text_style: TextCallStyle = "tools"  # <tools>{...}</tools>, <tool_call>{...}</tool_call>, ```json
    guided_masks_tools: bool = False  # vLLM: response_format + tools -> a fluent answer, no tool call, 200
    drop_reasoning: bool = False  # reasoning asked for, none returned
    repeat_tool_token_over_schema_chars: int | None = None  # tools JSON longer than this -> token loop, "length"
    reject_images: bool = False  # an image_url content part -> HTTP 400
    no_usage: bool = False  # no `usage` in the reply
    ignore_tool_choice: bool = False  # a named or "none" tool_choice is not honoured


LLAMA_CPP_LIKE = ServerFaults(reject_null_content=True)
"""llama-cpp-python with a chat template that carries tools: strict request schema, structured calls."""
LLAMA_CPP_NO_TOOL_TEMPLATE = ServerFaults(reject_null_content=True, tools_as_text=True)
"""llama-cpp-python with the GGUF's own template (no tools in it): calls come back as text."""
VLLM_GUIDED = ServerFaults(guided_masks_tools=True)
"""vLLM whose guided decoding (response_format) masks the tool-call token."""

REPEATED_TOKEN = "<tool_call>"


class Served(str):
    """The base URL (ending in /v1) of a running server, with what it received and how it misbehaves."""

    requests: list[dict[str, Any]]
    faults: ServerFaults
    task: ClaimView | None
    policy: str | None


# --------------------------------------------------------------------------------------------- request checks
def _null_content_error(body: dict[str, Any]) -> dict[str, Any] | None:
    """llama-cpp-python's answer to an assistant message with content null: its route handler turns the
    RequestValidationError of its typed-dict union into HTTP 500 with str(error) as the message — one error per
    union member, the useful one buried in the middle."""
    for i, m in enumerate(body.get("messages") or []):
        if m.get("role") == "assistant" and "content" in m and m["content"] is None:
            errors = []
            for member, role in (("ChatCompletionRequestSystemMessage", "system"),
                                 ("ChatCompletionRequestUserMessage", "user"),
                                 ("ChatCompletionRequestAssistantMessage", "assistant"),
                                 ("ChatCompletionRequestToolMessage", "tool"),
                                 ("ChatCompletionRequestFunctionMessage", "function")):
                if role != "assistant":
                    errors.append({"type": "literal_error", "loc": ("body", "messages", i, member, "role"),
                                   "msg": f"Input should be '{role}'", "input": "assistant",
                                   "ctx": {"expected": f"'{role}'"}})
                errors.append({"type": "string_type", "loc": ("body", "messages", i, member, "content"),
                               "msg": "Input should be a valid string", "input": None})
                if role == "tool":
                    errors.append({"type": "missing", "loc": ("body", "messages", i, member, "tool_call_id"),
                                   "msg": "Field required", "input": m})
            text = f"{len(errors)} validation errors:\n" + "\n".join(f"  {e!r}" for e in errors)
            return {"error": {"message": text, "type": "internal_server_error", "param": None, "code": None}}
    return None


def _parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for m in body.get("messages") or [] if isinstance(m.get("content"), list)
            for p in m["content"] if isinstance(p, dict)]


def _vllm_error(message: str, status: int = 400) -> tuple[int, dict[str, Any]]:
    return status, {"object": "error", "message": message, "type": "BadRequestError", "param": None,
                    "code": status}


def _reject(faults: ServerFaults, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    if faults.reject_null_content:
        error = _null_content_error(body)
        if error is not None:
            return 500, error
    parts = _parts(body)
    if faults.reject_images and any(p.get("type") in ("image_url", "input_image") for p in parts):
        return _vllm_error("image input is not supported by this model (no multimodal projector loaded)")
    return None


# --------------------------------------------------------------------------------------------- responders
def example_value(schema: dict[str, Any]) -> Any:
    """A simple value that satisfies `schema` (enum's first, default, required object fields filled)."""
    if not isinstance(schema, dict):
        return "example"
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example_value(next((s for s in schema[key] if s.get("type") != "null"), schema[key][0]))
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: example_value(props.get(name, {})) for name in schema.get("required") or []}
    lo = schema.get("minimum", 1)
    return {"string": "example", "integer": int(lo), "number": float(lo), "boolean": False,
            "array": [], "null": None}.get(str(kind), "example")


def _generic_turn(body: dict[str, Any], faults: ServerFaults) -> ModelTurn:
    request = request_from_chat(body)
    tools = request.tools
    choice = request.tool_choice
    if faults.ignore_tool_choice and (isinstance(choice, dict) or choice == "none"):
        named = choice.get("name") if isinstance(choice, dict) else None
        tools = [t for t in tools if t.name != named] or []
        choice = "auto"
    blocks: list[Any]
    if tools and choice != "none":
        named = choice.get("name") if isinstance(choice, dict) else None
        tool = next((t for t in tools if t.name == named), tools[0])
        turn_no = sum(1 for m in request.messages if m.role == "assistant") + 1
        blocks = [ToolCallBlock(f"call_{turn_no:03d}_{tool.name}", tool.name, example_value(tool.input_schema))]
        stop = "tool_use"
    else:
        blocks, stop = [TextBlock("The answer is in the document.")], "end_turn"
    usage = TokenUsage(input_tokens=max(1, len(json.dumps(body)) // 4), output_tokens=12)
    return ModelTurn(Message("assistant", blocks), stop, None, usage)  # type: ignore[arg-type]


def _policy_turn(body: dict[str, Any], policy: str, task: ClaimView | None) -> ModelTurn:
    if task is None:
        raise ValueError(f"policy {policy!r} needs the claim projection: openai_like_server(..., task=...)")
    return ScriptedModel(policy_named(policy), str(body.get("model", "scripted")), task=task).complete(
        request_from_chat(body))


def _call_as_text(call: ToolCallBlock, style: TextCallStyle) -> str:
    if style == "tools":
        return "<tools>" + json.dumps({"type": "function", "function": {"name": call.name,
                                                                         "arguments": call.arguments}}) + "</tools>"
    if style == "tool_call":
        return "<tool_call>\n" + json.dumps({"name": call.name, "arguments": call.arguments}) + "\n</tool_call>"
    return "```json\n" + json.dumps({"name": call.name, "arguments": call.arguments}, indent=2) + "\n```"


def _reasoning_asked(body: dict[str, Any]) -> bool:
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = body.get("thinking")
    return bool(body.get("reasoning_effort") or kwargs.get("enable_thinking") or kwargs.get("thinking")
                or (isinstance(thinking, dict) and thinking.get("type") == "enabled"))


def _reply(body: dict[str, Any], faults: ServerFaults, turn: ModelTurn, n: int) -> dict[str, Any]:
    model = str(body.get("model", "served-model"))
    data = chat_response(turn, model, response_id=f"chatcmpl-{n:04d}")
    choice = data["choices"][0]
    msg = choice["message"]
    tools = body.get("tools") or []
    limit = faults.repeat_tool_token_over_schema_chars
    if tools and limit is not None and len(json.dumps(tools)) > limit:
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4096)
        choice["message"] = {"role": "assistant", "content": REPEATED_TOKEN * min(max_tokens, 2048)}
        choice["finish_reason"] = "length"
        data["usage"]["completion_tokens"] = max_tokens
        msg = choice["message"]
    elif tools and faults.guided_masks_tools and body.get("response_format"):
        choice["message"] = {"role": "assistant", "content": json.dumps(
            {"answer": "The value is 1.0 as stated in the datasheet."})}
        choice["finish_reason"] = "stop"
        msg = choice["message"]
    elif faults.tools_as_text and msg.get("tool_calls"):
        text = "\n".join(_call_as_text(c, faults.tools_as_text_style) for c in turn.message.tool_calls)
        prefix = turn.message.text
        choice["message"] = {"role": "assistant", "content": f"{prefix}\n{text}" if prefix else text}
        choice["finish_reason"] = "stop"
        msg = choice["message"]
    if _reasoning_asked(body) and not faults.drop_reasoning and "reasoning_content" not in msg:
        msg["reasoning_content"] = "The user asks for a datasheet figure; I will look it up."
    if faults.drop_reasoning:
        msg.pop("reasoning_content", None)
    if faults.no_usage:
        data.pop("usage", None)
    return data


def chat_app(faults: ServerFaults, holder: dict[str, Served]) -> FastAPI:
    """The app; `holder["served"]` is the running server's `Served` (set once its URL is known)."""
    app = FastAPI(title="OpenAI-compatible chat completions stand-in")
    ids = itertools.count(1)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "served-model", "object": "model", "owned_by": "test"}]}

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        served = holder["served"]
        served.requests.append(body)
        n = next(ids)
        headers = {"x-request-id": f"req_oai_{n:04d}"}
        rejected = _reject(faults, body)
        if rejected is not None:
            return JSONResponse(rejected[1], status_code=rejected[0], headers=headers)
        try:
            turn = (_policy_turn(body, served.policy, served.task) if served.policy is not None
                    else _generic_turn(body, faults))
        except ModelError as e:
            cause = e.__cause__
            if not isinstance(cause, ScriptedHTTPError):
                raise
            return JSONResponse({"error": {"message": cause.message, "type": cause.error_type, "code": cause.status}},
                                status_code=cause.status, headers=headers)
        return JSONResponse(_reply(body, faults, turn, n), headers=headers)

    return app


@contextlib.contextmanager
def openai_like_server(faults: ServerFaults | None = None, *, policy: str | None = None,
                       task: ClaimView | None = None) -> Iterator[Served]:
    """Serve /v1/chat/completions with `faults` on 127.0.0.1; yields the base URL (ending in /v1) as a `Served`
    str carrying `.requests`, `.faults`, `.policy` and `.task` (settable between cells)."""
    faults = faults or ServerFaults()
    holder: dict[str, Served] = {}
    with serve_app(chat_app(faults, holder)) as url:
        served = Served(f"{url}/v1")
        served.requests, served.faults, served.task, served.policy = [], faults, task, policy
        holder["served"] = served
        yield served


__all__ = ["LLAMA_CPP_LIKE", "LLAMA_CPP_NO_TOOL_TEMPLATE", "REPEATED_TOKEN", "ServerFaults",
           "Served", "VLLM_GUIDED", "example_value", "openai_like_server"]
