"""Claims for a command: the packaged set, or the user's claim files and folders, checked against this product.

Why a module of its own: protocols.claims validates a file's shape and its parts, but whether a protocol key
names a declared protocol is known only to protocols.registry, which itself imports claims. Joining the two
here keeps protocols/ free of an import cycle, and every command (check, run, matrix, extract, serve) loads
claims the same way, so a claim refused by one is refused by all.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from protocols.claims import Claim, load_claim_sources
from protocols.registry import BY_KEY


def load_checked_claims(paths: Sequence[str | Path] | None = None) -> dict[str, Claim]:
    """Claims from `paths` (files or folders; None or empty: the packaged set), each naming a known part, a
    datasheet of the right SHA-256 and declared protocols; ClaimFileError names the file, the claim and the field."""
    return load_claim_sources(paths, known_protocols=BY_KEY)


def split_claims_args(values: Sequence[str] | None) -> tuple[list[Path], list[str] | None]:
    """`--claims` values as (claim files or folders, claim ids or None for all).

    A value is a path when it exists, ends in .yaml/.yml or contains a path separator; otherwise it is `all` or
    comma-separated claim ids (the selection `run` and `matrix` took before claim files could be given). A value
    that looks like a path but does not exist is kept as a path, so the loader names it as missing."""
    paths: list[Path] = []
    ids: list[str] | None = None
    for value in values or []:
        if Path(value).exists() or value.endswith((".yaml", ".yml")) or "/" in value:
            paths.append(Path(value))
        elif value.strip() != "all":
            ids = (ids or []) + [c.strip() for c in value.split(",") if c.strip()]
    return paths, ids


CHAMBER_PARTS_DIR = Path(__file__).resolve().parent / "data" / "chamber_parts"
"""Claims on the chamber's other parts (fans, potentiometers, angle sensors, polarizer film): not the seed's 37."""


def load_main_job_claims(paths: Sequence[str | Path] | None = None) -> dict[str, Claim]:
    """What the main job (`run`) grades: the user's `paths` when given; otherwise the packaged set plus the
    chamber-parts claims (CHAMBER_PARTS_DIR), so the chamber-only envelope counts them."""
    if paths:
        return load_checked_claims(paths)
    packaged = load_checked_claims(None)
    extra = load_checked_claims([CHAMBER_PARTS_DIR])
    clash = sorted(set(packaged) & set(extra))
    if clash:
        raise ValueError(f"{CHAMBER_PARTS_DIR}: claim ids also in the packaged set: {', '.join(clash)}")
    return {**packaged, **extra}
