"""External lab instruments over VISA (SCPI): an SMU on a sensor rail, a reference barometer, a temperature
controller — and the station file that says which is wired where.

Entry points: `open_station(path, rm=None)` (all instruments opened and identity-checked, or a StationError
before anything is staged) and `check_station(path)`. The simulated bench is in chamber.instruments.sim; the
packaged example station for it is `SIM_STATION_FILE`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from chamber.instruments.barometer import ReferenceBarometer
from chamber.instruments.base import (BadReading, Identity, IdentityMismatch, InstrumentError, InstrumentRefused,
                                      InstrumentTimeout, VisaInstrument)
from chamber.instruments.certificate import Certificate, CertificateError, CertifiedUncertainty, load_certificate
from chamber.instruments.smu import ComplianceError, SourceMeter, SweepStep, UnsafeSetting
from chamber.instruments.station import (INSTRUMENT_KINDS, Station, StationError, StationFile, check_station,
                                         load_station_file, open_station)
from chamber.instruments.temperature import HeldTemperature, NotSettled, TemperatureController


def sim_station_file() -> Path:
    """The packaged station file describing the simulated bench (three SMU rails, barometer, thermal stage)."""
    return Path(str(resources.files("chamber.instruments.sim").joinpath("station.yaml")))


__all__ = ["BadReading", "Certificate", "CertificateError", "CertifiedUncertainty", "ComplianceError",
           "HeldTemperature", "INSTRUMENT_KINDS", "Identity", "IdentityMismatch", "InstrumentError",
           "InstrumentRefused", "InstrumentTimeout", "NotSettled", "ReferenceBarometer", "SourceMeter", "Station",
           "StationError", "StationFile", "SweepStep", "TemperatureController", "UnsafeSetting", "VisaInstrument",
           "check_station", "load_certificate", "load_station_file", "open_station", "sim_station_file"]
