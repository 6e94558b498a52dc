"""The matrix's model options and ids (issue 26): the flags (--max-output-tokens, --temperature, ...) written into
every model's spec under its own `?option=` (the spec wins) and reaching the request; cell ids short (a model
label, a hash only where two specs share one) and stable across a resume; scores grouped by the full spec
(endpoint and options) and arm; stability counted on submitted repeats only, and said in words; the preflight
that stops a matrix before any cell. Scripted policies and the fake OpenAI-like servers through the real loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cell_runner import model_label, model_labels, plan_cells
from agent.models import ModelSpecError, client_for, full_spec, parse_model_spec, split_model_options, with_model_options
from agent.models.scripted import ScriptedModel, policy_named
from agent.scoring.matrix import run_matrix
from agent.scoring.score import score_paths, stability, stability_text
from conftest import shared_path
from support import SteppingClock, run_cli

CLAIM = "acs70331-bandwidth"  # printed as 1 MHz: closed-book's invented 1.0 passes fidelity
LOCAL = "openai-compat:http://127.0.0.1:9/v1#qwen2.5-coder-1.5b"


# ------------------------------------------------------------------------------------------------ specs
def test_flag_options_are_written_under_the_specs_own_and_the_spec_wins():
    flags = {"temperature": 0.0, "max_output_tokens": 256, "extra_body": {"top_k": 1, "seed": 7}}
    spec = with_model_options(f"{LOCAL}?temperature=0.7&extra.seed=3", flags)
    base, options = split_model_options(spec)
    assert base == LOCAL
    assert options == {"temperature": 0.7, "max_output_tokens": 256, "extra_body": {"top_k": 1, "seed": 3}}
    assert with_model_options(spec, flags) == spec  # canonical: the same spec and flags give the same text
    assert with_model_options("scripted:reader", {}) == "scripted:reader"
    # scripted models run in process and take no options: the flags leave them as they are
    assert [full_spec(m, {"temperature": 0.0}) for m in ("scripted:reader", LOCAL)] == ["scripted:reader",
                                                                                        f"{LOCAL}?temperature=0"]


def test_temperature_is_checked_and_travels_or_is_refused_by_name():
    with pytest.raises(ModelSpecError, match="expected a number from 0 to 2"):
        split_model_options(f"{LOCAL}?temperature=2.5")
    client = client_for(f"{LOCAL}?temperature=0&max_output_tokens=256", {})
    assert client.options["extra_body"]["temperature"] == 0.0 and client.max_output_tokens == 256
    with pytest.raises(ModelSpecError, match="temperature do not apply to anthropic models.*sampling options"):
        client_for("claude-sonnet-4-5?temperature=0", {"ANTHROPIC_API_KEY": "k"})
    with pytest.raises(ModelSpecError, match="temperature do not apply to openai models"):
        client_for("openai:gpt-5?temperature=0", {"OPENAI_API_KEY": "k"})


def test_cell_ids_are_short_labels_with_a_hash_only_where_two_specs_share_one():
    cold, warm = f"{LOCAL}?temperature=0", f"{LOCAL}?temperature=1"
    assert model_label(cold) == "qwen2.5-coder-1.5b" and model_label("scripted:reader") == "scripted:reader"
    assert model_labels([cold, "scripted:reader"]) == {cold: "qwen2.5-coder-1.5b", "scripted:reader": "scripted:reader"}
    labels = model_labels([cold, warm])
    assert labels[cold] != labels[warm] and all(v.startswith("qwen2.5-coder-1.5b-") for v in labels.values())
    cells = plan_cells([cold, warm], [CLAIM], 2)
    ids = [c.cell_id for c in cells]
    assert len(set(ids)) == 4 and not any("http" in i or "temperature" in i for i in ids)
    assert max(map(len, ids)) < 70
    assert [c.cell_id for c in plan_cells([cold, warm], [CLAIM], 2)] == ids  # stable: a resume finds them
    assert all(c.model in (cold, warm) for c in cells)  # the full spec stays on the planned cell (and the index)


# ------------------------------------------------------------------------------------------------ scripted
def test_matrix_of_two_scripted_models_takes_the_option_flags_and_resumes_by_the_same_ids(tmp_path, capsys):
    shared_path("datasheets", "DPS310.pdf")
    out = tmp_path / "m"
    argv = ["matrix", "--models", "scripted:reader,scripted:closed-book", "--claims", "dps310-operating-range",
            "--repeats", "2", "--out", str(out), "--no-chamber", "--temperature", "0", "--max-output-tokens", "256",
            "--json"]
    first = run_cli(capsys, *argv)  # no preflight for scripted models (agent.doctor is not even imported)
    assert first.code == 0, first.out + first.err
    data = first.json()
    assert data["run"]["ran"] == 4 and data["preflight"] == {}
    assert data["models"] == {"scripted:reader": "scripted:reader", "scripted:closed-book": "scripted:closed-book"}
    ids = sorted(p.stem for p in (out / "cells").glob("*.jsonl"))
    assert ids[0] == "dps310-operating-range--scripted_closed-book--normal--r1"
    again = run_cli(capsys, *argv)
    assert again.code == 0 and again.json()["run"]["skipped"] == 4 and "ran" not in again.json()["run"]
    assert sorted(p.stem for p in (out / "cells").glob("*.jsonl")) == ids
    text = run_cli(capsys, *argv[:-1]).out
    assert "scripted:reader|normal: stable: 1 of 1 claim with >= 2 submitted repeats; none had fewer" in text


class _AtEndpoint(ScriptedModel):
    """The reader policy recorded as a chat-completions model at an endpoint with options (as client_for builds
    one for the spec): the records differ only where two specs of one model name differ."""

    provider, transport = "openai-compat", "chat-completions"

    def __init__(self, spec: str) -> None:
        base, options = split_model_options(spec)
        _, model, url = parse_model_spec(base)
        super().__init__(policy_named("reader"), model=model)
        self.base_url, self.options = url, options


def test_score_groups_two_specs_of_one_model_name_apart(claims, datasheets, tmp_path):
    cold, warm = f"{LOCAL}?temperature=0", f"{LOCAL}?temperature=1"
    cells = plan_cells([cold, warm], [CLAIM], 2)
    kw = dict(claims=claims, out=tmp_path, datasheets_dir=datasheets, client_factory=_AtEndpoint, concurrency=2)
    run = run_matrix(cells, clock=SteppingClock(), **kw)
    assert run["ran"] == 4 and not run["failures"]
    again = run_matrix(plan_cells([cold, warm], [CLAIM], 2), clock=SteppingClock(), **kw)  # hashed ids: found
    assert again["skipped"] == 4 and "ran" not in again
    scores = score_paths([tmp_path], claims=claims, datasheets_dir=datasheets, ground=False)
    assert {r["model"] for r in scores["cells"]} == {"qwen2.5-coder-1.5b"}  # one model name ...
    groups = scores["summary"]["stability"]
    assert sorted(groups) == [f"{cold}|normal", f"{warm}|normal"]  # ... two specs, as given and recorded
    assert all(g == {"claims": 1, "stable": 1, "flipped": [], "repeats": 2, "fewer": 0} for g in groups.values())


# ------------------------------------------------------------------------------------------------ stability
def _row(spec: str, claim: str, repeat: int, outcome: str = "submitted", passed: bool | None = True) -> dict:
    return {"model": "m", "model_spec": spec, "arm": "normal", "claim_id": claim, "repeat": repeat,
            "outcome": outcome, "fidelity": {"passed": passed if outcome == "submitted" else None}}


def test_stability_counts_only_claims_with_two_submitted_repeats_and_says_how_many_had_fewer():
    rows = [_row("a", "c1", 1), _row("a", "c1", 2), _row("a", "c1", 3, "engine_error"),
            _row("a", "c2", 1), _row("a", "c2", 2, passed=False),
            _row("a", "c3", 1), _row("a", "c3", 2, "engine_error"),  # one submitted repeat: not stable, not flipped
            _row("a", "c4", 1, "end_turn_without_submit"), _row("a", "c4", 2, "timeout"),
            _row("b", "c1", 1, "engine_error"), _row("b", "c1", 2, "engine_error")]
    groups = stability(rows)
    assert groups == {"a|normal": {"claims": 2, "stable": 1, "flipped": ["c2"], "repeats": 2, "fewer": 2},
                      "b|normal": {"claims": 0, "stable": 0, "flipped": [], "repeats": 0, "fewer": 1}}
    assert stability_text(groups) == {
        "a|normal": "stable: 1 of 2 claims with >= 2 submitted repeats; 2 claims had fewer",
        "b|normal": "stable: 0 of 0 claims with >= 2 submitted repeats; 1 claim had fewer"}


# ------------------------------------------------------------------------------------------------ extract
def test_extract_sends_the_temperature_flag(tmp_path, capsys):
    from conformance_server import Reply, replay

    shared_path("datasheets", "DPS310.pdf")
    bad = {"error": {"message": "stop here", "type": "invalid_request_error"}}
    with replay([Reply(bad, 400)]) as (url, bodies):
        r = run_cli(capsys, "extract", "dps310-pressure-rate-range", "--model", f"openai-compat:{url}/v1#m",
                    "--no-chamber", "--record", str(tmp_path), "--temperature", "0", "--max-output-tokens", "64")
    assert r.code == 1 and bodies[0]["temperature"] == 0 and bodies[0]["max_tokens"] == 64
    (record,) = tmp_path.glob("*.jsonl")
    assert record.stem == "dps310-pressure-rate-range--m--normal--r1"  # the label, not the endpoint
    start = json.loads(record.read_text().splitlines()[0])
    assert start["config"]["model_endpoint"] == f"{url}/v1"
    assert start["config"]["model_options"]["extra_body"] == {"temperature": 0.0}


# ------------------------------------------------------------------------------------------------ fake servers
def test_matrix_on_a_local_like_server_sends_temperature_and_the_output_limit(claims, tmp_path, capsys):
    from agent.prompt import project_claim
    from agent.runindex import RunIndex

    import openai_like_servers as servers

    shared_path("datasheets", "ACS70331.pdf")
    out = tmp_path / "local"
    with servers.openai_like_server(servers.ServerFaults(), policy="reader", task=project_claim(claims[CLAIM])) \
            as server:
        argv = ["matrix", "--models", f"openai-compat:{server}#qwen", "--claims", CLAIM, "--repeats", "2",
                "--out", str(out), "--no-chamber", "--no-preflight", "--temperature", "0",
                "--max-output-tokens", "256", "--json"]
        first = run_cli(capsys, *argv)
        bodies = list(server.requests)
        again = run_cli(capsys, *argv)
        asked_again = len(server.requests) - len(bodies)
    assert first.code == 0, first.out + first.err
    assert first.json()["run"]["outcome:submitted"] == 2
    assert bodies and all(b["temperature"] == 0 and b["max_tokens"] == 256 for b in bodies)
    assert again.json()["run"]["skipped"] == 2 and asked_again == 0  # the resume found both cells
    ids = sorted(p.stem for p in (out / "cells").glob("*.jsonl"))
    assert ids == [f"{CLAIM}--qwen--normal--r1", f"{CLAIM}--qwen--normal--r2"]
    with RunIndex(out / "index.sqlite") as index:  # the full spec is in the index ...
        specs = {c["model"] for c in index.cells("local")}
    assert specs == {f"openai-compat:{server}#qwen?max_output_tokens=256&temperature=0"}
    start = json.loads((out / "cells" / f"{ids[0]}.jsonl").read_text().splitlines()[0])
    assert start["config"]["model_endpoint"] == str(server)  # ... and on the record's run_start
    assert start["config"]["model_options"] == {"extra_body": {"temperature": 0.0}, "max_output_tokens": 256}
    (spec,) = specs
    group = f"{spec}|normal"  # scoring groups by the same string the index holds
    assert first.json()["summary"]["stability_text"] == {
        group: "stable: 1 of 1 claim with >= 2 submitted repeats; none had fewer"}


def test_a_failed_preflight_stops_the_matrix_before_any_cell(tmp_path, capsys):
    import openai_like_servers as servers

    shared_path("datasheets", "ACS70331.pdf")
    out = tmp_path / "m"
    with servers.openai_like_server(servers.ServerFaults(tools_as_text=True)) as base_url:
        r = run_cli(capsys, "matrix", "--models", f"openai-compat:{base_url}#qwen", "--claims", CLAIM,
                    "--out", str(out), "--no-chamber", "--json")
    err = r.json()["error"]
    assert r.code == 2 and err["type"] == "PreflightFailed", r.out
    assert "probe" in err["message"] and str(out / "preflight" / "qwen") in err["message"]
    assert not (out / "cells").exists() and list((out / "preflight" / "qwen").rglob("*"))
    # one short line: the probes grouped by cause, each fix once (issue 33: ~1,000 characters, the fix twice)
    message = err["message"]
    assert "tool_calls, second_tool_call, large_tool_schema: tool calls come back as text (no parser)" in message
    assert message.count("--tool-protocol text") == 1 and "images=false" in message and len(message) < 700
