"""The text tool protocol: tools described in the prompt in the model family's own format, calls parsed here.

Why: a native tool call needs three things to work at once — the server's chat template must put the tools into
the prompt, the model must write its family's call format, and the server's parser must turn that text into
`tool_calls` (then the template must render the `role: tool` result on the next turn). On small local models and
CPU servers one of them is often missing (docs agent-notes.md): llama-cpp-python's own template parses no call,
its `chatml-function-calling` format parses calls but never puts tool results into the prompt, and a 1.5B model on
`llama-server --jinja` writes fenced JSON instead of the `<tool_call>` tag the parser waits for. The text protocol
needs none of them: the tools go into the system prompt in the format the model was trained on (Hermes / Qwen:
`<tools>` signatures, calls as `<tool_call>{"name": ..., "arguments": ...}</tool_call>`), the server is sent no
`tools` at all, the reply's text is parsed by the client (agent.models.text_calls, which reads fences, single
quotes and doubled braces), and results go back as plain user messages in `<tool_response>` tags, which every
template keeps. Each turn says which protocol carried its calls (`ModelTurn.tool_protocol`), so a record and its
scores never mix a text run with a native one.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent.models.base import (
    ImageBlock,
    Message,
    ModelClient,
    ModelRequest,
    ModelTurn,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from agent.models.text_calls import TextCall, find_text_calls, json_objects, unescaped
from agent.tool import Tool

ToolProtocol = Literal["native", "text"]
TOOL_PROTOCOLS: tuple[ToolProtocol, ...] = ("native", "text")
TEXT_PROTOCOL_PROVIDER = "text-protocol"  # Message.raw_provider of an assistant turn this protocol parsed
CALL_CLOSE = "</tool_call>"
STOPS = (CALL_CLOSE, "&lt;/tool_call&gt;")  # the second: a server whose template escapes the prompt (see unescaped)


@dataclass(frozen=True)
class TextFormat:
    """One model family's way of writing tools, calls and results in text."""

    name: str
    families: tuple[str, ...]  # model families trained on it; hermes is also what any other model is given

    def tools_prompt(self, tools: list[Tool]) -> str:
        """The tool signatures and the call format word for word as the family's chat template renders them
        (Qwen2.5's, its doubled `{{"name": ...}}` included: what the model saw in training; the parser reads a
        call with doubled braces too). Nothing is added: a small model follows the format it was trained on,
        and an extra instruction ("never write <tool_response>") was seen to make it write exactly that."""
        lines = "\n".join(json.dumps({"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.input_schema}}) for t in tools)
        return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n"
                f"<tools>\n{lines}\n</tools>\n\n"
                "For each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n"
                '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>')

    def call_text(self, call: ToolCallBlock) -> str:
        return f'<tool_call>\n{json.dumps({"name": call.name, "arguments": call.arguments})}\n{CALL_CLOSE}'

    def result_text(self, result: ToolResultBlock, images_note: str = "") -> str:
        return f"<tool_response>\n{result.content}{images_note}\n</tool_response>"


HERMES = TextFormat("hermes", ("qwen", "hermes"))
FORMATS = {HERMES.name: HERMES}


def to_text_request(request: ModelRequest, fmt: TextFormat = HERMES, *, images: bool = True) -> ModelRequest:
    """The request as the text protocol sends it: tools in the system prompt, no `tools` for the server, each
    assistant turn as its calls written in the format (its text when it made none), tool results as user text in
    <tool_response> tags with their images beside them (or a note that the model reads text only), and stop
    sequences after a call's closing tag."""
    system = f"{request.system}\n\n{fmt.tools_prompt(request.tools)}" if request.tools else request.system
    messages: list[Message] = []
    for m in request.messages:
        if m.role == "assistant":
            # A turn with calls goes back as the template renders one: what the model said before its first
            # call, then each call written in the format — not the call as the model wrote it (a small model
            # copies its own history: a colon it left out, a fence, growing blank lines would be repeated on
            # every later turn); a turn without calls as its text.
            text = m.text
            if m.tool_calls:
                said = _before_calls(text) if m.raw_provider == TEXT_PROTOCOL_PROVIDER else text.strip()
                text = "\n".join([said, *(fmt.call_text(c) for c in m.tool_calls)] if said else
                                  [fmt.call_text(c) for c in m.tool_calls])
            messages.append(Message("assistant", [TextBlock(text)]))
            continue
        blocks: list[Any] = []
        for b in m.blocks:
            if isinstance(b, ToolResultBlock):
                note = ""
                if b.images and not images:
                    note = f"\n({len(b.images)} image(s) not shown: this model reads text only)"
                blocks.append(TextBlock(fmt.result_text(b, note)))
                if images:
                    blocks += [ImageBlock(mime, data) for mime, data in b.images]
            else:
                blocks.append(b)
        messages.append(Message("user", blocks))
    return dataclasses.replace(request, system=system, messages=messages, tools=[], tool_choice="auto",
                               stop=tuple(dict.fromkeys([*request.stop, *STOPS])))


_CALL_START = re.compile(r"<tool_call>|<tool_response>|<tools>|<function_call>|```|&lt;|\{")


def _before_calls(text: str) -> str:
    """What a reply said before its first call (the prose a template keeps beside the call)."""
    m = _CALL_START.search(text)
    return (text if m is None else text[:m.start()]).strip()


_TAG_BODY = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAMED = re.compile(r"""["']name["']\s*:\s*["']([A-Za-z_][\w.-]*)["']""")


def unread_calls(text: str) -> list[tuple[str, str]]:
    """(name, body) of each <tool_call> block whose JSON could not be read even leniently but that names a tool:
    sent on as a call with unreadable arguments, so the model is told (InvalidArgument) and can write it again,
    as a native call with unparsable arguments is."""
    out = []
    for m in _TAG_BODY.finditer(text):
        named = _NAMED.search(m.group(1))
        if named and not find_text_calls(f"<tool_call>{m.group(1)}</tool_call>"):
            out.append((named.group(1), m.group(1)))
    return out


_SCHEMA_KEYS = {"type", "properties", "required", "additionalProperties", "description", "title"}


def _definition_echo(arguments: dict[str, Any]) -> bool:
    """Are these "arguments" a tool's JSON schema (a small model that echoed a `<tools>` signature)?"""
    return (isinstance(arguments.get("properties"), dict) and arguments.get("type") == "object"
            and set(arguments) <= _SCHEMA_KEYS)


def _echo_refusal(name: str) -> dict[str, Any]:
    """The unreadable-arguments form of a call whose arguments were the tool's own schema: the loop answers it
    InvalidArgument with this text, which says what to write instead."""
    return {"_raw": f"you wrote the tool's definition, not a call; write <tool_call>{{\"name\": \"{name}\", "
                    f"\"arguments\": {{...}}}}</tool_call> with its arguments' values"}


def _arguments_only(text: str, tools: list[Tool]) -> list[TextCall]:
    """A reply that is only the arguments of one offered tool, as a JSON object (fenced or bare) with every
    required key and no key the tool lacks — a small model that wrote its answer as submit_extraction's
    payload without the call around it: read as that call, unambiguous because exactly one tool fits."""
    out = []
    for obj in (o for o in json_objects(text) if isinstance(o, dict) and o and "name" not in o):
        fits = [t for t in tools if isinstance(t.input_schema.get("properties"), dict)
                and set(t.input_schema.get("required") or ()) <= set(obj) <= set(t.input_schema["properties"])]
        if len(fits) == 1:
            out.append(TextCall(fits[0].name, obj, "arguments_only"))
    return out[:1]


def _call_id(request: ModelRequest, k: int) -> str:
    turn = sum(1 for m in request.messages if m.role == "assistant") + 1
    return f"call_text_{turn:03d}_{k}"


def from_text_reply(turn: ModelTurn, request: ModelRequest) -> ModelTurn:
    """The reply with the calls its text holds as ToolCallBlocks (ids call_text_<turn>_<k>), stop reason tool_use
    when there are any (a call the parser read whole is complete, even if the model went on writing until the
    output limit: the finish reason stays in raw_stop_reason), the protocol named on the turn. The text is kept as
    the model wrote it (the record shows it); calls are read from it unescaped, up to any <tool_response> the model
    went on to imagine."""
    written = turn.message.text
    text = unescaped(written)
    names = [t.name for t in request.tools]
    cut = text.find("<tool_response>")
    calls: list[Any] = find_text_calls(text if cut < 0 else text[:cut], names)
    if not calls and cut >= 0:  # no call before the tag: a call the model wrote inside it
        calls = find_text_calls(text, names)
    if not calls:  # a call the model meant but wrote as broken JSON: answered as a call with unreadable arguments
        calls = [TextCall(name, {"_raw": body}, "tool_call_tag") for name, body in unread_calls(text)]
    if not calls:
        calls = _arguments_only(text, request.tools)
    calls = [TextCall(c.name, _echo_refusal(c.name), c.form) if _definition_echo(c.arguments) else c for c in calls]
    blocks: list[Any] = [b for b in turn.message.blocks if isinstance(b, ReasoningBlock)]
    blocks += [TextBlock(written)] if written else []
    blocks += [ToolCallBlock(_call_id(request, k), c.name, c.arguments) for k, c in enumerate(calls, 1)]
    stop = "tool_use" if calls else turn.stop_reason
    message = Message("assistant", blocks, raw=None, raw_provider=TEXT_PROTOCOL_PROVIDER)
    return dataclasses.replace(turn, message=message, stop_reason=stop, tool_protocol="text")


class TextToolClient(ModelClient):
    """A model client that carries tool calls as text (see the module docstring) over any inner client."""

    tool_protocol: ToolProtocol = "text"

    def __init__(self, inner: ModelClient, fmt: TextFormat = HERMES) -> None:
        self.inner = inner
        self.format = fmt
        self.model = inner.model
        self.provider = inner.provider
        self.transport = inner.transport
        self.base_url = getattr(inner, "base_url", None)
        self.accepts_pdf = getattr(inner, "accepts_pdf", False)
        self.images = getattr(inner, "image_delivery", "tool_result") != "none"
        self.image_delivery = "user_message" if self.images else "none"  # results are user messages here
        self.options: Mapping[str, Any] = {**dict(getattr(inner, "options", {}) or {}), "tools": "text"}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """What the inner client would send for `request` under this protocol (doctor's evidence)."""
        return self.inner.build_body(to_text_request(request, self.format, images=self.images))  # type: ignore

    def complete(self, request: ModelRequest) -> ModelTurn:
        turn = self.inner.complete(to_text_request(request, self.format, images=self.images))
        return from_text_reply(turn, request)


def tool_protocol_of(client: Any) -> ToolProtocol:
    """The protocol a client uses, looking through wrappers that hold their client as `inner` (the single-pass
    arm's DocumentInRequest)."""
    while client is not None:
        if isinstance(client, TextToolClient):
            return "text"
        client = getattr(client, "inner", None)
    return "native"


# --------------------------------------------------------------------------------------------- the model's side
def request_from_text_protocol(request: ModelRequest) -> ModelRequest | None:
    """The inverse of to_text_request, for a test server standing in for a model that reads tools from its
    prompt: the neutral request with its tools, calls and results back in place; None when the system prompt
    holds no tool block (a request of the native protocol)."""
    start, end = request.system.find("<tools>\n"), request.system.find("\n</tools>")
    if start < 0 or end < start:
        return None
    tools = []
    for line in request.system[start + len("<tools>\n"):end].splitlines():
        fn = json.loads(line)["function"]
        tools.append(Tool(fn["name"], fn.get("description", ""), fn.get("parameters") or {}))
    system = request.system[:request.system.find("\n\n# Tools")]
    messages: list[Message] = []
    pending: list[str] = []  # ids of calls not yet answered, in order
    for m in request.messages:
        if m.role == "assistant":
            calls = find_text_calls(m.text, [t.name for t in tools])
            ids = [f"call_text_{len(messages) + 1:03d}_{k}" for k in range(1, len(calls) + 1)]
            pending = list(ids)
            messages.append(Message("assistant", [*([TextBlock(m.text)] if m.text and not calls else []),
                                                  *(ToolCallBlock(i, c.name, c.arguments)
                                                    for i, c in zip(ids, calls))]))
            continue
        blocks: list[Any] = []
        for b in m.blocks:
            if isinstance(b, TextBlock) and b.text.startswith("<tool_response>\n") and pending:
                content = b.text.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
                blocks.append(ToolResultBlock(pending.pop(0), content))
            elif isinstance(b, ImageBlock) and blocks and isinstance(blocks[-1], ToolResultBlock):
                last = blocks[-1]
                blocks[-1] = dataclasses.replace(last, images=(*last.images, (b.mime, b.data)))
            else:
                blocks.append(b)
        messages.append(Message("user", blocks))
    return dataclasses.replace(request, system=system, messages=messages, tools=tools)
