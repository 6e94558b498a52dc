"""ISO 5725-2 precision of a fleet: repeatability, between-unit and reproducibility standard deviations, and the
consistency and outlier tests that decide which units enter the population statistics.

Why: a fleet of chambers is an interlaboratory experiment in the standard's terms — a unit (one DPS310, one fan)
is a "laboratory", its repeated readings of one quantity are the "replicates" of one "cell". The standard's
one-way analysis separates the readings' scatter within a unit (repeatability s_r) from the scatter of the units'
means (between-unit s_L), and its tests find the unit that does not belong to the population (a barometer 150 Pa
off), so that the population statistics are not made of it.

Estimates (ISO 5725-2 §7.4, unequal n allowed; p units, unit i with n_i readings, mean ȳ_i and std s_i):
  s_r² = Σ(n_i − 1)s_i² / Σ(n_i − 1)                              repeatability variance, ν_r = Σ(n_i − 1)
  ȳ    = Σ n_i ȳ_i / Σ n_i                                         general mean
  s_d² = Σ n_i (ȳ_i − ȳ)² / (p − 1)
  n̄    = [Σ n_i − Σ n_i² / Σ n_i] / (p − 1)                        (= n when every unit has n readings)
  s_L² = (s_d² − s_r²) / n̄, taken as 0 when negative (§7.4.5.1)   between-unit variance
  s_R² = s_r² + s_L²                                               reproducibility variance
  r = 2.8·s_r, R = 2.8·s_R                                         repeatability and reproducibility limits (95 %)

Tests, each with its 5 % (straggler) and 1 % (outlier) critical values computed, never typed in:
  Mandel's h_i = (ȳ_i − m)/s_m, m and s_m the mean and std of the p unit means (§7.3.1):
      h_crit = (p − 1)·t / √(p·(t² + p − 2)), t the two-sided α quantile of Student's t with p − 2 df;
  Mandel's k_i = s_i·√p / √(Σ s_j²) (§7.3.1):
      k_crit = √(p / (1 + (p − 1)/F)), F the upper α quantile of F(n − 1, (p − 1)(n − 1));
  Cochran's C = s_max² / Σ s_j² (§7.3.3):
      C_crit = 1 / (1 + (p − 1)/F), F the upper α/p quantile of F(n − 1, (p − 1)(n − 1)) — the Bonferroni form,
      exact whenever C_crit > ½ and otherwise a close approximation (Eisenhart, Hastay & Wallis' 1 % table:
      within 0.0001 over p ≤ 15, n ≤ 11, within 0.0006 at p = 20);
  Grubbs' single G = max|ȳ_i − m| / s_m on the unit means (§7.3.4):
      G_crit = (p − 1)/√p · √(t² / (p − 2 + t²)), t the upper α/(2p) quantile of t with p − 2 df;
  Grubbs' double G = SS(without the two largest, or the two smallest) / SS(all), outlier when small: its
      critical value has no closed form, so it is the α quantile of the null distribution of the smaller of the
      two pair statistics, simulated with DOUBLE_GRUBBS_DRAWS normal samples from a fixed seed (a deterministic
      numerical rule, like a quadrature; its Monte Carlo standard error is recorded with the value).
With unequal n, k and C use the n that occurs most often (the smaller on a tie), as §7.3.3 says for Cochran.

The procedure (§7.3): h and k are computed for every unit; Cochran's test is then repeated on the remaining units
while it finds an outlier; then Grubbs' single test on the remaining means, repeated while it finds one; only when
it found none, Grubbs' double test. Beyond the 1 % value = outlier, between the 5 % and 1 % values = straggler
(named, kept). An outlier of a test in `exclude_by` is left out of the population statistics and the exclusion
recorded with its test and statistic; an outlier of another test is named as flagged and kept.

Which tests exclude (ISO_EXCLUDING_TESTS, the default): Cochran's and Grubbs' — the standard's outlier tests,
whose critical values hold for the whole fleet (α/p in their quantiles). Mandel's h and k are the standard's
consistency indicators (§7.3.1): their critical values hold per unit, so over 8 normal units each flags some unit
beyond 1 % in about 8 % of fleets. Measured (tests/test_interlab_precision.py, 2,000 seeded clean fleets of 8
units × 20 readings): excluding on h and k too (ALL_TESTS) drops a unit from 15.8 % of clean fleets, and dropping
the most extreme unit narrows the population interval (a bias towards pass); ISO_EXCLUDING_TESTS drops one from
2.7 % (three fleet-wide tests at 1 % each; h or k still flag a unit in 13 % of clean fleets, named and kept). A unit planted 150 Pa off among 8 is beyond 1 % on h and on Grubbs' test, so it is flagged by h and
excluded either way. The unit's own verdict is never changed by any of this.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable, Literal, Mapping, Sequence

import numpy as np
from scipy import stats

Level = Literal["ok", "straggler", "outlier"]
TestName = Literal["mandel_h", "mandel_k", "cochran", "grubbs_single", "grubbs_double"]

STRAGGLER_SIGNIFICANCE = 0.05
OUTLIER_SIGNIFICANCE = 0.01
LIMIT_FACTOR = 2.8
"""r = 2.8·s_r (ISO 5725-6 §4.1: 1.96·√2 rounded, the 95 % limit on the difference of two results)."""
ALL_TESTS: frozenset[str] = frozenset({"mandel_h", "mandel_k", "cochran", "grubbs_single", "grubbs_double"})
ISO_EXCLUDING_TESTS: frozenset[str] = frozenset({"cochran", "grubbs_single", "grubbs_double"})
"""The tests whose 1 % outliers leave the population statistics by default (module docstring: why not h and k)."""
DOUBLE_GRUBBS_DRAWS = 200_000
DOUBLE_GRUBBS_SEED = 5725


class PrecisionError(ValueError):
    """Readings or unit means the ISO 5725-2 analysis cannot use; names the unit and what was expected."""


# ------------------------------------------------------------------------------------------ critical values
def _alpha(alpha: float) -> float:
    if not (0.0 < alpha < 1.0):
        raise PrecisionError(f"significance level: expected 0 < alpha < 1, got {alpha!r}")
    return float(alpha)


def mandel_h_critical(p: int, alpha: float) -> float:
    """The two-sided critical |h| for p units (p ≥ 3)."""
    if p < 3:
        raise PrecisionError(f"Mandel's h: expected at least 3 units, got {p}")
    t = float(stats.t.isf(_alpha(alpha) / 2.0, p - 2))
    return (p - 1) * t / math.sqrt(p * (t * t + p - 2))


def mandel_k_critical(p: int, n: int, alpha: float) -> float:
    """The upper critical k for p units of n readings each (p ≥ 2, n ≥ 2)."""
    if p < 2 or n < 2:
        raise PrecisionError(f"Mandel's k: expected at least 2 units of at least 2 readings, got p={p}, n={n}")
    f = float(stats.f.isf(_alpha(alpha), n - 1, (p - 1) * (n - 1)))
    return math.sqrt(p / (1.0 + (p - 1) / f))


def cochran_critical(p: int, n: int, alpha: float) -> float:
    """The upper critical C for p units of n readings each (p ≥ 2, n ≥ 2)."""
    if p < 2 or n < 2:
        raise PrecisionError(f"Cochran's C: expected at least 2 units of at least 2 readings, got p={p}, n={n}")
    f = float(stats.f.isf(_alpha(alpha) / p, n - 1, (p - 1) * (n - 1)))
    return 1.0 / (1.0 + (p - 1) / f)


def grubbs_critical(p: int, alpha: float) -> float:
    """The critical G of Grubbs' single test on p values (p ≥ 3), two-sided (largest or smallest)."""
    if p < 3:
        raise PrecisionError(f"Grubbs' test: expected at least 3 values, got {p}")
    t = float(stats.t.isf(_alpha(alpha) / (2.0 * p), p - 2))
    return (p - 1) / math.sqrt(p) * math.sqrt(t * t / (p - 2 + t * t))


def _pair_statistics(x: np.ndarray) -> np.ndarray:
    """min(SS without the two largest, SS without the two smallest) / SS, row-wise on sorted rows."""
    def ss(a: np.ndarray) -> np.ndarray:
        return np.sum((a - a.mean(axis=1, keepdims=True)) ** 2, axis=1)
    total = ss(x)
    return np.minimum(ss(x[:, :-2]), ss(x[:, 2:])) / total


def null_quantile(p: int, alpha: float, statistic: Callable[[np.ndarray], np.ndarray], *,
                  draws: int = DOUBLE_GRUBBS_DRAWS, seed: int = DOUBLE_GRUBBS_SEED,
                  upper: bool = False) -> tuple[float, float]:
    """(quantile, its Monte Carlo standard error) of `statistic` over normal samples of size p, rows sorted.

    The lower α quantile (upper=False) or the upper one. The standard error is the half-width of the order-
    statistic interval for the quantile at ±1 binomial standard deviation."""
    a = _alpha(alpha)
    rng = np.random.default_rng(seed)
    chunks = []
    for start in range(0, draws, 20_000):
        rows = min(20_000, draws - start)
        chunks.append(statistic(np.sort(rng.standard_normal((rows, p)), axis=1)))
    values = np.sort(np.concatenate(chunks))
    q = 1.0 - a if upper else a
    centre = q * (draws - 1)
    spread = math.sqrt(draws * q * (1.0 - q))
    lo = values[max(0, int(math.floor(centre - spread)))]
    hi = values[min(draws - 1, int(math.ceil(centre + spread)))]
    return float(np.quantile(values, q)), float(hi - lo) / 2.0


@lru_cache(maxsize=128)
def double_grubbs_critical(p: int, alpha: float) -> tuple[float, float]:
    """(critical value, Monte Carlo standard error) of Grubbs' double test on p values (p ≥ 4): outlier when the
    smaller pair statistic is below it."""
    if p < 4:
        raise PrecisionError(f"Grubbs' double test: expected at least 4 values, got {p}")
    return null_quantile(p, alpha, _pair_statistics)


@dataclass(frozen=True)
class Critical:
    """A test's critical values at 5 % (straggler) and 1 % (outlier); `tail` says which side is beyond."""

    at_5: float
    at_1: float
    tail: Literal["upper", "lower"] = "upper"

    def level(self, statistic: float) -> Level:
        beyond = (lambda x, c: x > c) if self.tail == "upper" else (lambda x, c: x < c)
        if beyond(statistic, self.at_1):
            return "outlier"
        if beyond(statistic, self.at_5):
            return "straggler"
        return "ok"


# ------------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Cell:
    """One unit's readings summarised: n, mean and standard deviation (n − 1)."""

    unit: str
    n: int
    mean: float
    std: float


@dataclass(frozen=True)
class Finding:
    """One test applied to one unit (or a pair): the statistic, its critical values and where it fell."""

    test: TestName
    units: tuple[str, ...]
    statistic: float
    critical: Critical
    level: Level
    step: int  # the order in which the procedure applied it
    note: str = ""


@dataclass(frozen=True)
class Exclusion:
    """A unit left out of the population statistics: which test, its statistic and the 1 % value it passed."""

    unit: str
    test: TestName
    statistic: float
    critical_1: float
    reason: str


@dataclass(frozen=True)
class Screening:
    """The consistency and outlier tests over a fleet (module docstring: the procedure)."""

    units: tuple[str, ...]
    h: dict[str, float | None]
    k: dict[str, float | None]
    h_critical: Critical | None
    k_critical: Critical | None
    findings: tuple[Finding, ...]
    exclusions: tuple[Exclusion, ...]
    flagged: tuple[str, ...]  # beyond 1 % on a test that does not exclude (named, kept)
    stragglers: tuple[str, ...]  # between 5 % and 1 % on any test, neither excluded nor flagged
    exclude_by: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def outliers(self) -> tuple[str, ...]:
        return tuple(e.unit for e in self.exclusions)

    @property
    def retained(self) -> tuple[str, ...]:
        out = set(self.outliers)
        return tuple(u for u in self.units if u not in out)


@dataclass(frozen=True)
class PrecisionEstimate:
    """ISO 5725-2 §7.4 estimates over the units named in `units` (module docstring: the formulas)."""

    units: tuple[str, ...]
    p: int
    n_total: int
    n_bar: float
    general_mean: float
    s_r: float
    dof_r: int
    s_d: float
    s_L: float
    s_R: float
    repeatability_limit: float
    reproducibility_limit: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrecisionResult:
    """Cells, the screening, and the estimates with the outliers left out (and, for the record, with them in)."""

    cells: tuple[Cell, ...]
    screening: Screening
    estimate: PrecisionEstimate | None
    estimate_all: PrecisionEstimate | None


# ------------------------------------------------------------------------------------------------ the maths
def _finite(unit: str, xs: Sequence[float]) -> list[float]:
    try:
        out = [float(x) for x in xs]
    except (TypeError, ValueError):
        raise PrecisionError(f"unit {unit!r}: expected numbers, got {list(xs)!r}") from None
    if not all(math.isfinite(x) for x in out):
        raise PrecisionError(f"unit {unit!r}: expected finite readings, got a NaN or inf among {len(out)}")
    return out


def cells_from_readings(readings: Mapping[str, Sequence[float]]) -> tuple[Cell, ...]:
    """One cell per unit from its repeated readings (at least 2 each, at least 2 units, all finite)."""
    if len(readings) < 2:
        raise PrecisionError(f"precision: expected readings of at least 2 units, got {len(readings)}")
    cells = []
    for unit, xs in readings.items():
        values = _finite(str(unit), xs)
        if len(values) < 2:
            raise PrecisionError(f"unit {unit!r}: expected at least 2 repeated readings, got {len(values)}")
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (len(values) - 1))
        cells.append(Cell(str(unit), len(values), mean, std))
    return tuple(cells)


def precision_estimate(cells: Sequence[Cell]) -> PrecisionEstimate:
    """s_r, s_L, s_R and the limits over `cells` (§7.4; unequal n allowed)."""
    p = len(cells)
    if p < 2:
        raise PrecisionError(f"precision estimate: expected at least 2 units, got {p}")
    ns = [c.n for c in cells]
    n_total = sum(ns)
    dof_r = n_total - p
    s_r2 = math.fsum((c.n - 1) * c.std * c.std for c in cells) / dof_r
    mean = math.fsum(c.n * c.mean for c in cells) / n_total
    s_d2 = math.fsum(c.n * (c.mean - mean) ** 2 for c in cells) / (p - 1)
    n_bar = (n_total - math.fsum(n * n for n in ns) / n_total) / (p - 1)
    notes = []
    s_l2 = (s_d2 - s_r2) / n_bar
    if s_l2 < 0:
        notes.append(f"s_L^2 = {s_l2:.6g} < 0 taken as 0 (ISO 5725-2 7.4.5.1)")
        s_l2 = 0.0
    s_r, s_big_r = math.sqrt(s_r2), math.sqrt(s_r2 + s_l2)
    return PrecisionEstimate(
        units=tuple(c.unit for c in cells), p=p, n_total=n_total, n_bar=n_bar, general_mean=mean, s_r=s_r,
        dof_r=dof_r, s_d=math.sqrt(s_d2), s_L=math.sqrt(s_l2), s_R=s_big_r,
        repeatability_limit=LIMIT_FACTOR * s_r, reproducibility_limit=LIMIT_FACTOR * s_big_r, notes=tuple(notes),
    )


def mandel_h(means: Sequence[float]) -> list[float] | None:
    """h_i = (ȳ_i − m)/s_m over the unit means; None when fewer than 3 or all equal."""
    xs = [float(x) for x in means]
    if len(xs) < 3:
        return None
    m = math.fsum(xs) / len(xs)
    s = math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return None if s == 0 else [(x - m) / s for x in xs]


def mandel_k(stds: Sequence[float]) -> list[float] | None:
    """k_i = s_i·√p/√(Σ s_j²); None when every s is zero."""
    ss = [float(s) for s in stds]
    total = math.fsum(s * s for s in ss)
    return None if total == 0 else [s * math.sqrt(len(ss)) / math.sqrt(total) for s in ss]


def _typical_n(cells: Sequence[Cell]) -> int:
    counts = Counter(c.n for c in cells)
    top = max(counts.values())
    return min(n for n, c in counts.items() if c == top)


def _critical(fn: Callable[[float], float], tail: Literal["upper", "lower"] = "upper") -> Critical:
    return Critical(fn(STRAGGLER_SIGNIFICANCE), fn(OUTLIER_SIGNIFICANCE), tail)


class _Procedure:
    """The screening's bookkeeping: findings in order, exclusions, stragglers, notes."""

    def __init__(self, units: Sequence[str], exclude_by: frozenset[str]) -> None:
        self.units = tuple(units)
        self.exclude_by = exclude_by
        self.findings: list[Finding] = []
        self.exclusions: list[Exclusion] = []
        self.flagged: list[str] = []
        self.stragglers: list[str] = []
        self.notes: list[str] = []

    def record(self, test: TestName, units: tuple[str, ...], statistic: float, critical: Critical,
               note: str = "") -> Level:
        level = critical.level(statistic)
        self.findings.append(Finding(test, units, statistic, critical, level, len(self.findings) + 1, note))
        excluded = {e.unit for e in self.exclusions}
        for unit in units:
            if level == "outlier" and test in self.exclude_by and unit not in excluded:
                side = "below" if critical.tail == "lower" else "beyond"
                self.exclusions.append(Exclusion(unit, test, statistic, critical.at_1,
                                                 f"{test} = {statistic:.4g} {side} its 1 % value {critical.at_1:.4g}"))
            elif level == "outlier" and test not in self.exclude_by and unit not in self.flagged:
                self.flagged.append(unit)
            elif level == "straggler" and unit not in self.stragglers:
                self.stragglers.append(unit)
        return level

    def screening(self, h: dict[str, float | None], k: dict[str, float | None], h_crit: Critical | None,
                  k_crit: Critical | None) -> Screening:
        excluded = {e.unit for e in self.exclusions}
        flagged = tuple(u for u in self.flagged if u not in excluded)
        return Screening(units=self.units, h=h, k=k, h_critical=h_crit, k_critical=k_crit,
                         findings=tuple(self.findings), exclusions=tuple(self.exclusions), flagged=flagged,
                         stragglers=tuple(u for u in self.stragglers if u not in excluded and u not in flagged),
                         exclude_by=tuple(sorted(self.exclude_by)), notes=tuple(self.notes))

    def retained(self) -> list[str]:
        out = {e.unit for e in self.exclusions}
        return [u for u in self.units if u not in out]


def _grubbs(proc: _Procedure, means: Mapping[str, float], *, double: bool) -> None:
    """Grubbs' single test repeated while it finds an outlier; the double test only when it found none."""
    found_any = False
    while True:
        units = proc.retained()
        p = len(units)
        if p < 3:
            proc.notes.append(f"Grubbs' single test needs at least 3 units, {p} remain")
            return
        xs = np.array([means[u] for u in units])
        m, s = float(xs.mean()), float(xs.std(ddof=1))
        if s == 0:
            proc.notes.append("Grubbs' tests skipped: the remaining unit means are all equal")
            return
        crit = _critical(lambda a: grubbs_critical(p, a))
        hi, lo = units[int(np.argmax(xs))], units[int(np.argmin(xs))]
        g_hi, g_lo = (float(xs.max()) - m) / s, (m - float(xs.min())) / s
        order = [(g_hi, hi, "largest"), (g_lo, lo, "smallest")]
        order.sort(key=lambda t: -t[0])
        before = len(proc.exclusions)
        levels = [proc.record("grubbs_single", (u,), g, crit, f"{which} of {p} unit means")
                  for g, u, which in order]
        found_any = found_any or "outlier" in levels
        if len(proc.exclusions) == before:  # nothing left out (no outlier, or Grubbs does not exclude): done
            break
        # an outlier left out: repeat on the units that remain (§7.3.4)
    if found_any or not double:
        return
    units = proc.retained()
    p = len(units)
    if p < 4:
        proc.notes.append(f"Grubbs' double test needs at least 4 units, {p} remain")
        return
    xs = np.array(sorted(means[u] for u in units))
    order = sorted(units, key=lambda u: means[u])
    total = float(np.sum((xs - xs.mean()) ** 2))
    at_5, se5 = double_grubbs_critical(p, STRAGGLER_SIGNIFICANCE)
    at_1, se1 = double_grubbs_critical(p, OUTLIER_SIGNIFICANCE)
    crit = Critical(at_5, at_1, "lower")
    mc = f"critical values by Monte Carlo ({DOUBLE_GRUBBS_DRAWS} draws, seed {DOUBLE_GRUBBS_SEED}, s.e. {se1:.1g})"
    for pair, rest in (((order[-2], order[-1]), xs[:-2]), ((order[0], order[1]), xs[2:])):
        g = float(np.sum((rest - rest.mean()) ** 2)) / total
        proc.record("grubbs_double", pair, g, crit, mc)


def _screen(units: Sequence[str], means: Mapping[str, float], stds: Mapping[str, float] | None,
            n_rep: int | None, *, double: bool, exclude_by: frozenset[str]) -> Screening:
    unknown = set(exclude_by) - ALL_TESTS
    if unknown:
        raise PrecisionError(f"exclude_by: expected tests among {sorted(ALL_TESTS)}, got {sorted(unknown)}")
    proc = _Procedure(units, frozenset(exclude_by))
    p = len(units)
    h_values = mandel_h([means[u] for u in units])
    h_crit = _critical(lambda a: mandel_h_critical(p, a)) if h_values is not None else None
    h = {u: (None if h_values is None else h_values[i]) for i, u in enumerate(units)}
    if h_values is None:
        proc.notes.append("Mandel's h needs at least 3 units whose means differ")
    else:
        assert h_crit is not None
        for u in units:
            proc.record("mandel_h", (u,), abs(h[u] or 0.0), h_crit, f"h = {h[u]:+.4g} (two-sided: |h| tested)")
    k: dict[str, float | None] = {u: None for u in units}
    k_crit = None
    if stds is not None and n_rep is not None:
        k_values = mandel_k([stds[u] for u in units])
        if k_values is None:
            proc.notes.append("Mandel's k and Cochran's test skipped: every unit's readings are identical")
        else:
            k = {u: k_values[i] for i, u in enumerate(units)}
            k_crit = _critical(lambda a: mandel_k_critical(p, n_rep, a))
            for u in units:
                proc.record("mandel_k", (u,), k[u] or 0.0, k_crit)
            _cochran(proc, stds, n_rep)
    else:
        proc.notes.append("Mandel's k and Cochran's test need each unit's repeated readings; none were given")
    _grubbs(proc, means, double=double)
    return proc.screening(h, k, h_crit, k_crit)


def _cochran(proc: _Procedure, stds: Mapping[str, float], n_rep: int) -> None:
    """Cochran's test repeated while it finds an outlier (§7.3.3)."""
    while True:
        units = proc.retained()
        p = len(units)
        if p < 2:
            return
        variances = {u: stds[u] ** 2 for u in units}
        total = math.fsum(variances.values())
        if total == 0:
            proc.notes.append("Cochran's test skipped: the remaining units' readings are identical")
            return
        top = max(units, key=lambda u: variances[u])
        crit = _critical(lambda a: cochran_critical(p, n_rep, a))
        before = len(proc.exclusions)
        proc.record("cochran", (top,), variances[top] / total, crit, f"largest of {p} variances")
        if len(proc.exclusions) == before:  # no outlier left out: done
            return


def screen_cells(cells: Sequence[Cell], *, double_grubbs: bool = True,
                 exclude_by: frozenset[str] = ISO_EXCLUDING_TESTS) -> Screening:
    """The full procedure on units with repeated readings: h, k, Cochran, Grubbs single (and double)."""
    if len(cells) < 2:
        raise PrecisionError(f"screening: expected at least 2 units, got {len(cells)}")
    units = [c.unit for c in cells]
    if len(set(units)) != len(units):
        raise PrecisionError(f"screening: expected unique unit names, got {units}")
    n_rep = _typical_n(cells)
    screening = _screen(units, {c.unit: c.mean for c in cells}, {c.unit: c.std for c in cells}, n_rep,
                        double=double_grubbs, exclude_by=exclude_by)
    if len({c.n for c in cells}) > 1:
        note = f"unequal numbers of readings: Mandel's k and Cochran's test use n = {n_rep} (the most frequent)"
        screening = replace(screening, notes=screening.notes + (note,))
    return screening


def screen_values(values: Mapping[str, float], *, double_grubbs: bool = True,
                  exclude_by: frozenset[str] = ISO_EXCLUDING_TESTS) -> Screening:
    """The tests that need only one value per unit (h and Grubbs), when no repeated readings exist."""
    if len(values) < 2:
        raise PrecisionError(f"screening: expected at least 2 units, got {len(values)}")
    means = {str(u): _finite(str(u), [x])[0] for u, x in values.items()}
    return _screen(list(means), means, None, None, double=double_grubbs, exclude_by=exclude_by)


def precision_analysis(readings: Mapping[str, Sequence[float]], *, double_grubbs: bool = True,
                       exclude_by: frozenset[str] = ISO_EXCLUDING_TESTS) -> PrecisionResult:
    """Cells from the readings, the screening, and the §7.4 estimates without (and with) the outliers."""
    cells = cells_from_readings(readings)
    screening = screen_cells(cells, double_grubbs=double_grubbs, exclude_by=exclude_by)
    kept = [c for c in cells if c.unit in set(screening.retained)]
    estimate = precision_estimate(kept) if len(kept) >= 2 else None
    return PrecisionResult(cells=cells, screening=screening, estimate=estimate,
                           estimate_all=precision_estimate(cells))
