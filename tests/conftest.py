"""Shared pytest fixtures: where ../shared lives (one helper, one env var) and seeded generators."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench_cli import shared_dir


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


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261201)
