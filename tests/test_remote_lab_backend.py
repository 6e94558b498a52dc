"""The Remote Lab backend (chamber/remote_lab_backend.py): URL and credentials parsing, the multipart CSV reply,
the status-code mapping and the driver's rules over it (a fake lab on httpx.MockTransport: that layer only), then
the whole path against our own Remote Lab server (tests/remote_lab_support.py: the demo lab's emulated chambers):
open_chamber on a lab+http:// URL, a refused password, and `chamberlab check` on a Remote Lab chamber."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from chamber.driver import Chamber
from chamber.errors import InvalidSetting, LinkLost
from chamber.public_csv import format_cell, header
from chamber.remote_lab_backend import (URL_FORM, CredentialsError, NotMk1Chamber, RemoteLabBackend, RemoteLabBusy,
                                        RemoteLabFault, RemoteLabRefused, RemoteLabRejected, RemoteLabUnreachable,
                                        RemoteLabUrlError, parse_remote_lab_url, parse_rows_body, read_credentials)
from chamber.selection import SelectionError, lab_credentials_of, selection_of
from firmware_bridge.errors import ExchangeAbandoned, FrameRejected, ProtocolError
from firmware_bridge.variables import UNSET, layout_for
from tests.support import cli_subprocess

ENDPOINT = "http://lab.test:8080/v0"
WT = layout_for("wt").names


# ----------------------------------------------------------------------------------------------- a fake lab
def multipart(csv_text: str, boundary: str = "chamberlab-7f3a") -> tuple[str, str]:
    """A reply body as the authors' server sends it: multipart/mixed with one text/csv part."""
    body = f"--{boundary}\r\nContent-Type: text/csv\r\n\r\n{csv_text}\r\n--{boundary}--\r\n"
    return body, f"multipart/mixed; boundary={boundary}"


class FakeLab:
    """POST sessions / instructions as the authors' API; each MSR row's values are its counter and the last SETs."""

    def __init__(self, names: tuple[str, ...] = WT, config: str = "standard") -> None:
        self.names, self.config = names, config
        self.requests: list[tuple[str, Any]] = []
        self.sessions = 0
        self.counter = 0
        self.applied: dict[str, float] = {}
        self.fail: dict[str, tuple[int, dict[str, Any]]] = {}  # instruction prefix -> status, JSON body
        self.short_by = 0
        self.gate: threading.Event | None = None  # MSR waits for it (an exchange to abandon)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != httpx.BasicAuth("ada", "s3cret")._auth_header:
            return httpx.Response(401, json={"message": "Invalid credentials.", "request_id": "r1",
                                             "scheduler_id": None})
        body = json.loads(request.content)
        path = request.url.path
        self.requests.append((path, body))
        if path == "/v0/sessions":
            self.sessions += 1
            self.counter, self.applied = 0, {}
            return httpx.Response(200, json={"session_id": f"s{self.sessions}", "chamber_model": "wt-mk1",
                                             "config_version": "1", "documentation": "", "codebase_version": "0"})
        assert path == f"/v0/sessions/s{self.sessions}/instructions", path
        (instruction,) = body["instructions"]
        for prefix, (status, error) in self.fail.items():
            if instruction.startswith(prefix):
                return httpx.Response(status, json=error)
        if instruction.startswith("SET,"):
            _, name, value = instruction.split(",")
            self.applied[name] = float(value)
            return httpx.Response(200, content=b"")
        _, n, _delay = instruction.split(",")
        if self.gate is not None:
            self.gate.wait(10)
        rows = []
        for _ in range(int(n) - self.short_by):
            values = [self.applied.get(name, UNSET) for name in self.names]
            values[0] = float(self.counter)
            values[3] = 1.5  # a value that is not -9999
            rows.append(",".join([repr(1_764_633_600.0 + self.counter), self.config, *map(format_cell, values)]))
            self.counter += 1
        text, content_type = multipart("\n".join([header(self.names), *rows]) + "\n")
        return httpx.Response(200, text=text, headers={"content-type": content_type})


def backend(lab: FakeLab, password: str = "s3cret") -> RemoteLabBackend:
    return RemoteLabBackend(ENDPOINT, "wt-rt-1", "standard", ("ada", password),
                            client=httpx.Client(transport=httpx.MockTransport(lab)), timeout=5.0)


# ----------------------------------------------------------------------------------------------- parsing
def test_urls_of_the_documented_form_and_refusals_naming_it() -> None:
    assert parse_remote_lab_url("lab+http://127.0.0.1:8081/v0/wt-rt-1") == ("http://127.0.0.1:8081/v0", "wt-rt-1",
                                                                            "standard")
    assert parse_remote_lab_url("lab+https://api.example.org/v0/lt-1?config=pressure-control") == (
        "https://api.example.org/v0", "lt-1", "pressure-control")
    for bad in ("http://127.0.0.1:8081/v0/wt", "lab+http://127.0.0.1:8081/v0/", "lab+ftp://h/v0/wt",
                "lab+http://u:p@h:1/v0/wt", "lab+http://h:1/v0/wt?config=a&x=1", "lab+http://h:port/v0/wt"):
        with pytest.raises(RemoteLabUrlError) as caught:
            parse_remote_lab_url(bad)
        assert URL_FORM in str(caught.value) and repr(bad) in str(caught.value)


def test_credentials_file_as_the_client_reads_it(tmp_path: Path) -> None:
    good = tmp_path / "lab.ini"
    good.write_text("[api_keys]\nuser = ada\npassword = s3cret%x\n")
    assert read_credentials(good) == ("ada", "s3cret%x")
    cases = {"[api_keys]\nuser = ada\n": "no password entry", "[keys]\nuser = a\n": "no [api_keys] section",
             "user = ada\n": "expected an .ini file", "[api_keys]\n": "no user and no password"}
    for i, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.ini"
        path.write_text(text)
        with pytest.raises(CredentialsError) as caught:
            read_credentials(path)
        message = str(caught.value)
        assert expected in message and str(path) in message and "\n" not in message
    with pytest.raises(CredentialsError, match="cannot read the Remote Lab credentials file .*missing.ini"):
        read_credentials(tmp_path / "missing.ini")


def test_multipart_reply_parsed_as_the_client_does() -> None:
    csv_text = "timestamp,config,counter,flag,intervention,load_in\n10.5,standard,0.0,-9999.0,0.0,0.5\n"
    rows = parse_rows_body(*multipart(csv_text))
    assert rows is not None and rows.names == ("counter", "flag", "intervention", "load_in")
    assert rows.configs == ("standard",) and rows.timestamps.tolist() == [10.5]
    assert rows.values.tolist() == [[0.0, UNSET, 0.0, 0.5]]
    assert parse_rows_body("", "") is None
    with pytest.raises(ProtocolError, match="boundary"):
        parse_rows_body(csv_text, "text/csv")
    with pytest.raises(ProtocolError, match="timestamp,config"):
        parse_rows_body(*multipart("counter,flag\n1,2\n"))
    with pytest.raises(FrameRejected, match="CSV row 0 width"):
        parse_rows_body(*multipart("timestamp,config,counter\n1,standard\n"))


# ----------------------------------------------------------------------------------------------- the backend
def test_connect_set_measure_over_the_api() -> None:
    lab = FakeLab()
    chamber = Chamber(backend(lab)).connect()
    assert chamber.layout.chamber == "wt" and chamber.layout.names == WT and chamber.config == "standard"
    assert chamber.set("load_in", 0.5) == 0.5
    frame = chamber.measure(5)
    assert frame.values.shape == (5, len(WT)) and frame.values[:, 0].tolist() == [1, 2, 3, 4, 5]  # row 0: connect
    assert frame.values[:, WT.index("load_in")].tolist() == [0.5] * 5
    assert np.isnan(frame.values[:, WT.index("load_out")]).all()  # -9999 (unset) became NaN
    assert frame.host_timestamps.tolist() == [1_764_633_600.0 + i for i in range(1, 6)]
    sent = [b["instructions"] for p, b in lab.requests if p.endswith("/instructions")]
    assert sent == [["MSR,1,0"], ["SET,load_in,0.5"], ["MSR,5,0"]]
    assert lab.requests[0] == ("/v0/sessions", {"chamber_id": "wt-rt-1", "chamber_config": "standard"})
    assert chamber.link_stats()["requests"] == 4


def test_a_short_reply_is_never_a_partial_frame() -> None:
    lab = FakeLab()
    chamber = Chamber(backend(lab)).connect()
    lab.short_by = 1
    with pytest.raises(FrameRejected, match="row count: expected 5, received 4"):
        chamber.measure(5)


def test_status_codes_map_to_typed_one_line_errors() -> None:
    with pytest.raises(RemoteLabRefused) as refused:
        backend(FakeLab(), password="wrong").connect()
    assert str(refused.value) == (f"the Remote Lab at {ENDPOINT} refused user ada (401): Invalid credentials.; "
                                  "request_id r1")
    lab = FakeLab()
    chamber = Chamber(backend(lab), backoff=(0.0,), sleep=lambda s: None).connect()
    lab.fail["SET,hatch"] = (400, {"message": "hatch: expected 0..45, received 50", "request_id": "r2"})
    with pytest.raises(RemoteLabRejected) as rejected:
        chamber.backend.set("hatch", 50)
    assert isinstance(rejected.value, InvalidSetting) and str(rejected.value).startswith("hatch: expected 0..45")
    lab.fail = {"MSR": (409, {"message": "The chamber is busy."})}
    with pytest.raises(RemoteLabBusy) as busy:
        chamber.measure(2)
    assert isinstance(busy.value, LinkLost) and str(busy.value).startswith("link lost: The chamber is busy.")
    assert chamber.link_state()[0] == "down"
    lab.fail = {}
    assert chamber.set("load_in", 0.25) == 0.25 and lab.sessions == 2  # reconnected: a new session
    assert chamber.measure(1).link["reconnects"] == 1
    lab.fail = {"MSR": (500, {"message": "board halted", "scheduler_id": "q9"})}
    with pytest.raises(RemoteLabFault, match=r"board halted \(the Remote Lab .* failed on MSR,1,0: 500; scheduler_id q9"):
        chamber.measure(1)
    for error in (refused.value, rejected.value, busy.value):
        assert "\n" not in str(error)


def test_unreachable_lab_is_a_lost_link_naming_the_endpoint() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    lab = RemoteLabBackend(ENDPOINT, "wt", "standard", ("a", "b"), client=httpx.Client(
        transport=httpx.MockTransport(refuse)))
    with pytest.raises(RemoteLabUnreachable, match=f"no answer from the Remote Lab at {ENDPOINT} .*ConnectError"):
        lab.connect()


def test_a_chamber_that_is_not_mk1_is_refused_naming_the_missing_columns() -> None:
    mk2 = ("counter", "flag", "intervention", "load_in", "load_out", "pressure_upwind", "fan_in_speed")
    with pytest.raises(NotMk1Chamber) as caught:
        backend(FakeLab(names=mk2)).connect()
    assert "missing: hatch, pot_1" in str(caught.value) and "Mk1 chamber (wt/standard)" in str(caught.value)


def test_abandon_wakes_the_caller_at_once() -> None:
    lab = FakeLab()
    remote = backend(lab)
    remote.connect()
    lab.gate = threading.Event()
    outcome: list[BaseException] = []

    def measure() -> None:
        try:
            remote.measure(3)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=measure)
    worker.start()
    deadline = time.monotonic() + 5
    while remote._call is None or remote._call.finished:  # poll until the MSR is in flight
        assert time.monotonic() < deadline, "the MSR never started"
        time.sleep(0.01)
    remote.abandon()
    worker.join(5)  # a bound on the wait; the lab has not answered yet (its gate is still shut)
    assert not worker.is_alive() and isinstance(outcome[0], ExchangeAbandoned)  # woken by the abandon itself
    lab.gate.set()
    assert remote.settle(5).how in ("finished", "idle")  # the request ended once the lab answered


# ----------------------------------------------------------------------------------------------- wiring
def test_selection_needs_credentials_for_a_lab_port(tmp_path: Path) -> None:
    url = "lab+http://127.0.0.1:1/v0/wt-rt-1"
    with pytest.raises(SelectionError, match="--lab-credentials FILE .* or env CHAMBERLAB_LAB_CREDENTIALS"):
        lab_credentials_of(selection_of(None, [url]), {})
    creds = tmp_path / "lab.ini"
    creds.write_text("[api_keys]\nuser = ada\npassword = pw\n")
    assert lab_credentials_of(selection_of(None, [url]), {"CHAMBERLAB_LAB_CREDENTIALS": str(creds)}) == ("ada", "pw")
    assert lab_credentials_of(selection_of(None, [url], lab_credentials=creds), {}) == ("ada", "pw")
    assert lab_credentials_of(selection_of(None, ["socket://h:1"]), {}) is None
    with pytest.raises(RemoteLabUrlError):
        lab_credentials_of(selection_of(None, ["lab+http://h:1/"], lab_credentials=creds), {})


@pytest.mark.parametrize("argv,target", [
    (["check", "x", "--port", "lab+http://h:1/v0/wt", "--lab-credentials", "c.ini"], "protocols.check_job:lab_selection"),
    (["chamber", "info", "--port", "lab+http://h:1/v0/wt", "--lab-credentials", "c.ini"],
     "chamber.operator:board_selection"),
])
def test_cli_passes_lab_credentials_to_the_selection(argv: list[str], target: str) -> None:
    import bench_cli

    args = bench_cli.build_parser().parse_args(argv)
    selection = bench_cli.bind(target, args)
    assert selection.ports == ("lab+http://h:1/v0/wt",) and selection.lab_credentials == Path("c.ini")


def test_port_help_names_the_lab_url_form() -> None:
    import bench_cli

    for group in ("board", "chambers"):
        helps = {flags[0]: kw.get("help", "") for flags, kw in bench_cli.OPTIONS[group]}
        assert "lab+http://HOST:PORT/v0/CHAMBER_ID" in helps["--port"] and "--lab-credentials" in helps


# ----------------------------------------------------------------------------------------------- our own lab
@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Our Remote Lab (protocols.remote_lab, the demo lab: emulated chambers wt-rt-1 and lt-rt-1 in real-time mode),
    served in this process until the module's tests end, once every chamber is READY."""
    pytest.importorskip("protocols.remote_lab.service", reason="needs the Remote Lab server (protocols.remote_lab)")
    from tests.remote_lab_support import running_lab

    with running_lab(tmp_path_factory.mktemp("remote-lab")) as lab:
        yield {"endpoint": lab.endpoint, "credentials_file": str(lab.credentials_file)}


def lab_url(server: dict[str, Any], chamber_id: str) -> str:
    return "lab+" + server["endpoint"] + "/" + chamber_id


def test_open_chamber_on_the_remote_lab_sets_and_measures(lab_server: dict[str, Any]) -> None:
    from chamber import open_chamber

    before = time.time()
    chamber = open_chamber(lab_url(lab_server, "wt-rt-1"), lab_credentials=lab_server["credentials_file"])
    try:
        assert chamber.layout.chamber == "wt" and chamber.config == "standard" and chamber.layout.names == WT
        assert chamber.set("load_in", 0.5) == 0.5
        frame = chamber.measure(5)
        counters = frame.values[:, 0]
        assert frame.names == WT and frame.values.shape == (5, len(WT))
        assert np.diff(counters).tolist() == [1.0] * 4  # five consecutive rows, none dropped
        assert frame.values[:, WT.index("load_in")].tolist() == [0.5] * 5
        rpm = frame.values[:, WT.index("rpm_in")]
        assert rpm[-1] > 0 and (np.diff(rpm) >= 0).all()  # the emulated fan spins up at load 0.5: real rows
        assert before - 1 <= frame.host_timestamps.min() and frame.host_timestamps.max() <= time.time() + 1
        assert chamber.link_stats()["requests"] == 4 and chamber.link_stats()["request_failures"] == 0
    finally:
        chamber.close()


def test_a_wrong_password_is_refused_in_one_line(lab_server: dict[str, Any], tmp_path: Path) -> None:
    from chamber import open_chamber

    bad = tmp_path / "bad.ini"
    bad.write_text("[api_keys]\nuser = demo\npassword = not-the-password\n")
    with pytest.raises(RemoteLabRefused) as caught:
        open_chamber(lab_url(lab_server, "wt-rt-1"), lab_credentials=bad)
    message = str(caught.value)
    assert message.startswith(f"the Remote Lab at {lab_server['endpoint']} refused user demo (401): ")
    assert "\n" not in message and len(message.split("(401): ", 1)[1]) > 0  # the server's own message follows


def test_check_grades_a_claim_on_a_remote_lab_chamber(lab_server: dict[str, Any]) -> None:
    done = cli_subprocess("--json", "check", "dps310-operating-range", "--port", lab_url(lab_server, "wt-rt-1"),
                          "--lab-credentials", lab_server["credentials_file"], timeout_s=300)
    assert done.stdout.strip(), f"no JSON on stdout (exit {done.returncode}); stderr: {done.stderr[-2000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.get("verdict") in ("pass", "inconclusive", "fail"), result
    assert [o["chamber"] for o in result["safe_state"]] == ["wt"] and result["safe_state"][0]["confirmed"]
    assert "connected wt (standard" in done.stderr and "lab+http://" in done.stderr
