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


def _scores(run_dir: Path) -> tuple[dict[str, Any] | None, str]:
    data = _read_json(run_dir / "scores.json")
    if data is not None:
        return data, "scores.json"
    if (run_dir / "cells").is_dir() and any((run_dir / "cells").glob("*.jsonl")):
        from agent.scoring.score import score_paths

        return score_paths([run_dir]), "re-scored from cells/ (no scores.json)"
    return None, "absent"


# ------------------------------------------------------------------------------------------------ document model
# The report is built once as a list of blocks and rendered twice (Markdown and HTML), so the two never disagree.
Block = tuple  # ("h1"|"h2"|"p", text) | ("ul", [text]) | ("table", header, rows) | ("fig", caption, path)

_VERDICT_ORDER = {"fail": 0, "pass": 1, "error": 2, "inconclusive": 3}


def _dash(x: Any) -> str:
    """Table cell text: a dash for nothing; an exact decimal too long to read (an irrational c carried to 50
    digits by the verdict) shortened to 8 significant digits and marked with an ellipsis."""
    if x in (None, "", "None"):
        return "—"
    text = str(x)
    if len(text) > 16 and text.replace(".", "", 1).lstrip("-").isdigit():
        return f"{float(text):.8g}…"
    return text


def _clip(text: str, limit: int) -> str:
    """Shorten long prose at a word boundary, marked with an ellipsis (the full text is in the JSON files)."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _measured(r: dict[str, Any]) -> str:
    m = r.get("measured") or {}
    if m.get("value") is None:
        return "—"
    return f"{m['value']} ± {m.get('u')} {m.get('unit', '')}".strip()


def _chamber_envelope(res: list[dict[str, Any]]) -> str | None:
    """The chamber-only envelope: definitive verdicts on the seed's packaged claims and on the chamber's other parts
    (protocols/data/chamber_parts), when those were graded; None when only the packaged set was."""
    try:
        from protocols.claim_sources import load_checked_claims

        packaged = set(load_checked_claims(None))
    except Exception:  # the report renders whatever is present; without the package it cannot split the counts
        return None
    other = [r for r in res if r.get("claim_id") not in packaged]
    if not other:
        return None
    seed = [r for r in res if r.get("claim_id") in packaged]
    d_seed = sum(r.get("verdict") in ("pass", "fail") for r in seed)
    d_other = sum(r.get("verdict") in ("pass", "fail") for r in other)
    parts = sorted({str(r["component"]) for r in other if r.get("component")})
    return (f"Chamber-only envelope: {d_seed + d_other} definitive verdicts — {d_seed} of the {len(seed)} packaged "
            f"claims and {d_other} of the {len(other)} claims outside it"
            + (f" ({', '.join(parts)})." if parts else "."))


def _verdict_blocks(checks: dict[str, Any] | None, absent: list[str]) -> tuple[list[Block], list[str]]:
    if checks is None:
        absent.append("checks.json (no chamber verdicts)")
        return [("h2", "Chamber verdicts"), ("p", "No chamber verdicts: checks.json is absent.")], []
    res = sorted(checks.get("results") or [],
                 key=lambda r: (_VERDICT_ORDER.get(r.get("verdict"), 9), str(r.get("class")), r.get("claim_id")))
    counts = Counter(r.get("verdict") for r in res)
    definitive = [f"{r['claim_id']}: **{r['verdict']}**, {_measured(r)} (distance {r.get('distance')}, "
                  f"c = {r.get('combined_uncertainty')})" for r in res if r.get("verdict") in ("pass", "fail")]
    headline = [f"Chamber: {len(res)} claims — " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
    envelope = _chamber_envelope(res)
    if envelope:
        headline.append(envelope)
    blocks: list[Block] = [
        ("h2", "Chamber verdicts"),
        ("p", "Pass: the claim holds with a margin larger than the combined uncertainty c = sqrt(u² + t²); fail: it is "
              "violated by more than c; otherwise inconclusive, with the reason's class. Definitive verdicts first."),
        ("table", ["claim", "verdict", "class", "measured ± u", "distance", "c", "reason"],
         [[r.get("claim_id"), r.get("verdict"), _dash(r.get("class")), _measured(r), _dash(r.get("distance")),
           _dash(r.get("combined_uncertainty")), _clip(str(r.get("reason", "")), 220)] for r in res]),
        *([("p", envelope)] if envelope else []),
    ]
    return blocks, headline + [f"  - {d}" for d in definitive]


def _sweep_blocks(run_dir: Path, figs_dir: Path, absent: list[str]) -> tuple[list[Block], list[str]]:
    sweep = _read_json(run_dir / "sweep.json")
    if sweep is None:
        absent.append("sweep.json")
        return [("h2", "Perturbation sweep"), ("p", "No sweep: sweep.json is absent.")], []
    meas = sweep.get("measured") or {}
    flips = sweep.get("flip_points") or []
    text = (f"{sweep.get('claim_id')}: the live measurement {meas.get('value')} ± {meas.get('u')} {meas.get('unit', '')} "
            f"is held fixed while the stated bound moves through it. Combined uncertainty c = "
            f"{sweep.get('combined_uncertainty')}; the verdict changes exactly at the bounds "
            f"{', '.join(str(f) for f in flips) or '(none)'} (m ± c; the band is closed, so those points are "
            f"inconclusive). {len(sweep.get('rows') or [])} steps: "
            + ", ".join(f"{k} {v}" for k, v in Counter(r.get("verdict") for r in sweep.get("rows") or []).items()) + ".")
    figure = run_dir / "sweep.png" if (run_dir / "sweep.png").exists() else _fig_sweep(sweep, figs_dir / "sweep.png")
    blocks: list[Block] = [("h2", "Perturbation sweep"), ("p", text)]
    if figure is not None:
        blocks.append(("fig", "verdict as the stated bound moves through the measurement", figure))
    return blocks, [f"Sweep: verdict changes at {', '.join(str(f) for f in flips)} (m ± c)"] if flips else []


def _agent_blocks(run_dir: Path, figs_dir: Path, absent: list[str]) -> tuple[list[Block], list[str]]:
    scores, how = _scores(run_dir)
    if scores is None:
        absent.append("scores.json and cells/ (no agent cells)")
        return [("h2", "The agent"), ("p", "No agent cells were recorded in this run.")], []
    rows = scores.get("cells") or []
    s = scores.get("summary") or {}
    fl = s.get("flagged") or {}
    bound = f" (one-sided 95 % upper bound {fl['upper_95']:.3f}; unit: {fl.get('unit', 'cells')})" \
        if fl.get("count") == 0 and fl.get("upper_95") is not None else ""
    summary = (f"{s.get('cells', len(rows))} cells; fidelity passed {s.get('fidelity_passed')}; "
               f"engine errors {s.get('engine_errors')}; detector flags {fl.get('count', 0)} of {fl.get('n', 0)} "
               f"fidelity-passing cells{bound}; by rule {s.get('flags_by_rule') or {}}.")
    blocks: list[Block] = [("h2", "The agent"), ("p", f"{summary} Source: {how}.")]
    archive = [f"{k}: {s[k]}" for k in ("planted_faults_total", "planted_faults_flagged", "clean_cells_total",
                                         "clean_cells_flagged", "kappa") if k in s]
    if archive:
        blocks.append(("ul", archive))
    for caption, fn in (("fidelity per claim and model", _fig_fidelity), ("tool calls per cell by tool", _fig_tools),
                        ("cost and latency per cell", _fig_cost), ("detector flags", _fig_flags)):
        path = fn(rows, figs_dir / (caption.split()[0] + "_" + caption.split()[-1] + ".png"))
        if path is not None:
            blocks.append(("fig", caption, path))
        else:
            absent.append(f"figure '{caption}' (no data)")
    shown = rows[:500]
    blocks.append(("table", ["cell", "claim", "model", "arm", "outcome", "fidelity", "flags", "latency s", "cost"],
                   [[r["run_id"], r["claim_id"], r["model"], r["arm"], r["outcome"], r["fidelity"].get("passed"),
                     ", ".join(r["flags"]) or "—",
                     f"{r['latency_s']:.1f}" if r.get("latency_s") is not None else "—",
                     f"{r['cost']:.4f}" if r.get("cost") is not None else "—"] for r in shown]))
    if len(rows) > len(shown):
        blocks.append(("p", f"({len(rows) - len(shown)} more cells in scores.json)"))
    headline = [f"Agent: fidelity {s.get('fidelity_passed')} of {s.get('cells', len(rows))} cells; "
                f"detector flags {fl.get('count', 0)} of {fl.get('n', 0)}{bound}"]
    return blocks, headline


def _typical_blocks(results: Any) -> list[Block]:
    """The typical-not-guaranteed class, explained where it occurs: a Typ. is not a limit, so one unit cannot fail it."""
    typical = sorted((r for r in results if r.get("class") == "typical-not-guaranteed"), key=lambda r: r["claim_id"])
    rows = [[r["claim_id"], str((r.get("verdict_detail") or {}).get("deviation_from_typical")),
             f"{(r.get('verdict_detail') or {}).get('expanded_uncertainty') or 0:.2g}",
             (r.get("measured") or {}).get("unit", "")] for r in typical]
    if not rows:
        return []
    return [("p", "Inconclusive, class typical-not-guaranteed: the datasheet prints only a typical value (no Min./Max.). "
                  "A typical describes the population of parts, not a limit each unit must meet, so one unit's "
                  "deviation from it can neither fail nor confirm the claim; the deviation m − typical is reported "
                  "with its expanded uncertainty U (k·c, 95 %)."),
            ("table", ["claim", "m − typical", "U", "unit"], rows)]


def _station_blocks(run_dir: Path) -> tuple[list[Block], list[str]]:
    """With lab instruments: the claims that become definitive, and for the others what would make them gradable."""
    data = _read_json(run_dir / "station_checks.json")
    if data is None:
        return [], []  # grading with a station is optional; its absence is not a gap in the run
    res = {r["claim_id"]: r for r in data.get("results") or []}
    envelope = {e["claim_id"]: e for e in data.get("envelope") or []}
    definitive = sorted((r for r in res.values() if r.get("verdict") in ("pass", "fail")), key=lambda r: r["claim_id"])
    rest = sorted((e for cid, e in envelope.items() if res.get(cid, {}).get("verdict") not in ("pass", "fail")),
                  key=lambda e: e["claim_id"])
    blocks: list[Block] = [
        ("h2", "With the instrument station"),
        ("p", f"Station file {data.get('station')}: {len(definitive)} of {len(res)} claims get a definitive verdict "
              "when lab instruments supply the stimulus, observable or reference the chamber lacks; each budget "
              "includes the instrument's certificate uncertainty."),
        ("table", ["claim", "verdict", "measured ± u", "distance", "c"],
         [[r["claim_id"], r["verdict"], _measured(r), _dash(r.get("distance")), _dash(r.get("combined_uncertainty"))]
          for r in definitive]),
        *_typical_blocks(res.values()),
        ("p", "Still inconclusive, and what would make each gradable:"),
        ("table", ["claim", "would need", "note"],
         [[e["claim_id"], ", ".join(e.get("would_need") or []) or "—", _clip(str(e.get("note", "")), 220)]
          for e in rest]),
    ]
    verdicts = Counter(r.get("verdict") for r in res.values())
    return blocks, [f"With instruments: {len(definitive)} definitive ("
                    + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())) + ")"]


def _link_blocks(run_dir: Path, absent: list[str]) -> tuple[list[Block], list[str]]:
    link = _read_json(run_dir / "link.json")
    if link is None:
        absent.append("link.json")
        return [("h2", "Serial link"), ("p", "No link statistics: link.json is absent.")], []
    names = sorted({k for counters in link.values() for k in (counters or {})})
    trouble = sum(int((c or {}).get(k, 0)) for c in link.values()
                  for k in ("resends", "crc_failures", "ack_timeouts", "duplicates", "unexpected", "reconnects"))
    blocks: list[Block] = [("h2", "Serial link"),
                           ("table", ["chamber", *names], [[ch, *[(c or {}).get(n, 0) for n in names]]
                                                           for ch, c in link.items()])]
    return blocks, [f"Serial link: {trouble} recovered faults (resends, CRC failures, ACK timeouts, duplicates, "
                    f"unexpected segments, reconnects) over {len(link)} chamber(s)"]


def _render_markdown(blocks: list[Block], run_dir: Path) -> str:
    out: list[str] = []
    for b in blocks:
        kind = b[0]
        if kind == "h1":
            out += [f"# {b[1]}", ""]
        elif kind == "h2":
            out += [f"## {b[1]}", ""]
        elif kind == "p":
            out += [b[1], ""]
        elif kind == "ul":
            out += [f"- {item}" if not item.startswith("  ") else item for item in b[1]] + [""]
        elif kind == "table":
            out.append("| " + " | ".join(b[1]) + " |")
            out.append("|" + "---|" * len(b[1]))
            out += ["| " + " | ".join(_dash(x).replace("|", "/") for x in row) + " |" for row in b[2]]
            out.append("")
        elif kind == "fig":
            out += [f"![{b[1]}]({Path(b[2]).relative_to(run_dir)})", ""]
    return "\n".join(out)


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
        "text-align:left;vertical-align:top}th{background:#f3f3f3}figure{margin:1em 0}img{max-width:100%}"
        "td.pass{background:#dff0d8}td.fail{background:#f2dede}td.inconclusive{background:#fcf8e3}"
        "td.error{background:#e8e8e8}")


def _inline_bold(text: str) -> str:
    parts = html.escape(text).split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def _render_html(blocks: list[Block], title: str) -> str:
    body = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>"]
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{html.escape(b[1])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{_inline_bold(b[1])}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(
                f"<li style='list-style:circle;margin-left:1.5em'>{_inline_bold(i.strip().removeprefix('- '))}</li>"
                if i.startswith("  ") else f"<li>{_inline_bold(i.strip())}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b[1])
            rows = "".join("<tr>" + "".join(
                f"<td class='{html.escape(str(x))}'>{html.escape(_dash(x))}</td>" for x in row) + "</tr>"
                for row in b[2])
            body.append(f"<table><tr>{head}</tr>{rows}</table>")
        elif kind == "fig":
            data = base64.b64encode(Path(b[2]).read_bytes()).decode("ascii")
            body.append(f"<figure><img alt='{html.escape(b[1])}' src='data:image/png;base64,{data}'/>"
                        f"<figcaption>{html.escape(b[1])}</figcaption></figure>")
    body.append("</body></html>")
    return "\n".join(body)


def write_report(run_dir: Path) -> Path:
    """Write RUN_DIR/report.md, RUN_DIR/report.html (figures embedded) and RUN_DIR/figures/*.png; returns report.md.

    Order is what a reader wants first: the headline (verdict counts, definitive verdicts, the sweep's flip
    points, the agent's fidelity and flags, link health), then each part in detail, then what was absent.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    figs_dir = run_dir / "figures"
    figs_dir.mkdir(exist_ok=True)
    absent: list[str] = []
    verdicts, h1 = _verdict_blocks(_read_json(run_dir / "checks.json"), absent)
    sweep, h2 = _sweep_blocks(run_dir, figs_dir, absent)
    agent, h3 = _agent_blocks(run_dir, figs_dir, absent)
    station, h5 = _station_blocks(run_dir)
    link, h4 = _link_blocks(run_dir, absent)
    title = f"Run report: {run_dir.name}"
    blocks: list[Block] = [("h1", title), ("h2", "At a glance"), ("ul", h1 + h5 + h2 + h3 + h4 or ["(nothing recorded)"])]
    blocks += verdicts + station + sweep + agent + link
    blocks += [("h2", "Absent inputs"), ("ul", absent or ["none"])]
    report = run_dir / "report.md"
    report.write_text(_render_markdown(blocks, run_dir), encoding="utf-8")
    (run_dir / "report.html").write_text(_render_html(blocks, title), encoding="utf-8")
    return report
