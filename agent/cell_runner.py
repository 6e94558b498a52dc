"""The one way to run a plan of agent cells: plan → resume rule → run_cell → index rows → scores into the index.

Why one runner: the main job's cells (agent_job), the matrix (scoring/matrix) and `extract` used to run cells
each their own way, with two id schemes and two resume rules, and arm and repeat were parsed back out of strings.
Here a cell is planned with typed fields (`PlannedCell`: claim, model, arm, repeat), its id follows from them by
one rule (`cell_id`: short and stable — the model's label, not its whole endpoint and options, which the record's
run_start config and the index's model column keep), and the same fields are written, typed, on the record's
run_start (agent.record.CellKey).

The resume rule, the same for every caller: a planned cell whose record is complete (validate_record: run_start
to run_end, blobs intact) is kept and its index row written again from the record; an incomplete or invalid one
(a process killed mid-cell) is removed with its blobs and the cell runs again. A complete record that ended in
engine_error (a provider or HTTP fault, not the model's doing) is retried, up to `engine_error_retries` times
per cell, the failed attempts moved to `<cells_dir>/../retired/` for audit.

run_cell stays the one-cell primitive; this module only decides which cells to run and keeps the books. The
SQLite index is written from the calling thread only (worker threads run cells, nothing else).
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from agent.chamber_client import ChamberClient
from agent.datasheet.manifest import ManifestCache
from agent.loop import Budget, CellResult, run_cell
from agent.models.base import ModelClient
from agent.record import CellKey, RecordError, validate_record
from agent.runindex import CellScore, RunIndex
from agent.scoring.arms import ARMS, arm_setup
from agent.scoring.cells import RETIRED_DIR, slug
from protocols.claims import Claim
from protocols.files import write_json_atomic

log = logging.getLogger(__name__)


def model_label(spec: str) -> str:
    """A model's short name in cell ids: the model after `#` for openai-compat:<base_url>#<model>, else the spec
    without its `?options` (scripted:reader, claude-…, openai:<model>); `+text` after it when the spec carries
    tool calls as text (`?tools=text`), so a text run and a native run of one model never share cell ids. The
    full spec stays in the record's run_start config (endpoint, options) and in the index's model column."""
    from agent.models import ModelSpecError, parse_model_spec, split_model_options

    base = spec.split("?", 1)[0].strip()
    try:
        kind, model, _ = parse_model_spec(base)
        text = split_model_options(spec)[1].get("tools") == "text"
    except ModelSpecError:  # a hand-built client's name: itself
        return base
    return (model if kind == "openai-compat" else base) + ("+text" if text else "")


def model_labels(models: Sequence[str]) -> dict[str, str]:
    """Each spec's label in one plan: model_label, plus a short hash of the whole spec (endpoint and options)
    where two different specs would otherwise share a label (one model at two temperatures). The same list of
    specs always gives the same labels, so a resumed plan finds its cells."""
    base = {m: model_label(m) for m in dict.fromkeys(models)}
    shared = Counter(slug(label) for label in base.values())
    return {m: f"{label}-{hashlib.sha256(m.strip().encode()).hexdigest()[:8]}" if shared[slug(label)] > 1 else label
            for m, label in base.items()}


def cell_id(model: str, claim_id: str, arm: str = "normal", repeat: int = 1, *, label: str | None = None) -> str:
    """The one id scheme: claim, file-safe model label (`label`, default model_label of the spec), arm, repeat
    ("dps310-operating-range--scripted_reader--normal--r1"). It names the record file and is the record's run id;
    nothing parses it back."""
    return f"{claim_id}--{slug(label or model_label(model))}--{slug(arm)}--r{repeat}"


@dataclass(frozen=True)
class PlannedCell:
    """One cell of a plan: which claim, which model spec (the full one: endpoint and options), which probe arm,
    which repeat (from 1); `label` names the model in the cell id (default: model_label of the spec)."""

    claim_id: str
    model: str
    arm: str = "normal"
    repeat: int = 1
    label: str | None = None

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise ValueError(f"cell {self.claim_id}/{self.model}: arm {self.arm!r}, expected one of {', '.join(ARMS)}")
        if self.repeat < 1:
            raise ValueError(f"cell {self.claim_id}/{self.model}: repeat {self.repeat}, expected >= 1")

    @property
    def cell_id(self) -> str:
        return cell_id(self.model, self.claim_id, self.arm, self.repeat, label=self.label)

    @property
    def run_id(self) -> str:
        """The record's run id: the cell id (kept under this name for callers that name records by it)."""
        return self.cell_id

    def key(self) -> CellKey:
        return CellKey(cell_id=self.cell_id, arm=self.arm, repeat=self.repeat)


def plan_cells(models: Sequence[str], claim_ids: Sequence[str], repeats: int = 1,
               arms: Sequence[str] = ("normal",)) -> list[PlannedCell]:
    """Models × arms × claims × repeats, in that order; each model named in cell ids by its label in this plan
    (model_labels)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    labels = model_labels(models)
    return [PlannedCell(c, m, a, r, labels[m]) for m in models for a in arms for c in claim_ids
            for r in range(1, repeats + 1)]


def next_repeat(cells_dir: Path, model: str, claim_id: str, arm: str = "normal") -> int:
    """The first repeat number with no record in `cells_dir`: a one-off cell (`extract`) that runs again
    becomes the next repeat instead of being taken for a finished cell."""
    pattern = re.compile(re.escape(cell_id(model, claim_id, arm, 1)[:-1]) + r"(\d+)\.jsonl$")
    taken = {int(m.group(1)) for p in Path(cells_dir).glob("*.jsonl") if (m := pattern.fullmatch(p.name))}
    return next(n for n in range(1, len(taken) + 2) if n not in taken)


# --------------------------------------------------------------------------------------------- the resume rule
def finished_outcome(record: Path) -> str | None:
    """The run_end outcome of a complete record (validate_record), or None when it is absent, cut short or
    invalid."""
    try:
        return validate_record(record)[-1].outcome
    except (RecordError, ValueError, OSError):
        return None


def _remove(cells_dir: Path, cid: str) -> None:
    (cells_dir / f"{cid}.jsonl").unlink(missing_ok=True)
    shutil.rmtree(cells_dir / f"{cid}.blobs", ignore_errors=True)


def retired_attempts(cells_dir: Path, cid: str) -> int:
    """How many engine_error attempts of the cell are retired beside `cells_dir`."""
    return len(list((Path(cells_dir).parent / RETIRED_DIR).glob(f"{cid}.*.jsonl")))


def _retire(cells_dir: Path, cid: str) -> None:
    """Move an engine_error record (and its blobs) to `<cells_dir>/../retired/<cell_id>.<n>.*`."""
    retired = cells_dir.parent / RETIRED_DIR
    retired.mkdir(exist_ok=True)
    n = retired_attempts(cells_dir, cid) + 1
    (cells_dir / f"{cid}.jsonl").rename(retired / f"{cid}.{n}.jsonl")
    blobs = cells_dir / f"{cid}.blobs"
    if blobs.exists():
        blobs.rename(retired / f"{cid}.{n}.blobs")


Decision = Literal["keep", "run", "restart", "retry"]


def resume_decision(cells_dir: Path, cell: PlannedCell, engine_error_retries: int) -> tuple[Decision, str | None]:
    """What the resume rule does with `cell` (and the kept outcome): keep a complete record, retry an engine_error
    one while retries remain, restart a cut-short one, run one that has none. Retry and restart clear the way."""
    record = cells_dir / f"{cell.cell_id}.jsonl"
    if not record.exists():
        return "run", None
    outcome = finished_outcome(record)
    if outcome is None:
        _remove(cells_dir, cell.cell_id)
        return "restart", None
    if outcome == "engine_error" and retired_attempts(cells_dir, cell.cell_id) < engine_error_retries:
        _retire(cells_dir, cell.cell_id)
        return "retry", None
    return "keep", outcome


# --------------------------------------------------------------------------------------------- running a plan
@dataclass
class CellDone:
    """One planned cell after the runner: kept from before, run now (result), or failed before a result."""

    cell: PlannedCell
    record: Path
    outcome: str | None
    kept: bool = False
    result: CellResult | None = None
    error: str | None = None


@dataclass
class RunnerReport:
    """What the runner did with a plan; `counts` has kept, restarted, retried_engine_error, ran, failed."""

    planned: int
    done: list[CellDone] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)  # of the cells run now
    phase_two: Counter = field(default_factory=Counter)  # of the cells run now
    failures: list[dict[str, str]] = field(default_factory=list)
    engine_errors: list[str] = field(default_factory=list)  # cells whose latest record is engine_error


@dataclass
class CellIndex:
    """Where the runner writes a row per cell: the runs index and the run's id in it."""

    index: RunIndex
    run_id: str

    def row(self, done: CellDone) -> None:
        self.index.record_cell(self.run_id, done.cell.cell_id, done.cell.claim_id, done.cell.model, done.outcome,
                               str(done.record))


def run_cells(
    cells: Sequence[PlannedCell],
    *,
    claims: Mapping[str, Claim],
    cells_dir: Path,
    datasheets_dir: Path,
    client_factory: Callable[[str], ModelClient],
    clock: Callable[[], float],
    clock_for: Callable[[PlannedCell], Callable[[], float]] | None = None,
    concurrency: int = 1,
    budget: Budget = Budget(),
    sleep: Callable[[float], None] | None = None,
    chamber: ChamberClient | None = None,
    decoy_for: Callable[[Claim], Path] | None = None,
    datasheet_for: Callable[[Claim], Path] | None = None,
    engine_error_retries: int = 2,
    index: CellIndex | None = None,
    extractions_dir: Path | None = None,
    on_cell: Callable[[CellDone], None] | None = None,
) -> RunnerReport:
    """Run every planned cell the resume rule does not keep, `concurrency` at a time, into `cells_dir`.

    `client_factory` gives the model client of a model spec; `clock_for` gives each cell its own clock (records
    then do not depend on scheduling), else all read `clock`. `datasheet_for` picks a claim's PDF (default: its
    file in `datasheets_dir`); `decoy_for` the wrong-content arm's decoy (default: default_decoy). A cell that
    raises is reported in `failures`, never scored as a pass, and the others go on. `index` gets a row per kept
    or finished cell; `extractions_dir` a JSON summary per finished cell; `on_cell` hears of each cell, from
    the calling thread."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    missing = sorted({c.claim_id for c in cells} - set(claims))
    if missing:
        raise KeyError(f"unknown claim id(s) {missing}")
    ids = [c.cell_id for c in cells]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"cells planned twice: {twice}; expected each (claim, model, arm, repeat) once (two "
                         "specs sharing a model label need plan_cells' labels)")
    cells_dir = Path(cells_dir)
    cells_dir.mkdir(parents=True, exist_ok=True)
    if extractions_dir is not None:
        Path(extractions_dir).mkdir(parents=True, exist_ok=True)
    report = RunnerReport(planned=len(cells))

    def finish(done: CellDone) -> None:  # the calling thread only: the index connection lives here
        report.done.append(done)
        if done.error is not None:
            report.counts["failed"] += 1
            report.failures.append({"run_id": done.cell.cell_id, "error": done.error})
        elif done.kept:
            report.counts["kept"] += 1
        elif done.result is not None:
            report.counts["ran"] += 1
            report.outcomes[done.result.outcome] += 1
            report.phase_two[done.result.phase_two] += 1
        if index is not None and done.error is None:
            index.row(done)
        if on_cell is not None:
            on_cell(done)

    todo = []
    for cell in cells:
        decision, outcome = resume_decision(cells_dir, cell, engine_error_retries)
        if decision == "keep":
            finish(CellDone(cell, cells_dir / f"{cell.cell_id}.jsonl", outcome, kept=True))
            continue
        if decision == "restart":
            report.counts["restarted"] += 1
        elif decision == "retry":
            report.counts["retried_engine_error"] += 1
        todo.append(cell)

    readings = ManifestCache(keep_readings=True)  # each datasheet read and indexed once for all cells
    pdf_of = datasheet_for or (lambda claim: Path(datasheets_dir) / claim.identity.filename)
    decoy_of = decoy_for or (lambda claim: default_decoy(claim, datasheets_dir))

    def one(cell: PlannedCell) -> CellDone:
        claim = claims[cell.claim_id]
        record = cells_dir / f"{cell.cell_id}.jsonl"
        try:
            pdf = pdf_of(claim)
            setup = arm_setup(cell.arm, pdf, decoy_pdf=decoy_of(claim) if cell.arm == "wrong-content" else None,
                              cache=readings)
            result = run_cell(claim, model=setup.model(client_factory(cell.model)), datasheet=pdf,
                              record_dir=cells_dir, clock=clock_for(cell) if clock_for is not None else clock,
                              budget=budget, sleep=sleep, tools=setup.tools, chamber=chamber,
                              surface_version=setup.surface_version, cell=cell.key(), model_spec=cell.model)
        except Exception as e:  # one broken cell must not stop the others; reported, never scored as a pass
            log.warning("cell %s failed: %s", cell.cell_id, e)
            return CellDone(cell, record, finished_outcome(record), error=f"{type(e).__name__}: {e}")
        if extractions_dir is not None:
            write_json_atomic(Path(extractions_dir) / f"{cell.cell_id}.json", extraction_payload(cell, result))
        return CellDone(cell, result.record, result.outcome, result=result)

    if concurrency == 1:
        for cell in todo:
            finish(one(cell))
    else:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            futures: list[Future[CellDone]] = [pool.submit(one, c) for c in todo]
            for future in as_completed(futures):
                finish(future.result())
    # each cell's latest outcome is already known (kept: its record's, ran: its result's, failed: what it left):
    # no second validate_record (which re-reads every record and re-hashes its blobs) per cell
    report.engine_errors = sorted(d.cell.cell_id for d in report.done if d.outcome == "engine_error")
    return report


def extraction_payload(cell: PlannedCell, result: CellResult) -> dict[str, Any]:
    """A finished cell's extraction and phase-two outcome as one JSON object (the matrix's extractions/)."""
    return {"run_id": cell.cell_id, "claim_id": cell.claim_id, "model": cell.model, "arm": cell.arm,
            "repeat": cell.repeat, "outcome": result.outcome, "extraction": result.extraction,
            "extraction_sha256": result.extraction_sha256, "phase_two": result.phase_two,
            "chamber_outcome": result.chamber_outcome, "record": str(result.record)}


def default_decoy(claim: Claim, datasheets_dir: Path) -> Path:
    """The paper's decoy is the A4988 datasheet; an A4988 claim gets the DPS310 one."""
    from protocols.datasheets import datasheet_for

    part = "DPS310" if claim.datasheet == "A4988" else "A4988"
    return Path(datasheets_dir) / datasheet_for(part).filename


# --------------------------------------------------------------------------------------------- scores
def cell_score(row: Mapping[str, Any]) -> CellScore:
    """The index's view of one scored row of score_paths: fidelity passed / failed / not_scored, and its flags."""
    fid = row.get("fidelity") or {}
    passed = fid.get("passed")
    fidelity = "not_scored" if passed is None or fid.get("scored") is False else ("passed" if passed else "failed")
    return CellScore(fidelity, list(row.get("flags") or []))


def score_run(paths: Iterable[Path], scores_file: Path, *, claims: Mapping[str, Claim],
              datasheets_dir: Path | None, prices: Any = None, index: CellIndex | None = None) -> dict[str, Any]:
    """Score the records under `paths` (agent.scoring.score), write `scores_file`, and write each scored cell's
    fidelity and flags into its index row; returns the scores. A scored record the index has no row for (one
    not in this run's plan) is left out of the index and logged."""
    from agent.scoring.score import score_paths

    scores = score_paths(list(paths), claims=claims, datasheets_dir=datasheets_dir, prices=prices)
    write_json_atomic(scores_file, scores)
    if index is not None:
        rows = {str(r["run_id"]): cell_score(r) for r in scores.get("cells") or [] if r.get("source") == "record"}
        unlisted = index.index.record_scores(index.run_id, rows)
        if unlisted:
            log.info("scored records without an index row in run %s: %s", index.run_id, ", ".join(unlisted))
    return scores


def report_json(report: RunnerReport) -> dict[str, Any]:
    """The runner's counts as one flat JSON object (what `matrix` prints): only counts that happened appear."""
    flat: Counter = Counter()
    flat.update({("skipped" if k == "kept" else k): v for k, v in report.counts.items()})
    flat.update({f"outcome:{k}": v for k, v in report.outcomes.items()})
    flat.update({f"phase_two:{k}": v for k, v in report.phase_two.items()})
    return {"planned": report.planned, **{k: v for k, v in flat.items() if v}, "failures": report.failures,
            "engine_errors": report.engine_errors}

