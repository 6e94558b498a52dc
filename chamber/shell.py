"""An interactive prompt on a connected chamber, like the authors' interpreter (control/interpreter.py).

Why ours and not theirs: theirs sends whatever is typed and the board halts on a typo (er01/er03/er04, then
nothing until reset). Here each line is the protocol language (SET/MSR/WAIT/RST, chamber/protocol_language.py)
and is checked against the catalogue and the operator limits before it is sent, with the same messages a
protocol file gets. An MSR is sent in chunks of at most `chunk_rows` rows (the firmware cannot abort an MSR), so
its rows are shown as each chunk arrives and a stop request ends it after the current chunk, every row kept.
Rows are shown compactly (RowView: the variables set this session and a few chosen sensors, aligned; `cols`
chooses) or as the full CSV (`csv on`), the header once. Tab completes instruction words and variable names.
The terminal (readline, history file, Ctrl-C) is chamber/operator.py's; this module only turns a line into an
action and a reply, so it is tested without a terminal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from chamber.errors import ChamberError
from chamber.frame import Frame
from chamber.public_csv import PublicCsvWriter
from chamber.protocol_language import (
    EXPECTED,
    MeasureInstruction,
    Problem,
    ResetInstruction,
    SetInstruction,
    WaitInputInstruction,
    WaitInstruction,
    check_setting,
    parse_line,
)
from chamber.protocol_runner import DEFAULT_CHUNK_ROWS, check_chunk_rows, measure_rows
from chamber.stop import StopRequest
from firmware_bridge.errors import BridgeError

KEYWORDS = ("SET,", "MSR,", "WAIT,", "WAIT_INPUT,", "RST", "help", "vars", "state", "cols", "csv on", "csv off",
            "quit")
HELP = "\n".join([
    "instructions (the protocol language, each checked before it is sent):",
    f"  {EXPECTED['SET']}",
    "      an actuator: sets it; a sensor: overrides its reading until SET to -9999 (`vars` says which is which)",
    f"  {EXPECTED['MSR']}   rows shown as each chunk arrives; Ctrl-C stops after the chunk",
    f"  {EXPECTED['WAIT']}   a host-side pause; Ctrl-C cuts it short",
    f"  {EXPECTED['WAIT_INPUT']}   for protocol files (waits for Enter); at the prompt you are the input",
    "  RST   reset the board (power-on state, settings forgotten)",
    "  # a comment, or a blank line: nothing is sent",
    "shell commands:",
    "  vars   every settable variable: kind, unit, allowed values",
    "  state   what this session has set",
    "  cols [NAME,NAME... | default]   the sensors shown beside the variables set (compact view)",
    "  csv on | csv off   every column as CSV (header once) | the compact view",
    "  help   this list",
    "  quit   leave (also Ctrl-D, or Ctrl-C at the prompt); the chamber is left in its safe state",
])
DEFAULT_SENSORS = {"wt": ("rpm_in", "rpm_out", "pressure_upwind", "pressure_downwind"),
                   "lt": ("current", "ir_1", "vis_1", "ir_3", "vis_3")}
"""The sensors the compact view shows before `cols` chooses others."""
MIN_WIDTH = 8


@dataclass(frozen=True)
class Reply:
    """What one line did: text for the operator, rows measured (if any), whether it was refused or failed (`ok`),
    whether a stop request cut it short (`stopped`), and whether to leave the shell."""

    text: str
    frame: Frame | None = None
    ok: bool = True
    quit: bool = False
    stopped: bool = False


def _value(v: float) -> str:
    return "-" if v != v else f"{v:g}"


class _LineSink:
    """A text stream whose complete lines go to `write` (what PublicCsvWriter writes, line by line)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write, self._pending = write, ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._write(line)
        return len(text)

    def flush(self) -> None:
        pass


class RowView:
    """Rows on a text sink as they arrive. Compact (default): `counter`, the variables set this session, then the
    chosen sensors, each column aligned under its name; the header is written again only when the columns
    change. CSV (`csv`): the public dataset layout `chamber run` writes (chamber.public_csv: timestamp, config,
    every variable as the authors' host writes it), the header once, so a piped shell's rows feed `sim fit`."""

    def __init__(self, names: Sequence[str], write: Callable[[str], None], *, kind: str = "wt", csv: bool = False):
        self.names, self.write, self.csv = tuple(names), write, csv
        self.set_names: list[str] = []
        self.chosen: list[str] = [n for n in DEFAULT_SENSORS.get(kind, ()) if n in self.names]
        self._default = list(self.chosen)
        self._header: tuple[str, ...] | None = None  # the columns whose header was written last
        self._csv = PublicCsvWriter(_LineSink(write))  # type: ignore[arg-type]

    def columns(self) -> tuple[str, ...]:
        if self.csv:
            return self.names
        shown = ["counter", *self.set_names, *(n for n in self.chosen if n not in self.set_names)]
        return tuple(n for n in dict.fromkeys(shown) if n in self.names)

    def was_set(self, name: str) -> None:
        if name not in self.set_names:
            self.set_names.append(name)

    def choose(self, names: Sequence[str]) -> str:
        """`cols`: the sensors to show (`default`: the default ones); refused naming an unknown column."""
        if list(names) == ["default"]:
            self.chosen = list(self._default)
        else:
            unknown = [n for n in names if n not in self.names]
            if unknown:
                raise ValueError(f"expected column names of this chamber, got {', '.join(unknown)}")
            self.chosen = list(dict.fromkeys(names))
        return "columns: " + ", ".join(self.columns())

    def rows(self, frame: Frame) -> None:
        if self.csv:
            self._csv.write_frame(frame)
            return
        columns = self.columns()
        index = [frame.names.index(n) for n in columns]
        widths = [max(len(n), MIN_WIDTH) for n in columns]
        if columns != self._header:
            self._header = columns
            self.write(" ".join(n.rjust(w) for n, w in zip(columns, widths)))
        for row in frame.values.tolist():
            self.write(" ".join(_value(row[i]).rjust(w) for i, w in zip(index, widths)))


class Shell:
    """Lines in, replies out. `wait(seconds)` pauses and returns True when cut short (default: the stop request's
    own wait, ended by a stop); MSRs go out in chunks of `chunk_rows`, each chunk's rows handed to `on_frame`
    (the row view) as it arrives."""

    def __init__(self, chamber: Any, *, wait: Callable[[float], Any] | None = None,
                 on_frame: Callable[[Frame], None] = lambda f: None, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 view: RowView | None = None):
        self.chamber = chamber
        self._wait = wait
        self._on_frame = on_frame
        self.chunk_rows = check_chunk_rows(chunk_rows)  # refused before the first line, not at the first MSR
        self.view = view

    def execute(self, line: str, stop: StopRequest | None = None) -> Reply:
        word = line.strip()
        if word in ("quit", "exit"):
            return Reply("bye", quit=True)
        if word in ("help", "?"):
            return Reply(HELP)
        if word == "vars":
            return Reply(self.describe_vars())
        if word == "state":
            return Reply(", ".join(f"{k}={v:g}" for k, v in self.chamber.applied().items()) or "nothing set yet")
        if word == "cols" or word.startswith("cols "):
            return self._cols(word[4:].strip())
        if word in ("csv on", "csv off"):
            if self.view is not None:
                self.view.csv = word == "csv on"
            return Reply("rows as CSV, every column" if word == "csv on" else "rows in the compact view (cols)")
        parsed = parse_line(word)
        if parsed is None:
            return Reply("")
        if isinstance(parsed, Problem):
            return Reply(f"refused, nothing sent: expected {parsed.expected}", ok=False)
        try:
            return self._run(parsed, stop or StopRequest())
        except (ChamberError, BridgeError) as exc:
            return Reply(f"{type(exc).__name__}: {exc}", ok=False)

    def describe_vars(self) -> str:
        """Every settable variable with its kind, unit and allowed values; a sensor marked as an override."""
        catalogue = self.chamber.catalogue
        lines = [f"{'variable':<18} {'kind':<11} {'unit':<11} allowed"]
        for name in catalogue.settable():
            v = catalogue.variable(name)
            note = "  (SET overrides the reading; -9999 ends it)" if v.kind.value == "sensor" else ""
            lines.append(f"{name:<18} {v.kind.value:<11} {v.unit or '-':<11} {v.describe_allowed()}{note}")
        return "\n".join(lines)

    def _cols(self, arg: str) -> Reply:
        if self.view is None:
            return Reply("no row view", ok=False)
        if not arg:
            sensors = [v.name for v in self.chamber.layout.variables if v.kind.value == "sensor"]
            return Reply("columns: " + ", ".join(self.view.columns()) + "\nsensors: " + ", ".join(sensors)
                         + "\n'cols NAME,NAME' chooses, 'cols default' restores, 'csv on' shows every column")
        try:
            return Reply(self.view.choose([n.strip() for n in arg.replace(" ", ",").split(",") if n.strip()]))
        except ValueError as exc:
            return Reply(f"refused: {exc}", ok=False)

    def _run(self, instruction: Any, stop: StopRequest) -> Reply:
        if isinstance(instruction, SetInstruction):
            number = check_setting(self.chamber.catalogue, instruction)
            if isinstance(number, Problem):
                return Reply(f"refused, nothing sent: {instruction.variable}: expected {number.expected}", ok=False)
            applied = self.chamber.set(instruction.variable, number)
            if self.view is not None:
                self.view.was_set(instruction.variable)
            variable = self.chamber.catalogue.variable(instruction.variable)
            if variable.kind.value == "sensor":
                what = ("override ended: the reading is measured again" if math.isclose(applied, -9999)
                        else "warning: a sensor: this overrides its reading until SET to -9999")
                return Reply(f"OK {instruction.variable}={applied:g} ({what})")
            return Reply(f"OK {instruction.variable}={applied:g}")
        if isinstance(instruction, MeasureInstruction):
            frame, cut = measure_rows(self.chamber, instruction.rows, on_frame=self._on_frame, stop=stop,
                                      chunk_rows=self.chunk_rows)
            got = 0 if frame is None else len(frame)
            if cut:
                return Reply(f"stopped after {got} of {instruction.rows} row(s) (kept)", frame=frame, stopped=True)
            return Reply(f"{got} row(s)", frame=frame)
        if isinstance(instruction, WaitInstruction):
            if (self._wait or stop.wait)(instruction.ms / 1000.0) or stop.requested:
                return Reply(f"WAIT of {instruction.ms} ms cut short", stopped=True)
            return Reply(f"waited {instruction.ms} ms")
        if isinstance(instruction, ResetInstruction):
            self.chamber.reset()
            return Reply("OK reset (power-on state, settings forgotten)")
        if isinstance(instruction, WaitInputInstruction):
            return Reply("WAIT_INPUT is for protocol files; at the prompt you are the input")
        return Reply(f"cannot run {instruction!r}", ok=False)

    def complete(self, text: str) -> list[str]:
        """Completions for what has been typed so far on the line: keywords, then variable names after SET,."""
        if text.startswith("SET,") and text.count(",") == 1:
            prefix = text[4:]
            return [f"SET,{n}," for n in self.chamber.catalogue.settable() if n.startswith(prefix)]
        return [k for k in KEYWORDS if k.startswith(text)]
