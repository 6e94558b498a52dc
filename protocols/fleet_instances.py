"""One instance of a part a protocol measured, with its own measurement: what a fleet grades as a unit.

Why: a protocol often reads several instances of the claim's component at once — the four DPS310s of a wind
tunnel in one fans-off staging, the three Si1151s of a light tunnel — and reports one chamber-level measurement
(their mean, their largest code). A datasheet claim is about every part, so a fleet grades each instance on its
own (`chamber/position`, protocols/fleet_units.py). A protocol exposes its instances beside its measurement in
`ProtocolOutcome.details[INSTANCES]` (a tuple of Instance); the runner moves them onto CheckResult.instances, so
they never reach a result's JSON details as objects, and a protocol that exposes none is one unit per chamber.

Each instance carries the measurement the decision rule grades (its value and budget in the protocol's unit, the
conditions matched as for the chamber-level one) and, for ISO 5725-2's s_r, s_L and s_R, its repeated readings of
the same quantity as that value, in the same unit (a barometer's rows for its mean pressure; none for a count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from calibration.budget import UncertaintyBudget, UncertaintyComponent, type_a
from protocols.measurement import Measurement

INSTANCES = "instances"
"""The ProtocolOutcome.details key a protocol puts its instances under (the runner takes them out)."""


@dataclass(frozen=True)
class Instance:
    """One measured instance: its `position` (a chamber variable or a named place: pressure_upwind, light_2),
    its own measurement and its repeated readings (in the measurement's unit; () when it has none)."""

    position: str
    measurement: Measurement
    readings: tuple[float, ...] = ()


def mean_instance(position: str, readings: Sequence[float] | np.ndarray, *, quantity: str, unit: str,
                  matched: Iterable[str], extra: Sequence[UncertaintyComponent] = (), offset: float = 0.0,
                  decimals: int | None = None, details: dict[str, Any] | None = None) -> Instance:
    """An instance whose value is the mean of its readings minus `offset` (a reference's mean), its budget the
    Type A of that mean plus `extra` components; the readings kept (each minus `offset`: the same quantity)."""
    values = np.asarray(readings, dtype=np.float64) - offset
    budget = UncertaintyBudget(quantity=quantity, unit=unit,
                               components=(type_a(f"{position} readings (Type A of the mean)", values.tolist()),
                                           *extra))
    measurement = Measurement.from_budget(float(values.mean()), budget, decimals=decimals, n=int(values.size),
                                          matched_conditions=list(matched), details=dict(details or {}))
    return Instance(position, measurement, tuple(float(x) for x in values))


def position_of(reads: Sequence[str]) -> str:
    """The position name of an instance read through `reads`: `light_k` for a light sensor's ir_k and vis_k, the
    one variable it is read through, else the variables joined by '+'."""
    names = list(dict.fromkeys(reads))
    suffixes = {n.split("_", 1)[1] for n in names if n.startswith(("ir_", "vis_"))}
    if names and len(suffixes) == 1 and all(n.startswith(("ir_", "vis_")) for n in names):
        return f"light_{suffixes.pop()}"
    return names[0] if len(names) == 1 else "+".join(names)


def take_instances(details: dict[str, Any]) -> tuple[dict[str, Any], tuple[Instance, ...]]:
    """`details` without its instances, and the instances (a malformed entry is refused, naming what arrived)."""
    rest = dict(details)
    found = rest.pop(INSTANCES, ())
    found = tuple(found or ())
    if not all(isinstance(i, Instance) for i in found):
        raise TypeError(f"details[{INSTANCES!r}]: expected Instance objects, got "
                        f"{sorted({type(i).__name__ for i in found})}")
    return rest, found
