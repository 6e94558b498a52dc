"""Layer 3 of Mk1: the ASCII commands the host sends and the replies and boot messages the board sends.

Why a module of its own: the exact text is what the firmware parses (two commas for SET, plain decimals, no
exponent) and what it prints (two decimals in OK,SET). One place formats and parses it for both sides.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from firmware_bridge.avrnum import arduino_float_text
from firmware_bridge.errors import ProtocolError

SET_PATTERN = re.compile(r"^SET,[a-z0-9_]*,-?\d*\.?\d*$")
"""What the original host program sent: plain decimals, no exponent."""

CHAMBER_CONFIG = "CHAMBER_CONFIG"
VARIABLES_LIST = "VARIABLES_LIST"
OK_DONE = "OK,DONE"
OK_RST = "OK,RST"
RST = "RST"


FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)
"""The board parses every value into a 32-bit float (AVR `double` is `float`): the range it can hold."""


def format_value(value: float) -> str:
    """A float as the plain decimal the firmware parses: no exponent, no trailing zeros, and the fewest digits
    that still name the same 32-bit float. Why float32: the board keeps nothing finer (String.toFloat is avr-libc
    strtod into a float), and fewer digits keep a SET inside the 64-byte packet."""
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, received {value!r}")
    if abs(value) > FLOAT32_MAX:
        raise ValueError(f"expected a number a 32-bit float can hold (|x| <= {FLOAT32_MAX:.4g}), received {value!r}")
    text = np.format_float_positional(np.float32(value), trim="-", unique=True)
    return "0" if text in ("-0", "") else text


def format_set(target: str, value: float) -> str:
    text = f"SET,{target},{format_value(value)}"
    if not SET_PATTERN.match(text):
        raise ValueError(f"expected SET,<[a-z0-9_]*>,<decimal>, received {text!r}")
    return text


def format_msr(n: int, delay: int = 0) -> str:
    if int(n) != n or n < 0:
        raise ValueError(f"expected a non-negative whole number of rows, received {n!r}")
    return f"MSR,{int(n)},{int(delay)}"


def format_reply_value(value: float) -> str:
    """How the firmware prints a value in OK,SET: Arduino's String(float), avr-libc dtostrf with two decimals on
    the 32-bit float (0.125 → "0.13", 123456789 → "123456790.00"); see firmware_bridge/avrnum.py."""
    return arduino_float_text(value)


@dataclass(frozen=True)
class SetReply:
    target: str
    value: float


def parse_set_reply(text: str, target: str) -> SetReply:
    prefix = f"OK,SET,{target}="
    if not text.startswith(prefix):
        raise ProtocolError(f"'{prefix}<value>'", text)
    try:
        return SetReply(target, float(text[len(prefix):]))
    except ValueError:
        raise ProtocolError(f"'{prefix}<value>'", text) from None


def parse_msr_reply(text: str, n: int) -> None:
    if not text.startswith(f"OK,MSR,n={n},"):
        raise ProtocolError(f"'OK,MSR,n={n},wait=<delay>'", text)


def parse_config(text: str) -> str:
    head, _, config = text.partition(",")
    if head != CHAMBER_CONFIG or not config:
        raise ProtocolError("'CHAMBER_CONFIG,<config>'", text)
    return config


def parse_variables(text: str) -> tuple[str, ...]:
    parts = text.split(",")
    if parts[0] != VARIABLES_LIST or parts[1:4] != ["counter", "flag", "intervention"]:
        raise ProtocolError("'VARIABLES_LIST,counter,flag,intervention,...'", text)
    return tuple(parts[1:])


def boot_messages(config: str, names: tuple[str, ...] | list[str]) -> list[str]:
    """The two announcements a board sends right after reset, in order."""
    return [f"{CHAMBER_CONFIG},{config}", ",".join((VARIABLES_LIST, *names))]
