"""A ser2net-like serial server for tests: ONE upstream link to a board, held open across successive hosts.

Why: the firmware harness (tests/firmware_harness.py) powers up a fresh board for every TCP connection, as a Mega
resets when a host opens its USB port. A board behind a serial server that keeps the device open (ser2net), or a
Mega with auto-reset disabled, does not: a host killed mid-exchange leaves the next host a board still inside its
session (issue 31). This proxy reproduces that on the real firmware. It connects once to the board, then serves
hosts one after another on its own socket:// URL, forwarding bytes both ways unchanged; while no host is connected
it reads the board's bytes and drops them (nobody is listening on the line), as ser2net does. A newer host replaces
an older one.

What it sees is decoded with tests/interrupt_proxy.py's decoders into one WireRecord for the whole board session
(a single "connection": the board's one power-up), so `record.verdict()` judges the state the board was left in
from the rows a host read back, not from any command's own account.
"""

from __future__ import annotations

import selectors
import socket
import threading

from firmware_bridge.messages import CHAMBER_CONFIG
from firmware_bridge.segments import Endpoint, Segment
from interrupt_proxy import Connection, WireEvent, WireRecord, _Link


class _SessionLink(_Link):
    """interrupt_proxy's decoding of one connection, for a board session that outlives its hosts: when the board
    reboots (it announces itself), the host's numbering restarts too, whatever numbers were probed before."""

    def _board_message(self, seg: Segment) -> WireEvent:
        event = super()._board_message(seg)
        if event.kind == "announce" and event.text.startswith(CHAMBER_CONFIG):
            self.host.endpoint = Endpoint()
            self.instructions.clear()
        return event


class _Recorder:
    """What interrupt_proxy._Link needs from its proxy: the record, and an event hook (no trigger here)."""

    def __init__(self, record: WireRecord) -> None:
        self.record = record

    def _on_event(self, link: _Link, event: WireEvent) -> bool:
        return False


class PersistentLink:
    """Use as a context manager: `url` is what hosts get as --port; `record` holds the decoded board session;
    `hosts` counts the hosts served; `dropped` the board bytes no host was there to read."""

    def __init__(self, board_url: str) -> None:
        host, _, port = board_url.removeprefix("socket://").rpartition(":")
        self._upstream = socket.create_connection((host, int(port)), timeout=5)
        self._upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._upstream.setblocking(True)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"socket://127.0.0.1:{self._listener.getsockname()[1]}"
        self.record = WireRecord()
        self._conn: Connection = self.record.new_connection()
        self._link = _SessionLink(_Recorder(self.record), self._conn)  # type: ignore[arg-type]
        self._host: socket.socket | None = None
        self.hosts = 0
        self.dropped = 0
        self.upstream_closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="persistent-link", daemon=True)

    def __enter__(self) -> "PersistentLink":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for s in (self._host, self._listener, self._upstream):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "listener")
        sel.register(self._upstream, selectors.EVENT_READ, "board")
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.05):
                    if key.data == "listener":
                        host, _ = self._listener.accept()
                        host.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        if self._host is not None:  # a newer host replaces the older one
                            sel.unregister(self._host)
                            self._host.close()
                        self._host = host
                        self.hosts += 1
                        sel.register(host, selectors.EVENT_READ, "host")
                    elif key.data == "board":
                        data = self._upstream.recv(1 << 16)
                        if not data:
                            self.upstream_closed = True
                            self.record.note("the board closed the upstream link")
                            return
                        for piece in self._link.board.cut(data):
                            self._link.from_board(piece)
                        if self._host is None:
                            self.dropped += len(data)
                            continue
                        try:
                            self._host.sendall(data)
                        except OSError:  # the host is gone; its bytes are lost on the line
                            self.dropped += len(data)
                    else:
                        host = key.fileobj
                        try:
                            data = host.recv(1 << 16)  # type: ignore[union-attr]
                        except OSError:
                            data = b""
                        if not data:  # the host hung up (or was killed): the board stays up
                            sel.unregister(host)
                            host.close()  # type: ignore[union-attr]
                            if host is self._host:
                                self._host = None
                            continue
                        for piece in self._link.host.cut(data):
                            self._link.from_host(piece)
                        self._upstream.sendall(data)
        except OSError as exc:
            self.record.note(f"persistent link ended: {exc}")
        finally:
            sel.close()
