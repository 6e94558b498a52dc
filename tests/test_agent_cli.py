"""`bench_cli.py extract`: one recorded cell from the command line."""

from __future__ import annotations

import json

import bench_cli
from agent.record import validate_record
from conftest import shared_path


def test_extract_runs_phase_one_and_prints_the_record_path(tmp_path, capsys):
    shared_path("datasheets", "DPS310.pdf")
    code = bench_cli.main(["extract", "dps310-pressure-rate-range", "--model", "scripted:reader", "--no-chamber",
                           "--record", str(tmp_path), "--json", "--otlp", str(tmp_path / "trace.json")])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["outcome"] == "submitted" and out["phase_two"] == "skipped"
    assert out["extraction"]["low"] == 1 and out["extraction"]["high"] == 128
    events = validate_record(out["record"])
    assert events[-1].phase_two == "skipped" and out["run_id"] == events[0].run_id
    assert json.loads((tmp_path / "trace.json").read_text())["resourceSpans"]


def test_extract_without_a_chamber_url_uses_an_in_process_chamber_service(tmp_path, capsys):
    shared_path("datasheets", "DPS310.pdf")
    code = bench_cli.main(["extract", "dps310-operating-range", "--model", "scripted:reader",
                           "--record", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["outcome"] == "submitted" and out["phase_two"] == "completed"
    events = validate_record(out["record"])  # also checks no chamber call precedes the freeze
    chamber_calls = [e for e in events if e.kind == "tool_call" and e.phase == "chamber"]
    assert [e.tool for e in chamber_calls] == ["describe_chamber", "run_protocol", "submit_chamber_outcome"]
    assert all(e.status == "ok" for e in chamber_calls)
    # The scripted agent's own prediction is the service's verdict on the simulator: pass.
    assert chamber_calls[-1].arguments["prediction"] == "pass"
    assert list((tmp_path / "api").glob("*.jsonl"))  # the service recorded its side too


def test_extract_without_a_key_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code = bench_cli.main(["extract", "dps310-pressure-rate-range", "--model", "claude-sonnet-4-5",
                           "--record", str(tmp_path), "--json"])
    err = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and err["type"] == "MissingApiKey" and "ANTHROPIC_API_KEY" in err["message"]


def test_unknown_claim_lists_known_ids(tmp_path, capsys):
    code = bench_cli.main(["extract", "dps310-nope", "--model", "scripted:reader", "--record", str(tmp_path)])
    assert code == 2 and "dps310-relative-accuracy" in capsys.readouterr().err


BAD_REQUEST = {"error": {"message": "tools[0] is invalid", "type": "invalid_request_error"}}


def test_extract_exits_non_zero_on_engine_error_and_names_the_cause(tmp_path, capsys):
    from conformance_server import Reply, replay

    shared_path("datasheets", "DPS310.pdf")
    with replay([Reply(BAD_REQUEST, 400)]) as (url, _):
        code = bench_cli.main(["extract", "dps310-pressure-rate-range", "--model", f"openai-compat:{url}/v1#m",
                               "--no-chamber", "--record", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and "engine_error" in out and "cause:" in out and "HTTP 400" in out


def test_extract_model_option_flags_reach_the_request(tmp_path, capsys):
    from conformance_server import Reply, replay

    shared_path("datasheets", "DPS310.pdf")
    with replay([Reply(BAD_REQUEST, 400)]) as (url, bodies):
        bench_cli.main(["extract", "dps310-pressure-rate-range", "--model", f"openai-compat:{url}/v1#m",
                        "--no-chamber", "--record", str(tmp_path), "--effort", "low", "--max-output-tokens", "777",
                        "--extra-body", '{"chat_template_kwargs": {"enable_thinking": true}}'])
    assert bodies[0]["reasoning_effort"] == "low" and bodies[0]["max_tokens"] == 777
    assert bodies[0]["chat_template_kwargs"] == {"enable_thinking": True}


def test_run_checks_the_model_key_before_any_chamber_work(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code = bench_cli.main(["run", "--model", "claude-sonnet-4-5", "--runs-dir", str(tmp_path), "--json"])
    err = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and err["type"] == "MissingApiKey" and not list(tmp_path.iterdir())


def test_matrix_exits_non_zero_when_cells_end_in_engine_error(tmp_path, capsys):
    from conformance_server import Reply, replay

    shared_path("datasheets", "DPS310.pdf")
    with replay([Reply(BAD_REQUEST, 400)]) as (url, _):
        code = bench_cli.main(["matrix", "--models", f"openai-compat:{url}/v1#m", "--claims",  # the replay answers
                               "dps310-pressure-rate-range", "--out", str(tmp_path / "m"), "--json",  # no probe:
                               "--no-preflight"])  # the cells themselves meet the 400
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["run"]["engine_errors"]


def test_matrix_runs_phase_two_against_the_in_process_chamber_service_by_default(tmp_path, capsys):
    shared_path("datasheets", "DPS310.pdf")
    out = tmp_path / "m"
    code = bench_cli.main(["matrix", "--models", "scripted:reader", "--claims", "dps310-operating-range",
                           "--out", str(out), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["run"]["ran"] == 1 and data["run"]["phase_two:completed"] == 1
    (record,) = (out / "cells").glob("*.jsonl")
    events = validate_record(record)  # no chamber call before the freeze
    chamber_calls = [e.tool for e in events if e.kind == "tool_call" and e.phase == "chamber"]
    assert chamber_calls == ["describe_chamber", "run_protocol", "submit_chamber_outcome"]
    assert events[0].chamber["session_id"] and list((out / "api").glob("*.jsonl"))  # the service's own record
    extraction = json.loads(next((out / "extractions").glob("*.json")).read_text())
    assert extraction["phase_two"] == "completed" and extraction["chamber_outcome"]


def test_matrix_with_no_chamber_records_phase_two_as_skipped(tmp_path, capsys):
    shared_path("datasheets", "DPS310.pdf")
    code = bench_cli.main(["matrix", "--models", "scripted:reader", "--claims", "dps310-operating-range",
                           "--out", str(tmp_path / "m"), "--no-chamber", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["run"]["phase_two:skipped"] == 1 and "phase_two:completed" not in data["run"]


def test_matrix_takes_a_chamber_service_by_url(tmp_path, capsys):
    from chamber import open_chamber
    from protocols.api.server import running_api

    shared_path("datasheets", "DPS310.pdf")
    chambers = {k: open_chamber(backend="sim", chamber=k) for k in ("wt", "lt")}
    try:
        with running_api(chambers, record_dir=tmp_path / "service") as url:
            code = bench_cli.main(["matrix", "--models", "scripted:reader", "--claims", "dps310-operating-range",
                                   "--out", str(tmp_path / "m"), "--chamber-url", url, "--json"])
    finally:
        for c in chambers.values():
            c.close()
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["run"]["phase_two:completed"] == 1
    assert list((tmp_path / "service").glob("*.jsonl")) and not (tmp_path / "m" / "api").exists()


def test_extract_run_again_is_the_next_repeat_of_the_cell_and_leaves_the_first_record(tmp_path, capsys):
    """extract plans its cell through agent.cell_runner: the same claim and model again is repeat 2, not a finished
    cell to keep (and not an overwrite of the first record)."""
    shared_path("datasheets", "DPS310.pdf")
    argv = ["extract", "dps310-pressure-rate-range", "--model", "scripted:reader", "--no-chamber",
            "--record", str(tmp_path), "--json"]
    assert bench_cli.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    first_bytes = open(first["record"], "rb").read()
    assert bench_cli.main(argv) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["run_id"].endswith("--normal--r1") and second["run_id"].endswith("--normal--r2")
    assert open(first["record"], "rb").read() == first_bytes and second["outcome"] == "submitted"
    start = validate_record(second["record"])[0]
    assert (start.cell_id, start.arm, start.repeat) == (second["run_id"], "normal", 2)


def test_matrix_indexes_its_run_and_each_cell_with_fidelity_and_flags_in_its_folder(tmp_path, capsys):
    from agent.runindex import RunIndex

    shared_path("datasheets", "DPS310.pdf")
    out = tmp_path / "m"
    code = bench_cli.main(["matrix", "--models", "scripted:reader", "--claims", "dps310-pressure-rate-range",
                           "--out", str(out), "--no-chamber", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["summary"]["fidelity_passed"] == 1
    with RunIndex(out / "index.sqlite") as index:
        (run,) = list(index.runs())
        (cell,) = index.cells(run.run_id)
    assert (run.run_id, run.status, run.backend) == ("m", "finished", "matrix")
    assert cell["cell_id"] == "dps310-pressure-rate-range--scripted_reader--normal--r1"
    assert (cell["outcome"], cell["fidelity"], cell["flags"]) == ("submitted", "passed", [])
