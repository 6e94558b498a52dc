"""The runner's claim guard and a lab with one chamber (issue 19).

An exception while handling one claim — choosing its protocol, its pre-check, the rule on its measurement — used
to escape `check_claim`/`run_batch` and stop the batch; it is now that claim's "error" naming the exception, and the
other claims keep their verdicts. A claim whose chamber is not connected is inconclusive ("chamber not connected",
naming the chamber), not "error": the lab did not try.
"""

from __future__ import annotations

import dataclasses

import pytest

from chamber import open_chamber
from protocols import registry
from protocols.claims import get_claim
from protocols.declaration import ProtocolOutcome
from protocols.measurement import Measurement
from protocols.runner import ProtocolContext, check_claim, run_batch

LT_CLAIM = "si115x-adc-bit-depth"  # light tunnel
WT_CLAIM = "dps310-operating-range"  # wind tunnel


@pytest.fixture()
def chambers():
    opened = {kind: open_chamber(backend="sim", chamber=kind, seed=7) for kind in ("wt", "lt")}
    yield opened
    for c in opened.values():
        c.close()


def _patch(monkeypatch: pytest.MonkeyPatch, claim_id: str, **changes) -> None:
    key = get_claim(claim_id).protocol
    monkeypatch.setitem(registry.BY_KEY, key, dataclasses.replace(registry.BY_KEY[key], **changes))


def test_a_precheck_that_raises_is_that_claims_error_and_the_batch_goes_on(chambers, monkeypatch):
    def broken_precheck(claim, inputs):
        raise ValueError("codes: expected 0..65535, got -1")

    _patch(monkeypatch, LT_CLAIM, precheck=broken_precheck)
    codes, op = run_batch([get_claim(LT_CLAIM), get_claim(WT_CLAIM)], ProtocolContext(chambers=chambers, rows=40),
                          calibrate=True).results
    assert codes.verdict.verdict == "error"
    assert "ValueError: codes: expected 0..65535, got -1" in codes.verdict.reason
    assert codes.measurement.details["error_type"] == "ValueError"
    assert op.verdict.verdict == "pass"  # the next claim was still graded


def test_a_measurement_the_rule_refuses_is_an_error_naming_the_exception(chambers, monkeypatch):
    _patch(monkeypatch, LT_CLAIM, evaluate=lambda e: ProtocolOutcome(
        measurement=Measurement(value=1, unit="furlong", u=0.1)))
    result = check_claim(get_claim(LT_CLAIM), ProtocolContext(chambers=chambers, rows=20))
    assert result.verdict.verdict == "error" and "VerdictError" in result.verdict.reason


def test_a_claim_naming_an_unknown_protocol_is_its_error_not_the_batchs(chambers):
    unknown = get_claim(WT_CLAIM).model_copy(update={"id": "made-up", "protocol": "no.such_protocol"})
    bad, op = run_batch([unknown, get_claim(WT_CLAIM)], ProtocolContext(chambers=chambers, rows=40)).results
    assert bad.verdict.verdict == "error" and "UnknownProtocol" in bad.verdict.reason
    assert op.verdict.verdict == "pass"


def test_a_claim_of_a_chamber_not_connected_is_inconclusive_naming_it(chambers):
    context = ProtocolContext(chambers={"lt": chambers["lt"]}, rows=40)
    op, codes = run_batch([get_claim(WT_CLAIM), get_claim(LT_CLAIM)], context, calibrate=True).results
    assert op.verdict.verdict == "inconclusive"
    assert op.verdict.inconclusive_class == "chamber-not-connected"
    assert op.verdict.reason.startswith("chamber not connected: ")
    assert "wind tunnel ('wt')" in op.verdict.reason and "connected: lt" in op.verdict.reason
    assert op.measurement is None
    assert codes.verdict.verdict == "pass"  # the connected chamber's claim is graded as usual
