"""Canonical JSON and its SHA-256: the bytes that identify a frozen extraction or a tool surface.

Why one module: the agent hashes the payload it submits and the chamber tools API hashes the payload it freezes;
the two digests must agree, so both call this. Sorted keys, no spaces, UTF-8, and no NaN or infinity (JSON has
none, and a frozen payload must mean the same thing to every reader).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_sha256(value: Any) -> str:
    return sha256_hex(canonical_json(value))
