"""The report's account of how a run was made: provenance, the calibration, one budget in full, weak-pass caveats.

Why here and not in each section: these are what an auditor reads before trusting any verdict — what ran it
(emulated boards or real chambers and their ports, seed, model, software version and git commit, when, for how
long), what the barometers' cross-sensor calibration found (a table and a figure of the offsets ± U), and one uncertainty budget taken apart line by line (GUM, JCGM 100:
components, sensitivity coefficients, contributions, u_c, ν_eff, k, U) so that the arithmetic behind a verdict
can be redone by hand. Older run folders lack some of it; every missing field says "not recorded".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from agent.scoring import report_figures as figs
from agent.scoring.report_chamber_figures import fig_offsets
from agent.scoring.report_format import k_text, number, places_for_u, time_text, with_u
from agent.scoring.report_rows import expanded_text
from agent.scoring.report_git import UNKNOWN, SourceState

Block = tuple
NOT_RECORDED = "not recorded"


# ------------------------------------------------------------------------------------------------ provenance
def _chambers(prov: dict[str, Any], summary: dict[str, Any]) -> str:
    chambers = prov.get("chambers")
    if chambers:
        parts = []
        for c in chambers:
            how = {True: "emulated board", False: "real chamber"}.get(c.get("emulated"), "emulated or real not recorded")
            port = c.get("port") or f"port {NOT_RECORDED}"
            config = f", config {c['config']}" if c.get("config") else ""
            parts.append(f"{c.get('kind') or '?'}: {how} on {port}{config}")
        return "; ".join(parts)
    backend = summary.get("backend")
    if backend:  # an older summary names the backend only
        return f"{backend} (ports {NOT_RECORDED})"
    return NOT_RECORDED


def _duration(prov: dict[str, Any], summary: dict[str, Any]) -> str:
    seconds = prov.get("seconds", summary.get("seconds"))
    return f"{number(seconds, places=1)} s" if seconds is not None else NOT_RECORDED


def _model(prov: dict[str, Any], summary: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    if prov.get("model"):
        return str(prov["model"])
    if (summary.get("agent") or {}).get("model"):
        return str(summary["agent"]["model"])
    models = sorted({str(r["model"]) for r in cells if r.get("model")})
    return ", ".join(models) + " (from the agent cells)" if models else NOT_RECORDED


def _commit(prov: dict[str, Any], source: SourceState | None) -> str:
    """The run's git commit as its provenance recorded it, else the report writer's (said to be so), else unknown."""
    recorded = prov.get("git_commit")
    if recorded:
        dirty = prov.get("git_dirty")
        return SourceState(str(recorded), dirty if isinstance(dirty, bool) else None).text()
    if source is None or source.commit == UNKNOWN:
        return f"{UNKNOWN} (not recorded with the run, and no git where the report was written)"
    return f"{source.text()}; read when this report was written (the run did not record its own)"


def provenance_blocks(summary: dict[str, Any] | None, calibration: Any | None,
                      cells: list[dict[str, Any]], source: SourceState | None = None) -> list[Block]:
    """The first section of the report: what made this run, from summary.json's `provenance` (older folders:
    the fields they have, the rest "not recorded")."""
    summary = summary or {}
    prov = summary.get("provenance") or {}
    software = prov.get("software_version") or (
        f"{calibration.software_version} (from calibration.json)" if calibration is not None else NOT_RECORDED)
    started, finished = prov.get("started_utc"), prov.get("finished_utc")
    date = (f"{time_text(started)} to {time_text(finished)}" if started and finished
            else time_text(started) if started else NOT_RECORDED)

    def listed(key: str) -> str:
        value = prov.get(key)
        if value is None:
            return NOT_RECORDED
        if isinstance(value, (list, tuple)):
            return ", ".join(str(v) for v in value) or "none"
        return str(value)

    station = prov.get("station") or (summary.get("station") or {}).get("file")
    rows = [["chambers", _chambers(prov, summary)],
            ["seed", NOT_RECORDED if prov.get("seed") is None else str(prov["seed"])],
            ["model", _model(prov, summary, cells)],
            ["software version", software],
            ["git commit", _commit(prov, source)],
            ["date", date],
            ["duration", _duration(prov, summary)],
            ["instrument station", str(station) if station else ("none" if "station" in prov else NOT_RECORDED)],
            ["limits file", "none" if "limits" in prov and not prov["limits"] else listed("limits")],
            ["claim sources", listed("claims_sources")]]
    blocks: list[Block] = [("h2", "Provenance"), ("table", ["field", "value"], rows)]
    if not prov:
        blocks.append(("p", "This run folder has no recorded provenance (summary.json without `provenance`: an "
                            "older run or a matrix folder); fields are filled from what it does record."))
    return blocks


# ------------------------------------------------------------------------------------------------ budgets
def budget_blocks(budget: Any, title: str) -> list[Block]:
    """One budget in full: every component, then u_c = sqrt(Σ (c_i·u_i)²), ν_eff, k = t_p(ν_eff), U = k·u_c.

    `budget` is a calibration.budget.UncertaintyBudget; its derived figures are recomputed from the
    components (never trusted from the file)."""
    unit = budget.unit
    uc = budget.combined
    p = places_for_u(uc, 3)
    rows = [[c.name, c.evaluation, number(c.u, sig=3), "∞" if c.dof == float("inf") else number(c.dof, places=0),
             number(c.sensitivity, sig=3), number(c.contribution, places=p), c.basis] for c in budget.components]
    nu = budget.effective_dof
    return [
        ("p", f"{title}: {budget.quantity}, in {unit}."),
        ("table", ["component x_i", "type", "u(x_i) (unit of x_i)", "ν_i", "sensitivity c_i",
                   f"contribution u_i(y) ({unit})", "basis"],
         rows),
        ("ul", ["contribution of each component u_i(y) = |c_i|·u(x_i), in the unit of the result",
                f"combined standard uncertainty u_c = sqrt(Σ u_i(y)²) = {number(uc, places=p)} {unit}",
                f"effective degrees of freedom ν_eff (Welch–Satterthwaite) = "
                + ("∞" if nu == float("inf") else number(nu, places=1)),
                f"coverage factor k = t_{{{budget.coverage:g}}}(ν_eff) = {number(budget.coverage_factor, places=3)}",
                f"expanded uncertainty U = k·u_c = {number(budget.expanded, places=p)} {unit} "
                f"({number(budget.coverage * 100, places=0)} % coverage)"]),
    ]


def _offsets_figure(calibration: Any, expanded: dict[str, float], figs_dir: Path | None) -> list[Block]:
    prm = calibration.parameters
    fig = fig_offsets(sorted(prm.offsets), dict(prm.offsets), expanded, prm.unit) if figs_dir is not None else None
    if fig is None:
        return []
    return [("fig", f"Calibration offsets of the {calibration.chamber} chamber's barometers: offset ± U (expanded, "
                    f"95 %, k from each offset's ν, as in the table) in {prm.unit}, against zero (the four-sensor "
                    "mean)", figs.save(fig, figs_dir / "offsets"))]


def calibration_blocks(calibration: Any | None, problem: str | None,
                       budget_from_verdict: tuple[str, Any] | None, figs_dir: Path | None = None) -> list[Block]:
    """The cross-sensor calibration (each barometer's offset from the four-sensor mean, with u and ν), then one
    budget in full: the first offset's (its sensitivities 3/4 and −1/4 show how the four means combine), or,
    without a calibration, the budget behind the first definitive verdict."""
    from calibration.budget import UncertaintyBudget, coverage_factor

    blocks: list[Block] = [("h2", "Calibration and an uncertainty budget")]
    if calibration is None:
        blocks.append(("p", f"No cross-sensor calibration: calibration.json is {problem or 'absent'}."))
    else:
        prm = calibration.parameters
        offsets = (calibration.budgets or {}).get("offsets") or {}
        budgets = {name: UncertaintyBudget.from_dict(offsets[name]) for name in offsets}
        expanded = {name: b.expanded for name, b in budgets.items()}
        rows = []
        for name in sorted(prm.offsets):
            p = places_for_u(prm.offset_u[name])
            k = budgets[name].coverage_factor if name in budgets else None
            rows.append([name, _expanded(prm.offsets[name], prm.offset_u[name], k, p),
                         number(prm.offset_u[name], places=p),
                         "∞" if prm.offset_dof.get(name) is None else number(prm.offset_dof[name], places=0)])
        p_mean = places_for_u(prm.mean_u)
        mean_k = coverage_factor(math.inf if prm.mean_dof is None else prm.mean_dof, 0.95)
        blocks += [
            ("p", f"Cross-sensor calibration of the {calibration.chamber} chamber ({calibration.config}), "
                  f"{time_text(calibration.date)}: {prm.n} rows per barometer after {prm.settle_rows} settling "
                  f"rows at osr {prm.osr}. Four-sensor mean {_expanded(prm.mean, prm.mean_u, mean_k, p_mean, prm.unit)} "
                  f"(u = {number(prm.mean_u, places=p_mean)} {prm.unit}, "
                  f"ν = {'∞' if prm.mean_dof is None else number(prm.mean_dof, places=0)}); spread of the unit "
                  f"means {number(prm.spread, places=p_mean)} {prm.unit}. Offset = unit mean − four-sensor mean, "
                  "as m ± U (95 %, k from its effective ν), with its standard uncertainty u and ν:"),
            ("table", ["barometer", f"offset ± U ({prm.unit}, 95 %)", f"u ({prm.unit})", "ν (degrees of freedom)"],
             rows),
            *_offsets_figure(calibration, expanded, figs_dir),
        ]
        if offsets:
            name = sorted(offsets)[0]
            return blocks + budget_blocks(UncertaintyBudget.from_dict(offsets[name]),
                                          f"The budget of the {name} offset in full")
    if budget_from_verdict is not None:
        claim_id, data = budget_from_verdict
        return blocks + budget_blocks(UncertaintyBudget.from_dict(data), f"The budget behind {claim_id} in full")
    return blocks + [("p", "No uncertainty budget was recorded in this run.")]


def _expanded(value: float, u: float, k: float | None, places: int | None, unit: str | None = None) -> str:
    """'m ± U unit (k = …)' for a calibration figure (its U = k·u), as every table of the report writes one."""
    if k is None:
        return f"{with_u(value, u, unit, places=places)} (u; k not recorded)"
    return f"{with_u(value, k * u, unit, places=places)} ({k_text(k)})"


def first_verdict_budget(results: list[dict[str, Any]]) -> tuple[str, Any] | None:
    for r in results:
        budget = (r.get("measurement_detail") or {}).get("budget")
        if r.get("verdict") in ("pass", "fail") and budget:
            return str(r["claim_id"]), budget
    return None


# ------------------------------------------------------------------------------------------------ caveats
def _bit_depth(r: dict[str, Any]) -> str:
    largest = ((r.get("measurement_detail") or {}).get("details") or {}).get("largest_code")
    seen = f"; largest code seen {largest}" if largest is not None else ""
    return ("weak pass: the chamber firmware reads the Si115x's 16-bit output (codes 0..65535" + seen + "), so "
            "this check shows only that the codes stay inside the stated 0..8388607 envelope; it cannot show that "
            "the ADC reaches 23 bits.")


def _operating_range(r: dict[str, Any]) -> str:
    m = r.get("measured") or {}
    at = f" ({expanded_text(r)})" if m.get("value") is not None else ""
    return ("weak pass: one ambient reading" + at + " lies inside 300..1200 hPa; the chamber cannot change the "
            "absolute pressure, so neither end of the range is exercised and the pass shows only that the "
            "barometers work at today's room pressure.")


#: Caveats on passes that say less than their words suggest, keyed by claim id (the verdicts and protocols carry
#: no caveat field of their own); each is written from that verdict's own record.
WEAK_PASS_CAVEATS: dict[str, Callable[[dict[str, Any]], str]] = {
    "si115x-adc-bit-depth": _bit_depth,
    "dps310-operating-range": _operating_range,
}


def caveat(r: dict[str, Any]) -> str | None:
    """The caveat for this verdict when it is a pass that needs one, else None."""
    fn = WEAK_PASS_CAVEATS.get(str(r.get("claim_id")))
    return fn(r) if fn is not None and r.get("verdict") == "pass" else None
