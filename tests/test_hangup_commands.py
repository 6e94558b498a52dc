"""Issue 31 on the real Mk1 firmware: a closed terminal or a dropped SSH session (SIGHUP) and Ctrl-\\ (SIGQUIT) stop
every command that drives a chamber the one way Ctrl-C and SIGTERM do: the safe state applied and read back, as
the wire shows, the README's exit code, and one line naming the signal.

Why judged on the wire: as in test_interrupt_commands.py (whose machinery this reuses), the command's own summary
is its claim; the recording proxy between the command and the real firmware gives the verdict. Before issue 31,
10 of 10 such tries ended the process at once with the fans running (the board read back load_in 0.8-1.0).

The signals go to the command's process group, as a terminal sends them. One test closes a real terminal: the
command runs with a pseudo-terminal as its controlling terminal, and the test closes the terminal's master side,
so the kernel itself sends SIGHUP and every later write to the terminal fails (EIO), as after a dropped SSH session.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import signal
import subprocess
import termios
import threading
from pathlib import Path
from typing import Callable

import httpx
import pytest

from firmware_harness import firmware_build, real_board  # noqa: F401 - firmware_build is a fixture
from interrupt_proxy import InterruptProxy, Trigger, on_msr_rows, on_set_reply, on_silence
from test_interrupt_commands import (BARE_CHAMBERLAB, CHAMBERLAB, CLAIM, EXIT_S, FIRE_S, FIRST_MSR, FIRST_SET,
                                     SCRIPT, Streams, _kill, _protocol, _serve_client, interrupt, measure)

HUP, QUIT = signal.SIGHUP, signal.SIGQUIT


def judged(result, signum: signal.Signals, *, code: int = 130) -> None:
    """The wire says safe, the exit code is the README's, and a line names the signal."""
    result.expected_code = code
    result.check()
    assert signum.name in result.stderr, result.report()


# --------------------------------------------------------------------------------------------- bench commands
@pytest.mark.parametrize("signum, make_trigger", [
    (HUP, lambda s: on_msr_rows(3, (s,))), (QUIT, lambda s: on_set_reply("load_in", (s,)))], ids=["hup-msr", "quit-set"])
def test_chamber_measure_stopped_by_a_hangup_or_quit(firmware_build, tmp_path, signum, make_trigger):
    judged(interrupt(firmware_build, tmp_path, measure, make_trigger(signum)), signum)


@pytest.mark.parametrize("signum, make_trigger", [
    (HUP, lambda s: on_silence(1.0, (s,))), (QUIT, lambda s: on_msr_rows(3, (s,)))], ids=["hup-wait", "quit-msr"])
def test_chamber_run_stopped_by_a_hangup_or_quit(firmware_build, tmp_path, signum, make_trigger):
    protocol = _protocol(tmp_path)
    result = interrupt(firmware_build, tmp_path, lambda u: [
        "chamber", "run", str(protocol), "-o", str(tmp_path / "fan.csv"), "--port", u["wt"], "--json"],
        make_trigger(signum))
    judged(result, signum)
    assert json.loads(result.stdout)["interrupted"] is True  # the summary is printed as for Ctrl-C


@pytest.mark.parametrize("signum, make_trigger", [
    (HUP, lambda s: on_msr_rows(3, (s,))), (QUIT, lambda s: on_silence(1.0, (s,)))], ids=["hup-msr", "quit-wait"])
def test_chamber_shell_stopped_by_a_hangup_or_quit(firmware_build, tmp_path, signum, make_trigger):
    result = interrupt(firmware_build, tmp_path, lambda u: [
        "chamber", "shell", "--port", u["wt"], "--history", str(tmp_path / "history")], make_trigger(signum),
        stdin=SCRIPT)
    judged(result, signum)


@pytest.mark.parametrize("command, signum, make_trigger", [
    (["check", "--all", "--rows", "40"], HUP, FIRST_MSR),
    (["check", "--all", "--rows", "40"], QUIT, FIRST_SET),
    (["calibrate", "-n", "60"], HUP, FIRST_MSR),
    (["sweep", CLAIM], QUIT, FIRST_MSR),
], ids=["check-hup", "check-quit", "calibrate-hup", "sweep-quit"])
def test_batch_commands_stopped_by_a_hangup_or_quit(firmware_build, tmp_path, command, signum, make_trigger):
    trigger = make_trigger()
    trigger.signals = (signum,)
    judged(interrupt(firmware_build, tmp_path, lambda u: [*command, "--port", u["wt"], "--json"], trigger), signum)


@pytest.mark.slow
def test_the_main_job_stopped_by_a_hangup_leaves_both_chambers_safe(firmware_build, tmp_path):
    trigger = FIRST_MSR()
    trigger.signals = (HUP,)
    result = interrupt(firmware_build, tmp_path, lambda u: [
        "run", "--no-agent", "--rows", "20", "--port", u["wt"], "--port", u["lt"], "--runs-dir",
        str(tmp_path / "runs"), "--new", "--json"], trigger, boards=("wt", "lt"))
    judged(result, HUP)


# --------------------------------------------------------------------------------------------- the servers
@pytest.mark.parametrize("phase, signum, make_trigger", [
    ("msr", HUP, lambda s: on_msr_rows(3, (s,))), ("wait", QUIT, lambda s: on_silence(1.0, (s,)))],
    ids=["hup-msr", "quit-idle"])
def test_serve_stopped_by_a_hangup_or_quit(firmware_build, tmp_path, phase, signum, make_trigger):
    result = interrupt(firmware_build, tmp_path, lambda u: [
        "serve", "--port", u["wt"], "--listen-port", "0", "--record", str(tmp_path / "rec"), "--json"],
        make_trigger(signum), client=_serve_client(phase))
    judged(result, signum, code=0)  # a server ends as asked (README's exit-code table)


def _lab_client(mode: str, credentials: tuple[str, str]) -> Callable[[Streams], None]:
    """The lab's first client: submits (queue) or sends (real-time) the intake fan at 0.8 and a 200-row MSR."""
    def client(streams: Streams) -> None:
        if not streams.first_line.wait(FIRE_S):
            raise AssertionError(f"lab serve printed no ready line within {FIRE_S:g} s")
        endpoint = json.loads(streams.out[0])["endpoint"]
        with httpx.Client(base_url=endpoint, auth=credentials, timeout=EXIT_S) as http:
            if mode == "queue":
                http.post("/experiments", json={"chamber_id": "wt-1", "chamber_config": "standard",
                                                "instructions": ["SET,load_in,0.8", "MSR,200,0"]}).raise_for_status()
                return
            sid = http.post("/sessions", json={"chamber_id": "wt-1", "chamber_config": "standard"}).json()["session_id"]
            http.post(f"/sessions/{sid}/instructions", json={"instructions": ["SET,load_in,0.8"]}).raise_for_status()
            http.post(f"/sessions/{sid}/instructions", json={"instructions": ["MSR,200,0"]})
    return client


@pytest.mark.parametrize("mode, signum", [("queue", HUP), ("real-time", QUIT)])
def test_lab_serve_stopped_by_a_hangup_or_quit(firmware_build, tmp_path, mode, signum):
    data = tmp_path / "lab-data"
    password = tmp_path / "pw"
    password.write_text("a long enough password\n")
    added = subprocess.run([*CHAMBERLAB, "lab", "user", "add", "ada", "--password-file", str(password), "--data",
                            str(data)], capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    lab_file = tmp_path / "lab.yaml"

    def args(urls: dict[str, str]) -> list[str]:
        lab_file.write_text(f"chambers:\n  wt-1: {{board: '{urls['wt']}', kind: wt, mode: {mode}}}\n")
        return ["lab", "serve", "--config", str(lab_file), "--data", str(data), "--listen-port", "0", "--json"]

    result = interrupt(firmware_build, tmp_path, args, on_msr_rows(3, (signum,)),
                       client=_lab_client(mode, ("ada", "a long enough password")))
    judged(result, signum, code=0)
    assert "wt-1: safe state confirmed on wt" in result.stderr, result.report()


# --------------------------------------------------------------------------------------------- a real terminal
def test_closing_the_terminal_of_chamber_run_leaves_the_chamber_safe(firmware_build, tmp_path):
    """`chamber run` with a pseudo-terminal as its controlling terminal (stdin, stdout, stderr); at the 3rd row of
    its MSR with the fan on, the test closes the terminal: the kernel sends SIGHUP, and every later write to the
    terminal fails. The command must still leave the board safe (the wire), keep its rows and exit 130."""
    protocol = _protocol(tmp_path)
    out = tmp_path / "fan.csv"
    trigger = Trigger("msr", (), rows=3)  # no signal of the test's own: the hang-up is the kernel's
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(InterruptProxy(stack.enter_context(real_board(firmware_build, "wt")), trigger))
        master, slave = pty.openpty()
        slave_name = os.ttyname(slave)

        def controlling_terminal() -> None:  # in the child: a new session whose controlling terminal is the pty
            os.setsid()
            fd = os.open(slave_name, os.O_RDWR)
            fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
            os.close(fd)

        proc = subprocess.Popen([*CHAMBERLAB, "chamber", "run", str(protocol), "-o", str(out), "--port", proxy.url],
                                cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave, preexec_fn=controlling_terminal,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        os.close(slave)
        proxy.pid = proc.pid
        seen = bytearray()
        reader = threading.Thread(target=_drain, args=(master, seen), daemon=True)
        reader.start()
        try:
            if not proxy.wait_fired(FIRE_S, alive=lambda: proc.poll() is None):
                pytest.fail(f"the MSR never reached row 3; terminal so far: {bytes(seen)[-1500:]!r}")
            os.close(master)  # the terminal goes away: SIGHUP to the session, EIO on every later write
            code = proc.wait(timeout=EXIT_S)
        finally:
            if proc.poll() is None:
                _kill(proc)
        verdict = proxy.record.verdict()
        assert verdict.safe, f"not safe on the wire: {verdict.reason}\n{proxy.record.tail(30)}"
        assert code == 130, f"exit code {code}; terminal before the hang-up: {bytes(seen)[-1500:]!r}"
        rows = out.read_text().splitlines()
        assert rows[0].startswith("timestamp,config,counter") and len(rows) >= 2  # the rows received are kept


def _drain(fd: int, sink: bytearray) -> None:
    """Read the terminal's output until it closes (a pty whose output nobody reads would block the command)."""
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 4096):
            sink.extend(chunk)


def test_nohup_keeps_a_run_going_through_a_hangup(tmp_path):
    """`nohup` ignores SIGHUP so that a run outlives its terminal: that choice is kept (the one exception to a
    hang-up stopping a command). On the in-process simulator, a hang-up mid-run neither stops nor kills it."""
    protocol = tmp_path / "p.txt"
    protocol.write_text("SET,load_in,0.5\n" + "MSR,1,0\nWAIT,200\n" * 10)
    proc = subprocess.Popen(["nohup", *BARE_CHAMBERLAB, "chamber", "run", str(protocol), "--backend", "sim", "-o",
                             str(tmp_path / "o.csv"), "--json"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "line 3: WAIT" in line:
            break
    os.killpg(proc.pid, HUP)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["interrupted"] is False and summary["rows"] == 10
    assert "SIGHUP" not in stderr


def test_a_dead_terminal_does_not_turn_the_exit_into_a_traceback():
    """The CLI's streams survive their reader: a write after the pipe closed is dropped, the fd points at
    /dev/null, and the command's own exit path goes on (chamber/terminal.py)."""
    from chamber.terminal import surviving

    read_end, write_end = os.pipe()
    stream = surviving(os.fdopen(write_end, "w", buffering=1))
    stream.write("before\n")
    os.close(read_end)  # the reader has gone
    stream.write("after\n")  # EPIPE, dropped
    stream.flush()
    assert stream.lost and not stream.isatty()
    os.write(stream.fileno(), b"still quiet\n")  # any other holder of the descriptor writes to /dev/null now
