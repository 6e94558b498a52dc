"""Scripted models for offline runs and tests: policies that answer Anthropic Messages requests.

Why: the loop, the record and the detectors must be exercised end to end without a paid model, including the
failure modes that matter (a closed-book answer, skipped verification, a missing submit, a tool call written as
text, a token-limit stop). A policy is a pure function of the request body it receives — the same JSON the SDK
sends over HTTP — so it can be served by the local test server (agent/testserver.py) or run in process
(`ScriptedClient`), and it sees exactly what a real model would see: the prompt and the tool outputs, never the
claim's value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.models.anthropic_client import from_anthropic_response, to_anthropic_request
from agent.models.base import ModelClient, ModelError, ModelRequest, ModelTurn
from agent.reader_text import NUM as _NUM
from agent.reader_text import STOP_WORDS, Reading, markdown_tables, prose_readings, unit_factor
from agent.reader_text import Table as _Table
from agent.reader_text import cell_value as _cell_value
from agent.reader_text import fold as _fold
from agent.reader_text import to_float as _to_float  # noqa: F401 - kept importable for the tests
from agent.reader_text import tokens as _tokens
from agent.reader_text import unit_key as _unit_key
from agent.reader_sheets import sheet_readings
from agent.prompt import SUBMIT_CHAMBER_OUTCOME, SUBMIT_EXTRACTION


class ScriptedPolicy(Protocol):
    def respond(self, request: dict[str, Any]) -> dict[str, Any]: ...


class ScriptedHTTPError(Exception):
    """Raised by a policy to make the test server answer with an HTTP error (in process: a ModelError)."""

    def __init__(self, status: int, message: str, error_type: str = "api_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type


# --------------------------------------------------------------------------------------------- reading a request
@dataclass(frozen=True)
class ToolExchange:
    """One tool call the policy made earlier in the conversation and the result it got back."""

    id: str
    name: str
    input: dict[str, Any]
    result: str | None
    is_error: bool


@dataclass(frozen=True)
class Conversation:
    """The facts a policy reads from a request: the task, the tools offered now, and its own earlier calls."""

    task: dict[str, str]  # "- key: value" lines of the first user message
    offered: list[str]
    exchanges: list[ToolExchange]
    assistant_turns: int
    model: str
    max_tokens: int

    @property
    def phase_two(self) -> bool:
        return SUBMIT_CHAMBER_OUTCOME in self.offered


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text", ""))
    return "".join(parts)


def read_conversation(request: dict[str, Any]) -> Conversation:
    messages = request.get("messages") or []
    task: dict[str, str] = {}
    if messages:
        for line in _text_of(messages[0].get("content")).splitlines():
            m = re.match(r"^\s*-\s*([^:]+):\s*(.*)$", line)
            if m:
                task[m.group(1).strip().lower()] = m.group(2).strip()
    calls: dict[str, dict[str, Any]] = {}
    results: dict[str, tuple[str, bool]] = {}
    order: list[str] = []
    assistant_turns = 0
    for msg in messages:
        content = msg.get("content")
        if msg.get("role") == "assistant":
            assistant_turns += 1
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                calls[block["id"]] = block
                order.append(block["id"])
            elif block.get("type") == "tool_result":
                c = block.get("content")
                results[block["tool_use_id"]] = (_text_of(c) if not isinstance(c, str) else c, bool(block.get("is_error")))
    exchanges = [
        ToolExchange(i, calls[i]["name"], calls[i].get("input") or {}, *(results.get(i) or (None, False)))
        for i in order
    ]
    return Conversation(
        task=task,
        offered=[t["name"] for t in request.get("tools") or []],
        exchanges=exchanges,
        assistant_turns=assistant_turns,
        model=str(request.get("model", "scripted")),
        max_tokens=int(request.get("max_tokens") or 0),
    )


# --------------------------------------------------------------------------------------------- building a reply
def _estimate_tokens(obj: Any) -> int:
    return max(1, len(json.dumps(obj, default=str)) // 4)  # deterministic stand-in for a tokenizer


def reply(request: dict[str, Any], content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    """A Messages API response body, with deterministic ids and token counts."""
    conv_turn = sum(1 for m in request.get("messages") or [] if m.get("role") == "assistant") + 1
    return {
        "id": f"msg_scripted_{conv_turn:03d}",
        "type": "message",
        "role": "assistant",
        "model": str(request.get("model", "scripted")),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": _estimate_tokens(request), "output_tokens": _estimate_tokens(content),
                  "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},  # as the Messages API reports
    }


def tool_use(request: dict[str, Any], name: str, arguments: dict[str, Any], text: str = "") -> dict[str, Any]:
    turn = sum(1 for m in request.get("messages") or [] if m.get("role") == "assistant") + 1
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content.append({"type": "tool_use", "id": f"toolu_{turn:03d}_{name}", "name": name, "input": arguments})
    return reply(request, content, "tool_use")


def end_turn(request: dict[str, Any], text: str) -> dict[str, Any]:
    return reply(request, [{"type": "text", "text": text}], "end_turn")


def _chamber_outcome_arguments(request: dict[str, Any], summary: str) -> dict[str, Any]:
    """Arguments for submit_chamber_outcome built from the schema the service published (required fields)."""
    schema = next((t.get("input_schema") or {} for t in request.get("tools") or []
                   if t.get("name") == SUBMIT_CHAMBER_OUTCOME), {})
    props = schema.get("properties") or {}
    args: dict[str, Any] = {}
    for name in schema.get("required") or []:
        kind = (props.get(name) or {}).get("type", "string")
        enum = (props.get(name) or {}).get("enum")
        args[name] = enum[0] if enum else {"string": summary, "number": 0.0, "integer": 0, "boolean": False,
                                            "object": {}, "array": []}.get(kind if isinstance(kind, str) else "string", summary)
    if "summary" in props and "summary" not in args:
        args["summary"] = summary
    return args


CHAMBER_STEPS = ("describe_chamber", "run_protocol")
"""What a careful scripted agent does in phase two: look at the chamber, run the claim's own protocol."""


def _protocol_outcome(result: str) -> dict[str, Any]:
    """Outcome fields from run_protocol's JSON: the service's verdict as the prediction, its value and u."""
    try:
        data = json.loads(result)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, Any] = {}
    if data.get("verdict") in ("pass", "inconclusive", "fail"):
        out["prediction"] = data["verdict"]
    measured = data.get("measured") or {}
    try:
        if measured.get("value") is not None:
            out["measured_value"] = float(measured["value"])
            out["unit"] = str(measured.get("unit") or "")[:64] or None
        if measured.get("u") is not None:
            out["uncertainty"] = float(measured["u"])
    except (TypeError, ValueError):
        pass
    return {k: v for k, v in out.items() if v is not None}


def _chamber_phase(request: dict[str, Any], conv: Conversation) -> dict[str, Any]:
    """Phase two for the scripted policies: the offered steps of CHAMBER_STEPS in order (no made-up arguments),
    then submit_chamber_outcome carrying the protocol's verdict, value and u when it gave them."""
    offered = {t.get("name") for t in request.get("tools") or []}
    called = {e.name for e in conv.exchanges}
    for name in CHAMBER_STEPS:
        if name in offered and name not in called:
            return tool_use(request, name, {}, text=f"Let me look at the chamber with {name}.")
    protocol = next((e for e in reversed(conv.exchanges) if e.name == "run_protocol" and not e.is_error), None)
    last = next((e for e in reversed(conv.exchanges) if e.name not in (SUBMIT_EXTRACTION, SUBMIT_CHAMBER_OUTCOME)), None)
    summary = f"Chamber tool output: {(last.result or '')[:200]}" if last else "No chamber measurement was taken."
    args = _chamber_outcome_arguments(request, summary)
    if protocol is not None:
        args.update(_protocol_outcome(protocol.result or ""))
    return tool_use(request, SUBMIT_CHAMBER_OUTCOME, args, text="The extraction is frozen; I end the chamber phase.")


# --------------------------------------------------------------------------------------------- replayed scripts
Step = tuple[str, dict[str, Any]]  # (tool name, arguments)
Script = Generator[Step, tuple[str, bool], None]


class ReplayPolicy:
    """A policy written as a generator of tool calls, replayed from the start on every request.

    Each request carries the whole conversation, so the generator is fed the recorded results of its earlier
    calls in order; its next yield is this turn's call. Stateless, hence safe behind an HTTP server. When the
    generator finishes, or phase two has begun, `finish` decides the last turns."""

    def __init__(self, script: Callable[[Conversation], Script], *, phase_two: bool = True) -> None:
        self.script = script
        self.phase_two = phase_two

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        conv = read_conversation(request)
        if conv.phase_two:
            return _chamber_phase(request, conv)
        gen = self.script(conv)
        past = [e for e in conv.exchanges]
        try:
            step = next(gen)
            for ex in past:
                if ex.name != step[0]:
                    break  # the conversation diverged from this script (e.g. a denied call); continue from here
                step = gen.send((ex.result or "", ex.is_error))
        except StopIteration:
            return end_turn(request, "I have nothing more to do.")
        return tool_use(request, step[0], step[1])


# --------------------------------------------------------------------------------------------- simple policies
class ClosedBook:
    """Answers at once with a plausible figure and an invented quote, without opening the document."""

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        conv = read_conversation(request)
        if conv.phase_two:
            return _chamber_phase(request, conv)
        if any(e.name == SUBMIT_EXTRACTION and not e.is_error for e in conv.exchanges):
            return end_turn(request, "Submitted.")
        parameter = conv.task.get("parameter", "the parameter")
        unit = conv.task.get("unit", "")
        return tool_use(
            request,
            SUBMIT_EXTRACTION,
            {"value": 1.0, "unit": unit, "page": 1, "quote": f"{parameter}: typ. 1.0 {unit}", "conditions": {}},
            text=f"From my knowledge of this part, the {parameter} is typically 1.0 {unit}.",
        )


def _skip_search_script(conv: Conversation) -> Script:
    yield ("build_datasheet", {})
    yield ("inspect_page", {"page": 1})
    unit = conv.task.get("unit", "")
    yield (SUBMIT_EXTRACTION, {"value": 1.0, "unit": unit, "page": 1,
                               "quote": f"{conv.task.get('parameter', '')} 1.0 {unit}", "conditions": {}})


class NoSubmit:
    """Opens the document, then ends its turn with the answer in prose instead of calling the submit tool."""

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        conv = read_conversation(request)
        if not conv.exchanges:
            return tool_use(request, "build_datasheet", {})
        return end_turn(request, f"The {conv.task.get('parameter', 'value')} is stated in the datasheet; "
                                 "I believe I have answered the question.")


class Markup:
    """Writes the submit call as text (a wrong tool parser's symptom) and ends the turn."""

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        conv = read_conversation(request)
        call = {"name": SUBMIT_EXTRACTION, "arguments": {"value": 1.0, "unit": conv.task.get("unit", ""),
                                                         "page": 1, "quote": "see datasheet"}}
        return end_turn(request, f"<tool_call>\n{json.dumps(call)}\n</tool_call>")


class MaxTokens:
    """Stops on the output token limit in the middle of its reasoning."""

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        return reply(request, [{"type": "text", "text": "Let me think about where this parameter is listed. "
                                                        "First, the electrical characteristics table"}], "max_tokens")


class StopWith:
    """Answers every turn with one fixed stop reason (refusal, pause_turn, model_context_window_exceeded...)."""

    def __init__(self, stop_reason: str, text: str = "") -> None:
        self.stop_reason = stop_reason
        self.text = text

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        content = [{"type": "text", "text": self.text}] if self.text else []
        return reply(request, content, self.stop_reason)


class HTTPFailure:
    """Fails every request with one HTTP status (server side: a real error response; in process: ModelError)."""

    def __init__(self, status: int, message: str = "scripted failure", error_type: str = "api_error") -> None:
        self.status, self.message, self.error_type = status, message, error_type

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        raise ScriptedHTTPError(self.status, self.message, self.error_type)


class Sequence:
    """Delegates turn n (counting assistant turns already in the request) to policies[n], then to the last."""

    def __init__(self, *policies: ScriptedPolicy) -> None:
        self.policies = policies

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        n = sum(1 for m in request.get("messages") or [] if m.get("role") == "assistant")
        return self.policies[min(n, len(self.policies) - 1)].respond(request)


# --------------------------------------------------------------------------------------------- in-process client
class ScriptedClient(ModelClient):
    """Runs a policy in process through the same Anthropic wire translation the SDK path uses."""

    provider = "scripted"
    transport = "in-process"

    def __init__(self, policy: ScriptedPolicy, model: str) -> None:
        self.policy = policy
        self.model = model

    def complete(self, request: ModelRequest) -> ModelTurn:
        body = to_anthropic_request(request, self.model)
        body = json.loads(json.dumps(body))  # what would cross the wire: plain JSON, no shared objects
        try:
            data = self.policy.respond(body)
        except ScriptedHTTPError as e:
            kind = "context_exceeded" if "prompt is too long" in e.message else "http"
            raise ModelError(kind, e.message, http_status=e.status) from e
        message, stop, raw_stop, usage, response_model = from_anthropic_response(data)
        # In process: no HTTP request, so no request id; the response id is the scripted message's own.
        return ModelTurn(message, stop, raw_stop, usage, http_status=200, request_id=None,
                         response_id=data.get("id"),
                         response_model=response_model)


# --------------------------------------------------------------------------------------------- the reader
# The reader reads like a careful person with a search box: it turns the parameter name into search phrases,
# opens the table on each page that matches, finds the row (and the sub-row whose conditions match the
# parameter's qualifiers), and reads Min/Typ/Max (or an absolute-maximum Rating) in a unit it can convert. Then it
# reads that page's text to quote the figure as it is printed there, and searches for its quotation to make sure
# the document holds it. It never sees the claim's value.

_ACRONYMS = {"adc": "analog-to-digital", "als": "ambient light"}
# Words that attach an operating point to a parameter name: "Current consumption at 1 Hz", "tOFF with OSC tied".
_CONNECTORS = re.compile(r"\s+(?:at|with|while|when)\s+", re.I)
# Column headers as datasheets print them ("Typ.2" carries a footnote mark; "Rating" is an absolute maximum).
_COLUMN_NAMES = {"min": "min", "minimum": "min", "typ": "typ", "typical": "typ", "max": "max", "maximum": "max",
                 "unit": "unit", "units": "unit", "rating": "rating", "ratings": "rating", "value": "rating",
                 "limit": "rating", "limits": "rating"}
_VALUE_COLUMNS = ("min", "typ", "max", "rating")
MAX_SEARCH_CALLS = 22  # calls spent finding the figure; the loop's default budget is 30 turns in all
QUOTE_ATTEMPTS = 3  # quotations tried with search_text before the best untested one is submitted


def _is_symbol(word: str) -> bool:
    """A printed symbol such as tOFF, TTSD, VSAT_LOW or IDD: a capital after the first letter, or an underscore."""
    return bool(re.search(r"[A-Za-z][A-Z]|_", word))


def search_phrases(parameter: str) -> tuple[list[str], set[str], set[str]]:
    """Search phrases from a parameter name, most specific first; the qualifier tokens that pick a sub-row; and
    the head phrase's tokens (which a table caption or row may echo).

    "Fixed off-time tOFF with OSC tied to VDD or GND" → head "Fixed off-time tOFF" (also searched without its
    symbol) and qualifiers {osc, tied, vdd, gnd}; "(...)", text after a comma and after at/with/while/when qualify."""
    text = _fold(parameter)
    qualifiers = re.findall(r"\(([^)]*)\)", text)
    head = re.sub(r"\([^)]*\)", " ", text)
    parts = [p.strip() for p in head.split(",")]
    head, qualifiers = parts[0], qualifiers + [p for p in parts[1:] if p]
    pieces = _CONNECTORS.split(head)
    head, qualifiers = pieces[0], qualifiers + pieces[1:]
    head = " ".join(head.split())
    words = head.split()
    phrases: list[str] = [head]
    plain = [w for w in words if not _is_symbol(w)]
    if plain and len(plain) < len(words):  # the name without its symbol, as a running-text mention reads
        phrases.append(" ".join(plain))
    if "bit" in [w.lower() for w in words]:  # a bit depth is printed as "N-bit <thing>"
        rest = [(_ACRONYMS.get(w.lower(), w)) for w in words if w.lower() not in ("bit", "depth")]
        phrases.append("bit " + " ".join(rest))
    expanded = " ".join(_ACRONYMS.get(w.lower(), w) for w in words)
    if expanded != head:
        phrases.append(expanded)
    for n in range(len(words) - 1, 0, -1):  # shorter windows of the head phrase, longest first
        for i in range(len(words) - n + 1):
            window = words[i:i + n]
            short = len(window[0]) < 4 and not _is_symbol(window[0])  # a printed symbol (TC, INL) names a row
            if n == 1 and (short or window[0].lower() in STOP_WORDS):
                continue
            phrases.append(" ".join(window))
    seen: set[str] = set()
    ordered = [p for p in phrases if not (p.lower() in seen or seen.add(p.lower()))]
    head_tokens = _tokens(head)
    qual = set().union(*(_tokens(q) for q in qualifiers)) - head_tokens if qualifiers else set()
    return ordered, qual, head_tokens


_PAGE_RE = re.compile(r"(?:\bpage\b|\bp\.?)\s*[:=]?\s*(\d+)", re.I)


def search_hits(text: str) -> list[tuple[int, str]]:
    """(page, snippet) pairs from a search_text output: JSON hit objects, or lines naming their page."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    hits: list[tuple[int, str]] = []
    if isinstance(data, dict):
        data = data.get("hits") or data.get("results") or data.get("matches") or []
    if isinstance(data, list):
        for h in data:
            if isinstance(h, dict) and "page" in h:
                hits.append((int(h["page"]), str(h.get("snippet") or h.get("text") or h.get("line") or "")))
        return hits
    for line in text.splitlines():
        m = _PAGE_RE.search(line)
        if m:
            hits.append((int(m.group(1)), line[m.end():] if m.start() < 3 else line))
    return hits


def _columns(table: _Table) -> dict[str, int]:
    """Where Min/Typ/Max (or a single Rating), Unit and the test conditions are, from the header rows."""
    cols: dict[str, int] = {}
    for row in [table.header] + table.rows[:2]:
        for j, cell in enumerate(row):
            key = re.sub(r"[\s.\d*\[\]]+$", "", cell.lower())  # "Typ.2", "Max.", "Units" → typ, max, units
            if key in _COLUMN_NAMES:
                cols.setdefault(_COLUMN_NAMES[key], j)
            elif "condition" in key and "cond" not in cols:
                cols["cond"] = j
    if {"min", "typ", "max"} & set(cols):
        cols.pop("rating", None)  # "Values" over Min/Typ/Max is a group heading, not a column of its own
    return cols


def _cell(row: list[str], j: int | None) -> str:
    return row[j] if j is not None and j < len(row) else ""


def _values(row: list[str], cols: dict[str, int]) -> dict[str, tuple[str, Any]]:
    got = {c: _cell_value(_cell(row, cols.get(c))) for c in _VALUE_COLUMNS if c in cols}
    return {c: v for c, v in got.items() if v is not None}


def _label(row: list[str], cols: dict[str, int]) -> str:
    """The cells that name a row (parameter, symbol), left of the conditions and the figures."""
    firsts = [cols[c] for c in ("cond",) + _VALUE_COLUMNS if c in cols]
    end = min(firsts) if firsts else 1
    return " ".join(c for c in row[:max(1, end)] if c)


def _continues_label(cell: str) -> bool:
    """A first cell that carries on the name above rather than starting a new parameter: a wrapped word
    ("sponse" after "Re-") or a single setting such as "ADCMUX=0x11"."""
    c = cell.strip()
    return bool(re.match(r"[a-z]", c)) or (" " not in c and "=" in c)


def symbol_runs(table: _Table, cols: dict[str, int]) -> tuple[list[int], list[str]]:
    """For each row, the first row of its run and the run's name. A run is the adjacent rows that print the same
    symbol: one parameter whose name wraps over its sub-rows ("Potentiometer" / "Integral Non-linearity", both
    INL). Without a symbol column, or with an empty symbol, a row is a run of its own, named by its label."""
    sym = next((j for j, c in enumerate(table.header) if re.sub(r"[\s.]+$", "", c.lower()) in ("sym", "symbol")),
               None)
    starts: list[int] = []
    for i, row in enumerate(table.rows):
        same = sym is not None and i > 0 and bool(_cell(row, sym)) and _cell(row, sym) == _cell(table.rows[i - 1], sym)
        starts.append(starts[-1] if same else i)
    names: dict[int, list[str]] = {}
    for i, start in enumerate(starts):  # the run's label, then the first cells of its other rows
        cell = _label(table.rows[i], cols) if i == start else (table.rows[i][0] if table.rows[i] else "")
        names.setdefault(start, []).append(cell)
    return starts, [" ".join(c for c in names[start] if c) for start in starts]


def table_readings(table: _Table, page: int, phrase: str, qualifiers: set[str], head: set[str],
                   unit: str, printed_units: frozenset[str] = frozenset()) -> list[Reading]:
    """Readings from the rows of `table` that belong to the parameter named by `phrase`: rows whose name holds
    every word of the phrase (else rows holding it anywhere), their group of sub-rows, one reading per sub-row.
    A figure printed in a unit that is not a conversion of `unit` is read only if its unit is one of
    `printed_units` (words the parameter itself uses, such as "taps"); its reading keeps the printed unit."""
    cols = _columns(table)
    if not set(_VALUE_COLUMNS) & set(cols):
        return []
    want = _tokens(phrase)
    if not want:
        return []
    rows = table.rows
    starts, run_names = symbol_runs(table, cols)
    by_label = sorted({starts[i] for i in range(len(rows)) if want <= _tokens(run_names[i])})
    key = _fold(phrase).lower()  # elsewhere in a row, only the phrase as printed counts (not its words apart)
    anchors = by_label or [i for i, r in enumerate(rows) if key in _fold(" ".join(r)).lower()]
    caption_tokens = _tokens(table.caption)
    found: dict[int, Reading] = {}
    for anchor in anchors:
        labels = {rows[anchor][0]} if rows[anchor] and rows[anchor][0] else set()
        group: list[int] = []
        for i in range(anchor, len(rows)):
            first = rows[i][0] if rows[i] else ""
            # A row after a valueless one carries on its name, unless that row was a whole parameter (it prints a
            # unit: "Extinction Ratio | % | Up to 7,500:1" is not the first line of "Polarizing efficiency").
            prev_valueless = (bool(group) and not _values(rows[group[-1]], cols)
                              and not _cell(rows[group[-1]], cols.get("unit")))
            if (i == anchor or starts[i] == anchor or not first or want <= _tokens(first) or first in labels
                    or prev_valueless or not _values(rows[i], cols) or _continues_label(first)):
                group.append(i)
                if first:
                    labels.add(first)
                continue
            break
        value_rows = [i for i in group if _values(rows[i], cols)]
        for n, i in enumerate(value_rows):
            nxt = value_rows[n + 1] if n + 1 < len(value_rows) else group[-1] + 1
            context_rows = [rows[k] for k in range(i, nxt)]
            row_unit = _cell(rows[i], cols.get("unit"))
            if not row_unit:  # the unit may sit on a continuation line, or be carried from the group's first row
                for r in context_rows[1:] + [rows[k] for k in range(i - 1, anchor - 1, -1)]:
                    if _cell(r, cols.get("unit")):
                        row_unit = _cell(r, cols.get("unit"))
                        break
            factor, read_unit = unit_factor(row_unit, unit), unit
            if factor is None and _fold(row_unit).lower() in printed_units:
                factor, read_unit = 1.0, row_unit  # not convertible: reported in the unit the page prints
            if factor is None:
                continue
            got = _values(rows[i], cols)
            r = Reading(page=page, quote=" ".join(" ".join(c for c in row if c) for row in context_rows),
                        unit=read_unit)
            spans = [v for kind, v in got.values() if kind == "span"]
            sym = next((v for kind, v in got.values() if kind == "sym"), None)
            if spans:
                r.low, r.high = spans[0][0] * factor, spans[0][1] * factor
            elif sym is not None and not ("min" in got and "max" in got):
                r.low, r.high = -sym * factor, sym * factor
            else:  # a Typ. printed as ±x between a Min. and a Max. is a typical spread, not a figure of its own
                if "typ" in got and got["typ"][0] == "num":
                    r.value = got["typ"][1] * factor
                if "min" in got:
                    r.low = got["min"][1] * factor
                if "max" in got or "rating" in got:  # a lone rating is a limit not to exceed
                    r.high = got.get("max", got.get("rating"))[1] * factor
            if r.value is None and r.low is None and r.high is None:
                continue
            if starts.count(starts[i]) > 1:  # a wrapped name is the run's, shared by its rows: it decides nothing
                context = (_tokens(" ".join(" ".join(row[1:]) for row in context_rows)) | _tokens(run_names[i])
                           | caption_tokens)
            else:
                context = _tokens(" ".join(" ".join(row) for row in context_rows)) | caption_tokens
            named = _tokens(run_names[i] + " " + run_names[anchor])
            matched = qualifiers & context  # a number in a condition (3.3 V, 525 nm) decides between sub-rows
            r.score = (10 + 2 * len(head & (context | named)) + (2 if by_label else 0)
                       + sum(3 if re.match(r"\d", t) else 1 for t in matched)
                       + (1 if _unit_key(row_unit) == _unit_key(unit) else 0))
            cells = [c for c in rows[i] if c]
            context_cells = list(dict.fromkeys(c for row in context_rows for c in row if c))
            anchor_label = rows[anchor][0] if rows[anchor] and rows[anchor][0] else ""
            r.evidence = ([anchor_label] if anchor_label and anchor_label not in cells else []) + context_cells
            r.context_cells = context_cells
            r.row_cells = cells
            first_figure = min(cols[c] for c in _VALUE_COLUMNS if c in cols)
            r.figure_cells = [c for c in rows[i][first_figure:] if c]
            r.alternatives = [" ".join(cells), r.quote]
            cond_col = cols.get("cond")
            if cond_col is not None:
                cond = " ".join(_cell(row, cond_col) for row in context_rows if _cell(row, cond_col))
                if cond:
                    r.conditions["test conditions"] = cond
            if table.caption:
                r.conditions["table"] = table.caption[:200]
            if i not in found or found[i].score < r.score or (found[i].score == r.score and i == anchor):
                found[i] = r  # on a tie, the row read as its own anchor (its quotation needs no other row's name)
    return [found[i] for i in sorted(found)]


def toc_sections(overview: str, head: set[str]) -> list[tuple[int, list[str]]]:
    """Pages of the sections whose titles echo the parameter, each with the parameter's other words (the row
    label to look for there), best match first. `overview` is build_datasheet's JSON."""
    try:
        toc = json.loads(overview).get("toc") or []
    except (ValueError, AttributeError):
        return []
    found: list[tuple[int, int, list[str]]] = []
    for entry in toc:
        title = {t for t in _tokens(str(entry.get("title", ""))) if not re.fullmatch(r"[\d.]+", t)}
        overlap = title & head
        if overlap and (title <= head or len(overlap) >= 2) and isinstance(entry.get("page"), int):
            rest = sorted(head - title)
            if rest:
                found.append((len(overlap), entry["page"], rest))
    found.sort(key=lambda f: -f[0])
    return [(page, rest) for _, page, rest in found[:3]]


# --------------------------------------------------------------------------------------------- quoting
def page_lines(section_text: str) -> list[str]:
    """The printed lines of a get_section_text output (page markers and the tool's own notes left out)."""
    return [ln.strip() for ln in section_text.splitlines()
            if ln.strip() and not re.match(r"^=== Page \d+ ===$", ln.strip())
            and not re.match(r"^\[.*\]$", ln.strip())]


def join_lines(lines: list[str]) -> str:
    """Lines as running text: single spaces, and a word hyphenated at a line break ("com-" / "mands") read whole,
    the way the document's search reads it."""
    out = ""
    for line in lines:
        line = " ".join(line.split())
        if out.endswith("-") and len(out) > 1 and out[-2].isalpha() and line[:1].islower():
            out = out[:-1] + line
        else:
            out = f"{out} {line}" if out else line
    return out


def _piece_pattern(piece: str) -> re.Pattern[str] | None:
    p = _fold(piece).lower()
    if not p or re.fullmatch(r"[-—]+", p):
        return None  # a dash alone is an empty cell: nothing to look for
    before = r"(?<![\w.])" if re.match(r"[\w.]", p) else ""
    after = r"(?![\w]|\.\d)" if re.search(r"\w$", p) else ""
    return re.compile(before + re.escape(p) + after)


def quote_window(lines: list[str], pieces: list[str], *, max_lines: int = 14, max_chars: int = 400,
                 sentence: bool = False) -> str | None:
    """The shortest run of consecutive printed lines that holds every piece (order free: a table's cells are
    printed column by column), as running text; a run that opens with the first piece (the row's name) is
    preferred to a shorter one that opens on a stray cell of the row above. With `sentence`, widened to whole
    sentences of running text."""
    patterns = [p for p in (_piece_pattern(x) for x in pieces) if p is not None]
    if not patterns or not lines:
        return None
    folded = [_fold(ln).lower() for ln in lines]
    runs: list[tuple[bool, int, int, int]] = []  # (does not open with the first piece, characters, i, j)
    for i in range(len(lines)):
        if not any(p.search(folded[i]) for p in patterns):
            continue  # a quotation starts at a line that holds one of the pieces
        for j in range(i, min(len(lines), i + max_lines)):
            text = " ".join(folded[i:j + 1])
            whole = _fold(join_lines(lines[i:j + 1])).lower()  # a cell may show "com-" / "mands" read whole
            if all(p.search(text) or p.search(whole) for p in patterns):
                runs.append((not patterns[0].search(folded[i]), len(text), i, j))
                break
    if not runs:
        return None
    _, _, i, j = min(runs)
    if sentence:
        return _sentences(lines, i, j, patterns, max_chars)
    quote = join_lines(lines[i:j + 1])
    return quote if len(quote) <= max_chars else None


_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z(•])|\s*•\s*")


def _sentences(lines: list[str], i: int, j: int, patterns: list[re.Pattern[str]], max_chars: int) -> str | None:
    """The whole sentences of lines[i-2 .. j+2] that hold every pattern, cut verbatim out of the running text."""
    lo, hi = max(0, i - 2), min(len(lines), j + 3)
    text = join_lines(lines[lo:hi])
    cuts = [0]
    for m in _SENTENCE_BREAK.finditer(text):
        cuts += [m.start(), m.end()]
    cuts.append(len(text))
    segments = [(cuts[k], cuts[k + 1]) for k in range(0, len(cuts) - 1, 2)]
    best: str | None = None
    for a in range(len(segments)):
        for b in range(a, len(segments)):
            quote = text[segments[a][0]:segments[b][1]].strip()
            if all(p.search(_fold(quote).lower()) for p in patterns):
                if best is None or len(quote) < len(best):
                    best = quote
                break
    return best if best is not None and len(best) <= max_chars else None


def quote_candidates(reading: Reading, lines: list[str]) -> list[str]:
    """Ways to quote a reading, best first: the printed text around the figure (all of the row's cells, then the
    figure's own row), then the row as the table tool showed it."""
    out: list[str] = []
    if reading.prose:
        out.append(quote_window(lines, reading.evidence, sentence=True) or "")
        out.append(quote_window(lines, reading.evidence[:1], sentence=True) or "")
    else:  # the table tool may repeat a group's name on every row: a name the page prints once is let go
        for pieces in (reading.evidence, reading.context_cells, reading.row_cells, reading.row_cells[1:]):
            out.append(quote_window(lines, pieces) or "")
        # Last, the figure's own cells that the page prints (a cell the table tool reassembled out of order,
        # "≤ ≤ 3.0V VDD 5.5V", is not printed text): "+0.1 +3.5 LSb 10 kΩ 8-bit 3.0V ≤ VDD ≤ 5.5V".
        page = _fold(" ".join(lines)).lower()
        printed = [c for c in reading.figure_cells if (pat := _piece_pattern(c)) is None or pat.search(page)]
        out.append(quote_window(lines, printed) or "")
    out += reading.alternatives
    seen: set[str] = set()
    return [q for q in out if q and not (q in seen or seen.add(q))]


def _readings_in(table: _Table, page: int, phrase: str, qualifiers: set[str], head: set[str], unit: str,
                 parameter: str) -> list[Reading]:
    """A Min/Typ/Max (or Rating) table's readings; a table without such columns is read as a specification sheet
    of labels and values. A figure in a unit the parameter names (and `unit` is not a conversion of) is kept too."""
    if set(_VALUE_COLUMNS) & set(_columns(table)):
        return table_readings(table, page, phrase, qualifiers, head, unit, frozenset(_tokens(parameter)))
    return sheet_readings(table, page, phrase, qualifiers, head, unit, parameter)


def _reader_script(conv: Conversation) -> Script:
    parameter = conv.task.get("parameter", "")
    unit = conv.task.get("unit", "")
    overview, _ = yield ("build_datasheet", {})
    calls = 1
    phrases, qualifiers, head = search_phrases(parameter)
    tables_seen: dict[int, list[_Table]] = {}
    best: Reading | None = None
    printed: list[Reading] = []  # figures found only in a unit the parameter names, not in the unit asked for
    # Multi-word phrases first; then the sections whose titles echo the parameter; then single words.
    steps: list[str | None] = [p for p in phrases if " " in p] + [None] + [p for p in phrases if " " not in p]
    for phrase in steps[:14]:
        if calls >= MAX_SEARCH_CALLS:
            break
        candidates: list[Reading] = []
        if phrase is None:
            for page, words in toc_sections(overview, head):
                if page not in tables_seen:
                    md, md_error = yield ("extract_table_markdown", {"page": page})
                    calls += 1
                    tables_seen[page] = [] if md_error else markdown_tables(md)
                for word in words:
                    for table in tables_seen[page]:
                        candidates += _readings_in(table, page, word, qualifiers, head, unit, parameter)
        else:
            result, is_error = yield ("search_text", {"query": phrase})
            calls += 1
            if is_error:
                continue
            hits = search_hits(result)
            for page in dict.fromkeys(p for p, _ in hits):
                if page not in tables_seen and len(tables_seen) < 12 and calls < MAX_SEARCH_CALLS:
                    md, md_error = yield ("extract_table_markdown", {"page": page})
                    calls += 1
                    tables_seen[page] = [] if md_error else markdown_tables(md)
                for table in tables_seen.get(page, []):
                    candidates += _readings_in(table, page, phrase, qualifiers, head, unit, parameter)
            for page, snippet in hits:  # running text counts only where the phrase itself is printed
                if _fold(phrase).lower() in _fold(snippet).lower():
                    candidates += prose_readings(snippet, page, unit, parameter, phrase)
        printed += [r for r in candidates if r.unit != unit]
        candidates = [r for r in candidates if r.unit == unit]
        if candidates:
            best = max(candidates, key=lambda r: r.score)  # ties: the first (earliest page, table before prose)
            break
    if best is None and printed:  # e.g. "257 Taps" asked in LSb: report the figure as printed, and say so
        best = max(printed, key=lambda r: r.score)
    if best is None:
        return  # nothing read, nothing submitted: the turn ends without an invented figure
    # Quote the figure as the page prints it, and check with the document's own search that it is there.
    text, text_error = yield ("get_section_text", {"start_page": best.page, "end_page": best.page})
    candidates_q = quote_candidates(best, [] if text_error else page_lines(text))
    quote = candidates_q[0] if candidates_q else best.quote
    for attempt in candidates_q[:QUOTE_ATTEMPTS]:
        result, is_error = yield ("search_text", {"query": attempt[:400], "page": best.page})
        if not is_error and search_hits(result):
            quote = attempt
            break
    payload: dict[str, Any] = {k: getattr(best, k) for k in ("value", "low", "high") if getattr(best, k) is not None}
    payload.update(unit=best.unit, page=best.page, quote=quote[:400])
    if best.conditions:
        payload["conditions"] = best.conditions
    if best.unit != unit:
        payload["notes"] = f"printed in {best.unit}; {unit} is not a conversion of it, so the figure is as printed"
    yield (SUBMIT_EXTRACTION, payload)


# --------------------------------------------------------------------------------------------- registry
POLICIES: dict[str, Callable[[], ScriptedPolicy]] = {
    "reader": lambda: ReplayPolicy(_reader_script),
    "closed-book": ClosedBook,
    "skip-search": lambda: ReplayPolicy(_skip_search_script),
    "no-submit": NoSubmit,
    "markup": Markup,
    "max-tokens": MaxTokens,
    "refusal": lambda: StopWith("refusal", "I can't help with that."),
    "pause-turn": lambda: StopWith("pause_turn"),
    "context-exceeded": lambda: StopWith("model_context_window_exceeded"),
}


def policy_named(name: str) -> ScriptedPolicy:
    """The scripted policy called `name`; ValueError lists the known names."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown scripted policy {name!r}; known: {', '.join(POLICIES)}") from None
