"""Stage a chamber, let it settle, measure — and turn apparatus trouble into a status, never a number.

Why: every protocol does the same three steps, and every one of them must treat a lost link or a firmware
error the same way: the half-taken measurement is discarded and the claim's verdict becomes "error" (an
apparatus problem is not evidence against the datasheet).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from firmware_bridge.errors import FirmwareError, LinkLost

from protocols.measurement import Measurement

log = logging.getLogger(__name__)

APPARATUS_ERRORS: tuple[type[BaseException], ...] = (LinkLost, FirmwareError, TimeoutError, OSError)


def stage_and_measure(chamber: Any, settings: dict[str, float], rows: int, settle_rows: int) -> Any:
    """Apply `settings`, discard `settle_rows` rows (fans spin down, the pressure field relaxes), measure `rows`.

    The settle rows are measured and thrown away rather than waited for, so the same code settles a real board
    (about 7 rows/s) and an unthrottled simulator alike.
    """
    chamber.set_many(settings)
    if settle_rows > 0:
        chamber.measure(settle_rows)
    return chamber.measure(rows)


def apparatus_guard(unit: str, extra: tuple[type[BaseException], ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a protocol run: a lost link (any LinkLost, reboots included) is status "link_lost"; a firmware
    error, a timeout, an OS error or one of `extra` (e.g. instrument errors) is "aborted" — verdict "error"."""
    caught = APPARATUS_ERRORS + tuple(extra)

    def wrap(run: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(run)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            from protocols.registry import ProtocolOutcome

            try:
                return run(*args, **kwargs)
            except LinkLost as exc:
                log.warning("link lost during protocol: %s", exc)
                return ProtocolOutcome(measurement=Measurement.failed(unit, "link_lost", str(exc)))
            except caught as exc:  # LinkLost is caught just above
                log.warning("apparatus error during protocol: %s", exc)
                return ProtocolOutcome(
                    measurement=Measurement.failed(unit, "aborted", f"{type(exc).__name__}: {exc}")
                )

        return guarded

    return wrap
