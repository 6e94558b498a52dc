"""The Mk1 firmware's logic, free of any wire: parsing, setters, error codes, the variable table, rows, timings.

Why wire-free: the emulated board (simulator/board.py) wraps this in the serial protocol, and the in-process
chamber backend calls it directly, so both behave exactly like the same board. The rules are those of the chamber
authors' released firmware (wt_mk_1.ino, lt_mk_1.ino, utils.cpp in ../shared/firmware-harness/vendor), quirks
included, because a host must be tested against the board that exists, not an idealised one:

- `decode_instruction` + `String::toFloat()` (avr-libc strtod): anything starting with "RST" resets; SET and MSR
  need exactly two commas (else er01 with the message); non-numbers parse as 0 (`SET,load_in,abc` sets 0) and
  `MSR,2.9,7` is n=2 (a C cast).
- Setters: -9999 on an exogenous input is er42; a value outside the setter's check is er03; an unknown target is
  er04 with the target; none of these carries the value (fail("er03") has no detail). The light tunnel's `red`
  has no else branch: out of range it changes nothing, yet the SET is answered and marks an intervention.
  `hatch` has no range check.
- The variable table (`variables[]` in the sketches) is what rows report for inputs: -9999 until set, except what
  setup() sets (WT: load_in/load_out 0.01, pot_1/pot_2 0; LT: l_* 0, diode_ir 2, diode_vis 1, t_* 3, pol 0).
  `flag` is -9999 until set. LT rows report osr_angle_k from the ADC setting (1 at power-on) and `camera` as 0/1.
- What the hardware sees is not always the table: at power-on the LT LED matrix shows a red cross (13 of 37 LEDs
  at 255), and a colour left unset reaches the LEDs as 241 (-9999 cast to a byte) once any colour is set.
- Timings the host can see (`Response.busy_s`, `row_seconds`): hatch moves 0.8 ms per step (3200 steps/rev),
  polarizer moves 0.912 ms per step (1600 steps/rev, gear 25:50, an analogRead per step), a camera row 1.5 s
  longer; the reply comes after the move. An LT polarizer move fails with er05 if its angle sensor would leave
  10..1010. RST first homes the motors.

The `pressure-control` configuration is not in the released firmware (commented out in wt_mk_1.ino, which
announces only `standard`); it is offered here from that commented code and no real board can be compared to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from firmware_bridge.avrnum import avr_strtod, to_float32
from firmware_bridge.messages import boot_messages, format_reply_value
from firmware_bridge.motion import STEPPERS
from firmware_bridge.variables import COUNTER_PERIOD, UNSET, Kind
from simulator.model import PhysicsModel

IGNORES_OUT_OF_RANGE = frozenset({"red"})
"""Setters with no else branch: an out-of-range value is answered and changes nothing (the rest fail er03)."""

NOT_EXOGENOUS = {("wt", "pressure-control"): frozenset({"load_in", "load_out", "input", "gain_p", "gain_i", "gain_d"})}
"""Inputs a configuration computes itself: -9999 hands them back to the board instead of failing er42."""

POWER_ON_TABLE = {
    "wt": {"load_in": 0.01, "load_out": 0.01, "pot_1": 0.0, "pot_2": 0.0},
    "lt": {**{f"l_{j}{k}": 0.0 for j in (1, 2, 3) for k in (1, 2)},
           **{f"diode_ir_{k}": 2.0 for k in (1, 2, 3)}, **{f"diode_vis_{k}": 1.0 for k in (1, 2, 3)},
           **{f"t_ir_{k}": 3.0 for k in (1, 2, 3)}, **{f"t_vis_{k}": 3.0 for k in (1, 2, 3)},
           "pol_1": 0.0, "pol_2": 0.0},
}
"""What setup() writes into the variable table; everything else reads -9999 until the host sets it."""

POWER_ON_CROSS_RED = 255.0 * 13 / 37
"""leds_cross(): 13 of the 37 LEDs red at 255 until a colour is set; the physics sees their mean over the matrix."""

UNSET_LED_LEVEL = float(int(UNSET) & 0xFF)
"""An unset colour (-9999) as set_color() hands it to the LEDs: (int)-9999 truncated to a byte = 241."""

ANGLE_SENSOR_LIMITS = (10, 1010)  # move_motor() fails er05 outside these readings
CAMERA_ROW_S = 0.5 + 1.0  # take_picture(): LOW_DURATION + CAM_DELAY


class FirmwareFault(Exception):
    """An error the firmware reports outside the framing (`<ERR,code[,detail]>`) before halting."""

    def __init__(self, code: str, detail: str | None = None):
        self.code = code
        self.detail = detail or ""
        self._has_detail = detail is not None
        super().__init__(f"{code} {self.detail}".strip())

    @property
    def report(self) -> bytes:
        """As fail(msg) / fail(msg, params) print it: the detail part only when fail() was given one."""
        body = f"ERR,{self.code}" + (f",{self.detail}" if self._has_detail else "")
        return f"<{body}>".encode("latin-1", errors="replace")


@dataclass(frozen=True)
class Instruction:
    """utils.cpp's decode_instruction() result."""

    kind: str  # "MSR" | "SET" | "RST" | "UNK"
    target: str = ""
    p1: float = 0.0
    p2: float = 0.0


def decode_instruction(text: str) -> Instruction:
    """decode_instruction(): RST by prefix, exactly two commas for MSR/SET, numbers through String::toFloat()."""
    if text.startswith("RST"):
        return Instruction("RST")
    if text.count(",") != 2:
        return Instruction("UNK")
    if text.startswith("MSR,"):
        kind = "MSR"
    elif text.startswith("SET,"):
        kind = "SET"
    else:
        return Instruction("UNK")
    _, middle, last = text.split(",")
    p2 = to_float32(avr_strtod(last))
    if kind == "SET":
        return Instruction(kind, target=middle, p2=p2)
    return Instruction(kind, p1=to_float32(avr_strtod(middle)), p2=p2)


def c_int(value: float) -> int:
    """`(int)value` as the harness's native build does it (x86: out of range or NaN gives INT_MIN)."""
    if not math.isfinite(value) or not -2**31 <= value < 2**31:
        return -2**31
    return int(value)  # truncates toward zero, like the C cast


def arduino_round(value: float) -> int:
    """Arduino's round() macro: half away from zero."""
    return int(value + 0.5) if value >= 0 else int(value - 0.5)


@dataclass(frozen=True)
class Response:
    """What the board sends for one command: after `busy_s` (a motor move) the replies, then `measure` rows, then
    `after`, then maybe a reboot."""

    replies: tuple[str, ...] = ()
    measure: int = 0
    after: tuple[str, ...] = ()
    reboot: bool = False
    busy_s: float = 0.0


class EmulatedFirmware:
    """One Mk1 board's firmware state around a physics model."""

    def __init__(self, model: PhysicsModel):
        self.model = model
        self.layout = model.layout
        self.config = model.layout.config
        self.chamber = model.layout.chamber
        self._col = {n: i for i, n in enumerate(self.layout.names)}
        # A replayed recording is the whole board output already: only bookkeeping and overrides are the firmware's.
        self._reports_inputs = not getattr(model, "replays_recorded_rows", False)
        self._inputs = [v.name for v in self.layout.variables if v.kind is Kind.ACTUATOR]
        self._not_exogenous = NOT_EXOGENOUS.get((self.chamber, self.config), frozenset())
        self.halted: FirmwareFault | None = None
        self.boots = 0
        self._reset_state()

    def _reset_state(self) -> None:
        self.counter = 0
        self.variables: dict[str, float] = {name: UNSET for name in self.layout.names}
        if self.config == "standard":
            self.variables.update(POWER_ON_TABLE.get(self.chamber, {}))
        self._intervention_pending = False
        self.camera = False
        self._motor_steps: dict[str, int] = {"hatch": 0, "pol_1": 0, "pol_2": 0}

    @property
    def flag(self) -> float:
        return self.variables["flag"]

    @property
    def overrides(self) -> dict[str, float]:
        """Sensors the host has overridden (their table entry is not -9999)."""
        sensors = (v.name for v in self.layout.variables if v.kind is Kind.SENSOR)
        return {n: self.variables[n] for n in sensors if n in self.variables and self.variables[n] != UNSET}

    # ------------------------------------------------------------------ boot
    def boot(self) -> list[str]:
        """Power-on: physics and firmware state back to their initial values; returns the two announcements."""
        self.model.reset()
        self._reset_state()
        if self.chamber == "lt" and self._reports_inputs and "red" in self._col:
            self.model.apply("red", POWER_ON_CROSS_RED)  # the red cross of leds_cross()
            self.model.apply("green", 0.0)
            self.model.apply("blue", 0.0)
        self.halted = None
        self.boots += 1
        return boot_messages(self.config, self.layout.names)

    # ------------------------------------------------------------------ commands
    def handle(self, message: str) -> Response | None:
        """Run one command. Raises FirmwareFault (and stays halted); returns None while halted."""
        if self.halted is not None:
            return None
        try:
            return self._dispatch(message)
        except FirmwareFault as fault:
            self.halted = fault
            raise

    def fail(self, code: str, detail: str | None = None) -> FirmwareFault:
        """Halt with a given error, as a hardware fault would (test switch of the emulated board)."""
        self.halted = FirmwareFault(code, detail)
        return self.halted

    def _dispatch(self, message: str) -> Response:
        instruction = decode_instruction(message)
        if instruction.kind == "MSR":
            n, wait = c_int(instruction.p1), c_int(instruction.p2)
            return Response(replies=(f"OK,MSR,n={n},wait={wait}",), measure=max(n, 0), after=("OK,DONE",))
        if instruction.kind == "SET":
            busy = self._set(instruction.target, instruction.p2)
            self._intervention_pending = True
            reply = f"OK,SET,{instruction.target}={format_reply_value(instruction.p2)}"
            return Response(replies=(reply,), busy_s=busy)
        if instruction.kind == "RST":
            busy = sum(self._move(name, 0.0) for name in self._motors())
            return Response(replies=("OK,RST",), reboot=True, busy_s=busy)
        raise FirmwareFault("er01", message)

    def _set(self, target: str, value: float) -> float:
        """Apply one SET as the sketch's setter does; returns the seconds the board is busy (motor moves)."""
        if target == "flag":
            self.variables["flag"] = value
            return 0.0
        variable = self.layout.get(target)
        if variable is None or variable.kind is Kind.BOOKKEEPING or not variable.settable:
            raise FirmwareFault("er04", target)
        if variable.kind is Kind.SENSOR:
            self.variables[target] = value  # -9999 hands the column back to the sensor
            return 0.0
        if value == UNSET:
            if target not in self._not_exogenous:
                raise FirmwareFault("er42")
            self.variables[target] = UNSET
            self.model.apply(target, UNSET)
            return 0.0
        if not self._setter_accepts(variable, value):
            if target in IGNORES_OUT_OF_RANGE:
                return 0.0
            raise FirmwareFault("er03")
        busy = self._move(target, value) if target in self._motor_steps else 0.0
        self.variables[target] = value
        if target == "camera":
            self.camera = value != 0
        if target in ("red", "green", "blue"):
            for colour in ("red", "green", "blue"):  # set_color(variables[red], variables[green], variables[blue])
                self.model.apply(colour, float(c_int(self.variables[colour]) & 0xFF))
        else:
            self.model.apply(target, value)
        return busy

    @staticmethod
    def _setter_accepts(variable, value: float) -> bool:
        """The setter's own check, in float arithmetic (`value == 2.56` compares floats on the AVR)."""
        if variable.allowed is not None:
            return any(value == to_float32(a) for a in variable.allowed)
        if not variable.firmware_checks_range:
            return variable.name not in IGNORES_OUT_OF_RANGE or (variable.low <= value <= variable.high)
        return (variable.low is None or value >= variable.low) and (variable.high is None or value <= variable.high)

    def _motors(self) -> tuple[str, ...]:
        return ("hatch",) if self.chamber == "wt" else ("pol_1", "pol_2")

    def _move(self, name: str, angle: float) -> float:
        """set_angle(): whole steps from the current position; returns the move's duration; er05 off the sensor."""
        stepper = STEPPERS[name]  # the firmware's figures, shared with the host's reply timeouts
        per_rev, ratio, per_step = stepper.steps_per_rev, 1.0 / stepper.gear, stepper.step_s
        position = self._motor_steps[name]
        current = position / per_rev * ratio * 360.0
        exact = (angle - current) / 360.0 / ratio * per_rev
        # a step count no int holds (NaN, inf, huge) ends as 0 steps in the harness build; see fidelity notes
        steps = arduino_round(exact) if math.isfinite(exact) and abs(exact) < 2**31 else 0
        if name != "hatch":
            self._check_angle_sensor(name, (position + steps) / per_rev * ratio * 360.0)
        self._motor_steps[name] = position + steps
        return abs(steps) * per_step

    def _check_angle_sensor(self, name: str, angle: float) -> None:
        """move_motor() reads the polarizer's angle sensor before every step and fails er05 outside 10..1010."""
        p = getattr(self.model, "p", None)
        per_deg, zeros = getattr(p, "angle_counts_per_deg", None), getattr(p, "angle_zero_counts", None)
        if per_deg is None or zeros is None:
            return
        counts = per_deg * angle + zeros[int(name[-1]) - 1]
        if not ANGLE_SENSOR_LIMITS[0] <= counts <= ANGLE_SENSOR_LIMITS[1]:
            raise FirmwareFault("er05")

    # ------------------------------------------------------------------ rows
    def row_seconds(self) -> float:
        """How long the board takes per row at its real pace (take_measurements, plus a picture in camera mode)."""
        return 1.0 / self.model.rows_per_second + (CAMERA_ROW_S if self.camera else 0.0)

    def rows(self, n: int) -> np.ndarray:
        """The next n rows as the board would send them: float32, bookkeeping, inputs and overrides filled in."""
        values = np.asarray(self.model.sample(n), dtype=np.float64)
        if values.shape != (n, self.layout.row_length):
            raise ValueError(f"physics model returned shape {values.shape}, expected {(n, self.layout.row_length)}")
        values = values.copy()
        col = self._col
        variables = self.variables
        values[:, col["counter"]] = (self.counter + np.arange(n)) % COUNTER_PERIOD
        self.counter = (self.counter + n) % COUNTER_PERIOD
        values[:, col["flag"]] = variables["flag"]
        values[:, col["intervention"]] = 0.0
        if n and self._intervention_pending:
            values[0, col["intervention"]] = 1.0
            self._intervention_pending = False
        if self._reports_inputs:
            for name in self._inputs:
                if name in self._not_exogenous and variables[name] == UNSET:
                    continue  # the configuration reports its own value
                values[:, col[name]] = variables[name]
            if self.chamber == "lt":
                for k in (1, 2):  # measurements[osr_angle_k] = angle_k_oversampling (the ADC setting, 1 at boot)
                    name = f"osr_angle_{k}"
                    if name in col:
                        values[:, col[name]] = 1.0 if variables[name] == UNSET else variables[name]
                if "camera" in col:
                    values[:, col["camera"]] = 1.0 if self.camera else 0.0
        for name, value in self.overrides.items():
            values[:, col[name]] = value
        return values.astype("<f4")
