"""Issue 31, item 3 on the real Mk1 firmware: `chamberlab serve` hands the chamber back safe when a session ends or
is abandoned, while the server keeps running, and stops on SIGTERM with its safe-state line.

Judged on the wire (tests/interrupt_proxy.py): the server runs as a subprocess on a recording proxy in front of the
chamber authors' firmware (tests/firmware_harness.py). A client stages the intake fan and the hatch, then either
DELETEs its session or goes silent past a short --session-idle. The proxy's verdict must then show, on the board
the server is still connected to, the safe SETs and a row read back after them with both fans at 0 and the hatch
at 0 (the judge's own safe values, with the hatch added here: the resting state sends the hatch home). Then
SIGTERM: the server exits 0 and says `safe state confirmed on wt: ... (read back)`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from firmware_harness import firmware_build, real_board  # noqa: F401 - firmware_build is a fixture
from interrupt_proxy import InterruptProxy, Verdict

PROJECT = Path(__file__).resolve().parents[1]
CLAIM = "dps310-operating-range"
STAGED = {"load_in": 0.8, "hatch": 30}
READY_S = 60.0  # bound on waiting for the server's ready line (boot of the board included)
SAFE_S = 30.0  # bound on waiting for the wire to show the chamber safe (an idle limit of 1 s, then the sweep)
EXIT_S = 30.0  # bound on waiting for the process to exit after SIGTERM


class Served:
    """A `chamberlab serve` subprocess: its URL (from the --json ready line) and its streams, read on threads."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.out: list[str] = []
        self.err: list[str] = []
        self.ready = threading.Event()
        self._threads = [threading.Thread(target=self._read, args=(proc.stdout, self.out), daemon=True),
                         threading.Thread(target=self._read, args=(proc.stderr, self.err), daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self, stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)
            if sink is self.out:
                self.ready.set()

    @property
    def url(self) -> str:
        if not self.ready.wait(READY_S):
            raise AssertionError(f"serve printed no ready line within {READY_S:g} s; stderr: {''.join(self.err)}")
        return json.loads(self.out[0])["url"]

    def stop(self) -> tuple[int, str]:
        """SIGTERM, as a service manager stops it; the exit code and stderr."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"serve did not exit within {EXIT_S:g} s of SIGTERM; stderr: {''.join(self.err)}")
        for t in self._threads:
            t.join(timeout=10)
        return self.proc.returncode, "".join(self.err)


@contextmanager
def serving(build: Path, tmp_path: Path, *extra: str) -> Iterator[tuple[Served, InterruptProxy]]:
    with real_board(build, "wt") as board, InterruptProxy(board) as proxy:
        command = [sys.executable, str(PROJECT / "bench_cli.py"), "serve", "--port", proxy.url, "--listen-port", "0",
                   "--record", str(tmp_path / "rec"), "--json", *extra]
        proc = subprocess.Popen(command, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            yield Served(proc), proxy
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def _stage(url: str) -> str:
    with httpx.Client(base_url=url, timeout=60.0) as http:
        sid = http.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"]
        http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300, "high": 1200}}).raise_for_status()
        r = http.post(f"/sessions/{sid}/tools/stage_conditions", json={"settings": STAGED})
        assert r.status_code == 200, r.text
    return sid


def _safe_on_the_wire(proxy: InterruptProxy, served: Served) -> Verdict:
    """The wire verdict once it says safe, or the last one after SAFE_S; the server must still be running."""
    deadline = time.monotonic() + SAFE_S
    verdict = proxy.record.verdict()
    while not verdict.safe and time.monotonic() < deadline and served.proc.poll() is None:
        threading.Event().wait(0.05)  # polling the proxy's record, not waiting for a duration
        verdict = proxy.record.verdict()
    assert served.proc.poll() is None, f"the server exited: {''.join(served.err)}"
    return verdict


def _check_stop(served: Served, proxy: InterruptProxy) -> None:
    code, stderr = served.stop()
    assert code == 0, stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.startswith("safe state confirmed on wt: ")]
    assert len(lines) == 1 and "load_in=0" in lines[0] and lines[0].endswith("(read back)"), stderr
    assert proxy.record.verdict().safe, proxy.record.tail(20)


def test_a_deleted_session_leaves_the_real_board_safe_while_serve_runs(firmware_build, tmp_path):
    with serving(firmware_build, tmp_path) as (served, proxy):
        sid = _stage(served.url)
        staged = proxy.record.verdict()
        assert not staged.safe, staged.reason  # the fan runs and the hatch is open: nothing read back since
        with httpx.Client(base_url=served.url, timeout=60.0) as http:
            r = http.delete(f"/sessions/{sid}")
            assert r.status_code == 200, r.text
        verdict = _safe_on_the_wire(proxy, served)
        assert verdict.safe, f"{verdict.reason}\n{proxy.record.tail(30)}"
        assert verdict.read_back is not None and verdict.read_back.values["hatch"] == 0.0
        instructions = [e.text for e in proxy.record.snapshot() if e.kind == "instruction"]
        assert "SET,load_in,0" in instructions and "SET,hatch,0" in instructions
        _check_stop(served, proxy)


def test_an_abandoned_session_leaves_the_real_board_safe_within_its_idle_limit(firmware_build, tmp_path):
    with serving(firmware_build, tmp_path, "--session-idle", "1") as (served, proxy):
        sid = _stage(served.url)  # ... and the client is gone: no DELETE, no other request
        verdict = _safe_on_the_wire(proxy, served)
        assert verdict.safe, f"{verdict.reason}\n{proxy.record.tail(30)}"
        kinds = [json.loads(line)["kind"] for line in (tmp_path / "rec" / f"{sid}.jsonl").read_text().splitlines()]
        assert kinds[-2:] == ["expired", "handback"], kinds
        _check_stop(served, proxy)
