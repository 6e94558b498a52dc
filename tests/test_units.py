"""protocols.units: one exact SI prefix table, its float view, and the callers that read it."""

from __future__ import annotations

from fractions import Fraction

import pytest

from agent.reader_text import SI_PREFIX as READER_PREFIX
from agent.reader_text import unit_factor
from protocols.units import SI_PREFIX, SI_PREFIX_FLOAT
from protocols.verdict import unit_scale


def test_the_table_is_exact_and_micro_has_three_spellings():
    assert all(isinstance(f, Fraction) for f in SI_PREFIX.values())
    assert SI_PREFIX["µ"] == SI_PREFIX["μ"] == SI_PREFIX["u"] == Fraction(1, 10**6)
    assert SI_PREFIX["h"] * SI_PREFIX["c"] == 1 and SI_PREFIX["da"] * SI_PREFIX["d"] == 1


def test_the_float_view_is_the_nearest_float_of_each_exact_factor():
    assert list(SI_PREFIX_FLOAT) == list(SI_PREFIX)
    for p, f in SI_PREFIX.items():
        assert SI_PREFIX_FLOAT[p] == float(f) and Fraction(SI_PREFIX_FLOAT[p]).limit_denominator(10**12) == f
    assert SI_PREFIX_FLOAT["n"] == 1e-9 and SI_PREFIX_FLOAT["M"] == 1e6


def test_the_decision_rule_and_the_reader_read_the_same_table():
    assert READER_PREFIX is SI_PREFIX_FLOAT
    assert unit_scale("Pa", "hPa") == Fraction(1, 100) and unit_scale("uA", "µA") == 1
    assert unit_scale("daPa", "Pa") == 10  # a prefix the verdict knew; the reader now knows it too
    assert unit_factor("daPa", "Pa") == 10.0 and unit_factor("mV", "V") == 1e-3
    assert unit_factor("μA", "nA") == pytest.approx(1000.0, rel=1e-12)  # a ratio of floats, as before
