#!/usr/bin/env python3
"""chamberlab's one command line: parses arguments, calls the layers, renders text or JSON.

Every subcommand takes `--json` and then prints exactly one JSON object on stdout. Errors go to stderr as
`error: <Type>: <message>` (or a JSON object `{"error": {"type", "message"}}` with --json) and exit code 2, so
scripts can tell a refused request from a crash. Subsystems are imported inside the command functions so that
`--help` stays fast and a broken optional layer cannot stop the others from working.

Layout of this file: shared helpers first, then one section per command group (sim, chamber, calibrate/check/
sweep, serve, datasheet, extract, score/matrix/report, station, run). Each section owns an `add_*` function.
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
    pass  # filled in by the serial-stack work


def _register_sim_fit(sim_sub: argparse._SubParsersAction) -> None:
    pass  # filled in by the simulator work


# ----------------------------------------------------------------------------------------------- section: chamber
def add_chamber_commands(sub: argparse._SubParsersAction) -> None:
    pass  # filled in by the serial-stack work


# ----------------------------------------------------------------------------------------------- main
COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_sim_commands,
    add_chamber_commands,
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
    try:
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
