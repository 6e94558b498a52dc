"""The chamber authors' real Mk1 firmware as a test fixture: built once per test session, one board per test.

Why here: the driver and the emulated board are both judged against the real firmware (the firmware is right
where they disagree), so every test that needs it gets it the same way. The harness lives in
../shared/firmware-harness (found through CHAMBERLAB_SHARED); it is built with `make -C <harness> B=<tmp dir>`
because the shared folder is read-only. Tests skip with a clear reason only when g++ or the harness is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from conftest import shared_path

CHAMBERS = {"wt": "wt_mk_1", "lt": "lt_mk_1"}


def build_harness(build_dir: Path) -> Path:
    """Build both firmwares into `build_dir` (a few seconds); skips when g++ or the harness is missing."""
    harness = shared_path("firmware-harness")
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("needs g++ to build the real Mk1 firmware in ../shared/firmware-harness")
    result = subprocess.run(["make", "-s", "-C", str(harness), f"B={build_dir}", f"PYTHON={sys.executable}"],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"building the firmware harness failed:\n{result.stdout}\n{result.stderr}")
    return build_dir


@contextmanager
def real_board(build_dir: Path, chamber: str, *, log_path: Path | None = None, **env: str) -> Iterator[str]:
    """Serve one real firmware on 127.0.0.1; yields its socket:// URL. `env`: FW_TIME_SCALE, FW_FAULT, FW_SEED..."""
    with served_board(build_dir, chamber, log_path=log_path, **env) as board:
        yield board.url


@dataclass(frozen=True)
class ServedBoard:
    """A real firmware being served: its socket:// URL and the harness process (kill it to pull the plug)."""

    url: str
    process: subprocess.Popen


@contextmanager
def served_board(build_dir: Path, chamber: str, *, log_path: Path | None = None, **env: str) -> Iterator[ServedBoard]:
    """As real_board, also giving the harness process: a test can end the board as a pulled cable would."""
    binary = build_dir / CHAMBERS[chamber]
    environment = {**os.environ, **{k: str(v) for k, v in env.items()}}
    log = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL
    if log_path is not None:
        environment.setdefault("FW_LOG", str(log_path))
    process = subprocess.Popen([str(binary), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                               stderr=log, env=environment)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().decode().strip()
        if not url.startswith("socket://"):
            raise RuntimeError(f"expected the harness to print socket://HOST:PORT first, received {url!r}")
        yield ServedBoard(url, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log_path is not None:
            log.close()


@pytest.fixture(scope="session")
def firmware_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_harness(tmp_path_factory.mktemp("firmware-harness"))
