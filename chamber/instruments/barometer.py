"""A reference barometer (pressure indicator): read the absolute pressure in Pa, with its certificate attached.

Why the certificate travels with the driver: a reading of a reference is only useful with its uncertainty, and
that uncertainty is a property of *this* unit as calibrated (a certificate file), not of the model. A driver
without a certificate refuses to be a reference.
"""

from __future__ import annotations

from typing import Any

from chamber.instruments.base import BadReading, ResourceManagerLike, VisaInstrument
from chamber.instruments.certificate import Certificate

UNIT_TO_PA = {"PA": 1.0, "HPA": 100.0, "KPA": 1000.0, "MBAR": 100.0}


class ReferenceBarometer(VisaInstrument):
    def __init__(self, rm: ResourceManagerLike, resource: str, *, certificate: Certificate,
                 name: str = "reference_barometer", expect: tuple[str, str] | None = None, **kwargs: Any) -> None:
        certificate.require("pressure")
        self.certificate = certificate
        super().__init__(rm, resource, name=name, expect=expect, **kwargs)
        self.write(":UNIT:PRES PA", check_errors=True)

    def read_pressure_pa(self, n: int = 1) -> list[float]:
        """n readings in Pa (the unit is read back, so a front-panel change cannot scale the numbers)."""
        unit = self.query(":UNIT:PRES?").strip().upper()
        if unit not in UNIT_TO_PA:
            raise BadReading(f"{self.name}: unknown pressure unit {unit!r}; expected one of {sorted(UNIT_TO_PA)}")
        scale = UNIT_TO_PA[unit]
        readings = [scale * self.query_float(":SENS:PRES?") for _ in range(n)]
        for r in readings:
            if not (1_000.0 <= r <= 200_000.0):
                raise BadReading(f"{self.name}: {r} Pa is not a plausible absolute pressure (1 kPa .. 200 kPa)")
        return readings
