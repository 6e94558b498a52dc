"""The main job's one live view: a read-only page that follows every stage of `run` on one URL, and says when the
job ended.

Why its own module: the view joins the feed (live.py) and the server (server.py), and server.py already imports
the app, which imports live.py; here neither import runs in a circle. What it adds to the feed is the job's side,
all of it from the job's own events, never from the text it prints: the stage and i/N (`StageProgress` wraps the
progress the CLI renders: `start` and `stage` name the stage), what is measured now and for which claims
(`measuring`, the runner's event as a staging is read or a procedure runs), each claim's bound, each verdict as it
is decided, and how the job ended with the report it wrote (`ended`). The chamber tools API that the agent stage
starts over the same wrapped chambers nests in this view (live.LiveChamber forwards its claims), so the agent stage
prints no second URL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocols.staging import Measuring

from .live import LiveChamber, LiveFeed, claim_bound, live_app, report_graded
from .server import serve_in_thread

STAGE_NAMES = {"checks": "calibration and checks"}
"""How the view names a stage the job starts under a short label (`checks`: the calibration runs in its plan)."""


@dataclass
class JobLiveView:
    """The main job's one live view: the feed, the chambers wrapped for it, and the page's URL."""

    feed: LiveFeed
    chambers: dict[str, Any]
    url: str
    graded_count: dict[str, int] = field(default_factory=dict)  # a fleet's chamber -> claims graded on it

    def graded(self, claim: Any) -> None:
        """A `ProtocolContext.graded` hook: the claim just graded, with its bound."""
        report_graded(self.feed)(claim)

    def verdicts(self, checks: list[Mapping[str, Any]], *, source: str) -> None:
        """Verdicts as written (checks.json, station_checks.json) or as each is decided, marked by what graded
        them; each with its reason."""
        self.feed.record_verdicts([{**c, "source": source} for c in checks])

    def watch(self, name: str, chamber: Any) -> LiveChamber:
        """A chamber shown on this view under `name` (a fleet's chamber id: every chamber of a fleet its own
        panel); a chamber already shown under that name keeps its panel."""
        return LiveChamber(chamber, name, self.feed)

    def graded_on(self, name: str, claim: Any) -> None:
        """The claim just graded on the chamber `name` (a fleet's chamber), with its bound; the chamber's panel
        counts the claims graded on it."""
        self.graded_count[name] = self.graded_count.get(name, 0) + 1
        self.feed.record_chamber_note(name, f"{self.graded_count[name]} claim(s) graded; last: {claim.id}")
        self.feed.record_claim({"id": claim.id, "component": claim.component, "parameter": claim.parameter,
                                "unit": claim.unit, "bound": claim_bound(claim)}, chamber=name, activity="graded")

    def ended(self, summary: Mapping[str, Any]) -> None:
        """The job has ended (its summary: `status`, `verdicts` counts, `report`, `error`, `run_dir`): the page
        says so, with the verdict count and a link to the report (report.html beside the summary's report), and
        stops following. Called once the report is written, before the view closes."""
        report = summary.get("report")
        html = Path(str(report)).with_suffix(".html") if report else None
        verdicts = summary.get("verdicts") if isinstance(summary.get("verdicts"), Mapping) else {}
        note = str(summary.get("error") or "") or (f"results in {summary['run_dir']}" if summary.get("run_dir")
                                                   else "")
        self.feed.record_end(str(summary.get("status") or "ended"), verdicts=dict(sorted(verdicts.items())),
                             report=html if html is not None and html.is_file() else None, note=note)

    def progress(self, inner: Any) -> "StageProgress":
        return StageProgress(inner, self.feed)


def start_job_live_view(stack: contextlib.ExitStack, chambers: Mapping[str, Any],
                        claims: Any = ()) -> JobLiveView:
    """The live view of the main job (a read-only page on 127.0.0.1, closed with `stack`): one page, one URL for
    every stage; the chamber tools API the agent uses later nests inside it (its claims show here, with their
    bound from `claims`)."""
    feed = LiveFeed()
    feed.record_bounds({c.id: claim_bound(c) for c in claims})
    watched = {kind: LiveChamber(c, kind, feed) for kind, c in chambers.items()}
    url = stack.enter_context(serve_in_thread(live_app(feed))) + "/"
    feed.record_stage("starting")
    return JobLiveView(feed, watched, url)


class StageProgress:
    """A JobProgress that passes everything on to `inner` and shows the job's stage (and i/N) and what it measures
    on the live view. The stage comes from the job's calls (`start` of a stage with steps, `stage` of one
    without), never from the words of a line it says."""

    def __init__(self, inner: Any, feed: LiveFeed) -> None:
        self._inner, self._feed = inner, feed
        self._stage, self._done, self._total = "starting", 0, 0

    def _show(self, note: str = "") -> None:
        self._feed.record_stage(self._stage, done=self._done, total=self._total, note=note)

    def start(self, label: str, total: int) -> None:
        self._stage, self._done, self._total = STAGE_NAMES.get(label, label), 0, total
        self._show()
        self._inner.start(label, total)

    def stage(self, name: str, note: str = "") -> None:
        self._stage, self._done, self._total = STAGE_NAMES.get(name, name), 0, 0
        self._show(note)
        self._inner.stage(name, note)

    def advance(self, note: str) -> None:
        self._done += 1
        self._show(note)
        self._inner.advance(note)

    def detail(self, message: str) -> None:
        self._show(message)
        self._inner.detail(message)

    def measuring(self, event: Measuring) -> None:
        """The runner's event (protocols.staging.Measuring, the job passes it as `ProtocolContext.measuring`): the
        claims the reading that starts now serves, its chamber, what is staged, its rows."""
        self._feed.record_measuring(tuple(event.claims), chamber=str(event.chamber), staged=str(event.staged),
                                    rows=int(event.rows))
        self._inner.measuring(event)

    def say(self, message: str) -> None:
        self._inner.say(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
