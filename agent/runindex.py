"""An SQLite index of runs and their cells, so results from many runs can be listed and reported together.

Why SQLite: it is embedded (no server to start), ships with Python, and one file beside the run directories is
enough to answer "which runs exist, what did each grade and extract". The run directories stay the source of
truth (records, checks, figures); the index only points at them and can be rebuilt from them. A write that
fails (a full disk: "database or disk is full") is rolled back and raised as IndexWriteFailed naming the file.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    run_dir TEXT NOT NULL,
    started TEXT NOT NULL,
    finished TEXT,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,
    summary TEXT
);
CREATE TABLE IF NOT EXISTS cells (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    cell_id TEXT NOT NULL,
    claim_id TEXT NOT NULL,
    model TEXT NOT NULL,
    outcome TEXT,
    fidelity TEXT,
    flags TEXT,
    record TEXT,
    PRIMARY KEY (run_id, cell_id)
);
CREATE TABLE IF NOT EXISTS verdicts (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    claim_id TEXT NOT NULL,
    verdict TEXT NOT NULL,
    class TEXT,
    value TEXT,
    u TEXT,
    unit TEXT,
    PRIMARY KEY (run_id, claim_id)
);
"""


FIDELITY_VALUES = ("passed", "failed", "not_scored")
"""The cells table's fidelity column: the scorer's verdict on the cell's extraction; NULL until it is scored."""


@dataclass(frozen=True)
class CellScore:
    """What the index keeps of a cell's scores: fidelity (one of FIDELITY_VALUES) and the detector's flags."""

    fidelity: str
    flags: list[str]

    def __post_init__(self) -> None:
        if self.fidelity not in FIDELITY_VALUES:
            raise ValueError(f"fidelity {self.fidelity!r}: expected one of {', '.join(FIDELITY_VALUES)}")


@dataclass(frozen=True)
class RunRow:
    run_id: str
    run_dir: str
    started: str
    finished: str | None
    backend: str
    status: str
    summary: dict[str, Any]


class IndexWriteFailed(RuntimeError):
    """A write to the index that SQLite refused (a full disk, a read-only folder); names the index file."""


class RunIndex:
    """The index file; every write commits at once so a killed run leaves a consistent index."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(str(path))
        try:
            with self._writing():
                self._db.executescript(SCHEMA)
        except BaseException:
            self._db.close()
            raise

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One committed write; a refused one is rolled back and named with the index file."""
        try:
            with self._db:
                yield
        except sqlite3.Error as exc:
            raise IndexWriteFailed(f"{exc} writing {self.path}") from exc

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "RunIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_run(self, run_id: str, run_dir: Path, started: str, backend: str) -> None:
        with self._writing():
            self._db.execute(
                "INSERT INTO runs (run_id, run_dir, started, backend, status) VALUES (?, ?, ?, ?, 'running') "
                "ON CONFLICT(run_id) DO UPDATE SET status='running', finished=NULL",
                (run_id, str(run_dir), started, backend))

    def finish_run(self, run_id: str, finished: str, status: str, summary: dict[str, Any]) -> None:
        with self._writing():
            self._db.execute("UPDATE runs SET finished=?, status=?, summary=? WHERE run_id=?",
                             (finished, status, json.dumps(summary), run_id))

    def mark_interrupted(self, run_id: str, summary: dict[str, Any]) -> bool:
        """A run whose process is gone (killed, crashed, the machine stopped) while its row still says running:
        status `interrupted` and `summary`; False when the row no longer says running (it ended meanwhile)."""
        with self._writing():
            cur = self._db.execute("UPDATE runs SET status='interrupted', summary=? WHERE run_id=? AND "
                                   "status='running'", (json.dumps(summary), run_id))
        return cur.rowcount == 1

    def record_verdict(self, run_id: str, result: dict[str, Any]) -> None:
        m = result.get("measured") or {}
        with self._writing():
            self._db.execute(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, result["claim_id"], result["verdict"], result.get("class"), m.get("value"), m.get("u"),
                 m.get("unit")))

    def record_cell(self, run_id: str, cell_id: str, claim_id: str, model: str, outcome: str | None,
                    record: str | None, fidelity: str | None = None, flags: list[str] | None = None) -> None:
        """A cell's row; fidelity and flags stay NULL (not scored yet) unless given: see record_scores."""
        with self._writing():
            self._db.execute(
                "INSERT OR REPLACE INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, cell_id, claim_id, model, outcome, fidelity, None if flags is None else json.dumps(flags),
                 record))

    def record_scores(self, run_id: str, scores: dict[str, CellScore]) -> list[str]:
        """Write each scored cell's fidelity and flags into its row (one transaction); returns the cell ids in
        `scores` that have no row in `run_id` (scored records the index does not list), in order."""
        missing = []
        with self._writing():
            for cell_id, score in scores.items():
                cur = self._db.execute("UPDATE cells SET fidelity=?, flags=? WHERE run_id=? AND cell_id=?",
                                       (score.fidelity, json.dumps(score.flags), run_id, cell_id))
                if cur.rowcount == 0:
                    missing.append(cell_id)
        return sorted(missing)

    def runs(self) -> Iterator[RunRow]:
        for row in self._db.execute(
            "SELECT run_id, run_dir, started, finished, backend, status, summary FROM runs ORDER BY started"
        ):
            yield RunRow(*row[:6], summary=json.loads(row[6]) if row[6] else {})

    def cells(self, run_id: str) -> list[dict[str, Any]]:
        cur = self._db.execute(
            "SELECT cell_id, claim_id, model, outcome, fidelity, flags, record FROM cells WHERE run_id=? "
            "ORDER BY cell_id", (run_id,))
        keys = ("cell_id", "claim_id", "model", "outcome", "fidelity", "flags", "record")
        return [dict(zip(keys, row)) | {"flags": None if row[5] is None else json.loads(row[5])} for row in cur]

    def verdicts(self, run_id: str) -> list[dict[str, Any]]:
        cur = self._db.execute("SELECT claim_id, verdict, class, value, u, unit FROM verdicts WHERE run_id=? "
                               "ORDER BY claim_id", (run_id,))
        return [dict(zip(("claim_id", "verdict", "class", "value", "u", "unit"), r)) for r in cur]
