"""The agent's chamber client against a service that needs a bearer token (issue 19): it sends the token it is
given, and a 401 is a typed error saying whether the token was missing or refused — never a tool result, so a
cell against such a service ends as an engine error instead of running on with every chamber call refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import chamber
from agent.chamber_client import TOKEN_ENV, ChamberAuthError, ChamberClient, chamber_token
from conftest import shared_path
from protocols.api import running_api
from protocols.claims import load_claims
from support import engine_error_before_a_turn

TOKEN = "t0ken-for-the-test"
CLAIM = "dps310-relative-accuracy"


@pytest.fixture(scope="module")
def claims():
    return load_claims()


@pytest.fixture()
def url(tmp_path: Path, claims) -> Iterator[str]:
    wt = chamber.open_chamber(backend="sim", chamber="wt", seed=3)
    try:
        with running_api({"wt": wt}, record_dir=tmp_path / "api", claims=claims, token=TOKEN) as base:
            yield base
    finally:
        wt.close()


def test_the_token_is_sent_and_a_session_opens(url: str):
    with httpx.Client(base_url=url, timeout=30) as http:
        client = ChamberClient(http, token=TOKEN)
        assert client.create_session(CLAIM)
        assert client.list_tools()


@pytest.mark.parametrize("token, says", [(None, "requires a bearer token and none was sent"),
                                         ("wrong", "refused the bearer token sent")])
def test_a_401_says_whether_the_token_was_missing_or_refused(url: str, token: str | None, says: str):
    with httpx.Client(base_url=url, timeout=30) as http:
        client = ChamberClient(http, token=token)
        with pytest.raises(ChamberAuthError, match=says) as got:
            client.create_session(CLAIM)
        assert got.value.status == 401
        with pytest.raises(ChamberAuthError):  # a tool call too: not a refusal for the model to read
            client.call_tool("any", "measure", {})


def test_a_cell_without_the_token_is_an_engine_error_naming_it(url: str, claims, tmp_path: Path):
    claim = claims[CLAIM]
    detail = engine_error_before_a_turn(claim, url, tmp_path, shared_path("datasheets", claim.identity.filename))
    assert "bearer token and none was sent" in detail


def test_the_token_comes_from_a_file_or_the_environment(tmp_path: Path):
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n", encoding="utf-8")
    assert chamber_token(f, {TOKEN_ENV: "other"}) == TOKEN  # the file wins
    assert chamber_token(None, {TOKEN_ENV: " env-token "}) == "env-token"
    assert chamber_token(None, {}) is None
    (tmp_path / "empty").write_text("\n", encoding="utf-8")
    with pytest.raises(ChamberAuthError, match="empty"):
        chamber_token(tmp_path / "empty", {})
    with pytest.raises(ChamberAuthError, match="cannot be read"):
        chamber_token(tmp_path / "missing", {})
