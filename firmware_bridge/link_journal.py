"""The link journal: per port, the sequence number of the last command this host numbered for the board.

Why: a board that does not reset when a host connects (a serial server such as ser2net holding the port across
clients, a Mega with auto-reset disabled, a pty or socket without DTR) keeps the numbering of the session a killed
host left. It accepts only the segment after the last one it acknowledged (firmware serial_comms.cpp,
receive_data) and ignores everything else, an RST numbered from scratch included. Every session writes here the
number of each command before sending it, so the next process on the same port knows where the board stands: the
board has accepted either that number or the one before it (stop-and-wait: the one before was acknowledged before
this one was numbered), and one probe numbered `seq` settles both (firmware_bridge/recovery.py).

One small file per port URL in a state folder the caller passes in (the CLI's default is chosen in
chamber/selection.py). One fixed-size record, overwritten in place with one pwrite per command (a few
microseconds; commands are few, rows use the board's numbering and are not journaled), with a CRC so that a record
torn by a power loss reads as "no journal" rather than as a wrong number. No fsync: a killed process loses nothing
(the page cache survives it); after a power loss the board rebooted too and needs no journal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from firmware_bridge.segments import SEQ_MODULO, SEQ_START

log = logging.getLogger(__name__)

RECORD_BYTES = 160
"""Every record is padded to this size, so that overwriting in place never leaves the tail of a longer one."""
JOURNAL_SUFFIX = ".mk1link"
STALE_AFTER_S = 30 * 24 * 3600.0
"""Journals of ports not used for this long are removed when a journal is opened (a socket:// URL with a new port
number each time would otherwise leave one file per run)."""
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class JournalEntry:
    """What the last session on a port wrote: the number of its last command (SEQ_START: it sent none since the
    board announced itself), that command's text, the process and the wall-clock time it was numbered."""

    seq: int
    command: str
    pid: int
    at: float


def journal_path(state_dir: Path, url: str) -> Path:
    """The journal file of `url` in `state_dir`: a readable stem of the URL plus a hash (two URLs never share one)."""
    stem = _UNSAFE_NAME.sub("_", url).strip("_")[-48:] or "port"
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:12]
    return state_dir / f"{stem}-{digest}{JOURNAL_SUFFIX}"


def encode_record(entry: JournalEntry) -> bytes:
    """One record: `<crc32 hex> <json>`, space-padded and newline-terminated to RECORD_BYTES."""
    body = json.dumps({"seq": entry.seq, "cmd": entry.command[:64], "pid": entry.pid, "t": round(entry.at, 3)},
                      separators=(",", ":")).encode("ascii", errors="replace")
    line = b"%08x %s" % (zlib.crc32(body), body)
    if len(line) >= RECORD_BYTES:
        raise ValueError(f"journal record of {len(line)} bytes exceeds {RECORD_BYTES - 1}")
    return line.ljust(RECORD_BYTES - 1) + b"\n"


def decode_record(raw: bytes) -> JournalEntry | None:
    """The entry in `raw`, or None when it is empty, torn or not a journal record (logged, never raised: a bad
    journal only means the next host probes for the board's number instead of reading it)."""
    line = raw.strip()
    if not line:
        return None
    crc, _, body = line.partition(b" ")
    try:
        if int(crc, 16) != zlib.crc32(body):
            raise ValueError("CRC mismatch")
        data = json.loads(body)
        seq, pid, at, command = int(data["seq"]), int(data["pid"]), float(data["t"]), str(data["cmd"])
        if not 0 <= seq < SEQ_MODULO:
            raise ValueError(f"sequence number {seq} outside 0..2^32-1")
    except (ValueError, KeyError, TypeError) as exc:
        log.info("ignoring an unreadable link journal record (%s): %r", exc, raw[:80])
        return None
    return JournalEntry(seq, command, pid, at)


def prune_journals(state_dir: Path, now: float, older_than_s: float = STALE_AFTER_S) -> int:
    """Remove the journals in `state_dir` not written for `older_than_s` seconds; returns how many."""
    removed = 0
    try:
        candidates = list(state_dir.glob(f"*{JOURNAL_SUFFIX}"))
    except OSError:
        return 0
    for path in candidates:
        try:
            if now - path.stat().st_mtime > older_than_s:
                path.unlink()
                removed += 1
        except OSError:  # another process removed or rewrote it meanwhile
            continue
    return removed


class LinkJournal:
    """The journal of one port, open for one host's sessions on it. `record(seq, command)` before each command is
    sent; `last()` reads what the previous session left (read it before the first record of this one)."""

    def __init__(self, path: Path, *, pid: int | None = None, wall_clock: Callable[[], float] = time.time):
        self.path = path
        self._pid = os.getpid() if pid is None else pid
        self._wall_clock = wall_clock
        self._fd: int | None = None

    @classmethod
    def for_port(cls, state_dir: Path, url: str, **kwargs: object) -> "LinkJournal":
        """The journal of `url` in `state_dir` (created, owner-only, with the folder; stale journals pruned)."""
        journal = cls(journal_path(Path(state_dir), url), **kwargs)  # type: ignore[arg-type]
        prune_journals(journal.path.parent, journal._wall_clock())
        return journal

    def last(self) -> JournalEntry | None:
        """What the last session on this port recorded (None: no journal, or an unreadable one)."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(RECORD_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.info("cannot read the link journal %s: %s", self.path, exc)
            return None
        return decode_record(raw)

    def record(self, seq: int, command: str = "") -> None:
        """Overwrite the record with `seq` (the number of the command about to be sent). A journal that cannot be
        written is logged once and given up: it only speeds up a later recovery, it must not stop a command."""
        if self._fd == -1:
            return
        try:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.pwrite(self._fd, encode_record(JournalEntry(seq, command, self._pid, self._wall_clock())), 0)
        except OSError as exc:
            log.warning("cannot write the link journal %s (%s); a later recovery will probe instead", self.path, exc)
            self.close()
            self._fd = -1

    def started(self) -> None:
        """The board announced itself to this session: nothing numbered yet in its fresh numbering."""
        self.record(SEQ_START, "")

    def close(self) -> None:
        if self._fd is not None and self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
