"""The dispatch record stays valid JSON Lines (issue 19): non-finite numbers are never written bare (nor silently
as null), and a line that cannot be written whole is not left half-written — the writer raises instead."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.record import RecordWriteError, RecordWriter, RunStart, ToolCallEvent, ToolSurface, read_record

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _strict(line: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"bare {constant} in a JSON line")

    return json.loads(line, parse_constant=refuse)


def _start(w: RecordWriter) -> None:
    w.write(RunStart, claim_id="c", model="m", provider="p", transport="none", system_prompt="s",
            first_user_message="u", tool_surface=ToolSurface(name="t", version="1", sha256="0" * 64, tools=[]),
            datasheet={"path": "d.pdf"}, config={"wall_s": float("inf")})


def _call(w: RecordWriter, *, text: str = "", end: float = 2.0, arguments: dict | None = None) -> None:
    w.write(ToolCallEvent, tool_call_id="c1", turn=1, phase="extraction", tool="search_text",
            arguments=arguments or {}, status="ok", output_text=text, output_bytes=len(text),
            output_kept_bytes=len(text), output_sha256="0" * 64, blob="b", start=1.0, end=end, duration_ms=1.0)


def test_non_finite_numbers_are_strict_json_and_read_back(tmp_path: Path):
    with RecordWriter(tmp_path, "r", lambda: 1.0) as w:
        _start(w)
        _call(w, end=float("nan"), arguments={"low": float("-inf"), "values": [1.0, float("nan")]})
    lines = w.path.read_text(encoding="utf-8").splitlines()
    parsed = [_strict(line) for line in lines]  # a strict reader reads every line
    assert parsed[0]["config"] == {"wall_s": "Infinity"}
    assert parsed[1]["arguments"] == {"low": "-Infinity", "values": [1.0, "NaN"]}  # kept, not nulled
    start, call = read_record(w.path)  # and the typed reader reads the typed float back as the float
    assert call.end != call.end  # NaN
    assert start.config == {"wall_s": "Infinity"}


# A real short write: a file-size limit (as a full disk does) stops the second event part-way.
_FULL_DISK = """
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
sys.path.insert(0, str(Path(sys.argv[2]) / "tests"))
from test_record_strict_json import _call, _start
from agent.record import RecordWriteError, RecordWriter
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
w = RecordWriter(Path(sys.argv[1]), "r", lambda: 1.0)
_start(w)
size = w.path.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
try:
    _call(w, text="x" * 5000)
except RecordWriteError as e:
    print("refused:", e)
w.close()
"""


def test_a_line_that_cannot_be_written_whole_raises_and_leaves_nothing_half_written(tmp_path: Path):
    out = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path), str(PROJECT_ROOT)], capture_output=True,
                         text=True, timeout=60, cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused: "), out.stdout + out.stderr
    assert "event 1 (tool_call)" in out.stdout and "after 100" in out.stdout  # names the event and how far it got
    lines = (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()
    assert [_strict(line)["kind"] for line in lines] == ["run_start"]  # the partial line was cut off again


def test_the_next_event_after_a_refused_one_keeps_the_sequence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import agent.record as record

    w = RecordWriter(tmp_path, "r", lambda: 1.0)
    _start(w)
    real_write, calls = record.os.write, []

    def flaky(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            real_write(fd, data[:10])
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(record.os, "write", flaky)
    with pytest.raises(RecordWriteError, match="No space left"):
        _call(w)
    _call(w)  # space again: the same event is written, with the sequence number it would have had
    w.close()
    assert [e.seq for e in read_record(w.path)] == [0, 1]
