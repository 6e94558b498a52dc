#!/usr/bin/env python3
"""chamberlab's one command line: parses arguments, calls one library function per command, renders text or JSON.

Here only parsing and rendering: argument types, OPTIONS (option groups several commands share), COMMANDS (the one
table the parser and every --help read) and the error rendering. Each job is a library function `module:function`
beside the text rendering of its result, imported when its command runs (--help stays fast). With `--json` stdout is
one JSON object (an error too: `{"error": {"type", "message"}}`); progress and `error: <Type>: <message>` go to
stderr. Exit codes (protocols/exit_codes.py): 0 done, 1 short, 2 refused or failed, 3 unsafe, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import math
import os
import sys
from decimal import Decimal
from importlib import import_module as lib  # a library module, imported when its command runs (fast --help)
from pathlib import Path
from typing import Any, Callable

from firmware_bridge.error_text import exception_line
from firmware_bridge.variables import MAX_MSR_ROWS, OSR_LEVELS
from protocols.service_defaults import (DEFAULT_LEASE_TIMEOUT_S as LEASE, DEFAULT_MAX_HOLD_S as HOLD,
                                        DEFAULT_MAX_SESSIONS as SESSIONS, DEFAULT_SESSION_IDLE_S as IDLE)

__all__ = ["PROJECT_ROOT", "shared_dir", "main", "build_parser"]
log = logging.getLogger("chamberlab.cli")
PROJECT_ROOT = Path(__file__).resolve().parent
Args = argparse.Namespace


def shared_dir() -> Path:
    """Where ../shared lives: env var CHAMBERLAB_SHARED, default `../shared` beside the project root."""
    env = os.environ.get("CHAMBERLAB_SHARED")
    return Path(env).resolve() if env else (PROJECT_ROOT.parent / "shared").resolve()


class CliError(Exception):
    """A request the CLI refuses (bad arguments found after parsing); rendered without a traceback."""


class UsageError(Exception):
    """What argparse refused (unknown option, bad value): one line, type "usage", exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but a refusal raises UsageError (one line, JSON under --json), not the usage block and exit."""
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


# ----------------------------------------------------------------------------------------------- argument types
def checked(convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str, text_kept: bool = False
            ) -> Callable[[str], Any]:
    """An argparse type: `convert` the text, refused with what was expected unless `ok` (the text itself is kept
    with `text_kept`: an exact decimal the sweep computes with)."""
    def parse(text: str) -> Any:
        with contextlib.suppress(ValueError, ArithmeticError):
            if (value := convert(text.strip())) is not None and ok(value):
                return text.strip() if text_kept else value
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    parse.__name__ = expected
    return parse


def whole(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number in minimum..maximum (counts, rows, ports)."""
    return checked(int, lambda v: minimum <= v and (maximum is None or v <= maximum),
                   f"a whole number {minimum}..{maximum}" if maximum is not None else f"a whole number >= {minimum}")


POSITIVE, TCP_PORT, SEED = whole(1), whole(0, 65535), whole(0)
ROWS = whole(1, 50_000)  # rows one measurement holds in memory and prints (~75 MB; 1-2 h at 7-12 rows/s)
STEPS = whole(3, 10_001)  # bounds one sweep tries (10,001 exact-decimal verdicts take ~0.2 s; no figure shows more)
seconds = checked(float, lambda v: math.isfinite(v) and v > 0, "seconds > 0 (finite)")
decimal_value = checked(Decimal, lambda v: v.is_finite() and (v == 0 or -50 <= v.adjusted() < 50),
                        "a finite decimal number of magnitude 1e-50..1e50", text_kept=True)


msr_rows = checked(int, lambda v: 1 <= v <= MAX_MSR_ROWS, f"a whole number 1..{MAX_MSR_ROWS} (the most rows one "
                   "MSR may ask for: the firmware reads n as a 16-bit int)")


def show(args: Args, data: dict[str, Any], render: Callable[[dict[str, Any]], str | None] | None = None,
         code: int = 0) -> int:
    """Print a result (one JSON object with --json, else `render`'s text or indented JSON); return `code`."""
    from protocols.files import json_default
    text = json.dumps(data, default=json_default) if getattr(args, "json", False) else (
        render(data) if render else json.dumps(data, indent=2, default=json_default))
    if text is not None:
        print(text.rstrip("\n"), flush=True)
    return code


def say(message: str) -> None:
    """Progress lines go to stderr (stdout stays one JSON object with --json), fitted to a terminal's width."""
    print(lib("firmware_bridge.progress_line").fitted(message, sys.stderr), file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------- options
def opt(*flags: str, **kw: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, kw


LAB_CREDENTIALS = opt("--lab-credentials", type=Path, default=None, metavar="PATH", help="Remote Lab credentials "
                      "(.ini: [api_keys] user, password) for a lab+http:// --port; else env CHAMBERLAB_LAB_CREDENTIALS")
PORT = "pyserial URL (/dev/ttyACM0, pty, socket://HOST:PORT) or Remote Lab chamber lab+http://HOST:PORT/v0/CHAMBER_ID"
SIM, CLAIMS = "(sim backend)", "a claim file or folder of them (repeatable; default: packaged + chamber-part claims)"
TOOL_PROTOCOL = opt("--tool-protocol", choices=["native", "text"], default="native", help="native: the API's tool "
                    "calls; text: tools in the prompt, calls parsed from the reply (?tools=text; servers without them)")
FORCE = opt("--force", action="store_true", help="replace an existing output file (once the new one is complete)")
FLAG = {"action": "store_true"}
OPTIONS: dict[str, list[tuple[tuple[str, ...], dict[str, Any]]]] = {
    "board": [  # chamber info|measure|run|shell: one chamber, serial or in-process
        opt("--port", help=PORT), LAB_CREDENTIALS,
        opt("--backend", choices=["serial", "sim"], default="serial", help="serial: --port; sim: in this process"),
        opt("--chamber", choices=["wt", "lt"], default="wt", help=SIM), opt("--config", default="standard", help=SIM),
        opt("--seed", type=SEED, default=0, help=SIM), opt("--params", type=Path, help=f"{SIM} YAML/JSON parameters"),
        opt("--limits", type=Path, help="operator limits file (YAML or JSON)"),
        opt("--boot-timeout", type=seconds, default=6.0, help="seconds to wait for the board's announcement")],
    "bench": [  # the board commands that change something
        opt("--safe", type=Path, default=None, help="safe-state settings file (YAML/JSON {wt: {...}, lt: {...}}) "
            "applied on every exit; default: the limits file's safe: section, else fans off, LEDs off"),
        opt("--chunk", type=msr_rows, default=25, help="longest MSR sent at once (longer: split, to show progress)")],
    "chambers": [  # calibrate/check/sweep/serve: --backend sim (chambers in-process) or --port URLs (kind announced)
        opt("--backend", choices=["sim", "serial"], default=None, help="sim: simulated chambers (default: no --port)"),
        opt("--port", action="append", default=None, metavar="URL", help=PORT + "; repeat for wind + light tunnel"),
        LAB_CREDENTIALS, opt("--seed", type=SEED, default=0, help="simulator seed (with --backend sim)"),
        opt("--params", default=None, help="simulator parameter file, YAML or JSON (with --backend sim)"),
        opt("--limits", type=Path, help="operator limits file (YAML/JSON) enforced by the driver")],
    "station": [opt("--station", default=None, metavar="STATION_FILE", help="lab instruments (SMU, reference "
                    "barometer, temperature controller) to grade more claims")],
    "claims": [opt("--claims", action="append", metavar="PATH", help=CLAIMS)],  # the user's claims, not the packaged
    "claim-ids": [opt("--claims", action="append", metavar="PATH|IDS", help=CLAIMS + "; or all | claim ids, a,b")],
    "phase-two": [  # extract, matrix: the chamber service of the cells' phase two
        opt("--chamber-url", help="chamber tools API URL for phase two (default: an in-process one on the simulator)"),
        opt("--no-chamber", action="store_true", help="phase one only: no chamber tools"),
        opt("--chamber-token-file", type=Path, default=None, metavar="PATH", help="file holding the chamber "
            "service's bearer token (else env CHAMBERLAB_CHAMBER_TOKEN; needed for a --chamber-url off loopback)"),
        opt("--max-turns", type=POSITIVE, default=30, help="most model turns per cell (default 30)"),
        opt("--wall-s", type=seconds, default=900.0, help="wall-time budget per cell, seconds (default 900)")],
    "model": [  # extract, matrix: option flags written into each model's spec (a spec's own ?option= wins)
        opt("--max-output-tokens", type=POSITIVE, help="output token limit per model turn (not scripted:*)"),
        opt("--temperature", type=checked(float, lambda v: 0 <= v <= 2, "a number 0..2"), help="chat completions"),
        TOOL_PROTOCOL,
        opt("--extra-body", metavar="JSON", help="chat completions: a JSON object merged into each request, e.g. "
            "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}' (a spec's own extra.<key>= wins)"),
        opt("--thinking", metavar="TOKENS|off", help="extended thinking budget (Anthropic, LiteLLM)"),
        opt("--effort", help="reasoning effort (OpenAI reasoning, Anthropic effort, chat reasoning_effort)")],
    "scoring": [
        opt("--datasheets", type=Path, help="PDF folder for the source-grounding check (default: shared/datasheets)"),
        opt("--prices", type=Path, default=None, help="price table (JSON/YAML) for cost per cell")],
    "pdf": [opt("pdf", type=Path, help="the datasheet PDF")],
    "page": [opt("page", type=POSITIVE, help="page number (1-based)")],
    "runs-dir": [opt("--runs-dir", type=Path, default=Path("runs"), help="the runs folder (default ./runs)")],
    "rows": [opt("--rows", type=ROWS, default=200, help="rows per measurement (default 200)")],
    "fleet": [opt("--fleet", metavar="FILE|demo:N", help="every chamber of a fleet file (or demo:N emulated units)")],
    "lab-store": [  # the lab commands: where the lab's database is
        opt("--db", metavar="URL", help="postgresql://USER@HOST/DB: a lab over hosts (default: SQLite in --data)"),
        opt("--db-password-file", type=Path, metavar="FILE", help="its password (else PGPASSFILE, PGPASSWORD)"),
        opt("--data", type=Path, help="folder of the lab's SQLite database and demo account (default ./lab-data)")],
    "lab-net": [  # lab serve: how clients reach it
        opt("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS (and --tls-key)"),
        opt("--tls-key", type=Path, metavar="PEM", help="the certificate's private key (with --tls-cert)"),
        opt("--insecure-http", **FLAG, help="plain HTTP off loopback (a TLS proxy in front takes it)"),
        opt("--trusted-proxy", action="append", default=[], metavar="ADDR", help="believe X-Forwarded-* from it"),
        opt("--public-url", metavar="URL", help="https://... the lab is reached at (the URLs it hands out)")], }


def bind(target: str, a: Args, **extra: Any) -> Any:
    """Call `module:function` with the parsed options named like its parameters, `say`/`warn`, `extra` (wins)."""
    module, name = target.split(":")
    function = getattr(lib(module), name)
    given = {**vars(a), "say": say, "warn": say, **extra}
    return function(**{p: given[p] for p in inspect.signature(function).parameters if p in given})


def job(target: str, render: str | Callable[[Args, dict[str, Any]], str | None] | None = None,
        code: Callable[[dict[str, Any]], int] | None = None, refuse: Callable[[Args], str | None] = lambda a: None,
        **computed: str | Callable[[Args], Any]) -> Callable[[Args], int]:
    """A command that is one library call, bound by name (bind); a `computed` value is a function of the options
    or a `module:function` bound the same way. `render`: `[module:]function` (the job's module by default) or a
    function of (args, result); exit code `code(result)` (default protocols.exit_codes's rule); `refuse` names
    options refused (CliError) first. A job returning None or an exit code (a stopped server) prints nothing."""
    def handler(a: Args) -> int:
        if (why := refuse(a)) is not None:
            raise CliError(why)
        data = bind(target, a, **{k: bind(f, a) if isinstance(f, str) else f(a) for k, f in computed.items()})
        if not isinstance(data, dict):
            return int(data or 0)
        text = getattr(lib(render.rpartition(":")[0] or target.split(":")[0]), render.rpartition(":")[2]) if (
            isinstance(render, str)) else (lambda d: render(a, d)) if render else None
        return show(a, data, text, (code or lib("protocols.exit_codes").exit_code)(data))
    handler.bound = {target: set(computed), **{f: set() for f in computed.values() if isinstance(f, str)}}
    return handler


board_of, lab_of = "chamber.operator:board_selection", "protocols.check_job:lab_selection"  # chambers of a command
ds, claims = "agent.datasheet_job", "protocols.claim_sources:command_claims"  # --claims as checked claims
run_pool = lambda a: bind(claims, a) if a.claims else None  # noqa: E731  (None: the pool the run recorded)
sheets = lambda a: getattr(a, "datasheets", None) or shared_dir() / "datasheets"  # noqa: E731
listed = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
done = lambda d, **kw: lib("protocols.exit_codes").exit_code(d, **kw)  # noqa: E731  (the one exit-code rule)
lab_db = lambda a: lib("protocols.remote_lab.service").db_on_command_line(a.db)  # noqa: E731  (no password)
split = lambda a, i: lib("protocols.claim_sources").split_claims_args(a.claims)[i]  # noqa: E731  (paths, ids)


# ------------------------- the table: each command's words ("lab serve"), help, job, options (OPTIONS groups, opt)
COMMANDS: list[tuple[str, str, Callable[[Args], int], list[Any]]] = [
    ("run", "the main job: chambers, calibration, all checks, the sweep, the agent, scores, report",
     job("agent.main_job:run_main_job", "summary_text",
         job=lambda a: lib("agent.main_job").MainJob.pick({**vars(a), "datasheets_dir": sheets(a)}),
         progress=lambda a: lib("protocols.bench_job").TextProgress(sys.stderr)), [
        opt("--port", action="append", metavar="URL", help=PORT + ": real chambers instead of the emulated boards"),
        LAB_CREDENTIALS, "runs-dir", "claim-ids", "rows", "fleet",
        opt("--model", help="agent model (default scripted:reader, offline; a model named must run)"),
        opt("--resume", type=Path, help="resume this run directory (finished cells kept)"),
        opt("--new", **FLAG, help="start a new run even if the last one was interrupted (default: resume it)"),
        opt("--seed", type=SEED, default=0, help="seed of the emulated boards"),
        opt("--no-agent", **FLAG, help="skip the agent (chamber part only)"),
        opt("--station", metavar="STATION_FILE", help="lab instruments to grade with (emulated boards: simulated)"),
        opt("--no-station", **FLAG, help="grade with the chamber alone"),
        opt("--limits", help="operator limits file (YAML/JSON; may cover both chambers) enforced by the driver")]),
    ("runs", "list runs recorded in the index (runs/index.sqlite)",
     job("agent.runfolder:runs_job", lambda a, d: lib("agent.runfolder").runs_text(d, a.runs_dir)),
     [opt("action", choices=["list"], help="list: every run in the index"), "runs-dir"]),
    ("calibrate", "cross-sensor calibration of the wind tunnel's four DPS310 barometers",
     job("protocols.check_job:calibrate_job", "calibration_text", selection=lab_of), [
        "chambers", "station", opt("-n", type=ROWS, default=200, help="rows measured after settling (default 200)"),
        opt("--osr", type=int, default=8, choices=OSR_LEVELS, help="barometer oversampling (default 8)"),
        opt("-o", "--output", help="write the calibration record (JSON) here (refused if a file is there)"), FORCE]),
    ("check", "grade a claim (or --all) on the chamber: pass / inconclusive / fail with u",
     job("protocols.check_job:check_command", "check_text", claims=claims, selection=lab_of, pool=lambda a: split(a, 0),
         progress=lambda a: lib("protocols.bench_job").TextProgress(sys.stderr) if a.all else None,
         refuse=lambda a: "give one CLAIM_ID or --all" if bool(a.all) == bool(a.claim_id) else None), [
        opt("claim_id", nargs="?", help="claim id (see protocols/data/claims/)"), "claims", "chambers", "station",
        "fleet", "rows",
        opt("--all", **FLAG, help="check every claim and print a table"),
        opt("--calibration", help="a calibration record to use (default: calibrate first)")]),
    ("sweep", "hold one measurement fixed and move the claim's bound through it",
     job("protocols.check_job:sweep_job", "sweep_text", selection=lab_of, refuse=lambda a: lib(
         "protocols.files").check_output_paths({"--csv": a.csv, "--plot": a.plot}, force=a.force)), [
        opt("claim_id", help="claim id whose bound is swept (e.g. dps310-operating-range)"), "chambers", "station",
        "fleet",
        opt("--measured", type=decimal_value, help="a given measured value (in the claim's unit)"),
        opt("--u", type=decimal_value, help="its standard uncertainty (with --measured)"),
        opt("--recording", help="a recorded fans-off CSV (public dataset layout)"),
        opt("--steps", type=STEPS, default=41, help="bounds tried along the sweep (default 41)"),
        opt("--csv", help="write the rows as CSV"), opt("--plot", help="write the figure as PNG"), FORCE]),
    ("sim serve", "serve an emulated Mk1 board on a pty or TCP socket; prints the port URL first",
     job("protocols.sim_job:serve_board", on_ready=lambda a: lambda d: show(a, d, lambda d: d["url"])), [
        opt("--chamber", choices=["wt", "lt"], default="wt", help="which board: wind or light tunnel"),
        opt("--config", default="standard", help="board configuration (wt: standard|pressure-control)"),
        opt("--transport", choices=["pty", "tcp"], default="pty", help="a pseudo-terminal (default) or a TCP socket"),
        opt("--seed", type=SEED, default=0, help="simulator seed (default 0)"),
        opt("--params", type=Path, help="YAML/JSON file of physics parameters"),
        opt("--pace", choices=["real", "fast"], default="real", help="real: the board's timings; fast: none (tests)"),
        opt("--host", default="127.0.0.1", help="TCP bind address"),
        opt("--listen-port", "--tcp-port", dest="listen_port", type=TCP_PORT, default=0, help="with --transport tcp"),
        opt("--window", type=POSITIVE, default=1, help="data segments in flight (1: stop-and-wait, as the firmware)"),
        opt("--faults", help="JSON object of test fault switches (simulator.board_protocol.BoardFaults)")]),
    ("sim fit", "estimate simulator parameters (barometer offsets/noise, light gains) from a recorded CSV",
     job("protocols.sim_job:fit_job", "fit_text"), [
        opt("recording", help="experiment CSV in the public dataset layout (timestamp, config, counter, ...)"),
        opt("-o", "--output", required=True, help="parameter file to write (JSON; `sim serve --params`)"), FORCE,
        opt("--base", help="parameter file (YAML or JSON) to start from (default: built-in defaults)")]),
    ("sim units", "a unit's drawn parameters with their sources", job("protocols.sim_job:units_job", "units_text"),
     [opt("--kind", choices=["wt", "lt"], default="wt", help="chamber (default wt)"),
      opt("--unit", type=whole(0, 2**32 - 1), default=0, help="the unit's serial (default 0: today's unit)")]),
    ("chamber info", "connect, and show the board's configuration and variables",
     job("chamber.operator:info_job", "info_text", selection=board_of), ["board"]),
    ("chamber measure", "apply settings, then measure N checked rows",
     job("chamber.operator:measure_command", lambda a, d: lib("chamber.operator").measure_text(d, a.n, say),
         selection=board_of, assignments=lambda a: a.set,
         on_progress=lambda a: lib("chamber.operator").RowMeter("measure", sys.stderr)), [
        opt("-n", type=ROWS, required=True, help="number of rows"), "board", "bench",
        opt("--set", action="append", metavar="VAR=VALUE", help="a setting applied before measuring")]),
    ("chamber run", "run an experiment protocol file (the chamber authors' language) into a CSV",
     job("chamber.operator:protocol_command", "protocol_text", lambda d: done(d, failed=bool(d.get("error"))),
         selection=lambda a: None if a.validate_only else bind(board_of, a),
         stdin=lambda a: sys.stdin, prompt_to=lambda a: sys.stderr,
         on_progress=lambda a: lib("chamber.operator").RowMeter(a.protocol.stem, sys.stderr)), [
        opt("protocol", type=Path, help="protocol file: SET/MSR/WAIT/WAIT_INPUT/RST lines, # comments"),
        opt("-o", "--output", type=Path, help="CSV to write (default: <protocol name>_<UTC time>.csv here)"), FORCE,
        opt("--validate-only", **FLAG, help="every check of the real run, offline (--chamber/--config, --limits)"),
        "board", "bench"]),
    ("chamber shell", "an interactive SET/MSR/WAIT/RST prompt (checked before sending; Tab completes names)",
     job("chamber.operator:shell_command", lambda a, d: say(lib("chamber.operator").safe_text([d["safe_state"]])),
         lambda d: done(d, failed=bool(d.get("script_failed"))), selection=board_of,
         stdin=lambda a: sys.stdin, stdout=lambda a: sys.stdout, stderr=lambda a: sys.stderr), [
        opt("--history", type=Path, default=Path.home() / ".chamberlab_history", help="readline history file"),
        "board", "bench",
        opt("--csv", **FLAG, help="rows as CSV (default: a compact view on a terminal, CSV into a pipe)")]),
    ("datasheet build", "manifest: pages, part, revision, contents (and their source), tables per page",
     job(f"{ds}:build", "build_text"),
     ["pdf", opt("--cache-dir", type=Path, help="keep manifests here, keyed by the file's SHA-256")]),
    ("datasheet search", "find a value or phrase (exact, then normalised, then wrapped table rows)",
     job(f"{ds}:search", "search_text"), ["pdf", opt("query", help="a value or phrase, e.g. 'operating range'"),
        opt("--page", type=POSITIVE, help="search this page only (1-based)"),
        opt("--max-results", type=POSITIVE, default=20, help="most hits to return (default 20)")]),
    ("datasheet section", "text of pages START..END with page markers, headers and footers removed",
     job(f"{ds}:section", lambda a, d: d["text"]),
     ["pdf", opt("start", type=POSITIVE, help="first page (1-based)"), opt("end", type=POSITIVE, help="last page")]),
    ("datasheet table", "the tables of one page as markdown", job(f"{ds}:table", lambda a, d: d["markdown"]),
     ["pdf", "page"]),
    ("datasheet page", "render a page (or a region) to PNG",
     job(f"{ds}:page_png", lambda a, d: f"wrote {d['out']} ({d['bytes']} bytes)"), [
        "pdf", "page", opt("--out", type=Path, required=True, help="PNG file to write"), FORCE,
        opt("--region", type=float, nargs=4, metavar=("X0", "Y0", "X1", "Y1"), help="a rectangle (points, top left)"),
        opt("--dpi", type=whole(10, 600), default=100, help="resolution (default 100)")]),
    ("datasheet fetch", "download a known datasheet from its public URL and verify its SHA-256",
     job(f"{ds}:fetch", "fetch_text", folder=lambda a: a.dir, part=lambda a: None if a.all else a.part,
         refuse=lambda a: "name one PART or give --all" if a.all == (a.part is not None) else None), [
        opt("part", nargs="?", help="part name, e.g. DPS310 (or --all)"),
        opt("--all", **FLAG, help="every datasheet the job uses (packaged and chamber parts)"),
        opt("--dir", type=Path, default=Path("datasheets"), help="where to keep the PDFs (default ./datasheets)"),
        opt("--mirror", help="folder or URL holding the files (DPS310.pdf or upstream barometer.pdf)")]),
    ("extract", "run the instrumented agent on one claim and write its dispatch record",
     job("agent.extract_job:extract_job", "extract_text", lambda d: done(d, incomplete=d["outcome"] != "submitted"),
         claims=claims, datasheets_dir=sheets), [
        opt("claim_id", help="claim id (see protocols/data/claims/)"), "claims", "phase-two", "model",
        opt("--model", required=True, help="scripted:<policy> | <anthropic model id> | openai:<model> | "
            "openai-compat:<base_url>#<model>"),
        opt("--datasheet", type=Path, help="PDF (default: the claim's datasheet in shared/)"),
        opt("--record", type=Path, default=Path("records"), help="folder for the JSONL record and blobs"),
        opt("--max-tokens", type=POSITIVE, help="token budget for the cell (input + output)"),
        opt("--otlp", type=Path, help="also write the record as OTLP/JSON spans here"),
        opt("--otlp-endpoint", metavar="URL", help="send traces as OTLP/HTTP (default $OTEL_EXPORTER_OTLP_ENDPOINT)"),
        opt("--inspect-log", type=Path, metavar="DIR", help="also write an inspect-ai eval log (.json) in DIR")]),
    ("serve", "serve the chamber tools API over HTTP (loopback by default)",
     job("protocols.serve_job:serve_job", token="protocols.serve_job:serve_token", claims=claims, selection=lab_of,
         on_ready=lambda a: lambda d: show(a, d, lib("protocols.serve_job").serve_text)), [
        opt("--host", default="127.0.0.1", help="bind address (default 127.0.0.1); off loopback needs a token"),
        opt("--listen-port", type=TCP_PORT, default=8765, help="TCP port (default 8765; 0 = any free port)"), "claims",
        "chambers", opt("--port-url", dest="port", action="append", help="--port's old spelling"),
        opt("--chamber", choices=["wt", "lt", "both"], default="both", help="(sim) which chambers"),
        opt("--record", type=Path, default=Path("records") / "chamber-api", help="folder of the session records"),
        opt("--token-file", type=Path, help="the bearer token (else env CHAMBERLAB_API_TOKEN); needed off loopback"),
        opt("--lease-timeout", type=seconds, default=LEASE, help=f"idle seconds before another session can take "
            f"the chamber (default {LEASE:g})"),
        opt("--lease-max-hold", type=seconds, default=HOLD, help=f"longest a session keeps a chamber another asks "
            f"for, seconds (default {HOLD:g})"),
        opt("--max-sessions", type=POSITIVE, default=SESSIONS, help=f"open sessions at most (default {SESSIONS})"),
        opt("--session-idle", type=seconds, default=IDLE, help=f"seconds without a request after which a session "
            f"is ended as abandoned and its chambers handed back safe (default {IDLE:g})"),
        opt("--allowed-host", action="append", default=[], metavar="NAME", help="a Host/Origin name besides "
            "the loopback ones a tokenless server answers (repeatable; others get 403 forbidden_host)")]),
    ("lab serve", "serve our chambers to the authors' causalchamber.lab client: queue and real-time (Remote Lab)",
     job("protocols.remote_lab.service:serve_lab", refuse=lab_db, on_ready=lambda a: lambda d: show(
         a, d, lib("protocols.remote_lab.service").serve_text)), ["lab-net",
        opt("--config", type=Path, help="lab file (YAML/JSON, see README; default: the demo lab)"), "lab-store",
        opt("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)"),
        opt("--listen-port", type=TCP_PORT, default=8780, help="TCP port (default 8780; 0 = any free port)"),
        opt("--worker", action="append", default=[], metavar="CHAMBER_ID", help="its worker here (SQLite: all)"),
        opt("--no-workers", **FLAG, help="the API only (`lab worker` processes run the chambers)")]),
    ("lab worker", "run the experiments and sessions of chambers plugged into this host (lab spread over hosts)",
     job("protocols.remote_lab.service:run_workers", refuse=lab_db, on_ready=lambda a: lambda d: say(
         f"serving {', '.join(d['chambers'])} from {d['host']} (database {d['database']}); Ctrl-C stops")), [
        opt("--config", type=Path, required=True, help="the lab file (the same one the API serves)"), "lab-store",
        opt("--chamber", action="append", required=True, metavar="CHAMBER_ID", help="one whose board is here")]),
    ("lab user", "lab accounts: add NAME --password-file FILE | list | remove NAME",
     job("protocols.remote_lab.service:user_job", "user_text", refuse=lab_db), [
        opt("action", choices=["add", "list", "remove"], help="what to do"),
        opt("name", nargs="?", help="user (add, remove)"),
        opt("--password-file", type=Path, help="file whose first line is the password (add)"),
        opt("--max-queued", type=POSITIVE, help="experiments it may queue (default: the lab's)"), "lab-store"]),
    ("lab migrate", "upgrade the lab database in place to this chamberlab's schema (keeps every experiment)",
     job("protocols.remote_lab.service:migrate_job", "protocols.remote_lab.migrate:migrate_text", refuse=lab_db),
     ["lab-store"]),
    ("lab audit", "who submitted, cancelled, downloaded, opened or took over a session; account changes",
     job("protocols.remote_lab.service:audit_job", "protocols.remote_lab.audit:audit_text", refuse=lab_db), [
        "lab-store", opt("--user", help="only this user's lines"),
        opt("--since", help="ISO date/time (UTC) or an age: 90m, 12h, 7d")]),
    ("station check", "open every instrument of a station file and check its *IDN? and certificate",
     job("protocols.check_job:station_check_job", "station_text", lambda d: done(d, incomplete=not d["ok"])), [
        opt("station_file", help="station file (YAML): instruments, rails, positions"),
        opt("--claims", **FLAG, help="also list which claims the station makes gradable")]),
    ("score", "score dispatch records / run folders / an imported archive offline",
     job("agent.scoring.offline:score_job", "score_text", datasheets_dir=sheets, claims=run_pool), [
        opt("paths", nargs="+", type=Path, help="record files (.jsonl), run folders or import-archive output"),
        "claims", "scoring", opt("--no-grounding", **FLAG, help="skip the source-grounding search"),
        opt("--out", type=Path, help="also write the result here (e.g. RUN_DIR/scores.json)"), FORCE]),
    ("import-archive", "convert the seed paper's archive so our instruments re-score it",
     job("agent.scoring.archive:import_archive", lambda a, d: f"imported {d['cells']} cells into {a.out}: "
         f"{d['by_role']}", root=lambda a: a.archive), [
        opt("archive", type=Path, help="the paper-archive folder (holding archive/ and data/)"),
        opt("--out", type=Path, required=True, help="folder to write the converted cells into")]),
    ("doctor", "probe a model endpoint with tiny requests (tool calls and results, tool_choice, the run's tools, PDF, "
     "images, usage) before a run",
     job("agent.doctor:doctor_job", "doctor_text", code=lambda d: 0 if d["ok"] else 2), [
        opt("--model", required=True, help="the --model spec to probe, options included (e.g. "
            "'openai-compat:http://127.0.0.1:8080/v1#qwen?max_output_tokens=256')"),
        opt("--out", type=Path, help="evidence folder: each probe's request and answer (default ./doctor/<time>/)"),
        opt("--timeout", type=seconds, default=120.0, help="seconds each probe request may take (default 120)"),
        TOOL_PROTOCOL]),
    ("matrix", "run models x claims x repeats x arms (resumable), then score the run folder",
     job("agent.scoring.matrix:matrix_job", "matrix_text", models=lambda a: listed(a.models),
         arms=lambda a: listed(a.arms), datasheets_dir=sheets,
         claims=lambda a: lib("protocols.claim_sources").command_claims(a.claims, ids=True),
         selected=lambda a: split(a, 1), claim_sources=lambda a: split(a, 0),
         progress=lambda a: lib("firmware_bridge.progress_line").ProgressLine(sys.stderr)), [
        opt("--models", required=True, help="comma-separated model specs (as for `extract --model`)"),
        "claim-ids", opt("--repeats", type=POSITIVE, default=1, help="cells per model, claim and arm (default 1)"),
        opt("--arms", default="normal", help="comma-separated: normal, withhold-navigation, withhold-crosscheck, "
            "closed-book, null-tool, wrong-content, single-pass"),
        opt("--out", type=Path, required=True, help="the run folder (cells, scores, index.sqlite)"),
        opt("--concurrency", type=POSITIVE, default=2, help="cells run at once (default 2)"), "scoring",
        "phase-two", "model", opt("--inspect-log", **FLAG, help="also write OUT/inspect/: inspect-ai eval logs"),
        opt("--preflight", action=argparse.BooleanOptionalAction, default=None, help="probe each model (doctor) "
            "first; a failed needed probe stops the matrix (default: on but for scripted:*)")]),
    ("report", "write RUN_DIR/report.md, report.html and figures from what the run folder holds",
     job("agent.scoring.offline:report_job", "report_text", claims=run_pool),
     [opt("run_dir", type=Path, help="a run folder (run, matrix --out)"), "claims"]),
]
GROUPS = {"lab": "the Remote Lab: our chambers for the authors' client, a queue and real-time sessions",
          "sim": "the emulated Mk1 board and the simulator", "chamber": "talk to a chamber (serial or sim)",
          "datasheet": "read a datasheet PDF with the agent's tools; fetch known datasheets",
          "station": "lab instruments wired to the chambers' sensors"}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command in COMMANDS (a group's commands under its word, e.g. `lab serve`)."""
    parser = Parser(prog="chamberlab", description="Causal Chamber lab controller and instrumented datasheet agent")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (also after the command)")
    sub = parser.add_subparsers(dest="command", required=True)
    groups: dict[str, Any] = {}
    for words, help_text, handler, options in COMMANDS:
        *group, name = words.split()
        if group and group[0] not in groups:
            groups[group[0]] = sub.add_parser(group[0], help=GROUPS[group[0]]).add_subparsers(
                dest=f"{group[0]}_command", required=True)
        p = (groups[group[0]] if group else sub).add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object on stdout")
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="log debug detail to stderr (also before the subcommand)")
        for item in options:
            for flags, kw in OPTIONS[item] if isinstance(item, str) else [item]:
                p.add_argument(*flags, **kw)
        p.set_defaults(handler=handler)
    return parser


def fail(as_json: bool, kind: str, message: str, code: int = 2) -> int:
    """Print a refusal (stderr `error: <type>: <message>`, or one JSON object on stdout with --json); exit `code`."""
    print(json.dumps({"error": {"type": kind, "message": message}}) if as_json else f"error: {kind}: {message}",
          file=sys.stdout if as_json else sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    from chamber.terminal import surviving
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = surviving(sys.stdout), surviving(sys.stderr)  # a closed terminal cuts no exit path
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = streams


def _main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        return fail("--json" in argv, "usage", exception_line(exc))
    args.verbose = getattr(args, "verbose", False)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from chamber.stop import describe_signal, received_signals, signals_as_interrupt
    from protocols.input_files import check_text_files, input_files

    try:
        with signals_as_interrupt():  # SIGTERM, SIGHUP, SIGQUIT unwind like Ctrl-C: exit paths apply the safe state
            check_text_files(input_files(vars(args)))  # a missing or undecodable file is named before any work starts
            result = args.handler(args)
    except KeyboardInterrupt:
        signals = received_signals()
        say(f"interrupted by {describe_signal(signals[0])}" if signals else "interrupted")
        return 130
    except Exception as exc:  # rendered, not swallowed: the type and message tell the user what went wrong
        if args.verbose:
            log.exception("command failed")
        unsafe = isinstance(exc, lib("chamber.safe_state").SafeStateUnconfirmed)  # 3: a chamber may run on
        return fail(getattr(args, "json", False), type(exc).__name__, exception_line(exc), 3 if unsafe else 2)
    if signals := received_signals():  # a command that stopped by itself on a signal: say which one
        say(f"stopped by {describe_signal(signals[0])}")
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
