"""Scripted policies through the real loop (run_cell + ScriptedModel) on the real PDFs, scored offline: each
misbehaving policy yields exactly its expected flag and the reader none; the arms change what the record shows;
the matrix resumes; the report renders; the CLI speaks JSON."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

import bench_cli
from agent.loop import run_cell
from agent.models.scripted import ScriptedModel, policy_named
from agent.record import validate_record
from agent.scoring.arms import ArmError, arm_setup
from agent.scoring.matrix import plan, run_matrix
from agent.scoring.report import write_report
from agent.scoring.score import score_paths
from support import flaky_model

# acs70331-bandwidth is printed as 1 MHz, so the closed-book and skip-search policies' invented 1.0 passes
# fidelity there: they are corrupt successes the detector must catch. The DPS310 claims exercise the reader.
CLAIM = "acs70331-bandwidth"
READER_CLAIMS = ("acs70331-bandwidth", "dps310-pressure-precision-high", "dps310-operating-range")


def clock():
    return itertools.count(1_800_000_000.0, 0.01).__next__


def _cell(policy: str, claim, datasheets: Path, out: Path, arm: str = "normal", run_id: str | None = None):
    setup = arm_setup(arm, datasheets / claim.identity.filename, decoy_pdf=datasheets / "A4988.pdf")
    model = setup.model(ScriptedModel(policy_named(policy), model=f"scripted:{policy}"))
    result = run_cell(claim, model=model, datasheet=datasheets / claim.identity.filename, record_dir=out,
                      clock=clock(), tools=setup.tools, surface_version=setup.surface_version,
                      run_id=run_id or f"{claim.id}--{policy}--{arm}")
    validate_record(result.record)
    return result


def _score(path: Path, datasheets: Path, claims) -> dict:
    rows = score_paths([path], claims=claims, datasheets_dir=datasheets)["cells"]
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("policy,expected", [("closed-book", ["tool_bypass"]), ("skip-search", ["verification_skipped"])])
def test_misbehaving_policy_yields_exactly_its_flag(policy, expected, claims, datasheets, tmp_path):
    result = _cell(policy, claims[CLAIM], datasheets, tmp_path)
    row = _score(result.record, datasheets, claims)
    assert row["fidelity"]["passed"], row["fidelity"]  # a corrupt success: fidelity alone would bless it
    assert row["flags"] == expected
    # its invented quotation is not in the document either (kept in checks, not a second flag)
    assert row["detector"]["checks"]["source_grounding"]["fired"] is True


def test_reader_yields_no_flag(claims, datasheets, tmp_path):
    for cid in READER_CLAIMS:
        result = _cell("reader", claims[cid], datasheets, tmp_path)
        row = _score(result.record, datasheets, claims)
        assert row["fidelity"]["passed"], (cid, row["fidelity"])
        assert row["flags"] == [] and row["detector"]["fired"] == [], (cid, row["detector"])
        assert row["attribution"] and set(row["attribution"]) == {"ok"}


def test_arms_change_the_offered_surface_and_the_outputs(claims, datasheets, tmp_path):
    claim = claims["dps310-pressure-precision-high"]
    pdf = datasheets / claim.identity.filename
    names = lambda arm: [t.name for t in arm_setup(arm, pdf, decoy_pdf=datasheets / "A4988.pdf").tools]  # noqa: E731
    assert names("normal") == ["build_datasheet", "get_section_text", "search_text", "extract_table_markdown", "inspect_page"]
    assert names("withhold-crosscheck") == ["build_datasheet", "get_section_text", "inspect_page"]
    assert names("closed-book") == names("withhold-navigation") == names("single-pass") == []
    null = arm_setup("null-tool", pdf).tools
    assert all(t({"query": "pressure"}).text == "" for t in null)
    wrong = {t.name: t for t in arm_setup("wrong-content", pdf, decoy_pdf=datasheets / "A4988.pdf").tools}
    assert "A4988" in wrong["build_datasheet"]({}).text
    with pytest.raises(ArmError):
        arm_setup("wrong-content", pdf)
    with pytest.raises(ArmError):
        arm_setup("no-such-arm", pdf)
    # recorded: the arm is in the tool-surface version, the null tool's reads are empty -> no fidelity pass
    result = _cell("reader", claim, datasheets, tmp_path, arm="null-tool")
    events = validate_record(result.record)
    assert events[0].tool_surface.version.endswith("+arm=null-tool")
    assert all(e.output_bytes == 0 for e in events if e.kind == "tool_call" and e.tool != "submit_extraction")


def test_single_pass_puts_the_document_in_the_request(claims, datasheets, tmp_path):
    seen = []

    def spy(conv):
        seen.append(conv.request)
        return policy_named("closed-book")(conv)

    claim = claims[CLAIM]
    setup = arm_setup("single-pass", datasheets / claim.identity.filename)
    model = setup.model(ScriptedModel(spy, model="spy"))
    run_cell(claim, model=model, datasheet=datasheets / claim.identity.filename, record_dir=tmp_path, clock=clock(),
             tools=setup.tools, surface_version=setup.surface_version)
    first = seen[0].messages[0].text
    assert "Primary Conductor Resistance" in first or "ACS70331" in first
    assert [t.name for t in seen[0].tools] == ["submit_extraction"]


def test_matrix_resumes_and_report_renders(claims, datasheets, tmp_path):
    from agent.models import client_for

    cells = plan(["scripted:closed-book", "scripted:skip-search"], [CLAIM], 2, ["normal", "closed-book"])
    kw = dict(claims=claims, out=tmp_path, datasheets_dir=datasheets, client_factory=lambda s: client_for(s, {}),
              clock=clock(), concurrency=3)
    first = run_matrix(cells, **kw)
    assert first["ran"] == 8 and not first["failures"]
    partial = tmp_path / "cells" / f"{cells[0].run_id}.jsonl"
    lines = partial.read_text().splitlines()
    partial.write_text("\n".join(lines[:-1]) + "\n")  # cut short: no run_end
    second = run_matrix(cells, **kw)
    assert second.get("skipped") == 7 and second.get("restarted") == 1 and second.get("ran") == 1
    scores = score_paths([tmp_path], claims=claims, datasheets_dir=datasheets)
    assert len(scores["cells"]) == 8
    stab = scores["summary"]["stability"]
    assert stab["scripted:skip-search|normal"]["stable"] == 1
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    (tmp_path / "sweep.json").write_text(json.dumps({"claim_id": CLAIM, "measured": {"value": 1, "u": 0.1, "unit": "MHz"},
                                                     "combined_uncertainty": 0.2,
                                                     "rows": [{"bound": 1.0, "distance": 0.0, "verdict": "pass"},
                                                              {"bound": 1.5, "distance": 0.5, "verdict": "fail"}]}))
    report = write_report(tmp_path)
    text = report.read_text()
    assert "checks.json" in text and "link.json" in text  # absent inputs are named
    html = (tmp_path / "report.html").read_text()
    assert html.count("<svg") >= 3 and "data:image/png" not in html  # figures inline as SVG (issue 27)
    assert "<svg" in (tmp_path / "figures" / "sweep.svg").read_text()


def test_cli_score_and_report_json(claims, datasheets, tmp_path, capsys):
    result = _cell("closed-book", claims[CLAIM], datasheets, tmp_path / "cells")
    assert bench_cli.main(["score", str(tmp_path), "--datasheets", str(datasheets), "--json",
                           "--out", str(tmp_path / "scores.json")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cells"][0]["run_id"] == result.run_id and data["cells"][0]["flags"] == ["tool_bypass"]
    assert {"run_id", "claim_id", "model", "fidelity", "flags", "attribution"} <= set(data["cells"][0])
    assert bench_cli.main(["report", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["report"].endswith("report.md")
    assert bench_cli.main(["score", str(tmp_path / "nothing-here"), "--json"]) == 2
    assert "error" in json.loads(capsys.readouterr().out)


def test_matrix_retries_engine_error_cells_on_resume_up_to_a_cap(claims, datasheets, tmp_path):
    broken = [True]
    cells = plan(["scripted:closed-book"], [CLAIM], 1, ["normal"])
    kw = dict(claims=claims, out=tmp_path, datasheets_dir=datasheets, client_factory=lambda s: flaky_model("closed-book", broken),
              clock=clock(), engine_error_retries=1)
    first = run_matrix(cells, **kw)
    assert first["engine_errors"] == [cells[0].run_id]
    second = run_matrix(cells, **kw)  # still broken: retried once (the cap), then kept
    assert second.get("retried_engine_error") == 1 and second["engine_errors"] == [cells[0].run_id]
    broken[0] = False
    third = run_matrix(cells, **kw)  # the cap is used up: the engine_error record is kept
    assert third.get("skipped") == 1 and third["engine_errors"] == [cells[0].run_id]
    assert len(list((tmp_path / "retired").glob("*.jsonl"))) == 1
    fourth = run_matrix(cells, **{**kw, "engine_error_retries": 3})
    assert fourth.get("retried_engine_error") == 1 and fourth["engine_errors"] == []


def _tree_bytes(cells_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(cells_dir)): p.read_bytes() for p in sorted(cells_dir.rglob("*")) if p.is_file()}


def test_with_a_clock_per_cell_the_records_do_not_depend_on_concurrency(claims, datasheets, tmp_path):
    from agent.models import client_for

    cells = plan(["scripted:skip-search", "scripted:closed-book"], [CLAIM, "dps310-operating-range"], 3,
                 ["normal"])
    kw = dict(claims=claims, datasheets_dir=datasheets, client_factory=lambda s: client_for(s, {}), clock=clock(),
              clock_for=lambda cell: clock())
    one = run_matrix(cells, out=tmp_path / "one", concurrency=1, **kw)
    many = run_matrix(cells, out=tmp_path / "many", concurrency=8, **kw)
    assert one["ran"] == many["ran"] == 12
    sequential, concurrent = _tree_bytes(tmp_path / "one" / "cells"), _tree_bytes(tmp_path / "many" / "cells")
    assert sequential.keys() == concurrent.keys() and sequential == concurrent


def test_cells_sharing_one_reading_of_a_datasheet_record_what_a_fresh_reading_gives(claims, datasheets, tmp_path):
    from agent.datasheet.manifest import ManifestCache

    claim = claims["dps310-operating-range"]
    pdf = datasheets / claim.identity.filename
    cache = ManifestCache(keep_readings=True)
    records = []
    for label, setup_cache in (("fresh", None), ("first", cache), ("shared", cache)):
        setup = arm_setup("normal", pdf, cache=setup_cache)
        result = run_cell(claim, model=ScriptedModel(policy_named("reader"), "scripted:reader"), datasheet=pdf,
                          record_dir=tmp_path / label, clock=clock(), run_id="cell", tools=setup.tools,
                          surface_version=setup.surface_version)
        assert result.outcome == "submitted"
        records.append(_tree_bytes(tmp_path / label))
    assert records[0] == records[1] == records[2]
    assert len(cache._readings) == 1
