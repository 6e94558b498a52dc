"""An interactive prompt on a connected chamber, like the authors' interpreter (control/interpreter.py).

Why ours and not theirs: theirs sends whatever is typed and the board halts on a typo (er01/er03/er04, then
nothing until reset). Here each line is the protocol language (SET/MSR/WAIT/RST, chamber/protocol_language.py)
and is checked against the catalogue and the operator limits before it is sent, with the same messages a
protocol file gets. Tab completes instruction words and variable names. The terminal (readline, history file)
is the CLI's; this module only turns a line into an action and a reply, so it is tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from chamber.errors import ChamberError
from chamber.frame import Frame
from chamber.protocol_language import (
    MeasureInstruction,
    Problem,
    ResetInstruction,
    SetInstruction,
    WaitInputInstruction,
    WaitInstruction,
    check_setting,
    parse_line,
)
from firmware_bridge.errors import BridgeError

KEYWORDS = ("SET,", "MSR,", "WAIT,", "RST", "help", "vars", "state", "quit")
HELP = ("SET,<variable>,<value> | MSR,<n>,<delay> | WAIT,<ms> | RST | vars (settable variables and their allowed "
        "values) | state (what the host has set) | quit")


@dataclass(frozen=True)
class Reply:
    """What one line did: text for the operator, rows measured (if any), and whether to leave the shell."""

    text: str
    frame: Frame | None = None
    ok: bool = True
    quit: bool = False


class Shell:
    def __init__(self, chamber: Any, *, wait: Callable[[float], Any], on_frame: Callable[[Frame], None] = lambda f: None):
        self.chamber = chamber
        self._wait = wait
        self._on_frame = on_frame

    def execute(self, line: str) -> Reply:
        word = line.strip()
        if word in ("quit", "exit"):
            return Reply("bye", quit=True)
        if word in ("help", "?"):
            return Reply(HELP)
        if word == "vars":
            catalogue = self.chamber.catalogue
            return Reply("\n".join(f"{n:<16} {catalogue.variable(n).describe_allowed()}" for n in catalogue.settable()))
        if word == "state":
            return Reply(", ".join(f"{k}={v:g}" for k, v in self.chamber.applied().items()) or "nothing set yet")
        parsed = parse_line(word)
        if parsed is None:
            return Reply("")
        if isinstance(parsed, Problem):
            return Reply(f"refused, nothing sent: expected {parsed.expected}", ok=False)
        try:
            return self._run(parsed)
        except (ChamberError, BridgeError) as exc:
            return Reply(f"{type(exc).__name__}: {exc}", ok=False)

    def _run(self, instruction: Any) -> Reply:
        if isinstance(instruction, SetInstruction):
            number = check_setting(self.chamber.catalogue, instruction)
            if isinstance(number, Problem):
                return Reply(f"refused, nothing sent: {instruction.variable}: expected {number.expected}", ok=False)
            applied = self.chamber.set(instruction.variable, number)
            return Reply(f"OK {instruction.variable}={applied:g}")
        if isinstance(instruction, MeasureInstruction):
            frame = self.chamber.measure(instruction.rows)
            self._on_frame(frame)
            return Reply(f"{len(frame)} row(s)", frame=frame)
        if isinstance(instruction, WaitInstruction):
            self._wait(instruction.ms / 1000.0)
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
