"""Standard streams that outlive their terminal: a write to a closed terminal or pipe is dropped, not raised.

Why: when an operator's terminal closes or an SSH session drops, the command gets SIGHUP and must still apply the
chamber's safe state and record what it did (issue 31). But every later write to that terminal fails (EIO on a
hung-up tty, EPIPE on a closed pipe), and a progress line or the summary raising OSError on the way out would cut
the exit path short, or turn into a traceback and Python's exit status 120. So the CLI wraps stdout and stderr:
the first failed write points the stream's descriptor at /dev/null (so any other holder of it is quiet too) and
every later write is dropped. Files the command writes (records, CSVs, the run folder) are untouched: only the
terminal's output is lost, and it had no reader left.
"""

from __future__ import annotations

import errno
import os
from typing import Any, TextIO

GONE = (errno.EIO, errno.EPIPE, errno.ENXIO, errno.EBADF)
"""A write error that means the reader has gone (hung-up tty, closed pipe), not a problem of the command."""


class SurvivingStream:
    """A text stream that drops writes once its reader has gone; everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.lost = False  # a write failed because the reader had gone

    def _gone(self, exc: OSError) -> bool:
        if exc.errno not in GONE:
            return False
        self.lost = True
        try:  # later writes through any holder of this descriptor succeed into /dev/null
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        return True

    def write(self, text: str) -> int:
        if self.lost:
            return len(text)
        try:
            return self._stream.write(text)
        except OSError as exc:
            if not self._gone(exc):
                raise
            return len(text)

    def flush(self) -> None:
        if self.lost:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            if not self._gone(exc):
                raise

    def isatty(self) -> bool:
        if self.lost:
            return False
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:  # fileno, encoding, buffer, ...: the wrapped stream's
        return getattr(self._stream, name)


def surviving(stream: TextIO) -> TextIO:
    """`stream` wrapped (once) so that writes after its reader has gone are dropped."""
    return stream if isinstance(stream, SurvivingStream) else SurvivingStream(stream)  # type: ignore[return-value]
