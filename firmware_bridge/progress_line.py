"""Text that fits the terminal: one progress line for every long command (i/N, elapsed, ETA), and one wrapping rule
for every summary the CLI prints; calm and whole-lined when piped.

Why one module, and why on this floor: `run`, `chamber run`, `chamber measure`, `check --all` and `matrix` each
drew their own line (padded to 110-150 columns, so an 80-column terminal wrapped and scrolled a line per update)
and printed summaries of 94-218 characters that a terminal broke mid-number ("bytes_sent 18|0162"). The same two
rules now draw all of them, and chamber/, protocols/ and agent/ all use them, so they live on the floor every
folder may import (as firmware_bridge/model_file.py does). It is plain text drawing: no chamber, no board.

Summaries (`wrap_parts`, `fit_text`). A summary line is a head and its "key value" parts ("link wt:  resends 0,
needless_resends 0, ..."); on a terminal it is broken only between parts, the next line indented, so a part (a
number with its name, a value ± u with its unit) is never split; free text is broken only at spaces, never inside
a word or a number ("x ± u" and "c = x" stay whole). The width is the terminal's (shutil.get_terminal_size) when
the output is a terminal; piped or in a file there is no wrapping at all: each line stays whole for grep. Lines
never reach the terminal's last column (a terminal that wraps at it would leave an empty line).

The progress line. On a terminal: one line redrawn in place (`\\r`), fitted to the terminal's width - 1 (read at
each draw, so a resize is followed) and padded to it, so it never wraps: a note that does not fit is cut at a
space and marked "…" (never inside a number), a label that leaves no room is shortened so that i/N, elapsed and
ETA always show; lines said above it (`say`) are wrapped by the summaries' rule, never cut. Elapsed keeps moving
during a long step: a ticker thread redraws the open stage every TICK_S seconds (only with the real clock: a test
that gives its own clock draws only what it asks for). The ETA is the one the caller gives (a protocol run knows
its WAITs and its rows; the main job its planned chamber time), counted down from when it was given, else the
time left at the rate so far when the stage's steps are alike (`rate_eta`), else "ETA ?". Not on a terminal (a
log, a pipe): a line at each stage's start and end, and in between at most one every `every` seconds (10 s by
default), never one per event. The clock, the width and whether the stream is a terminal can be given, so a test
sees an 80-column terminal without one.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from typing import Any, Callable, Sequence, TextIO

CALM_EVERY_S = 10.0
"""Seconds between two progress lines when the stream is not a terminal."""
REDRAW_EVERY_S = 0.2
"""Seconds between two redraws on a terminal (a fast stream of events would otherwise flood the terminal)."""
TICK_S = 1.0
"""Seconds between two redraws of an open stage with nothing new (elapsed moves; a given ETA counts down)."""
TERMINAL = "terminal"
"""A width meaning: sys.stdout's terminal width, or no wrapping when sys.stdout is not a terminal."""
MIN_WIDTH = 20
_KEPT: Any = object()  # update(eta_s=_KEPT): the ETA given before stands


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
        return max(MIN_WIDTH, int(columns))
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):  # not a file, or not a terminal (io.UnsupportedOperation too)
        width = 0
    return max(MIN_WIDTH, width or shutil.get_terminal_size((80, 24)).columns)


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):  # closed, or not a stream
        return False


def output_width(stream: Any = None) -> int | None:
    """The width a summary written to `stream` (default sys.stdout) is wrapped to: its terminal's columns, or None
    (no wrapping: whole lines) when it is not a terminal."""
    stream = sys.stdout if stream is None else stream
    return terminal_width(stream) if is_terminal(stream) else None


def line_limit(width: Any = TERMINAL) -> int | None:
    """The longest line at `width` (a terminal's columns, None: no limit, TERMINAL: sys.stdout's): the width - 1."""
    if width == TERMINAL:
        width = output_width()
    return None if width is None else max(MIN_WIDTH, int(width)) - 1


# ----------------------------------------------------------------------------------------------- summaries
_KEEP = re.compile(r" (±|=|\+/-) |(?<=\d) (%)")  # "x ± u", "c = x", "95 %": one unit of meaning, never broken
_NBSP = "\u00a0"


def _break_word(word: str, room: int) -> list[str]:
    """A word longer than `room` (a path, a long id) in pieces of at most `room`: each broken after a "-", "/",
    "_" or "," where one is in the piece's second half, else where no digit meets a digit (never inside a
    number)."""
    pieces = []
    while len(word) > room:
        at = max((i + 1 for i, ch in enumerate(word[:room]) if ch in "-/_,"), default=0)
        if at < room // 2:
            at = room
            while at > 1 and word[at - 1].isdigit() and word[at].isdigit():
                at -= 1
        pieces.append(word[:at])
        word = word[at:]
    return [*pieces, word]


def _wrap_words(text: str, limit: int, first: str, rest: str) -> list[str]:
    """`text` broken at spaces only ("x ± u", "c = x", "95 %" kept whole; never at a hyphen): the first line
    prefixed `first`, the others `rest`. A word longer than a line of its own is broken by _break_word."""
    kept = _KEEP.sub(lambda m: m.group(0).replace(" ", _NBSP), text)
    lines: list[str] = []
    line, space = first, ""
    for token in re.findall(r"[^ ]+| +", kept):
        if token.startswith(" "):
            space = token
            continue
        if len(line) + len(space) + len(token) <= limit:
            line, space = line + space + token, ""
            continue
        if line.strip():
            lines.append(line)
            line = rest
        space = ""
        pieces = _break_word(token, max(1, limit - len(rest)))
        for piece in pieces[:-1]:
            lines.append((line + piece) if not line.strip() else line)
            line = rest
        line += pieces[-1]
    lines.append(line)
    return [x.replace(_NBSP, " ").rstrip() for x in lines if x.strip()] or [first.rstrip()]


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" "))]


def fit_line(line: str, width: Any = TERMINAL, indent: str | None = None) -> list[str]:
    """One line of free text as lines no longer than the width - 1, broken at spaces only; the lines after the
    first indented by the line's own indent plus `indent` (default four spaces). No width: the line, whole."""
    limit = line_limit(width)
    if limit is None or len(line) <= limit:
        return [line]
    own = _indent_of(line)
    rest = own + ("    " if indent is None else indent)
    return _wrap_words(line[len(own):], limit, own, rest if len(rest) < limit // 2 else "    ")


def fit_text(text: str, width: Any = TERMINAL, indent: str | None = None) -> str:
    """Every line of `text` fitted (fit_line); text already short enough comes back as it was."""
    if line_limit(width) is None:
        return text
    return "\n".join(part for line in text.split("\n") for part in fit_line(line, width, indent))


def fitted(message: str, stream: Any) -> str:
    """`message` fitted to the terminal `stream` is on (fit_text), or whole when `stream` is not a terminal."""
    return fit_text(message, output_width(stream))


def wrap_parts(parts: Sequence[str], width: Any = TERMINAL, *, head: str = "", sep: str = ", ",
               indent: str | None = None) -> list[str]:
    """`head` then the `parts` joined by `sep`, as lines no longer than the width - 1: broken only between two
    parts (the separator stays at the end of the line), the next line starting with `indent` (default: as many
    spaces as `head` is long, so the parts line up, or four when the head is long). A part longer than a line of
    its own is broken at its spaces, from where the line is. No width (piped): one line, whole."""
    if not parts:
        return [head.rstrip()]
    limit = line_limit(width)
    if limit is None:
        return [head + sep.join(parts)]
    indent = indent if indent is not None else " " * len(head) if len(head) <= limit // 3 else "    "
    lines: list[str] = []
    current = head
    if len(head.rstrip()) > limit:  # a head longer than a line: broken at its spaces first
        *lines, current = fit_line(head.rstrip(), width, indent=indent)
        current += head[len(head.rstrip()):]
    for i, part in enumerate(parts):
        after = sep if i < len(parts) - 1 else ""
        if len(current + part + after.rstrip()) <= limit:
            current += part + after
            continue
        if len(indent + part + after.rstrip()) <= limit:  # on a line of its own
            if current.strip():
                lines.append(current.rstrip())
            current = indent + part + after
            continue
        # longer than a line of its own: broken at its spaces, from where the line is
        *whole, current = _wrap_words(part + after.rstrip(), limit, current,
                                      indent + "  " if len(parts) > 1 else indent)  # a part's own lines: deeper
        lines += whole
        current += after[len(after.rstrip()):]
    lines.append(current.rstrip())
    return lines


def table_lines(rows: Sequence[Sequence[str]], widths: Sequence[int], width: Any = TERMINAL,
                indent: str = "    ") -> list[str]:
    """Rows of cells, each cell padded to its column's width, as lines: a row that does not fit is broken between
    two cells (the rest on indented lines), the same cells on every row, so the columns stay under one another.
    No width (piped): one line per row."""
    out: list[str] = []
    for row in rows:
        cells = [str(c).ljust(w) if i < len(row) - 1 else str(c) for i, (c, w) in enumerate(zip(row, widths))]
        out += wrap_parts(cells, width, sep=" ", indent=indent)
    return out


def _cut(text: str, limit: int) -> str:
    """`text` cut to `limit` characters and marked: at a space when there is one in its last half (" …": the word
    before it is whole), else between two characters that are not both parts of a number ("…")."""
    if len(text) <= limit:
        return text
    room = limit - 1
    space = text.rfind(" ", 0, room)
    if space >= room // 2:
        return text[:space].rstrip(" ,;:") + " …"
    at = room
    while at > 1 and (text[at - 1].isdigit() or text[at - 1] in ".,") and (text[at].isdigit() or text[at] in ".,"):
        at -= 1
    return text[:at] + "…"


# ----------------------------------------------------------------------------------------------- the line
class ProgressLine:
    """The progress of one stage at a time on `stream`: `start(label, total)`, then `update`/`advance`, then
    `finish`; `say` prints a line above the progress line. `total` 0: a stage whose steps are not counted (only
    its elapsed time is shown). `eta_s`, when given to update, is the ETA (counted down from then on) instead of
    the one from the rate so far; a stage started with `rate_eta=False` (steps of very unequal length: a batch of
    checks whose first claims need no chamber) shows "ETA ?" until one is given. `ticks`: seconds between the
    redraws of an open stage with nothing new (None: TICK_S with the real clock, none with a given clock; 0: none).
    Thread-safe: the ticker and the job's own thread may draw at once."""

    def __init__(self, stream: TextIO, *, width: int | Callable[[], int] | None = None, tty: bool | None = None,
                 every: float = CALM_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 ticks: float | None = None) -> None:
        self.stream, self.every, self.clock = stream, every, clock
        self.tty = is_terminal(stream) if tty is None else tty
        self._width = width
        self.label, self.total, self.done, self.note = "", 0, 0, ""
        self.eta_s: float | None = None
        self.eta_at = 0.0  # when eta_s was given
        self.rate_eta = True
        self.started = self._last = clock()
        self.drawn = False  # the line is on the terminal without its newline
        self.open = False  # a stage has started and not finished
        self._printed = ""  # the last line printed off a terminal
        self.ticks = (TICK_S if clock is time.monotonic else 0.0) if ticks is None else ticks
        self._lock = threading.RLock()
        self._ticker: threading.Thread | None = None
        self._stop_ticking = threading.Event()

    # ------------------------------------------------------------------------------------------ the stage
    def start(self, label: str, total: int, note: str = "", *, rate_eta: bool = True,
              elapsed_s: float | None = None) -> None:
        """A new stage (the one before it, if open, is finished first); `elapsed_s`: how long it has been going
        already (its elapsed then counts from there: the caller's own clock started earlier)."""
        with self._lock:
            if self.open:
                self.finish()
            self.label, self.total, self.done, self.note, self.eta_s = label, max(0, total), 0, note, None
            self.rate_eta = rate_eta
            self._last = self.clock()
            self.started = self._last - (elapsed_s or 0.0)
            self.open = True
            self._show(force=True)
            self._start_ticking()

    def update(self, done: int | None = None, note: str | None = None, *, total: int | None = None,
               eta_s: float | None = _KEPT, force: bool = False, elapsed_s: float | None = None) -> None:
        """Where the stage is now; drawn if due (a terminal: every REDRAW_EVERY_S; else every `every` s) or
        `force`d (a step as long as the calm interval itself, such as a long WAIT, is worth its own line).
        `eta_s`: the ETA from now (None: unknown, or from the rate so far; not given: the one given before, counted
        down); `elapsed_s`: the stage's elapsed time by the caller's clock (what its summary will say)."""
        with self._lock:
            if done is not None:
                self.done = done
            if total is not None:
                self.total = total
            if note is not None:
                self.note = note
            now = self.clock()
            if elapsed_s is not None:
                self.started = now - elapsed_s
            if eta_s is not _KEPT:
                self.eta_s, self.eta_at = eta_s, now
            self._show(force=force)

    def advance(self, note: str = "") -> None:
        """One step more; the stage's last step finishes it."""
        with self._lock:
            self.update(self.done + 1, note)
            if self.total and self.done >= self.total:
                self.finish()

    def finish(self, note: str | None = None) -> None:
        """The stage's end: its last line is always shown (and ends with a newline)."""
        with self._lock:
            if not self.open:
                return
            if note is not None:
                self.note = note
            self.open = False
            self._stop_ticking.set()
            if self.total and self.done >= self.total:
                self.eta_s, self.eta_at = 0.0, self.clock()
            text = self.text()
            if self.tty:
                self.stream.write("\r" + text.ljust(self.width() - 1) + "\n")
            elif text != self._printed:  # not the line just printed again
                self.stream.write(text + "\n")
            self.drawn = False
            self.stream.flush()

    def say(self, message: str, indent: str = "    ") -> None:
        """A line above the progress line (on a terminal wrapped to its width at spaces, never cut), then the
        progress line again."""
        with self._lock:
            if not self.tty:
                self.stream.write(message + "\n")
                self.stream.flush()
                return
            width = self.width() - 1
            for part in fit_line(message, width + 1, indent=indent) if message else [""]:
                self.stream.write("\r" + part.ljust(width) + "\n")
            was, self.drawn = self.drawn, False
            if was and self.open:
                self._draw()
            self.stream.flush()

    def tick(self) -> None:
        """Redraw the open stage if a redraw is due (elapsed moves, a given ETA counts down); nothing new."""
        with self._lock:
            if self.open:
                self._show(force=False, every=TICK_S if self.tty else self.every)

    # ------------------------------------------------------------------------------------------ drawing
    def width(self) -> int:
        if callable(self._width):
            return max(MIN_WIDTH, self._width())
        return max(MIN_WIDTH, self._width) if self._width else terminal_width(self.stream)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def _eta_left(self) -> float | None:
        """The given ETA as it stands now (counted down since it was given), None when none was given."""
        if self.eta_s is None:
            return None
        return max(0.0, self.eta_s - (self.clock() - self.eta_at))

    def eta(self) -> float | None:
        """The given ETA counted down, else the time left at the rate so far (a stage of alike steps, after its
        first step), else None ("ETA ?")."""
        left = self._eta_left()
        if left is not None:
            return left
        if self.total and self.done >= self.total:  # every step done: nothing left, whatever the steps were like
            return 0.0
        if not self.rate_eta or not self.total or not self.done:
            return None
        return self.elapsed() / self.done * max(0, self.total - self.done)

    def text(self) -> str:
        """`label i/N (p %) elapsed m:ss ETA m:ss note`; on a terminal fitted to the width - 1: the note cut at a
        space (marked "…"), the label shortened when even the figures would not fit (a log keeps it all)."""
        count = f" {self.done}/{self.total} ({100 * self.done // self.total} %)" if self.total else ""
        figures = f"{count} elapsed {clock_text(self.elapsed())}" + (f" ETA {clock_text(self.eta())}"
                                                                     if self.total else "")
        line = f"{self.label}{figures}" + (f" {self.note}" if self.note else "")
        limit = self.width() - 1
        if not self.tty or len(line) <= limit:
            return line
        label = self.label
        if len(label) + len(figures) > limit:  # the figures always show: the label gives way
            label = _cut(label, max(1, limit - len(figures)))
        head = label + figures
        if not self.note or len(head) + 2 >= limit:
            return head[:limit]
        return head + " " + _cut(self.note, limit - len(head) - 1)

    def _show(self, *, force: bool, every: float | None = None) -> None:
        now = self.clock()
        due = every if every is not None else REDRAW_EVERY_S if self.tty else self.every
        if not force and now - self._last < due:
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

    # ------------------------------------------------------------------------------------------ the ticker
    def _start_ticking(self) -> None:
        if not self.ticks or (self._ticker is not None and self._ticker.is_alive() and
                              not self._stop_ticking.is_set()):
            return
        self._stop_ticking = stop = threading.Event()

        def run() -> None:
            while not stop.wait(self.ticks):
                try:
                    self.tick()
                except (OSError, ValueError):  # the stream was closed under us: nothing more to draw
                    return

        self._ticker = threading.Thread(target=run, name="progress-ticker", daemon=True)
        self._ticker.start()
