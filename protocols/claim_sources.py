"""Claims for a command: the packaged set, or the user's claim files and folders, checked against this product.

Why a module of its own: protocols.claims validates a file's shape and its parts, but whether a protocol key
names a declared protocol is known only to protocols.registry, which itself imports claims. Joining the two
here keeps protocols/ free of an import cycle, and every command (check, run, matrix, extract, serve) loads
claims the same way, so a claim refused by one is refused by all.

A run records the pool it graded (`claim_pool.json`: the sources and every claim's full definition with the
datasheet identities it was checked against), so `score`, `report` and a later reader grade the run's cells
against the claims the run had, not against whatever the package holds today; a folder without one (an older
run) falls back to the pool `run` grades by default (load_main_job_claims), never to the packaged set alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from firmware_bridge.model_file import ModelFileError, read_data_file
from protocols.claims import Claim, ClaimFileError, load_claim_sources, parse_claim
from protocols.datasheets import DatasheetIdentity, known_datasheets
from protocols.files import write_json_atomic
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


class ClaimSelectionError(ValueError):
    """--claims named ids where the command takes only claim files or folders."""


def command_claims(claims: Sequence[str] | None, *, ids: bool = False) -> dict[str, Claim]:
    """The claims a command grades from its `--claims` values (split_claims_args), checked; no files given: the
    one pool `run` grades (load_main_job_claims), so every command knows the same ids. Claim ids among the values
    are a selection only where the command takes one (`ids`); elsewhere they are refused as missing paths."""
    paths, selected = split_claims_args(claims)
    if selected is not None and not ids:
        raise ClaimSelectionError(f"--claims: expected a claim file or folder, got {', '.join(selected)} "
                                  "(no such path)")
    return load_main_job_claims(paths)


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


def main_job_datasheets() -> list[DatasheetIdentity]:
    """Every datasheet the main job's default pool uses: the packaged parts table (protocols/data/datasheets.yaml),
    then the parts the chamber-parts claim files declare, each once, in that order."""
    out = {d.part: d for d in known_datasheets()}
    for claim in load_main_job_claims(None).values():
        out.setdefault(claim.identity.part, claim.identity)
    return list(out.values())


# ------------------------------------------------------------------------------------------- a run's claim pool
RUN_POOL_FILE = "claim_pool.json"
"""The claim pool a run graded, in its run folder (write_run_pool, load_run_pool)."""
RUN_POOL_FORMAT = 1
RUN_POOL_MAX_BYTES = 16 << 20
"""A pool holds every claim of a run in full; a user's claim folder may be far larger than the packaged one's ~0.1 MB."""


class RunPool(BaseModel):
    """claim_pool.json: where the claims came from, the datasheet identities they were checked against, and each
    claim's full definition (Claim.model_dump(mode="json"); validated again on reading)."""

    model_config = ConfigDict(extra="forbid")

    format: int = RUN_POOL_FORMAT
    sources: list[str]
    parts: list[DatasheetIdentity]
    claims: list[dict[str, Any]]


def write_run_pool(run_dir: Path, claims: Mapping[str, Claim] | Iterable[Claim], sources: Sequence[str | Path]
                   ) -> Path:
    """Write run_dir/claim_pool.json atomically: `sources` (the claim files or folders, as the run names them) and
    every claim of `claims` in full, with the datasheet identity of each part, so load_run_pool rebuilds the same
    Claim objects without the original files. Returns the file's path."""
    pool = list(claims.values()) if isinstance(claims, Mapping) else list(claims)
    parts: dict[str, DatasheetIdentity] = {}
    for c in pool:
        parts.setdefault(c.identity.part, c.identity)
    data = RunPool(sources=[str(s) for s in sources], parts=list(parts.values()),
                   claims=[c.model_dump(mode="json") for c in pool])
    return write_json_atomic(Path(run_dir) / RUN_POOL_FILE, data.model_dump(mode="json"))


def load_run_pool(run_dir: Path) -> dict[str, Claim] | None:
    """The claims a run recorded in run_dir/claim_pool.json, keyed by id; None when the folder has no such file (an
    older run). A damaged file raises ClaimFileError naming the file (and the claim and field when one is bad)."""
    path = Path(run_dir) / RUN_POOL_FILE
    if not path.is_file():
        return None
    pool = read_run_pool(path)
    parts = tuple(pool.parts)
    out: dict[str, Claim] = {}
    for entry in pool.claims:
        claim = parse_claim(entry, str(path), parts=parts)
        if claim.id in out:
            raise ClaimFileError(str(path), claim.id, "id", "duplicate claim id")
        out[claim.id] = claim
    return out


def read_run_pool(path: Path) -> RunPool:
    """The pool file's envelope (sources, parts, claims as data); ClaimFileError names what was expected."""
    try:  # the one strict reader: a repeated key or an empty file is a damaged pool, not a quiet default
        doc = read_data_file(path, what="claim pool", expected="a claim pool (JSON) written by a run",
                             max_bytes=RUN_POOL_MAX_BYTES)
    except ModelFileError as e:
        raise ClaimFileError(str(path), None, None, e.problem) from None
    try:
        pool = RunPool.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        raise ClaimFileError(str(path), None, ".".join(map(str, err["loc"])) or None,
                             f"{err['msg']} (expected a claim pool written by a run)") from e
    if pool.format != RUN_POOL_FORMAT:
        raise ClaimFileError(str(path), None, "format", f"expected format {RUN_POOL_FORMAT}, got {pool.format}")
    return pool


MAIN_JOB_POOL = f"the packaged claims + protocols/data/{CHAMBER_PARTS_DIR.name} (what `run` grades by default)"


def run_pool_dir(path: Path, *, levels: int = 2) -> Path | None:
    """The run folder holding the claim pool for `path` (a run folder, its cells/ folder, or a record in it): the
    nearest of the path's folder and the `levels` folders above it with a claim_pool.json; None if none has one."""
    here = Path(path)
    folder = here if here.is_dir() else here.parent
    for candidate in [folder, *list(folder.parents)[:levels]]:
        if (candidate / RUN_POOL_FILE).is_file():
            return candidate
    return None


GIVEN_CLAIMS = "the claims given (--claims)"
"""Where claims_for_run says its claims came from when the caller gave them."""


def claims_for_run(path: Path, given: Mapping[str, Claim] | None = None) -> tuple[dict[str, Claim], str]:
    """The claims to grade what lies at `path` against, and where they came from: `given` when the caller has
    them (`--claims`: they win over anything recorded), else the run's recorded pool when there is one
    (run_pool_dir; a damaged one raises ClaimFileError, never a quiet fallback), else the main job's default pool
    (MAIN_JOB_POOL). The one reader of a run's pool: scoring and the report both ask it."""
    if given is not None:
        return dict(given), GIVEN_CLAIMS
    folder = run_pool_dir(path)
    pool = load_run_pool(folder) if folder is not None else None
    if pool is not None and folder is not None:
        return pool, str(folder / RUN_POOL_FILE)
    return load_main_job_claims(None), MAIN_JOB_POOL
