"""Fetch a known datasheet from its public URL and keep it only if its SHA-256 is the one the project records.

Why: the project never ships the manufacturers' PDFs; it names each by part, revision, URL and hash. A user fetches
the file, and a download whose hash differs (a changed upstream file, a truncated transfer, an error page) is
refused and deleted, never half-kept. The HTTP getter is passed in, so tests serve the real PDF from 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from protocols.datasheets import DatasheetIdentity, datasheet_for, known_datasheets, sha256_of

log = logging.getLogger(__name__)

HttpGetter = Callable[[str], bytes]


class FetchError(Exception):
    """A datasheet could not be fetched, or what arrived is not the recorded document."""


class HashMismatch(FetchError):
    pass


@dataclass
class FetchResult:
    part: str
    path: Path
    sha256: str
    downloaded: bool  # False when a verified copy was already there


def httpx_getter(timeout_s: float = 60.0) -> HttpGetter:
    """The real getter: one GET with redirects followed, raising on an HTTP error status."""

    def get(url: str) -> bytes:
        import httpx

        with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
            r = client.get(url)
            if r.status_code != 200:
                raise FetchError(f"GET {url} returned HTTP {r.status_code}, expected 200")
            return r.content

    return get


def fetch_datasheet(
    identity: DatasheetIdentity, directory: Path, get: HttpGetter, url: str | None = None
) -> FetchResult:
    """Download `identity` into `directory` (unless a verified copy is there) and verify its SHA-256."""
    directory = Path(directory)
    target = directory / identity.filename
    if target.exists() and sha256_of(target) == identity.sha256:
        return FetchResult(identity.part, target, identity.sha256, downloaded=False)
    source = url or identity.url
    try:
        data = get(source)
    except FetchError:
        raise
    except Exception as exc:
        raise FetchError(f"could not download {identity.part} from {source}: {type(exc).__name__}: {exc}") from exc
    got = _sha(data)
    if got != identity.sha256:
        raise HashMismatch(
            f"{identity.part} from {source}: SHA-256 {got} ({len(data)} bytes) is not the recorded "
            f"{identity.sha256} ({identity.revision}); the download was not kept"
        )
    directory.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return FetchResult(identity.part, target, got, downloaded=True)


def identities(part: str | None) -> list[DatasheetIdentity]:
    """One named part, or every known datasheet when `part` is None."""
    return known_datasheets() if part is None else [datasheet_for(part)]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
