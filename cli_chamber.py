"""The CLI's chamber-side command groups: `sim serve|fit`, `chamber info|measure|run|shell`, `serve`, `station check`.

Parsing and rendering only: the boards are the simulator's (simulator/board.py), chambers are opened by
chamber/selection.py, the operator's jobs are chamber/operator.py, the service is protocols/api.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from cli_common import (add_claims_option, Args, claims_from_args, CliError, command, emit, open_one_chamber,
                        open_selected, progress, render_safe, RowProgress, safe_state_for)


# ----------------------------------------------------------------------------------------------- section: sim
def add_sim_commands(sub: argparse._SubParsersAction) -> None:
    sim_sub = sub.add_parser("sim", help="the emulated Mk1 board and the simulator's parameters").add_subparsers(
        dest="sim_command", required=True)
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
    p.set_defaults(handler=cmd_sim_serve)
    p = command(sim_sub, "fit", "estimate simulator parameters (barometer offsets/noise, light gains) from a recorded CSV")
    p.add_argument("recording", help="experiment CSV in the public dataset layout (timestamp, config, counter, ...)")
    p.add_argument("-o", "--output", required=True, help="parameter file to write (JSON; `sim serve --params`)")
    p.add_argument("--base", help="parameter file to start from (default: built-in defaults)")
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
                       host=args.host, port=args.tcp_port)
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


def cmd_sim_fit(args: Args) -> int:
    from simulator.fit import fit_recording
    from simulator.params import dump_params, load_params

    if not Path(args.recording).is_file():
        raise CliError(f"recording not found: {args.recording}")
    progress(args, f"fitting {args.recording} ...")
    result = fit_recording(args.recording, base=load_params(args.base) if args.base else None)
    Path(args.output).write_text(json.dumps(dump_params(result.params), indent=2) + "\n", encoding="utf-8")
    emit(args, {"output": str(args.output), "source": result.params.source, "fit": result.report}, render_fit)
    return 0



# ----------------------------------------------------------------------------------------------- section: chamber
def add_chamber_commands(sub: argparse._SubParsersAction) -> None:
    chamber_sub = sub.add_parser("chamber", help="talk to a chamber (serial port or in-process sim)").add_subparsers(
        dest="chamber_command", required=True)
    info = command(chamber_sub, "info", "connect, and show the board's configuration and variables")
    measure = command(chamber_sub, "measure", "apply settings, then measure N checked rows")
    measure.add_argument("-n", type=int, required=True, help="number of rows")
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
        p.add_argument("--backend", choices=["serial", "sim"], default="serial")
        p.add_argument("--chamber", choices=["wt", "lt"], default="wt", help="(sim backend)")
        p.add_argument("--config", default="standard", help="(sim backend)")
        p.add_argument("--seed", type=int, default=0, help="(sim backend)")
        p.add_argument("--params", type=Path, help="(sim backend) YAML/JSON physics parameters")
        p.add_argument("--limits", type=Path, help="operator limits file (YAML or JSON)")
        p.add_argument("--boot-timeout", type=float, default=6.0, help="seconds to wait for the board's announcement")
        if p is not info:
            p.add_argument("--safe", type=Path, default=None,
                           help="safe-state settings file (YAML/JSON {wt: {...}, lt: {...}}) applied on every exit; "
                                "default: the limits file's safe: section, else fans off, LEDs off")
            p.add_argument("--chunk", type=int, default=25,
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
    p.add_argument("--params", type=Path, default=None, help="(sim) simulator parameter file (YAML or JSON)")
    p.add_argument("--limits", type=Path, default=None,
                   help="operator limits file (YAML/JSON), enforced by the driver and again by the server")
    p.add_argument("--record", type=Path, default=Path("records") / "chamber-api",
                   help="folder for the per-session JSONL records (default records/chamber-api)")
    p.add_argument("--token-file", type=Path, default=None,
                   help="file holding the bearer token (else env CHAMBERLAB_API_TOKEN); required off loopback")
    p.add_argument("--lease-timeout", type=float, default=60.0,
                   help="seconds a session may sit idle before another session can take the chamber (default 60)")
    p.set_defaults(handler=cmd_serve)


def cmd_serve(args: Args) -> int:
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
    kinds = ("wt", "lt") if args.chamber == "both" else (args.chamber,)
    stop = threading.Event()
    with open_selected(args, ports=args.port_url, kinds=kinds) as opened:  # safe state, then close, on exit
        previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            app = create_app(opened.chambers, limits=args.limits, record_dir=args.record, token=token,
                             lease_timeout_s=args.lease_timeout, claims=claims)
            with serve_in_thread(app, host=args.host, port=args.port,
                                 log_level="info" if args.verbose else "warning") as url:
                data = {"url": url, "openapi": f"{url}/openapi.json", "live_view": f"{url}/",
                        "chambers": sorted(opened.chambers), "record_dir": str(args.record),
                        "auth": "bearer token" if token else "none (loopback only)",
                        "lease_timeout_s": args.lease_timeout, "pid": os.getpid()}
                emit(args, data, lambda d: (f"serving the chamber tools API at {d['url']} (chambers: "
                                            f"{', '.join(d['chambers'])}; auth: {d['auth']}; records: "
                                            f"{d['record_dir']})\nlive view: {d['live_view']}\nstop with Ctrl-C"))
                stop.wait()
                progress(args, "stopping the chamber tools API")
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    return 0


# ----------------------------------------------------------------------------------------------- section: station
def add_station_commands(sub: argparse._SubParsersAction) -> None:
    """`station check STATION_FILE`: each instrument's *IDN? and certificate against the station file."""
    station_sub = sub.add_parser("station", help="lab instruments wired to the chambers' sensors").add_subparsers(
        dest="station_command", required=True)
    p = command(station_sub, "check", "open every instrument of a station file and check its *IDN? and certificate")
    p.add_argument("station_file")
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
