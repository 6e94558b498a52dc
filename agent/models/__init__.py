"""Model clients behind one interface, and `client_for`, which turns a `--model` string into one.

Model strings: `scripted:<policy>` (offline, in process), `openai:<model>` (Responses API),
`openai-compat:<base_url>#<model>` (chat completions: vLLM, LiteLLM), `claude-…` an Anthropic model id; any other
string is refused as an unknown spec (not sent to Anthropic, whose key would be asked for first).
Any of them may end in `?option=value&...` (model options, so that a matrix can give each model its own):
`thinking=<budget tokens>|off`, `effort=low|medium|high|...`, `max_output_tokens=<n>`, `images=false`,
`temperature=<0..2>` (chat completions only: sent as the request's `temperature`), `tools=text|native` (how tool
calls travel: `text` describes the tools in the prompt in the model family's format and parses calls from the
reply, agent/models/text_protocol.py; `native`, the default, uses the API's own tool calls), and
`extra.<dotted.key>=<JSON value>` for chat-completions `extra_body` (e.g.
`extra.chat_template_kwargs.enable_thinking=false` for Qwen3 on vLLM). `with_model_options` writes options into a
spec (under the spec's own: the spec wins), so a matrix's flags and each model's `?...` make one spec string.
Keys come from the environment mapping passed in; a missing key raises MissingApiKey naming the variable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote

import httpx

from agent.models.base import (
    Message,
    MissingApiKey,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelTurn,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from agent.record import TokenUsage
from agent.tool import Tool, ToolResult

__all__ = [
    "Message", "MissingApiKey", "ModelClient", "ModelError", "ModelRequest", "ModelTurn", "TextBlock",
    "TokenUsage", "Tool", "ToolCallBlock", "ToolResult", "ToolResultBlock", "client_for", "parse_model_spec",
    "with_model_options",
]

ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"


class ModelSpecError(ValueError):
    """A --model string that names no known client."""


ANTHROPIC_PREFIX = "claude"
"""Anthropic's model ids all start with it (claude-sonnet-4-5, claude-3-5-haiku-latest, ...)."""
EXPECTED_SPECS = "scripted:<policy>, claude-…, openai:<model> or openai-compat:<base_url>#<model>"


_OPTION_KEYS = ("thinking", "effort", "max_output_tokens", "images", "temperature", "tools")


def split_model_options(spec: str) -> tuple[str, dict[str, Any]]:
    """`<spec>?k=v&...` → (spec, options as client_for takes them). Unknown keys and bad values raise
    ModelSpecError here, before any cell (or chamber) work starts."""
    spec = spec.strip()
    if "?" not in spec:
        return spec, {}
    base, query = spec.split("?", 1)
    options: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if key.startswith("extra."):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                parsed = value
            node = options.setdefault("extra_body", {})
            *path, last = key.removeprefix("extra.").split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = parsed
        elif key == "thinking":
            if value in ("off", "0", "false"):
                options["thinking"] = {"type": "disabled"}
            elif value.isdigit():
                options["thinking"] = {"type": "enabled", "budget_tokens": int(value)}
            else:
                raise ModelSpecError(f"thinking={value!r}: expected a token budget (e.g. 2048) or off")
        elif key == "effort":
            if not value:
                raise ModelSpecError("effort= needs a value (low, medium, high, ...)")
            options["effort"] = value
        elif key == "max_output_tokens":
            if not value.isdigit() or int(value) < 1:
                raise ModelSpecError(f"max_output_tokens={value!r}: expected a positive integer")
            options["max_output_tokens"] = int(value)
        elif key == "images":
            if value not in ("true", "false"):
                raise ModelSpecError(f"images={value!r}: expected true or false")
            options["images"] = value == "true"
        elif key == "temperature":
            options["temperature"] = _temperature(value)
        elif key == "tools":
            if value not in ("text", "native"):
                raise ModelSpecError(f"tools={value!r}: expected text or native (how tool calls travel)")
            options["tools"] = value
        else:
            raise ModelSpecError(f"unknown model option {key!r} in {spec!r}; known: "
                                 f"{', '.join(_OPTION_KEYS)}, extra.<key>")
    return base, options


def _temperature(value: str) -> float:
    try:
        t = float(value)
    except ValueError:
        t = math.nan
    if not (math.isfinite(t) and 0 <= t <= 2):
        raise ModelSpecError(f"temperature={value!r}: expected a number from 0 to 2")
    return t


def _query(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Model options as split_model_options takes them back: (key, text) pairs, `extra_body` flattened."""
    pairs: list[tuple[str, str]] = []

    def flat(prefix: str, node: Any) -> None:
        if isinstance(node, dict) and node:
            for k in sorted(node):
                flat(f"{prefix}.{k}", node[k])
        else:
            pairs.append((prefix, json.dumps(node, separators=(",", ":"))))

    for key in sorted(options):
        value = options[key]
        if key == "extra_body":
            flat("extra", dict(value))
        elif key == "thinking":
            off = value.get("type") == "disabled"
            pairs.append(("thinking", "off" if off else str(value.get("budget_tokens"))))
        elif key == "images":
            pairs.append(("images", "true" if value else "false"))
        elif key == "temperature":
            pairs.append(("temperature", f"{float(value):g}"))
        elif key in _OPTION_KEYS:
            pairs.append((key, str(value)))
        else:
            raise ModelSpecError(f"model option {key!r} has no spec form; known: {', '.join(_OPTION_KEYS)}, "
                                 "extra_body")
    return pairs


def with_model_options(spec: str, options: Mapping[str, Any] | None) -> str:
    """`spec` with `options` (as split_model_options returns them) written into its `?...` under the spec's own:
    a key the spec sets itself wins (`extra_body` merged key by key). No options: the spec unchanged; else one
    canonical string (keys sorted), so the same spec and flags always give the same text."""
    if not options:
        return spec.strip()
    base, own = split_model_options(spec)
    merged = {**dict(options), **own}
    if "extra_body" in options and "extra_body" in own:
        merged["extra_body"] = {**dict(options["extra_body"]), **own["extra_body"]}
    return base + "?" + "&".join(f"{k}={quote(v, safe=':[]{}')}" for k, v in _query(merged))


def full_spec(spec: str, options: Mapping[str, Any] | None) -> str:
    """A model's spec with the option flags written in (with_model_options), as a run records it and groups by it;
    a scripted model runs in process and takes no options: it keeps its spec."""
    return spec.strip() if is_scripted(spec) else with_model_options(spec, options)


def is_scripted(spec: str) -> bool:
    """A scripted model (in process, no endpoint to check): as parse_model_spec reads the spec."""
    try:
        return parse_model_spec(split_model_options(spec)[0])[0] == "scripted"
    except ValueError:  # an unknown spec: refused where it is used, with its own message
        return False


def parse_model_spec(spec: str) -> tuple[str, str, str | None]:
    """`--model` string → (kind, model, base_url). kind ∈ scripted | openai | openai-compat | anthropic.
    Model options (`?...`) are not part of it: see split_model_options."""
    spec = split_model_options(spec)[0]
    if not spec:
        raise ModelSpecError(f"empty model spec; expected {EXPECTED_SPECS}")
    if spec.startswith("scripted:"):
        return "scripted", spec.removeprefix("scripted:"), None
    if spec.startswith("openai:"):
        return "openai", spec.removeprefix("openai:"), None
    if spec.startswith("openai-compat:"):
        rest = spec.removeprefix("openai-compat:")
        if "#" not in rest:
            raise ModelSpecError(f"expected openai-compat:<base_url>#<model>, got {spec!r}")
        url, model = rest.rsplit("#", 1)
        if not url.startswith(("http://", "https://")) or not model:
            raise ModelSpecError(f"expected openai-compat:<http(s) base_url>#<model>, got {spec!r}")
        return "openai-compat", model, url
    if spec.startswith(ANTHROPIC_PREFIX):
        return "anthropic", spec, None
    raise ModelSpecError(f"unknown model spec {spec!r}; expected {EXPECTED_SPECS}")


def client_for(spec: str, env: Mapping[str, str], *, http: httpx.Client | None = None,
               options: Mapping[str, Any] | None = None) -> ModelClient:
    """A model client for a `--model` string. `env` supplies ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL,
    OPENAI_API_KEY / OPENAI_BASE_URL, OPENAI_COMPAT_API_KEY (optional). `http` is used by the OpenAI clients.
    `options` (merged over the spec's own `?...` options): thinking, effort, max_output_tokens, images,
    temperature, extra_body. An option the chosen API cannot carry raises ModelSpecError instead of being
    dropped."""
    base, spec_options = split_model_options(spec)
    kind, model, base_url = parse_model_spec(base)
    options = {**spec_options, **dict(options or {})}
    if options.get("tools") == "text" and kind != "scripted":
        from agent.models.text_protocol import TextToolClient

        inner = client_for(base, env, http=http, options={k: v for k, v in options.items() if k != "tools"})
        return TextToolClient(inner)
    if kind != "scripted":
        options.pop("tools", None)  # native: the API's own tool calls, as without the option
    if kind == "scripted":
        from agent.models.scripted import ScriptedModel, policy_named

        if options:
            raise ModelSpecError(f"scripted models take no model options, got {', '.join(sorted(options))}")
        return ScriptedModel(policy_named(model), model=f"scripted:{model}")
    _refuse(kind, options)
    if kind == "anthropic":
        from agent.models.anthropic_client import AnthropicClient

        key = env.get("ANTHROPIC_API_KEY")
        if not key:
            raise MissingApiKey("ANTHROPIC_API_KEY", model)
        return AnthropicClient(model, api_key=key, base_url=env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_DEFAULT_URL,
                               thinking=options.get("thinking"), effort=options.get("effort"),
                               max_output_tokens=options.get("max_output_tokens"))
    from agent.models.openai_http import OpenAIChatClient, OpenAIResponsesClient

    if kind == "openai":
        key = env.get("OPENAI_API_KEY")
        if not key:
            raise MissingApiKey("OPENAI_API_KEY", model)
        reasoning = options.get("reasoning")
        if options.get("effort"):
            reasoning = {**(reasoning or {}), "effort": options["effort"]}
        return OpenAIResponsesClient(model, api_key=key, base_url=env.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL,
                                     http=http or httpx.Client(timeout=600.0), reasoning=reasoning,
                                     max_output_tokens=options.get("max_output_tokens"))
    extra = dict(options.get("extra_body") or {})
    if options.get("effort"):
        extra.setdefault("reasoning_effort", options["effort"])  # OpenAI chat and LiteLLM both read it
    thinking = options.get("thinking")
    if thinking is not None:
        extra.setdefault("thinking", thinking)  # LiteLLM passes it to Claude
    if options.get("temperature") is not None:
        extra.setdefault("temperature", options["temperature"])  # a top-level field of chat completions
    return OpenAIChatClient(model, base_url=str(base_url), http=http or httpx.Client(timeout=600.0),
                            api_key=env.get("OPENAI_COMPAT_API_KEY"), extra_body=extra,
                            images=options.get("images", True), max_output_tokens=options.get("max_output_tokens"))


_ALLOWED = {
    "anthropic": {"thinking", "effort", "max_output_tokens", "tools"},
    "openai": {"effort", "reasoning", "max_output_tokens", "tools"},
    "openai-compat": {"effort", "thinking", "max_output_tokens", "images", "extra_body", "temperature", "tools"},
}
_WHY_NOT = {"temperature": "this client sends no sampling options (the provider's default applies); set it through "
                           "a chat-completions endpoint instead (openai-compat:<base_url>#<model>)"}


def _refuse(kind: str, options: Mapping[str, Any]) -> None:
    bad = sorted(set(options) - _ALLOWED[kind])
    if bad:
        why = "".join(f"; {k}: {_WHY_NOT[k]}" for k in bad if k in _WHY_NOT)
        raise ModelSpecError(f"model option(s) {', '.join(bad)} do not apply to {kind} models; they take "
                             f"{', '.join(sorted(_ALLOWED[kind]))}{why}")
