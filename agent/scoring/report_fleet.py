"""The report's fleet section (a `run --fleet`): per claim, the units' m ± U against the bounds with the tolerance
interval (or the population interval of a typical value) drawn, a Mandel h/k chart by unit with its critical lines,
one table of every claim's fleet statistics, and the labs' z-scores.

Why its own module: the section reads fleet.json (protocols/fleet_run.py) and nothing else of the run, and its
figures are of another kind than the single chamber's (one point per unit, not one verdict per claim). Figures
follow report_figures' rules (object API, SVG, every text at least FONT_PT, x to the right, colours from the one
verdict table, the legend beside the plot so it hides no point). A bound far beyond the units (the DPS310's
1200 hPa against units at 945 hPa) is named at the chart's edge instead of squeezing the units into one pixel row.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from agent.scoring.report_figures import FONT_PT, VERDICT_COLOURS, new_figure, save
from agent.scoring.report_format import unit_text

Block = tuple
FAR = 5.0
"""A bound further than FAR × the units' span from them is named at the chart's edge, not drawn to scale."""
MAX_FIGURES = 24
"""Claims drawn at most (those with the most units graded on their numbers first); the table lists every claim."""


def _graded(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The units with a value, in fleet order."""
    return [u for u in section.get("units") or [] if u.get("measured")]


def _expanded(u: Mapping[str, Any]) -> float:
    m = u["measured"]
    k = m.get("k") or 2.0
    return float(k) * float(m["u"])


def fig_units(section: Mapping[str, Any]) -> Any | None:
    """The units' m ± U (k·u) in the claim's unit, one point per unit in its verdict's colour (an excluded outlier
    hollow), the bounds, and the fleet's tolerance interval or population interval as a band."""
    units = _graded(section)
    fleet = section.get("fleet") or {}
    if len(units) < 2 or not fleet:
        return None
    limits, interval, pop = fleet.get("limits") or {}, fleet.get("tolerance_interval"), fleet.get("population_mean")
    excluded = {o["unit"] for o in (fleet.get("screening") or {}).get("outliers", [])}
    unit_name = unit_text(limits.get("unit") or section.get("claim_unit"))
    values = [float(u["measured"]["value"]) for u in units]
    errs = [_expanded(u) for u in units]
    lo_data = min(v - e for v, e in zip(values, errs))
    hi_data = max(v + e for v, e in zip(values, errs))
    band = None
    if interval:
        band = (float(interval["lower"]), float(interval["upper"]), "tolerance interval (p 0.90, γ 0.95)")
    elif pop:
        m, big_u = float(pop["mean"]), float(pop["expanded"])
        band = (m - big_u, m + big_u, "population mean ± U (95 %)")
    if band:
        lo_data, hi_data = min(lo_data, band[0]), max(hi_data, band[1])
    span = max(hi_data - lo_data, 1e-9)
    fig = new_figure(7.4, 4.4)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(units)))
    for verdict in ("pass", "inconclusive", "fail", "error"):
        idx = [i for i, u in enumerate(units) if u["verdict"] == verdict]
        if not idx:
            continue
        colour = VERDICT_COLOURS[verdict]
        ax.errorbar([xs[i] for i in idx], [values[i] for i in idx], yerr=[errs[i] for i in idx], fmt="none",
                    ecolor=colour, elinewidth=1, capsize=2, zorder=2)
        kept = [i for i in idx if units[i]["unit"] not in excluded]
        gone = [i for i in idx if units[i]["unit"] in excluded]
        if kept:
            ax.scatter([xs[i] for i in kept], [values[i] for i in kept], s=22, color=colour, zorder=3,
                       label=f"unit: {verdict}")
        if gone:
            ax.scatter([xs[i] for i in gone], [values[i] for i in gone], s=40, facecolors="none", edgecolors=colour,
                       linewidths=1.5, zorder=3, label=f"excluded outlier ({verdict})")
    if band:
        ax.axhspan(band[0], band[1], color="#1f3b73", alpha=0.12, zorder=1, label=band[2])
    notes = []
    for name, key in (("lower bound", "low"), ("upper bound", "high"), ("typical", "typical")):
        if limits.get(key) is None:
            continue
        b = float(limits[key])
        if lo_data - FAR * span <= b <= hi_data + FAR * span:
            ax.axhline(b, ls="--", lw=1.2, color="#555555" if key != "typical" else "#7b4fa0", label=f"{name} {b:g}")
        else:
            notes.append(f"{name} {b:g} {unit_name}: {'above' if b > hi_data else 'below'}, off the chart")
    ax.set_xticks(xs, [u["unit"] for u in units], rotation=90)
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax.set_ylabel(f"value ({unit_name})" if unit_name else "value")
    ax.set_xlabel("unit (chamber/position)")
    for note in notes:  # named in the legend: a bound far from the units would squeeze them into one pixel row
        ax.plot([], [], ls="none", label=note)
    ax.set_title(f"{section['claim_id']}: fleet {fleet.get('verdict')}", fontsize=FONT_PT + 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    return fig


def fig_mandel(section: Mapping[str, Any]) -> Any | None:
    """Mandel's h (and k, when every unit gave repeated readings) by unit, with the 5 % and 1 % critical lines."""
    screening = (section.get("fleet") or {}).get("screening") or {}
    h, k = screening.get("h") or {}, screening.get("k") or {}
    hc, kc = screening.get("h_critical"), screening.get("k_critical")
    names = [n for n in h if h[n] is not None]
    if len(names) < 3 or not hc:
        return None
    panels = [("h", h, hc)] + ([("k", k, kc)] if kc and any(k.get(n) is not None for n in names) else [])
    fig = new_figure(7.4, 2.4 * len(panels) + 1.2)
    axes = [fig.add_subplot(len(panels), 1, i + 1) for i in range(len(panels))]
    for ax, (label, stat, crit) in zip(axes, panels):
        values = [stat.get(n) or 0.0 for n in names]
        beyond = [abs(v) > crit["at_1"] if label == "h" else v > crit["at_1"] for v in values]
        ax.bar(range(len(names)), values, color=["#c62828" if b else "#4a6fa5" for b in beyond])
        for level, style in (("at_5", ":"), ("at_1", "--")):
            c = float(crit[level])
            ax.axhline(c, ls=style, lw=1.1, color="#333333", label=f"{label} critical {level[3:]} %: {c:.3g}")
            if label == "h":
                ax.axhline(-c, ls=style, lw=1.1, color="#333333")
        ax.set_ylabel(f"Mandel's {label}")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
        ax.set_xticks(range(len(names)), [] if ax is not axes[-1] else names, rotation=90)
    axes[0].set_title(f"{section['claim_id']}: Mandel's h and k by unit (ISO 5725-2)", fontsize=FONT_PT + 1)
    axes[-1].set_xlabel("unit (chamber/position)")
    return fig


def _num(x: Any, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{float(x):.3g}" + (f" {unit}" if unit else "")


def statistics_row(section: Mapping[str, Any]) -> list[str]:
    """claim, units (used/total), fleet verdict, s_r, s_L, s_R, flagged (h/k), excluded (outliers)."""
    f = section.get("fleet") or {}
    p = f.get("precision") or {}
    s = f.get("screening") or {}
    unit = unit_text((f.get("limits") or {}).get("unit"))
    units = f.get("units") or {}
    verdict = f.get("verdict", "—") + (f" ({f['inconclusive_class']})" if f.get("inconclusive_class") else "")
    return [section["claim_id"], f"{len(units.get('used', []))}/{units.get('total', len(section.get('units', [])))}",
            verdict, _num(p.get("s_r"), unit), _num(p.get("s_L"), unit), _num(p.get("s_R"), unit),
            ", ".join(s.get("flagged", [])) or "—", ", ".join(o["unit"] for o in s.get("outliers", [])) or "—"]


def _lab_rows(sections: list[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for section in sections:
        labs = section.get("labs") or {}
        for score in labs.get("scores", []):
            rows.append([section["claim_id"], score["lab"], _num(score["value"]), f"{score['z']:+.2f}",
                         score["z_performance"], f"{score['z_prime']:+.2f}",
                         "—" if score["en"] is None else f"{score['en']:+.2f} ({score['en_performance']})",
                         _num(labs.get("sigma_pt"))])
    return rows


def fleet_blocks(data: Mapping[str, Any] | None, figs_dir: Path) -> tuple[list[Block], list[str]]:
    """The fleet section and its headline lines (none without fleet.json)."""
    if not data:
        return [], []
    sections = list(data.get("results") or [])
    chambers = data.get("chambers") or []
    opened = [c for c in chambers if c.get("kind")]
    total_units = sum(len(s.get("units") or []) for s in sections)
    counts: dict[str, int] = {}
    for s in sections:
        v = (s.get("fleet") or {}).get("verdict", "none")
        counts[v] = counts.get(v, 0) + 1
    head = (f"Fleet {data.get('source')}: {len(opened)} of {len(chambers)} chambers, {total_units} unit verdicts; "
            "fleet verdicts " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    rule = next(((s["fleet"]["rule"], s["fleet"]["rule_version"]) for s in sections if s.get("fleet")), None)
    blocks: list[Block] = [("h2", "Fleet: reproducibility across units and labs"), ("p", head)]
    if rule:
        blocks.append(("p", f"Rule: {rule[0]} (version {rule[1]}); each unit's own verdict by the guard-band rule."))
    blocks.append(("table", ["claim", "units used", "fleet verdict", "s_r", "s_L", "s_R", "flagged (h/k 1 %)",
                             "excluded (outliers)"], [statistics_row(s) for s in sections]))
    drawable = sorted((s for s in sections if len(_graded(s)) >= 2 and s.get("fleet")),
                      key=lambda s: -len(_graded(s)))[:MAX_FIGURES]
    for s in sorted(drawable, key=lambda s: s["claim_id"]):
        name = s["claim_id"]
        fig = fig_units(s)
        if fig is not None:
            path = save(fig, figs_dir / f"fleet_units_{name}")
            blocks.append(("fig", f"{name}: each unit's m ± U against the bounds, with the fleet's interval — "
                                  f"{s['fleet']['reason']}", path))
        mandel = fig_mandel(s)
        if mandel is not None:
            path = save(mandel, figs_dir / f"fleet_mandel_{name}")
            blocks.append(("fig", f"{name}: Mandel's h and k by unit with the 5 % (dotted) and 1 % (dashed) critical "
                                  "values; red: beyond 1 %", path))
    labs = _lab_rows(sections)
    if labs:
        blocks += [("h2", "Between labs (ISO 13528)"),
                   ("table", ["claim", "lab", "value", "z", "performance", "z'", "E_n", "sigma_pt"], labs)]
    missing = [c for c in chambers if not c.get("kind")]
    if missing:
        blocks.append(("ul", [f"chamber {c['id']} not graded: {c.get('error')}" for c in missing]))
    return blocks, [head]
