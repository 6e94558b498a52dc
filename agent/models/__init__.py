"""Model clients behind one interface, and `client_for`, which turns a `--model` string into one.

Model strings: `scripted:<policy>` (offline, in process), `openai:<model>` (Responses API),
`openai-compat:<base_url>#<model>` (chat completions: vLLM, LiteLLM), anything else an Anthropic model id.
Keys come from the environment mapping passed in; a missing key raises MissingApiKey naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    ToolSpec,
    Usage,
)

__all__ = [
    "Message", "MissingApiKey", "ModelClient", "ModelError", "ModelRequest", "ModelTurn", "TextBlock",
    "ToolCallBlock", "ToolResultBlock", "ToolSpec", "Usage", "client_for", "parse_model_spec",
]

ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"


class ModelSpecError(ValueError):
    """A --model string that names no known client."""


def parse_model_spec(spec: str) -> tuple[str, str, str | None]:
    """`--model` string → (kind, model, base_url). kind ∈ scripted | openai | openai-compat | anthropic."""
    spec = spec.strip()
    if not spec:
        raise ModelSpecError("empty model string; expected scripted:<policy>, openai:<model>, "
                             "openai-compat:<base_url>#<model> or an Anthropic model id")
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
    return "anthropic", spec, None


def client_for(spec: str, env: Mapping[str, str], *, http: httpx.Client | None = None,
               options: Mapping[str, Any] | None = None) -> ModelClient:
    """A model client for a `--model` string. `env` supplies ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL,
    OPENAI_API_KEY / OPENAI_BASE_URL, OPENAI_COMPAT_API_KEY (optional). `http` is used by the OpenAI clients.
    `options`: thinking (Anthropic), reasoning (OpenAI Responses), extra_body (chat completions)."""
    kind, model, base_url = parse_model_spec(spec)
    options = dict(options or {})
    if kind == "scripted":
        from agent.scripted import ScriptedClient, policy_named

        return ScriptedClient(policy_named(model), model=f"scripted:{model}")
    if kind == "anthropic":
        from agent.models.anthropic_client import AnthropicClient

        key = env.get("ANTHROPIC_API_KEY")
        if not key:
            raise MissingApiKey("ANTHROPIC_API_KEY", model)
        return AnthropicClient(model, api_key=key, base_url=env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_DEFAULT_URL,
                               thinking=options.get("thinking"))
    from agent.models.openai_http import OpenAIChatClient, OpenAIResponsesClient

    http = http or httpx.Client(timeout=600.0)
    if kind == "openai":
        key = env.get("OPENAI_API_KEY")
        if not key:
            raise MissingApiKey("OPENAI_API_KEY", model)
        return OpenAIResponsesClient(model, api_key=key, base_url=env.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL,
                                     http=http, reasoning=options.get("reasoning"))
    return OpenAIChatClient(model, base_url=str(base_url), http=http, api_key=env.get("OPENAI_COMPAT_API_KEY"),
                            extra_body=options.get("extra_body"))
