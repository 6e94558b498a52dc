"""The run report: RUN_DIR/report.md, SVG figures and RUN_DIR/report.html with the figures embedded.

Why it reads whatever is present: the main job writes the run directory piece by piece (summary.json,
calibration.json, checks.json, station_checks.json, sweep.json, link.json, scores.json, cells/); a report that
refused to render without every piece would hide the pieces that exist. Every input is read through one
`_Inputs`, so the closing "Absent inputs" section lists exactly the files that were missing or unreadable, and
nothing else; the claims (each verdict's limits) through the one reader of a run's pool,
protocols.claim_sources.claims_for_run, which honours `--claims`. The verdict sections are report_verdicts', each
definitive verdict one report_rows.VerdictRow that its table row and its figure row both print. Numbers go through report_format.number (one rule for every figure), figures through
report_figures and report_chamber_figures (object API, never pyplot's global state, so reports can be rendered from
threads and tests; written as SVG and embedded inline in the HTML), the two renderings through report_render.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Mapping

from agent.scoring import report_figures as figs
from agent.scoring import report_verdicts as verdicts
from agent.scoring.report_fleet import fleet_blocks
from agent.scoring.report_format import cell, number, places_of, unit_text
from agent.scoring.score import model_group
from agent.scoring.report_git import SourceState, read_source_state
from agent.scoring.report_render import render_html, render_markdown
from agent.scoring.report_run import calibration_blocks, first_verdict_budget, provenance_blocks
from agent.scoring.report_verdicts import chamber_envelope as _chamber_envelope  # noqa: F401  (tests name it here)

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
        self.given = claims  # `--claims`; None: the run's recorded pool (protocols.claim_sources.claims_for_run)
        self.absent: list[str] = []

    def claims(self) -> tuple[Mapping[str, Any], str]:
        """The claims the report grades and draws against, and where they came from: the one reader of a run's
        pool (claims_for_run), honouring `--claims`; a pool it refuses is named in Absent inputs, and its verdicts
        are then drawn without limits rather than against a guess."""
        from protocols.claim_sources import claims_for_run
        from protocols.claims import ClaimFileError

        try:
            return claims_for_run(self.run_dir, given=self.given)
        except ClaimFileError as e:
            self.note(f"claim_pool.json unreadable: {_clip(str(e), 160)} (verdicts drawn without their limits)")
            return {}, "no readable claim pool"

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
            return score_paths([self.run_dir], claims=self.given), "re-scored from cells/ (no readable scores.json)"
        self.note("cells/ (no agent cells)")
        return None, "absent"


def _clip(text: str, limit: int) -> str:
    """Shorten an error message at a word boundary, marked with an ellipsis (never a verdict's reason)."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _counts(values: Any) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(Counter(values).items(), key=lambda kv: str(kv[0])))


def _sweep_blocks(sweep: dict[str, Any] | None, claims: Mapping[str, Any], figs_dir: Path
                  ) -> tuple[list[Block], list[str]]:
    if sweep is None:
        return [("h2", "Perturbation sweep"), ("p", "No sweep (see Absent inputs).")], []
    meas = sweep.get("measured") or {}
    unit = unit_text(meas.get("unit"))
    p = places_of(meas.get("value"))
    flips = [number(f, places=p) for f in sweep.get("flip_points") or []]
    steps = sweep.get("rows") or []
    side = sweep.get("bound")
    claim = claims.get(str(sweep.get("claim_id")))
    stated = getattr(claim, side, None) if side in ("low", "high", "value") and claim is not None else None
    direction = figs.sweep_direction(sweep)
    moved = (f"the claim's {figs.BOUND_NAMES.get(side, 'bound')}"
             + (f" (stated {stated} {unit})" if stated is not None else "")
             + (f" {direction}" if direction != "as listed" else ""))
    text = (f"{sweep.get('claim_id')}: the live measurement, m = {number(meas.get('value'), places=p)} {unit} with "
            f"standard uncertainty u = {number(meas.get('u'), places=p)} {unit}, is held fixed while the sweep moves "
            f"{moved} through it; the other limits stay as stated. Combined uncertainty c = "
            f"{number(sweep.get('combined_uncertainty'), places=p)} {unit}; the verdict changes exactly at the bounds "
            f"{', '.join(flips) or '(none)'} {unit} (m ± c; the band is closed, so those points are inconclusive). "
            f"{len(steps)} steps: {_counts(r.get('verdict') for r in steps)}.")
    blocks: list[Block] = [("h2", "Perturbation sweep"), ("p", text)]
    fig = figs.fig_sweep(sweep)
    if fig is not None:
        ran = {"downward": "so it ran from right to left", "upward": "from left to right"}.get(direction, "")
        blocks.append(("fig", f"Verdict at each stated value of the claim's {figs.BOUND_NAMES.get(side, 'bound')} "
                              f"as the sweep moves it through the measurement ({direction}); the x-axis increases to "
                              f"the right{', ' + ran if ran else ''}. Dashed lines: d = ±c; dotted line: the "
                              "measured m.", figs.save(fig, figs_dir / "sweep.svg")))
    return blocks, [f"Sweep moving {moved}: verdict changes at {', '.join(flips)} {unit} (m ± c)"] if flips else []


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
    """The report as blocks: the title and contents, provenance, the headline, the rule, each part in detail, then
    exactly what was absent. Limits are drawn, and cells re-scored (no readable scores.json) graded, against
    `claims` (`--claims`), by default the run's recorded pool; `source` is the software's git commit (None: not
    known)."""
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
    pool, pool_source = inputs.claims() if checks or station_data or sweep_data else ({}, "")

    results = (checks or {}).get("results") or []
    station_results = (station_data or {}).get("results") or []
    chamber_rows = verdicts.definitive_rows(results, pool)
    station_rows = verdicts.definitive_rows(station_results, pool)
    shown = {row.claim_id for row in chamber_rows}  # a claim once in the figure: the chamber's, else the station's
    drawn = chamber_rows + verdicts.definitive_rows([r for r in station_results if r.get("claim_id") not in shown],
                                                    pool, " (station)")
    records = {str(r.get("claim_id")): r for r in results}
    records.update({f"{r.get('claim_id')} (station)": r for r in station_results})
    figure = verdicts.verdict_figure(drawn, figs_dir) if drawn else []
    chamber, h1 = verdicts.chamber_blocks(checks, chamber_rows, figure, station_data)
    station, h5 = verdicts.station_blocks(station_data, station_rows, {str(r.get("claim_id")) for r in results},
                                          figure if checks is None else [])  # no chamber verdicts: drawn here
    rule = verdicts.rule_blocks([(row, records[row.label]) for row in drawn], _pool_words(pool_source)) \
        if drawn or checks or station_data else []
    sweep, h2 = _sweep_blocks(sweep_data, pool, figs_dir)
    agent, h3 = _agent_blocks(scores, how, figs_dir)
    link, h4 = _link_blocks(link_data)
    fleet, h6 = fleet_blocks(fleet_data, figs_dir)
    cells = (scores or {}).get("cells") or []
    readings = verdicts.readings_blocks([(row.label, records[row.label]) for row in drawn], figs_dir)
    blocks: list[Block] = [("h1", f"Run report: {run_dir.resolve().name}"), ("toc",),
                           *provenance_blocks(summary, calibration, cells, source),
                           ("h2", "At a glance"), ("ul", h6 + h1 + h5 + h2 + h3 + h4 or ["(nothing recorded)"])]
    blocks += fleet + rule + chamber + station + readings
    blocks += calibration_blocks(calibration, cal_problem, first_verdict_budget(results), figs_dir)
    blocks += sweep + agent + link
    blocks += [("h2", "Absent inputs"), ("ul", inputs.absent or ["none"])]
    return blocks


def _pool_words(source: str) -> str:
    from protocols.claim_sources import GIVEN_CLAIMS

    if source == GIVEN_CLAIMS:
        return "the claims given with --claims"
    return source or "no readable claim pool (limits not drawn)"


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
