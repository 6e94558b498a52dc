"""The chamber part of `run --fleet`: every claim graded on every chamber of a fleet, the units and fleet verdicts
written to the run folder, the summary's entries.

Why beside protocols/bench_job.py and not in it: a bench grades one chamber of each kind and then sweeps and
grades again with the station; a fleet grades each chamber in one planned campaign with its own station (the
instrument protocols where the station can run them, protocols.registry.selected_protocol), all chambers in
parallel (protocols/fleet_campaign.py), and what it writes is the fleet's: `fleet.json` (protocols/fleet_job.py's
result for every claim: units, fleet record, labs, chambers) whole or not at all. The report's fleet section
(agent/scoring/report_fleet.py) and the run index (one row per claim: its fleet verdict) read it.

Ctrl-C or SIGTERM: the first stops every chamber's campaign between two reads (the verdicts decided are kept:
fleet.json says `interrupted`), then bench_job.LabInterrupted carries the summary so far, as for a bench.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from protocols.bench_job import JobProgress, LabInterrupted, count
from protocols.claims import Claim
from protocols.files import write_json_atomic
from protocols.fleet_campaign import Campaign, MemberRun, grade_campaign
from protocols.fleet_job import campaign_result

FLEET_FILE = "fleet.json"


def fleet_summary(result: Mapping[str, Any], run_dir: Path) -> dict[str, Any]:
    """The summary's entries of a fleet run: fleet verdict counts, the fleet's size, each claim's fleet verdict,
    the claims with an apparatus error on some unit, each chamber's link counters."""
    sections = result["results"]
    verdicts = {s["claim_id"]: (s.get("fleet") or {}).get("verdict", "none") for s in sections}
    classes = {s["claim_id"]: (s.get("fleet") or {}).get("inconclusive_class") for s in sections}
    errors = sorted(s["claim_id"] for s in sections if any(u["verdict"] == "error" for u in s["units"]))
    opened = [c for c in result["chambers"] if c["kind"] is not None]
    return {"verdicts": count(verdicts.values()),
            "fleet": {"source": result["source"], "chambers": len(result["chambers"]), "opened": len(opened),
                      "units": sum(len(s["units"]) for s in sections), "verdicts": verdicts, "classes": classes,
                      "units_by_claim": {s["claim_id"]: len(s["units"]) for s in sections},
                      "file": str(run_dir / FLEET_FILE)},
            "error_claims": errors}


def run_fleet_lab_job(claims: Sequence[Claim], campaign: Campaign, run_dir: Path, *, rows: int,
                      progress: JobProgress, wrap: Callable[[str, Any], Any] = lambda member, chamber: chamber,
                      graded: Callable[[str, Claim], None] = lambda member, claim: None,
                      on_sections: Callable[[list[dict[str, Any]]], None] = lambda sections: None) -> dict[str, Any]:
    """Grade `claims` on every opened chamber of `campaign` (the caller opened it and closes it safe), write
    fleet.json, and return the summary's entries. `wrap`/`graded` as fleet_campaign.grade_campaign;
    `on_sections` gets every claim's fleet section once fleet.json is written. A stop signal ends every campaign
    between two reads and raises LabInterrupted with what was decided (fleet.json holds it)."""
    from chamber.stop import StopRequest, stop_on_signals

    lock = threading.Lock()
    live = [r for r in campaign.runs if r.chamber is not None]
    progress.say(f"checks: {len(claims)} claims on the fleet {campaign.fleet.source}: {len(live)} chamber(s), one "
                 "planned campaign each (calibration in the same plan), in parallel")
    progress.start("checks", len(live))

    def decided(member: str, claim: Claim) -> None:
        with lock:
            progress.detail(f"{member}: {claim.id}")
        graded(member, claim)

    def finished(run: MemberRun) -> None:
        with lock:
            progress.advance(f"{run.member.id}: {len(run.results)} verdicts")

    with stop_on_signals(StopRequest()) as stop:
        grade_campaign(campaign, claims, rows=rows, stop=stop, wrap=wrap, graded=decided, finished=finished)
    result = campaign_result(campaign, claims)
    result.pop("safe_state", None)  # the chambers are still open: their safe state is the run summary's
    write_json_atomic(run_dir / FLEET_FILE, result)
    on_sections(result["results"])
    summary = fleet_summary(result, run_dir)
    summary["link"] = {r.member.id: r.chamber.link_stats() for r in live
                       if callable(getattr(r.chamber, "link_stats", None))}
    if campaign.interrupted:
        summary["not_graded"] = len(result.get("not_graded", []))
        progress.say(f"interrupted: the verdicts decided are kept in {run_dir / FLEET_FILE}")
        raise LabInterrupted(summary, "interrupted")
    return summary


def fleet_summary_lines(d: Mapping[str, Any]) -> list[str]:
    """The run summary's fleet lines: the fleet, then each claim's fleet verdict (and class) over its units."""
    f = d.get("fleet")
    if not f:
        return []
    lines = [f"fleet:      {f['source']}: {f['opened']} of {f['chambers']} chambers, {f['units']} unit verdicts "
             f"-> {f['file']}"]
    for claim_id, verdict in f["verdicts"].items():
        cls = (f.get("classes") or {}).get(claim_id)
        lines.append(f"  {claim_id:<42} {verdict}{f' ({cls})' if cls else ''} over "
                     f"{(f.get('units_by_claim') or {}).get(claim_id, '?')} units")
    return lines
