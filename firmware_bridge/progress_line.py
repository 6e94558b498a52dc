"""One progress line for every long command: i/N, elapsed and ETA, sized to the terminal, calm when piped.

Why one helper, and why on this floor: `run`, `chamber run`, `chamber measure` and `matrix` each drew their own
line (padded to 110-150 columns, so an 80-column terminal wrapped and scrolled a line per update; some without
i/N, elapsed or ETA; one line per WAIT when piped: ~12,000 lines for the longest protocol). The same rule now
draws all of them, and chamber/, protocols/ and agent/ all use it, so it lives on the floor every folder may
import (as firmware_bridge/model_file.py does). It is plain text drawing: no chamber, no board.

The rule. On a terminal: one line redrawn in place (`\\r`), cut to the terminal's width - 1 (read at each draw
with shutil.get_terminal_size, so a resize is followed) and padded to it, so it never wraps; lines said above it
(`say`) are wrapped, never cut. Not on a terminal (a log, a pipe): a line at each stage's start and end, and in
between at most one every `every` seconds (10 s by default), never one per event. The clock, the width and
whether the stream is a terminal can be given, so a test sees an 80-column terminal without one.
"""

from __future__ import annotations

import os
import shutil
import textwrap
import time
from typing import Callable, TextIO

CALM_EVERY_S = 10.0
"""Seconds between two progress lines when the stream is not a terminal."""
REDRAW_EVERY_S = 0.2
"""Seconds between two redraws on a terminal (a fast stream of events would otherwise flood the terminal)."""


def clock_text(seconds: float | None) -> str:
    """A duration as m:ss or h:mm:ss ("?" when unknown): short enough for an 80-column line."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    total = int(round(max(0.0, seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def terminal_width(stream: TextIO) -> int:
    """Columns of the terminal `stream` is on: COLUMNS when set (as shutil.get_terminal_size reads it), else the
    stream's own terminal (stderr may be the terminal while stdout is redirected), else shutil's answer (80 when
    nothing is known)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(20, int(columns))
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):  # not a file, or not a terminal (io.UnsupportedOperation too)
        width = 0
    return max(20, width or shutil.get_terminal_size((80, 24)).columns)


class ProgressLine:
    """The progress of one stage at a time on `stream`: `start(label, total)`, then `update`/`advance`, then
    `finish`; `say` prints a line above the progress line. `total` 0: a stage whose steps are not counted (only
    its elapsed time is shown). `eta_s`, when given to update, replaces the ETA from the rate so far (a protocol
    run knows its WAITs ahead)."""

    def __init__(self, stream: TextIO, *, width: int | Callable[[], int] | None = None, tty: bool | None = None,
                 every: float = CALM_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.every, self.clock = stream, every, clock
        self.tty = bool(getattr(stream, "isatty", lambda: False)()) if tty is None else tty
        self._width = width
        self.label, self.total, self.done, self.note = "", 0, 0, ""
        self.eta_s: float | None = None
        self.started = self._last = clock()
        self.drawn = False  # the line is on the terminal without its newline
        self.open = False  # a stage has started and not finished
        self._printed = ""  # the last line printed off a terminal

    # ------------------------------------------------------------------------------------------ the stage
    def start(self, label: str, total: int, note: str = "") -> None:
        """A new stage (the one before it, if open, is finished first)."""
        if self.open:
            self.finish()
        self.label, self.total, self.done, self.note, self.eta_s = label, max(0, total), 0, note, None
        self.started = self._last = self.clock()
        self.open = True
        self._show(force=True)

    def update(self, done: int | None = None, note: str | None = None, *, total: int | None = None,
               eta_s: float | None = None, force: bool = False) -> None:
        """Where the stage is now; drawn if due (a terminal: every REDRAW_EVERY_S; else every `every` s) or
        `force`d (a step as long as the calm interval itself, such as a long WAIT, is worth its own line)."""
        if done is not None:
            self.done = done
        if total is not None:
            self.total = total
        if note is not None:
            self.note = note
        self.eta_s = eta_s
        self._show(force=force)

    def advance(self, note: str = "") -> None:
        """One step more; the stage's last step finishes it."""
        self.update(self.done + 1, note)
        if self.total and self.done >= self.total:
            self.finish()

    def finish(self, note: str | None = None) -> None:
        """The stage's end: its last line is always shown (and ends with a newline)."""
        if not self.open:
            return
        if note is not None:
            self.note = note
        self.open = False
        self.eta_s = 0.0 if self.total and self.done >= self.total else self.eta_s
        text = self.text()
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width() - 1) + "\n")
        elif text != self._printed:  # not the line just printed again
            self.stream.write(text + "\n")
        self.drawn = False
        self.stream.flush()

    def say(self, message: str, indent: str = "    ") -> None:
        """A line above the progress line (wrapped to the width on a terminal, never cut), then the progress line
        again."""
        if not self.tty:
            self.stream.write(message + "\n")
            self.stream.flush()
            return
        width = self.width() - 1
        for part in textwrap.wrap(message, width, subsequent_indent=indent) or [""]:
            self.stream.write("\r" + part.ljust(width) + "\n")
        was, self.drawn = self.drawn, False
        if was and self.open:
            self._draw()
        self.stream.flush()

    # ------------------------------------------------------------------------------------------ drawing
    def width(self) -> int:
        if callable(self._width):
            return max(20, self._width())
        return max(20, self._width) if self._width else terminal_width(self.stream)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def eta(self) -> float | None:
        """The given ETA, else the time left at the rate so far (None before the first step)."""
        if self.eta_s is not None:
            return self.eta_s
        if not self.total or not self.done:
            return None
        return self.elapsed() / self.done * max(0, self.total - self.done)

    def text(self) -> str:
        """`label i/N (p %) elapsed m:ss ETA m:ss note`, cut to the width - 1 on a terminal (a log keeps it all)."""
        count = f" {self.done}/{self.total} ({100 * self.done // self.total} %)" if self.total else ""
        line = f"{self.label}{count} elapsed {clock_text(self.elapsed())}"
        if self.total:
            line += f" ETA {clock_text(self.eta())}"
        if self.note:
            line += f" {self.note}"
        limit = self.width() - 1
        return line if not self.tty or len(line) <= limit else line[: limit - 1] + "…"

    def _show(self, *, force: bool) -> None:
        now = self.clock()
        if not force and now - self._last < (REDRAW_EVERY_S if self.tty else self.every):
            return
        self._last = now
        if self.tty:
            self._draw()
        else:
            self._printed = self.text()
            self.stream.write(self._printed + "\n")
            self.stream.flush()

    def _draw(self) -> None:
        self.stream.write("\r" + self.text().ljust(self.width() - 1))
        self.stream.flush()
        self.drawn = True
