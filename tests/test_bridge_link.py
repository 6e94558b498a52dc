"""The host side of Mk1 against the emulated board over a real pty and a real socket:// connection.

Every fault is produced by the board's switches on the wire; the host must recover, count what happened, and
deliver every row exactly once (the CountingModel makes a lost, repeated or damaged row visible).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import serial

from chamber.testing import FAST_TIMING, CountingModel, recording_factory
from firmware_bridge.errors import FirmwareError, FrameRejected, LinkLost, PacketTooLong
from firmware_bridge.packets import PacketSplitter, decode_body, encode_packet
from firmware_bridge.segments import FIRST_SEQ, Arrival, Endpoint, decode_segment, encode_segment
from firmware_bridge.session import Mk1Session
from firmware_bridge.variables import UNSET, layout_for
from simulator.board import running_board
from simulator.board_protocol import BoardFaults

TRANSPORTS = ["pty", "tcp"]


def sent_messages(written: bytes) -> list[bytes]:
    """The data messages in the bytes the host actually wrote (ACKs left out)."""
    out = []
    for body in PacketSplitter().feed(bytes(written)).bodies:
        segment = decode_segment(decode_body(body))
        if segment is not None and not segment.is_ack:
            out.append(segment.data)
    return out


def check_rows_exactly_once(values: np.ndarray, start: int) -> None:
    n = values.shape[0]
    assert values[:, 0].tolist() == list(range(start, start + n))
    column = layout_for("wt").index("pressure_upwind")
    assert values[:, column].tolist() == (1000.0 * column + np.arange(start, start + n)).tolist()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_handshake_set_and_msr(transport):
    with running_board("wt", transport, model=CountingModel()) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        try:
            assert session.boot.config == "standard"
            assert session.boot.names == layout_for("wt").names
            assert session.set("load_in", 0.25) == 0.25
            block = session.measure(300)
            check_rows_exactly_once(block.values, 0)
            assert block.values[:, layout_for("wt").index("load_in")].tolist() == [0.25] * 300
            assert block.values[:, 2].tolist() == [1.0] + [0.0] * 299
            check_rows_exactly_once(session.measure(5).values, 300)  # counter continues across MSRs
            assert np.all(np.diff(block.host_timestamps) >= 0)
        finally:
            session.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_each_open_reboots_the_board_and_numbering_restarts(transport):
    with running_board("wt", transport, model=CountingModel()) as board:
        for _ in range(2):
            session = Mk1Session.connect(board.url, timing=FAST_TIMING)
            check_rows_exactly_once(session.measure(3).values, 0)
            session.close()
        assert board.firmware.boots == 2


@pytest.mark.parametrize(
    "faults, counter, window",
    [
        (BoardFaults(corrupt_data_every=5), "crc_failures", 16),
        (BoardFaults(duplicate_data_every=4), "duplicates", 16),
        (BoardFaults(drop_data_every=7), "unexpected", 16),  # segments after the lost one arrive out of order
        # a stop-and-wait board (window 1, like the Mega) resends what the host already has: a duplicate
        (BoardFaults(ignore_acks_every=9), "duplicates", 1),
        (BoardFaults(drop_acks_every=2), "resends", 16),  # the host's command was not acknowledged
        (BoardFaults(ack_delay_s=0.15), "ack_timeouts", 16),
    ],
)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_link_faults_are_recovered_and_counted(transport, faults, counter, window):
    with running_board("wt", transport, model=CountingModel(), faults=faults, window=window) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        try:
            session.set("load_out", 0.5)
            check_rows_exactly_once(session.measure(40 if window == 1 else 120).values, 0)
            stats = session.counters.as_dict()
            assert stats[counter] > 0, stats
        finally:
            session.close()


def test_lost_acks_make_the_host_resend_and_the_board_re_ack():
    with running_board("wt", "pty", model=CountingModel(), faults=BoardFaults(drop_acks_every=2)) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        session.set("hatch", 10)
        session.set("hatch", 20)
        assert session.counters.resends >= 1
        assert board.board.counters.duplicates >= 1  # the board saw the resend and acknowledged it again
        assert board.firmware.model.state()["hatch"] == 20  # applied once per SET, not per copy
        session.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_firmware_error_reports_become_typed_errors(transport):
    with running_board("wt", transport, model=CountingModel()) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        with pytest.raises(FirmwareError) as info:
            session.set("osr_upwind", 3)  # the driver would refuse this; the bridge sends what it is told
        assert (info.value.code, info.value.detail) == ("er03", "")  # fail("er03") prints no detail
        assert "out of range" in info.value.meaning
        with pytest.raises(FirmwareError):
            session.measure(1)  # halted: refused on the host, until reset
        session.close()


def test_injected_firmware_error_mid_command():
    faults = BoardFaults(error_on="MSR", error_code="er09")
    with running_board("lt", "pty", faults=faults) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        with pytest.raises(FirmwareError, match="er09: Si1151 I2C read failed"):
            session.measure(3)
        session.close()


@pytest.mark.parametrize("message, code", [("SET,nonsense,1", "er04"), ("SET,load_in,-9999", "er42"), ("DANCE", "er01")])
def test_board_error_codes_over_the_wire(message, code):
    with running_board("wt", "pty", model=CountingModel()) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        with pytest.raises(FirmwareError) as info:
            session.link.send(message.encode())
            session.link.next_message(1.0)
        assert info.value.code == code
        session.close()


def test_oversized_packet_is_refused_before_sending():
    ports = []
    with running_board("wt", "pty", model=CountingModel()) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING, port_factory=recording_factory(ports))
        before = bytes(ports[0].written)
        with pytest.raises(PacketTooLong, match="64-byte"):  # 39 digits even as the board's 32-bit float
            session.set("pressure_downwind", -3.0e38)
        assert bytes(ports[0].written) == before
        assert session.set("pressure_downwind", 95000) == 95000  # the session is still usable
        session.close()


def test_board_drops_a_packet_over_64_characters_silently():
    """receive_packet() resets its parser on the 65th character: no ACK, no report (er00 is unreachable)."""
    with running_board("wt", "pty", model=CountingModel()) as board:
        port = serial.serial_for_url(board.url, baudrate=500000, timeout=0.2)
        try:
            splitter, host = PacketSplitter(), Endpoint()

            def answered(until_ack: bool = False) -> list[bytes]:
                """What the board delivered in the next reads (b"ACK" for an ACK), ACKing as a host does."""
                seen: list[bytes] = []
                for _ in range(20):
                    for body in splitter.feed(port.read(512)).bodies:
                        segment = decode_segment(decode_body(body))
                        kind = host.classify(segment)
                        if kind is Arrival.ACK:
                            seen.append(b"ACK")
                            continue
                        port.write(encode_packet(host.ack_segment(segment.seq), None))
                        if kind is Arrival.DELIVER:
                            seen.append(segment.data[:14])
                    if (until_ack and b"ACK" in seen) or (not until_ack and len(seen) >= 2):
                        return seen
                return seen

            assert answered() == [b"CHAMBER_CONFIG", b"VARIABLES_LIST"]
            _, oversize = host.data_segment(b"SET,flag," + b"1" * 60)
            port.write(encode_packet(oversize, None))
            silence = splitter.feed(port.read(512))
            assert silence.error_reports == []
            assert not any(decode_segment(decode_body(b)).is_ack for b in silence.bodies)  # (resends may cross)
            port.write(encode_packet(encode_segment(0, host.last_delivered, host.last_acknowledged, b"SET,flag,1"), None))
            assert answered(until_ack=True)[0] == b"ACK"  # the same number, short enough: accepted
        finally:
            port.close()


@pytest.mark.parametrize("faults, message", [
    (BoardFaults(counter_gap_after_rows=40), "expected counter 40, received counter 41"),
    (BoardFaults(short_row_at=10), "expected 140 bytes (35 float32), received 136 bytes"),
])
def test_bad_rows_reject_the_whole_frame(faults, message):
    with running_board("wt", "pty", model=CountingModel(), faults=faults) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        with pytest.raises(FrameRejected) as info:
            session.measure(100)
        assert message in str(info.value)
        assert session.measure(3).values.shape == (3, 35)  # the next frame is checked from the board's counter
        session.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_port_vanishing_mid_msr_is_link_lost(transport):
    with running_board("wt", transport, model=CountingModel(), faults=BoardFaults(vanish_after_rows=50),
                       stable_path=True) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        with pytest.raises(LinkLost):
            session.measure(200)
        with pytest.raises(LinkLost):
            session.measure(1)
        session.close()


def test_a_vanished_pty_path_finds_nothing_and_its_number_goes_to_no_other_pty():
    """A vanished board's old path must not lead a reconnecting host anywhere: not to the board again, and not to
    a pty opened meanwhile (tests run in parallel: a host retrying a freed number once sent its RST probes into
    another test's terminal)."""
    with running_board("wt", "pty", model=CountingModel(), faults=BoardFaults(vanish_after_rows=5)) as board:
        old, device = board.url, board.board.transport.device
        session = Mk1Session.connect(old, timing=FAST_TIMING)
        with pytest.raises(LinkLost):
            session.measure(20)
        session.close()
        for path in (old, device):  # the board's own link, and the device it pointed at
            with pytest.raises(LinkLost, match="cannot open"):
                Mk1Session.connect(path, timing=FAST_TIMING)
        others = [os.openpty() for _ in range(3)]
        try:
            assert device not in {os.ttyname(slave) for _, slave in others}
        finally:
            for master, slave in others:
                os.close(master)
                os.close(slave)
        assert board.url != old  # the board came back as a new device
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        assert session.measure(2).values.shape == (2, 35)
        session.close()


def test_board_reset_mid_msr_is_link_lost():
    with running_board("wt", "pty", model=CountingModel(), faults=BoardFaults(reset_after_rows=30)) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        with pytest.raises(LinkLost, match="rebooted"):
            session.measure(100)
        session.close()


def test_rst_resets_the_board_and_numbering():
    with running_board("wt", "tcp", model=CountingModel()) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        session.set("flag", 3)
        session.measure(4)
        boot = session.reset()
        assert boot.config == "standard"
        check_rows_exactly_once(session.measure(2).values, 0)
        assert board.firmware.flag == UNSET  # the firmware's table starts at -9999 again
        session.close()


def test_without_an_announcement_the_host_falls_back_to_rst():
    ports = []
    with running_board("wt", "pty", model=CountingModel(), faults=BoardFaults(silent_boot=True)) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING, port_factory=recording_factory(ports))
        assert session.boot.config == "standard"
        assert sent_messages(ports[0].written) == [b"RST"]
        session.close()


def test_port_is_opened_exclusively():
    with running_board("wt", "pty", model=CountingModel()) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        with pytest.raises(LinkLost, match="cannot open"):
            Mk1Session.connect(board.url, timing=FAST_TIMING)
        session.close()


class _WriteTimeouts:
    """A real port whose writes number `timed_out` (counted from the first write after the handshake) raise pyserial's
    write timeout: `sent` True as pyserial does when its timeout expired while the process was starved (every byte
    written, the check after it late), False as a stalled port does (nothing written)."""

    def __init__(self, port, timed_out: set[int], sent: bool):
        object.__setattr__(self, "_port", port)
        object.__setattr__(self, "_plan", (timed_out, sent))
        object.__setattr__(self, "writes", None)  # counting starts when the test says so

    def write(self, data: bytes):
        timed_out, sent = self._plan
        if self.writes is not None:
            object.__setattr__(self, "writes", self.writes + 1)
            if self.writes in timed_out:
                if sent:
                    self._port.write(data)
                raise serial.SerialTimeoutException("Write timeout")
        return self._port.write(data)

    def __getattr__(self, name):
        return getattr(self._port, name)

    def __setattr__(self, name, value):
        setattr(self._port, name, value)


def _session_with_write_timeouts(board, timed_out: set[int], sent: bool):
    ports = []

    def factory(url, **kwargs):
        ports.append(_WriteTimeouts(serial.serial_for_url(url, **kwargs), timed_out, sent))
        return ports[-1]

    session = Mk1Session.connect(board.url, timing=FAST_TIMING, port_factory=factory)
    object.__setattr__(ports[0], "writes", 0)
    return session


@pytest.mark.parametrize("sent", [True, False], ids=["written-then-late", "nothing-written"])
def test_one_write_timeout_is_not_a_lost_link(sent):
    """A busy host (issue 35: the main job lost its emulated board to one 'Write timeout' under full CPU load):
    one timed-out write, whether its bytes went or not, is recovered by the protocol's resend and duplicate drop."""
    with running_board("wt", "tcp", model=CountingModel()) as board:
        session = _session_with_write_timeouts(board, {1}, sent)
        try:
            assert session.set("load_in", 0.25) == 0.25  # its first write timed out
            check_rows_exactly_once(session.measure(50).values, 0)
            assert session.set("load_in", 0.5) == 0.5  # exactly one effect: the board's state is the last value
        finally:
            session.close()


def test_write_timeouts_in_a_row_are_a_lost_link():
    with running_board("wt", "tcp", model=CountingModel()) as board:
        session = _session_with_write_timeouts(board, {1, 2, 3, 4, 5, 6}, False)
        try:
            with pytest.raises(LinkLost, match="Write timeout .2 writes in a row"):
                session.set("load_in", 0.25)
        finally:
            session.close()


def test_a_board_slower_to_ack_than_the_resend_budget_is_waited_for_ack_patience():
    """Ten resends 20 ms apart are 0.2 s: a process starved for longer (a busy host, issue 35) lost its board.
    ack_patience keeps resending an unACKed segment at least that long before the link counts as lost."""
    from dataclasses import replace

    impatient = replace(FAST_TIMING, resend_after=0.02, max_resends=2, ack_patience=0.0)
    with running_board("wt", "tcp", model=CountingModel(), faults=BoardFaults(ack_delay_s=0.3)) as board:
        session = Mk1Session.connect(board.url, timing=impatient)
        try:
            with pytest.raises(LinkLost, match="no ACK for segment"):
                session.set("load_in", 0.25)
        finally:
            session.close()
        session = Mk1Session.connect(board.url, timing=replace(impatient, ack_patience=5.0))
        try:
            assert session.set("load_in", 0.25) == 0.25
            check_rows_exactly_once(session.measure(5).values, 0)
        finally:
            session.close()
