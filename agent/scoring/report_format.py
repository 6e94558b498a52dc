"""How the report writes numbers: one function, `number`, for every figure in every table and sentence.

Why one function: the verdict keeps exact decimals (an irrational c = sqrt(u² + t²) is carried to 50 digits so that
the decision is exact) and budgets keep binary floats; a report that printed each as it came showed
`100.03124511871278312045…` beside `0.025`. A reader needs each number at the resolution the claim is decided at:
the decimal places of the verdict's own reported m (its digits follow u's two significant digits, or the
claim's stated resolution when the verdict had one). Rounding is half-even, as the verdict's.
"""

from __future__ import annotations

import math
from functools import lru_cache
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

DASH = "—"
#: significant digits for a number with no stated resolution (budget floats, k, ν)
SIGNIFICANT = 3
#: an exact decimal text with at most this many significant digits is already at its reported digits: kept as is
_EXACT_DIGITS = 12


def _decimal(x: Any) -> Decimal | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, Decimal):
        return x
    if isinstance(x, float):
        return Decimal(repr(x)) if math.isfinite(x) else None
    if isinstance(x, int):
        return Decimal(x)
    try:
        d = Decimal(str(x).strip())
    except (InvalidOperation, ValueError):
        return None
    return d if d.is_finite() else None


def is_number(x: Any) -> bool:
    return _decimal(x) is not None


def places_of(text: Any) -> int | None:
    """Decimal places written in a reported number ('945.257' → 3, '100' → 0); None when it is not a number."""
    d = _decimal(text)
    if d is None or isinstance(text, float):
        return None
    return max(0, -int(d.as_tuple().exponent))


def places_for_u(u: Any, digits: int = 2) -> int | None:
    """Decimal places that show a standard uncertainty with `digits` significant digits (0.0259 → 4: '0.026')."""
    d = _decimal(u)
    if d is None or d == 0:
        return None
    return max(0, digits - 1 - int(math.floor(math.log10(abs(float(d))))))


def number(x: Any, *, places: int | None = None, sig: int = SIGNIFICANT) -> str:
    """The report's text for a number.

    `places` given: rounded half-even to that many decimal places (the claim's resolution). Without it, an exact
    decimal text of at most 12 significant digits is kept as written (the verdict already reported it at its
    digits); anything longer, and any float, is written with `sig` significant digits. None, '' and non-finite
    values are a dash; text that is not a number is returned unchanged."""
    if x is None or x == "":
        return DASH
    d = _decimal(x)
    if d is None:
        return DASH if isinstance(x, float) else str(x)
    if places is not None:
        q = d.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
        return _plain(q)
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    if not isinstance(x, float) and len(d.as_tuple().digits) <= _EXACT_DIGITS:
        return str(x).strip()
    if d == 0:
        return "0"
    magnitude = int(math.floor(math.log10(abs(float(d)))))
    if -4 <= magnitude < 7:
        return _plain(d.quantize(Decimal(1).scaleb(min(0, magnitude - sig + 1)), rounding=ROUND_HALF_EVEN))
    return f"{float(d):.{sig - 1}e}"


def _plain(d: Decimal) -> str:
    text = format(d, "f")
    return "0" + text[2:] if text.startswith("-0") and Decimal(text) == 0 else text


def with_u(value: Any, u: Any, unit: str | None = None, *, places: int | None = None) -> str:
    """'m ± u unit' with both at the same places (those of m when not given)."""
    if value is None:
        return DASH
    if places is None:
        places = places_of(value)
    text = f"{number(value, places=places)} ± {number(u, places=places)}"
    return f"{text} {unit}".strip() if unit else text


def cell(x: Any) -> str:
    """A table cell: a dash for nothing, yes/no for booleans, numbers through `number`, text as is."""
    if x is None or x == "" or x == "None":
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    return number(x) if is_number(x) else str(x)


def verdict_places(result: dict[str, Any]) -> int | None:
    """The resolution a verdict's numbers are shown at: its stated resolution when it had one, else the places
    of its reported m (the verdict shows m, u, d and c at one shared number of places), else of its u."""
    detail = result.get("verdict_detail") or {}
    if detail.get("resolution") is not None:
        return places_of(detail["resolution"])
    for text in (detail.get("measured"), (result.get("measured") or {}).get("value"),
                 detail.get("u"), (result.get("measured") or {}).get("u")):
        p = places_of(text)
        if p is not None:
            return p
    return None


def k_text(k: Any) -> str:
    """A coverage factor as the report states it beside every U ('k = 3.18')."""
    return f"k = {number(k, places=2)}"


@lru_cache(maxsize=1)
def _catalogue_units() -> dict[str, str]:
    from firmware_bridge.variables import LAYOUTS

    return {v.unit.lower(): v.unit for layout in LAYOUTS.values() for v in getattr(layout, "variables", layout)
            if v.unit}


def unit_text(unit: Any) -> str:
    """A unit as the report writes it: the chamber's variable catalogue's spelling when the claim spells the same
    unit in another case (the NF-F12 sheet prints 'RPM', the catalogue and the live view say 'rpm'), else as given.
    The claim's own spelling stays in the claim and its verdict record; only what a reader sees is made one."""
    if not unit:
        return ""
    text = str(unit)
    return _catalogue_units().get(text.lower(), text)


def time_text(stamp: Any) -> str:
    """A timestamp to the second, in UTC ('2026-12-05 09:16:54 UTC'): the run's clock readings carry microseconds
    and offsets that no reader needs; text that is no timestamp is returned as it is."""
    from datetime import datetime, timezone

    if stamp is None or stamp == "":
        return DASH
    try:
        when = stamp if isinstance(stamp, datetime) else datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return str(stamp)
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
