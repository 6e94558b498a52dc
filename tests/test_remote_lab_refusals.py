"""Issue 31: `lab serve` checks every chamber's lab entry (its limits, its safe state, its board reachable) before
serving it; a chamber that fails is refused in one line and not served, the others go on.

Before: a lab file whose safe state lay outside its limits, or named an unknown variable, or whose board was
unreachable started the server anyway, with a worker looping on "NOT confirmed", or a traceback and a dead worker.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from remote_lab_support import add_user, poll

PROJECT = Path(__file__).resolve().parents[1]
LAB = """chambers:
  good: {board: 'emulated:wt'}
  loose-safe: {board: 'emulated:wt', limits: {variables: {pot_2: {max: 100}}}, safe: {pot_2: 200}}
  fan-on: {board: 'emulated:lt', safe: {red: 255}}
  no-board: {board: 'socket://127.0.0.1:9', kind: wt}
"""


def test_lab_serve_refuses_each_bad_chamber_in_one_line_and_serves_the_others(tmp_path):
    data = tmp_path / "data"
    credentials = add_user(data, "ada")
    lab_file = tmp_path / "lab.yaml"
    lab_file.write_text(LAB)
    proc = subprocess.Popen([sys.executable, str(PROJECT / "bench_cli.py"), "lab", "serve", "--config", str(lab_file),
                             "--data", str(data), "--listen-port", "0", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        refused = ready["refused"]
        assert set(refused) == {"loose-safe", "fan-on", "no-board"} and ready["workers"] == ["good"]
        assert "pot_2=200: outside the operator limit -inf..100" in refused["loose-safe"]
        assert "red=255: red rests at 0" in refused["fan-on"]
        assert "the board at socket://127.0.0.1:9 did not answer" in refused["no-board"]
        assert all("\n" not in reason for reason in refused.values())
        user, password = _credentials(credentials)
        with httpx.Client(base_url=ready["endpoint"], auth=(user, password), timeout=30) as http:
            listed = http.get("/chambers").json()["chambers"]
            assert [c["chamber_id"] for c in listed] == ["good", "no-board"]  # a lab-file refusal is not listed
            poll(lambda: http.get("/health").json()["chambers"]["good"] == "READY", 30, "the good chamber READY")
            assert http.get("/health").json()["chambers"]["no-board"] == "OFFLINE"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    for chamber_id in ("loose-safe", "fan-on", "no-board"):
        assert sum(line.startswith(f"not serving {chamber_id}: ") for line in stderr.splitlines()) == 1, stderr
    assert "good: safe state confirmed on wt" in stderr


def test_lab_worker_refuses_a_chamber_the_lab_file_refuses(tmp_path):
    lab_file = tmp_path / "lab.yaml"
    lab_file.write_text(LAB)
    proc = subprocess.run([sys.executable, str(PROJECT / "bench_cli.py"), "lab", "worker", "--config", str(lab_file),
                           "--data", str(tmp_path / "data"), "--chamber", "fan-on"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "--chamber fan-on: refused by the lab file" in proc.stderr, proc.stderr
    assert "red rests at 0" in proc.stderr and "Traceback" not in proc.stderr


def _credentials(path: Path) -> tuple[str, str]:
    import configparser

    ini = configparser.ConfigParser()
    ini.read(path)
    return ini["api_keys"]["user"], ini["api_keys"]["password"]
