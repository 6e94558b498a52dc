"""The operator's bench on one chamber: measure N rows, run a protocol file into a CSV, an interactive shell.

Why here and not in the CLI: these are driver-floor jobs (the protocol language, its runner, the public CSV
layout, the shell) and a test can call them with a chamber and streams of its own. The caller opens the chamber
(chamber/selection.py, which also leaves it in its safe state); the CLI only renders what these return.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, TextIO

from chamber.errors import ChamberError


class AssignmentError(ChamberError, ValueError):
    """A `VAR=VALUE` argument without its `=`."""


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """`var=value` strings → settings; the value stays a string so the driver can name a non-numeric one."""
    pairs: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise AssignmentError(f"expected VAR=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        pairs[name.strip()] = value.strip()
    return pairs


def measure_job(chamber: Any, n: int, settings: dict[str, str], *, stop: Any, on_progress: Callable[[Any], None],
                chunk_rows: int) -> dict[str, Any]:
    """Apply `settings`, measure `n` checked rows (stoppable after any row); the rows as JSON-ready lists."""
    from chamber.protocol_runner import measure_rows

    applied = chamber.set_many(settings)
    frame, interrupted = measure_rows(chamber, n, on_progress=on_progress, stop=stop, chunk_rows=chunk_rows)
    if frame is None:
        return {"config": chamber.config, "variables": list(chamber.layout.names), "rows": [],
                "link": chamber.link_stats(), "applied": applied, "host_timestamps": [], "reconnected": False,
                "interrupted": interrupted}
    rows = [[None if v != v else float(v) for v in row] for row in frame.values.tolist()]
    return {"config": chamber.config, "variables": list(frame.names), "rows": rows, "link": frame.link,
            "applied": applied, "host_timestamps": frame.host_timestamps.tolist(),
            "reconnected": bool(frame.reconnected), "interrupted": interrupted}


def validate_offline(protocol: Any, path: Path, chamber: str, config: str, limits_file: Path | None) -> dict[str, Any]:
    """Check a protocol against the catalogue of `chamber/config` (and a limits file) without a board."""
    from chamber.catalogue import VariableCatalogue
    from chamber.limits import load_limits
    from chamber.protocol_language import validate_protocol
    from firmware_bridge.variables import layout_for

    layout = layout_for(chamber, config)
    part = load_limits(limits_file).for_chamber(chamber) if limits_file else None
    if part is not None:
        part.check_against(layout)
    validate_protocol(protocol, VariableCatalogue(layout, part))
    return {"protocol": str(path), "chamber": chamber, "config": config, "valid": True,
            "instructions": len(protocol.instructions), "rows": protocol.rows, "wait_s": protocol.wait_ms / 1000,
            "variables_set": list(protocol.variables_set())}


def protocol_job(chamber: Any, protocol: Any, path: Path, output: Path, *, stop: Any, ask: Callable[[str], None],
                 on_progress: Callable[[Any], None], chunk_rows: int, say: Callable[[str], None]) -> Any:
    """Validate `protocol` against the connected chamber (every refusal before a byte is sent or a file made),
    then run it, writing each row to `output` in the public dataset layout as it arrives."""
    from chamber.protocol_language import validate_protocol
    from chamber.protocol_runner import format_duration, run_protocol
    from chamber.public_csv import PublicCsvWriter

    validate_protocol(protocol, chamber.catalogue)
    say(f"running {path} on {chamber.layout.chamber}/{chamber.config}: {len(protocol.instructions)} instructions, "
        f"{protocol.rows} rows, {format_duration(protocol.wait_ms / 1000)} of WAIT -> {output} "
        "(Ctrl-C stops after the current row)")
    with open(output, "w", encoding="utf-8", newline="") as fh:
        writer = PublicCsvWriter(fh, chamber.layout.names)
        return run_protocol(chamber, protocol, on_frame=writer.write_frame, stop=stop, ask=ask,
                            on_progress=on_progress, chunk_rows=chunk_rows)


def _readline_for(shell: Any, history: Path) -> Any:
    """readline with Tab completion and the history file, or None where there is no readline."""
    try:
        import readline

        readline.set_completer_delims(" \t")
        readline.parse_and_bind("tab: complete")
        readline.set_completer(lambda text, i: (shell.complete(readline.get_line_buffer()) + [None])[i])
        if history.exists():
            readline.read_history_file(history)
        return readline
    except (ImportError, OSError):  # no readline (or no history yet): a plain prompt
        return None


def run_shell(chamber: Any, stdin: TextIO, stdout: TextIO, stderr: TextIO, history: Path) -> int:
    """The interactive prompt (or a piped script) until quit or end of input; returns the lines executed.
    Rows go to `stdout` as CSV, replies and refusals to `stderr`."""
    import time

    from chamber.shell import Shell

    shell = Shell(chamber, wait=time.sleep)
    interactive = stdin.isatty()
    readline = _readline_for(shell, history) if interactive else None
    stderr.write(f"chamber {chamber.layout.chamber}/{chamber.config}; 'help' for instructions, Tab completes, "
                 "Ctrl-D quits\n")
    lines = 0
    try:
        while True:
            try:
                line = input(">>> ") if interactive else stdin.readline()
            except EOFError:
                break
            if not interactive and not line:
                break
            lines += 1
            reply = shell.execute(line)
            if reply.frame is not None:
                stdout.write(",".join(reply.frame.names) + "\n")
                for row in reply.frame.values.tolist():
                    stdout.write(",".join("" if v != v else f"{v:g}" for v in row) + "\n")
            if reply.text:
                stderr.write(("  " if reply.ok else "  ! ") + reply.text.replace("\n", "\n  ") + "\n")
            stdout.flush()
            if reply.quit:
                break
    except KeyboardInterrupt:
        stderr.write("\n")
    finally:
        if readline is not None:
            try:
                readline.write_history_file(history)
            except OSError:
                pass
    return lines
