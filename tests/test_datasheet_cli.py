"""`bench_cli.py datasheet ...` end to end, and `fetch` against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import functools
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

import bench_cli
from agent.datasheet.fetch import HashMismatch, fetch_datasheet, httpx_getter
from conftest import shared_path
from protocols.datasheets import datasheet_for


def _run(capsys, *argv) -> tuple[int, dict]:
    code = bench_cli.main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_build_json(capsys):
    pdf = shared_path("datasheets", "ACS70331.pdf")
    code, data = _run(capsys, "datasheet", "build", str(pdf), "--json")
    assert code == 0
    assert {"pages", "part", "revision", "toc_source", "toc", "tables"} <= set(data)
    assert data["pages"] == 26 and data["toc_source"] == "reconstructed"
    assert all(set(t) == {"level", "title", "page"} for t in data["toc"])
    assert all(set(t) == {"page", "caption"} for t in data["tables"])


def test_search_section_table_page(capsys, tmp_path):
    pdf = str(shared_path("datasheets", "DPS310.pdf"))
    code, data = _run(capsys, "datasheet", "search", pdf, "27.6", "--page", "9", "--json")
    assert code == 0 and data["hits"] and {"page", "snippet", "section"} <= set(data["hits"][0])
    code, data = _run(capsys, "datasheet", "section", pdf, "9", "9", "--json")
    assert code == 0 and data["text"].startswith("=== Page 9 ===")
    code, data = _run(capsys, "datasheet", "table", pdf, "9", "--json")
    assert code == 0 and data["page"] == 9 and "| Pressure measurement rate | f | 1 |" in data["markdown"]
    out = tmp_path / "p9.png"
    code, data = _run(capsys, "datasheet", "page", pdf, "9", "--out", str(out), "--json")
    assert code == 0 and out.read_bytes().startswith(b"\x89PNG")


def test_cli_error_is_typed(capsys, tmp_path):
    code, data = _run(capsys, "datasheet", "table", str(tmp_path / "missing.pdf"), "1", "--json")
    assert code == 2 and data["error"]["type"] == "DocumentNotFound"
    pdf = str(shared_path("datasheets", "A4988.pdf"))
    code, data = _run(capsys, "datasheet", "table", pdf, "99", "--json")
    assert code == 2 and data["error"]["type"] == "PageOutOfRange"


@pytest.fixture
def mirror(tmp_path):
    """A real HTTP server on 127.0.0.1 serving the real DPS310 PDF as barometer.pdf and a wrong light_sensor.pdf."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "barometer.pdf").symlink_to(shared_path("datasheets", "DPS310.pdf"))
    (root / "light_sensor.pdf").symlink_to(shared_path("datasheets", "A4988.pdf"))  # wrong document
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_verifies_hash(mirror, tmp_path):
    ident = datasheet_for("DPS310")
    dest = tmp_path / "sheets"
    r = fetch_datasheet(ident, dest, httpx_getter(10), url=f"{mirror}/barometer.pdf")
    assert r.downloaded and r.path == dest / "DPS310.pdf" and r.sha256 == ident.sha256
    again = fetch_datasheet(ident, dest, httpx_getter(10), url=f"{mirror}/barometer.pdf")
    assert again.downloaded is False


def test_fetch_refuses_wrong_hash_and_keeps_nothing(mirror, tmp_path):
    ident = datasheet_for("Si115x")
    dest = tmp_path / "sheets"
    with pytest.raises(HashMismatch, match="not kept"):
        fetch_datasheet(ident, dest, httpx_getter(10), url=f"{mirror}/light_sensor.pdf")
    assert not dest.exists() or list(dest.iterdir()) == []


def test_fetch_cli_with_mirror(mirror, tmp_path, capsys):
    dest = tmp_path / "sheets"
    code, data = _run(capsys, "datasheet", "fetch", "DPS310", "--dir", str(dest), "--mirror", mirror, "--json")
    assert code == 0 and data["fetched"][0]["part"] == "DPS310"
    code, data = _run(capsys, "datasheet", "fetch", "Si115x", "--dir", str(dest), "--mirror", mirror, "--json")
    assert code == 2 and data["error"]["type"] == "HashMismatch"
    assert sorted(p.name for p in dest.iterdir()) == ["DPS310.pdf"]
    code, data = _run(capsys, "datasheet", "fetch", "--dir", str(dest), "--json")
    assert code == 2 and data["error"]["type"] == "CliError"
