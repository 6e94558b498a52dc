"""Boards for the benchmarks, each in its own process on TCP: an emulated board at the real board's pace, or the
chamber authors' real firmware built by the harness. Each yields the socket:// URL the process prints first and
stops the process after, so that a benchmark times what a user's command meets, not an in-process shortcut."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, ContextManager, Iterator

ROOT = Path(__file__).resolve().parents[1]
FIRMWARE_BINARIES = {"wt": "wt_mk_1", "lt": "lt_mk_1"}


@contextmanager
def url_process(argv: list[str], stderr: IO[bytes] | int = subprocess.DEVNULL) -> Iterator[str]:
    """Run `argv`, a server that prints its URL as its first line; yield that URL; terminate the process after."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def emulated_board(kind: str, seed: int) -> ContextManager[str]:
    """`chamberlab sim serve` at the real board's pace (boot, rows, motors, ACKs), on a free TCP port."""
    return url_process([sys.executable, str(ROOT / "bench_cli.py"), "sim", "serve", "--chamber", kind,
                        "--transport", "tcp", "--pace", "real", "--seed", str(seed)])


def firmware_board(build_dir: Path, kind: str, stderr: IO[bytes] | int = subprocess.DEVNULL
                   ) -> ContextManager[str]:
    """The real Mk1 firmware of `kind` built in `build_dir` (make -C ../shared/firmware-harness B=...)."""
    return url_process([str(build_dir / FIRMWARE_BINARIES[kind]), "--listen", "127.0.0.1:0"], stderr=stderr)
