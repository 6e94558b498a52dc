"""`check --fleet` and `sweep --fleet`: grade claims on every chamber of a fleet, then each claim's units and the
fleet verdict; and the text the CLI prints for them.

Why a job module of its own: the fleet's work (open every chamber, one campaign each in parallel, units, fleet
statistics) is protocols-floor work like check_job's, but its result has another shape (`units`, `fleet`, `labs`
per claim and one entry per chamber), and `run --fleet` (agent/main_job.py) builds on the same functions.

The result (`--json`): one claim → its `claim_id`, `units` (each `chamber/position` with today's verdict, value ± u
in the claim's unit and budget), `fleet` (calibration/fleet_records.py: the verdict, its rule and version, the
tolerance interval or population mean, ISO 5725-2 s_r, s_L, s_R, h/k, outliers and exclusions), `labs` (ISO 13528
z, z' and E_n when two or more labs were graded); `--all` → the same per claim under `results`. Beside them:
`chambers` (each chamber: id, board, kind, lab, how its campaign ended), the fleet's `source`, every chamber's
`safe_state`, and `interrupted`/`not_graded` or `incomplete` as the exit-code rule reads them.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from firmware_bridge.progress_line import TERMINAL, fit_text, line_limit, table_lines
from protocols.claims import Claim
from protocols.fleet_campaign import Campaign, fleet_chambers, grade_campaign
from protocols.fleet_file import Fleet, load_fleet
from protocols.fleet_units import Unit, fleet_of, units_of
from protocols.sweep import SweepError

Say = Callable[[str], None]


def fleet_from(spec: str | Path) -> Fleet:
    """The fleet of `--fleet` (a file, or demo:N with the simulated instrument station beside each chamber)."""
    from chamber.instruments import sim_station_file

    return load_fleet(spec, demo_station=sim_station_file())


def claim_units(campaign: Campaign, claim: Claim) -> list[Unit]:
    """Every unit of `claim` over the fleet's chambers, in fleet order."""
    out: list[Unit] = []
    for run in campaign.runs:
        for result in run.results:
            if result.claim.id == claim.id:
                out.extend(units_of(run.member.id, result, lab=run.member.lab, station=run.station))
    return out


def claim_section(campaign: Campaign, claim: Claim) -> dict[str, Any]:
    """One claim's fleet section: units, fleet record, labs, and each chamber's own verdict."""
    units = claim_units(campaign, claim)
    chambers = {run.member.id: {"verdict": r.verdict.verdict, "class": r.verdict.inconclusive_class,
                                "measured": None if r.verdict.measured is None else str(r.verdict.measured)}
                for run in campaign.runs for r in run.results if r.claim.id == claim.id}
    return {"claim_id": claim.id, "component": claim.component, "parameter": claim.parameter,
            "claim_unit": claim.unit, "units": [u.to_dict() for u in units], **fleet_of(claim, units),
            "by_chamber": chambers}


def campaign_result(campaign: Campaign, claims: Sequence[Claim]) -> dict[str, Any]:
    """Every claim's section (in claim order) and the fleet's chambers, as `--json` gives them."""
    sections = [claim_section(campaign, c) for c in claims]
    errors = sum(u["verdict"] == "error" for s in sections for u in s["units"])
    not_opened = sum(r.error is not None and r.opened is None for r in campaign.runs)
    incomplete = {k: v for k, v in (("error_verdicts", errors), ("chambers_not_opened", not_opened)) if v}
    stopped = {"interrupted": True, "not_graded": sorted({c for r in campaign.runs for c in r.not_graded})} \
        if campaign.interrupted else {}
    return {"results": sections, "source": campaign.fleet.source,
            "chambers": [r.describe() for r in campaign.runs], "seconds": round(campaign.seconds, 1),
            **stopped, "safe_state": campaign.safe_state, **({"incomplete": incomplete} if incomplete else {})}


def check_fleet(claims: Sequence[Claim], fleet: str | Path, *, rows: int, say: Say, limits: str | Path | None = None,
                seed: int = 0, one: bool = False) -> dict[str, Any]:
    """Grade `claims` on every chamber of `fleet` (`check --fleet`); `one`: the result of one claim at the top level
    (its units, fleet and labs beside the chambers), else every claim under `results`. Ctrl-C or SIGTERM stops
    every campaign between two reads (the verdicts decided are kept; a second one stops at once); every chamber
    is left safe either way."""
    campaign = grade_fleet(claims, fleet, rows=rows, say=say, limits=limits, seed=seed)
    result = campaign_result(campaign, claims)
    return one_claim(result) if one else result


def grade_fleet(claims: Sequence[Claim], fleet: str | Path, *, rows: int, say: Say, limits: str | Path | None = None,
                seed: int = 0) -> Campaign:
    """The campaign of `claims` on every chamber of `fleet`, stop signals turned into a stop request meanwhile."""
    from chamber.stop import StopRequest, stop_on_signals

    chosen = fleet_from(fleet)
    say(f"fleet {chosen.source}: {len(chosen.members)} chamber(s); grading {len(claims)} claim(s) on each "
        "(one planned campaign per chamber, in parallel)")
    with stop_on_signals(StopRequest()) as stop, fleet_chambers(chosen, say=say, seed=seed, limits=limits) as campaign:
        grade_campaign(campaign, claims, rows=rows, stop=stop)
    return campaign


def one_claim(result: dict[str, Any]) -> dict[str, Any]:
    """A one-claim result: that claim's section at the top level, beside the chambers."""
    rest = dict(result)
    section = rest.pop("results")[0]
    return {**section, **rest}


# ------------------------------------------------------------------------------------------------- sweep
def _sweep_span(claim: Claim, record: Mapping[str, Any], name: str) -> tuple[Decimal, Decimal, int]:
    """Where a fleet sweep starts and ends (start > end for a shrinking upper bound or value) and its decimals."""
    interval, population = record.get("tolerance_interval"), record.get("population_mean")
    if interval:
        low, high = Decimal(interval["lower_reported"]), Decimal(interval["upper_reported"])
        places = int(interval["places"]) + 1
    elif population:
        mean, big_u = Decimal(population["mean_reported"]), Decimal(population["expanded_reported"])
        low, high = mean - big_u, mean + big_u
        places = max(0, -int(big_u.as_tuple().exponent)) + 1
    else:
        raise SweepError(f"claim {claim.id}: the fleet verdict ({record['verdict']}: {record['reason']}) has no "
                         "tolerance interval or population mean to move a bound through")
    width = max(high - low, Decimal(1).scaleb(-places))
    t = Decimal(claim.tolerance.value) if name == "value" and claim.kind == "accuracy" else Decimal(0)
    if name == "low":
        return low - width, high + width, places
    if name == "value":
        return high + t + width, low - t - width, places
    return high + width, low - width, places


def sweep_fleet(claim: Claim, fleet: str | Path, *, steps: int, rows: int, say: Say, csv: str | None = None,
                limits: str | Path | None = None, seed: int = 0) -> dict[str, Any]:
    """`sweep --fleet`: the claim's units measured on every chamber of the fleet, held fixed, and the claim's bound
    (protocols.sweep.default_bound) moved through the fleet's tolerance interval (or population interval): the
    fleet verdict at each of `steps` bounds, every unit re-graded by the same rule at each. `csv`: the rows."""
    from dataclasses import replace

    from protocols.sweep import _with_bound, default_bound
    from protocols.verdict import verdict

    campaign = grade_fleet([claim], fleet, rows=rows, say=say, limits=limits, seed=seed)
    d = one_claim(campaign_result(campaign, [claim]))
    if d.get("interrupted") or not d.get("fleet"):
        return {**d, "rows": []}
    name = default_bound(claim)
    start, end, places = _sweep_span(claim, d["fleet"], name)
    units = claim_units(campaign, claim)
    table = []
    for i in range(steps):
        bound = (start + (end - start) * Decimal(i) / Decimal(steps - 1)).quantize(Decimal(1).scaleb(-places))
        moved = _with_bound(claim, name, bound)  # type: ignore[arg-type]
        regraded = [replace(u, verdict=verdict(moved, u.measurement))
                    if u.measurement is not None and u.measurement.status == "ok" else u for u in units]
        record = fleet_of(moved, regraded)["fleet"] or {}  # type: ignore[arg-type]
        interval = record.get("tolerance_interval") or {}
        table.append({"bound": str(bound), "verdict": record.get("verdict"), "class": record.get(
            "inconclusive_class"), "failing_units": len((record.get("units") or {}).get("failing", [])),
            "lower": interval.get("lower_reported"), "upper": interval.get("upper_reported")})
    if csv:
        import csv as csv_module
        import io

        from protocols.files import write_file_atomic

        out = io.StringIO()
        writer = csv_module.DictWriter(out, ["bound", "verdict", "class", "failing_units", "lower", "upper"])
        writer.writeheader()
        writer.writerows(table)
        write_file_atomic(Path(csv), out.getvalue(), force=True)
    return {**d, "bound": name, "rows": table, "files": {"csv": csv}}


# ------------------------------------------------------------------------------------------------- text
def _measured(u: Mapping[str, Any]) -> str:
    m = u.get("measured")
    return "—" if not m else f"{m['value']} ± {m['u']} {m['unit']}"


def _stats(f: Mapping[str, Any]) -> str:
    p = f.get("precision")
    if not p:
        return "s_r, s_L, s_R: — (needs every unit's repeated readings)"
    unit = f["limits"]["unit"]
    return (f"s_r {p['s_r']:.3g} {unit}, s_L {p['s_L']:.3g} {unit}, s_R {p['s_R']:.3g} {unit} "
            f"(ISO 5725-2, {p['p']} units, {p['n_total']} readings)")


def _screening(f: Mapping[str, Any]) -> list[str]:
    s = f.get("screening") or {}
    h, hc = s.get("h") or {}, (s.get("h_critical") or {}).get("at_1")
    lines = []
    for o in s.get("outliers", []):
        mandel = (f"; Mandel's h {h[o['unit']]:+.3g}" + (f" (1 % value {hc:.3g})" if hc else "")
                  if h.get(o["unit"]) is not None else "")
        lines.append(f"  excluded (outlier): {o['unit']} by {o['test']} ({o['statistic']:.4g} > 1 % value "
                     f"{o['critical_1']:.4g}){mandel}; its own verdict stands")
    if s.get("flagged"):
        lines.append(f"  flagged beyond 1 % (h/k, kept): {', '.join(s['flagged'])}")
    if s.get("stragglers"):
        lines.append(f"  stragglers (5 %..1 %, kept): {', '.join(s['stragglers'])}")
    return lines


def fleet_line(section: Mapping[str, Any]) -> str:
    """The fleet verdict of one claim in one line (what the run's summary prints)."""
    f = section.get("fleet")
    if not f:
        return f"{section['claim_id']}: no fleet verdict ({section.get('fleet_error') or 'no unit was graded'})"
    cls = f" ({f['inconclusive_class']})" if f.get("inconclusive_class") else ""
    return f"{section['claim_id']}: {f['verdict']}{cls} over {f['units']['total']} units: {f['reason']}"


def labs_lines(labs: Mapping[str, Any] | None) -> list[str]:
    if not labs:
        return []
    if "error" in labs:
        return [f"  labs: {labs['error']}"]
    head = (f"  labs (ISO 13528 Algorithm A: x* = {labs['consensus']['x_star']:.7g}, sigma_pt = "
            f"{labs['sigma_pt']:.3g}, {labs['sigma_pt_source']}):")
    rows = [f"    {s['lab']:<16} {s['value']:>14.7g}  z = {s['z']:+.2f} ({s['z_performance']})"
            + ("" if s["en"] is None else f", E_n = {s['en']:+.2f} ({s['en_performance']})") for s in labs["scores"]]
    return [head, *rows]


def section_text(section: Mapping[str, Any], *, all_units: bool, width: Any = None) -> list[str]:
    """One claim's fleet verdict, its units' table (`all_units`), statistics, screening and labs; the table rows
    fitted to `width` (table_lines: broken between cells), the other lines left to the caller's fit_text."""
    units = section["units"]
    lines = [fleet_line(section)]
    if all_units:
        widths = (30, 13, 30, 0)
        header = table_lines([("  unit", "verdict", "value ± u", "class")], widths, width, indent="      ")
        limit = line_limit(width)
        lines += [*header, "  " + "-" * (min(max(len(x) for x in header), limit or 10**6) - 2)]
        lines += table_lines([(f"  {u['unit']}", u["verdict"], _measured(u), u["class"] or "") for u in units],
                             widths, width, indent="      ")
    f = section.get("fleet")
    if f:
        lines.append("  " + _stats(f))
        lines += _screening(f)
        lines.append(f"  rule: {f['rule']} (version {f['rule_version']})")
    return lines + labs_lines(section.get("labs"))


def fleet_text(d: Mapping[str, Any], width: Any = TERMINAL) -> str:
    """`check --fleet`'s text: one claim with every unit, or every claim's fleet verdict; the chambers at the end.
    On a terminal every line fits its width (firmware_bridge.progress_line: broken at spaces or between cells,
    never inside a number); piped, whole lines."""
    from protocols.exit_codes import unconfirmed_note

    sections = d["results"] if "results" in d else [d]
    lines = [f"fleet {d['source']}: {len(d['chambers'])} chamber(s), "
             f"{sum(len(s['units']) for s in sections)} unit verdict(s) in {d.get('seconds', '?')} s"]
    for s in sections:
        lines += section_text(s, all_units="results" not in d, width=width)
    counts = Counter((s.get("fleet") or {}).get("verdict", "none") for s in sections)
    lines.append("fleet verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for c in d["chambers"]:
        if c["error"] or c["interrupted"]:
            lines.append(f"chamber {c['id']}: " + (c["error"] or f"stopped, {len(c['not_graded'])} not graded"))
    if d.get("interrupted"):
        lines.append(f"interrupted: {len(d.get('not_graded', []))} claim(s) not graded on some chamber")
    if note := unconfirmed_note(d.get("safe_state")):
        lines.append(note)
    return fit_text("\n".join(lines), width)
