"""The device side of the Mk1 wire protocol for one host connection, without any I/O.

Why sans-IO: the board's rules (ACK every data segment, re-ACK duplicates, resend after 100 ms, report errors
outside the framing and then halt) are easiest to get right and to test when bytes in, bytes out and time are
explicit. simulator/board.py moves these bytes over a pty or a TCP socket. The fault switches exist so tests can
make the link misbehave on purpose and check that the host recovers and counts what happened.

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

from firmware_bridge.batch import build_segments, check_crcs, decode_uniform_padded, encode_acks, frame_uniform
from firmware_bridge.link import RESEND_AFTER_S  # the protocol's ACK_TIMEOUT, the board's as well as the host's
from firmware_bridge.packets import END, START, decode_body, encode_packet
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

INPUT_BUFFER = 64  # receive_packet's input_buffer: characters between START and END
RECEIVE_RING = 63  # the Mega's serial receive ring (64 bytes, one always free)
SERIAL_ON_BEFORE_ANNOUNCE_S = 0.5  # setup(): Serial.begin(), then delay(500), then CHAMBER_CONFIG
REAL_BOOT_S = {"wt": 1.15, "lt": 1.42}  # power-on (or RST) to CHAMBER_CONFIG, measured on the firmware harness
FAST_BOOT_S = 0.02
MAX_CATCH_UP_S = 3600.0  # real pace: idle time the physics catches up on at most (rows sampled and discarded)
PACES = ("real", "fast")
ROW_BLOCK = 2048  # rows drawn from the physics (and framed) in one go when unthrottled
_ACK_BODY = 4 * ((HEADER_LEN + CRC_LEN + 2) // 3)  # base64 length of an ACK segment
_ACK_PACKET = _ACK_BODY + 2
_END_B = bytes([END])
_START_B = bytes([START])


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


class FirmwareParser:
    """receive_packet()'s parser, byte-exact: START opens a packet, END closes it, at most INPUT_BUFFER characters
    in between (a START inside is a character); one more character resets the parser and is lost, and so is
    everything up to the next START. The state survives between reads, as the firmware's globals do."""

    def __init__(self) -> None:
        self.reading = False
        self._buf = bytearray()

    @property
    def idle(self) -> bool:
        return not self.reading

    def feed(self, data: bytes, *, first_only: bool = False) -> list[bytes]:
        """Bytes arriving at line rate (the firmware keeps up with them): every packet they complete.

        `first_only`: bytes that were all waiting in the receive ring at once. receive_packet() drains the ring
        in one inner loop, and bytes after the END that completes a packet are read and thrown away there."""
        bodies: list[bytes] = []
        i, n = 0, len(data)
        while i < n:
            if not self.reading:
                j = data.find(_START_B, i)
                if j < 0:
                    return bodies
                self.reading = True
                self._buf.clear()
                i = j + 1
                continue
            j = data.find(_END_B, i)
            end = n if j < 0 else j
            room = INPUT_BUFFER - len(self._buf)
            if end - i <= room:
                self._buf += data[i:end]
                if j < 0:
                    return bodies
                bodies.append(bytes(self._buf))
                self.reading = False
                self._buf.clear()
                if first_only:
                    return bodies
                i = j + 1
            else:  # overrun: the character after a full buffer resets the parser
                self.reading = False
                self._buf.clear()
                i += room + 1
        return bodies


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
        self._inflight: deque[_InFlight] = deque()
        self._inflight_count = 0  # data segments sent and not acknowledged (the window fill)
        self._delayed_acks: list[tuple[float, bytes]] = []
        self._boot_at: float | None = None
        self._data_count = 0
        self._acks_owed = 0
        self._acks_seen = 0
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
        self._clear_inflight()
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
        self._clear_inflight()
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
        last_end = data.rfind(_END_B)
        if last_end >= 0:
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
        self._on_bodies(self._splitter.feed(data), now)

    def _on_bodies(self, bodies: list[bytes], now: float) -> None:
        i, n = 0, len(bodies)
        while i < n and not self.halted:
            j = i + 1
            if len(bodies[i]) == _ACK_BODY:
                while j < n and len(bodies[j]) == _ACK_BODY:
                    j += 1
            if j - i < 4 or not self._take_acks(bodies[i:j]):
                for body in bodies[i:j]:
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
        if not segment.is_ack and segment.seq == next_seq(self.endpoint.last_acknowledged) and self._executing():
            # send_data() reads only ACKs and duplicates: a new command is dropped, unacknowledged
            self.counters.segments_received += 1
            self.counters.unexpected += 1
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
        self._now = now
        # receive_string(): the bytes up to the first NUL become the String
        self._on_message(segment.data.split(b"\0", 1)[0].decode("latin-1"))

    def _executing(self) -> bool:
        """Inside a command (or the boot announcements): replies still to send or to be acknowledged."""
        return bool(self._queue) or self._inflight_count > 0

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
        self._flush_ring(now)
        self._fill(now)
        if not self.halted and not self._queue and not self._inflight_count and self._boot_at is None:
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
        if self._inflight:
            times.append(self._inflight[0].deadline)
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
        while queue and self._inflight_count < self.window and not self.halted:
            item = queue[0]
            if isinstance(item, bytes):
                if self._inflight_count:  # text is sent stop-and-wait whatever the window (send_string)
                    return
                queue.popleft()
                self._send_data(item, now)
            elif isinstance(item, _Rows):
                if item.sent == 0 and self._inflight_count:  # OK,MSR first, stop-and-wait like all text
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
                if self._inflight:
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

