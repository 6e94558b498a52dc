"""A fleet over two Remote Labs (issue 34): two `lab serve` instances, each serving one real-time wind tunnel
from its lab file (a board on a pty: an emulated unit of its own serial, 3 and 5, as a lab's own USB board would
be), reached through lab+http:// with each lab's own credentials, tagged with its lab in one fleet file; one claim
graded on both concurrently gives each lab's ISO 13528 z-score against the robust consensus, with the fleet's
reproducibility s_R as sigma_pt (two labs scored on their own spread would always get ±0.62).

Why lab files and not the demo lab: two demo labs serve the same emulated unit with the same seed, so the two labs
would read identical rows (Algorithm A refuses results whose spread is zero)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from chamber.emulated import parse_emulated_url, start_emulated_board
from protocols.claim_sources import load_main_job_claims
from protocols.fleet_job import check_fleet, fleet_text
from remote_lab_support import running_lab, write_lab_file

CLAIM = "dps310-operating-range"


def _lab_file(stack: contextlib.ExitStack, folder: Path, serial: int) -> Path:
    folder.mkdir()
    url = start_emulated_board(stack, parse_emulated_url(f"emulated:wt?unit={serial}"))
    return write_lab_file(folder / "lab.yaml", {"wt-rt-1": {"board": url, "kind": "wt", "mode": "real-time"}})


def test_a_fleet_over_two_remote_labs_gives_each_lab_a_z_score(tmp_path):
    claim = load_main_job_claims()[CLAIM]
    with contextlib.ExitStack() as boards, \
            running_lab(tmp_path, _lab_file(boards, tmp_path / "north", 3)) as north, \
            running_lab(tmp_path, _lab_file(boards, tmp_path / "south", 5)) as south:
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text("chambers:\n" + "".join(
            f"  {name}-wt: {{board: 'lab+{lab.endpoint}/wt-rt-1', lab: {name}, "
            f"credentials: '{lab.credentials_file}'}}\n"
            for name, lab in (("north", north), ("south", south))), encoding="utf-8")
        d = check_fleet([claim], fleet, rows=20, say=lambda line: None, one=True)
    assert [c["error"] for c in d["chambers"]] == [None, None]
    assert all(o["confirmed"] for o in d["safe_state"]) and len(d["safe_state"]) == 2
    assert len(d["units"]) == 8 and {u["lab"] for u in d["units"]} == {"north", "south"}
    assert d["fleet"]["verdict"] == "pass"
    labs = d["labs"]
    assert labs is not None and {s["lab"] for s in labs["scores"]} == {"north", "south"}
    assert labs["sigma_pt"] == pytest.approx(d["fleet"]["precision"]["s_R"]) and "s_R" in labs["sigma_pt_source"]
    for score in labs["scores"]:
        assert score["z_performance"] in ("satisfactory", "questionable", "unsatisfactory")
        assert abs(score["z"]) != pytest.approx(0.624, abs=1e-3)  # not the two-lab artefact of the labs' own spread
    assert labs["consensus"]["p"] == 2 and "Algorithm A" in labs["method"]
    assert "labs (ISO 13528" in fleet_text(d)


def test_a_lab_chamber_that_cannot_be_reached_is_named_and_the_others_are_graded(tmp_path):
    claim = load_main_job_claims()[CLAIM]
    with running_lab(tmp_path) as north:
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(f"chambers:\n  north-wt: {{board: 'lab+{north.endpoint}/wt-rt-1', lab: north, "
                         f"credentials: '{north.credentials_file}'}}\n"
                         f"  gone: {{board: 'lab+{north.endpoint}/no-such-chamber', lab: south, "
                         f"credentials: '{north.credentials_file}'}}\n", encoding="utf-8")
        d = check_fleet([claim], fleet, rows=20, say=lambda line: None, one=True)
    gone = next(c for c in d["chambers"] if c["id"] == "gone")
    assert gone["kind"] is None and "no-such-chamber" in gone["error"] and "\n" not in gone["error"]
    assert d["incomplete"] == {"chambers_not_opened": 1}
    assert len(d["units"]) == 4 and d["labs"] is None  # one lab graded: nothing to compare
