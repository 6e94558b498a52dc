"""The firmware's packet receiver, byte-exact: receive_packet()'s parser over its 64-character input buffer.

Why a module of its own: what the real board silently drops (an overlong packet, the bytes after the END that
completes a packet read from the receive ring) decides which host retries are needed; the rule is kept in one
small class the protocol only asks for packets, and tests/test_board_vs_firmware.py checks it against the firmware
(a packet over 64 characters is dropped silently).
"""

from __future__ import annotations

from firmware_bridge.packets import BOARD_INPUT_BUFFER as INPUT_BUFFER
from firmware_bridge.packets import END, START

START_BYTE = bytes([START])
END_BYTE = bytes([END])


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
                j = data.find(START_BYTE, i)
                if j < 0:
                    return bodies
                self.reading = True
                self._buf.clear()
                i = j + 1
                continue
            j = data.find(END_BYTE, i)
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
