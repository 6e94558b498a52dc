"""The protocols this product has, as one explicit list, and the lookup from a claim to its protocol.

Why a list and not a registry filled on import: a reader sees every protocol in one place, importing a module
has no side effect, and nothing here imports the modules' users (the runner, the API), so protocols/ has no
import cycle. A key that appears twice is an error at import, naming it.
"""

from __future__ import annotations

from typing import Any

from protocols import (
    angle_sensor_protocols,
    barometer_protocols,
    current_sensor_protocols,
    fan_protocols,
    instrument_protocols,
    light_sensor_protocols,
    potentiometer_protocols,
)
from protocols.claims import Claim
from protocols.declaration import Declaration


class UnknownProtocol(KeyError):
    """A claim names a protocol key this product does not have (the message lists the known keys)."""


PROTOCOLS: tuple[Declaration, ...] = (
    *barometer_protocols.DECLARATIONS,
    *current_sensor_protocols.DECLARATIONS,
    *light_sensor_protocols.DECLARATIONS,
    *instrument_protocols.DECLARATIONS,
    *fan_protocols.DECLARATIONS,
    *potentiometer_protocols.DECLARATIONS,
    *angle_sensor_protocols.DECLARATIONS,
)


def _by_key(declarations: tuple[Declaration, ...]) -> dict[str, Declaration]:
    out: dict[str, Declaration] = {}
    for d in declarations:
        if d.key in out:
            raise ValueError(f"protocol {d.key!r} is declared twice")
        out[d.key] = d
    return out


BY_KEY: dict[str, Declaration] = _by_key(PROTOCOLS)


def protocols() -> dict[str, Declaration]:
    """Every protocol by key (a fresh dict: callers may not change the product's list)."""
    return dict(BY_KEY)


def protocol_for(claim: Claim) -> Declaration | None:
    """The claim's chamber protocol, None when it has none; an unknown key is an error naming the known keys."""
    if claim.protocol is None:
        return None
    if claim.protocol not in BY_KEY:
        raise UnknownProtocol(f"claim {claim.id}: protocol {claim.protocol!r} is not declared; known: {sorted(BY_KEY)}")
    return BY_KEY[claim.protocol]


def declared_protocol(claim: Claim) -> Declaration | None:
    """The claim's chamber protocol, or None when it has none or names one that is not declared (for a caller that
    only describes or plans a call: the call itself refuses an undeclared protocol, naming the known keys)."""
    try:
        return protocol_for(claim)
    except UnknownProtocol:
        return None


def instrument_protocol_for(claim: Claim, station: Any | None) -> Declaration | None:
    """The claim's instrument protocol when `station` has every instrument it needs wired to the claim's part."""
    if station is None or claim.instrument_protocol is None:
        return None
    if claim.instrument_protocol not in BY_KEY:
        raise UnknownProtocol(f"claim {claim.id}: instrument protocol {claim.instrument_protocol!r} is not declared")
    protocol = BY_KEY[claim.instrument_protocol]
    if all(station.provides(kind, claim.component) for kind in protocol.instruments):
        return protocol
    return None


def selected_protocol(claim: Claim, station: Any | None) -> Declaration | None:
    """What grades the claim: its instrument protocol when the station can run it, else its chamber protocol."""
    return instrument_protocol_for(claim, station) or protocol_for(claim)
