"""`chamberlab doctor` and `preflight`: each probe fails on the test server that has its fault and passes on a
correct one, with its evidence (request and raw answer) saved; the finding texts name the likely fix; the CLI's
exit code follows the probes a run depends on.

The servers are tests/openai_like_servers.py's (uvicorn on 127.0.0.1, real HTTP through the run's own client)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from openai_like_servers import ServerFaults, openai_like_server

from agent.doctor import (
    ADD,
    PROBES,
    DoctorReport,
    Probe,
    doctor_text,
    needs_for_run,
    no_call_verdict,
    parser_fix,
    preflight,
    run_doctor,
    tiny_pdf,
    tiny_png,
)
from agent.models.base import Message, ModelTurn, TextBlock
from agent.record import TokenUsage

ROOT = Path(__file__).resolve().parents[1]


def _spec(url: str, options: str = "", model: str = "qwen2.5-coder-1.5b") -> str:
    return f"openai-compat:{url}#{model}" + (f"?{options}" if options else "")


def _probes(report: DoctorReport) -> dict[str, Probe]:
    return {p.name: p for p in report.probes}


def _text_turn(text: str, stop: str = "end_turn", raw: str = "stop") -> ModelTurn:
    return ModelTurn(Message("assistant", [TextBlock(text)]), stop, raw, TokenUsage())  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- finding texts
def test_a_tool_call_written_as_text_names_the_parser_flags_for_the_model_family():
    turn = _text_turn('<tool_call>\n{"name": "add_numbers", "arguments": {"a": 2, "b": 3}}\n</tool_call>')
    v = no_call_verdict(turn, [ADD], "Qwen2.5-Coder-1.5B-Instruct")
    assert v.status == "fail" and "written as text" in v.finding and "tool_call_tag" in v.finding
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in v.fix and "--jinja" in v.fix
    assert "llama3_json" in parser_fix("meta-llama/Llama-3.1-8B-Instruct")
    assert "--tool-call-parser <family>" in parser_fix("some-unknown-model")


def test_a_token_repeated_to_the_limit_and_a_plain_answer_are_told_apart():
    repeated = no_call_verdict(_text_turn("<tool_call>" * 64, "max_tokens", "length"), [ADD], "m")
    assert "'<tool_call>' repeated 64 times until the output limit" in repeated.finding
    assert "large tool schemas" in repeated.fix
    plain = no_call_verdict(_text_turn("The sum is 5."), [ADD], "m")
    assert "no tool call, a text answer" in plain.finding and "The sum is 5." in plain.finding
    cut = no_call_verdict(_text_turn("Let me think", "max_tokens", "length"), [ADD], "m")
    assert "output limit reached before any tool call" in cut.finding and "max_output_tokens" in cut.fix


def test_the_text_rendering_is_one_line_per_probe_with_each_fix_once(tmp_path):
    fix = "vLLM: serve with --enable-auto-tool-choice"
    probes = [Probe("client", "pass", "ok"), Probe("tool_calls", "fail", "as text", fix, str(tmp_path / "a.json")),
              Probe("tool_choice", "fail", "as text too", fix), Probe("null_content_turn", "fail", "null", "none",
                                                                       warning=True),
              Probe("pdf_document", "not_applicable", "no PDFs")]
    report = DoctorReport("openai-compat:http://x/v1#m", "chat-completions", "http://x/v1", tmp_path, probes,
                          needs={"client", "tool_calls"})
    text = doctor_text(report.to_dict())
    lines = text.splitlines()
    assert lines[1].startswith("pass *client") and lines[2].startswith("FAIL *tool_calls")
    assert text.count(fix) == 1 and "fix: as for tool_calls" in text
    assert any(line.startswith("warn  null_content_turn") for line in lines)
    assert any(line.startswith("n/a   pdf_document") for line in lines)
    assert str(tmp_path) in text and lines[-1] == "NOT OK: failed tool_calls"
    assert report.failed == ["tool_calls", "tool_choice", "null_content_turn"] and not report.ok
    assert DoctorReport("s", None, None, tmp_path, probes[:1] + probes[2:3], needs={"client"}).ok  # not needed


def test_needs_follow_the_spec_options():
    assert needs_for_run("scripted:reader") == {"client"}
    plain = needs_for_run("openai-compat:http://127.0.0.1:1/v1#m")
    assert {"tool_calls", "tool_result", "empty_content_turn", "page_images"} <= plain
    assert "reasoning" not in plain and "null_content_turn" not in plain  # the chat client sends content ""
    asked = needs_for_run("openai-compat:http://127.0.0.1:1/v1#m?thinking=1024&images=false")
    assert "reasoning" in asked and "page_images" not in asked
    assert "reasoning" in needs_for_run("openai-compat:http://127.0.0.1:1/v1#m?effort=low")


def test_the_probe_payloads_are_a_readable_pdf_and_png():
    with pymupdf.open(stream=tiny_pdf("ORCHID"), filetype="pdf") as doc:
        assert doc.page_count == 1 and "ORCHID" in doc[0].get_text()
    pix = pymupdf.Pixmap(tiny_png())
    assert (pix.width, pix.height) == (64, 64)


def test_a_scripted_model_has_nothing_to_probe_and_a_bad_spec_fails_the_client_probe(tmp_path):
    report = run_doctor("scripted:reader", out_dir=tmp_path / "s", environ={})
    probes = _probes(report)
    assert report.ok and probes["client"].status == "pass"
    assert all(probes[n].status == "not_applicable" for n in PROBES[1:])
    keyless = run_doctor("claude-sonnet-4-5", out_dir=tmp_path / "k", environ={})
    assert not keyless.ok and "ANTHROPIC_API_KEY" in _probes(keyless)["client"].finding
    assert json.loads((tmp_path / "k" / "report.json").read_text())["failed"] == ["client"]


# --------------------------------------------------------------------------------------------- against the servers
@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[DoctorReport, list[dict[str, Any]]]:
    with openai_like_server(ServerFaults()) as url:
        report = run_doctor(_spec(url, "thinking=1024"), out_dir=tmp_path_factory.mktemp("good"), environ={})
        return report, list(url.requests)


def test_every_probe_passes_on_a_correct_server(good):
    report, requests = good
    probes = _probes(report)
    assert report.ok, doctor_text(report.to_dict())
    assert probes["pdf_document"].status == "not_applicable"  # chat completions send page images, not PDFs
    assert all(p.status == "pass" for n, p in probes.items() if n != "pdf_document")
    # What the probes sent: content "" on the empty-content turn, null on the null one, the run's tool surface.
    assistant = [m for r in requests for m in r["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert "" in [m["content"] for m in assistant] and None in [m["content"] for m in assistant]
    assert any("submit_extraction" in json.dumps(r.get("tools")) for r in requests)
    assert any(r.get("response_format") and r.get("tools") for r in requests)


def test_each_probe_keeps_its_request_and_raw_answer(good):
    report, _ = good
    evidence = json.loads(Path(_probes(report)["tool_calls"].evidence).read_text())
    exchange = evidence["exchanges"][0]
    assert exchange["status"] == 200 and exchange["request"]["tools"][0]["function"]["name"] == "add_numbers"
    assert exchange["response"]["choices"][0]["message"]["tool_calls"]
    assert _probes(report)["usage"].evidence == _probes(report)["tool_calls"].evidence
    assert json.loads((report.out_dir / "report.json").read_text())["ok"] is True


FAULTS = [  # (fault, spec options, probe, what its finding says, what its fix says)
    (ServerFaults(tools_as_text=True), "", "tool_calls", "written as text (tools_tag", "--tool-call-parser hermes"),
    (ServerFaults(tools_as_text=True, tools_as_text_style="tool_call"), "", "tool_calls", "tool_call_tag", "--jinja"),
    (ServerFaults(tools_as_text=True, tools_as_text_style="fenced"), "", "tool_calls", "fenced", "--jinja"),
    (ServerFaults(reject_null_content=True), "", "null_content_turn", "Input should be a valid string",
     "none needed"),
    (ServerFaults(guided_masks_tools=True), "", "tools_with_response_format", "guided decoding masks", "never send"),
    (ServerFaults(drop_reasoning=True), "thinking=1024", "reasoning", "thinking=1024) and none returned",
     "--reasoning-parser"),
    (ServerFaults(repeat_tool_token_over_schema_chars=2000), "", "large_tool_schema",
     "'<tool_call>' repeated", "large tool schemas"),
    (ServerFaults(reject_images=True), "", "page_images", "no multimodal projector", "images=false"),
    (ServerFaults(no_usage=True), "", "usage", "no usage", "gateway"),
    (ServerFaults(ignore_tool_choice=True), "", "tool_choice", "forced lookup_unit; the model called add_numbers",
     "unaffected"),
]


@pytest.mark.parametrize("faults,options,probe,finding,fix", FAULTS,
                         ids=[f"{f[2]}-{i}" for i, f in enumerate(FAULTS)])
def test_each_probe_fails_on_the_server_with_its_fault(tmp_path, faults, options, probe, finding, fix):
    with openai_like_server(faults) as url:
        report = run_doctor(_spec(url, options), out_dir=tmp_path, environ={})
    probes = _probes(report)
    assert probes[probe].status == "fail", doctor_text(report.to_dict())
    assert finding in probes[probe].finding and fix in probes[probe].fix
    assert not report.ok and probe in report.failed
    evidence = json.loads(Path(probes[probe].evidence).read_text())
    assert evidence["probe"] in (probe, "tool_calls") and evidence["exchanges"][0]["request"]["messages"]
    assert "response" in evidence["exchanges"][-1]  # the raw answer, error bodies included


def test_on_a_llama_cpp_like_server_null_is_a_warning_and_the_run_form_passes(tmp_path):
    with openai_like_server(ServerFaults(reject_null_content=True)) as url:
        report = run_doctor(_spec(url), out_dir=tmp_path, environ={}, needs=needs_for_run(_spec(url)))
    probes = _probes(report)
    assert probes["empty_content_turn"].status == "pass" and probes["null_content_turn"].warning
    assert report.ok and "llama-cpp-python" in probes["null_content_turn"].finding
    raw = json.loads(Path(probes["null_content_turn"].evidence).read_text())["exchanges"][0]
    assert raw["status"] == 500 and "Input should be a valid string" in json.dumps(raw["response"])


def test_preflight_runs_only_what_the_run_needs_and_stops_on_a_needed_fault(tmp_path):
    with openai_like_server(ServerFaults(guided_masks_tools=True, ignore_tool_choice=True)) as url:
        fine = preflight(_spec(url, "images=false"), out_dir=tmp_path / "a", environ={})
        sent = len(url.requests)
    assert fine.ok and _probes(fine)["tools_with_response_format"].status == "not_applicable"
    assert sent == 4  # tool_calls, tool_result, empty_content_turn, large_tool_schema
    with openai_like_server(ServerFaults(tools_as_text=True)) as url:
        stopped = preflight(_spec(url), out_dir=tmp_path / "b", environ={})
    assert not stopped.ok and "tool_calls" in stopped.failed_needed


def test_no_server_and_a_base_url_without_v1_are_named_with_their_fix(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gone = _probes(run_doctor(f"openai-compat:http://127.0.0.1:{port}/v1#m", out_dir=tmp_path / "a", environ={}))
    assert gone["tool_calls"].status == "fail" and "no answer (connection)" in gone["tool_calls"].finding
    assert "ends in /v1" in gone["tool_calls"].fix
    assert all(p.status == "not_applicable" and "did not answer tool_calls" in p.finding
               for n, p in gone.items() if n not in ("client", "tool_calls"))
    with openai_like_server(ServerFaults()) as url:
        wrong = _probes(run_doctor(f"openai-compat:{url.removesuffix('/v1')}#m", out_dir=tmp_path / "b", environ={}))
    assert "HTTP 404" in wrong["tool_calls"].finding and "it ends in /v1" in wrong["tool_calls"].fix


# --------------------------------------------------------------------------------------------- the command
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = ROOT / ".venv" / "bin" / "chamberlab"
    command = [str(exe)] if exe.exists() else [sys.executable, str(ROOT / "bench_cli.py")]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_COMPAT_API_KEY"}
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


def test_the_command_exits_2_naming_the_probe_on_a_faulty_server_and_0_on_a_good_one(tmp_path):
    with openai_like_server(ServerFaults(tools_as_text=True)) as url:
        bad = _cli("doctor", "--model", _spec(url, model="m"), "--json", "--out", str(tmp_path / "bad"))
        text = _cli("doctor", "--model", _spec(url, model="m"), "--out", str(tmp_path / "bad-text"))
    assert bad.returncode == 2, bad.stderr
    data = json.loads(bad.stdout)
    assert "tool_calls" in data["failed_needed"] and not data["ok"]
    assert text.returncode == 2 and "FAIL *tool_calls" in text.stdout and "--jinja" in text.stdout
    with openai_like_server(ServerFaults()) as url:
        ok = _cli("doctor", "--model", _spec(url, model="m"), "--json", "--out", str(tmp_path / "ok"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["ok"] and (tmp_path / "ok" / "tool_calls.json").exists()


def test_the_images_in_the_probe_are_what_the_server_received(good):
    _, requests = good
    images = [p["image_url"]["url"] for r in requests for m in r["messages"] if isinstance(m.get("content"), list)
              for p in m["content"] if p.get("type") == "image_url"]
    assert images and base64.b64decode(images[0].split(",", 1)[1]) == tiny_png()
