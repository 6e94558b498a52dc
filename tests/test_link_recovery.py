"""Issue 31, item 4: a board that does not reset on connect, left mid-session by a host that was killed.

The emulated board's `no_reset_on_connect` switch keeps its session across hosts (as ser2net in front of a real
board does, or a Mega with auto-reset disabled). A host that leaves without finishing its exchange (its port
closed, or its process SIGKILLed) leaves the next host a board that is streaming rows, replying, or idle with a
numbering nobody else knows. The next connection must bring it back (drain, find the number it accepts, RST), say
so in one line, and leave it safe; where it cannot, say how to power-cycle instead of `ReplyTimeout ...
4294967295`. The same scenarios on the real firmware: tests/test_link_recovery_real_firmware.py.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import serial

from chamber.selection import ChamberSelection, link_state_dir
from chamber.testing import FAST_TIMING, CountingModel
from firmware_bridge.errors import FirmwareError, NoBoardAnswered
from firmware_bridge.link_journal import (RECORD_BYTES, JournalEntry, LinkJournal, decode_record, encode_record,
                                          journal_path, prune_journals)
from firmware_bridge.recovery import BoardUnresponsive, probe_numbers
from firmware_bridge.segments import FIRST_SEQ, SEQ_MODULO, SEQ_START
from firmware_bridge.session import Mk1Session, Timing
from simulator.board import running_board
from simulator.board_faults import BoardFaults

PROJECT = Path(__file__).resolve().parents[1]
CHAMBERLAB = [sys.executable, str(PROJECT / "bench_cli.py")]
KEEP = BoardFaults(no_reset_on_connect=True)
REAL_PACE = Timing(boot_timeout=3.0)  # the emulated board at its real pace boots in 1.15 s


def keep_session(**faults: object) -> BoardFaults:
    return BoardFaults(no_reset_on_connect=True, **faults)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- the journal
def test_the_journal_keeps_the_last_number_per_port(tmp_path):
    journal = LinkJournal.for_port(tmp_path, "socket://127.0.0.1:5000", pid=4242, wall_clock=lambda: 1000.5)
    assert journal.last() is None  # nothing written yet
    journal.record(57, "SET,load_in,0.8")
    journal.record(58, "MSR,25,0")
    reread = LinkJournal.for_port(tmp_path, "socket://127.0.0.1:5000")
    assert reread.last() == JournalEntry(58, "MSR,25,0", 4242, 1000.5)
    journal.started()  # a fresh board session: nothing of ours accepted yet
    assert reread.last() == JournalEntry(SEQ_START, "", 4242, 1000.5)
    assert journal.path.stat().st_size == RECORD_BYTES  # overwritten in place, never grows
    assert LinkJournal.for_port(tmp_path, "socket://127.0.0.1:5001").last() is None  # another port, another file
    journal.close()


def test_journal_files_are_named_by_port_and_never_shared(tmp_path):
    names = {journal_path(tmp_path, url).name for url in
             ("/dev/ttyACM0", "/dev/ttyACM1", "socket://127.0.0.1:5000", "socket://127.0.0.1:50000", "/dev/ttyACM0/")}
    assert len(names) == 5
    assert journal_path(tmp_path, "/dev/ttyACM0").name.startswith("dev_ttyACM0-")


@pytest.mark.parametrize("damage", ["empty", "torn", "crc", "not a record", "seq out of range"])
def test_an_unreadable_journal_reads_as_none(tmp_path, damage):
    good = encode_record(JournalEntry(57, "SET,load_in,0.8", 1, 2.0))
    body = good.strip().partition(b" ")[2]
    raw = {"empty": b"", "torn": good[: len(good) // 3], "crc": b"00000000 " + body,
           "not a record": b"hello world\n",
           "seq out of range": b"%08x %s" % (zlib.crc32(body.replace(b"57", b"4294967296")),
                                             body.replace(b"57", b"4294967296"))}[damage]
    assert decode_record(raw) is None
    path = journal_path(tmp_path, "/dev/ttyACM0")
    path.write_bytes(raw)
    assert LinkJournal(path).last() is None


def test_a_journal_that_cannot_be_written_does_not_stop_a_command(tmp_path, caplog):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the folder should be")
    journal = LinkJournal(journal_path(blocker, "/dev/ttyACM0"))
    journal.record(3, "RST")  # logged, not raised
    journal.record(4, "RST")  # given up after the first failure: logged once
    assert journal.last() is None
    assert sum("cannot write the link journal" in r.getMessage() for r in caplog.records) == 1


def test_journals_of_ports_unused_for_a_month_are_pruned(tmp_path):
    old, fresh = journal_path(tmp_path, "socket://127.0.0.1:1"), journal_path(tmp_path, "socket://127.0.0.1:2")
    for path in (old, fresh):
        path.write_bytes(encode_record(JournalEntry(1, "", 1, 0.0)))
    now = time.time()
    os.utime(old, (now - 31 * 24 * 3600, now - 31 * 24 * 3600))
    other = tmp_path / "notes.txt"
    other.write_text("not a journal")
    os.utime(other, (0, 0))
    assert prune_journals(tmp_path, now) == 1
    assert not old.exists() and fresh.exists() and other.exists()


def test_the_state_folder_is_the_selection_s_then_the_environment_s():
    sel = ChamberSelection(backend="serial", ports=("/dev/ttyACM0",))
    assert link_state_dir(sel, {"CHAMBERLAB_STATE_DIR": "/s", "XDG_STATE_HOME": "/x", "HOME": "/h"}) == Path("/s")
    assert link_state_dir(sel, {"XDG_STATE_HOME": "/x", "HOME": "/h"}) == Path("/x/chamberlab/links")
    assert link_state_dir(sel, {"HOME": "/h"}) == Path("/h/.local/state/chamberlab/links")
    assert link_state_dir(sel, {}) is None
    given = ChamberSelection(backend="serial", ports=("/dev/ttyACM0",), state_dir=Path("/given"))
    assert link_state_dir(given, {"CHAMBERLAB_STATE_DIR": "/s"}) == Path("/given")


# --------------------------------------------------------------------------------------------- the probes
def test_probes_start_at_the_journal_s_number_then_sweep_from_where_every_session_starts():
    assert list(itertools.islice(probe_numbers(None), 5)) == [FIRST_SEQ, 1, 3, 5, 7]
    assert list(itertools.islice(probe_numbers(57), 4)) == [57, FIRST_SEQ, 1, 3]
    assert list(itertools.islice(probe_numbers(5), 5)) == [5, FIRST_SEQ, 1, 3, 7]  # 5 is not probed twice
    assert list(itertools.islice(probe_numbers(SEQ_START), 2)) == [FIRST_SEQ, 1]  # "nothing sent": the sweep's first


@pytest.mark.parametrize("accepted", [SEQ_START, FIRST_SEQ, 0, 1, 2, 57, 58, 999])
def test_the_sweep_answers_for_every_number_the_board_may_have_accepted(accepted):
    """The board answers probe X when its last_acknowledged is X (a duplicate ACK) or X - 1 (it executes X)."""
    for i, x in enumerate(probe_numbers(None)):
        if accepted in (x, (x - 1) % SEQ_MODULO):
            break
    assert i <= (accepted + 2) % SEQ_MODULO // 2 + 1  # one probe per two numbers


# --------------------------------------------------------------------------------------------- on the emulated board
def _leave_mid_msr(url: str, journal: LinkJournal | None, *, rows: int, read: int, timing: Timing = FAST_TIMING
                   ) -> int:
    """A host that sets the fans, starts an MSR of `rows`, reads `read` messages and vanishes; returns the MSR's
    segment number."""
    session = Mk1Session.connect(url, timing=timing, journal=journal)
    session.set("load_in", 0.8)
    session.set("load_out", 0.5)
    session.link.send(f"MSR,{rows},0".encode(), "MSR")
    seq = session.link.endpoint.last_delivered
    for _ in range(read):
        session.link.next_message(2.0)
    session.close()  # no OK,DONE read, rows left unacknowledged
    return seq


@pytest.mark.parametrize("transport", ["pty", "tcp"])
@pytest.mark.parametrize("journaled", [True, False], ids=["journal", "probe"])
def test_a_board_left_streaming_an_msr_is_drained_and_reset(tmp_path, transport, journaled):
    with running_board("wt", transport, model=CountingModel(), faults=KEEP) as board:
        journal = LinkJournal.for_port(tmp_path, board.url)
        msr = _leave_mid_msr(board.url, journal, rows=40, read=3)  # OK,MSR and two rows
        assert board.firmware.variables["load_in"] == pytest.approx(0.8)
        if not journaled:
            journal.path.unlink()
        session = Mk1Session.connect(board.url, timing=FAST_TIMING,
                                     journal=LinkJournal.for_port(tmp_path, board.url))
        try:
            found = session.boot.recovered
            assert found is not None and found.mid_session
            assert (found.found, found.drained_rows, found.drained_replies) == ("streaming", 38, ("OK,DONE",))
            assert found.accepted == msr
            assert found.via == ("journal" if journaled else "probe")
            assert board.firmware.boots == 2  # the recovery's RST: every setting at its power-on value
            assert board.firmware.variables["load_in"] != pytest.approx(0.8)
            block = session.measure(3)
            assert block.values[:, 0].tolist() == [0, 1, 2]  # a fresh session: the counter starts again
        finally:
            session.close()


def test_a_board_left_replying_to_a_set_is_drained(tmp_path):
    """At its real pace the board moves the hatch before OK,SET: a host gone after the ACK leaves the reply owed."""
    with running_board("wt", "tcp", faults=KEEP, pace="real") as board:
        journal = LinkJournal.for_port(tmp_path, board.url)
        first = Mk1Session.connect(board.url, timing=REAL_PACE, journal=journal)
        first.link.send(b"SET,hatch,30", "SET,hatch,30")
        seq = first.link.endpoint.last_delivered
        first.close()
        session = Mk1Session.connect(board.url, timing=REAL_PACE, journal=LinkJournal.for_port(tmp_path, board.url))
        try:
            found = session.boot.recovered
            assert found is not None
            assert (found.found, found.drained_replies, found.accepted) == ("replying", ("OK,SET,hatch=30.00",), seq)
            assert board.firmware.boots == 2 and board.firmware.variables["hatch"] != 30  # reset: the hatch homed
        finally:
            session.close()


@pytest.mark.parametrize("journaled", [True, False], ids=["journal", "probe"])
def test_an_idle_board_is_found_at_the_number_it_accepts(tmp_path, journaled):
    with running_board("lt", "pty", faults=KEEP) as board:
        journal = LinkJournal.for_port(tmp_path, board.url)
        first = Mk1Session.connect(board.url, timing=FAST_TIMING, journal=journal)
        for value in range(1, 24):
            first.set("red", value)
        last = first.link.endpoint.last_delivered
        first.close()
        if not journaled:
            journal.path.unlink()
        session = Mk1Session.connect(board.url, timing=FAST_TIMING, journal=LinkJournal.for_port(tmp_path, board.url))
        try:
            found = session.boot.recovered
            assert found is not None
            assert (found.found, found.accepted, found.drained_rows, found.drained_replies) == ("idle", last, 0, ())
            assert found.via == ("journal" if journaled else "probe")
            # how many probes it took is a figure (benchmarks/bench_recovery.py): a probe unanswered in time is
            # sent again, so a busy machine takes more (issue 35: 218 on one loaded run); the number found is the fact
            assert found.commands_accepted == 23  # its first command was numbered 2^32 - 1
            assert "it had accepted 23 command(s) since it booted" in found.describe()
            assert board.firmware.boots == 2
        finally:
            session.close()


def test_probing_never_overflows_the_wind_tunnels_receive_ring(tmp_path):
    """The real-pace wind tunnel reads its line only between idle measurement passes; the probes wait for that."""
    with running_board("wt", "tcp", faults=KEEP, pace="real") as board:
        first = Mk1Session.connect(board.url, timing=REAL_PACE)
        for value in (1, 2, 3, 4, 5, 6, 7, 8):
            first.set("pot_1", value)
        first.close()
        session = Mk1Session.connect(board.url, timing=REAL_PACE)  # no journal: the sweep
        try:
            assert session.boot.recovered is not None and session.boot.recovered.accepted == 6
            assert session.boot.recovered.probes >= 5
            assert board.board.host_bytes_lost == 0
        finally:
            session.close()


def test_a_fresh_board_that_did_not_announce_itself_gets_no_note():
    """Nothing of a previous host to tell: a board that booted silently is reset without a recovery note."""
    with running_board("wt", "pty", faults=BoardFaults(silent_boot=True)) as board:
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        assert session.boot.recovered is None
        session.close()


def test_a_board_whose_announcement_no_host_acknowledged_simply_boots(tmp_path):
    with running_board("wt", "tcp", faults=KEEP) as board:
        port = serial.serial_for_url(board.url, timeout=0)
        port.close()  # a host gone before it read the announcement: the board keeps resending it
        session = Mk1Session.connect(board.url, timing=FAST_TIMING, journal=LinkJournal.for_port(tmp_path, board.url))
        assert session.boot.recovered is None
        assert board.firmware.boots == 1  # no RST was needed
        session.close()


def test_a_board_left_answering_a_previous_hosts_rst_just_reboots():
    """The killed host's RST was acknowledged (the hatch homes before OK,RST): the next host acknowledges OK,RST, the
    board reboots and announces itself; its settings are at their power-on values, so there is nothing to warn of."""
    with running_board("wt", "tcp", faults=KEEP, pace="real") as board:
        first = Mk1Session.connect(board.url, timing=REAL_PACE)
        first.set("hatch", 30)
        first.link.send(b"RST", "RST")
        first.close()
        session = Mk1Session.connect(board.url, timing=REAL_PACE)
        try:
            assert session.boot.recovered is None
            assert board.firmware.boots == 2  # power-on, then the killed host's RST; no RST of ours
        finally:
            session.close()


def test_a_board_left_in_its_handshake_is_reset_without_a_note():
    """The killed host acknowledged CHAMBER_CONFIG and no more: the next one drains VARIABLES_LIST, resets the board
    (it had accepted nothing) and has nothing to warn of."""
    with running_board("wt", "tcp", faults=KEEP) as board:
        first = Mk1Session(serial.serial_for_url(board.url, timeout=0), timing=FAST_TIMING)
        assert first.link.next_message(2.0)[0].startswith(b"CHAMBER_CONFIG,")  # acknowledged by the link
        first.close()
        session = Mk1Session.connect(board.url, timing=FAST_TIMING)
        try:
            assert session.boot.recovered is None
            assert board.firmware.boots == 2
            assert session.counters.unexpected >= 1  # VARIABLES_LIST, numbered after the killed host's ACK: drained
        finally:
            session.close()


@pytest.mark.parametrize("journaled", [True, False], ids=["journal", "no journal"])
def test_a_halted_board_that_does_not_reset_says_how_to_recover(tmp_path, journaled):
    with running_board("wt", "tcp", faults=keep_session(error_on="MSR")) as board:
        journal = LinkJournal.for_port(tmp_path, board.url)
        first = Mk1Session.connect(board.url, timing=FAST_TIMING, journal=journal)
        first.set("load_in", 0.8)
        with pytest.raises(FirmwareError):
            first.measure(3)
        first.close()
        if not journaled:
            journal.path.unlink()
        with pytest.raises(NoBoardAnswered if not journaled else BoardUnresponsive) as caught:
            Mk1Session.connect(board.url, timing=FAST_TIMING, journal=LinkJournal.for_port(tmp_path, board.url))
    message = str(caught.value)
    assert "\n" not in message and "4294967295" not in message
    if journaled:
        assert message.startswith(f"the board on {board.url} did not answer a reset within ")
        assert "the chamber may still be running as a previous process left it (fans, hatch)" in message
        assert "power-cycle the board" in message and "the link journal's last command, segment 0, and" in message


def test_a_board_streaming_longer_than_the_drain_timeout_is_reported():
    """Draining can take only so long: rows that outlast drain_timeout end in BoardUnresponsive, not a hang."""
    with running_board("wt", "tcp", faults=KEEP, pace="real") as board:
        _leave_mid_msr(board.url, None, rows=200, read=2, timing=REAL_PACE)
        with pytest.raises(BoardUnresponsive) as caught:
            Mk1Session.connect(board.url, timing=Timing(boot_timeout=3.0, drain_timeout=1.0))
    message = str(caught.value)
    assert "it was still streaming the rows of an MSR a previous process started" in message
    assert "wait for the MSR to end" in message and "power-cycle" in message and "\n" not in message


# --------------------------------------------------------------------------------------------- the CLI, killed
def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"expected {what} within {timeout:g} s")
        time.sleep(0.01)  # polling the board's state, not waiting for an outcome


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CHAMBERLAB, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["measure", "run"])
def test_the_next_command_after_a_sigkill_mid_msr_recovers_the_board(tmp_path, command):
    """Issue 31's scenario on the emulated board (real pace, no reset on connect): `chamber measure` (or `chamber
    run`) is SIGKILLed while an MSR streams with the fans on and the hatch open; the next command recovers the
    board, says so in one line, applies the safe state, and the board's own table shows it safe."""
    env = {**os.environ, "CHAMBERLAB_STATE_DIR": str(tmp_path / "state"), "PYTHONUNBUFFERED": "1"}
    with running_board("wt", "tcp", faults=KEEP, pace="real") as board:
        if command == "measure":
            args = ["chamber", "measure", "--port", board.url, "-n", "200", "--set", "load_in=0.8",
                    "--set", "load_out=0.5", "--set", "hatch=30"]
        else:
            protocol = tmp_path / "fans.txt"
            protocol.write_text("SET,load_in,0.8\nSET,load_out,0.5\nSET,hatch,30\nMSR,200,0\n")
            args = ["chamber", "run", str(protocol), "--port", board.url, "-o", str(tmp_path / "out.csv")]
        proc = subprocess.Popen([*CHAMBERLAB, *args], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            fw = board.firmware
            _wait_for(lambda: fw.variables["load_in"] > 0.7 and fw.variables["hatch"] == 30 and fw.counter >= 3,
                      60, "an MSR streaming with the fans on")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        assert fw.variables["load_in"] == pytest.approx(0.8)  # the board runs on as the killed process left it
        result = _run(["chamber", "measure", "--port", board.url, "-n", "3"], env, tmp_path)
        assert result.returncode == 0, result.stderr
        notes = [line for line in result.stderr.splitlines() if "mid-session with a previous host" in line]
        assert len(notes) == 1, result.stderr
        assert notes[0].startswith("wt: the board was mid-session with a previous host (it did not reset on connect; "
                                   "it was streaming the rows of an MSR, ")
        assert "the chamber may have been left running by a previous process" in notes[0]
        assert notes[0].endswith("; safe state applied (read back)")
        assert "4294967295" not in result.stderr
        assert {fw.variables[n] for n in ("load_in", "load_out", "hatch")} == {0.0}  # the board's own table
        assert fw.boots >= 2  # power-on, the recovery's RST (a starved host's reply timeout may add a reconnect's)
        assert (tmp_path / "state").is_dir()
