"""The lab's audit: who submitted, cancelled, downloaded, opened or took over a session, and every account change,
with the time and the address it came from; `chamberlab lab audit [--user U] [--since T] [--json]` reads it.

Why a table in the lab database (and not a log file): a lab spread over hosts has one database and many
processes; the audit must be in the same place as what it describes, kept as long as the data, and readable by the
operator whatever host they are on. A line is written in its own short transaction after the action succeeded;
one that cannot be written is logged, never a reason to refuse the user's action.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from protocols.remote_lab.schema import audit

log = logging.getLogger(__name__)

ACTIONS = ("submit", "cancel", "download", "session-open", "session-takeover", "user-add", "user-remove",
           "demo-disabled")


def record(engine: Engine, action: str, *, at: float, user_name: str | None = None, account_id: str | None = None,
           target: str | None = None, address: str | None = None, detail: str | None = None) -> None:
    """One audit line (best effort: logged when the database refuses it)."""
    try:
        with engine.begin() as db:
            db.execute(audit.insert().values(at=at, action=action, user_name=user_name, account_id=account_id,
                                             target=target, address=address, detail=detail))
    except sa.exc.SQLAlchemyError as exc:
        log.error("audit line not written (%s %s %s): %s", action, user_name, target, exc)


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """--since: an ISO date or time (UTC unless it names a zone), or an age such as 90m, 12h, 7d; None: all."""
    if text is None:
        return None
    now = time.time() if now is None else now
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    body = text.strip()
    if body and body[-1] in units and body[:-1].replace(".", "", 1).isdigit():
        return now - float(body[:-1]) * units[body[-1]]
    try:
        when = datetime.fromisoformat(body)
    except ValueError:
        raise ValueError(f"--since: expected an ISO date/time (2026-03-01, 2026-03-01T12:00) or an age (90m, 12h, "
                         f"7d), got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def read(engine: Engine, *, user: str | None = None, since: float | None = None,
         limit: int = 10_000) -> list[dict[str, Any]]:
    """Audit lines, oldest first: of one user name (every account that had it), from `since` on."""
    query = sa.select(audit).order_by(audit.c.at, audit.c.audit_id)
    if user is not None:
        query = query.where(audit.c.user_name == user)
    if since is not None:
        query = query.where(audit.c.at >= since)
    with engine.connect() as db:
        rows = db.execute(query.limit(limit)).mappings().all()
    return [{**dict(r), "time": _iso(r["at"])} for r in rows]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def audit_text(data: dict[str, Any]) -> str:
    lines = [f"{e['time']}  {e['action']:<17} {e['user_name'] or '-':<16} {e['target'] or '-':<20} "
             f"{e['address'] or '-':<15} {e['detail'] or ''}".rstrip() for e in data["entries"]]
    return "\n".join(lines) or "no audit lines"
