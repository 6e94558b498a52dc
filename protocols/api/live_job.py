"""The main job's one live view: a read-only page that follows every stage of `run` on one URL.

Why its own module: the view joins the feed (live.py) and the server (server.py), and server.py already imports
the app, which imports live.py; here neither import runs in a circle. What it adds to the feed is the job's side:
the stage and i/N from the job's progress (`StageProgress` wraps the progress the CLI renders), each claim's bound,
and the verdicts as the job writes them. The chamber tools API that the agent stage starts over the same wrapped
chambers nests in this view (live.LiveChamber forwards its claims), so the agent stage prints no second URL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .live import LiveChamber, LiveFeed, claim_bound, live_app, report_graded
from .server import serve_in_thread

STAGE_WORDS = ("checks", "station", "sweep", "agent", "scoring", "report")
"""Stages of `run` a progress line may open with (`station: opening ...`): the view shows that stage. Not
`calibration`: it runs in the checks' plan ("calibration and checks"), and its line comes once it is done."""


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
        """Verdicts as written (checks.json, station_checks.json), marked by what graded them."""
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
    """A JobProgress that passes everything on to `inner` and shows the job's stage (and i/N) on the live view."""

    def __init__(self, inner: Any, feed: LiveFeed) -> None:
        self._inner, self._feed = inner, feed
        self._stage, self._done, self._total = "starting", 0, 0

    def _show(self, note: str = "") -> None:
        name = "calibration and checks" if self._stage == "checks" else self._stage
        self._feed.record_stage(name, done=self._done, total=self._total, note=note)

    def start(self, label: str, total: int) -> None:
        self._stage, self._done, self._total = label, 0, total
        self._show()
        self._inner.start(label, total)

    def advance(self, note: str) -> None:
        self._done += 1
        self._show(note)
        self._inner.advance(note)

    def detail(self, message: str) -> None:
        self._show(message)
        self._inner.detail(message)

    def say(self, message: str) -> None:
        word = message.split(":", 1)[0].strip().lower() if ":" in message else ""
        if word in STAGE_WORDS and word != self._stage:
            self._stage, self._done, self._total = word, 0, 0
            self._show(message.split(":", 1)[1].strip())
        self._inner.say(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
