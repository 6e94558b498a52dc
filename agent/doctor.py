"""`chamberlab doctor`: a handful of tiny requests that find a model endpoint's portability faults before a run.

Why: what breaks a run on a real server — tool calls returned as text because the server's tool-call parser is off,
a strict request schema refusing an assistant turn, guided decoding masking the tool call, reasoning dropped, a
large tool schema making the model repeat a tool-call token, images refused, no usage — mostly arrives as HTTP 200
or as one loud error on turn 2 of every cell (the seed paper's Table 4). Each probe here sends one such request
through the same client class the loop uses (so it tests what a run will send), or the same body with one field
changed, and says pass / fail / not_applicable with a one-line finding, a likely fix, and its evidence: every
request body and raw answer saved as JSON under the evidence folder. `preflight` runs only the probes a planned
run depends on (`needs_for_run`), for `matrix` to stop before its first cell.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import httpx

from agent.models import ModelSpecError, client_for, parse_model_spec, split_model_options
from agent.models.base import (DocumentBlock, Message, MissingApiKey, ModelClient, ModelError, ModelRequest, ModelTurn,
                               ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock, one_line, server_message)
from agent.models.text_calls import find_text_calls, repeated_token
from agent.tool import Tool

Status = Literal["pass", "fail", "not_applicable"]
PROBES = ("client", "tool_calls", "tool_result", "empty_content_turn", "null_content_turn", "tool_choice",
          "tools_with_response_format", "large_tool_schema", "reasoning", "pdf_document", "page_images", "usage")
DEFAULT_TIMEOUT_S = 120.0
SMALL = 128  # max_tokens of a probe whose answer is one short call or a word
SYSTEM = "You are a connectivity probe. Follow the user's instruction exactly and briefly."


@dataclass(frozen=True)
class Probe:
    """One probe's verdict. `warning`: a failure that runs do not depend on (e.g. a form chamberlab never sends)."""

    name: str
    status: Status
    finding: str
    fix: str = ""
    evidence: str | None = None
    warning: bool = False


@dataclass
class DoctorReport:
    spec: str
    transport: str | None
    endpoint: str | None
    out_dir: Path
    probes: list[Probe]
    needs: set[str] | None = None

    @property
    def failed(self) -> list[str]:
        return [p.name for p in self.probes if p.status == "fail"]

    @property
    def failed_needed(self) -> list[str]:
        return [n for n in self.failed if self.needs is None or n in self.needs]

    @property
    def ok(self) -> bool:  # no failed probe among `needs` (among all when needs is None)
        return not self.failed_needed

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "transport": self.transport, "endpoint": self.endpoint, "out_dir": str(self.out_dir),
                "ok": self.ok, "needs": sorted(self.needs) if self.needs is not None else None,
                "failed": self.failed, "failed_needed": self.failed_needed, "probes": [asdict(p) for p in self.probes]}


def doctor_text(data: Mapping[str, Any]) -> str:
    """One screen: a line per probe (status, name, finding; the fix under a failure), then where the evidence is."""
    needs, fixes = set(data.get("needs") or ()), {}
    at = f"  ({data['transport']} at {data['endpoint']})" if data.get("endpoint") else ""
    lines = [f"doctor {data['spec']}{at}"]
    for p in data["probes"]:
        mark = "warn" if p.get("warning") else {"pass": "pass", "fail": "FAIL", "not_applicable": "n/a "}[p["status"]]
        lines.append(f"{mark} {'*' if p['name'] in needs else ' '}{p['name']:<27} {p['finding']}")
        if p["status"] == "fail" and p.get("fix"):
            first = fixes.setdefault(p["fix"], p["name"])
            lines.append(f"{'':34}fix: {p['fix'] if first == p['name'] else 'as for ' + first}")
    lines.append(f"evidence (request and raw answer per probe): {data['out_dir']}"
                 + ("   (* = a probe the planned run depends on)" if needs else ""))
    bad = data.get("failed_needed") or []
    lines.append("ok: no failed probe a run depends on" if data["ok"] else f"NOT OK: failed {', '.join(bad)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- what a run needs
def _spec_facts(spec: str) -> tuple[str, dict[str, Any]]:
    base, options = split_model_options(spec)
    return parse_model_spec(base)[0], options


def _asks_reasoning(options: Mapping[str, Any]) -> bool:
    thinking = options.get("thinking")
    return bool(options.get("effort")) or bool(thinking and thinking.get("type") != "disabled")


def needs_for_run(spec: str) -> set[str]:
    """The probes a run with this `--model` spec depends on: tool calls, a tool result, an assistant tool-call turn
    in the form the client sends it, the run's own tool schema; reasoning when asked for; images unless images=false."""
    kind, options = _spec_facts(spec)
    if kind == "scripted":
        return {"client"}
    needs = {"client", "tool_calls", "tool_result", "empty_content_turn", "large_tool_schema"}
    if _asks_reasoning(options):
        needs.add("reasoning")
    if options.get("images", True):
        needs.add("page_images")
    return needs


# --------------------------------------------------------------------------------------------- evidence
class _Recorder:
    """httpx event hooks that keep every request body and raw answer a probe causes (no headers: no keys)."""

    def __init__(self) -> None:
        self.exchanges: list[tuple[httpx.Request, dict[str, Any]]] = []

    def on_request(self, request: httpx.Request) -> None:
        self.exchanges.append((request, {"url": str(request.url), "request": _json_or_text(request.content)}))

    def on_response(self, response: httpx.Response) -> None:
        response.read()
        for request, entry in self.exchanges:
            if request is response.request:
                entry.update(status=response.status_code, response=_json_or_text(response.content))

    def take(self) -> list[dict[str, Any]]:
        out, self.exchanges = [entry for _, entry in self.exchanges], []
        return out


def _json_or_text(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content.decode("utf-8", "replace")


def _turn_json(turn: ModelTurn) -> dict[str, Any]:
    m = turn.message
    return {"stop_reason": turn.stop_reason, "raw_stop_reason": turn.raw_stop_reason, "text": m.text,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in m.tool_calls],
            "reasoning": "\n".join(b.text for b in m.blocks if isinstance(b, ReasoningBlock)),
            "usage": turn.usage.model_dump(), "http_status": turn.http_status}


# --------------------------------------------------------------------------------------------- findings
_PARSERS = (("qwen3-coder", "qwen3_coder"), ("qwen", "hermes"), ("hermes", "hermes"), ("llama-4", "llama4_pythonic"),
            ("llama4", "llama4_pythonic"), ("llama", "llama3_json"), ("mistral", "mistral"), ("granite", "granite"),
            ("deepseek", "deepseek_v3"), ("internlm", "internlm"), ("gpt-oss", "openai"), ("phi-4", "phi4_mini_json"))


def parser_fix(model: str) -> str:
    """The server flags that make tool calls structured, with vLLM's parser guessed from the model's name."""
    family = next((parser for key, parser in _PARSERS if key in model.lower()), "<family>")
    return (f"vLLM: serve with --enable-auto-tool-choice --tool-call-parser {family}; llama.cpp llama-server: "
            f"--jinja (a chat template that carries tools); llama-cpp-python: --chat_format chatml-function-calling")


@dataclass
class _Verdict:
    status: Status
    finding: str
    fix: str = ""
    warning: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


def no_call_verdict(turn: ModelTurn, tools: list[Tool], model: str, context: str = "") -> _Verdict:
    """Why a turn that should have held a structured tool call did not (the loop's own detectors)."""
    text, finish = turn.message.text, turn.raw_stop_reason
    repeated = repeated_token(text) if turn.stop_reason == "max_tokens" else None
    if repeated is not None:
        return _Verdict("fail", f"{context}{repeated[0]!r} repeated {repeated[1]} times until the output limit "
                                f"(finish {finish!r}), no tool call", "a backend fault with large tool schemas: "
                        f"check the tool-call parser ({parser_fix(model)}), a newer server, or a larger model")
    calls = find_text_calls(text, [t.name for t in tools])
    if calls:
        return _Verdict("fail", f"{context}tool call written as text ({calls[0].form}, finish {finish!r}, no "
                                f"tool_calls): {one_line(text, 70)!r}", "the server is not parsing tool calls: "
                        + parser_fix(model))
    if turn.stop_reason == "max_tokens":
        return _Verdict("fail", f"{context}output limit reached before any tool call (finish {finish!r})",
                        "raise max_output_tokens in the --model spec")
    return _Verdict("fail", f"{context}no tool call, a text answer (finish {finish!r}): {one_line(text, 70)!r}",
                    f"check the server parses tool calls ({parser_fix(model)}); or the model is too small for tools")


_FIXES: dict[str | int, str] = {  # by error kind (no answer at all) or HTTP status
    "connection": "is the server running at the spec's base URL (which ends in /v1)?",
    "timeout": "a slow model: raise --timeout, or lower max_output_tokens in the --model spec",
    401: "the server wants a key: set OPENAI_COMPAT_API_KEY (or the provider's key variable)",
    404: "check the base URL (it ends in /v1, e.g. http://127.0.0.1:8080/v1) and the model name"}


def _error_verdict(e: ModelError, what: str, fix: str = "") -> _Verdict:
    if e.kind in ("connection", "timeout"):
        return _Verdict("fail", f"{what}: no answer ({e.kind}): {one_line(str(e), 160)}", _FIXES[e.kind])
    return _Verdict("fail", f"{what} refused ({f'HTTP {e.http_status}' if e.http_status else e.kind}): "
                            f"{one_line(str(e), 200)}", _FIXES.get(e.http_status or 0) or fix or "see the evidence")


# --------------------------------------------------------------------------------------------- test payloads
def _tool(name: str, description: str, **props: Any) -> Tool:
    return Tool(name, description, {"type": "object", "properties": props, "required": list(props),
                                    "additionalProperties": False})


ADD = _tool("add_numbers", "Add two integers and return their sum.", a={"type": "integer"}, b={"type": "integer"})
UNIT = _tool("lookup_unit", "Return the SI unit of a physical quantity.", quantity={"type": "string"})
PAGE = _tool("inspect_page", "Render a page of the document as an image.", page={"type": "integer", "minimum": 1})
ASK_ADD = "Use the add_numbers tool to add 2 and 3. Call the tool; do not answer in text."
PDF_WORD = "ORCHID"


def tiny_png(size: int = 64, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A solid-colour PNG (no imaging library needed); 64 px: some vision encoders refuse smaller images."""
    raw = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def tiny_pdf(word: str = PDF_WORD) -> bytes:
    """A one-page PDF printing `word`, with a correct cross-reference table."""
    content = f"BT /F1 24 Tf 20 40 Td ({word}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref, n = len(out), len(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % n + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (n, xref)


def run_tool_surface() -> list[Tool]:
    """The phase-one tools exactly as a run offers them (the datasheet tools, then submit_extraction)."""
    from agent.datasheet.tools import DatasheetSession, datasheet_tools
    from agent.prompt import submit_extraction_tool

    return [*datasheet_tools(DatasheetSession(Path("doctor-no-document.pdf"))), submit_extraction_tool()]


# --------------------------------------------------------------------------------------------- the probes
_ERRORS: dict[str, tuple[str, str]] = {  # a probe's request refused: what was refused, the likely fix
    "tool_calls": ("a request offering one tool", "check the endpoint, model name and key (see the evidence)"),
    "tool_result": ("a tool result on the next turn", "the server refuses `role: tool` messages (template?)"),
    "empty_content_turn": ("an assistant tool-call turn with content \"\"", "server-side request validation"),
    "tool_choice": ("a named tool_choice", "runs use tool_choice auto, so they are unaffected"),
    "tools_with_response_format": ("response_format with tools", "chamberlab never sends it; runs are unaffected"),
    "large_tool_schema": ("the run's own tool surface", "the prompt with the run's tools may exceed the context "
                          "(llama.cpp: -c/--ctx-size; vLLM: --max-model-len)"),
    "reasoning": ("a request asking for reasoning", "drop thinking/effort from the --model spec"),
    "pdf_document": ("a PDF document block", "the gateway or model takes no PDF input; send page images"),
    "page_images": ("a page image in a tool result", "a text-only model or no vision projector (llama.cpp: "
                    "--mmproj): add images=false to the --model spec (…#model?images=false)"),
}


def _said(turn: ModelTurn) -> str:
    calls = ", ".join(f"a call of {c.name}" for c in turn.message.tool_calls)
    return repr(one_line(turn.message.text, 50)) if turn.message.text else calls or "nothing"


def _user(text: str) -> Message:
    return Message("user", [TextBlock(text)])


def _assistant_content(body: dict[str, Any], content: Any) -> dict[str, Any]:
    """The chat body with every assistant tool-call turn's content set to `content` ("" or None)."""
    messages = [dict(m, content=content) if m.get("role") == "assistant" and m.get("tool_calls") else m
                for m in body["messages"]]
    return {**body, "messages": messages}


class _Doctor:
    """The probes of one client; each returns a _Verdict or raises ModelError (the caller words the refusal)."""

    def __init__(self, spec: str, client: ModelClient, http: httpx.Client, recorder: _Recorder,
                 environ: Mapping[str, str], timeout_s: float) -> None:
        self.spec, self.client, self.http, self.rec, self.timeout_s = spec, client, http, recorder, timeout_s
        self.kind, self.options = _spec_facts(spec)
        self.key = environ.get("OPENAI_COMPAT_API_KEY")
        self.model, self.chat = client.model, self.kind == "openai-compat"
        self.turns: list[dict[str, Any]] = []
        self.answered: tuple[str, ModelTurn] | None = None  # the first probe with an answer, for `usage`
        self.current = ""

    # -- transport
    def request(self, messages: list[Message], tools: list[Tool], choice: Any = "auto", max_tokens: int = SMALL,
                system: str = SYSTEM) -> ModelRequest:
        return ModelRequest(system, messages, tools, choice, max_tokens, timeout_s=self.timeout_s)

    def body_of(self, request: ModelRequest) -> dict[str, Any] | None:
        if hasattr(self.client, "build_body"):
            return self.client.build_body(request)  # type: ignore[attr-defined]
        if self.kind == "anthropic":
            from agent.models.anthropic_client import to_anthropic_request

            return to_anthropic_request(request, self.model)
        return None

    def _keep(self, turn: ModelTurn, sent: dict[str, Any] | None = None) -> ModelTurn:
        self.turns.append({**({"sent": sent} if sent is not None else {}), "answer": _turn_json(turn)})
        if self.answered is None:
            self.answered = (self.current, turn)
        return turn

    def complete(self, request: ModelRequest) -> ModelTurn:
        turn = self.client.complete(request)  # the run's own client: what a cell will send
        return self._keep(turn, self.body_of(request) if self.kind == "anthropic" else None)

    def raw_chat(self, body: dict[str, Any]) -> ModelTurn:
        """POST a chat body the client built, with one field changed; parsed by the client's own reader."""
        from agent.models.openai_http import _headers, _post, detect_gateway, parse_chat_response

        data, status, _, headers = _post(self.http, f"{self.client.base_url}/chat/completions", body,
                                         _headers(self.key), self.timeout_s)  # the client's own POST and errors
        message, stop, raw_stop, usage, _ = parse_chat_response(data, detect_gateway(headers))
        return self._keep(ModelTurn(message, stop, raw_stop, usage, http_status=status))

    # -- probes
    def p_tool_calls(self) -> _Verdict:
        turn = self.complete(self.request([_user(ASK_ADD)], [ADD]))
        if turn.message.tool_calls:
            c = turn.message.tool_calls[0]
            return _Verdict("pass", f"structured call {c.name}({one_line(json.dumps(c.arguments), 60)})")
        return no_call_verdict(turn, [ADD], self.model)

    def _call_turn(self, text: str) -> list[Message]:
        call = ToolCallBlock("call_probe_1", ADD.name, {"a": 2, "b": 3})
        said = [TextBlock(text)] if text else []
        return [_user(ASK_ADD), Message("assistant", [*said, call]), Message("user", [ToolResultBlock(call.id, "5")])]

    def p_tool_result(self) -> _Verdict:
        turn = self.complete(self.request(self._call_turn("Calling add_numbers."), [ADD]))
        return _Verdict("pass", f"accepted; the model then answered {_said(turn)}")

    def p_empty_content_turn(self) -> _Verdict:
        self.complete(self.request(self._call_turn(""), [ADD]))  # the chat client sends content "" (never null)
        return _Verdict("pass", "an assistant tool-call turn without text accepted" + (' (content "")' * self.chat))

    def p_null_content_turn(self) -> _Verdict:
        if not self.chat:
            return _Verdict("not_applicable", f"{self.client.transport} has no content:null form")
        request = self.request(self._call_turn(""), [ADD])
        body = _assistant_content(self.client.build_body(request), None)  # type: ignore[attr-defined]
        try:
            self.raw_chat(body)
        except ModelError as e:
            if e.kind not in ("http", "protocol"):
                raise
            what = f"the server refuses `content: null` beside tool_calls ({one_line(str(e), 160)})"
            return _Verdict("fail", f"{what}: a strict request schema (llama-cpp-python); chamberlab sends \"\"",
                            "none needed for chamberlab runs; other clients sending null fail on turn 2", True)
        return _Verdict("pass", "content null beside tool_calls accepted")

    def p_tool_choice(self) -> _Verdict:
        if self.kind == "anthropic" and _asks_reasoning(self.options) and self.options.get("thinking"):
            return _Verdict("not_applicable", "forced tool choice is refused with thinking on; runs use auto")
        turn = self.complete(self.request([_user("What is 2 + 3? Use a tool.")], [ADD, UNIT], {"name": UNIT.name}))
        names = [c.name for c in turn.message.tool_calls]
        if names and set(names) == {UNIT.name}:
            return _Verdict("pass", f"forced {UNIT.name} honoured")
        if names:
            return _Verdict("fail", f"tool_choice forced {UNIT.name}; the model called {', '.join(names)}",
                            "the server ignores a named tool_choice (vLLM: needs a guided-decoding backend); runs "
                            "use tool_choice auto, so they are unaffected")
        return no_call_verdict(turn, [ADD, UNIT], self.model, f"forced {UNIT.name}: ")

    def p_tools_with_response_format(self) -> _Verdict:
        if not self.chat:
            return _Verdict("not_applicable", f"{self.client.transport}: only chat-completions servers are probed")
        body = self.client.build_body(self.request([_user(ASK_ADD)], [ADD]))  # type: ignore[attr-defined]
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
            "type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}}}
        turn = self.raw_chat(body)
        if turn.message.tool_calls:
            return _Verdict("pass", "a tool call still came through with response_format json_schema")
        if turn.message.text and not find_text_calls(turn.message.text, [ADD.name]) \
                and turn.stop_reason != "max_tokens":
            return _Verdict("fail", f"with response_format, a text answer and no tool call "
                                    f"({one_line(turn.message.text, 60)!r}): guided decoding masks the tool-call "
                                    f"token (the seed paper's silent tool bypass)",
                            "never send response_format/guided_json with tools (chamberlab's chat client refuses "
                            "them in extra_body; answers come through the submit tool)")
        return no_call_verdict(turn, [ADD], self.model, "with response_format: ")

    def p_large_tool_schema(self) -> _Verdict:
        from agent.prompt import system_prompt

        tools = run_tool_surface()
        size = len(json.dumps([t.definition() for t in tools]))
        ask = ("Submit this extraction now with submit_extraction: value 3.3, unit V, page 1, quote 'VDD 3.3 V'.")
        turn = self.complete(self.request([_user(ask)], tools, max_tokens=2 * SMALL, system=system_prompt()))
        what = f"the run's {len(tools)} tools ({size} schema chars)"
        if turn.message.tool_calls and turn.stop_reason != "max_tokens":
            return _Verdict("pass", f"structured call {turn.message.tool_calls[0].name} with {what}")
        return no_call_verdict(turn, tools, self.model, f"with {what}: ")

    def p_reasoning(self) -> _Verdict:
        if not _asks_reasoning(self.options):
            return _Verdict("not_applicable", "not asked for (no thinking/effort in the --model spec)")
        budget = (self.options.get("thinking") or {}).get("budget_tokens") or 0
        asked = ", ".join(f"{k}={v}" for k, v in (("thinking", budget), ("effort", self.options.get("effort"))) if v)
        question = _user("What is 17 * 23? Think it through, then answer with the number only.")
        turn = self.complete(self.request([question], [], max_tokens=budget + 4 * SMALL))
        text = "\n".join(b.text for b in turn.message.blocks if isinstance(b, ReasoningBlock))
        tokens = turn.usage.reasoning_output_tokens or 0
        if not text and not tokens:
            return _Verdict("fail", f"reasoning asked for ({asked}) and none returned: the server or gateway drops "
                                    "it, or the chat template ignores the switch",
                            "vLLM: serve with --reasoning-parser <family> (qwen3, deepseek_r1); Qwen3: "
                            "extra.chat_template_kwargs.enable_thinking=true; a gateway: let it pass "
                            "reasoning_content through; or drop thinking/effort from the spec")
        nxt = self.body_of(self.request([question, turn.message, _user("Thanks.")], []))
        dumped = json.dumps(nxt) if nxt is not None else ""
        markers = [json.dumps(text[:40])[1:-1]] if text else []
        markers += ["encrypted_content", "signature", "reasoning_content", "thinking_blocks"]
        if nxt is not None and not any(m and m in dumped for m in markers):
            return _Verdict("fail", "reasoning returned but the next request would not carry it back",
                            f"{self.client.transport} drops reasoning between turns; use an API that keeps it")
        return _Verdict("pass", f"reasoning returned ({len(text)} chars shown, {tokens} tokens reported)"
                        + (" and resent on the next turn" if nxt is not None else ""))

    def p_pdf_document(self) -> _Verdict:
        if not getattr(self.client, "accepts_pdf", False):
            return _Verdict("not_applicable", f"{self.client.transport} sends no PDFs (the run sends page images)")
        doc = DocumentBlock("application/pdf", base64.b64encode(tiny_pdf()).decode("ascii"), title="probe.pdf")
        ask = TextBlock("Which word is printed in this PDF? Answer with the word only.")
        turn = self.complete(self.request([Message("user", [doc, ask])], []))
        if PDF_WORD.lower() in turn.message.text.lower():
            return _Verdict("pass", "a PDF document block accepted and read")
        return _Verdict("fail", f"a PDF block accepted but its word was not read back "
                                f"({one_line(turn.message.text, 60)!r}): the document may not be ingested",
                        "the gateway may drop or fail to convert PDF blocks; use page images")

    def p_page_images(self) -> _Verdict:
        if getattr(self.client, "image_delivery", "tool_result") == "none":
            return _Verdict("not_applicable", "images=false in the --model spec: the run sends no images")
        call = ToolCallBlock("call_probe_img", PAGE.name, {"page": 1})
        png = ("image/png", base64.b64encode(tiny_png()).decode("ascii"))
        messages = [_user("Inspect page 1 and tell me its main colour in one word."),
                    Message("assistant", [TextBlock("Inspecting page 1."), call]),
                    Message("user", [ToolResultBlock(call.id, "PNG of page 1", images=(png,))])]
        turn = self.complete(self.request(messages, [PAGE]))
        return _Verdict("pass", f"a page image accepted (delivered as {self.client.image_delivery}); the model "
                                f"answered {_said(turn)}")

    def p_usage(self) -> _Verdict:
        if self.answered is None:
            return _Verdict("not_applicable", "no answered request to read usage from")
        source, u = self.answered[0], self.answered[1].usage
        verdict = (_Verdict("pass", f"usage reported ({u.input_tokens} in, {u.output_tokens} out, in {source})")
                   if u.input_tokens is not None and u.output_tokens is not None else
                   _Verdict("fail", f"no usage (prompt/completion tokens) in the answer to {source}: token budgets "
                                    "and costs count nothing", "vLLM and llama.cpp report usage by default; a "
                                    "gateway may strip it (check its settings)"))
        verdict.detail["from_probe"] = source
        return verdict


# --------------------------------------------------------------------------------------------- entry points
def run_doctor(spec: str, *, out_dir: Path, environ: Mapping[str, str], needs: set[str] | None = None,
               http: httpx.Client | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, only: set[str] | None = None,
               progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Every probe (or those in `only`) against `spec`; evidence JSON files in `out_dir`. `http` (an httpx.Client)
    carries the requests and gets recording hooks for the duration; `needs` decides `ok`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rec, own = _Recorder(), http is None
    http = http if http is not None else httpx.Client(timeout=timeout_s)
    hooks = {k: list(v) for k, v in http.event_hooks.items()}
    http.event_hooks = {"request": [*hooks.get("request", []), rec.on_request],
                        "response": [*hooks.get("response", []), rec.on_response]}
    try:
        try:
            client = client_for(spec, environ, http=http)
        except (ModelSpecError, MissingApiKey) as e:
            return _report(spec, None, None, out_dir, [Probe("client", "fail", one_line(e), "fix the --model spec "
                                                             "or set the variable named")] + _none("no client"), needs)
        if client.transport == "in-process":
            return _report(spec, client.transport, None, out_dir, [Probe("client", "pass", f"{spec}: in process")]
                           + _none("in-process scripted model: no server to probe"), needs)
        doctor, unreachable = _Doctor(spec, client, http, rec, environ, timeout_s), None
        probes = [Probe("client", "pass", f"{client.transport} client for {client.model}")]
        for name in PROBES[1:]:
            if (only is not None and name not in only) or unreachable:
                probes.append(Probe(name, "not_applicable", f"not sent: the server did not answer {unreachable}"
                                    if unreachable else "skipped: the planned run does not depend on it"))
                continue
            if progress:
                progress(f"doctor: probe {name}")
            doctor.current, doctor.turns = name, []
            try:
                v = getattr(doctor, f"p_{name}")()
            except ModelError as e:
                v = _error_verdict(e, *_ERRORS.get(name, ("the request", "")))
                unreachable = name if e.kind == "connection" else None  # no server at all: the rest is not sent
            except Exception as e:  # a probe that could not even be sent (a client refusing the request shape)
                v = _Verdict("fail", f"the probe could not run: {type(e).__name__}: {one_line(e)}")
            exchanges, evidence = rec.take(), None
            if "from_probe" in v.detail:
                evidence = next((p.evidence for p in probes if p.name == v.detail["from_probe"]), None)
            elif v.status != "not_applicable" or exchanges:
                evidence = str(out_dir / f"{name}.json")
                Path(evidence).write_text(json.dumps({"probe": name, "spec": spec, "status": v.status, "finding":
                                                      v.finding, "fix": v.fix, "exchanges": exchanges, "turns":
                                                      doctor.turns}, indent=2, default=str), encoding="utf-8")
            probes.append(Probe(name, v.status, v.finding, v.fix, evidence, v.warning))
        return _report(spec, client.transport, getattr(client, "base_url", None), out_dir, probes, needs)
    finally:
        http.event_hooks = hooks
        if own:
            http.close()


def _none(why: str) -> list[Probe]:
    return [Probe(n, "not_applicable", why) for n in PROBES[1:]]


def _report(spec: str, transport: str | None, endpoint: str | None, out_dir: Path, probes: list[Probe],
            needs: set[str] | None) -> DoctorReport:
    report = DoctorReport(spec, transport, endpoint, out_dir, probes, needs)
    (out_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    return report


def preflight(spec: str, *, out_dir: Path, environ: Mapping[str, str], needs: set[str] | None = None,
              http: httpx.Client | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Before a run: only the probes it depends on (`needs`, default needs_for_run(spec)); `.ok` says go."""
    try:
        needs = set(needs) if needs is not None else needs_for_run(spec)
    except ModelSpecError:
        needs = {"client"}
    return run_doctor(spec, out_dir=out_dir, environ=environ, needs=needs, http=http, timeout_s=timeout_s,
                      only=needs, progress=progress)


def doctor_job(model: str, out: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S,
               say: Callable[[str], None] | None = None, environ: Mapping[str, str] | None = None,
               now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> dict[str, Any]:
    """`chamberlab doctor`: every probe; `ok` (exit 0) when no probe a run with this spec depends on failed."""
    out_dir = out if out is not None else Path("doctor") / now().strftime("%Y%m%dT%H%M%SZ")
    report = run_doctor(model, out_dir=out_dir, environ=os.environ if environ is None else environ,
                        needs=needs_for_run(model), timeout_s=timeout, progress=say)
    return report.to_dict()
