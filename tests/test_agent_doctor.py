"""`chamberlab doctor` and `preflight`: each probe fails on the test server that has its fault, with the true cause
and the fix for the server that answered, and passes on a correct one, with its evidence (request and raw answer)
saved; the probes test what reaches the model (a random code in a tool result, a random number in an image); the
setups seen on real servers (llama-cpp-python's two chat formats, llama-server --jinja with a small model, issue
26's held-out server) each get the text tool protocol recommended; the CLI's exit code follows the probes a run
depends on.

The servers are tests/openai_like_servers.py's (uvicorn on 127.0.0.1, real HTTP through the run's own client)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from openai_like_servers import (
    HELD_OUT_LLAMA_CPP_LIKE,
    LLAMA_CPP_PYTHON_FUNCTION_CALLING,
    LLAMA_CPP_PYTHON_GGUF_TEMPLATE,
    LLAMA_SERVER_JINJA_SMALL_MODEL,
    Served,
    ServerFaults,
    openai_like_server,
)

from agent.doctor import (
    ADD,
    PROBES,
    DoctorReport,
    Probe,
    ProbeSecrets,
    doctor_text,
    needs_for_run,
    no_call_verdict,
    number_png,
    page_png,
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
def test_a_tool_call_written_as_text_names_the_fix_of_the_server_that_answered():
    turn = _text_turn('<tool_call>\n{"name": "add_numbers", "arguments": {"a": 2, "b": 3}}\n</tool_call>')
    v = no_call_verdict(turn, [ADD], "Qwen2.5-Coder-1.5B-Instruct")
    assert v.status == "fail" and "written as text" in v.finding and "tool_call_tag" in v.finding
    assert v.cause == "parser_off"
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in v.fix and "--jinja" in v.fix  # server unknown
    assert "--tool-protocol text" in v.fix
    on = {server: no_call_verdict(turn, [ADD], "Qwen2.5-Coder-1.5B-Instruct", server=server).fix
          for server in ("llama-server", "llama-cpp-python", "vllm")}
    assert "--jinja" in on["llama-server"] and "--tool-call-parser" not in on["llama-server"]
    assert "chatml-function-calling drops tool results" in on["llama-cpp-python"] and "--jinja" not in on[
        "llama-cpp-python"]
    assert "--tool-call-parser hermes" in on["vllm"] and "--jinja" not in on["vllm"]
    assert "llama3_json" in parser_fix("meta-llama/Llama-3.1-8B-Instruct", "vllm")
    assert "--tool-call-parser <family>" in parser_fix("some-unknown-model")
    # the parser shown to work: the model's doing, not a flag
    known = no_call_verdict(turn, [ADD], "m", server="llama-server", cause="model_no_format")
    assert "does not emit the tool-call format" in known.fix and "--jinja" not in known.fix


def test_a_token_repeated_to_the_limit_and_a_plain_answer_are_told_apart():
    repeated = no_call_verdict(_text_turn("<tool_call>" * 64, "max_tokens", "length"), [ADD], "m")
    assert "'<tool_call>' 64 times until the output limit" in repeated.finding
    assert "large tool schemas" in repeated.fix and repeated.cause == "token_repeated"
    plain = no_call_verdict(_text_turn("The sum is 5."), [ADD], "m")
    assert "no tool call, a text answer" in plain.finding and "The sum is 5." in plain.finding
    assert plain.cause == "prose_no_call"
    cut = no_call_verdict(_text_turn("Let me think", "max_tokens", "length"), [ADD], "m")
    assert "output limit reached before any tool call" in cut.finding and "max_output_tokens" in cut.fix


def test_the_loop_and_doctor_share_one_classification_and_one_fix_text():
    from agent.models.serving import fix
    from agent.models.text_calls import LIKELY_CAUSE, classify_reply

    text = '```json\n{"name": "add_numbers", "arguments": {"a": 2, "b": 3}}\n```'
    fault = classify_reply(text, "end_turn", [ADD.name])
    verdict = no_call_verdict(_text_turn(text), [ADD], "qwen")
    assert fault is not None and fault.cause == verdict.cause == "parser_off"
    assert LIKELY_CAUSE == fix("parser_off") and LIKELY_CAUSE in fault.detail
    assert verdict.fix == fix("parser_off", None, "qwen")
    # under the text protocol the client parsed the reply itself: a call left in its text, or an empty reply, is
    # the model's end of turn; a token loop still points at the backend
    assert classify_reply(text, "end_turn", [ADD.name], protocol="text") is None
    assert classify_reply("", "end_turn", [ADD.name], protocol="text") is None
    assert classify_reply("", "end_turn", [ADD.name]).outcome == "neither_call_nor_answer"
    looped = classify_reply("<tool_call>" * 30, "max_tokens", [ADD.name], protocol="text")
    assert looped is not None and looped.outcome == "tool_token_repeated"


def test_the_text_rendering_is_one_line_per_probe_with_each_fix_once(tmp_path):
    fix = "vLLM: serve with --enable-auto-tool-choice"
    probes = [Probe("client", "pass", "ok"), Probe("tool_calls", "fail", "as text", fix, str(tmp_path / "a.json")),
              Probe("tool_choice", "fail", "as text too", fix), Probe("null_content_turn", "fail", "null", "none",
                                                                       warning=True),
              Probe("pdf_document", "not_applicable", "no PDFs")]
    report = DoctorReport("openai-compat:http://x/v1#m", "chat-completions", "http://x/v1", tmp_path, probes,
                          needs={"client", "tool_calls"}, recommendation="--tool-protocol text (?tools=text): ...")
    text = doctor_text(report.to_dict())
    lines = text.splitlines()
    assert lines[1].startswith("pass *client") and lines[2].startswith("FAIL *tool_calls")
    assert text.count(fix) == 1 and "fix: as for tool_calls" in text
    assert any(line.startswith("warn  null_content_turn") for line in lines)
    assert any(line.startswith("n/a   pdf_document") for line in lines)
    assert "recommended: --tool-protocol text" in text
    assert str(tmp_path) in text and lines[-1] == "NOT OK: failed tool_calls"
    assert report.failed == ["tool_calls", "tool_choice", "null_content_turn"] and not report.ok
    assert DoctorReport("s", None, None, tmp_path, probes[:1] + probes[2:3], needs={"client"}).ok  # not needed


def test_needs_follow_the_spec_options():
    assert needs_for_run("scripted:reader") == {"client"}
    plain = needs_for_run("openai-compat:http://127.0.0.1:1/v1#m")
    assert {"tool_calls", "tool_result", "second_tool_call", "empty_content_turn", "page_images"} <= plain
    assert "reasoning" not in plain and "null_content_turn" not in plain  # the chat client sends content ""
    asked = needs_for_run("openai-compat:http://127.0.0.1:1/v1#m?thinking=1024&images=false")
    assert "reasoning" in asked and "page_images" not in asked
    assert "reasoning" in needs_for_run("openai-compat:http://127.0.0.1:1/v1#m?effort=low")
    text = needs_for_run("openai-compat:http://127.0.0.1:1/v1#m?tools=text")  # no tool-call fields are sent
    assert {"tool_calls", "tool_result", "second_tool_call", "large_tool_schema"} <= text
    assert "empty_content_turn" not in text


def test_the_probe_payloads_are_a_readable_pdf_and_pngs():
    with pymupdf.open(stream=tiny_pdf("ORCHID"), filetype="pdf") as doc:
        assert doc.page_count == 1 and "ORCHID" in doc[0].get_text()
    pix = pymupdf.Pixmap(tiny_png())
    assert (pix.width, pix.height) == (64, 64)
    number = pymupdf.Pixmap(number_png("48217"))
    assert (number.width, number.height) == (294, 120) and number.n == 3
    page = pymupdf.Pixmap(page_png())  # A4 at the run's 100 dpi
    assert (page.width, page.height) == (827, 1170)
    a, b = ProbeSecrets.draw(random.Random(1)), ProbeSecrets.draw(random.Random(1))
    assert a == b and re.fullmatch(r"[A-Z]{2}-\d{4}", a.code) and re.fullmatch(r"\d{5}", a.number)
    assert ProbeSecrets.draw(random.Random(2)) != a


def test_a_scripted_model_has_nothing_to_probe_and_a_bad_spec_fails_the_client_probe(tmp_path):
    report = run_doctor("scripted:reader", out_dir=tmp_path / "s", environ={})
    probes = _probes(report)
    assert report.ok and probes["client"].status == "pass"
    assert all(probes[n].status == "not_applicable" for n in PROBES[1:])
    keyless = run_doctor("claude-sonnet-4-5", out_dir=tmp_path / "k", environ={})
    assert not keyless.ok and "ANTHROPIC_API_KEY" in _probes(keyless)["client"].finding
    assert json.loads((tmp_path / "k" / "report.json").read_text())["failed"] == ["client"]


# --------------------------------------------------------------------------------------------- against the servers
SEED = 11


def _doctor(url: Served, out: Path, options: str = "", **kwargs: Any) -> DoctorReport:
    """run_doctor with the probe values drawn from SEED; the server's vision model reads the probe's number."""
    secrets = ProbeSecrets.draw(random.Random(SEED))
    url.sees[hashlib.sha256(number_png(secrets.number)).hexdigest()] = secrets.number
    return run_doctor(_spec(url, options), out_dir=out, environ={}, rng=random.Random(SEED), **kwargs)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[DoctorReport, list[dict[str, Any]]]:
    with openai_like_server(ServerFaults()) as url:
        report = _doctor(url, tmp_path_factory.mktemp("good"), "thinking=1024")
        return report, list(url.requests)


def test_every_probe_passes_on_a_correct_server(good):
    report, requests = good
    probes = _probes(report)
    assert report.ok and report.recommendation is None, doctor_text(report.to_dict())
    skipped = {"pdf_document": "sends no PDFs", "server": "not identified", "text_protocol": "native tool calls work"}
    assert all(probes[n].status == "not_applicable" and why in probes[n].finding for n, why in skipped.items())
    assert all(p.status == "pass" for n, p in probes.items() if n not in skipped)
    secrets = ProbeSecrets.draw(random.Random(SEED))
    assert secrets.code in probes["tool_result"].finding and secrets.number in probes["page_images"].finding
    assert "required: structured add_numbers; named lookup_unit: honoured" in probes["tool_choice"].finding
    # What the probes sent: content "" on the empty-content turn, null on the null one, the run's tool surface,
    # each tool_choice form, the code only in a tool message, the image only in a user message after it.
    assistant = [m for r in requests for m in r["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert "" in [m["content"] for m in assistant] and None in [m["content"] for m in assistant]
    assert any("submit_extraction" in json.dumps(r.get("tools")) for r in requests)
    assert any(r.get("response_format") and r.get("tools") for r in requests)
    choices = [r.get("tool_choice") for r in requests if r.get("tools")]
    assert "auto" in choices and "required" in choices and {"type": "function", "function": {"name": "lookup_unit"}} \
        in choices
    carried = [m for r in requests for m in r["messages"] if secrets.code in json.dumps(m)]
    assert carried and all(m["role"] == "tool" for m in carried)


def test_each_probe_keeps_its_request_and_raw_answer(good):
    report, _ = good
    evidence = json.loads(Path(_probes(report)["tool_calls"].evidence).read_text())
    exchange = evidence["exchanges"][0]
    assert exchange["status"] == 200 and exchange["request"]["tools"][0]["function"]["name"] == "add_numbers"
    assert exchange["response"]["choices"][0]["message"]["tool_calls"]
    assert _probes(report)["usage"].evidence == _probes(report)["tool_calls"].evidence
    server = json.loads(Path(_probes(report)["server"].evidence).read_text())
    assert server["answers"]["models"]["data"][0]["owned_by"] == "test"  # what the server said about itself
    assert json.loads((report.out_dir / "report.json").read_text())["ok"] is True


FAULTS = [  # (fault, spec options, probe, what its finding says, what its fix says, the cause)
    (ServerFaults(tools_as_text=True), "", "tool_calls", "written as text (tools_tag", "--tool-call-parser hermes",
     "parser_off"),
    (ServerFaults(tools_as_text=True, tools_as_text_style="tool_call"), "", "tool_calls", "tool_call_tag", "--jinja",
     "parser_off"),
    (ServerFaults(tools_as_text=True, tools_as_text_style="fenced"), "", "tool_calls", "fenced", "--jinja",
     "parser_off"),
    (ServerFaults(reject_null_content=True), "", "null_content_turn", "Input should be a valid string",
     "none needed", None),
    (ServerFaults(guided_masks_tools=True), "", "tools_with_response_format", "guided decoding masks", "never send",
     None),
    (ServerFaults(drop_reasoning=True), "thinking=1024", "reasoning", "thinking=1024) and none returned",
     "--reasoning-parser", None),
    (ServerFaults(repeat_tool_token_over_schema_chars=2000), "", "large_tool_schema",
     "'<tool_call>' 256 times until the output limit", "large tool schemas", "token_repeated"),
    (ServerFaults(reject_images=True), "", "page_images", "no multimodal projector", "images=false",
     "images_refused"),
    (ServerFaults(no_usage=True), "", "usage", "no usage", "gateway", None),
    (ServerFaults(ignore_tool_choice=True), "", "tool_choice",
     "named lookup_unit: not honoured (the model called add_numbers)", "unaffected", "choice_ignored"),
    # what reaches the model, not what the server accepts (issue 33)
    (ServerFaults(drops_tool_results=True), "", "tool_result", "tool results do not reach the model", "role: tool",
     "drops_tool_results"),
    (ServerFaults(text_after_tool_result=True), "", "second_tool_call", "after a tool result: tool call written as "
     "text", "after a tool result", "text_after_result"),
    (ServerFaults(tool_choice_object_ignored=True), "", "tool_choice", "named lookup_unit: not honoured (the model "
     "called add_numbers)", "unaffected", "choice_ignored"),
    (ServerFaults(text_only_images=True), "", "page_images", "the image was read as text", "images=false",
     "images_as_text"),
    (ServerFaults(model_never_writes_tag=True), "", "tool_calls", "a reply forced to start with <tool_call> came "
     "back structured: the parser works", "does not emit the tool-call format", "model_no_format"),
]


@pytest.mark.parametrize("faults,options,probe,finding,fix,cause", FAULTS,
                         ids=[f"{f[2]}-{i}" for i, f in enumerate(FAULTS)])
def test_each_probe_fails_on_the_server_with_its_fault(tmp_path, faults, options, probe, finding, fix, cause):
    with openai_like_server(faults) as url:
        report = _doctor(url, tmp_path, options)
    probes = _probes(report)
    assert probes[probe].status == "fail", doctor_text(report.to_dict())
    assert finding in probes[probe].finding and fix in probes[probe].fix and probes[probe].cause == cause
    assert not report.ok and probe in report.failed
    evidence = json.loads(Path(probes[probe].evidence).read_text())
    assert evidence["probe"] in (probe, "tool_calls") and evidence["exchanges"][0]["request"]["messages"]
    assert "response" in evidence["exchanges"][-1]  # the raw answer, error bodies included


def test_a_dropped_tool_result_is_told_from_one_the_model_ignored_by_the_prompt_tokens(tmp_path):
    with openai_like_server(ServerFaults(drops_tool_results=True)) as url:
        dropped = _probes(_doctor(url, tmp_path / "a"))["tool_result"]
    before, after = map(int, re.search(r"prompt tokens (\d+) with .* and (\d+) with", dropped.finding).groups())
    assert before == after  # the result grew by ~1,400 characters and the prompt did not
    evidence = json.loads(Path(dropped.evidence).read_text())
    sent = [json.dumps(e["request"]["messages"]) for e in evidence["exchanges"]]
    assert len(sent) == 2 and len(sent[1]) > len(sent[0]) + 1000  # the padded result was sent


@pytest.mark.parametrize("preset, server, failing", [
    (LLAMA_CPP_PYTHON_FUNCTION_CALLING, "llama-cpp-python", {"tool_result": "drops_tool_results",
                                                             "page_images": "images_as_text"}),
    (LLAMA_CPP_PYTHON_GGUF_TEMPLATE, "llama-cpp-python", {"tool_calls": "parser_off", "second_tool_call":
                                                          "parser_off", "large_tool_schema": "parser_off",
                                                          "page_images": "images_as_text"}),
    (LLAMA_SERVER_JINJA_SMALL_MODEL, "llama-server", {"tool_calls": "model_no_format", "second_tool_call":
                                                      "model_no_format", "large_tool_schema": "model_no_format",
                                                      "page_images": "images_as_text"}),
    (HELD_OUT_LLAMA_CPP_LIKE, None, {"second_tool_call": "text_after_result"}),
], ids=["llama-cpp-python-function-calling", "llama-cpp-python-gguf-template", "llama-server-jinja", "held-out"])
def test_each_real_setup_is_named_with_its_true_cause_and_the_text_protocol_recommended(tmp_path, preset, server,
                                                                                        failing):
    with openai_like_server(preset) as url:
        report = _doctor(url, tmp_path, needs=needs_for_run(_spec(url)))
    probes = _probes(report)
    assert report.server == server and (probes["server"].status == "pass") == (server is not None)
    needed = {p.name: p.cause for p in report.probes if p.status == "fail" and p.name in report.needs}
    assert needed == failing, doctor_text(report.to_dict())
    assert not report.ok  # issue 26's held-out server passed doctor; no more
    assert report.recommendation and report.recommendation.startswith("--tool-protocol text")
    assert probes["text_protocol"].status == "pass" and "the text protocol passed its probe" in report.recommendation
    fixes = " ".join(p.fix for p in report.probes if p.status == "fail")
    if server == "llama-server":  # --jinja is on: the parser works, so it is never the fix
        assert "--jinja" not in fixes and "tool_choice only as a string" in probes["tool_choice"].fix
        assert probes["tool_choice"].warning is False  # auto fails here too
        assert "of a 16384-token context" in probes["page_images"].finding
    if server == "llama-cpp-python":
        assert "--jinja" not in fixes and "--tool-call-parser" not in fixes


def test_the_text_protocol_spec_passes_where_native_calls_cannot_work(tmp_path):
    with openai_like_server(LLAMA_CPP_PYTHON_FUNCTION_CALLING) as url:
        spec_needs = needs_for_run(_spec(url, "tools=text&images=false"))
        report = _doctor(url, tmp_path, "tools=text&images=false", needs=spec_needs)
        sent = list(url.requests)
    probes = _probes(report)
    assert report.ok and report.tool_protocol == "text" and report.recommendation is None, \
        doctor_text(report.to_dict())
    assert all(probes[n].status == "pass" for n in ("tool_calls", "tool_result", "second_tool_call",
                                                    "large_tool_schema"))
    assert all(probes[n].status == "not_applicable" for n in ("empty_content_turn", "null_content_turn",
                                                              "tool_choice", "tools_with_response_format"))
    assert not any(b.get("tools") or b.get("tool_choice") for b in sent)  # no tool-call fields at all
    assert not any(m["role"] == "tool" for b in sent for m in b["messages"])  # results are user messages


def test_on_a_llama_cpp_like_server_null_is_a_warning_and_the_run_form_passes(tmp_path):
    with openai_like_server(ServerFaults(reject_null_content=True)) as url:
        report = _doctor(url, tmp_path, needs=needs_for_run(_spec(url)))
    probes = _probes(report)
    assert probes["empty_content_turn"].status == "pass" and probes["null_content_turn"].warning
    assert report.ok and "llama-cpp-python" in probes["null_content_turn"].finding
    raw = json.loads(Path(probes["null_content_turn"].evidence).read_text())["exchanges"][0]
    assert raw["status"] == 500 and "Input should be a valid string" in json.dumps(raw["response"])


def test_preflight_runs_only_what_the_run_needs_and_stops_on_a_needed_fault(tmp_path):
    with openai_like_server(ServerFaults(guided_masks_tools=True, ignore_tool_choice=True)) as url:
        fine = preflight(_spec(url, "images=false"), out_dir=tmp_path / "a", environ={}, rng=random.Random(SEED))
        sent = len(url.requests)
    assert fine.ok and _probes(fine)["tools_with_response_format"].status == "not_applicable"
    assert sent == 5  # tool_calls, tool_result, second_tool_call, empty_content_turn, large_tool_schema
    with openai_like_server(ServerFaults(tools_as_text=True)) as url:
        stopped = preflight(_spec(url), out_dir=tmp_path / "b", environ={})
    assert not stopped.ok and "tool_calls" in stopped.failed_needed
    assert stopped.recommendation and "parser_off (tool_calls" in stopped.recommendation


def test_no_server_and_a_base_url_without_v1_are_named_with_their_fix(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gone = _probes(run_doctor(f"openai-compat:http://127.0.0.1:{port}/v1#m", out_dir=tmp_path / "a", environ={}))
    assert gone["server"].status == "not_applicable" and "no /v1/models answer" in gone["server"].finding
    assert gone["tool_calls"].status == "fail" and "no answer (connection)" in gone["tool_calls"].finding
    assert "ends in /v1" in gone["tool_calls"].fix
    assert all(p.status == "not_applicable" and "did not answer tool_calls" in p.finding
               for n, p in gone.items() if n not in ("client", "server", "tool_calls"))
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
        bad = _cli("doctor", "--model", _spec(url, "images=false", model="m"), "--json", "--out", str(tmp_path / "bad"))
        text = _cli("doctor", "--model", _spec(url, "images=false", model="m"), "--out", str(tmp_path / "bad-text"))
    assert bad.returncode == 2, bad.stderr
    data = json.loads(bad.stdout)
    assert "tool_calls" in data["failed_needed"] and not data["ok"]
    assert data["recommendation"].startswith("--tool-protocol text")
    assert text.returncode == 2 and "FAIL *tool_calls" in text.stdout and "--jinja" in text.stdout
    assert "recommended: --tool-protocol text" in text.stdout
    with openai_like_server(ServerFaults()) as url:
        ok = _cli("doctor", "--model", _spec(url, "images=false", model="m"), "--json", "--out", str(tmp_path / "ok"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["ok"] and (tmp_path / "ok" / "tool_calls.json").exists()


def test_the_images_in_the_probe_are_what_the_server_received(good):
    _, requests = good
    images = [p["image_url"]["url"] for r in requests for m in r["messages"] if isinstance(m.get("content"), list)
              for p in m["content"] if p.get("type") == "image_url"]
    secrets = ProbeSecrets.draw(random.Random(SEED))
    sent = {base64.b64decode(i.split(",", 1)[1]) for i in images}
    assert sent == {number_png(secrets.number), page_png()}  # the number to read, and one page for its cost


@pytest.mark.parametrize("base_url, reports, headers, name", [
    ("http://127.0.0.1:8080/v1", {"models": {"data": [{"id": "q", "owned_by": "me", "permissions": []}]}}, {},
     "llama-cpp-python"),
    ("http://127.0.0.1:8081/v1", {"models": {"data": [{"id": "q", "owned_by": "llamacpp"}]},
                                  "props": {"default_generation_settings": {"n_ctx": 16384}, "build_info": "b1"}}, {},
     "llama-server"),
    ("http://gpu:8000/v1", {"models": {"data": [{"id": "Qwen/Qwen2.5", "owned_by": "vllm", "max_model_len": 32768}]},
                            "version": {"version": "0.11.0"}}, {}, "vllm"),
    ("http://127.0.0.1:11434/v1", {"models": {"data": [{"id": "qwen2.5", "owned_by": "library"}]},
                                   "api/version": {"version": "0.12.3"}}, {}, "ollama"),
    ("http://127.0.0.1:1234/v1", {"models": {"data": [{"id": "qwen", "owned_by": "organization_owner"}]}}, {},
     "lm-studio"),
    ("http://127.0.0.1:4000/v1", {"models": {"data": [{"id": "qwen", "owned_by": "openai"}]}},
     {"x-litellm-version": "1.80.0"}, "litellm"),
    ("https://api.openai.com/v1", {}, {}, "hosted"),
    ("http://127.0.0.1:9/v1", {"models": {"data": [{"id": "m", "owned_by": "someone"}]}}, {}, None),
])
def test_the_server_is_named_from_what_it_reports(base_url, reports, headers, name):
    from agent.models.serving import name_server

    ident = name_server(base_url, reports, headers)
    assert ident.name == name, ident
    if name == "llama-server":
        assert (ident.context_tokens, ident.version) == (16384, "b1")
    if name == "vllm":
        assert (ident.context_tokens, ident.version) == (32768, "0.11.0")
