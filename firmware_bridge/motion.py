"""How long the board is busy moving a stepper before it replies: the hatch (WT) and the polarizers (LT).

Why the host needs this: the firmware moves the motor inside the SET (and inside RST, which first returns every
motor to 0) and replies only afterwards, so a fixed reply timeout either fails a full polarizer swing (~3 s) or
waits far too long for a lost reply after a small move. The figures are the firmware's own (wt_mk_1.ino,
lt_mk_1.ino): steps = round(distance / 360 · gear · steps_per_rev), each step two `delayMicroseconds(400)` plus,
on the light tunnel, one `analogRead` of the angle sensor (112 µs) to guard the mechanical limit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stepper:
    """One stepper as the firmware drives it."""

    steps_per_rev: int  # motor steps for 360° of the motor shaft
    gear: float  # motor turns per actuator turn (polarizers: TEETH_LARGE / TEETH_SMALL)
    step_s: float  # time per step

    def steps(self, start_deg: float, end_deg: float) -> int:
        return abs(round((end_deg - start_deg) / 360.0 * self.gear * self.steps_per_rev))

    def seconds(self, start_deg: float, end_deg: float) -> float:
        return self.steps(start_deg, end_deg) * self.step_s


HATCH = Stepper(steps_per_rev=3200, gear=1.0, step_s=2 * 400e-6)
POLARIZER = Stepper(steps_per_rev=1600, gear=50 / 25, step_s=2 * 400e-6 + 112e-6)

STEPPERS: dict[str, Stepper] = {"hatch": HATCH, "pol_1": POLARIZER, "pol_2": POLARIZER}
"""The variables whose SET moves a motor; every motor is at 0 after power-on and returns to 0 on RST."""


def motion_seconds(name: str, start_deg: float, end_deg: float) -> float:
    """Seconds the firmware spends moving `name` from `start_deg` to `end_deg` (0 for a variable with no motor)."""
    stepper = STEPPERS.get(name)
    return stepper.seconds(start_deg, end_deg) if stepper is not None else 0.0


class MotorPositions:
    """Where the host believes each motor is, from the SETs the board acknowledged; all at 0 after a boot."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}

    def reset(self) -> None:
        self._at.clear()

    def seconds_to(self, name: str, end_deg: float) -> float:
        return motion_seconds(name, self._at.get(name, 0.0), end_deg)

    def seconds_home(self) -> float:
        """The time RST spends returning every motor to 0 before it answers (motors move one after the other)."""
        return sum(motion_seconds(name, at, 0.0) for name, at in self._at.items())

    def moved(self, name: str, end_deg: float) -> None:
        if name in STEPPERS:
            self._at[name] = end_deg
