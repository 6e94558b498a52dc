"""The lab's files are its owner's alone: the data folder 0700, the database and its -wal/-shm 0600, whatever the
umask.

Why: the SQLite file holds every user's password hash, the download tokens and all the data; in a 0755 folder at
0644 every local account could read it. Modes are set explicitly (never left to the umask): the folder is made
0700 or, when it exists with group or other bits, narrowed to 0700 and said so (the caller's `say`); the database
file is created 0600 before SQLite first opens it, because SQLite creates a database's -wal and -shm with the
database file's own mode; and every start narrows all three again, so a lab made by an older version is fixed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

FOLDER_MODE = 0o700
FILE_MODE = 0o600


class PrivateFileError(OSError):
    """A lab file or folder that cannot be made private to this account (owned by another, a read-only disk)."""


def private_folder(folder: Path, say: Callable[[str], None] | None = None) -> Path:
    """`folder` made (0700) or narrowed to 0700 (said through `say`); PrivateFileError naming it otherwise."""
    folder = Path(folder)
    try:
        folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        mode = stat.S_IMODE(folder.stat().st_mode)
        if mode & 0o077:
            os.chmod(folder, FOLDER_MODE)
            if say is not None:
                say(f"the lab's data folder {folder} was readable by other accounts (mode {mode:04o}); made it "
                    f"{FOLDER_MODE:04o}")
    except OSError as exc:
        raise PrivateFileError(f"cannot make the lab's data folder {folder} private (mode {FOLDER_MODE:04o}): "
                               f"{exc.strerror or exc}") from None
    return folder


def private_file(path: Path) -> None:
    """Narrow an existing file to 0600 (nothing when it does not exist)."""
    try:
        if stat.S_IMODE(os.stat(path).st_mode) != FILE_MODE:
            os.chmod(path, FILE_MODE)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PrivateFileError(f"cannot make {path} private (mode {FILE_MODE:04o}): {exc.strerror or exc}") from None


def private_sqlite(path: str | Path) -> None:
    """Create the database file 0600 if missing; narrow it and its -wal/-shm to 0600. An existing database is
    never opened here: closing any descriptor of a file drops every POSIX lock this process holds on it, SQLite's
    included (a lab served from this process would then see "disk I/O error")."""
    path = Path(path)
    if not path.exists():
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
            os.close(handle)
        except FileExistsError:
            pass
        except OSError as exc:
            raise PrivateFileError(f"cannot create the lab database {path}: {exc.strerror or exc}") from None
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        private_file(name)
