"""Issue 24, items 3 and 5: a per-client cap on open sessions, and no empty record file after a failed write.

A client is the peer address of the request (the server has one shared token, which names nobody). One client
at its cap gets 429 `too_many_sessions_for_client` naming the cap, while another client still gets sessions; the
global cap stays. A record whose first line cannot be written (a full disk, ENOSPC; a file size limit, EFBIG)
leaves no file behind: a 0-byte .jsonl would pass for a session that was recorded and did nothing.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import chamber
from protocols.api import create_app
from protocols.api.record import RecordFiles, RecordUnavailable, SessionRecord
from protocols.service_defaults import DEFAULT_MAX_SESSIONS_PER_CLIENT
from support import FullDisk, ManualClock

CLAIM = "dps310-operating-range"
LOOPBACK = "http://127.0.0.1"


@pytest.fixture
def wt():
    c = chamber.open_chamber(backend="sim", chamber="wt", seed=2)
    yield c
    c.close()


def _client(app, host: str) -> TestClient:
    return TestClient(app, base_url=LOOPBACK, client=(host, 40000))


# ------------------------------------------------------------------------------------------ per-client cap
def test_one_client_at_its_cap_is_refused_and_another_client_is_not(wt, tmp_path, claims):
    wall = ManualClock(1.7e9)
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, max_sessions_per_client=3, wall_clock=wall,
                     session_idle_s=600.0)
    with _client(app, "10.0.0.5") as greedy, _client(app, "10.0.0.6") as other:
        sids = [greedy.post("/sessions", json={"claim_id": CLAIM}).json()["session_id"] for _ in range(3)]
        r = greedy.post("/sessions", json={"claim_id": CLAIM})
        assert r.status_code == 429, r.text
        error = r.json()["error"]
        assert error["code"] == "too_many_sessions_for_client"
        assert "max_sessions_per_client = 3" in error["message"] and "10.0.0.5" in error["message"]
        assert r.headers["Retry-After"] == "60"
        assert len(list(tmp_path.glob("*.jsonl"))) == 3  # the refused one left no record file
        assert other.post("/sessions", json={"claim_id": CLAIM}).status_code == 201  # not locked out
        assert greedy.delete(f"/sessions/{sids[0]}").status_code == 200
        assert greedy.post("/sessions", json={"claim_id": CLAIM}).status_code == 201
        assert greedy.post("/sessions", json={"claim_id": CLAIM}).status_code == 429
        wall.now += 601.0  # its own idle sessions expire first, as for the global cap
        assert greedy.post("/sessions", json={"claim_id": CLAIM}).status_code == 201
        assert greedy.get(f"/sessions/{sids[1]}").json()["end_reason"] == "expired"


def test_the_global_cap_still_holds_across_clients(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, max_sessions=4, max_sessions_per_client=3)
    with _client(app, "10.0.0.7") as a, _client(app, "10.0.0.8") as b:
        assert [a.post("/sessions", json={"claim_id": CLAIM}).status_code for _ in range(3)] == [201] * 3
        assert b.post("/sessions", json={"claim_id": CLAIM}).status_code == 201
        r = b.post("/sessions", json={"claim_id": CLAIM})
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_sessions", r.text


def test_the_default_cap_lets_a_client_open_16_and_no_more(wt, tmp_path, claims):
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims)
    with _client(app, "10.0.0.9") as http:
        codes = [http.post("/sessions", json={"claim_id": CLAIM}).status_code for _ in range(17)]
    assert DEFAULT_MAX_SESSIONS_PER_CLIENT == 16 and codes == [201] * 16 + [429]


def test_caps_below_one_are_refused(wt, tmp_path, claims):
    with pytest.raises(ValueError, match="max_sessions_per_client must be >= 1, got 0"):
        create_app({"wt": wt}, record_dir=tmp_path, claims=claims, max_sessions_per_client=0)


# ---------------------------------------------------------------------------------- no empty record file
def test_a_session_whose_first_line_fails_leaves_no_file(wt, tmp_path, claims):
    disk = FullDisk(armed=True)
    app = create_app({"wt": wt}, record_dir=tmp_path, claims=claims, record_files=RecordFiles(opener=disk))
    with TestClient(app, base_url=LOOPBACK) as http:
        r = http.post("/sessions", json={"claim_id": CLAIM})
        assert r.status_code == 503 and r.json()["error"]["code"] == "record_unavailable", r.text
        assert list(tmp_path.glob("*.jsonl")) == []  # neither a 0-byte nor a half-line file
        disk.armed = False
        r = http.post("/sessions", json={"claim_id": CLAIM})
        assert r.status_code == 201
    (path,) = tmp_path.glob("*.jsonl")
    assert path.name == f"{r.json()['session_id']}.jsonl" and path.read_text().count("\n") == 2


def test_a_later_line_that_fails_keeps_the_earlier_lines(tmp_path):
    disk = FullDisk(armed=False)
    record = SessionRecord(tmp_path / "s.jsonl", lambda: 1.0, RecordFiles(opener=disk))
    record.write("request", body={"n": 1})
    disk.armed = True
    with pytest.raises(RecordUnavailable, match="No space left"):
        record.write("response", body={"n": 2})
    assert [e["kind"] for e in record.read()] == ["request"]  # the file stays, whole lines only


def test_a_file_size_limit_on_the_first_line_leaves_no_file(tmp_path):
    # A real write(2) refused by the kernel (RLIMIT_FSIZE, EFBIG; SIGXFSZ ignored), in a child process.
    script = textwrap.dedent(f"""
        import resource, signal, sys
        from pathlib import Path
        from protocols.api.record import RecordFiles, RecordUnavailable, SessionRecord
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (40, resource.RLIM_INFINITY))
        record = SessionRecord(Path({str(tmp_path / "big.jsonl")!r}), lambda: 1.0, RecordFiles())
        try:
            record.write("request", body={{"text": "x" * 200}})
        except RecordUnavailable as exc:
            print("refused", exc.cause.errno)
            sys.exit(0)
        sys.exit(1)
    """)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", str(errno.EFBIG)]
    assert not (tmp_path / "big.jsonl").exists()
