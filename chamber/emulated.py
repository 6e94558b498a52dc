"""Emulated Mk1 boards on pseudo-terminals, for a chamber selection that has no hardware (`make run`), and the
`emulated:` URLs that name one (a fleet file's or a lab file's `board: emulated:wt?unit=7`).

Why here: the driver floor may use the simulator (chamber/ sits above simulator/), and the boards must live as
long as the chambers opened on them, so they are entered on the caller's ExitStack and stop when it closes.
The driver then reaches them through the real serial path, exactly as it would a USB board.

An emulated URL is `emulated:KIND[?unit=SERIAL][&pace=fast|real]`: KIND wt or lt; `unit` the serial of the unit
(simulator/units.py: 0, the default, is today's unit; another serial draws that unit's part parameters); `pace`
fast (no time for anything, the default for tests and the main job) or real (the real board's timings). A unit
planted out of specification (offsets a fleet file gives beside the URL) travels in EmulatedSpec.offsets.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

from chamber.errors import ChamberError

EMULATED = "emulated:"
KINDS = ("wt", "lt")
PACES = ("fast", "real")


class EmulatedUrlError(ChamberError, ValueError):
    """An emulated-board URL or spec that names no board we can emulate (one line: expected, got)."""


@dataclass(frozen=True)
class EmulatedSpec:
    """One emulated board: its chamber kind, unit serial (0: today's unit), pace, and planted offsets (variable →
    amount added to what it shows; simulator.units.PLANTABLE says which variables)."""

    kind: Literal["wt", "lt"]
    unit: int = 0
    pace: Literal["fast", "real"] = "fast"
    offsets: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from simulator.units import MAX_SERIAL, PLANTABLE

        if self.kind not in KINDS:
            raise EmulatedUrlError(f"emulated board kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        if isinstance(self.unit, bool) or not isinstance(self.unit, int) or not 0 <= self.unit <= MAX_SERIAL:
            raise EmulatedUrlError(f"emulated board unit: expected a whole number 0..{MAX_SERIAL}, got {self.unit!r}")
        if self.pace not in PACES:
            raise EmulatedUrlError(f"emulated board pace {self.pace!r}: expected one of {', '.join(PACES)}")
        unknown = sorted(set(self.offsets) - set(PLANTABLE[self.kind]))
        if unknown:
            raise EmulatedUrlError(f"planted offsets {', '.join(unknown)}: not on a {self.kind} board; expected some "
                                   f"of {', '.join(PLANTABLE[self.kind])}")
        for name, value in self.offsets.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise EmulatedUrlError(f"planted offset {name}: expected a finite number, got {value!r}")
        object.__setattr__(self, "offsets", {name: float(value) for name, value in self.offsets.items()})

    def __hash__(self) -> int:  # the offsets are a mapping: hash its items, so a spec can key a dict
        return hash((self.kind, self.unit, self.pace, tuple(sorted(self.offsets.items()))))

    @property
    def url(self) -> str:
        """The canonical URL of this board (planted offsets are not part of a URL: a fleet file carries them)."""
        query = [f"unit={self.unit}"] if self.unit else []
        query += ["pace=real"] if self.pace == "real" else []
        return EMULATED + self.kind + ("?" + "&".join(query) if query else "")

    def describe(self) -> dict[str, Any]:
        """JSON-ready: kind, unit, pace and planted offsets, for a run's provenance."""
        return {"kind": self.kind, "unit": self.unit, "pace": self.pace, "offsets": dict(self.offsets)}


def is_emulated_url(url: str) -> bool:
    return url.startswith(EMULATED)


def parse_emulated_url(url: str, offsets: Mapping[str, float] | None = None) -> EmulatedSpec:
    """The spec an `emulated:` URL names (`emulated:wt`, `emulated:wt?unit=7`, `emulated:lt?unit=3&pace=real`),
    with `offsets` planted on it if given. Refused in one line naming what was expected: another scheme, a kind
    other than wt/lt, an unknown or repeated query key, a unit that is not a whole number in range, a pace other
    than fast/real."""
    if not isinstance(url, str) or not url.startswith(EMULATED):
        raise EmulatedUrlError(f"expected an emulated board URL emulated:wt or emulated:lt[?unit=N&pace=fast|real], "
                               f"got {url!r}")
    kind, _, query = url[len(EMULATED):].partition("?")
    if kind not in KINDS:
        raise EmulatedUrlError(f"{url}: expected emulated:wt or emulated:lt, got kind {kind!r}")
    given: dict[str, str] = {}
    for part in query.split("&") if query else ():
        key, sep, value = part.partition("=")
        if not sep or key not in ("unit", "pace"):
            raise EmulatedUrlError(f"{url}: expected query keys unit=N and pace=fast|real, got {part!r}")
        if key in given:
            raise EmulatedUrlError(f"{url}: {key} given twice; expected it once")
        given[key] = value
    from simulator.units import MAX_SERIAL

    unit = given.get("unit", "0")
    if not re.fullmatch(r"[0-9]{1,10}", unit) or int(unit) > MAX_SERIAL:
        raise EmulatedUrlError(f"{url}: unit expected a whole number 0..{MAX_SERIAL} (the unit's serial), got {unit!r}")
    pace = given.get("pace", "fast")
    if pace not in PACES:
        raise EmulatedUrlError(f"{url}: pace expected fast or real, got {pace!r}")
    return EmulatedSpec(kind, int(unit), pace, dict(offsets or {}))  # type: ignore[arg-type]


def emulated_params(spec: EmulatedSpec, base: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The simulator parameters of `spec`'s board over `base` (a parameter-file mapping, None: the defaults): its
    unit's draws (simulator.units.unit_params), then its planted offsets. Today's unit unplanted is `base` itself,
    so that board is exactly the one start_emulated_boards always served."""
    from simulator.units import planted, unit_params

    if spec.unit == 0 and not spec.offsets:
        return base
    params = unit_params(spec.kind, spec.unit, base)
    return planted(params, spec.kind, dict(spec.offsets)) if spec.offsets else params


def start_emulated_board(stack: contextlib.ExitStack, spec: EmulatedSpec, *, seed: int = 0,
                         params: dict[str, Any] | None = None) -> str:
    """Start `spec`'s board on a pty, entered on `stack` (it stops when the stack closes); returns its pyserial
    URL. `seed` is the run's noise seed: unit 0 keeps it (today's rows), another unit gets its own stream from it
    (simulator.units.unit_seed), so the units of a fleet do not share their noise. `params`: a parameter mapping
    to draw the unit over (default: the simulator's defaults)."""
    from simulator.board import running_board
    from simulator.units import unit_seed

    board = running_board(spec.kind, transport="pty", seed=unit_seed(seed, spec.unit), pace=spec.pace,
                          params=emulated_params(spec, params))
    return stack.enter_context(board).url


def start_emulated_boards(stack: contextlib.ExitStack, kinds: Iterable[str], *, seed: int = 0) -> dict[str, str]:
    """Start one emulated board per kind on a pty (today's unit, fast pace, seeded); returns its pyserial URL by
    kind."""
    return {kind: start_emulated_board(stack, EmulatedSpec(kind), seed=seed) for kind in kinds}  # type: ignore[arg-type]
