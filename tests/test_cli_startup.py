"""Building the CLI's parser imports no heavy layer: `chamberlab --help` and every command pay for it first.

A serve option's default once imported protocols.api (FastAPI, the protocol registry, scipy) at parser build:
`--help` went from 0.1 s to about 2 s. Checked in a fresh interpreter, by what is imported, not by timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("fastapi", "scipy", "numpy", "pymupdf", "matplotlib", "httpx", "protocols.api")

PROBE = f"""
import json, sys
import bench_cli
bench_cli.build_parser()
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""


def test_building_the_parser_imports_no_heavy_layer():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_the_probe_sees_a_heavy_import():
    probe = PROBE.replace("bench_cli.build_parser()", "bench_cli.build_parser(); import protocols.api")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "fastapi" in json.loads(out.stdout)
