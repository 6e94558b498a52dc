"""The run report: RUN_DIR/report.md, PNG figures and RUN_DIR/report.html with the figures embedded.

Why it reads whatever is present: the main job writes the run directory piece by piece (summary.json,
calibration.json, checks.json, station_checks.json, sweep.json, link.json, scores.json, cells/); a report that
refused to render without every piece would hide the pieces that exist. Every input is read through one
`_Inputs`, so the closing "Absent inputs" section lists exactly the files that were missing or unreadable, and
nothing else. Numbers go through report_format.number (one rule for every figure), figures through
report_figures and report_chamber_figures (object API, never pyplot's global state, so reports can be rendered from
threads and tests; written as SVG and embedded inline in the HTML), the two renderings through report_render.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Mapping

from agent.scoring import report_chamber_figures as chamber_figs
from agent.scoring import report_figures as figs
from agent.scoring.report_fleet import fleet_blocks
from agent.scoring.report_format import cell, number, places_of, verdict_places, with_u
from agent.scoring.score import model_group
from agent.scoring.report_git import SourceState, read_source_state
from agent.scoring.report_render import render_html, render_markdown
from agent.scoring.report_run import (caveat, calibration_blocks, first_verdict_budget, measured_text,
                                      provenance_blocks)

log = logging.getLogger(__name__)

# The report is built once as a list of blocks and rendered twice (Markdown and HTML), so the two never disagree.
Block = tuple  # ("h1"|"h2"|"p", text) | ("ul", [text]) | ("table", header, rows) | ("fig", caption, path)

_VERDICT_ORDER = {"fail": 0, "pass": 1, "error": 2, "inconclusive": 3}
#: the widest table the page holds (HTML and a printed A4 page at the report's font size)
MAX_COLUMNS = 9


class _Inputs:
    """Reads the run folder's files and remembers which were absent or unreadable, with what that leaves out."""

    def __init__(self, run_dir: Path, claims: Mapping[str, Any] | None = None) -> None:
        self.run_dir = run_dir
        self.claims = claims  # None: the run's recorded claim pool (agent.scoring.score)
        self.absent: list[str] = []

    def note(self, text: str) -> None:
        self.absent.append(text)

    def json(self, name: str, without: str) -> Any | None:
        path = self.run_dir / name
        if not path.exists():
            self.note(f"{name} ({without})")
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            log.warning("%s is unreadable: %s", path, e)
            self.note(f"{name} unreadable: {type(e).__name__}: {_clip(str(e), 120)} ({without})")
            return None

    def calibration(self) -> tuple[Any | None, str | None]:
        from calibration.records import RecordError, load_record

        path = self.run_dir / "calibration.json"
        if not path.exists():
            self.note("calibration.json (no cross-sensor calibration shown)")
            return None, "absent"
        try:
            return load_record(path), None
        except RecordError as e:
            self.note(f"calibration.json unreadable: {_clip(str(e), 160)}")
            return None, "unreadable"

    def scores(self) -> tuple[dict[str, Any] | None, str]:
        data = self.json("scores.json", "no fidelity and detector scores")
        if data is not None:
            return data, "scores.json"
        cells_dir = self.run_dir / "cells"
        if cells_dir.is_dir() and any(cells_dir.glob("*.jsonl")):
            from agent.scoring.score import score_paths

            self.absent[-1] += "; re-scored from cells/"
            return score_paths([self.run_dir], claims=self.claims), "re-scored from cells/ (no readable scores.json)"
        self.note("cells/ (no agent cells)")
        return None, "absent"


def _clip(text: str, limit: int) -> str:
    """Shorten an error message at a word boundary, marked with an ellipsis (never a verdict's reason)."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _counts(values: Any) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(Counter(values).items(), key=lambda kv: str(kv[0])))


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


def _reason(r: dict[str, Any]) -> str:
    """The verdict's reason in full, with its weak-pass caveat in full beside it."""
    text = str(r.get("reason", "")) or "—"
    note = caveat(r)
    return f"{text} **Caveat — {note}**" if note else text


def _in_unit(r: dict[str, Any], key: str) -> str:
    """A verdict's distance or c at its resolution, in the claim's unit ('-254.744 hPa')."""
    text = number(r.get(key), places=verdict_places(r))
    unit = (r.get("measured") or {}).get("unit") or r.get("claim_unit") or ""
    return f"{text} {unit}" if unit and text != "—" else text


def _definitive_line(r: dict[str, Any]) -> list[str]:
    line = [f"{r['claim_id']}: **{r['verdict']}**, {measured_text(r)} (distance {_in_unit(r, 'distance')}, "
            f"c = {_in_unit(r, 'combined_uncertainty')})"]
    note = caveat(r)
    return line + ([f"    - caveat: {note}"] if note else [])


def _verdict_figure(definitive: list[tuple[str, dict[str, Any]]], bounds: dict[str, Any], figs_dir: Path
                    ) -> list[Block]:
    fig = chamber_figs.fig_verdicts(definitive, bounds)
    if fig is None:
        return [("p", "No definitive verdict to draw (no pass or fail with a measured value).")]
    return [("fig", "Definitive verdicts: each claim's measured m with its expanded uncertainty U (95 %, k as "
                    "stated) against the interval the claim allows; one row per claim, each on its own axis in the "
                    "claim's unit; colour: verdict. The verdict's guard band is c (which includes any stated "
                    "tolerance t), not U: a pass can show U reaching past a bound", figs.save(fig, figs_dir / "verdicts.svg"))]


def _readings_blocks(definitive: list[tuple[str, dict[str, Any]]], figs_dir: Path) -> list[Block]:
    """The readings each definitive verdict rests on, in the unit the protocol measured in."""
    if not definitive:
        return []
    rows = []
    for label, r in definitive:
        md = r.get("measurement_detail") or {}
        unit = md.get("unit") or ""
        rows.append([label, (md.get("details") or {}).get("reading") or "—", cell(md.get("n")),
                     with_u(md.get("value"), md.get("u"), unit) if md.get("value") is not None else "—",
                     chamber_figs.readings_text(r) + (f" ({unit})" if unit and chamber_figs.recorded_readings(r)
                                                      else "")])
    blocks: list[Block] = [("h2", "Readings behind the definitive verdicts"),
                           ("p", "Each definitive verdict's measurement as its protocol took it (before any unit "
                                 "conversion to the claim's unit), with its standard uncertainty u, and the "
                                 "individual readings the protocol recorded beside it.")]
    fig = chamber_figs.fig_readings(definitive)
    if fig is not None:
        blocks.append(("fig", "Readings: the measured value ± U (k·u, coloured by verdict) and the recorded readings "
                              "(unit means of the barometers, min / mean / max of a held reading, extreme codes or "
                              "steps), one row per verdict on its own axis in the measured unit; verdicts whose "
                              "protocol recorded no individual readings are in the table only",
                       figs.save(fig, figs_dir / "readings.svg")))
    else:
        blocks.append(("p", "No figure: no definitive verdict's protocol recorded individual readings beside its "
                            "result; the table gives each measurement."))
    blocks.append(("table", ["claim", "signal", "rows n", "as measured ± u", "recorded readings"], rows))
    return blocks


def _verdict_blocks(checks: dict[str, Any] | None, figure: list[Block]) -> tuple[list[Block], list[str]]:
    if checks is None:
        return [("h2", "Chamber verdicts"), ("p", "No chamber verdicts (see Absent inputs).")], []
    res = sorted(checks.get("results") or [],
                 key=lambda r: (_VERDICT_ORDER.get(r.get("verdict"), 9), str(r.get("class")), r.get("claim_id")))
    definitive = [line for r in res if r.get("verdict") in ("pass", "fail") for line in _definitive_line(r)]
    headline = [f"Chamber: {len(res)} claims — " + _counts(r.get("verdict") for r in res)]
    envelope = _chamber_envelope(res)
    if envelope:
        headline.append(envelope)
    rows = []
    for r in res:
        rows.append([r.get("claim_id"), r.get("verdict"), cell(r.get("class")), measured_text(r),
                     _in_unit(r, "distance"), _in_unit(r, "combined_uncertainty"), _reason(r)])
    blocks: list[Block] = [
        ("h2", "Chamber verdicts"),
        ("p", "Pass: the claim holds with a margin larger than the combined uncertainty c = sqrt(u² + t²); fail: it is "
              "violated by more than c; otherwise inconclusive, with the reason's class. Definitive verdicts first; "
              "numbers at each claim's resolution (the places of its reported m), in the claim's unit."),
        ("table", ["claim", "verdict", "class", "measured m ± u", "distance d", "c", "reason"], rows),
        *([("p", envelope)] if envelope else []),
        *figure,
    ]
    return blocks, headline + [f"  - {d}" if not d.startswith("    ") else d for d in definitive]


def _sweep_blocks(sweep: dict[str, Any] | None, figs_dir: Path) -> tuple[list[Block], list[str]]:
    if sweep is None:
        return [("h2", "Perturbation sweep"), ("p", "No sweep (see Absent inputs).")], []
    meas = sweep.get("measured") or {}
    p = places_of(meas.get("value"))
    flips = [number(f, places=p) for f in sweep.get("flip_points") or []]
    steps = sweep.get("rows") or []
    text = (f"{sweep.get('claim_id')}: the live measurement {with_u(meas.get('value'), meas.get('u'), meas.get('unit'))} "
            f"is held fixed while the stated bound moves through it. Combined uncertainty c = "
            f"{number(sweep.get('combined_uncertainty'), places=p)}; the verdict changes exactly at the bounds "
            f"{', '.join(flips) or '(none)'} (m ± c; the band is closed, so those points are inconclusive). "
            f"{len(steps)} steps: {_counts(r.get('verdict') for r in steps)}.")
    blocks: list[Block] = [("h2", "Perturbation sweep"), ("p", text)]
    fig = figs.fig_sweep(sweep)
    if fig is not None:
        direction = figs.sweep_direction(sweep)
        moved = {"downward": "the sweep moved the bound downward, so it ran from right to left",
                 "upward": "the sweep moved the bound upward, from left to right"}.get(direction, "")
        blocks.append(("fig", f"Verdict at each stated bound as the bound moves through the measurement; the x-axis "
                              f"increases to the right{'; ' + moved if moved else ''}. Dashed lines: d = ±c; "
                              "dotted line: the measured m.", figs.save(fig, figs_dir / "sweep.svg")))
    return blocks, [f"Sweep: verdict changes at {', '.join(flips)} (m ± c)"] if flips else []


def _model_arm_blocks(rows: list[dict[str, Any]]) -> list[Block]:
    """Model × arm: per model (rows) and arm (columns), fidelity passed of scored cells and detector flags."""
    models = sorted({model_group(r) for r in rows})
    arms = sorted({str(r["arm"]) for r in rows})
    tally: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        tally[(model_group(r), str(r["arm"]))].append(r)

    def text(group: list[dict[str, Any]]) -> str:
        if not group:
            return "—"
        scored = [g for g in group if g["fidelity"].get("passed") is not None]
        passed = sum(bool(g["fidelity"]["passed"]) for g in scored)
        flagged = sum(bool(g.get("flags")) for g in group)
        return f"fidelity {passed}/{len(scored)}; flagged {flagged}; cells {len(group)}"

    blocks: list[Block] = [("p", "Model × arm (fidelity passed of the scored cells; cells with a detector flag):")]
    for i in range(0, len(arms), MAX_COLUMNS - 1):  # many arms: the table is split, never wider than the page
        chunk = arms[i:i + MAX_COLUMNS - 1]
        blocks.append(("table", ["model", *chunk], [[m, *[text(tally[(m, a)]) for a in chunk]] for m in models]))
    return blocks


def _counts_text(counts: Any) -> str:
    """{'tool_bypass': 2} → 'tool_bypass 2'; nothing → 'none fired' (never an empty '{}')."""
    return ", ".join(f"{k} {v}" for k, v in sorted((counts or {}).items())) or "none fired"


def _cost_text(rows: list[dict[str, Any]], s: dict[str, Any]) -> str:
    priced = [r for r in rows if r.get("cost") is not None]
    if not rows:
        return "Cost: no cells."
    if not priced:
        return (f"Cost: not known for any of the {len(rows)} cells — no price table was given to scoring, or the "
                "model has no price in it (token usage is recorded in each cell).")
    total = s.get("cost_total")
    return (f"Cost: {number(total if total is not None else sum(float(r['cost']) for r in priced), sig=4)} in the "
            f"price table's currency over the {len(priced)} priced cells of {len(rows)}"
            + (f"; not known for the other {len(rows) - len(priced)}." if len(priced) < len(rows) else "."))


def fidelity_grid(rows: list[dict[str, Any]]) -> list[Block]:
    """Fidelity per claim as a compact grid (passed/scored per model · arm), in place of one bar per claim."""
    groups = sorted({f"{r['model']} · {r['arm']}" for r in rows})
    tally: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in rows:
        if r["fidelity"].get("passed") is not None:
            tally[(str(r["claim_id"]), f"{r['model']} · {r['arm']}")].append(bool(r["fidelity"]["passed"]))
    claims = sorted({str(r["claim_id"]) for r in rows})

    def text(c: str, g: str) -> str:
        got = tally.get((c, g))
        return f"{sum(got)}/{len(got)}" if got else "—"

    intro = ("p", "Fidelity per claim (cells whose extraction passed / cells scored; — none scored):")
    if len(groups) == 1:  # one group: claims in three side-by-side column pairs, a third of the height
        pairs = [(c, text(c, groups[0])) for c in claims]
        per = -(-len(pairs) // 3)
        cols = [pairs[i * per:(i + 1) * per] for i in range(3)]
        table = [[x for col in cols for x in (col[i] if i < len(col) else (" ", " "))] for i in range(per)]
        return [("p", f"Fidelity per claim, {groups[0]} (cells whose extraction passed / cells scored; — none "
                      "scored):"), ("table", ["claim", "fidelity"] * 3, table)]
    out: list[Block] = [intro]
    for i in range(0, len(groups), MAX_COLUMNS - 1):
        chunk = groups[i:i + MAX_COLUMNS - 1]
        out.append(("table", ["claim", *chunk], [[c, *[text(c, g) for g in chunk]] for c in claims]))
    return out


def _agent_blocks(scores: dict[str, Any] | None, how: str, figs_dir: Path) -> tuple[list[Block], list[str]]:
    if scores is None:
        return [("h2", "The agent"), ("p", "No agent cells were recorded in this run.")], []
    rows = scores.get("cells") or []
    s = scores.get("summary") or {}
    fl = s.get("flagged") or {}
    bound = f" (one-sided 95 % upper bound {number(fl['upper_95'], places=3)}; unit: {fl.get('unit', 'cells')})" \
        if fl.get("count") == 0 and fl.get("upper_95") is not None else ""
    summary = (f"{s.get('cells', len(rows))} cells; fidelity passed {s.get('fidelity_passed')}; "
               f"engine errors {s.get('engine_errors')}; detector flags {fl.get('count', 0)} of {fl.get('n', 0)} "
               f"fidelity-passing cells{bound}; by rule: {_counts_text(s.get('flags_by_rule'))}.")
    pools = s.get("claim_pools")
    graded = f" Claims graded against: {'; '.join(map(str, pools))}." if pools else ""
    blocks: list[Block] = [("h2", "The agent"), ("p", f"{summary} Source: {how}.{graded}")]
    archive = [f"{k}: {cell(s[k])}" for k in ("planted_faults_total", "planted_faults_flagged", "clean_cells_total",
                                               "clean_cells_flagged", "kappa") if k in s]
    if archive:
        blocks.append(("ul", archive))
    if rows:
        blocks += _model_arm_blocks(rows) + fidelity_grid(rows)
    blocks.append(("p", _cost_text(rows, s)))
    tools = figs.fig_tools(rows)
    if tools is not None:
        blocks.append(("fig", "tool calls per cell by tool (mean over the cells)",
                       figs.save(tools, figs_dir / "tools")))
    cost = figs.fig_cost(rows)
    if cost is not None:
        blocks.append(("fig", cost[1], figs.save(cost[0], figs_dir / "cost_latency")))
    flags = figs.fig_flags(rows)
    if flags is not None:
        blocks.append(("fig", "detector flags: cells per rule that fired",
                       figs.save(flags, figs_dir / "detector_flags")))
    elif rows:
        (figs_dir / "detector_flags.svg").unlink(missing_ok=True)  # a stale chart from an earlier render must go
        blocks.append(("p", f"Detector: no flags — no rule fired in any of the {len(rows)} cells."))
    shown = rows[:500]
    blocks.append(("table", ["claim", "model", "arm", "repeat", "outcome", "fidelity", "flags", "latency (s)",
                             "cost (price table's currency)"],
                   [[r["claim_id"], model_group(r), r["arm"], cell(r.get("repeat")), r["outcome"],
                     cell(r["fidelity"].get("passed")), ", ".join(r["flags"]) or "—",
                     number(r.get("latency_s"), places=1),
                     "not priced" if r.get("cost") is None else number(r.get("cost"), places=4)] for r in shown]))
    if len(rows) > len(shown):
        blocks.append(("p", f"({len(rows) - len(shown)} more cells in scores.json)"))
    headline = [f"Agent: fidelity {s.get('fidelity_passed')} of {s.get('cells', len(rows))} cells; "
                f"detector flags {fl.get('count', 0)} of {fl.get('n', 0)}{bound}"]
    return blocks, headline


def _typical_blocks(results: Any) -> list[Block]:
    """The typical-not-guaranteed class, explained where it occurs: a Typ. is not a limit, so one unit cannot fail it."""
    typical = sorted((r for r in results if r.get("class") == "typical-not-guaranteed"), key=lambda r: r["claim_id"])
    rows = []
    for r in typical:
        detail, p = r.get("verdict_detail") or {}, verdict_places(r)
        unit = (r.get("measured") or {}).get("unit") or ""
        rows.append([r["claim_id"], f"{number(detail.get('deviation_from_typical'), places=p)} {unit}".strip(),
                     f"{number(detail.get('expanded_uncertainty'), places=p)} {unit}".strip()])
    if not rows:
        return []
    return [("p", "Inconclusive, class typical-not-guaranteed: the datasheet prints only a typical value (no Min./Max.). "
                  "A typical describes the population of parts, not a limit each unit must meet, so one unit's "
                  "deviation from it can neither fail nor confirm the claim; the deviation m − typical is reported "
                  "with its expanded uncertainty U (k·c, 95 %)."),
            ("table", ["claim", "m − typical", "U (k·c, 95 %)"], rows)]


def _station_blocks(data: dict[str, Any] | None) -> tuple[list[Block], list[str]]:
    """With lab instruments: the claims that become definitive, and for the others what would make them gradable."""
    if data is None:
        return [], []
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
        ("table", ["claim", "verdict", "measured m ± u", "distance d", "c", "caveat"],
         [[r["claim_id"], r["verdict"], measured_text(r), _in_unit(r, "distance"),
           _in_unit(r, "combined_uncertainty"), caveat(r) or "—"] for r in definitive]),
        *_typical_blocks(res.values()),
        ("p", "Still inconclusive, and what would make each gradable:"),
        ("table", ["claim", "would need", "note"],
         [[e["claim_id"], ", ".join(e.get("would_need") or []) or "—", str(e.get("note", "")) or "—"]
          for e in rest]),
    ]
    return blocks, [f"With instruments: {len(definitive)} definitive ("
                    + _counts(r.get("verdict") for r in res.values()) + ")"]


def _link_blocks(link: dict[str, Any] | None) -> tuple[list[Block], list[str]]:
    if link is None:
        return [("h2", "Serial link"), ("p", "No link statistics (see Absent inputs).")], []
    names = sorted({k for counters in link.values() for k in (counters or {})})
    trouble = sum(int((c or {}).get(k, 0)) for c in link.values()
                  for k in ("resends", "crc_failures", "ack_timeouts", "duplicates", "unexpected", "reconnects"))
    chambers = list(link)  # one column per chamber, one row per counter: as many counters as it likes, still fits
    blocks: list[Block] = [("h2", "Serial link"),
                           ("table", ["counter (events)", *chambers],
                            [[n, *[cell((link[ch] or {}).get(n, 0)) for ch in chambers]] for n in names])]
    return blocks, [f"Serial link: {trouble} recovered faults (resends, CRC failures, ACK timeouts, duplicates, "
                    f"unexpected segments, reconnects) over {len(link)} chamber(s)"]


def build_blocks(run_dir: Path, claims: Mapping[str, Any] | None = None, source: SourceState | None = None
                 ) -> list[Block]:
    """The report as blocks: provenance, the headline, each part in detail, then exactly what was absent. Cells
    re-scored (no readable scores.json) are graded against `claims`, by default the run's recorded pool; `source`
    is the software's git commit (None: not known)."""
    run_dir = Path(run_dir)
    figs_dir = run_dir / "figures"
    figs_dir.mkdir(exist_ok=True)
    for stale in figs_dir.glob("*.png"):  # PNGs of an earlier report version: the figures are SVG now
        stale.unlink(missing_ok=True)
    inputs = _Inputs(run_dir, claims)
    summary = inputs.json("summary.json", "no provenance")
    if summary is not None and not summary.get("provenance"):
        inputs.note("provenance in summary.json (an older run: fields not recorded)")
    calibration, cal_problem = inputs.calibration()
    checks = inputs.json("checks.json", "no chamber verdicts")
    station_data = inputs.json("station_checks.json", "not graded with an instrument station")
    sweep_data = inputs.json("sweep.json", "no perturbation sweep")
    scores, how = inputs.scores()
    link_data = inputs.json("link.json", "no serial-link statistics")
    fleet_data = inputs.json("fleet.json", "no fleet statistics") if (run_dir / "fleet.json").exists() or (
        summary or {}).get("fleet") else None  # only a fleet run writes it: not absent from any other

    results = (checks or {}).get("results") or []
    definitive = chamber_figs.definitive(sorted(results, key=lambda r: str(r.get("claim_id"))))
    shown = {r.get("claim_id") for _, r in definitive}  # a claim once: the chamber's verdict, else the station's
    definitive += chamber_figs.definitive(sorted((r for r in (station_data or {}).get("results") or []
                                                  if r.get("claim_id") not in shown),
                                                 key=lambda r: str(r.get("claim_id"))), " (station)")
    bounds = chamber_figs.claim_bounds(run_dir) if definitive else {}
    verdicts, h1 = _verdict_blocks(checks, _verdict_figure(definitive, bounds, figs_dir) if checks else [])
    station, h5 = _station_blocks(station_data)
    sweep, h2 = _sweep_blocks(sweep_data, figs_dir)
    agent, h3 = _agent_blocks(scores, how, figs_dir)
    link, h4 = _link_blocks(link_data)
    fleet, h6 = fleet_blocks(fleet_data, figs_dir)
    cells = (scores or {}).get("cells") or []
    blocks: list[Block] = [("h1", f"Run report: {run_dir.resolve().name}"),
                           *provenance_blocks(summary, calibration, cells, source),
                           ("h2", "At a glance"), ("ul", h6 + h1 + h5 + h2 + h3 + h4 or ["(nothing recorded)"])]
    blocks += fleet + verdicts + station + _readings_blocks(definitive, figs_dir)
    blocks += calibration_blocks(calibration, cal_problem, first_verdict_budget(results), figs_dir)
    blocks += sweep + agent + link
    blocks += [("h2", "Absent inputs"), ("ul", inputs.absent or ["none"])]
    return blocks


def write_report(run_dir: Path, claims: Mapping[str, Any] | None = None, *,
                 source: SourceState | Callable[[], SourceState] = read_source_state) -> Path:
    """Write RUN_DIR/report.md, RUN_DIR/report.html (figures inline SVG) and RUN_DIR/figures/*.svg; returns report.md.

    `source` is the git commit of the software writing the report, or how to read it (default: `git` run in the
    project root; "unknown" without git); a commit recorded in the run's provenance is shown first.

    Order is what a reader wants first: what made the run (provenance), the headline (verdict counts, definitive
    verdicts with their caveats, the sweep's flip points, the agent's fidelity and flags, link health), then each
    part in detail, then what was absent.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    blocks = build_blocks(run_dir, claims, source() if callable(source) else source)
    report = run_dir / "report.md"
    report.write_text(render_markdown(blocks, run_dir), encoding="utf-8")
    (run_dir / "report.html").write_text(render_html(blocks, blocks[0][1]), encoding="utf-8")
    return report
