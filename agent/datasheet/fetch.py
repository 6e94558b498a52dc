"""Fetch the datasheets the job uses from their public URLs (or a mirror) and keep each only if its SHA-256 is the
one the project records.

Why: the project never ships the manufacturers' PDFs; it names each by part, revision, URL and hash. A user fetches
the files, and a download whose hash differs (a changed upstream file, a truncated transfer, an error page) is
refused and deleted, never half-kept. "The job's datasheets" are the packaged parts table plus the parts the
chamber-parts claim files declare (protocols.claim_sources.main_job_datasheets), so `fetch --all` gives `run`
every document it opens. A mirror (a folder, file:// or http(s):// URL) holds the files under the names the job
uses (DPS310.pdf, ...) or under the upstream repository's names (barometer.pdf, ...). The getter is passed in, so
tests serve the real PDFs from a folder or from 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import unquote, urlparse

from protocols.datasheets import DatasheetIdentity, datasheet_for, sha256_of

log = logging.getLogger(__name__)

HttpGetter = Callable[[str], bytes]


class FetchError(Exception):
    """A datasheet could not be fetched, or what arrived is not the recorded document."""


class SourceMissing(FetchError):
    """The source holds no such file (HTTP 404, no file in the mirror folder): the next candidate name is tried."""


class HashMismatch(FetchError):
    pass


@dataclass
class FetchResult:
    part: str
    path: Path
    sha256: str
    downloaded: bool  # False when a verified copy was already there
    source: str = ""  # where the bytes came from (a URL or a mirror file); "" when a verified copy was kept


def httpx_getter(timeout_s: float = 60.0) -> HttpGetter:
    """The real getter: http(s) URLs with one GET (redirects followed; 404 is SourceMissing, any other status
    but 200 a FetchError), file:// URLs and plain paths read from disk (absent: SourceMissing)."""

    def get(url: str) -> bytes:
        parsed = urlparse(url)
        if parsed.scheme in ("http", "https"):
            import httpx

            with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
                r = client.get(url)
            if r.status_code == 404:
                raise SourceMissing(f"GET {url} returned HTTP 404")
            if r.status_code != 200:
                raise FetchError(f"GET {url} returned HTTP {r.status_code}, expected 200")
            return r.content
        path = Path(unquote(parsed.path)) if parsed.scheme == "file" else Path(url)
        if parsed.scheme not in ("file", "") and len(parsed.scheme) > 1:  # one letter: a Windows drive
            raise FetchError(f"{url}: expected an http(s):// or file:// URL or a folder, got scheme {parsed.scheme!r}")
        if not path.is_file():
            raise SourceMissing(f"{path}: no such file")
        return path.read_bytes()

    return get


def mirror_sources(identity: DatasheetIdentity, mirror: str) -> list[str]:
    """Where a mirror may hold `identity`: under the job's file name (DPS310.pdf), then under the upstream name
    of its recorded URL (barometer.pdf)."""
    names = list(dict.fromkeys([identity.filename, identity.url.rsplit("/", 1)[-1]]))
    if urlparse(mirror).scheme in ("http", "https", "file"):
        return [f"{mirror.rstrip('/')}/{name}" for name in names]
    return [str(Path(mirror) / name) for name in names]


def fetch_datasheet(identity: DatasheetIdentity, directory: Path, get: HttpGetter, url: str | None = None,
                    sources: list[str] | None = None) -> FetchResult:
    """Download `identity` into `directory` (unless a verified copy is there) and verify its SHA-256. The bytes come
    from `url`, else the first of `sources` that holds the file (SourceMissing moves on), else the recorded URL."""
    directory = Path(directory)
    target = directory / identity.filename
    if target.exists() and sha256_of(target) == identity.sha256:
        return FetchResult(identity.part, target, identity.sha256, downloaded=False)
    candidates = [url] if url else (sources or [identity.url])
    data, source = _first_found(identity, candidates, get)
    got = _sha(data)
    if got != identity.sha256:
        raise HashMismatch(
            f"{identity.filename} from {source}: expected SHA-256 {identity.sha256} ({identity.part} "
            f"{identity.revision}), got {got} ({len(data)} bytes); the download was not kept")
    directory.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return FetchResult(identity.part, target, got, downloaded=True, source=source)


def _first_found(identity: DatasheetIdentity, candidates: list[str], get: HttpGetter) -> tuple[bytes, str]:
    missing: list[str] = []
    for source in candidates:
        try:
            return get(source), source
        except SourceMissing:
            missing.append(source)
        except FetchError:
            raise
        except Exception as exc:
            raise FetchError(f"could not download {identity.filename} ({identity.part}) from {source}: "
                             f"{type(exc).__name__}: {exc}") from exc
    raise FetchError(f"{identity.filename} ({identity.part}): expected it at {' or '.join(missing)}; not found")


def identities(part: str | None) -> list[DatasheetIdentity]:
    """One named part (case-insensitive), or every datasheet the job uses when `part` is None."""
    from protocols.claim_sources import main_job_datasheets

    known = main_job_datasheets()
    return known if part is None else [datasheet_for(part, tuple(known))]


def fetch_datasheets(part: str | None, folder: Path, mirror: str | None, *, get: HttpGetter | None = None,
                     say: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Fetch one part's datasheet (every datasheet the job uses with `part` None) into `folder`, each SHA-256
    verified: from `mirror` (a folder or URL holding the job's file names or the upstream ones) or the recorded
    URLs. Per datasheet: part, file, path, the recorded URL and SHA-256, where the bytes came from, and whether
    they were downloaded (False: a verified copy was already there)."""
    get = get or httpx_getter()
    results = []
    for ident in identities(part):
        sources = mirror_sources(ident, mirror) if mirror else [ident.url]
        say(f"fetching {ident.part} ({ident.revision}) from {' or '.join(sources)}")
        r = fetch_datasheet(ident, Path(folder), get, sources=sources)
        results.append({"part": r.part, "file": ident.filename, "path": str(r.path), "url": ident.url,
                        "sha256": r.sha256, "source": r.source or str(r.path), "downloaded": r.downloaded})
    return {"folder": str(folder), "fetched": results}


def fetch_text(d: Mapping[str, Any]) -> str:
    return "\n".join(f"{x['part']}: {x['path']} sha256 {x['sha256']} ok "
                     f"({'downloaded from ' + x['source'] if x['downloaded'] else 'already there'})"
                     for x in d["fetched"])


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
