"""A datasheet command loads no layout engine: PyMuPDF 2.0 imports pymupdf.layout and pymupdf4llm at its own
import, each pulling in onnxruntime, which writes ~/.cache/Microsoft/DeveloperTools/.onnxruntime on every run.
agent.datasheet marks both absent before PyMuPDF is first imported (issue 19)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pymupdf

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# A fresh interpreter: the test process may have imported pymupdf (and so the layout engine) already.
_TOOL_RUN = """
import json, sys
from agent.datasheet import DatasheetSession, datasheet_tools
tools = {t.name: t.handler for t in datasheet_tools(DatasheetSession(sys.argv[1]))}
result = tools["search_text"]({"query": "operating range"})
print(json.dumps({"hits": json.loads(result.text)["hits"],
                  "loaded": sorted(m for m in ("onnxruntime", "pymupdf.layout", "pymupdf4llm")
                                   if sys.modules.get(m) is not None)}))
"""


def _pdf(path: Path) -> Path:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "Operating range 300 to 1200 hPa", fontsize=11)
    doc.save(path)
    doc.close()
    return path


def test_a_datasheet_tool_leaves_no_onnxruntime_cache_and_loads_no_layout_engine(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME",)}
    env.update(HOME=str(home), PYTHONPATH=str(PROJECT_ROOT))
    out = subprocess.run([sys.executable, "-c", _TOOL_RUN, str(_pdf(tmp_path / "d.pdf"))], capture_output=True,
                         text=True, timeout=120, env=env, cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [h["page"] for h in data["hits"]] == [1]  # the tool really ran on the document
    assert data["loaded"] == []
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []  # nothing written under HOME
