"""Opening the chambers a command was asked for, and leaving them safe: one way for every command.

Why: `chamber info/measure/run/shell`, `calibrate`, `check`, `sweep`, `serve` and `run` each opened chambers their
own way (YAML params here, JSON there, a duplicate-chamber check only in `serve`, no boot timeout in most). A
`ChamberSelection` says what to open; `open_chambers` opens it and returns `OpenChambers`, which closes every
chamber through its safe state (chamber/safe_state.py) on exit, also when opening the second chamber fails.

Backends: `serial` (pyserial URLs: device paths, ptys, socket://; the kind is what the board announces; a
`lab+http://HOST:PORT/v0/CHAMBER_ID` URL is a Remote Lab chamber, chamber/remote_lab_backend.py, with the
credentials file `lab_credentials`, else env CHAMBERLAB_LAB_CREDENTIALS),
`sim` (the emulated firmware in this process) and `emulated` (emulated boards on ptys, reached through the real
serial driver, as `make run` does; chamber/emulated.py starts them).

A serial board that did not reset when its port was opened and that a previous process left mid-session is
recovered while it is opened (firmware_bridge/recovery.py): `open_chambers` then says so in one line through its
`warn` callback and applies the safe state at once. Every serial session keeps a link journal per port (the
state folder: `state_dir`, else env CHAMBERLAB_STATE_DIR, else $XDG_STATE_HOME/chamberlab/links, else
~/.local/state/chamberlab/links), so that the next process finds such a board at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from chamber.driver import Chamber
from chamber.errors import ChamberError, InvalidSetting
from chamber.limits import OperatorLimits, load_limits
from chamber.safe_state import (LOCK_WAIT_S, SafeOutcome, SafeState, SafeStateUnconfirmed, apply_safe_state,
                                check_safe_state, resolve_safe_state, safe_close, safe_state_of)
from chamber.stop import signals_deferred
from firmware_bridge.model_file import (SETTINGS_MAX_BYTES, ModelFileError, describe_validation, read_data_file,
                                       validate_model)
from firmware_bridge.recovery import Recovery

log = logging.getLogger(__name__)

Kind = Literal["wt", "lt"]


class SelectionError(ChamberError, ValueError):
    """A selection that cannot be opened as asked (missing port, contradictory options, two boards of one kind)."""


class ChamberSelection(BaseModel):
    """What to open. `kinds` is used by `sim` and `emulated` (a serial board says what it is). `one_chamber`: the
    limits file applies as given, so a file for the other chamber is refused; otherwise a file for one chamber
    limits that one only while both are connected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["serial", "sim", "emulated"] = "sim"
    ports: tuple[str, ...] = ()
    kinds: tuple[Kind, ...] = ("wt", "lt")
    config: str = "standard"
    seed: int = 0
    params: Path | None = None
    limits: Path | None = None
    boot_timeout: float = 6.0
    one_chamber: bool = False
    lab_credentials: Path | None = None  # the Remote Lab's .ini file, for lab+http:// ports
    state_dir: Path | None = None  # the serial ports' link journals (None: link_state_dir's default)

    @model_validator(mode="after")
    def _consistent(self) -> "ChamberSelection":
        if self.backend == "serial" and not self.ports:
            raise ValueError("backend serial needs a port URL (--port: device path, pty, socket://host:port or "
                             "lab+http://HOST:PORT/v0/CHAMBER_ID; or the simulator, --backend sim)")
        if self.backend != "serial" and self.ports:
            raise ValueError(f"backend {self.backend} and a port URL exclude each other; got {', '.join(self.ports)}")
        if not self.kinds:
            raise ValueError("expected at least one chamber kind (wt, lt)")
        return self


def selection_of(backend: str | None, ports: list[str] | None, **fields: Any) -> ChamberSelection:
    """The selection from command-line values: `backend` None means serial with ports, else the simulator."""
    chosen = backend or ("serial" if ports else "sim")
    try:
        return ChamberSelection(backend=chosen, ports=tuple(ports or ()), **fields)
    except ValidationError as exc:  # one line naming what was expected, worded as every settings file's errors
        raise SelectionError(describe_validation(exc, ChamberSelection)) from None


class ParamsFileError(SelectionError, ModelFileError):
    """A simulator parameter file that cannot be read or does not fit the simulator's parameter model (the one
    configuration-file error, worded by firmware_bridge.model_file: the file, the field, expected and got)."""


def read_params(path: str | Path | None) -> dict[str, Any] | None:
    """A simulator parameter file (YAML or JSON, the one settings reader) as a mapping, checked against the
    simulator's parameter model, or None without a file. Checked here, so that a bad file is refused when it is
    read, naming the file and the field, not at the first row."""
    if path is None:
        return None
    from simulator.params import SimParams

    data = read_data_file(path, what="simulator parameters", error=ParamsFileError, max_bytes=SETTINGS_MAX_BYTES,
                          expected="a mapping of simulator parameters ({} for the defaults)")
    validate_model(data, SimParams, source=f"simulator parameters {Path(path)}", error=ParamsFileError)
    return data


_HANDLED = object()  # OpenChambers.close's default: the exception being handled where it is called, if any


@dataclass
class OpenChambers:
    """Connected chambers by kind; leaving the `with` block (or `close()`) applies the safe state and closes.

    `safe`: the state to leave them in (None: each chamber's limits file's `safe:` section, else the default);
    `make_safe=False` closes without setting anything (a command that changed nothing, like `chamber info`).
    `warn` receives one line per chamber whose safe state the board's read-back did not confirm. `ports` and
    `emulated` say where each chamber was found, for a run's provenance."""

    chambers: dict[str, Chamber] = field(default_factory=dict)
    ports: dict[str, str] = field(default_factory=dict)
    emulated: bool = False
    safe: SafeState | None = None
    make_safe: bool = True
    warn: Callable[[str], None] = lambda message: log.warning(message)
    outcomes: list[SafeOutcome] = field(default_factory=list)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def close(self, error: BaseException | None | object = _HANDLED) -> list[SafeOutcome]:
        """Safe state then close, for every chamber (best effort), then stop any emulated boards. SIGINT/SIGTERM
        wait meanwhile (chamber.stop.signals_deferred). `error`: the exception propagating (default: the one
        being handled, if any); then, if the safe state is not confirmed on a chamber, SafeStateUnconfirmed is
        raised from it. Without one nothing is raised (see `outcomes` / `unconfirmed`), except that a signal
        deferred meanwhile is raised afterwards as KeyboardInterrupt (itself then propagating)."""
        given = sys.exc_info()[1] if error is _HANDLED else error
        propagating = given if isinstance(given, BaseException) else None
        start = len(self.outcomes)
        with signals_deferred() as received:
            for chamber in self.chambers.values():
                if not self.make_safe:
                    chamber.close(timeout=LOCK_WAIT_S)
                    continue
                outcome = safe_close(chamber, self.safe)
                self.outcomes.append(outcome)
                if not outcome.confirmed:
                    self.warn(f"warning: {outcome.text}")
                elif propagating is not None:  # no result will carry it: say here that the chamber is safe
                    self.warn(outcome.text)
            self.chambers = {}
            self._stack.close()
        interrupt = KeyboardInterrupt(received[0]) if received and propagating is None else None
        cause = propagating or interrupt
        if cause is not None and any(not o.confirmed for o in self.outcomes[start:]):
            raise SafeStateUnconfirmed(self.outcomes[start:]) from cause
        if interrupt is not None:  # deferred while the chambers were made safe, not dropped
            raise interrupt
        return self.outcomes

    @property
    def unconfirmed(self) -> list[SafeOutcome]:
        """The outcomes whose safe state was not confirmed by the board's read-back."""
        return [o for o in self.outcomes if not o.confirmed]

    def provenance(self) -> list[dict[str, Any]]:
        """One entry per chamber: kind, port (URL, or "in-process"), emulated, board configuration."""
        return [{"kind": kind, "port": self.ports.get(kind, "in-process"), "emulated": self.emulated,
                 "config": c.config} for kind, c in sorted(self.chambers.items())]

    def __enter__(self) -> "OpenChambers":
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        self.close(error)


def _limits(selection: ChamberSelection) -> OperatorLimits | None:
    if selection.limits is None:
        return None
    limits = load_limits(selection.limits)
    return limits if selection.one_chamber else limits.covering()


LAB_CREDENTIALS_ENV = "CHAMBERLAB_LAB_CREDENTIALS"
STATE_DIR_ENV = "CHAMBERLAB_STATE_DIR"


def link_state_dir(selection: ChamberSelection, environ: Mapping[str, str]) -> Path | None:
    """Where the serial ports' link journals live (firmware_bridge/link_journal.py): the selection's `state_dir`,
    else `default_link_state_dir(environ)`."""
    if selection.state_dir is not None:
        return selection.state_dir
    return default_link_state_dir(environ)


def default_link_state_dir(environ: Mapping[str, str]) -> Path | None:
    """Env CHAMBERLAB_STATE_DIR, else $XDG_STATE_HOME/chamberlab/links, else $HOME/.local/state/chamberlab/links
    (the XDG default); None (no journal) only when none of these is known."""
    if environ.get(STATE_DIR_ENV):
        return Path(environ[STATE_DIR_ENV])
    if environ.get("XDG_STATE_HOME"):
        return Path(environ["XDG_STATE_HOME"]) / "chamberlab" / "links"
    if environ.get("HOME"):
        return Path(environ["HOME"]) / ".local" / "state" / "chamberlab" / "links"
    return None


def lab_credentials_of(selection: ChamberSelection, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(user, password) for the selection's Remote Lab ports (`lab+...`), read from `selection.lab_credentials`,
    else the file named by env CHAMBERLAB_LAB_CREDENTIALS; None without such a port. Every lab URL is parsed here
    too, so a malformed one or a missing file stops the command before any chamber opens."""
    from chamber.remote_lab_backend import is_remote_lab_url, parse_remote_lab_url, read_credentials

    lab_ports = [p for p in selection.ports if is_remote_lab_url(p)]
    if not lab_ports:
        return None
    for port in lab_ports:
        parse_remote_lab_url(port)
    path = selection.lab_credentials or environ.get(LAB_CREDENTIALS_ENV) or None
    if path is None:
        raise SelectionError(f"the Remote Lab chamber {lab_ports[0]} needs credentials: --lab-credentials FILE (an "
                             f".ini file with [api_keys] user and password) or env {LAB_CREDENTIALS_ENV}")
    return read_credentials(path)


def open_chambers(selection: ChamberSelection, *, safe: SafeState | None = None, make_safe: bool = True,
                  resolve_safe: bool = False, safe_file: str | Path | None = None,
                  warn: Callable[[str], None] | None = None,
                  on_connect: Callable[[str, Chamber, str], None] = lambda kind, chamber, where: None,
                  environ: Mapping[str, str] | None = None) -> OpenChambers:
    """Open every chamber of `selection` (each connected: reset, announced, limits checked against it).

    A given `safe` state is checked against each chamber at once, so a typo in it stops the command before any
    work. `resolve_safe` resolves that state here instead (`safe_file`, else the selection's limits file's `safe:`
    sections, else the default: chamber.safe_state.resolve_safe_state), from the limits this call reads anyway,
    so an operator command reads its limits file once. Two boards announcing the same chamber are refused. On any
    failure the chambers already opened are left safe and closed before the error propagates.
    `on_connect(kind, chamber, where)` reports each one. `environ` (default os.environ) may name the Remote Lab
    credentials file (lab_credentials_of) and the link journals' folder (link_state_dir).

    A serial board that a previous process left mid-session (it did not reset on connect) is recovered as it is
    opened; `warn` then gets one line saying the chamber may have been left running, and the safe state is applied
    at once (when `make_safe`; a command that changes nothing leaves it as the recovery's RST did: power-on)."""
    from chamber import open_chamber
    from firmware_bridge.session import Timing

    environ = os.environ if environ is None else environ
    credentials = lab_credentials_of(selection, environ)
    state_dir = link_state_dir(selection, environ) if selection.backend == "serial" else None
    limits = _limits(selection)
    if resolve_safe:
        safe = resolve_safe_state(safe_file, limits)
    params = read_params(selection.params)
    opened = OpenChambers(safe=safe, make_safe=make_safe, emulated=selection.backend == "emulated",
                          **({"warn": warn} if warn is not None else {}))
    try:
        urls = list(selection.ports)
        if selection.backend == "emulated":
            from chamber.emulated import start_emulated_boards

            urls = list(start_emulated_boards(opened._stack, selection.kinds, seed=selection.seed).values())
        if selection.backend == "sim":
            for kind in selection.kinds:
                opened.chambers[kind] = open_chamber(backend="sim", chamber=kind, config=selection.config,
                                                     seed=selection.seed, params=params, limits=limits)
                on_connect(kind, opened.chambers[kind], "in-process")
        recovered: dict[str, Recovery] = {}
        for url in urls:
            if url.startswith("lab+"):
                c = open_chamber(url, backend="serial", limits=limits,
                                 timing=Timing(boot_timeout=selection.boot_timeout), lab_credentials=credentials)
            else:
                c, recovery = _open_serial(url, selection.boot_timeout, limits, state_dir)
                if recovery is not None:
                    recovered[c.layout.chamber] = recovery
            kind = c.layout.chamber
            if kind in opened.chambers:
                safe_close(c, safe)
                raise SelectionError(f"two boards announce chamber {kind!r}: {opened.ports[kind]} and {url}; "
                                     "expected one board per chamber")
            opened.chambers[kind], opened.ports[kind] = c, url
            on_connect(kind, c, url)
        if safe is not None:
            for c in opened.chambers.values():
                try:
                    check_safe_state(c, safe)
                except InvalidSetting:  # a safe state that cannot be sent: nothing was set since the reset,
                    opened.make_safe = False  # so close as connected rather than fail to send it at the exit
                    raise
        for kind, recovery in recovered.items():
            opened.warn(_after_recovery(opened, kind, recovery))
    except BaseException:
        opened.close()
        raise
    return opened


def _open_serial(url: str, boot_timeout: float, limits: OperatorLimits | None,
                 state_dir: Path | None) -> tuple[Chamber, Recovery | None]:
    """A connected Chamber on the serial board at `url`, with the port's link journal in `state_dir`; and what a
    recovery found if the board had been left mid-session (SerialBackend.recovered)."""
    from chamber import open_chamber
    from firmware_bridge.session import Timing

    chamber = open_chamber(url, backend="serial", limits=limits, timing=Timing(boot_timeout=boot_timeout),
                           journal_dir=state_dir)
    return chamber, chamber.backend.recovered


def _after_recovery(opened: OpenChambers, kind: str, recovery: Recovery) -> str:
    """The one line an operator gets about a board a previous process left mid-session. When the command leaves its
    chambers safe, the safe state is applied now (not only at the exit: the command may run long) and the line says
    whether the board's read-back confirms it; otherwise the recovery's RST left the power-on values."""
    line = f"{kind}: {recovery.describe()}"
    if not opened.make_safe:
        return line + " (settings at their power-on values)"
    chamber = opened.chambers[kind]
    outcome = apply_safe_state(chamber, opened.safe or safe_state_of(chamber))
    return line + ("; safe state applied (read back)" if outcome.confirmed else f"; {outcome.text}")
