#!/usr/bin/env python3
"""chamberlab's one command line: parses arguments, calls the layers, renders text or JSON.

Every subcommand takes `--json` and then prints exactly one JSON object on stdout. Errors go to stderr as
`error: <Type>: <message>` (or a JSON object `{"error": {"type", "message"}}` with --json) and exit code 2, so
scripts can tell a refused request from a crash. Subsystems are imported inside the command functions so that
`--help` stays fast and a broken optional layer cannot stop the others from working.

Layout of this file: shared helpers first, then one section per command group (sim, chamber, datasheet, extract,
verdicts = calibrate/check/sweep, serve, scoring = score/import-archive/matrix/report, station, run/runs). Each
section owns an `add_*` function, listed in COMMAND_GROUPS.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable

PROJECT_ROOT = Path(__file__).resolve().parent
log = logging.getLogger("chamberlab.cli")


# ----------------------------------------------------------------------------------------------- shared helpers
def shared_dir() -> Path:
    """Where ../shared lives: env var CHAMBERLAB_SHARED, default `../shared` beside the project root."""
    env = os.environ.get("CHAMBERLAB_SHARED")
    return Path(env).resolve() if env else (PROJECT_ROOT.parent / "shared").resolve()


class CliError(Exception):
    """A request the CLI refuses (bad arguments found after parsing); rendered without a traceback."""


def _json_default(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def emit(args: argparse.Namespace, data: dict[str, Any], render: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Print a command's result: one JSON object with --json, else the text rendering."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(data, default=_json_default) + "\n")
    else:
        text = render(data) if render else json.dumps(data, indent=2, default=_json_default)
        sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def progress(args: argparse.Namespace, message: str) -> None:
    """Progress lines go to stderr so that stdout stays machine-readable with --json."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def command(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand parser that always has --json."""
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def add_claims_option(p: argparse.ArgumentParser, ids: bool = False) -> None:
    """`--claims PATH` (repeatable): grade the user's claim files instead of the packaged set; with `ids`, a value
    may also be `all` or comma-separated claim ids (run and matrix selected claims this way before)."""
    extra = "; or all | comma-separated claim ids to select" if ids else ""
    p.add_argument("--claims", action="append", default=None, metavar="PATH" + ("|IDS" if ids else ""),
                   help="a claim file or folder of them (repeatable; default: the packaged claims)" + extra + "")


def claims_from_args(args: argparse.Namespace, ids: bool = False) -> tuple[dict[str, Any], list[str] | None]:
    """The claims a command grades (checked: known part, datasheet SHA-256, declared protocols) and the ids selected."""
    from protocols.claim_sources import load_checked_claims, split_claims_args

    paths, selected = split_claims_args(getattr(args, "claims", None))
    if selected is not None and not ids:
        raise CliError(f"--claims: expected a claim file or folder, got {', '.join(selected)} (no such path)")
    return load_checked_claims(paths), selected


def split_claims_args_paths(args: argparse.Namespace) -> list[Any]:
    """The claim files and folders given with --claims (empty: none)."""
    from protocols.claim_sources import split_claims_args

    return split_claims_args(getattr(args, "claims", None))[0]


def parse_assignments(items: list[str] | None) -> list[tuple[str, str]]:
    """`var=value` strings → pairs; the value stays a string so the driver can name a non-numeric one."""
    pairs = []
    for item in items or []:
        if "=" not in item:
            raise CliError(f"expected VAR=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        pairs.append((name.strip(), value.strip()))
    return pairs


# ----------------------------------------------------------------------------------------------- section: sim
def add_sim_commands(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser("sim", help="the emulated Mk1 board and the simulator's parameters")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    # sim serve / sim fit are registered by their sections below.
    _register_sim_serve(sim_sub)
    _register_sim_fit(sim_sub)


def _register_sim_serve(sim_sub: argparse._SubParsersAction) -> None:
    p = command(sim_sub, "serve", "serve an emulated Mk1 board on a pty or TCP socket; prints the port URL first")
    p.add_argument("--chamber", choices=["wt", "lt"], default="wt")
    p.add_argument("--config", default="standard", help="board configuration (wt: standard|pressure-control)")
    p.add_argument("--transport", choices=["pty", "tcp"], default="pty")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--params", type=Path, help="YAML/JSON file of physics parameters")
    p.add_argument("--pace", choices=["real", "fast"], default="real",
                   help="real: the real board's boot, row, motor and ACK timings (default, like a real chamber); "
                        "fast: no time for anything, for tests (see FIDELITY in simulator/board_protocol.py)")
    p.add_argument("--host", default="127.0.0.1", help="TCP bind address")
    p.add_argument("--tcp-port", type=int, default=0, help="TCP port (0: any free port)")
    p.add_argument("--window", type=int, default=1,
                   help="board data segments in flight (1 = stop-and-wait, as the real firmware; more is faster)")
    p.add_argument("--faults", help="JSON object of test fault switches (simulator.board_protocol.BoardFaults)")
    p.set_defaults(handler=_sim_serve)


def _read_mapping(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))  # YAML is a superset of JSON
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a mapping of parameters, got {type(data).__name__}")
    return data


def _sim_serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from simulator.board import make_board
    from simulator.board_protocol import BoardFaults

    faults = None
    if args.faults:
        try:
            faults = BoardFaults(**json.loads(args.faults))
        except (ValueError, TypeError) as exc:
            raise CliError(f"--faults: expected a JSON object of BoardFaults fields: {exc}") from exc
    board = make_board(args.chamber, transport=args.transport, seed=args.seed, config=args.config,
                       params=_read_mapping(args.params), faults=faults, pace=args.pace,
                       window=args.window, host=args.host, port=args.tcp_port)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    sys.stdout.write(board.url + "\n")
    sys.stdout.flush()
    progress(args, f"emulated {args.chamber}/{args.config} board serving on {board.url} (seed {args.seed}, "
                   f"{args.pace}); stop with Ctrl-C or SIGTERM")
    try:
        board.serve(stop)
    finally:
        board.transport.close()
    return 0


def _register_sim_fit(sim_sub: argparse._SubParsersAction) -> None:
    p = command(sim_sub, "fit", "estimate simulator parameters (barometer offsets/noise, light gains) from a recorded CSV")
    p.add_argument("recording", help="experiment CSV in the public dataset layout (timestamp, config, counter, ...)")
    p.add_argument("-o", "--output", required=True, help="parameter file to write (JSON; `sim serve --params`)")
    p.add_argument("--base", help="parameter file to start from (default: built-in defaults)")
    p.set_defaults(handler=_cmd_sim_fit)


def _cmd_sim_fit(args: argparse.Namespace) -> int:
    from simulator.fit import fit_recording
    from simulator.params import dump_params, load_params

    if not Path(args.recording).is_file():
        raise CliError(f"recording not found: {args.recording}")
    base = load_params(args.base) if args.base else None
    progress(args, f"fitting {args.recording} ...")
    result = fit_recording(args.recording, base=base)
    out = Path(args.output)
    out.write_text(json.dumps(dump_params(result.params), indent=2) + "\n", encoding="utf-8")
    data = {"output": str(out), "source": result.params.source, "fit": result.report}

    def render(d: dict[str, Any]) -> str:
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
            if channel in fit:
                c = fit[channel]
                if c.get("fitted"):
                    gains = ", ".join(f"{g:.3f}" for g in c["diode_gains"])
                    tg = ", ".join(f"{g:.3f}" for g in c["t_gains"])
                    lines.append(f"{channel}: diode gains [{gains}], t gains [{tg}] ({c['reference']})")
                else:
                    lines.append(f"{channel}: not fitted ({c['reason']})")
        return "\n".join(lines)

    emit(args, data, render)
    return 0


# ----------------------------------------------------------------------------------------------- section: chamber
def add_chamber_commands(sub: argparse._SubParsersAction) -> None:
    chamber = sub.add_parser("chamber", help="talk to a chamber (serial port or in-process sim)")
    chamber_sub = chamber.add_subparsers(dest="chamber_command", required=True)
    info = command(chamber_sub, "info", "connect, and show the board's configuration and variables")
    _chamber_target_args(info)
    info.set_defaults(handler=_chamber_info)
    measure = command(chamber_sub, "measure", "apply settings, then measure N checked rows")
    _chamber_target_args(measure)
    measure.add_argument("-n", type=int, required=True, help="number of rows")
    measure.add_argument("--set", action="append", metavar="VAR=VALUE", help="a setting applied before measuring")
    _operator_args(measure)
    measure.set_defaults(handler=_chamber_measure)
    run = command(chamber_sub, "run", "run an experiment protocol file (the chamber authors' language) into a CSV "
                                      "in the public dataset layout")
    run.add_argument("protocol", type=Path, help="protocol file: SET/MSR/WAIT/WAIT_INPUT/RST lines, # comments")
    _chamber_target_args(run)
    run.add_argument("-o", "--output", type=Path, default=None,
                     help="CSV to write (default: <protocol name>_<UTC time>.csv here)")
    run.add_argument("--validate-only", action="store_true",
                     help="check the protocol against the catalogue of --chamber/--config (and --limits) offline")
    _operator_args(run)
    run.set_defaults(handler=_chamber_run)
    shell = command(chamber_sub, "shell", "an interactive SET/MSR/WAIT/RST prompt (checked before sending; Tab "
                                          "completes variable names)")
    _chamber_target_args(shell)
    _operator_args(shell)
    shell.add_argument("--history", type=Path, default=Path.home() / ".chamberlab_history",
                       help="readline history file (default ~/.chamberlab_history)")
    shell.set_defaults(handler=_chamber_shell)


def _chamber_target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", help="pyserial URL: /dev/ttyACM0, a pty path, socket://host:port")
    p.add_argument("--backend", choices=["serial", "sim"], default="serial")
    p.add_argument("--chamber", choices=["wt", "lt"], default="wt", help="(sim backend)")
    p.add_argument("--config", default="standard", help="(sim backend)")
    p.add_argument("--seed", type=int, default=0, help="(sim backend)")
    p.add_argument("--params", type=Path, help="(sim backend) YAML/JSON physics parameters")
    p.add_argument("--limits", type=Path, help="operator limits file (YAML or JSON)")
    p.add_argument("--boot-timeout", type=float, default=6.0, help="seconds to wait for the board's announcement")


def _operator_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--safe", type=Path, default=None,
                   help="safe-state settings file (YAML/JSON {wt: {...}, lt: {...}}) applied on every exit; "
                        "default: the limits file's safe: section, else fans off, LEDs off")
    p.add_argument("--chunk", type=int, default=25,
                   help="longest MSR sent at once (a longer one is split so it can report progress and stop)")


class RowProgress:
    """Rows done, rate and ETA on stderr: one redrawn line on a terminal, else a line at most every `every` s."""

    def __init__(self, label: str, every: float = 2.0) -> None:
        import time

        self.label, self.every = label, every
        self.tty = sys.stderr.isatty()
        self._clock = time.monotonic
        self._last = -1e9
        self._final_shown = False

    def __call__(self, p: Any) -> None:
        now = self._clock()
        final = p.rows_done >= p.rows_total
        due = now - self._last >= (0.2 if self.tty else self.every) or p.waiting_s > 0  # a long WAIT: say so
        if final and self._final_shown or not final and not due:
            return
        self._final_shown = final
        self._last = now
        line = f"{self.label}: {p.render()}"
        sys.stderr.write(("\r" + line[:150].ljust(150) + ("\n" if final else "")) if self.tty else line + "\n")
        sys.stderr.flush()


def _safe_state_for(args: argparse.Namespace) -> Any:
    from chamber.limits import load_limits
    from chamber.safe_state import resolve_safe_state

    limits = load_limits(args.limits) if getattr(args, "limits", None) else None
    return resolve_safe_state(getattr(args, "safe", None), limits)


def _render_safe(outcomes: list[dict[str, Any]]) -> str:
    return "; ".join(f"safe state {o['chamber']}: " + (f"FAILED ({o['error']})" if o["error"] else
                     ", ".join(f"{k}={v:g}" for k, v in o["applied"].items()) or "nothing to set")
                     for o in outcomes)


def _open_chamber_from_args(args: argparse.Namespace) -> Any:
    from chamber import open_chamber
    from firmware_bridge.session import Timing

    if args.backend == "serial" and not args.port:
        raise CliError("give --port URL (or --backend sim)")
    return open_chamber(args.port if args.backend == "serial" else None, backend=args.backend,
                        chamber=args.chamber, config=args.config, seed=args.seed,
                        params=_read_mapping(args.params), limits=args.limits,
                        timing=Timing(boot_timeout=args.boot_timeout))


def _variables_table(layout: Any) -> list[dict[str, Any]]:
    return [{"name": v.name, "kind": v.kind.value, "unit": v.unit, "allowed": v.describe_allowed()}
            for v in layout.variables]


def _chamber_info(args: argparse.Namespace) -> int:
    with _open_chamber_from_args(args) as chamber:
        data = {"chamber": chamber.layout.chamber, "config": chamber.config,
                "variables": _variables_table(chamber.layout), "link": chamber.link_stats()}

    def render(d: dict[str, Any]) -> str:
        lines = [f"chamber {d['chamber']}, config {d['config']}, {len(d['variables'])} variables"]
        lines += [f"  {v['name']:<20} {v['kind']:<12} {v['unit']:<11} {v['allowed']}" for v in d["variables"]]
        lines.append("link: " + ", ".join(f"{k}={v}" for k, v in d["link"].items()))
        return "\n".join(lines)

    emit(args, data, render)
    return 0


def _chamber_measure(args: argparse.Namespace) -> int:
    from chamber.protocol_runner import measure_rows
    from chamber.safe_state import check_safe_state, safe_close
    from chamber.stop import stop_on_signals

    if args.n < 1:
        raise CliError(f"-n: expected a positive number of rows, got {args.n}")
    settings = dict(parse_assignments(args.set))
    safe = _safe_state_for(args)
    with stop_on_signals() as stop:
        chamber = _open_chamber_from_args(args)
        try:
            check_safe_state(chamber, safe)
            applied = chamber.set_many(settings)
            frame, interrupted = measure_rows(chamber, args.n, on_progress=RowProgress("measure"), stop=stop,
                                              chunk_rows=args.chunk)
        finally:
            safe_outcome = safe_close(chamber, safe).to_dict()
    names = list(frame.names) if frame is not None else list(chamber.layout.names)
    rows = [[None if v != v else float(v) for v in row] for row in frame.values.tolist()] if frame is not None else []
    data = {"config": chamber.config, "variables": names, "rows": rows,
            "link": frame.link if frame is not None else chamber.link_stats(), "applied": applied,
            "host_timestamps": frame.host_timestamps.tolist() if frame is not None else [],
            "reconnected": bool(frame is not None and frame.reconnected), "interrupted": interrupted,
            "safe_state": safe_outcome}

    def render(d: dict[str, Any]) -> str:
        head = ",".join(d["variables"])
        body = [",".join("" if v is None else f"{v:g}" for v in row) for row in d["rows"]]
        if d["interrupted"]:
            progress(args, f"interrupted after {len(d['rows'])} of {args.n} rows (all kept)")
        progress(args, _render_safe([d["safe_state"]]))
        return "\n".join([head, *body])

    emit(args, data, render)
    return 130 if interrupted else 0


def _chamber_shell(args: argparse.Namespace) -> int:
    import time

    from chamber.safe_state import check_safe_state, safe_close
    from chamber.shell import Shell

    safe = _safe_state_for(args)
    chamber = _open_chamber_from_args(args)
    lines = 0
    try:
        check_safe_state(chamber, safe)
        shell = Shell(chamber, wait=time.sleep)
        interactive = sys.stdin.isatty()
        if interactive:
            try:
                import readline

                readline.set_completer_delims(" \t")
                readline.parse_and_bind("tab: complete")
                readline.set_completer(lambda text, i: (shell.complete(readline.get_line_buffer()) + [None])[i])
                if args.history.exists():
                    readline.read_history_file(args.history)
            except (ImportError, OSError):  # no readline (or no history yet): a plain prompt
                readline = None  # type: ignore[assignment]
        sys.stderr.write(f"chamber {chamber.layout.chamber}/{chamber.config}; 'help' for instructions, "
                         "Tab completes, Ctrl-D quits\n")
        while True:
            try:
                line = input(">>> ") if interactive else sys.stdin.readline()
            except EOFError:
                break
            if not interactive and not line:
                break
            lines += 1
            reply = shell.execute(line)
            if reply.frame is not None:
                names = reply.frame.names
                sys.stdout.write(",".join(names) + "\n")
                for row in reply.frame.values.tolist():
                    sys.stdout.write(",".join("" if v != v else f"{v:g}" for v in row) + "\n")
            if reply.text:
                sys.stderr.write(("  " if reply.ok else "  ! ") + reply.text.replace("\n", "\n  ") + "\n")
            sys.stdout.flush()
            if reply.quit:
                break
    except KeyboardInterrupt:
        sys.stderr.write("\n")
    finally:
        outcome = safe_close(chamber, safe).to_dict()
        if sys.stdin.isatty():
            try:
                import readline

                readline.write_history_file(args.history)
            except (ImportError, OSError):
                pass
    progress(args, _render_safe([outcome]))
    if args.json:
        emit(args, {"lines": lines, "safe_state": outcome})
    return 0


def _chamber_run(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from chamber.catalogue import VariableCatalogue
    from chamber.limits import load_limits
    from chamber.protocol_language import load_protocol, validate_protocol
    from chamber.protocol_runner import format_duration, run_protocol
    from chamber.public_csv import PublicCsvWriter
    from chamber.safe_state import check_safe_state, safe_close
    from chamber.stop import stop_on_signals
    from firmware_bridge.variables import layout_for

    protocol = load_protocol(args.protocol)  # every syntax error, before the port is even opened
    if args.validate_only:
        limits = load_limits(args.limits) if args.limits else None
        layout = layout_for(args.chamber, args.config)
        part = limits.for_chamber(args.chamber) if limits is not None else None
        if part is not None:
            part.check_against(layout)
        validate_protocol(protocol, VariableCatalogue(layout, part))
        data = {"protocol": str(args.protocol), "chamber": args.chamber, "config": args.config, "valid": True,
                "instructions": len(protocol.instructions), "rows": protocol.rows,
                "wait_s": protocol.wait_ms / 1000, "variables_set": list(protocol.variables_set())}
        emit(args, data, lambda d: (f"{d['protocol']}: valid for {d['chamber']}/{d['config']}: "
                                    f"{d['instructions']} instructions, {d['rows']} rows, "
                                    f"{format_duration(d['wait_s'])} of WAIT"))
        return 0
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    output = args.output or Path(f"{args.protocol.stem}_{stamp}.csv")
    safe = _safe_state_for(args)

    def ask(prompt: str) -> None:
        sys.stderr.write(prompt + " [Enter] ")
        sys.stderr.flush()
        if not sys.stdin.readline():
            raise CliError(f"WAIT_INPUT {prompt!r} needs an operator at the terminal, but stdin is closed")

    with stop_on_signals() as stop:
        chamber = _open_chamber_from_args(args)
        try:
            check_safe_state(chamber, safe)
            validate_protocol(protocol, chamber.catalogue)  # every refusal, before a byte is sent or a file made
            progress(args, f"running {args.protocol} on {chamber.layout.chamber}/{chamber.config}: "
                           f"{len(protocol.instructions)} instructions, {protocol.rows} rows, "
                           f"{format_duration(protocol.wait_ms / 1000)} of WAIT -> {output} (Ctrl-C stops after the current row)")
            with open(output, "w", encoding="utf-8", newline="") as fh:
                writer = PublicCsvWriter(fh, chamber.layout.names)
                outcome = run_protocol(chamber, protocol, on_frame=writer.write_frame, stop=stop, ask=ask,
                                       on_progress=RowProgress(args.protocol.stem), chunk_rows=args.chunk)
        finally:
            safe_outcome = safe_close(chamber, safe).to_dict()
    data = {**outcome.to_dict(), "output": str(output), "safe_state": safe_outcome, "safe_source": safe.source}

    def render(d: dict[str, Any]) -> str:
        state = ("INTERRUPTED at line " + str(d["stopped_at_line"]) if d["interrupted"] else
                 f"FAILED at line {d['stopped_at_line']}: {d['error']['type']}: {d['error']['message']}"
                 if d["error"] else "done")
        return "\n".join([f"{d['protocol']}: {state}; {d['rows']}/{d['rows_total']} rows in {d['seconds']:.1f} s "
                          f"({d['instructions_done']}/{d['instructions_total']} instructions)",
                          f"csv: {d['output']}", _render_safe([d["safe_state"]])])

    emit(args, data, render)
    return 2 if outcome.error else 130 if outcome.interrupted else 0


# ----------------------------------------------------------------------------------------------- section: datasheet
def add_datasheet_commands(sub: argparse._SubParsersAction) -> None:
    """`datasheet build|search|section|table|page|fetch`: the agent's datasheet tools from the command line."""
    ds = sub.add_parser("datasheet", help="read a datasheet PDF with the agent's tools; fetch known datasheets")
    ds_sub = ds.add_subparsers(dest="datasheet_command", required=True)

    p = command(ds_sub, "build", "manifest: pages, part, revision, contents (and their source), tables per page")
    p.add_argument("pdf", type=Path)
    p.add_argument("--cache-dir", type=Path, default=None, help="keep manifests here, keyed by the file's SHA-256")
    p.set_defaults(handler=_datasheet_build)

    p = command(ds_sub, "search", "find a value or phrase (exact, then normalised, then wrapped table rows)")
    p.add_argument("pdf", type=Path)
    p.add_argument("query")
    p.add_argument("--page", type=int, default=None)
    p.add_argument("--max-results", type=int, default=20)
    p.set_defaults(handler=_datasheet_search)

    p = command(ds_sub, "section", "text of pages START..END with page markers, headers and footers removed")
    p.add_argument("pdf", type=Path)
    p.add_argument("start", type=int)
    p.add_argument("end", type=int)
    p.set_defaults(handler=_datasheet_section)

    p = command(ds_sub, "table", "the tables of one page as markdown")
    p.add_argument("pdf", type=Path)
    p.add_argument("page", type=int)
    p.set_defaults(handler=_datasheet_table)

    p = command(ds_sub, "page", "render a page (or a region) to PNG")
    p.add_argument("pdf", type=Path)
    p.add_argument("page", type=int)
    p.add_argument("--out", type=Path, required=True, help="PNG file to write")
    p.add_argument("--region", type=float, nargs=4, default=None, metavar=("X0", "Y0", "X1", "Y1"))
    p.add_argument("--dpi", type=int, default=100)
    p.set_defaults(handler=_datasheet_page)

    p = command(ds_sub, "fetch", "download a known datasheet from its public URL and verify its SHA-256")
    p.add_argument("part", nargs="?", default=None, help="part name, e.g. DPS310 (or --all)")
    p.add_argument("--all", action="store_true", help="every known datasheet")
    p.add_argument("--dir", type=Path, default=Path("datasheets"), help="where to keep the PDFs (default ./datasheets)")
    p.add_argument("--mirror", default=None, help="fetch FILE from MIRROR/FILE instead of the recorded URL")
    p.set_defaults(handler=_datasheet_fetch)


def _datasheet_session(pdf: Path, cache_dir: Path | None = None):
    from agent.datasheet import DatasheetSession, ManifestCache

    session = DatasheetSession(pdf, ManifestCache(cache_dir) if cache_dir else None)
    session.loaded  # raises the typed open error (missing, not a PDF, encrypted, empty)
    return session


def _datasheet_build(args: argparse.Namespace) -> int:
    from agent.datasheet import ManifestCache, build_datasheet

    m = build_datasheet(args.pdf, ManifestCache(args.cache_dir) if args.cache_dir else None)
    data = {
        "pages": m.pages,
        "part": m.part,
        "revision": m.revision,
        "sha256": m.sha256,
        "toc_source": m.toc_source,
        "toc_note": m.toc_note,
        "toc": [t.model_dump() for t in m.toc],
        "tables": [t.model_dump() for t in m.tables],
    }

    def render(d: dict[str, Any]) -> str:
        lines = [f"{d['part']} {d['revision']}: {d['pages']} pages; contents from {d['toc_source']}", d["toc_note"]]
        lines += [f"{'  ' * (t['level'] - 1)}{t['title']} .... p{t['page']}" for t in d["toc"]]
        lines.append(f"tables ({len(d['tables'])}):")
        lines += [f"  p{t['page']}: {t['caption']}" for t in d["tables"]]
        return "\n".join(lines)

    emit(args, data, render)
    return 0


def _datasheet_search(args: argparse.Namespace) -> int:
    with _datasheet_session(args.pdf) as s:
        hits = s.search(args.query, args.page, args.max_results)
    emit(args, {"hits": hits}, lambda d: "\n".join(f"p{h['page']} [{h['section']}] {h['snippet']}" for h in d["hits"]) or "no match")
    return 0


def _datasheet_section(args: argparse.Namespace) -> int:
    with _datasheet_session(args.pdf) as s:
        text = s.section_text(args.start, args.end)
    emit(args, {"text": text}, lambda d: d["text"])
    return 0


def _datasheet_table(args: argparse.Namespace) -> int:
    with _datasheet_session(args.pdf) as s:
        md = s.table_markdown(args.page)
    emit(args, {"page": args.page, "markdown": md}, lambda d: d["markdown"])
    return 0


def _datasheet_page(args: argparse.Namespace) -> int:
    with _datasheet_session(args.pdf) as s:
        png = s.page_png(args.page, args.region, args.dpi)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(png)
    emit(args, {"page": args.page, "out": str(args.out), "bytes": len(png)}, lambda d: f"wrote {d['out']} ({d['bytes']} bytes)")
    return 0


def _datasheet_fetch(args: argparse.Namespace) -> int:
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
    add_otlp_endpoint_flag(p)
    p.add_argument("--inspect-log", type=Path, default=None, metavar="DIR",
                   help="also write the record as an inspect-ai eval log (.json) in DIR")
    add_model_option_flags(p)
    p.set_defaults(handler=_extract)


def add_otlp_endpoint_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--otlp-endpoint", default=None, metavar="URL",
                   help="send each record's trace as OTLP/HTTP protobuf (e.g. Phoenix http://127.0.0.1:6006); "
                        "default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT")


def send_trace(args: argparse.Namespace, record: Path) -> dict[str, Any] | None:
    """Post a record's trace to the OTLP endpoint of --otlp-endpoint or the OTEL_* environment, if any."""
    from agent.otlp import otlp_headers, otlp_traces_endpoint, send_otlp

    endpoint = otlp_traces_endpoint(getattr(args, "otlp_endpoint", None), os.environ)
    if endpoint is None:
        return None
    import httpx

    with httpx.Client(timeout=60.0) as http:
        return send_otlp(record, endpoint, http=http, headers=otlp_headers(os.environ))


def add_model_option_flags(p: argparse.ArgumentParser) -> None:
    """Model options (the same as a spec's `?...` suffix; see agent.models)."""
    p.add_argument("--thinking", default=None, metavar="TOKENS|off", help="extended thinking budget (Anthropic, LiteLLM)")
    p.add_argument("--effort", default=None, help="reasoning effort (OpenAI reasoning, Anthropic effort, chat reasoning_effort)")
    p.add_argument("--max-output-tokens", type=int, default=None, help="output token limit per model turn")
    p.add_argument("--extra-body", default=None, metavar="JSON",
                   help='chat completions only: merged into each request, e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'')


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    from agent.models import split_model_options

    query = []
    if getattr(args, "thinking", None):
        query.append(f"thinking={args.thinking}")
    if getattr(args, "effort", None):
        query.append(f"effort={args.effort}")
    if getattr(args, "max_output_tokens", None):
        query.append(f"max_output_tokens={args.max_output_tokens}")
    options = split_model_options("x?" + "&".join(query))[1] if query else {}
    if getattr(args, "extra_body", None):
        try:
            extra = json.loads(args.extra_body)
        except json.JSONDecodeError as e:
            raise CliError(f"--extra-body is not JSON: {e}") from e
        if not isinstance(extra, dict):
            raise CliError("--extra-body must be a JSON object")
        options["extra_body"] = extra
    return options


def _in_process_chamber_service(args: argparse.Namespace, stack: Any, api_dir: Path | None = None,
                                claims: Any = None) -> str:
    """Both simulated chambers behind the chamber tools API on 127.0.0.1 (a free port); closed with the stack."""
    from chamber import open_chamber
    from protocols.api.server import running_api

    chambers = {}
    for kind in ("wt", "lt"):
        chambers[kind] = open_chamber(backend="sim", chamber=kind)
        stack.callback(chambers[kind].close)
    url = stack.enter_context(running_api(chambers, record_dir=api_dir or Path(args.record) / "api", claims=claims))
    progress(args, f"chamber tools API on the simulator at {url}")
    return url


def _extract(args: argparse.Namespace) -> int:
    import contextlib
    import time

    import httpx

    from agent.chamber_client import ChamberClient
    from agent.loop import Budget, run_cell
    from agent.models import client_for
    from protocols.claims import get_claim

    model = client_for(args.model, os.environ, options=model_options(args))  # spec and key before any work
    claims, _ = claims_from_args(args)
    claim = get_claim(args.claim_id, claims)
    pdf = args.datasheet or shared_dir() / "datasheets" / claim.identity.filename
    if not pdf.exists():
        raise CliError(f"datasheet {pdf} not found (give --datasheet or set CHAMBERLAB_SHARED)")
    budget = Budget(max_turns=args.max_turns, max_total_tokens=args.max_tokens, wall_s=args.wall_s)
    with contextlib.ExitStack() as stack:
        url = None if args.no_chamber else (args.chamber_url or _in_process_chamber_service(args, stack, claims=claims))
        http = stack.enter_context(httpx.Client(base_url=url, timeout=60.0)) if url else None
        chamber = ChamberClient(http) if http is not None else None
        result = run_cell(claim, model=model, datasheet=pdf, record_dir=args.record, clock=time.time,
                          chamber=chamber, budget=budget, sleep=time.sleep)
    data = {"run_id": result.run_id, "outcome": result.outcome, "extraction": result.extraction,
            "record": str(result.record), "phase_two": result.phase_two, "detail": result.detail}
    if args.otlp is not None:
        from agent.otlp import export_otlp

        data["otlp"] = str(export_otlp(result.record, args.otlp))
    sent = send_trace(args, result.record)
    if sent is not None:
        data["otlp_sent"] = sent
    if args.inspect_log is not None:
        from agent.inspect_log import export_eval_logs

        data["inspect_log"] = [str(p) for p in export_eval_logs([result.record], args.inspect_log)]
    emit(args, data, lambda d: (f"{d['run_id']}: {d['outcome']} (phase two {d['phase_two']})\n"
                                + (f"cause: {d['detail']}\n" if d["outcome"] != "submitted" else "")
                                + f"extraction: {json.dumps(d['extraction'])}\nrecord: {d['record']}"))
    return 1 if result.outcome == "engine_error" else 0


# ----------------------------------------------------------------------------------------------- section: verdicts
def add_chamber_selection(p: argparse.ArgumentParser) -> None:
    """--backend sim (both chambers in-process) or one or more --port URLs (the chamber kind is announced)."""
    p.add_argument("--backend", choices=["sim", "serial"], default=None,
                   help="sim: in-process simulator of both chambers (default when no --port is given)")
    p.add_argument("--port", action="append", default=None, metavar="URL",
                   help="pyserial URL of a chamber (device path, pty, socket://); repeat for wind + light tunnel")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (with --backend sim)")
    p.add_argument("--params", default=None, help="simulator parameter file (with --backend sim)")
    p.add_argument("--limits", default=None, help="operator limits file (YAML/JSON) enforced by the driver")
    p.add_argument("--station", default=None, metavar="STATION_FILE",
                   help="lab instruments (SMU, reference barometer, temperature controller) to grade more claims")


def open_selected_chambers(args: argparse.Namespace) -> dict[str, Any]:
    """Connected chambers by kind ("wt"/"lt") from --backend/--port; the caller closes them."""
    from chamber import open_chamber

    params = json.loads(Path(args.params).read_text()) if getattr(args, "params", None) else None
    limits = _limits_for_all(args)  # one file may cover both chambers
    if args.backend == "serial" and not args.port:
        raise CliError("--backend serial needs --port URL (device path, pty or socket://host:port)")
    if args.backend == "sim" and args.port:
        raise CliError("--backend sim and --port exclude each other")
    chambers: dict[str, Any] = {}
    try:  # open_chamber returns a connected chamber (the board was reset and announced itself)
        if args.port:
            for url in args.port:
                c = open_chamber(url, backend="serial", limits=limits)
                chambers[c.layout.chamber] = c
        else:
            for kind in ("wt", "lt"):
                chambers[kind] = open_chamber(backend="sim", chamber=kind, seed=args.seed, params=params,
                                              limits=limits)
    except BaseException:
        close_chambers(chambers)
        raise
    return chambers


def close_chambers(chambers: dict[str, Any]) -> None:
    """Leave every chamber in its safe state (chamber/safe_state.py), then close it; best effort."""
    from chamber.safe_state import safe_close

    for c in chambers.values():
        outcome = safe_close(c)
        if outcome.error:
            sys.stderr.write(f"warning: safe state not applied on {outcome.chamber}: {outcome.error}\n")


def add_verdict_commands(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "calibrate", "cross-sensor calibration of the wind tunnel's four DPS310 barometers")
    add_chamber_selection(p)
    p.add_argument("-n", type=int, default=200, help="rows measured after settling (default 200)")
    p.add_argument("--osr", type=int, default=8, choices=[1, 2, 4, 8])
    p.add_argument("-o", "--output", default=None, help="write the calibration record (JSON) here")
    p.set_defaults(handler=cmd_calibrate)

    p = command(sub, "check", "grade a claim (or --all) on the chamber: pass / inconclusive / fail with u")
    p.add_argument("claim_id", nargs="?", help="claim id (see protocols/data/claims/)")
    p.add_argument("--all", action="store_true", help="check every claim and print a table")
    add_claims_option(p)
    add_chamber_selection(p)
    p.add_argument("--rows", type=int, default=200, help="rows per measurement (default 200)")
    p.add_argument("--calibration", default=None, help="a calibration record to use (default: calibrate first)")
    p.set_defaults(handler=cmd_check)

    p = command(sub, "sweep", "hold one measurement fixed and move the claim's bound through it")
    p.add_argument("claim_id")
    add_chamber_selection(p)
    p.add_argument("--measured", default=None, help="a given measured value (in the claim's unit)")
    p.add_argument("--u", default=None, help="its standard uncertainty (with --measured)")
    p.add_argument("--recording", default=None, help="a recorded fans-off CSV (public dataset layout)")
    p.add_argument("--steps", type=int, default=41)
    p.add_argument("--csv", default=None, help="write the rows as CSV")
    p.add_argument("--plot", default=None, help="write the figure as PNG")
    p.set_defaults(handler=cmd_sweep)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from calibration.records import record_from_calibration, save_record
    from protocols.runner import calibrate

    chambers = open_selected_chambers(args)
    try:
        if "wt" not in chambers:
            raise CliError("calibration needs the wind tunnel; connected: " + ", ".join(chambers))
        cal = calibrate(chambers["wt"], n=args.n, osr=args.osr, progress=lambda m: progress(args, m))
    finally:
        close_chambers(chambers)
    record = record_from_calibration(cal, date=datetime.now(timezone.utc))
    if args.output:
        save_record(record, Path(args.output))
    data = {"record": record.model_dump(mode="json", by_alias=True), "path": args.output}

    def render(d: dict[str, Any]) -> str:
        p = d["record"]["parameters"]
        lines = [f"cross-sensor mean {p['mean']:.2f} Pa (u {p['mean_u']:.2f} Pa), spread {p['spread']:.2f} Pa"]
        lines += [f"  {k:<18} offset {v:+7.2f} Pa  (u {p['offset_u'][k]:.2f})" for k, v in p["offsets"].items()]
        if d["path"]:
            lines.append(f"record written to {d['path']}")
        return "\n".join(lines)

    emit(args, data, render)
    return 0


def run_checks(claims: list[Any], chambers: dict[str, Any], *, rows: int, calibration: Any = None,
               report: Callable[[str], None] = lambda m: None, station: Any = None) -> list[Any]:
    """Grade claims as one planned batch (protocols/runner.py); the wind tunnel is calibrated in the same plan
    when one is connected and no record was given."""
    from protocols.runner import ProtocolContext, run_batch

    context = ProtocolContext(chambers=chambers, calibration=calibration, rows=rows, progress=report,
                              station=station)
    return run_batch(claims, context, calibrate=True).results


def render_check_table(results: list[dict[str, Any]]) -> str:
    header = f"{'claim':<36} {'verdict':<13} {'value ± u':<28} {'k':>5} {'cond m/u':>8}  class"
    lines = [header, "-" * len(header)]
    for r in results:
        m = r["measured"]
        value = "—" if not m or m["value"] is None else f"{m['value']} ± {m['u']} {m['unit']}"
        k = "" if not m or m["k"] is None else f"{m['k']:.2f}"
        cond = f"{len(r['matched_conditions'])}/{len(r['unmatched_conditions'])}"
        lines.append(f"{r['claim_id']:<36} {r['verdict']:<13} {value:<28} {k:>5} {cond:>8}  {r['class'] or ''}")
    lines.append("")
    lines.append("  ".join(f"{k}: {v}" for k, v in sorted(_count(r["verdict"] for r in results).items())))
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace) -> int:
    from protocols.claims import get_claim

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
        chambers = open_selected_chambers(args)
        try:
            results = run_checks(claims, chambers, rows=args.rows, calibration=calibration,
                                 report=lambda m: progress(args, m), station=station)
        finally:
            close_chambers(chambers)
    finally:
        if station is not None:
            station.close()
    dicts = [r.to_dict() for r in results]
    if args.all:
        emit(args, {"results": dicts}, lambda d: render_check_table(d["results"]))
    else:
        emit(args, dicts[0], lambda d: render_check_table([d]) + "\n\n" + d["reason"])
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from protocols.claims import get_claim
    from protocols.sweep import plot_sweep, sweep, write_sweep_csv

    claim = get_claim(args.claim_id)
    if (args.measured is None) != (args.u is None):
        raise CliError("--measured and --u go together")
    if args.measured is not None:
        measured, u, unit, dof = args.measured, args.u, claim.unit, float("inf")
    else:
        measurement = _sweep_measurement(args, claim)
        measured, u, unit, dof = measurement.value, measurement.u, measurement.unit, measurement.dof
    result = sweep(claim, measured, u, unit=unit, steps=args.steps, dof=dof)
    if args.csv:
        write_sweep_csv(result, Path(args.csv))
    if args.plot:
        plot_sweep(result, Path(args.plot))
    data = result.to_dict()
    data["files"] = {"csv": args.csv, "plot": args.plot}

    def render(d: dict[str, Any]) -> str:
        m = d["measured"]
        lines = [f"{d['claim_id']}: measured {m['value']} ± {m['u']} {m['unit']}, c = {d['combined_uncertainty']}",
                 f"{'bound':>24} {'distance':>22}  verdict"]
        lines += [f"{r['bound']:>24} {r['distance']:>22}  {r['verdict']}" for r in d["rows"]]
        return "\n".join(lines)

    emit(args, data, render)
    return 0


def _sweep_measurement(args: argparse.Namespace, claim: Any) -> Any:
    """The fixed measurement of a sweep: from a recorded CSV, or measured live with the claim's protocol."""
    if args.recording:
        if claim.protocol != "dps310.operating_range":
            raise CliError(f"--recording gives the four-barometer mean (fans off), which measures "
                           f"dps310-operating-range; {claim.id} uses protocol {claim.protocol!r}. "
                           "Give --measured/--u, or measure live with --backend sim / --port URL")
        from calibration.cross_sensor import BAROMETERS
        from protocols.runner import operating_range_from_columns
        from simulator.replay import read_recording

        rec = read_recording(Path(args.recording))
        return operating_range_from_columns(claim, {b: rec.column(b) for b in BAROMETERS}, rec.layout.config)
    chambers = open_selected_chambers(args)
    try:
        (result,) = run_checks([claim], chambers, rows=200, report=lambda m: progress(args, m))
    finally:
        close_chambers(chambers)
    if result.measurement is None or result.measurement.value is None:
        raise CliError(f"{claim.id}: the protocol gave no measurement to sweep ({result.verdict.reason})")
    return result.measurement


# ----------------------------------------------------------------------------------------------- section: serve
def add_serve_commands(sub: argparse._SubParsersAction) -> None:
    """`serve`: the chamber tools API (protocols/api) under uvicorn, in front until Ctrl-C or SIGTERM."""
    p = command(sub, "serve", "serve the chamber tools API over HTTP (loopback by default)")
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1); any non-loopback address needs a bearer token")
    p.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0 = any free port)")
    add_claims_option(p)
    p.add_argument("--backend", choices=["sim"], default=None,
                   help="sim: in-process simulated chambers (the default when no --port-url is given)")
    p.add_argument("--port-url", action="append", default=None, metavar="URL",
                   help="pyserial URL of a real or emulated board (device path, pty, socket://); repeatable")
    p.add_argument("--chamber", choices=["wt", "lt", "both"], default="both", help="(sim) which chambers")
    p.add_argument("--seed", type=int, default=0, help="(sim) simulator seed")
    p.add_argument("--params", type=Path, default=None, help="(sim) simulator parameter file (JSON)")
    p.add_argument("--limits", type=Path, default=None,
                   help="operator limits file (YAML/JSON), enforced by the driver and again by the server")
    p.add_argument("--record", type=Path, default=Path("records") / "chamber-api",
                   help="folder for the per-session JSONL records (default records/chamber-api)")
    p.add_argument("--token-file", type=Path, default=None,
                   help="file holding the bearer token (else env CHAMBERLAB_API_TOKEN); required off loopback")
    p.add_argument("--lease-timeout", type=float, default=60.0,
                   help="seconds a session may sit idle before another session can take the chamber (default 60)")
    p.set_defaults(handler=_serve)


def _serve_open_chambers(args: argparse.Namespace) -> dict[str, Any]:
    from chamber import open_chamber

    if args.backend == "sim" and args.port_url:
        raise CliError("give either --backend sim or --port-url URL, not both")
    chambers: dict[str, Any] = {}
    try:
        if args.port_url:
            for url in args.port_url:
                c = open_chamber(url, backend="serial", limits=_limits_for_all(args))
                if c.layout.chamber in chambers:
                    c.close()
                    raise CliError(f"two boards announce chamber {c.layout.chamber!r} ({url})")
                chambers[c.layout.chamber] = c
        else:
            params = json.loads(args.params.read_text(encoding="utf-8")) if args.params else None
            for kind in (("wt", "lt") if args.chamber == "both" else (args.chamber,)):
                chambers[kind] = open_chamber(backend="sim", chamber=kind, seed=args.seed, params=params,
                                              limits=_limits_for_all(args))
    except BaseException:
        for c in chambers.values():
            c.close()
        raise
    return chambers


def _serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from protocols.api import TokenRequired, create_app, resolve_token
    from protocols.api.server import serve_in_thread

    try:  # refuse before opening anything: a non-loopback bind without a token never starts
        token = resolve_token(args.host, token_file=args.token_file, environ=os.environ)
    except TokenRequired as exc:
        raise CliError(str(exc)) from None
    if not (0 <= args.port <= 65535):
        raise CliError(f"--port: expected 0..65535, got {args.port}")
    claims, _ = claims_from_args(args)  # a bad claim file is refused before any chamber opens
    chambers = _serve_open_chambers(args)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        app = create_app(chambers, limits=args.limits, record_dir=args.record, token=token,
                         lease_timeout_s=args.lease_timeout, claims=claims)
        with serve_in_thread(app, host=args.host, port=args.port,
                             log_level="info" if args.verbose else "warning") as url:
            data = {"url": url, "openapi": f"{url}/openapi.json", "live_view": f"{url}/", "chambers": sorted(chambers),
                    "record_dir": str(args.record), "auth": "bearer token" if token else "none (loopback only)",
                    "lease_timeout_s": args.lease_timeout, "pid": os.getpid()}
            emit(args, data, lambda d: (f"serving the chamber tools API at {d['url']} (chambers: "
                                        f"{', '.join(d['chambers'])}; auth: {d['auth']}; records: {d['record_dir']})\n"
                                        f"live view: {d['live_view']}\n"
                                        "stop with Ctrl-C"))
            stop.wait()
            progress(args, "stopping the chamber tools API")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        close_chambers(chambers)  # safe state, then close
    return 0


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
    p.add_argument("--rows", type=int, default=200, help="rows per measurement")
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
    p.add_argument("action", choices=["list"])
    p.add_argument("--runs-dir", type=Path, default=PROJECT_ROOT / "runs")
    p.set_defaults(handler=cmd_runs)


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


def _limits_for_all(args: argparse.Namespace) -> Any:
    """The --limits file in its two-chamber form: a file for one chamber limits that one and not the other."""
    from chamber.limits import load_limits

    return load_limits(args.limits).covering() if getattr(args, "limits", None) else None


def _write_json(path: Path, data: Any) -> None:
    """Write then rename, so a killed run never leaves half a file where a finished one is expected."""
    tmp = path.with_suffix(path.suffix + ".part")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _utc_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def cmd_run(args: argparse.Namespace) -> int:
    import contextlib
    import time
    from datetime import datetime, timezone

    from agent.runindex import RunIndex
    from calibration.records import save_record
    from chamber import open_chamber
    from protocols.api.live import LiveChamber, LiveFeed, live_app, report_graded
    from protocols.api.server import serve_in_thread
    from protocols.runner import ProtocolContext, run_batch

    if not args.no_agent:  # a wrong model spec or a missing key fails now, not after the whole chamber part
        from agent.models import client_for

        client_for(args.model, os.environ)
    pool, args.claim_ids = claims_from_args(args, ids=True)  # a bad claim file is refused before a run starts
    agent_pool = pool  # the agent extracts the claims it was given (the packaged set by default)
    if not split_claims_args_paths(args):  # no --claims PATH: the chamber also grades the chamber-parts claims
        from protocols.claim_sources import load_main_job_claims

        pool = load_main_job_claims(None)
    started = time.monotonic()
    backend = "serial:" + ",".join(args.port) if args.port else "emulated boards on ptys"
    index = RunIndex(args.runs_dir.resolve() / "index.sqlite")
    resume = args.resume or (None if args.new else _interrupted_run(index, backend))
    if resume:
        run_dir = Path(resume).resolve()
        if not run_dir.is_dir():
            index.close()
            raise CliError(f"--resume: {run_dir} is not a run directory")
        run_id = run_dir.name
        progress(args, f"resuming run {run_id} (finished agent cells are kept; --new starts afresh)")
    else:
        run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        run_dir = (args.runs_dir / run_id).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    index.start_run(run_id, run_dir, _utc_now(), backend)
    claims = list(pool.values())
    summary: dict[str, Any] = {"run_id": run_id, "run_dir": str(run_dir), "backend": backend}
    status = "failed"
    try:
        with contextlib.ExitStack() as stack:
            urls = list(args.port or [])
            if not urls:
                from simulator.board import running_board

                for kind in ("wt", "lt"):
                    board = stack.enter_context(running_board(kind, transport="pty", seed=args.seed))
                    urls.append(board.url)
                    progress(args, f"emulated {kind} board on {board.url}")
            chambers: dict[str, Any] = {}
            for url in urls:
                c = open_chamber(url, backend="serial", limits=_limits_for_all(args))
                stack.callback(close_chambers, {url: c})  # safe state, then close
                chambers[c.layout.chamber] = c
                progress(args, f"connected {c.layout.chamber} ({c.config}, {c.layout.row_length} variables) on {url}")
            feed = LiveFeed()  # the live view: what the chambers do and which claim is graded, at <url>/
            chambers = {kind: LiveChamber(c, kind, feed) for kind, c in chambers.items()}
            summary["live_view"] = stack.enter_context(serve_in_thread(live_app(feed))) + "/"
            progress(args, f"live view: {summary['live_view']}")

            bar = StepProgress("checks", len(claims))
            batch = run_batch(claims, ProtocolContext(
                chambers=chambers, rows=args.rows, progress=lambda m: bar.advance(m) if m.startswith("[") else None,
                graded=report_graded(feed)), calibrate=True)
            results, calibration = batch.results, batch.record
            if calibration is not None:
                save_record(calibration, run_dir / "calibration.json")
            elif batch.calibration_error:
                progress(args, f"calibration failed: {batch.calibration_error}")
            checks = [r.to_dict() for r in results]
            _write_json(run_dir / "checks.json", {"results": checks})
            for r in checks:
                index.record_verdict(run_id, r)
            summary["verdicts"] = _count(r["verdict"] for r in checks)

            summary["sweep"] = _run_sweep(results, run_dir)
            station_file = None if args.no_station else (
                args.station or (None if args.port else str(_sim_station_file())))
            if station_file:
                summary["station"] = _run_station_checks(args, station_file, claims, chambers, calibration, run_dir,
                                                         results)
            summary["link"] = {k: c.link_stats() for k, c in chambers.items()}
            _write_json(run_dir / "link.json", summary["link"])

            if not args.no_agent:
                summary["agent"] = _run_agent(args, [c for c in claims if c.id in agent_pool], chambers, run_dir,
                                              run_id, index, stack)
        summary["report"] = _write_report(run_dir, summary)
        status = "finished"
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: chambers made safe above; the index and summary say so
        status = "interrupted"
        summary["interrupted"] = True
    finally:
        summary["seconds"] = round(time.monotonic() - started, 1)
        index.finish_run(run_id, _utc_now(), status, summary)
        index.close()
    emit(args, summary, _render_run_summary)
    return 130 if status == "interrupted" else 0


def _sim_station_file() -> Path:
    from chamber.instruments import sim_station_file

    return sim_station_file()


def _run_station_checks(args: argparse.Namespace, station_file: str, claims: list[Any], chambers: dict[str, Any],
                        calibration: Any, run_dir: Path, earlier: list[Any]) -> dict[str, Any]:
    """Grade again with the instrument station: which claims become definitive, and the gradable envelope.
    A claim the station does not change keeps its verdict from `earlier` (same protocol, same chambers)."""
    from chamber.instruments import open_station
    from protocols.instrument_protocols import gradable_envelope
    from protocols.runner import ProtocolContext, run_batch

    progress(args, f"opening instrument station {station_file}")
    with open_station(Path(station_file)) as station:
        bar = StepProgress("station", len(claims))
        context = ProtocolContext(chambers=chambers, calibration=calibration, rows=args.rows, station=station,
                                  progress=lambda m: bar.advance(m) if m.startswith("[") else None)
        results = run_batch(claims, context, reuse={r.claim.id: r for r in earlier}).results
        envelope = gradable_envelope(claims, station)
    checks = [r.to_dict() for r in results]
    _write_json(run_dir / "station_checks.json", {"station": station_file, "results": checks, "envelope": envelope})
    definitive = [r["claim_id"] for r in checks if r["verdict"] in ("pass", "fail")]
    return {"file": station_file, "verdicts": _count(r["verdict"] for r in checks), "definitive": definitive}


def _interrupted_run(index: Any, backend: str) -> Path | None:
    """The newest run on the same backend that did not finish (killed or failed) and whose folder still exists."""
    for row in reversed(list(index.runs())):
        if row.backend != backend:
            continue
        if row.status != "finished" and Path(row.run_dir).is_dir():
            return Path(row.run_dir)
        return None
    return None


def _count(items: Any) -> dict[str, int]:
    from collections import Counter

    return dict(Counter(str(item) for item in items))


def _run_sweep(results: list[Any], run_dir: Path) -> dict[str, Any]:
    """The perturbation sweep on the live operating-range reading (held fixed, the upper bound moved)."""
    from protocols.sweep import plot_sweep, sweep, write_sweep_csv

    live = next((r for r in results if r.claim.id == "dps310-operating-range"), None)
    if live is None or live.measurement is None or live.measurement.value is None:
        return {"skipped": "no live operating-range measurement"}
    m = live.measurement
    result = sweep(live.claim, m.value, m.u, unit=m.unit, steps=41, dof=m.dof)
    _write_json(run_dir / "sweep.json", result.to_dict())
    write_sweep_csv(result, run_dir / "sweep.csv")
    plot_sweep(result, run_dir / "sweep.png")
    d = result.to_dict()
    # Where the verdict changes: the exact flip points m ± c (closed band: inconclusive at the point itself).
    flips = d["flip_points"]
    return {"claim_id": d["claim_id"], "measured": d["measured"], "combined_uncertainty": d["combined_uncertainty"],
            "verdict_changes_at": flips, "figure": str(run_dir / "sweep.png")}


def _run_agent(args: argparse.Namespace, claims: list[Any], chambers: dict[str, Any], run_dir: Path, run_id: str,
               index: Any, stack: Any) -> dict[str, Any]:
    """The scripted (or real) agent on every claim whose datasheet is present; finished cells are kept."""
    import time

    import httpx

    from agent.chamber_client import ChamberClient
    from agent.loop import run_cell
    from agent.models import client_for
    from agent.record import validate_record

    datasheets = shared_dir() / "datasheets"
    wanted = claims if args.claim_ids is None else [c for c in claims if c.id in set(args.claim_ids)]
    runnable = [c for c in wanted if (datasheets / c.identity.filename).exists()]
    skipped = sorted({c.identity.filename for c in wanted} - {c.identity.filename for c in runnable})
    if skipped:
        progress(args, f"agent: datasheets not found in {datasheets}: {', '.join(skipped)} — "
                       "get them with `python bench_cli.py datasheet fetch --all --dir DIR` and set CHAMBERLAB_SHARED")
    cells_dir = run_dir / "cells"
    cells_dir.mkdir(exist_ok=True)
    api_url = _start_chamber_api(chambers, run_dir, stack, claims)
    if api_url:
        progress(args, f"agent: chamber tools API at {api_url} (live view: {api_url}/)")
    http = stack.enter_context(httpx.Client(base_url=api_url, timeout=120.0)) if api_url else None
    model = client_for(args.model, os.environ)
    bar = StepProgress("agent", len(runnable))
    outcomes: dict[str, int] = {}
    resumed = 0
    for claim in runnable:
        cell_id = f"{args.model.replace(':', '-').replace('/', '-')}.{claim.id}"
        record = cells_dir / f"{cell_id}.jsonl"
        if record.exists():
            try:
                validate_record(record)
                resumed += 1
                bar.advance(f"{claim.id} (kept)")
                continue
            except Exception:  # an unfinished cell from a killed run: run it again from scratch
                record.unlink()
        result = run_cell(claim, model=model, datasheet=datasheets / claim.identity.filename, record_dir=cells_dir,
                          clock=time.time, chamber=ChamberClient(http) if http else None, run_id=cell_id,
                          sleep=time.sleep)
        outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
        index.record_cell(run_id, cell_id, claim.id, args.model, result.outcome, str(result.record))
        bar.advance(f"{claim.id}: {result.outcome}")
    scores = _score_cells(cells_dir, run_dir, claims)
    return {"model": args.model, "cells": len(runnable), "kept_from_earlier": resumed, "outcomes": outcomes,
            "skipped_datasheets": skipped, "phase_two": bool(api_url), **scores}


def _start_chamber_api(chambers: dict[str, Any], run_dir: Path, stack: Any, claims: list[Any]) -> str:
    """The chamber tools API on 127.0.0.1 over the connected chambers, for the agent's phase two."""
    from protocols.api.server import running_api

    return stack.enter_context(running_api(chambers, record_dir=run_dir / "api", claims={c.id: c for c in claims}))


def _score_cells(cells_dir: Path, run_dir: Path, claims: list[Any]) -> dict[str, Any]:
    from agent.scoring.score import score_paths

    scores = score_paths([cells_dir], claims={c.id: c for c in claims}, datasheets_dir=shared_dir() / "datasheets")
    _write_json(run_dir / "scores.json", scores)
    return {"fidelity_and_flags": scores.get("summary", {})}


def _write_report(run_dir: Path, summary: dict[str, Any]) -> str | None:
    from agent.scoring.report import write_report

    _write_json(run_dir / "summary.json", summary)
    return str(write_report(run_dir))


def _render_run_summary(d: dict[str, Any]) -> str:
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


def cmd_runs(args: argparse.Namespace) -> int:
    from agent.runindex import RunIndex

    path = args.runs_dir.resolve() / "index.sqlite"
    if not path.exists():
        emit(args, {"runs": []}, lambda d: f"no runs yet (index {path} does not exist)")
        return 0
    with RunIndex(path) as index:
        runs = [dict(r.__dict__) for r in index.runs()]

    def render(d: dict[str, Any]) -> str:
        lines = [f"{'run':<18} {'status':<9} {'backend':<26} verdicts"]
        for r in d["runs"]:
            v = r["summary"].get("verdicts", {})
            lines.append(f"{r['run_id']:<18} {r['status']:<9} {r['backend'][:26]:<26} "
                         + ", ".join(f"{k} {n}" for k, n in sorted(v.items())))
        return "\n".join(lines)

    emit(args, {"runs": runs}, render)
    return 0


# ----------------------------------------------------------------------------------------------- section: station
def add_station_commands(sub: argparse._SubParsersAction) -> None:
    """`station check STATION_FILE`: each instrument's *IDN? and certificate against the station file."""
    station = sub.add_parser("station", help="lab instruments wired to the chambers' sensors")
    station_sub = station.add_subparsers(dest="station_command", required=True)
    p = command(station_sub, "check", "open every instrument of a station file and check its *IDN? and certificate")
    p.add_argument("station_file")
    p.add_argument("--claims", action="store_true", help="also list which claims the station makes gradable")
    p.set_defaults(handler=cmd_station_check)


def open_station_from_args(args: argparse.Namespace) -> Any:
    """The opened station of --station (None without it); StationError names the file or instrument."""
    path = getattr(args, "station", None)
    if not path:
        return None
    from chamber.instruments import open_station

    progress(args, f"opening station {path}")
    return open_station(Path(path))


def cmd_station_check(args: argparse.Namespace) -> int:
    from chamber.instruments import check_station

    report = check_station(Path(args.station_file))
    if args.claims and report["ok"]:
        from chamber.instruments import open_station
        from protocols.claims import load_claims
        from protocols.instrument_protocols import gradable_envelope

        with open_station(Path(args.station_file)) as station:
            report["envelope"] = gradable_envelope(load_claims(), station)

    def render(d: dict[str, Any]) -> str:
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

    emit(args, report, render)
    return 0 if report["ok"] else 1


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
    p.set_defaults(handler=_cmd_score)

    p = command(sub, "import-archive", "convert the seed paper's archive so our instruments re-score it")
    p.add_argument("archive", type=Path, help="the paper-archive folder (holding archive/ and data/)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(handler=_cmd_import_archive)

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
    p.set_defaults(handler=_cmd_matrix)

    p = command(sub, "report", "write RUN_DIR/report.md, report.html and figures from what the run folder holds")
    p.add_argument("run_dir", type=Path)
    p.set_defaults(handler=_cmd_report)


def _datasheets_arg(args: argparse.Namespace) -> Path:
    return args.datasheets or shared_dir() / "datasheets"


def _render_score(d: dict[str, Any]) -> str:
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


def _cmd_score(args: argparse.Namespace) -> int:
    from agent.scoring.pricing import load_price_table
    from agent.scoring.score import score_paths

    prices = load_price_table(args.prices) if args.prices else None
    ds = _datasheets_arg(args)
    data = score_paths(args.paths, datasheets_dir=ds if ds.exists() else None, prices=prices,
                       ground=not args.no_grounding)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, default=_json_default), encoding="utf-8")
    emit(args, data, _render_score)
    return 0


def _cmd_import_archive(args: argparse.Namespace) -> int:
    from agent.scoring.archive import import_archive

    manifest = import_archive(args.archive, args.out)
    emit(args, manifest, lambda d: f"imported {d['cells']} cells into {args.out}: {d['by_role']}")
    return 0


def _cmd_matrix(args: argparse.Namespace) -> int:
    import contextlib
    import time

    import httpx

    from agent.chamber_client import ChamberClient
    from agent.loop import Budget
    from agent.models import client_for
    from agent.scoring.arms import ARMS
    from agent.scoring.matrix import plan, run_matrix
    from agent.scoring.pricing import load_price_table
    from agent.scoring.score import score_paths

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
    ds = _datasheets_arg(args)
    if not ds.exists():
        raise CliError(f"datasheet folder {ds} not found (give --datasheets or set CHAMBERLAB_SHARED)")
    with contextlib.ExitStack() as stack:  # phase two: the chamber service, in process unless --chamber-url
        url = None if args.no_chamber else (
            args.chamber_url or _in_process_chamber_service(args, stack, api_dir=Path(args.out) / "api", claims=claims))
        chamber = ChamberClient(stack.enter_context(httpx.Client(base_url=url, timeout=60.0))) if url else None
        run = run_matrix(plan(models, ids, args.repeats, arms), claims=claims, out=args.out, datasheets_dir=ds,
                         client_factory=lambda spec: client_for(spec, os.environ), clock=time.time,
                         concurrency=args.concurrency, budget=Budget(max_turns=args.max_turns, wall_s=args.wall_s),
                         sleep=time.sleep, progress=lambda m: progress(args, m), chamber=chamber)
    scores = score_paths([args.out], claims=claims, datasheets_dir=ds, prices=prices)
    (args.out / "scores.json").write_text(json.dumps(scores, default=_json_default), encoding="utf-8")
    data = {"run": run, "summary": scores["summary"], "out": str(args.out)}
    if args.inspect_log:
        from agent.inspect_log import export_eval_logs

        records = [args.out / "cells" / f"{c.run_id}.jsonl" for c in plan(models, ids, args.repeats, arms)]
        data["inspect_log"] = [str(p) for p in export_eval_logs([r for r in records if r.exists()],
                                                                 args.out / "inspect")]
    emit(args, data, lambda d: f"{d['run']}\nscores: {d['out']}/scores.json; flagged {d['summary']['flagged']}")
    # Cells that crashed or ended in engine_error are not results: say so in the exit code (a resume retries them).
    return 1 if run.get("failures") or run.get("engine_errors") else 0


def _cmd_report(args: argparse.Namespace) -> int:
    from agent.scoring.report import write_report

    path = write_report(args.run_dir)
    data = {"report": str(path), "html": str(path.with_suffix(".html")),
            "figures": sorted(str(p) for p in (args.run_dir / "figures").glob("*.png"))}
    emit(args, data, lambda d: f"wrote {d['report']} and {d['html']} ({len(d['figures'])} figures)")
    return 0


# ----------------------------------------------------------------------------------------------- main
COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_run_commands,
    add_verdict_commands,
    add_sim_commands,
    add_chamber_commands,
    add_datasheet_commands,
    add_extract_commands,
    add_serve_commands,
    add_station_commands,
    add_scoring_commands,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench_cli.py",
        description="chamberlab: Causal Chamber lab controller and instrumented datasheet agent",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMAND_GROUPS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from chamber.stop import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():  # SIGTERM unwinds like Ctrl-C: exit paths apply the safe state
            result = args.handler(args)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:  # rendered, not swallowed: the type and message tell the user what went wrong
        if args.verbose:
            log.exception("command failed")
        if getattr(args, "json", False):
            sys.stdout.write(json.dumps({"error": {"type": type(exc).__name__, "message": str(exc)}}) + "\n")
        else:
            sys.stderr.write(f"error: {type(exc).__name__}: {exc}\n")
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
