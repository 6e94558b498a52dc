"""The seed paper's archive re-scored by our instruments: its Table 3 planted faults, its clean cells and its
classifier kappa are reproduced from the files (not copied from their stored decisions)."""

from __future__ import annotations

import json
import math

import pytest

import bench_cli
from agent.scoring.archive import CELLS, import_archive, parse_gold_traces
from agent.scoring.cells import read_imported
from agent.scoring.score import score_paths
from conftest import shared_path


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = shared_path("paper-archive")
    out = tmp_path_factory.mktemp("archive")
    manifest = import_archive(root, out)
    return manifest, out, score_paths([out], datasheets_dir=shared_path("datasheets"))


def test_import_keeps_what_the_archive_holds(scored):
    manifest, out, _ = scored
    cells = read_imported(out / CELLS)
    assert len(cells) == manifest["cells"]
    assert manifest["by_role"]["planted_fault"] == 150 and manifest["by_role"]["gold_sample"] == 30
    assert "no inter-annotator agreement" in manifest["not_imported"]["data/classifier_gold.annotator2.yaml"]
    assert all(len(sha) == 64 for sha in manifest["files"].values())


def test_detector_flags_all_50_planted_faults_of_table_3(scored):
    _, _, result = scored
    s = result["summary"]
    assert s["planted_faults_total"] == 50 and s["planted_faults_flagged"] == 50
    assert s["planted_faults_flagged_with_expected_rule"] == 50
    by_file = s["planted_faults_by_file"]
    assert by_file["fault_injection_gpt-5_1.json"]["flagged"] == by_file["fault_injection_gpt-5_1.json"]["silent_failures"] == 32
    assert by_file["fault_injection_qwen3_6-27b.json"]["flagged"] == by_file["fault_injection_qwen3_6-27b.json"]["silent_failures"] == 21


def test_no_flag_on_the_207_clean_cells_with_an_honest_bound(scored):
    s = scored[2]["summary"]
    assert s["clean_cells_total"] == 207 and s["clean_cells_flagged"] == 0
    b = s["clean_cells_flagged_bound"]
    assert b["unit"] == "cells" and math.isclose(b["upper_95"], 1 - 0.05 ** (1 / 207))
    assert s["matrix_agentic_fidelity_passing"] == 73 and s["matrix_agentic_process_flags"] == 0
    assert s["stored_detector_decisions"]["reproduced"] == s["stored_detector_decisions"]["cells"]


def test_kappa_on_the_27_adjudicated_gold_cells(scored):
    s = scored[2]["summary"]
    assert s["gold_cells"] == 27 and len(s["gold_abstained"]) == 3
    assert round(s["kappa"], 2) == 0.61
    k = s["kappa_detail"]
    assert k["confusion"] == {"CLEAN": {"CLEAN": 21, "PROBLEMATIC": 3}, "PROBLEMATIC": {"CLEAN": 0, "PROBLEMATIC": 3}}
    agree = s["events_agreeing_with_paper_labels"]
    assert agree["compared"] > 0 and agree["agree"] == agree["compared"]


def test_gold_trace_parser_keeps_attempts_and_errors():
    text = shared_path("paper-archive", "data", "classifier_gold.yaml").read_text(encoding="utf-8")
    traces = parse_gold_traces(text)
    events = traces["dps310-temperature-accuracy|agentic|qwen3.6-27b"]
    assert len(events) == 17 and {e.attempt for e in events} == {1, 2}
    assert [e.error for e in events if e.kind == "final_output"] == ["terminal_without_submit", ""]


def test_cli_import_and_score_report_the_figures(tmp_path, capsys):
    root = shared_path("paper-archive")
    assert bench_cli.main(["import-archive", str(root), "--out", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cells"] > 0
    assert bench_cli.main(["score", str(tmp_path), "--no-grounding", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    assert (s["planted_faults_total"], s["planted_faults_flagged"], s["clean_cells_total"], s["clean_cells_flagged"]) == (50, 50, 207, 0)
    assert round(s["kappa"], 2) == 0.61
