"""Which OpenAI-compatible server answers, and the one fix text for each serving-stack cause on it.

Why one place: `doctor` and the loop's run outcome both explain the same faults (a call written as text, a tool
result that never reached the model, a token loop, an empty reply). When each held its own wording, the two
drifted apart and the hints went in circles ("add --jinja" to a llama-server that had it). Here each cause has one
fix text, specialised by the server that answered when that is known (`doctor` names it from what the server
reports: identify_server below), and the generic text names every server's switch when it is not (the
loop does not probe the server). Each text is true for its server as observed or as its own code says
(docs agent-notes.md): llama-cpp-python's default handler (the GGUF's template) never parses calls and its
`chatml-function-calling` format drops `role: tool` content; llama-server parses calls only with `--jinja` and reads
`tool_choice` only as a string; vLLM parses them only with `--enable-auto-tool-choice --tool-call-parser`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

Server = Literal["llama-cpp-python", "llama-server", "vllm", "ollama", "lm-studio", "litellm", "hosted"]
SERVERS: tuple[Server, ...] = ("llama-cpp-python", "llama-server", "vllm", "ollama", "lm-studio", "litellm",
                               "hosted")

Cause = Literal["parser_off", "model_no_format", "drops_tool_results", "text_after_result", "result_unused",
                "token_repeated", "empty_reply", "prose_no_call", "output_limit", "choice_ignored",
                "images_as_text", "image_unread", "image_over_context", "images_refused"]

TEXT_PROTOCOL = "--tool-protocol text (or ?tools=text in the --model spec)"
NO_IMAGES = "add images=false to the --model spec (…#model?images=false)"

SUMMARY: dict[str, str] = {  # each cause in a few words, for one-line reports (the matrix's preflight refusal)
    "parser_off": "tool calls come back as text (no parser)",
    "model_no_format": "the model does not write the tool-call format (the parser works)",
    "drops_tool_results": "tool results never reach the model",
    "text_after_result": "calls turn to text after a tool result",
    "result_unused": "a tool result reached the model but was not used",
    "token_repeated": "a tool-call token repeated to the output limit",
    "empty_reply": "an empty reply",
    "prose_no_call": "prose instead of a call",
    "output_limit": "the output limit cut the reply",
    "choice_ignored": "a tool_choice form not honoured",
    "images_as_text": "the image was read as text (a text-only model)",
    "image_unread": "an image reached the model but was not read",
    "image_over_context": "a page image does not fit the context",
    "images_refused": "a request with an image refused",
}

_PARSERS = (("qwen3-coder", "qwen3_coder"), ("qwen", "hermes"), ("hermes", "hermes"), ("llama-4", "llama4_pythonic"),
            ("llama4", "llama4_pythonic"), ("llama", "llama3_json"), ("mistral", "mistral"), ("granite", "granite"),
            ("deepseek", "deepseek_v3"), ("internlm", "internlm"), ("gpt-oss", "openai"), ("phi-4", "phi4_mini_json"))


def vllm_parser(model: str) -> str:
    """vLLM's --tool-call-parser for a model, guessed from its name ("<family>" when unknown)."""
    return next((parser for key, parser in _PARSERS if key in model.lower()), "<family>")


def _parser_off(server: Server | None, model: str) -> str:
    per_server = {
        "llama-cpp-python": "llama-cpp-python parses no tool calls with the GGUF's own chat template, and its "
                            "--chat_format chatml-function-calling drops tool results: use " + TEXT_PROTOCOL,
        "llama-server": "start llama-server with --jinja (and --chat-template-file FILE when the GGUF's template "
                        "has no tools), or use " + TEXT_PROTOCOL,
        "vllm": f"serve with --enable-auto-tool-choice --tool-call-parser {vllm_parser(model)}, or use "
                + TEXT_PROTOCOL,
        "ollama": "Ollama parses calls only for a model whose template declares tools (ollama show --template); "
                  "or use " + TEXT_PROTOCOL,
        "lm-studio": "LM Studio parses calls only for a model whose template supports tools; or use "
                     + TEXT_PROTOCOL,
        "litellm": "LiteLLM passes on what its upstream server returns: fix the upstream's tool-call parser "
                   "(probe it directly with doctor), or use " + TEXT_PROTOCOL,
        "hosted": "this model returns its calls as text: choose one with tool calling, or use " + TEXT_PROTOCOL,
    }
    if server in per_server:
        return per_server[server]
    return (f"the server's tool-call parser is off or its chat template does not carry tools: vLLM "
            f"--enable-auto-tool-choice --tool-call-parser {vllm_parser(model)}; llama.cpp --jinja; llama-cpp-python "
            f"parses none with the GGUF's template; or use {TEXT_PROTOCOL}")


def fix(cause: Cause, server: Server | None = None, model: str = "") -> str:
    """The one fix text of `cause` on `server` (None: not known, every server's switch named)."""
    if cause == "parser_off":
        return _parser_off(server, model)
    if cause == "model_no_format":
        return ("the server's tool-call parser works (a reply forced to start with <tool_call> came back "
                f"structured) but the model does not emit the tool-call format: use a larger model or {TEXT_PROTOCOL}")
    if cause == "drops_tool_results":
        return {"llama-cpp-python": "llama-cpp-python's --chat_format chatml-function-calling never puts role: "
                                    "tool content into the prompt: use " + TEXT_PROTOCOL + " (results go back "
                                    "as user messages)",
                "llama-server": "the chat template drops role: tool messages: give llama-server --jinja with a "
                                "template that renders them (--chat-template-file), or use " + TEXT_PROTOCOL,
                }.get(server or "", "the chat template drops role: tool messages: use a template that renders "
                                    "them, or " + TEXT_PROTOCOL + " (results go back as user messages)")
    if cause == "text_after_result":
        return ("calls are structured on the first turn but written as text after a tool result (the template "
                "or parser loses the format once a result is in the prompt): use " + TEXT_PROTOCOL)
    if cause == "result_unused":
        return ("the tool result reached the model (its prompt grew with it) but the model did not use it: a "
                "model too small for the task; use a larger model")
    if cause == "token_repeated":
        return ("a backend fault with large tool schemas: check the server's tool-call parser, offer fewer or "
                f"smaller tools, use a larger model, or {TEXT_PROTOCOL}")
    if cause == "empty_reply":
        return ("a call planned in reasoning and never emitted, or a parser that swallowed it: check the server's "
                "tool-call and reasoning parsers (vLLM --reasoning-parser; llama-server --reasoning-format)")
    if cause == "prose_no_call":
        return ("the model answered in prose where a call was asked for: a model too small for tools, or a "
                f"template without tools; use a larger model or {TEXT_PROTOCOL}")
    if cause == "output_limit":
        return "raise max_output_tokens in the --model spec (or --max-output-tokens)"
    if cause == "choice_ignored":
        return {"llama-server": "llama-server reads tool_choice only as a string (auto, required, none): an "
                                "object naming a function is ignored ('Wrong type supplied for parameter "
                                "tool_choice' in its log); runs send auto, so they are unaffected",
                "vllm": "vLLM honours a named tool_choice through guided decoding (a structured-output backend); "
                        "runs send auto, so they are unaffected",
                }.get(server or "", "the server does not honour this tool_choice form; runs send auto, so they "
                                    "are unaffected")
    if cause == "images_as_text":
        return (f"a text-only model: the image's base64 was read as text; {NO_IMAGES}"
                + (" or load a vision model with --mmproj" if server == "llama-server" else ""))
    if cause == "image_unread":
        return ("the model did not read the image (a text-only model behind a server that takes images, or one "
                f"that cannot read this size): {NO_IMAGES}")
    if cause == "images_refused":
        return {"llama-cpp-python": "llama-cpp-python reads image parts only with a vision chat handler (e.g. "
                                    "--chat_format llava-1-5 with --clip_model_path); for a text-only model "
                                    + NO_IMAGES,
                "llama-server": f"llama-server reads images only with a vision projector (--mmproj); for a "
                                f"text-only model {NO_IMAGES}",
                }.get(server or "", f"a text-only model or no vision projector (llama.cpp: --mmproj): {NO_IMAGES}")
    if cause == "image_over_context":
        return ("add images=false to the --model spec, or raise the context (llama-server -c, llama-cpp-python "
                "--n_ctx, vLLM --max-model-len)")
    raise ValueError(f"unknown cause {cause!r}")


# --------------------------------------------------------------------------------------------- naming the server
_HOSTED = ("api.openai.com", "api.anthropic.com", "openrouter.ai", "api.together.xyz", "api.groq.com",
           "api.mistral.ai", "api.deepseek.com", "api.fireworks.ai", "generativelanguage.googleapis.com")


@dataclass(frozen=True)
class ServerIdentity:
    """What answers at a base URL, how we know (`evidence`, one line), its version and context size when it says
    them (None: not reported)."""

    name: Server | None
    evidence: str
    version: str | None = None
    context_tokens: int | None = None


def name_server(base_url: str, reports: Mapping[str, Any], headers: Mapping[str, str] | None = None
                ) -> ServerIdentity:
    """The server from what it reports: `reports` maps a path asked (models, props, version, api/version) to
    its JSON answer (absent: no answer, or not JSON). Pure: identify_server does the asking."""
    host = httpx.URL(base_url).host or ""
    lowered = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    models = reports.get("models") if isinstance(reports.get("models"), dict) else {}
    first = (models.get("data") or [{}])[0] if isinstance(models.get("data"), list) and models.get("data") else {}
    first = first if isinstance(first, dict) else {}
    owned = str(first.get("owned_by", ""))
    props = reports.get("props") if isinstance(reports.get("props"), dict) else None
    version = reports.get("version") if isinstance(reports.get("version"), dict) else None
    ollama = reports.get("api/version") if isinstance(reports.get("api/version"), dict) else None
    if any(h in host for h in _HOSTED):
        return ServerIdentity("hosted", f"host {host}")
    if any(k.startswith("x-litellm-") for k in lowered):
        return ServerIdentity("litellm", "x-litellm-* response headers", lowered.get("x-litellm-version"))
    if owned == "llamacpp" or (props is not None and ("default_generation_settings" in props or "build_info" in props)):
        settings = (props or {}).get("default_generation_settings") or {}
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        n_ctx = n_ctx if isinstance(n_ctx, int) else (props or {}).get("n_ctx")
        said = [w for w, ok in ((f"owned_by {owned!r}", owned == "llamacpp"), ("/props", props is not None)) if ok]
        return ServerIdentity("llama-server", ", ".join(said), str((props or {}).get("build_info") or "") or None,
                              n_ctx if isinstance(n_ctx, int) else None)
    if owned == "vllm" or "max_model_len" in first:
        ctx = first.get("max_model_len")
        return ServerIdentity("vllm", f"owned_by {owned!r}" if owned == "vllm" else "max_model_len in /v1/models",
                              str((version or {}).get("version") or "") or None, ctx if isinstance(ctx, int) else None)
    if ollama is not None and "version" in ollama:
        return ServerIdentity("ollama", "/api/version", str(ollama["version"]))
    if owned == "organization_owner":
        return ServerIdentity("lm-studio", f"owned_by {owned!r}")
    if owned == "me" and first.get("permissions") == []:
        return ServerIdentity("llama-cpp-python", "owned_by 'me' with empty permissions in /v1/models "
                                                  "(llama_cpp.server)")
    said = f"owned_by {owned!r}" if owned else "no /v1/models answer" if not models else "no telling field"
    return ServerIdentity(None, f"not identified ({said})")


def identify_server(http: httpx.Client, base_url: str, *, headers: Mapping[str, str] | None = None,
                    timeout_s: float = 10.0) -> tuple[ServerIdentity, dict[str, Any]]:
    """Ask the server what it is (GET <base>/models, <root>/props, <root>/version, <root>/api/version; a few
    quick requests, none of them a model call) and name it; returns the identity and what each path answered
    (the evidence)."""
    base = base_url.rstrip("/")
    root = base[:-3] if base.endswith("/v1") else base
    reports: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for path, url in (("models", f"{base}/models"), ("props", f"{root}/props"), ("version", f"{root}/version"),
                      ("api/version", f"{root}/api/version")):
        try:
            resp = http.get(url, headers=dict(headers or {}), timeout=timeout_s)
        except httpx.HTTPError as e:
            reports[path] = {"_error": f"{type(e).__name__}: {e}"}
            continue
        if path == "models":
            seen = dict(resp.headers)
        try:
            reports[path] = resp.json() if resp.status_code == 200 else {"_status": resp.status_code}
        except ValueError:
            reports[path] = {"_status": resp.status_code, "_text": resp.text[:200]}
    usable = {k: v for k, v in reports.items() if isinstance(v, dict) and "_status" not in v and "_error" not in v}
    return name_server(base_url, usable, seen), {"answers": reports, "headers": seen}
