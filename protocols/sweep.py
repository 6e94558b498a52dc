"""The perturbation sweep: hold a measurement fixed, move the claim's stated bound through it, record the verdicts.

Why: it shows, for a reader who does not want to trust the rule's prose, that the verdict walks
pass → inconclusive → fail exactly where |d| = c and nowhere else. The grid therefore always contains the exact
flip points (bound = m ± c), and every row is decided by the same `verdict()` the lab uses.

Which bound moves (default by claim kind):
- range: the upper bound `high`, from m + span down to m − span (the seed paper's figure "shrinks the stated
  upper bound through the measurement"); `bound="low"` raises the lower bound from m − span to m + span.
- max_rating: its one limit (high when present, else low), in the same directions.
- typical/accuracy point claims: the stated value s, from m + span down to m − span; the verdict goes
  fail → pass → fail (compatibility |m − s| ≤ c), flipping at s = m ± c.
span defaults to 2c (the seed paper's choice); N evenly spaced grid points are rounded to two decimals finer
than the reported digits, and the flip points m ± c are added exactly. When c is irrational (t entered as
t/√3, or u² + t² not a square) the flip points are carried to 50 significant digits.

The sweep varies the bound, not the staging: decisive conditions that map to a chamber variable are taken as
staged (the output says so); conditions the chamber cannot realise still make every row inconclusive.

Output: a `SweepResult` (to_dict → JSON with decimal strings, exact digits), `write_sweep_csv`, and
`sweep_figure`/`plot_sweep` (matplotlib.figure.Figure on the Agg canvas, no pyplot state); `write_sweep_files`
writes the CSV and the figure both or neither, and a path it cannot write is named as the user gave it.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from pathlib import Path
from typing import Any, Callable, Literal

from protocols.measurement import Measurement, to_decimal
from protocols.verdict import (
    BOUNDARY_CONVENTION,
    RULE_NAME,
    RULE_VERSION,
    ClaimLike,
    Verdict,
    verdict,
)

BoundName = Literal["high", "low", "value"]
DEFAULT_STEPS = 21
_PREC = 50


class SweepError(ValueError):
    """A sweep that cannot be set up as asked (names what was expected and what arrived)."""


@dataclass(frozen=True)
class SweepRow:
    bound: Decimal
    distance: Decimal
    verdict: str
    zone: str | None
    flip_point: bool = False  # this row's bound is exactly m ± c

    def to_dict(self) -> dict[str, Any]:
        return {"bound": str(self.bound), "distance": str(self.distance), "verdict": self.verdict,
                "zone": self.zone, "flip_point": self.flip_point}


@dataclass(frozen=True)
class SweepResult:
    claim_id: str
    bound_name: BoundName
    measured_value: Decimal
    measured_u: Decimal
    unit: str
    combined_uncertainty: Decimal
    flip_points: tuple[Decimal, ...]
    rows: tuple[SweepRow, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "measured": {"value": str(self.measured_value), "u": str(self.measured_u), "unit": self.unit},
            "combined_uncertainty": str(self.combined_uncertainty),
            "bound": self.bound_name,
            "flip_points": [str(x) for x in self.flip_points],
            "rule": RULE_NAME,
            "rule_version": RULE_VERSION,
            "boundary_convention": BOUNDARY_CONVENTION,
            "notes": list(self.notes),
            "rows": [r.to_dict() for r in self.rows],
        }


def default_bound(claim: ClaimLike) -> BoundName:
    """The bound a sweep moves by default (see the module docstring)."""
    if claim.kind in ("typical", "accuracy") and claim.value is not None:
        return "value"
    if claim.high is not None:
        return "high"
    if claim.low is not None:
        return "low"
    raise SweepError(f"claim {claim.id}: nothing to move (no value, low or high)")


def _with_bound(claim: ClaimLike, name: BoundName, value: Decimal) -> ClaimLike:
    if hasattr(claim, "model_copy"):  # the pydantic Claim (frozen): an unvalidated copy with one field moved
        return claim.model_copy(update={name: value})
    return dataclasses.replace(claim, **{name: value})  # type: ignore[type-var]


def _q(x: Decimal, places: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = _PREC
        return x.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)


def _tidy(x: Decimal, places: int) -> Decimal:
    """Show a grid value with the measurement's decimals when that is exact (945.36500 → 945.365)."""
    q = _q(x, max(places, 0))
    if q == x:
        return q
    with localcontext() as ctx:
        ctx.prec = _PREC
        return x.normalize()  # x has more decimals than `places`, so no exponent form appears


def sweep(
    claim: ClaimLike,
    measured: Decimal | float | str,
    u: Decimal | float | str,
    *,
    unit: str | None = None,
    steps: int = DEFAULT_STEPS,
    bound: BoundName | None = None,
    span: Decimal | float | str | None = None,
    dof: float = math.inf,
) -> SweepResult:
    """Move one bound of `claim` through the fixed measurement (value ± u, in `unit`, default the claim's unit).

    Returns the rows in path order, including the two exact flip points. `steps` ≥ 2 grid points over
    [m − span, m + span]; span defaults to 2c.
    """
    if steps < 2:
        raise SweepError(f"steps: expected at least 2, got {steps}")
    unit = unit or claim.unit
    m = to_decimal(measured, "measured")
    uu = to_decimal(u, "u")
    if uu < 0:
        raise SweepError(f"u: expected >= 0, got {uu}")
    name = bound or default_bound(claim)
    if name == "value" and claim.kind not in ("typical", "accuracy"):
        raise SweepError(f"claim {claim.id}: bound 'value' moves a point claim's value; this is a {claim.kind} claim")
    if name in ("high", "low") and getattr(claim, name) is None:
        raise SweepError(f"claim {claim.id}: has no {name!r} bound to move")

    matched = [c.name for c in getattr(claim, "conditions", []) or []
               if getattr(c, "decisive", False) and getattr(c, "variable", None)]
    measurement = Measurement(
        value=m, unit=unit, u=uu, dof=dof, matched_conditions=matched,
        details={"source": "sweep: fixed measurement", "conditions": "mappable decisive conditions taken as staged"},
    )
    # c and the measurement in the claim's unit, from the rule itself (the claim as stated).
    probe = verdict(claim, measurement)
    if probe.combined_uncertainty is None or probe.measured is None:
        raise SweepError(f"claim {claim.id}: the rule gave no numbers ({probe.verdict}: {probe.reason})")
    c, m_claim = probe.combined_uncertainty, probe.measured
    width = to_decimal(span, "span") if span is not None else 2 * c
    if width <= 0:
        width = max(abs(m_claim) / 1000, Decimal(1))  # c = 0: any visible neighbourhood shows the flip
    irrational = len(c.as_tuple().digits) >= _PREC - 5  # a 50-digit c is a rounded square root
    places = max(-int(m_claim.as_tuple().exponent), 0 if irrational else -int(c.as_tuple().exponent))
    places = min(places + 2, 30)

    downward = name in ("high", "value")  # upper bound and point value shrink; a lower bound rises
    with localcontext() as ctx:
        ctx.prec = _PREC
        start, end = (m_claim + width, m_claim - width) if downward else (m_claim - width, m_claim + width)
        grid = [_q(start + (end - start) * Decimal(i) / Decimal(steps - 1), places) for i in range(steps)]
        flips = sorted({m_claim + c, m_claim - c}, reverse=downward)
    reported = -int(m_claim.as_tuple().exponent)
    values = [_tidy(b, reported) for b in sorted(set(grid) | set(flips), reverse=downward)]

    other = claim.low if name == "high" else claim.high if name == "low" else None
    rows = []
    for b in values:
        if other is not None and ((name == "high" and b < other) or (name == "low" and b > other)):
            raise SweepError(f"claim {claim.id}: moving {name} to {b} crosses the other bound {other}; use a smaller span")
        v: Verdict = verdict(_with_bound(claim, name, b), measurement)
        assert v.distance is not None
        rows.append(SweepRow(bound=b, distance=v.distance, verdict=v.verdict, zone=v.zone, flip_point=b in flips))
    notes = [f"moving {name} {'downward' if downward else 'upward'} through the measurement",
             "mappable decisive conditions taken as staged: " + (", ".join(matched) if matched else "none")]
    if irrational:
        notes.append("c is irrational here: flip points carried to 50 significant digits")
    return SweepResult(
        claim_id=str(claim.id), bound_name=name, measured_value=m_claim, measured_u=probe.u or uu, unit=claim.unit,
        combined_uncertainty=c, flip_points=tuple(flips), rows=tuple(rows), notes=tuple(notes),
    )


def write_sweep_csv(result: SweepResult, path: Path) -> Path:
    """One row per step: claim_id, bound name, bound, distance, c, verdict, zone, flip_point (exact digits)."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["claim_id", "bound_name", "bound", "distance", "combined_uncertainty", "unit", "verdict", "zone",
                    "flip_point"])
        for r in result.rows:
            w.writerow([result.claim_id, result.bound_name, str(r.bound), str(r.distance),
                        str(result.combined_uncertainty), result.unit, r.verdict, r.zone or "", int(r.flip_point)])
    return path


VERDICT_COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "inconclusive": "#ef8f00", "error": "#616161"}
"""One colour per verdict, for every figure that marks verdicts (this sweep, the report's figures and tables)."""


def sweep_figure(result: SweepResult) -> Any:
    """The sweep as a matplotlib Figure (Agg canvas, no pyplot state): the signed distance d at each stated bound.

    x: the stated bound in the claim's unit, increasing to the right whichever way the sweep moved (the title says
    which); y: d in the claim's unit, with the lines d = ±c, the measurement m marked on x, and each step a solid
    point in its verdict's colour, every colour named in the legend, which sits beside the plot so it hides no
    point. Both axes show plain values (no offset label such as "+9.452e2" — a reader must not have to add it
    back) and every text is at least 8 pt.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import ScalarFormatter

    fig = Figure(figsize=(8.6, 4.4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    xs = [float(r.bound) for r in result.rows]
    ds = [float(r.distance) for r in result.rows]
    m, c = float(result.measured_value), float(result.combined_uncertainty)
    ax.plot(xs, ds, color="#9e9e9e", linewidth=0.8, zorder=1)
    for verdict in ("pass", "inconclusive", "fail", "error"):
        at = [i for i, r in enumerate(result.rows) if r.verdict == verdict]
        if at:
            ax.scatter([xs[i] for i in at], [ds[i] for i in at], color=VERDICT_COLOURS[verdict], s=16, zorder=3,
                       label=verdict)
    ax.axhline(c, color="#1565c0", linestyle="--", linewidth=1, label=f"d = ±c (c = {result.combined_uncertainty} "
                                                                      f"{result.unit})")
    ax.axhline(-c, color="#1565c0", linestyle="--", linewidth=1)
    ax.axvline(m, color="#1565c0", linewidth=1.2, label=f"m = {result.measured_value} {result.unit}")
    flips = [i for i, r in enumerate(result.rows) if r.flip_point]
    ax.plot([xs[i] for i in flips], [ds[i] for i in flips], linestyle="none", marker="D", markerfacecolor="none",
            markeredgecolor="#6a1b9a", markersize=8, label="flip points (bound = m ± c)", zorder=4)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    stated = "stated value" if result.bound_name == "value" else f"stated {result.bound_name} bound"
    ax.set_xlabel(f"{stated} ({result.unit})", fontsize=9)
    ax.set_ylabel(f"signed distance d ({result.unit})", fontsize=9)
    moved = "up" if xs[-1] >= xs[0] else "down"
    ax.set_title(f"{result.claim_id}: the {stated} moved {moved} through m (x increases to the right)", fontsize=10)
    for axis in (ax.xaxis, ax.yaxis):
        plain = ScalarFormatter(useOffset=False)
        plain.set_scientific(False)
        axis.set_major_formatter(plain)
    ax.tick_params(labelsize=8.5)
    fig.tight_layout()
    return fig


def plot_sweep(result: SweepResult, path: Path, *, dpi: int = 120) -> Path:
    """Write `sweep_figure(result)` as a PNG at `path`."""
    path = Path(path)
    sweep_figure(result).savefig(path, dpi=dpi)
    return path


class SweepOutputError(ValueError):
    """A file the sweep was asked to write cannot be written; names the user's path and why."""


def check_output_paths(paths: list[Path]) -> None:
    """Refuse, before any measurement, an output path whose folder does not exist or that is a folder itself."""
    for path in paths:
        try:
            is_dir, has_folder = path.is_dir(), path.parent.is_dir()
        except OSError as e:  # e.g. a name longer than the file system takes
            raise SweepOutputError(f"cannot write {path}: {e.strerror or type(e).__name__}") from e
        if is_dir:
            raise SweepOutputError(f"cannot write {path}: Is a directory (expected a file path)")
        if not has_folder:
            raise SweepOutputError(f"cannot write {path}: No such file or directory (folder {path.parent} "
                                   "does not exist)")


def write_sweep_files(result: SweepResult, *, csv_path: Path | None = None, plot_path: Path | None = None
                      ) -> dict[str, str | None]:
    """Write the CSV and the figure both or neither: each goes to a temporary file beside its target and is renamed
    into place once both are written; on a failure no temporary file is left behind, and SweepOutputError names
    the path the user gave (never the temporary one) and the system's reason."""
    writers: list[tuple[Path, Callable[[SweepResult, Path], Path]]] = [
        (Path(p), w) for p, w in ((csv_path, write_sweep_csv), (plot_path, plot_sweep)) if p is not None]
    check_output_paths([p for p, _ in writers])
    staged: dict[Path, Path] = {}
    try:
        for final, write in writers:
            staged[final] = final.with_name(f".{final.stem[:120]}.partial-{os.getpid()}{final.suffix}")
            try:
                write(result, staged[final])
            except OSError as e:
                raise SweepOutputError(f"cannot write {final}: {e.strerror or type(e).__name__}") from e
        for final, tmp in staged.items():
            try:
                os.replace(tmp, final)
            except OSError as e:
                raise SweepOutputError(f"cannot write {final}: {e.strerror or type(e).__name__}") from e
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
    return {"csv": str(csv_path) if csv_path else None, "plot": str(plot_path) if plot_path else None}
