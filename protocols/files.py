"""JSON files of a run folder, written so that a killed process never leaves half a file behind.

Why one helper: the main job writes checks.json, sweep.json, link.json, scores.json and summary.json from two
floors (protocols/ and agent/), and the report trusts that a file that exists is complete. Writing to a `.part`
file and renaming it over the target is atomic on POSIX, so a reader sees the old file or the new one, never a
torn one. A write that fails (a full disk) removes its `.part` file and raises WriteFailed naming the path, so a
run can say which file it could not write. `json_default` is the one rule for what the project's JSON may hold beyond plain types (numpy scalars
and arrays, pydantic models, paths); the CLI's --json output uses it too.

Files a user names (an output option) follow firmware_bridge/output_file.py's rule, re-exported here for the floors
above chamber/: `check_output_path(path, force=, option=)` before any work (refused if it exists without --force,
if its folder is missing or not writable), then `write_file_atomic` / `write_json_file` / `staged_output` (a
temporary file beside it, renamed at the end; a failed write leaves an old file whole and names the path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from firmware_bridge.output_file import (OutputPathRefused, WriteFailed, check_output_path, staged_output,
                                         write_failed, write_file_atomic)

__all__ = ["OutputPathRefused", "WriteFailed", "check_output_path", "check_output_paths", "json_default", "json_text",
           "staged_output", "write_failed", "write_file_atomic", "write_json_atomic", "write_json_file"]


def json_default(obj: Any) -> Any:
    """numpy values as Python numbers/lists, pydantic models as their JSON dump, paths as strings."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__} (expected a number, string, list, mapping, "
                    "numpy value, pydantic model or path)")


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write `data` as indented JSON to `path` through `path.part` and a rename; returns `path`. On failure the
    `.part` file is removed and WriteFailed names `path`."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".part")
    text = json_text(data)
    try:
        _write_text(tmp, text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_failed(exc, path) from exc
    return path


def check_output_paths(paths: dict[str, str | Path | None], *, force: bool = False) -> None:
    """check_output_path for each {option: path} given (a None path: the option was not given)."""
    for option, path in paths.items():
        if path is not None:
            check_output_path(path, force=force, option=option)


def json_text(data: Any) -> str:
    """`data` as the project's indented JSON (json_default), ending in a newline."""
    return json.dumps(data, indent=2, default=json_default) + "\n"


def write_json_file(path: Path, data: Any, *, force: bool = False) -> Path:
    """A JSON file the user named (`sim fit -o`, `score --out`): json_text through write_file_atomic, so an
    existing file is replaced only with `force` and only once the new one is complete."""
    return write_file_atomic(path, json_text(data), force=force)


def _write_text(tmp: Path, text: str) -> None:
    tmp.write_text(text, encoding="utf-8")
