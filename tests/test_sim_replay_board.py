"""Real readings through the whole stack: a recording in the public CSV layout, replayed by the emulated board over
a real pty and read back by the serial driver, comes back row for row; and the sweep measures from a recording."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import numpy as np

from calibration.cross_sensor import BAROMETERS, compute_cross_sensor
from chamber import open_chamber
from firmware_bridge.variables import ROW_HEADER, layout_for
from simulator.board import running_board
from simulator.physics import make_model
from simulator.replay import read_recording, write_recording
from support import cli_subprocess


def _fans_off_recording(path: Path, n: int, seed: int) -> np.ndarray:
    model = make_model("wt", seed=seed)
    model.apply("load_in", 0.0)
    model.apply("load_out", 0.0)
    rows = model.sample(n)
    rows[:, 0] = np.arange(n)  # counter, as the real board numbers rows
    rows[:, 1:3] = 0.0  # flag, intervention
    write_recording(path, layout_for("wt"), rows)
    return rows


def test_a_replayed_csv_comes_back_row_for_row_through_the_emulated_board(tmp_path: Path):
    path = tmp_path / "fans_off.csv"
    _fans_off_recording(path, 120, seed=4)
    recorded = read_recording(path)
    with running_board("wt", transport="pty", model=make_model("wt", recording=str(path))) as board:
        chamber = open_chamber(board.url, backend="serial")
        try:
            first = chamber.measure(50)
            second = chamber.measure(70)
        finally:
            chamber.close()
    got = np.vstack([first.values, second.values])
    data = [i for i, name in enumerate(first.names) if name not in ROW_HEADER]
    # Rows travel as float32 on the wire, so compare with the recording rounded to float32.
    expected = recorded.rows[:, data].astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(got[:, data], expected)
    np.testing.assert_array_equal(got[:, 0], np.arange(120))  # the counter continues across MSRs


def test_sweep_measures_from_a_recording_like_the_calibration_would(tmp_path: Path):
    path = tmp_path / "fans_off.csv"
    rows = _fans_off_recording(path, 200, seed=9)
    layout = layout_for("wt")
    cal = compute_cross_sensor({b: rows[:, layout.index(b)] for b in BAROMETERS})
    out = cli_subprocess("sweep", "dps310-operating-range", "--recording", str(path), "--json", timeout_s=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["measured"]["unit"] == "hPa"  # reported in the claim's unit
    assert abs(float(data["measured"]["value"]) * 100 - cal.mean) < 0.1  # the four-unit mean, reported digits
    flips = sorted(Decimal(f) for f in data["flip_points"])
    c = Decimal(data["combined_uncertainty"])
    assert flips[1] - flips[0] == 2 * c  # the verdict changes at m ± c, in the claim's unit
