"""The CLI: `chamber info|measure` on both backends and `sim serve` as a real subprocess."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bench_cli
from chamber import open_chamber
from chamber.testing import FAST_TIMING

ROOT = Path(bench_cli.__file__).resolve().parent


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = bench_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(params=["pty", "tcp"])
def served_board(request):
    """`python bench_cli.py sim serve` in a subprocess; yields the URL from its first stdout line."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench_cli.py"), "sim", "serve", "--chamber", "wt", "--transport", request.param,
         "--seed", "3", "--pace", "fast"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url, proc.stderr.read()
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)


def test_sim_serve_prints_the_url_first_and_serves_a_host(served_board):
    url, proc = served_board
    assert url.startswith("/dev/pts/") or url.startswith("socket://127.0.0.1:")
    with open_chamber(url, timing=FAST_TIMING) as chamber:
        assert chamber.config == "standard"
        chamber.set("load_in", 0.6)
        frame = chamber.measure(25)
        assert frame.column("counter").tolist() == list(range(25))
        assert set(frame.column("load_in").tolist()) == {float(np.float32(0.6))}  # rows are float32 on the wire
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0  # SIGTERM exits cleanly


def test_chamber_measure_over_a_port_prints_one_json_object(served_board, capsys):
    url, _ = served_board
    code, out, _ = run_cli(capsys, "chamber", "measure", "--port", url, "-n", "4", "--set", "hatch=15",
                           "--set", "load_in=0.3", "--boot-timeout", "2", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"config", "variables", "rows", "link"}
    assert len(data["rows"]) == 4 and len(data["rows"][0]) == len(data["variables"])
    hatch = data["variables"].index("hatch")
    assert [row[hatch] for row in data["rows"]] == [15.0] * 4
    assert data["link"]["segments_received"] >= 4


def test_chamber_info_sim_backend(capsys):
    code, out, _ = run_cli(capsys, "chamber", "info", "--backend", "sim", "--chamber", "lt", "--seed", "2", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["config"] == "standard"
    assert {"name": "red", "kind": "actuator", "unit": "counts", "allowed": "0..255"} in data["variables"]


def test_chamber_measure_text_output_is_csv(capsys):
    code, out, _ = run_cli(capsys, "chamber", "measure", "--backend", "sim", "-n", "3")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0].startswith("counter,flag,intervention,") and len(lines) == 4


@pytest.mark.parametrize("setting, expected", [
    ("osr_in=3", "one of 1, 2, 4, 8"),
    ("load_in=fast", "a number"),
    ("bogus=1", "a settable variable"),
    ("hatch=40", "0..30 (operator limits)"),
])
def test_bad_settings_exit_2_with_a_clear_error(capsys, tmp_path, setting, expected):
    limits = tmp_path / "limits.yaml"
    limits.write_text("variables:\n  hatch: {min: 0, max: 30}\n")
    code, out, err = run_cli(capsys, "chamber", "measure", "--backend", "sim", "-n", "1", "--set", setting,
                             "--limits", str(limits))
    assert code == 2 and "InvalidSetting" in err and expected in err and out == ""
    code, out, _ = run_cli(capsys, "chamber", "measure", "--backend", "sim", "-n", "1", "--set", setting,
                           "--limits", str(limits), "--json")
    assert code == 2 and json.loads(out)["error"]["type"] == "InvalidSetting"


def test_serial_backend_needs_a_port(capsys):
    code, _, err = run_cli(capsys, "chamber", "info")
    assert code == 2 and "--port" in err
