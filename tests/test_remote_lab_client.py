"""Our Remote Lab (protocols/remote_lab/) driven by the chamber authors' own client, PyPI `causalchamber`
(`causalchamber.lab`: Lab, Chamber, Batch), called unmodified with `endpoint=` our server — the client is the
contract. The flows are those of the client's former test suite (causalchamber/lab/test/test_basic_flow.py) and
its README examples (examples/example_readme_queue.py, example_readme_rt.py), adapted to our Mk1 chambers: queue
mode (submit, poll, download, checksum, queue positions, cancel, refusals, accounts, per-user limits), real-time
mode (sessions, SET/MSR, batches, takeover), first on the demo lab's emulated boards, then on the real Mk1
firmware (../shared/firmware-harness) served over TCP.
"""

from __future__ import annotations

import configparser
import hashlib
import io
import re
import subprocess
import sys
import zipfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import requests
import yaml

from firmware_harness import firmware_build, real_board  # noqa: F401  (fixture)
from firmware_bridge.variables import layout_for
from remote_lab_support import RunningLab, add_user, poll, running_lab, write_credentials, write_lab_file

lab = pytest.importorskip("causalchamber.lab", reason="needs the authors' client: pip install causalchamber==0.2.8")
from causalchamber.lab.exceptions import UserError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FINAL = ("DONE", "FAILED", "CANCELED")
PUBLIC_START = ["timestamp", "config", "counter", "flag", "intervention"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    return ANSI.sub("", text)


def connect(served: RunningLab, **kw: Any) -> Any:
    return lab.Lab(credentials_file=str(served.credentials_file), endpoint=served.endpoint, verbose=False, **kw)


def ended(rlab: Any, experiment_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """Poll get_experiment (as the README does, with a deadline instead of a loop forever) to a final status."""
    return poll(lambda: (e := rlab.get_experiment(experiment_id))["status"] in FINAL and e, timeout,
                f"experiment {experiment_id} to end")


def running(rlab: Any, experiment_id: str, timeout: float = 15.0) -> dict[str, Any]:
    return poll(lambda: (e := rlab.get_experiment(experiment_id))["status"] == "RUNNING" and e, timeout,
                f"experiment {experiment_id} to start")


def long_experiment(rlab: Any, chamber_id: str = "wt-queue-1", wait_ms: int = 3000, tag: str | None = None) -> str:
    """An experiment that keeps its chamber busy for `wait_ms` (WAIT is real time even on fast emulated boards)."""
    protocol = rlab.new_experiment(chamber_id=chamber_id, config="standard")
    protocol.wait(wait_ms)
    protocol.measure(n=1)
    return protocol.submit(tag=tag)


def short_experiment(rlab: Any, chamber_id: str = "wt-queue-1", tag: str | None = None) -> str:
    protocol = rlab.new_experiment(chamber_id=chamber_id, config="standard")
    protocol.measure(n=1)
    return protocol.submit(tag=tag)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[RunningLab]:
    """A fresh demo lab per test: its queues start empty."""
    with running_lab(tmp_path) as served:
        yield served


@pytest.fixture(scope="module")
def shared_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningLab]:
    """One demo lab for the tests that leave no experiment behind (refusals, real-time sessions)."""
    with running_lab(tmp_path_factory.mktemp("shared-demo")) as served:
        yield served


# ------------------------------------------------------------------------------------------------ queue mode
def test_readme_queue_flow_on_the_demo_lab(demo: RunningLab, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rlab = lab.Lab(credentials_file=str(demo.credentials_file), endpoint=demo.endpoint)  # verbose, as a user would
    shown = plain(capsys.readouterr().out)
    for chamber_id, mode in [("wt-queue-1", "queue"), ("lt-queue-1", "queue"), ("wt-rt-1", "real-time")]:
        assert re.search(rf"READY\s+{chamber_id}\s+\w+ tunnel Mk1\s+{mode}\s+'standard'", shown), shown

    experiment = rlab.new_experiment(chamber_id="wt-queue-1", config="standard")
    experiment.wait(2000)  # as the README's settling wait: real time, so the experiment is not done at once
    experiment.measure(n=8)
    experiment.set("load_in", 1.0)
    experiment.measure(n=6)
    experiment.set("load_in", 0.01)
    experiment.measure(n=8)
    experiment_id = experiment.submit(tag="demo-queue")
    assert isinstance(experiment_id, str) and experiment_id

    capsys.readouterr()
    listed = rlab.get_experiments(print_max=1)  # "you can monitor the status of the experiment"
    table = plain(capsys.readouterr().out)
    assert [e["experiment_id"] for e in listed] == [experiment_id]
    row = rf"(QUEUED|RUNNING)\s+[\d.]+ %\s+demo-queue\s+{experiment_id}\s+wt-queue-1\s+standard"
    assert re.search(row, table), table
    with pytest.raises(UserError) as early:
        rlab.download_data(experiment_id, root=str(tmp_path), verbose=False)
    assert early.value.code == 0 and "not finished yet" in early.value.message
    first = rlab.get_experiment(experiment_id)
    assert first["status"] in ("QUEUED", "RUNNING") and first["tag"] == "demo-queue"
    assert first["chamber_id"] == "wt-queue-1" and first["config"] == "standard" and first["user_id"] == "demo"

    done = ended(rlab, experiment_id)
    assert done["status"] == "DONE", done
    assert done["n_observations"] == 22 and done["current_instruction"] == done["total_instructions"] == 6

    with pytest.raises(FileNotFoundError):
        rlab.download_data(experiment_id, root=str(tmp_path / "no" / "such" / "dir"), verbose=False)
    root = tmp_path / "downloads"
    root.mkdir()
    dataset = rlab.download_data(experiment_id, root=str(root), verbose=False)  # the client checks the SHA-256
    (zip_path,) = root.glob("causal_chamber_*.zip")
    assert sha256(zip_path) == done["checksum"]
    assert dataset.experiment_id == experiment_id
    assert dataset.metadata["n_observations"] == 22 and dataset.metadata["experiment_id"] == experiment_id

    df = dataset.dataframe
    assert len(df) == 8 + 6 + 8
    assert list(df.columns) == ["timestamp", "config"] + list(layout_for("wt").names)
    assert (df["config"] == "standard").all()
    assert np.diff(df["counter"]).tolist() == [1.0] * 21  # consecutive rows, none lost between chunks
    load = df["load_in"].to_numpy()
    assert load[0] not in (1.0, pytest.approx(0.01)) and (load[:8] == load[0]).all()  # the safe state
    assert load[8:14] == pytest.approx([1.0] * 6) and load[14:] == pytest.approx([0.01] * 8, rel=1e-6)
    assert (np.diff(df["timestamp"]) >= 0).all()
    with pytest.raises(NotImplementedError):
        _ = dataset.image_arrays
    with pytest.raises(NotImplementedError):
        _ = dataset.image_iterator


def test_queue_positions_user_and_the_printed_table(demo: RunningLab, capsys: pytest.CaptureFixture) -> None:
    rlab = connect(demo)
    first = long_experiment(rlab, tag="queue-0")
    running(rlab, first)  # so positions do not depend on when the worker polls
    second, third = short_experiment(rlab, tag="queue-1"), short_experiment(rlab, tag="queue-2")
    capsys.readouterr()

    queue = rlab.get_queue(chamber_id="wt-queue-1", verbose=True)
    table = plain(capsys.readouterr().out)
    assert [(e["experiment_id"], e["position"]) for e in queue] == [(first, 0), (second, 1), (third, 2)]
    assert queue[0]["status"] == "RUNNING" and queue[0]["total_instructions"] == 2
    assert [e["status"] for e in queue[1:]] == ["QUEUED", "QUEUED"]
    for entry in queue:
        assert entry["user_id"] == "demo" and entry["chamber_id"] == "wt-queue-1" and entry["config"] == "standard"
        assert isinstance(entry["submitted_on"], float)
    assert "Active and queued experiments for chamber 'wt-queue-1'" in table
    assert "--- Active experiment ---" in table and "--- Queued experiments ---" in table
    for position, (experiment_id, tag) in enumerate([(second, "queue-1"), (third, "queue-2")], start=1):
        assert re.search(rf"\b{position}\s+QUEUED\s+{tag}\s+{experiment_id}\s+demo\s", table), table
    assert re.search(rf"RUNNING\s+queue-0\s+{first}\s+demo\s", table), table
    assert rlab.get_queue(chamber_id="lt-queue-1", verbose=False) == []

    finished = [ended(rlab, e) for e in (first, second, third)]
    assert [e["status"] for e in finished] == ["DONE"] * 3
    starts = [e["started_on"] for e in finished]
    assert starts == sorted(starts) and finished[0]["finished_on"] <= starts[1]  # one at a time, in order
    assert rlab.get_queue(chamber_id="wt-queue-1", verbose=False) == []


def test_cancel_a_queued_then_a_running_experiment(demo: RunningLab) -> None:
    rlab = connect(demo)
    protocol = rlab.new_experiment(chamber_id="wt-queue-1", config="standard")
    protocol.measure(n=5)
    protocol.wait(3000)
    protocol.measure(n=5)
    busy = protocol.submit(tag="to-cancel-running")
    waiting = short_experiment(rlab, tag="to-cancel-queued")

    answer = rlab.cancel_experiment(waiting)
    assert answer["experiment_id"] == waiting and answer["status"] == "CANCELED"
    canceled = rlab.get_experiment(waiting)
    assert canceled["status"] == "CANCELED" and canceled["started_on"] is None and canceled["n_observations"] == 0

    poll(lambda: rlab.get_experiment(busy)["n_observations"] >= 5, 15, "the first MSR's rows")
    assert rlab.cancel_experiment(busy)["status"] in ("STOPPING", "CANCELED")
    stopped = ended(rlab, busy, timeout=15)
    assert stopped["status"] == "CANCELED" and stopped["n_observations"] == 5, stopped
    with pytest.raises(UserError) as refused:  # the client downloads DONE experiments only
        rlab.download_data(busy, root="/tmp", verbose=False)
    assert refused.value.code == 0

    reply = requests.get(stopped["download_url"], timeout=30)  # no credentials: the URL carries a token
    assert reply.status_code == 200 and hashlib.sha256(reply.content).hexdigest() == stopped["checksum"]
    with zipfile.ZipFile(io.BytesIO(reply.content)) as archive:
        meta = yaml.safe_load(archive.read(f"{busy}/metadata.yaml"))
        rows = archive.read(f"{busy}/{meta['observations_file']}").decode().splitlines()
    assert meta["status"] == "CANCELED" and meta["n_observations"] == 5 and meta["image_directory"] is None
    assert rows[0].split(",")[:5] == PUBLIC_START and len(rows) == 1 + 5
    assert requests.get(stopped["download_url"][:-4] + "AAAA", timeout=30).status_code == 403
    with pytest.raises(UserError) as again:
        rlab.cancel_experiment(busy)
    assert again.value.code == 409


def test_refusals_map_to_the_clients_errors(shared_demo: RunningLab) -> None:
    rlab = connect(shared_demo)
    before = {e["experiment_id"] for e in rlab.get_experiments(verbose=False)}
    protocol = rlab.new_experiment(chamber_id="wt-queue-1", config="standard")
    protocol.measure(n=1)
    with pytest.raises(TypeError):
        protocol.submit(tag=123)

    ini = configparser.ConfigParser()
    ini.read(shared_demo.credentials_file)
    tuple_login = lab.Lab(credentials=(ini["api_keys"]["user"], ini["api_keys"]["password"]),
                          endpoint=shared_demo.endpoint, verbose=False)  # credentials as a tuple, not a file
    assert {c["chamber_id"] for c in tuple_login.get_available_chambers(verbose=False)} == {
        "wt-queue-1", "lt-queue-1", "wt-rt-1", "lt-rt-1"}
    with pytest.raises(UserError) as wrong_password:
        lab.Lab(credentials=("demo", "not-the-password"), endpoint=shared_demo.endpoint, verbose=False)
    assert wrong_password.value.code == 401
    with pytest.raises(UserError) as no_user:
        lab.Lab(credentials=("nobody", "not-the-password"), endpoint=shared_demo.endpoint, verbose=False)
    assert no_user.value.code == 401

    unknown = rlab.new_experiment(chamber_id="wt-nope", config="standard")
    unknown.measure(n=1)
    with pytest.raises(UserError) as no_chamber:
        unknown.submit()
    assert no_chamber.value.code == 403 and "wt-nope" in no_chamber.value.message

    invalid = rlab.new_experiment(chamber_id="wt-queue-1", config="standard")
    invalid.measure(n=1)
    invalid.set("load_in", 2)
    with pytest.raises(UserError) as bad_value:
        invalid.submit()
    assert bad_value.value.code == 400
    assert "line 2" in bad_value.value.message and "SET,load_in,2" in bad_value.value.message
    assert "expected" in bad_value.value.message

    wrong_config = rlab.new_experiment(chamber_id="wt-queue-1", config="camera")
    wrong_config.measure(n=1)
    with pytest.raises(UserError) as no_config:
        wrong_config.submit()
    assert no_config.value.code == 400 and "standard" in no_config.value.message

    real_time = rlab.new_experiment(chamber_id="wt-rt-1", config="standard")
    real_time.measure(n=1)
    with pytest.raises(UserError) as wrong_mode:
        real_time.submit()
    assert wrong_mode.value.code == 400 and "real-time" in wrong_mode.value.message
    assert {e["experiment_id"] for e in rlab.get_experiments(verbose=False)} == before  # nothing was queued


def test_a_restarted_lab_keeps_its_experiments_and_its_queue(tmp_path: Path) -> None:
    data = tmp_path / "lab-data"
    with running_lab(tmp_path, data=data) as served:
        rlab = connect(served)
        finished = short_experiment(rlab, tag="before")
        checksum = ended(rlab, finished)["checksum"]
        protocol = rlab.new_experiment(chamber_id="wt-queue-1", config="standard")
        protocol.measure(n=3)
        protocol.wait(3000)
        protocol.measure(n=2)
        interrupted = protocol.submit(tag="interrupted")
        waiting = short_experiment(rlab, tag="waiting")
        poll(lambda: rlab.get_experiment(interrupted)["n_observations"] >= 3, 15, "the first MSR's rows")
    with running_lab(tmp_path, data=data) as again:  # same database, a new port
        rlab = connect(again)
        assert again.endpoint != served.endpoint
        stopped = rlab.get_experiment(interrupted)
        assert stopped["status"] == "FAILED" and stopped["n_observations"] == 3, stopped  # never run again
        assert "stopped" in stopped["reason"]
        kept = requests.get(stopped["download_url"], timeout=30)
        assert kept.status_code == 200 and hashlib.sha256(kept.content).hexdigest() == stopped["checksum"]
        assert ended(rlab, waiting)["status"] == "DONE"  # the queue survived the restart
        assert rlab.get_experiment(finished)["checksum"] == checksum
        assert len(rlab.download_data(finished, root=str(tmp_path), verbose=False).dataframe) == 1


def test_protocol_properties_and_empty_protocols_as_upstream_submits_them(shared_demo: RunningLab) -> None:
    rlab = connect(shared_demo)
    protocol = rlab.new_experiment(chamber_id="wt-queue-1", config="standard")
    assert (protocol.chamber_id, protocol.config, protocol.instructions) == ("wt-queue-1", "standard", [])
    experiment_id = protocol.submit(tag="my_custom_tag")  # upstream's tests submit protocols with no instruction
    assert rlab.get_experiment(experiment_id)["tag"] == "my_custom_tag"
    done = ended(rlab, experiment_id)
    assert done["status"] == "DONE" and done["n_observations"] == 0 and done["total_instructions"] == 0


def test_a_done_experiment_without_rows_loads_as_an_empty_dataframe(shared_demo: RunningLab, tmp_path: Path) -> None:
    rlab = connect(shared_demo)
    protocol = rlab.new_experiment(chamber_id="wt-queue-1", config="standard")
    protocol.set("load_in", 0.5)
    experiment_id = protocol.submit()
    assert ended(rlab, experiment_id)["status"] == "DONE"
    df = rlab.download_data(experiment_id, root=str(tmp_path), verbose=False).dataframe
    assert len(df) == 0 and list(df.columns) == ["timestamp", "config"] + list(layout_for("wt").names)


def test_the_queue_of_a_real_time_chamber_is_refused(shared_demo: RunningLab) -> None:
    rlab = connect(shared_demo)
    with pytest.raises(UserError) as refused:
        rlab.get_queue(chamber_id="wt-rt-1", verbose=False)
    assert refused.value.code in (400, 403) and "real-time" in refused.value.message


def test_the_clients_transport_rules(shared_demo: RunningLab, tmp_path: Path) -> None:
    """The client's API doctests: /health answers, an unknown path or method is the lab's fault (LabError with the
    status), a wrong password the user's (UserError 401), an unreachable lab LabError code 1."""
    from causalchamber.lab.api import API
    from causalchamber.lab.exceptions import LabError

    base = shared_demo.endpoint.rsplit("/v0", 1)[0]
    api = API(str(shared_demo.credentials_file), endpoint=base)
    assert api.make_request("GET", "/health", None).json()["status"] == "ok"
    for path, code in [("/health", 405), ("/wrong_path", 404)]:
        with pytest.raises(LabError) as fault:
            api.make_request("POST", path, {"experiment_id": "123"})
        assert fault.value.code == code
    with pytest.raises(UserError) as refused:
        API(credentials=("demo", "not-the-password"), endpoint=shared_demo.endpoint).make_request("POST", "sessions/")
    assert refused.value.code == 401 and refused.value.message
    with pytest.raises(UserError) as malformed:
        API(str(shared_demo.credentials_file), endpoint=shared_demo.endpoint).make_request("POST", "sessions", None)
    assert malformed.value.code == 400
    with pytest.raises(LabError) as unreachable:
        API(str(shared_demo.credentials_file), endpoint="http://127.0.0.1:9/v0").make_request("GET", "chambers")
    assert unreachable.value.code == 1


# ------------------------------------------------------------------------------------------------ accounts
def test_users_see_only_their_own_experiments(demo: RunningLab, tmp_path: Path) -> None:
    password_file = tmp_path / "bob.password"
    password_file.write_text("bob-password-1\n")
    added = subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), "lab", "user", "add", "bob",
                            "--password-file", str(password_file), "--data", str(demo.data_dir)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    bob_file = write_credentials(tmp_path / "bob.ini", "bob", "bob-password-1")
    alice = connect(demo)
    bob = lab.Lab(credentials_file=str(bob_file), endpoint=demo.endpoint, verbose=False)

    theirs = long_experiment(alice, wait_ms=1500, tag="alice")
    for action in (lambda: bob.get_experiment(theirs), lambda: bob.cancel_experiment(theirs),
                   lambda: bob.download_data(theirs, root=str(tmp_path), verbose=False)):
        with pytest.raises(UserError) as refused:
            action()
        assert refused.value.code == 403
    assert bob.get_experiments(verbose=False) == []
    mine = short_experiment(bob, tag="bob")
    assert [e["experiment_id"] for e in bob.get_experiments(verbose=False)] == [mine]
    assert mine not in [e["experiment_id"] for e in alice.get_experiments(verbose=False)]
    queue = bob.get_queue(chamber_id="wt-queue-1", verbose=False)  # the queue is public: who waits for what
    assert {e["experiment_id"]: e["user_id"] for e in queue}.get(mine) == "bob"
    assert ended(alice, theirs)["status"] == "DONE" and ended(bob, mine)["status"] == "DONE"
    assert alice.get_experiment(theirs)["status"] == "DONE"  # bob's cancel did nothing


def test_a_user_at_the_queued_limit_is_refused(tmp_path: Path) -> None:
    config = write_lab_file(tmp_path / "lab.yaml", {"wt-q": {"board": "emulated:wt", "mode": "queue"}},
                            caps={"max_queued_per_user": 2})
    with running_lab(tmp_path, config=config) as served:
        rlab = connect(served)
        first = long_experiment(rlab, chamber_id="wt-q", wait_ms=3000)
        running(rlab, first)  # a running experiment does not count as queued
        waiting = [short_experiment(rlab, chamber_id="wt-q") for _ in range(2)]
        with pytest.raises(UserError) as limit:
            short_experiment(rlab, chamber_id="wt-q")
        assert limit.value.code == 403 and "2" in limit.value.message
        other = connect(served._replace(credentials_file=add_user(served.data_dir, "zoe")))
        short_experiment(other, chamber_id="wt-q")  # the limit is per user
        rlab.cancel_experiment(waiting[0])
        short_experiment(rlab, chamber_id="wt-q")  # one fewer waiting: accepted again
        assert len(rlab.get_experiments(verbose=False)) == 4


# ------------------------------------------------------------------------------------------------ real-time mode
def test_real_time_session_set_measure_and_batch(shared_demo: RunningLab, capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    chamber = lab.Chamber(chamber_id="wt-rt-1", config="standard", credentials_file=str(shared_demo.credentials_file),
                          endpoint=shared_demo.endpoint)
    block = plain(capsys.readouterr().out)
    assert "Contacting chamber wt-rt-1" in block and "Causal Chamber® wt-rt-1" in block
    for field, value in [("chamber_id", "wt-rt-1"), ("model", "Wind tunnel Mk1"), ("configuration", "standard"),
                         ("session_id", chamber.session_id), ("endpoint", shared_demo.endpoint)]:
        assert re.search(rf"{field} : {re.escape(value)}\n", block), (field, block)
    assert chamber.model == "Wind tunnel Mk1" and chamber.session_id

    assert chamber.set("load_in", 0.5) is None
    df = chamber.measure(n=5)
    assert list(df.columns) == ["timestamp", "config"] + list(layout_for("wt").names)
    assert list(df.columns[:5]) == PUBLIC_START and len(df) == 5
    assert (df["load_in"] == 0.5).all() and (df["config"] == "standard").all()
    assert np.diff(df["counter"]).tolist() == [1.0] * 4

    batch = chamber.new_batch()
    batch.set("load_in", 0.2)
    batch.measure(n=3)
    batch.wait(100)
    batch.set("load_in", 0.8)
    batch.measure(n=2)
    rows = batch.submit()
    assert len(rows) == 5 and rows["load_in"].tolist() == pytest.approx([0.2] * 3 + [0.8] * 2, rel=1e-6)
    assert rows["counter"].iloc[0] == df["counter"].iloc[-1] + 1 and np.diff(rows["counter"]).tolist() == [1.0] * 4
    assert rows["timestamp"].iloc[3] - rows["timestamp"].iloc[2] >= 0.1  # the WAIT between the two MSRs

    chamber.set("load_in", 1e-05)  # the client sends Python's float repr: SET,load_in,1e-05
    assert chamber.measure(n=1)["load_in"].tolist() == pytest.approx([1e-05], rel=1e-6)

    with pytest.raises(UserError) as invalid:
        chamber.set("load_in", 2)
    assert invalid.value.code == 400 and "expected" in invalid.value.message
    with pytest.raises(UserError) as unknown:
        chamber.set("no_such_variable", 1)
    assert unknown.value.code == 400
    assert len(chamber.measure(n=1)) == 1  # a refused instruction leaves the session usable


def test_light_tunnel_session(shared_demo: RunningLab) -> None:
    chamber = lab.Chamber(chamber_id="lt-rt-1", config="standard", credentials_file=str(shared_demo.credentials_file),
                          endpoint=shared_demo.endpoint, verbose=0)
    assert chamber.model == "Light tunnel Mk1"
    for colour, value in [("red", 200), ("green", 100), ("blue", 50)]:
        assert chamber.set(colour, value) is None
    df = chamber.measure(n=3)
    assert list(df.columns) == ["timestamp", "config"] + list(layout_for("lt").names)
    assert (df["red"] == 200).all() and (df["green"] == 100).all() and (df["blue"] == 50).all()


def test_a_second_session_takes_the_chamber_over(shared_demo: RunningLab) -> None:
    first = lab.Chamber(chamber_id="wt-rt-1", config="standard", credentials_file=str(shared_demo.credentials_file),
                        endpoint=shared_demo.endpoint, verbose=0)
    assert len(first.measure(n=1)) == 1
    second = lab.Chamber(chamber_id="wt-rt-1", config="standard",
                         credentials_file=str(shared_demo.credentials_file), endpoint=shared_demo.endpoint, verbose=0)
    assert second.session_id != first.session_id
    with pytest.raises(UserError) as taken:
        first.set("load_in", 0.3)
    assert taken.value.code == 409 and second.session_id in taken.value.message
    second.set("load_in", 0.3)
    assert second.measure(n=2)["load_in"].tolist() == pytest.approx([0.3, 0.3])
    assert second.measure(n=1)["counter"].iloc[0] == 3  # the takeover reset the chamber: counting starts anew


def test_real_time_refusals(shared_demo: RunningLab) -> None:
    credentials = str(shared_demo.credentials_file)
    for chamber_id, config, code in [("wt-nope", "standard", 403), ("wt-queue-1", "standard", 400),
                                     ("wt-rt-1", "camera", 400)]:
        with pytest.raises(UserError) as refused:
            lab.Chamber(chamber_id=chamber_id, config=config, credentials_file=credentials,
                        endpoint=shared_demo.endpoint, verbose=0)
        assert refused.value.code == code, (chamber_id, config, refused.value.message)
    with pytest.raises(UserError) as wrong_password:
        lab.Chamber(chamber_id="wt-rt-1", config="standard", credentials=("demo", "not-the-password"),
                    endpoint=shared_demo.endpoint, verbose=0)
    assert wrong_password.value.code == 401


# ------------------------------------------------------------------------------------------------ real firmware
@pytest.fixture(scope="module")
def firmware_lab(firmware_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningLab]:  # noqa: F811
    """A lab file with two real Mk1 wind-tunnel firmwares on TCP: one queue chamber, one real-time chamber."""
    folder = tmp_path_factory.mktemp("firmware-lab")
    with ExitStack() as stack:
        queue_board = stack.enter_context(real_board(firmware_build, "wt"))
        session_board = stack.enter_context(real_board(firmware_build, "wt"))
        config = write_lab_file(folder / "lab.yaml", {
            "fw-queue": {"board": queue_board, "kind": "wt", "mode": "queue"},
            "fw-rt": {"board": session_board, "kind": "wt", "mode": "real-time"}})
        yield stack.enter_context(running_lab(folder, config=config, ready_timeout=120))


def test_queue_experiment_on_the_real_firmware(firmware_lab: RunningLab, tmp_path: Path) -> None:
    rlab = connect(firmware_lab)
    protocol = rlab.new_experiment(chamber_id="fw-queue", config="standard")
    protocol.measure(n=2)
    protocol.set("load_in", 0.5)
    protocol.measure(n=3)
    experiment_id = protocol.submit(tag="firmware")
    done = ended(rlab, experiment_id, timeout=90)
    assert done["status"] == "DONE", done
    df = rlab.download_data(experiment_id, root=str(tmp_path), verbose=False).dataframe
    assert list(df.columns) == ["timestamp", "config"] + list(layout_for("wt").names)
    assert len(df) == 5 and np.diff(df["counter"]).tolist() == [1.0] * 4
    assert df["load_in"].tolist()[2:] == pytest.approx([0.5] * 3)


def test_real_time_session_on_the_real_firmware(firmware_lab: RunningLab) -> None:
    chamber = lab.Chamber(chamber_id="fw-rt", config="standard", credentials_file=str(firmware_lab.credentials_file),
                          endpoint=firmware_lab.endpoint, verbose=0)
    assert chamber.set("load_in", 0.25) is None
    df = chamber.measure(n=2)
    assert list(df.columns[:5]) == PUBLIC_START and len(df) == 2 and (df["load_in"] == 0.25).all()
    batch = chamber.new_batch()
    batch.set("load_in", 0.75)
    batch.measure(n=2)
    rows = batch.submit()
    assert rows["load_in"].tolist() == [0.75, 0.75] and rows["counter"].iloc[0] == df["counter"].iloc[-1] + 1
    assert len(chamber.measure(n=2, delay=300)) == 2  # accepted; the Mk1 firmware echoes the delay and ignores it
    with pytest.raises(UserError) as invalid:
        chamber.set("load_in", 2)
    assert invalid.value.code == 400
