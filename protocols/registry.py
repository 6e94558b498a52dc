"""The registry from a claim's protocol key to the code that measures it, and `check_claim`, which runs one.

Why one place: a check is always the same sequence — decide what can be decided before anything is staged
(an intrinsically unmatchable decisive condition, a resolution-limited claim, a component the chamber only
engages), otherwise stage, measure and hand the Measurement to the decision rule. Keeping that sequence here
means the CLI, the chamber tools API and the main job all grade a claim the same way.

A protocol declares what it stages (a SET list) and what it reads, so an operator (or the API's describe call)
can see what the chamber will do before it does it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol as TypingProtocol

from protocols.claims import Claim
from protocols.measurement import Measurement
from protocols.verdict import CapabilityCheck, Verdict, verdict

log = logging.getLogger(__name__)


class ChamberLike(TypingProtocol):
    """What protocols use of chamber.driver.Chamber (protocols sit above chamber/, but take it as a parameter)."""

    config: str

    def set_many(self, values: dict[str, float]) -> Any: ...

    def measure(self, n: int) -> Any: ...


class ProtocolUnavailable(RuntimeError):
    """The protocol needs a chamber that is not connected (names which one)."""


@dataclass
class ProtocolContext:
    """What a protocol run may use: the connected chambers by kind ("wt"/"lt"), a calibration, sizes, and an
    opened station of lab instruments (chamber.instruments.Station; None = the chamber alone)."""

    chambers: Mapping[str, ChamberLike]
    calibration: Any | None = None  # calibration.cross_sensor.CrossSensorCalibration
    rows: int = 200
    settle_rows: int = 20
    progress: Callable[[str], None] = lambda message: None
    station: Any | None = None  # chamber.instruments.Station

    def chamber(self, kind: str) -> ChamberLike:
        if kind not in self.chambers:
            have = ", ".join(sorted(self.chambers)) or "none"
            name = {"wt": "wind tunnel", "lt": "light tunnel"}.get(kind, kind)
            raise ProtocolUnavailable(f"this protocol needs the {name} ({kind!r}); connected: {have}")
        return self.chambers[kind]


@dataclass(frozen=True)
class ProtocolOutcome:
    """A protocol's result: a Measurement for the decision rule, or a verdict it could decide without one."""

    measurement: Measurement | None = None
    decided: Verdict | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimProtocol:
    key: str
    chamber: str | None  # "wt" | "lt" | None when nothing is staged
    stages: tuple[tuple[str, float], ...]  # the SET list, in order
    reads: tuple[str, ...]
    description: str
    run: Callable[[ProtocolContext, Claim], ProtocolOutcome]
    precheck: Callable[[ProtocolContext, Claim], CapabilityCheck | None] | None = None
    instruments: tuple[str, ...] = ()  # lab instruments it needs (chamber.instruments kinds); () = chamber only

    def describe(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "chamber": self.chamber,
            "instruments": list(self.instruments),
            "stages": [{"variable": n, "value": v} for n, v in self.stages],
            "reads": list(self.reads),
            "description": self.description,
        }


_REGISTRY: dict[str, ClaimProtocol] = {}


def register(protocol: ClaimProtocol) -> ClaimProtocol:
    if protocol.key in _REGISTRY:
        raise ValueError(f"protocol {protocol.key!r} registered twice")
    _REGISTRY[protocol.key] = protocol
    return protocol


def protocols() -> dict[str, ClaimProtocol]:
    _load_builtin()
    return dict(_REGISTRY)


def protocol_for(claim: Claim) -> ClaimProtocol | None:
    """The claim's protocol, None when it has none; an unknown key is an error naming the known keys."""
    if claim.protocol is None:
        return None
    known = protocols()
    if claim.protocol not in known:
        raise KeyError(f"claim {claim.id}: protocol {claim.protocol!r} is not registered; known: {sorted(known)}")
    return known[claim.protocol]


def _load_builtin() -> None:
    # Imported for their register() side effect; done lazily so the registry module itself stays import-light.
    from protocols import barometer_protocols, current_sensor_protocols, light_sensor_protocols  # noqa: F401
    from protocols import instrument_protocols  # noqa: F401


@dataclass(frozen=True)
class CheckResult:
    claim: Claim
    verdict: Verdict
    measurement: Measurement | None
    protocol: str | None
    precheck: CapabilityCheck | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        # The verdict's and the measurement's own dicts already hold their values as JSON-ready strings; the
        # summary fields are taken from them rather than converted a second time.
        v = self.verdict
        vd = v.to_dict()
        md = None if self.measurement is None else self.measurement.to_dict()
        return {
            "claim_id": self.claim.id,
            "component": self.claim.component,
            "parameter": self.claim.parameter,
            "verdict": vd["verdict"],
            "class": vd["inconclusive_class"],
            "measured": None if md is None else self._measured_in_claim_unit(vd, md),
            "distance": vd["distance"],
            "combined_uncertainty": vd["combined_uncertainty"],
            "claim_unit": self.claim.unit,
            "matched_conditions": list(v.matched_conditions),
            "unmatched_conditions": list(v.unmatched_conditions),
            "rule": {"name": v.rule, "version": v.rule_version, "boundary": v.boundary_convention},
            "reason": v.reason,
            "protocol": self.protocol,
            "precheck": None if self.precheck is None else self.precheck.to_dict(),
            "verdict_detail": vd,
            "measurement_detail": md,
            "details": self.details,
        }

    @staticmethod
    def _measured_in_claim_unit(vd: dict[str, Any], md: dict[str, Any]) -> dict[str, Any]:
        """The measurement as the decision rule saw it: converted to the claim's unit, reported digits kept.

        `vd` and `md` are the verdict's and the measurement's `to_dict()`."""
        converted = vd["measured"] is not None
        return {
            "value": vd["measured"] if converted else md["value"],
            "unit": vd["unit"] if converted else md["unit"],
            "u": vd["u"] if converted else md["u"],
            "k": md["k"],
            "dof": md["dof"],
            "n": md["n"],
            "as_measured": {"value": md["value"], "u": md["u"], "unit": md["unit"]},
        }


def instrument_protocol_for(claim: Claim, station: Any | None) -> ClaimProtocol | None:
    """The claim's instrument protocol when `station` has every instrument it needs wired to the claim's part."""
    if station is None or claim.instrument_protocol is None:
        return None
    known = protocols()
    if claim.instrument_protocol not in known:
        raise KeyError(f"claim {claim.id}: instrument protocol {claim.instrument_protocol!r} is not registered")
    protocol = known[claim.instrument_protocol]
    if all(station.provides(kind, claim.component) for kind in protocol.instruments):
        return protocol
    return None


def check_claim(claim: Claim, context: ProtocolContext) -> CheckResult:
    """Grade one claim: pre-decide what needs no staging, else run its protocol and apply the decision rule.

    Link loss or an abort inside the protocol becomes a Measurement with that status, hence verdict "error"
    (never "fail"); a protocol needing a chamber that is not connected is also "error", with the reason.
    With a station (context.station) that has every instrument the claim's `instrument_protocol` needs, wired
    to the claim's part, that protocol runs instead of the chamber protocol; without one, nothing changes.
    """
    protocol = instrument_protocol_for(claim, context.station) or protocol_for(claim)
    key = None if protocol is None else protocol.key
    realised = set(protocol.instruments) if protocol is not None else set()
    intrinsic = [c for c in claim.conditions if c.decisive and c.unmatchable and c.instrument not in realised]
    if protocol is None:
        return CheckResult(claim, verdict(claim, None), None, key)

    precheck = protocol.precheck(context, claim) if protocol.precheck else None
    if precheck is not None and precheck.resolution_limited:
        decided = Verdict(
            claim_id=claim.id,
            verdict="inconclusive",
            inconclusive_class="resolution-limited",
            reason=f"decided before staging: {precheck.reason}",
            unit=claim.unit,
            notes=("capability pre-check: nothing was staged",),
        )
        return CheckResult(claim, decided, None, key, precheck=precheck)

    try:
        outcome = protocol.run(context, claim)
    except ProtocolUnavailable as exc:
        failed = Verdict(claim_id=claim.id, verdict="error", reason=str(exc))
        return CheckResult(claim, failed, None, key, precheck=precheck)
    if outcome.decided is not None:
        return CheckResult(claim, outcome.decided, outcome.measurement, key, precheck, outcome.details)
    if outcome.measurement is None and intrinsic:
        return CheckResult(claim, verdict(claim, None), None, key, precheck, outcome.details)
    return CheckResult(claim, verdict(claim, outcome.measurement), outcome.measurement, key, precheck, outcome.details)
