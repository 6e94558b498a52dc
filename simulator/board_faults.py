"""The emulated board's fault switches: test-only misbehaviour of the link and the firmware, in one dataclass.

Why apart from the protocol: tests, the CLI (`sim serve --faults JSON`) and the board's transport set these
switches without needing anything else of the device side; the protocol only reads them. Nothing here exists on
the real board (simulator/board_protocol.py, FIDELITY).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BoardFaults:
    """Test switches. `*_every=k` hits the k-th, 2k-th, … event; the `*_after_rows`/`*_at` ones fire once."""

    drop_data_every: int = 0  # lose the first transmission of every k-th outgoing data segment
    duplicate_data_every: int = 0  # send every k-th outgoing data segment twice
    corrupt_data_every: int = 0  # corrupt the first transmission of every k-th data segment (CRC fails)
    drop_acks_every: int = 0  # never send every k-th ACK the board owes (the host must resend)
    ignore_acks_every: int = 0  # ignore every k-th ACK from the host (the board resends; host sees a duplicate)
    ack_delay_s: float = 0.0  # delay every ACK the board sends
    error_on: str | None = None  # report `error_code` when a command starting with this arrives (e.g. "MSR")
    error_code: str = "er09"
    error_detail: str = ""
    reset_after_rows: int | None = None  # reboot (and announce) after this many rows of an MSR
    vanish_after_rows: int | None = None  # close the port after this many rows of an MSR
    counter_gap_after_rows: int | None = None  # skip one counter value after this many rows of an MSR
    short_row_at: int | None = None  # send row number k of an MSR 4 bytes short
    silent_boot: bool = False  # next connection: reboot without announcing (a board with auto-reset disabled)
    raw_burst_bytes: int = 0  # next connection: first write this many raw bytes (benchmark reference read)
    no_reset_on_connect: bool = False  # a new host does not reset the board (ser2net holding the port, a Mega with
    # auto-reset disabled): the session, its numbering and any exchange in progress carry over to the next host


def every(k: int, count: int) -> bool:
    """Does an `*_every=k` switch hit the `count`-th event (k = 0: the switch is off)?"""
    return k > 0 and count % k == 0
