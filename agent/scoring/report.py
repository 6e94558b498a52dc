"""The run report: RUN_DIR/report.md, PNG figures and RUN_DIR/report.html with the figures embedded.

Why it reads whatever is present: the main job writes the run directory piece by piece (records, checks.json,
sweep.json, link.json, scores.json); a report that refused to render without every piece would hide the pieces
that exist. Each section says when its input is absent. Figures use matplotlib's object API (Figure + Agg
canvas), never pyplot's global state, so reports can be rendered from threads and tests.
"""

from __future__ import annotations

import base64
import html
import json
import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _read_json(path: Path) -> Any | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        log.warning("%s is not JSON: %s", path, e)
        return None


def _figure(width: float = 7.0, height: float = 3.6):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def _fig_fidelity(rows: list[dict[str, Any]], path: Path) -> Path | None:
    groups: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["fidelity"].get("passed") is not None:
            groups[r["model"]][r["claim_id"]].append(bool(r["fidelity"]["passed"]))
    if not groups:
        return None
    claims = sorted({c for g in groups.values() for c in g})
    fig = _figure(8, max(2.5, 0.25 * len(claims) + 1))
    ax = fig.add_subplot(1, 1, 1)
    models = sorted(groups)
    h = 0.8 / len(models)
    for i, m in enumerate(models):
        vals = [sum(groups[m][c]) / len(groups[m][c]) if groups[m][c] else 0 for c in claims]
        ax.barh([k + i * h for k in range(len(claims))], vals, height=h, label=m)
    ax.set_yticks([k + 0.4 - h / 2 for k in range(len(claims))], claims, fontsize=6)
    ax.set_xlabel("fidelity pass rate")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=6)
    return _save(fig, path)


def _fig_tools(rows: list[dict[str, Any]], path: Path) -> Path | None:
    tools = sorted({t for r in rows for t in r.get("tool_calls_by_tool") or {}})
    if not rows or not tools:
        return None
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    means = [sum((r.get("tool_calls_by_tool") or {}).get(t, 0) for r in rows) / len(rows) for t in tools]
    ax.bar(range(len(tools)), means)
    ax.set_xticks(range(len(tools)), tools, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("calls per cell (mean)")
    return _save(fig, path)


def _fig_cost(rows: list[dict[str, Any]], path: Path) -> Path | None:
    pts = [(r.get("latency_s"), r.get("cost")) for r in rows if r.get("latency_s") is not None]
    if not pts:
        return None
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    if any(c is not None for _, c in pts):
        ax.scatter([p for p, c in pts if c is not None], [c for _, c in pts if c is not None], s=10)
        ax.set_ylabel("cost per cell")
    else:
        ax.hist([p for p, _ in pts], bins=20)
        ax.set_ylabel("cells")
    ax.set_xlabel("latency per cell (s)")
    return _save(fig, path)


def _fig_flags(rows: list[dict[str, Any]], path: Path) -> Path | None:
    counts = Counter(f for r in rows for f in r.get("detector", {}).get("fired", []))
    if not rows:
        return None
    fig = _figure(6, 3)
    ax = fig.add_subplot(1, 1, 1)
    from agent.scoring.detector import RULES

    ax.bar(range(len(RULES)), [counts.get(x, 0) for x in RULES])
    ax.set_xticks(range(len(RULES)), RULES, rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("cells where the rule fired")
    return _save(fig, path)


def _fig_sweep(sweep: dict[str, Any], path: Path) -> Path | None:
    rows = sweep.get("rows") or []
    if not rows:
        return None
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    colours = {"pass": "tab:green", "inconclusive": "tab:orange", "fail": "tab:red"}
    for v in ("pass", "inconclusive", "fail"):
        pts = [(r.get("bound"), r.get("distance")) for r in rows if r.get("verdict") == v]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=v, color=colours[v], s=14)
    if sweep.get("combined_uncertainty") is not None:
        c = float(sweep["combined_uncertainty"])
        ax.axhline(c, ls="--", lw=0.8, color="grey")
        ax.axhline(-c, ls="--", lw=0.8, color="grey")
    ax.set_xlabel("claimed bound")
    ax.set_ylabel("distance")
    ax.set_title(str(sweep.get("claim_id", "")), fontsize=8)
    ax.legend(fontsize=7)
    return _save(fig, path)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join("" if x is None else str(x).replace("|", "/") for x in r) + " |" for r in rows]
    return "\n".join(out)


def _scores(run_dir: Path) -> tuple[dict[str, Any] | None, str]:
    data = _read_json(run_dir / "scores.json")
    if data is not None:
        return data, "scores.json"
    if (run_dir / "cells").is_dir() and any((run_dir / "cells").glob("*.jsonl")):
        from agent.scoring.score import score_paths

        return score_paths([run_dir]), "re-scored from cells/ (no scores.json)"
    return None, "absent"


def write_report(run_dir: Path) -> Path:
    """Write RUN_DIR/report.md, RUN_DIR/report.html and figures under RUN_DIR/figures; returns report.md's path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    figs_dir = run_dir / "figures"
    figs_dir.mkdir(exist_ok=True)
    md: list[str] = [f"# Run report: {run_dir.name}", ""]
    figures: list[tuple[str, Path]] = []
    absent: list[str] = []
    scores, how = _scores(run_dir)
    rows = (scores or {}).get("cells") or []
    md += ["## Cells and detector", ""]
    if scores is None:
        absent.append("scores.json and cells/ (no cell to report)")
        md.append("_No scored cells: scores.json and cells/ are absent._")
    else:
        s = scores.get("summary") or {}
        md.append(f"Source: {how}. {s.get('cells', len(rows))} cells; fidelity passed {s.get('fidelity_passed')}; "
                  f"engine errors {s.get('engine_errors')}.")
        fl = s.get("flagged") or {}
        if fl:
            md.append(f"Detector: {fl.get('count')} of {fl.get('n')} {fl.get('unit')} flagged"
                      + (f" (one-sided 95 % upper bound {fl['upper_95']:.4f})" if fl.get("upper_95") is not None else "")
                      + f"; by rule {s.get('flags_by_rule')}.")
        for key in ("planted_faults_total", "planted_faults_flagged", "clean_cells_total", "clean_cells_flagged",
                    "kappa"):
            if key in s:
                md.append(f"- {key}: {s[key]}")
        md += ["", _table(["run", "claim", "model", "arm", "outcome", "fidelity", "flags", "latency s", "cost"],
                          [[r["run_id"], r["claim_id"], r["model"], r["arm"], r["outcome"],
                            r["fidelity"].get("passed"), ",".join(r["flags"]),
                            f"{r['latency_s']:.1f}" if r.get("latency_s") is not None else None,
                            f"{r['cost']:.4f}" if r.get("cost") is not None else None] for r in rows[:500]]), ""]
        if len(rows) > 500:
            md.append(f"_({len(rows) - 500} more cells in scores.json)_")
        for name, fn in (("fidelity per claim and model", _fig_fidelity), ("tool calls per cell by tool", _fig_tools),
                         ("cost and latency per cell", _fig_cost), ("detector flags", _fig_flags)):
            p = fn(rows, figs_dir / (name.split()[0] + "_" + name.split()[-1] + ".png"))
            if p is not None:
                figures.append((name, p))
            else:
                absent.append(f"figure '{name}' (no data)")
    checks = _read_json(run_dir / "checks.json")
    md += ["## Verdicts", ""]
    if checks is None:
        absent.append("checks.json")
        md.append("_checks.json is absent: no chamber verdicts._")
    else:
        res = checks.get("results") or []
        md.append(_table(["claim", "verdict", "class", "measured", "u", "distance", "combined u", "reason"],
                         [[r.get("claim_id"), r.get("verdict"), r.get("class"),
                           f"{(r.get('measured') or {}).get('value')} {(r.get('measured') or {}).get('unit', '')}",
                           (r.get("measured") or {}).get("u"), r.get("distance"), r.get("combined_uncertainty"),
                           str(r.get("reason", ""))[:120]] for r in res]))
        md.append(f"\nVerdicts: {dict(Counter(r.get('verdict') for r in res))}")
    md += ["", "## Sweep", ""]
    sweep = _read_json(run_dir / "sweep.json")
    if sweep is None:
        absent.append("sweep.json")
        md.append("_sweep.json is absent._")
    else:
        meas = sweep.get("measured") or {}
        md.append(f"Claim {sweep.get('claim_id')}: measured {meas.get('value')} ± {meas.get('u')} {meas.get('unit', '')}, "
                  f"combined uncertainty {sweep.get('combined_uncertainty')}; {len(sweep.get('rows') or [])} rows, "
                  f"verdicts {dict(Counter(r.get('verdict') for r in sweep.get('rows') or []))}.")
        p = _fig_sweep(sweep, figs_dir / "sweep.png")
        if p is not None:
            figures.append(("sweep", p))
    if (run_dir / "sweep.png").exists():
        figures.append(("sweep (as written by the run)", run_dir / "sweep.png"))
    link = _read_json(run_dir / "link.json")
    md += ["", "## Link counters", ""]
    if link is None:
        absent.append("link.json")
        md.append("_link.json is absent._")
    else:
        for chamber, counters in link.items():
            md.append(f"- {chamber}: " + ", ".join(f"{k} {v}" for k, v in (counters or {}).items()))
    md += ["", "## Figures", ""]
    for name, p in figures:
        md.append(f"![{name}]({p.relative_to(run_dir)})")
    md += ["", "## Absent inputs", ""] + ([f"- {a}" for a in absent] or ["- none"])
    report = run_dir / "report.md"
    report.write_text("\n".join(md) + "\n", encoding="utf-8")
    body = ["<!doctype html><html><head><meta charset='utf-8'><title>Run report</title></head><body>",
            "<pre style='white-space:pre-wrap'>" + html.escape("\n".join(md)) + "</pre>"]
    for name, p in figures:
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        body.append(f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'/>"
                    f"<figcaption>{html.escape(name)}</figcaption></figure>")
    body.append("</body></html>")
    (run_dir / "report.html").write_text("\n".join(body), encoding="utf-8")
    return report
