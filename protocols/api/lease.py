"""The chamber lease: one session at a time owns the apparatus, one call at a time touches it.

Design (issue #5: "two sessions never interleave SETs; a session's staging + measure should not interleave with
another's"):
- The lease belongs to a *session*, not to a call. A session's first chamber tool call takes it; it stays with
  that session between calls, so nobody else can SET between its stage_conditions and its measure.
- It cannot be held forever: it lapses when its holder has been idle (no call in flight) for `timeout_s`
  (measured on the injected clock), when the holder submits its outcome, or on DELETE /sessions/{id}. A lapsed
  lease is taken by the next session that asks; the old holder is then refused like anyone else.
- Nor can a holder that keeps calling keep it forever: once it has held the lease for `max_hold_s` and another
  session has asked for it meanwhile, the lease lapses as soon as the holder's call in flight ends, and it is
  reserved for the sessions that asked (the old holder is refused for one idle timeout, or until one of them has
  taken it). Nobody waiting: the holder keeps it (a single agent is never interrupted for nothing).
- Any other session asking while the lease is held gets `LeaseBusy` (HTTP 409 `chamber_busy`) with a
  Retry-After: the seconds until the idle timeout could lapse it (the timeout itself while a call is running).
- Within the holder, calls are serialised: a second concurrent call of the same session waits (up to
  `wait_s`, in arrival order: `AsyncFifoLock`) for the first to finish instead of interleaving with it. A
  parallel tool call from one model turn is thus served in order; it is refused only if the wait runs out.

Why asyncio: the API's tool calls run on the server's event loop (app.py) and only the chamber work itself may
leave it, so waiting for the call slot is an awaitable, not a parked thread: no thread per waiting call and no
contention for the GIL between a pool of waiting threads and the loop (issue #5 latency goal). Every method is
called from that one event loop; `holds`/`holder` only read and are safe from anywhere.

One lease per chamber (`ChamberLeases`, issue 24: a session working on the wind tunnel no longer keeps another
off the light tunnel). A call takes the leases of every chamber it may touch, in one fixed order (sorted by
kind), after first checking that none is held by another session, so it takes all of them or none; no deadlock
is possible: another session is refused at once, never queued, and only a session's own calls wait on a call
slot, in the same order.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Iterable

from protocols.service_defaults import DEFAULT_MAX_HOLD_S


class LeaseBusy(Exception):
    """The lease is held by another session (or the holder's own earlier call did not finish in time)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class LeaseGrant:
    session_id: str
    how: str  # "acquired" (free), "held" (already ours), "taken_over" (previous holder idled out)
    previous_holder: str | None = None


class AsyncFifoLock:
    """An asyncio lock whose waiters are served in arrival order, with a timeout on the wait.

    Ownership passes directly to the next waiter on release (its future is resolved while the lock stays
    locked), so a newcomer can never overtake a waiter, and a waiter whose timeout fires just as it was handed
    the lock keeps it."""

    def __init__(self) -> None:
        self._locked = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._locked

    async def acquire(self, timeout: float | None = None) -> bool:
        """True once owned; False when `timeout` seconds passed first (None: wait as long as it takes)."""
        if not self._locked:
            self._locked = True
            return True
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        try:
            await asyncio.wait((turn,), timeout=timeout)
        except BaseException:  # the waiting task was cancelled: give the lock on if it was handed to us
            if turn.done() and not turn.cancelled():
                self.release()
            else:
                self._forget(turn)
            raise
        if turn.done():
            return True
        self._forget(turn)
        return False

    def _forget(self, turn: asyncio.Future[None]) -> None:
        turn.cancel()
        try:
            self._waiters.remove(turn)
        except ValueError:
            pass

    def release(self) -> None:
        while self._waiters:
            turn = self._waiters.popleft()
            if not turn.done():
                turn.set_result(None)  # still locked: the next waiter owns it now
                return
        self._locked = False




class ChamberLease:
    def __init__(self, timeout_s: float, *, clock: Callable[[], float] = time.monotonic, wait_s: float | None = None,
                 max_hold_s: float = DEFAULT_MAX_HOLD_S) -> None:
        if not timeout_s > 0:
            raise ValueError(f"lease timeout must be > 0 s, got {timeout_s!r}")
        if not max_hold_s > 0:
            raise ValueError(f"lease max hold must be > 0 s, got {max_hold_s!r}")
        self.timeout_s = float(timeout_s)
        self.max_hold_s = float(max_hold_s)
        self.wait_s = float(timeout_s if wait_s is None else wait_s)
        self._clock = clock
        self._call = AsyncFifoLock()  # held for the duration of one chamber call; waiters served in arrival order
        self._holder: str | None = None
        self._busy = False
        self._last_active = 0.0
        self._held_since = 0.0
        self._asked: dict[str, float] = {}  # session -> when it was last refused (it wants the lease)
        self._excluded: tuple[str, float] | None = None  # a holder cut off by the max hold, and until when

    @property
    def holder(self) -> str | None:
        return self._holder if not self._lapsed() else None

    def _waiting(self, besides: str | None) -> list[str]:
        """Sessions other than `besides` refused within the last idle timeout (they still want the lease)."""
        now = self._clock()
        return [sid for sid, at in self._asked.items() if sid != besides and now - at < self.timeout_s]

    def _over_hold(self) -> bool:
        return self._clock() - self._held_since >= self.max_hold_s and bool(self._waiting(self._holder))

    def _lapsed(self) -> bool:
        if self._holder is None or self._busy:
            return False
        return self._clock() - self._last_active >= self.timeout_s or self._over_hold()

    def _refuse_if_other(self, session_id: str) -> None:
        """LeaseBusy when another session holds an unlapsed lease, or when this session's hold ran out while
        another session waited (the lease is then reserved for that one for one idle timeout)."""
        now = self._clock()
        if self._holder is not None and not self._busy and self._over_hold():
            self._excluded = (self._holder, now + self.timeout_s)  # cut off; it lapses below
        if self._holder is None or self._lapsed():
            excluded = self._excluded
            if excluded is not None and excluded[0] == session_id and now < excluded[1] and self._waiting(session_id):
                retry = max(1, math.ceil(excluded[1] - now))
                raise LeaseBusy(f"this session held the chamber for the maximum of {self.max_hold_s:g} s while "
                                f"another session waited; the lease is reserved for it; retry after {retry} s", retry)
            return
        if self._holder == session_id:
            return
        self._asked[session_id] = now
        if self._busy:  # how long the call in flight runs is unknown: one idle timeout, as a guess
            retry = max(1, math.ceil(self.timeout_s))
        else:  # it lapses idle, or (this session now asking) once the holder's hold has run out
            idle_left = self.timeout_s - (now - self._last_active)
            hold_left = max(self.max_hold_s - (now - self._held_since), 0.0)
            retry = max(1, math.ceil(min(idle_left, hold_left)))
        raise LeaseBusy(
            f"the chamber is leased to another session (it lapses after {self.timeout_s:g} s without a call, or "
            f"once held {self.max_hold_s:g} s while others wait); retry after {retry} s", retry)

    def check(self, session_id: str) -> None:
        """LeaseBusy now if `begin(session_id)` would be refused by another session's hold (nothing is taken; the
        session is noted as asking, as a refused begin notes it)."""
        self._refuse_if_other(session_id)

    async def begin(self, session_id: str) -> LeaseGrant:
        """Take (or keep) the lease for one call; raises LeaseBusy. Pair every successful begin with end()."""
        self._refuse_if_other(session_id)  # other sessions are refused at once, never queued
        if not await self._call.acquire(timeout=self.wait_s):  # only the holder's own calls wait here
            self._refuse_if_other(session_id)
            raise LeaseBusy(f"an earlier call of session {session_id} is still using the chamber after "
                            f"{self.wait_s:g} s; retry when it has finished", max(1, math.ceil(self.wait_s)))
        try:
            self._refuse_if_other(session_id)  # another session may have taken it while we waited
        except LeaseBusy:
            self._call.release()
            raise
        previous = self._holder
        how = "held" if previous == session_id else ("taken_over" if previous is not None else "acquired")
        if how != "held" or (self._excluded is not None and self._excluded[0] == session_id):
            self._held_since = self._clock()  # a new hold (or a cut-off holder back with nobody waiting)
            self._asked.pop(session_id, None)
            self._excluded = None
        self._holder = session_id
        self._busy = True
        self._last_active = self._clock()
        return LeaseGrant(session_id, how, previous if how == "taken_over" else None)

    def end(self, session_id: str) -> None:
        """The call finished: the session keeps the lease, idle from now."""
        if self._holder != session_id or not self._busy:
            return
        self._busy = False
        self._last_active = self._clock()
        self._call.release()

    async def release(self, session_id: str) -> bool:
        """Give the lease up (the session ended). Waits for a call of the session still in flight, if any."""
        if self._holder != session_id:
            return False
        if not self._busy:
            self._holder = None
            return True
        await self._call.acquire()  # the session's call in flight finishes first
        try:
            if self._holder == session_id and not self._busy:
                self._holder = None
                return True
            return False
        finally:
            self._call.release()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """The call slot for an operator action: waits for the call in flight, keeps every tool call out until
        the block ends; who holds the lease does not change."""
        await self._call.acquire()
        try:
            yield
        finally:
            self._call.release()

    def holds(self, session_id: str) -> bool:
        return self._holder == session_id and not self._lapsed()

    def in_call(self, session_id: str) -> bool:
        """Whether a call of the session is on this chamber now (a session in a call is never idle)."""
        return self._holder == session_id and self._busy


class ChamberLeases:
    """One ChamberLease per chamber kind, taken together in sorted order by a call that touches several."""

    def __init__(self, kinds: Iterable[str], timeout_s: float, *, clock: Callable[[], float] = time.monotonic,
                 wait_s: float | None = None, max_hold_s: float = DEFAULT_MAX_HOLD_S) -> None:
        self.timeout_s = float(timeout_s)
        self.wait_s = float(timeout_s if wait_s is None else wait_s)
        if not timeout_s > 0:
            raise ValueError(f"lease timeout must be > 0 s, got {timeout_s!r}")
        self._by_kind = {kind: ChamberLease(timeout_s, clock=clock, wait_s=wait_s, max_hold_s=max_hold_s)
                         for kind in sorted(set(kinds))}

    def of(self, kind: str) -> ChamberLease:
        return self._by_kind[kind]

    async def begin(self, session_id: str, kinds: Iterable[str]) -> dict[str, LeaseGrant]:
        """Take (or keep) the lease of every chamber in `kinds` for one call, all or none; LeaseBusy names the
        chamber that is busy. Pair a successful begin with end(session_id, the same kinds)."""
        ordered = sorted(set(kinds))
        for kind in ordered:  # refuse before taking anything: a call never holds one lease while refused another
            try:
                self._by_kind[kind].check(session_id)
            except LeaseBusy as exc:
                raise LeaseBusy(f"chamber {kind}: {exc}", exc.retry_after_s) from None
        grants: dict[str, LeaseGrant] = {}
        try:
            for kind in ordered:
                try:
                    grants[kind] = await self._by_kind[kind].begin(session_id)
                except LeaseBusy as exc:
                    raise LeaseBusy(f"chamber {kind}: {exc}", exc.retry_after_s) from None
        except BaseException:
            for kind in grants:
                self._by_kind[kind].end(session_id)
            raise
        return grants

    def end(self, session_id: str, kinds: Iterable[str]) -> None:
        for kind in sorted(set(kinds)):
            self._by_kind[kind].end(session_id)

    async def release(self, session_id: str) -> bool:
        """Give up every lease the session holds (it ended); True if it held one."""
        released = False
        for lease in self._by_kind.values():
            released = await lease.release(session_id) or released
        return released

    @contextlib.asynccontextmanager
    async def exclusive(self, kinds: Iterable[str] | None = None) -> AsyncIterator[None]:
        """The call slots of `kinds` (default: every chamber), taken in sorted order, for an operator action."""
        async with contextlib.AsyncExitStack() as stack:
            for kind in sorted(set(self._by_kind if kinds is None else kinds) & set(self._by_kind)):
                await stack.enter_async_context(self._by_kind[kind].exclusive())
            yield

    def holds(self, session_id: str, kind: str | None = None) -> bool:
        """Whether the session holds the lease of `kind` (None: of any chamber)."""
        leases = self._by_kind.values() if kind is None else [self._by_kind[kind]] if kind in self._by_kind else []
        return any(lease.holds(session_id) for lease in leases)

    def in_call(self, session_id: str) -> bool:
        """Whether a call of the session is on any chamber now."""
        return any(lease.in_call(session_id) for lease in self._by_kind.values())

    def holders(self) -> dict[str, str | None]:
        return {kind: lease.holder for kind, lease in self._by_kind.items()}
