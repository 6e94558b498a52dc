"""`bench_cli.py sweep --recording`: the CLI measures through protocols.recorded, so a recording with unset
(-9999) barometer readings is refused naming the rows instead of being averaged into the sweep (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import bench_cli
from test_sweep_recording import LAYOUT, _fans_off_rows, _write


def test_sweep_refuses_a_recording_with_unset_readings_and_sweeps_a_clean_one(tmp_path: Path, capsys):
    rows = _fans_off_rows()
    clean = _write(tmp_path, rows)
    assert bench_cli.main(["sweep", "dps310-operating-range", "--recording", str(clean), "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)["measured"]
    assert measured["unit"] == "hPa" and 900 < float(measured["value"]) < 1000  # the four-unit mean
    broken = tmp_path / "broken"
    broken.mkdir()
    rows[10:16, LAYOUT.index("pressure_upwind")] = -9999.0  # six unset readings of one barometer
    code = bench_cli.main(["sweep", "dps310-operating-range", "--recording", str(_write(broken, rows)), "--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and error["type"] == "RecordingRefused" and "11-16" in error["message"]


def test_a_given_measurement_needs_its_u_and_is_refused_before_anything_opens(capsys):
    code = bench_cli.main(["sweep", "dps310-operating-range", "--measured", "945.285", "--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and error["type"] == "JobRefused" and "u None" in error["message"]
    code = bench_cli.main(["sweep", "dps310-operating-range", "--measured", "945.285", "--u", "0.080", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["measured"]["value"] == "945.285" and out["files"] == {"csv": None, "plot": None}
