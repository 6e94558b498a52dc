"""Layer 2 of Mk1: segments (flags, seq, ack, data, CRC-32) and the sequence bookkeeping of one endpoint.

Why sans-IO: the host link and the emulated board both need exactly the same numbering rules (start at
2^32 − 2, accept last+1, re-ACK a duplicate, ignore anything else, wrap modulo 2^32). Keeping the rules here,
free of any port, lets both sides share them and lets tests check them byte by byte.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from enum import Enum

FLAG_ACK = 0x01  # flags bit 0; bit 1 (SYN) exists on the wire but neither side ever sets it
SEQ_MODULO = 2**32
SEQ_START = SEQ_MODULO - 2
"""Initial last_delivered / last_acknowledged: the first data segment each way is numbered 2^32 − 1."""
FIRST_SEQ = SEQ_MODULO - 1
HEADER = struct.Struct("<BII")
HEADER_LEN = HEADER.size  # 9
CRC_LEN = 4
MIN_SEGMENT = HEADER_LEN + CRC_LEN


def next_seq(seq: int) -> int:
    return (seq + 1) % SEQ_MODULO


def seq_distance(older: int, newer: int) -> int:
    """How many steps forward `newer` is from `older`, modulo 2^32."""
    return (newer - older) % SEQ_MODULO


@dataclass(frozen=True)
class Segment:
    flags: int
    seq: int
    ack: int
    data: bytes

    @property
    def is_ack(self) -> bool:
        return bool(self.flags & FLAG_ACK)


def encode_segment(flags: int, seq: int, ack: int, data: bytes = b"") -> bytes:
    head = HEADER.pack(flags, seq % SEQ_MODULO, ack % SEQ_MODULO) + data
    return head + struct.pack("<I", zlib.crc32(head))


def decode_segment(raw: bytes) -> Segment | None:
    """The segment, or None when it is too short or its CRC does not match (the receiver drops it silently)."""
    if len(raw) < MIN_SEGMENT:
        return None
    body = raw[:-CRC_LEN]
    if zlib.crc32(body) != struct.unpack_from("<I", raw, len(raw) - CRC_LEN)[0]:
        return None
    flags, seq, ack = HEADER.unpack_from(body)
    return Segment(flags, seq, ack, bytes(body[HEADER_LEN:]))


class Arrival(str, Enum):
    DELIVER = "deliver"  # new data in order: acknowledge and deliver
    DUPLICATE = "duplicate"  # data we already delivered (our ACK was lost): acknowledge again, do not deliver
    UNEXPECTED = "unexpected"  # out-of-order data: ignore
    ACK = "ack"  # an acknowledgement


COUNTER_NAMES = ("resends", "needless_resends", "crc_failures", "ack_timeouts", "duplicates", "unexpected",
                 "segments_sent", "segments_received", "bytes_sent", "bytes_received", "error_reports")


@dataclass
class LinkCounters:
    """Diagnostics of one endpoint, as the original host program kept them."""

    resends: int = 0
    needless_resends: int = 0  # resends the board had already received (it acknowledged the segment twice)
    crc_failures: int = 0
    ack_timeouts: int = 0
    duplicates: int = 0
    unexpected: int = 0
    segments_sent: int = 0
    segments_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    error_reports: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name in COUNTER_NAMES}

    def add(self, other: "LinkCounters") -> None:
        for name in COUNTER_NAMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Endpoint:
    """Sequence state of one side: numbers for what it sends, and what it has accepted from the peer."""

    last_delivered: int = SEQ_START
    last_acknowledged: int = SEQ_START
    counters: LinkCounters = field(default_factory=LinkCounters)

    def data_segment(self, data: bytes) -> tuple[int, bytes]:
        """Number and encode the next outgoing data segment."""
        self.last_delivered = next_seq(self.last_delivered)
        return self.last_delivered, encode_segment(0, self.last_delivered, self.last_acknowledged, data)

    def ack_segment(self, seq: int) -> bytes:
        return encode_segment(FLAG_ACK, self.last_delivered, seq)

    def classify(self, segment: Segment) -> Arrival:
        """Apply the receive rules to one decoded segment and update counters and numbering."""
        self.counters.segments_received += 1
        if segment.is_ack:
            return Arrival.ACK
        if segment.seq == next_seq(self.last_acknowledged):
            self.last_acknowledged = segment.seq
            return Arrival.DELIVER
        if segment.seq == self.last_acknowledged:
            self.counters.duplicates += 1
            return Arrival.DUPLICATE
        self.counters.unexpected += 1
        return Arrival.UNEXPECTED
