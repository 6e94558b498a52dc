"""The chamber authors' experiment protocol language: parse a whole file, and validate it against a chamber.

Why a separate, whole-file step: an operator's protocol may run for hours (the longest public one has 18,028
lines); a typo on line 17,000 must be found before the first byte goes out, not after 12 hours of measuring. So
every line is parsed first (syntax, as the authors' `control/messages.py` accepts it), then every SET is checked
against the connected chamber's catalogue and the operator limits, then the SETs are replayed in order and every
MSR is checked as the driver will check it (the pressure controller must not be left driving a fan its operator
limit caps: chamber.limits.check_controller), and all problems are reported at once, each with its line number,
the instruction and what was expected. `chamber run` and `chamber run --validate-only` run this same check, so a
protocol the offline check passes is not refused half-way (issue 24: one was, after 2 of its 3 instructions).

The language (one instruction a line; `#` comments and blank lines are skipped):

    SET,<variable>,<value>   set an input, the flag or a sensor override (value: -?digits[.digits] or 1/digits)
    MSR,<n>,<delay>          measure n rows (the Mk1 firmware echoes <delay> and ignores it)
    WAIT,<ms>                host-side pause
    WAIT_INPUT,<prompt>      wait for the operator to press Enter
    RST                      reset the board (our addition; the authors' parser has no RST instruction)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Union

from chamber.catalogue import VariableCatalogue
from chamber.errors import ChamberError, InvalidSetting
from chamber.limits import ControllerUnbounded
from firmware_bridge.model_file import ModelFileError, read_text_capped
from firmware_bridge.variables import MAX_MSR_ROWS

# The authors' regular expressions (control/messages.py), anchored the same way.
_SET = re.compile(r"^SET,([a-z0-9_]*),(-?\d*\.?\d*|1/\d*)$")
_MSR = re.compile(r"^MSR,(\d*),(\d*)$")
_WAIT = re.compile(r"^WAIT,(\d*)$")
_WAIT_INPUT = re.compile(r"^WAIT_INPUT,(.*)$")
_COMMENT = re.compile(r"^#.*$")

PROTOCOL_MAX_BYTES = 16 << 20
"""A protocol file larger than this is refused before it is read: the longest public protocol is 384 KB (18,028
lines, hours of measuring); 16 MiB is forty times that, and a file of that size still parses in about a second."""


EXPECTED = {
    "SET": "SET,<variable>,<number> (variable: lower-case letters, digits, _; number: -?digits[.digits] or 1/digits)",
    "MSR": f"MSR,<rows 1..{MAX_MSR_ROWS}>,<delay ms>",
    "WAIT": "WAIT,<milliseconds>",
    "WAIT_INPUT": "WAIT_INPUT,<prompt>",
    "RST": "RST",
}
ANY = "one of SET,<variable>,<value> | MSR,<n>,<delay> | WAIT,<ms> | WAIT_INPUT,<prompt> | RST, a # comment or a blank line"


@dataclass(frozen=True)
class SetInstruction:
    line: int
    variable: str
    value: str  # the text, as written; the catalogue turns it into what is sent

    @property
    def text(self) -> str:
        return f"SET,{self.variable},{self.value}"


@dataclass(frozen=True)
class MeasureInstruction:
    line: int
    rows: int
    delay_ms: int

    @property
    def text(self) -> str:
        return f"MSR,{self.rows},{self.delay_ms}"


@dataclass(frozen=True)
class WaitInstruction:
    line: int
    ms: int

    @property
    def text(self) -> str:
        return f"WAIT,{self.ms}"


@dataclass(frozen=True)
class WaitInputInstruction:
    line: int
    prompt: str

    @property
    def text(self) -> str:
        return f"WAIT_INPUT,{self.prompt}"


@dataclass(frozen=True)
class ResetInstruction:
    line: int

    @property
    def text(self) -> str:
        return "RST"


Instruction = Union[SetInstruction, MeasureInstruction, WaitInstruction, WaitInputInstruction, ResetInstruction]


@dataclass(frozen=True)
class Problem:
    """One line that cannot run: where, what it says, and what was expected there."""

    line: int
    text: str
    expected: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.text!r}: expected {self.expected}"


class ProtocolError(ChamberError, ValueError):
    """A protocol refused before anything was sent; `problems` lists every offending line."""

    SHOWN = 10

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        shown = "; ".join(str(p) for p in problems[: self.SHOWN])
        more = f" (+{len(problems) - self.SHOWN} more)" if len(problems) > self.SHOWN else ""
        super().__init__(f"{source}: {len(problems)} line(s) cannot run, nothing was sent: {shown}{more}")


class ProtocolFileError(ProtocolError):
    """A protocol file that cannot be read at all (missing, too large, not UTF-8): the file, not a line, at fault;
    worded as every input file's error (firmware_bridge.model_file): the file, what arrived, what was expected."""

    def __init__(self, source: str, problem: str):
        self.source, self.problems = source, []
        ChamberError.__init__(self, f"{source}: {problem}; nothing was sent")


@dataclass(frozen=True)
class Protocol:
    source: str
    instructions: tuple[Instruction, ...]

    @property
    def rows(self) -> int:
        """Rows the protocol measures in all."""
        return sum(i.rows for i in self.instructions if isinstance(i, MeasureInstruction))

    @property
    def wait_ms(self) -> int:
        """Host-side waiting in all (WAIT_INPUT not counted: it lasts as long as the operator takes)."""
        return sum(i.ms for i in self.instructions if isinstance(i, WaitInstruction))

    def variables_set(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i.variable for i in self.instructions if isinstance(i, SetInstruction)))


def parse_line(text: str, line: int = 1) -> Instruction | Problem | None:
    """One line: an instruction, a Problem naming what was expected, or None for a comment or blank line.

    Trailing whitespace is dropped, as the authors' loader does (`line.rstrip()`); leading whitespace is not."""
    text = text.rstrip()
    if text == "" or _COMMENT.match(text):
        return None
    if text == "RST":
        return ResetInstruction(line)
    keyword = text.split(",", 1)[0]
    if keyword == "SET":
        m = _SET.match(text)
        if m is None:
            return Problem(line, text, EXPECTED["SET"])
        if m.group(1) == "" or m.group(2) in ("", "-", ".", "-.", "1/"):
            return Problem(line, text, EXPECTED["SET"])
        return SetInstruction(line, m.group(1), m.group(2))
    if keyword == "MSR":
        m = _MSR.match(text)
        if m is None or m.group(1) == "" or m.group(2) == "":
            return Problem(line, text, EXPECTED["MSR"])
        rows = int(m.group(1))
        if rows < 1:
            return Problem(line, text, EXPECTED["MSR"])
        if rows > MAX_MSR_ROWS:
            return Problem(line, text, EXPECTED["MSR"] + " (the firmware reads n as a 16-bit int; split the MSR)")
        return MeasureInstruction(line, rows, int(m.group(2)))
    if keyword == "WAIT":
        m = _WAIT.match(text)
        if m is None or m.group(1) == "":
            return Problem(line, text, EXPECTED["WAIT"])
        return WaitInstruction(line, int(m.group(1)))
    if keyword == "WAIT_INPUT":
        m = _WAIT_INPUT.match(text)
        if m is None:
            return Problem(line, text, EXPECTED["WAIT_INPUT"])
        return WaitInputInstruction(line, m.group(1))
    return Problem(line, text, ANY)


def parse_protocol(lines: Iterable[str], source: str = "<protocol>") -> Protocol:
    """Parse every line; ProtocolError listing every bad line, else the instructions in order."""
    instructions: list[Instruction] = []
    problems: list[Problem] = []
    for number, text in enumerate(lines, start=1):
        parsed = parse_line(text, number)
        if isinstance(parsed, Problem):
            problems.append(parsed)
        elif parsed is not None:
            instructions.append(parsed)
    if problems:
        raise ProtocolError(source, problems)
    return Protocol(source, tuple(instructions))


def load_protocol(path: str | Path) -> Protocol:
    """Read and parse a protocol file (UTF-8, as the authors' loader reads it)."""
    try:
        text = read_text_capped(path, source=str(path), max_bytes=PROTOCOL_MAX_BYTES)
    except ModelFileError as exc:
        raise ProtocolFileError(str(path), exc.problem) from None
    return parse_protocol(text.splitlines(), str(path))


def check_setting(catalogue: VariableCatalogue, instruction: SetInstruction) -> float | Problem:
    """The number a SET will send, or the Problem the catalogue (firmware rules, operator limits) names."""
    try:
        return catalogue.validate(instruction.variable, instruction.value)
    except InvalidSetting as exc:
        return Problem(instruction.line, instruction.text, exc.expected)


def validate_protocol(protocol: Protocol, catalogue: VariableCatalogue,
                      state: Mapping[str, float] | None = None) -> dict[int, float]:
    """Check every SET against the chamber, then every MSR against the inputs set before it (check_measurements);
    ProtocolError listing every refusal in line order, else {line: number to send}. `state` is what the host has
    set on the chamber already (Chamber.state(); none on a chamber just connected).

    A value is checked once per distinct (variable, text), so the 18,028-line protocols validate in milliseconds."""
    seen: dict[tuple[str, str], float | Problem] = {}
    numbers: dict[int, float] = {}
    problems: list[Problem] = []
    for instruction in protocol.instructions:
        if not isinstance(instruction, SetInstruction):
            continue
        key = (instruction.variable, instruction.value)
        if key not in seen:
            seen[key] = check_setting(catalogue, instruction)
        result = seen[key]
        if isinstance(result, Problem):
            problems.append(Problem(instruction.line, instruction.text, result.expected))
        else:
            numbers[instruction.line] = result
    problems += check_measurements(protocol, catalogue, numbers, state)
    if problems:
        raise ProtocolError(protocol.source, sorted(problems, key=lambda p: p.line))
    return numbers


def check_measurements(protocol: Protocol, catalogue: VariableCatalogue, numbers: Mapping[int, float],
                       state: Mapping[str, float] | None = None) -> list[Problem]:
    """Replay the protocol's SETs in order (`numbers`: the valid ones; RST forgets them, as the board does) and
    check each MSR as the driver's measure() will (catalogue.check_measurable on the inputs set so far): a Problem
    for every MSR the run would refuse, naming the fans to pin and why."""
    inputs = dict(state or {})
    problems: list[Problem] = []
    for instruction in protocol.instructions:
        if isinstance(instruction, SetInstruction) and instruction.line in numbers:
            inputs = catalogue.inputs_after(inputs, {instruction.variable: numbers[instruction.line]})
        elif isinstance(instruction, ResetInstruction):
            inputs.clear()
        elif isinstance(instruction, MeasureInstruction):
            try:
                catalogue.check_measurable(dict(inputs))
            except ControllerUnbounded as exc:
                problems.append(Problem(instruction.line, instruction.text,
                                        f"{' and '.join(exc.fans)} set by an earlier SET within the operator limits "
                                        f"(ControllerUnbounded: {exc.reason})"))
    return problems
