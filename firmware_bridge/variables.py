"""The Mk1 firmware's variable tables: names, row order, kind, unit and the values the firmware accepts.

Why here: both sides of the wire need the same facts. The emulated board enforces them (it *is* the firmware),
and the host driver validates against them before anything is sent. Keeping one table below both means the
driver and the emulator can never disagree about what the board would accept.

Sources: ../shared/docs/mk1-wire-protocol.md (allowed values, error codes) and
../shared/chamber-data/reference/variables_*.csv (order; the public datasets' column layout minus the host's
own `timestamp` and `config` columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

UNSET = -9999.0
"""The firmware's marker for 'not set / not available' in rows and for restoring a sensor after an override."""

ROW_HEADER = ("counter", "flag", "intervention")
"""The three bookkeeping floats that open every VARIABLES_LIST and every data row."""

COUNTER_MAX = 100_000
"""The last row number: the firmware counts 0, 1, ..., 100000 and then starts again at 0 (wt_mk_1.ino / lt_mk_1.ino:
`observation_counter < max_counter ? observation_counter + 1.0 : 0.0` with max_counter 100000)."""

COUNTER_PERIOD = COUNTER_MAX + 1
"""Row numbers repeat every 100001 rows: arithmetic on counters is modulo this."""


class Kind(str, Enum):
    ACTUATOR = "actuator"  # an exogenous input the host sets (er42 if unset with -9999)
    SENSOR = "sensor"  # a reading; a SET overrides it (an intervention) until set back to -9999
    BOOKKEEPING = "bookkeeping"  # counter, flag, intervention


@dataclass(frozen=True)
class Variable:
    """One column of a Mk1 data row."""

    name: str
    kind: Kind
    unit: str
    allowed: tuple[float, ...] | None = None  # a discrete set the firmware accepts, or None
    low: float | None = None  # inclusive range the firmware accepts when not a discrete set
    high: float | None = None
    firmware_checks_range: bool = True  # False where the real firmware forgets (light tunnel `red`, `hatch`)
    settable: bool = True  # False where the firmware has no setter (SET answers er04): LT v_board, v_reg
    description: str = ""

    def snap(self, value: float) -> float | None:
        """The allowed value `value` stands for (within 1e-9), or None; only for variables with a discrete set.

        Why: the firmware compares the float it parsed with `==`, so a near value ("2.5600000001") fails with er03
        where the allowed one ("2.56") passes. The host sends the allowed value itself."""
        if self.allowed is None:
            return None
        return snap_to(value, self.allowed)

    def accepts(self, value: float) -> bool:
        """Would the *physical* variable accept this value (the host-side rule, stricter than buggy firmware)?
        A discrete set, where there is one, replaces the range (the firmware checks one or the other)."""
        if self.allowed is not None:
            return snap_to(value, self.allowed) is not None
        return in_range(value, self.low, self.high)

    def describe_allowed(self) -> str:
        if self.allowed is not None:
            return describe_set(self.allowed)
        if self.low is not None or self.high is not None:
            return describe_range(self.low, self.high)
        return "any number"


SNAP_TOLERANCE = 1e-9
"""How near a float must be to an allowed value to stand for it (the value rule's one tolerance)."""


def snap_to(value: float, allowed: tuple[float, ...]) -> float | None:
    """The member of `allowed` that `value` stands for (within SNAP_TOLERANCE), or None.

    Why one function: the firmware's table (Variable) and the operator limits file (chamber.limits) both check a
    value against a discrete set; they must agree on what "the same value" means."""
    return next((a for a in allowed if abs(value - a) < SNAP_TOLERANCE), None)


def in_range(value: float, low: float | None, high: float | None) -> bool:
    """`low <= value <= high`, an absent bound being open."""
    return (low is None or value >= low) and (high is None or value <= high)


def describe_set(allowed: tuple[float, ...]) -> str:
    """`one of 1, 2, 4, 8`: how a refusal names a discrete set."""
    return "one of " + ", ".join(f"{a:g}" for a in allowed)


def describe_range(low: float | None, high: float | None) -> str:
    """`0..45`, `-inf..1`: how a refusal names an inclusive range (an absent bound is infinite)."""
    return f"{'-inf' if low is None else f'{low:g}'}..{'inf' if high is None else f'{high:g}'}"


MAX_MSR_ROWS = 32767
"""The most rows one MSR may ask for: the firmware casts n to an AVR `int` (16 bits), so a larger n would measure a
different number of rows (the host's driver, protocol files and the CLI refuse it before anything is sent)."""

OSR_LEVELS = (1, 2, 4, 8)
"""The oversampling rates the firmware accepts for every osr_* variable (the one copy: the simulator's noise
table, the calibration record, the cross-sensor calibration and the precision protocol import it)."""
OSR = tuple(float(o) for o in OSR_LEVELS)
VREF = (1.1, 2.56, 5.0)

A = Kind.ACTUATOR
S = Kind.SENSOR


def _osr(name: str, what: str) -> Variable:
    return Variable(name, A, "samples", allowed=OSR, description=f"oversampling of {what}")


def _vref(name: str, what: str) -> Variable:
    return Variable(name, A, "V", allowed=VREF, description=f"ADC reference voltage for {what}")


_BOOKKEEPING = (
    Variable("counter", Kind.BOOKKEEPING, "count", description="row number, wraps after 100000"),
    Variable("flag", Kind.BOOKKEEPING, "", description="user value set with SET,flag,x"),
    Variable("intervention", Kind.BOOKKEEPING, "", allowed=(0.0, 1.0), description="1 on the first row after a SET"),
)

_WIND_TUNNEL_STANDARD = (
    Variable("hatch", A, "deg", low=0.0, high=45.0, firmware_checks_range=False, description="hatch angle (A4988 stepper)"),
    Variable("pot_1", A, "counts", low=0.0, high=255.0, description="digital potentiometer 1"),
    Variable("pot_2", A, "counts", low=0.0, high=255.0, description="digital potentiometer 2"),
    _osr("osr_1", "signal_1"),
    _osr("osr_2", "signal_2"),
    _osr("osr_mic", "the microphone"),
    _osr("osr_in", "current_in"),
    _osr("osr_out", "current_out"),
    Variable("osr_upwind", A, "samples", allowed=OSR, description="DPS310 oversampling, upwind barometer"),
    Variable("osr_downwind", A, "samples", allowed=OSR, description="DPS310 oversampling, downwind barometer"),
    Variable("osr_ambient", A, "samples", allowed=OSR, description="DPS310 oversampling, ambient barometer"),
    Variable("osr_intake", A, "samples", allowed=OSR, description="DPS310 oversampling, intake barometer"),
    _vref("v_1", "signal_1"),
    _vref("v_2", "signal_2"),
    _vref("v_mic", "the microphone"),
    _vref("v_in", "current_in"),
    _vref("v_out", "current_out"),
    Variable("load_in", A, "duty", low=0.0, high=1.0, description="intake fan PWM duty"),
    Variable("load_out", A, "duty", low=0.0, high=1.0, description="exhaust fan PWM duty"),
    Variable("current_in", S, "ADC counts", low=0.0, high=1023.0, description="intake fan current (ACS70331)"),
    Variable("current_out", S, "ADC counts", low=0.0, high=1023.0, description="exhaust fan current (ACS70331)"),
    Variable("res_in", A, "", allowed=(0.0, 1.0), description="tachometer resolution switch, intake fan"),
    Variable("res_out", A, "", allowed=(0.0, 1.0), description="tachometer resolution switch, exhaust fan"),
    Variable("rpm_in", S, "rpm", description="intake fan speed"),
    Variable("rpm_out", S, "rpm", description="exhaust fan speed"),
    Variable("pressure_upwind", S, "Pa", description="DPS310 barometer upwind of the fans"),
    Variable("pressure_downwind", S, "Pa", description="DPS310 barometer downwind, in the chamber"),
    Variable("pressure_ambient", S, "Pa", description="DPS310 barometer outside the tunnel"),
    Variable("pressure_intake", S, "Pa", description="DPS310 barometer at the intake"),
    Variable("mic", S, "ADC counts", low=0.0, high=1023.0, description="microphone"),
    Variable("signal_1", S, "ADC counts", low=0.0, high=1023.0, description="potentiometer 1 read back"),
    Variable("signal_2", S, "ADC counts", low=0.0, high=1023.0, description="potentiometer 2 read back"),
)

_WIND_TUNNEL_PRESSURE_CONTROL = _WIND_TUNNEL_STANDARD + (
    # The controller's set-point and gains (chamber-facts.md: error = P_dw - target, Kp -0.5, Kd -0.1, Ki -1e-3).
    # Ranges: the target within the DPS310's 300-1200 hPa (a target it cannot read only saturates the output);
    # every gain <= 0 (error = P_dw - target, so a positive gain is positive feedback that runs a fan to full
    # load) and at most ten times the firmware's own constant. The output still saturates at +-1 (either fan up
    # to load 1) whatever the gains: chamber.limits.controller_overreach bounds what the controller may drive.
    Variable("input", A, "Pa", low=30000.0, high=120000.0,
             description="pressure-control target for pressure_downwind (the DPS310 range, 300-1200 hPa)"),
    Variable("error", S, "Pa", description="PID error"),
    Variable("delta_error", S, "Pa", description="PID error derivative term input"),
    Variable("sum_error", S, "Pa", description="PID integral term input"),
    Variable("gain_p", A, "", low=-5.0, high=0.0, description="PID proportional gain (firmware -0.5; per Pa)"),
    Variable("gain_i", A, "", low=-0.01, high=0.0, description="PID integral gain (firmware -1e-3; per Pa and row)"),
    Variable("gain_d", A, "", low=-1.0, high=0.0, description="PID derivative gain (firmware -0.1; per Pa)"),
    Variable("output", S, "duty", description="PID output load"),
)


def _light_tunnel_standard() -> tuple[Variable, ...]:
    v: list[Variable] = [
        Variable("red", A, "counts", low=0.0, high=255.0, firmware_checks_range=False, description="LED red level"),
        Variable("green", A, "counts", low=0.0, high=255.0, description="LED green level"),
        Variable("blue", A, "counts", low=0.0, high=255.0, description="LED blue level"),
        _osr("osr_c", "the light-source current"),
        _vref("v_c", "the light-source current"),
        Variable("current", S, "ADC counts", low=0.0, high=1023.0, description="light-source current (ACS70331)"),
        Variable("pol_1", A, "deg", low=-180.0, high=180.0, description="polarizer 1 angle (A4988 stepper)"),
        Variable("pol_2", A, "deg", low=-180.0, high=180.0, description="polarizer 2 angle (A4988 stepper)"),
        _osr("osr_angle_1", "angle_1"),
        _osr("osr_angle_2", "angle_2"),
        _vref("v_angle_1", "angle_1"),
        _vref("v_angle_2", "angle_2"),
        Variable("angle_1", S, "ADC counts", low=0.0, high=1023.0, description="polarizer 1 angle sensor"),
        Variable("angle_2", S, "ADC counts", low=0.0, high=1023.0, description="polarizer 2 angle sensor"),
    ]
    for k in (1, 2, 3):
        v.append(Variable(f"ir_{k}", S, "counts", low=0.0, high=65535.0, description=f"Si1151 #{k} infrared code"))
        v.append(Variable(f"vis_{k}", S, "counts", low=0.0, high=65535.0, description=f"Si1151 #{k} visible code"))
    for j in (1, 2, 3):
        for k in (1, 2):
            v.append(Variable(f"l_{j}{k}", A, "counts", low=0.0, high=255.0, description=f"internal LED {k} of sensor {j}"))
    for k in (1, 2, 3):
        v.append(Variable(f"diode_ir_{k}", A, "", allowed=(0.0, 1.0, 2.0), description=f"IR photodiode size, sensor {k}"))
        v.append(Variable(f"diode_vis_{k}", A, "", allowed=(0.0, 1.0), description=f"visible photodiode size, sensor {k}"))
    for k in (1, 2, 3):
        v.append(Variable(f"t_ir_{k}", A, "", allowed=(0.0, 1.0, 2.0, 3.0), description=f"IR integration time 48.8us*2^t, sensor {k}"))
        v.append(Variable(f"t_vis_{k}", A, "", allowed=(0.0, 1.0, 2.0, 3.0), description=f"visible integration time 48.8us*2^t, sensor {k}"))
    v.append(Variable("camera", A, "", allowed=(0.0, 1.0),
                      description="1: take a picture before each row (~1.5 s per row); an exogenous input"))
    v.append(Variable("v_board", S, "ADC counts", settable=False, description="board supply voltage (diagnostics; no setter)"))
    v.append(Variable("v_reg", S, "ADC counts", settable=False, description="regulator voltage (diagnostics; no setter)"))
    return tuple(v)


_LIGHT_TUNNEL_STANDARD = _light_tunnel_standard()


@dataclass(frozen=True)
class Layout:
    """The variables of one chamber configuration, in VARIABLES_LIST (= row) order."""

    chamber: str  # "wt" | "lt"
    config: str
    variables: tuple[Variable, ...]  # bookkeeping first, as on the wire

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variables)

    @property
    def row_length(self) -> int:
        return len(self.variables)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def get(self, name: str) -> Variable | None:
        for v in self.variables:
            if v.name == name:
                return v
        return None


LAYOUTS: dict[tuple[str, str], Layout] = {
    ("wt", "standard"): Layout("wt", "standard", _BOOKKEEPING + _WIND_TUNNEL_STANDARD),
    ("wt", "pressure-control"): Layout("wt", "pressure-control", _BOOKKEEPING + _WIND_TUNNEL_PRESSURE_CONTROL),
    ("lt", "standard"): Layout("lt", "standard", _BOOKKEEPING + _LIGHT_TUNNEL_STANDARD),
}

DEFAULT_CONFIG = {"wt": "standard", "lt": "standard"}


def layout_for(chamber: str, config: str | None = None) -> Layout:
    """The layout of a chamber ("wt"/"lt") in a configuration; KeyError names what exists."""
    key = (chamber, config or DEFAULT_CONFIG.get(chamber, "standard"))
    if key not in LAYOUTS:
        known = ", ".join(f"{c}/{k}" for c, k in LAYOUTS)
        raise KeyError(f"no variable layout for chamber {key[0]!r} config {key[1]!r}; known: {known}")
    return LAYOUTS[key]


def chamber_of(names: list[str] | tuple[str, ...]) -> str:
    """Which chamber announced this VARIABLES_LIST: "lt" (light sensors) or "wt"."""
    return "lt" if any(n.startswith("ir_") for n in names) else "wt"


def layout_from_names(config: str, names: list[str] | tuple[str, ...]) -> Layout:
    """Build a layout from an announced VARIABLES_LIST, using catalogue facts where the names are known.

    A real board may announce a list we do not know (newer firmware); unknown names become sensors with no unit
    so that rows still decode, and the driver refuses to SET them.
    """
    known: dict[str, Variable] = {}
    for layout in LAYOUTS.values():
        for v in layout.variables:
            known.setdefault(v.name, v)
    return Layout(chamber_of(names), config, tuple(known.get(n, Variable(n, Kind.SENSOR, "")) for n in names))
