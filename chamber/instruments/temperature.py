"""A temperature controller (thermal stage / forcing system): set a setpoint, hold it, read its control sensor.

Why `hold` waits on a stability criterion instead of a fixed delay: "temperature held" is a claim condition, so
the protocol must be able to say *that* the temperature was within its tolerance for a stated time before it
measured — and a stage that never settles is an error, not a long wait. The clock and sleep are passed in
(the simulated bench's clock advances on sleep; a real one uses time.monotonic / time.sleep).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from chamber.instruments.base import InstrumentError, ResourceManagerLike, VisaInstrument
from chamber.instruments.certificate import Certificate


class NotSettled(InstrumentError):
    """The temperature did not stay within tolerance of the setpoint before the timeout."""


@dataclass(frozen=True)
class HeldTemperature:
    """Evidence that a temperature was held: the readings over the stability window and the time it took."""

    setpoint_c: float
    readings_c: tuple[float, ...]
    settled_after_s: float
    tolerance_c: float
    stable_for_s: float


class TemperatureController(VisaInstrument):
    def __init__(self, rm: ResourceManagerLike, resource: str, *, certificate: Certificate,
                 limits_c: tuple[float, float] = (-55.0, 125.0), name: str = "temperature_controller",
                 expect: tuple[str, str] | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> None:
        certificate.require("temperature")
        self.certificate = certificate
        self.limits_c = (float(limits_c[0]), float(limits_c[1]))
        self._clock = clock
        self._sleep = sleep
        super().__init__(rm, resource, name=name, expect=expect, **kwargs)

    def set_setpoint(self, celsius: float) -> None:
        lo, hi = self.limits_c
        if not (lo <= celsius <= hi):
            raise InstrumentError(f"{self.name}: refused setpoint {celsius} °C; this position allows {lo}..{hi} °C")
        self.write(f":SOUR:TEMP {float(celsius):f}", check_errors=True)
        self.write(":OUTP 1", check_errors=True)

    def read_temperature_c(self) -> float:
        return self.query_float(":MEAS:TEMP?")

    def hold(self, celsius: float, *, tolerance_c: float = 0.2, stable_for_s: float = 60.0,
             poll_s: float = 5.0, timeout_s: float = 3600.0) -> HeldTemperature:
        """Set `celsius` and wait until every reading for `stable_for_s` is within ±tolerance_c of it."""
        self.set_setpoint(celsius)
        start = self._clock()
        window: list[tuple[float, float]] = []
        while True:
            now = self._clock()
            t = self.read_temperature_c()
            if abs(t - celsius) <= tolerance_c:
                window.append((now, t))
            else:
                window.clear()
            if window and now - window[0][0] >= stable_for_s:
                return HeldTemperature(celsius, tuple(r for _, r in window), window[0][0] - start,
                                       tolerance_c, stable_for_s)
            if now - start > timeout_s:
                raise NotSettled(f"{self.name}: temperature {t:.3f} °C not held within ±{tolerance_c} °C of "
                                 f"{celsius} °C for {stable_for_s} s after {timeout_s} s")
            self._sleep(poll_s)

    def release(self) -> None:
        """Output off: the stage returns towards room temperature."""
        self.write(":OUTP 0", check_errors=True)

    def close(self) -> None:
        if not self._closed:
            try:
                self.release()
            except InstrumentError:
                pass
        super().close()
