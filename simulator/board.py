"""The emulated Mk1 board on a real port: a pty (serving the master side) or a TCP socket (socket:// URLs).

Why a real port: the host's serial driver must be tested on the bytes a real board would send, through the same
pyserial code paths, not through mocks. Like the Mega, which resets when its USB port is opened, the board reboots
and announces itself whenever a host opens the pty (POLLHUP on the master clears) or connects to the socket.
With the `no_reset_on_connect` switch (BoardFaults) it does not: like a board behind ser2net, or a Mega with
auto-reset disabled, it keeps its session across hosts and runs on while none is connected (what it sends then is
lost, as on a line nobody reads), so a host that was killed leaves the next one a board mid-exchange.
`running_board(...)` starts one in a background thread for tests; `bench_cli.py sim serve` runs one in front.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import math
import os
import select
import socket
import struct
import tempfile
import threading
import time
import tty
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from firmware_bridge.segments import LinkCounters
from simulator.board_faults import BoardFaults
from simulator.board_protocol import BoardProtocol
from simulator.firmware import EmulatedFirmware
from simulator.model import PhysicsModel
from simulator.physics import make_model

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.005  # how often a pty board looks for a host while none has the port open


class _OpenWatch:
    """inotify on the pty slave: sees a host close and reopen the port, even faster than POLLHUP can show.

    Why: the master's POLLHUP only shows while nobody holds the slave; a host that closes and reopens within
    microseconds (a reconnect) leaves no trace there. The open/close events are queued, so none is missed.
    """

    IN_OPEN, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE = 0x20, 0x08, 0x10

    def __init__(self, path: str):
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            mask = self.IN_OPEN | self.IN_CLOSE_WRITE | self.IN_CLOSE_NOWRITE
            if libc.inotify_add_watch(fd, path.encode(), mask) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):  # no inotify here: POLLHUP alone (slow reconnects may be missed)
            self.fd = -1
        self._closed = False

    def reopened(self) -> bool:
        """Drain events; True when the port was opened again after a close (a new host session)."""
        if self.fd < 0:
            return False
        reopened = False
        while True:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return reopened
            offset = 0
            while offset + 16 <= len(data):
                _, mask, _, length = struct.unpack_from("iIII", data, offset)
                offset += 16 + length
                if mask & (self.IN_CLOSE_WRITE | self.IN_CLOSE_NOWRITE):
                    self._closed = True
                elif mask & self.IN_OPEN and self._closed:
                    reopened = True
                    self._closed = False

    def start_session(self) -> None:
        self.reopened()
        self._closed = False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PtyTransport:
    """Serves the master side of a pseudo-terminal; the host opens the slave path (or a stable symlink to it)."""

    kind = "pty"

    def __init__(self, link_path: Path | None = None, *, link_survives_vanish: bool = True):
        self.link_path: Path | None = None  # the URL hosts open, when given: a symlink to the current device
        self.link_survives_vanish = link_survives_vanish  # like /dev/serial/by-id (else the vanished link is gone)
        self._vanishes = 0
        self.fd = -1
        self.device = ""
        self._vanished: list[int] = []  # slaves of vanished devices, held so their numbers are not reused (hang_up)
        self._open_pty(link_path)

    def _open_pty(self, link_path: Path | None) -> None:
        """A new pty, and `link_path` made a symlink to it (replaced in one step) before the URL names it."""
        master, slave = os.openpty()
        tty.setraw(slave)  # raw before any host opens it: no echo, no line editing of NUL/EOT
        self.device = os.ttyname(slave)
        os.close(slave)  # while nobody holds the slave, the master reports POLLHUP
        os.set_blocking(master, False)
        self.fd = master
        if getattr(self, "watch", None) is not None:
            self.watch.close()
        self.watch = _OpenWatch(self.device)
        if link_path is not None:
            tmp = link_path.with_name(link_path.name + ".new")
            if tmp.is_symlink() or tmp.exists():
                tmp.unlink()
            os.symlink(self.device, tmp)
            os.replace(tmp, link_path)
        self.link_path = link_path

    @property
    def url(self) -> str:
        return str(self.link_path) if self.link_path is not None else self.device

    def wait_for_host(self, timeout: float) -> bool:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        for _, events in poller.poll(0):
            if events & select.POLLHUP:
                time.sleep(min(timeout, IDLE_POLL_S))
                return False
        self.watch.start_session()
        return True

    @property
    def event_fd(self) -> int:
        return self.watch.fd

    def session_replaced(self) -> bool:
        return self.watch.reopened()

    def read(self) -> bytes | None:
        try:
            return os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return b""
        except OSError as exc:
            if exc.errno == errno.EIO:  # the host closed the slave
                return None
            raise

    def write(self, data: bytes | bytearray) -> int | None:
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            if exc.errno == errno.EIO:
                return None
            raise

    def hang_up(self) -> None:
        """Vanish: the device disappears (the host's next read fails, reopening its path finds nothing) and comes
        back as a new pty, behind the same link when it survives a vanish (/dev/serial/by-id), else a new one
        (the old link is removed). The vanished device's number stays taken until the board is closed (the board
        holds its slave: the kernel frees a pty's number only when every end is closed, and removes the path
        when the master closes), so no other pty gets it meanwhile: a host reopening the old device path finds
        nothing, not another test's board or terminal (a reconnecting host once sent its RST probes into one)."""
        self._vanished.append(os.open(self.device, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
        vanished, old_link = self.fd, self.link_path
        if old_link is not None and not self.link_survives_vanish:  # the board comes back under a new link
            self._vanishes += 1
            self._open_pty(old_link.with_name(f"{old_link.name.split('~')[0]}~{self._vanishes}"))
            old_link.unlink(missing_ok=True)
        else:
            self._open_pty(old_link)
        os.close(vanished)

    def end_session(self) -> None:
        pass  # the host closed the slave; the master stays for the next host

    def close(self) -> None:
        self.watch.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        while self._vanished:
            os.close(self._vanished.pop())
        if self.link_path is not None and self.link_path.is_symlink():
            self.link_path.unlink()


class TcpTransport:
    """Listens on host:port; one host at a time (a second connection is closed at once)."""

    kind = "tcp"

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(4)
        self._conn: socket.socket | None = None
        self.fd = -1
        self.host, self.port = self._listener.getsockname()[:2]

    @property
    def url(self) -> str:
        return f"socket://{self.host}:{self.port}"

    @property
    def listener_fd(self) -> int:
        return self._listener.fileno()

    def wait_for_host(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._listener], [], [], timeout)
        if not ready:
            return False
        conn, _ = self._listener.accept()
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn = conn
        self.fd = conn.fileno()
        return True

    def refuse_extra(self) -> None:
        conn, _ = self._listener.accept()
        conn.close()

    def read(self) -> bytes | None:
        assert self._conn is not None
        try:
            data = self._conn.recv(1 << 16)
        except BlockingIOError:
            return b""
        except OSError:
            return None
        return data if data else None

    def write(self, data: bytes | bytearray) -> int | None:
        assert self._conn is not None
        try:
            return self._conn.send(data)
        except BlockingIOError:
            return 0
        except OSError:
            return None

    def hang_up(self) -> None:
        self.end_session()

    def end_session(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self.fd = -1

    def close(self) -> None:
        self.end_session()
        self._listener.close()


class Mk1Board:
    """An emulated board: firmware logic + device-side protocol + a transport, served by `serve(stop)`."""

    def __init__(
        self,
        firmware: EmulatedFirmware,
        transport: PtyTransport | TcpTransport,
        *,
        faults: BoardFaults | None = None,
        pace: str = "real",
        window: int = 1,
        boot_delay: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.firmware = firmware
        self.transport = transport
        self._faults = faults or BoardFaults()
        self.pace = pace
        self.window = window
        self.boot_delay = boot_delay
        self.counters = LinkCounters()
        self.connections = 0
        self._clock = clock
        self._protocol: BoardProtocol | None = None  # the connection being served
        self._session: BoardProtocol | None = None  # the board session (the same across hosts without reset)

    @property
    def url(self) -> str:
        return self.transport.url

    @property
    def host_bytes_lost(self) -> int:
        """Host bytes the board never saw in its current session (receiver off, 64-byte receive ring full)."""
        return self._session.bytes_lost if self._session is not None else 0

    @property
    def faults(self) -> BoardFaults:
        return self._faults

    @faults.setter
    def faults(self, value: BoardFaults) -> None:
        self._faults = value
        if self._protocol is not None:
            self._protocol.faults = value

    def serve(self, stop: threading.Event) -> None:
        """Serve hosts one after another until `stop` is set. Each new host resets the board (a fresh protocol, a
        boot), unless the `no_reset_on_connect` switch is on: then the board's session carries over, and between
        hosts it keeps running (resends, rows due, a reboot after RST) with its output lost."""
        protocol: BoardProtocol | None = None
        while not stop.is_set():
            if protocol is not None and self._faults.no_reset_on_connect:
                self._run_unheard(protocol)
            if not self.transport.wait_for_host(0.02 if protocol is not None else 0.05):
                continue
            self.connections += 1
            if protocol is None or not self._faults.no_reset_on_connect:
                protocol = BoardProtocol(self.firmware, faults=self._faults, pace=self.pace, window=self.window,
                                         boot_delay=self.boot_delay, counters=self.counters)
                protocol.connect(self._clock())
            self._protocol = self._session = protocol
            try:
                self._serve_connection(protocol, stop)
            finally:
                self._protocol = None
                protocol.out.clear()  # bytes not yet written when the host left are lost on the line
        log.debug("board stopped")

    def _run_unheard(self, protocol: BoardProtocol) -> None:
        """No host: the board runs on (its timers fire, it resends what is unacknowledged) and nobody hears it."""
        protocol.tick(self._clock())
        protocol.out.clear()

    def _serve_connection(self, protocol: BoardProtocol, stop: threading.Event) -> None:
        transport = self.transport
        fd = transport.fd
        poller = select.poll()
        extra_fd = getattr(transport, "listener_fd", None)
        if extra_fd is not None:
            poller.register(extra_fd, select.POLLIN)
        event_fd = getattr(transport, "event_fd", -1)
        if event_fd >= 0:
            poller.register(event_fd, select.POLLIN)
        while not stop.is_set():
            now = self._clock()
            protocol.tick(now)
            if protocol.vanish_requested:
                log.debug("board vanishing (fault switch)")
                transport.hang_up()
                return
            if protocol.out:
                written = transport.write(protocol.out)
                if written is None:
                    transport.end_session()
                    return
                del protocol.out[:written]
            wait = min(max(protocol.next_deadline(now) - now, 0.0), 0.05)
            poller.register(fd, select.POLLIN | (select.POLLOUT if protocol.out else 0))
            for ready_fd, events in poller.poll(math.ceil(wait * 1000)):
                if ready_fd == extra_fd:
                    transport.refuse_extra()
                    continue
                if ready_fd == event_fd:
                    if transport.session_replaced():  # closed and reopened: a new host, the board resets
                        return
                    continue
                if events & select.POLLIN:
                    data = transport.read()
                    if data is None:
                        transport.end_session()
                        return
                    if data:
                        protocol.feed(data, self._clock())
                elif events & (select.POLLHUP | select.POLLERR):
                    transport.end_session()
                    return


@dataclass
class BoardHandle:
    """What `running_board` yields: the URL to open, and the board (faults, counters) for assertions."""

    board: Mk1Board
    thread: threading.Thread
    stop_event: threading.Event

    @property
    def url(self) -> str:
        return self.board.url

    @property
    def firmware(self) -> EmulatedFirmware:
        return self.board.firmware

    @property
    def faults(self) -> BoardFaults:
        return self.board.faults

    @faults.setter
    def faults(self, value: BoardFaults) -> None:
        self.board.faults = value


def make_board(chamber: str = "wt", *, transport: str = "pty", seed: int = 0, config: str = "standard",
               model: PhysicsModel | None = None, params: dict[str, Any] | None = None,
               faults: BoardFaults | None = None, pace: str = "real", window: int = 1,
               boot_delay: float | None = None, host: str = "127.0.0.1", port: int = 0,
               link_path: Path | None = None, link_survives_vanish: bool = True) -> Mk1Board:
    """Build a board (its model from simulator.physics unless one is given) on a new transport.

    By default it is the real board's double: its timings (`pace="real"`) and stop-and-wait (`window=1`); the
    deliberate differences of `pace="fast"` and `window>1` are listed in simulator/board_protocol.py (FIDELITY)."""
    if model is None:
        model = make_model(chamber, config=config, seed=seed, params=params)
    if transport == "pty":
        chosen: PtyTransport | TcpTransport = PtyTransport(link_path, link_survives_vanish=link_survives_vanish)
    elif transport == "tcp":
        chosen = TcpTransport(host, port)
    else:
        raise ValueError(f"transport must be 'pty' or 'tcp', got {transport!r}")
    return Mk1Board(EmulatedFirmware(model), chosen, faults=faults, pace=pace, window=window,
                    boot_delay=boot_delay)


@contextmanager
def running_board(chamber: str = "wt", transport: str = "pty", seed: int = 0, *, faults: BoardFaults | None = None,
                  model: PhysicsModel | None = None, config: str = "standard", pace: str = "fast",
                  window: int = 1, stable_path: bool = False, params: dict[str, Any] | None = None,
                  boot_delay: float | None = None) -> Iterator[BoardHandle]:
    """A board serving in a background thread. On a pty its URL is a symlink of its own in a private folder,
    removed with the board: a host that outlives its board (a reconnect loop, a leaked session) finds nothing at
    that path, never a pty the kernel handed to another board or terminal since (tests run in parallel, and root
    is not held off by the exclusive open). `stable_path=True` keeps the symlink across the vanish fault, like
    /dev/serial/by-id does for a USB device; otherwise the vanished board's link goes with it. Fast pace by
    default, because its users are tests and the main job (simulator/board_protocol.py FIDELITY); `pace="real"`
    for the real board's timings."""
    with tempfile.TemporaryDirectory(prefix="mk1-board-") as tmp:
        link_path = Path(tmp) / f"mk1-{chamber}" if transport == "pty" else None
        board = make_board(chamber, transport=transport, seed=seed, config=config, model=model, params=params,
                           faults=faults, pace=pace, window=window, boot_delay=boot_delay, link_path=link_path,
                           link_survives_vanish=stable_path)
        stop = threading.Event()
        thread = threading.Thread(target=board.serve, args=(stop,), name=f"mk1-board-{chamber}", daemon=True)
        thread.start()
        try:
            yield BoardHandle(board, thread, stop)
        finally:
            stop.set()
            thread.join(timeout=5)
            board.transport.close()
