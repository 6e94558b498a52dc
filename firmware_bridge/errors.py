"""Typed errors of the Mk1 link: each one says what was expected and what arrived.

Why typed: a caller must be able to tell a refused request (nothing was sent), a report from the firmware (the
board halted and needs a reset), a broken link (reconnect) and a rejected frame (discard the rows) apart, and
each needs a different recovery.
"""

from __future__ import annotations

import re

FIRMWARE_ERROR_MEANINGS: dict[str, str] = {
    "er00": "message longer than the 64-byte input buffer",
    "er01": "unknown or malformed instruction",
    "er03": "value out of range or not in the allowed set",
    "er04": "unknown SET target",
    "er05": "polarizer angle sensor outside 10..1010 (mechanical limit)",
    "er08": "Si1151 FORCE command failed",
    "er09": "Si1151 I2C read failed",
    "er42": "tried to unset (-9999) an exogenous input variable",
    "er99": "Si1151 not found (wrong PART_ID)",
}

ERROR_REPORT = re.compile(rb"<ERR,(er\d\d)(?:,([^>]*))?>")
"""`<ERR,erNN>` or `<ERR,erNN,detail>`, written by the firmware outside the packet framing."""


class BridgeError(Exception):
    """Base of everything the bridge raises on purpose."""


class PacketTooLong(BridgeError, ValueError):
    """A host→board packet would overflow the board's 64-byte input buffer; it was not sent."""

    def __init__(self, size: int, limit: int, message: str = ""):
        self.size = size
        self.limit = limit
        what = f" ({message!r})" if message else ""
        super().__init__(f"packet of {size} bytes exceeds the board's {limit}-byte input buffer{what}; nothing was sent")


class FirmwareError(BridgeError):
    """The firmware reported an error outside the framing and halted until it is reset."""

    def __init__(self, code: str, meaning: str | None = None, detail: str = ""):
        self.code = code
        self.meaning = meaning if meaning is not None else FIRMWARE_ERROR_MEANINGS.get(code, "unknown firmware error code")
        self.detail = detail
        extra = f" (detail: {detail})" if detail else ""
        super().__init__(f"firmware error {code}: {self.meaning}{extra}; the board halts until it is reset")

    @classmethod
    def from_report(cls, report: bytes) -> "FirmwareError":
        """Parse one `<ERR,erNN[,detail]>` report (the raw bytes between and including the angle brackets)."""
        match = ERROR_REPORT.fullmatch(report.strip())
        if match is None:
            raise ValueError(f"expected <ERR,erNN[,detail]>, received {report!r}")
        code = match.group(1).decode("ascii")
        detail = (match.group(2) or b"").decode("ascii", errors="replace")
        return cls(code, detail=detail)


class LinkLost(BridgeError):
    """The serial link broke (I/O error, vanished port, no answer, board rebooted); any partial data is discarded."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"link lost: {reason}")


class BoardRebooted(LinkLost):
    """The board announced itself again mid-session (it reset); the session's numbering is void."""


class ProtocolError(BridgeError):
    """A reply that does not fit the protocol at this point."""

    def __init__(self, expected: str, received: object):
        self.expected = expected
        self.received = received
        super().__init__(f"protocol error: expected {expected}, received {received!r}")


class FrameRejected(BridgeError):
    """Rows that fail a check (counter gap, wrong row length, wrong count); the whole frame is discarded."""

    def __init__(self, what: str, expected: object, received: object):
        self.what = what
        self.expected = expected
        self.received = received
        super().__init__(f"frame rejected: {what}: expected {expected}, received {received}")


class NoBoardAnswered(LinkLost):
    """Nothing that speaks Mk1 answered on a port (no announcement, no ACK of our RST): the wrong port, a board
    that is off, or another device. Says how long it waited and whether bytes that were not Mk1 arrived."""

    def __init__(self, port: str, waited_s: float, foreign_bytes: int = 0):
        self.port = port
        self.waited_s = waited_s
        self.foreign_bytes = foreign_bytes
        heard = (f"{foreign_bytes} byte(s) arrived, none of them a Mk1 packet" if foreign_bytes
                 else "nothing arrived")
        message = f"no Mk1 board answered on {port} within {waited_s:.1f} s ({heard})"
        super().__init__(message)
        self.args = (message,)

    def __str__(self) -> str:
        return self.reason


class ExchangeAbandoned(LinkLost):
    """Another thread abandoned this exchange (Link.abandon): the exit path must make the chamber safe and cannot
    wait for a long measurement a worker thread holds. The link is given up; the board is reset by reopening the
    port."""


class SettleTimeout(LinkLost):
    """The exchange in flight could not be finished in the time given (the board keeps streaming, or is silent);
    the caller resets the board (reopens the port)."""
