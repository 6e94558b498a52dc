"""The host's end of one Mk1 board session on an open pyserial port: reliable segments and error capture.

Why one class owns the port: reads, ACKs, resends and the capture of out-of-frame error reports must see every
byte in order. The port, the clocks and the timings are passed in, so a pty, a socket:// URL or a USB device
all work the same way, and tests can run with short timeouts.
"""

from __future__ import annotations

import binascii
import logging
import select
import time
from collections import deque
from typing import Any, Callable, NamedTuple

import numpy as np
import serial

from firmware_bridge.batch import check_crcs, decode_uniform, encode_acks
from firmware_bridge.errors import BoardRebooted, ExchangeAbandoned, FirmwareError, LinkLost
from firmware_bridge.packets import (
    END,
    START,
    PacketSplitter,
    Split,
    check_message_fits,
    encode_packet,
    segment_of,
)
from firmware_bridge.segments import (
    CRC_LEN,
    FIRST_SEQ,
    HEADER_LEN,
    MIN_SEGMENT,
    SEQ_MODULO,
    Arrival,
    Endpoint,
    LinkCounters,
    encode_segment,
    seq_distance,
)

log = logging.getLogger(__name__)

RESEND_AFTER_S = 0.1
"""The protocol's resend interval for an unacknowledged segment (the board's own, ACK_TIMEOUT in serial_comms.cpp)."""
RESEND_MAX_S = 2.0
"""The adapted resend interval never grows past this."""
QUIET_AFTER_ACK_S = 0.005
"""How long after writing an ACK the host waits before it sends a data segment. Why: the firmware's
receive_packet keeps reading every byte already waiting once it has a packet and throws the rest away
(serial_comms.cpp), so a command that follows our ACK of the board's reply within the same read is lost and has
to be resent. 5 ms covers the ACK's ~0.5 ms at 500 kbaud and the USB bridge's latency."""
WRITE_TIMEOUTS_IN_A_ROW = 2
"""Write timeouts in a row that make a stalled port: pyserial checks its write timeout after a write too, so a
process starved of CPU for longer than the timeout (a busy host) can find it expired with every byte sent. One
alone is not a lost link: the segment protocol resends what did not arrive and drops what arrives twice."""
ABANDON_POLL_S = 0.25
"""The longest one wait for bytes lasts before the link looks again whether its exchange was abandoned (callers
loop until their own deadlines, so a shorter wait changes nothing else)."""
READ_CHUNK = 1 << 16
DRAIN_BYTES = 1 << 16
"""After a read, bytes that follow at once are read too (up to about this many) and processed and acknowledged in one
go: a pty hands over 2-4 KB per read, and per-read Python, ACK writes and board wake-ups would dominate."""
DRAIN_GAP_S = 0.0005
"""After a big read (a burst of rows in progress), wait this long for the next bytes before processing."""
DRAIN_MAX_S = 0.002
"""Never hold received bytes (and the ACKs they are owed) back longer than this; the board resends after 100 ms."""
_BURST_READ = 1024  # a read at least this big may be part of a burst: worth waiting DRAIN_GAP_S for more
_PROBE_EVERY = 8  # after a wait that brought nothing, try waiting again only every this many reads
_PAD = ord("=")
_END_B = bytes([END])
_MIN_RUN = 4  # shorter runs are cheaper one by one
_REBOOT_CERTAIN_DISTANCE = 1024  # a CHAMBER_CONFIG this far behind cannot be a late resend: the board rebooted


class ReplyTimeout(LinkLost):
    """The board stopped answering."""


class Delivery(NamedTuple):
    """`count` delivered messages of equal length back to back in `data` (count > 1 for a run of rows), and the
    host time they were read. Kept together so that 10^4 rows cost a few objects, not 10^4."""

    data: bytes
    stamp: float
    count: int = 1

    @property
    def size(self) -> int:
        """Bytes per message."""
        return len(self.data) // self.count


class Link:
    """Reliable delivery over one open port for one board session (numbering starts fresh in the constructor)."""

    def __init__(
        self,
        port: Any,
        *,
        counters: LinkCounters | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        resend_after: float = RESEND_AFTER_S,
        max_resends: int = 10,
        ack_patience: float = 0.0,
    ):
        self.port = port
        self.counters = counters if counters is not None else LinkCounters()
        self.endpoint = Endpoint(counters=self.counters)
        self.splitter = PacketSplitter()
        self.inbox: deque[Delivery] = deque()
        self.queued = 0  # messages in the inbox
        self._clock = clock
        self._wall_clock = wall_clock
        self.resend_floor = resend_after
        self._write_timeouts = 0  # in a row (WRITE_TIMEOUTS_IN_A_ROW)
        self.resend_after = resend_after
        self.max_resends = max_resends
        self.ack_patience = ack_patience  # and at least this long (seconds) before an unACKed segment is a lost link
        self._srtt: float | None = None  # smoothed ACK delay and its variation (RFC 6298), from unresent segments
        self._rttvar = 0.0
        self._pending: int | None = None  # the sequence number of our data segment awaiting its ACK
        self._pending_packet = b""  # ... and its packet, kept until ACKed: `deliver_pending` may have to resend it
        self._last_acked: int | None = None
        self._acked_at = float("-inf")
        self.broken: LinkLost | None = None
        self.halted: FirmwareError | None = None
        self.reboot_seen = False
        self._can_select = _has_fileno(port)
        self._waiting_pays = True  # did the last wait for more bytes bring any? (a board with a small window: no)
        self._drains = 0
        # Recovery of a board another host left mid-session (firmware_bridge/recovery.py): `adopting` takes the
        # board's numbering from the first data segment out of ours; `ack_observer` hears every ACK that matches
        # no segment of ours (the answers to probes); `on_numbered(seq, text)` is told each command's number
        # before it is written (the link journal).
        self.adopting = False
        self.ack_observer: Callable[[int, int], None] | None = None
        self.on_numbered: Callable[[int, str], None] | None = None

    # ------------------------------------------------------------------ session numbering
    def restart_numbering(self) -> None:
        """After OK,RST the board reboots: both sides start numbering afresh."""
        self.endpoint = Endpoint(counters=self.counters)
        self.inbox.clear()
        self.queued = 0
        self._pending = None
        self._pending_packet = b""
        self._last_acked = None
        self.reboot_seen = False

    def abandon(self) -> None:
        """From another thread: mark the link lost (ExchangeAbandoned), so the exchange in progress gives up at its
        next wait for bytes (within ABANDON_POLL_S) and every later use is refused until the port is reopened (the
        board is reset: what it still owes cannot be settled on a link given up)."""
        self.broken = ExchangeAbandoned("the exchange was abandoned so that the chamber can be made safe")

    def restart_splitter(self) -> None:
        """Forget any packet the last read cut in two. Why: an interrupt between a read and its processing loses
        bytes, and the splitter would glue what follows onto a stale head; the board resends whatever we did not
        ACK, and a packet cut here reads as out-of-frame bytes."""
        self.splitter = PacketSplitter()

    # ------------------------------------------------------------------ sending
    def set_resend_floor(self, seconds: float) -> None:
        """The shortest resend interval for this board (its pace); the adapted interval never goes below it."""
        self.resend_floor = seconds
        self.resend_after = max(seconds, self.resend_after if self._srtt is not None else seconds)

    def send(self, data: bytes, what: str = "", *, patience: float | None = None) -> None:
        """Send one message and wait for its ACK, resending after `resend_after` seconds (adapted to the ACK
        delays this board shows, never below its floor). Gives up after `max_resends` resends sent over at least
        `ack_patience` seconds (a busy host can starve the board's process or ours for seconds), or, with
        `patience`, once that many seconds have passed (a board that is still booting)."""
        self._check_usable()
        check_message_fits(data, what)
        if self._pending is not None:  # an interrupted send: its number is spent, the board waits for it
            raise LinkLost(f"segment {self._pending} is still unacknowledged; settle the exchange in flight first")
        clock = self._clock
        while (quiet := self._acked_at + QUIET_AFTER_ACK_S - clock()) > 0:
            self.pump(quiet)
        # numbered only now (an interrupt in the quiet wait spends no number), and remembered at once: from here on
        # the board expects this segment and no other, so it must be delivered even if we are interrupted
        seq, segment = self.endpoint.data_segment(data)
        self._pending_packet = packet = encode_packet(segment)
        self._pending = seq
        if self.on_numbered is not None:
            self.on_numbered(seq, what or data.decode("ascii", "replace"))
        self._write(packet)
        self.counters.segments_sent += 1
        resends = 0
        sent_at = clock()
        give_up = sent_at + patience if patience is not None else None
        deadline = sent_at + self.resend_after
        while self._pending is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                self.counters.ack_timeouts += 1
                out_of_time = clock() >= give_up if give_up is not None else (
                    resends >= self.max_resends and clock() - sent_at >= self.ack_patience)
                if out_of_time:
                    self._fail(ReplyTimeout(f"no ACK for segment {seq} ({what or data[:20]!r}) after {resends} resends"))
                self._write(packet)
                resends += 1
                self.counters.resends += 1
                self.counters.segments_sent += 1
                deadline = clock() + self.resend_after
                continue
            self.pump(remaining)
        if resends == 0:  # Karn's rule: only an unresent segment tells how late this board's ACKs come
            self._learn_ack_delay(clock() - sent_at)

    def now(self) -> float:
        """The link's clock (deadlines given to `deliver_pending` and Mk1Session.settle are on it)."""
        return self._clock()

    def write_numbered(self, seq: int, data: bytes) -> None:
        """Write one data segment numbered `seq` (not ours: the link's numbering is left alone) and return without
        waiting for its ACK. For probing a board whose numbering is unknown (firmware_bridge/recovery.py); the
        answers come to `ack_observer`."""
        self._check_usable()
        check_message_fits(data)
        self._write(encode_packet(encode_segment(0, seq, self.endpoint.last_acknowledged, data)))
        self.counters.segments_sent += 1

    def unread(self, item: Delivery) -> None:
        """Put a delivered message back at the head of the inbox (a reader that took it for someone else)."""
        self.inbox.appendleft(item)
        self.queued += item.count

    @property
    def unacknowledged(self) -> int | None:
        """The sequence number of our data segment still awaiting its ACK (an interrupted send), else None."""
        return self._pending

    def deliver_pending(self, deadline: float) -> bool:
        """Resend our unacknowledged segment (an interrupted `send`) until the board ACKs it or `deadline` (on the
        link's clock) passes; bytes that arrive meanwhile are processed as usual (rows are ACKed and queued). Why
        resend rather than drop: its sequence number is spent, and the board accepts no later one until it has this
        one. A board inside an MSR ignores it until OK,DONE (it reads only ACKs then), so this may take as long as
        the rows it still owes. True once ACKed (or nothing was pending)."""
        clock = self._clock
        if self._pending is not None:
            self.pump(0)  # the ACK may already be waiting (an interrupt while awaiting it): no needless resend
        while self._pending is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                return False
            self._write(self._pending_packet)
            self.counters.resends += 1
            self.counters.segments_sent += 1
            wait_until = min(deadline, clock() + self.resend_after)
            while self._pending is not None and (left := wait_until - clock()) > 0:
                self.pump(left)
        return True

    def _learn_ack_delay(self, delay: float) -> None:
        if self._srtt is None:
            self._srtt, self._rttvar = delay, delay / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - delay)
            self._srtt = 0.875 * self._srtt + 0.125 * delay
        self.resend_after = min(RESEND_MAX_S, max(self.resend_floor, self._srtt + 4 * self._rttvar))

    # ------------------------------------------------------------------ receiving
    def next_message(self, timeout: float) -> tuple[bytes, float]:
        """The next delivered message and the host time it arrived; ReplyTimeout if none within `timeout`."""
        deadline = self._clock() + timeout
        while not self.inbox:
            remaining = deadline - self._clock()
            if remaining <= 0:
                reason = "the board rebooted (it announced itself again)" if self.reboot_seen else f"no message within {timeout:g} s"
                self._fail(BoardRebooted(reason) if self.reboot_seen else ReplyTimeout(reason))
            self.pump(remaining)
        first = self.take(1)[0]
        return first.data, first.stamp

    def take(self, limit: int) -> list[Delivery]:
        """Up to `limit` delivered messages, oldest first, without waiting (a run is split if need be)."""
        inbox = self.inbox
        out: list[Delivery] = []
        while limit > 0 and inbox:
            item = inbox[0]
            if item.count <= limit:
                inbox.popleft()
            else:
                cut = limit * item.size
                inbox[0] = Delivery(item.data[cut:], item.stamp, item.count - limit)
                item = Delivery(item.data[:cut], item.stamp, limit)
            out.append(item)
            limit -= item.count
            self.queued -= item.count
        return out

    def _deliver(self, item: Delivery) -> None:
        self.inbox.append(item)
        self.queued += item.count

    def pump(self, timeout: float) -> bool:
        """Wait up to `timeout` for bytes, then process everything that arrived. True if bytes arrived."""
        self._check_usable()
        data = self._read(timeout)
        if not data:
            return False
        if self._can_select and len(data) < DRAIN_BYTES:
            data = self._drain(data)
        now = self._wall_clock()
        self.counters.bytes_received += len(data)
        acks: list[int] = []
        reports: list[bytes] = []
        rest = data
        if not self.splitter.idle:  # finish the packet the last read cut in two
            end = rest.find(_END_B)
            head, rest = (rest, b"") if end < 0 else (rest[: end + 1], rest[end + 1 :])
            self._take_split(self.splitter.feed(head), now, acks, reports)
        if rest and self.splitter.idle:
            rest = rest[self._take_uniform(rest, now, acks) :]
        if rest:
            self._take_split(self.splitter.feed(rest), now, acks, reports)
        if acks:
            self._write(encode_acks(self.endpoint.last_delivered, acks))
            self.counters.segments_sent += len(acks)
            self._acked_at = self._clock()
        if reports:
            self.counters.error_reports += len(reports)
            self.halted = FirmwareError.from_report(reports[0])
            raise self.halted
        return True

    def _take_split(self, split: Split, now: float, acks: list[int], reports: list[bytes]) -> None:
        """Packets found by the splitter, in order: runs of equal-length data segments together, others one by one."""
        bodies = split.bodies
        i, n = 0, len(bodies)
        while i < n:
            length = len(bodies[i])
            j = i + 1
            if length >= 32 and length % 4 == 0 and bodies[i][-1] != _PAD:
                while j < n and len(bodies[j]) == length and bodies[j][-1] != _PAD:
                    j += 1
            if j - i < _MIN_RUN or not self._take_run(bodies[i:j], now, acks):
                for body in bodies[i:j]:
                    self._take_one(body, now, acks)
            i = j
        if split.stray:
            log.debug("bytes outside framing: %r", split.stray[:200])
        reports.extend(split.error_reports)

    def _take_uniform(self, data: bytes, now: float, acks: list[int]) -> int:
        """Fastest path, for bytes that start at a packet boundary: a leading run of packets of one size (rows) is
        decoded straight from the byte string, without splitting it into per-packet bodies. Returns the number of
        bytes taken (0: none; the splitter handles everything). Only packets whose bodies are pure base64 are
        taken, so the result is what the splitter and `_take_run` would give."""
        if len(data) < _MIN_RUN * 34 or data[0] != START:
            return 0
        end = data.find(_END_B, 1, 1 << 12)
        size = end + 1
        if end < 33 or (end - 1) % 4 or data[end - 1] == _PAD:
            return 0
        count = len(data) // size
        if count < _MIN_RUN:
            return 0
        packets = np.frombuffer(data, dtype=np.uint8, count=count * size).reshape(count, size)
        framed = (packets[:, 0] == START) & (packets[:, -1] == END)
        if not framed.all():
            count = int(np.argmin(framed))
            if count < _MIN_RUN:
                return 0
            packets = packets[:count]
        try:
            flat = binascii.a2b_base64(packets[:, 1:-1].tobytes(), strict_mode=True)
        except binascii.Error:
            return 0
        if len(flat) != count * 3 * (size - 2) // 4:
            return 0
        segments = np.frombuffer(flat, dtype=np.uint8).reshape(count, -1)
        return count * size if self._accept_run(segments, now, acks) else 0

    def _take_run(self, run: list[bytes], now: float, acks: list[int]) -> bool:
        """Fast path: a run of equal-length data segments, all intact and in order. False: take them one by one."""
        segments = decode_uniform(run)
        return segments is not None and self._accept_run(segments, now, acks)

    def _accept_run(self, segments: np.ndarray, now: float, acks: list[int]) -> bool:
        """Deliver (k, L) decoded segments if all are data, intact and next in order; else change nothing."""
        if segments.shape[1] < MIN_SEGMENT or segments[:, 0].any():
            return False
        if not check_crcs(segments).all():
            return False
        k, length = segments.shape
        endpoint = self.endpoint
        seqs = np.ascontiguousarray(segments[:, 1:5]).view("<u4").ravel()
        first = (endpoint.last_acknowledged + 1) % SEQ_MODULO
        if int(seqs[0]) != first or not np.array_equal(seqs, (first + np.arange(k, dtype=np.uint64)) % SEQ_MODULO):
            return False
        endpoint.last_acknowledged = int(seqs[-1])
        self.counters.segments_received += k
        size = length - MIN_SEGMENT
        flat = np.ascontiguousarray(segments[:, HEADER_LEN : length - CRC_LEN]).tobytes()
        self._deliver(Delivery(flat, now, k))
        acks.extend(seqs.tolist())
        return True

    def _take_one(self, body: bytes, now: float, acks: list[int]) -> None:
        segment = segment_of(body)
        if segment is None:
            self.counters.crc_failures += 1
            return
        endpoint = self.endpoint
        kind = endpoint.classify(segment)
        if kind is Arrival.DELIVER:
            acks.append(segment.seq)
            self._deliver(Delivery(segment.data, now))
        elif kind is Arrival.ACK:
            if segment.ack == self._pending:
                self._pending = None
                self._last_acked = segment.ack
            elif segment.ack == self._last_acked:  # the board acknowledged a resend it had already received
                self.counters.needless_resends += 1
            elif self.ack_observer is not None:
                self.ack_observer(segment.ack, segment.seq)
        elif kind is Arrival.DUPLICATE:
            acks.append(segment.seq)
        elif self.adopting:
            # A board mid-session with another host: its segment is taken as the next one (its numbering adopted;
            # a fresh announcement, numbered from the start, is adopted the same way) and acknowledged, so that the
            # board moves on: send_data() checks only that an ACK names its segment (serial_comms.cpp).
            endpoint.last_acknowledged = segment.seq
            acks.append(segment.seq)
            self._deliver(Delivery(segment.data, now))
        elif segment.seq == FIRST_SEQ and segment.data.startswith(b"CHAMBER_CONFIG"):
            self.reboot_seen = True
            if seq_distance(FIRST_SEQ, endpoint.last_acknowledged) > _REBOOT_CERTAIN_DISTANCE:
                self._fail(BoardRebooted("the board rebooted (it announced itself again mid-session)"))

    # ------------------------------------------------------------------ port I/O
    def _read(self, timeout: float) -> bytes:
        try:
            if self._can_select:
                ready, _, _ = select.select([self.port.fileno()], [], [], min(max(timeout, 0.0), ABANDON_POLL_S))
                if not ready:
                    return b""
                data = self.port.read(READ_CHUNK)
                if not data:  # readable but empty: a closed socket or pty reads this way
                    self._fail(LinkLost("the port reported data but returned none (closed by the peer)"))
                return data
            data = self.port.read(max(1, self.port.in_waiting))
            if not data and timeout > 0:
                time.sleep(min(timeout, 0.002))
                data = self.port.read(max(1, self.port.in_waiting))
            return data
        except (serial.SerialException, OSError) as exc:
            self._fail(LinkLost(f"serial read failed: {exc}"))
        return b""  # unreachable

    def _drain(self, first: bytes) -> bytes:
        """`first` plus the bytes that follow it closely (bounded by DRAIN_BYTES and DRAIN_MAX_S).

        Waiting for more pays off when the board has many rows in flight (the pty passes them on in 2-4 KB steps)
        and not when it waits for our ACKs (a small window), so after a fruitless wait the link waits again only
        now and then. A port failure here is left for the next read to report, after what arrived is processed.
        """
        chunks = [first]
        total = last = len(first)
        port = self.port
        clock = self._clock
        self._drains += 1
        may_wait = self._waiting_pays or self._drains % _PROBE_EVERY == 0
        waited = False
        give_up = clock() + DRAIN_MAX_S
        while total < DRAIN_BYTES:
            wait = DRAIN_GAP_S if may_wait and last >= _BURST_READ else 0.0
            wait = min(wait, give_up - clock())
            if wait < 0:
                break
            try:
                ready, _, _ = select.select([port.fileno()], [], [], wait)
                more = port.read(READ_CHUNK) if ready else b""
            except (serial.SerialException, OSError):
                break
            if wait > 0 and not waited:
                waited = True
                self._waiting_pays = bool(more)
            if not more:
                break
            chunks.append(more)
            total += len(more)
            last = len(more)
        return b"".join(chunks) if len(chunks) > 1 else first

    def _write(self, data: bytes) -> None:
        try:
            self.port.write(data)
        except serial.SerialTimeoutException as exc:
            self._write_timeouts += 1
            if self._write_timeouts >= WRITE_TIMEOUTS_IN_A_ROW:
                self._fail(LinkLost(f"serial write failed: {exc} ({self._write_timeouts} writes in a row)"))
            log.info("serial write timed out (once: the protocol resends what did not arrive)")
            return
        except (serial.SerialException, OSError) as exc:
            self._fail(LinkLost(f"serial write failed: {exc}"))
        self._write_timeouts = 0
        self.counters.bytes_sent += len(data)

    def _fail(self, error: LinkLost) -> None:
        self.broken = error
        raise error

    def _check_usable(self) -> None:
        if self.halted is not None:
            raise self.halted
        if self.broken is not None:
            raise LinkLost(f"link already lost ({self.broken.reason})")

    def close(self) -> None:
        try:
            self.port.close()
        except Exception:  # closing a vanished port may fail; the port is gone either way
            log.debug("error closing port", exc_info=True)


def _has_fileno(port: Any) -> bool:
    try:
        port.fileno()
    except Exception:
        return False
    return True
