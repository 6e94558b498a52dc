"""The station: which lab instrument is wired to which sensor rail or position, read from a YAML file and opened
with every instrument's identity checked.

Why a file and a check at start: grading a supply-current claim on the wrong rail, or against an instrument
that is not the calibrated one, produces a confident wrong verdict. So the station file names each instrument's
VISA address, the *IDN? it must answer, and its calibration certificate; each rail names the sensor, the chamber
variables that show the sensor answering, and the rail's voltage and current limits. `open_station` refuses the
whole station — before anything is staged — when the file is malformed, a certificate is missing, an instrument
does not answer, or answers with the wrong identity.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from chamber.instruments.barometer import ReferenceBarometer
from chamber.instruments.base import InstrumentError, ResourceManagerLike, VisaInstrument
from chamber.instruments.certificate import Certificate, CertificateError, load_certificate
from chamber.instruments.smu import SourceMeter
from chamber.instruments.temperature import TemperatureController
from firmware_bridge.model_file import ModelFileError, load_model_file
from firmware_bridge.variables import LAYOUTS

log = logging.getLogger(__name__)

InstrumentKind = Literal["smu", "reference_barometer", "temperature_controller"]
INSTRUMENT_KINDS: tuple[str, ...] = ("smu", "reference_barometer", "temperature_controller")
ComponentName = Literal["DPS310", "Si115x", "ACS70331", "A4988"]


class StationError(InstrumentError):
    """The station cannot be used as described (bad file, missing instrument, wrong identity); nothing was staged."""


class StationFileError(StationError, ModelFileError):
    """A station file that cannot be read or does not validate (the one configuration-file error). Its message is
    model_file's one line: RuntimeError (under InstrumentError) comes first in this class's MRO, and ModelFileError
    gives its own __init__ to such a subclass, so the message is never the (source, problem) tuple."""


def _chamber_variables(chamber: str) -> set[str]:
    return {v.name for (kind, _config), layout in LAYOUTS.items() if kind == chamber for v in layout.variables}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IdnExpectation(_Model):
    manufacturer: str = Field(min_length=1)
    model: str = Field(min_length=1)


class InstrumentEntry(_Model):
    kind: InstrumentKind
    resource: str = Field(min_length=1)
    idn: IdnExpectation
    certificate: str = Field(min_length=1)  # path, relative to the station file
    timeout_ms: int = Field(2000, ge=50, le=60_000)


class RailEntry(_Model):
    """A sensor supply rail powered by an SMU (it replaces the sensor board's own supply)."""

    name: str = Field(min_length=1)
    instrument: str
    component: ComponentName
    chamber: Literal["wt", "lt"]
    reads: list[str] = Field(min_length=1)  # chamber variables that show this sensor answering
    max_voltage_v: float = Field(gt=0, le=20)
    current_limit_a: float = Field(gt=0, le=0.1)
    states: dict[str, int] = Field(default_factory=dict)  # fixture state name -> digital-line code 0..3

    @model_validator(mode="after")
    def _check(self) -> "RailEntry":
        unknown = sorted(set(self.reads) - _chamber_variables(self.chamber))
        if unknown:
            raise ValueError(f"rail {self.name!r}: {unknown} are not {self.chamber} chamber variables")
        bad = {k: v for k, v in self.states.items() if v not in (0, 1, 2, 3)}
        if bad:
            raise ValueError(f"rail {self.name!r}: state codes must be 0..3 (two digital lines), got {bad}")
        return self


class PositionEntry(_Model):
    """Where a reference barometer or temperature controller acts: next to / on one sensor."""

    name: str = Field(min_length=1)
    instrument: str
    component: ComponentName
    chamber: Literal["wt", "lt"]
    reads: list[str] = Field(min_length=1)
    limits_c: tuple[float, float] | None = None  # temperature positions: the setpoints this position tolerates

    @model_validator(mode="after")
    def _check(self) -> "PositionEntry":
        unknown = sorted(set(self.reads) - _chamber_variables(self.chamber))
        if unknown:
            raise ValueError(f"position {self.name!r}: {unknown} are not {self.chamber} chamber variables")
        return self


class StationFile(_Model):
    name: str = Field(min_length=1)
    backend: Literal["visa", "sim"] = "visa"
    visa_library: str = ""  # backend visa: "" (system VISA) or "@py" (pyvisa-py)
    sim_params: str | None = None  # backend sim: parameter file (relative to the station file); None = packaged
    seed: int = 0
    instruments: dict[str, InstrumentEntry] = Field(min_length=1)
    rails: list[RailEntry] = Field(default_factory=list)
    positions: list[PositionEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _wiring(self) -> "StationFile":
        powered: dict[str, str] = {}
        for rail in self.rails:
            entry = self.instruments.get(rail.instrument)
            if entry is None:
                raise ValueError(f"rail {rail.name!r}: no instrument {rail.instrument!r}; "
                                 f"known: {', '.join(sorted(self.instruments))}")
            if entry.kind != "smu":
                raise ValueError(f"rail {rail.name!r}: instrument {rail.instrument!r} is a {entry.kind}, not an smu")
            if rail.instrument in powered:
                raise ValueError(f"smu {rail.instrument!r} powers two rails ({powered[rail.instrument]!r}, {rail.name!r})")
            powered[rail.instrument] = rail.name
        for name, entry in self.instruments.items():
            if entry.kind == "smu" and name not in powered:
                raise ValueError(f"smu {name!r} powers no rail (each smu needs a rail with its limits)")
        for pos in self.positions:
            entry = self.instruments.get(pos.instrument)
            if entry is None:
                raise ValueError(f"position {pos.name!r}: no instrument {pos.instrument!r}; "
                                 f"known: {', '.join(sorted(self.instruments))}")
            if entry.kind == "smu":
                raise ValueError(f"position {pos.name!r}: an smu powers a rail; list it under 'rails'")
        names = [r.name for r in self.rails] + [p.name for p in self.positions]
        if len(set(names)) != len(names):
            raise ValueError(f"rail and position names must be unique, got {names}")
        return self


def load_station_file(path: str | Path) -> StationFile:
    """Parse and validate a station file (the one strict reader: at most SETTINGS_MAX_BYTES, no key twice, not
    empty, no boolean where a number is meant); StationFileError names the file, the field and what was expected."""
    return load_model_file(path, StationFile, what="station file", error=StationFileError,
                           expected="a mapping with name, instruments and rails/positions")


# ------------------------------------------------------------------------------------------ the open station
@dataclass
class Station:
    """Opened, identity-checked instruments and their wiring. Close it (or use it as a context manager)."""

    spec: StationFile
    instruments: dict[str, VisaInstrument]
    certificates: dict[str, Certificate]
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    resource_manager: Any = None
    _owns_rm: bool = field(default=False, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    def kinds(self) -> set[str]:
        return {e.kind for e in self.spec.instruments.values()}

    def provides(self, kind: str, component: str) -> bool:
        """Is an instrument of `kind` wired to `component` (an SMU rail, or a barometer/temperature position)?"""
        if kind == "smu":
            return any(r.component == component for r in self.spec.rails)
        return any(p.component == component and self.spec.instruments[p.instrument].kind == kind
                   for p in self.spec.positions)

    def rail(self, component: str) -> tuple[RailEntry, SourceMeter]:
        for r in self.spec.rails:
            if r.component == component:
                smu = self.instruments[r.instrument]
                assert isinstance(smu, SourceMeter)
                return r, smu
        rails = ", ".join(f"{r.name} ({r.component})" for r in self.spec.rails) or "none"
        raise StationError(f"station {self.name!r}: expected an smu rail for {component}, got rails: {rails}")

    def position(self, kind: str, component: str) -> tuple[PositionEntry, Any]:
        for p in self.spec.positions:
            if p.component == component and self.spec.instruments[p.instrument].kind == kind:
                return p, self.instruments[p.instrument]
        raise StationError(f"station {self.name!r} has no {kind} at a {component} position")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backend": self.spec.backend,
            "instruments": [
                {"name": n, "kind": e.kind, "resource": e.resource,
                 "idn": getattr(self.instruments.get(n), "identity", None) and self.instruments[n].identity.raw,
                 "certificate": self.certificates[n].certificate_number if n in self.certificates else None}
                for n, e in self.spec.instruments.items()],
            "rails": [r.model_dump() for r in self.spec.rails],
            "positions": [p.model_dump() for p in self.spec.positions],
        }

    def close(self) -> None:
        for instrument in self.instruments.values():
            instrument.close()
        self.instruments = {}
        if self._owns_rm and self.resource_manager is not None:
            try:
                self.resource_manager.close()
            except Exception:
                log.debug("closing the resource manager failed", exc_info=True)
            self.resource_manager = None

    def __enter__(self) -> "Station":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _resource_manager(spec: StationFile, base: Path) -> tuple[Any, Callable[[], float], Callable[[float], None]]:
    if spec.backend == "sim":
        from chamber.instruments.sim import SimClock, open_sim_bench

        clock = SimClock()
        params = None if spec.sim_params is None else base / spec.sim_params
        return open_sim_bench(params, seed=spec.seed, clock=clock), clock.now, clock.sleep
    import pyvisa

    return pyvisa.ResourceManager(spec.visa_library), time.monotonic, time.sleep


def _certificates(spec: StationFile, base: Path) -> dict[str, Certificate]:
    out = {}
    for name, entry in spec.instruments.items():
        try:
            out[name] = load_certificate(base / entry.certificate)
        except CertificateError as exc:
            raise StationError(f"instrument {name!r}: {exc}") from exc
    return out


def _open_one(name: str, spec: StationFile, certificate: Certificate, rm: ResourceManagerLike,
              clock: Callable[[], float], sleep: Callable[[float], None]) -> VisaInstrument:
    entry = spec.instruments[name]
    expect = (entry.idn.manufacturer, entry.idn.model)
    common = dict(name=name, expect=expect, timeout_ms=entry.timeout_ms)
    if entry.kind == "smu":
        rail = next(r for r in spec.rails if r.instrument == name)
        certificate.require("current")
        certificate.require("voltage")
        smu = SourceMeter(rm, entry.resource, max_voltage=rail.max_voltage_v, current_limit=rail.current_limit_a,
                          sleep=sleep, **common)
        try:
            smu.configure()
        except BaseException:
            smu.close()
            raise
        return smu
    if entry.kind == "reference_barometer":
        return ReferenceBarometer(rm, entry.resource, certificate=certificate, **common)
    position = next((p for p in spec.positions if p.instrument == name), None)
    limits = position.limits_c if position is not None and position.limits_c is not None else (-55.0, 125.0)
    return TemperatureController(rm, entry.resource, certificate=certificate, limits_c=limits, clock=clock,
                                 sleep=sleep, **common)


def open_station(source: str | Path | StationFile, rm: ResourceManagerLike | None = None, *,
                 base_dir: str | Path | None = None, clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], None] | None = None) -> Station:
    """Open every instrument of the station, checking *IDN? and certificates; all or nothing.

    `rm` is the ResourceManager to use; None builds the one the file names (the simulated bench for backend
    "sim", pyvisa.ResourceManager(visa_library) otherwise) and the Station closes it.
    """
    if isinstance(source, StationFile):
        spec, base = source, Path(base_dir or ".")
    else:
        spec, base = load_station_file(source), Path(base_dir or Path(source).parent)
    certificates = _certificates(spec, base)  # file problems first: nothing is opened for a bad certificate
    owns = rm is None
    if rm is None:
        rm, default_clock, default_sleep = _resource_manager(spec, base)
    else:
        default_clock, default_sleep = time.monotonic, time.sleep
    clock = clock or default_clock
    sleep = sleep or default_sleep
    opened: dict[str, VisaInstrument] = {}
    try:
        for name in spec.instruments:
            try:
                opened[name] = _open_one(name, spec, certificates[name], rm, clock, sleep)
            except (InstrumentError, CertificateError) as exc:
                raise StationError(f"station {spec.name!r}, instrument {name!r}: {exc}") from exc
    except BaseException:
        for instrument in opened.values():
            instrument.close()
        if owns and hasattr(rm, "close"):
            rm.close()
        raise
    log.info("station %s open: %s", spec.name, ", ".join(f"{n}={i.identity.raw}" for n, i in opened.items()))
    return Station(spec, opened, certificates, clock, sleep, rm, owns)


def check_station(source: str | Path, rm: ResourceManagerLike | None = None) -> dict[str, Any]:
    """Each instrument's *IDN? against the file, reported one by one (for `bench_cli station check`).

    Raises StationError only for a file that cannot be read; per-instrument problems are in the report.
    """
    path = Path(source)
    spec = load_station_file(path)
    owns = rm is None
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    if rm is None:
        rm, clock, sleep = _resource_manager(spec, path.parent)
    else:
        clock, sleep = time.monotonic, time.sleep
    rows = []
    try:
        for name, entry in spec.instruments.items():
            row: dict[str, Any] = {"name": name, "kind": entry.kind, "resource": entry.resource,
                                   "expected": f"{entry.idn.manufacturer}, {entry.idn.model}",
                                   "idn": None, "certificate": None, "ok": False, "error": None}
            try:
                certificate = load_certificate(path.parent / entry.certificate)
                row["certificate"] = certificate.certificate_number
                instrument = _open_one(name, spec, certificate, rm, clock, sleep)
                row["idn"] = instrument.identity.raw
                instrument.close()
                row["ok"] = True
            except (InstrumentError, CertificateError) as exc:
                row["error"] = str(exc)
                if isinstance(exc, InstrumentError) and hasattr(exc, "got"):
                    row["idn"] = exc.got
            rows.append(row)
    finally:
        if owns and hasattr(rm, "close"):
            rm.close()
    return {"station": spec.name, "file": str(path), "backend": spec.backend, "ok": all(r["ok"] for r in rows),
            "instruments": rows,
            "rails": [{"name": r.name, "instrument": r.instrument, "component": r.component, "chamber": r.chamber,
                       "reads": r.reads} for r in spec.rails],
            "positions": [{"name": p.name, "instrument": p.instrument, "component": p.component,
                           "chamber": p.chamber, "reads": p.reads} for p in spec.positions]}
