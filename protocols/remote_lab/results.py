"""An experiment's result as the authors' client downloads it: a zip holding `<id>/metadata.yaml` and the rows.

Why this exact shape: `causalchamber.lab.ExperimentDataset` extracts the zip under its root, reads
`<id>/metadata.yaml`, opens `observations_file` (relative to `<id>/`) with pandas and checks `image_directory`
(None for a non-image dataset) — a key it reads unconditionally. The rows are the public dataset layout `chamber
run` writes (chamber/public_csv.py), gathered from the chunks the worker stored as they arrived, so a failed or
canceled experiment's partial rows make a valid zip too. The checksum is the SHA-256 of exactly the bytes built
here; the store keeps both in one transaction.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from typing import Any, Sequence

import yaml

OBSERVATIONS_FILE = "observations.csv"


def build_zip(experiment_id: str, header: str | None, chunks: Sequence[str], n_rows: int,
              metadata: dict[str, Any]) -> tuple[bytes, str]:
    """(zip bytes, their SHA-256 hex). `header` None: nothing was measured (a header-less empty CSV would not
    load; the metadata says 0 observations and the file holds only what is known: no columns)."""
    meta = {"experiment_id": experiment_id, "observations_file": OBSERVATIONS_FILE, "n_observations": n_rows,
            "image_directory": None, **metadata}
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{experiment_id}/metadata.yaml", yaml.safe_dump(meta, sort_keys=False))
        csv = "".join(([header + "\n"] if header else []) + list(chunks))
        archive.writestr(f"{experiment_id}/{OBSERVATIONS_FILE}", csv)
    data = body.getvalue()
    return data, hashlib.sha256(data).hexdigest()
