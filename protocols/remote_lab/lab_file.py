"""The lab file: which chambers a Remote Lab serves, where each board is, its mode, configs, limits and safe state.

Why a validated file (YAML or JSON, read by firmware_bridge.model_file like every settings file, errors on one
line): the API checks a submitted protocol against a chamber's catalogue and limits before queuing it, often on a
host that has no board attached, so everything it needs must be known from the file alone — the chamber's kind
(from `emulated:wt`, or `kind:` for a real board), its configs and the operator limits in the limits file's own
format. The worker beside the chamber then refuses to serve a board that announces another kind or config.
Without a file, `lab serve` runs DEMO_LAB: emulated boards, a wind and a light tunnel in each mode.

Why each chamber is checked on its own (issue 31): one chamber's typo (a safe state outside its limits, an unknown
variable) must not keep the others from being served, and must not start a worker that loops on "NOT confirmed".
A chamber whose entry fails is refused in one line (`Lab.refused`) and not served; the file is refused only when
no chamber is left. A safe section only adds to the chamber's built-in resting state (chamber/safe_state.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from chamber.emulated import EmulatedSpec, EmulatedUrlError, parse_emulated_url
from chamber.limits import LimitsFileError, OperatorLimits, parse_limits
from chamber.safe_state import SafeState, parse_safe_state, resolve_safe_state
from firmware_bridge.error_text import exception_line
from firmware_bridge.model_file import ModelFileError, read_data_file, validate_model
from firmware_bridge.variables import LAYOUTS

EMULATED = "emulated:"
CHAMBER_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class LabFileError(ModelFileError):
    """A lab file that cannot be read or does not describe a lab (one line: the file, the field, expected, got)."""


class Caps(BaseModel):
    """Lab-wide caps on what one experiment or one real-time call may ask (checked before anything is queued)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_instructions: int = Field(20_000, ge=1, le=1_000_000)
    max_wait_ms: int = Field(600_000, ge=1)  # one WAIT: 10 min
    max_total_wait_ms: int = Field(6 * 3600_000, ge=1)  # all WAITs of one experiment: 6 h
    max_msr_rows: int = Field(10_000, ge=1, le=32_767)  # one MSR (the firmware reads n as a 16-bit int)
    max_total_rows: int = Field(10 * 10_000, ge=1)  # all rows of one experiment: ten of the largest MSRs
    max_queued_per_user: int = Field(20, ge=1)
    max_queued_s_per_user: float = Field(24 * 3600.0, gt=0, allow_inf_nan=False)  # planned chamber seconds queued
    max_call_s: float = Field(600.0, gt=0, allow_inf_nan=False)  # one real-time call's planned chamber seconds
    max_tag_chars: int = Field(200, ge=1, le=200)


class ChamberEntry(BaseModel):
    """One chamber: `board` is any URL the driver takes (device path, socket://, a pty) or emulated:wt/lt
    (emulated:wt?pace=real for the real board's timings); `kind` is needed for a real board."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    board: str = Field(min_length=1)
    kind: Literal["wt", "lt"] | None = None
    mode: Literal["queue", "real-time"] = "queue"
    configs: list[str] = Field(default_factory=lambda: ["standard"], min_length=1)
    limits: dict[str, Any] | None = None  # the limits file's format (variables:, safe:)
    safe: dict[str, float] | None = None  # settings applied before and after every experiment and session
    idle_takeover_s: float = Field(60.0, ge=0, allow_inf_nan=False)  # real time: another user may take a session
    # over once it has been idle this long
    prepare: Literal["restore", "reset"] = "restore"  # between experiments: restore the standard settings and read
    # them back after a confirmed safe end, or always reset the board

    @model_validator(mode="after")
    def _known(self) -> "ChamberEntry":
        kind = self.chamber_kind
        if kind is None:
            raise ValueError(f"board {self.board!r} is not emulated:wt or emulated:lt; expected kind: wt or lt for "
                             "a real board")
        if self.board.startswith(EMULATED) and self.kind not in (None, kind):
            raise ValueError(f"board {self.board!r} is a {kind} but kind says {self.kind}")
        if self.board.startswith(EMULATED):
            try:  # a unit serial or pace that cannot be served is refused when the file is read, not at the worker
                parse_emulated_url(self.board)
            except EmulatedUrlError as exc:
                raise ValueError(str(exc)) from None
        unknown = [c for c in self.configs if (kind, c) not in LAYOUTS]
        if unknown:
            known = ", ".join(c for k, c in LAYOUTS if k == kind)
            raise ValueError(f"configs: {', '.join(unknown)} not a {kind} configuration we know; expected {known}")
        return self

    @property
    def chamber_kind(self) -> str | None:
        if self.board.startswith(EMULATED):
            kind = self.board[len(EMULATED):].split("?", 1)[0]
            return kind if kind in ("wt", "lt") else None
        return self.kind

    @property
    def emulated(self) -> EmulatedSpec | None:
        """The emulated board this entry names (its kind, unit serial and pace), or None for a real board."""
        return parse_emulated_url(self.board) if self.board.startswith(EMULATED) else None


class LabFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    chambers: dict[str, ChamberEntry] = Field(min_length=1)
    caps: Caps = Caps()
    download_link_days: float = Field(7.0, gt=0, allow_inf_nan=False)  # a download URL works this long

    @model_validator(mode="after")
    def _ids(self) -> "LabFile":
        bad = [c for c in self.chambers if not re.match(CHAMBER_ID, c)]
        if bad:
            raise ValueError(f"chamber id {bad[0]!r}: expected letters, digits, '_', '.', '-' (at most 64)")
        return self


class _LabFileShape(BaseModel):
    """The file before its chambers are checked one by one: the top-level keys and the caps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chambers: dict[str, Any] = Field(min_length=1)
    caps: Caps = Caps()
    download_link_days: float = Field(7.0, gt=0, allow_inf_nan=False)


class Lab:
    """A lab file, checked: each chamber's limits and safe state parsed as the driver will use them. `refused`:
    the chambers of the file that are not served, each with its one-line reason."""

    def __init__(self, spec: LabFile, source: str, refused: dict[str, str] | None = None):
        self.spec, self.source = spec, source
        self.refused: dict[str, str] = dict(refused or {})
        self.limits: dict[str, OperatorLimits | None] = {}
        self.safe: dict[str, SafeState] = {}
        for chamber_id, entry in spec.chambers.items():
            self.limits[chamber_id], self.safe[chamber_id] = _limits_and_safe(entry, f"{source}: chambers.{chamber_id}")

    @property
    def caps(self) -> Caps:
        return self.spec.caps

    def entry(self, chamber_id: str) -> ChamberEntry:
        return self.spec.chambers[chamber_id]

    def kind(self, chamber_id: str) -> str:
        return self.entry(chamber_id).chamber_kind or ""


def _limits_and_safe(entry: ChamberEntry, where: str) -> tuple[OperatorLimits | None, SafeState]:
    """A chamber's limits and its safe state (the resting state plus its limits' and its own `safe:`), each
    checked; LabFileError names `where` and the field."""
    kind = entry.chamber_kind
    try:
        limits = None if entry.limits is None else parse_limits({kind: entry.limits}, f"{where}.limits")
        safe = resolve_safe_state(None, limits)
        if entry.safe is not None:
            safe = parse_safe_state({kind: entry.safe}, f"{where}.safe", limits, safe)
    except LimitsFileError as exc:  # the field as the lab file writes it: chambers.ID.safe: field 'wt.load_in'
        raise LabFileError(where, f"{exc.source.removeprefix(where).lstrip('.')}: {exc.problem}") from None
    return limits, safe


def load_lab(path: str | Path) -> Lab:
    """The lab file at `path`, each chamber checked on its own: a chamber whose entry fails is in `Lab.refused`;
    LabFileError (one line) when the file itself is wrong or no chamber is left."""
    source = f"lab file {Path(path)}"
    data = read_data_file(path, what="lab file", error=LabFileError,
                          expected="a mapping with chambers: {ID: {board, mode, configs, limits, safe}}")
    shape = validate_model(data, _LabFileShape, source=source, error=LabFileError)
    entries: dict[str, ChamberEntry] = {}
    refused: dict[str, str] = {}
    for chamber_id, raw in shape.chambers.items():
        where = f"chambers.{chamber_id}"
        try:
            if not re.match(CHAMBER_ID, str(chamber_id)):
                raise LabFileError(source, f"chamber id {chamber_id!r}: expected letters, digits, '_', '.', '-' "
                                           "(at most 64)")
            entry = validate_model({"chambers": {chamber_id: raw}}, LabFile, source=source,
                                   error=LabFileError).chambers[chamber_id]
            _limits_and_safe(entry, f"{source}: {where}")
        except LabFileError as exc:
            refused[str(chamber_id)] = exception_line(exc)
            continue
        entries[chamber_id] = entry
    if not entries:
        first = next(iter(refused.values()))
        more = f" (and {len(refused) - 1} more chamber(s) refused)" if len(refused) > 1 else ""
        raise LabFileError(source, f"no chamber can be served: {first.removeprefix(source + ': ')}{more}")
    return Lab(LabFile(chambers=entries, caps=shape.caps, download_link_days=shape.download_link_days), source,
               refused)


DEMO_LAB: dict[str, Any] = {"chambers": {
    "wt-queue-1": {"board": "emulated:wt?unit=1", "mode": "queue"},
    "lt-queue-1": {"board": "emulated:lt?unit=1", "mode": "queue"},
    "wt-rt-1": {"board": "emulated:wt?unit=2", "mode": "real-time"},
    "lt-rt-1": {"board": "emulated:lt?unit=2", "mode": "real-time"},
}}
"""The lab `lab serve` runs without --config: emulated boards, a wind and a light tunnel in each mode, each a
distinct unit (simulator/units.py), as the chambers of a real lab are."""


def demo_lab() -> Lab:
    return Lab(validate_model(DEMO_LAB, LabFile, source="demo lab", error=LabFileError), "demo lab")
