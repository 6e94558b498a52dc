"""Failed logins counted per (account name, address): after `max_failures` within `window_s`, that address is
refused for that name (429 with Retry-After) without hashing, until the oldest failure leaves the window.

Why per (name, address): a guesser from one address is stopped on the account it guesses, while the account's
owner (another address) and every other account from that address go on. Why without hashing: a hash costs tens of
milliseconds and 64 MiB on purpose; a limited attempt must cost neither. Memory is bounded: failures older than
the window are forgotten, and at most `max_keys` pairs are tracked (the stalest dropped first). The clock is
passed in, so tests move time instead of waiting.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Callable

MAX_FAILURES = 10
WINDOW_S = 600.0
MAX_KEYS = 50_000  # (account, address) pairs tracked at most: a bounded memory whatever an attacker sends


class LoginLimiter:
    def __init__(self, clock: Callable[[], float], *, max_failures: int = MAX_FAILURES, window_s: float = WINDOW_S,
                 max_keys: int = MAX_KEYS):
        self.clock, self.max_failures, self.window_s, self.max_keys = clock, max_failures, window_s, max_keys
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, name: str, address: str) -> float | None:
        """Seconds until `name` may be tried again from `address`; None when it may be tried now."""
        now = self.clock()
        with self._lock:
            times = self._failures.get((name, address))
            if times is None:
                return None
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if not times:
                del self._failures[(name, address)]
                return None
            if len(times) < self.max_failures:
                return None
            return max(0.0, times[0] + self.window_s - now)

    def failed(self, name: str, address: str) -> None:
        now = self.clock()
        with self._lock:
            key = (name, address)
            times = self._failures.pop(key, None) or deque(maxlen=self.max_failures)
            times.append(now)
            self._failures[key] = times  # most recent last
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)

    def succeeded(self, name: str, address: str) -> None:
        with self._lock:
            self._failures.pop((name, address), None)
