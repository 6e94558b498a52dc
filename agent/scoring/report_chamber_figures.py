"""The report's figures of chamber data: every definitive verdict against its claim's bounds, the barometers'
calibration offsets, and the readings each definitive verdict rests on.

Why these three: a verdict table says "pass", but only a picture of m ± U beside the bounds shows whether the pass
had a margin of a hair or of a mile; the offsets are the correction every pressure verdict carries; and the
readings (unit means, min/mean/max of a held speed, the extreme codes) show what the single number m summarises.
Each row has its own x-axis in its own unit (the claims span 0.04 LSb to 8 388 607 counts; one shared axis would
flatten all but one). Built with report_figures.new_figure (object API, SVG) and returned unsaved, or None when
there is nothing to draw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from agent.scoring.report_figures import FONT_PT, VERDICT_COLOURS, new_figure
from agent.scoring.report_format import number, verdict_places

DEFINITIVE = ("pass", "fail")
_ALLOWED = "#e3eee3"  # the claim's allowed interval: an opaque light tint, named in the legend
_BOUND = "#333333"
_ROW_IN = 0.72  # height of one claim's row, its title and value labels included


def _float(x: Any) -> float | None:
    try:
        return float(x) if x is not None and x != "" else None
    except (TypeError, ValueError):
        return None


def claim_bounds(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Each claim's stated low, high, value and tolerance (claim unit), from the run's recorded pool
    (claim_pool.json), else from the packaged claims; {} when neither is readable."""
    try:
        pool = json.loads((Path(run_dir) / "claim_pool.json").read_text(encoding="utf-8"))
        return {str(c["id"]): c for c in pool.get("claims") or [] if isinstance(c, dict) and c.get("id")}
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    try:
        from protocols.claim_sources import load_checked_claims

        return {cid: c.model_dump(mode="json") for cid, c in load_checked_claims(None).items()}
    except Exception:  # the report renders whatever is present; without the package the rows show m ± U alone
        return {}


def _stated(claim: dict[str, Any] | None, bound: float) -> str:
    """A bound as the claim states it ('300', not '300.000'), or the number at 6 significant digits."""
    for key in ("low", "high"):
        text = (claim or {}).get(key)
        if _float(text) == bound:
            return str(text)
    return f"{bound:g}"


def limits_of(claim: dict[str, Any] | None, semantics: str | None) -> tuple[float | None, float | None]:
    """The interval the claim allows, (low, high); a point claim with a tolerance t allows value ± t."""
    if not claim:
        return None, None
    low, high = _float(claim.get("low")), _float(claim.get("high"))
    if low is None and high is None and semantics == "point":
        value, t = _float(claim.get("value")), _float((claim.get("tolerance") or {}).get("value")) or 0.0
        if value is not None:
            return value - t, value + t
    if semantics == "upper_bound":
        low = None if claim.get("kind") != "range" else low
    if semantics == "lower_bound":
        high = None if claim.get("kind") != "range" else high
    return low, high


def expanded_u(r: dict[str, Any]) -> float | None:
    """U of the verdict (k·c, in the claim's unit): as recorded, else k times c."""
    detail = r.get("verdict_detail") or {}
    big_u = _float(detail.get("expanded_uncertainty"))
    if big_u is not None:
        return big_u
    k, c = _float(detail.get("k")), _float(r.get("combined_uncertainty"))
    return k * c if k is not None and c is not None else None


def definitive(results: Iterable[dict[str, Any]], label: str = "") -> list[tuple[str, dict[str, Any]]]:
    return [(str(r.get("claim_id")) + label, r) for r in results
            if r.get("verdict") in DEFINITIVE and _float((r.get("measured") or {}).get("value")) is not None]


class _Rows:
    """One axes holding every row: row i at y = -i, its own linear scale from (x0, x1) onto 0..1, its values written
    beside the marks (one axes, not one per row: a report with 30 rows renders in a fraction of a second)."""

    def __init__(self, fig: Any, n: int) -> None:
        self.ax = fig.add_subplot(1, 1, 1)
        self.ax.set_xlim(-0.02, 1.02)
        self.ax.set_ylim(-n + 0.45, 0.75)
        self.ax.set_axis_off()
        self.scale = (0.0, 1.0)

    def row(self, i: int, x0: float, x1: float, title: str, colour: str = "#222222") -> None:
        self.scale = (x0, x1 - x0 or 1.0)
        self.ax.plot([0, 1], [-i, -i], color="#bbbbbb", lw=0.8, zorder=0)
        self.ax.text(0, -i + 0.42, title, fontsize=FONT_PT, color=colour, va="center", ha="left")

    def x(self, v: float) -> float:
        return (v - self.scale[0]) / self.scale[1]

    def value_label(self, i: int, v: float, text: str, dy: float = -0.3) -> None:
        xs = min(max(self.x(v), 0.0), 1.0)
        ha = "left" if xs < 0.08 else "right" if xs > 0.92 else "center"
        self.ax.text(xs, -i + dy, text, fontsize=FONT_PT, color="#444444", va="center", ha=ha)


def _span(points: list[float], pad: float = 0.08) -> tuple[float, float]:
    lo, hi = min(points), max(points)
    width = hi - lo or max(abs(hi), 1.0) * 0.1
    return lo - pad * width, hi + pad * width


def fig_verdicts(rows: list[tuple[str, dict[str, Any]]], bounds: dict[str, dict[str, Any]]) -> Any | None:
    """One row per definitive claim, each on its own linear scale in the claim's unit: the interval the claim
    allows (tinted, its bounds as dark ticks with their values), and the measured m with its expanded uncertainty
    U as an error bar coloured by the verdict; the row's title carries m ± U, k and the verdict."""
    if not rows:
        return None
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    fig = new_figure(7.5, 0.6 + _ROW_IN * len(rows))
    grid = _Rows(fig, len(rows))
    ax = grid.ax
    for i, (label, r) in enumerate(rows):
        m = float(r["measured"]["value"])
        unit = (r.get("measured") or {}).get("unit") or ""
        big_u = expanded_u(r) or 0.0
        low, high = limits_of(bounds.get(str(r.get("claim_id"))), (r.get("verdict_detail") or {}).get("semantics"))
        x0, x1 = _span([m - big_u, m + big_u] + [b for b in (low, high) if b is not None], 0.12)
        places = verdict_places(r)
        k = _float((r.get("verdict_detail") or {}).get("k"))
        colour = VERDICT_COLOURS[r["verdict"]]
        title = (f"{label}: {r['verdict']}, m = {number(m, places=places)} ± {number(big_u, places=places)} {unit}"
                 + (f" (U, k = {number(k, places=2)})" if k is not None else " (U)")
                 + ("; bounds not recorded" if low is None and high is None else ""))
        grid.row(i, x0, x1, title, colour if r["verdict"] == "fail" else "#222222")
        if low is not None or high is not None:
            a, b = grid.x(low) if low is not None else 0.0, grid.x(high) if high is not None else 1.0
            ax.add_patch(Rectangle((a, -i - 0.14), b - a, 0.28, color=_ALLOWED, zorder=1, lw=0))
        for bound in (low, high):
            if bound is not None:
                ax.plot([grid.x(bound)] * 2, [-i - 0.18, -i + 0.18], color=_BOUND, lw=1.6, zorder=2)
                grid.value_label(i, bound, f"{_stated(bounds.get(str(r.get('claim_id'))), bound)} {unit}".strip())
        half = big_u / (x1 - x0 or 1.0)
        ax.errorbar([grid.x(m)], [-i], xerr=[[half], [half]], fmt="o", color=colour, ms=6, capsize=5, lw=1.8,
                    zorder=3)
    fig.legend(handles=[Patch(color=_ALLOWED, label="allowed by the claim"),
                        Line2D([], [], color=_BOUND, lw=1.6, label="stated bound"),
                        Line2D([], [], color=VERDICT_COLOURS["pass"], marker="o", label="pass: m ± U"),
                        Line2D([], [], color=VERDICT_COLOURS["fail"], marker="o", label="fail: m ± U")],
               loc="outside upper center", ncols=4, frameon=False)
    return fig


def fig_offsets(names: list[str], offsets: dict[str, float], expanded: dict[str, float], unit: str) -> Any | None:
    """Each barometer's offset from the four-sensor mean with its expanded uncertainty U, against zero."""
    if not names:
        return None
    fig = new_figure(6.5, 0.9 + 0.45 * len(names))
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(names)))[::-1]
    ax.axvline(0, color=_BOUND, lw=1, zorder=1)
    ax.errorbar([offsets[n] for n in names], ys, xerr=[expanded.get(n, 0.0) for n in names], fmt="o",
                color="#1f3b73", capsize=5, ms=6, lw=1.6, zorder=3)
    for y, n in zip(ys, names):
        ax.annotate(f"{number(offsets[n], places=2)} ± {number(expanded.get(n), places=2)}", (offsets[n], y),
                    xytext=(0, 7), textcoords="offset points", ha="center", fontsize=FONT_PT)
    ax.set_yticks(ys, names)
    ax.set_ylim(-0.7, len(names) - 0.3)
    lo, hi = _span([offsets[n] - expanded.get(n, 0.0) for n in names] + [offsets[n] + expanded.get(n, 0.0)
                                                                           for n in names] + [0.0], 0.15)
    ax.set_xlim(lo, hi)
    ax.set_xlabel(f"offset = unit mean − four-sensor mean ({unit}); bars: ± U (95 %)")
    return fig


#: recorded readings drawn beside a verdict's measurement, by the key the protocol records them under; each is in
#: the measurement's own (as-measured) unit
READING_KEYS = {"min": "min", "max": "max", "mean": "mean", "largest_code": "largest code",
                "smallest_code": "smallest code", "largest_step_lsb": "largest step", "mean_step_lsb": "mean step"}
#: how each kind is drawn, and the legend entry it shares with its kind (one marker, one name)
_STYLE = {"unit mean": ("s", "unit mean (one per barometer)"), "min": ("<", "smallest (min, code)"),
          "smallest code": ("<", "smallest (min, code)"), "max": (">", "largest (max, code, step)"),
          "largest code": (">", "largest (max, code, step)"), "largest step": (">", "largest (max, code, step)"),
          "mean": ("D", "mean (reading, step)"), "mean step": ("D", "mean (reading, step)")}


def recorded_readings(r: dict[str, Any]) -> list[tuple[str, float, str]]:
    """(kind, value, name) of the readings a protocol recorded beside its result, in the as-measured unit."""
    details = (r.get("measurement_detail") or {}).get("details") or {}
    out = [("unit mean", float(v), str(name)) for name, v in (details.get("unit_means_pa") or {}).items()
           if _float(v) is not None]
    out += [(kind, float(details[key]), kind) for key, kind in READING_KEYS.items()
            if _float(details.get(key)) is not None]
    return out


def fig_readings(rows: list[tuple[str, dict[str, Any]]]) -> Any | None:
    """One row per definitive verdict that recorded individual readings, each on its own linear scale in the unit
    the protocol measured in: the measured value with ± U (k·u) and the readings recorded beside it (unit means,
    min / mean / max, extreme codes or steps), the extreme values written under the row."""
    rows = [(label, r) for label, r in rows if _float((r.get("measurement_detail") or {}).get("value")) is not None
            and recorded_readings(r)]
    if not rows:
        return None
    from matplotlib.lines import Line2D

    fig = new_figure(7.5, 0.6 + _ROW_IN * len(rows))
    grid = _Rows(fig, len(rows))
    ax = grid.ax
    names: dict[str, str] = {}
    for i, (label, r) in enumerate(rows):
        md = r["measurement_detail"]
        value, u, k = float(md["value"]), _float(md.get("u")) or 0.0, _float(md.get("k")) or 2.0
        unit = md.get("unit") or ""
        readings = recorded_readings(r)
        points = [value - k * u, value + k * u] + [v for _, v, _ in readings]
        x0, x1 = _span(points, 0.15)
        detail = md.get("details") or {}
        what = f"{detail['reading']}, " if detail.get("reading") else ""
        n = f"n = {md['n']}, " if md.get("n") is not None else ""
        grid.row(i, x0, x1, f"{label} ({what}{n}{unit or 'no unit'}): {md['value']} ± {number(k * u, sig=2)} (U)")
        for kind, v, _ in readings:
            marker, name = _STYLE.get(kind, ("o", kind))
            names[name] = marker
            ax.plot([grid.x(v)], [-i + 0.12], marker=marker, color="#6a3d9a", ls="none", ms=6, zorder=2)
        half = k * u / (x1 - x0 or 1.0)
        ax.errorbar([grid.x(value)], [-i - 0.08], xerr=[[half], [half]], fmt="o", color=VERDICT_COLOURS[r["verdict"]],
                    ms=6, capsize=5, lw=1.8, zorder=3)
        grid.value_label(i, min(points), f"{min(points):.6g} {unit}".strip())
        grid.value_label(i, max(points), f"{max(points):.6g} {unit}".strip())
    handles = [Line2D([], [], color="#444444", marker="o", label="measured ± U (colour: verdict)")]
    handles += [Line2D([], [], color="#6a3d9a", marker=m, ls="none", label=name) for name, m in names.items()]
    fig.legend(handles=handles, loc="outside upper center", ncols=min(3, len(handles)), frameon=False)
    return fig


def readings_text(r: dict[str, Any]) -> str:
    """The recorded readings of a verdict in words, for the readings table ('min 2858.5; max 2877.4')."""
    readings = recorded_readings(r)
    return "; ".join(f"{name} {v:.6g}" for _, v, name in readings) or "none recorded"
