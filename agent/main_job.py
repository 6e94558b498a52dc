"""The main job (`run`, `make run`): every argument checked, then the chambers (protocols/bench_job.py), the agent's
cells over the chamber tools API (agent/agent_job.py), one run folder held by this process (agent/runfolder.py),
the report, and a summary.

Why here: the job joins the lab part and the agent part, so it lives on the agent floor; it reaches the chambers
only through protocols/ (opening, grading, the API) and the agent's cells only through HTTP. Every input (model
spec and key, claim files and ids, limits and station files) is checked before any chamber opens or a run folder
is made. Ctrl-C or SIGTERM leaves the chambers safe and the index and summary say `interrupted`, with the verdicts
decided by then (checks.json holds them). A resumed run (`--resume`, or the interrupted run picked up by default)
keeps the agent's finished cells and the chamber verdicts decided before it was stopped or killed, with or
without the agent (protocols.bench_job.run_lab_job). With `--fleet` the chamber part is protocols/fleet_run.py's:
every claim on every chamber of the fleet (one planned campaign each, in parallel; fleet.json), the live view
showing each chamber by its fleet id, and the agent's chamber tools API on the fleet's first chamber of each kind.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from firmware_bridge.error_text import exception_line
from protocols.bench_job import JobProgress, Quiet


DEFAULT_MODEL = "scripted:reader"
"""The agent's model when `run` is given none: offline, so a first `make run` needs no key."""


class MainJobRefused(ValueError):
    """A main-job request naming claims that are not in the pool it grades."""


class MainJob(BaseModel):
    """What `run` was asked to do (the command line's values, typed)."""

    model_config = ConfigDict(extra="forbid")

    port: list[str] | None = None  # real chambers' URLs; None: the emulated boards
    model: str | None = None  # --model; None: DEFAULT_MODEL, and the agent part is not one asked for by name
    runs_dir: Path
    resume: Path | None = None
    new: bool = False
    rows: int = 200
    seed: int = 0
    claims: list[str] | None = None  # --claims values: claim files or folders, or `all` / claim ids to select
    no_agent: bool = False
    station: str | None = None
    no_station: bool = False
    limits: str | None = None
    lab_credentials: Path | None = None  # the Remote Lab's .ini file, for lab+http:// ports
    fleet: str | None = None  # a fleet file or demo:N: every claim graded on every chamber of the fleet
    datasheets_dir: Path

    @property
    def model_spec(self) -> str:
        return self.model or DEFAULT_MODEL

    @classmethod
    def pick(cls, options: dict[str, Any]) -> "MainJob":
        """The job of a command line's parsed options (those named like its fields)."""
        return cls(**{k: v for k, v in options.items() if k in cls.model_fields})


def no_datasheets(claims: list[Any], datasheets: Path) -> str | None:
    """Why the agent part cannot run (not one of its claims' datasheets is in `datasheets`), or None if one is."""
    if any((datasheets / c.identity.filename).exists() for c in claims):
        return None
    from agent.agent_job import fetch_hint

    names = sorted({c.identity.filename for c in claims})
    return (f"no datasheet in {datasheets} (expected {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}); "
            + fetch_hint(datasheets))


def run_main_job(job: MainJob, progress: JobProgress = Quiet()) -> dict[str, Any]:
    """Run the main job; returns its summary (also in run_dir/summary.json and the index) with its `status`
    (protocols.exit_codes.RUN_STATUS: the same as the exit code the CLI derives from it), `interrupted: True`
    when it was stopped, `incomplete` counts when it ran to its end short of what was asked, and each chamber's
    `safe_state`. The chambers are opened before the run folder is made: a run whose chambers cannot be opened
    (an unreachable port) never started, and leaves no folder and no index row."""
    from agent.agent_job import run_agent_job
    from agent.runfolder import open_run_folder, provenance, resume_folder, utc_now
    from agent.scoring.report import write_report
    from protocols.claim_sources import (CHAMBER_PARTS_DIR, load_checked_claims, load_main_job_claims,
                                        split_claims_args, write_run_pool)
    from protocols.claims import PACKAGED_DIR
    from protocols.exit_codes import FAILED, RUN_STATUS, exit_code, outcomes_of
    from protocols.files import write_json_atomic
    from protocols.api.live_job import start_job_live_view
    from protocols.bench_job import (LabInterrupted, check_job_files, job_station_file, open_job_chambers,
                                     run_lab_job, start_chamber_api)
    from protocols.fleet_campaign import fleet_chambers
    from protocols.fleet_run import run_fleet_lab_job

    ports, (claim_paths, selected) = job.port, split_claims_args(job.claims)
    if job.fleet and (ports or job.station or job.resume):
        raise MainJobRefused("--fleet brings its own chambers and stations and starts a new run; got "
                             + ", ".join(n for n, v in (("--port", ports), ("--station", job.station),
                                                        ("--resume", job.resume)) if v))
    model = None  # a wrong model spec, missing key, claim, limits or station file fails now, before any chamber
    if not job.no_agent:
        from agent.models import client_for

        model = client_for(job.model_spec, os.environ)
    pool = load_checked_claims(claim_paths) if claim_paths else load_main_job_claims(None)
    unknown = [c for c in selected or () if c not in pool]
    if unknown:
        raise MainJobRefused(f"--claims: unknown claim id(s) {', '.join(unknown)}; known: {', '.join(sorted(pool))}")
    claims = [c for c in pool.values() if selected is None or c.id in selected]  # graded and read: the selection
    sources = [str(p) for p in claim_paths] or [PACKAGED_DIR, f"protocols/data/{CHAMBER_PARTS_DIR.name}"]
    station = None if job.fleet else job_station_file(job.station, no_station=job.no_station, real_ports=bool(ports))
    check_job_files(job.limits, station)
    if job.resume is not None:
        resume_folder(job.resume)
    skipped_agent = None if model is None else no_datasheets(claims, job.datasheets_dir)
    if skipped_agent:
        progress.say(f"agent part will be skipped: {skipped_agent}")
        model = None
    backend = "serial:" + ",".join(ports) if ports else "emulated boards on ptys"
    campaign: Any = None
    if job.fleet:  # every chamber of the fleet opened now, left safe when `opened` closes
        fleet = _fleet_of(job)
        backend = f"fleet {fleet.source}"
        opened: Any = contextlib.ExitStack()
        campaign = opened.enter_context(fleet_chambers(fleet, say=progress.say, seed=job.seed, limits=job.limits))
    else:
        opened = open_job_chambers(ports, seed=job.seed, limits=job.limits, say=progress.say,
                                   lab_credentials=job.lab_credentials)
    try:
        folder = open_run_folder(job.runs_dir, backend, resume=job.resume, new=job.new or bool(job.fleet))
    except BaseException:
        opened.close()
        raise
    if folder.resumed:
        progress.say(f"resuming run {folder.run_id} (finished agent cells and the chamber verdicts decided are kept; "
                     "--new starts afresh)")
    summary: dict[str, Any] = {"run_id": folder.run_id, "run_dir": str(folder.run_dir), "backend": backend}
    where: list[dict[str, Any]] = []
    views = contextlib.ExitStack()  # the live view outlives the chambers: it says how the job ended, with its report
    view: Any = None

    def record_provenance() -> None:
        summary["provenance"] = provenance(folder, finished=utc_now(), seed=None if ports else job.seed,
                                           model=None if job.no_agent else job.model_spec, chambers=where,
                                           station=station, limits=job.limits, claims_sources=sources)
    try:
        try:
            with opened, contextlib.ExitStack() as stack:
                write_run_pool(folder.run_dir, pool, sources)  # what `score` and `report` grade the cells against
                where += campaign_provenance(campaign) if campaign else opened.provenance()
                view = start_job_live_view(views, {} if campaign else opened.chambers, claims)  # one URL, every stage
                chambers, summary["live_view"], shown = view.chambers, view.url, view.progress(progress)
                progress.say(f"live view: {summary['live_view']}")

                def on_verdicts(checks: list[dict[str, Any]]) -> None:
                    view.verdicts(checks, source="chamber only")
                    for r in checks:
                        folder.index.record_verdict(folder.run_id, r)

                def on_verdict(result: dict[str, Any]) -> None:  # each as it is decided: the view shows its reason
                    view.verdicts([result], source="chamber only")
                    folder.index.record_verdict(folder.run_id, result)
                if campaign:  # the fleet: units and fleet verdicts (fleet.json); the agent's API on one of each kind
                    summary.update(run_fleet_lab_job(
                        claims, campaign, folder.run_dir, rows=job.rows, progress=shown, wrap=view.watch,
                        graded=view.graded_on, on_sections=lambda sections: fleet_verdicts(view, folder, sections)))
                    chambers = {kind: view.watch(member, c) for kind, (member, c) in campaign.first_of_each_kind()
                                .items()}
                else:
                    lab = run_lab_job(claims, chambers, folder.run_dir, rows=job.rows, station_file=station,
                                      progress=shown, graded=view.graded, on_verdicts=on_verdicts,
                                      on_verdict=on_verdict, resume=folder.resumed,
                                      on_station_verdicts=lambda checks: view.verdicts(checks,
                                                                                       source="with the station"))
                    summary.update(lab.summary)
                if skipped_agent:
                    summary["agent_skipped"] = skipped_agent
                if model is not None:
                    summary["agent"] = run_agent_job(
                        claims, model_spec=job.model_spec, model=model, datasheets_dir=job.datasheets_dir,
                        run_dir=folder.run_dir, run_id=folder.run_id, index=folder.index,
                        api_url=start_chamber_api(stack, chambers, folder.run_dir, claims), progress=shown)
                shown.stage("finishing", "leaving the chambers in their safe state")
                shown.say("leaving the chambers in their safe state")
        finally:
            summary["safe_state"] = campaign.safe_state if campaign else outcomes_of(opened)
        summary["incomplete"] = shortfall(summary, agent_asked=not job.no_agent, agent_claims=claims,
                                          agent_named=job.model is not None)
        if job.no_agent:
            summary.update(kept_agent_sections(folder.run_dir / "summary.json"))
        summary["status"] = RUN_STATUS[exit_code(summary)]
        record_provenance()
        progress.say(f"report: writing {folder.run_dir / 'report.md'} and report.html")
        if view is not None:
            shown.stage("report", "writing report.md and report.html")
        write_json_atomic(folder.run_dir / "summary.json", summary)
        summary["report"] = str(write_report(folder.run_dir))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: chambers made safe above; the index and summary say so
        if isinstance(exc, LabInterrupted):  # the verdicts decided by then (checks.json holds them)
            summary.update(exc.summary)
        summary["interrupted"] = True
        summary["status"] = RUN_STATUS[exit_code(summary)]
        record_provenance()
    except BaseException as exc:  # the error is the CLI's to print (exit 2, or 3 for an unconfirmed safe state)
        if isinstance(exc.__cause__, LabInterrupted):  # interrupted, then the safe state was not confirmed
            summary.update(exc.__cause__.summary)
            summary["interrupted"] = True
        summary["error"] = f"{type(exc).__name__}: {exception_line(exc)}"
        summary["status"] = RUN_STATUS[max(exit_code(summary), FAILED)]
        raise
    finally:
        summary["seconds"] = round((utc_now() - folder.started).total_seconds(), 1)
        try:
            folder.index.finish_run(folder.run_id, utc_now().isoformat(timespec="seconds"), summary["status"],
                                    summary)
        finally:
            folder.close()
            with views:  # the view says how the job ended (with a link to its report), then closes
                if view is not None:
                    view.ended(summary)
    return summary


def _fleet_of(job: MainJob) -> Any:
    """The fleet of `run --fleet` (without its stations with --no-station)."""
    from dataclasses import replace

    from protocols.fleet_job import fleet_from

    fleet = fleet_from(str(job.fleet))
    return replace(fleet, members=tuple(replace(m, station=None) for m in fleet.members)) if job.no_station else fleet


def campaign_provenance(campaign: Any) -> list[dict[str, Any]]:
    """One provenance entry per opened chamber of a fleet (the port names its fleet id and board; one that was not
    opened is in fleet.json with its error)."""
    return [{"kind": r.kind, "port": f"{r.member.id}: {r.member.board} ({r.url})", "emulated": r.member.emulated,
             "config": r.chamber.config} for r in campaign.runs if r.chamber is not None]


def fleet_verdicts(view: Any, folder: Any, sections: list[dict[str, Any]]) -> None:
    """Each claim's fleet verdict on the live view and in the run index (one row per claim)."""
    rows = [{"claim_id": s["claim_id"], "verdict": (s.get("fleet") or {}).get("verdict", "error"),
             "class": (s.get("fleet") or {}).get("inconclusive_class"), "claim_unit": s["claim_unit"]}
            for s in sections]
    view.verdicts(rows, source=f"fleet of {sum(len(s['units']) for s in sections)} unit verdicts")
    for r in rows:
        folder.index.record_verdict(folder.run_id, r)


def shortfall(summary: dict[str, Any], *, agent_asked: bool, agent_claims: list[Any],
              agent_named: bool = True) -> dict[str, int]:
    """What of the job was not done, counted (only non-zero counts): claims with an `error` verdict, agent cells
    that ended in an engine error, agent cells asked for but not run (a missing datasheet, a cell that crashed),
    cells whose datasheet could not be read (document_unreadable: no answer was possible). The agent part skipped
    whole because no datasheet was found counts only when it was asked for by name (`agent_named`: `--model`
    given); the default agent of a first `make run` on a clone without ../shared is no shortfall: the summary says
    it was skipped and how to get the datasheets (README, "Exit codes")."""
    agent = summary.get("agent") or {}
    scores = agent.get("fidelity_and_flags") or {}
    counts = {"error_verdicts": len(summary.get("error_claims", []))}
    skipped_unasked = not agent and summary.get("agent_skipped") and not agent_named
    if agent_asked and not skipped_unasked:
        counts["engine_errors"] = max(agent.get("outcomes", {}).get("engine_error", 0),
                                      scores.get("engine_errors", 0) if isinstance(scores, dict) else 0)
        counts["cells_not_run"] = agent.get("not_run", 0) if agent else len(
            [c for c in agent_claims if c.source.prints_figure])
        counts["unreadable_datasheets"] = scores.get("document_unreadable", 0) if isinstance(scores, dict) else 0
    return {k: v for k, v in counts.items() if v}


def kept_agent_sections(summary_file: Path) -> dict[str, Any]:
    """The agent and scores sections of an earlier summary of this run folder (a resume with --no-agent keeps
    them: the cells and scores.json are still there)."""
    import json

    try:
        earlier = json.loads(summary_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: earlier[k] for k in ("agent", "agent_skipped") if k in earlier} if isinstance(earlier, dict) else {}


def status_line(d: dict[str, Any]) -> str:
    """The run's status as its summary's first line says it: `finished`, or `completed with errors (error
    verdicts 2, ...)`, `interrupted`, `failed (...)`."""
    status = d.get("status", "finished")
    detail = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (d.get("incomplete") or {}).items())
    detail = detail or d.get("error", "")
    return f"{status} ({detail})" if detail else status


def summary_text(d: dict[str, Any], width: Any = "terminal") -> str:
    """The summary lines `run` ends with (README: "It ends like this"); the first says its status. On a terminal
    each line fits its width (firmware_bridge.progress_line.wrap_parts: broken between "key value" parts only,
    continued under the values); piped, one whole line each. `width`: columns (None: no wrapping; "terminal":
    stdout's, if it is one)."""
    from firmware_bridge.progress_line import fit_line, wrap_parts
    from protocols.exit_codes import unconfirmed_note
    from protocols.fleet_run import fleet_summary_lines

    def kv(counts: dict[str, Any]) -> list[str]:
        return [f"{k} {v}" for k, v in counts.items()]

    def row(key: str, parts: list[str], sep: str = ", ") -> list[str]:
        return wrap_parts(parts, width, head=f"{key + ':':<12}", sep=sep)

    lines = ["", *fit_line(f"run {d['run_id']} ({d['backend']}) in {d.get('seconds', '?')} s: {status_line(d)}",
                           width)]
    if "verdicts" in d:
        lines += row("verdicts", kv(dict(sorted(d["verdicts"].items()))))
    s = d.get("sweep") or {}
    if "measured" in s:
        m = s["measured"]
        lines += row("sweep", [s["claim_id"], f"measured {m['value']} ± {m['u']} {m['unit']}",
                               f"c = {s['combined_uncertainty']}",
                               f"verdict changes at bounds {' and '.join(s['verdict_changes_at'])}"])
    st = d.get("station")
    if st:
        lines += row("station", [f"{len(st['definitive'])} definitive with instruments",
                                 *kv(dict(sorted(st["verdicts"].items())))])
    for kind, counters in (d.get("link") or {}).items():
        lines += row(f"link {kind}", kv(counters))
    lines += [part for line in fleet_summary_lines(d) for part in fit_line(line, width)]
    if d.get("agent_skipped"):
        lines += row("agent", [f"skipped: {d['agent_skipped']}"])
    a = d.get("agent")
    if a:
        lines += row("agent", [f"{a['model']} on {a['cells']} claims", f"{a['kept_from_earlier']} kept from before",
                               *kv(a["outcomes"])])
        if a.get("skipped_datasheets"):
            lines += wrap_parts(a["skipped_datasheets"], width, head=" " * 12 + "skipped (no datasheet): ",
                                indent=" " * 12)
        fs = a.get("fidelity_and_flags")
        if isinstance(fs, dict) and fs:
            flagged = fs.get("flagged") or {}
            bound = ([f"one-sided 95 % upper bound {flagged['upper_95']:.3f} (unit: {flagged.get('unit', 'cells')})"]
                     if flagged.get("count") == 0 and flagged.get("upper_95") is not None else [])
            latency = fs.get("latency_per_cell_mean_s")
            lines += row("scores", [f"fidelity {fs.get('fidelity_passed')} of {fs.get('cells')} cells",
                                    f"detector flags {flagged.get('count', 0)} of {flagged.get('n', 0)}", *bound,
                                    f"engine errors {fs.get('engine_errors', 0)}",
                                    *([f"{latency:.2f} s per cell"] if latency else [])], sep="; ")
    if unsafe := unconfirmed_note(d.get("safe_state")):
        lines += fit_line(unsafe, width)
    lines += row("results", [str(d["run_dir"])])
    lines += row("report", [str(d.get("report") or Path(d["run_dir"]) / "summary.json")])
    return "\n".join(lines)
