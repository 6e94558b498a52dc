"""The board's send window: data segments sent and not yet acknowledged, the host's ACKs, and go-back-N resends.

Why a module of its own: this is the part of the device side where the fast paths live (ACKs compared as bytes
against the ones the board worked out when it framed the rows, runs of ACKs decoded at once) and each of them
must reach exactly the state the one-ACK-at-a-time rule reaches (tests/test_board_block_paths.py). Keeping the
window's bookkeeping together, apart from the firmware's command handling, keeps that equivalence checkable.
With window = 1 this is the firmware's stop-and-wait send_data().
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from firmware_bridge.batch import check_crcs, decode_uniform_padded
from firmware_bridge.link import RESEND_AFTER_S  # the protocol's ACK_TIMEOUT, the board's as well as the host's
from firmware_bridge.packets import START
from firmware_bridge.segments import CRC_LEN, FLAG_ACK, HEADER_LEN, SEQ_MODULO, LinkCounters
from simulator.board_faults import every

ACK_BODY = 4 * ((HEADER_LEN + CRC_LEN + 2) // 3)  # base64 length of an ACK segment
ACK_PACKET = ACK_BODY + 2  # with START and END


@dataclass
class InFlight:
    """Consecutively numbered data segments sent at one time and not all acknowledged yet.

    Kept per send rather than per segment so that thousands of rows cost a few objects. `packets` holds `count`
    intact packets of `size` bytes back to back (for resends), `acks` the ACK packets the host is expected to
    send for them (b"" when not worked out); the first `done` are acknowledged.
    """

    first: int  # sequence number of packet 0
    count: int
    size: int
    packets: bytes
    acks: bytes
    deadline: float
    done: int = 0

    @property
    def left(self) -> int:
        return self.count - self.done

    def unacknowledged(self) -> bytes:
        return self.packets[self.done * self.size :]


class InFlightWindow:
    """The data segments in flight, oldest first. `count` is the window fill; `ignore_every` is the
    BoardFaults.ignore_acks_every switch, passed on each call because a test may replace the faults mid-run."""

    def __init__(self, counters: LinkCounters) -> None:
        self.counters = counters
        self.items: deque[InFlight] = deque()
        self.count = 0  # data segments sent and not acknowledged
        self.acks_seen = 0  # ACKs from the host (the ignore_acks_every switch counts them)

    def add(self, item: InFlight) -> None:
        self.items.append(item)
        self.count += item.count

    def clear(self) -> None:
        self.items.clear()
        self.count = 0

    def deadline(self) -> float | None:
        """When the oldest unacknowledged segment is resent (None: nothing in flight)."""
        return self.items[0].deadline if self.items else None

    def resend_due(self, now: float) -> bytes | None:
        """Go back N: past the oldest deadline, every unacknowledged packet again, in order (the host accepts
        only in order); None when nothing is due."""
        if not self.items or now < self.items[0].deadline:
            return None
        self.counters.ack_timeouts += 1
        out = bytearray()
        for item in self.items:
            out += item.unacknowledged()
            item.deadline = now + RESEND_AFTER_S
            self.counters.resends += item.left
        return bytes(out)

    def oldest_seq(self) -> int:
        oldest = self.items[0]
        return (oldest.first + oldest.done) % SEQ_MODULO

    def drop(self, m: int) -> None:
        """The m oldest in-flight segments were acknowledged."""
        items = self.items
        self.count -= m
        while m:
            item = items[0]
            take = min(m, item.left)
            item.done += take
            m -= take
            if item.done == item.count:
                items.popleft()

    def on_ack(self, ack: int, ignore_every: int) -> None:
        """One ACK from the host: cumulative, everything up to the segment it names arrived."""
        self.acks_seen += 1
        if every(ignore_every, self.acks_seen):
            return
        if not self.items:
            return
        where = (ack - self.oldest_seq()) % SEQ_MODULO
        if where < self.count:
            self.drop(where + 1)

    def on_acks(self, acks: np.ndarray, ignore_every: int) -> None:
        """Many ACKs at once, with the same outcome as `on_ack` on each in turn.

        In-flight segments are consecutively numbered (sent in order, removed from the front), so an ACK's
        position is its distance from the oldest one; one-by-one cumulative handling ends up removing everything
        through the furthest position any of these ACKs names.
        """
        if ignore_every or not self.items:
            for ack in acks.tolist():
                self.on_ack(ack, ignore_every)
            return
        self.acks_seen += len(acks)
        where = (acks.astype(np.int64) - self.oldest_seq()) % SEQ_MODULO
        where = where[where < self.count]
        if where.size:
            self.drop(int(where.max()) + 1)

    def take_acks(self, run: list[bytes], ignore_every: int) -> bool:
        """Fast path for a run of packet bodies that are all intact ACKs (the host acknowledging rows); False,
        with nothing changed, when any of them is not."""
        segments = decode_uniform_padded(run)
        if segments is None or segments.shape[1] != HEADER_LEN + CRC_LEN:
            return False
        if not (segments[:, 0] == FLAG_ACK).all() or not check_crcs(segments).all():
            return False
        self.counters.segments_received += len(run)
        self.on_acks(np.ascontiguousarray(segments[:, 5:9]).view("<u4").ravel(), ignore_every)
        return True

    def take_expected_acks(self, data: bytes, ignore_every: int) -> bool:
        """Fastest path: `data` is exactly the ACK packets the host owes for the oldest in-flight segments.

        The board knows those packets byte for byte (worked out when the rows were framed), so comparing bytes
        replaces splitting, base64 and CRC per ACK; the outcome is what the packet-by-packet path would reach.
        False, with nothing changed, when `data` is anything else.
        """
        m = len(data) // ACK_PACKET
        if m == 0 or m > self.count or data[0] != START:
            return False
        pos, need = 0, m
        for item in self.items:
            if not item.acks:
                return False
            take = min(need, item.left)
            at = item.done * ACK_PACKET
            if data[pos : pos + take * ACK_PACKET] != item.acks[at : at + take * ACK_PACKET]:
                return False
            pos += take * ACK_PACKET
            need -= take
            if not need:
                break
        self.counters.segments_received += m
        if ignore_every:
            head = self.oldest_seq()
            for ack in range(head, head + m):
                self.on_ack(ack % SEQ_MODULO, ignore_every)
        else:
            self.acks_seen += m
            self.drop(m)
        return True
