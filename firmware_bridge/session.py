"""One conversation with a Mk1 board: open the port, reset, await the announcement, then SET / MSR / RST.

Why separate from the link: the link knows segments, this module knows the order of messages (boot
announcement first, OK,MSR before rows, OK,DONE after them) and turns replies into checked values. WAIT does not
exist on the board; callers wait on the host.

A board that does not reset when the port is opened (a serial server holding the port across clients, auto-reset
disabled, no DTR) may still be inside the session of a host that was killed: `start` then recovers it
(firmware_bridge/recovery.py) and says so in `BootInfo.recovered`. With a link journal (firmware_bridge/
link_journal.py) every command's number is recorded before it is sent, so the next host finds that board at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import serial

from firmware_bridge.errors import (BoardRebooted, BridgeError, FrameRejected, LinkLost, NoBoardAnswered, ProtocolError,
                                    SettleTimeout)
from firmware_bridge.link import RESEND_AFTER_S, Delivery, Link, ReplyTimeout
from firmware_bridge.link_journal import JournalEntry, LinkJournal
from firmware_bridge.messages import (
    CHAMBER_CONFIG,
    OK_DONE,
    OK_RST,
    RST,
    VARIABLES_LIST,
    format_msr,
    format_set,
    parse_config,
    parse_msr_reply,
    parse_set_reply,
    parse_variables,
)
from firmware_bridge.recovery import BoardRecovery, BoardUnresponsive, Recovery
from firmware_bridge.rows import RowBlock, RowChecker
from firmware_bridge.segments import LinkCounters
from firmware_bridge.motion import MotorPositions
from firmware_bridge.variables import COUNTER_PERIOD, chamber_of

log = logging.getLogger(__name__)

BAUDRATE = 500_000


@dataclass(frozen=True)
class BootInfo:
    """What the board announced after reset. `recovered`: set when the board had not reset on connect and a
    previous host had left it mid-session (the chamber may have been running as it left it; see Recovery)."""

    config: str
    names: tuple[str, ...]
    recovered: Recovery | None = None


@dataclass(frozen=True)
class BoardPace:
    """What a host must allow for on one chamber's real firmware (wt_mk_1.ino, lt_mk_1.ino, serial_comms.cpp).

    - `resend_s`: the first resend interval for a host segment. The wind tunnel reads its serial line only
      between idle measurements (take_measurements, ~140 ms, runs whenever no instruction is pending), so its
      ACK can come ~150 ms after our segment; resending at the protocol's 100 ms would be needless, and a resend
      into the board's full 64-byte receive ring loses bytes. The light tunnel waits in receive_string and ACKs
      at once.
    - `stall_s`: the longest silence between rows of an MSR before the link counts as lost. It must outlast the
      firmware's own give-up, so that its error report arrives first: a hung Si1151 is polled 2 x 10000 times
      (~8 s) before `<ERR,er08,...>`; a camera row takes ~1.5 s.
    - `row_s`: the time one MSR row takes on this board, with a margin (wind tunnel ~7 rows/s: four 24 ms
      barometer reads and five 5 ms ADC settles; light tunnel ~12.4 rows/s: three 12.5 ms light readings), to
      budget the rows an interrupted MSR still owes (`Mk1Session.settle_estimate`).
    """

    resend_s: float
    stall_s: float
    row_s: float


BOARD_PACE = {"wt": BoardPace(resend_s=0.3, stall_s=3.0, row_s=0.2),
              "lt": BoardPace(resend_s=RESEND_AFTER_S, stall_s=12.0, row_s=0.12)}
UNKNOWN_PACE = BoardPace(resend_s=0.3, stall_s=12.0, row_s=0.2)
"""Before the announcement says which chamber this is (and for a board we do not know): the slower of both."""


@dataclass(frozen=True)
class Timing:
    """Timeouts of a session; None means "as the connected board needs" (BOARD_PACE), the default for real boards.

    Motion is added on top of `reply_timeout`: a SET that moves the hatch or a polarizer, and RST (which first
    returns every motor to 0), reply only after the move (firmware_bridge.motion)."""

    boot_timeout: float = 6.0  # from reset to CHAMBER_CONFIG (the original host waited ~4 s)
    reply_timeout: float = 2.0  # from an ACKed command to its reply, besides motion
    stall_timeout: float | None = None  # longest pause between rows of an MSR
    resend_after: float | None = None  # first resend interval for our segments (then adapted to the ACK delays seen)
    max_resends: int = 10
    ack_patience: float = 5.0  # ... and resent for at least this long: a busy host starves a process for seconds
    dtr_pulse: float = 0.05
    probe_timeout: float | None = None  # recovering a board that did not reset: probing for its number (None: twice
    # boot_timeout, the time the RST fallback had before recovery existed)
    drain_timeout: float = 60.0  # ... and draining the command a previous host left it in (rows of a long MSR)


@dataclass
class Exchange:
    """The command in flight and what the board still owes for it. Kept when anything (KeyboardInterrupt
    included) escapes mid-exchange, so that `Mk1Session.settle` can finish it the way the firmware expects.

    `stage`: "reply" (the command's segment may still await its ACK, then OK,SET / OK,MSR / OK,RST is owed),
    "rows" (MSR: `rows_left` rows, then OK,DONE), "done" (MSR: only OK,DONE), "boot" (RST: the announcement)."""

    command: str  # "SET", "MSR" or "RST"
    text: str
    stage: str = "reply"
    rows_left: int = 0
    motion_s: float = 0.0  # motor movement the reply waits for (SET of a motor, RST)


def open_port(url: str, *, port_factory: Callable[..., Any] = serial.serial_for_url) -> Any:
    """Open any pyserial URL (device path, pty, socket://) exclusively where the platform supports it."""
    try:
        return port_factory(url, baudrate=BAUDRATE, exclusive=True, timeout=0, write_timeout=2.0)
    except (serial.SerialException, OSError, ValueError) as exc:
        raise LinkLost(f"cannot open {url}: {exc}") from exc


class Mk1Session:
    """A board session on an open port. Create with `Mk1Session.connect(url)` or around a port you opened."""

    def __init__(
        self,
        port: Any,
        *,
        timing: Timing = Timing(),
        counters: LinkCounters | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        journal: LinkJournal | None = None,
    ):
        self.timing = timing
        self.pace = UNKNOWN_PACE
        self.link = Link(port, counters=counters, clock=clock, wall_clock=wall_clock,
                         resend_after=timing.resend_after or UNKNOWN_PACE.resend_s, max_resends=timing.max_resends,
                         ack_patience=timing.ack_patience)
        self.journal = journal
        # What the previous session on this port recorded, read before this one writes anything.
        self.journal_hint: JournalEntry | None = journal.last() if journal is not None else None
        if journal is not None:
            self.link.on_numbered = journal.record
        self._sleep = sleep
        self.boot: BootInfo | None = None
        self.checker: RowChecker | None = None
        # Each run of rows of an MSR as the link delivers it (data, host time, row count), before the MSR's checks:
        # for a live view that cannot wait for the whole MSR. The rows still count only once the MSR returns.
        self.row_observer: Callable[[bytes, float, int], None] | None = None
        self.motors = MotorPositions()
        self.in_flight: Exchange | None = None

    @classmethod
    def connect(cls, url: str, *, timing: Timing = Timing(), counters: LinkCounters | None = None,
                port_factory: Callable[..., Any] = serial.serial_for_url, **kwargs: Any) -> "Mk1Session":
        """Open, reset (DTR, else recover the board: firmware_bridge/recovery.py) and handshake. The returned
        session has `boot` set (`boot.recovered` when a previous host had left the board mid-session).
        `journal`: the port's link journal (firmware_bridge/link_journal.py)."""
        port = open_port(url, port_factory=port_factory)
        session = cls(port, timing=timing, counters=counters, **kwargs)
        try:
            session.start(where=url)
        except BaseException:
            session.close()
            raise
        return session

    # ------------------------------------------------------------------ boot
    def start(self, where: str = "") -> BootInfo:
        """Reset the board by DTR where the port has modem lines, then await the announcement; without one, the
        board did not reset (or is still booting): recover it (firmware_bridge/recovery.py: drain what it still
        sends for a previous host, find the number it accepts, RST). NoBoardAnswered (naming `where`, the port)
        when nothing Mk1 arrived in all that time and no journal says a board was here; BoardUnresponsive when a
        board was heard (or journaled) but could not be brought back."""
        clock = self.link._clock
        began = clock()
        heard = self.counters.bytes_received, self.counters.segments_received
        port = where or str(getattr(self.link.port, "port", "the port"))
        try:
            boot = self._start(port)
        except (ReplyTimeout, BoardUnresponsive) as exc:
            heard_mk1 = self.counters.segments_received != heard[1]  # a segment with a valid CRC arrived
            if isinstance(exc, BoardUnresponsive) and (heard_mk1 or self.journal_hint is not None):
                raise  # a board answered, or the journal says a host left one here: say how to power-cycle it
            if heard_mk1:  # a Mk1 board that answered and then stopped
                raise BoardUnresponsive(port, f"it answered, then stopped: {exc.reason}", clock() - began) from exc
            foreign = self.counters.bytes_received - heard[0]
            raise NoBoardAnswered(port, clock() - began, foreign) from exc
        return boot

    def _start(self, where: str) -> BootInfo:
        dtr_worked = self._pulse_dtr()
        try:
            self.link.port.reset_input_buffer()
        except (serial.SerialException, OSError) as exc:
            raise LinkLost(f"cannot flush the port: {exc}") from exc
        unexpected = self.counters.unexpected
        boot = self._announcement(self.timing.boot_timeout, foreign_ends=True)
        if boot is not None:
            return boot
        foreign = self.counters.unexpected != unexpected
        log.info("no announcement after %s (%s); recovering the board", "DTR" if dtr_worked else "opening the port",
                 "it sends segments of another session" if foreign else "silence")
        self.link.broken = None
        # Numbering is kept until the recovery adopts the board's: part of the announcement may have arrived
        # (CHAMBER_CONFIG without VARIABLES_LIST yet). The board may also still be booting (its receiver is off until
        # Serial.begin, then it announces itself): the recovery gives way to an announcement whenever one comes.
        timing = self.timing
        recovery = BoardRecovery(self.link, where=where, hint=self.journal_hint, foreign=foreign,
                                 probe_timeout=timing.probe_timeout or 2 * timing.boot_timeout,
                                 drain_timeout=timing.drain_timeout, reply_timeout=timing.reply_timeout,
                                 resend_after=self.link.resend_after)
        _, found = recovery.run()  # "reset" (the announcement follows the reboot) or "booting" (it is arriving)
        boot = self.await_boot(timing.boot_timeout)
        if found.mid_session:
            log.info("%s: %s", where, found.describe())  # the caller tells the operator (BootInfo.recovered)
            self.boot = boot = replace(boot, recovered=found)
        return boot

    def _pulse_dtr(self) -> bool:
        port = self.link.port
        try:
            port.dtr = False
            self._sleep(self.timing.dtr_pulse)
            port.dtr = True
        except (OSError, serial.SerialException, ValueError, AttributeError) as exc:
            log.debug("DTR reset unavailable on this port (%s); relying on auto-reset or RST", exc)
            return False
        return True

    def await_boot(self, timeout: float) -> BootInfo:
        """Wait for CHAMBER_CONFIG then VARIABLES_LIST; a fresh boot restarts the row counter at 0."""
        boot = self._announcement(timeout)
        assert boot is not None
        return boot

    def _announcement(self, timeout: float, *, foreign_ends: bool = False) -> BootInfo | None:
        """await_boot's loop. `foreign_ends`: give up early (None) when a data segment of another session arrives
        before any announcement (a board a previous host left inside a command), and at the timeout (None) too."""
        clock = self.link._clock
        deadline = clock() + timeout
        config: str | None = None
        unexpected = self.counters.unexpected
        while True:
            if foreign_ends:
                if config is None and self.counters.unexpected != unexpected:
                    return None
                if not self.link.queued:
                    remaining = deadline - clock()
                    if remaining <= 0:
                        return None
                    self.link.pump(min(remaining, RESEND_AFTER_S))
                    continue
            data, _ = self.link.next_message(max(deadline - clock(), 0.0))
            text = data.decode("ascii", errors="replace")
            if text.startswith(CHAMBER_CONFIG + ","):
                config = parse_config(text)
            elif text.startswith(VARIABLES_LIST + ",") and config is not None:
                names = parse_variables(text)
                self.boot = BootInfo(config, names)
                self.checker = RowChecker(len(names), first_counter=0)
                self.link.reboot_seen = False
                self.motors.reset()
                self.pace = BOARD_PACE.get(chamber_of(names), UNKNOWN_PACE)
                self.link.set_resend_floor(self.timing.resend_after or self.pace.resend_s)
                if self.journal is not None:  # a fresh numbering: nothing of ours accepted yet
                    self.journal.started()
                return self.boot
            else:
                log.debug("ignoring %r while awaiting the boot announcement", text[:80])

    # ------------------------------------------------------------------ commands
    def set(self, target: str, value: float) -> float:
        """SET one variable (already validated by the caller); returns the value the board echoed."""
        text = format_set(target, value)
        motion = self.motors.seconds_to(target, value)
        self._begin(Exchange("SET", text, motion_s=motion))
        self._send(text)
        reply = self._text_reply(motion)
        self.in_flight = None  # the exchange is over on the wire, whatever the reply says
        echoed = parse_set_reply(reply, target).value
        self.motors.moved(target, value)
        return echoed

    def measure(self, n: int, delay: int = 0) -> RowBlock:
        """MSR n rows; every row is checked before any is returned, and a failure discards them all."""
        if self.checker is None:
            raise ProtocolError("a boot announcement before MSR", "none")
        text = format_msr(n, delay)
        exchange = self._begin(Exchange("MSR", text, rows_left=n))
        self._send(text)
        reply = self._text_reply()
        exchange.stage = "rows"
        parse_msr_reply(reply, n)
        link = self.link
        runs: list[Delivery] = []  # rows as the link delivered them (runs of rows, not one object per row)
        got = 0
        stall = self.timing.stall_timeout or self.pace.stall_s
        clock = link._clock
        last_progress = clock()
        while got < n:
            if not link.queued:
                waited = clock() - last_progress
                if waited >= stall:  # bytes may still arrive (e.g. a rebooted board's announcements), rows do not
                    if link.reboot_seen:
                        link.broken = BoardRebooted(f"the board rebooted mid-MSR after {got} of {n} rows")
                    else:
                        link.broken = ReplyTimeout(f"MSR stalled after {got} of {n} rows (no row for {stall:g} s)")
                    raise link.broken
                link.pump(stall - waited)
                continue
            last_progress = clock()
            for item in link.take(n - got):
                runs.append(item)
                got += item.count
                if self.row_observer is not None:
                    self.row_observer(item.data, item.stamp, item.count)
                exchange.rows_left -= item.count
        exchange.stage = "done"
        done = self._text_reply()
        self.in_flight = None
        if done != OK_DONE:
            raise ProtocolError(f"'{OK_DONE}' after {n} rows", done)
        try:
            return self.checker.decode_runs(runs)
        except FrameRejected:
            self._resync(runs)
            raise

    def reset(self, *, patience: float | None = None) -> BootInfo:
        """RST: the board returns its motors to 0, answers OK,RST, reboots and announces itself again (numbering
        restarts). A board that was still booting announces itself before it reads the RST; those announcements
        are passed over, since OK,RST and a fresh announcement follow. `patience`: how long to keep resending RST
        before giving up (default: the link's resend budget)."""
        clock = self.link._clock
        started = clock()
        motion = self.motors.seconds_home()
        exchange = self._begin(Exchange("RST", RST, motion_s=motion))
        self._send(RST, patience=patience)
        boot_wait = self.timing.boot_timeout
        while True:
            reply = self._text_reply(motion)
            if reply == OK_RST:
                break
            if not reply.startswith((CHAMBER_CONFIG + ",", VARIABLES_LIST + ",")):
                raise ProtocolError(f"'{OK_RST}'", reply)
            log.info("the board announced itself before answering RST (it was still booting): %s", reply[:40])
            # It booted slower than boot_timeout once; give its reboot the time it showed, with a margin.
            boot_wait = max(boot_wait, 1.5 * (clock() - started + self.timing.boot_timeout))
        self.link.restart_numbering()
        exchange.stage = "boot"
        boot = self.await_boot(boot_wait)
        self.in_flight = None
        return boot

    # ------------------------------------------------------------------ an interrupted exchange
    def _begin(self, exchange: Exchange) -> Exchange:
        """Record `exchange` as the one in flight; refused (nothing sent) while an interrupted one is unsettled."""
        self.link._check_usable()  # a halted board or a lost link says so first
        if self.owes:
            what = self.in_flight.text if self.in_flight is not None else f"segment {self.link.unacknowledged}"
            raise LinkLost(f"expected the interrupted {what!r} to be settled before {exchange.text!r}; "
                           "nothing was sent")
        self.in_flight = exchange
        return exchange

    def _send(self, text: str, *, patience: float | None = None) -> None:
        """Send the command of the exchange in flight. A refusal before anything was numbered (PacketTooLong, a
        halted board) or after the ACK leaves nothing owed, so the record goes; an interrupt keeps it."""
        try:
            self.link.send(text.encode("ascii"), text, patience=patience)
        except BridgeError:
            if self.link.unacknowledged is None and self.link.halted is None:
                self.in_flight = None
            raise

    @property
    def owes(self) -> bool:
        """Whether an interrupted exchange is unsettled: a command in flight, or our segment not yet ACKed."""
        return self.in_flight is not None or self.link.unacknowledged is not None

    def settle_estimate(self) -> float:
        """Seconds the exchange in flight may still take on this board (0: none): the ACK of our segment, the
        reply (with motion), the rows an MSR still owes at this board's row period (BOARD_PACE), a reboot."""
        exchange = self.in_flight
        if not self.owes:
            return 0.0
        seconds = 3 * self.link.resend_after + self.timing.reply_timeout
        if exchange is not None:
            seconds += 1.25 * exchange.motion_s + exchange.rows_left * self.pace.row_s
            if exchange.command == "RST":
                seconds += self.timing.boot_timeout
        return seconds

    def settle(self, deadline: float) -> BootInfo | None:
        """Finish the exchange in flight the way the firmware accepts it, by `deadline` (on the link's clock).

        Why: an exchange cut short (KeyboardInterrupt in a read) leaves the board owing us a reply or rows, or
        waiting for our segment; the next command would read the old reply as its own, or be ignored by a board
        still inside an MSR (send_data() reads only ACKs until OK,DONE). So: start the packet splitter afresh (the
        board resends what we did not ACK), resend our unacknowledged segment until ACKed (its sequence number is
        spent), ACK and discard the rows still owed, read and discard the owed reply (OK,SET / OK,DONE / OK,RST and
        the reboot announcement). SettleTimeout when the estimate does not fit before `deadline` or the board does
        not finish in time: the caller then resets the board (reopens the port). The estimate (settle_estimate,
        margins included) also bounds the wait, so a silent board costs no more than a working one would take.
        Returns the fresh announcement when the exchange was an RST (the board rebooted: settings are gone)."""
        link = self.link
        link.restart_splitter()
        exchange = self.in_flight
        if not self.owes:
            return None
        clock = link._clock
        what = exchange.text if exchange is not None else f"segment {link.unacknowledged}"
        need = self.settle_estimate()
        if clock() + need > deadline:
            raise SettleTimeout(f"expected to finish the {what!r} in flight within {max(deadline - clock(), 0):.1f} s, "
                                f"it needs about {need:.1f} s")
        deadline = clock() + need
        seq = link.unacknowledged
        if not link.deliver_pending(deadline):
            raise SettleTimeout(f"expected an ACK of segment {seq} ({what!r}) within {need:.1f} s, received none")
        if exchange is not None:
            self._finish(exchange, deadline)
        self.in_flight = None
        log.info("settled the interrupted %r", what)
        return self.boot if exchange is not None and exchange.command == "RST" else None

    def _finish(self, exchange: Exchange, deadline: float) -> None:
        """Read and discard what the board still owes for `exchange` (its segment is ACKed)."""
        link = self.link
        clock = link._clock
        last_row: Delivery | None = None
        row_bytes = self.checker.row_bytes if self.checker is not None else -1
        while True:
            if exchange.stage == "boot":
                try:
                    self.await_boot(max(deadline - clock(), 0.0))
                except ReplyTimeout as exc:
                    raise SettleTimeout(f"expected the board's announcement after OK,RST by the deadline: "
                                        f"{exc.reason}") from exc
                return
            if link.reboot_seen and exchange.command != "RST":
                raise BoardRebooted(f"the board rebooted while {exchange.text!r} was being settled")
            if not link.queued:
                remaining = deadline - clock()
                if remaining <= 0:
                    raise SettleTimeout(f"expected the rest of {exchange.text!r} ({exchange.stage}, "
                                        f"{exchange.rows_left} row(s) left) by the deadline, received no more")
                link.pump(remaining)
                continue
            item = link.take(1)[0]  # one message at a time: a run of rows and OK,DONE may arrive in one read
            data = item.data
            if exchange.command == "MSR" and item.size == row_bytes and data != OK_DONE.encode():
                exchange.rows_left -= item.count
                last_row = item
                continue
            text = data.decode("ascii", errors="replace")
            if exchange.command == "SET" and text.startswith("OK,SET,"):
                return
            if exchange.command == "MSR" and text == OK_DONE:
                assert self.checker is not None
                if last_row is not None:
                    self._resync([last_row])
                else:  # the rows were taken before the interrupt and never checked: continue from any counter
                    self.checker = RowChecker(self.checker.width, first_counter=None)
                return
            if exchange.command == "MSR" and text.startswith("OK,MSR,"):
                exchange.stage = "rows"
                continue
            if exchange.command == "RST" and text == OK_RST:
                link.restart_numbering()
                exchange.stage = "boot"
                continue
            log.debug("discarding %r while settling %r", text[:40], exchange.text)

    def _text_reply(self, motion_s: float = 0.0) -> str:
        """The next text message; the timeout allows for `motion_s` of motor movement first (+25 % margin)."""
        data, _ = self.link.next_message(self.timing.reply_timeout + 1.25 * motion_s)
        return data.decode("ascii", errors="replace")

    def _resync(self, runs: list[Delivery]) -> None:
        """After a rejected frame, continue from the board's own counter so the next MSR can be checked."""
        assert self.checker is not None
        last = runs[-1].data[-runs[-1].size :] if runs else b""
        if len(last) == self.checker.row_bytes:
            counter = int(np.frombuffer(last[:4], dtype="<f4")[0])
            self.checker = RowChecker(self.checker.width, first_counter=(counter + 1) % COUNTER_PERIOD)
        else:
            self.checker = RowChecker(self.checker.width, first_counter=None)

    @property
    def counters(self) -> LinkCounters:
        return self.link.counters

    def close(self) -> None:
        self.link.close()
