"""The one rule for what a SET may carry: the value as the board will parse it, checked before anything is sent.

Why one rule on the lowest floor: the driver's catalogue and the chamber tools API's guard must refuse exactly
the same values, and both must refuse what the real firmware would halt on. The firmware parses the text with
avr-libc strtod into a 32-bit float and compares allowed values with `==`, so "2.5600000001" halts it with er03
where "2.56" passes; a value too small for a float becomes 0; a long decimal overflows the 64-byte packet. The
rule therefore returns the exact text to send (the canonical digits of an allowed value) and the number the board
will hold, or says what was expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from firmware_bridge.errors import PacketTooLong
from firmware_bridge.messages import FLOAT32_MAX, FLOAT32_TINY, format_set, format_value
from firmware_bridge.packets import check_message_fits
from firmware_bridge.variables import UNSET, Kind, Variable


class SettingRefused(ValueError):
    """A value the board must not receive; `expected` says what would be accepted."""

    def __init__(self, expected: str):
        self.expected = expected
        super().__init__(expected)


@dataclass(frozen=True)
class EncodedSetting:
    """A SET ready for the wire: `text` goes out as is, `value` is what the board will hold."""

    name: str
    value: float
    text: str


def as_number(value: object) -> float:
    """The value as a finite float, or SettingRefused ("a number", "a finite number")."""
    if isinstance(value, bool):
        raise SettingRefused("a number")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SettingRefused("a number") from None
    if not math.isfinite(number):
        raise SettingRefused("a finite number")
    return number


def encode_setting(variable: Variable, value: object) -> EncodedSetting:
    """Check `value` for `variable` by the firmware's rules (the host-side ones where the firmware forgets its own
    range checks) and encode it; SettingRefused otherwise. Operator limits are the caller's (they narrow this)."""
    number = as_number(value)
    name = variable.name
    if not variable.settable or (variable.kind is Kind.BOOKKEEPING and name != "flag"):
        raise SettingRefused(f"a settable variable ({name} has no setter in the firmware)")
    if variable.kind is Kind.ACTUATOR:
        if number == UNSET:
            raise SettingRefused(f"a value for the input {name} (it cannot be unset with -9999)")
        if variable.allowed is not None:
            snapped = variable.snap(number)
            if snapped is None:
                raise SettingRefused(f"{variable.describe_allowed()} ({variable.unit or 'no unit'})")
            number = snapped
        elif not variable.accepts(number):
            raise SettingRefused(f"{variable.describe_allowed()} ({variable.unit or 'no unit'})")
    if abs(number) > FLOAT32_MAX:
        raise SettingRefused(f"a number a 32-bit float can hold (|x| <= {FLOAT32_MAX:.4g})")
    if number != 0 and abs(number) < FLOAT32_TINY:
        raise SettingRefused(f"0 or a number of magnitude at least {FLOAT32_TINY:.4g} (the board's 32-bit float "
                             "would hold it as 0 or lose its digits)")
    text = format_value(number)
    message = format_set(name, float(text))
    try:
        check_message_fits(message.encode("ascii"), message)
    except PacketTooLong as exc:
        raise SettingRefused(f"a value whose decimal form fits the board's 64-byte packet ({exc})") from None
    return EncodedSetting(name, float(text), text)
