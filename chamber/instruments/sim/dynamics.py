"""What YAML cannot express about the simulated instruments: readings that follow physics and state.

Why this layer: pyvisa-sim answers from fixed dialogues and stored properties, which is the right place for an
instrument's *protocol* (identity, commands, accepted ranges, the error queue) but cannot make a supply current
depend on the supply voltage and the device's measurement rate, or a temperature settle towards its setpoint.
So each simulated resource is wrapped: before a measurement query the wrapper computes the reading from the
instrument state (read back from the pyvisa-sim device) and the parameter file, and stores it in the device
through a simulation-only SIM:* setter; then the real query runs through pyvisa-sim as usual.

Parameters come from params.yaml next to this file (or a file/mapping passed in) — never from claim files.
State is reset to the YAML defaults when a bench is opened and when it is closed (pyvisa caches the simulated
library per file, so without the reset one test's settings would leak into the next).
"""

from __future__ import annotations

import logging
import math
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from firmware_bridge.model_file import load_model_file, read_data_file, validate_model

log = logging.getLogger(__name__)

BENCH_FILE = "bench.yaml"


# ---------------------------------------------------------------------------------------------- parameters
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceState(_Model):
    code: int = Field(ge=0, le=3)
    base_current_a: dict[float, float]
    rate_hz: float = Field(0.0, ge=0)
    charge_per_measurement_c: float = Field(0.0, ge=0)


class RailSim(_Model):
    device: str
    operating_vdd: tuple[float, float]
    off_current_a: float = Field(ge=0)
    states: dict[str, DeviceState]
    noise_relative: float = Field(0.0, ge=0)
    startup_s: float = Field(0.0, ge=0)
    startup_current_a: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _codes_unique(self) -> "RailSim":
        codes = [s.code for s in self.states.values()]
        if len(set(codes)) != len(codes):
            raise ValueError(f"rail state codes must be unique, got {codes}")
        return self


class RoomSim(_Model):
    pressure_pa: float
    temperature_c: float


class BarometerSim(_Model):
    offset_pa: float
    noise_pa: float = Field(ge=0)


class SmuSim(_Model):
    voltage_offset_v: float
    voltage_noise_v: float = Field(ge=0)
    current_noise_floor_a: float = Field(ge=0)


class TemperatureSim(_Model):
    time_constant_s: float = Field(gt=0)
    noise_c: float = Field(ge=0)
    offset_c: float


class SimParams(_Model):
    seed: int = 0
    rails: dict[str, RailSim]
    room: RoomSim
    reference_barometer: BarometerSim
    smu: SmuSim
    temperature_controller: TemperatureSim


def load_sim_params(source: str | Path | Mapping[str, Any] | None = None) -> SimParams:
    """The packaged params.yaml, a path to another file, or a mapping; ModelFileError names the file and field."""
    if isinstance(source, Mapping):
        return validate_model(dict(source), SimParams, source="instrument simulator parameters")
    path = Path(source) if source is not None else Path(str(resources.files("chamber.instruments.sim") / "params.yaml"))
    return load_model_file(path, SimParams, what="instrument simulator parameters")


def packaged_bench_file() -> Path:
    return Path(str(resources.files("chamber.instruments.sim").joinpath(BENCH_FILE)))


class SimClock:
    """A clock that advances only when something sleeps on it: settling takes no wall time in tests."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot sleep a negative time: {seconds}")
        self._now += float(seconds)


# ------------------------------------------------------------------------------------------- the YAML side
def _device_definitions(bench_file: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """resource name -> (device name, its property definitions) from the bench file and its device files."""
    bench = read_data_file(bench_file, what="instrument bench file")
    out = {}
    for resource, entry in bench["resources"].items():
        device_file = bench_file.parent / entry.get("filename", bench_file.name)
        devices = read_data_file(device_file, what="instrument device file")["devices"]
        out[resource] = (entry["device"], devices[entry["device"]].get("properties", {}))
    return out


def _interp(points: Mapping[float, float], x: float) -> float:
    """Linear interpolation through (voltage, current) points, extended linearly beyond the end points."""
    xs = sorted(points)
    if len(xs) == 1:
        return float(points[xs[0]])
    if x <= xs[0]:
        a, b = xs[0], xs[1]
    elif x >= xs[-1]:
        a, b = xs[-2], xs[-1]
    else:
        b = next(v for v in xs if v >= x)
        a = xs[xs.index(b) - 1]
    ya, yb = points[a], points[b]
    return float(ya + (yb - ya) * (x - a) / (b - a))


# ------------------------------------------------------------------------------------------- the dynamics
class _Dynamics:
    """Per-resource behaviour: reacts before a command is forwarded to pyvisa-sim."""

    def __init__(self, raw: Any, bench: "SimBench") -> None:
        self.raw = raw
        self.bench = bench

    def before(self, command: str) -> None:  # pragma: no cover - overridden
        pass

    def _state_float(self, query: str) -> float:
        return float(self.raw.query(query))


class _SmuDynamics(_Dynamics):
    def __init__(self, raw: Any, bench: "SimBench", rail: RailSim | None) -> None:
        super().__init__(raw, bench)
        self.rail = rail
        self.on_since: float | None = None

    def before(self, command: str) -> None:
        cmd = command.strip().upper()
        p = self.bench.params.smu
        rng = self.bench.rng
        if cmd.startswith(":OUTP ") and not cmd.endswith("?"):
            turning_on = cmd.split()[-1] in ("1", "ON")
            if turning_on and self.on_since is None:
                self.on_since = self.bench.clock.now()
            if not turning_on:
                self.on_since = None
        elif cmd == ":MEAS:VOLT?":
            on = self._state_float(":OUTP?") == 1
            v = self._state_float(":SOUR:VOLT?") + p.voltage_offset_v if on else 0.0
            self.raw.write(f"SIM:MEAS:VOLT {v + rng.normal(0.0, p.voltage_noise_v):e}")
        elif cmd == ":MEAS:CURR?":
            self.raw.write(f"SIM:MEAS:CURR {self._current():e}")

    def _current(self) -> float:
        p = self.bench.params.smu
        rng = self.bench.rng
        noise_floor = rng.normal(0.0, p.current_noise_floor_a)
        if self._state_float(":OUTP?") != 1 or self.rail is None:
            return noise_floor
        rail = self.rail
        v = self._state_float(":SOUR:VOLT?") + p.voltage_offset_v
        limit = self._state_float(":SOUR:VOLT:ILIM?")
        lo, hi = rail.operating_vdd
        if not (lo <= v <= hi):
            current = rail.off_current_a
        elif self.on_since is not None and self.bench.clock.now() - self.on_since < rail.startup_s:
            current = rail.startup_current_a
        else:
            code = int(self._state_float(":DIG:LINE1:STAT?")) + 2 * int(self._state_float(":DIG:LINE2:STAT?"))
            state = next((s for s in rail.states.values() if s.code == code), None)
            if state is None:  # a code the fixture does not wire: the device stays in its power-on state
                state = min(rail.states.values(), key=lambda s: s.code)
            current = _interp(state.base_current_a, v) + state.rate_hz * state.charge_per_measurement_c
        current *= 1.0 + rng.normal(0.0, rail.noise_relative)
        current += noise_floor
        return min(current, limit)  # at compliance the SMU reads its limit


class _BarometerDynamics(_Dynamics):
    SCALE = {"PA": 1.0, "HPA": 100.0, "KPA": 1000.0, "MBAR": 100.0}

    def before(self, command: str) -> None:
        if command.strip().upper() == ":SENS:PRES?":
            params = self.bench.params
            unit = self.raw.query(":UNIT:PRES?").strip().upper()
            pa = (params.room.pressure_pa + params.reference_barometer.offset_pa
                  + self.bench.rng.normal(0.0, params.reference_barometer.noise_pa))
            self.raw.write(f"SIM:PRES {pa / self.SCALE[unit]:f}")


class _TemperatureDynamics(_Dynamics):
    def __init__(self, raw: Any, bench: "SimBench") -> None:
        super().__init__(raw, bench)
        self.temperature = bench.params.room.temperature_c
        self.updated = bench.clock.now()

    def _advance(self) -> None:
        now = self.bench.clock.now()
        dt = now - self.updated
        if dt > 0:
            on = self._state_float(":OUTP?") == 1
            target = self._state_float(":SOUR:TEMP?") if on else self.bench.params.room.temperature_c
            tau = self.bench.params.temperature_controller.time_constant_s
            self.temperature = target + (self.temperature - target) * math.exp(-dt / tau)
        self.updated = now

    def before(self, command: str) -> None:
        self._advance()  # the state so far evolves under the old setpoint; the command then takes effect
        if command.strip().upper() == ":MEAS:TEMP?":
            p = self.bench.params.temperature_controller
            reading = self.temperature + p.offset_c + self.bench.rng.normal(0.0, p.noise_c)
            self.raw.write(f"SIM:TEMP {reading:f}")


class SimResource:
    """A pyvisa-sim resource with the dynamics in front of it; the same write/query/read/clear/close interface."""

    _OWN = ("_raw", "_dynamics", "_bench", "resource_name")

    def __init__(self, raw: Any, dynamics: _Dynamics, bench: "SimBench", resource_name: str) -> None:
        object.__setattr__(self, "_raw", raw)
        object.__setattr__(self, "_dynamics", dynamics)
        object.__setattr__(self, "_bench", bench)
        object.__setattr__(self, "resource_name", resource_name)

    def write(self, command: str) -> Any:
        if command.strip().upper() == "*RST":
            self._bench.reset_resource(self.resource_name, self._raw)
        self._dynamics.before(command)
        return self._raw.write(command)

    def query(self, command: str) -> str:
        self._dynamics.before(command)
        return self._raw.query(command)

    def read(self) -> str:
        return self._raw.read()

    def clear(self) -> None:
        self._raw.clear()

    def close(self) -> None:
        self._raw.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __setattr__(self, name: str, value: Any) -> None:  # timeout, terminators: set on the real session
        setattr(self._raw, name, value)


class SimBench:
    """A ResourceManager-like simulated bench: `open_resource(name)` gives a SimResource."""

    def __init__(self, params: SimParams, *, seed: int | None = None, clock: SimClock | None = None,
                 bench_file: Path | None = None) -> None:
        import pyvisa

        self.params = params
        self.clock = clock or SimClock()
        self.rng = np.random.default_rng(params.seed if seed is None else seed)
        self.bench_file = bench_file or packaged_bench_file()
        self._definitions = _device_definitions(self.bench_file)
        self._rm = pyvisa.ResourceManager(f"{self.bench_file}@sim")
        self._open: list[SimResource] = []
        self.reset_all()

    def list_resources(self, query: str = "?*::INSTR") -> tuple[str, ...]:
        return tuple(self._rm.list_resources(query))

    def open_resource(self, resource_name: str, **kwargs: Any) -> SimResource:
        if resource_name not in self._definitions:
            import pyvisa

            raise pyvisa.errors.VisaIOError(pyvisa.constants.StatusCode.error_resource_not_found)
        raw = self._rm.open_resource(resource_name, **kwargs)
        device, _ = self._definitions[resource_name]
        dynamics: _Dynamics
        if device == "smu":
            dynamics = _SmuDynamics(raw, self, self.params.rails.get(resource_name))
        elif device == "reference_barometer":
            dynamics = _BarometerDynamics(raw, self)
        elif device == "temperature_controller":
            dynamics = _TemperatureDynamics(raw, self)
        else:  # pragma: no cover - bench.yaml and this table are edited together
            raise ValueError(f"no dynamics for simulated device {device!r}")
        resource = SimResource(raw, dynamics, self, resource_name)
        self._open.append(resource)
        return resource

    def reset_resource(self, resource_name: str, raw: Any) -> None:
        """Every property of the device back to its YAML default, through its own setter."""
        _, properties = self._definitions[resource_name]
        for prop in properties.values():
            setter = prop.get("setter", {}).get("q")
            if setter is not None and "default" in prop:
                raw.write(setter.format(prop["default"]))
        raw.query(":SYST:ERR?")  # the writes above queue nothing; keep the queue empty regardless

    def reset_all(self) -> None:
        for resource_name in self._definitions:
            raw = self._rm.open_resource(resource_name, read_termination="\n", write_termination="\n")
            try:
                self.reset_resource(resource_name, raw)
                while raw.query(":SYST:ERR?").split(",")[0].strip() not in ("0", "+0"):
                    pass
            finally:
                raw.close()

    def close(self) -> None:
        for resource in self._open:
            try:
                resource.close()
            except Exception:  # already closed by its driver
                pass
        self._open.clear()
        self.reset_all()


def open_sim_bench(params: str | Path | Mapping[str, Any] | SimParams | None = None, *, seed: int | None = None,
                   clock: SimClock | None = None) -> SimBench:
    """The simulated bench with the packaged instrument definitions and the given (default: packaged) params."""
    p = params if isinstance(params, SimParams) else load_sim_params(params)
    return SimBench(p, seed=seed, clock=clock)
