"""`datasheet fetch --all` covers every datasheet the job uses (issue 24): the packaged four and the chamber parts'
five, each with its recorded URL and SHA-256, from a mirror holding the job's file names or the upstream ones.
No network: the mirrors are folders, file:// URLs and an http.server on 127.0.0.1 serving copies made at test
time from ../shared/datasheets (never committed)."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import bench_cli
from agent.datasheet.fetch import FetchError, HashMismatch, fetch_datasheets, httpx_getter
from conftest import shared_path
from protocols.claim_sources import load_main_job_claims, main_job_datasheets
from protocols.datasheets import sha256_of

JOB = main_job_datasheets()


def _mirror(root: Path, *, upstream: bool = False, skip: tuple[str, ...] = ()) -> Path:
    root.mkdir()
    for d in JOB:
        if d.part not in skip:
            name = d.url.rsplit("/", 1)[-1] if upstream else d.filename
            shutil.copyfile(shared_path("datasheets", d.filename), root / name)
    return root


@contextlib.contextmanager
def _serve(root: Path):
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_job_uses_nine_datasheets_each_recorded_as_provenance_says():
    provenance = shared_path("datasheets", "PROVENANCE.md").read_text(encoding="utf-8")
    assert len(JOB) == 9 and len({d.filename for d in JOB}) == 9
    for d in JOB:
        row = next(line for line in provenance.splitlines() if line.startswith(f"| `{d.filename}`"))
        assert re.search(r"`([0-9a-f]{64})`", row).group(1) == d.sha256, d.filename
        assert d.url.rsplit("/", 1)[-1] in row, d.filename  # the causal-chamber path PROVENANCE names
        assert sha256_of(shared_path("datasheets", d.filename)) == d.sha256
    used = {c.identity.part for c in load_main_job_claims(None).values()}
    assert used <= {d.part for d in JOB}


def _check_all(data: dict, dest: Path, where: str) -> None:
    assert [x["part"] for x in data["fetched"]] == [d.part for d in JOB]
    for x, d in zip(data["fetched"], JOB):
        assert x["file"] == d.filename and x["url"] == d.url and x["sha256"] == d.sha256 and x["downloaded"]
        assert sha256_of(dest / d.filename) == d.sha256 and x["source"].startswith(where)
    assert sorted(p.name for p in dest.iterdir()) == sorted(d.filename for d in JOB)


def test_fetch_all_from_a_mirror_folder_with_the_job_names(tmp_path):
    mirror, dest = _mirror(tmp_path / "mirror"), tmp_path / "sheets"
    _check_all(fetch_datasheets(None, dest, str(mirror)), dest, str(mirror))
    again = fetch_datasheets(None, dest, str(mirror))
    assert not any(x["downloaded"] for x in again["fetched"])


def test_fetch_all_from_a_file_url_with_the_upstream_names(tmp_path):
    mirror, dest = _mirror(tmp_path / "mirror", upstream=True), tmp_path / "sheets"
    data = fetch_datasheets(None, dest, mirror.as_uri())
    _check_all(data, dest, mirror.as_uri())
    assert data["fetched"][0]["source"].endswith("/barometer.pdf")


@pytest.mark.parametrize("upstream", [False, True], ids=["job-names", "upstream-names"])
def test_fetch_all_over_http_from_127_0_0_1(tmp_path, upstream):
    dest = tmp_path / "sheets"
    with _serve(_mirror(tmp_path / "www", upstream=upstream)) as url:
        data = fetch_datasheets(None, dest, url, get=httpx_getter(10))
    _check_all(data, dest, url)
    assert data["fetched"][0]["source"] == f"{url}/{'barometer.pdf' if upstream else 'DPS310.pdf'}"


def test_a_wrong_checksum_is_refused_naming_file_expected_and_got(tmp_path):
    mirror, dest = _mirror(tmp_path / "mirror"), tmp_path / "sheets"
    dps = next(d for d in JOB if d.part == "DPS310")
    wrong = shared_path("datasheets", "A4988.pdf")
    shutil.copyfile(wrong, mirror / "DPS310.pdf")
    with pytest.raises(HashMismatch) as err:
        fetch_datasheets("dps310", dest, str(mirror))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"DPS310.pdf from {mirror / 'DPS310.pdf'}: ")
    assert f"expected SHA-256 {dps.sha256}" in msg and f"got {sha256_of(wrong)}" in msg
    assert not dest.exists() or list(dest.iterdir()) == []


def test_a_datasheet_missing_from_the_mirror_names_both_names_tried(tmp_path):
    mirror = _mirror(tmp_path / "mirror", skip=("XP38",))
    with pytest.raises(FetchError) as err:
        fetch_datasheets("XP38", tmp_path / "sheets", str(mirror))
    assert str(err.value) == (f"XP38-polarizer.pdf (XP38): expected it at {mirror / 'XP38-polarizer.pdf'} or "
                              f"{mirror / 'polarizers.pdf'}; not found")


def test_cli_fetch_all_from_a_mirror_covers_the_nine(tmp_path, capsys):
    mirror, dest = _mirror(tmp_path / "mirror", upstream=True), tmp_path / "sheets"
    code = bench_cli.main(["datasheet", "fetch", "--all", "--dir", str(dest), "--mirror", str(mirror), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and sorted(x["part"] for x in data["fetched"]) == sorted(d.part for d in JOB)
    assert all(sha256_of(dest / d.filename) == d.sha256 for d in JOB)
