"""The CLI's agent-side command groups: `datasheet ...`, `extract`, `score`, `import-archive`, `matrix`, `report`.

Parsing and rendering only: the datasheet tools are agent/datasheet, a cell is agent/loop.run_cell, scoring and
the matrix are agent/scoring; phase two reaches a chamber only through the chamber tools API's URL.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from cli_common import (add_claims_option, Args, claims_from_args, CliError, command, emit, progress, shared_dir)


# ----------------------------------------------------------------------------------------------- section: datasheet
def add_datasheet_commands(sub: argparse._SubParsersAction) -> None:
    """`datasheet build|search|section|table|page|fetch`: the agent's datasheet tools from the command line."""
    ds_sub = sub.add_parser("datasheet", help="read a datasheet PDF with the agent's tools; fetch known datasheets"
                            ).add_subparsers(dest="datasheet_command", required=True)
    p = command(ds_sub, "build", "manifest: pages, part, revision, contents (and their source), tables per page")
    p.add_argument("pdf", type=Path)
    p.add_argument("--cache-dir", type=Path, default=None, help="keep manifests here, keyed by the file's SHA-256")
    p.set_defaults(handler=cmd_datasheet_build)
    p = command(ds_sub, "search", "find a value or phrase (exact, then normalised, then wrapped table rows)")
    p.add_argument("pdf", type=Path)
    p.add_argument("query")
    p.add_argument("--page", type=int, default=None)
    p.add_argument("--max-results", type=int, default=20)
    p.set_defaults(handler=lambda a: datasheet_call(a, "search", lambda s: {"hits": s.search(
        a.query, a.page, a.max_results)}, lambda d: "\n".join(
        f"p{h['page']} [{h['section']}] {h['snippet']}" for h in d["hits"]) or "no match"))
    p = command(ds_sub, "section", "text of pages START..END with page markers, headers and footers removed")
    p.add_argument("pdf", type=Path)
    p.add_argument("start", type=int)
    p.add_argument("end", type=int)
    p.set_defaults(handler=lambda a: datasheet_call(a, "section", lambda s: {"text": s.section_text(a.start, a.end)},
                                                    lambda d: d["text"]))
    p = command(ds_sub, "table", "the tables of one page as markdown")
    p.add_argument("pdf", type=Path)
    p.add_argument("page", type=int)
    p.set_defaults(handler=lambda a: datasheet_call(a, "table", lambda s: {"page": a.page, "markdown":
                                                    s.table_markdown(a.page)}, lambda d: d["markdown"]))
    p = command(ds_sub, "page", "render a page (or a region) to PNG")
    p.add_argument("pdf", type=Path)
    p.add_argument("page", type=int)
    p.add_argument("--out", type=Path, required=True, help="PNG file to write")
    p.add_argument("--region", type=float, nargs=4, default=None, metavar=("X0", "Y0", "X1", "Y1"))
    p.add_argument("--dpi", type=int, default=100)
    p.set_defaults(handler=lambda a: datasheet_call(a, "page", lambda s: write_png(a, s.page_png(
        a.page, a.region, a.dpi)), lambda d: f"wrote {d['out']} ({d['bytes']} bytes)"))
    p = command(ds_sub, "fetch", "download a known datasheet from its public URL and verify its SHA-256")
    p.add_argument("part", nargs="?", default=None, help="part name, e.g. DPS310 (or --all)")
    p.add_argument("--all", action="store_true", help="every known datasheet")
    p.add_argument("--dir", type=Path, default=Path("datasheets"), help="where to keep the PDFs (default ./datasheets)")
    p.add_argument("--mirror", default=None, help="fetch FILE from MIRROR/FILE instead of the recorded URL")
    p.set_defaults(handler=cmd_datasheet_fetch)


def datasheet_call(args: Args, what: str, call: Callable[[Any], dict[str, Any]],
                   render: Callable[[dict[str, Any]], str]) -> int:
    """Open the PDF (the typed open error: missing, not a PDF, encrypted, empty), call one tool, render it."""
    from agent.datasheet import DatasheetSession

    with DatasheetSession(args.pdf, None) as session:
        session.loaded  # noqa: B018 - raises the open error before the tool runs
        data = call(session)
    emit(args, data, render)
    return 0


def write_png(args: Args, png: bytes) -> dict[str, Any]:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(png)
    return {"page": args.page, "out": str(args.out), "bytes": len(png)}


def cmd_datasheet_build(args: Args) -> int:
    from agent.datasheet import ManifestCache, build_datasheet

    m = build_datasheet(args.pdf, ManifestCache(args.cache_dir) if args.cache_dir else None)
    data = {"pages": m.pages, "part": m.part, "revision": m.revision, "sha256": m.sha256, "toc_source": m.toc_source,
            "toc_note": m.toc_note, "toc": [t.model_dump() for t in m.toc], "tables": [t.model_dump() for t in m.tables]}
    emit(args, data, lambda d: "\n".join(
        [f"{d['part']} {d['revision']}: {d['pages']} pages; contents from {d['toc_source']}", d["toc_note"]]
        + [f"{'  ' * (t['level'] - 1)}{t['title']} .... p{t['page']}" for t in d["toc"]]
        + [f"tables ({len(d['tables'])}):"] + [f"  p{t['page']}: {t['caption']}" for t in d["tables"]]))
    return 0


def cmd_datasheet_fetch(args: Args) -> int:
    from agent.datasheet.fetch import fetch_datasheet, httpx_getter, identities

    if args.all == (args.part is not None):
        raise CliError("name one PART or give --all")
    results = []
    for ident in identities(None if args.all else args.part):
        url = f"{args.mirror.rstrip('/')}/{ident.url.rsplit('/', 1)[-1]}" if args.mirror else None
        progress(args, f"fetching {ident.part} ({ident.revision}) from {url or ident.url}")
        r = fetch_datasheet(ident, args.dir, httpx_getter(), url=url)
        results.append({"part": r.part, "path": str(r.path), "sha256": r.sha256, "downloaded": r.downloaded})
    emit(args, {"fetched": results}, lambda d: "\n".join(f"{x['part']}: {x['path']} (sha256 ok)" for x in d["fetched"]))
    return 0


# ----------------------------------------------------------------------------------------------- section: extract
def add_extract_commands(sub: argparse._SubParsersAction) -> None:
    """`extract CLAIM_ID --model ...`: one recorded agent cell (phase one; phase two when --chamber-url is given)."""
    p = command(sub, "extract", "run the instrumented agent on one claim and write its dispatch record")
    p.add_argument("claim_id")
    p.add_argument("--model", required=True,
                   help="scripted:<policy> | <anthropic model id> | openai:<model> | openai-compat:<base_url>#<model>")
    p.add_argument("--datasheet", type=Path, default=None, help="PDF (default: the claim's datasheet in shared/)")
    add_claims_option(p)
    p.add_argument("--chamber-url", default=None,
                   help="chamber tools API base URL (default: an in-process service on the simulator)")
    p.add_argument("--no-chamber", action="store_true", help="phase one only: no chamber tools")
    p.add_argument("--record", type=Path, default=Path("records"), help="folder for the JSONL record and blobs")
    p.add_argument("--max-turns", type=int, default=30)
    p.add_argument("--max-tokens", type=int, default=None, help="token budget for the cell (input + output)")
    p.add_argument("--wall-s", type=float, default=900.0, help="wall-time budget for the cell, seconds")
    p.add_argument("--otlp", type=Path, default=None, help="also write the record as OTLP/JSON spans here")
    p.add_argument("--otlp-endpoint", default=None, metavar="URL",
                   help="send each record's trace as OTLP/HTTP protobuf (e.g. Phoenix http://127.0.0.1:6006); "
                        "default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT")
    p.add_argument("--inspect-log", type=Path, default=None, metavar="DIR",
                   help="also write the record as an inspect-ai eval log (.json) in DIR")
    p.add_argument("--thinking", default=None, metavar="TOKENS|off", help="extended thinking budget (Anthropic, LiteLLM)")
    p.add_argument("--effort", default=None, help="reasoning effort (OpenAI reasoning, Anthropic effort, chat reasoning_effort)")
    p.add_argument("--max-output-tokens", type=int, default=None, help="output token limit per model turn")
    p.add_argument("--extra-body", default=None, metavar="JSON",
                   help='chat completions only: merged into each request, e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'')
    p.set_defaults(handler=cmd_extract)


def model_options(args: Args) -> dict[str, Any]:
    """--thinking/--effort/--max-output-tokens/--extra-body as model options (the same as a spec's `?...`)."""
    from agent.models import split_model_options

    query = [f"{k}={v}" for k, v in (("thinking", args.thinking), ("effort", args.effort),
                                     ("max_output_tokens", args.max_output_tokens)) if v]
    options = split_model_options("x?" + "&".join(query))[1] if query else {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except json.JSONDecodeError as e:
            raise CliError(f"--extra-body is not JSON: {e}") from e
        if not isinstance(extra, dict):
            raise CliError("--extra-body must be a JSON object")
        options["extra_body"] = extra
    return options


def simulated_chamber_service(args: Args, stack: Any, api_dir: Path, claims: Any) -> str:
    """Both simulated chambers behind the chamber tools API on 127.0.0.1 (a free port); closed with the stack."""
    from chamber.selection import ChamberSelection, open_chambers
    from protocols.api.server import running_api

    opened = stack.enter_context(open_chambers(ChamberSelection(backend="sim")))
    url = stack.enter_context(running_api(opened.chambers, record_dir=api_dir, claims=claims))
    progress(args, f"chamber tools API on the simulator at {url}")
    return url


def cmd_extract(args: Args) -> int:
    import contextlib

    import httpx

    from agent.chamber_client import ChamberClient
    from agent.loop import Budget, run_cell
    from agent.models import client_for
    from agent.otlp import export_otlp, otlp_headers, otlp_traces_endpoint, send_otlp
    from protocols.claims import get_claim

    model = client_for(args.model, os.environ, options=model_options(args))  # spec and key before any work
    claims, _ = claims_from_args(args)
    claim = get_claim(args.claim_id, claims)
    pdf = args.datasheet or shared_dir() / "datasheets" / claim.identity.filename
    if not pdf.exists():
        raise CliError(f"datasheet {pdf} not found (give --datasheet or set CHAMBERLAB_SHARED)")
    with contextlib.ExitStack() as stack:
        url = None if args.no_chamber else (
            args.chamber_url or simulated_chamber_service(args, stack, Path(args.record) / "api", claims))
        chamber = ChamberClient(stack.enter_context(httpx.Client(base_url=url, timeout=60.0))) if url else None
        result = run_cell(claim, model=model, datasheet=pdf, record_dir=args.record, clock=time.time, chamber=chamber,
                          budget=Budget(max_turns=args.max_turns, max_total_tokens=args.max_tokens, wall_s=args.wall_s),
                          sleep=time.sleep)
    data = {"run_id": result.run_id, "outcome": result.outcome, "extraction": result.extraction,
            "record": str(result.record), "phase_two": result.phase_two, "detail": result.detail}
    if args.otlp is not None:
        data["otlp"] = str(export_otlp(result.record, args.otlp))
    endpoint = otlp_traces_endpoint(args.otlp_endpoint, os.environ)
    if endpoint is not None:
        with httpx.Client(timeout=60.0) as http:
            data["otlp_sent"] = send_otlp(result.record, endpoint, http=http, headers=otlp_headers(os.environ))
    if args.inspect_log is not None:
        from agent.inspect_log import export_eval_logs

        data["inspect_log"] = [str(p) for p in export_eval_logs([result.record], args.inspect_log)]
    emit(args, data, lambda d: (f"{d['run_id']}: {d['outcome']} (phase two {d['phase_two']})\n"
                                + (f"cause: {d['detail']}\n" if d["outcome"] != "submitted" else "")
                                + f"extraction: {json.dumps(d['extraction'])}\nrecord: {d['record']}"))
    return 1 if result.outcome == "engine_error" else 0


# ----------------------------------------------------------------------------------------------- section: scoring
def add_scoring_commands(sub: argparse._SubParsersAction) -> None:
    """`score`, `import-archive`, `matrix`, `report`: the instruments over recorded cells (agent.scoring)."""
    p = command(sub, "score", "score dispatch records / run folders / an imported archive offline")
    p.add_argument("paths", nargs="+", type=Path, help="record files (.jsonl), run folders or import-archive output")
    p.add_argument("--datasheets", type=Path, default=None,
                   help="folder of the datasheet PDFs for the source-grounding check (default: shared/datasheets)")
    p.add_argument("--prices", type=Path, default=None, help="price table (JSON/YAML) for cost per cell")
    p.add_argument("--no-grounding", action="store_true", help="skip the source-grounding search")
    p.add_argument("--out", type=Path, default=None, help="also write the result here (e.g. RUN_DIR/scores.json)")
    p.set_defaults(handler=cmd_score)
    p = command(sub, "import-archive", "convert the seed paper's archive so our instruments re-score it")
    p.add_argument("archive", type=Path, help="the paper-archive folder (holding archive/ and data/)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(handler=cmd_import_archive)
    p = command(sub, "matrix", "run models x claims x repeats x arms (resumable), then score the run folder")
    p.add_argument("--models", required=True, help="comma-separated model specs (as for `extract --model`)")
    add_claims_option(p, ids=True)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--arms", default="normal", help="comma-separated: normal, withhold-navigation, "
                   "withhold-crosscheck, closed-book, null-tool, wrong-content, single-pass")
    p.add_argument("--out", type=Path, required=True, help="the run folder")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--datasheets", type=Path, default=None, help="folder of the PDFs (default: shared/datasheets)")
    p.add_argument("--prices", type=Path, default=None, help="price table (JSON/YAML) for cost per cell")
    p.add_argument("--max-turns", type=int, default=30)
    p.add_argument("--wall-s", type=float, default=900.0)
    p.add_argument("--chamber-url", default=None,
                   help="chamber tools API base URL for phase two (default: an in-process service on the simulator)")
    p.add_argument("--no-chamber", action="store_true", help="phase one only: no chamber tools")
    p.add_argument("--inspect-log", action="store_true",
                   help="also write OUT/inspect/: one inspect-ai eval log (.json) per model, every cell a sample")
    p.set_defaults(handler=cmd_matrix)
    p = command(sub, "report", "write RUN_DIR/report.md, report.html and figures from what the run folder holds")
    p.add_argument("run_dir", type=Path)
    p.set_defaults(handler=cmd_report)


def cmd_score(args: Args) -> int:
    from agent.scoring.pricing import load_price_table
    from agent.scoring.score import score_paths
    from protocols.files import json_default

    ds = args.datasheets or shared_dir() / "datasheets"
    data = score_paths(args.paths, datasheets_dir=ds if ds.exists() else None,
                       prices=load_price_table(args.prices) if args.prices else None, ground=not args.no_grounding)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, default=json_default), encoding="utf-8")
    emit(args, data, render_score)
    return 0


def cmd_import_archive(args: Args) -> int:
    from agent.scoring.archive import import_archive

    emit(args, import_archive(args.archive, args.out),
         lambda d: f"imported {d['cells']} cells into {args.out}: {d['by_role']}")
    return 0


def cmd_matrix(args: Args) -> int:
    import contextlib

    import httpx

    from agent.chamber_client import ChamberClient
    from agent.loop import Budget
    from agent.models import client_for
    from agent.scoring.arms import ARMS
    from agent.scoring.matrix import plan, run_matrix
    from agent.scoring.pricing import load_price_table
    from agent.scoring.score import score_paths
    from protocols.files import json_default

    claims, selected = claims_from_args(args, ids=True)
    ids = list(claims) if selected is None else selected
    unknown = [c for c in ids if c not in claims]
    if unknown:
        raise CliError(f"unknown claim id(s) {unknown}")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad:
        raise CliError(f"unknown arm(s) {bad}; known: {', '.join(ARMS)}")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:  # fail before any cell runs when a key is missing
        client_for(m, os.environ)
    prices = load_price_table(args.prices) if args.prices else None
    ds = args.datasheets or shared_dir() / "datasheets"
    if not ds.exists():
        raise CliError(f"datasheet folder {ds} not found (give --datasheets or set CHAMBERLAB_SHARED)")
    with contextlib.ExitStack() as stack:  # phase two: the chamber service, in process unless --chamber-url
        url = None if args.no_chamber else (
            args.chamber_url or simulated_chamber_service(args, stack, Path(args.out) / "api", claims))
        chamber = ChamberClient(stack.enter_context(httpx.Client(base_url=url, timeout=60.0))) if url else None
        run = run_matrix(plan(models, ids, args.repeats, arms), claims=claims, out=args.out, datasheets_dir=ds,
                         client_factory=lambda spec: client_for(spec, os.environ), clock=time.time,
                         concurrency=args.concurrency, budget=Budget(max_turns=args.max_turns, wall_s=args.wall_s),
                         sleep=time.sleep, progress=lambda m: progress(args, m), chamber=chamber)
    scores = score_paths([args.out], claims=claims, datasheets_dir=ds, prices=prices)
    (args.out / "scores.json").write_text(json.dumps(scores, default=json_default), encoding="utf-8")
    data = {"run": run, "summary": scores["summary"], "out": str(args.out)}
    if args.inspect_log:
        from agent.inspect_log import export_eval_logs

        records = [args.out / "cells" / f"{c.run_id}.jsonl" for c in plan(models, ids, args.repeats, arms)]
        data["inspect_log"] = [str(p) for p in export_eval_logs([r for r in records if r.exists()],
                                                                 args.out / "inspect")]
    emit(args, data, lambda d: f"{d['run']}\nscores: {d['out']}/scores.json; flagged {d['summary']['flagged']}")
    # Cells that crashed or ended in engine_error are not results: say so in the exit code (a resume retries them).
    return 1 if run.get("failures") or run.get("engine_errors") else 0


def cmd_report(args: Args) -> int:
    from agent.scoring.report import write_report

    path = write_report(args.run_dir)
    data = {"report": str(path), "html": str(path.with_suffix(".html")),
            "figures": sorted(str(p) for p in (args.run_dir / "figures").glob("*.png"))}
    emit(args, data, lambda d: f"wrote {d['report']} and {d['html']} ({len(d['figures'])} figures)")
    return 0




def render_score(d: dict[str, Any]) -> str:
    lines = [f"{c['run_id']}: {c['outcome']} fidelity={c['fidelity'].get('passed')} flags={','.join(c['flags']) or '-'}"
             for c in d["cells"][:200]]
    if len(d["cells"]) > 200:
        lines.append(f"... {len(d['cells']) - 200} more cells (use --json)")
    s = d["summary"]
    lines.append(f"cells {s['cells']}, fidelity passed {s['fidelity_passed']}, flagged {s['flagged']}")
    for key in ("planted_faults_total", "planted_faults_flagged", "clean_cells_total", "clean_cells_flagged", "kappa"):
        if key in s:
            lines.append(f"{key}: {s[key]}")
    return "\n".join(lines)
