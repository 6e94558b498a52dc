"""The CLI against a lab that is not complete (issue 19): one chamber connected, no datasheets, a chamber service
that needs a token. Each must end in a clear result, not a crash or a silent exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

import chamber
from conftest import shared_path
from protocols.api import running_api
from protocols.claims import load_claims
from simulator.board import running_board
from support import run_cli

TOKEN = "t0ken-for-the-cli-test"


def test_a_lab_with_only_the_wind_tunnel_grades_a_light_tunnel_claim_inconclusive_not_connected(capsys):
    with running_board("wt", seed=3) as board:
        r = run_cli(capsys, "check", "si115x-adc-bit-depth", "--port", board.url, "--rows", "8", "--json")
    assert r.code == 0, r.err
    result = r.json()
    assert (result["verdict"], result["class"]) == ("inconclusive", "chamber-not-connected")
    assert "not connected" in result["reason"]


def test_run_without_datasheets_finishes_exit_0_and_says_in_one_line_the_agent_part_was_skipped(
        capsys, tmp_path, monkeypatch):
    """Issue 35: a clone without ../shared (CHAMBERLAB_SHARED at an empty folder). `run` as `make run` types it
    (the default agent, not asked for by name) completes the chamber part and exits 0; its summary says in one
    line that the agent part was skipped because no datasheet was found, and how to get them."""
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv("CHAMBERLAB_SHARED", str(shared))
    r = run_cli(capsys, "run", "--runs-dir", str(tmp_path / "runs"), "--rows", "8", "--no-station",
                "--claims", "dps310-operating-range", "--new")
    assert r.code == 0, r.err
    lines = r.out.strip().splitlines()
    assert lines[0].endswith(": finished"), lines[0]
    (skipped,) = [x for x in lines if x.startswith("agent:")]  # one line (piped: whole lines)
    assert "skipped: no datasheet in " + str(shared / "datasheets") in skipped and "DPS310.pdf" in skipped
    assert f"chamberlab datasheet fetch --all --dir {shared / 'datasheets'}" in skipped
    assert "set CHAMBERLAB_SHARED to the folder that holds datasheets/" in skipped
    assert any(x.startswith("verdicts:") for x in lines)
    assert "agent part will be skipped" in r.err and "ScoreInputError" not in r.err + r.out
    report = Path([x for x in lines if x.startswith("report:")][0].split(None, 1)[1])
    assert report.exists()


def test_run_without_datasheets_with_the_model_named_is_short_exit_1(capsys, tmp_path, monkeypatch):
    """The agent part asked for by name (`--model`) and skipped for want of datasheets: done short of what was
    asked (README, "Exit codes")."""
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv("CHAMBERLAB_SHARED", str(shared))
    r = run_cli(capsys, "run", "--runs-dir", str(tmp_path / "runs"), "--rows", "8", "--no-station",
                "--claims", "dps310-operating-range", "--new", "--model", "scripted:reader", "--json")
    assert r.code == 1, r.err
    summary = r.json()
    assert summary["status"] == "completed with errors" and summary["incomplete"] == {"cells_not_run": 1}
    assert "agent" not in summary and sum(summary["verdicts"].values()) > 0
    assert f"no datasheet in {shared / 'datasheets'}" in summary["agent_skipped"]
    assert summary["provenance"]["model"] == "scripted:reader"


@pytest.fixture()
def token_service(tmp_path: Path):
    """A chamber tools API on the simulated wind tunnel that needs TOKEN."""
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=3)
    try:
        with running_api({"wt": wt}, record_dir=tmp_path / "api", claims=load_claims(), token=TOKEN) as url:
            yield url
    finally:
        wt.close()


def test_extract_sends_the_chamber_token_from_a_file_or_the_environment(capsys, tmp_path, token_service,
                                                                        monkeypatch):
    shared_path("datasheets", "DPS310.pdf")
    monkeypatch.delenv("CHAMBERLAB_CHAMBER_TOKEN", raising=False)
    argv = ["extract", "dps310-relative-accuracy", "--model", "scripted:reader", "--chamber-url", token_service,
            "--json"]
    refused = run_cli(capsys, *argv, "--record", str(tmp_path / "none"))
    assert refused.code == 1 and refused.json()["outcome"] == "engine_error"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    by_file = run_cli(capsys, *argv, "--record", str(tmp_path / "file"), "--chamber-token-file", str(token_file))
    assert by_file.code == 0 and by_file.json()["outcome"] == "submitted", by_file.out
    monkeypatch.setenv("CHAMBERLAB_CHAMBER_TOKEN", TOKEN)
    by_env = run_cli(capsys, *argv, "--record", str(tmp_path / "env"))
    assert by_env.code == 0 and by_env.json()["outcome"] == "submitted"
