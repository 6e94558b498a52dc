#!/usr/bin/env python3
"""Speed of the host side of Mk1, printed beside its references (figures, not pass/fail).

(a) decode rate of the bridge: wire bytes → checked rows (split, base64, CRC, numbering, ACKs built, rows
    checked), beside the physical limit of the link (500,000 baud ÷ wire bytes per row, 10 bits per byte).
    Goal: at least 20× the link limit.
(b) an MSR of 10,000 rows from the unthrottled emulated board (`sim serve`, its own process) over a pty, beside
    a plain pyserial read of the same number of bytes written by the same board on the same pty.
    Goal: within 2× of the plain read. Medians over --rounds board processes (--msrs MSRs each).
Run: python benchmarks/bench_bridge.py [--json] [--rows N] [--chamber wt|lt] [--rounds R] [--msrs M]
"""

from __future__ import annotations

import argparse
import json
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import serial

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from firmware_bridge.batch import build_segments, frame_uniform  # noqa: E402
from firmware_bridge.link import Link  # noqa: E402
from firmware_bridge.packets import packet_size  # noqa: E402
from firmware_bridge.rows import RowChecker  # noqa: E402
from firmware_bridge.segments import CRC_LEN, FIRST_SEQ, HEADER_LEN, LinkCounters  # noqa: E402
from firmware_bridge.session import BAUDRATE, Mk1Session, Timing  # noqa: E402
from firmware_bridge.variables import COUNTER_PERIOD, layout_for  # noqa: E402


class ReplayPort:
    """Plays recorded wire bytes back in pty-sized chunks; writes (the ACKs) are counted and dropped."""

    def __init__(self, data: bytes, chunk: int = 4096):
        self._data = memoryview(data)
        self._pos = 0
        self._chunk = chunk
        self.written = 0

    @property
    def in_waiting(self) -> int:
        return min(self._chunk, len(self._data) - self._pos)

    def fileno(self) -> int:
        raise OSError("no file descriptor")

    def read(self, n: int) -> bytes:
        out = bytes(self._data[self._pos : self._pos + n])
        self._pos += len(out)
        return out

    def write(self, data: bytes) -> int:
        self.written += len(data)
        return len(data)


def wire_rows(chamber: str, n: int, seed: int = 0) -> tuple[bytes, int]:
    layout = layout_for(chamber)
    rng = np.random.default_rng(seed)
    rows = rng.normal(1000.0, 10.0, (n, layout.row_length)).astype("<f4")
    rows[:, 0] = np.arange(n) % COUNTER_PERIOD
    payloads = rows.view(np.uint8).reshape(n, -1)
    return frame_uniform(build_segments(0, FIRST_SEQ, 0, payloads)), layout.row_length


def bench_decode(chamber: str, n: int, repeats: int = 3) -> dict[str, float]:
    wire, width = wire_rows(chamber, n)
    best = float("inf")
    for _ in range(repeats):
        link = Link(ReplayPort(wire), counters=LinkCounters())
        checker = RowChecker(width)
        start = time.perf_counter()
        while link.queued < n:
            link.pump(0.0)
        block = checker.decode_runs(link.take(n))
        best = min(best, time.perf_counter() - start)
        assert len(block) == n and link.counters.crc_failures == 0
    row_wire = packet_size(HEADER_LEN + 4 * width + CRC_LEN)
    limit = BAUDRATE / 10 / row_wire
    return {"decode_rows_per_s": n / best, "link_limit_rows_per_s": limit, "wire_bytes_per_row": row_wire,
            "decode_vs_link": n / best / limit}


def _pty_round(chamber: str, n: int, msrs: int) -> tuple[float, list[float], int, int]:
    """One board process: the plain read of its raw burst, then `msrs` MSRs of n rows on a fresh session."""
    width = layout_for(chamber).row_length
    burst = n * packet_size(HEADER_LEN + 4 * width + CRC_LEN)
    faults = json.dumps({"raw_burst_bytes": burst})
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench_cli.py"), "sim", "serve", "--chamber", chamber, "--transport", "pty",
         "--pace", "fast", "--window", "16", "--faults", faults],  # the host's speed, not the board's
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().strip()
        # reference: the board's first connection writes `burst` plain bytes; read them with pyserial
        port = serial.serial_for_url(url, baudrate=BAUDRATE, exclusive=True, timeout=0)
        got = 0
        start = time.perf_counter()
        while got < burst:
            select.select([port.fileno()], [], [], 1.0)
            got += len(port.read(min(1 << 16, burst - got)))
        raw = time.perf_counter() - start
        port.close()
        time.sleep(0.1)  # let the board see the close before the next host opens
        session = Mk1Session.connect(url, timing=Timing(boot_timeout=3.0))
        session.measure(100)  # warm-up
        times = []
        for _ in range(msrs):
            start = time.perf_counter()
            block = session.measure(n)
            times.append(time.perf_counter() - start)
            assert len(block) == n
        resends = session.counters.resends
        session.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return raw, times, burst, resends


def bench_pty(chamber: str, n: int, rounds: int = 3, msrs: int = 3) -> dict[str, Any]:
    """Medians over `rounds` board processes (one raw read and `msrs` MSRs each): on a shared machine one
    measurement of a 20-100 ms operation mostly measures the neighbours."""
    raws: list[float] = []
    times: list[float] = []
    burst = resends = 0
    for _ in range(rounds):
        raw, msr_times, burst, round_resends = _pty_round(chamber, n, msrs)
        raws.append(raw)
        times.extend(msr_times)
        resends += round_resends
    msr, raw = statistics.median(times), statistics.median(raws)
    return {"pty_msr_s": msr, "pty_raw_s": raw, "pty_msr_vs_raw": msr / raw, "pty_bytes": burst,
            "pty_msr_rows_per_s": n / msr, "pty_resends": resends, "pty_msr_s_all": times, "pty_raw_s_all": raws}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--chamber", choices=["wt", "lt"], default="wt")
    parser.add_argument("--rounds", type=int, default=3, help="board processes for (b); medians are reported")
    parser.add_argument("--msrs", type=int, default=3, help="MSRs timed per board process in (b)")
    args = parser.parse_args()
    result = {"chamber": args.chamber, "rows": args.rows}
    result.update(bench_decode(args.chamber, max(args.rows, 20_000)))
    result.update(bench_pty(args.chamber, args.rows, args.rounds, args.msrs))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"(a) decode: {result['decode_rows_per_s']:,.0f} rows/s   link limit: {result['link_limit_rows_per_s']:,.0f} "
          f"rows/s ({result['wire_bytes_per_row']} wire bytes/row at 500 kbaud)   ratio {result['decode_vs_link']:,.0f}x "
          f"(goal >= 20x)")
    print(f"(b) MSR of {args.rows:,} rows over a pty: {result['pty_msr_s'] * 1e3:.0f} ms   plain pyserial read of the "
          f"same {result['pty_bytes']:,} bytes: {result['pty_raw_s'] * 1e3:.0f} ms   ratio {result['pty_msr_vs_raw']:.1f}x "
          f"(goal <= 2x; medians)")
    print(f"    every MSR (ms): {' '.join(f'{t * 1e3:.0f}' for t in result['pty_msr_s_all'])}   every plain read (ms): "
          f"{' '.join(f'{t * 1e3:.0f}' for t in result['pty_raw_s_all'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
