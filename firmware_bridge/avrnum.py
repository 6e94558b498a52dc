"""Numbers as text the way the Mk1 firmware handles them: avr-libc 2.0.0's `strtod` and `dtostrf` on 32-bit floats.

Why a port and not Python's float formatting: the board prints `OK,SET,<target>=String(value)` with avr-libc's
`dtostrf(value, 4, 2)` (0.125 → "0.13", 123456789 → "123456790.00": round half up on a 48-bit decimal expansion,
at most 8 significant digits) and parses every number with `String::toFloat()` = avr-libc `strtod` in float
arithmetic ("abc" → 0, "2.9" → 2.9f). Python's `f"{x:.2f}"` and `float()` differ from both. The port follows
../shared/firmware-harness/shim/avrlibc_compat.cpp (itself a line-by-line port of avr-libc's strtod.c,
ftoa_engine.S and dtoa_prf.c, checked against avr-libc's own tests); the emulated board uses it to print and
parse, the host only parses what it prints.
"""

from __future__ import annotations

import struct

import numpy as np

_F32 = np.float32

# ------------------------------------------------------------------------------------------------ strtod

_PWR_P10 = tuple(_F32(x) for x in ("1e1", "1e2", "1e4", "1e8", "1e16", "1e32"))
_PWR_M10 = tuple(_F32(x) for x in ("1e-1", "1e-2", "1e-4", "1e-8", "1e-16", "1e-32"))
_SPACE = b" \t\n\v\f\r"


def avr_strtod(text: str | bytes) -> float:
    """avr-libc `strtod` (float arithmetic): what `String::toFloat()` returns; no number gives 0."""
    s = text.encode("latin-1", errors="replace") if isinstance(text, str) else bytes(text)
    s += b"\0"
    i = 0
    while s[i] in _SPACE and s[i] != 0:
        i += 1
    minus = False
    if s[i : i + 1] == b"-":
        minus, i = True, i + 1
    elif s[i : i + 1] == b"+":
        i += 1
    head = s[i : i + 3].upper()
    if head == b"INF":
        return float("-inf") if minus else float("inf")
    if head == b"NAN":
        return float("nan")
    u32, exp, any_digit, overflow, dot = 0, 0, False, False, False
    while True:
        c = s[i]
        if 48 <= c <= 57:
            any_digit = True
            if overflow:
                if not dot:
                    exp += 1
            else:
                if dot:
                    exp -= 1
                u32 = (u32 * 10 + (c - 48)) & 0xFFFFFFFF
                if u32 >= (0xFFFFFFFF - 9) // 10:
                    overflow = True
        elif c == 46 and not dot:
            dot = True
        else:
            break
        i += 1
    if s[i] in b"eE":
        j = i + 1
        negative_exp = False
        if s[j : j + 1] in (b"-", b"+"):
            negative_exp = s[j : j + 1] == b"-"
            j += 1
        if 48 <= s[j] <= 57:
            e = 0
            while 48 <= s[j] <= 57:
                if e < 3200:
                    e = e * 10 + (s[j] - 48)
                j += 1
            exp += -e if negative_exp else e
    x = _F32(u32)
    if minus and any_digit:
        x = -x
    if x != 0:
        table = _PWR_M10 if exp < 0 else _PWR_P10
        exp = abs(exp)
        k = 5
        pwr = 32
        with np.errstate(over="ignore", under="ignore"):
            while pwr:
                while exp >= pwr:
                    x = _F32(x * table[k])
                    exp -= pwr
                k -= 1
                pwr >>= 1
    return float(x)


# ------------------------------------------------------------------------------------------------ dtostrf

_MINUS, _ZERO, _INF, _NAN, _CARRY = 1, 2, 4, 8, 16
_POWR10 = tuple(10**k for k in range(14, -1, -1))
_BASE10 = (
    (2295887404, -36), (587747175, -33), (1504632769, -31), (3851859889, -29), (986076132, -26),
    (2524354897, -24), (646234854, -21), (1654361225, -19), (4235164736, -17), (1084202172, -14),
    (2775557562, -12), (710542736, -9), (1818989404, -7), (465661287, -4), (1192092896, -2),
    (3051757813, 0), (781250000, 3), (2000000000, 5), (512000000, 8), (1310720000, 10),
    (3355443200, 12), (858993459, 15), (2199023256, 17), (562949953, 20), (1441151881, 22),
    (3689348815, 24), (944473297, 27), (2417851639, 29), (618970020, 32), (1584563250, 34),
    (4056481921, 36), (1038459372, 39),
)
_D0, _D9 = ord("0"), ord("9")


def _ftoa_engine(bits: int, prec: int, maxdgs: int) -> tuple[int, bytearray]:
    """avr-libc's ftoa_engine: (decimal exponent, [flags, digits...]) of a float32 given by its bits."""
    buf = bytearray(16)
    prec = min(prec, 7)
    hhi, hlo, hi, lo = (bits >> 24) & 0xFF, (bits >> 16) & 0xFF, (bits >> 8) & 0xFF, bits & 0xFF
    flag = (hhi >> 7) & 1
    hhi = (hhi << 1) & 0xFF
    if hlo & 0x80:
        hhi |= 1
    if hhi == 0 and hlo == 0 and lo == 0 and hi == 0:
        buf[0] = flag | _ZERO
        for k in range(1, prec + 2):
            buf[k] = _D0
        return 0, buf
    if hhi == 0xFF:
        flag += _INF if (hlo == 0x80 and hi == 0 and lo == 0) else 2 * _INF
    buf[0] = flag
    x = 1
    if hhi < 1:
        hhi = 1
    else:
        hlo |= 0x80
    mant = (hlo << 16) | (hi << 8) | lo
    mul, exp10 = _BASE10[hhi >> 3]
    r = ((mant * mul) >> 8) >> ((~hhi) & 7)
    pi, first, p = 0, True, 1
    while True:
        p = _POWR10[min(pi, 14)]
        pi += 1
        digit = (_D0 + r // p) & 0xFF
        r %= p
        if first:
            if digit == _D0:
                exp10 -= 1
                continue
            first = False
            if maxdgs != 0:
                m = (maxdgs - 1 + exp10) & 0xFF
                if m & 0x80:
                    m = 0
                prec = min(prec, m)
            prec = (prec + 1) & 0xFF
            maxdgs = prec
        if digit >= _D0 + 10:  # overflow of a digit: all nines, then round up
            while True:
                buf[x] = _D9
                x += 1
                prec -= 1
                if not prec:
                    break
            break
        buf[x] = digit
        x += 1
        prec -= 1
        if not prec:
            if r < (p >> 1):
                return exp10, buf
            break
    while True:  # round up from the last digit
        prec += 1
        x -= 1
        d = buf[x] + 1
        carry = d >= _D9 + 1
        buf[x] = _D0 if carry else d
        if prec != maxdgs and carry:
            continue
        buf[x - 1] |= _CARRY
        if not carry:
            return exp10, buf
        exp10 += 1
        v = ord("1")
        while True:
            buf[x] = v
            x += 1
            v = _D0
            prec -= 1
            if not prec:
                return exp10, buf


def avr_dtostrf(value: float, width: int, prec: int) -> str:
    """avr-libc `dtostrf(value, width, prec)` on float32(value) (right-aligned, upper-case INF/NAN)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    left = width < 0
    width = abs(width)
    ndigs = prec + 1 if prec < 60 else 60
    exp, buf = _ftoa_engine(bits, 7, ndigs)
    vtype = buf[0]
    sign = "-" if (vtype & (_MINUS | _NAN)) == _MINUS else ""
    if vtype & (_NAN | _INF):
        word = "NAN" if vtype & _NAN else "INF"
        pad = " " * max(width - len(sign) - 3, 0)
        return sign + word + pad if left else pad + sign + word
    n = len(sign) + (exp + 1 if exp > 0 else 1) + (prec + 1 if prec else 0)
    pad = " " * max(width - n, 0)
    out = [] if left else [pad]
    out.append(sign)
    ndigs = (ndigs + exp) & 0xFF
    master = buf[1]
    if (vtype & _CARRY) and master == ord("1"):
        ndigs = (ndigs - 1) & 0xFF
    ndigs = 1 if ndigs >= 0x80 or ndigs < 1 else min(ndigs, 8)
    n = max(exp, 0)
    while True:
        if n == -1:
            out.append(".")
        ch = buf[exp - n + 1] if (exp - ndigs < n <= exp) else _D0
        n -= 1
        if n < -prec:
            break
        out.append(chr(ch))
    if n == exp and (master > ord("5") or (master == ord("5") and not (vtype & _CARRY))):
        ch = ord("1")
    out.append(chr(ch))
    if left:
        out.append(pad)
    return "".join(out)


def arduino_float_text(value: float, decimals: int = 2) -> str:
    """Arduino's `String(float)`: dtostrf(value, decimals + 2, decimals)."""
    return avr_dtostrf(value, decimals + 2, decimals)


def to_float32(value: float) -> float:
    """The float the board holds for `value` (double is float on the AVR)."""
    return float(_F32(value))
