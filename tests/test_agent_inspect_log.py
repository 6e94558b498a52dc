"""Records exported as inspect-ai eval logs, read back with inspect-ai's own reader (`read_eval_log`).

The record comes from a real cell over the real Anthropic SDK (SDK-typed replies on 127.0.0.1); what a
researcher opens in inspect-ai must be what the record says: the conversation, each turn's usage under
inspect-ai's own convention, each tool call with its whole result and typed error, the request ids.
"""

from __future__ import annotations

import pytest

from agent.inspect_log import export_eval_logs

inspect_log = pytest.importorskip("inspect_ai.log", reason="inspect-ai is a test dependency (pip install '.[test]')")

from test_agent_traces import BIG, record  # noqa: E402,F401  (the same recorded cell as the trace tests)


def test_an_exported_record_reads_back_with_inspect_ais_own_reader(record, tmp_path):  # noqa: F811
    (path,) = export_eval_logs([record], tmp_path / "logs")
    log = inspect_log.read_eval_log(str(path))
    assert log.status == "success" and log.eval.model == "anthropic/claude-test"
    (sample,) = log.samples
    assert sample.metadata["outcome"] == "submitted" and sample.scores["outcome"].value == "submitted"
    roles = [m.role for m in sample.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert sample.messages[3].content == "hits for VDD: " + BIG and sample.messages[3].function == "search_text"
    assert sample.messages[2].tool_calls[0].arguments == {"query": "VDD"}
    models = [e for e in sample.events if e.event == "model"]
    tools = [e for e in sample.events if e.event == "tool"]
    assert len(models) == 2 and [t.function for t in tools] == ["search_text", "submit_extraction"]
    # inspect-ai counts input without cache reads/writes; the record includes them: 1230 = 1000 + 200 + 30
    u = models[0].output.usage
    assert (u.input_tokens, u.input_tokens_cache_read, u.input_tokens_cache_write, u.output_tokens,
            u.total_tokens) == (1000, 200, 30, 40, 1270)
    assert models[0].output.response_id == "msg_1" and models[0].output.choices[0].stop_reason == "tool_calls"
    assert [t.name for t in models[0].tools] == ["search_text", "submit_extraction"]
    assert models[1].input[3].content == "hits for VDD: " + BIG  # turn two was sent the whole result
    assert tools[0].result == "hits for VDD: " + BIG and tools[0].truncated is None
    total = sample.model_usage["anthropic/claude-test"]
    assert (total.input_tokens, total.output_tokens, total.total_tokens) == (5000, 100, 5330)
    assert log.stats.model_usage["anthropic/claude-test"].total_tokens == 5330


def test_unknown_usage_is_absent_not_zero_and_a_denied_call_is_a_permission_error(tmp_path):
    import httpx

    from agent.loop import Budget, run_cell
    from agent.models.openai_http import OpenAIChatClient
    from conformance_server import Reply, replay
    from protocols.claims import load_claims
    from support import SteppingClock
    from test_agent_conformance import _tools, chat_reply

    claim = next(iter(load_claims().values()))
    denied = {"role": "assistant", "content": None,
              "tool_calls": [{"id": "call_1", "type": "function",
                              "function": {"name": "run_protocol", "arguments": "{}"}}]}
    replies = [Reply(chat_reply(message=denied, finish="tool_calls", usage=None)), Reply(chat_reply(usage=None))]
    with replay(replies) as (url, _), httpx.Client() as http:
        result = run_cell(claim, model=OpenAIChatClient("m", base_url=f"{url}/v1", http=http),
                          datasheet=tmp_path / "none.pdf", record_dir=tmp_path, clock=SteppingClock(), budget=Budget(),
                          tools=_tools(), surface_version="test")
    (path,) = export_eval_logs([result.record], tmp_path / "logs")
    sample = inspect_log.read_eval_log(str(path)).samples[0]
    assert sample.model_usage == {} and sample.metadata["usage_reported"] is False
    models = [e for e in sample.events if e.event == "model"]
    assert all(m.output.usage is None and m.output.metadata["usage_reported"] is False for m in models)
    tool = next(e for e in sample.events if e.event == "tool")
    assert tool.error.type == "permission" and sample.messages[3].error.type == "permission"
    assert sample.metadata["outcome"] == "end_turn_without_submit"


def test_matrix_writes_one_eval_log_per_model(tmp_path, capsys):
    import json

    import bench_cli
    from conftest import shared_path

    shared_path("datasheets", "DPS310.pdf")
    code = bench_cli.main(["matrix", "--models", "scripted:reader,scripted:closed-book", "--claims",
                           "dps310-pressure-rate-range", "--out", str(tmp_path / "m"), "--no-chamber",
                           "--inspect-log", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and len(data["inspect_log"]) == 2
    logs = {(log := inspect_log.read_eval_log(p)).eval.model: log for p in data["inspect_log"]}
    assert set(logs) == {"scripted/scripted:reader", "scripted/scripted:closed-book"}
    reader = logs["scripted/scripted:reader"].samples[0]
    assert reader.metadata["outcome"] == "submitted" and any(e.event == "tool" for e in reader.events)
