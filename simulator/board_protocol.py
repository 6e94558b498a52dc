"""The device side of the Mk1 wire protocol for one host connection, without any I/O.

Why sans-IO: the board's rules (ACK every data segment, re-ACK duplicates, resend after 100 ms, report errors
outside the framing and then halt) are easiest to get right and to test when bytes in, bytes out and time are
explicit. simulator/board.py moves these bytes over a pty or a TCP socket. The fault switches exist so tests can
make the link misbehave on purpose and check that the host recovers and counts what happened.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from firmware_bridge.batch import build_segments, check_crcs, decode_uniform_padded, encode_acks, frame_uniform
from firmware_bridge.packets import END, HOST_PACKET_LIMIT, START, PacketSplitter, decode_body, encode_packet
from firmware_bridge.rows import encode_rows
from firmware_bridge.variables import COUNTER_PERIOD
from firmware_bridge.segments import (
    CRC_LEN,
    FLAG_ACK,
    HEADER_LEN,
    SEQ_MODULO,
    Arrival,
    Endpoint,
    LinkCounters,
    decode_segment,
    next_seq,
)
from simulator.firmware import EmulatedFirmware, FirmwareFault

log = logging.getLogger(__name__)

RESEND_AFTER_S = 0.1
REBOOT_WAIT_S = 0.3  # after OK,RST: how long to wait for its ACK before rebooting anyway
ROW_BLOCK = 2048  # rows drawn from the physics (and framed) in one go when unthrottled
_ACK_BODY = 4 * ((HEADER_LEN + CRC_LEN + 2) // 3)  # base64 length of an ACK segment
_ACK_PACKET = _ACK_BODY + 2
_END_B = bytes([END])


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


@dataclass
class _Rows:
    """One MSR's rows. Unthrottled, rows are drawn from the physics a block at a time (`ready`) and framed once
    (`wire`), then sent as the window allows: per-row Python and per-call physics overhead would otherwise make
    the emulator, not the host, the bottleneck. The block boundaries depend only on n and the fault switches."""

    left: int  # rows not yet sent
    sent: int = 0
    next_due: float = 0.0
    generated: int = 0  # rows drawn from the firmware so far
    ready: np.ndarray | None = None  # drawn, not yet sent
    wire: bytes = b""  # `ready` framed as packets, valid while (wire_seq, wire_ack) match the endpoint
    ack_wire: bytes = b""  # the ACK packets the host will send for them
    wire_pos: int = 0  # index in `wire` / `ack_wire` of the first row of `ready`
    wire_seq: int = -1
    wire_ack: int = -1
    packet_size: int = 0

    @property
    def ready_count(self) -> int:
        return 0 if self.ready is None else int(self.ready.shape[0])


class _Reboot:
    pass


@dataclass
class _InFlight:
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


def _every(k: int, count: int) -> bool:
    return k > 0 and count % k == 0


@dataclass
class BoardProtocol:
    """Device side of one connection: feed host bytes, tick the clock, take the bytes to send."""

    firmware: EmulatedFirmware
    faults: BoardFaults = field(default_factory=BoardFaults)
    paced: bool = False  # True: rows at firmware.model.rows_per_second, like the real board
    window: int = 16  # data segments in flight; the host ACKs each one, so any window is wire-compatible
    boot_delay: float = 0.02
    counters: LinkCounters = field(default_factory=LinkCounters)

    def __post_init__(self) -> None:
        self.out = bytearray()
        self.endpoint = Endpoint(counters=self.counters)
        self._splitter = PacketSplitter()
        self._queue: deque[bytes | _Rows | _Reboot] = deque()
        self._inflight: deque[_InFlight] = deque()
        self._inflight_count = 0  # data segments sent and not acknowledged (the window fill)
        self._delayed_acks: list[tuple[float, bytes]] = []
        self._boot_at: float | None = None
        self._reboot_deadline: float | None = None
        self._data_count = 0
        self._acks_owed = 0
        self._acks_seen = 0
        self.vanish_requested = False
        self.halted = False

    # ------------------------------------------------------------------ lifecycle
    def connect(self, now: float) -> None:
        """A host opened the port: like the Mega's auto-reset, reboot and announce after the boot delay."""
        self._boot_at = now + self.boot_delay
        self.halted = True  # nothing is processed while booting
        if self.faults.raw_burst_bytes:
            self.out += b"U" * self.faults.raw_burst_bytes
            self.faults.raw_burst_bytes = 0

    def _boot(self, now: float) -> None:
        self.endpoint = Endpoint(counters=self.counters)
        self._queue.clear()
        self._clear_inflight()
        self._delayed_acks.clear()
        self._splitter = PacketSplitter()
        self._reboot_deadline = None
        self.halted = False
        announcements = self.firmware.boot()
        if self.faults.silent_boot:
            self.faults.silent_boot = False
        else:
            for text in announcements:
                self._queue.append(text.encode("ascii"))
        self._boot_at = None
        log.debug("board booted (%s)", self.firmware.config)

    # ------------------------------------------------------------------ input
    def feed(self, data: bytes, now: float) -> None:
        if self.halted:
            return
        last_end = data.rfind(_END_B)
        if last_end >= 0 and len(data) - 1 - last_end <= HOST_PACKET_LIMIT:
            # cannot end in er00: the chunk may be taken in parts, in order, with the ACKs the host owes compared
            # as bytes (the splitter gives the same packets however the stream is cut)
            rest = data
            if not self._splitter.idle:  # first finish the packet the last read cut in two
                cut = data.find(_END_B) + 1
                self._feed_split(data[:cut], now)
                if self.halted:
                    return
                rest = data[cut:]
            whole = len(rest) - len(rest) % _ACK_PACKET
            if whole and self._take_expected_acks(rest[:whole]):
                rest = rest[whole:]
            if rest:
                self._feed_split(rest, now)
            return
        self._feed_split(data, now)

    def _feed_split(self, data: bytes, now: float) -> None:
        split = self._splitter.feed(data)
        if self._splitter.pending > HOST_PACKET_LIMIT:
            self._halt(FirmwareFault("er00", ""))
            return
        bodies = split.bodies
        i, n = 0, len(bodies)
        while i < n and not self.halted:
            j = i + 1
            if len(bodies[i]) == _ACK_BODY:
                while j < n and len(bodies[j]) == _ACK_BODY:
                    j += 1
            if j - i < 4 or not self._take_acks(bodies[i:j]):
                for body in bodies[i:j]:
                    if len(body) + 2 > HOST_PACKET_LIMIT:
                        self._halt(FirmwareFault("er00", ""))
                        return
                    self._on_packet(body, now)
                    if self.halted:
                        return
            i = j

    def _take_expected_acks(self, data: bytes) -> bool:
        """Fastest path: `data` is exactly the ACK packets the host owes for the oldest in-flight segments.

        The board knows those packets byte for byte (worked out when the rows were framed), so comparing bytes
        replaces splitting, base64 and CRC per ACK; the outcome is what the packet-by-packet path would reach.
        """
        m = len(data) // _ACK_PACKET
        if m == 0 or m > self._inflight_count or data[0] != START:
            return False
        pos, need = 0, m
        for item in self._inflight:
            if not item.acks:
                return False
            take = min(need, item.left)
            at = item.done * _ACK_PACKET
            if data[pos : pos + take * _ACK_PACKET] != item.acks[at : at + take * _ACK_PACKET]:
                return False
            pos += take * _ACK_PACKET
            need -= take
            if not need:
                break
        self.counters.segments_received += m
        if self.faults.ignore_acks_every:
            head = self._oldest_seq()
            for ack in range(head, head + m):
                self._on_ack(ack % SEQ_MODULO)
        else:
            self._acks_seen += m
            self._drop_inflight(m)
        return True

    def _take_acks(self, run: list[bytes]) -> bool:
        """Fast path for a run of intact ACKs (the host acknowledging rows)."""
        segments = decode_uniform_padded(run)
        if segments is None or segments.shape[1] != HEADER_LEN + CRC_LEN:
            return False
        if not (segments[:, 0] == FLAG_ACK).all() or not check_crcs(segments).all():
            return False
        self.counters.segments_received += len(run)
        self._on_acks(np.ascontiguousarray(segments[:, 5:9]).view("<u4").ravel())
        return True

    def _on_acks(self, acks: np.ndarray) -> None:
        """Many ACKs at once, with the same outcome as `_on_ack` on each in turn.

        In-flight segments are consecutively numbered (sent in order, removed from the front), so an ACK's
        position is its distance from the oldest one; one-by-one cumulative handling ends up removing everything
        through the furthest position any of these ACKs names.
        """
        if self.faults.ignore_acks_every or not self._inflight:
            for ack in acks.tolist():
                self._on_ack(ack)
            return
        self._acks_seen += len(acks)
        where = (acks.astype(np.int64) - self._oldest_seq()) % SEQ_MODULO
        where = where[where < self._inflight_count]
        if where.size:
            self._drop_inflight(int(where.max()) + 1)

    def _on_ack(self, ack: int) -> None:
        self._acks_seen += 1
        if _every(self.faults.ignore_acks_every, self._acks_seen):
            return
        if not self._inflight:
            return
        where = (ack - self._oldest_seq()) % SEQ_MODULO
        if where < self._inflight_count:  # cumulative: everything up to it arrived
            self._drop_inflight(where + 1)

    def _oldest_seq(self) -> int:
        oldest = self._inflight[0]
        return (oldest.first + oldest.done) % SEQ_MODULO

    def _drop_inflight(self, m: int) -> None:
        """The m oldest in-flight segments were acknowledged."""
        inflight = self._inflight
        self._inflight_count -= m
        while m:
            item = inflight[0]
            take = min(m, item.left)
            item.done += take
            m -= take
            if item.done == item.count:
                inflight.popleft()

    def _clear_inflight(self) -> None:
        self._inflight.clear()
        self._inflight_count = 0

    def _on_packet(self, body: bytes, now: float) -> None:
        raw = decode_body(body)
        segment = decode_segment(raw) if raw is not None else None
        if segment is None:
            self.counters.crc_failures += 1
            return
        kind = self.endpoint.classify(segment)
        if kind is Arrival.ACK:
            self._on_ack(segment.ack)
            return
        if kind is Arrival.UNEXPECTED:
            return
        self._send_ack(segment.seq, now)
        if kind is Arrival.DUPLICATE:
            return
        self._on_message(segment.data.decode("ascii", errors="replace"))

    def _on_message(self, text: str) -> None:
        faults = self.faults
        if faults.error_on is not None and text.startswith(faults.error_on):
            code, detail = faults.error_code, faults.error_detail
            faults.error_on = None  # one-shot
            self._halt(self.firmware.fail(code, detail))
            return
        try:
            response = self.firmware.handle(text)
        except FirmwareFault as fault:
            self._halt(fault)
            return
        if response is None:
            return
        for reply in response.replies:
            self._queue.append(reply.encode("ascii"))
        if response.measure:
            self._queue.append(_Rows(response.measure))
        for reply in response.after:
            self._queue.append(reply.encode("ascii"))
        if response.reboot:
            self._queue.append(_Reboot())

    def _halt(self, fault: FirmwareFault) -> None:
        """Report outside the framing and stop: nothing else is sent until the next boot."""
        self.firmware.halted = fault
        self._queue.clear()
        self._clear_inflight()
        for _, ack in sorted(self._delayed_acks):
            self.out += ack
        self._delayed_acks.clear()
        self.out += fault.report
        self.counters.error_reports += 1
        self.halted = True
        log.debug("board halted: %s", fault)

    def _send_ack(self, seq: int, now: float) -> None:
        self._acks_owed += 1
        if _every(self.faults.drop_acks_every, self._acks_owed):
            return
        packet = encode_packet(self.endpoint.ack_segment(seq), None)
        if self.faults.ack_delay_s > 0:
            self._delayed_acks.append((now + self.faults.ack_delay_s, packet))
        else:
            self.out += packet
            self.counters.segments_sent += 1

    # ------------------------------------------------------------------ output and time
    def tick(self, now: float) -> None:
        """Advance timers: boot, delayed ACKs, resends, and fill the send window."""
        if self._boot_at is not None:
            if now < self._boot_at:
                return
            self._boot(now)
        if self._delayed_acks:
            due = [a for a in self._delayed_acks if a[0] <= now]
            if due:
                self._delayed_acks = [a for a in self._delayed_acks if a[0] > now]
                for _, packet in sorted(due):
                    self.out += packet
        if self.halted:
            return
        if self._inflight and now >= self._inflight[0].deadline:
            self.counters.ack_timeouts += 1
            for item in self._inflight:  # go back N: the host accepts only in order
                self.out += item.unacknowledged()
                item.deadline = now + RESEND_AFTER_S
                self.counters.resends += item.left
        self._fill(now)

    def next_deadline(self, now: float) -> float:
        times = [now + 1.0]
        if self._boot_at is not None:
            times.append(self._boot_at)
        if self._inflight:
            times.append(self._inflight[0].deadline)
        if self._delayed_acks:
            times.append(min(t for t, _ in self._delayed_acks))
        if self._queue and isinstance(self._queue[0], _Rows) and self.paced:
            times.append(self._queue[0].next_due)
        if self._reboot_deadline is not None:
            times.append(self._reboot_deadline)
        return min(times)

    def _fill(self, now: float) -> None:
        queue = self._queue
        while queue and self._inflight_count < self.window and not self.halted:
            item = queue[0]
            if isinstance(item, bytes):
                queue.popleft()
                self._send_data(item, now)
            elif isinstance(item, _Rows):
                if not self._send_rows(item, now):
                    return
                if item.left == 0:
                    queue.popleft()
            else:  # a reboot after OK,RST: once it was acknowledged, or after REBOOT_WAIT_S
                if self._reboot_deadline is None:
                    self._reboot_deadline = now + REBOOT_WAIT_S
                if self._inflight and now < self._reboot_deadline:
                    return
                self._boot(now)

    def _send_rows(self, item: _Rows, now: float) -> bool:
        """Send the next rows of an MSR; False when the pace says not yet (or a fault ended the session)."""
        if self.paced:
            if item.sent == 0 and item.next_due == 0.0:
                item.next_due = now + 1.0 / self.firmware.model.rows_per_second
                return False
            if now < item.next_due:
                return False
            item.next_due += 1.0 / self.firmware.model.rows_per_second
            if not item.ready_count:
                self._draw_rows(item, 1)
            k = min(1, item.ready_count)
        else:
            if not item.ready_count:
                self._draw_rows(item, ROW_BLOCK)
            k = min(item.ready_count, self.window - self._inflight_count)
        faults = self.faults
        if k > 0:
            if self._data_faults_active() or faults.short_row_at is not None:
                assert item.ready is not None
                payloads = encode_rows(item.ready[:k])
                if faults.short_row_at is not None and item.sent <= faults.short_row_at < item.sent + k:
                    i = faults.short_row_at - item.sent
                    payloads[i] = payloads[i][:-4]
                    faults.short_row_at = None
                for payload in payloads:
                    self._send_data(payload, now)
                item.wire = b""  # the endpoint moved on without the framed block
            else:
                self._send_row_block(item, k, now)
            item.ready = item.ready[k:] if item.ready is not None else None
            item.sent += k
            item.left -= k
        if faults.reset_after_rows is not None and item.sent >= faults.reset_after_rows:
            faults.reset_after_rows = None
            self._boot(now)
            return False
        if faults.vanish_after_rows is not None and item.sent >= faults.vanish_after_rows:
            faults.vanish_after_rows = None
            self.vanish_requested = True
            self.halted = True
            return False
        return True

    def _draw_rows(self, item: _Rows, block: int) -> None:
        """Take the next block of rows from the firmware (physics sampled once for the whole block)."""
        k = min(item.left, block)
        for limit in (self.faults.reset_after_rows, self.faults.vanish_after_rows):
            if limit is not None:  # never draw rows the board will not send (the counter would run ahead)
                k = min(k, max(limit - item.generated, 0))
        if k <= 0:
            item.ready = None
            return
        rows = self.firmware.rows(k)
        faults = self.faults
        drawn = item.generated
        if faults.counter_gap_after_rows is not None and drawn + k > faults.counter_gap_after_rows >= drawn:
            i = faults.counter_gap_after_rows - drawn
            rows[i:, 0] += 1  # the counter jumps by one
            self.firmware.counter = (self.firmware.counter + 1) % COUNTER_PERIOD
            faults.counter_gap_after_rows = None
        item.generated += k
        item.ready = rows
        item.wire = b""

    def _data_faults_active(self) -> bool:
        f = self.faults
        return bool(f.drop_data_every or f.duplicate_data_every or f.corrupt_data_every)

    def _send_row_block(self, item: _Rows, k: int, now: float) -> None:
        """The next k rows of the drawn block; byte-identical to sending them one by one.

        The block is framed once (vectorised CRC and base64) with the numbering the endpoint will give it, and the
        host's ACKs for it are worked out at the same time; if the endpoint's numbers changed meanwhile (a command
        arrived mid-MSR), the unsent rest is framed again.
        """
        endpoint = self.endpoint
        first = next_seq(endpoint.last_delivered)
        if not item.wire or item.wire_seq != first or item.wire_ack != endpoint.last_acknowledged:
            assert item.ready is not None
            count = item.ready.shape[0]
            payloads = np.ascontiguousarray(item.ready, dtype="<f4").view(np.uint8).reshape(count, -1)
            item.wire = frame_uniform(build_segments(0, first, endpoint.last_acknowledged, payloads))
            seqs = (first + np.arange(count, dtype=np.uint64)) % SEQ_MODULO
            item.ack_wire = encode_acks(endpoint.last_acknowledged, seqs)
            item.wire_pos = 0
            item.packet_size = len(item.wire) // count
            item.wire_ack = endpoint.last_acknowledged
        size, pos = item.packet_size, item.wire_pos
        packets = item.wire[pos * size : (pos + k) * size]
        acks = item.ack_wire[pos * _ACK_PACKET : (pos + k) * _ACK_PACKET]
        self._inflight.append(_InFlight(first, k, size, packets, acks, now + RESEND_AFTER_S))
        self._inflight_count += k
        self.out += packets
        item.wire_pos = pos + k
        item.wire_seq = (first + k) % SEQ_MODULO
        endpoint.last_delivered = (first + k - 1) % SEQ_MODULO
        self._data_count += k
        self.counters.segments_sent += k

    def _send_data(self, payload: bytes, now: float) -> None:
        seq, segment = self.endpoint.data_segment(payload)
        intact = encode_packet(segment, None)
        self._inflight.append(_InFlight(seq, 1, len(intact), intact, b"", now + RESEND_AFTER_S))
        self._inflight_count += 1
        self._data_count += 1
        self.counters.segments_sent += 1
        faults, count = self.faults, self._data_count
        if _every(faults.drop_data_every, count):
            return
        wire = segment
        if _every(faults.corrupt_data_every, count):
            damaged = bytearray(segment)
            damaged[len(damaged) // 2] ^= 0xFF
            wire = bytes(damaged)
        packet = encode_packet(wire, None)
        self.out += packet
        if _every(faults.duplicate_data_every, count):
            self.out += packet

