"""Damaged documents named as such (issue 31, item 8).

A datasheet that cannot be read — a page tree that loops, a /Count that lies, a user password, pages that are only
images, a cut download, a file that is no PDF — gives one line naming the file and the reason in every `datasheet`
command (exit 2; no traceback, no MuPDF internals on either stream) and in every agent tool. An agent cell on it
ends `document_unreadable` before the model is asked (or as soon as a tool meets it), with the reason on run_end,
and scoring charges it to the document: fidelity not scored, the detector not evaluated, no reasoning label.

Every damaged file is made here from the real ACS70331 datasheet (read in place, written to tmp).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pymupdf
import pytest

import bench_cli
from agent.datasheet import DatasheetSession, DocumentUnreadable, ManifestCache, build_datasheet, datasheet_tools
from agent.datasheet.document import ImageOnlyPdf, NoTextLayer, open_pdf, page_tree_fault
from agent.datasheet.manifest import Manifest
from agent.loop import Budget, run_cell
from agent.models.scripted import ScriptedModel, call
from agent.record import validate_record
from agent.scoring.attribution import attribute
from agent.scoring.cells import facts_from_record
from agent.scoring.score import score_paths
from conftest import shared_path
from protocols.claims import load_claims
from protocols.datasheets import sha256_of
from support import SteppingClock, cli_subprocess

CLAIM = "acs70331-bandwidth"
SOURCE = "ACS70331.pdf"  # the claim's datasheet: 26 pages, a page tree of 6 nodes under its root
KINDS = ("page_tree_cycle", "lying_count", "encrypted", "image_only", "truncated", "not_a_pdf")
_REF = re.compile(r"(\d+) 0 R")


@dataclasses.dataclass(frozen=True)
class Damaged:
    """A damaged copy and the one line every reader of it must give: the error type and the whole message."""

    path: Path
    error_type: str
    message: str

    @property
    def line(self) -> str:
        return f"{self.error_type}: {self.message}"


def _tree_root(doc: pymupdf.Document) -> int:
    return int(_REF.fullmatch(doc.xref_get_key(doc.pdf_catalog(), "Pages")[1]).group(1))


def _make(kind: str, src: Path, folder: Path) -> Damaged:
    """A copy of `src` damaged in one way (by editing its objects with PyMuPDF or its bytes), with what it must say."""
    p = folder / f"{kind}.pdf"
    if kind == "page_tree_cycle":  # the root's first inner node lists the root among its kids
        with pymupdf.open(src) as doc:
            root = _tree_root(doc)
            kids = [int(k) for k in _REF.findall(doc.xref_get_key(root, "Kids")[1])]
            node = next(k for k in kids if doc.xref_get_key(k, "Kids")[0] == "array")
            doc.xref_set_key(node, "Kids", _REF.sub(f"{root} 0 R", doc.xref_get_key(node, "Kids")[1], count=1))
            doc.save(p)
        return Damaged(p, "DamagedPdf", f"{p}: not a readable PDF (damaged page tree: a cycle: object {node} lists "
                                        f"object {root} among its kids, which is its own ancestor)")
    if kind == "lying_count":  # the root says 96 pages; its kids hold the 26 there are
        with pymupdf.open(src) as doc:
            root = _tree_root(doc)
            doc.xref_set_key(root, "Count", "96")
            doc.save(p)
        return Damaged(p, "DamagedPdf", f"{p}: not a readable PDF (damaged page tree: the root (object {root}) says "
                                        "/Count 96, its /Kids hold 26 pages)")
    if kind == "encrypted":
        with pymupdf.open(src) as doc:
            doc.save(p, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="user", owner_pw="owner")
        return Damaged(p, "EncryptedPdf", f"{p}: an encrypted PDF (it needs a password); expected an unencrypted "
                                          "one: supply a decrypted copy")
    if kind == "image_only":  # a scan: its first two pages as pictures, no text layer
        with pymupdf.open(src) as doc, pymupdf.open() as scan:
            for page in list(doc)[:2]:
                scan.new_page(width=page.rect.width, height=page.rect.height).insert_image(
                    page.rect, pixmap=page.get_pixmap(dpi=40))
            scan.save(p)
        return Damaged(p, "ImageOnlyPdf", f"{p}: image only, no text layer on any of its 2 pages (a scan?); "
                                          "expected a PDF with a text layer: run OCR on it first (e.g. ocrmypdf)")
    if kind == "truncated":  # a download cut at half its bytes
        data = src.read_bytes()
        p.write_bytes(data[: len(data) // 2])
        return Damaged(p, "DamagedPdf", f"{p}: not a readable PDF (truncated or damaged: it ends after "
                                        f"{len(data) // 2} bytes without the closing %%EOF marker)")
    assert kind == "not_a_pdf"  # a picture of the first page saved under the datasheet's name
    with pymupdf.open(src) as doc:
        p.write_bytes(doc[0].get_pixmap(dpi=20).tobytes("png"))
    return Damaged(p, "NotAPdf", f"{p}: not a PDF (expected the header %PDF- in its first 1024 bytes; it starts "
                                 "with \".PNG........IHDR\")")


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict[str, Damaged]:
    src = shared_path("datasheets", SOURCE)
    folder = tmp_path_factory.mktemp("damaged")
    return {kind: _make(kind, src, folder) for kind in KINDS}


# ------------------------------------------------------------------------------------------------- the damage
def test_the_page_tree_damage_is_real_mupdf_alone_is_fooled(damaged):
    """Without the page-tree check MuPDF serves the lie: 96 pages, 70 of them missing; pages lost in a cycle."""
    with pymupdf.open(damaged["lying_count"].path) as doc:
        assert doc.page_count == 96
        with pytest.raises(Exception, match="page"):
            doc.load_page(30).get_text()
    with pymupdf.open(damaged["page_tree_cycle"].path) as doc:
        with pytest.raises(Exception, match="cycle in page tree"):
            for page in doc.pages():
                page.get_text()


def test_every_real_datasheet_has_a_sound_page_tree():
    for pdf in sorted(shared_path("datasheets").glob("*.pdf")):
        with open_pdf(pdf) as doc:
            assert page_tree_fault(doc) is None, pdf


# ------------------------------------------------------------------------------------------------- the CLI
def _cli(capfd, *argv: str) -> tuple[int, str, str]:
    """bench_cli.main in this process, with both file descriptors captured (what MuPDF itself would print too)."""
    capfd.readouterr()
    code = bench_cli.main(list(argv))
    out, err = capfd.readouterr()
    return code, out, err


COMMANDS = {"build": [], "search": ["Bandwidth"], "section": ["1", "2"], "table": ["5"], "page": ["1", "--out"]}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_datasheet_command_names_the_file_and_the_reason(capfd, damaged, tmp_path, kind, command):
    d = damaged[kind]
    png = tmp_path / "page.png"
    argv = ["datasheet", command, str(d.path), *COMMANDS[command]] + ([str(png)] if command == "page" else [])
    code, out, err = _cli(capfd, *argv)
    assert (code, out, err) == (2, "", f"error: {d.line}\n")
    code, out, err = _cli(capfd, "--json", *argv)
    assert (code, err) == (2, "") and out.count("\n") == 1
    assert json.loads(out) == {"error": {"type": d.error_type, "message": d.message}}
    assert not png.exists()


@pytest.mark.parametrize("kind", ["page_tree_cycle", "lying_count"])
def test_a_fresh_process_prints_the_one_line_and_nothing_of_mupdf(damaged, kind):
    """MuPDF printed "MuPDF error: format error: cycle in page tree" on stdout, before the JSON object."""
    d = damaged[kind]
    text = cli_subprocess("datasheet", "build", str(d.path))
    assert (text.returncode, text.stdout, text.stderr) == (2, "", f"error: {d.line}\n")
    js = cli_subprocess("--json", "datasheet", "search", str(d.path), "Bandwidth")
    assert (js.returncode, js.stderr) == (2, "")
    assert json.loads(js.stdout) == {"error": {"type": d.error_type, "message": d.message}}


# ------------------------------------------------------------------------------------------------- the tools
@pytest.mark.parametrize("kind", KINDS)
def test_every_agent_tool_gives_the_same_one_line(damaged, kind):
    d = damaged[kind]
    session = DatasheetSession(d.path)
    assert isinstance(session.open_error, DocumentUnreadable) and type(session.open_error).__name__ == d.error_type
    args = {"build_datasheet": {}, "get_section_text": {"start_page": 1, "end_page": 1},
            "search_text": {"query": "Bandwidth"}, "extract_table_markdown": {"page": 5}, "inspect_page": {"page": 1}}
    for tool in datasheet_tools(session):
        result = tool(args[tool.name])
        assert (result.is_error, result.error_type, result.text, result.images) == (True, d.error_type, d.line, ())


def test_a_page_without_text_in_a_document_with_text_is_still_read(tmp_path):
    """Only a document with no text at all is refused; one drawn page among text pages is that page's problem."""
    p = tmp_path / "mixed.pdf"
    with pymupdf.open() as doc:
        doc.new_page().insert_text((72, 72), "Supply voltage VDD 1.7 3.6 V", fontsize=11)
        doc.new_page().draw_rect(pymupdf.Rect(50, 50, 200, 200), color=(0, 0, 0), fill=(0.5, 0.5, 0.5))
        doc.save(p)
    session = DatasheetSession(p)
    assert session.open_error is None and session.manifest.pages_without_text == [2]
    with pytest.raises(NoTextLayer, match="page 2 has no text layer"):
        session.table_markdown(2)
    assert "inspect_page" in session.section_text(2, 2)


def test_an_image_only_manifest_kept_in_a_cache_is_refused_too(damaged, tmp_path):
    """A manifest cached before image-only documents were refused must not bring the blank document back."""
    d = damaged["image_only"]
    cache = ManifestCache(tmp_path / "cache")
    cache.put(Manifest(sha256=sha256_of(d.path), pages=2, part=None, revision=None, toc_source="none", toc_note="",
                       toc=[], tables=[], pages_without_text=[1, 2]))
    with pytest.raises(ImageOnlyPdf) as err:
        build_datasheet(d.path, ManifestCache(tmp_path / "cache"))
    assert str(err.value) == d.message


# ------------------------------------------------------------------------------------------------- extract
def _extract(capfd, *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = _cli(capfd, "--json", "extract", CLAIM, "--model", "scripted:reader", *argv)
    assert "Traceback" not in err and "MuPDF" not in out + err
    return code, json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", KINDS)
def test_extract_on_a_damaged_datasheet_ends_document_unreadable_before_the_model_is_asked(capfd, damaged, tmp_path,
                                                                                          kind):
    d = damaged[kind]
    code, data = _extract(capfd, "--datasheet", str(d.path), "--no-chamber", "--record", str(tmp_path))
    assert code == 1  # done short: no answer, and not for the model's want of trying
    assert (data["outcome"], data["detail"], data["extraction"], data["phase_two"]) == (
        "document_unreadable", d.line, None, "not_reached")
    start, end = validate_record(Path(data["record"]))  # run_start, run_end: no model turn, no tool call
    assert (end.outcome, end.detail, end.turns, end.usage.input_tokens) == ("document_unreadable", d.line, 0, 0)
    assert start.datasheet["path"] == str(d.path)


def test_extract_of_the_claims_own_datasheet_opens_no_chamber_session(capfd, damaged, tmp_path, monkeypatch):
    """The claim's own datasheet in the shared folder (CHAMBERLAB_SHARED) is an encrypted copy; phase two would run
    on the in-process chamber service."""
    sheets = tmp_path / "shared" / "datasheets"
    sheets.mkdir(parents=True)
    shutil.copyfile(damaged["encrypted"].path, sheets / SOURCE)
    monkeypatch.setenv("CHAMBERLAB_SHARED", str(sheets.parent))
    code, data = _extract(capfd, "--record", str(tmp_path / "rec"))
    assert (code, data["outcome"], data["phase_two"]) == (1, "document_unreadable", "not_reached")
    assert data["detail"] == f"EncryptedPdf: {sheets / SOURCE}: an encrypted PDF (it needs a password); expected " \
                             "an unencrypted one: supply a decrypted copy"
    assert not list((tmp_path / "rec").glob("api/*.jsonl"))  # the chamber service recorded no session


def test_a_surface_without_the_probe_ends_when_a_tool_meets_the_damage(damaged, tmp_path):
    """No build_datasheet offered: the model is asked, its first read fails, the call is recorded, the run ends."""
    d = damaged["lying_count"]
    search = [t for t in datasheet_tools(DatasheetSession(d.path)) if t.name == "search_text"]
    model = ScriptedModel(lambda conv: call(conv, "search_text", {"query": "Bandwidth"}), "searcher")
    result = run_cell(load_claims()[CLAIM], model=model, datasheet=d.path, record_dir=tmp_path, clock=SteppingClock(),
                      tools=search, budget=Budget(max_turns=5))
    assert (result.outcome, result.detail, result.turns) == ("document_unreadable", d.line, 1)
    calls = [e for e in validate_record(result.record) if e.kind == "tool_call"]
    assert [(c.tool, c.status, c.error_type, c.output_text) for c in calls] == [
        ("search_text", "error", "DamagedPdf", d.line)]


# ------------------------------------------------------------------------------------------------- scoring
def test_scoring_charges_an_unreadable_document_to_the_document_not_the_model(capfd, damaged, tmp_path):
    d = damaged["page_tree_cycle"]
    _extract(capfd, "--datasheet", str(d.path), "--no-chamber", "--record", str(tmp_path))
    scores = score_paths([tmp_path], claims=load_claims(), datasheets_dir=d.path.parent)
    (row,) = scores["cells"]
    assert row["fidelity"] == {"scored": False, "passed": None,
                               "reason": f"not scored: document_unreadable: {d.line}"}
    assert row["detector"]["evaluated"] is False and row["flags"] == []
    assert row["attribution"] == ["document_unreadable"]
    assert row["attribution_detail"]["charged_to"] == ["document"]
    summary = scores["summary"]
    assert (summary["document_unreadable"], summary["fidelity_passed"], summary["engine_errors"]) == (1, 0, 0)
    assert summary["attribution_counts"] == {"document_unreadable": 1}
    # the same cell ending without an answer on a readable document is the model's: charged to its reasoning
    (record,) = tmp_path.glob("*.jsonl")
    facts = facts_from_record(record)
    model_short = dataclasses.replace(facts, outcome="end_turn_without_submit",
                                      final_error="end_turn_without_submit: stop reason 'end_turn'")
    assert attribute(model_short, fidelity_passed=False).to_json()["charged_to"] == ["reasoning"]
    assert attribute(facts, fidelity_passed=None).to_json()["charged_to"] == ["document"]


def test_matrix_ends_each_arm_that_reads_the_document_and_exits_done_short(capfd, damaged, tmp_path):
    """The intended datasheet encrypted, the decoy (A4988) cut short: the arms that read a document end
    document_unreadable naming the one they read; closed-book and null-tool read none and run as ever."""
    sheets = tmp_path / "datasheets"
    sheets.mkdir()
    shutil.copyfile(damaged["encrypted"].path, sheets / SOURCE)
    decoy = shared_path("datasheets", "A4988.pdf").read_bytes()
    (sheets / "A4988.pdf").write_bytes(decoy[: len(decoy) // 2])
    out = tmp_path / "run"
    code, stdout, err = _cli(capfd, "--json", "matrix", "--models", "scripted:reader", "--claims", CLAIM,
                             "--arms", "normal,wrong-content,single-pass,closed-book,null-tool",
                             "--datasheets", str(sheets), "--out", str(out), "--no-chamber", "--max-turns", "4")
    assert code == 1 and "Traceback" not in err
    assert json.loads(stdout.strip().splitlines()[-1])["summary"]["document_unreadable"] == 3
    ends = {p.stem.split("--")[2]: validate_record(p)[-1] for p in (out / "cells").glob("*.jsonl")}
    assert {arm: e.outcome for arm, e in ends.items() if e.outcome == "document_unreadable"}.keys() == {
        "normal", "wrong-content", "single-pass"}
    assert ends["normal"].detail.startswith(f"EncryptedPdf: {sheets / SOURCE}: an encrypted PDF")
    assert ends["wrong-content"].detail.startswith(f"DamagedPdf: {sheets / 'A4988.pdf'}: not a readable PDF")
    assert ends["single-pass"].detail.startswith(f"EncryptedPdf: {sheets / SOURCE}: an encrypted PDF")
    assert (ends["normal"].turns, ends["wrong-content"].turns) == (0, 0)  # the probe: the model never asked
