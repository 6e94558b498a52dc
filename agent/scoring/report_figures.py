"""The report's figures, each built as a matplotlib Figure (object API, Agg canvas) and returned unsaved, or None.

Why None rather than an empty plot: a figure with nothing on it (a detector chart of zero bars) reads as a
rendering fault; the section says in words what there is instead ("no detector flags"). Why the figures are
returned, not saved: the caller decides the path, and tests can read the text sizes of what would be printed.
Every text is at least FONT_PT points, readable on a printed page (tick labels were 5–7 pt before).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

FONT_PT = 8.0


def new_figure(width: float = 7.0, height: float = 3.6) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _readable(ax: Any) -> None:
    ax.tick_params(labelsize=FONT_PT)
    ax.xaxis.label.set_size(max(FONT_PT, ax.xaxis.label.get_size()))
    ax.yaxis.label.set_size(max(FONT_PT, ax.yaxis.label.get_size()))
    ax.title.set_size(max(FONT_PT, ax.title.get_size()))
    legend = ax.get_legend()
    if legend is not None:
        for t in legend.get_texts():
            t.set_fontsize(max(FONT_PT, t.get_fontsize()))


def save(fig: Any, path: Path) -> Path:
    for ax in fig.axes:
        _readable(ax)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def group_label(row: dict[str, Any], by_arm: bool) -> str:
    return f"{row['model']} · {row['arm']}" if by_arm else str(row["model"])


def fig_fidelity(rows: list[dict[str, Any]]) -> Any | None:
    """Fidelity pass rate per claim, one bar per model (per model · arm when the cells have more than one arm)."""
    by_arm = len({r.get("arm") for r in rows}) > 1
    groups: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["fidelity"].get("passed") is not None:
            groups[group_label(r, by_arm)][r["claim_id"]].append(bool(r["fidelity"]["passed"]))
    if not groups:
        return None
    claims = sorted({c for g in groups.values() for c in g})
    fig = new_figure(8, max(2.5, 0.3 * len(claims) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    labels = sorted(groups)
    h = 0.8 / len(labels)
    for i, m in enumerate(labels):
        vals = [sum(groups[m][c]) / len(groups[m][c]) if groups[m][c] else 0 for c in claims]
        ax.barh([k + i * h for k in range(len(claims))], vals, height=h, label=m)
    ax.set_yticks([k + 0.4 - h / 2 for k in range(len(claims))], claims)
    ax.set_xlabel("fidelity pass rate")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=FONT_PT)
    return fig


def fig_tools(rows: list[dict[str, Any]]) -> Any | None:
    tools = sorted({t for r in rows for t in r.get("tool_calls_by_tool") or {}})
    if not rows or not tools:
        return None
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    means = [sum((r.get("tool_calls_by_tool") or {}).get(t, 0) for r in rows) / len(rows) for t in tools]
    ax.bar(range(len(tools)), means)
    ax.set_xticks(range(len(tools)), tools, rotation=45, ha="right")
    ax.set_ylabel("calls per cell (mean)")
    return fig


def fig_cost(rows: list[dict[str, Any]]) -> Any | None:
    pts = [(r.get("latency_s"), r.get("cost")) for r in rows if r.get("latency_s") is not None]
    if not pts:
        return None
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    if any(c is not None for _, c in pts):
        ax.scatter([p for p, c in pts if c is not None], [c for _, c in pts if c is not None], s=10)
        ax.set_ylabel("cost per cell")
    else:
        ax.hist([p for p, _ in pts], bins=20)
        ax.set_ylabel("cells")
    ax.set_xlabel("latency per cell (s)")
    return fig


def flag_counts(rows: list[dict[str, Any]]) -> Counter:
    return Counter(f for r in rows for f in (r.get("detector") or {}).get("fired", []))


def fig_flags(rows: list[dict[str, Any]]) -> Any | None:
    """Cells per detector rule that fired; None when no rule fired (nothing to plot)."""
    counts = flag_counts(rows)
    if not counts:
        return None
    from agent.scoring.detector import RULES

    rules = list(RULES) + sorted(set(counts) - set(RULES))
    fig = new_figure(6, 3)
    ax = fig.add_subplot(1, 1, 1)
    ax.bar(range(len(rules)), [counts.get(x, 0) for x in rules])
    ax.set_xticks(range(len(rules)), rules, rotation=20, ha="right")
    ax.set_ylabel("cells where the rule fired")
    return fig


def fig_sweep(sweep: dict[str, Any]) -> Any | None:
    """The sweep's verdict against the stated bound (used only when the run did not write sweep.png itself)."""
    rows = sweep.get("rows") or []
    if not rows:
        return None
    unit = (sweep.get("measured") or {}).get("unit") or ""
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    colours = {"pass": "tab:green", "inconclusive": "tab:orange", "fail": "tab:red"}
    for v in ("pass", "inconclusive", "fail"):
        pts = [(float(r["bound"]), float(r["distance"])) for r in rows
               if r.get("verdict") == v and r.get("bound") is not None and r.get("distance") is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=v, color=colours[v], s=14)
    if sweep.get("combined_uncertainty") is not None:
        c = float(sweep["combined_uncertainty"])
        ax.axhline(c, ls="--", lw=0.8, color="grey")
        ax.axhline(-c, ls="--", lw=0.8, color="grey")
    ax.ticklabel_format(useOffset=False, style="plain")
    suffix = f" ({unit})" if unit else ""
    ax.set_xlabel(f"claimed bound{suffix}")
    ax.set_ylabel(f"distance d{suffix}")
    ax.set_title(str(sweep.get("claim_id", "")), fontsize=FONT_PT + 1)
    ax.legend(fontsize=FONT_PT)
    return fig
