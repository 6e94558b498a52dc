"""Tool calls a model wrote as text, and replies that are neither a call nor an answer: found, never executed.

Why: with local open models the most common failure is not the model's reasoning but the serving stack. When the
server's tool-call parser is off, or its chat template does not carry tools, the call the model meant comes back
as text in `content` (`<tools>{...}</tools>`, `<tool_call>{...}</tool_call>`, a fenced JSON block), finish
reason `stop`, HTTP 200; a large tool schema can make a model repeat a tool-call token until the output limit;
some replies are empty. Recorded as `end_turn_without_submit` these read as a model that gave up, and are
charged to reasoning. This module recognises each shape so the loop can name it as its own run outcome (with the
parsed name and arguments kept for the record) — and nothing here runs a call: under the native protocol text is
never promoted to one, since small models also invent the values they write in such text. The text tool protocol
(agent/models/text_protocol.py) asks the model for calls in text and reads them with the same parser, which is
lenient the way small models write (fences, single quotes, doubled braces). `diagnose_reply` is the one reading
of a reply without a structured call, shared by the loop's outcomes and doctor's findings; each cause's fix text
is agent.models.serving's.
"""

from __future__ import annotations

import ast
import html
import io
import json
import re
import tokenize
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.models.serving import Cause, Server, fix

TOOL_CALL_AS_TEXT = "tool_call_as_text"
TOOL_TOKEN_REPEATED = "tool_token_repeated"
NEITHER_CALL_NOR_ANSWER = "neither_call_nor_answer"
SERVING_STACK_OUTCOMES = (TOOL_CALL_AS_TEXT, TOOL_TOKEN_REPEATED, NEITHER_CALL_NOR_ANSWER)
"""Run outcomes that point at the serving stack (parser, template, decoding), not at the model's reasoning."""

LIKELY_CAUSE = fix("parser_off")
"""The fix of a call written as text when the server is not known (the loop's outcome text)."""


@dataclass(frozen=True)
class TextCall:
    """One tool call found in text: the name and arguments the model wrote, and the form it was written in."""

    name: str
    arguments: dict[str, Any]
    form: str  # tools_tag | tool_call_tag | function_tag | fenced_json | fenced_call | bare_json | embedded_json

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "form": self.form}


_TAGGED = re.compile(r"<(tools|tool_call|function_call)>\s*(.*?)\s*(?:</\1>|$)", re.DOTALL)
_FENCED = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_TOKEN = re.compile(r"<\|?/?[A-Za-z_][\w.-]*\|?>|\[/?[A-Z][A-Z_]{2,}\]")
_FORMS = {"tools": "tools_tag", "tool_call": "tool_call_tag", "function_call": "function_tag"}


def _balanced(text: str, start: int) -> int | None:
    """The end (exclusive) of the bracketed value opening at `text[start]` ('{' or '['), quotes of either kind
    respected; None when it never closes."""
    closing = {"{": "}", "[": "]"}
    stack: list[str] = []
    quote: str | None = None
    i = start
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in closing:
            stack.append(closing[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return i + 1
        i += 1
    return None


_PY_WORDS = re.compile(r"\b(true|false|null)\b")
_NO_COLON = re.compile(r'("[A-Za-z_][\w-]*")\s+(?=[\[{"\d-]|true|false|null)')  # `"arguments" {` → `"arguments": {`


def _joins_strings(code: str) -> bool:
    """Does `code` hold two string literals in a row (which Python concatenates)?"""
    try:
        kinds = [t.type for t in tokenize.generate_tokens(io.StringIO(code).readline)
                 if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)]
    except (tokenize.TokenError, SyntaxError):
        return False
    return any(a == b == tokenize.STRING for a, b in zip(kinds, kinds[1:]))


def _lenient(span: str) -> Any:
    """A JSON value written loosely, as small models write it: strict JSON; a Python literal (single quotes,
    True/None) or JSON with single-quoted strings; doubled braces (`{{"name": ...}}`, copied from a template
    that escaped them); a colon left out after a key (`"arguments" {...}`). Raises ValueError when none of these
    reads it."""
    attempts = [span]
    if span.startswith(("{{", "[{{")) or "}}" in span:
        attempts.append(span.replace("{{", "{").replace("}}", "}"))
    attempts += [_NO_COLON.sub(r"\1: ", a) for a in list(attempts) if _NO_COLON.search(a)]
    for candidate in attempts:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            pass
        for text in (candidate, _PY_WORDS.sub(lambda m: {"true": "True", "false": "False", "null": "None"}[m.group(1)],
                                              candidate)):
            try:
                if not _joins_strings(text):  # Python would glue `"a" "b"` into "ab": a missing comma, not a value
                    return ast.literal_eval(text)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
    raise ValueError(f"not a JSON value: {span[:60]!r}")


def json_objects(text: str) -> list[Any]:
    """Every JSON value in `text`, in order (several objects may follow each other, or form a list), read
    leniently (_lenient): single quotes and doubled braces are how small models write them."""
    out: list[Any] = []
    i = 0
    while i < len(text):
        j = min((k for k in (text.find("{", i), text.find("[", i)) if k >= 0), default=-1)
        if j < 0:
            break
        end = _balanced(text, j)
        if end is None:
            i = j + 1
            continue
        try:
            value = _lenient(text[j:end])
        except ValueError:
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
            args = _lenient(args.strip()) if args.strip() else {}
        except ValueError:
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


_ESCAPED = re.compile(r"&(lt|gt|quot|#34|#39|amp);")


def unescaped(text: str) -> str:
    """`text` with HTML entities undone when it holds escaped markup (`&lt;tool_call&gt;`, `&#34;`): a chat
    template rendered with autoescape on (llama-cpp-python's chatml-function-calling) shows the model its prompt
    escaped, and the model writes its calls the same way."""
    return html.unescape(text) if _ESCAPED.search(text) else text


def find_text_calls(text: str, tool_names: Iterable[str] = ()) -> list[TextCall]:
    """The tool calls written in `text`. Tagged forms count whatever the name; fenced blocks and a reply that is
    only JSON count when the object has a name and arguments (and, if `tool_names` is given, names an offered
    tool), so a JSON answer or an example is not mistaken for a call; failing those, an object anywhere in the
    text that names an offered tool and spells out its arguments."""
    names = set(tool_names)
    text = unescaped(text)
    calls: list[TextCall] = []
    for m in _TAGGED.finditer(text):
        calls += [c for c in (_as_call(o, _FORMS[m.group(1)]) for o in json_objects(m.group(2))) if c]
    if calls:
        return calls

    def offered(c: TextCall | None) -> bool:
        return c is not None and (not names or c.name in names) and bool(c.arguments or c.name in names)

    for m in _FENCED.finditer(text):
        body = m.group(2)
        found = [c for c in (_as_call(o, "fenced_json") for o in json_objects(body)) if offered(c)]
        if not found and names:
            call = _python_call(body, names)
            found = [call] if call else []
        calls += found  # type: ignore[arg-type]
    if calls:
        return calls
    stripped = text.strip()
    if stripped[:1] in "{[":
        calls = [c for c in (_as_call(o, "bare_json") for o in json_objects(stripped)) if offered(c)]  # type: ignore[misc]
    if calls or not names:
        return calls
    # last: a call object inside prose or another tag (a small model that wrapped its call in <tool_response>):
    # only one naming an offered tool with its arguments spelt out
    return [c for o in json_objects(text) if isinstance(o, dict) and ("arguments" in o or "parameters" in o)
            and (c := _as_call(o, "embedded_json")) is not None and c.name in names]


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
    """What a reply without a structured call shows: the serving-stack outcome it ends a run with (None: not the
    serving stack's — a prose answer or a cut-off reply, which the loop ends by its stop reason), the cause (whose
    one fix text agent.models.serving holds), a one-line detail and the calls found in its text."""

    outcome: str | None
    cause: Cause
    detail: str
    calls: tuple[TextCall, ...] = ()


def diagnose_reply(text: str, stop_reason: str, tool_names: Iterable[str], *, has_reasoning: bool = False,
                   phase: str = "extraction", server: Server | None = None, model: str = "") -> ReplyFault:
    """Why a reply that should have held a structured tool call did not: the one classification the loop's
    outcomes and doctor's findings share. A token repeated to the output limit; calls written as text; an empty
    reply; a reply cut at the output limit; else prose."""
    where = f" (phase {phase})" if phase else ""
    if stop_reason == "max_tokens":
        repeated = repeated_token(text)
        if repeated is not None:
            token, count = repeated
            return ReplyFault(TOOL_TOKEN_REPEATED, "token_repeated",
                              f"the reply repeats {token!r} {count} times until the output limit, no call and no "
                              f"answer{where}; likely cause: {fix('token_repeated', server, model)}")
    calls = find_text_calls(text, tool_names)
    if calls:
        named = ", ".join(dict.fromkeys(c.name for c in calls))
        forms = ", ".join(dict.fromkeys(c.form for c in calls))
        return ReplyFault(TOOL_CALL_AS_TEXT, "parser_off",
                          f"{len(calls)} tool call(s) written as text ({named}; {forms}), not executed{where}; "
                          f"likely cause: {fix('parser_off', server, model)}", tuple(calls))
    if stop_reason == "max_tokens":
        return ReplyFault(None, "output_limit", f"the output limit was reached before any tool call{where}")
    if stop_reason in ("end_turn", "stop_sequence") and not text.strip():
        why = "only reasoning" if has_reasoning else "an empty reply"
        return ReplyFault(NEITHER_CALL_NOR_ANSWER, "empty_reply",
                          f"the turn ended with {why}: neither a tool call nor an answer{where}; likely cause: "
                          f"{fix('empty_reply', server, model)}")
    return ReplyFault(None, "prose_no_call", f"no tool call, a text answer{where}")


def classify_reply(text: str, stop_reason: str, tool_names: Iterable[str], *, has_reasoning: bool = False,
                   phase: str = "extraction", protocol: str = "native") -> ReplyFault | None:
    """The serving-stack fault a reply without structured tool calls shows, if any (diagnose_reply's, when its
    outcome is one). `stop_reason` is the loop's normalised one; a pause_turn, refusal or context overflow is
    never reclassified. Under the text protocol no server parser is involved — the client read the reply itself
    — so a call left in its text or an empty reply is the model's own end of turn (end_turn_without_submit); a
    token repeated to the output limit still points at the backend."""
    if stop_reason in ("pause_turn", "refusal", "context_exceeded", "tool_use"):
        return None
    fault = diagnose_reply(text, stop_reason, tool_names, has_reasoning=has_reasoning, phase=phase)
    if fault.outcome is None or (protocol == "text" and fault.outcome != TOOL_TOKEN_REPEATED):
        return None
    return fault
