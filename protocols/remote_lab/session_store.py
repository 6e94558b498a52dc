"""Real-time sessions in the lab database: who holds a chamber, the calls they send its worker, the answers.

Why through the database: the API process and the chamber's worker may be on different hosts (realtime.py runs
the calls). The sharing rules live here, in the transaction that opens a session: a session belongs to its
account; another account may take the chamber over only once the holder has been idle (no call in flight, none
for the chamber's `idle_takeover_s`), while the same account takes its own session over at once. One call at a
time per session: a second one finds the first unanswered and is refused (409 at the API).
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from protocols.remote_lab.schema import chambers, session_calls, sessions
from protocols.remote_lab.store import StoreError, new_id


class ChamberInUse(StoreError):
    """Another account's session holds the chamber and is not idle long enough to be taken over."""

    def __init__(self, message: str, free_at: float | None):
        super().__init__(message)
        self.free_at = free_at


def open_session(engine: Engine, *, chamber_id: str, user_id: str, config: str, now: float,
                 account_id: str | None = None, idle_takeover_s: float | None = None) -> tuple[str, int, list[str]]:
    """A new session (OPENING) and its `open` call for the chamber's worker: (session id, call id, the sessions it
    will take over). ChamberInUse while another account's session on the chamber is opening, running a call, or
    was active within `idle_takeover_s` (the same account takes its own sessions over at once). Decided with the
    chamber's row written first, so two opens on one chamber decide in turn."""
    session_id = new_id("ses")
    owner = account_id or f"name-{user_id}"
    with engine.begin() as db:
        db.execute(chambers.update().where(chambers.c.chamber_id == chamber_id).values(
            chamber_id=chambers.c.chamber_id))
        held = db.execute(sa.select(sessions).where(
            sessions.c.chamber_id == chamber_id, sessions.c.state.in_(("OPEN", "OPENING")))).mappings().all()
        others = [dict(h) for h in held if h["account_id"] != owner]
        if others and idle_takeover_s is not None:
            calls = set(db.scalars(sa.select(session_calls.c.session_id).where(
                session_calls.c.session_id.in_([h["session_id"] for h in others]),
                session_calls.c.state.in_(("PENDING", "RUNNING")))))
            for other in others:
                since = other["active_on"] if other["active_on"] is not None else other["created_on"]
                busy = other["session_id"] in calls or other["state"] == "OPENING"
                if busy or now - since < idle_takeover_s:
                    free_at = None if busy else since + idle_takeover_s
                    when = ("once its running call ends and it then stays idle for "
                            f"{idle_takeover_s:g} s") if busy else (
                        f"in {free_at - now:.0f} s ({_utc(free_at)}), if it stays idle until then")
                    raise ChamberInUse(f"chamber {chamber_id} is in use by another user's session; it can be taken "
                                       f"over {when}", free_at)
        db.execute(sessions.insert().values(session_id=session_id, chamber_id=chamber_id, user_id=user_id,
                                            account_id=owner, config=config, state="OPENING", created_on=now,
                                            active_on=now))
        call = db.execute(session_calls.insert().values(
            session_id=session_id, chamber_id=chamber_id, kind="open", instructions="[]", state="PENDING",
            created_on=now)).inserted_primary_key[0]
    return session_id, int(call), [h["session_id"] for h in held]


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def get_session(engine: Engine, session_id: str) -> dict[str, Any] | None:
    with engine.connect() as db:
        row = db.execute(sa.select(sessions).where(sessions.c.session_id == session_id)).mappings().first()
    return dict(row) if row else None


def add_call(engine: Engine, session_id: str, chamber_id: str, instructions: Sequence[str], now: float) -> int | None:
    """Queue a session's instructions for its worker; None when a call of this session is still unanswered (the
    session's row is written first, so two calls of one session decide in turn)."""
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.session_id == session_id).values(active_on=now))
        busy = db.scalar(sa.select(sa.func.count()).select_from(session_calls).where(
            session_calls.c.session_id == session_id, session_calls.c.state.in_(("PENDING", "RUNNING"))))
        if busy:
            return None
        return int(db.execute(session_calls.insert().values(
            session_id=session_id, chamber_id=chamber_id, kind="instructions",
            instructions=json.dumps(list(instructions)), state="PENDING", created_on=now)).inserted_primary_key[0])


def touch_session(engine: Engine, session_id: str, now: float) -> None:
    """The session was active at `now` (its call ended): idle from here."""
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.session_id == session_id).values(active_on=now))


def has_pending_call(engine: Engine, chamber_id: str) -> bool:
    with engine.connect() as db:
        return db.scalar(sa.select(session_calls.c.call_id).where(
            session_calls.c.chamber_id == chamber_id, session_calls.c.state == "PENDING").limit(1)) is not None


def next_call(engine: Engine, chamber_id: str) -> dict[str, Any] | None:
    """The chamber's oldest unanswered call, taken (RUNNING) by the caller."""
    with engine.begin() as db:
        row = db.execute(sa.select(session_calls).where(
            session_calls.c.chamber_id == chamber_id, session_calls.c.state == "PENDING").order_by(
            session_calls.c.call_id).limit(1).with_for_update(skip_locked=True)).mappings().first()
        if row is None:
            return None
        taken = db.execute(session_calls.update().where(session_calls.c.call_id == row["call_id"],
                                                        session_calls.c.state == "PENDING").values(
            state="RUNNING")).rowcount
    return dict(row) if taken else None


def answer_call(engine: Engine, call_id: int, *, result_csv: str | None = None, error_status: int | None = None,
                error_message: str | None = None) -> bool:
    """Answer a call the worker took; False when the API gave up on it meanwhile (its answer stands)."""
    state = "FAILED" if error_status else "DONE"
    with engine.begin() as db:
        return bool(db.execute(session_calls.update().where(
            session_calls.c.call_id == call_id, session_calls.c.state == "RUNNING").values(
            state=state, result_csv=result_csv, error_status=error_status, error_message=error_message)).rowcount)


def call_of(engine: Engine, call_id: int) -> dict[str, Any] | None:
    with engine.connect() as db:
        row = db.execute(sa.select(session_calls).where(session_calls.c.call_id == call_id)).mappings().first()
    return dict(row) if row else None


def fail_call(engine: Engine, call_id: int, status: int, message: str) -> bool:
    """Fail a call nobody answered (its worker is gone); False when a worker answered it meanwhile."""
    with engine.begin() as db:
        return bool(db.execute(session_calls.update().where(
            session_calls.c.call_id == call_id, session_calls.c.state.in_(("PENDING", "RUNNING"))).values(
            state="FAILED", error_status=status, error_message=message)).rowcount)


def set_session_state(engine: Engine, session_id: str, state: str, reason: str | None = None) -> None:
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.session_id == session_id).values(state=state, reason=reason))


def activate_session(engine: Engine, session_id: str, chamber_id: str) -> None:
    """The session holds the chamber now: every other open session of that chamber ends (taken over)."""
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.chamber_id == chamber_id, sessions.c.state == "OPEN",
                                           sessions.c.session_id != session_id).values(
            state="ENDED", reason=f"another session ({session_id}) took chamber {chamber_id}"))
        db.execute(sessions.update().where(sessions.c.session_id == session_id).values(state="OPEN"))


def end_sessions_of(engine: Engine, chamber_id: str, reason: str) -> None:
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.chamber_id == chamber_id,
                                           sessions.c.state.in_(("OPEN", "OPENING"))).values(state="ENDED",
                                                                                            reason=reason))
        db.execute(session_calls.update().where(session_calls.c.chamber_id == chamber_id,
                                                session_calls.c.state.in_(("PENDING", "RUNNING"))).values(
            state="FAILED", error_status=409, error_message=reason))


def end_sessions_of_account(engine: Engine, account_id: str, reason: str) -> list[str]:
    """End every open session of the account (its calls fail with `reason`); the chambers they held."""
    with engine.begin() as db:
        held = db.execute(sa.select(sessions.c.session_id, sessions.c.chamber_id).where(
            sessions.c.account_id == account_id, sessions.c.state.in_(("OPEN", "OPENING")))).all()
        ids = [h.session_id for h in held]
        if ids:
            db.execute(sessions.update().where(sessions.c.session_id.in_(ids)).values(state="ENDED", reason=reason))
            db.execute(session_calls.update().where(session_calls.c.session_id.in_(ids),
                                                    session_calls.c.state.in_(("PENDING", "RUNNING"))).values(
                state="FAILED", error_status=409, error_message=reason))
    return sorted({h.chamber_id for h in held})


def fail_opening(engine: Engine, session_id: str) -> None:
    """A session whose open was refused or not answered in time: FAILED, so it holds no chamber."""
    with engine.begin() as db:
        db.execute(sessions.update().where(sessions.c.session_id == session_id, sessions.c.state == "OPENING").values(
            state="FAILED", reason="its open was not answered"))
