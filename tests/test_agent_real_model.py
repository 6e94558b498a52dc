"""A real open model on a real local server (issue 33): a cell with the text tool protocol and one with native
calls, and doctor's verdicts, on llama-cpp-python's server (and llama.cpp's own llama-server when given).

Why not a stand-in: the fake servers of tests/openai_like_servers.py reproduce what was seen on these servers;
this test is where it is seen. It needs what CI cannot build in its time (docs agent-notes.md: the GGUF split over
PyPI packages, llama-cpp-python built from source, ~15 min each), so it runs only where they are given:

  CHAMBERLAB_TEST_GGUF            a GGUF chat model (the one measured: Qwen2.5-Coder-1.5B-Instruct Q4_K_M)
  CHAMBERLAB_TEST_LLAMA_PYTHON    a Python with `llama-cpp-python[server]` (its `python -m llama_cpp.server`)
  CHAMBERLAB_TEST_LLAMA_SERVER    optional: llama.cpp's `llama-server` binary
  CHAMBERLAB_TEST_THREADS         optional: the server's threads (default 2)

and skips with the reason elsewhere. On 2 shared CPU cores a cell takes 10-40 min: each server is started once per
module, one at a time, and stopped at its end. What is asserted is what does not depend on the model's luck: the
protocol every call travelled by, the true cause of a native failure, and that the text protocol carries calls and
results both ways (the outcome itself is printed: whether a 1.5B model finds the figure is the model's business).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.doctor import needs_for_run, run_doctor
from agent.loop import Budget, run_cell
from agent.models import client_for
from agent.record import validate_record
from agent.scoring.attribution import attribute
from agent.scoring.cells import facts_from_events
from conftest import shared_path

CLAIM = "si115x-supply-voltage-vdd"  # measured: 2 turns to a submission on both servers (an invented one)
START_TIMEOUT_S = 300.0  # loading a 1 GB GGUF on a busy 2-core machine
CELL_WALL_S = 3600.0
OPTIONS = "temperature=0&images=false&max_output_tokens=256"


def _given(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"needs {name} (a real model server; see this module's docstring and docs agent-notes.md)")
    path = Path(value)
    if not path.exists():
        pytest.skip(f"{name}={value} does not exist")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _serving(command: list[str], port: int, log: Path) -> Iterator[str]:
    """Start a model server, wait until /v1/models answers (a startup handshake, not a timed assertion), yield
    its base URL, stop it (this process's own child, by its pid) at the end."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the model server exited ({proc.returncode}): {log.read_text(errors='replace')[-600:]}")
            try:
                if httpx.get(f"{url}/models", timeout=5.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the model server did not answer within {START_TIMEOUT_S:g} s: see {log}")
            time.sleep(1.0)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def llama_cpp_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server with the GGUF's own chat template (no --chat_format)."""
    gguf, python = _given("CHAMBERLAB_TEST_GGUF"), _given("CHAMBERLAB_TEST_LLAMA_PYTHON")
    port = _free_port()
    log = tmp_path_factory.mktemp("llama-cpp-python") / "server.log"
    with _serving([str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "qwen",
                   "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "16384",
                   "--n_threads", os.environ.get("CHAMBERLAB_TEST_THREADS", "2")], port, log) as url:
        yield url


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's llama-server with --jinja (the model's own template, tools included)."""
    gguf, binary = _given("CHAMBERLAB_TEST_GGUF"), _given("CHAMBERLAB_TEST_LLAMA_SERVER")
    port = _free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with _serving([str(binary), "-m", str(gguf), "--jinja", "--alias", "qwen", "-c", "16384", "--host",
                   "127.0.0.1", "--port", str(port), "-t", os.environ.get("CHAMBERLAB_TEST_THREADS", "2")],
                  port, log) as url:
        yield url


def _cell(claims, url: str, options: str, tmp_path: Path):
    claim = claims[CLAIM]
    spec = f"openai-compat:{url}#qwen?{options}"
    with httpx.Client(timeout=CELL_WALL_S) as http:
        result = run_cell(claim, model=client_for(spec, {}, http=http), model_spec=spec,
                          datasheet=shared_path("datasheets", claim.identity.filename), record_dir=tmp_path,
                          clock=time.time, budget=Budget(max_turns=8, wall_s=CELL_WALL_S, max_output_tokens=256))
    events = validate_record(result.record)
    print(f"{spec}: {result.outcome} in {result.turns} turns; {result.detail[:200]}; {result.extraction}")
    return result, events


def _assert_text_protocol_carried_calls(result, events) -> None:
    turns = [e for e in events if e.kind == "model_turn"]
    assert events[0].config["tool_protocol"] == "text"
    assert all(c["protocol"] == "text" for t in turns for c in t.tool_calls)
    calls = [e for e in events if e.kind == "tool_call"]
    assert calls, result.detail  # a call parsed from the reply's text and answered (a wrong one with an error)
    if len(turns) > 1 and turns[0].usage is not None and turns[1].usage is not None:
        grown = turns[1].usage.input_tokens - turns[0].usage.input_tokens
        assert grown > calls[0].output_bytes // 8  # the tool's result reached the model's prompt
    assert result.outcome not in ("tool_call_as_text", "neither_call_nor_answer", "engine_error")


def test_llama_cpp_python_text_protocol_cell(claims, llama_cpp_python, tmp_path):
    result, events = _cell(claims, llama_cpp_python, f"{OPTIONS}&tools=text", tmp_path)
    _assert_text_protocol_carried_calls(result, events)


def test_llama_cpp_python_native_cell_ends_as_the_serving_stacks_fault(claims, llama_cpp_python, tmp_path):
    result, events = _cell(claims, llama_cpp_python, OPTIONS, tmp_path)
    assert result.outcome == "tool_call_as_text" and result.turns == 1  # the default handler parses no call
    assert events[0].config["tool_protocol"] == "native"
    labels = attribute(facts_from_events(events, result.record), fidelity_passed=False)
    assert labels.to_json()["charged_to"] == ["serving_stack"]


def test_llama_cpp_python_doctor_names_the_cause_and_recommends_text(llama_cpp_python, tmp_path):
    spec = f"openai-compat:{llama_cpp_python}#qwen?{OPTIONS}"
    report = run_doctor(spec, out_dir=tmp_path / "native", environ={}, needs=needs_for_run(spec),
                        only=needs_for_run(spec) | {"text_protocol"}, timeout_s=CELL_WALL_S, rng=random.Random(33))
    probes = {p.name: p for p in report.probes}
    assert report.server == "llama-cpp-python"
    assert probes["tool_calls"].status == "fail" and probes["tool_calls"].cause == "parser_off"
    assert "--jinja" not in probes["tool_calls"].fix and "--tool-protocol text" in probes["tool_calls"].fix
    assert report.recommendation is not None and report.recommendation.startswith("--tool-protocol text")


def test_llama_server_text_protocol_cell(claims, llama_server, tmp_path):
    result, events = _cell(claims, llama_server, f"{OPTIONS}&tools=text", tmp_path)
    _assert_text_protocol_carried_calls(result, events)


def test_llama_server_doctor_says_the_parser_works_and_the_model_does_not_write_the_tag(llama_server, tmp_path):
    spec = f"openai-compat:{llama_server}#qwen?{OPTIONS}"
    report = run_doctor(spec, out_dir=tmp_path / "native", environ={}, needs=needs_for_run(spec),
                        only={"tool_calls", "tool_choice"}, timeout_s=CELL_WALL_S, rng=random.Random(33))
    probes = {p.name: p for p in report.probes}
    assert report.server == "llama-server"
    if probes["tool_calls"].status == "fail":  # a 1.5B model writes fenced JSON; the parser reads the tag
        assert probes["tool_calls"].cause == "model_no_format" and "--jinja" not in probes["tool_calls"].fix
    assert "named lookup_unit: honoured" not in probes["tool_choice"].finding  # llama-server ignores the object
