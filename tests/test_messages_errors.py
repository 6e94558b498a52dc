"""Messages that say what went wrong (issue 24): each is one line naming what was expected and what arrived — no
Python repr, no temporary file name, no unrelated cause. A model spec nobody knows is not an API-key problem; a
file given as a run folder is not a FileExistsError; a truncated PDF is not a PDF "with zero pages"; a figure that
cannot be written names the user's path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pymupdf
import pytest

import bench_cli
from agent.datasheet import DatasheetSession, datasheet_tools
from agent.datasheet.document import DamagedPdf, EncryptedPdf, open_pdf
from agent.models import ModelSpecError, client_for
from conftest import shared_path
from protocols.claims import load_claims
from protocols.sweep import SweepOutputError, sweep, write_sweep_files

ACCEPTED = "expected scripted:<policy>, claude-…, openai:<model> or openai-compat:<base_url>#<model>"


def _error(capsys, *argv: str) -> tuple[int, dict]:
    code = bench_cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]


# ------------------------------------------------------------------------------------------------ --model
@pytest.mark.parametrize("argv", [
    ["run", "--model", "nope", "--runs-dir", "RUNS"],
    ["extract", "dps310-operating-range", "--model", "nope", "--record", "RUNS"],
    ["matrix", "--models", "nope", "--claims", "dps310-operating-range", "--out", "RUNS"],
])
def test_an_unknown_model_spec_says_which_specs_are_accepted(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    runs = tmp_path / "runs"
    code, err = _error(capsys, *[str(runs) if a == "RUNS" else a for a in argv])
    assert code == 2 and err["type"] == "ModelSpecError"
    assert err["message"] == f"unknown model spec 'nope'; {ACCEPTED}"
    assert not runs.exists() or not any(runs.rglob("*.jsonl"))


def test_a_claude_model_without_a_key_still_asks_for_the_key():
    with pytest.raises(Exception, match="ANTHROPIC_API_KEY") as err:
        client_for("claude-sonnet-4-5", {})
    assert not isinstance(err.value, ModelSpecError)
    with pytest.raises(ModelSpecError, match="unknown model spec 'gpt-5'"):
        client_for("gpt-5", {"ANTHROPIC_API_KEY": "k"})  # an OpenAI name without its prefix is not sent to Anthropic


# ------------------------------------------------------------------------------------------------ matrix --out
def test_matrix_out_naming_a_file_says_a_folder_was_expected(capsys, tmp_path):
    out = tmp_path / "scores.txt"
    out.write_text("mine", encoding="utf-8")
    code, err = _error(capsys, "matrix", "--models", "scripted:reader", "--claims", "dps310-operating-range",
                       "--out", str(out))
    assert code == 2 and err["type"] == "MatrixRefused"
    assert err["message"] == f"--out {out} is a file; expected a folder (new or a run folder to resume)"
    assert out.read_text(encoding="utf-8") == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["scores.txt"]


# ------------------------------------------------------------------------------------------------ PDFs
@pytest.fixture
def truncated(tmp_path) -> Path:
    """The real DPS310 datasheet cut at half its bytes (a download that stopped)."""
    data = shared_path("datasheets", "DPS310.pdf").read_bytes()
    path = tmp_path / "DPS310.pdf"
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.fixture
def encrypted(tmp_path) -> Path:
    path = tmp_path / "XP38-locked.pdf"
    with pymupdf.open(shared_path("datasheets", "XP38-polarizer.pdf")) as doc:
        doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="user", owner_pw="owner")
    return path


DATASHEET_COMMANDS = [["build", "PDF"], ["search", "PDF", "Pressure"], ["section", "PDF", "1", "2"],
                      ["table", "PDF", "1"], ["page", "PDF", "1", "--out", "OUT"]]


@pytest.mark.parametrize("argv", DATASHEET_COMMANDS, ids=lambda a: a[0])
def test_every_datasheet_command_calls_a_truncated_pdf_truncated(capsys, truncated, tmp_path, argv):
    out = tmp_path / "p1.png"
    code, err = _error(capsys, "datasheet", *[str(truncated) if a == "PDF" else str(out) if a == "OUT" else a
                                              for a in argv])
    assert code == 2 and err["type"] == "DamagedPdf"
    assert err["message"] == (f"{truncated}: not a readable PDF (truncated or damaged: it ends after "
                              f"{truncated.stat().st_size} bytes without the closing %%EOF marker)")
    assert not out.exists()


def test_a_cut_pdf_whose_end_marker_survives_is_damaged_not_zero_pages(tmp_path):
    data = shared_path("datasheets", "DPS310.pdf").read_bytes()
    path = tmp_path / "cut.pdf"
    path.write_bytes(data[:5000] + b"\n%%EOF\n")  # MuPDF rebuilds the xref and finds no page
    with pytest.raises(DamagedPdf) as err:
        open_pdf(path)
    assert str(err.value) == (f"{path}: not a readable PDF (truncated or damaged: no page found, even after "
                              "rebuilding its cross-reference table)")


@pytest.mark.parametrize("argv", DATASHEET_COMMANDS[:2], ids=lambda a: a[0])
def test_an_encrypted_pdf_is_called_encrypted(capsys, encrypted, argv):
    code, err = _error(capsys, "datasheet", *[str(encrypted) if a == "PDF" else a for a in argv])
    assert code == 2 and err["type"] == "EncryptedPdf"
    assert err["message"].startswith(f"{encrypted}: an encrypted PDF (it needs a password); expected an unencrypted")


def test_the_agent_tools_report_the_same_one_line_errors(truncated, encrypted):
    for path, kind, words in ((truncated, "DamagedPdf", "not a readable PDF (truncated or damaged: "),
                              (encrypted, "EncryptedPdf", "an encrypted PDF")):
        tools = {t.name: t for t in datasheet_tools(DatasheetSession(path))}
        for name, args in (("build_datasheet", {}), ("search_text", {"query": "Pressure"}),
                           ("inspect_page", {"page": 1})):
            result = tools[name](args)
            assert result.is_error and result.error_type == kind
            assert result.text.startswith(f"{kind}: {path}: {words}") and "\n" not in result.text
            assert "zero pages" not in result.text


def test_a_real_datasheet_still_opens(tmp_path):
    copy = tmp_path / "DPS310.pdf"
    shutil.copyfile(shared_path("datasheets", "DPS310.pdf"), copy)
    with open_pdf(copy) as doc:
        assert doc.page_count == 41
    with pytest.raises(EncryptedPdf):
        with pymupdf.open(copy) as doc:
            doc.save(tmp_path / "e.pdf", encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="u", owner_pw="o")
        open_pdf(tmp_path / "e.pdf")


# ------------------------------------------------------------------------------------------------ sweep files
@pytest.fixture(scope="module")
def result():
    return sweep(load_claims()["dps310-operating-range"], "945.285", "0.080", steps=5)


def test_a_plot_in_a_missing_folder_names_the_users_path_and_leaves_nothing(result, tmp_path):
    plot, csv = Path("/nonexistent/s.png"), tmp_path / "s.csv"
    with pytest.raises(SweepOutputError) as err:
        write_sweep_files(result, csv_path=csv, plot_path=plot)
    assert str(err.value).startswith("cannot write /nonexistent/s.png: No such file or directory")
    assert "partial" not in str(err.value) and list(tmp_path.iterdir()) == []


def test_a_name_the_file_system_refuses_is_named_before_anything_is_written(result, tmp_path):
    csv, plot = tmp_path / "s.csv", tmp_path / ("p" * 300 + ".png")
    with pytest.raises(SweepOutputError) as err:
        write_sweep_files(result, csv_path=csv, plot_path=plot)
    assert str(err.value) == f"cannot write {plot}: File name too long"
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_midway_names_the_users_path_and_keeps_neither(result, tmp_path, monkeypatch):
    import protocols.sweep

    def full_disk(result, path):  # unit test of the staging: the figure's writer fails after the CSV is written
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(protocols.sweep, "plot_sweep", full_disk)
    csv, plot = tmp_path / "s.csv", tmp_path / "s.png"
    with pytest.raises(SweepOutputError) as err:
        write_sweep_files(result, csv_path=csv, plot_path=plot)
    assert str(err.value) == f"cannot write {plot}: No space left on device"
    assert list(tmp_path.iterdir()) == []  # the CSV written first is not kept, no temporary file is left


def test_both_files_are_written_when_both_can_be(result, tmp_path):
    csv, plot = tmp_path / "s.csv", tmp_path / "s.png"
    assert write_sweep_files(result, csv_path=csv, plot_path=plot) == {"csv": str(csv), "plot": str(plot)}
    assert csv.read_text(encoding="utf-8").startswith("claim_id,") and plot.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv", "s.png"]
