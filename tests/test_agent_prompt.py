"""The prompt allowlist: no claim's value, bounds, tolerance, needles, span or source page reaches the model."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from agent.loop import datasheet_local_tools
from agent.prompt import first_user_message, project_claim, submit_extraction_tool, system_prompt
from conftest import shared_path
from protocols.claim_sources import CHAMBER_PARTS_DIR, load_checked_claims
from protocols.claims import load_claims


def _numbers(d: Decimal | None) -> set[str]:
    """The ways a number may be written: 0.06, .06, 6E-2 → '0.06'; 100 → '100', '100.0'."""
    if d is None:
        return set()
    out = {str(d), format(d.normalize(), "f"), f"{float(d):g}"}
    if d == d.to_integral_value():
        out |= {str(int(d)), f"{int(d)}.0"}
    return {s for s in out if s}


def _forbidden(claim) -> set[str]:
    strings = set()
    for x in (claim.value, claim.low, claim.high, claim.tolerance.value):
        strings |= _numbers(x)
        if x is not None and x < 0:
            strings |= {"–" + s.lstrip("-") for s in _numbers(x)}
    strings |= set(claim.source.needles) | {claim.source.span, f"page {claim.source.page}", f"p. {claim.source.page}"}
    return strings


def _allowed_text(claim) -> str:
    v = project_claim(claim)
    return " ".join([v.claim_id, v.component, v.parameter, v.unit, *v.condition_names])


def _leaks(text: str, strings: set[str], allowed: str) -> list[str]:
    found = []
    for s in strings:
        if s in allowed:  # part of the allowlisted projection itself (e.g. a needle that is the unit)
            continue
        if re.fullmatch(r"[-–+]?[\d.]+", s):
            # a number counts as a token: not inside another number or word ("1" is not in "dps310", "3.6")
            pattern = r"(?<![\w.\-–])" + re.escape(s) + r"(?![\w.]|-[a-z])"
            if re.search(pattern, text):
                found.append(s)
        elif s in text:
            found.append(s)
    return found


@pytest.fixture(scope="module")
def claims():
    """The packaged 37 and the chamber-part claims (issue 16): every claim the main job may hand the agent."""
    parts = load_checked_claims([CHAMBER_PARTS_DIR])
    assert len(parts) >= 12 and not set(parts) & set(load_claims())
    return {**load_claims(), **parts}


def test_projection_holds_only_the_allowlisted_fields(claims):
    view = project_claim(next(iter(claims.values())))
    assert set(vars(view)) == {"claim_id", "component", "parameter", "unit", "condition_names"}


def test_no_prompt_leaks_any_claim_secret(claims):
    assert len(claims) >= 20
    leaks = {}
    for claim in claims.values():
        text = system_prompt() + "\n" + first_user_message(project_claim(claim)) + "\n" + \
            submit_extraction_tool().description + str(submit_extraction_tool().input_schema)
        found = _leaks(text, _forbidden(claim), _allowed_text(claim))
        if found:
            leaks[claim.id] = found
    assert not leaks


def test_datasheet_tool_descriptions_leak_nothing_and_do_not_depend_on_the_claim(claims):
    """The tool surface is one fixed text for every claim (so it cannot carry any claim's value); besides, no
    claim's span, needle words or source page appear in it. Bare numbers in it (a page limit of the section tool)
    are the same for every claim and therefore checked for claim-independence rather than as tokens."""
    surfaces = set()
    texts: dict[str, str] = {}
    for claim in claims.values():
        name = claim.identity.filename
        if name not in texts:
            tools, _ = datasheet_local_tools(shared_path("datasheets", name))
            texts[name] = "\n".join(t.description + str(t.input_schema) for t in tools)
        text = texts[name]
        surfaces.add(text)
        words = {s for s in _forbidden(claim) if not re.fullmatch(r"[-–+]?[\d.]+", s)}
        assert not _leaks(text, words, _allowed_text(claim)), claim.id
    assert len(surfaces) == 1


def test_prompt_contains_what_the_reader_needs(claims):
    claim = claims["si115x-active-current-3v3"]
    text = first_user_message(project_claim(claim))
    assert claim.parameter in text and f"- unit: {claim.unit}" in text
    assert all(c.name in text for c in claim.conditions)


def test_the_chamber_part_prompts_leak_no_secret(claims):
    """Named once more for the new parts: the allowlisted projection of each chamber-part claim, and nothing of
    its value, bounds, needles, span or page beyond what the projection itself says."""
    parts = [c for c in claims.values() if c.id in load_checked_claims([CHAMBER_PARTS_DIR])]
    for claim in parts:
        text = first_user_message(project_claim(claim))
        assert claim.parameter in text and f"- unit: {claim.unit}" in text, claim.id
        assert not _leaks(text, _forbidden(claim), _allowed_text(claim)), claim.id
        assert claim.source.span not in text, claim.id
    xp38 = claims["xp38-crossed-transmission"]
    assert _leaks(first_user_message(project_claim(xp38)) + " <0.004", _forbidden(xp38), _allowed_text(xp38))


def test_the_leak_check_catches_a_planted_value(claims):
    claim = claims["dps310-meas-time-standard"]
    prompt = first_user_message(project_claim(claim))
    assert _leaks(prompt + " typically 27.6 ms", _forbidden(claim), _allowed_text(claim)) == ["27.6"]
    assert _leaks(prompt + " see page 9", _forbidden(claim), _allowed_text(claim)) == ["page 9"]
    assert not _leaks(prompt + " 127.65", _forbidden(claim), _allowed_text(claim))


def test_no_parameter_name_carries_a_printed_figure_of_its_own_answer(claims):
    """The allowlist lets the projection through whole, so the parameter text must not itself print a numeric
    needle (the MCP4151 'Resolution N: 257 taps' once handed a model the figure it was meant to read)."""
    carriers = {}
    for claim in claims.values():
        numeric = [s for s in claim.source.needles if re.fullmatch(r"[-–+]?[\d.]+", s)]
        found = _leaks(claim.parameter, set(numeric), "")
        if found:
            carriers[claim.id] = found
    assert carriers == {}
