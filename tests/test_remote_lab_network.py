"""Issue 32: serving a group on a network. `lab serve` speaks HTTPS itself (the authors' client passes its queue and
real-time flows over it, trusting a self-signed certificate through REQUESTS_CA_BUNDLE); a non-loopback --host
without TLS is refused in one line unless --insecure-http; forwarded headers count only from --trusted-proxy;
--public-url is the base of the URLs handed out; the database password never comes from the command line.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from protocols.remote_lab.service import NetworkRefused, check_network
from remote_lab_support import poll, running_lab, write_lab_file
from test_remote_lab_sharing import login

ROOT = Path(__file__).resolve().parents[1]
FINAL = ("DONE", "FAILED", "CANCELED")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl, as an operator would make one for a test)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a self-signed certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                           str(cert), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    return cert, key


def test_the_authors_client_over_https_queue_and_real_time(tmp_path, certificate, monkeypatch):
    cert, key = certificate
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    with contextlib.redirect_stdout(io.StringIO()):  # the package prints a banner on import
        from causalchamber.lab import Chamber, Lab
    config = write_lab_file(tmp_path / "lab.yaml", {"q": {"board": "emulated:wt", "mode": "queue"},
                                                    "rt": {"board": "emulated:lt", "mode": "real-time"}})
    with running_lab(tmp_path, config=config, tls_cert=cert, tls_key=key) as served:
        assert served.endpoint.startswith("https://127.0.0.1:")
        user = login(served.credentials_file)
        lab = Lab(credentials=user, endpoint=served.endpoint, verbose=False)
        protocol = lab.new_experiment("q", "standard")
        protocol.set("load_in", 0.5)
        protocol.measure(3)
        experiment_id = protocol.submit(tag="tls")
        done = poll(lambda: (e := lab.get_experiment(experiment_id))["status"] in FINAL and e, 30, "DONE")
        assert done["status"] == "DONE" and done["download_url"].startswith("https://127.0.0.1:")
        df = lab.download_data(experiment_id, root=str(tmp_path), verbose=False).dataframe  # checksum checked
        assert len(df) == 3 and df["load_in"].tolist() == [0.5] * 3
        chamber = Chamber("rt", "standard", credentials=user, endpoint=served.endpoint, verbose=0)
        chamber.set("red", 100)
        assert chamber.measure(n=2)["red"].tolist() == [100, 100]
        with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port is not served
            httpx.get(served.endpoint.replace("https://", "http://") + "/chambers", auth=user, timeout=10)


def test_forwarded_headers_count_only_from_a_trusted_proxy_and_the_public_url_wins(tmp_path):
    config = write_lab_file(tmp_path / "lab.yaml", {"q": {"board": "emulated:wt", "mode": "queue"}})
    proxied = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    for options, scheme, address in [({}, "http://127.0.0.1", "127.0.0.1"),
                                     ({"trusted_proxy": ["127.0.0.1"]}, "https://127.0.0.1", "203.0.113.9"),
                                     ({"public_url": "https://lab.example.org/v0"}, "https://lab.example.org/v0/",
                                      "127.0.0.1")]:
        with running_lab(tmp_path, config=config, **options) as served:
            with httpx.Client(base_url=served.endpoint, auth=login(served.credentials_file), timeout=30) as http:
                experiment_id = http.post("/experiments", json={"chamber_id": "q", "chamber_config": "standard",
                                                                "instructions": ["MSR,1,0"]}, headers=proxied).json()[
                    "experiment_id"]
                done = poll(lambda: (e := http.get(f"/experiments/{experiment_id}", headers=proxied).json())[
                    "status"] == "DONE" and e, 30, "DONE")
            assert done["download_url"].startswith(scheme), (options, done["download_url"])
            from protocols.remote_lab import audit, store

            engine = store.open_store(f"sqlite:///{served.data_dir / 'lab.sqlite'}")
            try:
                assert [e["address"] for e in audit.read(engine) if e["action"] == "submit"] == [address]
            finally:
                engine.dispose()


@pytest.mark.parametrize("kw, expected", [
    ({"host": "0.0.0.0"}, "give --tls-cert FILE --tls-key FILE, or --insecure-http"),
    ({"host": "192.0.2.7"}, "serves the network over plain HTTP"),
    ({"host": "127.0.0.1", "tls_cert": Path("c.pem")}, "--tls-cert and --tls-key go together"),
    ({"host": "127.0.0.1", "public_url": "lab.example.org"}, "--public-url: expected https://"),
    ({"host": "127.0.0.1", "trusted_proxy": ["proxy.local"]}, "--trusted-proxy: expected an IP address"),
])
def test_ways_of_serving_that_leak_passwords_or_urls_are_refused_in_one_line(kw, expected):
    options = {"tls_cert": None, "tls_key": None, "insecure_http": False, "public_url": None, "trusted_proxy": [],
               **kw}
    host = options.pop("host")
    with pytest.raises(NetworkRefused) as refused:
        check_network(host, **options)
    assert expected in str(refused.value) and "\n" not in str(refused.value)


def test_insecure_http_and_loopback_and_tls_pass(certificate):
    cert, key = certificate
    base = {"tls_cert": None, "tls_key": None, "public_url": None, "trusted_proxy": ["10.0.0.0/8"]}
    check_network("0.0.0.0", **{**base, "insecure_http": True})
    check_network("::1", **{**base, "insecure_http": False})
    check_network("0.0.0.0", **{**base, "tls_cert": cert, "tls_key": key, "insecure_http": False})
    with pytest.raises(NetworkRefused, match="expected a PEM certificate and its key"):
        check_network("127.0.0.1", **{**base, "tls_cert": key, "tls_key": key, "insecure_http": False})


def test_the_cli_refuses_plain_http_off_loopback_and_a_password_on_the_command_line(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "bench_cli.py"), *args], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)

    served = run("lab", "serve", "--host", "0.0.0.0", "--data", str(tmp_path / "d"))
    assert served.returncode == 2 and "--insecure-http" in served.stderr, served.stderr
    assert len(served.stderr.strip().splitlines()) == 1 and not (tmp_path / "d").exists()  # refused before anything
    for command in (["lab", "user", "list"], ["lab", "serve"], ["lab", "audit"], ["lab", "migrate"]):
        refused = run(*command, "--db", "postgresql://lab:s3cret-pw@127.0.0.1:9/lab")
        assert refused.returncode == 2 and "--db-password-file" in refused.stderr, refused.stderr
        assert "s3cret-pw" not in refused.stderr + refused.stdout
    loose = tmp_path / "pw"
    loose.write_text("s3cret-pw\n")
    loose.chmod(0o644)
    readable = run("lab", "user", "list", "--db", "postgresql://lab@127.0.0.1:9/lab", "--db-password-file", str(loose))
    assert readable.returncode == 2 and "readable by other accounts" in readable.stderr, readable.stderr
