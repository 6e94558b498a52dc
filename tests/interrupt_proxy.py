"""A recording TCP proxy between a `chamberlab` subprocess and a real Mk1 firmware board, that can interrupt the
subprocess at a chosen protocol event; the judge of issue 24 ("interrupting a chamber command leaves it safe").

Why a proxy: the verdict must not trust the command's own claim (its summary, its exit code). The harness serves
a fresh board per connection and ends it when the host hangs up, so after the command exits there is no board
left to ask. The proxy sits on the wire, forwards every byte both ways unchanged (in order; only a hold, below,
delays the board's bytes), and decodes the Mk1 framing as it passes with firmware_bridge's own decoders
(PacketSplitter, segment_of, Endpoint.classify, parse_variables, layout_from_names, RowChecker).
What it records per connection: every host instruction (`SET,load_in,0.8`, `MSR,25,0`, `RST`) with its time,
resends counted, whether the board ACKed it; every board text reply and error report; every row, decoded in the
announced VARIABLES_LIST layout, and whether the host ACKed it (read it).

Triggers (one per proxy, fired once, on protocol events the proxy sees, never on a timer of its own):
- `on_msr_rows(k)`: the k-th row of an MSR streamed while a safe-state variable is away from its safe value
  (interrupt during an MSR: the board is streaming rows with a fan running).
- `on_set_reply(target)`: when the host sends `SET,<target>,<value>` with an unsafe value (target None: any SET),
  the board's ACK is forwarded but its reply (OK,SET) is held; the signal is sent, the proxy waits until the
  kernel has delivered it to the process (/proc/PID/status no longer shows it pending), then releases the reply
  (interrupt during a SET, before its reply reached the host).
- `on_silence(seconds)`: while the board (as it last answered) holds a safe-state variable away from its safe
  value, no new message has crossed either way this long (the host is in a WAIT, or a server is idle between
  calls; ACKs and resent copies do not count).
`unsafe_only=False` (msr, set) fires whatever the safe-state variables hold: for commands that never run a fan
(calibrate, sweep), where the exchange in flight is what is under test.
The action sends each of `signals` to the process group (SIGINT, SIGQUIT, SIGHUP, as a terminal's Ctrl-C,
Ctrl-\\ and hang-up do) or to the process (SIGTERM, as a service manager does); with several signals, on_msr_rows spaces them rows apart.

What counts as safe (`WireRecord.verdict`), on the LAST connection of the record (the board a host leaves behind:
every new connection powers up a fresh board, as a real Mega resets on DTR):
1. the "last change" is the latest of: the board's announcement, any host instruction that can change the safe
   variables (a SET of one of them, whatever its value and whether or not the board ACKed it; RST), and the
   board's reply to such an instruction;
2. the "read-back" is the last row that came after the last change AND that the host acknowledged (its link
   received it: the host read the state back, not just the board sent it);
3. safe when there is such a row and it shows every safe-state variable at its safe value: wt load_in == 0,
   load_out == 0 and hatch == 0, lt red == green == blue == 0 (SAFE_VALUES below, written here on purpose rather than imported:
   the judge does not share the command's definition). An unset (-9999, NaN) value is not safe.
A board error report (`<ERR,...>`) on the last connection is named in a "not safe" reason; it needs no rule of its
own: the firmware halts after one, so no row follows it unless the host resets the board (RST, a change).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from firmware_bridge.errors import FrameRejected
from firmware_bridge.messages import CHAMBER_CONFIG, RST, VARIABLES_LIST, parse_variables
from firmware_bridge.packets import END, START, PacketSplitter, segment_of
from firmware_bridge.rows import RowChecker
from firmware_bridge.segments import FIRST_SEQ, Arrival, Endpoint, Segment
from firmware_bridge.variables import Layout, layout_from_names

SAFE_VALUES: dict[str, dict[str, float]] = {
    "wt": {"load_in": 0.0, "load_out": 0.0, "hatch": 0.0},
    "lt": {"red": 0.0, "green": 0.0, "blue": 0.0},
}
"""The safe state issue 24 asks for: fans off, LEDs off."""

SAFE_VARIABLES = frozenset(name for values in SAFE_VALUES.values() for name in values)
_SET = re.compile(r"^SET,([a-z0-9_]*),(.*)$")
_MSR = re.compile(r"^MSR,(\d+),")
_END_B, _START_B = bytes([END]), bytes([START])


@dataclass
class WireEvent:
    """One thing the proxy saw: `side` "host" (an instruction) or "board" (a reply, a row, a report)."""

    index: int  # total order of everything the proxy saw (both directions, all connections)
    t: float  # seconds since the proxy started
    connection: int
    side: str
    kind: str  # instruction | reply | announce | row | error_report
    text: str  # the instruction or reply text; for a row, "row <counter>"
    seq: int | None = None
    resends: int = 0  # host instruction: duplicates the host sent
    acked_at: int | None = None  # host instruction: the board ACKed it; row: the host ACKed it (event index then)
    values: dict[str, float] | None = None  # row: the safe-state variables (NaN for unset)

    def describe(self) -> str:
        extra = f" {self.values}" if self.values is not None else ""
        acked = "" if self.acked_at is None else f" (acked @{self.acked_at})"
        return f"#{self.index} {self.t:7.3f}s c{self.connection} {self.side}: {self.text}{extra}{acked}"


@dataclass(frozen=True)
class Verdict:
    safe: bool
    reason: str
    read_back: WireEvent | None = None


@dataclass
class Connection:
    number: int
    chamber: str | None = None
    layout: Layout | None = None


class WireRecord:
    """Everything the proxy saw, in order; thread-safe for the proxy's connection threads and the test."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Lock()
        self.events: list[WireEvent] = []
        self.connections: list[Connection] = []
        self.notes: list[str] = []  # decoding anomalies (CRC failures, rejected rows): the judge shows them

    def now(self) -> float:
        return self._clock() - self._t0

    def new_connection(self) -> Connection:
        with self._lock:
            conn = Connection(len(self.connections))
            self.connections.append(conn)
            return conn

    def add(self, connection: int, side: str, kind: str, text: str, **kw: Any) -> WireEvent:
        with self._lock:
            event = WireEvent(len(self.events), self.now(), connection, side, kind, text, **kw)
            self.events.append(event)
            return event

    def mark(self, event: WireEvent, attr: str, value: object) -> None:
        with self._lock:
            setattr(event, attr, value)

    def note(self, text: str) -> None:
        with self._lock:
            self.notes.append(text)

    def snapshot(self) -> list[WireEvent]:
        with self._lock:
            return list(self.events)

    def rows(self, connection: int | None = None) -> list[WireEvent]:
        return [e for e in self.snapshot() if e.kind == "row" and connection in (None, e.connection)]

    def tail(self, n: int = 25) -> str:
        """The last `n` events, rows folded into counts, for failure messages."""
        lines: list[str] = []
        folded = 0
        for e in self.snapshot()[-4 * n:]:
            if e.kind == "row" and lines and lines[-1].startswith("  ... rows"):
                folded += 1
                lines[-1] = f"  ... rows x{folded}, last: {e.describe()}"
                continue
            folded = 1 if e.kind == "row" else 0
            lines.append(f"  ... rows x1, last: {e.describe()}" if e.kind == "row" else "  " + e.describe())
        return "\n".join(lines[-n:])

    def verdict(self) -> Verdict:
        """The judge's verdict on the board the host left behind (see the module docstring for the rule)."""
        events = self.snapshot()
        if not self.connections:
            return Verdict(False, "the command never connected to the board")
        last = self.connections[-1]
        if last.chamber is None:
            return Verdict(False, f"connection {last.number} never received the board's announcement")
        safe = SAFE_VALUES[last.chamber]
        mine = [e for e in events if e.connection == last.number]
        reports = [e.text for e in mine if e.kind == "error_report"]
        halted = f"; the board reported {reports}" if reports else ""
        change: WireEvent | None = None
        for e in mine:
            if _changes_safe_state(e):
                change = e
        assert change is not None  # the announcement is one
        read_back = [e for e in mine if e.kind == "row" and e.index > change.index and e.acked_at is not None]
        if not read_back:
            unread = [e for e in mine if e.kind == "row" and e.index > change.index]
            why = (f"{len(unread)} row(s) came after it but the host acknowledged none" if unread
                   else "no row came after it")
            return Verdict(False, f"no read-back on connection {last.number}: the last change of the safe state "
                                  f"was {change.describe()}; {why}{halted}")
        row = read_back[-1]
        assert row.values is not None
        wrong = {k: v for k, v in row.values.items() if k in safe and not v == safe[k]}
        if wrong:
            return Verdict(False, f"the last row read back on connection {last.number} ({row.describe()}) shows "
                                  f"{wrong}, expected {safe}; last change {change.describe()}{halted}", row)
        return Verdict(True, f"{row.describe()} read back after {change.describe()}", row)


def _changes_safe_state(e: WireEvent) -> bool:
    if e.kind == "announce" and e.text.startswith(CHAMBER_CONFIG):
        return True
    if e.kind == "instruction":
        m = _SET.match(e.text)
        return e.text == RST or (m is not None and m.group(1) in SAFE_VARIABLES)
    if e.kind == "reply":
        return e.text == "OK,RST" or any(e.text.startswith(f"OK,SET,{v}=") for v in SAFE_VARIABLES)
    return False


# ------------------------------------------------------------------------------------------------- triggers
@dataclass
class Trigger:
    """When to interrupt, and with what. Built by on_msr_rows / on_set_reply / on_silence."""

    kind: str  # msr | set | silence
    signals: tuple[signal.Signals, ...] = (signal.SIGINT,)
    rows: int = 1
    target: str | None = "load_in"  # set: the variable whose SET is interrupted (None: the first SET of any)
    silence_s: float = 1.0
    unsafe_only: bool = True  # only while (msr), or for a SET that puts (set), a safe-state variable away from safe
    every: int = 2  # msr with several signals: each further signal this many rows after the one before
    fired: threading.Event = field(default_factory=threading.Event)
    fired_at: WireEvent | None = None  # the protocol event the (first) signal was sent at
    delivered: bool | None = None  # every signal sent was seen delivered by the kernel (None: none sent)
    sent: list[signal.Signals] = field(default_factory=list)

    def describe(self) -> str:
        away = " with the safe state away" if self.unsafe_only else ""
        what = {"msr": f"row {self.rows} of an MSR{away}",
                "set": f"SET,{self.target or '<any>'}{' (unsafe value)' if self.unsafe_only else ''} before its reply",
                "silence": f"{self.silence_s:g} s of line silence with the safe state away"}[self.kind]
        first = f"{self.signals[0].name} at {what}"
        if self.kind == "msr" and len(self.signals) > 1:
            return first + "".join(f", then {s.name} {self.every} rows later" for s in self.signals[1:])
        return f"{'+'.join(s.name for s in self.signals)} at {what}"


def on_msr_rows(rows: int = 3, signals: Iterable[signal.Signals] = (signal.SIGINT,), *,
                unsafe_only: bool = True, every: int = 2) -> Trigger:
    """Several signals: the first at row `rows`, each further one `every` rows later (rows of any MSR; a signal
    whose row never comes is not sent). Why rows apart: two signals sent back to back can reach Python's handler
    as one (it runs once per pending flag), so "the operator insists" needs the first to have been handled."""
    return Trigger("msr", tuple(signals), rows=rows, unsafe_only=unsafe_only, every=every)


def on_set_reply(target: str | None = "load_in", signals: Iterable[signal.Signals] = (signal.SIGINT,), *,
                 unsafe_only: bool = True) -> Trigger:
    return Trigger("set", tuple(signals), target=target, unsafe_only=unsafe_only)


def on_silence(seconds: float = 1.0, signals: Iterable[signal.Signals] = (signal.SIGINT,)) -> Trigger:
    return Trigger("silence", tuple(signals), silence_s=seconds)


def signal_pending(pid: int, signum: int) -> bool:
    """Is `signum` still pending (not yet delivered) for process `pid`? False when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            status = fh.read()
    except OSError:  # the process is gone (or there is no /proc: then the signal is taken as delivered at once)
        return False
    bit = 1 << (signum - 1)
    masks = dict(line.split(":\t", 1) for line in status.splitlines() if line.startswith(("SigPnd", "ShdPnd")))
    return any(int(masks[k].strip(), 16) & bit for k in ("SigPnd", "ShdPnd") if k in masks)


TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
"""The signals a terminal sends to its foreground process group."""


def send_signal(pid: int, signum: signal.Signals, timeout: float = 5.0) -> bool:
    """Send SIGINT, SIGQUIT and SIGHUP to the process group (as Ctrl-C, Ctrl-\\ and a hung-up terminal do),
    another signal (SIGTERM: a service manager) to the process, and wait until the kernel has delivered it. True
    when it was seen delivered within `timeout`."""
    try:
        if signum in TERMINAL_SIGNALS:
            os.killpg(os.getpgid(pid), signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while signal_pending(pid, signum):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)  # polling the kernel's pending mask, not waiting for the outcome
    return True


# ------------------------------------------------------------------------------------------------- decoding
class _Direction:
    """One direction of one connection: cuts the byte stream after each packet (so a hold starts at a packet),
    and decodes what it cuts with the bridge's own splitter and segment decoder."""

    def __init__(self) -> None:
        self.pending = b""
        self.splitter = PacketSplitter()
        self.endpoint = Endpoint()

    def cut(self, data: bytes) -> list[bytes]:
        """Pieces ready to forward: each ends a packet, or is bytes outside framing. An unfinished packet waits."""
        buf = self.pending + data
        pieces: list[bytes] = []
        start = 0
        while (end := buf.find(_END_B, start)) >= 0:
            pieces.append(buf[start : end + 1])
            start = end + 1
        rest = buf[start:]
        opening = rest.find(_START_B)
        outside, self.pending = (rest, b"") if opening < 0 else (rest[:opening], rest[opening:])
        return [*pieces, outside] if outside else pieces

    def segments(self, piece: bytes, record: WireRecord, where: str) -> tuple[list[Segment], list[bytes]]:
        split = self.splitter.feed(piece)
        out: list[Segment] = []
        for body in split.bodies:
            segment = segment_of(body)
            if segment is None:
                record.note(f"{where}: a packet failed base64/CRC ({len(body)} bytes)")
            else:
                out.append(segment)
        return out, split.error_reports


class _Link:
    """Decoding state of one connection (both directions) and what it feeds into the record and the trigger."""

    def __init__(self, proxy: "InterruptProxy", conn: Connection) -> None:
        self.proxy = proxy
        self.record = proxy.record
        self.conn = conn
        self.host = _Direction()
        self.board = _Direction()
        self.instructions: dict[int, WireEvent] = {}  # host seq -> instruction (this numbering epoch)
        self.board_messages: dict[int, WireEvent] = {}  # board seq -> row/reply (this numbering epoch)
        self.config: str | None = None
        self.checker: RowChecker | None = None
        self.msr_requested = 0  # n of the last MSR instruction
        self.rows_left = 0
        self.state: dict[str, float] = {}  # safe-state variables as the board last answered them
        self.last_traffic = time.monotonic()  # last new message either way (silence trigger): ACKs and resent
        # copies are link chatter (a board resending a reply whose ACK it threw away kept the line busy for 30 s)

    # host -> board
    def from_host(self, piece: bytes) -> None:
        segments, _ = self.host.segments(piece, self.record, f"c{self.conn.number} host")
        for seg in segments:
            if seg.is_ack:
                message = self.board_messages.get(seg.ack)
                if message is not None and message.acked_at is None:
                    self.record.mark(message, "acked_at", len(self.record.events))
                continue
            kind = self.host.endpoint.classify(seg)
            if kind is Arrival.UNEXPECTED and seg.seq == FIRST_SEQ:  # the host restarted numbering (after RST)
                self.host.endpoint = Endpoint()
                self.instructions.clear()
                kind = self.host.endpoint.classify(seg)
            text = seg.data.decode("ascii", "replace")
            if kind is Arrival.DUPLICATE and seg.seq in self.instructions:
                e = self.instructions[seg.seq]
                self.record.mark(e, "resends", e.resends + 1)
                continue
            event = self.record.add(self.conn.number, "host", "instruction", text, seq=seg.seq)
            self.last_traffic = time.monotonic()
            self.instructions[seg.seq] = event
            if (m := _MSR.match(text)) is not None:
                self.msr_requested = int(m.group(1))
            self.proxy._on_event(self, event)

    # board -> host; returns True when this piece must be held
    def from_board(self, piece: bytes) -> bool:
        segments, reports = self.board.segments(piece, self.record, f"c{self.conn.number} board")
        hold = False
        for report in reports:
            event = self.record.add(self.conn.number, "board", "error_report", report.decode("ascii", "replace"))
            self.proxy._on_event(self, event)
        for seg in segments:
            if seg.is_ack:
                instruction = self.instructions.get(seg.ack)
                if instruction is not None and instruction.acked_at is None:
                    self.record.mark(instruction, "acked_at", len(self.record.events))
                continue
            kind = self.board.endpoint.classify(seg)
            if kind is Arrival.UNEXPECTED and seg.seq == FIRST_SEQ and seg.data.startswith(CHAMBER_CONFIG.encode()):
                self.board.endpoint = Endpoint()  # the board rebooted (RST): its numbering starts again
                self.board_messages.clear()
                kind = self.board.endpoint.classify(seg)
            if kind is not Arrival.DELIVER:
                continue
            event = self._board_message(seg)
            self.last_traffic = time.monotonic()
            self.board_messages[seg.seq] = event
            hold = self.proxy._on_event(self, event) or hold
        return hold

    def _board_message(self, seg: Segment) -> WireEvent:
        data = seg.data
        if self.checker is not None and self.rows_left > 0 and len(data) == self.checker.row_bytes:
            self.rows_left -= 1
            assert self.conn.layout is not None
            try:
                row = self.checker.decode([data], [self.record.now()]).values[0]
            except FrameRejected as exc:
                self.record.note(f"c{self.conn.number}: {exc}")
                self.checker = RowChecker(self.checker.width, first_counter=None)
                row = self.checker.decode([data], [self.record.now()]).values[0]
            names = self.conn.layout.names
            values = {n: float(row[names.index(n)]) for n in SAFE_VALUES[self.conn.layout.chamber]}
            return self.record.add(self.conn.number, "board", "row", f"row {int(row[0])}", seq=seg.seq, values=values)
        text = data.decode("ascii", "replace")
        if text.startswith(CHAMBER_CONFIG + ","):
            self.config = text.split(",", 1)[1]
            self.rows_left = 0
            self.state = {}
            return self.record.add(self.conn.number, "board", "announce", text, seq=seg.seq)
        if text.startswith(VARIABLES_LIST + ","):
            names = parse_variables(text)
            layout = layout_from_names(self.config or "standard", names)
            self.conn.layout, self.conn.chamber = layout, layout.chamber
            self.checker = RowChecker(len(names), first_counter=0)
            return self.record.add(self.conn.number, "board", "announce", text[:40] + "...", seq=seg.seq)
        if text.startswith(f"OK,MSR,n={self.msr_requested},"):
            self.rows_left = self.msr_requested
        elif text.startswith("OK,SET,"):
            name, _, value = text[len("OK,SET,"):].partition("=")
            if name in SAFE_VARIABLES:
                try:
                    self.state[name] = float(value)
                except ValueError:
                    self.record.note(f"c{self.conn.number}: unparsable reply {text!r}")
        return self.record.add(self.conn.number, "board", "reply", text, seq=seg.seq)

    def unsafe(self) -> bool:
        """Does the board (as it last answered) hold a safe-state variable away from its safe value?"""
        safe = SAFE_VALUES.get(self.conn.chamber or "", {})
        return any(self.state.get(k, v) != v for k, v in safe.items())


# ------------------------------------------------------------------------------------------------- the proxy
class InterruptProxy:
    """Listen on 127.0.0.1; for each host connection open one to `board_url` and relay (see module docstring).

    Use as a context manager; `url` is what the command gets as `--port`; `trigger` (None: record only) fires
    once; set `pid` to the process to interrupt before the command reaches the trigger's event."""

    def __init__(self, board_url: str, trigger: Trigger | None = None) -> None:
        host, _, port = board_url.removeprefix("socket://").rpartition(":")
        self._board = (host, int(port))
        self.record = WireRecord()
        self.trigger = trigger
        self.pid: int | None = None  # the process the trigger interrupts
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"socket://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._trigger_lock = threading.Lock()
        self._armed_set: _Link | None = None  # the link whose next board reply is held (set trigger)
        self._rows_since = 0  # rows since the last signal (msr trigger with several signals)

    def __enter__(self) -> "InterruptProxy":
        thread = threading.Thread(target=self._accept, name="interrupt-proxy", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def wait_fired(self, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
        """True once the trigger has fired; False after `timeout` s, or as soon as `alive()` says the process
        to interrupt has ended without reaching the trigger's event."""
        deadline = time.monotonic() + timeout
        while self.trigger is not None and (left := deadline - time.monotonic()) > 0:
            if self.trigger.fired.wait(min(left, 0.1)):
                return True
            if not alive():
                return self.trigger.fired.is_set()
        return False

    # ---------------------------------------------------------------- relay
    def _accept(self) -> None:
        self._listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._relay, args=(client,), name="interrupt-proxy-relay", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _relay(self, client: socket.socket) -> None:
        conn = self.record.new_connection()
        try:
            board = socket.create_connection(self._board, timeout=5)
        except OSError as exc:
            self.record.note(f"c{conn.number}: cannot reach the board at {self._board}: {exc}")
            client.close()
            return
        link = _Link(self, conn)
        for s in (client, board):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(True)
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, "host")
        sel.register(board, selectors.EVENT_READ, "board")
        held: list[bytes] = []
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=self._poll_interval(link)):
                    data = key.fileobj.recv(1 << 16)  # type: ignore[union-attr]
                    if not data:  # one side hung up: end the other (the harness then ends its board)
                        return
                    if key.data == "host":
                        for piece in link.host.cut(data):
                            link.from_host(piece)
                            board.sendall(piece)
                    else:
                        for piece in link.board.cut(data):
                            if link.from_board(piece) or held:
                                held.append(piece)
                            else:
                                client.sendall(piece)
                        if held:  # the set trigger holds the reply: interrupt, then release it
                            self._fire(link)
                            client.sendall(b"".join(held))
                            held.clear()
                self._check_silence(link)
        except (BrokenPipeError, ConnectionResetError):
            return  # a side hung up while the other was still sending (a host that reopens the port to reset the
            # board closes mid-stream): the same end as an empty read above, not a decoding anomaly
        except OSError as exc:
            self.record.note(f"c{conn.number}: relay ended: {exc}")
        finally:
            sel.close()
            for s in (client, board):
                try:
                    s.close()
                except OSError:
                    pass

    # ---------------------------------------------------------------- triggers
    def _on_event(self, link: _Link, event: WireEvent) -> bool:
        """Called for every new event; True when this board message must be held (set trigger)."""
        trig = self.trigger
        if trig is None:
            return False
        if trig.fired.is_set():
            if trig.kind == "msr" and event.kind == "row" and len(trig.sent) < len(trig.signals):
                self._rows_since += 1
                if self._rows_since >= trig.every:
                    self._rows_since = 0
                    self._send(link, trig.signals[len(trig.sent)])
            return False
        if trig.kind == "set":
            if event.kind == "instruction" and (m := _SET.match(event.text)) and trig.target in (None, m.group(1)):
                safe = SAFE_VALUES.get(link.conn.chamber or "", {}).get(m.group(1))
                if not trig.unsafe_only or (safe is not None and _number(m.group(2)) != safe):
                    self._armed_set = link
                    trig.fired_at = event
            elif event.kind == "reply" and self._armed_set is link:
                self._armed_set = None
                return True
        elif trig.kind == "msr":
            if event.kind == "row" and (link.unsafe() or not trig.unsafe_only):
                if link.msr_requested - link.rows_left >= trig.rows:
                    trig.fired_at = event
                    self._fire(link)
        return False

    def _poll_interval(self, link: _Link) -> float:
        trig = self.trigger
        if trig is not None and trig.kind == "silence" and not trig.fired.is_set() and link.unsafe():
            return max(0.0, link.last_traffic + trig.silence_s - time.monotonic())
        return 0.05

    def _check_silence(self, link: _Link) -> None:
        trig = self.trigger
        if trig is None or trig.kind != "silence" or trig.fired.is_set() or not link.unsafe():
            return
        if time.monotonic() - link.last_traffic >= trig.silence_s:
            trig.fired_at = self.record.snapshot()[-1]
            self._fire(link)

    def _fire(self, link: _Link) -> None:
        trig = self.trigger
        with self._trigger_lock:
            if trig is None or trig.fired.is_set():
                return
            if self.pid is None:
                self.record.note("trigger reached before the proxy knew the process to interrupt")
                return
            for signum in trig.signals[:1] if trig.kind == "msr" else trig.signals:
                self._send(link, signum)
            trig.fired.set()

    def _send(self, link: _Link, signum: signal.Signals) -> None:
        trig = self.trigger
        assert trig is not None and self.pid is not None
        self.record.add(link.conn.number, "proxy", "signal", f"sent {signum.name}")
        delivered = send_signal(self.pid, signum)
        trig.delivered = delivered if trig.delivered is None else trig.delivered and delivered
        trig.sent.append(signum)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")
