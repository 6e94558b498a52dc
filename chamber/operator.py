"""The operator's bench on one chamber: measure N rows, run a protocol file into a CSV, an interactive shell.

Why here and not in the CLI: these are driver-floor jobs (the protocol language, its runner, the public CSV
layout, the shell) and a test can call them with a chamber and streams of its own. The caller opens the chamber
(chamber/selection.py, which also leaves it in its safe state); the CLI only renders what these return.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TextIO

from chamber.errors import ChamberError

if TYPE_CHECKING:
    from chamber.catalogue import VariableCatalogue
    from firmware_bridge.variables import Layout


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
    """Apply `settings`, measure `n` checked rows (stoppable after any row); the rows as JSON-ready lists. Every
    setting and the measurement itself (the pressure controller's operator-limit rule, on the inputs as they will
    be) are checked before the first SET is sent."""
    from chamber.protocol_runner import measure_rows

    catalogue = chamber.catalogue
    numbers = {name: catalogue.validate(name, value) for name, value in settings.items()}
    catalogue.check_measurable(catalogue.inputs_after(chamber.state(), numbers))
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


@dataclass(frozen=True)
class OfflineChamber:
    """What the offline check knows of a chamber: its layout and catalogue (the offline stand-in for a connected
    Chamber where a check needs only those, e.g. chamber.safe_state.check_safe_state)."""

    layout: Layout
    catalogue: VariableCatalogue


def validate_offline(protocol: Any, path: Path, chamber: str, config: str, limits_file: Path | None,
                     safe_file: str | Path | None = None, params_file: Path | None = None) -> dict[str, Any]:
    """Every check `chamber run` makes before its first byte, without a board, on the catalogue of
    `chamber/config`: the simulator parameter file if one is given (open_chambers reads it); the limits file, read
    strictly and checked against the chamber as the driver does on connect; the safe state (`safe_file`, else the
    limits file's `safe:` section, else the default) against the catalogue and limits as open_chambers checks it;
    every SET against the catalogue and limits; and every MSR against the inputs set before it (the pressure
    controller's operator-limit rule), each naming its line."""
    from chamber.catalogue import VariableCatalogue
    from chamber.limits import load_limits
    from chamber.protocol_language import validate_protocol
    from chamber.safe_state import check_safe_state, resolve_safe_state
    from chamber.selection import read_params
    from firmware_bridge.variables import layout_for

    layout = layout_for(chamber, config)
    read_params(params_file)
    limits = load_limits(limits_file) if limits_file else None
    if limits is not None:
        limits.check_against(layout)  # a file for the other chamber is refused, as Chamber.connect refuses it
    part = limits.for_chamber(chamber) if limits is not None else None
    catalogue = VariableCatalogue(layout, part)
    safe = resolve_safe_state(safe_file, limits)
    check_safe_state(OfflineChamber(layout, catalogue), safe)
    validate_protocol(protocol, catalogue, {})  # a chamber just connected: the host has set nothing yet
    return {"protocol": str(path), "chamber": chamber, "config": config, "valid": True,
            "instructions": len(protocol.instructions), "rows": protocol.rows, "wait_s": protocol.wait_ms / 1000,
            "variables_set": list(protocol.variables_set()), "safe_source": safe.source}


def protocol_job(chamber: Any, protocol: Any, path: Path, output: Path, *, stop: Any, ask: Callable[[str], None],
                 on_progress: Callable[[Any], None], chunk_rows: int, say: Callable[[str], None],
                 force: bool = False) -> Any:
    """Validate `protocol` against the connected chamber (every refusal before a byte is sent or a file made),
    then run it, writing each row in the public dataset layout as it arrives to a temporary file beside `output`
    that becomes `output` when the run ends, stopped or failed alike (firmware_bridge.output_file.staged_output:
    an existing `output` is replaced only with `force`, and a full disk leaves it whole: WriteFailed names it)."""
    from chamber.protocol_language import validate_protocol
    from chamber.protocol_runner import format_duration, run_protocol
    from chamber.public_csv import PublicCsvWriter
    from firmware_bridge.output_file import staged_output, temporary_path

    validate_protocol(protocol, chamber.catalogue, chamber.state())
    say(f"running {path} on {chamber.layout.chamber}/{chamber.config}: {len(protocol.instructions)} instructions, "
        f"{protocol.rows} rows, {format_duration(protocol.wait_ms / 1000)} of WAIT -> {output} (rows go to "
        f"{temporary_path(Path(output)).name} until the run ends; Ctrl-C stops after the current row)")
    with staged_output(output, force=force) as fh:
        writer = PublicCsvWriter(fh, chamber.layout.names)
        return run_protocol(chamber, protocol, on_frame=writer.write_frame, stop=stop, ask=ask,
                            on_progress=on_progress, chunk_rows=chunk_rows)


def operator_input(stdin: Any) -> tuple[int | None, str]:
    """How many lines `stdin` can still give a WAIT_INPUT, and what it is: (0, "closed"), (0, "/dev/null"),
    (n, "a file holding n line(s)"), (0, "a pipe closed with nothing in it"); (None, "") when more may come (a
    terminal, a pipe still open, a stream without a file descriptor)."""
    import os
    import select
    import stat

    if stdin is None or getattr(stdin, "closed", False):
        return 0, "closed"
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None, ""
    try:
        info = os.fstat(fd)
    except OSError:
        return 0, "closed"
    if stat.S_ISCHR(info.st_mode):
        return (0, os.devnull) if info.st_rdev == os.stat(os.devnull).st_rdev else (None, "")
    if stat.S_ISREG(info.st_mode):
        left = info.st_size - os.lseek(fd, 0, os.SEEK_CUR)
        if left > 1 << 20:
            return None, ""  # a MiB of answers is enough for any protocol
        text = os.pread(fd, max(left, 0), info.st_size - left) if left > 0 else b""
        lines = text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)
        return lines, f"a file holding {lines} line(s)"
    if stat.S_ISFIFO(info.st_mode):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        events = dict(poller.poll(0)).get(fd, 0)
        if events & select.POLLHUP and not events & select.POLLIN:
            return 0, "a pipe closed with nothing in it"
    return None, ""


def check_operator_input(protocol: Any, stdin: Any) -> None:
    """Refuse a protocol whose WAIT_INPUTs `stdin` cannot answer (operator_input), before anything is sent:
    the real run and --validate-only alike, naming the first WAIT_INPUT that would find no line."""
    from chamber.protocol_language import WaitInputInstruction

    waits = [i for i in protocol.instructions if isinstance(i, WaitInputInstruction)]
    if not waits:
        return
    lines, what = operator_input(stdin)
    if lines is not None and lines < len(waits):
        first = waits[lines]
        raise OperatorRefused(f"{protocol.source}: line {first.line}: {first.text!r}: expected a line on stdin (an "
                              f"operator pressing Enter) for each of the {len(waits)} WAIT_INPUT(s), but stdin is "
                              f"{what}; nothing was sent")


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


@dataclass
class ShellEnd:
    """How a shell session ended: lines executed, whether Ctrl-C (or SIGTERM) ended it, and the lines refused or
    failed (a piped script stops at the first)."""

    lines: int = 0
    interrupted: bool = False
    refused: int = 0
    script_failed: bool = False  # a piped script stopped at a refused or failed line


def run_shell(chamber: Any, stdin: TextIO, stdout: TextIO, stderr: TextIO, history: Path, *,
              chunk_rows: int = 25, csv: bool = False) -> ShellEnd:
    """The interactive prompt (or a piped script) until quit, end of input or Ctrl-C. Rows go to `stdout` as
    each MSR chunk arrives (the compact row view on a terminal; every column as CSV with `csv` or when `stdout`
    is a file or a pipe), replies and refusals to `stderr`.

    Ctrl-C during an instruction stops it (an MSR after its current chunk, rows kept; a WAIT at once) and, at a
    terminal, returns to the prompt; a second Ctrl-C while it stops, or one at the prompt, leaves. A piped script
    ends at the first Ctrl-C (there is no prompt to return to) and at the first refused or failed line (the
    lines after it were written for a chamber in another state)."""
    import signal

    from chamber.shell import RowView, Shell
    from chamber.stop import StopRequest, handled_by

    def write_row(text: str) -> None:
        stdout.write(text + "\n")

    csv = csv or not getattr(stdout, "isatty", lambda: False)()  # rows into a file or a pipe: the whole CSV
    view = RowView(chamber.layout.names, write_row, kind=chamber.layout.chamber, csv=csv)

    def rows(frame: Any) -> None:
        view.rows(frame)
        stdout.flush()

    shell = Shell(chamber, on_frame=rows, chunk_rows=chunk_rows, view=view)
    interactive = stdin.isatty()
    readline = _readline_for(shell, history) if interactive else None
    stderr.write(f"chamber {chamber.layout.chamber}/{chamber.config}; 'help' lists every instruction, Tab "
                 "completes, Ctrl-C stops an MSR or WAIT, Ctrl-D or quit leaves\n")
    end, busy, stop = ShellEnd(), [False], [StopRequest()]

    def prompt() -> str:
        if csv:  # rows into a file or a pipe: the prompt goes with the replies, stdout stays CSV
            stderr.write(">>> ")
            stderr.flush()
            return input()
        return input(">>> ")

    def on_sigint(signum: int, _frame: Any) -> None:
        if busy[0] and not stop[0].requested:  # the first: the instruction stops, the shell stays
            stop[0].request("SIGINT")
            return
        raise KeyboardInterrupt("SIGINT")  # at the prompt, or the operator insists

    try:
        with handled_by(on_sigint, (signal.SIGINT,)):
            while True:
                try:
                    line = prompt() if interactive else stdin.readline()
                except EOFError:
                    break
                if not interactive and not line:
                    break
                end.lines += 1
                stop[0], busy[0] = StopRequest(), True
                try:
                    reply = shell.execute(line, stop[0])
                finally:
                    busy[0] = False
                if reply.text:
                    stderr.write(("  " if reply.ok else "  ! ") + reply.text.replace("\n", "\n  ") + "\n")
                stdout.flush()
                if reply.quit:
                    break
                if not reply.ok:
                    end.refused += 1
                    if not interactive:
                        end.script_failed = True
                        stderr.write(f"  ! line {end.lines} of the script was not done; the script stops here\n")
                        break
                if stop[0].requested:
                    if not interactive:
                        end.interrupted = True
                        break
                    stderr.write("  (stopped by Ctrl-C; back at the prompt: Ctrl-C again or quit leaves)\n")
    except KeyboardInterrupt:  # an exchange it cut short is settled by the safe state on the way out
        end.interrupted = True
        stderr.write("\ninterrupted: leaving\n")
    finally:
        stderr.flush()
        if readline is not None:
            try:
                readline.write_history_file(history)
            except OSError:
                pass
    return end


# --------------------------------------------------------------------------------------------- whole commands
# Each opens the one chamber of a selection (chamber.selection), does its job and leaves the chamber safe; the
# result is a dict of JSON-ready values with the safe-state outcome, and `*_text` is its text rendering.
Say = Callable[[str], None]


class OperatorRefused(ChamberError, ValueError):
    """An operator job that cannot go on (WAIT_INPUT with no operator at the terminal)."""


class RowMeter:
    """Rows done, elapsed and ETA of a measurement or protocol run (chamber.protocol_runner's progress) on a text
    stream with the one progress line of every long command (firmware_bridge/progress_line.py): the run's own
    elapsed time (so the last line says what the summary says) and ETA (rows at the measured rate plus the WAITs
    ahead, counted down through a WAIT); redrawn in place on a terminal, fitted to its width - 1; otherwise a
    line at the start, at most one every `every` seconds and one at the end: a WAIT is the note of the line on a
    terminal, and a line of its own when piped only if it lasts the calm interval or more (so a piped log grows
    by a line or two per `every` seconds, never one per WAIT)."""

    def __init__(self, label: str, stream: TextIO, every: float | None = None, *, width: int | None = None,
                 tty: bool | None = None, clock: Callable[[], float] | None = None) -> None:
        import time

        from firmware_bridge.progress_line import CALM_EVERY_S, ProgressLine

        self.label = label
        self.line = ProgressLine(stream, width=width, tty=tty, every=CALM_EVERY_S if every is None else every,
                                 clock=clock or time.monotonic)
        self.ended = False

    def __call__(self, p: Any) -> None:
        if self.ended:
            return
        if not self.line.open:  # elapsed from the run's own start (its summary's seconds), not from this call
            self.line.start(f"{self.label}: rows", p.rows_total, elapsed_s=p.elapsed_s)
        note = p.note()
        long_wait = not self.line.tty and p.waiting_s >= self.line.every  # a WAIT of a calm interval or more
        self.line.update(p.rows_done, note, total=p.rows_total, eta_s=p.eta_s, force=long_wait,
                         elapsed_s=p.elapsed_s)
        if p.rows_done >= p.rows_total and not p.waiting_s and not p.eta_s:  # every row, no WAIT left
            self.line.finish()
            self.ended = True


def board_selection(backend: str, port: str | None, chamber: str, config: str, seed: int, params: Path | None,
                    limits: Path | None, boot_timeout: float, lab_credentials: Path | None = None) -> Any:
    """The one chamber of an operator command: the serial board (or Remote Lab chamber, lab+http://...) at `port`,
    or the in-process simulator of `chamber`/`config` (chamber.selection.ChamberSelection; its limits file applies
    to this chamber as given)."""
    from chamber.selection import selection_of

    return selection_of(backend, [port] if backend == "serial" and port else None, kinds=(chamber,), config=config,
                        seed=seed, params=params, limits=limits, boot_timeout=boot_timeout, one_chamber=True,
                        lab_credentials=lab_credentials)


def _open_one(selection: Any, warn: Say, safe_file: str | Path | None = None, make_safe: bool = True) -> Any:
    """The selection's one chamber, left on exit in the --safe file's state, else its limits file's `safe:`
    section, else the default (resolved and checked by open_chambers, which reads the limits file once)."""
    from chamber.selection import open_chambers

    return open_chambers(selection, resolve_safe=make_safe, safe_file=safe_file, make_safe=make_safe, warn=warn)


def info_job(selection: Any, *, warn: Say) -> dict[str, Any]:
    """Connect and describe the board: configuration, variables (kind, unit, allowed values), link counters.
    Nothing is changed, so no safe state is applied."""
    with _open_one(selection, warn, make_safe=False) as opened:
        (chamber,) = opened.chambers.values()
        variables = [{"name": v.name, "kind": v.kind.value, "unit": v.unit, "allowed": v.describe_allowed()}
                     for v in chamber.layout.variables]
        return {"chamber": chamber.layout.chamber, "config": chamber.config, "variables": variables,
                "link": chamber.link_stats()}


def info_text(d: dict[str, Any], width: Any = "terminal") -> str:
    """The board's variables as a table and its link counters, fitted to a terminal's width (progress_line)."""
    from firmware_bridge.progress_line import fit_text, table_lines, wrap_parts

    return fit_text("\n".join(
        [f"chamber {d['chamber']}, config {d['config']}, {len(d['variables'])} variables"]
        + table_lines([(f"  {v['name']}", v["kind"], v["unit"], v["allowed"]) for v in d["variables"]],
                      (22, 12, 11, 0), width, indent="      ")
        + wrap_parts([f"{k}={v}" for k, v in d["link"].items()], width, head="link: ")), width)


def measure_command(selection: Any, n: int, assignments: list[str] | None, *, safe: str | Path | None,
                    on_progress: Callable[[Any], None], chunk: int, warn: Say) -> dict[str, Any]:
    """Apply `VAR=VALUE` settings, measure `n` rows (Ctrl-C/SIGTERM stop after the current row, all kept)."""
    from chamber.protocol_runner import check_chunk_rows
    from chamber.stop import stop_on_signals

    settings = parse_assignments(assignments)
    check_chunk_rows(chunk)  # before the chamber is opened: an MSR the firmware would miscount is never sent
    with stop_on_signals() as stop:
        opened = _open_one(selection, warn, safe)
        with opened:
            data = measure_job(next(iter(opened.chambers.values())), n, settings, stop=stop,
                               on_progress=on_progress, chunk_rows=chunk)
    return {**data, "safe_state": opened.outcomes[0].to_dict()}


def measure_text(d: dict[str, Any], n: int, note: Say) -> str:
    """The rows as CSV; the interruption (if any) and the safe state go to `note` (stderr: stdout stays CSV)."""
    if d["interrupted"]:
        note(f"interrupted after {len(d['rows'])} of {n} rows (all kept)")
    note(safe_text([d["safe_state"]]))
    return rows_text(d)


def rows_text(d: dict[str, Any]) -> str:
    return "\n".join([",".join(d["variables"]),
                      *(",".join("" if v is None else f"{v:g}" for v in row) for row in d["rows"])])


def safe_text(outcomes: list[dict[str, Any]]) -> str:
    """`safe state wt: load_in=0, ... (read back)` per chamber, or the driver's own line when it was not confirmed
    (what may be left running, and why)."""
    def one(o: dict[str, Any]) -> str:
        if o["error"]:
            return o.get("text") or f"safe state {o['chamber']}: FAILED ({o['error']})"
        applied = ", ".join(f"{k}={v:g}" for k, v in o["applied"].items()) or "nothing to set"
        return f"safe state {o['chamber']}: {applied}" + (" (read back)" if o.get("confirmed") else "")

    return "; ".join(one(o) for o in outcomes)


def leave_safe(chamber: Any, safe: Any, *, free_within_s: float) -> tuple[Any, list[str]]:
    """The shell's way out: apply the safe state (chamber.safe_state.apply_safe_state: settle, set, read back);
    if the board did not confirm it, wait until the board is free (the rows of an MSR still in flight: at most
    `free_within_s`) and apply it once more. Ctrl-C and SIGTERM wait meanwhile. Returns the last outcome (one line
    of its own says what happened; the first attempt's warning is not logged twice) and the signals received."""
    import logging

    from chamber.safe_state import apply_safe_state
    from chamber.stop import signals_deferred

    quiet = logging.getLogger("chamber.safe_state")
    was_disabled, quiet.disabled = quiet.disabled, True
    try:
        with signals_deferred() as received:
            outcome = apply_safe_state(chamber, safe)
            if not outcome.confirmed:
                try:
                    chamber.settle(free_within_s)
                except Exception:  # the second attempt says what is wrong
                    pass
                outcome = apply_safe_state(chamber, safe)
    finally:
        quiet.disabled = was_disabled
    return outcome, received


def shell_command(selection: Any, *, safe: str | Path | None, stdin: TextIO, stdout: TextIO, stderr: TextIO,
                  history: Path, warn: Say, chunk: int = 25, csv: bool = False) -> dict[str, Any]:
    """The interactive shell on the chamber (run_shell), left in its safe state afterwards: applied, read back and
    retried once the board is free (leave_safe). `interrupted`: Ctrl-C or SIGTERM ended it; `refused`: lines
    refused or failed. An error propagating from the shell with the safe state unconfirmed is SafeStateUnconfirmed
    (exit 3)."""
    from chamber.protocol_runner import check_chunk_rows
    from chamber.safe_state import SafeState, SafeStateUnconfirmed
    from chamber.selection import open_chambers

    check_chunk_rows(chunk)
    opened = open_chambers(selection, resolve_safe=True, safe_file=safe, make_safe=False, warn=warn)
    end, outcome, received = None, None, []
    with opened:  # closes the port; the safe state is leave_safe's
        chamber = next(iter(opened.chambers.values()))
        try:
            end = run_shell(chamber, stdin, stdout, stderr, history, chunk_rows=chunk, csv=csv)
        except BaseException as exc:
            outcome, received = leave_safe(chamber, opened.safe or SafeState(), free_within_s=15.0 + chunk)
            if not outcome.confirmed:
                raise SafeStateUnconfirmed([outcome]) from exc
            warn(outcome.text)
            raise
        outcome, received = leave_safe(chamber, opened.safe or SafeState(), free_within_s=15.0 + chunk)
    return {"lines": end.lines, "interrupted": end.interrupted or bool(received), "refused": end.refused,
            "script_failed": end.script_failed, "safe_state": outcome.to_dict()}


def validate_text(d: dict[str, Any], width: Any = "terminal") -> str:
    from chamber.protocol_runner import format_duration
    from firmware_bridge.progress_line import wrap_parts

    return "\n".join(wrap_parts([f"{d['instructions']} instructions", f"{d['rows']} rows",
                                 f"{format_duration(d['wait_s'])} of WAIT"], width,
                                head=f"{d['protocol']}: valid for {d['chamber']}/{d['config']}: "))


def protocol_command(selection: Any, protocol: Path, output: Path | None, *, validate_only: bool,
                     chamber: str, config: str, limits: Path | None, safe: str | Path | None, stdin: TextIO,
                     prompt_to: TextIO, on_progress: Callable[[Any], None], chunk: int, say: Say,
                     params: Path | None = None, force: bool = False) -> dict[str, Any]:
    """Run the protocol file `protocol` on the chamber of `selection` into a CSV (default `<protocol>_<UTC
    time>.csv`; an existing file is refused unless `force`); WAIT_INPUT prompts on `prompt_to` and waits for a
    line on `stdin`. Before the port is opened: the syntax, the MSR chunk, whether `stdin` can answer every
    WAIT_INPUT (check_operator_input) and the output path (its folder writable). With `validate_only` every
    check of a run is made offline against the catalogue of `chamber`/`config`, `limits`, `safe` and `params`
    (validate_offline; `selection` unused, None), and the output path if one is given."""
    import time

    from chamber.protocol_language import load_protocol
    from chamber.protocol_runner import check_chunk_rows
    from chamber.stop import stop_on_signals
    from firmware_bridge.output_file import check_output_path

    protocol_file, protocol = Path(protocol), load_protocol(protocol)
    check_chunk_rows(chunk)
    check_operator_input(protocol, stdin)
    if validate_only:
        result = validate_offline(protocol, protocol_file, chamber, config, limits, safe, params)
        if output is not None:
            check_output_path(output, force=force, option="-o")
        return result
    option = "-o" if output else "the default output"
    output = output or Path(f"{protocol_file.stem}_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.csv")
    check_output_path(output, force=force, option=option)

    def ask(prompt: str) -> None:
        prompt_to.write(prompt + " [Enter] ")
        prompt_to.flush()
        if not stdin.readline():
            raise OperatorRefused(f"WAIT_INPUT {prompt!r} needs an operator at the terminal, but stdin is closed")

    with stop_on_signals() as stop:
        opened = _open_one(selection, say, safe)
        with opened:
            outcome = protocol_job(next(iter(opened.chambers.values())), protocol, protocol_file, output, stop=stop,
                                   ask=ask, on_progress=on_progress, chunk_rows=chunk, say=say, force=force)
    return {**outcome.to_dict(), "output": str(output), "safe_state": opened.outcomes[0].to_dict(),
            "safe_source": opened.safe.source}


def protocol_text(d: dict[str, Any], width: Any = "terminal") -> str:
    """A protocol run's outcome, CSV and safe state (or, for an offline check, validate_text), fitted to a
    terminal's width; its time as the progress line's elapsed says it (m:ss), then in seconds."""
    from firmware_bridge.progress_line import clock_text, fit_text, wrap_parts

    if d.get("valid"):
        return validate_text(d, width)
    state = ("INTERRUPTED at line " + str(d["stopped_at_line"]) if d["interrupted"] else
             f"FAILED at line {d['stopped_at_line']}: {d['error']['type']}: {d['error']['message']}"
             if d["error"] else "done")
    return fit_text("\n".join([
        *wrap_parts([f"{d['rows']}/{d['rows_total']} rows in {clock_text(d['seconds'])} ({d['seconds']:.1f} s)",
                     f"{d['instructions_done']}/{d['instructions_total']} instructions"], width,
                    head=f"{d['protocol']}: {state}; "),
        f"csv: {d['output']}", safe_text([d["safe_state"]])]), width)
