"""Grading a claim on every unit of a fleet of emulated chambers (issue 34): `check --fleet`, `sweep --fleet` and
`run --fleet`, each chamber a fast-pace emulated board of its own serial (simulator/units.py draws its parts) with
the simulated instrument station beside it, all graded concurrently, every chamber left safe.

Deterministic: every board is seeded by the run's seed (0) and its serial, every simulated station by its place in
the fleet, so a fleet file gives the same readings on every run. The planted fleet below is two wind tunnels (8
barometers) with wt2's upwind barometer planted +150 Pa: on it Mandel's h of that unit is 2.47 (the largest h
8 units allow, (p - 1)/sqrt(p)) against the 1 % value 2.07, and Grubbs' G = 2.47 > 2.27 excludes it at 20 rows
(calibration/precision.py: over seeded 8-unit fleets at the real spread Grubbs excludes such a unit in ~96 %).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chamber.instruments import sim_station_file
from protocols.claim_sources import load_main_job_claims
from protocols.fleet_job import check_fleet, fleet_text

PROJECT = Path(__file__).resolve().parents[1]
CHAMBERLAB = [sys.executable, str(PROJECT / "bench_cli.py")]
ACCURACY = "dps310-absolute-accuracy"
TYPICAL = "dps310-current-1hz-low-precision"  # Typ. 2.1 µA, measured by the station's SMU on every unit


@pytest.fixture(scope="module")
def pool():
    return load_main_job_claims()


def fleet_file(tmp_path: Path, n: int, *, planted: dict[int, dict[str, float]] | None = None, kind: str = "wt",
               labs: dict[int, str] | None = None) -> Path:
    lines = ["chambers:"]
    for i in range(1, n + 1):
        extra = f", offsets: {json.dumps((planted or {})[i])}" if i in (planted or {}) else ""
        extra += f", lab: {labs[i]}" if i in (labs or {}) else ""
        lines.append(f"  {kind}{i}: {{board: 'emulated:{kind}?unit={i}', station: '{sim_station_file()}'{extra}}}")
    path = tmp_path / f"fleet-{n}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_cli(*args: str, cwd: Path) -> tuple[int, dict, str]:
    proc = subprocess.run([*CHAMBERLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def test_check_on_demo_8_gives_32_unit_verdicts_and_a_fleet_verdict_with_its_statistics(tmp_path):
    """The issue's Done-when, as the command line gives it."""
    code, d, err = run_cli("--json", "check", ACCURACY, "--fleet", "demo:8", "--rows", "20", cwd=tmp_path)
    assert code == 0, err
    assert len(d["units"]) == 32 and len({u["unit"] for u in d["units"]}) == 32
    assert {u["unit"].split("/")[0] for u in d["units"]} == {f"wt{i}" for i in range(1, 9)}
    assert all(u["verdict"] in ("pass", "inconclusive", "fail") and u["measured"]["unit"] == "Pa" for u in d["units"])
    f = d["fleet"]
    assert f["verdict"] in ("pass", "inconclusive", "fail") and f["rule"] and f["rule_version"]
    interval = f["tolerance_interval"]
    assert interval["sides"] == "two-sided" and interval["coverage"] == 0.90 and interval["confidence"] == 0.95
    assert float(interval["lower_reported"]) <= float(interval["upper_reported"])
    p = f["precision"]
    assert all(p[k] > 0 for k in ("s_r", "s_R")) and p["s_L"] >= 0 and p["s_R"] >= p["s_r"]
    assert len(d["chambers"]) == 16 and all(c["error"] is None for c in d["chambers"])
    assert len(d["safe_state"]) == 16 and all(o["confirmed"] for o in d["safe_state"])


def test_a_planted_150_pa_barometer_is_flagged_by_h_excluded_and_fails_the_fleet(tmp_path, pool):
    path = fleet_file(tmp_path, 2, planted={2: {"pressure_upwind": 150.0}})
    d = check_fleet([pool[ACCURACY]], path, rows=20, say=lambda line: None, one=True)
    planted = "wt2/pressure_upwind"
    unit = next(u for u in d["units"] if u["unit"] == planted)
    assert len(d["units"]) == 8 and unit["verdict"] == "fail" and float(unit["measured"]["value"]) > 140
    f = d["fleet"]
    s = f["screening"]
    assert s["h"][planted] > s["h_critical"]["at_1"]  # flagged by Mandel's h at 1 %
    excluded = {o["unit"]: o for o in s["outliers"]}
    assert planted in excluded and excluded[planted]["statistic"] > excluded[planted]["critical_1"]
    assert planted not in f["units"]["used"] and planted in f["units"]["graded"]  # left out, its verdict kept
    assert planted not in f["precision"]["units"]
    assert f["verdict"] == "fail" and planted in f["units"]["failing"] and planted in f["reason"]
    text = fleet_text(d)
    assert f"excluded (outlier): {planted}" in text and "Mandel's h" in text


def test_a_typical_claim_on_8_units_gets_a_population_verdict_and_on_4_stays_typical(tmp_path, pool):
    d = check_fleet([pool[TYPICAL]], fleet_file(tmp_path, 8), rows=20, say=lambda line: None, one=True)
    f = d["fleet"]
    assert len(d["units"]) == 8 and all(u["class"] == "typical-not-guaranteed" for u in d["units"])
    assert f["rule_kind"] == "typical" and f["verdict"] in ("pass", "fail") and f["inconclusive_class"] is None
    pm = f["population_mean"]
    assert pm["n"] >= 5 and pm["typical"] == "2.1" and "population mean" in f["reason"]
    assert f["precision"] is not None  # the SMU's repeated readings give s_r, s_L, s_R
    (tmp_path / "four").mkdir()
    few = check_fleet([pool[TYPICAL]], fleet_file(tmp_path / "four", 4), rows=20, say=lambda line: None, one=True)
    assert (few["fleet"]["verdict"], few["fleet"]["inconclusive_class"]) == ("inconclusive", "typical-not-guaranteed")


def test_sweep_moves_the_bound_through_the_fleets_interval(tmp_path, pool):
    code, d, err = run_cli("--json", "sweep", ACCURACY, "--fleet", str(fleet_file(tmp_path, 2)), "--steps", "21",
                           "--csv", str(tmp_path / "sweep.csv"), cwd=tmp_path)
    assert code == 0, err
    verdicts = [r["verdict"] for r in d["rows"]]
    assert len(verdicts) == 21 and verdicts[0] == verdicts[-1] == "fail" and "pass" in verdicts
    assert (tmp_path / "sweep.csv").read_text().splitlines()[0] == "bound,verdict,class,failing_units,lower,upper"
    assert len(d["units"]) == 8 and all(o["confirmed"] for o in d["safe_state"])


@pytest.mark.parametrize("args, named", [
    (["check", ACCURACY, "--fleet", "demo:2", "--port", "/dev/null"], "--port"),
    (["check", ACCURACY, "--fleet", "demo:2", "--station", "x.yaml"], "--station"),
    (["sweep", ACCURACY, "--fleet", "demo:2", "--measured", "1", "--u", "1"], "--measured"),
    (["run", "--fleet", "demo:2", "--no-agent", "--port", "/dev/null"], "--port"),
    (["check", ACCURACY, "--fleet", "demo:0"], "demo:N"),
])
def test_options_a_fleet_excludes_are_refused_in_one_line_before_anything_opens(tmp_path, args, named):
    proc = subprocess.run([*CHAMBERLAB, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and named in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_run_fleet_grades_every_claim_and_writes_the_fleet_report(tmp_path):
    """`run --fleet`: the chamber part on 5 units of each kind; typical values on 5 units get population
    verdicts (not all inconclusive), the summary gives the fleet verdicts, the report its fleet section."""
    claims = f"{TYPICAL},si115x-standby-current-1v8,{ACCURACY},dps310-operating-range"
    code, d, err = run_cli("--json", "run", "--fleet", "demo:5", "--no-agent", "--rows", "20", "--claims", claims,
                           "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert code == 0, err
    f = d["fleet"]
    assert f["source"] == "demo:5" and f["chambers"] == f["opened"] == 10
    assert set(f["verdicts"]) == set(claims.split(","))
    assert {f["verdicts"][c] for c in (TYPICAL, "si115x-standby-current-1v8")} <= {"pass", "fail"}
    assert f["units_by_claim"][ACCURACY] == 20 and f["units_by_claim"][TYPICAL] == 5
    assert all(o["confirmed"] for o in d["safe_state"]) and len(d["safe_state"]) == 10
    run_dir = Path(d["run_dir"])
    data = json.loads((run_dir / "fleet.json").read_text())
    assert sorted(s["claim_id"] for s in data["results"]) == sorted(claims.split(","))  # in the pool's order
    report = (run_dir / "report.md").read_text()
    assert "## Fleet: reproducibility across units and labs" in report and "fleet_units_" in report
    assert (run_dir / "figures" / f"fleet_mandel_{ACCURACY}.svg").exists()
