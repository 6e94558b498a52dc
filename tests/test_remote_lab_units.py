"""The Remote Lab's parts one at a time: the lab file's one-line refusals, the checks before queuing, the result
zip the authors' client reads, and accounts."""

from __future__ import annotations

import hashlib
import io
import zipfile

import pytest
import yaml

from chamber.safe_state import RESTING
from protocols.remote_lab import store
from protocols.remote_lab.accounts import AccountError, Accounts, read_password_file
from protocols.remote_lab.lab_file import LabFileError, demo_lab, load_lab
from protocols.remote_lab.results import build_zip
from protocols.remote_lab.validation import InvalidProtocol, check_protocol, plain_decimal


def lab_file(tmp_path, text):
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, expected", [
    ("chambers: {}", "chambers"),
    ("chambers: {a: {board: /dev/ttyACM0}}", "expected kind: wt or lt for a real board"),
    ("chambers: {a: {board: 'emulated:xx'}}", "not emulated:wt or emulated:lt"),
    ("chambers: {a: {board: 'emulated:wt', configs: [camera]}}", "camera not a wt configuration"),
    ("chambers: {a: {board: 'emulated:wt', mode: batch}}", "mode"),
    ("chambers: {'a b': {board: 'emulated:wt'}}", "chamber id 'a b'"),
    ("chambers: {a: {board: 'emulated:wt', limits: {variables: {load_in: {max: 2, min: 3}}}}}", "chambers.a"),
    ("chambers: {a: {board: 'emulated:wt', safe: {load_in: true}}}", "chambers.a"),
    ("chambers: {a: {board: 'emulated:wt'}, a: {board: 'emulated:lt'}}", "appears twice"),
    ("chambers: {a: {board: 'emulated:wt', colour: red}}", "colour"),
])
def test_a_bad_lab_file_is_refused_in_one_line_naming_the_field(tmp_path, text, expected):
    with pytest.raises(LabFileError) as caught:
        load_lab(lab_file(tmp_path, text))
    message = str(caught.value)
    assert "\n" not in message and expected in message and str(tmp_path / "lab.yaml") in message


def test_a_lab_file_carries_each_chambers_limits_and_safe_state(tmp_path):
    lab = load_lab(lab_file(tmp_path, """
chambers:
  tunnel-1: {board: 'socket://10.0.0.5:4000', kind: wt, mode: real-time,
             limits: {variables: {load_in: {max: 0.5}}}, safe: {pot_2: 0, load_out: 0}}
caps: {max_queued_per_user: 3}
"""))
    assert lab.kind("tunnel-1") == "wt" and lab.caps.max_queued_per_user == 3
    assert lab.safe["tunnel-1"].for_chamber("wt") == {**RESTING["wt"], "pot_2": 0}  # added to the resting state
    with pytest.raises(InvalidProtocol, match="'SET,load_in,0.75': expected"):
        check_protocol(["SET,load_in,0.75"], kind="wt", config="standard", limits=lab.limits["tunnel-1"],
                       caps=lab.caps)


@pytest.mark.parametrize("bad_entry, expected", [
    ("{board: 'emulated:wt', safe: {load_in: 0.5}}", "safe: field 'wt.load_in': load_in=0.5: load_in rests at 0"),
    ("{board: 'emulated:wt', limits: {variables: {hatch: {max: 30}}}, safe: {pot_2: 300}}",
     "safe: field 'wt.pot_2': pot_2=300: expected 0..255"),
    ("{board: 'emulated:wt', safe: {rpm_in: 0}}", "rpm_in is a sensor, expected an actuator"),
    ("{board: 'emulated:wt', safe: {red: 0}}", "expected an actuator of the wt chamber"),
    ("{board: 'emulated:wt', limits: {variables: {pot_2: {max: 100}}}, safe: {pot_2: 200}}",
     "outside the operator limit -inf..100"),
    ("{board: 'emulated:wt', limits: {variables: {load_in: {min: 0.2}}}}", "excludes load_in=0"),
    ("{board: 'emulated:wt', colour: red}", "colour"),
])
def test_one_bad_chamber_is_refused_in_one_line_and_the_others_are_served(tmp_path, bad_entry, expected):
    lab = load_lab(lab_file(tmp_path, f"chambers: {{good: {{board: 'emulated:lt'}}, bad: {bad_entry}}}"))
    assert list(lab.spec.chambers) == ["good"] and list(lab.refused) == ["bad"]
    reason = lab.refused["bad"]
    assert "\n" not in reason and expected in reason and "chambers.bad" in reason, reason
    assert lab.safe["good"].for_chamber("lt") == RESTING["lt"]


def test_the_demo_lab_has_a_wind_and_a_light_tunnel_in_each_mode():
    lab = demo_lab()
    assert sorted((e.chamber_kind, e.mode) for e in lab.spec.chambers.values()) == [
        ("lt", "queue"), ("lt", "real-time"), ("wt", "queue"), ("wt", "real-time")]


def test_the_clients_float_repr_is_sent_as_a_plain_decimal():
    assert plain_decimal("SET,pot_1,1e-05") == "SET,pot_1,0.00001"
    assert plain_decimal("SET,load_in,1.0") == "SET,load_in,1.0"
    assert plain_decimal("MSR,1e3,0") == "MSR,1e3,0"  # only SET values are rewritten; this MSR stays refused
    checked = check_protocol(["SET,pot_1,1e-05", "MSR,2,0", "WAIT,10"], kind="wt", config="standard", limits=None,
                             caps=demo_lab().caps)
    assert checked.instructions == ["SET,pot_1,0.00001", "MSR,2,0", "WAIT,10"] and checked.rows == 2


@pytest.mark.parametrize("instructions, expected", [
    (["RST"], "expected SET,<variable>,<value> | MSR,<n>,<delay> | WAIT,<ms>"),
    (["WAIT_INPUT,press enter"], "the Remote Lab language"),
    ([5], "expected a string"),
    (["SET,load_in,0.5\nMSR,1,0"], "one instruction"),
    (["MSR,0,0"], "line 1: 'MSR,0,0': expected MSR"),
    (["WAIT,600001"], "a WAIT of at most 600000 ms"),
    (["MSR,10001,0"], "an MSR of at most 10000 rows"),
    (["WAIT,600000"] * 37, "the WAITs add up to"),
    (["MSR,10000,0"] * 11, "the MSRs add up to 110000 rows"),
    (["SET,rpm_in,1", "SET,load_in,5", "SET,nope,1"], "line 2: 'SET,load_in,5'"),
])
def test_a_protocol_that_cannot_run_is_refused_before_queuing_naming_line_and_expectation(instructions, expected):
    with pytest.raises(InvalidProtocol) as caught:
        check_protocol(instructions, kind="wt", config="standard", limits=None, caps=demo_lab().caps)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_the_zip_is_what_the_authors_client_reads_and_its_checksum_is_of_its_bytes():
    data, checksum = build_zip("exp-1", "timestamp,config,counter", ["1.5,standard,0\n", "1.6,standard,1\n"], 2,
                               {"chamber_id": "wt-1"})
    assert hashlib.sha256(data).hexdigest() == checksum
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        meta = yaml.safe_load(archive.read("exp-1/metadata.yaml"))
        csv = archive.read(f"exp-1/{meta['observations_file']}").decode()
    assert meta["n_observations"] == 2 and meta["image_directory"] is None and meta["chamber_id"] == "wt-1"
    assert csv.splitlines() == ["timestamp,config,counter", "1.5,standard,0", "1.6,standard,1"]


def test_accounts_hash_passwords_and_refuse_what_they_should(tmp_path):
    engine = store.open_store(f"sqlite:///{tmp_path / 'lab.sqlite'}")
    accounts = Accounts(engine, clock=lambda: 1000.0)
    accounts.add("ann", "correct horse")
    with engine.connect() as db:
        stored = db.execute(store.users.select()).first().password_hash
    assert "correct horse" not in stored and stored.startswith("$argon2")
    assert accounts.check("ann", "correct horse") and accounts.check("ann", "correct horse")  # second: remembered
    assert not accounts.check("ann", "wrong horse!") and not accounts.check("bob", "correct horse")
    with pytest.raises(AccountError, match="exists already"):
        accounts.add("ann", "another one")
    with pytest.raises(AccountError, match="at least 8"):
        accounts.add("bob", "short")
    with pytest.raises(AccountError, match="user name"):
        accounts.add("bob smith", "long enough")
    accounts.remove("ann")
    assert not accounts.check("ann", "correct horse")  # a removed account is never accepted from memory
    with pytest.raises(AccountError, match="no user 'ann'"):
        accounts.remove("ann")
    (tmp_path / "pw").write_text("s3cret-pass\n")
    assert read_password_file(tmp_path / "pw") == "s3cret-pass"
    with pytest.raises(AccountError, match="cannot read password file"):
        read_password_file(tmp_path / "missing")
    engine.dispose()


def test_an_exponent_too_large_for_a_float_is_refused_before_it_is_written_out():
    caps = demo_lab().caps
    for value in ("1e-9999999", "1e-400", "1e-300"):  # the last is a float, but 302 characters written out
        with pytest.raises(InvalidProtocol, match="expected"):
            check_protocol([f"SET,load_in,{value}"], kind="wt", config="standard", limits=None, caps=caps)
    assert check_protocol(["SET,load_in,1e-07"], kind="wt", config="standard", limits=None,
                          caps=caps).instructions == ["SET,load_in,0.0000001"]


def test_only_the_chambers_lease_holder_claims_its_experiments(tmp_path):
    engine = store.open_store(f"sqlite:///{tmp_path / 'lab.sqlite'}")
    store.register_chambers(engine, ["wt-1"])
    store.submit(engine, user_id="ann", chamber_id="wt-1", config="standard", instructions=["MSR,1,0"], tag=None,
                 now=1.0, scheduler_id="t", max_queued=5)
    assert store.claim_next(engine, "wt-1", "w1", 2.0) is None  # no lease: a worker taken over claims nothing
    assert store.take_lease(engine, "wt-1", "w1", ttl=6) is None
    assert store.claim_next(engine, "wt-1", "w2", 2.0) is None
    assert store.claim_next(engine, "wt-1", "w1", 2.0).instructions == ["MSR,1,0"]
    engine.dispose()
