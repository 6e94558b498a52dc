"""A run's folder: its id, the lock that makes it one process's, resuming an interrupted one, its provenance.

Why a lock: two `run` processes on one runs folder used to pick the same second-resolution id (or both resume
the same interrupted run) and interleave their cell records, and both reported a clean run. Now a run folder is
created with an atomic mkdir (a clash takes the next free id, `<stamp>-2`, ...) and held with an exclusive
`flock` on `<run>/.run.lock` for the whole run. The kernel drops the lock when the process dies, even by
SIGKILL, so an interrupted run can be resumed by the next process while a live one is never touched: the
default resume skips a folder that is held (and starts a new run), and an explicit `--resume` of a held folder
is refused with RunLocked. A run that ended (`finished`, or `completed with errors`: it ran to its end with error
verdicts, engine errors or cells not run) is not resumed by default; an interrupted, failed or killed one is.

A run killed outright never wrote its end, so its index row said `running` forever (issue 31). The lock tells the
truth: a `running` row whose folder's lock no process holds is marked `interrupted` by the next `runs list` or
`run` (`mark_dead_runs`), with the verdicts the index had recorded by then, and `run --resume` continues it (the
agent's finished cells and the chamber verdicts decided before the kill are kept: agent/main_job.py).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

from agent.runindex import IndexWriteFailed, RunIndex
from protocols.exit_codes import DONE, INCOMPLETE, INTERRUPTED, RUN_STATUS

log = logging.getLogger(__name__)

LOCK_NAME = ".run.lock"
ENDED = (RUN_STATUS[DONE], RUN_STATUS[INCOMPLETE])
"""Index statuses of a run that went to its end: never resumed by default."""


class RunFolderError(ValueError):
    """A run folder that cannot be used as asked (not a directory)."""


class RunLocked(RunFolderError):
    """The run folder is held by another live `run` process."""


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def _try_lock(run_dir: Path) -> int | None:
    """An open descriptor holding the folder's exclusive lock, or None when another process holds it."""
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _lock_is_free(run_dir: Path) -> int | None:
    """An open descriptor holding `run_dir`'s lock when no process held it (its run's process is gone), without
    touching the lock file's content; None while a process holds it. The caller closes the descriptor."""
    try:
        fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # the folder is gone or unwritable: nothing to tell from the lock
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def mark_dead_runs(index: RunIndex) -> list[str]:
    """Mark `interrupted` every run the index says is running but whose process is gone (no process holds its
    folder's lock: the kernel drops a flock when its process dies, even by SIGKILL); returns their ids. The lock
    is held only while the row is updated, so a run is never marked while another process resumes it."""
    marked = []
    for row in list(index.runs()):
        if row.status != "running":
            continue
        run_dir = Path(row.run_dir)
        fd = _lock_is_free(run_dir) if run_dir.is_dir() else None
        if fd is None and run_dir.is_dir():
            continue  # a live process holds it
        try:
            verdicts = Counter(v["verdict"] for v in index.verdicts(row.run_id))
            summary = {"run_id": row.run_id, "run_dir": row.run_dir, "status": RUN_STATUS[INTERRUPTED],
                       "interrupted": True, "verdicts": dict(verdicts),
                       "note": ("its process ended without finishing (killed, or the machine stopped); `chamberlab "
                                f"run --resume {row.run_dir}` continues it" if run_dir.is_dir()
                                else "its process ended without finishing and its folder is gone")}
            if index.mark_interrupted(row.run_id, summary):
                marked.append(row.run_id)
        except IndexWriteFailed as exc:  # a read-only index: listed as it stands, named once
            log.warning("cannot mark run %s interrupted: %s", row.run_id, exc)
            break
        finally:
            if fd is not None:
                os.close(fd)
    return marked


def _holder(run_dir: Path) -> str:
    try:
        return (run_dir / LOCK_NAME).read_text().strip() or "?"
    except OSError:
        return "?"


@dataclass
class RunFolder:
    """An open run: `run_dir` is held by this process until `close()`; `index` is the runs folder's index."""

    run_id: str
    run_dir: Path
    index: RunIndex
    resumed: bool
    started: datetime
    _fd: int | None = field(default=None, repr=False)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
        self.index.close()

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def interrupted_runs(index: RunIndex, backend: str) -> list[Path]:
    """Unfinished runs on `backend` (newest first) up to the newest ended one: the candidates to resume."""
    found = []
    for row in reversed(list(index.runs())):
        if row.backend != backend:
            continue
        if row.status in ENDED:
            break
        if Path(row.run_dir).is_dir():
            found.append(Path(row.run_dir))
    return found


def open_run_folder(runs_dir: Path, backend: str, *, resume: Path | None = None, new: bool = False,
                    clock: Callable[[], datetime] = utc_now) -> RunFolder:
    """Resume `resume` (refused if another process holds it), else the newest interrupted run on `backend` that no
    process holds (unless `new`), else a new folder named by `clock`'s UTC second. The run is marked running in
    the index."""
    runs_dir = Path(runs_dir).resolve()
    index = RunIndex(runs_dir / "index.sqlite")
    try:
        mark_dead_runs(index)
        run_dir, fd = _choose(runs_dir, index, backend, resume, new, clock)
    except BaseException:
        index.close()
        raise
    started = clock()
    resumed = run_dir.name in {r.run_id for r in index.runs()} or resume is not None
    index.start_run(run_dir.name, run_dir, _iso(started), backend)
    return RunFolder(run_dir.name, run_dir, index, resumed, started, fd)


def resume_folder(resume: Path) -> Path:
    """The folder `--resume` names, refused (RunFolderError) unless it is a directory: checked before any chamber
    opens, and again when the run takes it."""
    run_dir = Path(resume).resolve()
    if not run_dir.is_dir():
        raise RunFolderError(f"--resume: expected a run directory, got {run_dir} (not a directory)")
    return run_dir


def _choose(runs_dir: Path, index: RunIndex, backend: str, resume: Path | None, new: bool,
            clock: Callable[[], datetime]) -> tuple[Path, int]:
    if resume is not None:
        run_dir = resume_folder(resume)
        fd = _try_lock(run_dir)
        if fd is None:
            raise RunLocked(f"run folder {run_dir} is in use by another run (pid {_holder(run_dir)}); "
                            "expected a folder no process holds: wait for it, or start a new run with --new")
        return run_dir, fd
    for run_dir in ([] if new else interrupted_runs(index, backend)):
        fd = _try_lock(run_dir)
        if fd is not None:
            return run_dir, fd
    stamp = clock().strftime("%Y%m%dT%H%M%SZ")
    runs_dir.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        run_dir = runs_dir / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            run_dir.mkdir()  # atomic: exactly one process creates a given folder
        except FileExistsError:
            continue
        fd = _try_lock(run_dir)
        if fd is not None:
            return run_dir, fd
    raise RunFolderError(f"{runs_dir}: no free run id for {stamp} after 999 tries")


class ChamberProvenance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["wt", "lt"]
    port: str
    emulated: bool
    config: str


class Provenance(BaseModel):
    """Where a run's results came from, for the top of the report (issue 19)."""

    model_config = ConfigDict(extra="forbid")

    software_version: str
    started_utc: str
    finished_utc: str
    seconds: float
    seed: int | None
    model: str | None
    chambers: list[ChamberProvenance]
    station: str | None
    limits: str | None
    claims_sources: list[str]
    git_commit: str | None = None  # the code the run was made with (None: no git where it ran)
    git_dirty: bool | None = None  # uncommitted changes in that tree (None: unknown)


def software_version() -> str:
    """The installed chamberlab package's version."""
    try:
        return metadata.version("chamberlab")
    except metadata.PackageNotFoundError:
        return "unknown (package not installed)"


def provenance(folder: RunFolder, *, finished: datetime, seed: int | None, model: str | None,
               chambers: list[dict[str, Any]], station: str | None, limits: str | None,
               claims_sources: list[str]) -> dict[str, Any]:
    """The run's provenance as summary["provenance"] holds it (validated, then plain JSON types), with the git
    commit of the code that made it, so a report written later names the run's code, not its own."""
    from agent.scoring.report_git import UNKNOWN, read_source_state

    source = read_source_state()
    return Provenance(git_commit=None if source.commit == UNKNOWN else source.commit, git_dirty=source.dirty,
                      software_version=software_version(), started_utc=_iso(folder.started),
                      finished_utc=_iso(finished), seconds=round((finished - folder.started).total_seconds(), 1),
                      seed=seed, model=model, chambers=[ChamberProvenance(**c) for c in chambers],
                      station=station, limits=limits, claims_sources=claims_sources).model_dump(mode="json")


def runs_job(runs_dir: Path) -> dict[str, Any]:
    """Every run in `runs_dir`'s index (none when there is no index yet), as JSON-ready rows; a run whose process
    is gone although its row said running is marked `interrupted` first (mark_dead_runs)."""
    path = Path(runs_dir).resolve() / "index.sqlite"
    if not path.exists():
        return {"runs": []}
    with RunIndex(path) as index:
        mark_dead_runs(index)
        return {"runs": [dict(r.__dict__) for r in index.runs()]}


def runs_text(d: dict[str, Any], runs_dir: Path) -> str:
    path = Path(runs_dir).resolve() / "index.sqlite"
    if not d["runs"] and not path.exists():
        return f"no runs yet (index {path} does not exist)"
    counts = lambda c: ", ".join(f"{k} {v}" for k, v in sorted(c.items()))  # noqa: E731
    return "\n".join([f"{'run':<18} {'status':<22} {'backend':<26} verdicts"]
                     + [f"{r['run_id']:<18} {r['status']:<22} {r['backend'][:26]:<26} "
                        f"{counts(r['summary'].get('verdicts', {}))}" for r in d["runs"]])
