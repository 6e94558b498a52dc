"""Tool calls a model wrote as text, and replies that are neither a call nor an answer: found, never executed.

Why: with local open models the most common failure is not the model's reasoning but the serving stack. When the
server's tool-call parser is off, or its chat template does not carry tools, the call the model meant comes back
as text in `content` (`<tools>{...}</tools>`, `<tool_call>{...}</tool_call>`, a fenced JSON block), finish
reason `stop`, HTTP 200; a large tool schema can make a model repeat a tool-call token until the output limit;
some replies are empty. Recorded as `end_turn_without_submit` these read as a model that gave up, and are
charged to reasoning. This module recognises each shape so the loop can name it as its own run outcome (with the
parsed name and arguments kept for the record) — and nothing here runs a call: text is never promoted to one,
since small models also invent the values they write in such text.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

TOOL_CALL_AS_TEXT = "tool_call_as_text"
TOOL_TOKEN_REPEATED = "tool_token_repeated"
NEITHER_CALL_NOR_ANSWER = "neither_call_nor_answer"
SERVING_STACK_OUTCOMES = (TOOL_CALL_AS_TEXT, TOOL_TOKEN_REPEATED, NEITHER_CALL_NOR_ANSWER)
"""Run outcomes that point at the serving stack (parser, template, decoding), not at the model's reasoning."""

LIKELY_CAUSE = ("the server's tool-call parser is off or its chat template does not carry tools: "
                "vLLM --enable-auto-tool-choice --tool-call-parser <family>; llama.cpp --jinja")


@dataclass(frozen=True)
class TextCall:
    """One tool call found in text: the name and arguments the model wrote, and the form it was written in."""

    name: str
    arguments: dict[str, Any]
    form: str  # tools_tag | tool_call_tag | function_tag | fenced_json | fenced_call | bare_json

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "form": self.form}


_TAGGED = re.compile(r"<(tools|tool_call|function_call)>\s*(.*?)\s*(?:</\1>|$)", re.DOTALL)
_FENCED = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_TOKEN = re.compile(r"<\|?/?[A-Za-z_][\w.-]*\|?>|\[/?[A-Z][A-Z_]{2,}\]")
_FORMS = {"tools": "tools_tag", "tool_call": "tool_call_tag", "function_call": "function_tag"}


def _objects(text: str) -> list[Any]:
    """Every JSON value in `text`, in order (several objects may follow each other, or form a list)."""
    decoder = json.JSONDecoder()
    out: list[Any] = []
    i = 0
    while i < len(text):
        j = min((k for k in (text.find("{", i), text.find("[", i)) if k >= 0), default=-1)
        if j < 0:
            break
        try:
            value, end = decoder.raw_decode(text, j)
        except json.JSONDecodeError:
            i = j + 1
            continue
        out.extend(value if isinstance(value, list) else [value])
        i = end
    return out


def _as_call(obj: Any, form: str) -> TextCall | None:
    """{"name", "arguments"|"parameters"} or {"type": "function", "function": {...}} → TextCall."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = {"_raw": args}
    return TextCall(name, args if isinstance(args, dict) else {"_raw": json.dumps(args)}, form)


def _python_call(code: str, names: set[str]) -> TextCall | None:
    """`tool_name(key=value, ...)` in a fenced block, when tool_name is an offered tool."""
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
            args: dict[str, Any] = {}
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                try:
                    args[kw.arg] = ast.literal_eval(kw.value)
                except ValueError:
                    args[kw.arg] = ast.unparse(kw.value)
            return TextCall(node.func.id, args, "fenced_call")
    return None


def find_text_calls(text: str, tool_names: Iterable[str] = ()) -> list[TextCall]:
    """The tool calls written in `text`. Tagged forms count whatever the name; fenced blocks and a reply that is
    only JSON count when the object has a name and arguments (and, if `tool_names` is given, names an offered
    tool), so a JSON answer or an example is not mistaken for a call."""
    names = set(tool_names)
    calls: list[TextCall] = []
    for m in _TAGGED.finditer(text):
        calls += [c for c in (_as_call(o, _FORMS[m.group(1)]) for o in _objects(m.group(2))) if c]
    if calls:
        return calls

    def offered(c: TextCall | None) -> bool:
        return c is not None and (not names or c.name in names) and bool(c.arguments or c.name in names)

    for m in _FENCED.finditer(text):
        body = m.group(2)
        found = [c for c in (_as_call(o, "fenced_json") for o in _objects(body)) if offered(c)]
        if not found and names:
            call = _python_call(body, names)
            found = [call] if call else []
        calls += found  # type: ignore[arg-type]
    if calls:
        return calls
    stripped = text.strip()
    if stripped[:1] in "{[":
        calls = [c for c in (_as_call(o, "bare_json") for o in _objects(stripped)) if offered(c)]  # type: ignore[misc]
    return calls


def repeated_token(text: str, min_repeats: int = 8) -> tuple[str, int] | None:
    """(token, count) when `text` is mostly one special token repeated (`<tool_call><tool_call>...`), the
    symptom of a tool schema too large for the backend; None otherwise."""
    tokens = _TOKEN.findall(text)
    if len(tokens) < min_repeats:
        return None
    token, count = Counter(tokens).most_common(1)[0]
    rest = len(" ".join(text.replace(token, " ").split()))
    if count >= min_repeats and rest <= 0.2 * len(text):
        return token, count
    return None


@dataclass(frozen=True)
class ReplyFault:
    """A reply the loop must not read as the model ending its turn: the outcome, a one-line detail and the calls
    found in its text."""

    outcome: str
    detail: str
    calls: tuple[TextCall, ...] = ()


def classify_reply(text: str, stop_reason: str, tool_names: Iterable[str], *, has_reasoning: bool = False,
                   phase: str = "extraction") -> ReplyFault | None:
    """The serving-stack fault a reply without structured tool calls shows, if any. `stop_reason` is the loop's
    normalised one; a pause_turn, refusal or context overflow is never reclassified."""
    if stop_reason in ("pause_turn", "refusal", "context_exceeded", "tool_use"):
        return None
    if stop_reason == "max_tokens":
        repeated = repeated_token(text)
        if repeated is not None:
            token, count = repeated
            return ReplyFault(TOOL_TOKEN_REPEATED,
                              f"the reply repeats {token!r} {count} times until the output limit, no call and no "
                              f"answer (phase {phase}); a large tool schema can do this on some backends: check the "
                              f"server's tool-call parser, or offer fewer or smaller tools")
    calls = find_text_calls(text, tool_names)
    if calls:
        named = ", ".join(dict.fromkeys(c.name for c in calls))
        forms = ", ".join(dict.fromkeys(c.form for c in calls))
        return ReplyFault(TOOL_CALL_AS_TEXT,
                          f"{len(calls)} tool call(s) written as text ({named}; {forms}), not executed "
                          f"(phase {phase}); likely cause: {LIKELY_CAUSE}", tuple(calls))
    if stop_reason in ("end_turn", "stop_sequence") and not text.strip():
        why = "only reasoning" if has_reasoning else "an empty reply"
        return ReplyFault(NEITHER_CALL_NOR_ANSWER,
                          f"the turn ended with {why}: neither a tool call nor an answer (phase {phase}); a "
                          f"call planned in reasoning and never emitted, or a parser that swallowed it: check "
                          f"the server's tool-call and reasoning parsers")
    return None
