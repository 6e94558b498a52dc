"""The safe state's confirmation rule (chamber/safe_state.py), on the in-process chamber: the read-back tolerance at
its exact boundary, what an unconfirmed outcome says, and the OpenChambers contract (raise only from an error that
is already propagating). The interrupted exchanges themselves are tested on the real firmware
(test_stop_real_firmware.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chamber.driver import Chamber
from chamber.safe_state import DEFAULT_SAFE, SafeStateUnconfirmed, apply_safe_state, resolve_safe_state, same_float32
from chamber.selection import OpenChambers
from chamber.sim_backend import SimBackend


def ulps(value: float, k: int) -> float:
    """`value` moved k float32 steps up."""
    out = np.float32(value)
    for _ in range(k):
        out = np.nextafter(out, np.float32(np.inf))
    return float(out)


def test_a_read_back_matches_within_one_float32_step_and_not_two():
    assert same_float32(0.8, float(np.float32(0.8)))  # the float32 the board keeps for "0.8"
    assert same_float32(0.8, ulps(0.8, 1)) and not same_float32(0.8, ulps(0.8, 2))
    assert same_float32(255.0, 255.0) and not same_float32(255.0, ulps(255.0, 2))
    assert same_float32(0.0, -0.0) and not same_float32(0.0, 1e-6)
    assert not same_float32(0.0, float("nan"))  # -9999 (unset) arrives as NaN: never confirmed


class MisreportingChamber(Chamber):
    """A chamber whose board reports load_in at 0.5 whatever it was set to (a unit test of the rule only)."""

    def read_back(self) -> dict[str, float]:
        return {**super().read_back(), "load_in": 0.5}


def test_a_read_back_that_disagrees_is_not_confirmed_and_names_the_value_left():
    chamber = MisreportingChamber(SimBackend("wt")).connect()
    chamber.set("load_in", 0.8)
    outcome = apply_safe_state(chamber, resolve_safe_state())
    assert not outcome.confirmed and outcome.applied == DEFAULT_SAFE["wt"]
    assert outcome.left_running == {"load_in": 0.5}
    assert outcome.text == ("safe state NOT confirmed on wt: load_in may still be 0.5 "
                            "(read back load_in=0.5, expected load_in=0)")


def test_a_confirmed_outcome_is_strict_json_with_unset_actuators_as_null():
    chamber = Chamber(SimBackend("wt")).connect()
    chamber.set("load_in", 0.8)
    outcome = apply_safe_state(chamber, resolve_safe_state())
    assert outcome.confirmed and outcome.left_running == {} and outcome.error is None
    assert outcome.readback["load_in"] == 0.0 and outcome.readback["load_out"] == 0.0
    data = json.loads(json.dumps(outcome.to_dict(), allow_nan=False))
    assert data["confirmed"] is True and data["text"] == ("safe state confirmed on wt: load_in=0, load_out=0, "
                                                          "hatch=0, pot_1=0 (read back)")
    assert None in data["readback"].values()  # e.g. pot_2, never set: the firmware's unset


def opened_misreporting() -> OpenChambers:
    chamber = MisreportingChamber(SimBackend("wt")).connect()
    chamber.set("load_in", 0.8)
    return OpenChambers(chambers={"wt": chamber}, warn=lambda line: None)


def test_open_chambers_raises_safe_state_unconfirmed_only_from_an_error_already_propagating():
    clean = opened_misreporting()
    with clean:
        pass
    assert [o.chamber for o in clean.unconfirmed] == ["wt"] and clean.outcomes == clean.unconfirmed

    failing = opened_misreporting()
    with pytest.raises(SafeStateUnconfirmed) as caught:
        with failing:
            raise RuntimeError("the run failed")
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert caught.value.outcomes == failing.outcomes and caught.value.unconfirmed == failing.unconfirmed

    handled = opened_misreporting()  # close() called from an except block: that error is the one propagating
    with pytest.raises(SafeStateUnconfirmed):
        try:
            raise KeyboardInterrupt("SIGTERM")
        except KeyboardInterrupt:
            handled.close()


def test_a_safe_state_the_limits_refuse_is_refused_at_open_and_nothing_is_set_at_the_exit(tmp_path, monkeypatch):
    """Refused at the start (exit 2, the setting named); the exit path then sends nothing: a safe state that
    cannot be sent is not 'unconfirmed' (exit 3), the board is as its reset left it. (A safe file that a limits
    file refuses is refused before anything opens; this is the connect-time check of a state built in code.)"""
    from chamber.errors import InvalidSetting
    from chamber.safe_state import SafeState
    from chamber.selection import open_chambers, selection_of

    (tmp_path / "limits.yaml").write_text("wt:\n  variables: {pot_2: {max: 50}}\n")
    selection = selection_of("sim", None, kinds=("wt",), limits=tmp_path / "limits.yaml", one_chamber=True)
    closed: list[OpenChambers] = []
    real_close = OpenChambers.close
    monkeypatch.setattr(OpenChambers, "close", lambda self, *a, **kw: closed.append(self) or real_close(self, *a, **kw))
    with pytest.raises(InvalidSetting, match="pot_2"):
        open_chambers(selection, safe=SafeState({"wt": {**DEFAULT_SAFE["wt"], "pot_2": 90.0}}, "a test"))
    (opened,) = closed
    assert opened.outcomes == [] and not opened.unconfirmed  # closed as connected: no SET tried, none failed
