"""Emulated Mk1 boards on pseudo-terminals, for a chamber selection that has no hardware (`make run`).

Why here: the driver floor may use the simulator (chamber/ sits above simulator/), and the boards must live as
long as the chambers opened on them, so they are entered on the caller's ExitStack and stop when it closes.
The driver then reaches them through the real serial path, exactly as it would a USB board.
"""

from __future__ import annotations

import contextlib
from typing import Iterable


def start_emulated_boards(stack: contextlib.ExitStack, kinds: Iterable[str], *, seed: int = 0) -> dict[str, str]:
    """Start one emulated board per kind on a pty (fast pace, seeded); returns its pyserial URL by kind."""
    from simulator.board import running_board

    return {kind: stack.enter_context(running_board(kind, transport="pty", seed=seed)).url for kind in kinds}
