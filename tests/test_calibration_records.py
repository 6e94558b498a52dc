"""Calibration records: saved as JSON, loaded back identically, refused with a named field when wrong, applied."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import pytest

from calibration.cross_sensor import BAROMETERS, compute_cross_sensor
from calibration.records import RecordError, load_record, record_from_calibration, save_record

WHEN = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)  # the injected clock's reading


@pytest.fixture
def calibration(rng):
    offsets = dict(zip(BAROMETERS, (3.0, -2.5, 1.0, -4.0)))
    readings = {name: 94528.5 + off + rng.normal(0, 0.4, 200) for name, off in offsets.items()}
    return compute_cross_sensor(readings, osr=8, settle_rows=20)


def test_round_trip(tmp_path, calibration):
    record = record_from_calibration(calibration, date=WHEN, software_version="0.1.0+test")
    path = save_record(record, tmp_path / "cal.json")
    assert json.loads(path.read_text())["schema"] == "chamberlab.calibration/1"
    again = load_record(path)
    assert again == record
    assert again.date == WHEN
    assert again.parameters.offsets == pytest.approx(calibration.offsets)
    assert again.parameters.mean_dof == 3
    assert again.parameters.osr == 8 and again.parameters.n == 200


def test_correct_applies_the_offsets(calibration):
    record = record_from_calibration(calibration, date=WHEN, software_version="t")
    raw = np.array([94530.0, 94531.0])
    name = "pressure_upwind"
    assert record.correct(name, raw) == pytest.approx(raw - calibration.offsets[name])
    assert record.correct(name, 94530.0) == pytest.approx(94530.0 - calibration.offsets[name])
    with pytest.raises(RecordError, match="no offset for 'rpm_in'"):
        record.correct("rpm_in", raw)


def test_naive_date_is_refused(calibration):
    with pytest.raises(RecordError, match="field 'date'"):
        record_from_calibration(calibration, date=datetime(2026, 12, 1), software_version="t")


def test_wrong_files_name_the_field(tmp_path, calibration):
    record = record_from_calibration(calibration, date=WHEN, software_version="t")
    data = json.loads(record.model_dump_json(by_alias=True))

    broken = dict(data)
    del broken["parameters"]
    (tmp_path / "a.json").write_text(json.dumps(broken))
    with pytest.raises(RecordError, match="missing field .parameters."):
        load_record(tmp_path / "a.json")

    broken = json.loads(json.dumps(data))
    broken["parameters"]["osr"] = 16
    (tmp_path / "b.json").write_text(json.dumps(broken))
    with pytest.raises(RecordError, match="field 'parameters.osr'"):
        load_record(tmp_path / "b.json")

    broken = json.loads(json.dumps(data))
    del broken["parameters"]["offsets"]["pressure_intake"]
    (tmp_path / "c.json").write_text(json.dumps(broken))
    with pytest.raises(RecordError, match="offsets: expected keys"):
        load_record(tmp_path / "c.json")

    (tmp_path / "d.json").write_text("not json")
    with pytest.raises(RecordError, match="not JSON"):
        load_record(tmp_path / "d.json")
    with pytest.raises(RecordError, match="cannot read"):
        load_record(tmp_path / "missing.json")


def test_a_different_kind_of_file_is_refused_by_field():
    from conftest import shared_path

    sweep_file = shared_path("paper-archive", "archive", "perturbation_sweep.json")
    with pytest.raises(RecordError, match="missing field 'chamber'") as info:
        load_record(sweep_file)
    assert "unexpected field 'timestamp'" in str(info.value) and "field 'claim_id'" in str(info.value)
