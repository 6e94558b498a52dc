"""What every command of the CLI shares: where ../shared is, the refusal type, the output (text or one JSON
object), the claims and chamber options turned into library calls, and the progress rendering.

Why a module of its own: the CLI is split by command group (bench_cli.py: the main job and grading;
cli_chamber.py: sim, chamber, serve, station; cli_agent.py: datasheet, extract, scoring), and each group uses these.
Progress is a sink the library calls (protocols.lab_job.JobProgress, the protocol runner's row progress); it
writes to stderr only, so stdout stays one JSON object with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

PROJECT_ROOT = Path(__file__).resolve().parent
Args = argparse.Namespace


def shared_dir() -> Path:
    """Where ../shared lives: env var CHAMBERLAB_SHARED, default `../shared` beside the project root."""
    env = os.environ.get("CHAMBERLAB_SHARED")
    return Path(env).resolve() if env else (PROJECT_ROOT.parent / "shared").resolve()


class CliError(Exception):
    """A request the CLI refuses (bad arguments found after parsing); rendered without a traceback."""


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
    """A subcommand parser that always has --json."""
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
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
