"""Bringing back a board that did not reset when this host connected, and another host left mid-session.

Why: a board behind a serial server that holds the port open across clients (ser2net), a Mega with auto-reset
disabled, or any link without DTR keeps the session of a host that was killed (SIGKILL, a crash, a power loss of the
host). The firmware (serial_comms.cpp) then does one of two things, and neither answers a host that starts afresh:
- inside a command (send_data: a reply, the rows of an MSR) it resends its data segment every 100 ms until an ACK
  names it, and checks nothing else of that ACK; so a new host drains it by acknowledging whatever it sends
  (Link.adopting), until the command's last message (OK,DONE, OK,SET, ...) returns the board to its loop;
- idle (receive_data) it executes only the segment numbered `last_acknowledged + 1`, re-ACKs one numbered
  `last_acknowledged` (a duplicate, not executed) and ignores every other number, an RST numbered from scratch
  included. So a probe numbered X is answered exactly when the board's last_acknowledged is X - 1 (the RST is
  executed) or X (a duplicate ACK), and probes X, X + 2, X + 4, ... cover every number. The link journal
  (firmware_bridge/link_journal.py) says where to look first; without it the probes start where every board
  session starts (2^32 - 1) and go up, within a bounded time.
After a hit the board executes an RST (the hit itself, or the next number), answers OK,RST, reboots and announces
itself: the caller awaits the announcement as after any RST, and every setting is back at its power-on value.

Probes are paced for the board: the wind tunnel reads its serial line only between idle measurement passes
(~140 ms each), and its receive_packet() throws away whatever follows a complete packet in the receive ring, so
the first probe (the likeliest number) is sent, repeated after one pass, and the rest follow PROBE_GAP_S apart,
far slower than the 64-byte ring fills at 500 kbaud.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Literal

from firmware_bridge.errors import LinkLost
from firmware_bridge.link import QUIET_AFTER_ACK_S, Link
from firmware_bridge.link_journal import JournalEntry
from firmware_bridge.messages import CHAMBER_CONFIG, OK_DONE, OK_RST, RST, VARIABLES_LIST
from firmware_bridge.segments import FIRST_SEQ, SEQ_MODULO, SEQ_START

log = logging.getLogger(__name__)

PROBE_GAP_S = 0.005
"""Between two probes: 26 bytes take 0.52 ms at 500 kbaud and the board decodes a packet in well under 1 ms, so the
receive ring never holds more than one probe and none is lost to the bytes-after-a-packet rule."""
WAKE_S = 0.3
"""After the first probe: longer than one idle measurement pass of the wind tunnel (BOARD_PACE, ~140-200 ms); it
reads its ring at the end of the pass and then stays in receive_data, reading each probe as it arrives. The first
probe is sent again after this wait, as it may have been lost: read in one go with our last ACK of a drain
(receive_packet throws away what follows a packet), or glued to a packet a killed host left half-written."""
EXECUTED_WAIT_S = 0.3
"""After a probe is answered: how long to wait for OK,RST (the probe was executed) before taking the answer for a
duplicate ACK and sending the next number. An RST that homes a motor answers later; that case is still caught,
since the next number is then ignored and OK,RST arrives all the same."""
HOME_S = 6.0
"""The longest an RST may spend returning the motors to 0 before OK,RST, positions unknown (both polarizers from
180°: ~2.9 s; the hatch from 360°: ~2.6 s), with a margin."""
DRAIN_QUIET_S = 12.0
"""Inside a previous host's command, the longest silence between two of its messages (a light-tunnel camera row
~1.5 s; a hung Si1151 ~8 s before its error report: BOARD_PACE's stall for an unknown board)."""


class BoardUnresponsive(LinkLost):
    """A board that did not reset on connect could not be brought back (it did not answer a reset in time, or it
    kept streaming a previous host's rows): the chamber may still run as that host left it, and only a power cycle
    (or a reset over DTR) will do."""

    def __init__(self, where: str, what: str, waited_s: float):
        self.where = where
        self.what = what
        self.waited_s = waited_s
        message = (f"the board on {where} did not answer a reset within {waited_s:.1f} s ({what}): the chamber may "
                   "still be running as a previous process left it (fans, hatch); power-cycle the board (unplug its "
                   "USB cable or switch it off and on) or restart the serial server in front of it, then retry")
        super().__init__(message)
        self.args = (message,)

    def __str__(self) -> str:
        return self.reason


Found = Literal["streaming", "replying", "booting", "idle"]


@dataclass(frozen=True)
class Recovery:
    """What a connection found on a board that had not reset, and how it was brought back.

    `found`: "streaming" (the rows of a previous host's MSR), "replying" (a reply to its last command), "idle"
    (it was waiting for a command), all three then reset with our RST; or "booting" (the board announced itself
    meanwhile: it rebooted on its own, or after a previous host's RST, so every setting is at its power-on value).
    `drained_rows` / `drained_replies`: what of the previous host's exchange was acknowledged and thrown away.
    `accepted`: the number of the last host segment the board had accepted (None when it rebooted on its own);
    `via`: how that number was found ("journal": the first probe, from the link journal; "probe": the sweep).
    `probes`: probe segments sent; `seconds`: the recovery's duration until the RST was answered."""

    found: Found
    drained_rows: int = 0
    drained_replies: tuple[str, ...] = ()
    accepted: int | None = None
    via: Literal["journal", "probe", "none"] = "none"
    probes: int = 0
    seconds: float = 0.0

    @property
    def mid_session(self) -> bool:
        """Had a previous host left the board inside its session (anything to drain, or a command accepted since
        the board last booted), until our RST? Then the chamber may have been running as it left it, and the
        caller must say so. A board that rebooted on its own ("booting") is at its power-on values: nothing to say."""
        if self.found == "booting":
            return False
        return bool(self.drained_rows or self.drained_replies) or (self.accepted is not None
                                                                    and self.accepted != SEQ_START)

    @property
    def commands_accepted(self) -> int | None:
        """How many host commands the board had accepted since it booted (its numbering starts at 2^32 - 2)."""
        return None if self.accepted is None else (self.accepted - SEQ_START) % SEQ_MODULO

    def describe(self) -> str:
        """One line for the operator (without the chamber's name, which the caller knows)."""
        parts = ["it did not reset on connect"]
        if self.found == "streaming":
            parts.append(f"it was streaming the rows of an MSR, {self.drained_rows} drained")
        elif self.found == "replying":
            parts.append(f"it was replying ({', '.join(r[:24] for r in self.drained_replies[-2:])} drained)")
        elif self.found == "idle":
            parts.append("it was idle")
        if self.accepted is not None:
            how = "from the link journal" if self.via == "journal" else f"found in {self.probes} probe(s)"
            parts.append(f"it had accepted {self.commands_accepted} command(s) since it booted ({how})")
        return (f"the board was mid-session with a previous host ({'; '.join(parts)}): the chamber may have been left "
                "running by a previous process; it was reset with RST")


def probe_numbers(hint: int | None) -> Iterator[int]:
    """The numbers to probe, likeliest first: `hint` (the journal's last number: the board accepted it or the one
    before), then 2^32 - 1, 1, 3, 5, ... (each X answers for last_acknowledged X - 1 and X; a board session starts
    at last_acknowledged 2^32 - 2). A hint of 2^32 - 2 (nothing sent since the boot) is the sweep's first number."""
    tried: set[int] = set()
    if hint is not None and hint != SEQ_START:
        tried.add(hint)
        yield hint % SEQ_MODULO
    x = FIRST_SEQ
    while True:
        if x not in tried:
            yield x
        x = (x + 2) % SEQ_MODULO


def _is_text(data: bytes, *heads: str) -> bool:
    return data.startswith(tuple(h.encode("ascii") for h in heads))


class BoardRecovery:
    """One recovery on an open link whose board did not announce itself after the connection (see the module
    docstring). `run()` returns "reset" (OK,RST was answered and acknowledged: the link's numbering restarted and
    the announcement follows the reboot) or "booting" (an announcement arrived and is left in the link's inbox),
    with the Recovery; BoardUnresponsive when the board cannot be brought back in time."""

    def __init__(self, link: Link, *, where: str, hint: JournalEntry | None, foreign: bool,
                 probe_timeout: float, drain_timeout: float, reply_timeout: float,
                 probe_gap: float = PROBE_GAP_S, wake: float = WAKE_S, resend_after: float = 0.3):
        self.link = link
        self.where = where
        self.hint = hint
        self.foreign = foreign  # data out of our numbering has arrived already: the board is inside a command
        self.probe_timeout = probe_timeout
        self.drain_timeout = drain_timeout
        self.reply_timeout = reply_timeout
        self.probe_gap = probe_gap
        self.wake = wake
        self.resend_after = resend_after
        self._acks: list[tuple[int, int]] = []  # (acknowledged number, the board's own last sent number)
        self._rows = 0
        self._replies: list[str] = []
        self._found: Found = "idle"
        self._probes = 0
        self._began = link.now()

    # ------------------------------------------------------------------ the whole recovery
    def run(self) -> tuple[str, Recovery]:
        link = self.link
        link.adopting = True
        link.ack_observer = lambda ack, seq: self._acks.append((ack, seq))
        try:
            if self.foreign:
                self._found = "replying"
                if self._drain():
                    self._found = "booting"
                    return "booting", self._recovery(None, "none")
            return self._probe()
        finally:
            link.adopting = False
            link.ack_observer = None

    def _recovery(self, accepted: int | None, via: Literal["journal", "probe", "none"]) -> Recovery:
        return Recovery(self._found, self._rows, tuple(self._replies), accepted, via, self._probes,
                        self.link.now() - self._began)

    # ------------------------------------------------------------------ draining a command in progress
    def _drain(self) -> bool:
        """Acknowledge and discard what the board still sends for a previous host's command, until the command's
        last message. True when the board turned out to be (re)booting: its announcement is back in the inbox, or
        it answered a previous host's RST (numbering restarted, the announcement follows)."""
        link = self.link
        clock = link.now
        deadline = clock() + self.drain_timeout
        quiet_until = clock() + DRAIN_QUIET_S
        while True:
            if not link.queued:
                now = clock()
                if now >= deadline:
                    what = (f"it was still streaming the rows of an MSR a previous process started: "
                            f"{self._rows} drained in {self.drain_timeout:g} s; wait for the MSR to end"
                            if self._rows else f"it kept sending for {self.drain_timeout:g} s")
                    raise BoardUnresponsive(self.where, what, now - self._began)
                if now >= quiet_until:
                    log.info("the board fell silent inside a previous host's command; probing it")
                    if not (self._rows or self._replies):
                        self._found = "idle"  # what looked like another session's segment was not followed
                    return False
                link.pump(min(deadline, quiet_until) - now)
                continue
            item = link.take(1)[0]
            quiet_until = clock() + DRAIN_QUIET_S
            data = item.data
            if _is_text(data, CHAMBER_CONFIG + ","):
                link.unread(item)
                return True
            if _is_text(data, VARIABLES_LIST + ","):  # a previous host took CHAMBER_CONFIG and no more
                return False  # the board enters its loop at its power-on values; the first probe resets it
            if _is_text(data, "OK,"):
                text = data.decode("ascii", errors="replace")
                self._replies.append(text)
                if text == OK_RST:  # acknowledged by the pump: the board reboots and announces itself
                    link.restart_numbering()
                    return True
                if text.startswith("OK,MSR,"):
                    self._found = "streaming"
                    continue
                if text == OK_DONE or text.startswith("OK,SET,"):
                    return False  # the board is back in its loop, waiting for a command
                continue
            self._rows += item.count
            self._found = "streaming"

    # ------------------------------------------------------------------ finding the number the board accepts
    def _probe(self) -> tuple[str, Recovery]:
        link = self.link
        clock = link.now
        deadline = clock() + self.probe_timeout
        hint = self.hint.seq if self.hint is not None else None
        numbers = probe_numbers(hint)
        first = next(numbers)
        link.pump(QUIET_AFTER_ACK_S)  # the last ACK of a drain is read before the first probe arrives
        schedule = [(first, self.wake), (first, self.probe_gap)]
        while True:
            x, wait = schedule.pop(0) if schedule else (next(numbers), self.probe_gap)
            now = clock()
            if now >= deadline:
                break
            link.write_numbered(x, RST.encode("ascii"))
            self._probes += 1
            until = min(deadline, now + wait)
            while (left := until - clock()) > 0 and not self._acks:
                if self._announced():
                    return "booting", self._recovery(None, "none")
                link.pump(left)
            if self._acks:
                ack, board_seq = self._acks[0]
                via: Literal["journal", "probe"] = "journal" if hint is not None and ack == hint else "probe"
                accepted = self._confirm(ack, board_seq)
                return "reset", self._recovery(accepted, via)
        after = " after the drain" if self._rows or self._replies else ""
        swept = self._probes - (2 if hint is None else 3)  # the first number is probed twice
        known = f"the link journal's last command, segment {hint}, and " if hint is not None else ""
        raise BoardUnresponsive(self.where, f"it answered none of {self._probes} RST probes{after}: {known}the "
                                            f"numbers of the first {2 * max(swept, 0) + 2} commands of a board "
                                            "session", clock() - self._began)

    def _announced(self) -> bool:
        """Did the board announce itself meanwhile (it rebooted, or was booting all along)? The announcement is
        left at the head of the inbox; anything else stays there too (OK,RST may follow the answer to a probe)."""
        link = self.link
        if not any(_is_text(item.data, CHAMBER_CONFIG + ",") for item in link.inbox):
            return False
        while not _is_text(link.inbox[0].data, CHAMBER_CONFIG + ","):
            log.debug("discarding %r before the announcement", link.take(1)[0].data[:40])
        self._found = "booting"
        return True

    def _confirm(self, x: int, board_seq: int) -> int:
        """Probe `x` was answered: the board had accepted x - 1 (and now executes our RST) or x (the answer was a
        duplicate ACK; then x + 1 is executed). Wait for OK,RST, sending x + 1 until the board answers either;
        returns the board's last accepted number before our RST."""
        link = self.link
        clock = link.now
        link.endpoint.last_acknowledged = board_seq  # OK,RST comes numbered after the board's last sent segment
        give_up = clock() + self.reply_timeout + HOME_S
        next_at = clock() + EXECUTED_WAIT_S
        nudged = False  # x + 1 was acknowledged: the board executes it
        while True:
            # the ACK of x + 1 first: it and OK,RST may arrive in one read
            nudged = nudged or any(ack == (x + 1) % SEQ_MODULO for ack, _ in self._acks)
            reply = self._text()
            if reply == OK_RST:  # acknowledged by the pump; the board reboots
                link.restart_numbering()
                return (x if nudged else (x - 1)) % SEQ_MODULO
            if reply is not None:
                log.debug("discarding %r while awaiting OK,RST", reply[:40])
                continue
            now = clock()
            if now >= give_up:
                raise BoardUnresponsive(self.where, f"it answered RST probe {x} but sent no OK,RST within "
                                                    f"{self.reply_timeout + HOME_S:g} s", now - self._began)
            if not nudged and now >= next_at:
                link.write_numbered((x + 1) % SEQ_MODULO, RST.encode("ascii"))
                self._probes += 1
                next_at = now + self.resend_after
            link.pump(max(min(give_up, next_at if not nudged else give_up) - now, 0.0))

    def _text(self) -> str | None:
        """The next delivered message as text, without waiting (None: none)."""
        link = self.link
        if not link.queued:
            return None
        return link.take(1)[0].data.decode("ascii", errors="replace")
