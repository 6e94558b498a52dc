"""The worker beside a chamber: holds the chamber's lease, runs its queued experiments one at a time, answers its
real-time sessions, and hands the chamber back safe.

Why a lease with a heartbeat and not only row locks: a worker killed with SIGKILL cannot say so. Its lease goes
stale after `ttl` seconds; whoever notices (the API's reaper, or the next worker taking the chamber) ends its
experiment FAILED with the reason and the rows it kept — never re-run, because the instructions already sent
had effects — and the next worker applies the chamber's safe state before anything else. Rows are stored as each
chunk arrives, so a killed worker loses none it received. Experiments run through the bench's own protocol
runner (chamber.protocol_runner) and driver, so the lab's rules are the bench's rules: validation before the first
byte, a stop between rows, the safe state on every way out (chamber.safe_state.apply_safe_state).

Why it sleeps on wake-ups (issue 32: an idle worker polled every 20 ms): it looks at the database once, then waits
until the API says there is work for its chamber (wakeups.py: in-process, or LISTEN/NOTIFY on PostgreSQL), with a
slow fallback poll. Between experiments it restores the chamber's standard settings instead of resetting the board
when the last one ended safe (preparation.py); the lab entry's `prepare: reset` keeps the reset.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from chamber.errors import ChamberError
from chamber.protocol_language import ProtocolError, parse_protocol
from chamber.protocol_runner import run_protocol
from chamber.public_csv import PublicCsvWriter, header
from chamber.safe_state import apply_safe_state
from chamber.stop import StopRequest
from firmware_bridge.errors import BridgeError
from protocols.remote_lab import session_store, store
from protocols.remote_lab.lab_file import Lab
from protocols.remote_lab.preparation import Standard, read_standard, restore_standard
from protocols.remote_lab.realtime import answer_call, no_operator
from protocols.remote_lab.results import build_zip
from protocols.remote_lab.wakeups import Wakeups

log = logging.getLogger(__name__)

LEASE_TTL_S = 6.0
"""A worker whose heartbeat is older than this is taken for dead (heartbeats go every HEARTBEAT_S)."""
HEARTBEAT_S = 2.0
PROGRESS_EVERY_S = 0.2


class WorkerRefused(Exception):
    """A worker that cannot serve its chamber (another live worker holds it; the board is not what the lab says)."""


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return f"{type(getattr(exc, 'orig', None) or exc).__name__}: {text.splitlines()[0] if text else ''}"


def default_worker_id(chamber_id: str) -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{chamber_id}"


def open_board(lab: Lab, chamber_id: str, stack: contextlib.ExitStack, seed: int = 0,
               journal_dir: Path | None = None) -> Any:
    """The chamber of the lab file, connected through the driver (an emulated board is started on a pty here and
    stops with `stack`; a serial one keeps its link journal in `journal_dir`, so a board a killed worker left
    mid-session is found at once: firmware_bridge/recovery.py); refused when the board announces another kind or a
    config the lab file does not list."""
    from chamber import open_chamber

    entry = lab.entry(chamber_id)
    url = entry.board
    if (spec := entry.emulated) is not None:
        from chamber.emulated import start_emulated_board

        url = start_emulated_board(stack, spec, seed=seed)
    chamber = open_chamber(url, backend="serial", limits=lab.limits[chamber_id], journal_dir=journal_dir)
    stack.callback(chamber.close)
    if chamber.layout.chamber != entry.chamber_kind or chamber.config not in entry.configs:
        raise WorkerRefused(f"chamber {chamber_id}: the board at {entry.board} announces {chamber.layout.chamber}/"
                            f"{chamber.config}; the lab file expects {entry.chamber_kind} in {', '.join(entry.configs)}")
    return chamber


def reap(engine: Engine, ttl: float = LEASE_TTL_S) -> list[str]:
    """End the experiments whose worker stopped mid-run (no live lease by the database's clock): FAILED with the
    reason and the rows it kept (downloadable); never re-queued. Returns their ids. One query when none is."""
    ended = []
    for chamber_id in sorted({e["chamber_id"] for e in store.orphaned(engine, ttl)}):
        ended += fail_orphans(engine, chamber_id, ttl, f"no heartbeat for over {ttl:g} s")
    return ended


def fail_orphans(engine: Engine, chamber_id: str, ttl: float, why: str) -> list[str]:
    """End the chamber's RUNNING experiments whose worker is gone (`why`), keeping their rows. The lease is read
    again first: an experiment of the chamber's live worker (one that took the chamber meanwhile) is left alone."""
    ended = []
    holder = store.chamber_rows(engine, ttl).get(chamber_id, {})
    live = holder.get("worker_id") if holder.get("alive") else None
    for experiment in store.running_on(engine, chamber_id):
        if experiment["worker_id"] == live:
            continue
        reason = (f"worker {experiment['worker_id']} stopped mid-experiment ({why}) at instruction "
                  f"{experiment['current_instruction']} of {experiment['total_instructions']}; not run again (the "
                  "instructions sent had effects); the rows it measured are in the download")
        if finish_with_rows(engine, experiment["experiment_id"], "FAILED", reason, time.time(), chamber_id,
                            worker_id=experiment["worker_id"]):
            ended.append(experiment["experiment_id"])
    return ended


def finish_with_rows(engine: Engine, experiment_id: str, status: str, reason: str | None, now: float,
                     chamber_id: str, config: str | None = None, worker_id: str | None = None,
                     extra: dict[str, Any] | None = None) -> bool:
    """Build the zip of what was measured and end the experiment with it (one transaction). `extra`: more
    metadata (how the chamber was prepared)."""
    head, chunks, n_rows = store.rows_of(engine, experiment_id)
    row = store.get_experiment(engine, experiment_id) or {}
    data, checksum = build_zip(experiment_id, head, chunks, n_rows, {
        "chamber_id": chamber_id, "config": config or row.get("config"), "status": status, "reason": reason,
        "tag": row.get("tag"), "user_id": row.get("user_id"), "submitted_on": row.get("submitted_on"),
        "started_on": row.get("started_on"), "finished_on": now, **(extra or {})})
    return store.finish(engine, experiment_id, status=status, now=now, reason=reason, zip_data=data,
                        checksum=checksum, worker_id=worker_id)


class Heartbeats:
    """One lease-renewing thread per process: every HEARTBEAT_S, one transaction renews the lease of every chamber
    this process serves (five idle chambers cost one transaction per beat, not five). A worker whose lease another
    worker took is told through its `lost` event."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._workers: dict[str, "ChamberWorker"] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, worker: "ChamberWorker") -> None:
        with self._lock:
            self._workers[worker.chamber_id] = worker
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lab-heartbeats", daemon=True)
                self._thread.start()

    def remove(self, worker: "ChamberWorker") -> None:
        with self._lock:
            if self._workers.get(worker.chamber_id) is worker:
                del self._workers[worker.chamber_id]

    def beat(self) -> None:
        with self._lock:
            workers = [w for w in self._workers.values() if not w.lost.is_set()]
        try:
            lost = store.heartbeat_many(self.engine, [(w.chamber_id, w.worker_id, w.status, w.detail)
                                                      for w in workers])
        except SQLAlchemyError as exc:  # the database away for a moment: the next beat tries again
            log.warning("heartbeat failed: %s", _first_line(exc))
            return
        for worker in workers:
            if worker.chamber_id in lost:
                log.error("%s: lease lost to another worker; stopping", worker.chamber_id)
                worker.lost.set()
                worker.wakeups.notify_local(worker.topic)

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.beat()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class ChamberWorker:
    """Serves one chamber until `stop` is set or its lease is lost. `open_chamber(stack)` connects the board."""

    def __init__(self, engine: Engine, lab: Lab, chamber_id: str, *, worker_id: str | None = None,
                 clock: Callable[[], float] = time.time, ttl: float = LEASE_TTL_S,
                 open_chamber: Callable[[contextlib.ExitStack], Any] | None = None, wakeups: Wakeups | None = None,
                 heartbeats: Heartbeats | None = None, journal_dir: Path | None = None):
        self.engine, self.lab, self.chamber_id = engine, lab, chamber_id
        self.wakeups = wakeups or Wakeups()
        self.heartbeats = heartbeats  # None: serve() renews this chamber's lease on a thread of its own
        self.topic = f"chamber:{chamber_id}"
        self.prepare_mode = lab.entry(chamber_id).prepare
        self.standard: Standard | None = None  # the settings after the last reset and safe state (preparation.py)
        self.clean_end = False  # the last experiment ended with its safe state read back, no reconnection
        self._reconnects_seen = 0
        self.prepared: dict[str, Any] | None = None  # the last preparation, for the experiment's metadata
        self.preparations: list[tuple[str, float]] = []  # (reset | restore, seconds) of each experiment
        self.worker_id = worker_id or default_worker_id(chamber_id)
        self.clock, self.ttl = clock, ttl
        self.mode = lab.entry(chamber_id).mode
        self.safe = lab.safe[chamber_id]
        self._open = open_chamber or (lambda stack: open_board(lab, chamber_id, stack, journal_dir=journal_dir))
        self.chamber: Any = None
        self.status, self.detail = "LOADING", None
        self.lost = threading.Event()
        self.experiments_run = 0
        self.current: tuple[str | None, StopRequest] | None = None  # what runs (experiment id, None: a session
        # call) and its stop request
        self.unfinished: list[tuple[str, str | None]] = []  # ended experiments the database did not take yet
        self.final_safe: Any = None  # the safe state applied on the way out (chamber.safe_state.SafeOutcome)
        self.started = threading.Event()  # set once the board is connected and made safe (or, by whoever runs
        # serve(), once it has ended and its error is recorded)

    # --------------------------------------------------------------------------------------- lifecycle
    def take(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Take the lease and end what a dead predecessor left running. A holder whose heartbeat is not renewed
        (a process killed a moment ago, this host restarted) is waited out for up to `ttl`; one that renews it is
        alive: WorkerRefused names it."""
        holder = store.take_lease(self.engine, self.chamber_id, self.worker_id, self.ttl)
        if holder is not None:
            sleep(max(0.0, self.ttl - float(holder["age_s"] or 0.0)) + HEARTBEAT_S)
            holder = store.take_lease(self.engine, self.chamber_id, self.worker_id, self.ttl)
            if holder is not None:
                raise WorkerRefused(f"chamber {self.chamber_id} is served by worker {holder['worker_id']} (heartbeat "
                                    f"{float(holder['age_s'] or 0.0):.1f} s ago); one worker per chamber")
        fail_orphans(self.engine, self.chamber_id, self.ttl, "its lease was taken over")
        session_store.end_sessions_of(self.engine, self.chamber_id, f"chamber {self.chamber_id} was restarted")

    def serve(self, stop: threading.Event) -> None:
        """Take the lease, connect, make safe, then serve until `stop`; the chamber is left safe on every way out."""
        self.take()
        beats = self.heartbeats or Heartbeats(self.engine)
        beats.add(self)
        watch = threading.Thread(target=self._watch, args=(stop,), daemon=True, name=f"watch-{self.chamber_id}")
        watch.start()
        try:
            with contextlib.ExitStack() as stack:
                self._connect(stack, stop)
                try:
                    self._loop(stop)
                finally:
                    if self.chamber is not None:
                        self.final_safe = apply_safe_state(self.chamber, self.safe)
                        log.info("%s: %s", self.chamber_id, self.final_safe.text)
        finally:
            self.lost.set()
            self.wakeups.notify_local(self.topic)
            watch.join(timeout=5)
            beats.remove(self)
            if beats is not self.heartbeats:
                beats.close()
            store.release_lease(self.engine, self.chamber_id, self.worker_id)

    def _connect(self, stack: contextlib.ExitStack, stop: threading.Event) -> None:
        """Connect the board and make it safe; a board that cannot be opened refuses the chamber in one line (it is
        not served: no worker loops on a board that is not there)."""
        try:
            self.chamber = self._open(stack)
        except (ChamberError, BridgeError, OSError) as exc:
            raise WorkerRefused(f"chamber {self.chamber_id}: the board at {self.lab.entry(self.chamber_id).board} "
                                f"did not answer ({_first_line(exc)}); not served") from None
        outcome = apply_safe_state(self.chamber, self.safe)  # whatever the last holder left running
        self._say("READY" if outcome.confirmed else "ERROR", None if outcome.confirmed else outcome.text)
        self.started.set()

    def _watch(self, stop: threading.Event) -> None:
        """While an experiment or a call runs, look at its status every HEARTBEAT_S and at once on the chamber's
        wake-ups (a cancel), so a cancel or a stop reaches it inside a long WAIT too; while idle, only sleep."""
        while not stop.is_set() and not self.lost.is_set():
            since = self.wakeups.generation(self.topic)
            current = self.current
            try:
                if current is not None and current[0] is not None:
                    status = store.status_of(self.engine, current[0])
                    if status == "STOPPING":
                        current[1].request("canceled")
                    elif status not in store.ACTIVE:  # ended by the reaper while alive: stop, it is over
                        current[1].request("ended elsewhere")
            except SQLAlchemyError as exc:  # the database away for a moment: the next look tries again
                log.warning("%s: status check failed: %s", self.chamber_id, _first_line(exc))
            self.wakeups.wait(self.topic, since, HEARTBEAT_S if current is not None else None, stop=stop)
        current = self.current
        if current is not None:  # stopping: an experiment inside a long WAIT stops now, not when the WAIT ends
            current[1].request("worker stopping")

    def _say(self, status: str, detail: str | None = None) -> None:
        self.status, self.detail = status, detail
        store.heartbeat(self.engine, self.chamber_id, self.worker_id, status, detail)

    def _loop(self, stop: threading.Event) -> None:
        """Serve until stopped; a database away for a while (a PostgreSQL restart, a long SQLite lock) pauses the
        worker, it does not end it."""
        while not stop.is_set() and not self.lost.is_set():
            try:
                self._turn(stop)
            except SQLAlchemyError as exc:
                log.warning("%s: the lab database failed (%s); trying again in 1 s", self.chamber_id, _first_line(exc))
                stop.wait(1.0)

    def _turn(self, stop: threading.Event) -> None:
        """One turn of the loop: finish what is owed, recover, then one experiment or call, else sleep until the
        chamber's wake-up (or the slow fallback poll)."""
        since = self.wakeups.generation(self.topic)
        if self.unfinished:  # nothing new starts before every experiment taken has ended
            self._retry_unfinished()
            stop.wait(1.0)
            return
        if self.status == "ERROR" and not self._recover(stop):
            return
        if self.mode == "real-time":
            call = session_store.next_call(self.engine, self.chamber_id)
            if call is not None:
                self._answer(call)
                return
        else:
            claimed = store.claim_next(self.engine, self.chamber_id, self.worker_id, self.clock())
            if claimed is not None:
                self.run_experiment(claimed, stop)
                return
        self.wakeups.wait(self.topic, since, stop=stop)

    def _recover(self, stop: threading.Event) -> bool:
        """After a lost board: reset it and make it safe; False (after a pause) while it does not answer."""
        try:
            self.chamber.reset()
            outcome = apply_safe_state(self.chamber, self.safe)
            if outcome.confirmed:
                self._say("READY")
                return True
            self._say("ERROR", outcome.text)
        except (ChamberError, BridgeError, OSError) as exc:
            self._say("ERROR", f"board not answering: {type(exc).__name__}: {exc}")
        stop.wait(2.0)
        return False

    # --------------------------------------------------------------------------------------- experiments
    def run_experiment(self, claimed: store.Claimed, stop: threading.Event) -> str:
        """Run one claimed experiment to its end; returns its final status."""
        self._say("EXECUTING")
        chamber, experiment_id = self.chamber, claimed.experiment_id
        halt = StopRequest()
        last = [0.0]

        def progress(instruction: Any) -> None:
            now = time.monotonic()
            index = instruction_index[id(instruction)]
            if now - last[0] >= PROGRESS_EVERY_S or index == len(protocol.instructions):
                last[0] = now
                status = store.set_progress(self.engine, experiment_id, index)
                if status == "STOPPING":
                    halt.request("canceled")
                elif status not in store.ACTIVE:
                    halt.request("ended elsewhere")
            if stop.is_set() or self.lost.is_set():
                halt.request("worker stopping")

        def keep(frame: Any) -> None:
            buffer = io.StringIO()
            PublicCsvWriter(buffer, frame.names).write_frame(frame)
            head, _, rows = buffer.getvalue().partition("\n")
            if not store.append_rows(self.engine, experiment_id, head, rows, len(frame)):
                halt.request("ended elsewhere")
            elif store.status_of(self.engine, experiment_id) == "STOPPING":
                halt.request("canceled")

        status, reason = "FAILED", None
        self.prepared = None
        self.current = (experiment_id, halt)
        self.wakeups.notify_local(self.topic)  # the watch looks at it from now on
        try:
            store.set_header(self.engine, experiment_id, header(chamber.layout.names))
            protocol = parse_protocol(claimed.instructions, source=experiment_id)
            instruction_index = {id(ins): i for i, ins in enumerate(protocol.instructions, start=1)}
            if claimed.config != chamber.config:
                raise ChamberError(f"chamber {self.chamber_id} is in config {chamber.config}; the experiment asked "
                                   f"for {claimed.config}")
            self.prepare()  # every experiment starts from the standard settings: restored, or after a reset
            outcome = run_protocol(chamber, protocol, on_frame=keep, stop=halt, wait=halt.wait,
                                   ask=no_operator, on_instruction=progress)
            if outcome.error:
                reason = f"{outcome.error['type']}: {outcome.error['message']}"
                self._say("ERROR", reason)
            elif outcome.interrupted:
                status = "CANCELED" if halt.signal_name == "canceled" else "FAILED"
                reason = ("canceled while running; the rows measured are in the download" if status == "CANCELED"
                          else f"the worker stopped ({halt.signal_name}) at line {outcome.stopped_at_line}")
            else:
                status = "DONE"
        except ProtocolError as exc:
            reason = f"refused by the chamber: {exc}"
        except (ChamberError, BridgeError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if claimed.config == chamber.config:
                self._say("ERROR", reason)
        except SQLAlchemyError as exc:  # the rows could not be kept (a full disk): stop, keep what was stored
            reason = f"the lab's database refused the rows ({_first_line(exc)}); the rows stored before are kept"
            log.error("%s: %s: %s", self.chamber_id, experiment_id, reason)
        self.current = None
        reconnects = chamber.link_stats().get("reconnects", 0) if self.chamber is not None else 0
        self._end(experiment_id, status, reason, chamber.config)
        safe = apply_safe_state(chamber, self.safe)
        self.clean_end = safe.confirmed and self.status != "ERROR" and reconnects == self._reconnects_seen
        if self.status != "ERROR":
            self._say("READY" if safe.confirmed else "ERROR", None if safe.confirmed else safe.text)
        self.experiments_run += 1
        return status

    def prepare(self) -> str:
        """Bring the chamber to its standard settings before an experiment: restored and read back when the last
        one ended clean and the lab entry allows it, else a reset and the safe state (the standard read anew).
        Returns how (restore | reset); ChamberError when even the reset leaves it unconfirmed."""
        started = time.monotonic()
        chamber, how = self.chamber, "reset"
        if self.prepare_mode == "restore" and self.clean_end and self.standard is not None:
            restored = restore_standard(chamber, self.standard)
            if restored.ok:
                how = "restore"
            else:
                log.info("%s: resetting before the experiment: %s", self.chamber_id, restored.why)
        self.clean_end = False
        if how == "reset":
            chamber.reset()
            start = apply_safe_state(chamber, self.safe)
            if not start.confirmed:
                self.standard = None
                raise ChamberError(f"safe state before the experiment unconfirmed: {start.text}")
            self.standard = read_standard(chamber)
        self._reconnects_seen = chamber.link_stats().get("reconnects", 0)
        self.preparations.append((how, time.monotonic() - started))
        self.prepared = {"how": how, "seconds": round(self.preparations[-1][1], 4)}
        del self.preparations[:-100]
        return how

    def _end(self, experiment_id: str, status: str, reason: str | None, config: str) -> None:
        """End the experiment with the zip of its rows; when the database cannot take the zip (a full disk), end it
        FAILED without one (never a zip without its checksum); when it cannot take even that, retry later."""
        try:
            finish_with_rows(self.engine, experiment_id, status, reason, self.clock(), self.chamber_id, config,
                             extra={"preparation": self.prepared})
            return
        except SQLAlchemyError as exc:
            why = (f"the result could not be stored ({_first_line(exc)}); "
                   f"{'status would have been ' + status + '; ' if status != 'FAILED' else ''}nothing to download")
            log.error("%s: %s: %s", self.chamber_id, experiment_id, why)
            reason = f"{reason}; {why}" if reason and status == "FAILED" else why
        try:
            store.finish(self.engine, experiment_id, status="FAILED", now=self.clock(), reason=reason,
                         zip_data=None, checksum=None)
        except SQLAlchemyError:
            self.unfinished.append((experiment_id, reason))

    def _retry_unfinished(self) -> None:
        for experiment_id, reason in list(self.unfinished):
            try:
                store.finish(self.engine, experiment_id, status="FAILED", now=self.clock(), reason=reason,
                             zip_data=None, checksum=None)
                self.unfinished.remove((experiment_id, reason))
            except SQLAlchemyError:
                return

    # --------------------------------------------------------------------------------------- real-time calls
    def _answer(self, call: dict[str, Any]) -> None:
        self._say("EXECUTING")
        try:
            answer_call(self, call)
        finally:
            self.wakeups.notify(f"call:{call['call_id']}")
        self.clean_end = False  # a session leaves the chamber as its user set it: the next experiment resets
        if self.status == "EXECUTING":
            self._say("READY")
