"""The report's figures: each built as a matplotlib Figure (object API, never pyplot's global state) and written as SVG.

Why SVG: the HTML report embeds each figure inline, so it stays sharp at any zoom and in print, and its text is
at its stated size: a figure is at most MAX_WIDTH_IN wide (it fits the page at 100 %), so a FONT_PT label is
FONT_PT on the page (the PNGs it replaces were 100 dpi with ~8 px tick labels). Why None rather than an empty plot:
a figure with nothing on it (a detector chart of zero bars) reads as a rendering fault; the section says in words
what there is instead. Why the figures are returned unsaved: the caller decides the path, and tests can read the
text sizes of what would be drawn. The chamber-data figures (verdicts, calibration, readings) are in
report_chamber_figures.
"""

from __future__ import annotations

import html
import io
import re
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

from agent.scoring.report_format import unit_text
from protocols.sweep import VERDICT_COLOURS  # one colour per verdict: every figure and the tables' cell colours

#: every text in every figure is at least this size on the page (the SVG is shown at its own size)
FONT_PT = 10.0
#: the widest figure, in inches: the HTML page holds it without scaling it (and its text) down
MAX_WIDTH_IN = 7.5


def new_figure(width: float = 7.0, height: float = 3.6) -> Any:
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    fig = Figure(figsize=(min(width, MAX_WIDTH_IN), height), dpi=100, layout="constrained")
    FigureCanvasSVG(fig)
    return fig


def _readable(fig: Any) -> None:
    """Raise every text in the figure to FONT_PT (tick labels, axis labels, titles, legends, annotations)."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        if t.get_fontsize() < FONT_PT:
            t.set_fontsize(FONT_PT)


def svg_text(fig: Any, data: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The figure as SVG text: text kept as text (selectable, searchable, drawn by the browser's font at its size;
    about half the rendering time of glyph outlines), no date in its metadata (the same figure gives the same
    file). The rc_context is the one piece of matplotlib's global state used, set and restored around the save.
    `data` gives data-* attributes to the group of each artist by its gid ({gid: {name: value}}): the numbers a
    figure row stands for, readable beside its drawn geometry; a gid the figure does not hold is an error."""
    import matplotlib

    _readable(fig)
    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "font.family": ["DejaVu Sans", "sans-serif"]}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    text = out.getvalue()
    for gid, attrs in (data or {}).items():
        tag = f'<g id="{html.escape(gid, quote=True)}"'
        if tag not in text:
            raise ValueError(f"figure data: expected an artist with gid {gid!r} in the figure, found none")
        extra = "".join(f' data-{name}="{html.escape(str(value), quote=True)}"' for name, value in attrs.items())
        text = text.replace(tag, tag + extra, 1)
    return text


def save(fig: Any, path: Path, data: Mapping[str, Mapping[str, str]] | None = None) -> Path:
    """Write the figure as SVG at `path` (its suffix made .svg), with `data` as in svg_text; returns the path."""
    path = Path(path).with_suffix(".svg")
    path.write_text(svg_text(fig, data), encoding="utf-8")
    return path


def inline_svg(text: str, prefix: str) -> str:
    """SVG text ready to sit inside an HTML page: no XML prolog or doctype, every id (clip paths, glyphs, markers)
    prefixed so that two figures on one page never share one, and scaled down only when the page is narrower."""
    text = re.sub(r"^\s*<\?xml[^>]*\?>\s*", "", text)
    text = re.sub(r"^\s*<!DOCTYPE[^>]*>\s*", "", text)
    text = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', text)
    text = re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", text)
    return text.replace("<svg ", "<svg style='max-width:100%;height:auto' role='img' ", 1)


def fig_tools(rows: list[dict[str, Any]]) -> Any | None:
    tools = sorted({t for r in rows for t in r.get("tool_calls_by_tool") or {}})
    if not rows or not tools:
        return None
    fig = new_figure(7, 3.4)
    ax = fig.add_subplot(1, 1, 1)
    means = [sum((r.get("tool_calls_by_tool") or {}).get(t, 0) for r in rows) / len(rows) for t in tools]
    ax.bar(range(len(tools)), means, color="#4a6fa5")
    ax.set_xticks(range(len(tools)), tools, rotation=30, ha="right")
    ax.set_ylabel("calls per cell (mean)")
    return fig


def fig_cost(rows: list[dict[str, Any]]) -> tuple[Any, str] | None:
    """Cost against latency when any cell has a cost; otherwise the latency histogram alone, captioned as what it
    is (a cost-less chart must not be called a cost chart). Returns (figure, caption) or None."""
    pts = [(float(r["latency_s"]), r.get("cost")) for r in rows if r.get("latency_s") is not None]
    if not pts:
        return None
    fig = new_figure(6.5, 3.2)
    ax = fig.add_subplot(1, 1, 1)
    priced = [(lat, float(c)) for lat, c in pts if c is not None]
    if priced:
        ax.scatter([p for p, _ in priced], [c for _, c in priced], s=16, color="#4a6fa5")
        ax.set_ylabel("cost per cell (price table's currency)")
        ax.set_xlabel("latency per cell (s)")
        caption = (f"cost against latency per cell ({len(priced)} of {len(pts)} cells priced; the others have no "
                   "price or no token counts)")
        return fig, caption
    ax.hist([p for p, _ in pts], bins=20, color="#4a6fa5")
    ax.set_ylabel("cells")
    ax.set_xlabel("latency per cell (s)")
    return fig, f"latency per cell ({len(pts)} cells); no cost: no cell has a price (see the agent section)"


def flag_counts(rows: list[dict[str, Any]]) -> Counter:
    return Counter(f for r in rows for f in (r.get("detector") or {}).get("fired", []))


def fig_flags(rows: list[dict[str, Any]]) -> Any | None:
    """Cells per detector rule that fired; None when no rule fired (nothing to plot)."""
    counts = flag_counts(rows)
    if not counts:
        return None
    from agent.scoring.detector import RULES

    rules = list(RULES) + sorted(set(counts) - set(RULES))
    fig = new_figure(6.5, 3.4)
    ax = fig.add_subplot(1, 1, 1)
    ax.bar(range(len(rules)), [counts.get(x, 0) for x in rules], color="#4a6fa5")
    ax.set_xticks(range(len(rules)), rules, rotation=25, ha="right")
    ax.set_ylabel("cells where the rule fired")
    return fig


#: the bound a sweep moves, by sweep.json's `bound` (protocols.sweep), in words
BOUND_NAMES = {"high": "upper bound", "low": "lower bound", "value": "stated value"}


def sweep_direction(sweep: dict[str, Any]) -> str:
    """How the sweep moved the bound, in words ('downward', 'upward' or 'as listed')."""
    rows = [float(r["bound"]) for r in sweep.get("rows") or [] if r.get("bound") is not None]
    if len(rows) < 2 or rows[0] == rows[-1]:
        return "as listed"
    return "downward" if rows[-1] < rows[0] else "upward"


def fig_sweep(sweep: dict[str, Any]) -> Any | None:
    """The sweep's verdict at each stated bound: distance d against the bound, the x-axis increasing to the right
    whatever way the sweep moved (the caption says which), solid colours each named in the legend, which sits
    outside the plot so it hides no point."""
    rows = sweep.get("rows") or []
    if not rows:
        return None
    unit = unit_text((sweep.get("measured") or {}).get("unit"))
    fig = new_figure(7.2, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    for v in ("pass", "inconclusive", "fail"):
        pts = [(float(r["bound"]), float(r["distance"])) for r in rows
               if r.get("verdict") == v and r.get("bound") is not None and r.get("distance") is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=v, color=VERDICT_COLOURS[v], s=18, zorder=3)
    if sweep.get("combined_uncertainty") is not None:
        c = float(sweep["combined_uncertainty"])
        ax.axhline(c, ls="--", lw=1, color="#555555", label="d = ±c")
        ax.axhline(-c, ls="--", lw=1, color="#555555")
    value = (sweep.get("measured") or {}).get("value")
    if value is not None:
        ax.axvline(float(value), ls=":", lw=1.2, color="#1f3b73", label="measured m")
    ax.ticklabel_format(useOffset=False, style="plain")
    suffix = f" ({unit})" if unit else ""
    ax.set_xlabel(f"{BOUND_NAMES.get(sweep.get('bound'), 'claimed bound')} as moved{suffix}, increasing →")
    ax.set_ylabel(f"distance d{suffix}")
    ax.set_title(str(sweep.get("claim_id", "")), fontsize=FONT_PT + 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    return fig
