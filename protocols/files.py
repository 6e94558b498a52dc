"""JSON files of a run folder, written so that a killed process never leaves half a file behind.

Why one helper: the main job writes checks.json, sweep.json, link.json, scores.json and summary.json from two
floors (protocols/ and agent/), and the report trusts that a file that exists is complete. Writing to a `.part`
file and renaming it over the target is atomic on POSIX, so a reader sees the old file or the new one, never a
torn one. A write that fails (a full disk) removes its `.part` file and raises WriteFailed naming the path, so a
run can say which file it could not write. `json_default` is the one rule for what the project's JSON may hold beyond plain types (numpy scalars
and arrays, pydantic models, paths); the CLI's --json output uses it too.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import numpy as np


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


class WriteFailed(OSError):
    """A file that could not be written (no space left, a file-size limit, no permission); names the file."""


def write_failed(exc: OSError, path: Path | str) -> WriteFailed:
    """`exc` as one line naming `path`: `no space left writing runs/<id>/checks.json`."""
    what = {errno.ENOSPC: "no space left", errno.EFBIG: "file too large", errno.EDQUOT: "disk quota exceeded"}.get(
        exc.errno or 0, (exc.strerror or type(exc).__name__).lower())
    failed = WriteFailed(f"{what} writing {path}")
    failed.errno = exc.errno
    return failed


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write `data` as indented JSON to `path` through `path.part` and a rename; returns `path`. On failure the
    `.part` file is removed and WriteFailed names `path`."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".part")
    text = json.dumps(data, indent=2, default=json_default) + "\n"
    try:
        _write_text(tmp, text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_failed(exc, path) from exc
    return path


def _write_text(tmp: Path, text: str) -> None:
    tmp.write_text(text, encoding="utf-8")
