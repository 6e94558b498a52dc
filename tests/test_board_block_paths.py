"""The block paths of both ends (rows drawn and framed a block at a time, ACKs compared as bytes, runs of rows
decoded straight from the byte stream) must put exactly the same bytes on the wire and reach exactly the same
state as the packet-by-packet paths they shortcut. The board is driven sans-IO here, with explicit time, so
resends and numbering are checked without a port and without sleeping.
"""

from __future__ import annotations

import binascii

import numpy as np
import pytest

import simulator.board_protocol as board_protocol
from chamber.testing import CountingModel
from firmware_bridge.batch import decode_uniform_padded, encode_acks
from firmware_bridge.link import Link
from firmware_bridge.packets import PacketSplitter, decode_body, encode_packet
from firmware_bridge.segments import FLAG_ACK, Arrival, Endpoint, LinkCounters, decode_segment, encode_segment
from firmware_bridge.variables import layout_for
from simulator.board_protocol import RESEND_AFTER_S, BoardFaults, BoardProtocol
from simulator.board_window import InFlightWindow
from simulator.firmware import EmulatedFirmware

ROW_BYTES = 35 * 4


def _chunks(data: bytes, rng: np.random.Generator | None, largest: int = 700) -> list[bytes]:
    if rng is None:
        return [data] if data else []
    out, i = [], 0
    while i < len(data):
        step = int(rng.integers(1, largest))
        out.append(data[i : i + step])
        i += step
    return out


def run_msr(n: int, *, window: int, faults: BoardFaults | None = None, ack_rng: np.random.Generator | None = None,
            shortcut: bool = True, monkeypatch: pytest.MonkeyPatch | None = None) -> dict:
    """One MSR against a sans-IO board; a minimal host ACKs every data segment (duplicates again), its ACK bytes
    cut into random chunks when `ack_rng` is given. Returns the data packets seen, in order, and final state."""
    if not shortcut and monkeypatch is not None:
        monkeypatch.setattr(InFlightWindow, "take_expected_acks", lambda self, data, ignore_every: False)
    board = BoardProtocol(EmulatedFirmware(CountingModel()), faults=faults or BoardFaults(), window=window,
                          pace="fast", boot_delay=0.0)
    host = Endpoint(counters=LinkCounters())
    splitter = PacketSplitter()
    now = 0.0
    board.connect(now)
    seq, segment = host.data_segment(f"MSR,{n},0".encode())
    packets: list[bytes] = []
    delivered: list[bytes] = []
    in_flight: list[int] = []  # the board's window fill after every chunk of ACKs
    sent_msr = False
    for _ in range(100_000):
        board.tick(now)
        if not sent_msr and len(delivered) >= 2:  # both announcements delivered and ACKed (the board drops commands before)
            board.feed(encode_packet(segment), now)
            sent_msr = True
        out = bytes(board.out)
        board.out.clear()
        acks = []
        for body in splitter.feed(out).bodies:
            seg = decode_segment(decode_body(body))
            if seg is None or seg.is_ack:
                continue
            packets.append(body)
            kind = host.classify(seg)
            if kind in (Arrival.DELIVER, Arrival.DUPLICATE):
                acks.append(seg.seq)
            if kind is Arrival.DELIVER:
                delivered.append(seg.data)
        for chunk in _chunks(encode_acks(host.last_delivered, acks), ack_rng):
            board.feed(chunk, now)
            in_flight.append(board.in_flight.count)
        if delivered and delivered[-1] == b"OK,DONE":
            break
        if not out:
            now += RESEND_AFTER_S / 2  # nothing moved: let the board's timers run
    return {"packets": packets, "delivered": delivered, "counters": board.counters.as_dict(),
            "in_flight": board.in_flight.count, "in_flight_trace": in_flight, "host": host.counters.as_dict()}


def rows_of(delivered: list[bytes]) -> np.ndarray:
    rows = [d for d in delivered if len(d) == ROW_BYTES]
    return np.frombuffer(b"".join(rows), dtype="<f4").reshape(len(rows), 35)


def test_block_framing_is_the_same_wire_as_small_blocks_and_windows(monkeypatch):
    big = run_msr(700, window=512)
    monkeypatch.setattr(board_protocol, "ROW_BLOCK", 7)
    small = run_msr(700, window=5)
    assert big["packets"] == small["packets"]  # every data packet byte for byte, in the same order
    rows = rows_of(big["delivered"])
    assert rows[:, 0].tolist() == list(range(700))
    assert big["in_flight"] == 0 and big["counters"]["resends"] == 0


@pytest.mark.parametrize("faults, window", [(BoardFaults(), 64), (BoardFaults(ignore_acks_every=3), 1)])
def test_acks_compared_as_bytes_reach_the_same_state_as_decoding_them(monkeypatch, faults, window):
    fast = run_msr(400, window=window, faults=BoardFaults(**vars(faults)), ack_rng=np.random.default_rng(7))
    slow = run_msr(400, window=window, faults=BoardFaults(**vars(faults)), ack_rng=np.random.default_rng(7),
                   shortcut=False, monkeypatch=monkeypatch)
    assert fast["packets"] == slow["packets"]
    assert fast["in_flight_trace"] == slow["in_flight_trace"]
    assert fast["counters"] == slow["counters"]
    assert fast["in_flight"] == slow["in_flight"] == 0
    assert rows_of(fast["delivered"])[:, 0].tolist() == list(range(400))
    if faults.ignore_acks_every:  # stop-and-wait: every ignored ACK is made good by a resend after 100 ms
        assert fast["counters"]["resends"] > 0 and fast["host"]["duplicates"] > 0


def test_unacknowledged_rows_are_resent_intact_after_100_ms_go_back_n():
    board = BoardProtocol(EmulatedFirmware(CountingModel()), window=512, pace="fast", boot_delay=0.0)
    host = Endpoint()
    board.connect(0.0)

    def ack_text(expected: int) -> None:
        """Text goes stop-and-wait whatever the window: exactly one segment out; the host ACKs it."""
        board.tick(0.0)
        packets = data_packets(board.out)
        board.out.clear()
        assert len(packets) == expected
        for body in packets:
            seq = host.classify(decode_segment(decode_body(body)))
            assert seq is Arrival.DELIVER
            board.feed(encode_packet(encode_segment(FLAG_ACK, host.last_delivered, host.last_acknowledged), None), 0.0)

    ack_text(1)  # CHAMBER_CONFIG
    ack_text(1)  # VARIABLES_LIST, only once CHAMBER_CONFIG was acknowledged
    _, segment = host.data_segment(b"MSR,50,0")
    board.feed(encode_packet(segment), 0.0)
    board.out.clear()  # the board's ACK of the MSR
    ack_text(1)  # OK,MSR
    board.tick(0.0)
    first = data_packets(board.out)
    board.out.clear()
    assert board.in_flight.count == 50  # the rows; OK,DONE waits for the last one to be acknowledged
    board.tick(RESEND_AFTER_S * 0.99)
    assert board.out == b""  # not yet
    board.tick(RESEND_AFTER_S)
    again = data_packets(board.out)
    board.out.clear()
    assert again == first  # everything unacknowledged, in order, byte for byte
    assert board.counters.resends == 50 and board.counters.ack_timeouts == 1
    # a cumulative ACK for row 24 (the oldest unacknowledged is row 0) clears everything up to it
    row_24 = (board.in_flight.oldest_seq() + 24) % 2**32
    board.feed(encode_packet(encode_segment(FLAG_ACK, host.last_delivered, row_24), None), RESEND_AFTER_S)
    assert board.in_flight.count == 50 - 25
    board.tick(RESEND_AFTER_S * 2)
    packets = PacketSplitter().feed(bytes(board.out)).bodies
    assert len(packets) == 50 - 25
    assert decode_segment(decode_body(packets[0])).seq == (row_24 + 1) % 2**32


def data_packets(wire: bytes | bytearray) -> list[bytes]:
    bodies = PacketSplitter().feed(bytes(wire)).bodies
    return [b for b in bodies if not decode_segment(decode_body(b)).is_ack]


class ReplayPort:
    """A port without a file descriptor that hands out recorded bytes in given chunks and records writes."""

    def __init__(self, chunks: list[bytes]):
        self._chunks = list(chunks)
        self.written = bytearray()

    @property
    def in_waiting(self) -> int:
        return len(self._chunks[0]) if self._chunks else 0

    def read(self, n: int) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""

    def write(self, data: bytes) -> int:
        self.written += data
        return len(data)


LATE = 30  # packets that follow a damaged one before the board goes back to resend it


def recorded_wire(n: int, rng: np.random.Generator) -> bytes:
    """What a board sends for an MSR of n rows when one row arrives damaged (it goes back N and resends from
    there) and one packet the host already has arrives again."""
    packets = [b"\x00" + body + b"\x04" for body in run_msr(n, window=512)["packets"]]
    at = int(rng.integers(n // 2, n - LATE))
    damaged = bytearray(packets[at])
    damaged[40] = ord("A") if damaged[40] != ord("A") else ord("B")  # a payload byte: the CRC fails
    repeated = int(rng.integers(10, n // 2 - 5))
    stream = packets[:repeated] + [packets[repeated - 1]] + packets[repeated:at]
    stream += [bytes(damaged)] + packets[at + 1 : at + 1 + LATE] + packets[at:]
    return b"".join(stream)


@pytest.mark.parametrize("largest", [300, 5000, 70000])
def test_host_run_decoding_from_the_byte_stream_matches_the_splitter_path(monkeypatch, largest):
    rng = np.random.default_rng(largest)
    wire = recorded_wire(600, rng)
    chunks = _chunks(wire, rng, largest)
    fast = Link(ReplayPort(chunks), counters=LinkCounters())
    while fast.port.in_waiting:
        fast.pump(0.0)
    monkeypatch.setattr(Link, "_take_uniform", lambda self, data, now, acks: 0)
    slow = Link(ReplayPort(chunks), counters=LinkCounters())
    while slow.port.in_waiting:
        slow.pump(0.0)
    assert fast.port.written == slow.port.written  # the same ACKs, in the same order
    assert fast.counters.as_dict() == slow.counters.as_dict()
    assert fast.counters.crc_failures == 1 and fast.counters.duplicates == 1 and fast.counters.unexpected == LATE
    assert fast.queued == slow.queued
    limits = rng.integers(1, 50, 1000)
    taken_fast = [m for limit in limits for item in fast.take(int(limit)) for m in _split(item)]
    taken_slow = [m for item in slow.take(10**6) for m in _split(item)]
    assert taken_fast == taken_slow
    assert fast.queued == 0
    rows = np.frombuffer(b"".join(m for m in taken_fast if len(m) == ROW_BYTES), dtype="<f4").reshape(-1, 35)
    assert rows[:, 0].tolist() == list(range(600))  # every row exactly once, in order, undamaged:
    column = layout_for("wt").index("pressure_upwind")
    assert (rows[:, column] == 1000.0 * column + np.arange(600)).all()  # CountingModel: 1000·column + row


def _split(item) -> list[bytes]:
    return [item.data[i * item.size : (i + 1) * item.size] for i in range(item.count)]


def test_ack_crcs_from_tables_equal_zlib_including_wraparound(rng):
    for own in (0, 1, 2**32 - 2, 2**32 - 1, int(rng.integers(0, 2**32))):
        acks = [0, 1, 2**32 - 1, 2**32 - 2] + rng.integers(0, 2**32, 200, dtype=np.uint64).tolist()
        expected = b"".join(encode_packet(encode_segment(FLAG_ACK, own, a), None) for a in acks)
        assert encode_acks(own, acks) == expected


def test_padded_block_decode_accepts_exactly_canonical_base64(rng):
    for length in (1, 2, 13, 14, 15, 40):
        segments = [rng.integers(0, 256, length, dtype=np.uint8).tobytes() for _ in range(9)]
        bodies = [binascii.b2a_base64(s, newline=False) for s in segments]
        decoded = decode_uniform_padded(bodies)
        assert decoded is not None and [bytes(r) for r in decoded] == segments
    ack_bodies = PacketSplitter().feed(encode_acks(3, list(range(6)))).bodies
    sloppy = list(ack_bodies)
    sloppy[2] = sloppy[2][:-3] + (b"B==" if sloppy[2][-3:] != b"B==" else b"C==")  # not canonical: left to one-by-one
    assert decode_uniform_padded(sloppy) is None
    assert decode_uniform_padded(ack_bodies[:3] + [b"!" + ack_bodies[3][1:]]) is None
