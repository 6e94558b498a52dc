"""The device side of the Mk1 wire protocol for one host connection, without any I/O.

Why sans-IO: the board's rules (ACK every data segment, re-ACK duplicates, resend after 100 ms, report errors
outside the framing and then halt) are easiest to get right and to test when bytes in, bytes out and time are
explicit. simulator/board.py moves these bytes over a pty or a TCP socket. The fault switches exist so tests can
make the link misbehave on purpose and check that the host recovers and counts what happened.

The parts with a job of their own live beside this module: simulator/board_receive.py (receive_packet()'s parser),
simulator/board_window.py (the send window: segments in flight, the host's ACKs and their fast paths, go-back-N
resends) and simulator/board_faults.py (the fault switches). This module keeps the rest of the connection: boot,
the receive ring, the command queue, the pace, and drawing and framing an MSR's rows.

What it copies from the real firmware (serial_comms.cpp, the sketches' setup() and loop(); checked against it by
tests/test_board_vs_firmware.py):
- Boot: the receiver is off until Serial.begin() (bytes sent earlier are lost), then setup() waits 500 ms and
  sends CHAMBER_CONFIG, resent every 100 ms until ACKed, and only then VARIABLES_LIST. RST keeps the receiver on
  but loses what was in the receive ring.
- Stop-and-wait: each data segment is sent and ACK-awaited (resent every 100 ms) before the next one. While the
  board is sending (inside a command) it reads only ACKs and duplicates; a new host command is dropped unACKed
  (the host resends it). After OK,RST the board waits for that ACK, however long, and then reboots.
- receive_packet's parser: a packet is START, at most 64 characters, END; a longer one resets the parser and is
  dropped silently (no er00: receive_string's er00 cannot be reached through a 64-byte buffer), and a START
  inside a packet is just a character.
- While the board is busy (measuring a row, moving a motor, booting) host bytes wait in the Mega's 64-byte receive
  ring (63 usable); what does not fit is lost.
- The WT idle loop measures (~1/7 s per pass) and looks at the serial port only between passes, so its ACK of a
  command comes up to one pass late; the LT waits in receive_string and answers at once.

FIDELITY: the deliberate differences from the real board, all here in one place
| what | real board | here |
|---|---|---|
| pace="fast" (tests, the main job) | boot ~1.15 s (WT) / ~1.42 s (LT), rows at 7 / 12 per s, moves and pictures take their time | boot `boot_delay` (20 ms), no time for rows, moves, pictures or the WT idle pass; the physics advances only by rows sampled (deterministic) |
| pace="real" (default of make_board / `sim serve --pace real`) | as above | the same timings (rows at the physics model's rows_per_second); the physics also advances with the wall clock between commands (idle time is sampled and discarded, at most MAX_CATCH_UP_S) |
| window > 1 | stop-and-wait | up to `window` data segments in flight (rows only; text is always stop-and-wait), the receive ring is not modelled (the board always reads) |
| fault switches (BoardFaults) | none | test-only misbehaviour |
| int width | 16-bit int on the AVR | MSR n and step counts as the harness's native build (32-bit; NaN/huge → INT_MIN / 0 steps) |
| pressure-control | not in the released firmware | offered from its commented-out code |
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from firmware_bridge.batch import build_segments, encode_acks, frame_uniform
from firmware_bridge.link import RESEND_AFTER_S  # the protocol's ACK_TIMEOUT, the board's as well as the host's
from firmware_bridge.packets import encode_packet, segment_of
from firmware_bridge.rows import encode_rows
from firmware_bridge.segments import SEQ_MODULO, Arrival, Endpoint, LinkCounters, next_seq
from firmware_bridge.variables import COUNTER_PERIOD
from simulator.board_faults import BoardFaults, every
from simulator.board_receive import END_BYTE, FirmwareParser
from simulator.board_window import ACK_BODY, ACK_PACKET, InFlight, InFlightWindow
from simulator.firmware import EmulatedFirmware, FirmwareFault

log = logging.getLogger(__name__)

RECEIVE_RING = 63  # the Mega's serial receive ring (64 bytes, one always free)
SERIAL_ON_BEFORE_ANNOUNCE_S = 0.5  # setup(): Serial.begin(), then delay(500), then CHAMBER_CONFIG
REAL_BOOT_S = {"wt": 1.15, "lt": 1.42}  # power-on (or RST) to CHAMBER_CONFIG, measured on the firmware harness
FAST_BOOT_S = 0.02
MAX_CATCH_UP_S = 3600.0  # real pace: idle time the physics catches up on at most (rows sampled and discarded)
PACES = ("real", "fast")
ROW_BLOCK = 2048  # rows drawn from the physics (and framed) in one go when unthrottled


@dataclass
class _Rows:
    """One MSR's rows. Unthrottled, rows are drawn from the physics a block at a time (`ready`) and framed once
    (`wire`), then sent as the window allows: per-row Python and per-call physics overhead would otherwise make
    the emulator, not the host, the bottleneck. The block boundaries depend only on n and the fault switches."""

    left: int  # rows not yet sent
    sent: int = 0
    next_due: float = 0.0  # real pace: when the row being measured is ready (0: not measuring)
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
class _Busy:
    """The board doing something before its next reply (a motor move): not reading, not sending."""

    seconds: float
    until: float | None = None


@dataclass
class BoardProtocol:
    """Device side of one connection: feed host bytes, tick the clock, take the bytes to send."""

    firmware: EmulatedFirmware
    faults: BoardFaults = field(default_factory=BoardFaults)
    pace: str = "real"  # "real": the real board's timings; "fast": no time for anything (see FIDELITY above)
    window: int = 1  # data segments in flight: 1 is the firmware's stop-and-wait; more is a deliberate difference
    boot_delay: float | None = None  # None: REAL_BOOT_S of the chamber at real pace, FAST_BOOT_S at fast pace
    counters: LinkCounters = field(default_factory=LinkCounters)

    def __post_init__(self) -> None:
        if self.pace not in PACES:
            raise ValueError(f"pace must be one of {', '.join(PACES)}, got {self.pace!r}")
        if self.boot_delay is None:
            self.boot_delay = REAL_BOOT_S.get(self.firmware.chamber, 1.2) if self.paced else FAST_BOOT_S
        self.out = bytearray()
        self.endpoint = Endpoint(counters=self.counters)
        self._splitter = FirmwareParser()
        self._serial_on_at: float | None = None
        self._ring = bytearray()  # host bytes waiting while the board is busy
        self._ring_since: float | None = None
        self.bytes_lost = 0  # host bytes the board never saw (receiver off, receive ring full)
        self._busy_until = 0.0
        self._idle_since: float | None = None  # WT: the idle loop's measuring passes started here
        self._idle_measuring = False
        self._physics_at: float | None = None
        self._now = 0.0  # the time of the packet being handled
        self._queue: deque[bytes | _Rows | _Reboot] = deque()
        self.in_flight = InFlightWindow(self.counters)  # data segments sent and not acknowledged
        self._delayed_acks: list[tuple[float, bytes]] = []
        self._boot_at: float | None = None
        self._data_count = 0
        self._acks_owed = 0
        self.vanish_requested = False
        self.halted = False

    @property
    def paced(self) -> bool:
        return self.pace == "real"

    # ------------------------------------------------------------------ lifecycle
    def connect(self, now: float) -> None:
        """A host opened the port: like the Mega's auto-reset, reboot and announce after the boot delay."""
        assert self.boot_delay is not None
        self._boot_at = now + self.boot_delay
        self._serial_on_at = max(now, self._boot_at - SERIAL_ON_BEFORE_ANNOUNCE_S) if self.paced else now
        self._physics_at = now
        self.halted = True  # nothing is processed while booting
        if self.faults.raw_burst_bytes:
            self.out += b"U" * self.faults.raw_burst_bytes
            self.faults.raw_burst_bytes = 0

    def _boot(self, now: float) -> None:
        self.endpoint = Endpoint(counters=self.counters)
        self._queue.clear()
        self.in_flight.clear()
        self._delayed_acks.clear()
        self._splitter = FirmwareParser()
        self._busy_until = 0.0
        self._idle_since = None
        self._idle_measuring = False
        self._physics_at = now - (self.boot_delay or 0.0)  # setup() started the fans at power-on
        self.halted = False
        announcements = self.firmware.boot()
        if self.faults.silent_boot:
            self.faults.silent_boot = False
        else:
            for text in announcements:
                self._queue.append(text.encode("ascii"))
        self._boot_at = None
        log.debug("board booted (%s)", self.firmware.config)

    def _soft_reset(self, now: float) -> None:
        """resetFunc() after OK,RST: setup() runs again; the receiver stays on, the receive ring is lost."""
        assert self.boot_delay is not None
        self._boot_at = now + self.boot_delay
        self._serial_on_at = now
        self._ring.clear()
        self._ring_since = None
        self._queue.clear()
        self.in_flight.clear()
        self.halted = True

    # ------------------------------------------------------------------ input
    def _listening(self, now: float) -> bool:
        """Is the firmware reading the serial port right now (else bytes wait in the receive ring)?"""
        if self._boot_at is not None:
            return False
        if self.window > 1:
            return True
        return now >= self._busy_until and not self._idle_measuring

    def feed(self, data: bytes, now: float) -> None:
        if self._boot_at is not None:  # booting: lost before Serial.begin(), then kept in the ring
            if self._serial_on_at is None or now < self._serial_on_at:
                self.bytes_lost += len(data)
                return
            self._to_ring(data, now)
            return
        if self.halted:
            return
        if not self._listening(now):
            self._to_ring(data, now)
            return
        self._feed_now(data, now)

    def _to_ring(self, data: bytes, now: float) -> None:
        room = RECEIVE_RING - len(self._ring)
        if room < len(data):
            self.bytes_lost += len(data) - max(room, 0)
            log.debug("board receive ring full: %d byte(s) lost", len(data) - max(room, 0))
        if room > 0 and data:
            if not self._ring:
                self._ring_since = now
            self._ring += data[:room]

    def _flush_ring(self, now: float) -> None:
        """The firmware reads again: what waited in the ring is read first."""
        if self._ring and self._listening(now) and not self.halted:
            data = bytes(self._ring)
            self._ring.clear()
            self._ring_since = None
            self._on_bodies(self._splitter.feed(data, first_only=True), now)

    def _feed_now(self, data: bytes, now: float) -> None:
        last_end = data.rfind(END_BYTE)
        if last_end >= 0:
            # cannot end in er00: the chunk may be taken in parts, in order, with the ACKs the host owes compared
            # as bytes (the splitter gives the same packets however the stream is cut)
            rest = data
            if not self._splitter.idle:  # first finish the packet the last read cut in two
                cut = data.find(END_BYTE) + 1
                self._feed_split(data[:cut], now)
                if self.halted:
                    return
                rest = data[cut:]
            whole = len(rest) - len(rest) % ACK_PACKET
            if whole and self.in_flight.take_expected_acks(rest[:whole], self.faults.ignore_acks_every):
                rest = rest[whole:]
            if rest:
                self._feed_split(rest, now)
            return
        self._feed_split(data, now)

    def _feed_split(self, data: bytes, now: float) -> None:
        self._on_bodies(self._splitter.feed(data), now)

    def _on_bodies(self, bodies: list[bytes], now: float) -> None:
        i, n = 0, len(bodies)
        while i < n and not self.halted:
            j = i + 1
            if len(bodies[i]) == ACK_BODY:
                while j < n and len(bodies[j]) == ACK_BODY:
                    j += 1
            if j - i < 4 or not self.in_flight.take_acks(bodies[i:j], self.faults.ignore_acks_every):
                for body in bodies[i:j]:
                    self._on_packet(body, now)
                    if self.halted:
                        return
            i = j

    def _on_packet(self, body: bytes, now: float) -> None:
        segment = segment_of(body)
        if segment is None:
            self.counters.crc_failures += 1
            return
        if not segment.is_ack and segment.seq == next_seq(self.endpoint.last_acknowledged) and self._executing():
            # send_data() reads only ACKs and duplicates: a new command is dropped, unacknowledged
            self.counters.segments_received += 1
            self.counters.unexpected += 1
            return
        kind = self.endpoint.classify(segment)
        if kind is Arrival.ACK:
            self.in_flight.on_ack(segment.ack, self.faults.ignore_acks_every)
            return
        if kind is Arrival.UNEXPECTED:
            return
        self._send_ack(segment.seq, now)
        if kind is Arrival.DUPLICATE:
            return
        self._now = now
        # receive_string(): the bytes up to the first NUL become the String
        self._on_message(segment.data.split(b"\0", 1)[0].decode("latin-1"))

    def _executing(self) -> bool:
        """Inside a command (or the boot announcements): replies still to send or to be acknowledged."""
        return bool(self._queue) or self.in_flight.count > 0

    def _on_message(self, text: str) -> None:
        self._idle_since = None
        self._idle_measuring = False
        faults = self.faults
        if faults.error_on is not None and text.startswith(faults.error_on):
            code, detail = faults.error_code, faults.error_detail
            faults.error_on = None  # one-shot
            self._halt(self.firmware.fail(code, detail))
            return
        if self.paced:
            self._advance_physics(self._now)
        try:
            response = self.firmware.handle(text)
        except FirmwareFault as fault:
            self._halt(fault)
            return
        if response is None:
            return
        if self.paced and response.busy_s > 0:
            self._queue.append(_Busy(response.busy_s))
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
        self.in_flight.clear()
        for _, ack in sorted(self._delayed_acks):
            self.out += ack
        self._delayed_acks.clear()
        self.out += fault.report
        self.counters.error_reports += 1
        self.halted = True
        log.debug("board halted: %s", fault)

    def _send_ack(self, seq: int, now: float) -> None:
        self._acks_owed += 1
        if every(self.faults.drop_acks_every, self._acks_owed):
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
        resent = self.in_flight.resend_due(now)
        if resent is not None:
            self.out += resent
        self._flush_ring(now)
        self._fill(now)
        if not self.halted and not self._queue and not self.in_flight.count and self._boot_at is None:
            self._idle(now)
        self._flush_ring(now)

    def _idle(self, now: float) -> None:
        """Between commands. LT: receive_string() reads at once. WT: loop() runs take_measurements() while the
        serial port is empty and looks at it only between passes, so a command waits for the pass to end."""
        if self._idle_since is None:
            self._idle_since = now
            self._idle_measuring = self.paced and self.firmware.chamber == "wt" and self.window == 1
        if self._idle_measuring and self._ring_since is not None and now >= self._idle_look_at():
            self._idle_measuring = False  # Serial.available() > 0: receive_string() until a command arrives

    def _idle_look_at(self) -> float:
        """The end of the idle pass during which the first waiting byte arrived."""
        assert self._idle_since is not None and self._ring_since is not None
        period = self.firmware.row_seconds()
        passes = math.ceil(max(self._ring_since - self._idle_since, 0.0) / period)
        return self._idle_since + passes * period

    def next_deadline(self, now: float) -> float:
        times = [now + 1.0]
        if self._boot_at is not None:
            times.append(self._boot_at)
        resend_at = self.in_flight.deadline()
        if resend_at is not None:
            times.append(resend_at)
        if self._delayed_acks:
            times.append(min(t for t, _ in self._delayed_acks))
        if self._busy_until > now:
            times.append(self._busy_until)
        if self._idle_measuring and self._ring_since is not None and self._idle_since is not None:
            times.append(self._idle_look_at())
        return min(times)

    def _advance_physics(self, now: float) -> None:
        """Real pace: the chamber's physics runs on between rows too (fans spin up while the host waits). The
        time since the last row is sampled and discarded, at most MAX_CATCH_UP_S of it."""
        model = self.firmware.model
        if self._physics_at is None or getattr(model, "replays_recorded_rows", False):
            self._physics_at = now
            return
        rate = model.rows_per_second
        k = int((now - self._physics_at) * rate)
        if k > 0:
            model.sample(min(k, int(MAX_CATCH_UP_S * rate)))
            self._physics_at += k / rate

    def _fill(self, now: float) -> None:
        queue = self._queue
        while queue and self.in_flight.count < self.window and not self.halted:
            item = queue[0]
            if isinstance(item, bytes):
                if self.in_flight.count:  # text is sent stop-and-wait whatever the window (send_string)
                    return
                queue.popleft()
                self._send_data(item, now)
            elif isinstance(item, _Rows):
                if item.sent == 0 and self.in_flight.count:  # OK,MSR first, stop-and-wait like all text
                    return
                if not self._send_rows(item, now):
                    return
                if item.left == 0:
                    queue.popleft()
            elif isinstance(item, _Busy):
                if item.until is None:
                    item.until = now + item.seconds
                    self._busy_until = item.until
                if now < item.until:
                    return
                queue.popleft()
            else:  # a reboot after OK,RST, once it was acknowledged (send_data() waits for it however long)
                if self.in_flight.count:
                    return
                self._soft_reset(now)
                return

    def _send_rows(self, item: _Rows, now: float) -> bool:
        """Send the next rows of an MSR; False when the pace says not yet (or a fault ended the session)."""
        if self.paced:  # take_measurements() (not reading the port), then send_data()
            if item.next_due == 0.0:
                item.next_due = now + self.firmware.row_seconds()
                self._busy_until = item.next_due
            if now < item.next_due:
                return False
            item.next_due = 0.0
            if not item.ready_count:
                self._advance_physics(now - 1.0 / self.firmware.model.rows_per_second)
                self._draw_rows(item, 1)
                self._physics_at = now
            k = min(1, item.ready_count)
        else:
            if not item.ready_count:
                self._draw_rows(item, ROW_BLOCK)
            k = min(item.ready_count, self.window - self.in_flight.count)
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
        acks = item.ack_wire[pos * ACK_PACKET : (pos + k) * ACK_PACKET]
        self.in_flight.add(InFlight(first, k, size, packets, acks, now + RESEND_AFTER_S))
        self.out += packets
        item.wire_pos = pos + k
        item.wire_seq = (first + k) % SEQ_MODULO
        endpoint.last_delivered = (first + k - 1) % SEQ_MODULO
        self._data_count += k
        self.counters.segments_sent += k

    def _send_data(self, payload: bytes, now: float) -> None:
        seq, segment = self.endpoint.data_segment(payload)
        intact = encode_packet(segment, None)
        self.in_flight.add(InFlight(seq, 1, len(intact), intact, b"", now + RESEND_AFTER_S))
        self._data_count += 1
        self.counters.segments_sent += 1
        faults, count = self.faults, self._data_count
        if every(faults.drop_data_every, count):
            return
        wire = segment
        if every(faults.corrupt_data_every, count):
            damaged = bytearray(segment)
            damaged[len(damaged) // 2] ^= 0xFF
            wire = bytes(damaged)
        packet = encode_packet(wire, None)
        self.out += packet
        if every(faults.duplicate_data_every, count):
            self.out += packet

