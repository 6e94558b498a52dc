"""A declared step settles in seconds (`Step.settle_s`): one rule for the seconds rows cover, refused where no rule
applies, planned with the longest settle of a shared staging, read in chunks only when it is asked for; and a
procedure declares the SET lists it sends (`Declaration.stagings`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from protocols.declaration import ROW_PERIOD_FLOOR_S, Declaration, DeclarationError, Step, covered_seconds
from protocols.planner import PlanItem, plan
from protocols.runner import ProtocolContext
from protocols.staging import Chambers


def _evaluate(e):  # never called: these declarations are planned, not graded
    raise AssertionError("not evaluated")


@dataclass
class _Frame:
    values: np.ndarray
    host_timestamps: np.ndarray | None
    reconnected: bool = False
    names: tuple[str, ...] = ("counter",)

    def __len__(self) -> int:
        return len(self.values)

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.names.index(name)]


class _Rows:
    """A wind tunnel of one column, rows `period` s apart (or no timestamps at all); the sizes of its reads kept."""

    config = "standard"

    def __init__(self, period: float | None, reconnect_on: int | None = None) -> None:
        self.period, self.reconnect_on, self.t, self.measured = period, reconnect_on, 0.0, []

    def set_many(self, values):
        return dict(values)

    def measure(self, n: int) -> _Frame:
        self.measured.append(n)
        stamps = None
        if self.period is not None:
            stamps = self.t + self.period * np.arange(1, n + 1)
            self.t = float(stamps[-1])
        return _Frame(np.arange(n, dtype=float)[:, None], stamps, reconnected=len(self.measured) == self.reconnect_on)


def test_the_seconds_rows_cover_are_their_stamps_never_below_rows_times_the_floor():
    assert covered_seconds(np.array([10.0, 12.5]), 2, 0.12) == 2.5
    assert covered_seconds(np.array([10.0, 10.0, 10.0]), 3, 0.12) == pytest.approx(0.36)  # one stamp per read
    assert covered_seconds(None, 10, 0.12) == pytest.approx(1.2)  # no stamps: the floor alone
    assert ROW_PERIOD_FLOOR_S == {"wt": 0.12}


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_step_refuses_settle_seconds_that_are_not_finite_and_non_negative(bad):
    with pytest.raises(DeclarationError, match=r"step 'x': settle_s: expected finite seconds >= 0, got"):
        Step("x", (("load_in", 1.0),), ("rpm_in",), settle_s=bad)


def test_settling_in_seconds_needs_a_chamber_with_a_known_shortest_row():
    step = Step("lamp", (("red", 255.0),), ("light_3",), settle_s=2.0)
    with pytest.raises(DeclarationError, match=r"protocol 'test.lt'.*expected a chamber with a known shortest row "
                                               r"\(wt\) to time in seconds, got 'lt'"):
        Declaration(key="test.lt", chamber="lt", unit="lx", steps=(step,), evaluate=_evaluate, description="")
    with pytest.raises(DeclarationError, match=r"reading 3 s of light tunnel rows: expected a chamber"):
        Chambers(ProtocolContext(chambers={"lt": _Rows(0.1)})).read_for("lt", 3.0, ("counter",))


def test_stagings_are_declared_by_a_procedure_only():
    with pytest.raises(DeclarationError, match="stagings are a procedure's"):
        Declaration(key="test.s", chamber="wt", unit="x", description="", evaluate=_evaluate,
                    steps=(Step("a", (("load_in", 1.0),), ("rpm_in",)),), stagings=((("load_in", 0.5),),))
    d = Declaration(key="test.p", chamber="wt", unit="x", description="", procedure=lambda reader, claim: None,
                    stagings=((("load_in", 0.5), ("hatch", 0.0)),), restore=(("load_in", 0.0),))
    assert d.all_settings() == [{"load_in": 0.5, "hatch": 0.0}, {"load_in": 0.0}]
    assert d.describe()["stagings"] == [[{"variable": "load_in", "value": 0.5}, {"variable": "hatch", "value": 0.0}]]


def test_a_shared_staging_settles_for_the_longest_seconds_and_rows_its_users_ask_for():
    timed = Declaration(key="test.timed", chamber="wt", unit="x", description="", evaluate=_evaluate,
                        steps=(Step("full", (("load_in", 1.0),), ("rpm_in",), settle_s=8.0),))
    also = Declaration(key="test.also", chamber="wt", unit="x", description="", evaluate=_evaluate,
                       steps=(Step("full too", (("load_in", 1.0), ("load_out", 0.0)), ("current_in",), settle_s=3.0),))
    alone = plan([PlanItem("t", timed, None, False)], rows=10, settle_rows=20)
    assert (alone.stagings[0].settle_s, alone.stagings[0].settle_rows) == (8.0, 0)  # seconds: no default rows
    both = plan([PlanItem("t", timed, None, False), PlanItem("a", also, None, False)], rows=10, settle_rows=20)
    (staging,) = both.stagings
    assert (staging.settle_s, staging.settle_rows) == (8.0, 0) and staging.to_dict()["settle_s"] == 8.0


@pytest.mark.parametrize("period,rows", [(1.0, 14), (None, 70)])
def test_a_settle_in_seconds_reads_chunks_until_covered_and_counts_them(period, rows):
    """1-s rows: 14 rows (13 s by the stamps, 7 rows only 6 s); no stamps at all: ⌈8/0.12⌉ = 67 → 70 rows."""
    chamber = _Rows(period)
    chambers = Chambers(ProtocolContext(chambers={"wt": chamber}))
    settled = chambers.stage("wt", {"load_in": 1.0}, 0, "full", settle_s=8.0)
    assert (settled.rows, chamber.measured, chambers.rows) == (rows, [7] * (rows // 7), {"wt": rows})
    assert settled.seconds >= 8.0 and not settled.reconnected


def test_a_settle_in_rows_stays_one_read_and_a_reconnect_while_settling_is_reported():
    chamber = _Rows(1 / 7)
    chambers = Chambers(ProtocolContext(chambers={"wt": chamber}))
    assert chambers.stage("wt", {}, 20, "rows").rows == 20 and chamber.measured == [20]
    flaky = _Rows(1 / 7, reconnect_on=2)
    assert Chambers(ProtocolContext(chambers={"wt": flaky})).stage("wt", {}, 0, "s", settle_s=2.0).reconnected
