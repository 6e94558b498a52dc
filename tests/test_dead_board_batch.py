"""A dead board ends a batch quickly and truthfully (issue 31): the verdicts decided before the loss are kept, the
rest of the dead chamber's claims end as `error` naming when the board was lost, after one bounded reconnection
(not one per claim); `check --all` interrupted in that state still prints them.

Three ways of killing a board, each as the issue saw it:
- in this process, the emulated board over TCP stopped (thread ended, socket closed) the moment a measured claim
  is graded, under the real driver and runner (so the test knows exactly which verdicts came before the loss);
- the real Mk1 firmware (tests/firmware_harness.py) behind a "cable" (a TCP forwarder in this test) that is pulled
  (the firmware process killed, the forwarder's port closed) at the N-th packet the board sent, under
  `chamberlab check --all` as a subprocess;
- the same, then Ctrl-C while the command reconnects.
No test asserts a duration (benchmarks/bench_dead_board.py measures how long the command takes); what is bounded
here is the number of reconnection attempts: one window's worth for the whole batch.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from chamber.driver import BoardLost, Chamber
from chamber.serial_backend import SerialBackend
from chamber.testing import FAST_TIMING
from firmware_harness import firmware_build, served_board  # noqa: F401 - firmware_build is a fixture
from protocols.claim_sources import load_main_job_claims
from protocols.runner import ProtocolContext, run_batch
from simulator.board import running_board

PROJECT = Path(__file__).resolve().parents[1]
CHAMBERLAB = [sys.executable, str(PROJECT / "bench_cli.py")]
PACKAGED = str(PROJECT / "protocols" / "data" / "claims")
HANG_GUARD_S = 300  # a hung command fails the test instead of hanging the suite (not a duration under test)


# ------------------------------------------------------------------------------------------- in process
CLAIMS = ["dps310-operating-range", "dps310-pressure-precision-high", "mcp4151-zero-scale-error-pot-1",
          "acs70331-bandwidth", "nf-f12-max-speed-intake", "dps310-absolute-accuracy", "si115x-adc-bit-depth",
          "nf-f12-pwm-runs-below-20-percent-intake", "nf-f12-pwm-stops-at-zero-duty-intake",
          "nf-f12-pwm-stops-at-zero-duty-exhaust"]
"""Planned stagings (graded from reads in hand), claims decided without the chamber, a light-tunnel claim (no
light tunnel connected) and three procedures (the fans' PWM claims), which run after the planned claims."""
PROCEDURES = CLAIMS[-3:]


def test_a_board_killed_mid_batch_keeps_what_was_graded_and_ends_the_rest_as_error_after_one_window():
    pool = load_main_job_claims(None)
    claims = [pool[c] for c in CLAIMS]
    said: list[str] = []
    graded: list[str] = []
    connects: list[int] = []
    with running_board("wt", "tcp") as board:
        backend = SerialBackend(board.url, timing=FAST_TIMING)
        real_connect = backend.connect

        def counted_connect():  # a spy on the real backend: how many times the driver tried the board
            connects.append(1)
            return real_connect()

        backend.connect = counted_connect  # type: ignore[method-assign]
        chamber = Chamber(backend, backoff=(0.01, 0.02, 0.04, 0.08)).connect()

        def on_graded(claim) -> None:
            graded.append(claim.id)
            if claim.id == "dps310-operating-range":  # a measured claim is in: pull the plug
                board.stop_event.set()
                board.thread.join(timeout=5)
                board.board.transport.close()

        context = ProtocolContext(chambers={"wt": chamber}, rows=20, graded=on_graded)
        connects.clear()
        batch = run_batch(claims, context, calibrate=True, link=said.append)
        chamber.close()
    results = {r.claim.id: r for r in batch.results}
    verdicts = {c: r.verdict.verdict for c, r in results.items()}
    assert list(results) == CLAIMS and "fail" not in verdicts.values()
    before = graded[:graded.index("dps310-operating-range") + 1]
    # Kept: what was decided before the loss, the measured operating range included.
    assert verdicts["dps310-operating-range"] == "pass"
    assert all(verdicts[c] != "error" for c in before)
    assert verdicts["si115x-adc-bit-depth"] == "inconclusive"  # no light tunnel: nothing was tried
    # What needed the board after the loss ends as error naming it: the procedures, at once.
    assert all(verdicts[c] == "error" and "board lost at" in results[c].verdict.reason for c in PROCEDURES)
    assert all("link lost" in results[c].verdict.reason for c in CLAIMS if verdicts[c] == "error")
    # One reconnection window for the whole batch: 4 attempts, said one by one, then the give-up, once.
    assert len(connects) == 4
    assert [m for m in said if "reconnecting" in m] == [
        said[0], "wt: board lost, reconnecting (2/4)", "wt: board lost, reconnecting (3/4)",
        "wt: board lost, reconnecting (4/4)"]
    assert said[0].startswith("wt: board lost (") and said[0].endswith("reconnecting (1/4)")
    assert len([m for m in said if "not reconnected within 30 s" in m]) == 1
    assert isinstance(chamber._lost, BoardLost)  # noqa: SLF001


# ------------------------------------------------------------------------------------ the real firmware
class Cable:
    """A TCP forwarder between the command and a served real board: `pull()` kills the firmware process and
    closes every socket (the forwarder's port too, so a reconnection is refused, as for an unplugged board).
    Pulled by itself once the board has sent `after_packets` packets (EOT bytes; counted, not timed)."""

    def __init__(self, board_url: str, process: subprocess.Popen, after_packets: int) -> None:
        host, port = board_url.removeprefix("socket://").split(":")
        self.board_addr = (host, int(port))
        self.process = process
        self.after = after_packets
        self.packets = 0
        self.pulled = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"socket://127.0.0.1:{self.listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.pulled.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                if self.pulled.is_set():
                    raise ConnectionRefusedError("the cable is pulled")
                board = socket.create_connection(self.board_addr)
            except OSError:  # pulled meanwhile: the new connection ends at once, as a refused one would
                client.close()
                continue
            with self._lock:
                self._sockets += [client, board]
            threading.Thread(target=self._pipe, args=(client, board, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(board, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_board: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
            except OSError:
                break
            if from_board:
                self.packets += data.count(b"\x04")
                if self.packets >= self.after and not self.pulled.is_set():
                    self.pull()
                    break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def pull(self) -> None:
        self.pulled.set()
        self.process.kill()
        self.process.wait(timeout=10)
        self.listener.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


@contextmanager
def pulled_board(build: Path, after_packets: int) -> Iterator[Cable]:
    # FW_TIME_SCALE/FW_BAUD 0: the firmware without its real-time waits, so the batch reaches the pull quickly
    with served_board(build, "wt", FW_TIME_SCALE="0", FW_BAUD="0") as board:
        cable = Cable(board.url, board.process, after_packets)
        try:
            yield cable
        finally:
            if not cable.pulled.is_set():
                cable.pull()


def _check_all(url: str, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen([*CHAMBERLAB, "check", "--all", "--claims", PACKAGED, "--port", url, "--rows", "8",
                             "--json"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_check_all_on_a_killed_real_board_ends_keeping_its_verdicts(firmware_build, tmp_path):
    with pulled_board(firmware_build, after_packets=150) as cable:
        proc = _check_all(cable.url, tmp_path)
        try:
            out, err = proc.communicate(timeout=HANG_GUARD_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert cable.pulled.is_set(), "the batch ended before the board was pulled"
    assert proc.returncode == 3, err[-2000:]  # the board is gone: its safe state cannot be confirmed
    d = json.loads(out)
    results = d["results"]
    assert len(results) == 37 and not [r for r in results if r["verdict"] == "fail"]
    kept = [r for r in results if r["verdict"] != "error"]
    errors = [r for r in results if r["verdict"] == "error"]
    assert kept and errors and d["incomplete"] == {"error_verdicts": len(errors)}
    assert all("link lost" in r["reason"] for r in errors)
    assert [r for r in errors if "board lost at" in r["reason"] and "not reconnected within 30 s" in r["reason"]]
    assert d["safe_state"][0]["confirmed"] is False and "Traceback" not in err
    # One reconnection window, said attempt by attempt, then one give-up line, for the whole batch (the lines
    # said, each stamped with the job's time; the progress line may repeat the latest as its note).
    said = [line for line in err.splitlines() if re.match(r"\[\d+:\d\d\] wt: ", line)]
    attempts = [line for line in said if "board lost" in line and "reconnecting (" in line]
    assert 1 <= len(attempts) <= 8 and attempts[-1].rstrip().endswith(f"({len(attempts)}/8)")
    assert len([line for line in said if "not reconnected within 30 s" in line]) == 1


def test_check_all_interrupted_while_reconnecting_prints_the_verdicts_decided(firmware_build, tmp_path):
    with pulled_board(firmware_build, after_packets=150) as cable:
        proc = _check_all(cable.url, tmp_path)
        lines: list[str] = []
        try:
            assert proc.stderr is not None
            for line in proc.stderr:  # the event: the command says it is reconnecting
                lines.append(line)
                if "reconnecting (" in line:
                    proc.send_signal(signal.SIGINT)
                    break
            out, err = proc.communicate(timeout=HANG_GUARD_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    err = "".join(lines) + err
    assert any("reconnecting (" in line for line in lines), err[-2000:]
    assert proc.returncode == 3, err[-2000:]  # interrupted, and the lost board's safe state not confirmed
    d = json.loads(out)  # not an error object: the verdicts decided are there
    assert d["interrupted"] is True and d["not_graded"] and d["results"]
    assert len(d["results"]) + len(d["not_graded"]) == 37
    assert not {r["claim_id"] for r in d["results"]} & set(d["not_graded"])
    assert d["safe_state"][0]["confirmed"] is False and "Traceback" not in err
