#!/usr/bin/env python3
"""chamberlab's one command line: parses arguments, calls the layers, renders text or JSON.

Every subcommand takes `--json` and then prints exactly one JSON object on stdout. Errors go to stderr as
`error: <Type>: <message>` (or a JSON object `{"error": {"type", "message"}}` with --json) and exit code 2, so
scripts can tell a refused request from a crash. Subsystems are imported inside the command functions so that
`--help` stays fast and a broken optional layer cannot stop the others from working.

The work lives below: chambers are opened by chamber/selection.py (the operator's jobs chamber/operator.py), the
main job's lab part is protocols/lab_job.py, its agent part agent/agent_job.py, its folder, lock and provenance
agent/runfolder.py; the datasheet tools agent/datasheet, a cell agent/loop.run_cell, scoring and the matrix
agent/scoring, the service protocols/api. Progress is a sink the library calls; it writes to stderr only, so stdout
stays one JSON object with --json. Sections: shared helpers, sim, chamber, serve, station, datasheet, extract,
scoring, verdicts, run. COMMAND_GROUPS lists them all.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import json
import logging
import os
import sys
import time
from collections import Counter
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


def whole(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in minimum..maximum (counts, rows, ports), refused with what was expected."""
    span = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number {span}, got {text!r}") from None
        if value < minimum or maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"expected a whole number {span}, got {text!r}")
        return value

    parse.__name__ = f"whole number {span}"
    return parse


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0 (finite), got {text!r}")
    return value


def decimal_value(text: str) -> str:
    """An argparse type: an exact decimal the sweep can compute with (finite, |x| < 1e50); kept as its text."""
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"expected a decimal number, got {text!r}") from None
    if not value.is_finite() or value != 0 and not -50 <= value.adjusted() < 50:
        raise argparse.ArgumentTypeError(f"expected a finite decimal number of magnitude 1e-50..1e50, got {text!r}")
    return text.strip()


POSITIVE, COUNT, TCP_PORT = whole(1), whole(0), whole(0, 65535)


def emit(args: Args, data: dict[str, Any], render: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Print a command's result: one JSON object with --json, else the text rendering."""
    from protocols.files import json_default

    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(data, default=json_default) + "\n")
    else:
        sys.stdout.write((render(data) if render else json.dumps(data, indent=2, default=json_default)).rstrip("\n")
                         + "\n")
    sys.stdout.flush()


def progress(args: Args, message: str) -> None:
    """Progress lines go to stderr so that stdout stays machine-readable with --json."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def command(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand parser that always has --json and -v (so -v works after the subcommand too)."""
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object on stdout")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log debug detail to stderr (also before the subcommand)")
    return p


def add_claims_option(p: argparse.ArgumentParser, ids: bool = False) -> None:
    """`--claims PATH` (repeatable): grade the user's claim files instead of the packaged set; with `ids`, a value
    may also be `all` or comma-separated claim ids (run and matrix selected claims this way before)."""
    extra = "; or all | comma-separated claim ids to select" if ids else ""
    p.add_argument("--claims", action="append", default=None, metavar="PATH" + ("|IDS" if ids else ""),
                   help="a claim file or folder of them (repeatable; default: the packaged claims)" + extra)


def claims_from_args(args: Args, ids: bool = False) -> tuple[dict[str, Any], list[str] | None]:
    """The claims a command grades (checked: known part, datasheet SHA-256, declared protocols) and the ids selected."""
    from protocols.claim_sources import load_checked_claims, split_claims_args

    paths, selected = split_claims_args(getattr(args, "claims", None))
    if selected is not None and not ids:
        raise CliError(f"--claims: expected a claim file or folder, got {', '.join(selected)} (no such path)")
    return load_checked_claims(paths), selected


class StepProgress:
    """A text progress bar on stderr (one line redrawn on a terminal, plain lines otherwise)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, max(total, 1), 0
        self.tty = sys.stderr.isatty()

    def advance(self, note: str = "") -> None:
        self.done += 1
        filled = int(30 * self.done / self.total)
        line = f"{self.label:<12} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {note}"
        sys.stderr.write(("\r" + line[:110].ljust(110)) if self.tty else line + "\n")
        if self.tty and self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


class Bars:
    """The CLI's rendering of a job's progress (protocols.lab_job.JobProgress): one StepProgress per stage."""

    bar: StepProgress | None = None

    def start(self, label: str, total: int) -> None:
        self.bar = StepProgress(label, total)

    def advance(self, note: str) -> None:
        if self.bar is not None:
            self.bar.advance(note)

    def say(self, message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


class RowProgress:
    """Rows done, rate and ETA on stderr: one redrawn line on a terminal, else a line at most every `every` s."""

    def __init__(self, label: str, every: float = 2.0) -> None:
        self.label, self.every, self.tty = label, every, sys.stderr.isatty()
        self._last, self._final_shown = -1e9, False

    def __call__(self, p: Any) -> None:
        now = time.monotonic()
        final = p.rows_done >= p.rows_total
        due = now - self._last >= (0.2 if self.tty else self.every) or p.waiting_s > 0  # a long WAIT: say so
        if final and self._final_shown or not final and not due:
            return
        self._final_shown, self._last = final, now
        line = f"{self.label}: {p.render()}"
        sys.stderr.write(("\r" + line[:150].ljust(150) + ("\n" if final else "")) if self.tty else line + "\n")
        sys.stderr.flush()


@contextlib.contextmanager
def all_or_nothing(paths: list[Path]) -> Any:
    """Write several output files as one: yields {final path: temporary path beside it (same suffix)}; on success
    each is renamed into place, on any failure every temporary file is removed and no final file is touched."""
    staged = {p: p.with_name(f".{p.stem}.partial-{os.getpid()}{p.suffix}") for p in paths}
    try:
        yield staged
        for final, tmp in staged.items():
            os.replace(tmp, final)
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)


def render_safe(outcomes: list[dict[str, Any]]) -> str:
    return "; ".join(f"safe state {o['chamber']}: " + (f"FAILED ({o['error']})" if o["error"] else
                     ", ".join(f"{k}={v:g}" for k, v in o["applied"].items()) or "nothing to set")
                     for o in outcomes)


def count_line(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


# ----------------------------------------------------------------------------------------------- opening chambers
def open_one_chamber(args: Args, safe: Any = None, make_safe: bool = True) -> Any:
    """`chamber ...`: one chamber (serial --port or --backend sim) as chamber.selection.OpenChambers."""
    from chamber.selection import open_chambers, selection_of

    ports = [args.port] if args.backend == "serial" and args.port else None
    return open_chambers(selection_of(args.backend, ports, kinds=(args.chamber,), config=args.config, seed=args.seed,
                                      params=args.params, limits=args.limits, boot_timeout=args.boot_timeout,
                                      one_chamber=True), safe=safe, make_safe=make_safe, warn=lambda m: progress(args, m))


def open_selected(args: Args, *, ports: list[str] | None = None, backend: str | None = None, **fields: Any) -> Any:
    """calibrate/check/sweep/serve/run: the chambers of --backend/--port (both kinds unless `kinds` is given)."""
    from chamber.selection import open_chambers, selection_of

    chosen = selection_of(backend or args.backend, args.port if ports is None else ports, seed=args.seed,
                          params=getattr(args, "params", None), limits=args.limits, **fields)
    return open_chambers(chosen, warn=lambda m: progress(args, m), on_connect=lambda kind, c, where: progress(
        args, f"connected {kind} ({c.config}, {c.layout.row_length} variables) on {where}"))


def safe_state_for(args: Args) -> Any:
    from chamber.limits import load_limits
    from chamber.safe_state import resolve_safe_state

    return resolve_safe_state(args.safe, load_limits(args.limits) if args.limits else None)


def open_station_from_args(args: Args) -> Any:
    """The opened station of --station (None without it); StationError names the file or instrument."""
    from chamber.instruments import open_station

    if getattr(args, "station", None):
        progress(args, f"opening station {args.station}")
        return open_station(Path(args.station))
    return None


# ----------------------------------------------------------------------------------------------- section: sim
def add_sim_commands(sub: argparse._SubParsersAction) -> None:
    sim_sub = sub.add_parser("sim", help="the emulated Mk1 board and the simulator's parameters").add_subparsers(
        dest="sim_command", required=True)
    p = command(sim_sub, "serve", "serve an emulated Mk1 board on a pty or TCP socket; prints the port URL first")
    p.add_argument("--chamber", choices=["wt", "lt"], default="wt", help="which board: wind or light tunnel")
    p.add_argument("--config", default="standard", help="board configuration (wt: standard|pressure-control)")
    p.add_argument("--transport", choices=["pty", "tcp"], default="pty",
                   help="pty: a pseudo-terminal path; tcp: socket://HOST:PORT (default pty)")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    p.add_argument("--params", type=Path, help="YAML/JSON file of physics parameters")
    p.add_argument("--pace", choices=["real", "fast"], default="real",
                   help="real: the real board's boot, row, motor and ACK timings (default, like a real chamber); "
                        "fast: no time for anything, for tests (see FIDELITY in simulator/board_protocol.py)")
    p.add_argument("--host", default="127.0.0.1", help="TCP bind address")
    p.add_argument("--listen-port", "--tcp-port", dest="listen_port", type=TCP_PORT, default=0,
                   help="TCP port to listen on with --transport tcp (0: any free port; --tcp-port: old spelling)")
    p.add_argument("--window", type=POSITIVE, default=1,
                   help="board data segments in flight (1 = stop-and-wait, as the real firmware; more is faster)")
    p.add_argument("--faults", help="JSON object of test fault switches (simulator.board_protocol.BoardFaults)")
    p.set_defaults(handler=cmd_sim_serve)
    p = command(sim_sub, "fit", "estimate simulator parameters (barometer offsets/noise, light gains) from a recorded CSV")
    p.add_argument("recording", help="experiment CSV in the public dataset layout (timestamp, config, counter, ...)")
    p.add_argument("-o", "--output", required=True, help="parameter file to write (JSON; `sim serve --params`)")
    p.add_argument("--base", help="parameter file (YAML or JSON) to start from (default: built-in defaults)")
    p.set_defaults(handler=cmd_sim_fit)


def cmd_sim_serve(args: Args) -> int:
    import signal
    import threading

    from chamber.selection import read_params
    from simulator.board import make_board
    from simulator.board_protocol import BoardFaults

    try:
        faults = BoardFaults(**json.loads(args.faults)) if args.faults else None
    except (ValueError, TypeError) as exc:
        raise CliError(f"--faults: expected a JSON object of BoardFaults fields: {exc}") from exc
    board = make_board(args.chamber, transport=args.transport, seed=args.seed, config=args.config,
                       params=read_params(args.params), faults=faults, pace=args.pace, window=args.window,
                       host=args.host, port=args.listen_port)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    emit(args, {"url": board.url, "chamber": args.chamber, "config": args.config, "transport": args.transport,
                "seed": args.seed, "pace": args.pace, "window": args.window, "pid": os.getpid()},
         lambda d: d["url"])  # the first stdout line: the port URL, or one JSON object with --json
    progress(args, f"emulated {args.chamber}/{args.config} board serving on {board.url} (seed {args.seed}, "
                   f"{args.pace}); stop with Ctrl-C or SIGTERM")
    try:
        board.serve(stop)
    finally:
        board.transport.close()
    return 0


def cmd_sim_fit(args: Args) -> int:
    from chamber.selection import read_params
    from protocols.files import write_json_atomic
    from simulator.fit import fit_recording
    from simulator.params import dump_params, params_from

    base = params_from(read_params(args.base)) if args.base else None  # YAML or JSON, as every --params
    progress(args, f"fitting {args.recording} ...")
    result = fit_recording(args.recording, base=base)
    write_json_atomic(Path(args.output), dump_params(result.params))
    emit(args, {"output": str(args.output), "source": result.params.source, "fit": result.report}, render_fit)
    return 0



# ----------------------------------------------------------------------------------------------- section: chamber
def add_chamber_commands(sub: argparse._SubParsersAction) -> None:
    chamber_sub = sub.add_parser("chamber", help="talk to a chamber (serial port or in-process sim)").add_subparsers(
        dest="chamber_command", required=True)
    info = command(chamber_sub, "info", "connect, and show the board's configuration and variables")
    measure = command(chamber_sub, "measure", "apply settings, then measure N checked rows")
    measure.add_argument("-n", type=POSITIVE, required=True, help="number of rows")
    measure.add_argument("--set", action="append", metavar="VAR=VALUE", help="a setting applied before measuring")
    run = command(chamber_sub, "run", "run an experiment protocol file (the chamber authors' language) into a CSV "
                                      "in the public dataset layout")
    run.add_argument("protocol", type=Path, help="protocol file: SET/MSR/WAIT/WAIT_INPUT/RST lines, # comments")
    run.add_argument("-o", "--output", type=Path, default=None,
                     help="CSV to write (default: <protocol name>_<UTC time>.csv here)")
    run.add_argument("--validate-only", action="store_true",
                     help="check the protocol against the catalogue of --chamber/--config (and --limits) offline")
    shell = command(chamber_sub, "shell", "an interactive SET/MSR/WAIT/RST prompt (checked before sending; Tab "
                                          "completes variable names)")
    shell.add_argument("--history", type=Path, default=Path.home() / ".chamberlab_history",
                       help="readline history file (default ~/.chamberlab_history)")
    for p, handler in ((info, cmd_chamber_info), (measure, cmd_chamber_measure), (run, cmd_chamber_run),
                       (shell, cmd_chamber_shell)):
        p.add_argument("--port", help="pyserial URL: /dev/ttyACM0, a pty path, socket://host:port")
        p.add_argument("--backend", choices=["serial", "sim"], default="serial",
                       help="serial: the board at --port (default); sim: the simulator in this process")
        p.add_argument("--chamber", choices=["wt", "lt"], default="wt", help="(sim backend)")
        p.add_argument("--config", default="standard", help="(sim backend)")
        p.add_argument("--seed", type=int, default=0, help="(sim backend)")
        p.add_argument("--params", type=Path, help="(sim backend) YAML/JSON physics parameters")
        p.add_argument("--limits", type=Path, help="operator limits file (YAML or JSON)")
        p.add_argument("--boot-timeout", type=seconds, default=6.0, help="seconds to wait for the board's announcement")
        if p is not info:
            p.add_argument("--safe", type=Path, default=None,
                           help="safe-state settings file (YAML/JSON {wt: {...}, lt: {...}}) applied on every exit; "
                                "default: the limits file's safe: section, else fans off, LEDs off")
            p.add_argument("--chunk", type=POSITIVE, default=25,
                           help="longest MSR sent at once (a longer one is split so it can report progress and stop)")
        p.set_defaults(handler=handler)


def cmd_chamber_info(args: Args) -> int:
    with open_one_chamber(args, make_safe=False) as opened:  # info changes nothing: no safe state to apply
        (chamber,) = opened.chambers.values()
        variables = [{"name": v.name, "kind": v.kind.value, "unit": v.unit, "allowed": v.describe_allowed()}
                     for v in chamber.layout.variables]
        data = {"chamber": chamber.layout.chamber, "config": chamber.config, "variables": variables,
                "link": chamber.link_stats()}
    emit(args, data, lambda d: "\n".join(
        [f"chamber {d['chamber']}, config {d['config']}, {len(d['variables'])} variables"]
        + [f"  {v['name']:<20} {v['kind']:<12} {v['unit']:<11} {v['allowed']}" for v in d["variables"]]
        + ["link: " + ", ".join(f"{k}={v}" for k, v in d["link"].items())]))
    return 0


def cmd_chamber_measure(args: Args) -> int:
    from chamber.operator import measure_job, parse_assignments
    from chamber.stop import stop_on_signals

    if args.n < 1:
        raise CliError(f"-n: expected a positive number of rows, got {args.n}")
    settings = parse_assignments(args.set)
    with stop_on_signals() as stop:
        opened = open_one_chamber(args, safe_state_for(args))
        with opened:
            data = measure_job(next(iter(opened.chambers.values())), args.n, settings, stop=stop,
                               on_progress=RowProgress("measure"), chunk_rows=args.chunk)
    data["safe_state"] = opened.outcomes[0].to_dict()

    def render(d: dict[str, Any]) -> str:
        if d["interrupted"]:
            progress(args, f"interrupted after {len(d['rows'])} of {args.n} rows (all kept)")
        progress(args, render_safe([d["safe_state"]]))
        return "\n".join([",".join(d["variables"]),
                          *(",".join("" if v is None else f"{v:g}" for v in row) for row in d["rows"])])

    emit(args, data, render)
    return 130 if data["interrupted"] else 0


def cmd_chamber_shell(args: Args) -> int:
    from chamber.operator import run_shell

    opened = open_one_chamber(args, safe_state_for(args))
    with opened:
        lines = run_shell(next(iter(opened.chambers.values())), sys.stdin, sys.stdout, sys.stderr, args.history)
    progress(args, render_safe([opened.outcomes[0].to_dict()]))
    if args.json:
        emit(args, {"lines": lines, "safe_state": opened.outcomes[0].to_dict()})
    return 0


def cmd_chamber_run(args: Args) -> int:
    from chamber.operator import protocol_job, validate_offline
    from chamber.protocol_language import load_protocol
    from chamber.protocol_runner import format_duration
    from chamber.stop import stop_on_signals

    protocol = load_protocol(args.protocol)  # every syntax error, before the port is even opened
    if args.validate_only:
        emit(args, validate_offline(protocol, args.protocol, args.chamber, args.config, args.limits), lambda d: (
            f"{d['protocol']}: valid for {d['chamber']}/{d['config']}: {d['instructions']} instructions, "
            f"{d['rows']} rows, {format_duration(d['wait_s'])} of WAIT"))
        return 0
    output = args.output or Path(f"{args.protocol.stem}_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.csv")
    safe = safe_state_for(args)

    def ask(prompt: str) -> None:
        sys.stderr.write(prompt + " [Enter] ")
        sys.stderr.flush()
        if not sys.stdin.readline():
            raise CliError(f"WAIT_INPUT {prompt!r} needs an operator at the terminal, but stdin is closed")

    with stop_on_signals() as stop:
        opened = open_one_chamber(args, safe)
        with opened:
            outcome = protocol_job(next(iter(opened.chambers.values())), protocol, args.protocol, output, stop=stop,
                                   ask=ask, on_progress=RowProgress(args.protocol.stem), chunk_rows=args.chunk,
                                   say=lambda m: progress(args, m))
    data = {**outcome.to_dict(), "output": str(output), "safe_state": opened.outcomes[0].to_dict(),
            "safe_source": safe.source}

    def render(d: dict[str, Any]) -> str:
        state = ("INTERRUPTED at line " + str(d["stopped_at_line"]) if d["interrupted"] else
                 f"FAILED at line {d['stopped_at_line']}: {d['error']['type']}: {d['error']['message']}"
                 if d["error"] else "done")
        return "\n".join([f"{d['protocol']}: {state}; {d['rows']}/{d['rows_total']} rows in {d['seconds']:.1f} s "
                          f"({d['instructions_done']}/{d['instructions_total']} instructions)",
                          f"csv: {d['output']}", render_safe([d["safe_state"]])])

    emit(args, data, render)
    return 2 if outcome.error else 130 if outcome.interrupted else 0


# ----------------------------------------------------------------------------------------------- section: serve
def add_serve_commands(sub: argparse._SubParsersAction) -> None:
    """`serve`: the chamber tools API (protocols/api) under uvicorn, in front until Ctrl-C or SIGTERM."""
    from protocols.api.lease import DEFAULT_MAX_HOLD_S
    from protocols.api.sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE_S

    p = command(sub, "serve", "serve the chamber tools API over HTTP (loopback by default)")
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1); any non-loopback address needs a bearer token")
    p.add_argument("--listen-port", type=TCP_PORT, default=8765,
                   help="TCP port to listen on (default 8765; 0 = any free port)")
    add_claims_option(p)
    p.add_argument("--backend", choices=["sim"], default=None,
                   help="sim: in-process simulated chambers (the default when no --port is given)")
    p.add_argument("--port", "--port-url", dest="port", action="append", default=None, metavar="URL",
                   help="pyserial URL of a real or emulated board (device path, pty, socket://); repeatable "
                        "(--port-url: the old spelling)")
    p.add_argument("--chamber", choices=["wt", "lt", "both"], default="both", help="(sim) which chambers")
    p.add_argument("--seed", type=int, default=0, help="(sim) simulator seed")
    p.add_argument("--params", type=Path, default=None, help="(sim) simulator parameter file (YAML or JSON)")
    p.add_argument("--limits", type=Path, default=None,
                   help="operator limits file (YAML/JSON), enforced by the driver and again by the server")
    p.add_argument("--record", type=Path, default=Path("records") / "chamber-api",
                   help="folder for the per-session JSONL records (default records/chamber-api)")
    p.add_argument("--token-file", type=Path, default=None,
                   help="file holding the bearer token (else env CHAMBERLAB_API_TOKEN); required off loopback")
    p.add_argument("--lease-timeout", type=seconds, default=60.0,
                   help="seconds a session may sit idle before another session can take the chamber (default 60)")
    p.add_argument("--lease-max-hold", type=seconds, default=DEFAULT_MAX_HOLD_S,
                   help="longest one session keeps a chamber while another asks for it, seconds (default "
                        f"{DEFAULT_MAX_HOLD_S:g})")
    p.add_argument("--max-sessions", type=POSITIVE, default=DEFAULT_MAX_SESSIONS,
                   help=f"open sessions at most (default {DEFAULT_MAX_SESSIONS}); one more gets 429 too_many_sessions")
    p.add_argument("--session-idle", type=seconds, default=DEFAULT_SESSION_IDLE_S,
                   help=f"seconds after which an idle session may be ended to make room (default "
                        f"{DEFAULT_SESSION_IDLE_S:g})")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a Host/Origin name besides the loopback ones a tokenless server answers (repeatable; "
                        "others get 403 forbidden_host)")
    p.set_defaults(handler=cmd_serve)


def cmd_serve(args: Args) -> int:
    import threading

    from protocols.api import TokenRequired, resolve_token

    try:  # refuse before opening anything: a non-loopback bind without a token never starts
        token = resolve_token(args.host, token_file=args.token_file, environ=os.environ)
    except TokenRequired as exc:
        raise CliError(str(exc)) from None
    numbers = [p for p in args.port or () if p.isdigit()]
    if numbers:  # --port was serve's TCP port once; it is a serial URL everywhere now
        raise CliError(f"--port: expected a serial URL (device path, pty, socket://host:port), got {numbers[0]}; "
                       f"the TCP port to listen on is --listen-port {numbers[0]}")
    claims, _ = claims_from_args(args)  # a bad claim file is refused before any chamber opens
    kinds = ("wt", "lt") if args.chamber == "both" else (args.chamber,)
    stop = threading.Event()
    made = [d for d in (args.record, *args.record.parents) if not d.exists()]  # removed again if serve fails
    try:
        serve_until(args, stop, token, claims, kinds)
    except BaseException:
        for folder in made:  # deepest first; rmdir removes only what is still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return 0


def serve_until(args: Args, stop: Any, token: str | None, claims: Any, kinds: tuple[str, ...]) -> None:
    """Open the chambers, serve the API until `stop` is set (SIGINT/SIGTERM), then leave them safe."""
    import signal

    from protocols.api import create_app
    from protocols.api.server import serve_in_thread

    with open_selected(args, kinds=kinds) as opened:  # safe state, then close, on exit
        previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            app = create_app(opened.chambers, limits=args.limits, record_dir=args.record, token=token,
                             lease_timeout_s=args.lease_timeout, claims=claims, lease_max_hold_s=args.lease_max_hold,
                             max_sessions=args.max_sessions, session_idle_s=args.session_idle,
                             allowed_hosts=tuple(args.allowed_host))
            with serve_in_thread(app, host=args.host, port=args.listen_port,
                                 log_level="info" if args.verbose else "warning") as url:
                data = {"url": url, "openapi": f"{url}/openapi.json", "live_view": f"{url}/",
                        "chambers": sorted(opened.chambers), "record_dir": str(args.record),
                        "auth": "bearer token" if token else "none (loopback only)",
                        "lease_timeout_s": args.lease_timeout, "lease_max_hold_s": args.lease_max_hold,
                        "max_sessions": args.max_sessions, "session_idle_s": args.session_idle,
                        "allowed_hosts": args.allowed_host, "pid": os.getpid()}
                emit(args, data, lambda d: (f"serving the chamber tools API at {d['url']} (chambers: "
                                            f"{', '.join(d['chambers'])}; auth: {d['auth']}; records: "
                                            f"{d['record_dir']})\nlive view: {d['live_view']}\nstop with Ctrl-C"))
                stop.wait()
                progress(args, "stopping the chamber tools API")
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


# ----------------------------------------------------------------------------------------------- section: station
def add_station_commands(sub: argparse._SubParsersAction) -> None:
    """`station check STATION_FILE`: each instrument's *IDN? and certificate against the station file."""
    station_sub = sub.add_parser("station", help="lab instruments wired to the chambers' sensors").add_subparsers(
        dest="station_command", required=True)
    p = command(station_sub, "check", "open every instrument of a station file and check its *IDN? and certificate")
    p.add_argument("station_file", help="station file (YAML): instruments, rails, positions")
    p.add_argument("--claims", action="store_true", help="also list which claims the station makes gradable")
    p.set_defaults(handler=cmd_station_check)


def cmd_station_check(args: Args) -> int:
    from chamber.instruments import check_station, open_station

    report = check_station(Path(args.station_file))
    if args.claims and report["ok"]:
        from protocols.claims import load_claims
        from protocols.instrument_protocols import gradable_envelope

        with open_station(Path(args.station_file)) as station:
            report["envelope"] = gradable_envelope(load_claims(), station)
    emit(args, report, render_station)
    return 0 if report["ok"] else 1




def render_fit(d: dict[str, Any]) -> str:
    fit = d["fit"]
    lines = [f"wrote {d['output']} ({fit['layout']}, {fit['rows']} rows)"]
    if "offsets_pa" in fit:
        lines.append(f"barometer offsets, Pa ({fit['offsets_reference']}):")
        lines += [f"  {unit:<9} {value:+8.3f}" for unit, value in fit["offsets_pa"].items()]
        lines.append("noise RMS by oversampling, Pa (pooled over units):")
        lines += [f"  osr {osr}: {value:.3f}" for osr, value in fit["noise_pa_by_osr"].items()]
        if fit["osr_kept_default"]:
            lines.append(f"  not in recording, defaults kept: osr {fit['osr_kept_default']}")
    for channel in ("ir", "vis"):
        c = fit.get(channel)
        if c and c.get("fitted"):
            lines.append(f"{channel}: diode gains [{', '.join(f'{g:.3f}' for g in c['diode_gains'])}], t gains "
                         f"[{', '.join(f'{g:.3f}' for g in c['t_gains'])}] ({c['reference']})")
        elif c:
            lines.append(f"{channel}: not fitted ({c['reason']})")
    return "\n".join(lines)


def render_station(d: dict[str, Any]) -> str:
    lines = [f"station {d['station']} ({d['backend']}): {'OK' if d['ok'] else 'NOT OK'}"]
    for r in d["instruments"]:
        status = "ok " if r["ok"] else "BAD"
        lines.append(f"  {status} {r['name']:<16} {r['kind']:<22} {r['resource']:<18} "
                     + (r["idn"] or "no *IDN? reply") + ("" if r["ok"] else f"\n      {r['error']}"))
    for r in d["rails"]:
        lines.append(f"  rail {r['name']}: {r['instrument']} -> {r['component']} ({r['chamber']}: "
                     f"{', '.join(r['reads'])})")
    for r in d["positions"]:
        lines.append(f"  position {r['name']}: {r['instrument']} -> {r['component']} ({r['chamber']})")
    for e in d.get("envelope", []):
        mark = "gradable" if e["gradable_with_station"] else "not gradable"
        lines.append(f"  {e['claim_id']:<36} {mark:<13} {e['note']}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- section: datasheet
def add_datasheet_commands(sub: argparse._SubParsersAction) -> None:
    """`datasheet build|search|section|table|page|fetch`: the agent's datasheet tools from the command line."""
    ds_sub = sub.add_parser("datasheet", help="read a datasheet PDF with the agent's tools; fetch known datasheets"
                            ).add_subparsers(dest="datasheet_command", required=True)
    p = command(ds_sub, "build", "manifest: pages, part, revision, contents (and their source), tables per page")
    p.add_argument("pdf", type=Path, help="the datasheet PDF")
    p.add_argument("--cache-dir", type=Path, default=None, help="keep manifests here, keyed by the file's SHA-256")
    p.set_defaults(handler=cmd_datasheet_build)
    p = command(ds_sub, "search", "find a value or phrase (exact, then normalised, then wrapped table rows)")
    p.add_argument("pdf", type=Path, help="the datasheet PDF")
    p.add_argument("query", help="a value or phrase, e.g. 'operating range'")
    p.add_argument("--page", type=POSITIVE, default=None, help="search this page only (1-based)")
    p.add_argument("--max-results", type=POSITIVE, default=20, help="most hits to return (default 20)")
    p.set_defaults(handler=lambda a: datasheet_call(a, "search", lambda s: {"hits": s.search(
        a.query, a.page, a.max_results)}, lambda d: "\n".join(
        f"p{h['page']} [{h['section']}] {h['snippet']}" for h in d["hits"]) or "no match"))
    p = command(ds_sub, "section", "text of pages START..END with page markers, headers and footers removed")
    p.add_argument("pdf", type=Path, help="the datasheet PDF")
    p.add_argument("start", type=POSITIVE, help="first page (1-based)")
    p.add_argument("end", type=POSITIVE, help="last page (inclusive)")
    p.set_defaults(handler=lambda a: datasheet_call(a, "section", lambda s: {"text": s.section_text(a.start, a.end)},
                                                    lambda d: d["text"]))
    p = command(ds_sub, "table", "the tables of one page as markdown")
    p.add_argument("pdf", type=Path, help="the datasheet PDF")
    p.add_argument("page", type=POSITIVE, help="page number (1-based)")
    p.set_defaults(handler=lambda a: datasheet_call(a, "table", lambda s: {"page": a.page, "markdown":
                                                    s.table_markdown(a.page)}, lambda d: d["markdown"]))
    p = command(ds_sub, "page", "render a page (or a region) to PNG")
    p.add_argument("pdf", type=Path, help="the datasheet PDF")
    p.add_argument("page", type=POSITIVE, help="page number (1-based)")
    p.add_argument("--out", type=Path, required=True, help="PNG file to write")
    p.add_argument("--region", type=float, nargs=4, default=None, metavar=("X0", "Y0", "X1", "Y1"),
                   help="only this rectangle, in PDF points from the page's top left")
    p.add_argument("--dpi", type=whole(10, 600), default=100, help="resolution (default 100)")
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
    p.add_argument("claim_id", help="claim id (see protocols/data/claims/)")
    p.add_argument("--model", required=True,
                   help="scripted:<policy> | <anthropic model id> | openai:<model> | openai-compat:<base_url>#<model>")
    p.add_argument("--datasheet", type=Path, default=None, help="PDF (default: the claim's datasheet in shared/)")
    add_claims_option(p)
    p.add_argument("--chamber-url", default=None,
                   help="chamber tools API base URL (default: an in-process service on the simulator)")
    p.add_argument("--no-chamber", action="store_true", help="phase one only: no chamber tools")
    add_token_option(p)
    p.add_argument("--record", type=Path, default=Path("records"), help="folder for the JSONL record and blobs")
    p.add_argument("--max-turns", type=POSITIVE, default=30, help="most model turns in the cell (default 30)")
    p.add_argument("--max-tokens", type=POSITIVE, default=None, help="token budget for the cell (input + output)")
    p.add_argument("--wall-s", type=seconds, default=900.0, help="wall-time budget for the cell, seconds")
    p.add_argument("--otlp", type=Path, default=None, help="also write the record as OTLP/JSON spans here")
    p.add_argument("--otlp-endpoint", default=None, metavar="URL",
                   help="send each record's trace as OTLP/HTTP protobuf (e.g. Phoenix http://127.0.0.1:6006); "
                        "default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT")
    p.add_argument("--inspect-log", type=Path, default=None, metavar="DIR",
                   help="also write the record as an inspect-ai eval log (.json) in DIR")
    p.add_argument("--thinking", default=None, metavar="TOKENS|off", help="extended thinking budget (Anthropic, LiteLLM)")
    p.add_argument("--effort", default=None, help="reasoning effort (OpenAI reasoning, Anthropic effort, chat reasoning_effort)")
    p.add_argument("--max-output-tokens", type=POSITIVE, default=None, help="output token limit per model turn")
    p.add_argument("--extra-body", default=None, metavar="JSON",
                   help='chat completions only: merged into each request, e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'')
    p.set_defaults(handler=cmd_extract)


def add_token_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chamber-token-file", type=Path, default=None, metavar="PATH",
                   help="file holding the chamber service's bearer token (else env CHAMBERLAB_CHAMBER_TOKEN; "
                        "needed for a --chamber-url served off loopback)")


def chamber_client(args: Args, stack: contextlib.ExitStack, url: str | None) -> Any:
    """The phase-two client of `url` (None: no chamber), sending the token of --chamber-token-file or the env."""
    import httpx

    from agent.chamber_client import ChamberClient, chamber_token

    token = chamber_token(args.chamber_token_file, os.environ) if args.chamber_url else None
    return ChamberClient(stack.enter_context(httpx.Client(base_url=url, timeout=60.0)), token=token) if url else None


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
    import httpx

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
        chamber = chamber_client(args, stack, url)
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
    p.add_argument("--out", type=Path, required=True, help="folder to write the converted cells into")
    p.set_defaults(handler=cmd_import_archive)
    p = command(sub, "matrix", "run models x claims x repeats x arms (resumable), then score the run folder")
    p.add_argument("--models", required=True, help="comma-separated model specs (as for `extract --model`)")
    add_claims_option(p, ids=True)
    p.add_argument("--repeats", type=POSITIVE, default=1, help="cells per model, claim and arm (default 1)")
    p.add_argument("--arms", default="normal", help="comma-separated: normal, withhold-navigation, "
                   "withhold-crosscheck, closed-book, null-tool, wrong-content, single-pass")
    p.add_argument("--out", type=Path, required=True, help="the run folder")
    p.add_argument("--concurrency", type=POSITIVE, default=2, help="cells run at once (default 2)")
    p.add_argument("--datasheets", type=Path, default=None, help="folder of the PDFs (default: shared/datasheets)")
    p.add_argument("--prices", type=Path, default=None, help="price table (JSON/YAML) for cost per cell")
    p.add_argument("--max-turns", type=POSITIVE, default=30, help="most model turns per cell (default 30)")
    p.add_argument("--wall-s", type=seconds, default=900.0, help="wall-time budget per cell, seconds (default 900)")
    p.add_argument("--chamber-url", default=None,
                   help="chamber tools API base URL for phase two (default: an in-process service on the simulator)")
    p.add_argument("--no-chamber", action="store_true", help="phase one only: no chamber tools")
    add_token_option(p)
    p.add_argument("--inspect-log", action="store_true",
                   help="also write OUT/inspect/: one inspect-ai eval log (.json) per model, every cell a sample")
    p.set_defaults(handler=cmd_matrix)
    p = command(sub, "report", "write RUN_DIR/report.md, report.html and figures from what the run folder holds")
    p.add_argument("run_dir", type=Path, help="a run folder (run, matrix --out)")
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
        chamber = chamber_client(args, stack, url)
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


RUN_FOLDER_FILES = ("summary.json", "checks.json", "station_checks.json", "calibration.json", "sweep.json",
                    "link.json", "scores.json", "cells")
"""What a run folder holds; `report` refuses a folder with none of them instead of writing an empty report."""


def cmd_report(args: Args) -> int:
    from agent.scoring.report import write_report

    held = [n for n in RUN_FOLDER_FILES if (args.run_dir / n).exists()]
    if args.run_dir.is_dir() and not held:
        raise CliError(f"{args.run_dir}: expected a run folder holding one of {', '.join(RUN_FOLDER_FILES)}; "
                       "it holds none of them (run `run` or `matrix --out` first)")
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




# ----------------------------------------------------------------------------------------------- section: verdicts
def add_chamber_selection(p: argparse.ArgumentParser) -> None:
    """--backend sim (both chambers in-process) or one or more --port URLs (the chamber kind is announced)."""
    p.add_argument("--backend", choices=["sim", "serial"], default=None,
                   help="sim: in-process simulator of both chambers (default when no --port is given)")
    p.add_argument("--port", action="append", default=None, metavar="URL",
                   help="pyserial URL of a chamber (device path, pty, socket://); repeat for wind + light tunnel")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (with --backend sim)")
    p.add_argument("--params", default=None, help="simulator parameter file, YAML or JSON (with --backend sim)")
    p.add_argument("--limits", default=None, help="operator limits file (YAML/JSON) enforced by the driver")
    p.add_argument("--station", default=None, metavar="STATION_FILE",
                   help="lab instruments (SMU, reference barometer, temperature controller) to grade more claims")


def add_verdict_commands(sub: argparse._SubParsersAction) -> None:
    from firmware_bridge.variables import OSR_LEVELS

    p = command(sub, "calibrate", "cross-sensor calibration of the wind tunnel's four DPS310 barometers")
    add_chamber_selection(p)
    p.add_argument("-n", type=POSITIVE, default=200, help="rows measured after settling (default 200)")
    p.add_argument("--osr", type=int, default=8, choices=OSR_LEVELS, help="barometer oversampling (default 8)")
    p.add_argument("-o", "--output", default=None, help="write the calibration record (JSON) here")
    p.set_defaults(handler=cmd_calibrate)
    p = command(sub, "check", "grade a claim (or --all) on the chamber: pass / inconclusive / fail with u")
    p.add_argument("claim_id", nargs="?", help="claim id (see protocols/data/claims/)")
    p.add_argument("--all", action="store_true", help="check every claim and print a table")
    add_claims_option(p)
    add_chamber_selection(p)
    p.add_argument("--rows", type=POSITIVE, default=200, help="rows per measurement (default 200)")
    p.add_argument("--calibration", default=None, help="a calibration record to use (default: calibrate first)")
    p.set_defaults(handler=cmd_check)
    p = command(sub, "sweep", "hold one measurement fixed and move the claim's bound through it")
    p.add_argument("claim_id", help="claim id whose bound is swept (e.g. dps310-operating-range)")
    add_chamber_selection(p)
    p.add_argument("--measured", type=decimal_value, default=None, help="a given measured value (in the claim's unit)")
    p.add_argument("--u", type=decimal_value, default=None, help="its standard uncertainty (with --measured)")
    p.add_argument("--recording", default=None, help="a recorded fans-off CSV (public dataset layout)")
    p.add_argument("--steps", type=whole(3), default=41, help="bounds tried along the sweep (default 41)")
    p.add_argument("--csv", default=None, help="write the rows as CSV")
    p.add_argument("--plot", default=None, help="write the figure as PNG")
    p.set_defaults(handler=cmd_sweep)


def cmd_calibrate(args: Args) -> int:
    from datetime import datetime, timezone

    from calibration.records import record_from_calibration, save_record
    from protocols.runner import calibrate

    with open_selected(args) as opened:
        if "wt" not in opened.chambers:
            raise CliError("calibration needs the wind tunnel; connected: " + ", ".join(opened.chambers))
        cal = calibrate(opened.chambers["wt"], n=args.n, osr=args.osr, progress=lambda m: progress(args, m))
    record = record_from_calibration(cal, date=datetime.now(timezone.utc))
    if args.output:
        save_record(record, Path(args.output))

    def render(d: dict[str, Any]) -> str:
        p = d["record"]["parameters"]
        return "\n".join([f"cross-sensor mean {p['mean']:.2f} Pa (u {p['mean_u']:.2f} Pa), spread {p['spread']:.2f} Pa"]
                         + [f"  {k:<18} offset {v:+7.2f} Pa  (u {p['offset_u'][k]:.2f})" for k, v in p["offsets"].items()]
                         + ([f"record written to {d['path']}"] if d["path"] else []))

    emit(args, {"record": record.model_dump(mode="json", by_alias=True), "path": args.output}, render)
    return 0



def cmd_check(args: Args) -> int:
    from protocols.claims import get_claim
    from protocols.lab_job import grade_claims

    if bool(args.all) == bool(args.claim_id):
        raise CliError("give one CLAIM_ID or --all")
    pool, _ = claims_from_args(args)
    claims = list(pool.values()) if args.all else [get_claim(args.claim_id, pool)]
    calibration = None
    if args.calibration:
        from calibration.records import load_record

        calibration = load_record(Path(args.calibration))
    station = open_station_from_args(args)  # a bad station file or instrument fails here, before any staging
    try:
        with open_selected(args) as opened:
            results = grade_claims(claims, opened.chambers, rows=args.rows, calibration=calibration,
                                   report=lambda m: progress(args, m), station=station)
    finally:
        if station is not None:
            station.close()
    dicts = [r.to_dict() for r in results]
    if args.all:
        emit(args, {"results": dicts}, lambda d: render_check_table(d["results"]))
    else:
        emit(args, dicts[0], lambda d: render_check_table([d]) + "\n\n" + d["reason"])
    return 0


def cmd_sweep(args: Args) -> int:
    from protocols.claims import get_claim
    from protocols.sweep import plot_sweep, sweep, write_sweep_csv

    claim = get_claim(args.claim_id)
    if (args.measured is None) != (args.u is None):
        raise CliError("--measured and --u go together")
    if args.measured is not None:
        measured, u, unit, dof = args.measured, args.u, claim.unit, float("inf")
    else:
        m = sweep_measurement(args, claim)
        measured, u, unit, dof = m.value, m.u, m.unit, m.dof
    result = sweep(claim, measured, u, unit=unit, steps=args.steps, dof=dof)
    with all_or_nothing([Path(p) for p in (args.csv, args.plot) if p]) as staged:  # both files, or neither
        if args.csv:
            write_sweep_csv(result, staged[Path(args.csv)])
        if args.plot:
            plot_sweep(result, staged[Path(args.plot)])

    def render(d: dict[str, Any]) -> str:
        m = d["measured"]
        return "\n".join([f"{d['claim_id']}: measured {m['value']} ± {m['u']} {m['unit']}, "
                          f"c = {d['combined_uncertainty']}", f"{'bound':>24} {'distance':>22}  verdict"]
                         + [f"{r['bound']:>24} {r['distance']:>22}  {r['verdict']}" for r in d["rows"]])

    emit(args, {**result.to_dict(), "files": {"csv": args.csv, "plot": args.plot}}, render)
    return 0


def sweep_measurement(args: Args, claim: Any) -> Any:
    """The fixed measurement of a sweep: from a recorded CSV, or measured live with the claim's protocol."""
    from protocols.lab_job import grade_claims

    if args.recording:  # refused naming the rows: unset readings, fans on, another protocol (protocols/recorded.py)
        from protocols.recorded import operating_range_from_recording

        return operating_range_from_recording(claim, Path(args.recording))
    with open_selected(args) as opened:
        (result,) = grade_claims([claim], opened.chambers, rows=200, report=lambda m: progress(args, m))
    if result.measurement is None or result.measurement.value is None:
        raise CliError(f"{claim.id}: the protocol gave no measurement to sweep ({result.verdict.reason})")
    return result.measurement


# ----------------------------------------------------------------------------------------------- section: run
def add_run_commands(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "run", "the main job: chambers, calibration, all checks, the sweep, the agent, scores, report")
    p.add_argument("--port", action="append", default=None, metavar="URL",
                   help="real chamber(s) instead of the emulated boards (repeat for wind + light tunnel)")
    p.add_argument("--model", default="scripted:reader", help="agent model (default scripted:reader, offline)")
    p.add_argument("--runs-dir", type=Path, default=PROJECT_ROOT / "runs", help="where run directories go")
    p.add_argument("--resume", type=Path, default=None, help="resume this run directory (finished cells kept)")
    p.add_argument("--new", action="store_true",
                   help="start a new run even if the last one was interrupted (default: resume it)")
    p.add_argument("--rows", type=POSITIVE, default=200, help="rows per measurement (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the emulated boards")
    add_claims_option(p, ids=True)  # ids select the claims for the agent
    p.add_argument("--no-agent", action="store_true", help="skip the agent (chamber part only)")
    p.add_argument("--station", default=None, metavar="STATION_FILE",
                   help="lab instruments to grade with as well (default with emulated boards: the simulated station)")
    p.add_argument("--no-station", action="store_true", help="grade with the chamber alone")
    p.add_argument("--limits", default=None,
                   help="operator limits file (YAML/JSON; one file may cover both chambers) enforced by the driver")
    p.set_defaults(handler=cmd_run)
    p = command(sub, "runs", "list runs recorded in the index (runs/index.sqlite)")
    p.add_argument("action", choices=["list"], help="list: every run in the index")
    p.add_argument("--runs-dir", type=Path, default=PROJECT_ROOT / "runs", help="the runs folder (default ./runs)")
    p.set_defaults(handler=cmd_runs)


def cmd_run(args: Args) -> int:
    """The main job: chambers (lab_job) then the agent's cells over the chamber tools API (agent_job), one run
    folder held by this process (runfolder), the report, and the summary on stdout."""
    import contextlib

    from agent.agent_job import run_agent_job
    from agent.runfolder import open_run_folder, provenance, utc_now
    from agent.scoring.report import write_report
    from chamber.instruments import sim_station_file
    from protocols.claim_sources import CHAMBER_PARTS_DIR, load_main_job_claims, split_claims_args
    from protocols.claims import PACKAGED_DIR
    from protocols.files import write_json_atomic
    from protocols.lab_job import run_lab_job, start_chamber_api, start_live_view

    model = None  # a wrong model spec, missing key, claim, limits or station file fails now, before any chamber
    if not args.no_agent:
        from agent.models import client_for

        model = client_for(args.model, os.environ)
    given, selected = claims_from_args(args, ids=True)
    paths = split_claims_args(args.claims)[0]
    pool = given if paths else load_main_job_claims(None)  # no --claims PATH: + the chamber-parts claims
    unknown = [c for c in selected or () if c not in pool]
    if unknown:
        raise CliError(f"--claims: unknown claim id(s) {', '.join(unknown)}; known: {', '.join(sorted(pool))}")
    claims = list(pool.values())
    sources = [str(p) for p in paths] or [PACKAGED_DIR, f"protocols/data/{CHAMBER_PARTS_DIR.name}"]
    station = None if args.no_station else (args.station or (None if args.port else str(sim_station_file())))
    check_run_files(args, station)
    datasheets = shared_dir() / "datasheets"
    agent_claims = [c for c in claims if selected is None or c.id in selected]  # the chamber-parts claims too
    skipped_agent = None if model is None else no_datasheets(agent_claims, datasheets)
    if skipped_agent:
        progress(args, f"agent part will be skipped: {skipped_agent}")
        model = None
    backend = "serial:" + ",".join(args.port) if args.port else "emulated boards on ptys"
    folder = open_run_folder(args.runs_dir, backend, resume=args.resume, new=args.new)
    if folder.resumed:
        progress(args, f"resuming run {folder.run_id} (finished agent cells are kept; --new starts afresh)")
    summary: dict[str, Any] = {"run_id": folder.run_id, "run_dir": str(folder.run_dir), "backend": backend}
    where: list[dict[str, Any]] = []
    bars = Bars()

    def record_provenance() -> None:
        summary["provenance"] = provenance(folder, finished=utc_now(), seed=None if args.port else args.seed,
                                           model=None if args.no_agent else args.model, chambers=where,
                                           station=station, limits=args.limits, claims_sources=sources)
    status = "failed"
    try:
        with contextlib.ExitStack() as stack:
            opened = stack.enter_context(open_selected(args, backend=None if args.port else "emulated"))
            where += opened.provenance()
            chambers, summary["live_view"], graded = start_live_view(stack, opened.chambers)
            progress(args, f"live view: {summary['live_view']}")
            lab = run_lab_job(claims, chambers, folder.run_dir, rows=args.rows, station_file=station, progress=bars,
                              graded=graded, on_verdicts=lambda checks: [
                                  folder.index.record_verdict(folder.run_id, r) for r in checks])
            summary.update(lab.summary)
            if skipped_agent:
                summary["agent_skipped"] = skipped_agent
            if model is not None:
                summary["agent"] = run_agent_job(
                    agent_claims, model_spec=args.model, model=model, datasheets_dir=datasheets,
                    run_dir=folder.run_dir, run_id=folder.run_id, index=folder.index, selected=selected,
                    api_url=start_chamber_api(stack, chambers, folder.run_dir, agent_claims), progress=bars)
        record_provenance()
        write_json_atomic(folder.run_dir / "summary.json", summary)
        summary["report"] = str(write_report(folder.run_dir))
        status = "finished"
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: chambers made safe above; the index and summary say so
        status = "interrupted"
        summary["interrupted"] = True
        record_provenance()
    finally:
        summary["seconds"] = round((utc_now() - folder.started).total_seconds(), 1)
        folder.index.finish_run(folder.run_id, utc_now().isoformat(timespec="seconds"), status, summary)
        folder.close()
    emit(args, summary, render_run_summary)
    return 130 if status == "interrupted" else 0


def check_run_files(args: Args, station: str | None) -> None:
    """Parse the limits and station files whole (not only read them) before the main job opens anything."""
    from chamber.instruments.station import load_station_file
    from chamber.limits import load_limits

    if args.limits:
        load_limits(args.limits)
    if station:
        load_station_file(station)


def no_datasheets(claims: list[Any], datasheets: Path) -> str | None:
    """Why the agent part cannot run (not one of its claims' datasheets is in `datasheets`), or None if one is."""
    if any((datasheets / c.identity.filename).exists() for c in claims):
        return None
    names = sorted({c.identity.filename for c in claims})
    return (f"no datasheet in {datasheets} (expected {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}); "
            f"fetch them with `chamberlab datasheet fetch --all --dir {datasheets}`, or set CHAMBERLAB_SHARED to "
            "the folder that holds datasheets/")


def cmd_runs(args: Args) -> int:
    from agent.runindex import RunIndex

    path = args.runs_dir.resolve() / "index.sqlite"
    if not path.exists():
        emit(args, {"runs": []}, lambda d: f"no runs yet (index {path} does not exist)")
        return 0
    with RunIndex(path) as index:
        runs = [dict(r.__dict__) for r in index.runs()]
    emit(args, {"runs": runs}, lambda d: "\n".join(
        [f"{'run':<18} {'status':<9} {'backend':<26} verdicts"]
        + [f"{r['run_id']:<18} {r['status']:<9} {r['backend'][:26]:<26} {count_line(r['summary'].get('verdicts', {}))}"
           for r in d["runs"]]))
    return 0


# ----------------------------------------------------------------------------------------------- main
COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_run_commands, add_verdict_commands, add_sim_commands, add_chamber_commands, add_datasheet_commands,
    add_extract_commands, add_serve_commands, add_station_commands, add_scoring_commands]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="chamberlab", description="chamberlab: Causal Chamber lab controller and instrumented datasheet agent")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (also after the command)")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMAND_GROUPS:
        add(sub)
    return parser


TEXT_FILE_OPTIONS = {"params": "--params", "limits": "--limits", "safe": "--safe", "station": "--station",
                     "calibration": "--calibration", "prices": "--prices", "base": "--base",
                     "token_file": "--token-file", "chamber_token_file": "--chamber-token-file",
                     "recording": "recording", "protocol": "protocol", "station_file": "station_file"}
"""Options naming a text file (YAML, JSON, CSV, protocol, token) that every command reads as UTF-8."""


def check_input_files(args: Args) -> None:
    """Refuse, naming the option and the file, an input file that is missing, a folder, unreadable or not UTF-8
    text: before any chamber is opened, and instead of a bare UnicodeDecodeError that names no file."""
    given = getattr(args, "claims", None)  # a list of paths or ids; `station check --claims` is a flag
    claims = [Path(c) for c in given if Path(c).exists()] if isinstance(given, list) else []
    files = [("--claims", f) for c in claims for f in ([c] if c.is_file() else sorted(c.rglob("*.y*ml")))]
    for dest, option in TEXT_FILE_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is not None and value is not True and value is not False:
            files.append((option, Path(value)))
    for option, path in files:
        if not path.is_file():
            raise CliError(f"{option} {path}: " + ("expected a file, got a folder" if path.is_dir() else
                                                   "file not found"))
        try:  # the first MiB: enough to tell text from binary without reading a long recording twice
            with path.open("rb") as fh:
                codecs.getincrementaldecoder("utf-8")().decode(fh.read(1 << 20), final=False)
        except OSError as exc:
            raise CliError(f"{option} {path}: cannot be read ({exc.strerror or exc})") from None
        except UnicodeDecodeError as exc:
            raise CliError(f"{option} {path}: expected UTF-8 text, byte {exc.object[exc.start]:#04x} at offset "
                           f"{exc.start} is not UTF-8") from None


def error_text(exc: BaseException) -> str:
    """An error as one line: pydantic's multi-line report becomes its first field and message (and how many more),
    YAML's caret drawing and any other line breaks fold into spaces."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{exc.title}: field '{where}': {first['msg']}{more}"
    return " ".join(str(exc).split())


def fail(as_json: bool, kind: str, message: str) -> int:
    """Print a refusal (stderr `error: <type>: <message>`, or one JSON object on stdout with --json); exit code 2."""
    if as_json:
        sys.stdout.write(json.dumps({"error": {"type": kind, "message": message}}) + "\n")
    else:
        sys.stderr.write(f"error: {kind}: {message}\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        return fail("--json" in argv, "usage", error_text(exc))
    args.verbose = getattr(args, "verbose", False)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from chamber.stop import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():  # SIGTERM unwinds like Ctrl-C: exit paths apply the safe state
            check_input_files(args)  # a missing or undecodable file is named before any work starts
            result = args.handler(args)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:  # rendered, not swallowed: the type and message tell the user what went wrong
        if args.verbose:
            log.exception("command failed")
        return fail(getattr(args, "json", False), type(exc).__name__, error_text(exc))
    return int(result or 0)


def render_check_table(results: list[dict[str, Any]]) -> str:
    header = f"{'claim':<36} {'verdict':<13} {'value ± u':<28} {'k':>5} {'cond m/u':>8}  class"
    lines = [header, "-" * len(header)]
    for r in results:
        m = r["measured"]
        value = "—" if not m or m["value"] is None else f"{m['value']} ± {m['u']} {m['unit']}"
        k = "" if not m or m["k"] is None else f"{m['k']:.2f}"
        cond = f"{len(r['matched_conditions'])}/{len(r['unmatched_conditions'])}"
        lines.append(f"{r['claim_id']:<36} {r['verdict']:<13} {value:<28} {k:>5} {cond:>8}  {r['class'] or ''}")
    return "\n".join([*lines, "", "  ".join(f"{k}: {v}" for k, v in sorted(Counter(r["verdict"] for r in results).items()))])


def render_run_summary(d: dict[str, Any]) -> str:
    lines = ["", f"run {d['run_id']} ({d['backend']}) in {d.get('seconds', '?')} s"]
    if "verdicts" in d:
        lines.append("verdicts:   " + ", ".join(f"{k} {v}" for k, v in sorted(d["verdicts"].items())))
    s = d.get("sweep") or {}
    if "measured" in s:
        m = s["measured"]
        lines.append(f"sweep:      {s['claim_id']} measured {m['value']} ± {m['u']} {m['unit']}, "
                     f"c = {s['combined_uncertainty']}; verdict changes at bounds {', '.join(s['verdict_changes_at'])}")
    st = d.get("station")
    if st:
        lines.append(f"station:    {len(st['definitive'])} definitive with instruments ("
                     + ", ".join(f"{k} {v}" for k, v in sorted(st["verdicts"].items())) + ")")
    for kind, counters in (d.get("link") or {}).items():
        lines.append(f"link {kind}:    " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    if d.get("agent_skipped"):
        lines.append(f"agent:      skipped: {d['agent_skipped']}")
    a = d.get("agent")
    if a:
        lines.append(f"agent:      {a['model']} on {a['cells']} claims ({a['kept_from_earlier']} kept from before): "
                     + ", ".join(f"{k} {v}" for k, v in a["outcomes"].items()))
        if a.get("skipped_datasheets"):
            lines.append(f"            skipped (no datasheet): {', '.join(a['skipped_datasheets'])}")
        fs = a.get("fidelity_and_flags")
        if isinstance(fs, dict) and fs:
            flagged = fs.get("flagged") or {}
            bound = (f" (one-sided 95 % upper bound {flagged['upper_95']:.3f}; unit: {flagged.get('unit', 'cells')})"
                     if flagged.get("count") == 0 and flagged.get("upper_95") is not None else "")
            latency = fs.get("latency_per_cell_mean_s")
            lines.append(f"scores:     fidelity {fs.get('fidelity_passed')} of {fs.get('cells')} cells; detector flags "
                         f"{flagged.get('count', 0)} of {flagged.get('n', 0)}{bound}; engine errors "
                         f"{fs.get('engine_errors', 0)}" + (f"; {latency:.2f} s per cell" if latency else ""))
    lines.append(f"results:    {d['run_dir']}")
    lines.append(f"report:     {d.get('report') or Path(d['run_dir']) / 'summary.json'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
