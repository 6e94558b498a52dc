"""Issue 31, item 4 on the chamber authors' real firmware: a board that does not reset on connect.

The harness powers up a fresh board per TCP connection (a Mega's reset on DTR), so the boards here sit behind
tests/persistent_link.py, a ser2net-like server that holds ONE connection to the firmware across successive hosts.
A `chamberlab` command is SIGKILLed while an MSR streams with the fans on; the next command must bring the board
back, say so in one line, apply the safe state, and the rows the host read back (decoded by the proxy, not taken
from the command's own account) must show the chamber safe. With the link journal, and without it (the probe
path). The firmware's board log shows whether any host byte was lost to its 64-byte receive ring.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from firmware_bridge.link_journal import LinkJournal
from firmware_bridge.session import Mk1Session, Timing
from firmware_harness import firmware_build, served_board  # noqa: F401 - firmware_build is a fixture
from persistent_link import PersistentLink

PROJECT = Path(__file__).resolve().parents[1]
CHAMBERLAB = [sys.executable, str(PROJECT / "bench_cli.py")]
RING_FULL = "serial receive buffer (64 bytes) was full"


def _wait_for(condition, timeout: float, what: str, tail) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"expected {what} within {timeout:g} s; wire:\n{tail()}")
        time.sleep(0.01)  # polling the proxy's record, not waiting for an outcome


def _fan_rows(proxy: PersistentLink) -> int:
    return sum(1 for e in proxy.record.rows() if e.values and e.values.get("load_in", 0) > 0.7)


@pytest.mark.parametrize("journaled", [True, False], ids=["journal", "probe"])
@pytest.mark.parametrize("command", ["measure", "run"])
def test_the_next_command_after_a_sigkill_mid_msr_recovers_the_real_board(firmware_build, tmp_path, command,
                                                                         journaled):
    state = tmp_path / "state"
    env = {**os.environ, "CHAMBERLAB_STATE_DIR": str(state), "PYTHONUNBUFFERED": "1"}
    log_path = tmp_path / "board.log"
    with served_board(firmware_build, "wt", log_path=log_path) as board, PersistentLink(board.url) as proxy:
        if command == "measure":
            args = ["chamber", "measure", "--port", proxy.url, "-n", "200", "--set", "load_in=0.8",
                    "--set", "load_out=0.5", "--set", "hatch=30"]
        else:
            protocol = tmp_path / "fans.txt"
            protocol.write_text("SET,load_in,0.8\nSET,load_out,0.5\nSET,hatch,30\nMSR,200,0\n")
            args = ["chamber", "run", str(protocol), "--port", proxy.url, "-o", str(tmp_path / "out.csv")]
        proc = subprocess.Popen([*CHAMBERLAB, *args], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_for(lambda: _fan_rows(proxy) >= 3, 60, "3 rows streamed with the fans on", proxy.record.tail)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        killed_at = len(proxy.record.rows())
        if not journaled:
            for path in state.glob("*"):
                path.unlink()
        result = subprocess.run([*CHAMBERLAB, "chamber", "measure", "--port", proxy.url, "-n", "3"], env=env,
                                cwd=tmp_path, capture_output=True, text=True, timeout=120)
        verdict = proxy.record.verdict()
        wire = proxy.record.tail(30)
    assert proxy.hosts == 2 and not proxy.upstream_closed  # one board session across both hosts
    assert result.returncode == 0, f"{result.stderr}\nwire:\n{wire}"
    notes = [line for line in result.stderr.splitlines() if "mid-session with a previous host" in line]
    assert len(notes) == 1, result.stderr
    assert notes[0].startswith("wt: the board was mid-session with a previous host (it did not reset on connect; "
                               "it was streaming the rows of an MSR, ")
    assert ("(from the link journal)" if journaled else "probe(s))") in notes[0]
    assert notes[0].endswith("the chamber may have been left running by a previous process; it was reset with "
                             "RST; safe state applied (read back)")
    assert "4294967295" not in result.stderr
    assert verdict.safe, f"{verdict.reason}\nwire:\n{wire}"
    assert len(proxy.record.rows()) > killed_at  # the rows left of the killed MSR were drained, then read back
    # Whether the firmware's 64-byte ring overflowed here depends on the harness process being scheduled while the
    # host's resend timers run (it did on a machine kept busy by another process, and the protocol recovered the
    # byte); that the probes themselves wait for the line is the probe-path test's below and the emulated one's.


def test_the_probe_path_finds_a_long_session_without_losing_a_byte(firmware_build, tmp_path):
    """No journal: the sweep finds the number after 40 commands on the light tunnel (which reads at once) and on
    the wind tunnel (which reads only between idle measurement passes); no probe overflows the receive ring."""
    for kind, variable in (("lt", "red"), ("wt", "pot_1")):
        log_path = tmp_path / f"{kind}.log"
        with served_board(firmware_build, kind, log_path=log_path) as board, PersistentLink(board.url) as proxy:
            first = Mk1Session.connect(proxy.url, timing=Timing())
            for value in range(1, 41):
                first.set(variable, value)
            last = first.link.endpoint.last_delivered
            first.close()
            session = Mk1Session.connect(proxy.url, timing=Timing())
            try:
                found = session.boot.recovered
                assert found is not None, kind
                assert (found.found, found.accepted, found.via) == ("idle", last, "probe"), kind
                assert session.measure(2).values[:, 0].tolist() == [0, 1]
            finally:
                session.close()
        assert RING_FULL not in log_path.read_text(), kind
        assert "restarted by resetFunc()" in log_path.read_text()


def test_a_board_left_inside_a_hatch_move_is_drained_on_the_real_firmware(firmware_build, tmp_path):
    """The killed host's SET,hatch was acknowledged; the firmware moves the hatch, then owes OK,SET."""
    with served_board(firmware_build, "wt") as board, PersistentLink(board.url) as proxy:
        journal = LinkJournal.for_port(tmp_path, proxy.url)
        first = Mk1Session.connect(proxy.url, timing=Timing(), journal=journal)
        first.set("load_in", 0.8)
        first.link.send(b"SET,hatch,40", "SET,hatch,40")
        seq = first.link.endpoint.last_delivered
        first.close()
        session = Mk1Session.connect(proxy.url, timing=Timing(), journal=LinkJournal.for_port(tmp_path, proxy.url))
        try:
            found = session.boot.recovered
            assert found is not None
            assert (found.found, found.drained_replies, found.accepted, found.via) == (
                "replying", ("OK,SET,hatch=40.00",), seq, "journal")
            row = session.measure(1).values[0]
            names = session.boot.names
            # power-on values: the hatch unset (-9999, NaN in a row), the fans at setup()'s 1 %
            assert math.isnan(row[names.index("hatch")]) and abs(row[names.index("load_in")] - 0.01) < 1e-6
        finally:
            session.close()
