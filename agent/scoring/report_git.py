"""Which source the report's software came from: the git commit and whether the tree had uncommitted changes.

Why: a version string ("0.1.0") names every commit between two releases alike; a run is reproducible only from
its commit, and a dirty tree says the commit alone does not reproduce it. Read by running `git rev-parse HEAD`
and `git status --porcelain` in the project root; the runner is passed in (tests give a fake one). No git, no
repository, or a git that fails: the commit is "unknown", never an error that stops the report.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

UNKNOWN = "unknown"

Runner = Callable[..., Any]


@dataclass(frozen=True)
class SourceState:
    commit: str  # 40 hex digits, or UNKNOWN
    dirty: bool | None  # None: not known

    def text(self) -> str:
        if self.commit == UNKNOWN:
            return f"{UNKNOWN} (no git repository or no git where the report was written)"
        return self.commit + {True: " (dirty: uncommitted changes in the tree)", False: " (clean tree)",
                              None: " (clean or dirty not known)"}[self.dirty]


def project_root() -> Path:
    """The folder holding the chamberlab packages (agent/, protocols/, ...): the repository root when the project
    runs from a checkout."""
    return Path(__file__).resolve().parents[2]


def read_source_state(root: Path | None = None, run: Runner = subprocess.run) -> SourceState:
    """The commit and dirty flag of the tree at `root` (default: project_root())."""
    root = root or project_root()

    def git(*args: str) -> str | None:
        try:
            out = run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout if out.returncode == 0 else None

    head = (git("rev-parse", "HEAD") or "").strip()
    if len(head) < 7 or any(ch not in "0123456789abcdef" for ch in head):
        return SourceState(UNKNOWN, None)
    status = git("status", "--porcelain")
    return SourceState(head, None if status is None else bool(status.strip()))
