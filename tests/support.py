"""Small typed helpers the tests share, one verb each: clocks, the CLI, a serial chamber, a claim matcher.

Why one module: each of these was written several times across the test files with small differences (six fake
clocks with different starts and steps, five CLI runners, two claim matchers), so a reader could not tell whether
a difference mattered. Here each exists once; a test that needs another start or step says so in its call.
Modelled on ophyd-async's `_mock_signal_utils.py`: a flat module of tiny helpers, no fixtures, no global state.
"""

from __future__ import annotations

import contextlib
import errno
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_START = 1_764_633_600.0  # 2025-12-02T00:00:00Z: a fixed epoch, so record timestamps are deterministic


# ----------------------------------------------------------------------------------------------------- clocks
class SteppingClock:
    """An injected clock that advances by `step` seconds on every reading (the first reading is start + step).

    For agent cells and records: latencies and budgets are exercised without sleeping, and the same run gives
    the same timestamps."""

    def __init__(self, start: float = DEFAULT_START, step: float = 0.01) -> None:
        if step <= 0:
            raise ValueError(f"step must be > 0 seconds (a clock that does not advance), got {step!r}")
        self.t = start
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


class ManualClock:
    """An injected monotonic clock that only the test moves (`advance`), e.g. to run a lease past its timeout."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back; advance by >= 0 s, got {seconds!r}")
        self.now += seconds


# -------------------------------------------------------------------------------------------------------- CLI
@dataclass(frozen=True)
class CliRun:
    """What one `bench_cli.main(argv)` call returned and printed."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        """The last stdout line as JSON (the `--json` summary); names the output when it is not JSON."""
        lines = self.out.strip().splitlines()
        if not lines:
            raise AssertionError(f"expected a JSON line on stdout, got nothing (exit {self.code}; stderr {self.err!r})")
        try:
            return json.loads(lines[-1])
        except ValueError:
            raise AssertionError(f"expected JSON on stdout's last line, got {lines[-1][:200]!r}") from None


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> CliRun:
    """Run the CLI in this process (`bench_cli.main`) and capture what it printed."""
    import bench_cli  # late: most users of this module never need the CLI

    capsys.readouterr()  # drop anything printed before, so `out` is this call's output only
    code = bench_cli.main(list(argv))
    out, err = capsys.readouterr()
    return CliRun(code, out, err)


def cli_subprocess(*argv: str, timeout_s: float = 300.0,
                   env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python bench_cli.py ARGV` in a child process from the project folder (text output captured)."""
    return subprocess.run([sys.executable, str(PROJECT_ROOT / "bench_cli.py"), *argv], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout_s,
                          env=dict(env) if env is not None else None)


# ---------------------------------------------------------------------------------------------------- chamber
@contextlib.contextmanager
def serial_chamber(kind: str = "wt", *, seed: int = 0, transport: str = "pty", **board: Any) -> Iterator[Any]:
    """An emulated board (`running_board`, fast pace) with the real serial driver connected to it; yields the
    connected Chamber and closes it (then the board) on exit. `board` goes to running_board (faults, model...)."""
    from chamber import open_chamber
    from simulator.board import running_board

    with running_board(kind, transport=transport, seed=seed, **board) as handle:
        chamber = open_chamber(handle.url, backend="serial")
        try:
            yield chamber
        finally:
            chamber.close()


# ------------------------------------------------------------------------------------------------------ claims
def _close(got: Any, want: float) -> bool:
    return got is not None and abs(float(got) - float(want)) <= 1e-9 * max(1.0, abs(float(want)))


def reads_the_claim(claim: Any, extraction: Mapping[str, Any] | None) -> bool:
    """Whether an extraction carries the claim's figure (compared in tests, never in the agent).

    Accuracy claims: the printed band value ± tolerance is the range read. Typical claims: the Typ. figure (a
    printed Min./Max. may be read too, and is not compared). Ranges and ratings: every bound the claim has, and
    its Typ. when it has one. No extraction reads nothing."""
    if not extraction:
        return False
    got = {k: extraction.get(k) for k in ("value", "low", "high")}
    if claim.kind == "accuracy":
        t = claim.tolerance.value
        return _close(got["low"], claim.value - t) and _close(got["high"], claim.value + t)
    if claim.kind == "typical":
        return _close(got["value"], claim.value)
    expected = {k: getattr(claim, k) for k in ("value", "low", "high") if getattr(claim, k) is not None}
    return all(_close(got[k], v) for k, v in expected.items())


# ------------------------------------------------------------------------------------------------- chamber spy
class ChamberSpy:
    """A chamber that lists every SET and MSR reaching it in `calls` (("set", name, value), ("set_many",
    settings), ("measure", n)) and passes everything on, so a test can say "nothing moved" as `calls == []`."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def set(self, name: str, value: float) -> Any:
        self.calls.append(("set", name, value))
        return self.inner.set(name, value)

    def set_many(self, settings: Mapping[str, float]) -> Any:
        self.calls.append(("set_many", dict(settings)))
        return self.inner.set_many(settings)

    def measure(self, n: int) -> Any:
        self.calls.append(("measure", n))
        return self.inner.measure(n)


# -------------------------------------------------------------------------------------------- provider usage
def responses_usage(input_tokens: int, output_tokens: int, cached: int, cache_write: int,
                    reasoning: int) -> dict[str, Any]:
    """A Responses API `usage` object as OpenAI reports it (input_tokens includes the cached part)."""
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
            "output_tokens_details": {"reasoning_tokens": reasoning}}


def chat_usage(prompt_tokens: int, completion_tokens: int, cached: int, cache_write: int,
               reasoning: int) -> dict[str, Any]:
    """A chat-completions `usage` object in OpenAI's shape (prompt_tokens includes the cached part)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
            "completion_tokens_details": {"reasoning_tokens": reasoning}}


# ---------------------------------------------------------------------------------------------- reader cells
@dataclass
class ReaderRun:
    """Every claim of a set read once by the scripted reader: the cell results, their validated events and the
    offline scores (source grounding on), each by claim id."""

    claims: dict[str, Any]
    datasheets: Path
    results: dict[str, Any]
    events: dict[str, list[Any]]
    scored: dict[str, dict[str, Any]]


def read_with_reader(claims: Mapping[str, Any], datasheets: Path, out: Path) -> ReaderRun:
    """Run the scripted reader (the real loop, in process) on each claim's datasheet in `datasheets`, writing the
    records to `out`, then score them offline against `claims`."""
    from agent.loop import run_cell  # late: most users of this module never run a cell
    from agent.models.scripted import ScriptedModel, policy_named
    from agent.record import validate_record
    from agent.scoring.score import score_paths

    results, events = {}, {}
    for claim in claims.values():
        result = run_cell(claim, model=ScriptedModel(policy_named("reader"), "scripted:reader"),
                          datasheet=datasheets / claim.identity.filename, record_dir=out, clock=SteppingClock(),
                          run_id=f"{claim.id}--reader")
        results[claim.id], events[claim.id] = result, validate_record(result.record)
    rows = score_paths([out], claims=dict(claims), datasheets_dir=datasheets)["cells"]
    return ReaderRun(dict(claims), datasheets, results, events, {r["claim_id"]: r for r in rows})


def scripted_cell(claim: Any, policy: Any, chamber: Any, record_dir: Path, datasheet: Path) -> tuple[Any, list[Any]]:
    """One agent cell through the real Anthropic SDK against the scripted Messages server (agent/testserver.py)
    running `policy` on the claim's projection, with `chamber` (a ChamberClient) for phase two. Returns the cell
    result and the request bodies the server received (`[]`: no model turn was spent)."""
    from agent.loop import run_cell  # late, as above
    from agent.models.anthropic_client import AnthropicClient
    from agent.prompt import project_claim
    from agent.testserver import serve_scripted

    with serve_scripted(policy, project_claim(claim)) as (url, app):
        result = run_cell(claim, model=AnthropicClient("scripted", api_key="k", base_url=url), datasheet=datasheet,
                          record_dir=record_dir, clock=SteppingClock(), chamber=chamber)
    return result, app.state.requests


def engine_error_before_a_turn(claim: Any, chamber_url: str, record_dir: Path, datasheet: Path, *,
                               timeout_s: float = 30.0) -> str:
    """Run a closed-book cell against the chamber API at `chamber_url`, which is expected to fail it at session
    start: check the cell ended as an engine error before any model turn was spent, and return the record's
    last detail (for the test to check what it names)."""
    import httpx

    from agent.chamber_client import ChamberClient
    from agent.models.scripted import closed_book
    from agent.record import validate_record

    with httpx.Client(base_url=chamber_url, timeout=timeout_s) as http:
        result, requests = scripted_cell(claim, closed_book, ChamberClient(http), record_dir, datasheet)
    assert requests == [], f"expected no model turn before the session failed, got {len(requests)} requests"
    events = validate_record(result.record)
    assert result.outcome == "engine_error", f"expected outcome engine_error, got {result.outcome}: {result.detail}"
    return events[-1].detail


# ------------------------------------------------------------------------------------------- flaky model
def flaky_model(policy: str, broken: list[bool]) -> Any:
    """A scripted model (`policy`, e.g. "reader") that fails with HTTP 500 while `broken[0]` is true: an engine
    error the runner must retry on resume; the test flips `broken[0]` to let the next attempt through."""
    from agent.models.base import ModelClient, ModelError
    from agent.models.scripted import ScriptedModel, policy_named

    class FlakyModel(ModelClient):
        provider, transport, model = "scripted", "in-process", f"scripted:{policy}"

        def __init__(self) -> None:
            self.inner = ScriptedModel(policy_named(policy), model=f"scripted:{policy}")

        def complete(self, request):
            if broken[0]:
                raise ModelError("http", "HTTP 500: upstream broke", http_status=500, request_id="req_x")
            return self.inner.complete(request)

    return FlakyModel()


class FullDisk:
    """A record-file opener whose writes fail once `armed`: half the line goes out, then ENOSPC (a full disk)."""

    def __init__(self, armed: bool = False) -> None:
        self.armed = armed

    def __call__(self, path: Path) -> "_FillingFile":
        return _FillingFile(open(path, "ab", buffering=0), self)


class _FillingFile:
    def __init__(self, raw: Any, disk: FullDisk) -> None:
        self.raw, self.disk = raw, disk

    def write(self, data: bytes) -> int:
        if self.disk.armed:
            self.raw.write(bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.raw.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def fuzz_operations(app: Any, mode: Any, check_case: Any, examples: int) -> tuple[int, list[str]]:
    """Schemathesis over `app`'s /openapi.json: for every operation, `examples` generated cases (Hypothesis,
    derandomized) in `mode`, each handed to `check_case(case)`, which calls and asserts. Returns (operations,
    labels of those checked): an operation with no invalid request to make is passed over in NEGATIVE mode only.
    (schemathesis' pytest loader does not work with this pytest, so each operation's strategy is drawn here.)"""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    checked: list[str] = []
    for operation in operations:
        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case: Any) -> None:
            check_case(case)

        try:
            run()
        except Unsatisfiable:
            if mode is GenerationMode.POSITIVE:
                raise
            continue
        checked.append(operation.label)
    return len(operations), checked


def frozen_session(http: Any, claim_id: str = "dps310-operating-range") -> str:
    """A chamber tools API session on `claim_id` with its extraction frozen (the chamber tools open), over `http`
    (a TestClient or an httpx client); returns its id."""
    r = http.post("/sessions", json={"claim_id": claim_id})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    assert http.post(f"/sessions/{sid}/extraction", json={"payload": {"low": 300}}).status_code == 200
    return sid


def tool_call(http: Any, sid: str, name: str, body: dict[str, Any] | None = None) -> Any:
    """POST one chamber tool of session `sid` with a JSON body."""
    return http.post(f"/sessions/{sid}/tools/{name}", json=body or {})
