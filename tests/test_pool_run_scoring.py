"""One claim pool per run (issue 24): `score` and `report` of a run folder grade its cells against the claims the
run graded — the pool it recorded in claim_pool.json, or for an older folder the pool `run` grades by default
(packaged + chamber parts) — so the offline figures agree with the run's own scores.json. The cells are the
scripted reader's, through the real loop on the real PDFs, for packaged and chamber-part claims alike."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import bench_cli
from agent.agent_job import score_cells
from agent.scoring.offline import report_job, score_job
from agent.scoring.score import GIVEN_POOL
from protocols.claim_sources import (CHAMBER_PARTS_DIR, MAIN_JOB_POOL, RUN_POOL_FILE, load_checked_claims,
                                     load_main_job_claims, load_run_pool, write_run_pool)
from protocols.claims import ClaimFileError, load_claims
from support import read_with_reader

PACKAGED = ("dps310-pressure-precision-high", "acs70331-bandwidth")


def _chamber_part_claims() -> list[str]:
    """One claim printing a figure per chamber part (NF-F12, MCP4151, Bourns-3590S, ...)."""
    by_part: dict[str, str] = {}
    for cid, c in load_checked_claims([CHAMBER_PARTS_DIR]).items():
        if c.source.prints_figure:
            by_part.setdefault(c.component, cid)
    return sorted(by_part.values())[:3]


@pytest.fixture(scope="module")
def pool():
    return load_main_job_claims(None)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, pool, datasheets) -> Path:
    """A run folder as the main job leaves it: cells/ by the reader, scores.json scored against the job's pool."""
    run = tmp_path_factory.mktemp("run")
    chosen = {cid: pool[cid] for cid in (*PACKAGED, *_chamber_part_claims())}
    read_with_reader(chosen, datasheets, run / "cells")
    score_cells(run / "cells", run, list(pool.values()), datasheets)
    return run


def _run_scores(run: Path) -> dict:
    return json.loads((run / "scores.json").read_text(encoding="utf-8"))["summary"]


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def test_the_run_itself_passes_fidelity_on_every_cell_packaged_and_chamber_parts(run_dir):
    s = _run_scores(run_dir)
    assert s["cells"] == len(PACKAGED) + 3 and s["fidelity_passed"] == s["cells"]


def test_score_of_a_folder_without_a_pool_agrees_with_the_run(run_dir, datasheets, tmp_path):
    run = _copy(run_dir, tmp_path / "older-run")
    assert not (run / RUN_POOL_FILE).exists()
    for path in (run, run / "cells"):
        data = score_job([path], datasheets_dir=datasheets, prices=None, no_grounding=False, out=None)
        assert data["summary"]["fidelity_passed"] == _run_scores(run)["fidelity_passed"]
        assert data["summary"]["claim_pools"] == [MAIN_JOB_POOL]
        assert not [r for r in data["cells"] if not r["fidelity"].get("scored", True)]
    # what `score` did before: the packaged claims alone leave the chamber-part cells unscored
    old = score_job([run / "cells"], datasheets_dir=datasheets, prices=None, no_grounding=False, out=None,
                    claims=load_claims())
    assert old["summary"]["fidelity_passed"] == len(PACKAGED)


def test_score_uses_the_pool_the_run_recorded(run_dir, pool, datasheets, tmp_path):
    run = _copy(run_dir, tmp_path / "run")
    write_run_pool(run, pool, ["protocols/data/claims", "protocols/data/chamber_parts"])
    data = score_job([run / "cells"], datasheets_dir=datasheets, prices=None, no_grounding=False, out=None)
    assert data["summary"]["fidelity_passed"] == _run_scores(run)["fidelity_passed"]
    assert data["summary"]["claim_pools"] == [str(run / RUN_POOL_FILE)]

    # a run that graded a smaller pool: its own pool decides, not today's default
    dropped = _chamber_part_claims()[0]
    write_run_pool(run, {k: v for k, v in pool.items() if k != dropped}, ["a narrower claim folder"])
    rows = score_job([run], datasheets_dir=datasheets, prices=None, no_grounding=False, out=None)["cells"]
    (row,) = [r for r in rows if r["claim_id"] == dropped]
    assert row["fidelity"]["passed"] is None and "not in the claim set" in row["fidelity"]["reason"]

    # an explicit pool (`score --claims`) overrides the recorded one
    given = score_job([run], datasheets_dir=datasheets, prices=None, no_grounding=False, out=None, claims=pool)
    assert given["summary"]["fidelity_passed"] == _run_scores(run)["fidelity_passed"]
    assert given["summary"]["claim_pools"] == [GIVEN_POOL]


def test_the_cli_score_of_a_run_cells_folder_agrees_with_the_run(run_dir, datasheets, capsys):
    code = bench_cli.main(["score", str(run_dir / "cells"), "--datasheets", str(datasheets), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["summary"]["fidelity_passed"] == _run_scores(run_dir)["fidelity_passed"]


def test_report_rescores_with_the_run_pool(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path / "run")
    (run / "scores.json").unlink()  # the report re-scores from cells/
    report = Path(report_job(run)["report"]).read_text(encoding="utf-8")
    n = _run_scores(run_dir)["cells"]
    assert f"Agent: fidelity {n} of {n} cells" in report
    assert MAIN_JOB_POOL in report


def test_the_pool_file_rebuilds_every_claim_without_the_claim_files(pool, tmp_path):
    path = write_run_pool(tmp_path, pool, ["protocols/data/claims", "protocols/data/chamber_parts"])
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["sources"] == ["protocols/data/claims", "protocols/data/chamber_parts"]
    assert {p["part"] for p in doc["parts"]} >= {"DPS310", "NF-F12", "MCP4151", "Bourns-3590S", "XP38"}
    back = load_run_pool(tmp_path)
    assert back == pool  # every field, Decimal digits included, and each claim's datasheet identity
    assert all(back[k].identity == pool[k].identity for k in pool)
    assert not list(tmp_path.glob("*.part"))  # written through a temporary file and a rename


def test_no_pool_file_is_none_and_a_damaged_one_names_file_claim_and_field(pool, tmp_path):
    assert load_run_pool(tmp_path) is None
    path = write_run_pool(tmp_path, pool, ["x"])
    doc = json.loads(path.read_text(encoding="utf-8"))
    bad = next(c for c in doc["claims"] if c["component"] == "MCP4151")
    bad["source"]["page"] = 999
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ClaimFileError) as err:
        load_run_pool(tmp_path)
    msg = str(err.value)
    assert str(path) in msg and bad["id"] in msg and "source.page" in msg and "88-page" in msg
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ClaimFileError, match=r"claim_pool\.json.*not JSON \(Expecting property name"):
        load_run_pool(tmp_path)
    path.write_text("", encoding="utf-8")
    with pytest.raises(ClaimFileError, match="empty document; expected a claim pool"):
        load_run_pool(tmp_path)


def test_score_of_a_real_run_agrees_with_the_run(tmp_path):
    """The issue's case end to end: `run` on the emulated boards (packaged and chamber-part claims), then `score
    runs/<id>/cells` in another process: the same fidelity count as the run's summary and scores.json."""
    import subprocess
    import sys

    from bench_cli import PROJECT_ROOT
    from conftest import shared_path

    shared_path("datasheets")
    cli = [sys.executable, str(PROJECT_ROOT / "bench_cli.py")]
    ids = ",".join([*PACKAGED, *_chamber_part_claims()[:2]])
    run = subprocess.run([*cli, "run", "--runs-dir", str(tmp_path), "--claims", ids, "--rows", "40", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout)
    run_dir = Path(summary["run_dir"])
    scored = subprocess.run([*cli, "score", str(run_dir / "cells"), "--json"], capture_output=True, text=True,
                            timeout=300)
    assert scored.returncode == 0, scored.stderr[-2000:]
    offline = json.loads(scored.stdout)["summary"]
    ran = summary["agent"]["fidelity_and_flags"]
    assert offline["cells"] == ran["cells"] == 4
    assert offline["fidelity_passed"] == ran["fidelity_passed"] == _run_scores(run_dir)["fidelity_passed"] == 4
    recorded = run_dir / RUN_POOL_FILE  # written by the main job once it records its pool; older runs: the default
    assert offline["claim_pools"] == ([str(recorded)] if recorded.exists() else [MAIN_JOB_POOL])
