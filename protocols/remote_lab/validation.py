"""A submitted protocol checked whole before it is queued or sent: the language, the chamber's catalogue and limits,
and the lab's caps.

Why here and not only in the worker: the client is untrusted and the worker may be on another host, busy with
someone else's experiment for hours; a protocol that cannot run must be refused at submission, with the line, the
instruction and what was expected, never discovered half-way. The checks are the driver's own
(chamber.protocol_language.validate_protocol against a VariableCatalogue built from the lab file), so the API and
the worker cannot disagree. The Remote Lab language is SET, MSR and WAIT only (no operator at a lab for
WAIT_INPUT, no RST: the lab resets the chamber itself). The authors' client writes SET values with Python's
float repr (`SET,pot_1,1e-05`), which the Mk1 host grammar has no exponent for: such a value is rewritten to its
plain decimal before the check, so what is checked is what is sent.

The planned chamber time of a protocol (`planned_seconds`) is what the caps on one real-time call and on a user's
queued work count: each MSR's rows at the board's row period (firmware_bridge.session.BOARD_PACE), each WAIT, and
each SET as the protocol planner prices a change (protocols.planner.change_seconds: a round trip, a fan's
spin-up, a stepper's travel), from the chamber's state after a reset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Sequence

from chamber.catalogue import VariableCatalogue
from chamber.limits import OperatorLimits
from chamber.protocol_language import (MeasureInstruction, Protocol, ProtocolError, SetInstruction, WaitInstruction,
                                       parse_protocol, validate_protocol)
from firmware_bridge.error_text import exception_line
from firmware_bridge.session import BOARD_PACE, UNKNOWN_PACE
from firmware_bridge.variables import layout_for
from protocols.planner import change_seconds
from protocols.remote_lab.lab_file import Caps

_EXPONENT = re.compile(r"^SET,([a-z0-9_]*),(-?\d+(?:\.\d*)?[eE][-+]?\d{1,3})$")  # a float's repr: |exp| < 400
ALLOWED = ("SET", "MSR", "WAIT")


class InvalidProtocol(ValueError):
    """A protocol the lab refuses (HTTP 400): the message names the line, the instruction and what was expected."""


@dataclass(frozen=True)
class Checked:
    """A protocol that may run: the instructions as they will be sent, and what it costs."""

    instructions: list[str]
    rows: int
    wait_ms: int
    planned_s: float = 0.0  # the chamber time it plans (planned_seconds)


def plain_decimal(instruction: str) -> str:
    """`SET,x,1e-05` -> `SET,x,0.00001` (any other instruction unchanged)."""
    m = _EXPONENT.match(instruction)
    if m is None:
        return instruction
    try:
        value = Decimal(m.group(2))
    except InvalidOperation:
        return instruction
    text = format(value, "f")
    return f"SET,{m.group(1)},{text}"


def check_protocol(instructions: Sequence[object], *, kind: str, config: str, limits: OperatorLimits | None,
                   caps: Caps) -> Checked:
    """The instructions as they will be sent, or InvalidProtocol naming every refusal (first ones first)."""
    if len(instructions) > caps.max_instructions:
        raise InvalidProtocol(f"{len(instructions)} instructions; this lab takes at most {caps.max_instructions} per "
                              "experiment or call")
    texts: list[str] = []
    for number, item in enumerate(instructions, start=1):
        if not isinstance(item, str):
            raise InvalidProtocol(f"instruction {number}: expected a string such as 'SET,load_in,0.5', "
                                  f"got {type(item).__name__}")
        if "\n" in item or "\r" in item or len(item) > 200:
            raise InvalidProtocol(f"instruction {number}: expected one instruction of at most 200 characters, got "
                                  f"{item[:60]!r}")
        keyword = item.split(",", 1)[0]
        if keyword not in ALLOWED:
            raise InvalidProtocol(f"instruction {number} {item!r}: expected SET,<variable>,<value> | MSR,<n>,<delay> "
                                  "| WAIT,<ms> (the Remote Lab language)")
        text = plain_decimal(item)
        if len(text) > 200:  # 1e-300 written out: no Mk1 value is that small, and no instruction that long
            raise InvalidProtocol(f"instruction {number} {item!r}: expected a value the chamber can take, written "
                                  "in at most 200 characters")
        texts.append(text)
    try:
        protocol = parse_protocol(texts, source="protocol")
        part = limits.for_chamber(kind) if limits is not None else None
        validate_protocol(protocol, VariableCatalogue(layout_for(kind, config), part), {})
    except ProtocolError as exc:
        raise InvalidProtocol(exception_line(exc).replace("nothing was sent", "nothing was queued")) from None
    _check_caps(protocol, caps)
    return Checked(texts, protocol.rows, protocol.wait_ms, planned_seconds(protocol, kind))


def planned_seconds(protocol: Protocol, kind: str) -> float:
    """The chamber time `protocol` plans on a `kind` chamber: rows at its row period, WAITs, SET changes."""
    row_s = BOARD_PACE.get(kind, UNKNOWN_PACE).row_s
    state: dict[str, float] = {}
    total = 0.0
    for instruction in protocol.instructions:
        if isinstance(instruction, MeasureInstruction):
            total += instruction.rows * row_s
        elif isinstance(instruction, WaitInstruction):
            total += instruction.ms / 1000.0
        elif isinstance(instruction, SetInstruction):
            try:
                value = float(instruction.value)
            except ValueError:
                continue
            total += change_seconds(state, {instruction.variable: value})
            state[instruction.variable] = value
    return total


def _check_caps(protocol: Protocol, caps: Caps) -> None:
    for instruction in protocol.instructions:
        if isinstance(instruction, WaitInstruction) and instruction.ms > caps.max_wait_ms:
            raise InvalidProtocol(f"instruction {instruction.line} {instruction.text!r}: a WAIT of at most "
                                  f"{caps.max_wait_ms} ms is allowed in this lab")
        if isinstance(instruction, MeasureInstruction) and instruction.rows > caps.max_msr_rows:
            raise InvalidProtocol(f"instruction {instruction.line} {instruction.text!r}: an MSR of at most "
                                  f"{caps.max_msr_rows} rows is allowed in this lab; split it")
    if protocol.wait_ms > caps.max_total_wait_ms:
        raise InvalidProtocol(f"the WAITs add up to {protocol.wait_ms} ms; this lab allows {caps.max_total_wait_ms} ms "
                              "per experiment")
    if protocol.rows > caps.max_total_rows:
        raise InvalidProtocol(f"the MSRs add up to {protocol.rows} rows; this lab allows {caps.max_total_rows} per "
                              "experiment")
