"""doctor's probes: each sends tiny requests through the run's own client and says what reached the model.

Why here (agent.doctor runs them and writes the report): each probe is one method of `Probes`, returning a verdict
(pass / fail / not_applicable, a one-line finding, the cause and its fix for the server that answered) or raising
ModelError, which the runner words as a refusal. The classification of a reply without a structured call is the
loop's own (agent.models.text_calls.diagnose_reply) and every fix text is agent.models.serving's.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from agent.doctor_payloads import (ADD, ASK_ADD, ASK_NOTE, ASK_NUMBER, ASK_TWO, FILLER, NOTE, PAGE, PDF_WORD, SMALL,
                                   SYSTEM, TEXT_LIKE_TOKENS_PER_CHAR, UNIT, ProbeSecrets, gave_back, number_png,
                                   page_png, run_tool_surface, tiny_pdf)
from agent.models import parse_model_spec, split_model_options
from agent.models.base import (DocumentBlock, Message, ModelClient, ModelError, ModelRequest, ModelTurn,
                               ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock, one_line)
from agent.models.serving import Cause, Server, ServerIdentity, fix
from agent.models.text_calls import diagnose_reply, find_text_calls, repeated_token
from agent.models.text_protocol import TextToolClient, tool_protocol_of
from agent.tool import Tool

Status = Literal["pass", "fail", "not_applicable"]
NATIVE_BROKEN: tuple[Cause, ...] = ("parser_off", "model_no_format", "drops_tool_results", "text_after_result",
                                    "token_repeated")
"""Causes that no setting of the run fixes while calls stay native: the text tool protocol is recommended."""


def spec_facts(spec: str) -> tuple[str, dict[str, Any]]:
    base, options = split_model_options(spec)
    return parse_model_spec(base)[0], options


def asks_reasoning(options: Mapping[str, Any]) -> bool:
    thinking = options.get("thinking")
    return bool(options.get("effort")) or bool(thinking and thinking.get("type") != "disabled")


def _turn_json(turn: ModelTurn) -> dict[str, Any]:
    m = turn.message
    return {"stop_reason": turn.stop_reason, "raw_stop_reason": turn.raw_stop_reason, "text": m.text,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in m.tool_calls],
            "tool_protocol": turn.tool_protocol,
            "reasoning": "\n".join(b.text for b in m.blocks if isinstance(b, ReasoningBlock)),
            "usage": turn.usage.model_dump(), "http_status": turn.http_status}


# --------------------------------------------------------------------------------------------- findings
def parser_fix(model: str, server: Server | None = None) -> str:
    """The fix of a call written as text (agent.models.serving's text, for `server` when known)."""
    return fix("parser_off", server, model)


@dataclass
class Verdict:
    status: Status
    finding: str
    fix: str = ""
    warning: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    cause: Cause | None = None


def no_call_verdict(turn: ModelTurn, tools: list[Tool], model: str, context: str = "",
                    server: Server | None = None, cause: Cause | None = None) -> Verdict:
    """Why a turn that should have held a structured tool call did not: the loop's own classification
    (agent.models.text_calls.diagnose_reply) and its fix for `server`; `cause` overrides the classified cause
    when a probe knows better (e.g. the parser shown to work: model_no_format)."""
    text, finish = turn.message.text, turn.raw_stop_reason
    fault = diagnose_reply(text, turn.stop_reason, [t.name for t in tools], phase="", server=server, model=model)
    said = f"finish {finish!r}"
    repeated = repeated_token(text) if fault.cause == "token_repeated" else None
    if repeated is not None:
        finding = f"{context}{repeated[0]!r} {repeated[1]} times until the output limit ({said}), no tool call"
    elif fault.cause == "parser_off":
        finding = (f"{context}tool call written as text ({fault.calls[0].form}, {said}, no tool_calls): "
                   f"{one_line(text, 70)!r}")
    elif fault.cause == "output_limit":
        finding = f"{context}output limit reached before any tool call ({said})"
    elif fault.cause == "empty_reply":
        finding = f"{context}an empty reply: neither a tool call nor an answer ({said})"
    else:
        finding = f"{context}no tool call, a text answer ({said}): {one_line(text, 70)!r}"
    chosen = cause or fault.cause
    return Verdict("fail", finding, fix(chosen, server, model), cause=chosen)


_FIXES: dict[str | int, str] = {  # by error kind (no answer at all) or HTTP status
    "connection": "is the server running at the spec's base URL (which ends in /v1)?",
    "timeout": "a slow model: raise --timeout, or lower max_output_tokens in the --model spec",
    401: "the server wants a key: set OPENAI_COMPAT_API_KEY (or the provider's key variable)",
    404: "check the base URL (it ends in /v1, e.g. http://127.0.0.1:8080/v1) and the model name"}


def error_verdict(e: ModelError, what: str, fix_text: str = "") -> Verdict:
    if e.kind in ("connection", "timeout"):
        return Verdict("fail", f"{what}: no answer ({e.kind}): {one_line(str(e), 160)}", _FIXES[e.kind])
    return Verdict("fail", f"{what} refused ({f'HTTP {e.http_status}' if e.http_status else e.kind}): "
                            f"{one_line(str(e), 200)}", _FIXES.get(e.http_status or 0) or fix_text or "see the evidence")


# --------------------------------------------------------------------------------------------- the probes
REFUSED: dict[str, tuple[str, str]] = {  # a probe's request refused: what was refused, the likely fix
    "tool_calls": ("a request offering one tool", "check the endpoint, model name and key (see the evidence)"),
    "tool_result": ("a tool result on the next turn", "the server refuses `role: tool` messages (template?)"),
    "second_tool_call": ("a call after a tool result", "the server refuses `role: tool` messages (template?)"),
    "empty_content_turn": ("an assistant tool-call turn with content \"\"", "server-side request validation"),
    "tool_choice": ("a tool_choice", "runs use tool_choice auto, so they are unaffected"),
    "tools_with_response_format": ("response_format with tools", "chamberlab never sends it; runs are unaffected"),
    "large_tool_schema": ("the run's own tool surface", "the prompt with the run's tools may exceed the context "
                          "(llama.cpp: -c/--ctx-size; llama-cpp-python: --n_ctx; vLLM: --max-model-len)"),
    "reasoning": ("a request asking for reasoning", "drop thinking/effort from the --model spec"),
    "pdf_document": ("a PDF document block", "the gateway or model takes no PDF input; send page images"),
    "page_images": ("a page image in a tool result", ""),  # the fix: serving's images_refused, for the server
    "text_protocol": ("a request of the text tool protocol", "see the evidence"),
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


class Probes:
    """The probes of one client; each returns a Verdict or raises ModelError (the caller words the refusal)."""

    def __init__(self, spec: str, client: ModelClient, http: httpx.Client, environ: Mapping[str, str],
                 timeout_s: float, secrets: ProbeSecrets, identity: ServerIdentity) -> None:
        self.spec, self.client, self.http, self.timeout_s = spec, client, http, timeout_s
        self.kind, self.options = spec_facts(spec)
        self.key = environ.get("OPENAI_COMPAT_API_KEY")
        self.protocol = tool_protocol_of(client)
        self.native = self.protocol == "native"
        self.model, self.chat = client.model, self.kind == "openai-compat" and self.native
        self.secrets, self.identity, self.server = secrets, identity, identity.name
        self.turns: list[dict[str, Any]] = []
        self.answered: tuple[str, ModelTurn] | None = None  # the first probe with an answer, for `usage`
        self.current = ""
        self.verdicts: dict[str, Verdict] = {}

    # -- transport
    def request(self, messages: list[Message], tools: list[Tool], choice: Any = "auto", max_tokens: int = SMALL,
                system: str = SYSTEM) -> ModelRequest:
        return ModelRequest(system, messages, tools, choice, max_tokens, timeout_s=self.timeout_s)

    def body_of(self, request: ModelRequest, client: ModelClient | None = None) -> dict[str, Any] | None:
        client = client or self.client
        if hasattr(client, "build_body"):
            return client.build_body(request)  # type: ignore[attr-defined]
        if self.kind == "anthropic":
            from agent.models.anthropic_client import to_anthropic_request

            return to_anthropic_request(request, self.model)
        return None

    def _keep(self, turn: ModelTurn, sent: dict[str, Any] | None = None) -> ModelTurn:
        self.turns.append({**({"sent": sent} if sent is not None else {}), "answer": _turn_json(turn)})
        if self.answered is None:
            self.answered = (self.current, turn)
        return turn

    def complete(self, request: ModelRequest, client: ModelClient | None = None) -> ModelTurn:
        client = client or self.client
        turn = client.complete(request)  # the run's own client: what a cell will send
        return self._keep(turn, self.body_of(request, client) if self.kind == "anthropic" else None)

    def raw_chat(self, body: dict[str, Any]) -> ModelTurn:
        """POST a chat body the client built, with one field changed; parsed by the client's own reader."""
        from agent.models.openai_http import _headers, _post, detect_gateway, parse_chat_response

        data, status, _, headers = _post(self.http, f"{self.client.base_url}/chat/completions", body,
                                         _headers(self.key), self.timeout_s)  # the client's own POST and errors
        message, stop, raw_stop, usage, _ = parse_chat_response(data, detect_gateway(headers))
        return self._keep(ModelTurn(message, stop, raw_stop, usage, http_status=status))

    def _no_call(self, turn: ModelTurn, tools: list[Tool], context: str = "", cause: Cause | None = None) -> Verdict:
        """no_call_verdict for this server; a call written as text where tool_calls already found why (the
        parser shown to work, the model not writing its format) keeps that cause."""
        first = self.verdicts.get("tool_calls")
        if cause is None and first is not None and first.cause == "model_no_format":
            fault = diagnose_reply(turn.message.text, turn.stop_reason, [t.name for t in tools], phase="")
            cause = "model_no_format" if fault.cause in ("parser_off", "prose_no_call") else None
        return no_call_verdict(turn, tools, self.model, context, self.server, cause)

    # -- probes
    def p_server(self) -> Verdict:
        ident = self.identity
        if ident.name is None:
            return Verdict("not_applicable", f"{ident.evidence}; a fix names every server's switch")
        facts = [f for f in (f"version {ident.version}" if ident.version else "",
                             f"context {ident.context_tokens} tokens" if ident.context_tokens else "") if f]
        return Verdict("pass", f"{ident.name} ({ident.evidence}{'; ' + ', '.join(facts) if facts else ''})")

    def p_tool_calls(self) -> Verdict:
        turn = self.complete(self.request([_user(ASK_ADD)], [ADD]))
        if turn.message.tool_calls and turn.stop_reason != "max_tokens":
            c = turn.message.tool_calls[0]
            how = "parsed from the reply's text (text protocol)" if not self.native else "structured call"
            return Verdict("pass", f"{how} {c.name}({one_line(json.dumps(c.arguments), 60)})")
        verdict = self._no_call(turn, [ADD])
        if self.chat and verdict.cause in ("parser_off", "prose_no_call"):
            forced = self._forced_prefix()
            if forced is not None:
                verdict = self._no_call(turn, [ADD], cause="model_no_format")
                verdict.finding += f"; {forced}"
        return verdict

    def _forced_prefix(self) -> str | None:
        """Does the server's parser work when the reply starts with the tag? The request of tool_calls with the
        assistant turn begun as `<tool_call>` and the call's name (a prefill llama-server continues; vLLM with
        continue_final_message; llama-cpp-python renders it as a finished turn instead). A finding when the
        answer came back structured, else None."""
        body = self.client.build_body(self.request([_user(ASK_ADD)], [ADD]))  # type: ignore[attr-defined]
        begun = '<tool_call>\n{"name": "' + ADD.name + '", "arguments": '  # the tag alone: Qwen ends its turn
        body["messages"] = [*body["messages"], {"role": "assistant", "content": begun}]
        if self.server == "vllm":
            body.update(continue_final_message=True, add_generation_prompt=False)
        try:
            turn = self.raw_chat(body)
        except ModelError:
            return None
        if turn.message.tool_calls:
            return "a reply forced to start with <tool_call> came back structured: the parser works"
        return None

    def _call_turn(self, text: str) -> list[Message]:
        call = ToolCallBlock("call_probe_1", ADD.name, {"a": 2, "b": 3})
        said = [TextBlock(text)] if text else []
        return [_user(ASK_ADD), Message("assistant", [*said, call]), Message("user", [ToolResultBlock(call.id, "5")])]

    def _note_turns(self, result: str) -> ModelRequest:
        call = ToolCallBlock("call_probe_note", NOTE.name, {})
        messages = [_user(ASK_NOTE), Message("assistant", [TextBlock("Calling read_note."), call]),
                    Message("user", [ToolResultBlock(call.id, result)])]
        return self.request(messages, [NOTE])

    def p_tool_result(self, client: ModelClient | None = None) -> Verdict:
        code = self.secrets.code
        short = f"The access code is {code}."
        turn = self.complete(self._note_turns(short), client)
        if gave_back(turn, code):
            return Verdict("pass", f"the model repeated the code {code} from the tool result")
        grown = self.complete(dataclasses.replace(self._note_turns(f"{short} {FILLER}"), max_tokens=1), client)
        before, after = turn.usage.input_tokens, grown.usage.input_tokens
        said = f"the code {code} is not in the answer ({_said(turn)})"
        if before is not None and after is not None and after <= before:
            return Verdict("fail", f"tool results do not reach the model: {said}; prompt tokens {before} with a "
                                    f"{len(short)}-char result and {after} with a {len(short) + 1 + len(FILLER)}-char "
                                    "one", fix("drops_tool_results", self.server), cause="drops_tool_results")
        grew = f"prompt tokens {before} → {after} as the result grew" if before is not None and after is not None \
            else "prompt tokens not reported"
        first = self.verdicts.get("tool_calls")
        answered = diagnose_reply(turn.message.text, turn.stop_reason, [NOTE.name], phase="")
        if answered.cause == "parser_off" and first is not None and first.cause in ("parser_off", "model_no_format"):
            # the model went on calling, in text the server cannot read: the tool_calls fault, not the result's
            return Verdict("fail", f"{said}: another call written as text; the result reached the prompt ({grew})",
                           fix(first.cause, self.server, self.model), cause=first.cause)
        return Verdict("fail", f"{said}, though the result reached the prompt ({grew})",
                       fix("result_unused", self.server), cause="result_unused")

    def p_second_tool_call(self, client: ModelClient | None = None) -> Verdict:
        call = ToolCallBlock("call_probe_1", ADD.name, {"a": 2, "b": 3})
        messages = [_user(ASK_TWO), Message("assistant", [TextBlock("Calling add_numbers."), call]),
                    Message("user", [ToolResultBlock(call.id, "5")])]
        turn = self.complete(self.request(messages, [ADD]), client)
        if turn.message.tool_calls and turn.stop_reason != "max_tokens":
            c = turn.message.tool_calls[0]
            return Verdict("pass", f"after a tool result, a {'structured' if self.native else 'parsed'} call "
                                    f"{c.name}({one_line(json.dumps(c.arguments), 50)})")
        first, result = self.verdicts.get("tool_calls"), self.verdicts.get("tool_result")
        cause: Cause | None = None
        if result is not None and result.cause == "drops_tool_results":
            return Verdict("fail", f"after a tool result that never reached the model (see tool_result): "
                                    f"{_said(turn)}, no call", fix("drops_tool_results", self.server),
                            cause="drops_tool_results")
        if self.native and first is not None and first.status == "pass":
            fault = diagnose_reply(turn.message.text, turn.stop_reason, [ADD.name], phase="")
            cause = "text_after_result" if fault.cause == "parser_off" else None
        return self._no_call(turn, [ADD], "after a tool result: ", cause=cause)

    def p_empty_content_turn(self) -> Verdict:
        self.complete(self.request(self._call_turn(""), [ADD]))  # the chat client sends content "" (never null)
        return Verdict("pass", "an assistant tool-call turn without text accepted" + (' (content "")' * self.chat))

    def p_null_content_turn(self) -> Verdict:
        if not self.chat:
            return Verdict("not_applicable", f"{self.client.transport} has no content:null form")
        request = self.request(self._call_turn(""), [ADD])
        body = _assistant_content(self.client.build_body(request), None)  # type: ignore[attr-defined]
        try:
            self.raw_chat(body)
        except ModelError as e:
            if e.kind not in ("http", "protocol"):
                raise
            what = f"the server refuses `content: null` beside tool_calls ({one_line(str(e), 160)})"
            return Verdict("fail", f"{what}: a strict request schema (llama-cpp-python); chamberlab sends \"\"",
                            "none needed for chamberlab runs; other clients sending null fail on turn 2", True)
        return Verdict("pass", "content null beside tool_calls accepted")

    def p_tool_choice(self) -> Verdict:
        """Each form on its own: auto (the tool_calls probe's request), required, and an object naming a tool.
        Runs send auto only, so a failure of the others is a warning while auto works. A named form that comes
        back as text or another tool's call while required gave a structured call was not honoured (a server
        that honours it constrains the reply as it does for required)."""
        if self.kind == "anthropic" and asks_reasoning(self.options) and self.options.get("thinking"):
            return Verdict("not_applicable", "forced tool choice is refused with thinking on; runs use auto")
        first = self.verdicts.get("tool_calls")
        auto_ok = first is not None and first.status == "pass"
        parts = [f"auto (what runs send): {'structured' if auto_ok else 'no structured call (see tool_calls)'}"]
        failed, ignored, refused = [], False, ""
        required_ok = False
        for label, choice, tools in (("required", "any", [ADD]), (f"named {UNIT.name}", {"name": UNIT.name},
                                                                  [ADD, UNIT])):
            ask = ASK_ADD if choice == "any" else "What is 2 + 3? Use a tool."
            try:
                turn = self.complete(self.request([_user(ask)], tools, choice))
            except ModelError as e:
                if e.kind in ("connection", "timeout"):
                    raise
                parts.append(f"{label}: refused ({one_line(str(e), 80)})")
                failed.append(label)
                refused = refused or str(e)
                continue
            names = [c.name for c in turn.message.tool_calls]
            if choice == "any":
                required_ok = bool(names)
                parts.append(f"{label}: {'structured ' + names[0] if names else self._brief(turn, tools)}")
                failed += [] if names else [label]
            elif names and set(names) == {UNIT.name}:
                parts.append(f"{label}: honoured")
            elif names or required_ok or self._wrote_other(turn, tools):
                ignored = True
                written = [c.name for c in find_text_calls(turn.message.text, [t.name for t in tools])]
                parts.append(f"{label}: not honoured ("
                             + (f"the model called {', '.join(names)}" if names else
                                f"{self._brief(turn, tools)} while required gave a structured call" if required_ok
                                else f"a call of {', '.join(dict.fromkeys(written))} written as text") + ")")
                failed.append(label)
            else:
                parts.append(f"{label}: {self._brief(turn, tools)}")
                failed.append(label)
        if not failed:
            return Verdict("pass", "; ".join(parts))
        cause: Cause | None = "choice_ignored" if ignored else (first.cause if first is not None and not auto_ok
                                                                  else None)
        fix_text = fix(cause, self.server, self.model) if cause else (
            REFUSED["tool_choice"][1] if refused else fix("choice_ignored", self.server))
        return Verdict("fail", "; ".join(parts), fix_text, warning=auto_ok, cause=cause)

    @staticmethod
    def _wrote_other(turn: ModelTurn, tools: list[Tool]) -> bool:
        """Did the reply write (as text) a call of a tool other than the one tool_choice named?"""
        written = {c.name for c in find_text_calls(turn.message.text, [t.name for t in tools])}
        return bool(written) and UNIT.name not in written

    def _brief(self, turn: ModelTurn, tools: list[Tool]) -> str:
        fault = diagnose_reply(turn.message.text, turn.stop_reason, [t.name for t in tools], phase="")
        return {"parser_off": "call written as text", "token_repeated": "a token loop", "output_limit":
                "cut at the output limit", "empty_reply": "an empty reply"}.get(fault.cause, "a text answer")

    def p_tools_with_response_format(self) -> Verdict:
        if not self.chat:
            why = "the text tool protocol sends no tools" if not self.native else \
                f"{self.client.transport}: only chat-completions servers are probed"
            return Verdict("not_applicable", why)
        body = self.client.build_body(self.request([_user(ASK_ADD)], [ADD]))  # type: ignore[attr-defined]
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
            "type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}}}
        turn = self.raw_chat(body)
        if turn.message.tool_calls:
            return Verdict("pass", "a tool call still came through with response_format json_schema")
        if turn.message.text and not find_text_calls(turn.message.text, [ADD.name]) \
                and turn.stop_reason != "max_tokens":
            return Verdict("fail", f"with response_format, a text answer and no tool call "
                                    f"({one_line(turn.message.text, 60)!r}): guided decoding masks the tool-call "
                                    f"token (the seed paper's silent tool bypass)",
                            "never send response_format/guided_json with tools (chamberlab's chat client refuses "
                            "them in extra_body; answers come through the submit tool)", warning=True)
        verdict = self._no_call(turn, [ADD], "with response_format: ")
        verdict.warning = True  # chamberlab never sends response_format: runs are unaffected
        return verdict

    def p_large_tool_schema(self) -> Verdict:
        from agent.prompt import system_prompt

        tools = run_tool_surface()
        size = len(json.dumps([t.definition() for t in tools]))
        ask = ("Submit this extraction now with submit_extraction: value 3.3, unit V, page 1, quote 'VDD 3.3 V'.")
        turn = self.complete(self.request([_user(ask)], tools, max_tokens=2 * SMALL, system=system_prompt()))
        what = f"the run's {len(tools)} tools ({size} schema chars)"
        if turn.message.tool_calls and turn.stop_reason != "max_tokens":
            return Verdict("pass", f"{'structured' if self.native else 'parsed'} call "
                                    f"{turn.message.tool_calls[0].name} with {what}")
        return self._no_call(turn, tools, f"with {what}: ")

    def p_reasoning(self) -> Verdict:
        if not asks_reasoning(self.options):
            return Verdict("not_applicable", "not asked for (no thinking/effort in the --model spec)")
        budget = (self.options.get("thinking") or {}).get("budget_tokens") or 0
        asked = ", ".join(f"{k}={v}" for k, v in (("thinking", budget), ("effort", self.options.get("effort"))) if v)
        question = _user("What is 17 * 23? Think it through, then answer with the number only.")
        turn = self.complete(self.request([question], [], max_tokens=budget + 4 * SMALL))
        text = "\n".join(b.text for b in turn.message.blocks if isinstance(b, ReasoningBlock))
        tokens = turn.usage.reasoning_output_tokens or 0
        if not text and not tokens:
            return Verdict("fail", f"reasoning asked for ({asked}) and none returned: the server or gateway drops "
                                    "it, or the chat template ignores the switch",
                            "vLLM: serve with --reasoning-parser <family> (qwen3, deepseek_r1); Qwen3: "
                            "extra.chat_template_kwargs.enable_thinking=true; a gateway: let it pass "
                            "reasoning_content through; or drop thinking/effort from the spec")
        nxt = self.body_of(self.request([question, turn.message, _user("Thanks.")], []))
        dumped = json.dumps(nxt) if nxt is not None else ""
        markers = [json.dumps(text[:40])[1:-1]] if text else []
        markers += ["encrypted_content", "signature", "reasoning_content", "thinking_blocks"]
        if nxt is not None and not any(m and m in dumped for m in markers):
            return Verdict("fail", "reasoning returned but the next request would not carry it back",
                            f"{self.client.transport} drops reasoning between turns; use an API that keeps it")
        return Verdict("pass", f"reasoning returned ({len(text)} chars shown, {tokens} tokens reported)"
                        + (" and resent on the next turn" if nxt is not None else ""))

    def p_pdf_document(self) -> Verdict:
        if not getattr(self.client, "accepts_pdf", False):
            return Verdict("not_applicable", f"{self.client.transport} sends no PDFs (the run sends page images)")
        doc = DocumentBlock("application/pdf", base64.b64encode(tiny_pdf()).decode("ascii"), title="probe.pdf")
        ask = TextBlock("Which word is printed in this PDF? Answer with the word only.")
        turn = self.complete(self.request([Message("user", [doc, ask])], []))
        if PDF_WORD.lower() in turn.message.text.lower():
            return Verdict("pass", "a PDF document block accepted and read")
        return Verdict("fail", f"a PDF block accepted but its word was not read back "
                                f"({one_line(turn.message.text, 60)!r}): the document may not be ingested",
                        "the gateway may drop or fail to convert PDF blocks; use page images")

    def _image_turns(self, png: bytes | None, max_tokens: int = SMALL) -> ModelRequest:
        call = ToolCallBlock("call_probe_img", PAGE.name, {"page": 1})
        images = (("image/png", base64.b64encode(png).decode("ascii")),) if png is not None else ()
        messages = [_user(ASK_NUMBER), Message("assistant", [TextBlock("Inspecting page 1."), call]),
                    Message("user", [ToolResultBlock(call.id, "PNG of page 1", images=images)])]
        return self.request(messages, [PAGE], max_tokens=max_tokens)

    def p_page_images(self) -> Verdict:
        """A number drawn in an image the model must read back; what one image costs in prompt tokens (the
        request again without it), and what a page image at the run's resolution would cost against the context."""
        if getattr(self.client, "image_delivery", "tool_result") == "none":
            return Verdict("not_applicable", "images=false in the --model spec: the run sends no images")
        number, png = self.secrets.number, number_png(self.secrets.number)
        turn = self.complete(self._image_turns(png))
        bare = self.complete(self._image_turns(None, max_tokens=1))
        with_image, without = turn.usage.input_tokens, bare.usage.input_tokens
        cost = with_image - without if with_image is not None and without is not None else None
        chars = len(base64.b64encode(png))
        how = f"delivered as {self.client.image_delivery}"
        spent = f"{cost} prompt tokens for a {chars}-char base64 image" if cost is not None else \
            "prompt tokens not reported"
        context = self.identity.context_tokens
        page = page_png()
        page_chars = len(base64.b64encode(page))
        if not gave_back(turn, number):
            as_text = cost is not None and cost >= TEXT_LIKE_TOKENS_PER_CHAR * chars
            if as_text:
                estimate = int(cost / chars * page_chars)
                over = f"; one page image ({page_chars} base64 chars at 100 dpi) would cost ~{estimate} tokens" + (
                    f" of a {context}-token context" if context else "")
                return Verdict("fail", f"the number {number} was not read back ({_said(turn)}); the image was read "
                                        f"as text: {spent}{over}", fix("images_as_text", self.server),
                                cause="images_as_text")
            return Verdict("fail", f"an image accepted ({how}) but the number {number} was not read back "
                                    f"({_said(turn)}; {spent})", fix("image_unread", self.server),
                            cause="image_unread")
        verdict = Verdict("pass", f"the number {number} read back from an image ({how}; {spent})")
        if cost is not None:
            paged = self.complete(self._image_turns(page, max_tokens=1))
            page_cost = paged.usage.input_tokens - without if paged.usage.input_tokens is not None else None
            if page_cost is not None:
                verdict.finding += f"; a page image at 100 dpi costs {page_cost} tokens" + (
                    f" of a {context}-token context" if context else "")
                if context and page_cost >= context:
                    return Verdict("fail", verdict.finding + ": a page does not fit",
                                    fix("image_over_context", self.server), cause="image_over_context")
        return verdict

    def p_usage(self) -> Verdict:
        if self.answered is None:
            return Verdict("not_applicable", "no answered request to read usage from")
        source, u = self.answered[0], self.answered[1].usage
        verdict = (Verdict("pass", f"usage reported ({u.input_tokens} in, {u.output_tokens} out, in {source})")
                   if u.input_tokens is not None and u.output_tokens is not None else
                   Verdict("fail", f"no usage (prompt/completion tokens) in the answer to {source}: token budgets "
                                    "and costs count nothing", "vLLM and llama.cpp report usage by default; a "
                                    "gateway may strip it (check its settings)"))
        verdict.detail["from_probe"] = source
        return verdict

    def p_text_protocol(self) -> Verdict:
        """When native calls cannot work here: does the text tool protocol? A call parsed from the reply and the
        tool result's code given back, through the same client with ?tools=text."""
        if not self.native:
            return Verdict("not_applicable", "the spec already uses the text tool protocol (the probes above)")
        if not native_broken(self.verdicts):
            return Verdict("not_applicable", "native tool calls work here (no probe showed otherwise)")
        text = TextToolClient(self.client)
        turn = self.complete(self.request([_user(ASK_ADD)], [ADD]), text)
        if not turn.message.tool_calls:
            verdict = no_call_verdict(turn, [ADD], self.model, "text protocol: ", self.server)
            if verdict.cause == "parser_off":  # the format was written but not read: none of the server's doing
                verdict.cause, verdict.fix = "prose_no_call", fix("prose_no_call", self.server)
            return verdict
        call = turn.message.tool_calls[0]
        result = self.p_tool_result(text)
        if result.status != "pass":
            result.finding = f"text protocol: call {call.name} parsed, but {result.finding}"
            return result
        return Verdict("pass", f"call {call.name}({one_line(json.dumps(call.arguments), 40)}) parsed from the "
                                f"reply and the tool result's code {self.secrets.code} given back")


RUN_TOOL_PROBES = ("tool_calls", "tool_result", "second_tool_call", "large_tool_schema")
"""The probes of what every run does with tools: call, read the result, call again, with the run's own schema."""


def native_broken(verdicts: Mapping[str, Verdict]) -> dict[str, list[str]]:
    """Cause → the run's tool probes it failed, for causes no setting of the run fixes while calls stay native."""
    broken: dict[str, list[str]] = {}
    for name in RUN_TOOL_PROBES:
        v = verdicts.get(name)
        if v is not None and v.status == "fail" and v.cause in NATIVE_BROKEN:
            broken.setdefault(str(v.cause), []).append(name)
    return broken


def recommendation(verdicts: Mapping[str, Verdict], protocol: str) -> str | None:
    """The tool protocol to run with, when the probes say native calls cannot work; None when nothing to say."""
    broken = native_broken(verdicts) if protocol == "native" else {}
    if not broken:
        return None
    why = "; ".join(f"{cause} ({', '.join(names)})" for cause, names in broken.items())
    text = verdicts.get("text_protocol")
    worked = ("; the text protocol passed its probe" if text is not None and text.status == "pass" else
              "; the text protocol failed its probe too (see text_protocol)" if text is not None
              and text.status == "fail" else "")
    return f"--tool-protocol text (?tools=text): native tool calls cannot work here: {why}{worked}"
