"""Issue 32: accounts a group can trust. Logins resist guessing (10 failures per account and address in 10 min,
then 429 with Retry-After and no hash; other accounts and addresses unaffected), an unknown name costs the same
hash as a known one, every 401 carries `WWW-Authenticate: Basic` and the client's error body; accounts have a life
cycle (a removed user's queue CANCELED with the reason, their sessions ended, their links dead, their finished data
kept; the same name added again is a new account that sees nothing), an audit says who did what; the demo account
exists only in demo mode; the lab's files are private whatever the umask.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from argon2 import PasswordHasher
from fastapi.testclient import TestClient

from protocols.remote_lab import audit, store
from protocols.remote_lab.accounts import Accounts
from protocols.remote_lab.app import create_app
from protocols.remote_lab.lab_file import demo_lab
from protocols.remote_lab.logins import LoginLimiter
from remote_lab_support import add_user, poll, running_lab, write_lab_file
from test_remote_lab_sharing import login

ROOT = Path(__file__).resolve().parents[1]
ERROR_BODY = {"message", "request_id", "scheduler_id"}


class CountingHasher(PasswordHasher):
    """argon2 at test cost, counting the hashes it verifies."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=1024, parallelism=1)
        self.verified = 0
        self._lock = threading.Lock()

    def verify(self, hash, password):  # noqa: A002 - argon2's own parameter name
        with self._lock:
            self.verified += 1
        return super().verify(hash, password)


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api(tmp_path):
    engine = store.open_store(f"sqlite:///{tmp_path / 'lab.sqlite'}")
    lab = demo_lab()
    store.register_chambers(engine, lab.spec.chambers)
    clock, hasher = Clock(), CountingHasher()
    accounts = Accounts(engine, clock, hasher)
    for name in ("ann", "bob"):
        accounts.add(name, f"{name}-password")
    app = create_app(engine, lab, accounts, scheduler_id="t", clock=clock, limiter=LoginLimiter(clock))
    yield app, clock, hasher, engine
    engine.dispose()


def get(app, auth, address="10.0.0.1", path="/v0/experiments", headers=None):
    with TestClient(app, client=(address, 5000)) as http:
        return http.get(path, auth=auth, headers=headers)


def test_ten_failed_logins_from_one_address_limit_that_account_there_without_hashing(api):
    app, clock, hasher, _ = api
    for _ in range(10):
        assert get(app, ("ann", "wrong-guess")).status_code == 401
    assert hasher.verified == 10
    limited = get(app, ("ann", "ann-password"))  # even the right password: the pair is limited, nothing hashed
    assert limited.status_code == 429 and hasher.verified == 10
    assert int(limited.headers["Retry-After"]) == 600 and set(limited.json()) == ERROR_BODY
    assert "try again in 600 s" in limited.json()["message"]
    assert get(app, ("ann", "ann-password"), address="10.0.0.2").status_code == 200  # another address
    assert get(app, ("bob", "bob-password")).status_code == 200  # another account, same address
    clock.now += 599
    assert get(app, ("ann", "ann-password")).status_code == 429
    clock.now += 1.5  # the window has passed the first failure
    assert get(app, ("ann", "ann-password")).status_code == 200


def test_an_unknown_name_costs_one_hash_like_a_known_one_and_every_401_challenges(api):
    app, _, hasher, _ = api
    for auth in [("ann", "wrong-guess"), ("nobody", "wrong-guess")]:
        before = hasher.verified
        refused = get(app, auth)
        assert refused.status_code == 401 and hasher.verified == before + 1
        assert refused.headers["WWW-Authenticate"].startswith("Basic") and set(refused.json()) == ERROR_BODY
    for header in ["Basic !!!not-base64", "Basic " + base64.b64encode(b"no-colon").decode(), "Bearer x", "Basic"]:
        refused = get(app, None, headers={"Authorization": header})
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic"), header
        assert set(refused.json()) == ERROR_BODY
    assert get(app, None).headers["WWW-Authenticate"].startswith("Basic")  # no header at all


def test_a_download_link_expires_and_dies_with_its_account(api):
    app, clock, _, engine = api
    accounts = Accounts(engine, clock, PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
    ann = accounts.get("ann")
    experiment_id = store.submit(engine, user_id="ann", account_id=ann.account_id, chamber_id="wt-queue-1",
                                 config="standard", instructions=["MSR,1,0"], tag=None, now=clock(),
                                 scheduler_id="t", max_queued=5)
    assert store.finish(engine, experiment_id, status="DONE", now=clock(), reason=None, zip_data=b"zip",
                        checksum="c" * 64, from_status=("QUEUED",))
    with TestClient(app) as http:
        link = http.get(f"/v0/experiments/{experiment_id}", auth=("ann", "ann-password")).json()
        path = link["download_url"].split("testserver", 1)[1]
        assert http.get(path).status_code == 200
        assert link["download_expires_on"] == pytest.approx(clock() + 7 * 86400)
        clock.now += 7 * 86400 + 1
        assert http.get(path).status_code == 403
        clock.now -= 7 * 86400
        assert http.get(path).status_code == 200
        accounts.remove("ann")
        assert http.get(path).status_code == 403


def test_a_removed_user_is_cancelled_ended_and_a_new_account_of_that_name_sees_nothing(tmp_path):
    config = write_lab_file(tmp_path / "lab.yaml", {"q": {"board": "emulated:wt", "mode": "queue"},
                                                    "rt": {"board": "emulated:lt", "mode": "real-time"}})
    with running_lab(tmp_path, config=config) as served:
        ada = login(served.credentials_file)
        with httpx.Client(base_url=served.endpoint, auth=ada, timeout=60) as http:
            def submit(instructions):
                return http.post("/experiments", json={"chamber_id": "q", "chamber_config": "standard",
                                                       "instructions": instructions}).json()["experiment_id"]
            done = submit(["MSR,2,0"])
            finished = poll(lambda: (e := http.get(f"/experiments/{done}").json())["status"] == "DONE" and e, 30,
                            "the first experiment DONE")
            running = submit(["MSR,1,0", "WAIT,60000"])
            poll(lambda: http.get(f"/experiments/{running}").json()["n_observations"] == 1, 30, "it running")
            queued = [submit(["MSR,1,0"]) for _ in range(2)]
            session = http.post("/sessions", json={"chamber_id": "rt", "chamber_config": "standard"}).json()
        removed = cli("lab", "user", "remove", "ada", "--data", str(served.data_dir), "--json")
        assert removed["removed"] == "ada" and sorted(removed["canceled"]) == sorted(queued)
        assert removed["stopping"] == [running] and removed["sessions_on"] == ["rt"]

        password = tmp_path / "new-ada"
        password.write_text("a new password\n")
        cli("lab", "user", "add", "ada", "--password-file", str(password), "--data", str(served.data_dir))
        engine = store.open_store(f"sqlite:///{served.data_dir / 'lab.sqlite'}")
        try:
            rows = {e: store.get_experiment(engine, e) for e in [done, running, *queued]}
            for e in queued:
                assert rows[e]["status"] == "CANCELED" and "the account 'ada' was removed" in rows[e]["reason"]
            assert rows[done]["status"] == "DONE" and rows[done]["checksum"] == finished["checksum"]  # kept
            poll(lambda: store.get_experiment(engine, running)["status"] == "CANCELED", 15, "the running one ended")
        finally:
            engine.dispose()
        with httpx.Client(base_url=served.endpoint, auth=("ada", "a new password"), timeout=60) as http:
            assert http.get("/experiments").json() == {"experiments": []}
            assert http.get(f"/experiments/{done}").status_code == 403
            ended = http.post(f"/sessions/{session['session_id']}/instructions", json={"instructions": ["MSR,1,0"]})
            assert ended.status_code == 403
        assert httpx.get(finished["download_url"], timeout=30).status_code == 403  # the old link died
        with httpx.Client(base_url=served.endpoint, auth=ada, timeout=60) as http:
            assert http.get("/experiments").status_code == 401  # the old password is gone with the account
    lines = cli("lab", "audit", "--user", "ada", "--data", str(served.data_dir), "--json")["entries"]
    actions = [e["action"] for e in lines]
    assert actions[0] == "user-add" and actions.count("submit") == 4 and "session-open" in actions
    assert actions[-2:] == ["user-remove", "user-add"]
    assert lines[-1]["account_id"] != lines[0]["account_id"]  # a new account under the old name
    assert all(e["address"] for e in lines if e["action"] == "submit")
    since = cli("lab", "audit", "--since", "1h", "--data", str(served.data_dir), "--json")["entries"]
    assert len(since) >= len(lines)


def cli(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if "--json" in args else {}


def test_the_demo_account_is_disabled_when_a_lab_file_is_served_from_its_folder(tmp_path):
    data = tmp_path / "data"
    with running_lab(tmp_path, data=data) as demo:
        demo_login = login(demo.credentials_file)
        assert httpx.get(demo.endpoint + "/chambers", auth=demo_login, timeout=30).status_code == 200
    config = write_lab_file(tmp_path / "lab.yaml", {"real": {"board": "emulated:wt", "mode": "queue"}})
    said: list[str] = []
    with running_lab(tmp_path, config=config, data=data, said=said) as real:
        refused = httpx.get(real.endpoint + "/chambers", auth=demo_login, timeout=30)
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
        assert httpx.get(real.endpoint + "/chambers", auth=login(real.credentials_file), timeout=30
                         ).status_code == 200
    assert sum("the demo account of an earlier demo lab was disabled" in line for line in said) == 1, said
    engine = store.open_store(f"sqlite:///{data / 'lab.sqlite'}")
    try:
        assert [e["action"] for e in audit.read(engine, user="demo")][-1] == "demo-disabled"
    finally:
        engine.dispose()


def test_the_lab_files_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        loose = tmp_path / "loose"
        loose.mkdir(mode=0o755)
        os.chmod(loose, 0o755)
        said: list[str] = []
        with running_lab(tmp_path, data=loose, said=said) as served:
            add_user(served.data_dir, "eve")
            files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in served.data_dir.iterdir()}
            folder = stat.S_IMODE(served.data_dir.stat().st_mode)
    finally:
        os.umask(old)
    assert folder == 0o700 and any("was readable by other accounts (mode 0755); made it 0700" in s for s in said)
    for name in ("lab.sqlite", "lab.sqlite-wal", "lab.sqlite-shm", "demo.credentials", "eve.credentials"):
        assert files.get(name) == 0o600, (name, oct(files.get(name) or 0), files)
    assert not {n: m for n, m in files.items() if m & 0o077}, files


def test_a_fresh_data_folder_is_made_private_under_umask_022(tmp_path):
    old = os.umask(0o022)
    try:
        engine = store.open_store(f"sqlite:///{_fresh(tmp_path / 'fresh')}")
        try:
            Accounts(engine, time.time).add("ann", "ann-password")
            folder = tmp_path / "fresh"
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
        finally:
            engine.dispose()
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert modes == {n: 0o600 for n in ("lab.sqlite", "lab.sqlite-wal", "lab.sqlite-shm", "lab.sqlite.lock")}


def _fresh(folder: Path) -> Path:
    from protocols.remote_lab.service import database_url

    return Path(database_url(None, folder).removeprefix("sqlite:///"))
