"""Station files: validation, *IDN? checks at open, and the CLI's `station check` and `check --station`."""

from __future__ import annotations

import json

import pytest
import yaml

import bench_cli
from chamber import selection
from chamber.instruments import StationError, check_station, load_station_file, open_station, sim_station_file


def _write_station(tmp_path, mutate):
    """A copy of the packaged sim station file with certificate paths made absolute, changed by `mutate`."""
    src = sim_station_file()
    data = yaml.safe_load(src.read_text())
    for entry in data["instruments"].values():
        entry["certificate"] = str(src.parent / entry["certificate"])
    mutate(data)
    path = tmp_path / "station.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_packaged_station_opens_and_knows_its_wiring():
    with open_station(sim_station_file()) as station:
        assert station.kinds() == {"smu", "reference_barometer", "temperature_controller"}
        assert station.provides("smu", "ACS70331") and not station.provides("reference_barometer", "Si115x")
        rail, smu = station.rail("DPS310")
        assert rail.reads == ["pressure_ambient"] and not smu.output_enabled()


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["rails"][0].update(instrument="nope"), "no instrument 'nope'"),
    (lambda d: d["rails"][0].update(reads=["pressure_attic"]), "not wt chamber variables"),
    (lambda d: d["rails"][0].update(instrument="baro_ref"), "not an smu"),
    (lambda d: d["instruments"]["smu_dps310"].update(kind="oscilloscope"), "instruments.smu_dps310.kind"),
    (lambda d: d.pop("instruments"), "instruments"),
])
def test_a_bad_station_file_names_the_problem(tmp_path, mutate, message):
    with pytest.raises(StationError, match=message):
        load_station_file(_write_station(tmp_path, mutate))


def test_wrong_identity_missing_instrument_or_certificate_fail_at_open(tmp_path):
    wrong = _write_station(tmp_path, lambda d: d["instruments"]["baro_ref"]["idn"].update(model="CPG2500"))
    with pytest.raises(StationError, match="baro_ref.*CPG2500.*PACE1000"):
        open_station(wrong)
    missing = _write_station(tmp_path, lambda d: d["instruments"]["thermal_stage"].update(
        resource="GPIB0::30::INSTR"))
    with pytest.raises(StationError, match="thermal_stage.*GPIB0::30::INSTR"):
        open_station(missing)
    no_cert = _write_station(tmp_path, lambda d: d["instruments"]["smu_si115x"].update(certificate="/no/such.yaml"))
    with pytest.raises(StationError, match="smu_si115x.*does not exist"):
        open_station(no_cert)


def test_check_station_reports_each_instrument(tmp_path):
    wrong = _write_station(tmp_path, lambda d: d["instruments"]["smu_acs70331"]["idn"].update(model="MODEL 2400"))
    report = check_station(wrong)
    assert not report["ok"]
    bad = [r for r in report["instruments"] if not r["ok"]]
    assert [r["name"] for r in bad] == ["smu_acs70331"] and "MODEL 2450" in bad[0]["idn"]


def test_cli_station_check_json(capsys):
    assert bench_cli.main(["station", "check", str(sim_station_file()), "--json", "--claims"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and len(out["instruments"]) == 5
    gradable = {e["claim_id"] for e in out["envelope"] if e["gradable_with_station"]}
    assert "dps310-absolute-accuracy" in gradable and "si115x-als-resolution-mlx" not in gradable


def test_cli_check_with_a_bad_station_stages_nothing(tmp_path, monkeypatch, capsys):
    opened = []
    monkeypatch.setattr(selection, "open_chambers", lambda *args, **kwargs: opened.append(args) or {})
    wrong = _write_station(tmp_path, lambda d: d["instruments"]["thermal_stage"]["idn"].update(model="TC-999"))
    code = bench_cli.main(["check", "--all", "--backend", "sim", "--station", str(wrong), "--json"])
    assert code == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["type"] == "StationError" and "TC-999" in error["message"]
    assert opened == []  # the chambers were never opened, so nothing was staged
