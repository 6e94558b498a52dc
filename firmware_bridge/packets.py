"""Layer 1 of Mk1: packets are NUL + base64(segment) + EOT; bytes outside a packet are kept, not dropped.

Why keep the outside bytes: the firmware writes its error reports (`<ERR,erNN[,detail]>`) outside the framing,
so a splitter that discarded them would turn a clear firmware error into a silent timeout.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass, field

from firmware_bridge.errors import ERROR_REPORT, PacketTooLong
from firmware_bridge.segments import CRC_LEN, HEADER_LEN, Segment, decode_segment

START = 0x00
END = 0x04
BOARD_INPUT_BUFFER = 64
"""The firmware's receive_packet() input_buffer: characters between START and END (one more is lost)."""
HOST_PACKET_LIMIT = BOARD_INPUT_BUFFER
"""What the host sends at most in one host→board packet, framing included (so two bytes inside the buffer)."""

_START_B = b"\x00"
_END_B = b"\x04"


def packet_size(segment_len: int) -> int:
    """Wire size of a packet carrying a segment of this many bytes (base64 + 2 framing bytes)."""
    return 4 * ((segment_len + 2) // 3) + 2


def check_message_fits(message: bytes, what: str = "") -> None:
    """Raise PacketTooLong (before anything is sent) if this host message, as one data segment, would overflow
    the board's input buffer; `what` names it in the error (default: the message itself)."""
    size = packet_size(HEADER_LEN + len(message) + CRC_LEN)
    if size > HOST_PACKET_LIMIT:
        raise PacketTooLong(size, HOST_PACKET_LIMIT, what or message.decode("ascii", "replace"))


def encode_packet(segment: bytes, limit: int | None = HOST_PACKET_LIMIT, what: str = "") -> bytes:
    """Frame one segment; raises PacketTooLong (before anything is sent) if it would exceed `limit`."""
    size = packet_size(len(segment))
    if limit is not None and size > limit:
        raise PacketTooLong(size, limit, what)
    return _START_B + binascii.b2a_base64(segment, newline=False) + _END_B


@dataclass
class Split:
    """What one feed of bytes produced: packet bodies (still base64) and error reports found outside framing."""

    bodies: list[bytes] = field(default_factory=list)
    error_reports: list[bytes] = field(default_factory=list)
    stray: bytes = b""  # other bytes outside framing (kept for diagnostics)


def decode_body(body: bytes) -> bytes | None:
    """The segment bytes of one packet body, or None when the base64 is broken."""
    try:
        return binascii.a2b_base64(body, strict_mode=True)
    except binascii.Error:
        return None


class PacketSplitter:
    """Incremental splitter of a byte stream into packet bodies and out-of-frame bytes.

    Feeding arbitrary chunks gives the same result as feeding the whole stream at once. A NUL inside an
    unfinished packet (its EOT was lost) restarts the packet there; the broken part counts as outside bytes.
    """

    def __init__(self, max_outside: int = 4096):
        self._buf = b""
        self._outside = bytearray()  # out-of-frame bytes not yet matched to an error report
        self._max_outside = max_outside

    @property
    def pending(self) -> int:
        """Bytes of an unfinished packet held back (the board's input buffer fill)."""
        return len(self._buf)

    @property
    def idle(self) -> bool:
        """Nothing held back: the next byte fed starts afresh (no partial packet, no partial error report)."""
        return not self._buf and not self._outside

    def feed(self, data: bytes) -> Split:
        out = Split()
        pieces = (self._buf + data).split(_END_B) if self._buf else data.split(_END_B)
        rest = pieces.pop()
        bodies = out.bodies
        outside = self._outside
        for piece in pieces:
            start = piece.rfind(_START_B)
            if start == 0:
                bodies.append(piece[1:])
            elif start < 0:
                outside += piece + _END_B
            else:
                outside += piece[:start]
                bodies.append(piece[start + 1 :])
        start = rest.rfind(_START_B)
        if start < 0:
            outside += rest
            self._buf = b""
        else:
            outside += rest[:start]
            self._buf = rest[start:]
        if outside:
            self._scan_outside(out)
        return out

    def _scan_outside(self, out: Split) -> None:
        text = bytes(self._outside)
        last = 0
        for match in ERROR_REPORT.finditer(text):
            out.error_reports.append(match.group(0))
            last = match.end()
        rest = text[last:]
        open_at = rest.rfind(b"<")
        if open_at >= 0 and b">" not in rest[open_at:] and len(rest) - open_at < 128:
            out.stray = rest[:open_at]
            self._outside = bytearray(rest[open_at:])  # maybe the start of a report still arriving
        else:
            out.stray = rest
            self._outside = bytearray()
        if len(self._outside) > self._max_outside:
            self._outside = bytearray()


def segment_of(body: bytes) -> Segment | None:
    """The segment a packet's body carries, or None when its base64 or its CRC is bad (dropped silently, as the
    firmware does): the one reading both ends (host, emulated board) and the test tools share."""
    raw = decode_body(body)
    return decode_segment(raw) if raw is not None else None
