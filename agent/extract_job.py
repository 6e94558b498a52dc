"""`extract`: one recorded agent cell on one claim, through the one cell runner (agent.cell_runner).

Why its own module: the cell is planned like every other (claim, model, arm normal, the next free repeat in the
record folder, so running it again adds a repeat instead of being taken for a finished cell), its phase two
reaches the chamber only over HTTP (a given --chamber-url, else an in-process service on the simulator started
through protocols/), and its record can be exported (OTLP file or endpoint, inspect-ai log). The CLI renders the
returned dict (`extract_text`).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from agent.chamber_client import ChamberClient
from protocols.claims import Claim


class ExtractError(RuntimeError):
    """The cell could not be run or gave no result (missing datasheet, a cell that raised)."""


class ModelOptionError(ValueError):
    """A model option that is not what it must be (--extra-body not a JSON object)."""


def model_options(*, thinking: str | None = None, effort: str | None = None, max_output_tokens: int | None = None,
                  extra_body: str | None = None, temperature: float | None = None,
                  tool_protocol: str = "native") -> dict[str, Any]:
    """The option flags (--thinking, --effort, --max-output-tokens, --extra-body, --temperature, --tool-protocol)
    as model options, the same as a spec's `?...` (agent.models.with_model_options writes them into the spec: the
    one way any option reaches a model, for extract and matrix alike). Native tool calls are every spec's default,
    left unwritten so that a native spec keeps its text."""
    from agent.models import split_model_options

    query = [f"{k}={v}" for k, v in (("thinking", thinking), ("effort", effort),
                                     ("max_output_tokens", max_output_tokens), ("temperature", temperature),
                                     ("tools", "text" if tool_protocol == "text" else None)) if v is not None]
    options = split_model_options("x?" + "&".join(query))[1] if query else {}
    if extra_body:
        try:
            extra = json.loads(extra_body)
        except json.JSONDecodeError as e:
            raise ModelOptionError(f"--extra-body is not JSON: {e}") from e
        if not isinstance(extra, dict):
            raise ModelOptionError(f"--extra-body must be a JSON object, got {type(extra).__name__}")
        options["extra_body"] = extra
    return options


def chamber_for_cells(stack: contextlib.ExitStack, *, no_chamber: bool, chamber_url: str | None,
                      token_file: Path | None, api_dir: Path, claims: Mapping[str, Claim],
                      say: Callable[[str], None]) -> ChamberClient | None:
    """The phase-two client (None with `no_chamber`): of `chamber_url`, sending the token of `token_file` or the
    environment, else of an in-process service on the simulator recording into `api_dir`. Closed with `stack`."""
    import httpx

    from agent.chamber_client import chamber_token
    from protocols.serve_job import simulated_service

    if no_chamber:
        return None
    url = chamber_url or simulated_service(stack, api_dir, claims, say)
    token = chamber_token(token_file, os.environ) if chamber_url else None
    return ChamberClient(stack.enter_context(httpx.Client(base_url=url, timeout=60.0)), token=token)


def extract_job(claim_id: str, *, model: str, claims: Mapping[str, Claim], datasheet: Path | None,
                datasheets_dir: Path, record: Path, no_chamber: bool, chamber_url: str | None,
                chamber_token_file: Path | None, max_turns: int, max_tokens: int | None, wall_s: float,
                otlp: Path | None, otlp_endpoint: str | None, inspect_log: Path | None, thinking: str | None = None,
                effort: str | None = None, max_output_tokens: int | None = None, extra_body: str | None = None,
                temperature: float | None = None, tool_protocol: str = "native",
                say: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Run the claim's cell (model spec `model`, with the option flags written into it: model_options) into
    `record` and export it as asked; the options, the model spec and its key are checked first."""
    from agent.cell_runner import PlannedCell, next_repeat, run_cells
    from agent.loop import Budget
    from agent.models import client_for, full_spec
    from protocols.claims import get_claim

    model_spec = full_spec(model, model_options(
        thinking=thinking, effort=effort, max_output_tokens=max_output_tokens, extra_body=extra_body,
        temperature=temperature, tool_protocol=tool_protocol))
    client = client_for(model_spec, os.environ)  # spec and key before any work
    claim = get_claim(claim_id, claims)
    pdf = datasheet or datasheets_dir / claim.identity.filename
    if not pdf.exists():
        raise ExtractError(f"datasheet {pdf} not found (give --datasheet or set CHAMBERLAB_SHARED)")
    cell = PlannedCell(claim.id, model_spec, "normal", next_repeat(record, model_spec, claim.id))
    with contextlib.ExitStack() as stack:
        chamber = chamber_for_cells(stack, no_chamber=no_chamber, chamber_url=chamber_url, token_file=chamber_token_file,
                                    api_dir=record / "api", claims=claims, say=say)
        (done,) = run_cells([cell], claims={claim.id: claim}, cells_dir=record, datasheets_dir=pdf.parent,
                            datasheet_for=lambda _c: pdf, client_factory=lambda _s: client, clock=time.time,
                            sleep=time.sleep, chamber=chamber,
                            budget=Budget(max_turns=max_turns, max_total_tokens=max_tokens, wall_s=wall_s)).done
    if done.result is None:
        raise ExtractError(f"cell {cell.cell_id}: no result ({done.error})")
    result = done.result
    data = {"run_id": result.run_id, "outcome": result.outcome, "extraction": result.extraction,
            "record": str(result.record), "phase_two": result.phase_two, "detail": result.detail}
    data.update(export_record(result.record, otlp=otlp, otlp_endpoint=otlp_endpoint, inspect_log=inspect_log))
    return data


def export_record(record: Path, *, otlp: Path | None, otlp_endpoint: str | None,
                  inspect_log: Path | None) -> dict[str, Any]:
    """The record as OTLP/JSON spans in a file, as OTLP/HTTP to an endpoint (the flag's, else the OTEL env), and
    as an inspect-ai eval log: what was written or sent."""
    import httpx

    from agent.otlp import export_otlp, otlp_headers, otlp_traces_endpoint, send_otlp

    out: dict[str, Any] = {}
    if otlp is not None:
        out["otlp"] = str(export_otlp(record, otlp))
    endpoint = otlp_traces_endpoint(otlp_endpoint, os.environ)
    if endpoint is not None:
        with httpx.Client(timeout=60.0) as http:
            out["otlp_sent"] = send_otlp(record, endpoint, http=http, headers=otlp_headers(os.environ))
    if inspect_log is not None:
        from agent.inspect_log import export_eval_logs

        out["inspect_log"] = [str(p) for p in export_eval_logs([record], inspect_log)]
    return out


def extract_text(d: Mapping[str, Any]) -> str:
    return (f"{d['run_id']}: {d['outcome']} (phase two {d['phase_two']})\n"
            + (f"cause: {d['detail']}\n" if d["outcome"] != "submitted" else "")
            + f"extraction: {json.dumps(d['extraction'])}\nrecord: {d['record']}")
