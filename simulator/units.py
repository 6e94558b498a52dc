"""Units that differ (issue 34): a serial number draws one chamber unit's part parameters from stated distributions.

Why: a datasheet claim is about every part of a type, and reproducibility is agreement across units; with every
emulated chamber the same unit, nothing could be tested across units. `emulated:wt?unit=7` (chamber/emulated.py)
serves the unit `unit_params("wt", 7)` describes; `chamberlab sim units --kind wt --unit 7` prints it.

The rules, so that a unit is a fact and not an accident:
- Serial 0 is today's unit: `unit_params(kind, 0, base)` returns `base` unchanged (the defaults without one), so
  nothing that passes today changes.
- A unit is seeded by its serial only: each parameter's draw has its own generator, seeded by (UNITS_DOMAIN, serial,
  CRC-32 of the parameter's key), never by the host, the time or the order of the table. The same serial is the
  same unit on every host, and a parameter added to the table later changes no other's draw.
- One table, UNIT_PARAMETERS: every drawn parameter with its distribution, σ and source. σ comes from the real
  chamber's figures where they exist (the spread of the four real barometers' offsets), else from the datasheet's
  min/max read as ±3σ (the ACS70331 datasheet says so of its own ± values), else it is marked "assumed:".
- A draw enters the unit's parameters in one of three ways: `value` (the draw is the parameter: a new part's
  offset, gain or error), `factor` (today's value × the draw: a chip's gain on the model's channel scales) or
  `noise` (today's noise table × the draw, every oversampling alike). Normal draws are clipped at ±5σ (a 6·10⁻⁷
  chance) so that no gain can reach 0; a parameter with a physical bound is clipped there too (stated in its row).
- A unit can be planted out of specification (`planted`): an offset added to what one variable shows, for
  demonstrations and tests of the fleet statistics.

Not drawn, on purpose: the MCP4151's end-to-end resistance R_AB (8.0–12.0 kΩ, p5): the chamber reads each wiper
ratiometrically against the supply that feeds the potentiometer, so no reading depends on R_AB, and a drawn value
nothing reads would only look like variation. The angle sensors' zero counts (a mounting position, no published
spread) can be planted but are not drawn.
"""

from __future__ import annotations

import copy
import math
import zlib
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from simulator.params import BAROMETERS, SimParams, dump_params, params_from

KINDS = ("wt", "lt")
MAX_SERIAL = 2**32 - 1
UNITS_DOMAIN = 34
"""First word of every unit draw's seed (the issue's number): keeps unit draws apart from the noise seeds."""
CLIP_SIGMAS = 5.0

SECTION = {"wt": "wind_tunnel", "lt": "light_tunnel"}


class UnitError(ValueError):
    """A unit that cannot be drawn or planted as asked (unknown kind, a serial out of range, an unknown variable)."""


REAL_OFFSETS_PA = {"upwind": 2.99, "downwind": -8.46, "ambient": 0.0, "intake": -4.61}
"""Today's offsets (simulator/params.py barometer_offsets_pa), solved from the real chamber's wt_validate_v1 figures."""
REAL_OFFSET_SD_PA = float(np.std(list(REAL_OFFSETS_PA.values()), ddof=1))
"""5.045 Pa: the SD (ddof 1) of the real chamber's four barometer offsets, the σ every unit's offsets are drawn with."""
REAL_OFFSET_RANGE_PA = max(REAL_OFFSETS_PA.values()) - min(REAL_OFFSETS_PA.values())
"""11.45 Pa: how far apart the real chamber's four barometers read with the fans off."""

_OFFSET_SOURCE = (
    f"real: the SD (ddof 1) of the real chamber's four barometer offsets, {REAL_OFFSET_SD_PA:.2f} Pa (+2.99, -8.46, 0, "
    "-4.61 Pa, solved from wt_validate_v1: simulator/params.py barometer_offsets_pa; 3 degrees of freedom), each "
    "unit's offset drawn about 0 (the true pressure is not known to the real chamber either). The datasheet's "
    "absolute pressure accuracy, +/-100 Pa typ. (DPS310 V1.1 Table 7, p9), read as +/-3 sigma would be 33 Pa: the "
    "real units sit well inside it"
)
_NOISE_SOURCE = (
    "assumed: 10 % of the unit's noise table (every oversampling alike). The DPS310 datasheet prints its precision "
    "table (0.4 Pa RMS at osr 8) as typical values only, without min/max, and the real archive holds no per-unit "
    "noise figure"
)
_FAN_SOURCE = (
    "datasheet: NF-F12 industrialPPC-3000 PWM product sheet (fan.pdf p1), 'Max. rotational speed (+/-10%) 3000 RPM', "
    "read as +/-3 sigma: sigma 3.33 % of model A1's speed (the rpm reading at load 1 is 2870 x gain). The real "
    "chamber's two fans read ~2810-2930 rpm at load 1 (issue 14, read off plots), not a per-fan figure"
)
_SENS_SOURCE = (
    "datasheet: ACS70331EESA-2P5U3 (ACS70331-DS Rev. 2 p7) sensitivity error Esens +/-1.5 % at 25 C, a 3 sigma value "
    "by the table's own note [1] ('Typical values with +/- are 3 sigma values')"
)
_VOE_SOURCE = (
    "datasheet: ACS70331EESA-2P5U3 (ACS70331-DS Rev. 2 p7) offset voltage VOE +/-15 mV at 25 C, a 3 sigma value by "
    "note [1]"
)
_ZSE_SOURCE = (
    "datasheet: MCP4151 DS22060B p6, zero-scale error VWZSE (10 kOhm, 8-bit) Typ +0.1, Max +3.5 LSb, read as typ + "
    "3 sigma; clipped at 0 (the wiper cannot go below terminal B, and the ADC reads no negative voltage)"
)
_FSE_SOURCE = (
    "datasheet: MCP4151 DS22060B p6, full-scale error VWFSE (10 kOhm, 8-bit) Min -3.5, Typ -0.1 LSb, read as typ - "
    "3 sigma; clipped at 0 (the wiper cannot rise above terminal A)"
)
_LIGHT_SOURCE = (
    "assumed: 5 % per Si1151 chip, both its channels (ir_k, vis_k) together. The Si115x datasheet (Rev. 1.4 Table "
    "8.3, p49) prints the photodiode responses as typical values only; the real chamber's vis_1 level sits 5.2 % "
    "below the authors' model (simulator/params.py channel_scale), the order of magnitude used"
)


@dataclass(frozen=True)
class UnitParameter:
    """One drawn parameter: where it goes in the parameter file, its distribution (normal: `mean`, `sigma`,
    clipped to `low`..`high` where a physical bound holds), how the draw enters (module docstring) and why."""

    key: str  # stable: seeds the draw ("wt/pressure_upwind/offset")
    parameter: str  # what a reader calls it
    kind: Literal["wt", "lt"]
    field: str  # the field of WindTunnelParams / LightTunnelParams
    item: str | tuple[int, ...] | None  # the field's key, its indices, or None for a plain number
    unit: str
    how: Literal["value", "factor", "noise"]
    mean: float
    sigma: float
    source: str
    low: float | None = None
    high: float | None = None

    @property
    def distribution(self) -> str:
        sigma = f"{self.sigma:.4g}"
        text = (f"today's x normal(1, {sigma})" if self.how in ("factor", "noise")
                else f"normal({self.mean:g}, {sigma}{f' {self.unit}' if self.unit in ('Pa', 'V', 'LSb') else ''})")
        if self.low is not None:
            text += f", clipped at >= {self.low:g}"
        if self.high is not None:
            text += f", clipped at <= {self.high:g}"
        return text

    def draw(self, serial: int) -> float:
        """This parameter's draw for unit `serial` (serial > 0), from its own generator."""
        rng = np.random.default_rng([UNITS_DOMAIN, serial, zlib.crc32(self.key.encode("ascii"))])
        z = float(np.clip(rng.standard_normal(), -CLIP_SIGMAS, CLIP_SIGMAS))
        value = self.mean + self.sigma * z
        if self.low is not None:
            value = max(value, self.low)
        if self.high is not None:
            value = min(value, self.high)
        return value

    def shown(self, section: dict[str, Any]) -> float:
        """The value a reader sees in a unit's parameter section: the number itself, the first of its channels'
        scales, or the osr-8 noise (Pa)."""
        value = section[self.field]
        if self.how == "noise":
            table = (value or {}).get(self.item) or section["barometer_noise_pa"]
            return float(table["8"])
        if isinstance(self.item, tuple):
            return float(value[self.item[0]])
        return float(value if self.item is None else value[self.item])

    def apply(self, section: dict[str, Any], drawn: float) -> None:
        """Put the draw into a unit's parameter section (a JSON-ready dict, changed in place)."""
        if self.how == "noise":
            by_unit = section.get(self.field) or {}
            table = by_unit.get(self.item) or section["barometer_noise_pa"]
            by_unit[self.item] = {osr: sd * drawn for osr, sd in table.items()}
            section[self.field] = by_unit
        elif isinstance(self.item, tuple):
            values = list(section[self.field])
            for i in self.item:
                values[i] = values[i] * drawn if self.how == "factor" else drawn
            section[self.field] = values
        elif self.item is None:
            section[self.field] = drawn
        else:
            if section.get(self.field) is None:  # offsets drawn from the seed (None): a unit has its own
                section[self.field] = {}
            section[self.field][self.item] = drawn


def _table() -> tuple[UnitParameter, ...]:
    rows: list[UnitParameter] = []
    for b in BAROMETERS:
        rows.append(UnitParameter(f"wt/pressure_{b}/offset", f"barometer offset, pressure_{b}", "wt",
                                  "barometer_offsets_pa", b, "Pa", "value", 0.0, REAL_OFFSET_SD_PA, _OFFSET_SOURCE))
    for b in BAROMETERS:
        rows.append(UnitParameter(f"wt/pressure_{b}/noise", f"barometer noise at osr 8, pressure_{b}", "wt",
                                  "barometer_noise_by_unit_pa", b, "Pa", "noise", 1.0, 0.10, _NOISE_SOURCE))
    for fan, name in (("in", "intake"), ("out", "exhaust")):
        rows.append(UnitParameter(f"wt/rpm_{fan}/max_speed", f"fan maximum speed, rpm_{fan} ({name} fan)", "wt",
                                  "fan_speed_gain", fan, "x A1 speed", "value", 1.0, 0.10 / 3, _FAN_SOURCE))
    for fan in ("in", "out"):
        rows.append(UnitParameter(f"wt/current_{fan}/sensitivity", f"current-sensor sensitivity, current_{fan}",
                                  "wt", "current_sensitivity_gain", fan, "x nominal", "value", 1.0, 0.005,
                                  _SENS_SOURCE))
        rows.append(UnitParameter(f"wt/current_{fan}/offset", f"current-sensor offset voltage, current_{fan}", "wt",
                                  "current_offset_v", fan, "V", "value", 0.0, 0.005, _VOE_SOURCE))
    for k in ("1", "2"):
        rows.append(UnitParameter(f"wt/signal_{k}/zero_scale", f"potentiometer zero-scale error, pot_{k}", "wt",
                                  "pot_zero_scale_lsb", k, "LSb", "value", 0.1, (3.5 - 0.1) / 3, _ZSE_SOURCE, low=0.0))
        rows.append(UnitParameter(f"wt/signal_{k}/full_scale", f"potentiometer full-scale error, pot_{k}", "wt",
                                  "pot_full_scale_lsb", k, "LSb", "value", -0.1, (3.5 - 0.1) / 3, _FSE_SOURCE,
                                  high=0.0))
    for j in (1, 2, 3):
        rows.append(UnitParameter(f"lt/sensor_{j}/gain", f"light-sensor gain, ir_{j} and vis_{j}", "lt",
                                  "channel_scale", (2 * (j - 1), 2 * (j - 1) + 1), "x today's", "factor", 1.0, 0.05,
                                  _LIGHT_SOURCE))
    rows.append(UnitParameter("lt/current/sensitivity", "current-sensor sensitivity, current", "lt",
                              "current_sensitivity_gain", None, "x nominal", "value", 1.0, 0.005, _SENS_SOURCE))
    rows.append(UnitParameter("lt/current/offset", "current-sensor offset voltage, current", "lt",
                              "current_offset_v", None, "V", "value", 0.0, 0.005, _VOE_SOURCE))
    return tuple(rows)


UNIT_PARAMETERS: tuple[UnitParameter, ...] = _table()
"""The one table of what differs between units: parameter, chamber kind, distribution, σ and source."""

PLANTABLE: dict[str, dict[str, tuple[str, str | int]]] = {
    "wt": {f"pressure_{b}": ("barometer_offsets_pa", b) for b in BAROMETERS},
    "lt": {"angle_1": ("angle_zero_counts", 0), "angle_2": ("angle_zero_counts", 1)},
}
"""What `planted` can move, by the variable it shows in: a barometer's offset (Pa), an angle sensor's zero (counts
at a 5 V reference)."""


def _check(kind: str, serial: int | None = None) -> None:
    if kind not in KINDS:
        raise UnitError(f"unknown chamber kind {kind!r}; expected one of {', '.join(KINDS)}")
    if serial is not None and (isinstance(serial, bool) or not isinstance(serial, (int, np.integer))
                               or not 0 <= serial <= MAX_SERIAL):
        raise UnitError(f"a unit serial is a whole number 0..{MAX_SERIAL}, got {serial!r}")


def parameters_of(kind: str) -> tuple[UnitParameter, ...]:
    """The rows of UNIT_PARAMETERS for one chamber kind."""
    _check(kind)
    return tuple(p for p in UNIT_PARAMETERS if p.kind == kind)


def unit_params(kind: str, serial: int, base: dict | SimParams | None = None) -> dict:
    """The parameter mapping (simulator/params.py's file format) of unit `serial` of a `kind` chamber, drawn over
    `base` (default: today's defaults). Serial 0 is `base` unchanged (a copy), i.e. today's unit; another serial
    replaces or scales exactly the fields of UNIT_PARAMETERS for that kind and nothing else."""
    _check(kind, serial)
    if serial == 0:
        if base is None:
            return dump_params(SimParams())
        return dump_params(base) if isinstance(base, SimParams) else copy.deepcopy(base)
    params = dump_params(params_from(base))
    section = params[SECTION[kind]]
    for row in parameters_of(kind):
        row.apply(section, row.draw(int(serial)))
    return dump_params(params_from(params))  # checked: every drawn value is one the physics accepts


def planted(params: dict | SimParams | None, kind: str, offsets: dict[str, float]) -> dict:
    """`params` with a unit planted out of specification: each `offsets` entry adds its value to what that
    variable shows (PLANTABLE: pressure_* in Pa on that barometer's offset; angle_1/angle_2 in counts at a 5 V
    reference on that sensor's zero). Returns a new mapping; an unknown variable or a non-finite value is refused
    naming what can be planted, and nothing is changed."""
    _check(kind)
    known = PLANTABLE[kind]
    unknown = sorted(set(offsets) - set(known))
    if unknown:
        raise UnitError(f"cannot plant {', '.join(unknown)} on a {kind} unit; expected some of {', '.join(known)}")
    for name, value in offsets.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UnitError(f"planted offset {name}: expected a finite number, got {value!r}")
    result = dump_params(params_from(params))
    section = result[SECTION[kind]]
    for name, value in offsets.items():
        field, item = known[name]
        if section[field] is None:
            raise UnitError(f"cannot plant {name}: the parameters draw the barometer offsets from the seed "
                            f"({field}: null); expected fixed offsets")
        section[field][item] = section[field][item] + float(value)
    return dump_params(params_from(result))


def unit_seed(seed: int, serial: int) -> int:
    """The noise seed of unit `serial`'s board, from the run's `seed`: serial 0 keeps `seed` (today's rows), any
    other serial gets its own stream, so that units of one fleet do not share their noise."""
    if serial == 0:
        return seed
    state = np.random.SeedSequence([UNITS_DOMAIN, seed, serial]).generate_state(2, np.uint32)
    return int(state[0]) << 32 | int(state[1])


def describe_unit(kind: str, serial: int) -> list[dict[str, Any]]:
    """One row per drawn parameter of unit `serial`: parameter, key, value, today's value, unit, distribution,
    σ and source (what `chamberlab sim units` prints)."""
    _check(kind, serial)
    ours = unit_params(kind, serial)[SECTION[kind]]
    today = unit_params(kind, 0)[SECTION[kind]]
    rows = []
    for row in parameters_of(kind):
        value, was = row.shown(ours), row.shown(today)
        if row.how == "factor":  # a gain on today's channel scales: the gain itself
            value, was = value / was, 1.0
        rows.append({"parameter": row.parameter, "key": row.key, "value": value, "today": was,
                     "unit": "Pa" if row.how == "noise" else row.unit, "distribution": row.distribution,
                     "sigma": row.sigma, "source": row.source})
    return rows
