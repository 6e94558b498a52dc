"""JSON files of a run folder, written so that a killed process never leaves half a file behind.

Why one helper: the main job writes checks.json, sweep.json, link.json, scores.json and summary.json from two
floors (protocols/ and agent/), and the report trusts that a file that exists is complete. Writing to a `.part`
file and renaming it over the target is atomic on POSIX, so a reader sees the old file or the new one, never a
torn one. `json_default` is the one rule for what the project's JSON may hold beyond plain types (numpy scalars
and arrays, pydantic models, paths); the CLI's --json output uses it too.
"""

from __future__ import annotations

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


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write `data` as indented JSON to `path` through `path.part` and a rename; returns `path`."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".part")
    tmp.write_text(json.dumps(data, indent=2, default=json_default) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
