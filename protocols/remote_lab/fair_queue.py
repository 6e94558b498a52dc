"""A chamber's fair queue: the next experiment goes to the user whose turn it is, round-robin, oldest first within
a user.

Why: first come, first served let one user's twenty queued experiments hold a chamber for days while another
user's first waited behind them. The rule: among the users with queued work on a chamber, the one served least
recently on that chamber goes next (a user never served there first; among those, the one waiting longest), and
of that user's experiments the oldest. Served means started: the latest `started_on` of the user's experiments on
the chamber. Serving a user puts them behind everyone else, so the queue cycles through its users.

One rule, two forms that must agree: `claim_order` is the ORDER BY a worker's claim uses (one SQL statement,
locked with FOR UPDATE SKIP LOCKED on PostgreSQL, the same on SQLite), and `positions` is the order GET
/queues/{id} shows, computed from the same facts; a test claims a mixed queue to the end and checks the claims
come in the order the positions said.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import sqlalchemy as sa

from protocols.remote_lab.schema import experiments


def claim_order(chamber_id: str) -> list[Any]:
    """ORDER BY clauses over `experiments` (unaliased) that put the chamber's next experiment first."""
    served, waiting = experiments.alias("served"), experiments.alias("waiting")
    last_turn = sa.select(sa.func.max(served.c.started_on)).where(
        served.c.chamber_id == chamber_id, served.c.account_id == experiments.c.account_id,
        served.c.started_on.is_not(None)).scalar_subquery()
    first_waiting = sa.select(sa.func.min(waiting.c.seq)).where(
        waiting.c.chamber_id == chamber_id, waiting.c.account_id == experiments.c.account_id,
        waiting.c.status == "QUEUED").scalar_subquery()
    return [last_turn.asc().nulls_first(), first_waiting, experiments.c.seq]


def last_turns(db: Any, chamber_id: str, accounts: Iterable[str]) -> dict[str, float]:
    """Each account's latest start on the chamber (accounts never served there are left out)."""
    wanted = list(dict.fromkeys(accounts))
    if not wanted:
        return {}
    rows = db.execute(sa.select(experiments.c.account_id, sa.func.max(experiments.c.started_on)).where(
        experiments.c.chamber_id == chamber_id, experiments.c.account_id.in_(wanted),
        experiments.c.started_on.is_not(None)).group_by(experiments.c.account_id)).all()
    return {account: float(at) for account, at in rows if at is not None}


def positions(queued: Sequence[Mapping[str, Any]], turns: Mapping[str, float]) -> list[Mapping[str, Any]]:
    """The queued experiments (each with `seq` and `account_id`) in the order the chamber will run them."""
    by_account: dict[str, list[Mapping[str, Any]]] = {}
    for row in sorted(queued, key=lambda r: r["seq"]):
        by_account.setdefault(row["account_id"], []).append(row)

    def key(account: str) -> tuple[bool, float, int]:
        turn = turns.get(account)
        return (turn is not None, turn if turn is not None else 0.0, by_account[account][0]["seq"])

    cycle = sorted(by_account, key=key)
    out: list[Mapping[str, Any]] = []
    depth = 0
    while len(out) < len(queued):
        for account in cycle:
            if depth < len(by_account[account]):
                out.append(by_account[account][depth])
        depth += 1
    return out
