"""Where a tool's chamber work runs: inline on the server's event loop, or on one worker thread that owns the chamber.

Why two ways: a call to the in-process simulator is a fraction of a millisecond of Python (a whole protocol run
on it is about 10 ms) and never waits on a device, so running it inline costs nothing and avoids the thread
hand-off and the contention for the GIL between a thread pool and the event loop that dominated the API's tail
latency (issue #5). A chamber on a serial port blocks for n/7 s per measure: that work must leave the loop, and
it goes to a pool of one thread per chamber (each chamber has its own lease, so at most one call per chamber is
in flight: a long run on the wind tunnel does not hold a light-tunnel call back, issue 24), leaving the loop free
to answer other requests (409s, status, health) meanwhile.

`mode_for` picks "inline" only when every connected chamber is the in-process simulator; anything else (a
serial port, a test double of unknown speed) gets "thread".
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")

MODES = ("auto", "inline", "thread")


def mode_for(chambers: Mapping[str, Any]) -> str:
    """"inline" when every chamber runs in-process (no device to wait for), else "thread"."""
    from chamber.sim_backend import SimBackend

    in_process = bool(chambers) and all(isinstance(getattr(ch, "backend", None), SimBackend) for ch in chambers.values())
    return "inline" if in_process else "thread"


class ChamberRunner:
    """Runs chamber work for the tool calls: `await runner.run(fn, *args)`."""

    def __init__(self, mode: str, *, lanes: int = 1) -> None:
        """`lanes`: the chamber calls that may run at once in "thread" mode (one per chamber: the leases keep two
        calls off one chamber)."""
        if mode not in ("inline", "thread"):
            raise ValueError(f"chamber call mode must be 'inline' or 'thread', got {mode!r}")
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, got {lanes!r}")
        self.mode = mode
        self._thread = (ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="chamber") if mode == "thread"
                        else None)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._thread is None:
            return fn(*args)
        done = asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            # A call already on the apparatus cannot be taken back: let it finish before the caller's lease
            # bookkeeping (a `finally`) lets the next call in, then propagate the cancellation.
            await asyncio.wait((done,))
            if not done.cancelled():
                done.exception()  # retrieved: the caller's cancellation is what propagates
            raise

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False)
