"""Input files are checked before any work: each must be a readable UTF-8 text file, named with its option.

Why: every command reads its YAML, JSON, CSV, protocol and token files as UTF-8; a missing file, a folder, an
unreadable or binary file is refused here, before a chamber is opened, naming the option and the file instead of a
bare UnicodeDecodeError that names neither. Used by the CLI for every command.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any, Iterable, Mapping


class InputFileError(ValueError):
    """An input file that is missing, a folder, unreadable or not UTF-8 text."""


TEXT_FILE_OPTIONS = {"params": "--params", "limits": "--limits", "safe": "--safe", "station": "--station",
                     "calibration": "--calibration", "prices": "--prices", "base": "--base",
                     "token_file": "--token-file", "chamber_token_file": "--chamber-token-file",
                     "recording": "recording", "protocol": "protocol", "station_file": "station_file",
                     "lab_credentials": "--lab-credentials", "password_file": "--password-file"}
"""The command-line options (by their parsed name) that name a text file: YAML, JSON, CSV, protocol, token."""


def input_files(options: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """The (option, file) pairs among a command's parsed options: every claim file of `claims` (a list of paths
    or ids; `station check --claims` is a flag) and each option of TEXT_FILE_OPTIONS that was given."""
    given = options.get("claims")
    claims = [Path(c) for c in given if Path(c).exists()] if isinstance(given, list) else []
    files = [("--claims", f) for c in claims for f in ([c] if c.is_file() else sorted(c.rglob("*.y*ml")))]
    return files + [(option, Path(value)) for dest, option in TEXT_FILE_OPTIONS.items()
                    if (value := options.get(dest)) is not None and not isinstance(value, bool)]


def check_text_files(files: Iterable[tuple[str, Path]]) -> None:
    """Refuse the first (option, path) whose path is not a readable UTF-8 text file (the first MiB is decoded:
    enough to tell text from binary without reading a long recording twice)."""
    for option, path in files:
        if not path.is_file():
            raise InputFileError(f"{option} {path}: " + ("expected a file, got a folder" if path.is_dir() else
                                                         "file not found"))
        try:
            with path.open("rb") as fh:
                codecs.getincrementaldecoder("utf-8")().decode(fh.read(1 << 20), final=False)
        except OSError as exc:
            raise InputFileError(f"{option} {path}: cannot be read ({exc.strerror or exc})") from None
        except UnicodeDecodeError as exc:
            raise InputFileError(f"{option} {path}: expected UTF-8 text, byte {exc.object[exc.start]:#04x} at "
                                 f"offset {exc.start} is not UTF-8") from None
