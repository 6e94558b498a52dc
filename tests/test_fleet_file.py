"""The fleet file and `demo:N` (protocols/fleet_file.py): what a fleet is, and one-line refusals naming the file,
the field, what was expected and what arrived, before any chamber is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocols.fleet_file import DEMO_MAX, FleetFileError, load_fleet


def _write(tmp_path: Path, text: str, name: str = "fleet.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_demo_is_n_units_of_each_kind_with_serials_and_the_station(tmp_path):
    station = tmp_path / "station.yaml"
    fleet = load_fleet("demo:3", demo_station=station)
    assert [m.id for m in fleet.members] == ["wt1", "wt2", "wt3", "lt1", "lt2", "lt3"]
    assert [m.board for m in fleet.members][:3] == ["emulated:wt?unit=1", "emulated:wt?unit=2", "emulated:wt?unit=3"]
    assert [m.kind for m in fleet.members] == ["wt"] * 3 + ["lt"] * 3
    assert all(m.station == station and m.lab is None and not m.offsets for m in fleet.members)
    assert fleet.source == "demo:3"


@pytest.mark.parametrize("spec", ["demo:0", f"demo:{DEMO_MAX + 1}", "demo:x", "demo:"])
def test_a_demo_count_out_of_range_is_refused_in_one_line(spec):
    with pytest.raises(FleetFileError) as err:
        load_fleet(spec)
    message = str(err.value)
    assert "\n" not in message and spec in message and f"1..{DEMO_MAX}" in message


def test_a_fleet_file_reads_boards_labs_credentials_stations_and_planted_offsets(tmp_path):
    (tmp_path / "north.ini").write_text("[api_keys]\nuser = a\npassword = b\n")
    (tmp_path / "station.yaml").write_text("name: x\n")  # read when the chamber opens, not here
    path = _write(tmp_path, """
chambers:
  wt-a: {board: "emulated:wt?unit=3", offsets: {pressure_upwind: 150}, station: station.yaml}
  wt-b: {board: "socket://127.0.0.1:4000", lab: zurich}
  wt-c: {board: "lab+http://127.0.0.1:8780/v0/wt-rt-1", lab: north, credentials: north.ini}
""")
    fleet = load_fleet(path)
    a, b, c = fleet.members
    assert (a.id, a.kind, dict(a.offsets), a.station) == ("wt-a", "wt", {"pressure_upwind": 150.0},
                                                          tmp_path / "station.yaml")
    assert (b.kind, b.lab, b.emulated) == (None, "zurich", False)  # a real board says its kind when it connects
    assert c.credentials == tmp_path / "north.ini" and c.lab == "north"
    assert fleet.labs == ["north", "zurich"] and fleet.source == str(path)


@pytest.mark.parametrize("body, expected", [
    ("chambers: {}", "chambers"),
    ("chambers:\n  a: {board: emulated:xx}", "emulated:wt or emulated:lt"),
    ("chambers:\n  a: {board: 'emulated:wt?unit=-1'}", "unit"),
    ("chambers:\n  a: {board: 'emulated:wt', offsets: {red: 3}}", "pressure_"),
    ("chambers:\n  a: {board: /dev/ttyACM0, offsets: {pressure_upwind: 150}}", "emulated board"),
    ("chambers:\n  a: {board: /dev/ttyACM0, credentials: x.ini}", "Remote Lab board"),
    ("chambers:\n  a: {board: /dev/ttyACM0, colour: red}", "colour"),
    ("chambers:\n  'a b': {board: /dev/ttyACM0}", "chamber id 'a b'"),
    ("chambers:\n  a: {board: /dev/ttyACM0, lab: 'x y'}", "lab name"),
    ("chambers:\n  a: {board: /dev/ttyACM0, station: missing.yaml}", "missing.yaml"),
    ("chambers:\n  a: {board: /dev/ttyACM0}\n  a: {board: /dev/ttyACM1}", "appears twice"),
])
def test_a_bad_fleet_file_is_refused_in_one_line_naming_file_and_field(tmp_path, body, expected):
    path = _write(tmp_path, body + "\n")
    with pytest.raises(FleetFileError) as err:
        load_fleet(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and expected in message, message


def test_a_missing_fleet_file_is_named(tmp_path):
    with pytest.raises(FleetFileError, match="does not exist"):
        load_fleet(tmp_path / "nope.yaml")
