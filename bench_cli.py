#!/usr/bin/env python3
"""chamberlab's one command line: parses arguments, calls one library function per command, renders text or JSON.

Every subcommand takes `--json` and then prints exactly one JSON object on stdout. Errors go to stderr as
`error: <Type>: <message>` (or `{"error": {"type", "message"}}` with --json). Exit codes (protocols/exit_codes.py):
0 all done, 1 done short of what was asked, 2 refused or failed, 3 a safe state unconfirmed, 130 interrupted.
Subsystems are imported in the command functions: `--help` stays fast, a broken optional layer stops no other.

The work lives below, one job per command beside the text rendering of its result (commands() names each):
chamber/operator.py, protocols/{sim_job,check_job,serve_job}.py, agent/{datasheet_job,extract_job,main_job,
runfolder}.py, agent/scoring/{matrix,offline}.py. Here: argument types, OPTIONS (option groups shared by several
commands), commands(), and the error rendering; progress goes to stderr only, so stdout stays one JSON object.
"""

from __future__ import annotations

import argparse
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
    """argparse, but a refusal raises UsageError (one line, JSON under --json) instead of printing the usage block
    and exiting; subparsers inherit the class."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


# ----------------------------------------------------------------------------------------------- argument types
def checked(convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str, text_kept: bool = False
            ) -> Callable[[str], Any]:
    """An argparse type: `convert` the text, refused with what was expected unless `ok` (the text itself is kept
    with `text_kept`: an exact decimal the sweep computes with)."""
    def parse(text: str) -> Any:
        try:
            value = convert(text.strip())
        except (ValueError, ArithmeticError):
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return text.strip() if text_kept else value

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


def msr_rows(text: str) -> int:
    """--chunk: at most the firmware's MSR count (chamber.protocol_language; imported when given: fast --help)."""
    from chamber.protocol_language import MAX_MSR_ROWS

    return checked(int, lambda v: 1 <= v <= MAX_MSR_ROWS, f"a whole number 1..{MAX_MSR_ROWS} (the most rows one "
                   "MSR may ask for: the firmware reads n as a 16-bit int)")(text)


# ----------------------------------------------------------------------------------------------- output
def show(args: Args, data: dict[str, Any], render: Callable[[dict[str, Any]], str | None] | None = None,
         code: int = 0) -> int:
    """Print a command's result, then return its exit code: one JSON object with --json, else the text rendering
    (indented JSON without one; nothing when the rendering is None)."""
    from protocols.files import json_default

    text = json.dumps(data, default=json_default) if getattr(args, "json", False) else (
        render(data) if render else json.dumps(data, indent=2, default=json_default))
    if text is not None:
        sys.stdout.write(text.rstrip("\n") + "\n")
        sys.stdout.flush()
    return code


def say(message: str) -> None:
    """Progress lines go to stderr (stdout stays one JSON object with --json), fitted to a terminal's width."""
    sys.stderr.write(lib("firmware_bridge.progress_line").fitted(message, sys.stderr) + "\n")
    sys.stderr.flush()


# ----------------------------------------------------------------------------------------------- options
def opt(*flags: str, **kw: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, kw


LAB_CREDENTIALS = opt("--lab-credentials", type=Path, default=None, metavar="PATH", help="Remote Lab credentials "
                      "(.ini: [api_keys] user, password) for a lab+http:// --port; else env CHAMBERLAB_LAB_CREDENTIALS")
SIM, CLAIMS = "(sim backend)", "a claim file or folder of them (repeatable; default: packaged + chamber-part claims)"
FORCE = opt("--force", action="store_true", help="replace an existing output file (once the new one is complete)")
OPTIONS: dict[str, list[tuple[tuple[str, ...], dict[str, Any]]]] = {
    "board": [  # chamber info|measure|run|shell: one chamber, serial or in-process
        opt("--port", help="pyserial URL: /dev/ttyACM0, a pty path, socket://host:port; or a Remote Lab chamber "
            "lab+http://HOST:PORT/v0/CHAMBER_ID[?config=NAME]"),
        LAB_CREDENTIALS, opt("--backend", choices=["serial", "sim"], default="serial",
            help="serial: the board at --port (default); sim: the simulator in this process"),
        opt("--chamber", choices=["wt", "lt"], default="wt", help=SIM), opt("--config", default="standard", help=SIM),
        opt("--seed", type=SEED, default=0, help=SIM), opt("--params", type=Path, help=f"{SIM} YAML/JSON parameters"),
        opt("--limits", type=Path, help="operator limits file (YAML or JSON)"),
        opt("--boot-timeout", type=seconds, default=6.0, help="seconds to wait for the board's announcement")],
    "bench": [  # the board commands that change something
        opt("--safe", type=Path, default=None, help="safe-state settings file (YAML/JSON {wt: {...}, lt: {...}}) "
            "applied on every exit; default: the limits file's safe: section, else fans off, LEDs off"),
        opt("--chunk", type=msr_rows, default=25, help="longest MSR sent at once (a longer one is split so it "
            "can report progress and stop; at most the firmware's 16-bit count)")],
    "lab": [  # calibrate/check/sweep: --backend sim (both chambers in-process) or --port URLs (kind announced)
        opt("--backend", choices=["sim", "serial"], default=None,
            help="sim: in-process simulator of both chambers (default when no --port is given)"),
        opt("--port", action="append", default=None, metavar="URL",
            help="pyserial URL of a chamber (device path, pty, socket://) or a Remote Lab chamber "
                 "lab+http://HOST:PORT/v0/CHAMBER_ID[?config=NAME]; repeat for wind + light tunnel"),
        LAB_CREDENTIALS, opt("--seed", type=SEED, default=0, help="simulator seed (with --backend sim)"),
        opt("--params", default=None, help="simulator parameter file, YAML or JSON (with --backend sim)"),
        opt("--limits", default=None, help="operator limits file (YAML/JSON) enforced by the driver"),
        opt("--station", default=None, metavar="STATION_FILE",
            help="lab instruments (SMU, reference barometer, temperature controller) to grade more claims")],
    "claims": [opt("--claims", action="append", metavar="PATH", help=CLAIMS)],  # the user's claims, not the packaged
    "claim-ids": [opt("--claims", action="append", metavar="PATH|IDS",  # run/matrix also select claims by id
                      help=CLAIMS + "; or all | comma-separated claim ids to select")],
    "phase-two": [  # extract, matrix: the chamber service of the cells' phase two
        opt("--chamber-url", help="chamber tools API URL for phase two (default: an in-process one on the simulator)"),
        opt("--no-chamber", action="store_true", help="phase one only: no chamber tools"),
        opt("--chamber-token-file", type=Path, default=None, metavar="PATH",
            help="file holding the chamber service's bearer token (else env CHAMBERLAB_CHAMBER_TOKEN; needed for "
                 "a --chamber-url served off loopback)"),
        opt("--max-turns", type=POSITIVE, default=30, help="most model turns per cell (default 30)"),
        opt("--wall-s", type=seconds, default=900.0, help="wall-time budget per cell, seconds (default 900)")],
    "scoring": [
        opt("--datasheets", type=Path, help="PDF folder for the source-grounding check (default: shared/datasheets)"),
        opt("--prices", type=Path, default=None, help="price table (JSON/YAML) for cost per cell")],
    "pdf": [opt("pdf", type=Path, help="the datasheet PDF")],
    "page": [opt("page", type=POSITIVE, help="page number (1-based)")],
    "runs-dir": [opt("--runs-dir", type=Path, default=Path("runs"), help="the runs folder (default ./runs)")],
    "fleet": [opt("--fleet", metavar="FILE|demo:N", help="every chamber of a fleet file (or demo:N emulated units)")],
}


LAB_STORE = [opt("--db", metavar="URL", help="postgresql://USER@HOST/DB: a lab over hosts (default: SQLite in --data)"),
             opt("--db-password-file", type=Path, metavar="FILE", help="its password (else PGPASSFILE, PGPASSWORD)"),
             opt("--data", type=Path, help="folder of the lab's SQLite database and demo account (default ./lab-data)")]
LAB_NET = [opt("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS (and --tls-key)"),
           opt("--tls-key", type=Path, metavar="PEM", help="the certificate's private key (with --tls-cert)"),
           opt("--insecure-http", action="store_true", help="plain HTTP off loopback (a TLS proxy in front takes it)"),
           opt("--trusted-proxy", action="append", default=[], metavar="ADDR", help="believe X-Forwarded-* from it"),
           opt("--public-url", metavar="URL", help="https://... the lab is reached at (the URLs it hands out)")]


def claims_from_args(args: Args, ids: bool = False) -> tuple[dict[str, Any], list[str] | None]:
    """The claims a command grades (checked: part, datasheet SHA-256, protocols), the ids selected; no files given:
    the one pool `run` grades (the packaged and the chamber-parts claims), so every command knows the same ids."""
    from protocols.claim_sources import load_main_job_claims, split_claims_args

    paths, selected = split_claims_args(getattr(args, "claims", None))
    if selected is not None and not ids:
        raise CliError(f"--claims: expected a claim file or folder, got {', '.join(selected)} (no such path)")
    return load_main_job_claims(paths), selected


def serve_token(a: Args) -> str | None:
    """serve's bearer token, refused before anything opens (a non-loopback bind needs one; --port is a URL)."""
    from protocols.api import TokenRequired, resolve_token

    try:
        token = resolve_token(a.host, token_file=a.token_file, environ=os.environ)
    except TokenRequired as exc:
        raise CliError(str(exc)) from None
    numbers = [p for p in a.port or () if p.isdigit()]
    if numbers:  # --port was serve's TCP port once; it is a serial URL everywhere now
        raise CliError(f"--port: expected a serial URL (device path, pty, socket://host:port), got {numbers[0]}; "
                       f"the TCP port to listen on is --listen-port {numbers[0]}")
    return token


def bind(target: str, a: Args, **extra: Any) -> Any:
    """Call the library function `module:function` with each parsed option whose dest names one of its
    parameters, the stderr sink as `say`/`warn`, and `extra` (which wins)."""
    module, name = target.split(":")
    function = getattr(lib(module), name)
    given = {**vars(a), "say": say, "warn": say, **extra}
    return function(**{p: given[p] for p in inspect.signature(function).parameters if p in given})


def job(target: str, render: str | Callable[[Args, dict[str, Any]], str | None] | None = None,
        code: Callable[[dict[str, Any]], int] | None = None, refuse: Callable[[Args], str | None] = lambda a: None,
        **computed: str | Callable[[Args], Any]) -> Callable[[Args], int]:
    """A command that is one library call, bound by name (bind); a `computed` value is a function of the parsed
    options or another `module:function` bound the same way. The result is shown with `render` (a function of
    the job's module, or of (args, result)), the exit code is `code(result)` (default: protocols.exit_codes's
    rule on the result); `refuse` names a combination of options the command refuses (CliError) before the call.
    A job returning None or a bare exit code (a server that ran until stopped) prints nothing more."""
    def handler(a: Args) -> int:
        if (why := refuse(a)) is not None:
            raise CliError(why)
        data = bind(target, a, **{k: bind(f, a) if isinstance(f, str) else f(a) for k, f in computed.items()})
        if not isinstance(data, dict):
            return int(data or 0)
        text = getattr(lib(target.split(":")[0]), render) if isinstance(render, str) else (
            (lambda d: render(a, d)) if render else None)
        return show(a, data, text, (code or lib("protocols.exit_codes").exit_code)(data))
    handler.bound = {target: set(computed), **{f: set() for f in computed.values() if isinstance(f, str)}}
    return handler


def commands() -> list[tuple[str, str, Callable[[Args], int], list[Any]]]:
    """Every command: its words, help, handler and options (a group name from OPTIONS, or one opt(...))."""
    from firmware_bridge.variables import OSR_LEVELS
    from protocols.service_defaults import (DEFAULT_LEASE_TIMEOUT_S as LEASE, DEFAULT_MAX_HOLD_S as HOLD,
                                            DEFAULT_MAX_SESSIONS as SESSIONS, DEFAULT_SESSION_IDLE_S as IDLE)

    board_of, lab_of = "chamber.operator:board_selection", "protocols.check_job:lab_selection"  # chambers of a command
    ds, claims, flag = "agent.datasheet_job", lambda a: claims_from_args(a)[0], {"action": "store_true"}
    run_pool = lambda a: claims_from_args(a)[0] if a.claims else None  # noqa: E731 - None: the run's claim_pool.json
    sheets = lambda a: getattr(a, "datasheets", None) or shared_dir() / "datasheets"  # noqa: E731
    listed = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    done = lambda d, **kw: lib("protocols.exit_codes").exit_code(d, **kw)  # noqa: E731  (the one exit-code rule)
    lab_db = lambda a: lib("protocols.remote_lab.service").db_on_command_line(a.db)  # noqa: E731  (no password)
    rows = opt("--rows", type=ROWS, default=200, help="rows per measurement (default 200)")
    claim_id, out = opt("claim_id", help="claim id (see protocols/data/claims/)"), opt("-o", "--output", type=Path)
    tool_protocol = opt("--tool-protocol", choices=["native", "text"], default="native", help="how tool calls "
                        "travel: native (the API's tool calls) or text (tools described in the prompt, calls parsed "
                        "from the reply: for servers or models without working native calls; ?tools=text in a spec)")
    return [
        ("run", "the main job: chambers, calibration, all checks, the sweep, the agent, scores, report",
         job("agent.main_job:run_main_job", "summary_text",
             job=lambda a: lib("agent.main_job").MainJob.pick({**vars(a), "datasheets_dir": sheets(a)}),
             progress=lambda a: lib("protocols.bench_job").TextProgress(sys.stderr)), [
            opt("--port", action="append", metavar="URL", help="real chamber(s) instead of the emulated boards "
                "(repeat for wind + light tunnel; lab+http://HOST:PORT/v0/CHAMBER_ID: a Remote Lab chamber)"),
            LAB_CREDENTIALS, "runs-dir", "claim-ids", rows, "fleet",
            opt("--model", help="agent model (default scripted:reader, offline; a model named must run)"),
            opt("--resume", type=Path, help="resume this run directory (finished cells kept)"),
            opt("--new", **flag, help="start a new run even if the last one was interrupted (default: resume it)"),
            opt("--seed", type=SEED, default=0, help="seed of the emulated boards"),
            opt("--no-agent", **flag, help="skip the agent (chamber part only)"),
            opt("--station", metavar="STATION_FILE", help="lab instruments to grade with as well (default with "
                "emulated boards: the simulated station)"),
            opt("--no-station", **flag, help="grade with the chamber alone"),
            opt("--limits", help="operator limits file (YAML/JSON; may cover both chambers) enforced by the driver")]),
        ("runs", "list runs recorded in the index (runs/index.sqlite)", job("agent.runfolder:runs_job", lambda a, d: (
            lib("agent.runfolder").runs_text(d, a.runs_dir))),
         [opt("action", choices=["list"], help="list: every run in the index"), "runs-dir"]),
        ("calibrate", "cross-sensor calibration of the wind tunnel's four DPS310 barometers",
         job("protocols.check_job:calibrate_job", "calibration_text", selection=lab_of), [
            "lab", opt("-n", type=ROWS, default=200, help="rows measured after settling (default 200)"),
            opt("--osr", type=int, default=8, choices=OSR_LEVELS, help="barometer oversampling (default 8)"),
            opt("-o", "--output", help="write the calibration record (JSON) here (refused if a file is there)"),
            FORCE]),
        ("check", "grade a claim (or --all) on the chamber: pass / inconclusive / fail with u",
         job("protocols.check_job:check_command", "check_text", claims=claims, selection=lab_of,
             pool=lambda a: lib("protocols.claim_sources").split_claims_args(a.claims)[0],
             progress=lambda a: lib("protocols.bench_job").TextProgress(sys.stderr) if a.all else None,
             refuse=lambda a: "give one CLAIM_ID or --all" if bool(a.all) == bool(a.claim_id) else None), [
            opt("claim_id", nargs="?", help="claim id (see protocols/data/claims/)"), "claims", "lab", "fleet", rows,
            opt("--all", **flag, help="check every claim and print a table"),
            opt("--calibration", help="a calibration record to use (default: calibrate first)")]),
        ("sweep", "hold one measurement fixed and move the claim's bound through it",
         job("protocols.check_job:sweep_job", "sweep_text", selection=lab_of, refuse=lambda a: lib(
             "protocols.files").check_output_paths({"--csv": a.csv, "--plot": a.plot}, force=a.force)), [
            opt("claim_id", help="claim id whose bound is swept (e.g. dps310-operating-range)"), "lab", "fleet",
            opt("--measured", type=decimal_value, help="a given measured value (in the claim's unit)"),
            opt("--u", type=decimal_value, help="its standard uncertainty (with --measured)"),
            opt("--recording", help="a recorded fans-off CSV (public dataset layout)"),
            opt("--steps", type=STEPS, default=41, help="bounds tried along the sweep (default 41)"),
            opt("--csv", help="write the rows as CSV"), opt("--plot", help="write the figure as PNG"), FORCE]),
        ("sim serve", "serve an emulated Mk1 board on a pty or TCP socket; prints the port URL first",
         job("protocols.sim_job:serve_board", on_ready=lambda a: lambda d: show(a, d, lambda d: d["url"])), [
            opt("--chamber", choices=["wt", "lt"], default="wt", help="which board: wind or light tunnel"),
            opt("--config", default="standard", help="board configuration (wt: standard|pressure-control)"),
            opt("--transport", choices=["pty", "tcp"], default="pty",
                help="pty: a pseudo-terminal path; tcp: socket://HOST:PORT (default pty)"),
            opt("--seed", type=SEED, default=0, help="simulator seed (default 0)"),
            opt("--params", type=Path, help="YAML/JSON file of physics parameters"),
            opt("--pace", choices=["real", "fast"], default="real", help="real: the real board's boot, row, motor "
                "and ACK timings (default); fast: no time for anything, for tests (simulator/board_protocol.py)"),
            opt("--host", default="127.0.0.1", help="TCP bind address"),
            opt("--listen-port", "--tcp-port", dest="listen_port", type=TCP_PORT, default=0, help="TCP port to listen "
                "on with --transport tcp (0: any free port; --tcp-port: old spelling)"),
            opt("--window", type=POSITIVE, default=1,
                help="board data segments in flight (1 = stop-and-wait, as the real firmware; more is faster)"),
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
         job("chamber.operator:protocol_command", "protocol_text",
             lambda d: done(d, failed=bool(d.get("error"))),
             selection=lambda a: None if a.validate_only else bind(board_of, a),
             stdin=lambda a: sys.stdin, prompt_to=lambda a: sys.stderr,
             on_progress=lambda a: lib("chamber.operator").RowMeter(a.protocol.stem, sys.stderr)), [
            opt("protocol", type=Path, help="protocol file: SET/MSR/WAIT/WAIT_INPUT/RST lines, # comments"),
            opt(*out[0], **out[1], help="CSV to write (default: <protocol name>_<UTC time>.csv here)"), FORCE,
            opt("--validate-only", **flag, help="every check of the real run, offline (--chamber/--config, --limits)"),
            "board", "bench"]),
        ("chamber shell", "an interactive SET/MSR/WAIT/RST prompt (checked before sending; Tab completes names)",
         job("chamber.operator:shell_command", lambda a, d: say(lib("chamber.operator").safe_text(
             [d["safe_state"]])), lambda d: done(d, failed=bool(d.get("script_failed"))), selection=board_of,
             stdin=lambda a: sys.stdin, stdout=lambda a: sys.stdout, stderr=lambda a: sys.stderr), [
            opt("--history", type=Path, default=Path.home() / ".chamberlab_history",
                help="readline history file (default ~/.chamberlab_history)"), "board", "bench",
            opt("--csv", **flag, help="rows as CSV, every column (default on a terminal: the compact view, "
                "`cols` chooses, `csv on` switches; into a file or a pipe: CSV)")]),
        ("datasheet build", "manifest: pages, part, revision, contents (and their source), tables per page",
         job(f"{ds}:build", "build_text"),
         ["pdf", opt("--cache-dir", type=Path, help="keep manifests here, keyed by the file's SHA-256")]),
        ("datasheet search", "find a value or phrase (exact, then normalised, then wrapped table rows)",
         job(f"{ds}:search", "search_text"), [
            "pdf", opt("query", help="a value or phrase, e.g. 'operating range'"),
            opt("--page", type=POSITIVE, help="search this page only (1-based)"),
            opt("--max-results", type=POSITIVE, default=20, help="most hits to return (default 20)")]),
        ("datasheet section", "text of pages START..END with page markers, headers and footers removed",
         job(f"{ds}:section", lambda a, d: d["text"]), ["pdf", opt("start", type=POSITIVE, help="first page (1-based)"),
                                                        opt("end", type=POSITIVE, help="last page (inclusive)")]),
        ("datasheet table", "the tables of one page as markdown", job(f"{ds}:table", lambda a, d: d["markdown"]),
         ["pdf", "page"]),
        ("datasheet page", "render a page (or a region) to PNG",
         job(f"{ds}:page_png", lambda a, d: f"wrote {d['out']} ({d['bytes']} bytes)"), [
            "pdf", "page", opt("--out", type=Path, required=True, help="PNG file to write"), FORCE,
            opt("--region", type=float, nargs=4, metavar=("X0", "Y0", "X1", "Y1"),
                help="only this rectangle, in PDF points from the page's top left"),
            opt("--dpi", type=whole(10, 600), default=100, help="resolution (default 100)")]),
        ("datasheet fetch", "download a known datasheet from its public URL and verify its SHA-256",
         job(f"{ds}:fetch", "fetch_text", folder=lambda a: a.dir, part=lambda a: None if a.all else a.part,
             refuse=lambda a: "name one PART or give --all" if a.all == (a.part is not None) else None), [
            opt("part", nargs="?", help="part name, e.g. DPS310 (or --all)"),
            opt("--all", **flag, help="every datasheet the job uses (packaged and chamber parts)"),
            opt("--dir", type=Path, default=Path("datasheets"), help="where to keep the PDFs (default ./datasheets)"),
            opt("--mirror", help="folder or URL holding the files (DPS310.pdf or upstream barometer.pdf)")]),
        ("extract", "run the instrumented agent on one claim and write its dispatch record",
         job("agent.extract_job:extract_job", "extract_text", lambda d: done(d, incomplete=d["outcome"] != "submitted"),
             claims=claims, datasheets_dir=sheets), [
            claim_id, "claims", "phase-two", opt("--model", required=True, help="scripted:<policy> | <anthropic "
                                                 "model id> | openai:<model> | openai-compat:<base_url>#<model>"),
            opt("--datasheet", type=Path, help="PDF (default: the claim's datasheet in shared/)"),
            opt("--record", type=Path, default=Path("records"), help="folder for the JSONL record and blobs"),
            opt("--max-tokens", type=POSITIVE, help="token budget for the cell (input + output)"),
            opt("--otlp", type=Path, help="also write the record as OTLP/JSON spans here"),
            opt("--otlp-endpoint", metavar="URL", help="send each record's trace as OTLP/HTTP protobuf (e.g. Phoenix "
                "http://127.0.0.1:6006); default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT"),
            opt("--inspect-log", type=Path, metavar="DIR", help="also write the record as an inspect-ai eval log "
                "(.json) in DIR"),
            opt("--thinking", metavar="TOKENS|off", help="extended thinking budget (Anthropic, LiteLLM)"),
            opt("--effort", help="reasoning effort (OpenAI reasoning, Anthropic effort, chat reasoning_effort)"),
            opt("--max-output-tokens", type=POSITIVE, help="output token limit per model turn"),
            opt("--temperature", type=checked(float, lambda v: 0 <= v <= 2, "a number 0..2"), help="sampling "
                "temperature (chat completions: openai-compat:...; 0 for reproducible local runs)"), tool_protocol,
            opt("--extra-body", metavar="JSON", help="chat completions only: a JSON object merged into each request, "
                "e.g. '{\"chat_template_kwargs\": {\"enable_thinking\": false}}'")]),
        ("serve", "serve the chamber tools API over HTTP (loopback by default)",
         job("protocols.serve_job:serve_job", token=serve_token, claims=claims, selection=lab_of,
             on_ready=lambda a: lambda d: show(a, d, lib("protocols.serve_job").serve_text)), [
            opt("--host", default="127.0.0.1", help="bind address (default 127.0.0.1); off loopback needs a token"),
            opt("--listen-port", type=TCP_PORT, default=8765,
                help="TCP port to listen on (default 8765; 0 = any free port)"), "claims",
            opt("--backend", choices=["sim"], help="sim: in-process simulated chambers (default with no --port)"),
            opt("--port", "--port-url", dest="port", action="append", metavar="URL", help="pyserial URL of a real "
                "or emulated board (device path, pty, socket://); repeatable (--port-url: the old spelling)"),
            opt("--chamber", choices=["wt", "lt", "both"], default="both", help="(sim) which chambers"),
            opt("--seed", type=SEED, default=0, help="(sim) simulator seed"),
            opt("--params", type=Path, help="(sim) simulator parameter file (YAML or JSON)"),
            opt("--limits", type=Path, help="operator limits file (YAML/JSON), enforced by the driver and the server"),
            opt("--record", type=Path, default=Path("records") / "chamber-api",
                help="folder for the per-session JSONL records (default records/chamber-api)"),
            opt("--token-file", type=Path,
                help="file holding the bearer token (else env CHAMBERLAB_API_TOKEN); required off loopback"),
            opt("--lease-timeout", type=seconds, default=LEASE,
                help=f"seconds a session may sit idle before another session can take the chamber (default {LEASE:g})"),
            opt("--lease-max-hold", type=seconds, default=HOLD,
                help=f"longest one session keeps a chamber while another asks for it, seconds (default {HOLD:g})"),
            opt("--max-sessions", type=POSITIVE, default=SESSIONS,
                help=f"open sessions at most (default {SESSIONS}); one more gets 429 too_many_sessions"),
            opt("--session-idle", type=seconds, default=IDLE,
                help=f"seconds without a request after which a session is ended as abandoned and its chambers "
                     f"handed back safe (default {IDLE:g})"),
            opt("--allowed-host", action="append", default=[], metavar="NAME", help="a Host/Origin name besides "
                "the loopback ones a tokenless server answers (repeatable; others get 403 forbidden_host)")]),
        ("lab serve", "serve our chambers to the authors' causalchamber.lab client: queue and real-time (Remote Lab)",
         job("protocols.remote_lab.service:serve_lab", refuse=lab_db,
             on_ready=lambda a: lambda d: show(a, d, lib("protocols.remote_lab.service").serve_text)), [*LAB_NET,
            opt("--config", type=Path, help="lab file (YAML/JSON, see README; default: the demo lab)"), *LAB_STORE,
            opt("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)"),
            opt("--listen-port", type=TCP_PORT, default=8780, help="TCP port (default 8780; 0 = any free port)"),
            opt("--worker", action="append", default=[], metavar="CHAMBER_ID", help="its worker here (SQLite: all)"),
            opt("--no-workers", action="store_true", help="the API only (`lab worker` processes run the chambers)")]),
        ("lab worker", "run the experiments and sessions of chambers plugged into this host (lab spread over hosts)",
         job("protocols.remote_lab.service:run_workers", refuse=lab_db, on_ready=lambda a: lambda d: say(
             f"serving {', '.join(d['chambers'])} from {d['host']} (database {d['database']}); Ctrl-C stops")), [
            opt("--config", type=Path, required=True, help="the lab file (the same one the API serves)"), *LAB_STORE,
            opt("--chamber", action="append", required=True, metavar="CHAMBER_ID", help="one whose board is here")]),
        ("lab user", "lab accounts: add NAME --password-file FILE | list | remove NAME",
         job("protocols.remote_lab.service:user_job", "user_text", refuse=lab_db), [
            opt("action", choices=["add", "list", "remove"], help="what to do"), opt("name", nargs="?", help="user (add, remove)"),
            opt("--password-file", type=Path, help="file whose first line is the password (add)"),
            opt("--max-queued", type=POSITIVE, help="experiments it may queue (default: the lab's)"), *LAB_STORE]),
        ("lab migrate", "upgrade the lab database in place to this chamberlab's schema (keeps every experiment)",
         job("protocols.remote_lab.service:migrate_job", "migrate_text", refuse=lab_db), LAB_STORE),
        ("lab audit", "who submitted, cancelled, downloaded, opened or took over a session; account changes",
         job("protocols.remote_lab.service:audit_job", "audit_text", refuse=lab_db), [*LAB_STORE, opt("--user", help="only this user's lines"),
            opt("--since", help="ISO date/time (UTC) or an age: 90m, 12h, 7d")]),
        ("station check", "open every instrument of a station file and check its *IDN? and certificate",
         job("protocols.check_job:station_check_job", "station_text", lambda d: done(d, incomplete=not d["ok"])), [
            opt("station_file", help="station file (YAML): instruments, rails, positions"),
            opt("--claims", **flag, help="also list which claims the station makes gradable")]),
        ("score", "score dispatch records / run folders / an imported archive offline",
         job("agent.scoring.offline:score_job", "score_text", datasheets_dir=sheets, claims=run_pool), [
            opt("paths", nargs="+", type=Path, help="record files (.jsonl), run folders or import-archive output"),
            "claims", "scoring", opt("--no-grounding", **flag, help="skip the source-grounding search"),
            opt("--out", type=Path, help="also write the result here (e.g. RUN_DIR/scores.json)"), FORCE]),
        ("import-archive", "convert the seed paper's archive so our instruments re-score it",
         job("agent.scoring.archive:import_archive", lambda a, d: f"imported {d['cells']} cells into {a.out}: "
             f"{d['by_role']}", root=lambda a: a.archive), [
            opt("archive", type=Path, help="the paper-archive folder (holding archive/ and data/)"),
            opt("--out", type=Path, required=True, help="folder to write the converted cells into")]),
        ("doctor", "probe a model endpoint with tiny requests (tool calls, tool results, empty-content turns, "
         "tool_choice, response_format, the run's tool schema, reasoning, PDF, images, usage) before a run",
         job("agent.doctor:doctor_job", "doctor_text", code=lambda d: 0 if d["ok"] else 2), [
            opt("--model", required=True, help="the --model spec to probe, options included (e.g. "
                "'openai-compat:http://127.0.0.1:8080/v1#qwen?max_output_tokens=256')"),
            opt("--out", type=Path, help="evidence folder: each probe's request and raw answer as JSON "
                "(default ./doctor/<UTC time>/)"),
            opt("--timeout", type=seconds, default=120.0, help="seconds each probe request may take (default 120)"),
            tool_protocol]),
        ("matrix", "run models x claims x repeats x arms (resumable), then score the run folder",
         job("agent.scoring.matrix:matrix_job", "matrix_text",  # engine_error, crashed, document_unreadable cells
             lambda d: done(d, incomplete=bool(d["run"].get("failures") or d["run"].get("engine_errors")  # are not
                                               or d["summary"].get("document_unreadable"))),  # results
             models=lambda a: listed(a.models), arms=lambda a: listed(a.arms), datasheets_dir=sheets,
             claims=lambda a: claims_from_args(a, ids=True)[0],
             selected=lambda a: lib("protocols.claim_sources").split_claims_args(a.claims)[1],
             claim_sources=lambda a: lib("protocols.claim_sources").split_claims_args(a.claims)[0],
             progress=lambda a: lib("firmware_bridge.progress_line").ProgressLine(sys.stderr)), [
            opt("--models", required=True, help="comma-separated model specs (as for `extract --model`)"),
            "claim-ids", opt("--repeats", type=POSITIVE, default=1, help="cells per model, claim and arm (default 1)"),
            opt("--arms", default="normal", help="comma-separated: normal, withhold-navigation, withhold-crosscheck, "
                "closed-book, null-tool, wrong-content, single-pass"),
            opt("--out", type=Path, required=True, help="the run folder (cells, scores, index.sqlite)"),
            opt("--concurrency", type=POSITIVE, default=2, help="cells run at once (default 2)"), "scoring",
            "phase-two", opt("--inspect-log", **flag, help="also write OUT/inspect/: one inspect-ai eval log per "
                             "model, every cell a sample"),
            opt("--max-output-tokens", type=POSITIVE, help="output token limit per model turn (every model but "
                "scripted:*, unless its spec sets ?max_output_tokens=)"),
            opt("--temperature", type=checked(float, lambda v: 0 <= v <= 2, "a number 0..2"), help="sampling "
                "temperature, chat completions (unless a spec sets ?temperature=)"), tool_protocol,
            opt("--extra-body", metavar="JSON", help="chat completions: a JSON object merged into each request "
                "(a spec's own extra.<key>= wins)"),
            opt("--thinking", metavar="TOKENS|off", help="extended thinking budget (Anthropic, LiteLLM)"),
            opt("--effort", help="reasoning effort (OpenAI reasoning, Anthropic effort, chat reasoning_effort)"),
            opt("--preflight", action=argparse.BooleanOptionalAction, default=None, help="probe each model's "
                "endpoint (chamberlab doctor) before any cell; a failed needed probe stops the matrix (default: "
                "on for every model but scripted:*)")]),
        ("report", "write RUN_DIR/report.md, report.html and figures from what the run folder holds",
         job("agent.scoring.offline:report_job", "report_text", claims=run_pool),
         [opt("run_dir", type=Path, help="a run folder (run, matrix --out)"), "claims"]),
    ]


GROUPS = {"lab": "the Remote Lab: our chambers for the authors' client, a queue and real-time sessions",
          "sim": "the emulated Mk1 board and the simulator's parameters", "chamber": "talk to a chamber (serial or sim)",
          "datasheet": "read a datasheet PDF with the agent's tools; fetch known datasheets",
          "station": "lab instruments wired to the chambers' sensors"}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="chamberlab", description="chamberlab: Causal Chamber lab controller and instrumented datasheet agent")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (also after the command)")
    sub = parser.add_subparsers(dest="command", required=True)
    groups: dict[str, Any] = {}
    for words, help_text, handler, options in commands():
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


def error_text(exc: BaseException) -> str:
    """An error as one line: pydantic's multi-line report becomes its first field and message (and how many more),
    YAML's caret drawing and any other line breaks fold into spaces."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": str(exc)}
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{exc.title}: field '{'.'.join(str(p) for p in first['loc'])}': {first['msg']}{more}"
    return " ".join(str(exc).split())


def fail(as_json: bool, kind: str, message: str, code: int = 2) -> int:
    """Print a refusal (stderr `error: <type>: <message>`, or one JSON object on stdout with --json); exit `code`."""
    if as_json:
        sys.stdout.write(json.dumps({"error": {"type": kind, "message": message}}) + "\n")
    else:
        sys.stderr.write(f"error: {kind}: {message}\n")
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
        return fail("--json" in argv, "usage", error_text(exc))
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
        return fail(getattr(args, "json", False), type(exc).__name__, error_text(exc), 3 if unsafe else 2)
    if signals := received_signals():  # a command that stopped by itself on a signal: say which one
        say(f"stopped by {describe_signal(signals[0])}")
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
