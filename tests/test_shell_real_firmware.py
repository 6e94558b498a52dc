"""Issue 27 on the real Mk1 firmware: `chamber shell` is safe to stop.

Why on the real firmware and the wire: the issue was seen there (Ctrl-C during `MSR,200,0` ended the whole shell,
the safe state then timed out and the fan stayed at 0.8 with exit code 0). The shell runs as a subprocess at a
terminal (its stdin a pseudo-terminal, so it is interactive: a prompt to return to); the recording proxy
(interrupt_proxy.py) sends SIGINT at the 3rd row of an MSR streamed with the fan on and judges on the wire
whether the fan was read back off at the end. The other test pulls the board's plug before the shell leaves: the
safe state cannot be confirmed, and the exit code must say so (3) in one line.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from firmware_harness import firmware_build, real_board, served_board  # noqa: F401 - firmware_build is a fixture
from interrupt_proxy import InterruptProxy, on_msr_rows

PROJECT = Path(__file__).resolve().parents[1]
CHAMBERLAB = [sys.executable, str(PROJECT / "bench_cli.py")]
DEADLINE_S = 60.0


class Output:
    """A subprocess's stdout and stderr collected on threads; `wait_for` polls for a text with a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self._threads = [threading.Thread(target=self._read, args=(s, sink), daemon=True)
                         for s, sink in ((proc.stdout, self.out), (proc.stderr, self.err))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _read(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait_for(self, text: str, proc: subprocess.Popen, timeout: float = DEADLINE_S) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"never saw {text!r} on the shell's stderr (exit {proc.poll()}):\n{self.stderr[-3000:]}")
            time.sleep(0.05)

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=10)


def _shell(url: str, tmp_path: Path, stdin, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([*CHAMBERLAB, "chamber", "shell", "--port", url, "--history", str(tmp_path / "history"),
                             *extra], cwd=tmp_path, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)


def test_ctrl_c_during_an_msr_returns_to_the_prompt_and_quit_leaves_the_fan_off(firmware_build, tmp_path):
    trigger = on_msr_rows(3)
    master, slave = pty.openpty()
    with real_board(firmware_build, "wt") as board, InterruptProxy(board, trigger) as proxy:
        proc = _shell(proxy.url, tmp_path, slave, "--chunk", "10")
        os.close(slave)
        proxy.pid = proc.pid
        output = Output(proc)
        try:
            os.write(master, b"SET,load_in,0.8\nMSR,200,0\n")
            assert proxy.wait_fired(DEADLINE_S, alive=lambda: proc.poll() is None), output.stderr
            output.wait_for("back at the prompt", proc)
            assert proc.poll() is None, "the first Ctrl-C ended the shell"
            os.write(master, b"state\nquit\n")
            code = proc.wait(timeout=DEADLINE_S)
        finally:
            _end(proc)
            os.close(master)
        output.join()
        err = output.stderr
        stopped = next(line for line in err.splitlines() if "stopped after" in line)
        got = int(stopped.split("stopped after ")[1].split(" of ")[0])
        assert 3 <= got < 200 and got % 10 == 0, stopped  # after the chunk in flight, not the whole MSR
        assert "load_in=0.8" in err  # `state` answered after the Ctrl-C: the shell went on
        assert code == 0, err
        assert "safe state wt: load_in=0, load_out=0, hatch=0, pot_1=0 (read back)" in err
        assert "Traceback" not in err
        verdict = proxy.record.verdict()
        assert verdict.safe, f"{verdict.reason}\n{proxy.record.tail(30)}"
        rows = "".join(output.out).splitlines()
        header = "timestamp,config,counter,"  # the public dataset layout, the header once
        assert rows[0].startswith(header) and sum(r.startswith(header) for r in rows) == 1
        assert len(rows) == 1 + got


def test_a_safe_state_that_cannot_be_confirmed_exits_3_with_one_line(firmware_build, tmp_path):
    with served_board(firmware_build, "wt") as board:
        proc = _shell(board.url, tmp_path, subprocess.PIPE, "--boot-timeout", "1")
        output = Output(proc)
        try:
            assert proc.stdin is not None
            proc.stdin.write("SET,load_in,0.8\nMSR,3,0\n")
            proc.stdin.flush()
            output.wait_for("3 row(s)", proc)
            board.process.kill()  # the plug pulled: nothing will answer the safe state
            board.process.wait(timeout=10)
            proc.stdin.close()  # end of the script: the shell leaves
            code = proc.wait(timeout=DEADLINE_S)
        finally:
            _end(proc)
        output.join()
    err = output.stderr
    assert code == 3, err
    unconfirmed = [line for line in err.splitlines() if "NOT confirmed" in line]
    assert len(unconfirmed) == 1 and "load_in may still be 0.8" in unconfirmed[0], err
    assert "Traceback" not in err


def test_a_second_ctrl_c_during_the_same_msr_leaves_with_130_and_the_fan_off(firmware_build, tmp_path):
    """The operator insists: the second SIGINT (2 rows after the first, in the same 25-row chunk) leaves at once;
    the safe state finishes the chunk in flight first and reads the fan back off."""
    trigger = on_msr_rows(3, (signal.SIGINT, signal.SIGINT))
    master, slave = pty.openpty()
    with real_board(firmware_build, "wt") as board, InterruptProxy(board, trigger) as proxy:
        proc = _shell(proxy.url, tmp_path, slave)
        os.close(slave)
        proxy.pid = proc.pid
        output = Output(proc)
        try:
            os.write(master, b"SET,load_in,0.8\nMSR,200,0\n")
            assert proxy.wait_fired(DEADLINE_S, alive=lambda: proc.poll() is None), output.stderr
            code = proc.wait(timeout=DEADLINE_S)
        finally:
            _end(proc)
            os.close(master)
        output.join()
        err = output.stderr
        assert trigger.sent == [signal.SIGINT, signal.SIGINT] and trigger.delivered, err
        assert code == 130, err
        assert "interrupted: leaving" in err, err
        assert "safe state wt: load_in=0, load_out=0, hatch=0, pot_1=0 (read back)" in err, err
        assert "Traceback" not in err
        verdict = proxy.record.verdict()
        assert verdict.safe, f"{verdict.reason}\n{proxy.record.tail(30)}"
