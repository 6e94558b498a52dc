"""chamber.selection: the one way every command opens chambers (sim, serial URLs, emulated boards on ptys)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import chamber.safe_state as safe_state
from chamber.selection import ChamberSelection, SelectionError, open_chambers, read_params, selection_of
from simulator.board import running_board


def test_two_boards_announcing_the_same_chamber_are_refused_and_the_first_is_left_safe(monkeypatch):
    made_safe: list[str] = []
    real_apply = safe_state.apply_safe_state
    monkeypatch.setattr(safe_state, "apply_safe_state",
                        lambda c, s: made_safe.append(c.layout.chamber) or real_apply(c, s))
    with running_board("wt") as a, running_board("wt") as b:
        with pytest.raises(SelectionError, match=f"two boards announce chamber 'wt': {a.url} and {b.url}"):
            open_chambers(ChamberSelection(backend="serial", ports=(a.url, b.url)))
    assert made_safe == ["wt", "wt"]  # the second board, then the first, each left safe and closed


def test_params_are_read_as_yaml_or_json_and_must_be_a_mapping(tmp_path: Path):
    (tmp_path / "p.yaml").write_text("wind_tunnel: {rpm_noise_rpm: 4.0}\n")
    (tmp_path / "p.json").write_text(json.dumps({"wind_tunnel": {"rpm_noise_rpm": 4.5}}))
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "field.yaml").write_text("barometer_noise_pa: {8: 0.5}\n")  # belongs under wind_tunnel
    assert read_params(tmp_path / "p.yaml") == {"wind_tunnel": {"rpm_noise_rpm": 4.0}}
    assert read_params(tmp_path / "p.json") == {"wind_tunnel": {"rpm_noise_rpm": 4.5}}
    with pytest.raises(SelectionError, match="list.yaml: expected a mapping of SimParams fields at the top level, got list$"):
        read_params(tmp_path / "list.yaml")
    with pytest.raises(SelectionError, match=r"field.yaml: unexpected field 'barometer_noise_pa' \(expected one of: version, source, wind_tunnel, "):
        read_params(tmp_path / "field.yaml")  # checked when read, naming the file (not at the first row)


def test_contradictory_selections_are_refused_in_one_line():
    with pytest.raises(SelectionError, match=r"^backend serial needs a port URL \(--port"):
        selection_of("serial", None)
    with pytest.raises(SelectionError, match="backend sim and a port URL exclude each other; got socket://x:1"):
        selection_of("sim", ["socket://x:1"])
    assert selection_of(None, ["socket://x:1"]).backend == "serial" and selection_of(None, None).backend == "sim"
    # a bad field is worded as every settings file's errors are (model_file): the field, expected and got
    with pytest.raises(SelectionError, match=r"^field 'kinds\[0\]': Input should be 'wt' or 'lt' \(got 'xx'\); "
                                             r"field 'seed': Input should be a valid integer.* \(got 'one'\)$"):
        selection_of("sim", None, kinds=("xx",), seed="one")


def test_emulated_boards_are_opened_through_the_serial_driver_and_stopped_on_close():
    with open_chambers(ChamberSelection(backend="emulated", seed=3)) as opened:
        assert sorted(opened.chambers) == ["lt", "wt"]
        where = opened.provenance()
        assert [w["kind"] for w in where] == ["lt", "wt"] and all(w["emulated"] for w in where)
        assert all(os.path.realpath(w["port"]).startswith("/dev/pts/") for w in where)  # a pty, through its link
        assert opened.chambers["wt"].link_stats()["segments_received"] > 0
    assert opened.chambers == {} and [o.chamber for o in opened.outcomes] == ["wt", "lt"]


def test_a_limits_file_for_one_chamber_limits_only_that_one_unless_one_chamber_is_asked(tmp_path: Path):
    limits = tmp_path / "limits.yaml"
    limits.write_text("chamber: wt\nvariables: {load_in: {max: 0.5}}\n")
    with open_chambers(selection_of("sim", None, limits=limits)) as opened:
        assert opened.chambers["lt"].limits is None and opened.chambers["wt"].limits is not None
    with pytest.raises(Exception, match="limits are for chamber 'wt', but the board is 'lt'"):
        open_chambers(selection_of("sim", None, kinds=("lt",), limits=limits, one_chamber=True))
