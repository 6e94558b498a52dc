"""The one cell runner (agent.cell_runner): one id scheme, one resume rule, arm/repeat/cell_id typed on run_start,
and the runs index's fidelity and flags columns written after scoring — for the main job and the matrix alike.
Scripted policies through the real loop on the real PDFs; every clock is injected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.agent_job import run_agent_job
from agent.cell_runner import (
    CellIndex,
    PlannedCell,
    cell_id,
    next_repeat,
    plan_cells,
    run_cells,
    score_run,
)
from agent.models import client_for
from agent.record import SCHEMA_VERSION, read_record, validate_record
from agent.runindex import CellScore, RunIndex
from agent.scoring.cells import facts_from_record
from agent.scoring.matrix import plan, run_matrix
from agent.models.scripted import ScriptedModel, policy_named
from support import SteppingClock, flaky_model

CLAIM = "acs70331-bandwidth"  # printed as 1 MHz: closed-book's invented 1.0 passes fidelity (flag tool_bypass)


def _runner(claims, datasheets, cells_dir: Path, **kw):
    return dict(claims=claims, cells_dir=cells_dir, datasheets_dir=datasheets,
                client_factory=lambda spec: client_for(spec, {}), clock=SteppingClock(), **kw)


# ------------------------------------------------------------------------------------------------ ids and plans
def test_one_id_scheme_for_the_main_job_the_matrix_and_a_planned_cell(claims, datasheets, tmp_path):
    assert cell_id("scripted:reader", CLAIM) == f"{CLAIM}--scripted_reader--normal--r1"
    assert plan(["scripted:reader"], [CLAIM], 1, ["normal"])[0].cell_id == cell_id("scripted:reader", CLAIM)
    with RunIndex(tmp_path / "index.sqlite") as index:
        index.start_run("r", tmp_path, "2026-12-01T00:00:00+00:00", "test")
        run_agent_job([claims[CLAIM]], model_spec="scripted:reader", model=client_for("scripted:reader", {}),
                      datasheets_dir=datasheets, run_dir=tmp_path, run_id="r", index=index, api_url=None)
        (row,) = index.cells("r")
    assert [p.stem for p in (tmp_path / "cells").glob("*.jsonl")] == [cell_id("scripted:reader", CLAIM)]
    assert row["cell_id"] == cell_id("scripted:reader", CLAIM)


def test_a_plan_refuses_an_unknown_arm_a_repeat_below_one_and_a_cell_twice(claims, datasheets, tmp_path):
    with pytest.raises(ValueError, match="arm 'no-such-arm'"):
        PlannedCell(CLAIM, "scripted:reader", "no-such-arm")
    with pytest.raises(ValueError, match="repeat 0"):
        PlannedCell(CLAIM, "scripted:reader", repeat=0)
    with pytest.raises(ValueError, match="planned twice"):
        run_cells([PlannedCell(CLAIM, "scripted:reader")] * 2, **_runner(claims, datasheets, tmp_path))


def test_next_repeat_is_the_first_repeat_without_a_record(tmp_path):
    assert next_repeat(tmp_path, "scripted:reader", CLAIM) == 1
    for n in (1, 3):
        (tmp_path / f"{cell_id('scripted:reader', CLAIM, 'normal', n)}.jsonl").write_text("")
    (tmp_path / f"{cell_id('scripted:reader', CLAIM, 'closed-book', 2)}.jsonl").write_text("")  # another arm
    assert next_repeat(tmp_path, "scripted:reader", CLAIM) == 2
    assert next_repeat(tmp_path, "scripted:reader", CLAIM, "closed-book") == 1


# ------------------------------------------------------------------------------------------------ typed fields
def test_arm_repeat_and_cell_id_are_typed_on_run_start_and_read_from_there(claims, datasheets, tmp_path):
    cell = PlannedCell(CLAIM, "scripted:reader", "null-tool", 2)
    report = run_cells([cell], **_runner(claims, datasheets, tmp_path))
    assert report.counts["ran"] == 1
    start = validate_record(tmp_path / f"{cell.cell_id}.jsonl")[0]
    assert (start.schema_version, start.cell_id, start.arm, start.repeat) == (SCHEMA_VERSION, cell.cell_id,
                                                                               "null-tool", 2)
    assert SCHEMA_VERSION == "3"
    # The typed fields are what the scorer reads: changed there, they win over the run id and surface version.
    record = tmp_path / f"{cell.cell_id}.jsonl"
    lines = record.read_text().splitlines()
    first = json.loads(lines[0])
    first.update(arm="closed-book", repeat=7)
    other = tmp_path / "typed" / record.name
    other.parent.mkdir()
    other.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    facts = facts_from_record(other)
    assert (facts.arm, facts.repeat) == ("closed-book", 7)
    assert first["tool_surface"]["version"].endswith("+arm=null-tool") and first["run_id"].endswith("--r2")


def test_a_record_of_schema_2_still_reads_and_scores_its_arm_and_repeat_from_its_strings(claims, datasheets,
                                                                                         tmp_path):
    cell = PlannedCell(CLAIM, "scripted:closed-book", "withhold-crosscheck", 3)
    run_cells([cell], **_runner(claims, datasheets, tmp_path / "cells"))
    lines = (tmp_path / "cells" / f"{cell.cell_id}.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    for k in ("cell_id", "arm", "repeat"):  # a record written before schema 3 has none of them
        del first[k]
    first["schema_version"] = "2"
    old = tmp_path / "old" / f"{cell.cell_id}.jsonl"
    old.parent.mkdir()
    old.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    start = read_record(old)[0]
    assert (start.cell_id, start.arm, start.repeat) == (None, None, None)
    facts = facts_from_record(old)
    assert (facts.arm, facts.repeat) == ("withhold-crosscheck", 3)


def test_a_bare_cell_outside_a_plan_has_its_id_but_no_arm_or_repeat(claims, datasheets, tmp_path):
    from agent.loop import run_cell

    claim = claims[CLAIM]
    result = run_cell(claim, model=ScriptedModel(policy_named("closed-book"), model="scripted:closed-book"),
                      datasheet=datasheets / claim.identity.filename, record_dir=tmp_path, clock=SteppingClock(),
                      run_id="one-off")
    start = validate_record(result.record)[0]
    assert (start.cell_id, start.arm, start.repeat) == ("one-off", None, None)
    assert (facts_from_record(result.record).arm, facts_from_record(result.record).repeat) == ("normal", None)
    with pytest.raises(ValueError, match="expected one id"):
        run_cell(claim, model=ScriptedModel(policy_named("closed-book"), model="scripted:closed-book"),
                 datasheet=datasheets / claim.identity.filename, record_dir=tmp_path, clock=SteppingClock(),
                 run_id="other", cell=PlannedCell(CLAIM, "scripted:closed-book").key())


# ------------------------------------------------------------------------------------------------ resume rule
def test_a_record_ending_in_run_end_but_missing_a_blob_is_incomplete_and_run_again(claims, datasheets, tmp_path):
    cell = PlannedCell(CLAIM, "scripted:reader")
    run_cells([cell], **_runner(claims, datasheets, tmp_path))
    blobs = sorted((tmp_path / f"{cell.cell_id}.blobs").iterdir())
    assert blobs
    blobs[0].unlink()  # the record says run_end, but its evidence is gone: not a complete record
    again = run_cells([cell], **_runner(claims, datasheets, tmp_path))
    assert again.counts["restarted"] == 1 and again.counts["ran"] == 1 and again.counts["kept"] == 0
    validate_record(tmp_path / f"{cell.cell_id}.jsonl")
    third = run_cells([cell], **_runner(claims, datasheets, tmp_path))
    assert third.counts["kept"] == 1 and third.counts["ran"] == 0


def test_each_record_is_validated_once_per_run_and_engine_errors_still_named(claims, datasheets, tmp_path,
                                                                              monkeypatch):
    """The resume rule validates a record once (it reads every event and hashes every blob); the report's
    engine_errors come from the outcomes the runner already has, not from validating every record again."""
    import agent.cell_runner as runner

    reads: list[str] = []
    real = runner.validate_record
    monkeypatch.setattr(runner, "validate_record", lambda path, **kw: reads.append(Path(path).stem) or real(path, **kw))
    broken = [True]
    cells = [PlannedCell(CLAIM, "scripted:reader"), PlannedCell(CLAIM, "scripted:reader", repeat=2)]
    kw = {**_runner(claims, datasheets, tmp_path), "client_factory": lambda _s: flaky_model("reader", broken),
          "engine_error_retries": 0}
    first = run_cells(cells, **kw)
    assert first.engine_errors == sorted(c.cell_id for c in cells) and reads == []  # run now: nothing re-read
    second = run_cells(cells, **kw)  # no retries left: both kept, each read once by the resume rule
    assert second.counts["kept"] == 2 and second.engine_errors == first.engine_errors
    assert sorted(reads) == sorted(c.cell_id for c in cells)


def test_the_main_job_retries_an_engine_error_cell_on_resume_and_keeps_a_finished_one(claims, datasheets,
                                                                                      tmp_path):
    broken = [True]
    with RunIndex(tmp_path / "index.sqlite") as index:
        index.start_run("r", tmp_path, "2026-12-01T00:00:00+00:00", "test")

        def job() -> dict:
            return run_agent_job([claims[CLAIM]], model_spec="scripted:reader", model=flaky_model("reader", broken),
                                 datasheets_dir=datasheets, run_dir=tmp_path, run_id="r", index=index, api_url=None)

        assert job()["outcomes"] == {"engine_error": 1}
        assert [(c["outcome"], c["fidelity"]) for c in index.cells("r")] == [("engine_error", "failed")]
        broken[0] = False
        again = job()
        assert again["kept_from_earlier"] == 0 and again["outcomes"] == {"submitted": 1}
        assert len(list((tmp_path / "retired").glob("*.jsonl"))) == 1
        (row,) = index.cells("r")
        assert (row["outcome"], row["fidelity"], row["flags"]) == ("submitted", "passed", [])
        third = job()
        assert third["kept_from_earlier"] == 1 and third["outcomes"] == {}


# ------------------------------------------------------------------------------------------------ index scores
def test_an_unscored_row_has_no_flags_and_a_scored_one_its_flags(tmp_path):
    with RunIndex(tmp_path / "index.sqlite") as index:
        index.record_cell("r", "c1", CLAIM, "m", "submitted", "c1.jsonl")
        index.record_cell("r", "c2", CLAIM, "m", "submitted", "c2.jsonl")
        assert [(c["fidelity"], c["flags"]) for c in index.cells("r")] == [(None, None), (None, None)]
        unlisted = index.record_scores("r", {"c1": CellScore("passed", ["tool_bypass"]),
                                             "c9": CellScore("failed", [])})
        assert unlisted == ["c9"]
        assert [(c["cell_id"], c["fidelity"], c["flags"]) for c in index.cells("r")] == [
            ("c1", "passed", ["tool_bypass"]), ("c2", None, None)]
    with pytest.raises(ValueError, match="expected one of passed, failed, not_scored"):
        CellScore("pass", [])


def test_the_matrix_writes_each_cells_fidelity_and_flags_into_the_index_after_scoring(claims, datasheets,
                                                                                      tmp_path):
    cells = plan_cells(["scripted:closed-book", "scripted:skip-search", "scripted:reader"], [CLAIM], 1,
                       ["normal"])
    with RunIndex(tmp_path / "index.sqlite") as index:
        index.start_run("m", tmp_path / "m", "2026-12-01T00:00:00+00:00", "matrix")
        where = CellIndex(index, "m")
        run = run_matrix(cells, claims=claims, out=tmp_path / "m", datasheets_dir=datasheets,
                         client_factory=lambda s: client_for(s, {}), clock=SteppingClock(), concurrency=2,
                         index=where)
        assert run["ran"] == 3 and not run["failures"]
        assert {c["fidelity"] for c in index.cells("m")} == {None}  # rows before scoring: not scored yet
        scores = score_run([tmp_path / "m"], tmp_path / "m" / "scores.json", claims=claims,
                           datasheets_dir=datasheets, index=where)
        rows = {c["model"]: (c["outcome"], c["fidelity"], c["flags"]) for c in index.cells("m")}
    assert rows == {"scripted:closed-book": ("submitted", "passed", ["tool_bypass"]),
                    "scripted:skip-search": ("submitted", "passed", ["verification_skipped"]),
                    "scripted:reader": ("submitted", "passed", [])}
    assert json.loads((tmp_path / "m" / "scores.json").read_text())["summary"] == json.loads(
        json.dumps(scores["summary"]))
