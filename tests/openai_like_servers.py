"""OpenAI-compatible chat-completions test servers that behave like the real ones where those differ.

Why: the chat client and the loop were only ever run against servers that accept what OpenAI accepts. Real local
servers do not (docs agent-notes.md, "A real open model on a local server"): llama-cpp-python validates requests
strictly and answers an assistant turn with `content: null` with HTTP 500 and a pydantic error; its
`chatml-function-calling` format returns structured calls but never puts `role: tool` content into the prompt; a
chat template without tools makes the model write its call as text; `llama-server --jinja` parses `<tool_call>`
but a small model writes fenced JSON instead, and it reads `tool_choice` only as a string; a text-only model
accepts an image and reads its base64 as text; vLLM's guided decoding masks the tool-call token when
response_format comes with tools; some stacks drop reasoning, reject PDFs or images, omit usage, ignore
tool_choice, let a model repeat a tool-call token to the output limit, or turn calls into text after the first
tool result. Each `ServerFaults` switch reproduces one of them over real HTTP (uvicorn on 127.0.0.1, port 0), and
`speaks_as` makes the server report itself as llama-cpp-python, llama-server or vLLM do (/v1/models, /props).

The responder: with `policy` (an agent/models/scripted.py policy name) and the claim projection `task`, the request
is read back into the loop's neutral ModelRequest (agent/models/openai_http.request_from_chat, the inverse of the
client's translation; a request of the text tool protocol through agent/models/text_protocol's inverse, as a model
reading tools from its prompt), the scripted model answers it and its turn is written as a chat completion
(chat_response; under the text protocol its calls written as `<tool_call>` text, as a Qwen-family model writes
them), as agent/testserver.py does for the Anthropic shape; a fault then changes the request check or the reply.
Without a policy, a generic, literal-minded model answers: it calls the tool that tool_choice names (else the first
tool) as many times as the first user message names an offered tool, then answers in text quoting the tool
results and what it sees in their images (`Served.sees`: image bytes' SHA-256 → what a vision model reads there).
Prompt tokens are counted from the request the model sees (tool results a fault dropped do not count; an image
costs a vision model a fixed IMAGE_TOKENS, a text-only model its base64 read as text).

Use: `with openai_like_server(ServerFaults(reject_null_content=True)) as server:` — `server` is the base URL
(a str ending in /v1) with `.requests` (every request body received), `.faults`, a settable `.task` and `.sees`.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.models.base import Message, ModelError, ModelRequest, ModelTurn, TextBlock, ToolCallBlock, ToolResultBlock
from agent.models.openai_http import chat_response, request_from_chat
from agent.models.text_protocol import request_from_text_protocol
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
    drops_tool_results: bool = False  # llama-cpp-python chatml-function-calling: role tool never reaches the model
    text_after_tool_result: bool = False  # calls structured on turn 1, written as text once a tool result is in
    tool_choice_object_ignored: bool = False  # llama-server: tool_choice must be a string; an object -> "auto"
    text_only_images: bool = False  # images accepted, their base64 read as text; nothing seen in them
    model_never_writes_tag: bool = False  # the parser works (a <tool_call> prefill or a forced choice comes back
    # structured) but the model writes its calls as fenced JSON (llama-server --jinja with a 1.5B model)
    speaks_as: str | None = None  # llama-cpp-python | llama-server | vllm: /v1/models (and /props) as they answer
    context_tokens: int = 16384  # what /props (llama-server) or max_model_len (vLLM) reports


LLAMA_CPP_LIKE = ServerFaults(reject_null_content=True)
"""llama-cpp-python with a chat template that carries tools: strict request schema, structured calls."""
LLAMA_CPP_NO_TOOL_TEMPLATE = ServerFaults(reject_null_content=True, tools_as_text=True)
"""llama-cpp-python with the GGUF's own template (no tools in it): calls come back as text."""
VLLM_GUIDED = ServerFaults(guided_masks_tools=True)
"""vLLM whose guided decoding (response_format) masks the tool-call token."""
LLAMA_CPP_PYTHON_FUNCTION_CALLING = ServerFaults(reject_null_content=True, drops_tool_results=True,
                                                 text_only_images=True, speaks_as="llama-cpp-python")
"""`python -m llama_cpp.server --chat_format chatml-function-calling` with a text-only model: structured calls,
tool results never in the prompt, images read as text."""
LLAMA_CPP_PYTHON_GGUF_TEMPLATE = ServerFaults(reject_null_content=True, tools_as_text=True,
                                              tools_as_text_style="tools", text_only_images=True,
                                              speaks_as="llama-cpp-python")
"""`python -m llama_cpp.server` with the GGUF's own template: tools in the prompt, calls back as text."""
LLAMA_SERVER_JINJA_SMALL_MODEL = ServerFaults(model_never_writes_tag=True, tool_choice_object_ignored=True,
                                              text_only_images=True, speaks_as="llama-server")
"""`llama-server --jinja` with a 1.5B text-only model: the parser works, the model writes fenced JSON."""
HELD_OUT_LLAMA_CPP_LIKE = ServerFaults(reject_null_content=True, text_after_tool_result=True)
"""issue 26's held-out server: structured calls on turn 1, text after the first tool result."""
IMAGE_TOKENS = 256  # what one image costs a vision model here

REPEATED_TOKEN = "<tool_call>"


class Served(str):
    """The base URL (ending in /v1) of a running server, with what it received and how it misbehaves."""

    requests: list[dict[str, Any]]
    faults: ServerFaults
    task: ClaimView | None
    policy: str | None
    sees: dict[str, str]  # SHA-256 of an image's bytes -> what a vision model reads in it


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


@dataclass
class Seen:
    """A request as the model behind the server sees it: the neutral request (tools read from the prompt under the
    text tool protocol; tool results a fault dropped left out), an assistant prefill the reply must continue, and
    the prompt tokens it costs."""

    request: ModelRequest
    text_protocol: bool
    prefill: str | None
    prompt_tokens: int
    had_tool_result: bool


def _image_bytes(data: str) -> bytes:
    return base64.b64decode(data.encode("ascii"), validate=False)


def _prompt_tokens(body: dict[str, Any], faults: ServerFaults) -> int:
    """Tokens of what reaches the model: the messages (minus dropped tool results) at ~4 characters a token; an
    image IMAGE_TOKENS to a vision model, its base64 at ~1.5 characters a token to a text-only one."""
    visible, images = [], 0
    for m in body.get("messages") or []:
        if m.get("role") == "tool" and faults.drops_tool_results:
            continue
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for p in content:
                url = (p.get("image_url") or {}).get("url", "") if isinstance(p, dict) else ""
                if url:
                    images += len(url.partition(",")[2]) // 1.5 if faults.text_only_images else IMAGE_TOKENS
                else:
                    parts.append(p)
            m = {**m, "content": parts}
        visible.append(m)
    tools = body.get("tools") or []
    return max(1, len(json.dumps({"messages": visible, "tools": tools})) // 4 + int(images))


def seen_by_model(body: dict[str, Any], faults: ServerFaults) -> Seen:
    """What the model sees of `body` (see Seen)."""
    request = request_from_chat(body)
    had_result = any(m.get("role") == "tool" for m in body.get("messages") or [])
    if faults.drops_tool_results:
        request = dataclasses.replace(request, messages=[
            Message(m.role, [b for b in m.blocks if not isinstance(b, ToolResultBlock)]) for m in request.messages])
    prefill = None
    last = request.messages[-1] if request.messages else None
    if last is not None and last.role == "assistant" and not last.tool_calls:
        prefill = last.text
        request = dataclasses.replace(request, messages=request.messages[:-1])
    text = request_from_text_protocol(request)
    if text is not None:
        had_result = had_result or any(isinstance(b, ToolResultBlock) for m in text.messages for b in m.blocks)
    return Seen(text or request, text is not None, prefill, _prompt_tokens(body, faults), had_result)


def _generic_turn(seen: Seen, faults: ServerFaults, sees: dict[str, str]) -> ModelTurn:
    """A literal-minded model: it calls a tool as many times as the first user message names an offered tool (or
    whenever tool_choice forces one, or the reply was begun for it), then answers quoting the tool results and
    what it sees in their images."""
    request = seen.request
    tools = request.tools
    choice = request.tool_choice
    if faults.ignore_tool_choice and (isinstance(choice, dict) or choice == "none"):
        named = choice.get("name") if isinstance(choice, dict) else None
        tools = [t for t in tools if t.name != named] or []
        choice = "auto"
    first = next((m.text for m in request.messages if m.role == "user"), "")
    asked = max(1, sum(first.count(t.name) for t in tools))
    made = sum(len(m.tool_calls) for m in request.messages if m.role == "assistant")
    forced = isinstance(choice, dict) or choice == "any" or bool(seen.prefill)
    blocks: list[Any]
    if tools and choice != "none" and (forced or made < asked):
        named = choice.get("name") if isinstance(choice, dict) else None
        tool = next((t for t in tools if t.name == named), tools[0])
        turn_no = sum(1 for m in request.messages if m.role == "assistant") + 1
        blocks = [ToolCallBlock(f"call_{turn_no:03d}_{tool.name}", tool.name, example_value(tool.input_schema))]
        stop = "tool_use"
    else:
        last = request.messages[-1] if request.messages else None
        results = [b for b in (last.blocks if last is not None and last.role == "user" else [])
                   if isinstance(b, ToolResultBlock)]
        said = [f"The tool returned: {r.content}" for r in results]
        if not faults.text_only_images:
            said += [f"The image shows {sees[hashlib.sha256(_image_bytes(data)).hexdigest()]}."
                     for r in results for _, data in r.images
                     if hashlib.sha256(_image_bytes(data)).hexdigest() in sees]
        blocks, stop = [TextBlock(" ".join(said) or "The answer is in the document.")], "end_turn"
    usage = TokenUsage(input_tokens=seen.prompt_tokens, output_tokens=12)
    return ModelTurn(Message("assistant", blocks), stop, None, usage)  # type: ignore[arg-type]


def _policy_turn(seen: Seen, policy: str, task: ClaimView | None, model: str) -> ModelTurn:
    if task is None:
        raise ValueError(f"policy {policy!r} needs the claim projection: openai_like_server(..., task=...)")
    return ScriptedModel(policy_named(policy), model, task=task).complete(seen.request)


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


def _as_text(choice: dict[str, Any], turn: ModelTurn, text: str) -> None:
    prefix = turn.message.text
    choice["message"] = {"role": "assistant", "content": f"{prefix}\n{text}" if prefix else text}
    choice["finish_reason"] = "stop"


def _written_style(seen: Seen, faults: ServerFaults) -> TextCallStyle | None:
    """How the model's calls come back in text (None: structured): under the text protocol as <tool_call>
    text (fenced JSON by a model that never writes the tag); natively when the parser is off, when the model
    does not write the tag the parser waits for (unless the reply was begun with it), or after a tool result on
    a server whose calls turn to text there."""
    if seen.text_protocol:
        return "fenced" if faults.model_never_writes_tag else "tool_call"
    if faults.tools_as_text:
        return faults.tools_as_text_style
    if faults.model_never_writes_tag and not seen.prefill:  # llama-server b1-0c1e570: `required` did not force
        return "fenced"                                       # the format either, a begun reply did
    if faults.text_after_tool_result and seen.had_tool_result:
        return "tools"
    return None


def _reply(body: dict[str, Any], faults: ServerFaults, turn: ModelTurn, n: int, seen: Seen) -> dict[str, Any]:
    model = str(body.get("model", "served-model"))
    data = chat_response(turn, model, response_id=f"chatcmpl-{n:04d}")
    choice = data["choices"][0]
    msg = choice["message"]
    tools = body.get("tools") or []
    limit = faults.repeat_tool_token_over_schema_chars
    style = _written_style(seen, faults) if turn.message.tool_calls else None
    if tools and limit is not None and len(json.dumps(tools)) > limit:
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4096)
        choice["message"] = {"role": "assistant", "content": REPEATED_TOKEN * min(max_tokens, 2048)}
        choice["finish_reason"] = "length"
        data["usage"]["completion_tokens"] = max_tokens
    elif tools and faults.guided_masks_tools and body.get("response_format"):
        choice["message"] = {"role": "assistant", "content": json.dumps(
            {"answer": "The value is 1.0 as stated in the datasheet."})}
        choice["finish_reason"] = "stop"
    elif seen.prefill and style is not None:  # the continuation of the begun reply, unparsed
        call = turn.message.tool_calls[0]
        choice["message"] = {"role": "assistant", "content": json.dumps({"name": call.name, "arguments":
                                                                          call.arguments}) + "\n</tool_call>"}
        choice["finish_reason"] = "stop"
    elif style is not None:
        _as_text(choice, turn, "\n".join(_call_as_text(c, style) for c in turn.message.tool_calls))
    msg = choice["message"]
    if _reasoning_asked(body) and not faults.drop_reasoning and "reasoning_content" not in msg:
        msg["reasoning_content"] = "The user asks for a datasheet figure; I will look it up."
    if faults.drop_reasoning:
        msg.pop("reasoning_content", None)
    if faults.no_usage:
        data.pop("usage", None)
    return data


def _models(faults: ServerFaults) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": "served-model", "object": "model", "owned_by": "test"}
    if faults.speaks_as == "llama-cpp-python":
        entry = {"id": "served-model", "object": "model", "owned_by": "me", "permissions": []}
    elif faults.speaks_as == "llama-server":
        entry = {"id": "served-model", "object": "model", "created": 0, "owned_by": "llamacpp",
                 "meta": {"n_ctx_train": 32768}}
    elif faults.speaks_as == "vllm":
        entry = {"id": "served-model", "object": "model", "owned_by": "vllm", "max_model_len": faults.context_tokens}
    return {"object": "list", "data": [entry]}


def chat_app(faults: ServerFaults, holder: dict[str, Served]) -> FastAPI:
    """The app; `holder["served"]` is the running server's `Served` (set once its URL is known)."""
    app = FastAPI(title="OpenAI-compatible chat completions stand-in")
    ids = itertools.count(1)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return _models(faults)

    @app.get("/props", response_model=None)
    async def props() -> Any:
        if faults.speaks_as != "llama-server":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return {"default_generation_settings": {"n_ctx": faults.context_tokens}, "build_info": "b0000-test",
                "chat_template": "{{ messages }}"}

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
        if faults.tool_choice_object_ignored and isinstance(body.get("tool_choice"), dict):
            body = {**body, "tool_choice": "auto"}  # "Wrong type supplied for parameter 'tool_choice'"
        seen = seen_by_model(body, faults)
        try:
            turn = (_policy_turn(seen, served.policy, served.task, str(body.get("model", "scripted")))
                    if served.policy is not None else _generic_turn(seen, faults, served.sees))
        except ModelError as e:
            cause = e.__cause__
            if not isinstance(cause, ScriptedHTTPError):
                raise
            return JSONResponse({"error": {"message": cause.message, "type": cause.error_type, "code": cause.status}},
                                status_code=cause.status, headers=headers)
        return JSONResponse(_reply(body, faults, turn, n, seen), headers=headers)

    return app


@contextlib.contextmanager
def openai_like_server(faults: ServerFaults | None = None, *, policy: str | None = None,
                       task: ClaimView | None = None) -> Iterator[Served]:
    """Serve /v1/chat/completions with `faults` on 127.0.0.1; yields the base URL (ending in /v1) as a `Served`
    str carrying `.requests`, `.faults`, `.policy`, `.task` (settable between cells) and `.sees`."""
    faults = faults or ServerFaults()
    holder: dict[str, Served] = {}
    with serve_app(chat_app(faults, holder)) as url:
        served = Served(f"{url}/v1")
        served.requests, served.faults, served.task, served.policy, served.sees = [], faults, task, policy, {}
        holder["served"] = served
        yield served


__all__ = ["HELD_OUT_LLAMA_CPP_LIKE", "IMAGE_TOKENS", "LLAMA_CPP_LIKE", "LLAMA_CPP_NO_TOOL_TEMPLATE",
           "LLAMA_CPP_PYTHON_FUNCTION_CALLING", "LLAMA_CPP_PYTHON_GGUF_TEMPLATE", "LLAMA_SERVER_JINJA_SMALL_MODEL",
           "REPEATED_TOKEN", "Seen", "ServerFaults", "Served", "VLLM_GUIDED", "example_value", "openai_like_server",
           "seen_by_model"]
