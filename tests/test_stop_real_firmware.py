"""One way to stop, against the chamber authors' real Mk1 firmware (../shared/firmware-harness): a KeyboardInterrupt
that strikes mid-exchange (a SET's ACK or reply not yet read, an MSR still streaming rows) or between steps (a
WAIT) must still leave the chamber in its safe state, confirmed by reading one row back, without a resend storm.

The interrupt is deterministic: `chamber.testing.InterruptingPort` raises it in the read that brings a chosen
segment (that read's bytes are lost to the host, as they are when Ctrl-C strikes between a read and its
processing). Every chamber leaves through `OpenChambers.close`, as every command does (issue 24).
"""

from __future__ import annotations

import logging
import re
import signal
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from chamber.errors import LinkLost, NoBoardAnswered
from chamber.protocol_language import parse_protocol
from chamber.safe_state import DEFAULT_SAFE, SafeStateUnconfirmed, apply_safe_state, resolve_safe_state
from chamber.protocol_runner import run_protocol
from chamber.selection import ChamberSelection, OpenChambers, open_chambers
from chamber.testing import InterruptingPort, ack_of_ours, nth_row, reply
from firmware_harness import firmware_build, real_board, served_board  # noqa: F401  (fixture)
from simulator.board import running_board

WT_SAFE = DEFAULT_SAFE["wt"]  # the resting state: fans off, hatch home, speaker off
LT_SAFE = DEFAULT_SAFE["lt"]  # LEDs, sensor LEDs and camera off, polarizers home


def interrupting(opened: OpenChambers, kind: str) -> InterruptingPort:
    """Wrap the live port of `kind`'s session so a test can arm an interrupt on what arrives."""
    link = opened.chambers[kind].backend.session.link
    port = link.port = InterruptingPort(link.port)
    return port


def interrupted_set(opened: OpenChambers, kind: str, when: Callable) -> None:
    chamber = opened.chambers[kind]
    chamber.set("load_in", 0.5)
    interrupting(opened, kind).arm(when)
    chamber.set("load_out", 0.8)


def interrupted_msr(opened: OpenChambers, kind: str) -> None:
    chamber = opened.chambers[kind]
    chamber.set("load_in", 0.8)
    interrupting(opened, kind).arm(nth_row(5, chamber.backend.session.checker.row_bytes))
    chamber.measure(60)


def interrupted_wait(opened: OpenChambers, kind: str) -> None:
    def ctrl_c(seconds: float) -> bool:
        raise KeyboardInterrupt("SIGINT during WAIT")

    protocol = parse_protocol(["SET,load_in,0.8", "WAIT,60000", "MSR,1,0"])
    run_protocol(opened.chambers[kind], protocol, on_frame=lambda frame: None, wait=ctrl_c)


def interrupted_reset(opened: OpenChambers, kind: str) -> None:
    chamber = opened.chambers[kind]
    chamber.set("load_in", 0.8)
    interrupting(opened, kind).arm(reply(b"OK,RST"))
    chamber.reset()


WT_CASES: dict[str, Callable[[OpenChambers, str], None]] = {
    "SET, its reply not yet read": lambda opened, kind: interrupted_set(opened, kind, reply(b"OK,SET,load_out=")),
    "SET, its ACK not yet read": lambda opened, kind: interrupted_set(opened, kind, ack_of_ours()),
    "MSR, 55 of 60 rows still streaming": interrupted_msr,
    "WAIT after SET load_in=0.8": interrupted_wait,
    "RST, OK,RST not yet read": interrupted_reset,
}


@contextmanager
def board_url(board: str, build: Path, chamber: str) -> Iterator[str]:
    """The real firmware on TCP, or our emulated board on a pty (as `make run` serves it)."""
    if board == "firmware":
        with real_board(build, chamber) as url:
            yield url
    else:
        with running_board(chamber) as handle:
            yield handle.url


@pytest.mark.parametrize("board", ["firmware", "emulated"])
@pytest.mark.parametrize("case", list(WT_CASES))
def test_an_interrupt_in_any_exchange_leaves_the_wind_tunnel_safe_and_confirmed(firmware_build, case, board):
    with board_url(board, firmware_build, "wt") as url:
        with pytest.raises(KeyboardInterrupt):
            with open_chambers(ChamberSelection(backend="serial", ports=(url,))) as opened:
                chamber = opened.chambers["wt"]
                WT_CASES[case](opened, "wt")
                pytest.fail("the armed interrupt did not fire")
    [outcome] = opened.outcomes
    assert outcome.confirmed, outcome.text
    assert outcome.error is None and outcome.left_running == {} and opened.unconfirmed == []
    assert {n: outcome.readback[n] for n in WT_SAFE} == WT_SAFE and outcome.applied == WT_SAFE
    assert outcome.to_dict()["confirmed"] is True and outcome.to_dict()["left_running"] == {}
    stats = chamber.link_stats()
    # the exchange was finished, not abandoned (no reset), and without a resend storm: measured 0 resends, 0 ACK
    # timeouts for every case here (the ACK case: one resend of the SET, re-ACKed by the board as a duplicate)
    assert stats["reconnects"] == 0
    assert stats["resends"] <= 2 and stats["ack_timeouts"] <= 2 and stats["needless_resends"] <= 2, stats


def test_an_interrupt_in_a_light_tunnel_set_leaves_its_leds_off_and_confirmed(firmware_build):
    with real_board(firmware_build, "lt") as url:
        with pytest.raises(KeyboardInterrupt):
            with open_chambers(ChamberSelection(backend="serial", ports=(url,))) as opened:
                chamber = opened.chambers["lt"]
                chamber.set("red", 255)
                interrupting(opened, "lt").arm(reply(b"OK,SET,blue="))
                chamber.set("blue", 200)
    [outcome] = opened.outcomes
    assert outcome.confirmed and {n: outcome.readback[n] for n in LT_SAFE} == LT_SAFE, outcome.text
    assert chamber.link_stats()["reconnects"] == 0 and chamber.link_stats()["resends"] <= 2


def test_signals_during_the_safe_state_are_deferred_with_one_line_and_a_clean_exit_then_stops(firmware_build, caplog):
    caplog.set_level(logging.WARNING, logger="chamber.stop")
    with real_board(firmware_build, "wt") as url:
        # interrupted at row 5 of 60; while the 55 rows still owed are drained, SIGINT, then SIGTERM (undeferred,
        # its default action would end this very process)
        with pytest.raises(KeyboardInterrupt, match="interrupted as the armed segment arrived"):
            with open_chambers(ChamberSelection(backend="serial", ports=(url,))) as opened:
                port = interrupting(opened, "wt")
                row_bytes = opened.chambers["wt"].backend.session.checker.row_bytes
                opened.chambers["wt"].set("load_in", 0.8)
                port.arm(nth_row(5, row_bytes))
                port.arm(nth_row(10, row_bytes), signal.SIGINT)
                port.arm(nth_row(20, row_bytes), signal.SIGTERM)
                opened.chambers["wt"].measure(60)
        assert port.fired == 3 and opened.outcomes[0].confirmed, opened.outcomes[0].text
        lines = [r.getMessage() for r in caplog.records if r.name == "chamber.stop"]
        assert lines == ["SIGINT received: the chamber is being made safe first; it ends within its time bound"]
        # no error: a SIGINT during the read-back waits for the chamber to be safe and closed, then stops
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            with open_chambers(ChamberSelection(backend="serial", ports=(url,))) as opened:
                port = interrupting(opened, "wt")
                port.arm(nth_row(1, opened.chambers["wt"].backend.session.checker.row_bytes), signal.SIGINT)
        assert port.fired == 1 and opened.outcomes[0].confirmed and opened.chambers == {}


@pytest.mark.parametrize("board", ["firmware", "emulated"])
def test_an_msr_too_long_to_drain_is_abandoned_by_resetting_the_board_and_the_safe_state_confirmed(
        firmware_build, board):
    with board_url(board, firmware_build, "wt") as url:
        with pytest.raises(KeyboardInterrupt):
            with open_chambers(ChamberSelection(backend="serial", ports=(url,))) as opened:
                chamber = opened.chambers["wt"]
                chamber.set("load_in", 0.8)
                interrupting(opened, "wt").arm(nth_row(3, chamber.backend.session.checker.row_bytes))
                chamber.measure(5000)  # ~12 min of rows at the wind tunnel's pace: not worth draining
    [outcome] = opened.outcomes
    assert outcome.confirmed and {n: outcome.readback[n] for n in WT_SAFE} == WT_SAFE, outcome.text
    assert chamber.link_stats()["reconnects"] == 1  # the port was reopened: the board rebooted, the MSR abandoned


def test_the_exit_path_waits_for_another_threads_command_but_not_forever():
    opened = open_chambers(ChamberSelection(backend="sim", kinds=("wt",)))
    chamber = opened.chambers["wt"]
    chamber.set("load_in", 0.8)
    holding, release = threading.Event(), threading.Event()

    def api_call() -> None:  # an API worker's exchange in flight
        with chamber.exclusive():
            holding.set()
            release.wait(10)

    worker = threading.Thread(target=api_call)
    worker.start()
    holding.wait(10)
    busy = apply_safe_state(chamber, resolve_safe_state(), lock_wait=0.05)
    release.set()
    worker.join(10)
    assert not busy.confirmed and chamber.state()["load_in"] == pytest.approx(0.8)
    assert busy.text.startswith("safe state NOT confirmed on wt: load_in may still be 0.8, load_out unknown, hatch "
                                "unknown, pot_1 unknown (ChamberBusy: expected the chamber to be free within 0.05 s")
    opened.close()
    assert opened.outcomes[-1].confirmed and opened.outcomes[-1].readback["load_in"] == 0.0


def test_the_exit_path_takes_the_chamber_from_a_worker_still_measuring_on_the_real_firmware(firmware_build):
    """The main job's API worker holds the wind tunnel for a 200-row MSR (~29 s at real pace) when the job is
    stopped: after the lock wait the worker's exchange is abandoned (it fails with LinkLost), the board is reset
    and the safe state confirmed, in seconds, not after the measurement."""
    with real_board(firmware_build, "wt") as url:
        opened = open_chambers(ChamberSelection(backend="serial", ports=(url,)))
        chamber = opened.chambers["wt"]
        chamber.set("load_in", 0.8)
        started, failure = threading.Event(), []

        def api_worker() -> None:
            started.set()
            try:
                chamber.measure(200)
            except LinkLost as exc:
                failure.append(exc)

        worker = threading.Thread(target=api_worker)
        worker.start()
        started.wait(10)
        session, limit = chamber.backend.session, time.monotonic() + 10
        while session.in_flight is None and time.monotonic() < limit:  # the MSR is on the wire, rows streaming
            time.sleep(0.01)
        assert session.in_flight is not None and session.in_flight.command == "MSR"
        outcome = apply_safe_state(chamber, resolve_safe_state(), lock_wait=1.0)
        worker.join(15)
        opened.close()
    assert not worker.is_alive() and failure and "abandoned" in str(failure[0])
    assert outcome.confirmed and {n: outcome.readback[n] for n in WT_SAFE} == WT_SAFE, outcome.text
    assert chamber.link_stats()["reconnects"] == 1  # the worker's MSR was abandoned (the board reset), not awaited


def test_a_worker_that_ends_its_command_without_reading_again_after_the_take_over_still_leaves_it_safe(
        firmware_build):
    """The take-over gives the link up; a worker that then ends its command without another read (its last read
    brought the reply) must not leave the exit path a link that refuses the safe SETs: the board is reset."""
    with real_board(firmware_build, "wt") as url:
        opened = open_chambers(ChamberSelection(backend="serial", ports=(url,)))
        chamber = opened.chambers["wt"]
        chamber.set("load_in", 0.8)
        link = chamber.backend.session.link
        holding = threading.Event()

        def api_worker() -> None:  # holds the chamber, then ends once it was given up, reading nothing more
            with chamber.exclusive():
                holding.set()
                limit = time.monotonic() + 10
                while link.broken is None and time.monotonic() < limit:
                    time.sleep(0.01)

        worker = threading.Thread(target=api_worker)
        worker.start()
        holding.wait(10)
        outcome = apply_safe_state(chamber, resolve_safe_state(), lock_wait=0.5)
        worker.join(10)
        opened.close()
    assert outcome.confirmed and {n: outcome.readback[n] for n in WT_SAFE} == WT_SAFE, outcome.text
    assert chamber.link_stats()["reconnects"] >= 1  # the given-up link was reopened, the board reset


@contextmanager
def unsafe_board(build: Path) -> Iterator[tuple[OpenChambers, Callable[[], None]]]:
    """A wind tunnel running load_in 0.8 whose harness process can be killed (the link is closed by the peer and
    nothing answers a reconnection)."""
    with served_board(build, "wt") as board:
        opened = open_chambers(ChamberSelection(backend="serial", ports=(board.url,)))
        opened.chambers["wt"].set("load_in", 0.8)

        def pull_the_plug() -> None:
            board.process.kill()
            board.process.wait(timeout=5)

        yield opened, pull_the_plug


def test_a_board_that_cannot_be_made_safe_raises_safe_state_unconfirmed_from_the_interrupt(firmware_build):
    with unsafe_board(firmware_build) as (opened, pull_the_plug):
        with pytest.raises(SafeStateUnconfirmed) as caught:
            with opened:
                pull_the_plug()
                raise KeyboardInterrupt("SIGINT")
    assert isinstance(caught.value.__cause__, KeyboardInterrupt)
    [outcome] = caught.value.unconfirmed
    assert outcome is opened.unconfirmed[0] and not outcome.confirmed and outcome.readback == {}
    assert outcome.left_running == {"load_in": pytest.approx(0.8), "load_out": None, "hatch": None, "pot_1": None}
    assert re.fullmatch(r"safe state NOT confirmed on wt: load_in may still be 0\.8, load_out unknown, hatch unknown, "
                        r"pot_1 unknown \(LinkLost: link lost: .*\)", outcome.text), outcome.text
    assert "\n" not in outcome.text and str(caught.value) == outcome.text


def test_without_an_error_propagating_an_unconfirmed_safe_state_is_reported_not_raised(firmware_build):
    with unsafe_board(firmware_build) as (opened, pull_the_plug):
        warnings: list[str] = []
        opened.warn = warnings.append
        with opened:
            pull_the_plug()
    [outcome] = opened.unconfirmed
    data = outcome.to_dict()
    assert data["confirmed"] is False
    assert data["left_running"] == {"load_in": pytest.approx(0.8), "load_out": None, "hatch": None, "pot_1": None}
    assert {"chamber", "applied", "error", "reset_first"} <= set(data)  # the keys commands already report
    assert warnings == [f"warning: {outcome.text}"]


# ----------------------------------------------------------------------------------------------- silence
@contextmanager
def tcp_server(greeting: bytes) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts and then sends `greeting` every 0.1 s (b"": says nothing)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)
            while greeting and not stop.wait(0.1):
                try:
                    conn.sendall(greeting)
                except OSError:  # the host hung up
                    break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"socket://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=2)
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.parametrize("greeting, heard", [(b"", "nothing arrived"),
                                             (b"AT+GMR\r\nERROR\r\n\x00not base64\x04" * 8,
                                              r"\d+ byte\(s\) arrived, none of them a Mk1 packet")])
def test_a_port_where_nothing_speaks_mk1_is_named_in_one_line(greeting, heard):
    with tcp_server(greeting) as url:
        began = time.monotonic()
        with pytest.raises(NoBoardAnswered) as caught:
            open_chambers(ChamberSelection(backend="serial", ports=(url,), boot_timeout=0.3))
        took = time.monotonic() - began
    assert isinstance(caught.value, LinkLost)
    match = re.fullmatch(rf"no Mk1 board answered on {re.escape(url)} within (\d+\.\d) s \({heard}\)",
                         str(caught.value))
    assert match, str(caught.value)
    assert 0.3 <= float(match.group(1)) <= took + 0.05
