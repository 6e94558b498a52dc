"""The report's figures of chamber data: every definitive verdict against its claim's bounds, the barometers'
calibration offsets, and the readings each definitive verdict rests on.

Why these three: a verdict table says "pass", but only a picture of m ± U beside the limits, with the band the rule
decided with, shows whether the pass had a margin of a hair or of a mile (and that a pass decided at c may have its
95 % U reaching past a limit); the offsets are the correction every pressure verdict carries; and the readings
(unit means, min/mean/max of a held speed, the extreme codes) show what the single number m summarises. A verdict
row draws a report_rows.VerdictRow, the record its table row prints, and tags its parts (gid and data-*
attributes) so a reader, or a browser test, can check the drawing against the numbers.
Each row has its own x-axis in its own unit (the claims span 0.04 LSb to 8 388 607 counts; one shared axis would
flatten all but one). Built with report_figures.new_figure (object API, SVG) and returned unsaved, or None when
there is nothing to draw.
"""

from __future__ import annotations

from typing import Any, Iterable

from agent.scoring.report_figures import FONT_PT, VERDICT_COLOURS, new_figure
from agent.scoring.report_format import number, unit_text
from agent.scoring.report_rows import VerdictRow, measurement_text

DEFINITIVE = ("pass", "fail")
_ALLOWED = "#e3eee3"  # the claim's allowed interval: an opaque light tint, named in the legend
_GUARD = "#f3cf8b"  # the guard band ±c around a bound (the rule's inconclusive zone)
_COMPATIBLE = "#bfd3ee"  # the compatibility band s ± c of a point claim (the rule's pass zone)
_BOUND = "#333333"
_ROW_IN = 1.1  # height of one verdict row: two lines of text, the row, the limits' values


def _float(x: Any) -> float | None:
    try:
        return float(x) if x is not None and x != "" else None
    except (TypeError, ValueError):
        return None


def definitive(results: Iterable[dict[str, Any]], label: str = "") -> list[tuple[str, dict[str, Any]]]:
    return [(str(r.get("claim_id")) + label, r) for r in results
            if r.get("verdict") in DEFINITIVE and _float((r.get("measured") or {}).get("value")) is not None]


class _Rows:
    """One axes holding every row: row i at y = -i, its own linear scale from (x0, x1) onto 0..1, its values written
    beside the marks (one axes, not one per row: a report with 30 rows renders in a fraction of a second)."""

    def __init__(self, fig: Any, n: int, top: float = 0.75) -> None:
        self.ax = fig.add_subplot(1, 1, 1)
        self.ax.set_xlim(-0.02, 1.02)
        self.ax.set_ylim(-n + 0.55, top)
        self.ax.set_axis_off()
        self.scale = (0.0, 1.0)

    def row(self, i: int, x0: float, x1: float, title: str, colour: str = "#222222", dy: float = 0.42) -> Any:
        self.scale = (x0, x1 - x0 or 1.0)
        self.ax.plot([0, 1], [-i, -i], color="#bbbbbb", lw=0.8, zorder=0)
        return self.text(0, -i + dy, title, colour)

    def text(self, x: float, y: float, text: str, colour: str = "#222222", ha: str = "left") -> Any:
        """A text on the rows' axes, kept out of the layout: the axes keep the figure's full width (a long title
        would otherwise shrink every row's scale), and each text is written to fit that width."""
        t = self.ax.text(x, y, text, fontsize=FONT_PT, color=colour, va="center", ha=ha)
        t.set_in_layout(False)
        return t

    def x(self, v: float) -> float:
        return (v - self.scale[0]) / self.scale[1]

    def value_label(self, i: int, v: float, text: str, dy: float = -0.3) -> Any:
        xs = min(max(self.x(v), 0.0), 1.0)
        ha = "left" if xs < 0.08 else "right" if xs > 0.92 else "center"
        return self.text(xs, -i + dy, text, "#444444", ha)


def _span(points: list[float], pad: float = 0.08) -> tuple[float, float]:
    lo, hi = min(points), max(points)
    width = hi - lo or max(abs(hi), 1.0) * 0.1
    return lo - pad * width, hi + pad * width


def _limit_label(row: VerdictRow, side: str, value: float) -> str:
    return f"{row.stated.get(side) or number(value, sig=4)} {row.unit}".strip()


def _rule_words(row: VerdictRow) -> str:
    """The rule's numbers for the row, as its table row gives them."""
    if row.c is None:
        return "c not recorded"
    if row.semantics == "point":
        return f"|m − s| = {row.d_text} ≤ c = {row.c_text}" if row.verdict == "pass" else \
            f"|m − s| = {row.d_text} > c = {row.c_text}"
    return f"d = {row.d_text}, c = {row.c_text}"


def row_data(i: int, row: VerdictRow) -> dict[str, str]:
    """The numbers of figure row i as data attributes of its title (the browser test reads them beside the text)."""
    values = {"row": str(i), "claim": row.claim_id, "label": row.label, "verdict": row.verdict,
              "semantics": row.semantics or "", "measured": row.measured, "m": repr(row.m), "u-expanded": repr(row.U),
              "k": "" if row.k is None else repr(row.k), "c": "" if row.c is None else repr(row.c),
              "c-text": row.c_text, "limits": row.limits, "u-beyond-limits": "yes" if row.u_beyond_limits else "no"}
    allowed = row.allowed or (None, None)
    for name, v in (("low", allowed[0]), ("high", allowed[1]), ("s", row.point)):
        values[name] = "" if v is None else repr(v)
    return values


def fig_verdicts(rows: list[VerdictRow]) -> tuple[Any, dict[str, dict[str, str]]] | None:
    """One row per definitive verdict, each on its own linear scale in the claim's unit: the interval the claim
    allows (tinted, its limits as dark ticks with their values), the decision zone the rule used as its own band
    (the guard band ±c around each bound, or the compatibility band s ± c of a point claim), and the measured m
    with its own expanded uncertainty U (k·u) as a bar coloured by the verdict. The row's two lines of text give
    the same m ± U (k) and c as the table. Returns the figure and the data attributes of each row's parts (by gid)."""
    if not rows:
        return None
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    fig = new_figure(7.5, 0.9 + _ROW_IN * len(rows))
    grid = _Rows(fig, len(rows), top=0.8)
    ax = grid.ax
    data: dict[str, dict[str, str]] = {}
    kinds: set[str] = set()
    for i, row in enumerate(rows):
        gid = f"verdict-row-{i}"
        allowed = row.allowed
        limits = [v for v in (allowed or ()) if v is not None]
        x0, x1 = _span([row.m - row.U, row.m + row.U] + limits + [e for b in row.bands for e in b], 0.12)
        colour = VERDICT_COLOURS.get(row.verdict, "#222222")
        flag = ""
        if row.u_beyond_limits and row.verdict == "pass":
            flag = " — U reaches past a limit: the rule decides at c, not U"
        elif allowed is None:
            flag = " — limits not in the claim pool"
        title = grid.row(i, x0, x1, f"{row.label}: {row.verdict}{flag}",
                         colour if row.verdict == "fail" else "#222222", dy=0.6)
        title.set_gid(gid)
        data[gid] = row_data(i, row)
        numbers = grid.text(0, -i + 0.36, f"m ± U = {row.measured}; {_rule_words(row)}", "#333333")
        numbers.set_gid(f"{gid}-numbers")
        if allowed is not None and limits:
            a = grid.x(allowed[0]) if allowed[0] is not None else 0.0
            b = grid.x(allowed[1]) if allowed[1] is not None else 1.0
            patch = ax.add_patch(Rectangle((a, -i - 0.09), b - a, 0.18, color=_ALLOWED, zorder=1, lw=0))
            patch.set_gid(f"{gid}-allowed")
        band_colour = _COMPATIBLE if row.semantics == "point" else _GUARD
        for j, (lo, hi) in enumerate(row.bands):
            kinds.add(row.semantics == "point" and "compatible" or "guard")
            band = ax.add_patch(Rectangle((grid.x(lo), -i - 0.13), grid.x(hi) - grid.x(lo), 0.26, color=band_colour,
                                          alpha=0.85, zorder=2, lw=0))
            band.set_gid(f"{gid}-band-{j}")
        if allowed is not None:
            for side, v in (("low", allowed[0]), ("high", allowed[1])):
                if v is None:
                    continue
                tick, = ax.plot([grid.x(v)] * 2, [-i - 0.16, -i + 0.16], color=_BOUND, lw=1.6, zorder=3)
                tick.set_gid(f"{gid}-{side}")
                grid.value_label(i, v, _limit_label(row, side, v), dy=-0.24)
        if row.semantics == "point" and row.point is not None and row.t:
            s_tick, = ax.plot([grid.x(row.point)] * 2, [-i - 0.16, -i + 0.16], color=_BOUND, lw=1.0, ls=":",
                              zorder=3)
            s_tick.set_gid(f"{gid}-s")
        bar, = ax.plot([grid.x(row.m - row.U), grid.x(row.m + row.U)], [-i, -i], color=colour, lw=1.8,
                       solid_capstyle="butt", marker="|", ms=10, mew=1.8, zorder=4)
        bar.set_gid(f"{gid}-ubar")
        mark, = ax.plot([grid.x(row.m)], [-i], "o", color=colour, ms=6, zorder=5)
        mark.set_gid(f"{gid}-m")
    handles = [Patch(color=_ALLOWED, label="allowed by the claim"),
               Line2D([], [], color=_BOUND, lw=1.6, label="claim's limit")]
    if "guard" in kinds:
        handles.append(Patch(color=_GUARD, label="guard band ±c (bound claims: inconclusive inside)"))
    if "compatible" in kinds:
        handles.append(Patch(color=_COMPATIBLE, label="s ± c (point claims: pass inside)"))
    handles += [Line2D([], [], color=VERDICT_COLOURS[v], marker="o", label=f"{v}: m ± U (k·u, 95 %)")
                for v in DEFINITIVE if any(r.verdict == v for r in rows)]
    fig.legend(handles=handles, loc="outside upper center", ncols=2, frameon=False)
    return fig, data


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
_STYLE = {"min": ("<", "smallest (min, code)"), "smallest code": ("<", "smallest (min, code)"),
          "max": (">", "largest (max, code, step)"), "largest code": (">", "largest (max, code, step)"),
          "largest step": (">", "largest (max, code, step)"), "mean": ("D", "mean (reading, step)"),
          "mean step": ("D", "mean (reading, step)")}
_READING = "#6a3d9a"
#: one colour per barometer's unit mean, each named in the legend (a reader tells the four apart)
_UNIT_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")


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
    the protocol measured in: the measured value with ± U (k·u) and the readings recorded beside it (each
    barometer's unit mean in its own colour, min / mean / max, extreme codes or steps), every series named in the
    legend, the row's ends written under it to 4 significant digits."""
    rows = [(label, r) for label, r in rows if _float((r.get("measurement_detail") or {}).get("value")) is not None
            and recorded_readings(r)]
    if not rows:
        return None
    from matplotlib.lines import Line2D

    fig = new_figure(7.5, 0.9 + 0.8 * len(rows))
    grid = _Rows(fig, len(rows))
    ax = grid.ax
    names: dict[str, tuple[str, str]] = {}  # legend entry -> (marker, colour)
    units: dict[str, str] = {}
    for i, (label, r) in enumerate(rows):
        md = r["measurement_detail"]
        value, u, k = float(md["value"]), _float(md.get("u")) or 0.0, _float(md.get("k"))
        half_width = k * u if k is not None else u
        unit = unit_text(md.get("unit"))
        readings = recorded_readings(r)
        points = [value - half_width, value + half_width] + [v for _, v, _ in readings]
        x0, x1 = _span(points, 0.15)
        detail = md.get("details") or {}
        what = f"{detail['reading']}, " if detail.get("reading") else ""
        n = f"n = {md['n']}, " if md.get("n") is not None else ""
        grid.row(i, x0, x1, f"{label} ({what}{n}{unit or 'no unit'}): {measurement_text(md)}")
        for kind, v, name in readings:
            if kind == "unit mean":
                colour = units.setdefault(name, _UNIT_COLOURS[len(units) % len(_UNIT_COLOURS)])
                marker, entry = "s", f"unit mean: {name}"
            else:
                colour, (marker, entry) = _READING, _STYLE.get(kind, ("o", kind))
            names[entry] = (marker, colour)
            ax.plot([grid.x(v)], [-i + 0.12], marker=marker, color=colour, ls="none", ms=6, zorder=2)
        half = half_width / (x1 - x0 or 1.0)
        ax.errorbar([grid.x(value)], [-i - 0.08], xerr=[[half], [half]], fmt="o", color=VERDICT_COLOURS[r["verdict"]],
                    ms=6, capsize=5, lw=1.8, zorder=3)
        grid.value_label(i, min(points), f"{number(min(points), sig=4)} {unit}".strip())
        grid.value_label(i, max(points), f"{number(max(points), sig=4)} {unit}".strip())
    handles = [Line2D([], [], color="#444444", marker="o", label="measured m ± U (k·u; colour: verdict)")]
    handles += [Line2D([], [], color=c, marker=m, ls="none", label=name) for name, (m, c) in names.items()]
    fig.legend(handles=handles, loc="outside upper center", ncols=min(2, len(handles)), frameon=False)
    return fig


def readings_text(r: dict[str, Any]) -> str:
    """The recorded readings of a verdict in words, for the readings table ('min 2858; max 2877'), each to 4
    significant digits as the figure writes them."""
    readings = recorded_readings(r)
    return "; ".join(f"{name} {number(v, sig=4)}" for _, v, name in readings) or "none recorded"
