"""Grading claims on the simulator: the acceptance of the verdicts issue, on the in-process backend and over a pty.

The in-process backend and the emulated board share the firmware and physics, so the same seed gives the same
readings whichever way the rows travel — the driver never knows whether a board is real or emulated.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from bench_cli import PROJECT_ROOT
from chamber import open_chamber
from protocols.claims import get_claim, load_claims
from protocols.bench_job import grade_claims
from protocols.runner import ProtocolContext, check_claim
from simulator.board import running_board
from simulator.board_protocol import BoardFaults


@pytest.fixture(scope="module")
def sim_chambers():
    chambers = {kind: open_chamber(backend="sim", chamber=kind, seed=7) for kind in ("wt", "lt")}
    yield chambers
    for c in chambers.values():
        c.close()


@pytest.fixture(scope="module")
def all_results(sim_chambers):
    claims = list(load_claims().values())
    return {r.claim.id: r for r in grade_claims(claims, sim_chambers, rows=200)}


def test_operating_range_passes_near_945_hpa_with_a_few_hundredths_u(all_results):
    r = all_results["dps310-operating-range"]
    assert r.verdict.verdict == "pass"
    measured = r.to_dict()["measured"]
    assert measured["unit"] == "hPa"
    # Default simulator ambient is 94,528.5 Pa with a slow walk; the four-unit mean stays within a few Pa of it.
    assert abs(Decimal(measured["value"]) - Decimal("945.285")) < Decimal("0.2")
    # u = s_between/sqrt(4) of offsets within ±6 Pa → of order 1–3 Pa = 0.01–0.03 hPa; nu = 3 → k ≈ 3.18.
    assert Decimal("0.003") < Decimal(measured["u"]) < Decimal("0.06")
    assert measured["dof"] == pytest.approx(3.0)
    assert measured["k"] == pytest.approx(3.182, abs=0.01)
    assert set(r.verdict.matched_conditions) >= {c.name for c in r.claim.conditions if c.variable}


def test_bit_depth_passes_and_codes_stay_within_16_bits(all_results):
    r = all_results["si115x-adc-bit-depth"]
    assert r.verdict.verdict == "pass"
    assert r.measurement.details["largest_code"] == 65535  # saturating white light reaches the 16-bit ceiling
    assert r.measurement.details["smallest_code"] >= 0


def test_relative_accuracy_is_resolution_limited_before_staging(all_results):
    r = all_results["dps310-relative-accuracy"]
    assert (r.verdict.verdict, r.verdict.inconclusive_class) == ("inconclusive", "resolution-limited")
    assert r.measurement is None and r.precheck is not None and r.precheck.resolution_limited


def test_every_acs70331_claim_is_engagement_only(all_results):
    acs = [r for r in all_results.values() if r.claim.component == "ACS70331"]
    assert len(acs) == 5
    for r in acs:
        assert (r.verdict.verdict, r.verdict.inconclusive_class) == ("inconclusive", "engagement-only"), r.claim.id
        assert r.details["engaged"] is True


def test_no_claim_fails_on_an_unperturbed_chamber_and_every_inconclusive_has_a_class(all_results):
    assert len(all_results) == 37
    assert not [cid for cid, r in all_results.items() if r.verdict.verdict in ("fail", "error")]
    for cid, r in all_results.items():
        if r.verdict.verdict == "inconclusive":
            assert r.verdict.inconclusive_class, cid


def test_check_result_json_has_the_documented_shape(all_results):
    d = all_results["dps310-operating-range"].to_dict()
    for key in ("claim_id", "verdict", "class", "measured", "distance", "combined_uncertainty",
                "matched_conditions", "unmatched_conditions", "rule"):
        assert key in d
    assert set(d["measured"]) >= {"value", "unit", "u", "k", "dof", "n"}
    json.dumps(d)  # serialisable as is


@contextmanager
def serial_chamber(kind: str, seed: int, faults: BoardFaults | None = None):
    """An emulated board on a real pty with the serial driver connected to it."""
    with running_board(kind, transport="pty", seed=seed, faults=faults) as board:
        chamber = open_chamber(board.url, backend="serial")
        try:
            yield chamber
        finally:
            chamber.close()


def test_the_same_seed_gives_the_same_verdict_over_a_real_pty():
    claim = get_claim("dps310-operating-range")
    in_process = open_chamber(backend="sim", chamber="wt", seed=11)
    try:
        expected = check_claim(claim, ProtocolContext(chambers={"wt": in_process}, rows=60, settle_rows=5))
    finally:
        in_process.close()
    with serial_chamber("wt", seed=11) as chamber:
        over_pty = check_claim(claim, ProtocolContext(chambers={"wt": chamber}, rows=60, settle_rows=5))
    assert over_pty.verdict.verdict == "pass"
    assert over_pty.measurement.value == expected.measurement.value
    assert over_pty.measurement.u == expected.measurement.u


def test_a_link_lost_mid_measurement_is_an_error_never_a_fail():
    claim = get_claim("dps310-operating-range")
    with serial_chamber("wt", seed=3, faults=BoardFaults(vanish_after_rows=30)) as chamber:
        result = check_claim(claim, ProtocolContext(chambers={"wt": chamber}, rows=80, settle_rows=0))
    assert result.verdict.verdict == "error"
    assert result.measurement is not None and result.measurement.status == "link_lost"
    assert result.measurement.value is None  # the half-received measurement is discarded


def test_a_firmware_error_during_a_protocol_is_an_error():
    claim = get_claim("si115x-adc-bit-depth")
    with serial_chamber("lt", seed=3, faults=BoardFaults(error_on="MSR", error_code="er09")) as chamber:
        result = check_claim(claim, ProtocolContext(chambers={"lt": chamber}, rows=20, settle_rows=0))
    assert result.verdict.verdict == "error"
    assert "er09" in result.measurement.details["reason"]


def test_a_protocol_without_its_chamber_is_inconclusive_naming_it(sim_chambers):
    result = check_claim(get_claim("si115x-adc-bit-depth"), ProtocolContext(chambers={"wt": sim_chambers["wt"]}))
    assert result.verdict.verdict == "inconclusive"
    assert result.verdict.inconclusive_class == "chamber-not-connected"
    assert result.verdict.reason.startswith("chamber not connected") and "light tunnel" in result.verdict.reason


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROJECT_ROOT / "bench_cli.py"), *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_sweep_flips_exactly_at_the_combined_uncertainty(tmp_path: Path):
    out = _cli("sweep", "dps310-operating-range", "--measured", "945.285", "--u", "0.080", "--json",
               "--csv", str(tmp_path / "s.csv"), "--plot", str(tmp_path / "s.png"))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["combined_uncertainty"] in ("0.080", "0.08")
    verdicts = {Decimal(r["bound"]): r["verdict"] for r in data["rows"]}
    assert verdicts[Decimal("945.365")] == "inconclusive"  # |d| = c: closed guard band
    assert verdicts[Decimal("945.205")] == "inconclusive"
    above = [v for b, v in verdicts.items() if b > Decimal("945.365")]
    below = [v for b, v in verdicts.items() if b < Decimal("945.205")]
    assert above and set(above) == {"pass"}
    assert below and set(below) == {"fail"}
    assert (tmp_path / "s.png").stat().st_size > 1000 and (tmp_path / "s.csv").exists()


def test_cli_check_unknown_claim_is_a_clear_error():
    out = _cli("check", "dps310-no-such-claim", "--json")
    assert out.returncode == 2
    err = json.loads(out.stdout)["error"]
    assert "dps310-no-such-claim" in err["message"]


def test_cli_calibrate_writes_a_record_that_loads(tmp_path: Path):
    from calibration.records import load_record

    path = tmp_path / "cal.json"
    out = _cli("calibrate", "--backend", "sim", "--seed", "5", "-n", "100", "-o", str(path), "--json")
    assert out.returncode == 0, out.stderr
    record = load_record(path)
    assert record.chamber == "wt"
    assert abs(sum(record.parameters.offsets.values())) < 1e-6  # offsets relative to the four-unit mean


def test_cli_serial_backend_without_a_port_is_refused_not_simulated():
    out = _cli("check", "dps310-operating-range", "--backend", "serial", "--json")
    assert out.returncode == 2
    assert "--port" in json.loads(out.stdout)["error"]["message"]
