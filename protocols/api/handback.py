"""Handing chambers back: safe when a session ends or its client abandons it, at rest when the next one takes
them; and cutting chamber work short when the server stops.

Why (issue 31): a chamber stayed as its last session left it until another session's first call or the 3600 s
idle limit; an agent that ended (or died) after staging `load_in 0.7, hatch 30` left the fan running and the hatch
open for up to an hour. Now:
- when a session ends (submit_chamber_outcome, DELETE, expiry), each chamber it was the last to take is made safe
  at once and read back (`session_ended`, chamber_state.hand_back), unless another session took the chamber since
  (that one's `take` did it);
- a session that takes a chamber another session (or nobody) used last finds it at rest (`take`): the safe
  settings not in force, and every input the last session moved back where it was (chamber_state.rest_plan);
- a session abandoned by its client (no request for the idle limit, no call in flight) is ended by `sweep`, which
  the served app runs every DEFAULT_SWEEP_S on its event loop (`run`, started by server.serve_in_thread), so its
  chambers are handed back without waiting for another request;
- a lapsed lease alone hands nothing back (service_defaults.DEFAULT_SESSION_IDLE_S says why).
Each hand-back is a `handback` event in the session's record and a line in <record_dir>/operator.jsonl: what was
applied, what the limits refused, the row read back, confirmed or not; each take is a `safe_state` event in the
taking session's record. Both run in the chamber's call slot (the lease), so neither interleaves with a tool call,
and where chamber work runs (ChamberRunner). A hand-back that fails on the apparatus is recorded and noted as the
chamber's fault for /health; the next session's `take` applies the safe settings again (the sweep does not retry:
it would try a dead board every second).

When the server stops, `stop` refuses new chamber work and cuts a call still on a chamber short, so the exit
path's safe state (chamber/selection.py) begins at once instead of after a 200-row measure and a 5 s lock wait.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from protocols.planner import change_seconds

from .chamber_state import POWER_ON, hand_back, handback_text, rest_plan, start_safe, state_now
from .lease import ChamberLeases
from .record import RecordUnavailable, SessionRecord
from .runner import ChamberRunner
from .sessions import Session, SessionStore
from .tools import ToolEnvironment

log = logging.getLogger(__name__)


@dataclass
class ChamberUse:
    """Who took a chamber last, and what was in force then."""

    session: str | None = None  # the session that last took the chamber (the next one's `previous_user`)
    before: dict[str, float] | None = None  # the inputs in force when that session took it (the next take's rest)
    handed_back: bool = False  # made safe at that session's end
    failed: str | None = None  # the hand-back failed on the apparatus (the next take makes it safe again)


class Handback:
    """Brings each chamber to rest between sessions; see the module docstring. Every coroutine runs on the
    server's event loop; `stop` is called from the thread that stops the server."""

    def __init__(self, *, env: ToolEnvironment, lease: ChamberLeases, runner: ChamberRunner, store: SessionStore,
                 safe_by_kind: Mapping[str, Mapping[str, float]], faults: dict[str, str],
                 operator_record: SessionRecord) -> None:
        self.env, self.lease, self.runner, self.store = env, lease, runner, store
        self.safe_by_kind = safe_by_kind
        self.faults = faults
        self.operator_record = operator_record
        self.uses = {kind: ChamberUse() for kind in env.chambers}
        self.stopping = False

    # ---------------------------------------------------------------------------------- a session takes a chamber
    async def take(self, session: Session, kind: str) -> None:
        """Before a call of `session` on `kind` (its lease and call slot held): a session taking a chamber that
        another session (or nobody) used last finds it at rest, and a `safe_state` event in its record says what
        was applied. Its own chamber back after a lapse, untouched meanwhile, keeps its staging."""
        use = self.uses[kind]
        if use.session == session.id:
            return
        started = await self.runner.run(start_safe, self.env, kind, self.safe_by_kind.get(kind, {}), use.before)
        session.record.write("safe_state", chamber=kind, previous_user=use.session, **started)
        self.uses[kind] = ChamberUse(session.id, dict(started["state"]))

    def start_plan(self, session: Session, kind: str) -> tuple[float, dict[str, float]]:
        """What `take` would do before a call of `session` on `kind`, for the call's plan (timing.py): the planner's
        seconds for the inputs it puts back beyond the safe settings (the last session's oversampling, ...: about
        0.2 s a SET on the real board, enough to make a short call outlast its plan), and the inputs after it (the
        call's own changes are planned from those). The safe settings' own SETs are left out, as before issue 31:
        a few SETs of a fresh chamber, within any client's base timeout."""
        now = state_now(self.env.chambers[kind])
        use = self.uses[kind]
        if use.session == session.id:
            return 0.0, now
        safe = self.safe_by_kind.get(kind, {})
        wanted, _ = rest_plan(now, safe, use.before, POWER_ON.get(kind, {}))
        return change_seconds(now, {n: v for n, v in wanted.items() if n not in safe}), {**now, **wanted}

    def end_seconds(self, session: Session, row_s: Callable[[str], float]) -> float:
        """What `session_ended` would cost now, for submit_chamber_outcome's plan: each chamber to hand back, its
        safe SETs and the row read back."""
        total = 0.0
        for kind in self._pending(session.id):
            now = state_now(self.env.chambers[kind])
            wanted, _ = rest_plan(now, self.safe_by_kind.get(kind, {}), None, {})
            total += change_seconds(now, wanted) + row_s(kind)
        return total

    # ---------------------------------------------------------------------------------- a session ends
    async def session_ended(self, session: Session) -> list[dict[str, Any]]:
        """`session` has ended: release its leases (after its call in flight, if any) and make safe, at once, each
        chamber it was the last to take. The outcomes (none while the server stops: its exit path does that)."""
        await self.lease.release(session.id)
        outcomes = []
        for kind in self._pending(session.id):
            outcome = await self._hand_back(kind, session)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _pending(self, session_id: str) -> list[str]:
        return [kind for kind, use in self.uses.items() if use.session == session_id and not use.handed_back]

    async def _hand_back(self, kind: str, session: Session) -> dict[str, Any] | None:
        async with self.lease.exclusive([kind]):  # after a call in flight; no call of anyone meanwhile
            use = self.uses[kind]
            holder = self.lease.of(kind).holder
            if self.stopping or use.session != session.id or use.handed_back or holder not in (None, session.id):
                return None
            try:
                outcome = await self.runner.run(hand_back, self.env, kind, self.safe_by_kind.get(kind, {}))
            except Exception as exc:  # the apparatus failed: recorded; the next session's take applies it again
                error = f"{type(exc).__name__}: {exc}"
                outcome = {"error": error, "confirmed": False}
                use.failed = self.faults[kind] = error
            else:
                use.handed_back, use.failed = True, None
        outcome = {"chamber": kind, "session_id": session.id, "reason": session.end_reason, **outcome}
        self._record(session, outcome)
        return outcome

    def _record(self, session: Session, outcome: dict[str, Any]) -> None:
        text = handback_text(outcome["chamber"], outcome)
        (log.info if outcome.get("confirmed") else log.warning)("session %s (%s): %s", session.id,
                                                                 session.end_reason, text)
        for record in (session.record, self.operator_record):
            try:
                record.write("handback", **outcome)
            except RecordUnavailable as exc:  # the chamber is safe whatever the disk says; the log has it
                log.error("handback of %s not recorded in %s: %s", outcome["chamber"], record.path.name, exc)

    # ---------------------------------------------------------------------------------- abandoned sessions
    async def sweep(self) -> list[str]:
        """End every abandoned session (SessionStore.expire_idle) and hand back each chamber whose last session has
        ended and that is not handed back yet (also one ended by the session cap's idle expiry). The ids it
        ended."""
        if self.stopping:
            return []
        expired = self.store.expire_idle()
        for session in expired:
            try:
                session.record.write("expired", idle_s=self.store.idle_s, last_active=session.last_active)
            except RecordUnavailable as exc:
                log.error("session %s expired, not recorded: %s", session.id, exc)
        for kind, use in list(self.uses.items()):
            if use.session is None or use.handed_back or use.failed is not None:
                continue
            session = self.store.get(use.session)
            if session.ended:
                await self.lease.release(session.id)
                await self._hand_back(kind, session)
        for session in expired:  # leases of chambers it held without having taken them (none in practice)
            await self.lease.release(session.id)
        return [session.id for session in expired]

    async def run(self, every_s: float) -> None:
        """Sweep every `every_s` seconds until cancelled (the served app's background task)."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.sweep()
            except Exception:  # a bug: logged, and the next sweep tries again
                log.exception("the sweep for abandoned sessions failed")

    # ---------------------------------------------------------------------------------- the server stops
    def stop(self, grace_s: float) -> None:
        """The server is stopping (called from the thread that stops it): refuse new chamber work, and cut short
        a call still on a chamber after `grace_s` (the driver abandons its exchange: the call fails at once and
        the exit path's safe state settles or resets the board)."""
        self.stopping = True
        for kind, chamber in self.env.chambers.items():
            exclusive = getattr(chamber, "exclusive", None)
            if exclusive is None:
                continue
            try:
                with exclusive(timeout=grace_s, take_over=True):
                    pass
            except Exception as exc:  # still busy: the exit path waits for it, bounded
                log.warning("%s: the call in flight did not give way at the stop: %s", kind, exc)
