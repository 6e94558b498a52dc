"""A source-measure unit powering one sensor rail: set the voltage, measure the current, sweep (Keithley 2450 SCPI).

Why a driver of its own: the SMU replaces a sensor board's fixed supply, so it is the one instrument that can
hurt the part. Every setting is checked against the rail's voltage limit *before* it is sent, refused settings
are read back from the error queue, and a reading at the current limit (compliance) is an error, never a
current. Two digital output lines select the state the rail's test fixture holds the sensor in (standby, a
measurement rate, active): on the 2450 these are `:DIG:LINE<n>:STAT`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

from chamber.instruments.base import InstrumentError, ResourceManagerLike, VisaInstrument

log = logging.getLogger(__name__)

T = TypeVar("T")

COMPLIANCE_FRACTION = 0.995
"""A reading at or above this fraction of the current limit is treated as compliance (the limit, not the load)."""


class ComplianceError(InstrumentError):
    """The SMU hit its current limit: the reading is the limit, not the load's current."""


class UnsafeSetting(InstrumentError, ValueError):
    """A setting outside the rail's limits; refused before anything is sent."""


@dataclass(frozen=True)
class SweepStep(Generic[T]):
    """One step of a voltage sweep: what was set, what the SMU measured at its terminals, what the caller saw."""

    set_v: float
    measured_v: float
    result: T


class SourceMeter(VisaInstrument):
    """A voltage-sourcing, current-measuring SMU on one rail."""

    def __init__(self, rm: ResourceManagerLike, resource: str, *, max_voltage: float, current_limit: float,
                 name: str = "smu", expect: tuple[str, str] | None = None, timeout_ms: int = 2000,
                 sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> None:
        if not (0 < max_voltage <= 20):
            raise UnsafeSetting(f"{name}: max_voltage must be in (0, 20] V, got {max_voltage!r}")
        if not (0 < current_limit <= 0.1):
            raise UnsafeSetting(f"{name}: current_limit must be in (0, 0.1] A, got {current_limit!r}")
        self.max_voltage = float(max_voltage)
        self.current_limit = float(current_limit)
        self._sleep = sleep
        super().__init__(rm, resource, name=name, expect=expect, timeout_ms=timeout_ms, **kwargs)

    # ------------------------------------------------------------------ configuration
    def configure(self, nplc: float = 1.0) -> None:
        """Source voltage, measure current on auto range, the rail's current limit; output off at 0 V."""
        self.output(False)
        for command in (":SOUR:FUNC VOLT", ':SENS:FUNC "CURR"', ":SENS:CURR:RANG:AUTO ON",
                        f":SOUR:VOLT:ILIM {self.current_limit:e}", f":SENS:CURR:NPLC {nplc:f}",
                        f":SOUR:VOLT {0.0:f}"):
            self.write(command, check_errors=True)

    def set_voltage(self, volts: float) -> None:
        v = float(volts)
        if not (0.0 <= v <= self.max_voltage):
            raise UnsafeSetting(f"{self.name}: refused {v} V; this rail allows 0 to {self.max_voltage} V")
        self.write(f":SOUR:VOLT {v:f}", check_errors=True)

    def source_voltage(self) -> float:
        return self.query_float(":SOUR:VOLT?")

    def output(self, on: bool) -> None:
        self.write(f":OUTP {1 if on else 0:d}", check_errors=True)

    def output_enabled(self) -> bool:
        return self.query(":OUTP?") == "1"

    def set_lines(self, code: int) -> None:
        """Drive digital lines 1 and 2 with the two bits of `code` (0..3): the fixture's state select."""
        if code not in (0, 1, 2, 3):
            raise UnsafeSetting(f"{self.name}: a fixture state code is 0..3 (two lines), got {code!r}")
        self.write(f":DIG:LINE1:STAT {code & 1:d}", check_errors=True)
        self.write(f":DIG:LINE2:STAT {(code >> 1) & 1:d}", check_errors=True)

    # ------------------------------------------------------------------ measurement
    def measure_current(self, n: int = 1) -> list[float]:
        """n current readings in A; ComplianceError when any sits at the current limit."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        readings = [self.query_float(":MEAS:CURR?") for _ in range(n)]
        worst = max(abs(r) for r in readings)
        if worst >= COMPLIANCE_FRACTION * self.current_limit:
            raise ComplianceError(f"{self.name}: current {worst:.4g} A at the limit {self.current_limit:.4g} A "
                                  "(compliance): the reading is the limit, not the load")
        return readings

    def measure_voltage(self) -> float:
        return self.query_float(":MEAS:VOLT?")

    def power(self, volts: float, *, settle_s: float = 0.01) -> float:
        """Set `volts`, switch the output on, wait `settle_s`; returns the voltage measured at the terminals."""
        self.set_voltage(volts)
        if not self.output_enabled():
            self.output(True)
        self._sleep(settle_s)
        return self.measure_voltage()

    def sweep(self, voltages: Sequence[float], at_each: Callable[[float], T], *, settle_s: float = 0.01) -> list[SweepStep[T]]:
        """Step through `voltages` (all checked first), calling `at_each(measured_v)` at each; output off after."""
        for v in voltages:
            if not (0.0 <= float(v) <= self.max_voltage):
                raise UnsafeSetting(f"{self.name}: sweep step {v} V outside 0..{self.max_voltage} V; nothing was set")
        steps: list[SweepStep[T]] = []
        try:
            for v in voltages:
                measured = self.power(float(v), settle_s=settle_s)
                steps.append(SweepStep(float(v), measured, at_each(measured)))
        finally:
            self.safe()
        return steps

    def safe(self) -> None:
        """Output off, 0 V (best effort: called on the way out of errors too)."""
        try:
            self.output(False)
            self.write(f":SOUR:VOLT {0.0:f}")
        except InstrumentError:
            log.warning("%s: could not put the rail in its safe state", self.name, exc_info=True)

    def reset(self) -> None:
        super().reset()
        self.configure()

    def close(self) -> None:
        if not self._closed:
            self.safe()
        super().close()
