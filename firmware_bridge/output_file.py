"""Files a user names for a command to write: refused before any work when they would overwrite a record, and
then written whole or not at all.

Why one rule (issue 31): `chamber run -o existing.csv` overwrote a recording silently, a full disk left a torn
file behind an error that named no path, and a read-only folder was found only after the chamber had been opened
(and so reset). Every command that writes a file the user names (chamber run's CSV, a calibration record, the
sweep's CSV and figure, `sim fit -o`, `datasheet page --out`, `score --out`) follows this one:

- before any work (before a chamber is opened), `check_output_path` refuses a path that exists unless the user
  said --force, a path that is a folder, a folder that does not exist, and a folder in which this process cannot
  create a file. The last is tried, not guessed from mode bits: a read-only mount, an ACL and root's rights each
  answer truthfully only to an attempt.
- while writing, the bytes go to a temporary file beside the target (`<name>.<pid>.part`: the same folder, so the
  rename is atomic on POSIX, and a visible name, so that rows streamed before a power cut are found), which is
  flushed, fsync'd (a delayed-allocation file system may report a full disk only then) and renamed over the
  target (`staged_output`, `write_file_atomic`). A write that fails (a full disk, a file-size limit) removes the
  temporary file, leaves a file already at the target as it was and raises WriteFailed naming the target.
- without force the final rename refuses to replace a file that appeared meanwhile (a hard link fails when its
  name exists), so a file someone else wrote during an hours-long run is not lost; the new one is kept under its
  temporary name and the error names both.

Why on this floor: chamber/ (floor 3) writes a run's CSV and protocols/ and agent/ write the others; firmware_bridge/
is the one floor all of them may import (as model_file.py is, for reading). Nothing here touches the wire.
protocols/files.py re-exports these names for the floors above.
"""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


class OutputPathRefused(ValueError):
    """An output path refused before any work: it exists (and --force was not given), it is a folder, or its folder
    is missing or not writable. The message names the option, the path and the reason."""


class WriteFailed(OSError):
    """A file that could not be written (no space left, a file-size limit, no permission); names the file."""


def write_failed(exc: OSError, path: Path | str, note: str = "") -> WriteFailed:
    """`exc` as one line naming `path`: `no space left writing runs/<id>/checks.json` (and `note`, if any)."""
    what = {errno.ENOSPC: "no space left", errno.EFBIG: "file too large", errno.EDQUOT: "disk quota exceeded"}.get(
        exc.errno or 0, (exc.strerror or type(exc).__name__).lower())
    failed = WriteFailed(f"{what} writing {path}" + (f" ({note})" if note else ""))
    failed.errno = exc.errno
    return failed


def _label(path: Path, option: str | None) -> str:
    return f"{option} {path}" if option else str(path)


def check_output_path(path: str | Path, *, force: bool = False, option: str | None = None) -> Path:
    """`path` if a command may write it: a file name (not a folder) in a folder that exists and in which a file
    can be created, and either new or `force` given. OutputPathRefused otherwise, naming `option` (the command
    line option that gave the path, e.g. "-o"), the path and why; nothing is left behind by the check."""
    path = Path(path)
    label = _label(path, option)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        is_folder, exists, has_folder = path.is_dir(), os.path.lexists(path), folder.is_dir()
    except OSError as exc:  # e.g. a name longer than the file system takes
        raise OutputPathRefused(f"{label}: cannot be written ({exc.strerror or type(exc).__name__})") from None
    if is_folder:
        raise OutputPathRefused(f"{label}: expected a file name, got a folder")
    if exists and not force:
        size = path.stat().st_size if path.exists() else 0
        raise OutputPathRefused(f"{label}: a file is already there ({size} bytes); expected a new file name "
                                "(--force replaces it once the new one is complete)")
    if not has_folder:
        raise OutputPathRefused(f"{label}: folder {folder} does not exist; expected an existing folder")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name[:100]}.", suffix=".probe")
    except OSError as exc:
        raise OutputPathRefused(f"{label}: folder {folder} is not writable "
                                f"({exc.strerror or type(exc).__name__})") from None
    os.close(fd)
    os.unlink(probe)
    return path


def temporary_path(path: Path) -> Path:
    """Where `path` is written before it is renamed into place: beside it, `<name>.<pid>.part`."""
    return path.with_name(f"{path.name}.{os.getpid()}.part")


class _Guarded:
    """A file stream whose write and flush failures are WriteFailed naming the target (not the temporary file)."""

    def __init__(self, stream: IO[Any], target: Path, note: str) -> None:
        self._stream, self._target, self._note = stream, target, note

    def write(self, data: Any) -> int:
        try:
            return self._stream.write(data)
        except OSError as exc:
            raise write_failed(exc, self._target, self._note) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise write_failed(exc, self._target, self._note) from exc

    def finish(self) -> None:
        """Flush, fsync and close: everything written is on the disk, or WriteFailed."""
        try:
            self._stream.flush()
            os.fsync(self._stream.fileno())
        except OSError as exc:
            raise write_failed(exc, self._target, self._note) from exc
        finally:
            try:
                self._stream.close()
            except OSError:  # a close after a failed flush may fail again; the failure is already raised
                pass


@contextmanager
def staged_output(path: str | Path, *, force: bool = False, binary: bool = False) -> Iterator[Any]:
    """Write `path` through its temporary file (temporary_path): yields a stream (text, UTF-8, "\\n" line ends,
    or bytes with `binary`). Leaving the block, normally or by any exception but a write failure (a run stopped by
    Ctrl-C, a chamber error: the rows written are kept), finishes the file and renames it to `path`. A write,
    flush or fsync that fails removes the temporary file, leaves a file already at `path` as it was and raises
    WriteFailed naming `path`. Without `force`, a file that appeared at `path` meanwhile is not replaced: the new
    one stays under its temporary name and WriteFailed names both (a file there before the start is refused at
    once: OutputPathRefused)."""
    path = Path(path)
    tmp = temporary_path(path)
    existed = os.path.lexists(path)
    if existed and not force:
        raise OutputPathRefused(f"{path}: a file is already there; expected a new file name (or force)")
    note = "the file already there is unchanged" if existed else "no file was made"
    try:
        raw = open(tmp, "xb") if binary else open(tmp, "x", encoding="utf-8", newline="")
    except OSError as exc:
        raise write_failed(exc, path, note) from exc
    stream = _Guarded(raw, path, note)
    try:
        yield stream
    except WriteFailed:
        try:
            raw.close()  # flushes what is buffered: on a full disk that fails again, and is already reported
        except OSError:
            pass
        tmp.unlink(missing_ok=True)
        raise
    except BaseException:
        _finish(stream, tmp, path, force)  # the rows of a stopped or failed run are kept
        raise
    _finish(stream, tmp, path, force)


def _finish(stream: _Guarded, tmp: Path, path: Path, force: bool) -> None:
    try:
        stream.finish()
    except WriteFailed:
        tmp.unlink(missing_ok=True)
        raise
    _move_into_place(tmp, path, force)


def _move_into_place(tmp: Path, path: Path, force: bool) -> None:
    """Rename `tmp` to `path`; without `force` never over a file that appeared there since the check."""
    try:
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if `path` exists: no window in which another file is replaced
            except FileExistsError:
                raise WriteFailed(f"{path} appeared while it was being written; the new file is kept as {tmp} "
                                  "(expected no file there: move one of them, or give --force)") from None
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                    raise
                if os.path.lexists(path):  # a file system without hard links: check, then rename
                    raise WriteFailed(f"{path} appeared while it was being written; the new file is kept as "
                                      f"{tmp} (expected no file there: move one of them, or give --force)") from None
                os.replace(tmp, path)
                return
            tmp.unlink()
    except WriteFailed:
        raise
    except OSError as exc:
        raise write_failed(exc, path, f"the new file is kept as {tmp}") from exc
    _sync_folder(path.parent if str(path.parent) else Path("."))


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every file system lets a folder be fsync'd)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file_atomic(path: str | Path, data: bytes | str, *, force: bool = False) -> Path:
    """Write `data` (bytes, or text as UTF-8) to `path` through its temporary file (staged_output); returns `path`."""
    path = Path(path)
    with staged_output(path, force=force, binary=isinstance(data, bytes)) as fh:
        fh.write(data)
    return path
