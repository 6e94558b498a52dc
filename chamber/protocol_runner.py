"""Run a validated protocol on a connected chamber: SETs, MSRs (rows handed on as they arrive), WAITs, RST.

Why here and not in the CLI: the rules of a run (validate everything before the first byte — including the MSR a
limits file would stop half-way, chamber.protocol_language.check_measurements — hand on every row
the moment its MSR completes, stop between rows when asked, say how far it got) must hold for every caller: the
`chamber run` command, tests, and anyone scripting the bench. Waiting, the operator's Enter key, the clock and the
stop request are passed in, so a test runs an hours-long protocol in a second without sleeping.

A long MSR is taken as consecutive MSRs of at most `chunk_rows` rows: the Mk1 firmware cannot abort an MSR once
it has started (wt_mk_1.ino sends all n rows), so chunks are what let a run report progress and stop within
`chunk_rows` rows. Every public protocol measures one row per MSR, so for them nothing changes. The MSR delay is
sent as 0: the firmware echoes it and ignores it. A chunk is at most MAX_MSR_ROWS (the firmware reads n as a 16-bit
int: `MSR,40000,0` would measure another count, and the first Ctrl-C would wait for all of it): check_chunk_rows
refuses a larger one before anything is sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from chamber.errors import ChamberError
from chamber.frame import Frame
from chamber.protocol_language import (
    MAX_MSR_ROWS,
    MeasureInstruction,
    Protocol,
    ResetInstruction,
    SetInstruction,
    WaitInputInstruction,
    WaitInstruction,
    validate_protocol,
)
from chamber.stop import StopRequest
from firmware_bridge.errors import BridgeError

DEFAULT_CHUNK_ROWS = 25


class ChunkRefused(ChamberError, ValueError):
    """An MSR chunk the firmware cannot take (more rows than its 16-bit count) or that is not a count of rows."""


def check_chunk_rows(chunk_rows: int) -> int:
    """`chunk_rows` when one MSR may ask for that many rows (1..MAX_MSR_ROWS), else ChunkRefused naming the
    limit and what arrived; called before a chamber is opened, and again by measure_rows."""
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or not 1 <= chunk_rows <= MAX_MSR_ROWS:
        raise ChunkRefused(f"chunk: expected a whole number of rows 1..{MAX_MSR_ROWS} (the most one MSR may ask "
                           f"for: the firmware reads n as a 16-bit int), got {chunk_rows!r}; nothing was sent")
    return chunk_rows


@dataclass(frozen=True)
class Progress:
    """How far a long step is: rows done of all, measured rate, and the time left (rows at that rate + WAITs)."""

    rows_done: int
    rows_total: int
    elapsed_s: float
    rate: float | None  # rows per second of measuring (WAITs excluded)
    eta_s: float | None
    line: int | None = None
    instruction: str = ""
    waiting_s: float = 0.0  # > 0: a WAIT of this length starts now (a long step of its own)

    def note(self) -> str:
        """The rate and where the run is (rows, i/N, elapsed and ETA are the progress line's own)."""
        rate = f"{self.rate:.1f} rows/s" if self.rate else ""
        where = f"line {self.line}: {self.instruction}" if self.line is not None else ""
        if self.waiting_s:
            where += f" (waiting {format_duration(self.waiting_s)})"
        return ", ".join(x for x in (rate, where) if x)


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m:02d} min"


@dataclass
class RunOutcome:
    """What a run did, for the summary: rows kept, where it stopped and why."""

    source: str
    chamber: str
    config: str
    rows: int = 0
    rows_total: int = 0
    instructions_done: int = 0
    instructions_total: int = 0
    interrupted: bool = False
    stopped_at_line: int | None = None
    error: dict[str, str] | None = None
    seconds: float = 0.0
    link: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"protocol": self.source, "chamber": self.chamber, "config": self.config, "rows": self.rows,
                "rows_total": self.rows_total, "instructions_done": self.instructions_done,
                "instructions_total": self.instructions_total, "interrupted": self.interrupted,
                "stopped_at_line": self.stopped_at_line, "error": self.error, "seconds": round(self.seconds, 3),
                "link": self.link}


class _Meter:
    """Rows done, measuring time, and the WAIT time still ahead: enough for rate and ETA."""

    def __init__(self, rows_total: int, wait_s_total: float, clock: Callable[[], float]):
        self.rows_total, self.wait_left = rows_total, wait_s_total
        self.rows = 0
        self.measuring_s = 0.0
        self._clock = clock
        self.started = clock()

    def progress(self, line: int | None = None, instruction: str = "", waiting_s: float = 0.0) -> Progress:
        rate = self.rows / self.measuring_s if self.rows and self.measuring_s > 0 else None
        left = self.rows_total - self.rows
        eta = (left / rate + self.wait_left) if rate else (self.wait_left if left == 0 else None)
        return Progress(self.rows, self.rows_total, self._clock() - self.started, rate, eta, line, instruction,
                        waiting_s)


def measure_rows(chamber: Any, n: int, *, on_frame: Callable[[Frame], None] = lambda f: None,
                 on_progress: Callable[[Progress], None] = lambda p: None, stop: StopRequest | None = None,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, clock: Callable[[], float] = time.monotonic,
                 meter: _Meter | None = None, line: int | None = None, instruction: str = "") -> tuple[Frame | None, bool]:
    """n rows in chunks, each handed to `on_frame` as it completes; (all rows as one frame, interrupted?).

    A stop request ends it after the current chunk; the rows received so far are kept and returned."""
    check_chunk_rows(chunk_rows)
    meter = meter or _Meter(n, 0.0, clock)
    frames: list[Frame] = []
    got = 0
    interrupted = False
    while got < n:
        if stop is not None and stop.requested:
            interrupted = True
            break
        take = min(chunk_rows, n - got)
        t0 = clock()
        frame = chamber.measure(take)
        meter.measuring_s += clock() - t0
        meter.rows += len(frame)
        got += len(frame)
        frames.append(frame)
        on_frame(frame)
        on_progress(meter.progress(line, instruction))
    return _join(frames), interrupted


def _join(frames: list[Frame]) -> Frame | None:
    if not frames:
        return None
    if len(frames) == 1:
        return frames[0]
    last = frames[-1]
    return Frame(names=last.names, values=np.vstack([f.values for f in frames]),
                 host_timestamps=np.concatenate([f.host_timestamps for f in frames]), config=last.config,
                 reconnected=any(f.reconnected for f in frames), link=last.link)


def run_protocol(chamber: Any, protocol: Protocol, *, on_frame: Callable[[Frame], None],
                 on_progress: Callable[[Progress], None] = lambda p: None, stop: StopRequest | None = None,
                 wait: Callable[[float], bool] | None = None, ask: Callable[[str], None] = input,
                 on_instruction: Callable[[Any], None] = lambda i: None,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, clock: Callable[[], float] = time.monotonic) -> RunOutcome:
    """Validate the whole protocol against the chamber (ProtocolError before anything is sent: every SET against
    the catalogue and limits, every MSR against the inputs set before it, from what the host has set already),
    then run it.

    `wait(seconds)` pauses and returns True when the pause was cut short by a stop (default: the stop request's
    own wait, else time.sleep). `ask(prompt)` serves WAIT_INPUT. A chamber or link error ends the run: the rows
    received so far have been handed on already, and the outcome names the error."""
    numbers = validate_protocol(protocol, chamber.catalogue, chamber.state())
    stop = stop or StopRequest()
    wait = wait or stop.wait
    outcome = RunOutcome(protocol.source, chamber.layout.chamber, chamber.config, rows_total=protocol.rows,
                         instructions_total=len(protocol.instructions))
    meter = _Meter(protocol.rows, protocol.wait_ms / 1000.0, clock)
    try:
        for instruction in protocol.instructions:
            if stop.requested:
                outcome.interrupted = True
                outcome.stopped_at_line = instruction.line
                break
            on_instruction(instruction)
            if isinstance(instruction, SetInstruction):
                chamber.set(instruction.variable, numbers[instruction.line])
            elif isinstance(instruction, MeasureInstruction):
                _, cut = measure_rows(chamber, instruction.rows, on_frame=on_frame, on_progress=on_progress,
                                      stop=stop, chunk_rows=chunk_rows, clock=clock, meter=meter,
                                      line=instruction.line, instruction=instruction.text)
                if cut:
                    outcome.interrupted = True
                    outcome.stopped_at_line = instruction.line
                    break
            elif isinstance(instruction, WaitInstruction):
                seconds = instruction.ms / 1000.0
                if seconds >= 1.0:
                    on_progress(meter.progress(instruction.line, instruction.text, seconds))
                meter.wait_left = max(0.0, meter.wait_left - seconds)
                if wait(seconds):
                    outcome.interrupted = True
                    outcome.stopped_at_line = instruction.line
                    outcome.instructions_done += 1  # the pause was cut short; nothing of it is left to do
                    break
            elif isinstance(instruction, WaitInputInstruction):
                ask(instruction.prompt)
            elif isinstance(instruction, ResetInstruction):
                chamber.reset()
            outcome.instructions_done += 1
        else:
            on_progress(meter.progress())
    except (ChamberError, BridgeError) as exc:
        outcome.error = {"type": type(exc).__name__, "message": str(exc)}
        current = protocol.instructions[outcome.instructions_done] if outcome.instructions_done < len(protocol.instructions) else None
        outcome.stopped_at_line = current.line if current is not None else None
    outcome.rows = meter.rows
    outcome.seconds = clock() - meter.started
    try:
        outcome.link = chamber.link_stats()
    except Exception:  # the summary must not fail because the link is gone
        outcome.link = {}
    return outcome
