"""`chamberlab doctor`: tiny requests that find what a model endpoint gets wrong before a run — by what reaches
the model, not by what the server accepts.

Why: what breaks a run on a real server mostly arrives as HTTP 200. Tool calls come back as text because the
server's parser is off, or because the model does not write the format the parser waits for; a chat format drops
`role: tool` content, so every tool result is lost while the request is "accepted"; calls turn to text after the
first tool result; a text-only model reads an image's base64 as thousands of prompt tokens; a large tool schema
makes the model repeat a tool-call token. So the probes check effects: a tool result carries a random code the
model must repeat (and, when it does not, whether the prompt grew with the result at all); a second call must
follow a tool result; every tool_choice form is tried on its own; an image shows a random number the model must
read back, and one page image's prompt-token cost is set against the context.

Each probe sends its requests through the run's own client (so it tests what a cell will send: with `?tools=text`
the text tool protocol), or the same body with one field changed, and gives pass / fail / not_applicable with a
one-line finding and, under a failure, the fix for the true cause on the server that answered: the server is
named first from what it reports (agent.models.serving.identify_server), and every fix text is
agent.models.serving's, the same the loop's outcomes use. Every request body and raw answer is saved as JSON
under the evidence folder. When the probes show native tool calls cannot work, the report recommends the text
tool protocol and says whether it worked. `preflight` runs only the probes a planned run depends on
(`needs_for_run`), for `matrix` to stop before its first cell.

This module runs the probes and writes the report; the probes themselves are agent.doctor_probes, what they send
agent.doctor_payloads.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from agent.doctor_payloads import (ADD, PDF_WORD, SMALL, SYSTEM, ProbeSecrets, number_png, page_png,
                                   run_tool_surface, tiny_pdf, tiny_png)
from agent.doctor_probes import (NATIVE_BROKEN, REFUSED, Probes, Status, Verdict, asks_reasoning, error_verdict,
                                 no_call_verdict, parser_fix, recommendation, spec_facts)
from agent.models import ModelSpecError, client_for
from agent.models.base import MissingApiKey, ModelError, one_line
from agent.models.serving import ServerIdentity, fix, identify_server, vllm_parser
from agent.models.text_protocol import tool_protocol_of

PROBES = ("client", "server", "tool_calls", "tool_result", "second_tool_call", "empty_content_turn",
          "null_content_turn", "tool_choice", "tools_with_response_format", "large_tool_schema", "reasoning",
          "pdf_document", "page_images", "usage", "text_protocol")
DEFAULT_TIMEOUT_S = 120.0
NATIVE_ONLY = ("empty_content_turn", "null_content_turn", "tool_choice", "tools_with_response_format")
"""Probes of the API's own tool-call fields: not applicable under the text protocol, which sends none."""


@dataclass(frozen=True)
class Probe:
    """One probe's verdict. `warning`: a failure that runs do not depend on (e.g. a form chamberlab never sends).
    `cause`: the serving-stack cause of a failure (agent.models.serving.Cause), when one is known."""

    name: str
    status: Status
    finding: str
    fix: str = ""
    evidence: str | None = None
    warning: bool = False
    cause: str | None = None


@dataclass
class DoctorReport:
    spec: str
    transport: str | None
    endpoint: str | None
    out_dir: Path
    probes: list[Probe]
    needs: set[str] | None = None
    server: str | None = None
    tool_protocol: str = "native"
    recommendation: str | None = None

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
                "server": self.server, "tool_protocol": self.tool_protocol, "ok": self.ok,
                "needs": sorted(self.needs) if self.needs is not None else None, "failed": self.failed,
                "failed_needed": self.failed_needed, "recommendation": self.recommendation,
                "probes": [asdict(p) for p in self.probes]}


def doctor_text(data: Mapping[str, Any]) -> str:
    """One screen: a line per probe (status, name, finding; the fix under a failure, each fix once), the
    recommendation, then where the evidence is."""
    needs, fixes = set(data.get("needs") or ()), {}
    at = f"  ({data['transport']} at {data['endpoint']})" if data.get("endpoint") else ""
    lines = [f"doctor {data['spec']}{at}"]
    for p in data["probes"]:
        mark = "warn" if p.get("warning") else {"pass": "pass", "fail": "FAIL", "not_applicable": "n/a "}[p["status"]]
        lines.append(f"{mark} {'*' if p['name'] in needs else ' '}{p['name']:<27} {p['finding']}")
        if p["status"] == "fail" and p.get("fix"):
            first = fixes.setdefault(p["fix"], p["name"])
            lines.append(f"{'':34}fix: {p['fix'] if first == p['name'] else 'as for ' + first}")
    if data.get("recommendation"):
        lines.append(f"recommended: {data['recommendation']}")
    lines.append(f"evidence (request and raw answer per probe): {data['out_dir']}"
                 + ("   (* = a probe the planned run depends on)" if needs else ""))
    bad = data.get("failed_needed") or []
    lines.append("ok: no failed probe a run depends on" if data["ok"] else f"NOT OK: failed {', '.join(bad)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- what a run needs
def needs_for_run(spec: str) -> set[str]:
    """The probes a run with this `--model` spec depends on: tool calls, a tool result that reaches the model, a
    second call after it, an assistant tool-call turn in the form the client sends it (native calls only), the
    run's own tool schema; reasoning when asked for; images unless images=false."""
    kind, options = spec_facts(spec)
    if kind == "scripted":
        return {"client"}
    needs = {"client", "tool_calls", "tool_result", "second_tool_call", "large_tool_schema"}
    if options.get("tools") != "text":
        needs.add("empty_content_turn")
    if asks_reasoning(options):
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


# --------------------------------------------------------------------------------------------- entry points
def run_doctor(spec: str, *, out_dir: Path, environ: Mapping[str, str], needs: set[str] | None = None,
               http: httpx.Client | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, only: set[str] | None = None,
               progress: Callable[[str], None] | None = None, rng: random.Random | None = None) -> DoctorReport:
    """Every probe (or those in `only`) against `spec`; evidence JSON files in `out_dir`. `http` (an httpx.Client)
    carries the requests and gets recording hooks for the duration; `needs` decides `ok`; `rng` draws the values
    the model must give back (ProbeSecrets; a fresh unseeded generator when None)."""
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
        protocol = tool_protocol_of(client)
        identity, asked = ServerIdentity(None, "not asked"), {}
        base_url = getattr(client, "base_url", None)
        if spec_facts(spec)[0] == "openai-compat" and base_url:
            key = environ.get("OPENAI_COMPAT_API_KEY")
            identity, asked = identify_server(http, base_url, headers={"Authorization": f"Bearer {key}"} if key
                                              else None, timeout_s=min(timeout_s, 10.0))
        elif spec_facts(spec)[0] in ("anthropic", "openai"):
            identity = ServerIdentity("hosted", f"{spec_facts(spec)[0]} API")
        secrets = ProbeSecrets.draw(rng if rng is not None else random.Random())
        doctor, unreachable = Probes(spec, client, http, environ, timeout_s, secrets, identity), None
        rec.take()  # identify_server's GETs: kept in server.json below, not in the first probe's evidence
        probes = [Probe("client", "pass", f"{client.transport} client for {client.model}"
                        + (" (text tool protocol)" if protocol == "text" else ""))]
        for name in PROBES[1:]:
            if name in NATIVE_ONLY and protocol != "native":
                probes.append(Probe(name, "not_applicable", "the text tool protocol sends no tool-call fields"))
                continue
            if (only is not None and name not in only and name != "server") or unreachable:
                probes.append(Probe(name, "not_applicable", f"not sent: the server did not answer {unreachable}"
                                    if unreachable else "skipped: the planned run does not depend on it"))
                continue
            if progress:
                progress(f"doctor: probe {name}")
            doctor.current, doctor.turns = name, []
            try:
                v = getattr(doctor, f"p_{name}")()
            except ModelError as e:
                v = error_verdict(e, *REFUSED.get(name, ("the request", "")))
                if name == "page_images" and e.kind in ("http", "protocol") and e.http_status not in (401, 404):
                    v.fix, v.cause = fix("images_refused", identity.name), "images_refused"
                v.warning = name in ("null_content_turn", "tool_choice", "tools_with_response_format")  # runs
                unreachable = name if e.kind == "connection" else None  # never send these forms
            except Exception as e:  # a probe that could not even be sent (a client refusing the request shape)
                v = Verdict("fail", f"the probe could not run: {type(e).__name__}: {one_line(e)}")
            doctor.verdicts[name] = v
            exchanges, evidence = rec.take(), None
            if "from_probe" in v.detail:
                evidence = next((p.evidence for p in probes if p.name == v.detail["from_probe"]), None)
            elif name == "server":
                evidence = str(out_dir / "server.json")
                Path(evidence).write_text(json.dumps({"probe": name, "spec": spec, "identity": asdict(identity),
                                                      **asked}, indent=2, default=str), encoding="utf-8")
            elif v.status != "not_applicable" or exchanges:
                evidence = str(out_dir / f"{name}.json")
                Path(evidence).write_text(json.dumps({"probe": name, "spec": spec, "status": v.status, "finding":
                                                      v.finding, "cause": v.cause, "fix": v.fix,
                                                      "server": identity.name, "exchanges": exchanges,
                                                      "turns": doctor.turns}, indent=2, default=str),
                                          encoding="utf-8")
            probes.append(Probe(name, v.status, v.finding, v.fix, evidence, v.warning, v.cause))
        return _report(spec, client.transport, base_url, out_dir, probes, needs, identity.name, protocol,
                       recommendation(doctor.verdicts, protocol))
    finally:
        http.event_hooks = hooks
        if own:
            http.close()


def _none(why: str) -> list[Probe]:
    return [Probe(n, "not_applicable", why) for n in PROBES[1:]]


def _report(spec: str, transport: str | None, endpoint: str | None, out_dir: Path, probes: list[Probe],
            needs: set[str] | None, server: str | None = None, protocol: str = "native",
            recommended: str | None = None) -> DoctorReport:
    report = DoctorReport(spec, transport, endpoint, out_dir, probes, needs, server, protocol, recommended)
    (out_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    return report


def preflight(spec: str, *, out_dir: Path, environ: Mapping[str, str], needs: set[str] | None = None,
              http: httpx.Client | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              progress: Callable[[str], None] | None = None, rng: random.Random | None = None) -> DoctorReport:
    """Before a run: only the probes it depends on (`needs`, default needs_for_run(spec)); `.ok` says go."""
    try:
        needs = set(needs) if needs is not None else needs_for_run(spec)
    except ModelSpecError:
        needs = {"client"}
    return run_doctor(spec, out_dir=out_dir, environ=environ, needs=needs, http=http, timeout_s=timeout_s,
                      only=needs, progress=progress, rng=rng)


def doctor_job(model: str, out: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S,
               say: Callable[[str], None] | None = None, environ: Mapping[str, str] | None = None,
               now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
               rng: random.Random | None = None, tool_protocol: str = "native") -> dict[str, Any]:
    """`chamberlab doctor`: every probe; `ok` (exit 0) when no probe a run with this spec depends on failed.
    `tool_protocol` text probes the spec as a run with --tool-protocol text sends it (`?tools=text`)."""
    if tool_protocol == "text":
        from agent.models import with_model_options

        model = with_model_options(model, {"tools": "text"})
    out_dir = out if out is not None else Path("doctor") / now().strftime("%Y%m%dT%H%M%SZ")
    report = run_doctor(model, out_dir=out_dir, environ=os.environ if environ is None else environ,
                        needs=needs_for_run(model), timeout_s=timeout, progress=say,
                        rng=rng if rng is not None else random.Random())
    return report.to_dict()


__all__ = ["ADD", "NATIVE_BROKEN", "PDF_WORD", "PROBES", "SMALL", "SYSTEM", "DoctorReport", "Probe", "ProbeSecrets",
           "doctor_job", "doctor_text", "needs_for_run", "no_call_verdict", "number_png", "page_png", "parser_fix",
           "preflight", "run_doctor", "run_tool_surface", "tiny_pdf", "tiny_png", "vllm_parser"]
