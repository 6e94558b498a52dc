"""Shared pytest fixtures: where ../shared lives (one helper, one env var), the claims catalogue and seeded
generators."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from bench_cli import shared_dir
from protocols.claims import load_claims

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A suite started as a shell's background job inherits SIGINT ignored, and every command a test starts would
    # inherit that too: the interrupt tests' Ctrl-C would then be lost. A handler (not an ignore) resets to the
    # default in an exec'd child, so the commands under test see Ctrl-C as a user's terminal sends it.
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _link_journals_in_a_temp_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Serial sessions keep a link journal per port (firmware_bridge/link_journal.py), by default in the user's
    ~/.local/state: the suite's go to a temporary folder instead (commands the tests start inherit it)."""
    if not os.environ.get("CHAMBERLAB_STATE_DIR"):
        os.environ["CHAMBERLAB_STATE_DIR"] = str(tmp_path_factory.mktemp("link-journals"))


def shared_path(*parts: str) -> Path:
    """A path inside ../shared (env CHAMBERLAB_SHARED); skips the test with a clear reason when absent."""
    root = shared_dir()
    path = root.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs {path} (set CHAMBERLAB_SHARED to the shared folder; default ../shared)")
    return path


@pytest.fixture
def shared() -> Path:
    return shared_path()


@pytest.fixture
def datasheets_dir() -> Path:
    return shared_path("datasheets")


@pytest.fixture(scope="module")
def claims():
    """The claims catalogue, loaded once per module (a module that needs other claims defines its own)."""
    return load_claims()


@pytest.fixture(scope="module")
def datasheets() -> Path:
    """../shared/datasheets, for module-scoped fixtures and tests (datasheets_dir is the per-test one)."""
    return shared_path("datasheets")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261201)
