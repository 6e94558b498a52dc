"""What a fleet is: the chambers a claim is graded on together, read from a fleet file or `demo:N`.

Why a file of its own kind: a fleet is not one bench (the chamber selection of `check`, two boards of different
kinds) but any number of chambers of either kind, each with its own board URL, its lab, the credentials of that
lab's Remote Lab and the instrument station beside it. One file says all of that, read with the one settings
reader (firmware_bridge.model_file: one-line errors naming the file, the field, what was expected and what
arrived), so a typo stops the command before any chamber is opened.

The file (YAML or JSON):

    chambers:
      wt-a:   {board: /dev/serial/by-id/usb-Arduino_Mega-if00, lab: zurich, station: zurich-station.yaml}
      wt-b:   {board: "socket://10.0.0.7:4000", lab: zurich}
      wt-c:   {board: "lab+https://lab.example.org/v0/wt-rt-1", lab: tuebingen, credentials: tuebingen.ini}
      wt-sim: {board: "emulated:wt?unit=3", offsets: {pressure_upwind: 150}}

`board` is any URL the driver takes (a serial device, a pty, socket://, a Remote Lab chamber lab+http(s)://…
with its `credentials` file, or `emulated:wt?unit=SERIAL[&pace=real]`); `lab` tags the chambers one laboratory
measured (the between-lab z-scores compare labs); `station` is the instrument station file beside that chamber;
`offsets` plants a unit out of specification (emulated boards only: a demonstration or a test). Relative paths
are read against the fleet file's folder. `demo:N` is N emulated units of each chamber kind, serials 1..N
(`wt1`…`wtN`, `lt1`…`ltN`), each with the simulated instrument station.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from firmware_bridge.model_file import ModelFileError, load_model_file

EMULATED = "emulated:"
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
DEMO = "demo:"
DEMO_MAX = 64
"""Most emulated units of each kind `demo:N` starts (each is a board thread and, with its station, a simulated
bench: 2 × 64 is far beyond what two cores serve at real pace, and beyond any lab's fleet)."""


class FleetFileError(ModelFileError):
    """A fleet file (or `demo:N`) that does not describe a fleet: one line naming the file, the field, what was
    expected and what arrived."""


class FleetEntry(BaseModel):
    """One chamber of a fleet file (the module docstring has the fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    board: str = Field(min_length=1)
    lab: str | None = None
    credentials: Path | None = None
    station: Path | None = None
    offsets: dict[str, float] | None = None

    @field_validator("lab")
    @classmethod
    def _lab_name(cls, value: str | None) -> str | None:
        if value is not None and not re.match(NAME, value):
            raise ValueError(f"expected a lab name of letters, digits, '_', '.', '-' (at most 64), got {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "FleetEntry":
        remote = self.board.startswith("lab+")
        if self.credentials is not None and not remote:
            raise ValueError(f"credentials are for a Remote Lab board (lab+http(s)://...), got board {self.board!r}")
        if self.offsets is not None and not self.board.startswith(EMULATED):
            raise ValueError(f"offsets plant a unit out of specification on an emulated board (emulated:wt?unit=N), "
                             f"got board {self.board!r}")
        if self.board.startswith(EMULATED):
            from chamber.emulated import parse_emulated_url

            parse_emulated_url(self.board, self.offsets)  # kind, unit, pace and plantable offsets, in one line
        return self


class FleetFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    chambers: dict[str, FleetEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _ids(self) -> "FleetFile":
        bad = [c for c in self.chambers if not re.match(NAME, c)]
        if bad:
            raise ValueError(f"chamber id {bad[0]!r}: expected letters, digits, '_', '.', '-' (at most 64)")
        return self


def emulated_kind(board: str) -> str | None:
    """The kind of an `emulated:KIND[?...]` board (None when it names no kind we have)."""
    kind = board[len(EMULATED):].split("?", 1)[0] if board.startswith(EMULATED) else ""
    return kind if kind in ("wt", "lt") else None


@dataclass(frozen=True)
class FleetMember:
    """One chamber of a fleet: its id, board URL, lab, credentials and station files (absolute or as given),
    planted offsets; `kind` is known before opening for an emulated board (a real one says it when it connects)."""

    id: str
    board: str
    lab: str | None = None
    credentials: Path | None = None
    station: Path | None = None
    offsets: Mapping[str, float] = field(default_factory=dict)

    @property
    def emulated(self) -> bool:
        return self.board.startswith(EMULATED)

    @property
    def kind(self) -> str | None:
        return emulated_kind(self.board)


@dataclass(frozen=True)
class Fleet:
    """The chambers of a fleet, in file order, and where they were read from (`demo:8` or the file's path)."""

    members: tuple[FleetMember, ...]
    source: str

    @property
    def labs(self) -> list[str]:
        return sorted({m.lab for m in self.members if m.lab is not None})

    def describe(self) -> list[dict[str, Any]]:
        """One JSON-ready entry per chamber (id, board, lab, station, offsets), for a result's provenance."""
        return [{"id": m.id, "board": m.board, "lab": m.lab, "station": None if m.station is None else str(m.station),
                 "offsets": dict(m.offsets) or None} for m in self.members]


def demo_fleet(n: int, station: Path | None) -> Fleet:
    """`demo:N`: N emulated units of each kind, serials 1..N, each with `station` (the simulated one)."""
    members = tuple(FleetMember(f"{kind}{i}", f"{EMULATED}{kind}?unit={i}", station=station)
                    for kind in ("wt", "lt") for i in range(1, n + 1))
    return Fleet(members, f"{DEMO}{n}")


def load_fleet(spec: str | Path, *, demo_station: Path | None = None) -> Fleet:
    """The fleet of `spec`: `demo:N` (N emulated units of each kind with `demo_station`), else a fleet file.
    FleetFileError names the file and field (or the demo spec) and what was expected."""
    text = str(spec).strip()
    if text.startswith(DEMO):
        count = text[len(DEMO):]
        if not count.isdigit() or not 1 <= int(count) <= DEMO_MAX:
            raise FleetFileError(f"--fleet {text}", f"expected demo:N with N a whole number 1..{DEMO_MAX}, "
                                                     f"got {count!r}")
        return demo_fleet(int(count), demo_station)
    path = Path(text)
    data = load_model_file(path, FleetFile, what="fleet file", error=FleetFileError,
                           expected="a mapping with chambers: {ID: {board: URL, lab?, credentials?, station?, "
                                    "offsets?}}")
    base = path.resolve().parent

    def resolved(p: Path | None) -> Path | None:
        return None if p is None else (p if p.is_absolute() else base / p)

    members = tuple(FleetMember(cid, e.board, e.lab, resolved(e.credentials), resolved(e.station),
                                dict(e.offsets or {})) for cid, e in data.chambers.items())
    for m in members:
        for what, p in (("credentials", m.credentials), ("station", m.station)):
            if p is not None and not p.is_file():
                raise FleetFileError(f"fleet file {path}", f"field 'chambers.{m.id}.{what}': expected a file, "
                                                           f"got {p} (does not exist)")
    return Fleet(members, str(path))
