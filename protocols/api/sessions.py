"""Sessions of the chamber tools API: one claim, one frozen extraction, one outcome, one record.

Why a session owns the freeze: the seed paper found that 80-100 % of agent runs reached for a chamber tool before
they had submitted their extraction. Here the rule is a state of the session, checked on the server for every
chamber tool: until `freeze` stored the extraction (canonical JSON and its SHA-256), `require_chamber_phase`
refuses with `extraction_not_frozen`; a second freeze is refused; the stored bytes never change. A submitted
outcome (or DELETE) ends the session, and every later tool call is refused with `session_ended`.

Why sessions are ended when idle (issue 31): a client that dies mid-session leaves the chamber as it staged it.
A session without a request for `idle_s` and with no call in flight is abandoned: `expire_idle` ends it
("expired"), and the app hands the chambers it used back safe (handback.py) without waiting for another
request. Every request on a session's path counts as activity, and so does the end of each of its tool calls (a
long run_protocol is not idle time).

Why a cap on open sessions (issue 19: a client made 20,000 in 15 s and 88 MB of records): each session holds a
record file and memory, so at `max_sessions` open sessions a new one is refused (429 `too_many_sessions`, naming
the cap), after first ending every session idle for `idle_s` (no request: its client is gone), so an abandoned
crowd never locks the service until a restart. Within that, one client (the peer address of the request) holds
at most `max_per_client` open sessions (429 `too_many_sessions_for_client`, issue 24: one local client opened
1,000 sessions in 2.4 s and locked every other client out for the idle window); its own idle sessions are ended
first, as for the global cap. Why the peer address and not the token: the server has one shared bearer token,
so the token names no one.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from protocols.claims import Claim
from protocols.registry import declared_protocol

from .errors import ApiError
from protocols.canonical import canonical_json, sha256_hex

from .record import RecordFiles, SessionRecord

from protocols.service_defaults import DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_CLIENT, DEFAULT_SESSION_IDLE_S

_COMPONENT_CHAMBER = {"DPS310": "wt", "A4988": "wt", "ACS70331": "wt", "Si115x": "lt"}
"""Where a component sits when its claim has no protocol naming a chamber (A4988: the wind tunnel's hatch)."""


def preferred_chamber(claim: Claim, connected: list[str]) -> str | None:
    """The chamber a session's tools use by default: the protocol's, else the component's, else any connected."""
    wanted: str | None = None
    protocol = declared_protocol(claim)
    if protocol is not None and protocol.chamber is not None:
        wanted = protocol.chamber
    wanted = wanted or _COMPONENT_CHAMBER.get(claim.component)
    if wanted in connected:
        return wanted
    return connected[0] if connected else None


@dataclass
class Session:
    id: str
    claim: Claim
    chamber: str | None
    created_at: float
    record: SessionRecord
    extraction_sha256: str | None = None
    frozen_at: float | None = None
    outcome: dict[str, Any] | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    last_active: float = 0.0
    client: str | None = None  # the peer address that created it (the per-client cap counts by it)
    _extraction: bytes | None = field(default=None, repr=False)

    @property
    def frozen(self) -> bool:
        return self.extraction_sha256 is not None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def extraction(self) -> dict[str, Any]:
        """A fresh copy of the frozen payload (callers cannot mutate the stored one)."""
        if self._extraction is None:
            raise ApiError("extraction_not_frozen", f"session {self.id} has no frozen extraction yet")
        return json.loads(self._extraction)


class SessionStore:
    """All sessions of one server; thread-safe (a few handlers still run in the thread pool).

    The store owns the pool of open record files (`RecordFiles`); `close()` closes them when the server stops.
    """

    def __init__(self, claims: Mapping[str, Claim], record_dir: Path, *, connected: list[str],
                 wall_clock: Callable[[], float], new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
                 max_open_records: int = 64, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 idle_s: float = DEFAULT_SESSION_IDLE_S, record_files: RecordFiles | None = None,
                 max_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
                 in_call: Callable[[str], bool] = lambda _session_id: False) -> None:
        """`in_call(session_id)`: whether a call of that session is on a chamber now (such a session is never
        idle)."""
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions!r}")
        if max_per_client < 1:
            raise ValueError(f"max_sessions_per_client must be >= 1, got {max_per_client!r}")
        self.max_per_client = int(max_per_client)
        if not idle_s > 0:
            raise ValueError(f"the session idle time must be > 0 s, got {idle_s!r}")
        self.max_sessions = int(max_sessions)
        self.idle_s = float(idle_s)
        self._claims = claims
        self._record_dir = Path(record_dir)
        self._record_dir.mkdir(parents=True, exist_ok=True)
        self._connected = list(connected)
        self._clock = wall_clock
        self._new_id = new_id
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._in_call = in_call
        self._expired: list[Session] = []  # ended by expiry, not yet returned by expire_idle
        self._files = record_files if record_files is not None else RecordFiles(max_open=max_open_records)

    @property
    def record_dir(self) -> Path:
        return self._record_dir

    def create(self, claim_id: str, client: str | None = None) -> Session:
        """A new session for `claim_id`, created by `client` (its peer address; None: not counted per client)."""
        claim = self._claims.get(claim_id)
        if claim is None:
            known = ", ".join(sorted(self._claims))
            raise ApiError("unknown_claim", f"no claim with id {claim_id!r}; known claim ids: {known}")
        with self._lock:
            self._make_room(client)
            session_id = self._new_id()
            if session_id in self._sessions:
                raise RuntimeError(f"session id factory repeated {session_id!r}")
            session = Session(
                id=session_id,
                claim=claim,
                chamber=preferred_chamber(claim, self._connected),
                created_at=self._clock(),
                last_active=self._clock(),
                client=client,
                record=SessionRecord(self._record_dir / f"{session_id}.jsonl", self._clock, self._files),
            )
            self._sessions[session_id] = session
        return session

    def close(self) -> None:
        """Close the open record files (every line is already with the OS; a later write reopens its file)."""
        self._files.close()

    def _make_room(self, client: str | None) -> None:
        """End sessions idle for `idle_s`; then 429 if `client` still holds `max_per_client` open sessions, or the
        server `max_sessions` (lock held)."""
        if client is not None:
            self._within_cap([x for x in self._sessions.values() if not x.ended and x.client == client],
                             self.max_per_client, "too_many_sessions_for_client",
                             f"client {client} holds {{n}} open sessions, the cap per client "
                             f"(max_sessions_per_client = {self.max_per_client})")
        self._within_cap([x for x in self._sessions.values() if not x.ended], self.max_sessions, "too_many_sessions",
                         f"this server holds {{n}} open sessions, its cap (max_sessions = {self.max_sessions})")

    def _within_cap(self, open_sessions: list[Session], cap: int, code: str, held: str) -> None:
        """Room under `cap` among `open_sessions`, after ending the idle ones; else 429 `code` (`held` says who
        holds how many: {n})."""
        if len(open_sessions) < cap:
            return
        self._expire(open_sessions)
        still = sum(1 for x in open_sessions if not x.ended)
        if still >= cap:
            raise ApiError(code, held.replace("{n}", str(still)) + "; end one with DELETE /sessions/{id} or "
                           f"submit_chamber_outcome, or retry once an idle session expires ({self.idle_s:g} s without "
                           "a request)", headers={"Retry-After": "60"})

    def _expire(self, sessions: list[Session]) -> list[Session]:
        """End each of `sessions` idle for `idle_s` with no call in flight (lock held); those ended."""
        now = self._clock()
        ended = []
        for x in sessions:
            if not x.ended and now - x.last_active >= self.idle_s and not self._in_call(x.id):
                x.end_reason, x.ended_at = "expired", now
                ended.append(x)
        self._expired.extend(ended)
        return ended

    def expire_idle(self) -> list[Session]:
        """End every open session idle for `idle_s` (no request, no call in flight): abandoned by its client.
        Returns those it ended, and those the session caps ended since the last call (each once)."""
        with self._lock:
            self._expire([x for x in self._sessions.values() if not x.ended])
            ended, self._expired = self._expired, []
            return ended

    def touch(self, session: Session) -> None:
        """The session was active now (a tool call of it just finished)."""
        session.last_active = self._clock()

    def lookup(self, session_id: str) -> Session | None:
        """The session (None if unknown); every request on its path counts as activity."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_active = self._clock()
        return session

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise ApiError("unknown_session", f"no session {session_id!r}; create one with POST /sessions {{claim_id}}")
        return session

    def freeze(self, session: Session, payload: dict[str, Any]) -> str:
        """Store the payload's canonical JSON and return its SHA-256; refuse a second freeze or an ended session."""
        try:
            data = canonical_json(payload)
        except ValueError as exc:  # NaN or infinity somewhere in the payload
            raise ApiError("invalid_arguments", f"the extraction payload must be plain JSON without NaN or "
                                                f"infinity ({exc}); send finite numbers or null") from None
        with self._lock:
            if session.ended:
                raise ApiError("session_ended", f"session {session.id} has ended ({session.end_reason}); "
                                                "create a new session")
            if session.frozen:
                raise ApiError("extraction_already_frozen",
                               f"session {session.id} froze its extraction already (SHA-256 {session.extraction_sha256}); "
                               "the frozen extraction cannot be replaced. Continue with the chamber tools.")
            session._extraction = data
            session.extraction_sha256 = sha256_hex(data)
            session.frozen_at = self._clock()
        return session.extraction_sha256

    def require_chamber_phase(self, session: Session, tool: str) -> None:
        """The two-pass freeze, enforced: a chamber tool only between the freeze and the end of the session."""
        if session.ended:
            raise ApiError("session_ended", f"session {session.id} has ended ({session.end_reason}); {tool} is no "
                                            "longer available. Create a new session for another run.")
        if not session.frozen:
            raise ApiError("extraction_not_frozen",
                           f"{tool} refused: the chamber tools open only after the extraction is frozen. Submit it "
                           f"first with POST /sessions/{session.id}/extraction {{\"payload\": {{...}}}}.")

    def end(self, session: Session, reason: str, outcome: dict[str, Any] | None = None) -> bool:
        """End the session; False when it had already ended (the first end wins)."""
        with self._lock:
            if session.ended:
                return False
            session.outcome = outcome
            session.end_reason = reason
            session.ended_at = self._clock()
        return True
