"""The first day at the command line (issue 19): what a newcomer types and gets back.

One refusal shape everywhere (one line; one JSON object under --json, type "usage" for argparse), counts and
timeouts checked by argparse, every option with help text, -v and --json on either side of the subcommand, files
named in every error, arguments of `run` checked before any chamber is opened, nothing half-written left by a
failed command, one meaning per option name (`--port` is a serial URL), and the token of a chamber service.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import bench_cli
from support import PROJECT_ROOT, run_cli


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (command path, action) of the parser tree."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, action


# ------------------------------------------------------------------------------------------------ the script
def test_the_console_script_is_declared_and_installed_by_make():
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["scripts"]["chamberlab"] == "bench_cli:main"
    assert "$(BIN)/chamberlab run" in (PROJECT_ROOT / "Makefile").read_text(encoding="utf-8")
    script = Path(sys.executable).parent / "chamberlab"
    if not script.exists():
        pytest.skip(f"{script} not installed in this interpreter's environment (make test installs it)")
    proc = subprocess.run([str(script), "--json", "report", str(PROJECT_ROOT / "no-such-run")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["type"] == "FileNotFoundError"


# ------------------------------------------------------------------------------------------------ usage errors
@pytest.mark.parametrize("argv, option", [
    (["run", "--rows", "0"], "--rows"),
    (["run", "--rows", "-1"], "--rows"),
    (["check", "--all", "--rows", "0"], "--rows"),
    (["extract", "x", "--model", "scripted:reader", "--max-turns", "-1"], "--max-turns"),
    (["extract", "x", "--model", "scripted:reader", "--wall-s", "nan"], "--wall-s"),
    (["chamber", "info", "--boot-timeout", "-1"], "--boot-timeout"),
    (["chamber", "measure", "-n", "0", "--backend", "sim"], "-n"),
    (["matrix", "--models", "scripted:reader", "--out", "m", "--repeats", "0"], "--repeats"),
    (["matrix", "--models", "scripted:reader", "--out", "m", "--concurrency", "-2"], "--concurrency"),
    (["sweep", "dps310-operating-range", "--steps", "1"], "--steps"),
    (["sweep", "dps310-operating-range", "--measured", "1e999", "--u", "0.08"], "--measured"),
    (["serve", "--listen-port", "70000"], "--listen-port"),
    (["datasheet", "search", "x.pdf", "q", "--max-results", "0"], "--max-results"),
])
def test_bad_counts_are_refused_by_argparse_in_one_line_and_as_json(capsys, argv, option):
    text = run_cli(capsys, *argv)
    assert text.code == 2 and text.out == ""
    line = text.err.strip()
    assert "\n" not in line and line.startswith("error: usage: ") and f"argument {option}" in line, line
    assert "InvalidOperation" not in line
    js = run_cli(capsys, *argv, "--json")
    assert js.code == 2 and js.json() == {"error": {"type": "usage", "message": line.removeprefix("error: usage: ")}}


def test_unknown_options_and_commands_are_one_line_json_under_json(capsys):
    for argv in (["--json", "nope"], ["report", "x", "--frobnicate", "--json"], ["--json", "run", "--bogus"]):
        r = run_cli(capsys, *argv)
        assert r.code == 2 and r.err == "" and r.json()["error"]["type"] == "usage", argv


def test_verbose_and_json_work_before_and_after_the_subcommand():
    parse = bench_cli.build_parser().parse_args
    for argv in (["-v", "report", "r"], ["report", "r", "-v"], ["report", "-v", "r"]):
        assert parse(argv).verbose is True, argv
    assert parse(["report", "r"]).verbose is False
    assert parse(["--json", "report", "r"]).json is True and parse(["report", "r", "--json"]).json is True
    assert parse(["sim", "serve", "-v"]).verbose is True


def test_every_option_and_positional_has_help_text():
    missing = [f"{' '.join(path)} {'/'.join(a.option_strings) or a.dest}" for path, a in walk(bench_cli.build_parser())
               if not a.help and not isinstance(a, argparse._HelpAction)]
    assert missing == []


def test_port_is_a_serial_url_everywhere():
    """No command takes --port as a number; serve's and sim serve's TCP port is --listen-port."""
    parser = bench_cli.build_parser()
    for path, action in walk(parser):
        if "--port" in action.option_strings:
            assert action.type is None and action.metavar in (None, "URL"), path
    assert parser.parse_args(["serve", "--listen-port", "0"]).listen_port == 0
    assert parser.parse_args(["sim", "serve", "--listen-port", "5"]).listen_port == 5
    assert parser.parse_args(["sim", "serve", "--tcp-port", "5"]).listen_port == 5  # the old spelling still works
    assert parser.parse_args(["serve", "--port-url", "/dev/ttyACM0"]).port == ["/dev/ttyACM0"]


def test_serve_with_a_number_as_port_says_it_is_now_listen_port(capsys, tmp_path):
    r = run_cli(capsys, "serve", "--port", "8765", "--record", str(tmp_path / "rec"))
    assert r.code == 2 and "--listen-port 8765" in r.err and not (tmp_path / "rec").exists()


# ------------------------------------------------------------------------------------------------ named files
def test_file_errors_name_the_option_the_file_and_the_field(capsys, tmp_path):
    binary = tmp_path / "params.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    r = run_cli(capsys, "chamber", "info", "--backend", "sim", "--params", str(binary))
    assert r.code == 2 and f"--params {binary}: expected UTF-8 text" in r.err and "\n" not in r.err.strip()
    field = tmp_path / "field.yaml"
    field.write_text("barometers: {offsets: 3}\n", encoding="utf-8")
    r = run_cli(capsys, "chamber", "info", "--backend", "sim", "--params", str(field))
    assert r.code == 2 and f"simulator parameters {field}: unexpected field 'barometers'" in r.err and "\n" not in r.err.strip()
    claims = tmp_path / "claims.yaml"
    claims.write_bytes(b"claims: [\xff]\n")
    r = run_cli(capsys, "check", "--all", "--backend", "sim", "--claims", str(claims))
    assert r.code == 2 and f"--claims {claims}: expected UTF-8 text" in r.err
    r = run_cli(capsys, "check", "--all", "--backend", "sim", "--limits", str(tmp_path / "none.yaml"))
    assert r.code == 2 and f"--limits {tmp_path / 'none.yaml'}: file not found" in r.err


def test_sim_fit_base_is_read_by_the_one_params_loader(capsys, tmp_path):
    """`--base` takes YAML like every --params (it was JSON-only), and a bad field names the file."""
    base = tmp_path / "base.yaml"
    base.write_text("nonsense_key: 1\n", encoding="utf-8")
    recording = tmp_path / "rec.csv"
    recording.write_text("timestamp\n", encoding="utf-8")
    r = run_cli(capsys, "sim", "fit", str(recording), "-o", str(tmp_path / "p.json"), "--base", str(base))
    assert r.code == 2 and f"simulator parameters {base}: unexpected field 'nonsense_key'" in r.err and not (tmp_path / "p.json").exists()


# ------------------------------------------------------------------------------------------------ exit codes
def test_report_on_a_folder_without_a_run_exits_non_zero_and_writes_nothing(capsys, tmp_path):
    r = run_cli(capsys, "report", str(tmp_path), "--json")
    assert r.code == 2 and "expected a run folder" in r.json()["error"]["message"]
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ nothing half-written
def test_a_failing_plot_leaves_no_csv_behind(capsys, tmp_path):
    csv = tmp_path / "s.csv"
    r = run_cli(capsys, "sweep", "dps310-operating-range", "--measured", "945.285", "--u", "0.080", "--csv", str(csv),
                "--plot", str(tmp_path / "missing-folder" / "s.png"))
    assert r.code == 2
    assert list(tmp_path.iterdir()) == []  # neither s.csv nor a temporary file
    r = run_cli(capsys, "sweep", "dps310-operating-range", "--measured", "945.285", "--u", "0.080", "--csv", str(csv),
                "--plot", str(tmp_path / "s.png"))
    assert r.code == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["s.csv", "s.png"]


def test_a_serve_that_cannot_listen_leaves_no_record_folder(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        record = tmp_path / "records" / "chamber-api"
        proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "bench_cli.py"), "serve", "--listen-port", str(port),
                               "--chamber", "wt", "--record", str(record), "--json"], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert error == {"type": "PortInUse",  # refused before any chamber opens, with the way out
                     "message": f"port {port} on 127.0.0.1 is in use; try --listen-port 0 (any free port)"}
    assert "connected" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra, expected", [
    (["--limits", "LIMITS"], "LIMITS"),
    (["--station", "LIMITS"], "station file"),
    (["--claims", "no-such-claim-id"], "unknown claim id(s) no-such-claim-id"),
    (["--model", "nosuchprovider:x"], "nosuchprovider"),
])
def test_run_checks_every_argument_before_opening_a_run_folder_or_a_chamber(capsys, tmp_path, extra, expected):
    bad = tmp_path / "bad.yaml"
    bad.write_text("wt: {variables: {hatch: {min: 5, max: 1}}}\nname: [1\n", encoding="utf-8")
    argv = [str(bad) if a == "LIMITS" else a for a in extra]
    runs = tmp_path / "runs"
    r = run_cli(capsys, "run", "--runs-dir", str(runs), *argv)
    assert r.code == 2 and expected.replace("LIMITS", str(bad)) in r.err, r.err
    assert "connected" not in r.err and not runs.exists()


# ------------------------------------------------------------------------------------------------ sim serve
def test_sim_serve_json_prints_one_object_with_url_chamber_and_transport():
    proc = subprocess.Popen([sys.executable, str(PROJECT_ROOT / "bench_cli.py"), "sim", "serve", "--chamber", "lt",
                             "--transport", "tcp", "--pace", "fast", "--seed", "3", "--json"], cwd=PROJECT_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert first, err
    started = json.loads(first)
    assert started["url"].startswith("socket://127.0.0.1:")
    assert {k: started[k] for k in ("chamber", "transport", "seed", "pace")} == {
        "chamber": "lt", "transport": "tcp", "seed": 3, "pace": "fast"}


# ------------------------------------------------------------------------------------------------ the bound jobs
def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (command path, its own parser) of the tree's leaves."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, (*path, name))


def _unbound(path: tuple[str, ...], parser: argparse.ArgumentParser) -> list[str]:
    """The required parameters of a command's library functions (bench_cli.job binds them by name) that none of
    its option dests, computed values or the stderr sink (say/warn) provides."""
    import importlib
    import inspect

    dests = {a.dest for a in parser._actions} | {"say", "warn"}
    missing = []
    for target, computed in getattr(parser._defaults["handler"], "bound", {}).items():
        module, name = target.split(":")
        for p in inspect.signature(getattr(importlib.import_module(module), name)).parameters.values():
            if p.default is p.empty and p.kind is not p.VAR_KEYWORD and p.name not in dests | computed:
                missing.append(f"{' '.join(path)}: {target} needs {p.name}")
    return missing


def test_every_bound_job_finds_each_parameter_it_needs_among_its_options():
    """A renamed option or job parameter fails here, not in a user's hands; the planted command (sweep_job with
    none of its options) shows the check can fail."""
    leaves = list(_leaves(bench_cli.build_parser()))
    bound = [path for path, parser in leaves if getattr(parser._defaults["handler"], "bound", None)]
    assert len(bound) >= 20 and [m for path, parser in leaves for m in _unbound(path, parser)] == []
    planted = bench_cli.Parser(prog="planted")
    planted.set_defaults(handler=bench_cli.job("protocols.check_job:sweep_job", selection=lambda a: None))
    missing = _unbound(("planted",), planted)
    assert "planted: protocols.check_job:sweep_job needs claim_id" in missing
    assert "planted: protocols.check_job:sweep_job needs steps" in missing and not any("say" in m for m in missing)
