"""The single-pass baseline arm: the whole document in one request, as each kind of backend can take it.

A backend that reads PDFs gets the PDF itself (checked over the real anthropic SDK against the local
Anthropic-compatible server); one that does not gets every page rendered as an image.
"""

from __future__ import annotations

import base64
import hashlib
import json

import pymupdf

from agent.loop import run_cell
from agent.models import client_for
from agent.models.base import ImageBlock, Message, TextBlock
from agent.models.openai_http import to_chat_messages, to_responses_input
from agent.models.scripted import ScriptedModel, policy_named
from agent.prompt import project_claim
from agent.record import validate_record
from agent.scoring.arms import arm_setup
from agent.testserver import serve_scripted
from conftest import shared_path
from protocols.claims import get_claim
from support import SteppingClock

CLAIM = "acs70331-bandwidth"


def test_a_pdf_reading_backend_receives_the_pdf_itself_over_the_real_sdk(tmp_path):
    claim = get_claim(CLAIM)
    pdf = shared_path("datasheets", claim.identity.filename)
    with serve_scripted(policy_named("closed-book"), project_claim(claim)) as (url, app):
        model = client_for("claude-test", {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": url})
        setup = arm_setup("single-pass", pdf)
        result = run_cell(claim, model=setup.model(model), datasheet=pdf, record_dir=tmp_path, clock=SteppingClock(),
                          tools=setup.tools, surface_version=setup.surface_version)
        first = app.state.requests[0]["messages"][0]["content"]
    document = next(b for b in first if b["type"] == "document")
    assert document["source"]["media_type"] == "application/pdf"
    sent = base64.b64decode(document["source"]["data"])
    assert hashlib.sha256(sent).hexdigest() == claim.identity.sha256  # the intended datasheet, byte for byte
    assert [t["name"] for t in app.state.requests[0]["tools"]] == ["submit_extraction"]
    validate_record(result.record)


def test_a_backend_without_pdf_input_receives_every_page_as_an_image(tmp_path):
    claim = get_claim(CLAIM)
    pdf = shared_path("datasheets", claim.identity.filename)
    seen = []

    def spy(conv):
        seen.append(conv.request)
        return policy_named("closed-book")(conv)

    setup = arm_setup("single-pass", pdf)
    run_cell(claim, model=setup.model(ScriptedModel(spy, model="spy")), datasheet=pdf, record_dir=tmp_path,
             clock=SteppingClock(), tools=setup.tools, surface_version=setup.surface_version)
    first = seen[0].messages[0].blocks
    images = [b for b in first if isinstance(b, ImageBlock)]
    with pymupdf.open(pdf) as doc:
        assert len(images) == doc.page_count
    assert images[0].mime == "image/png" and base64.b64decode(images[0].data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert any(isinstance(b, TextBlock) and "whole text layer" in b.text for b in first)


def test_openai_wire_formats_carry_images_and_documents():
    png = base64.b64encode(b"\x89PNG\r\n\x1a\nrest").decode("ascii")
    messages = [Message("user", [ImageBlock("image/png", png), TextBlock("read this")])]
    chat = to_chat_messages("system", messages)
    assert chat[1]["content"][0] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}
    responses = to_responses_input(messages)
    assert responses[0]["content"][0] == {"type": "input_image", "image_url": f"data:image/png;base64,{png}"}
    assert json.loads(json.dumps(chat)) == chat and json.loads(json.dumps(responses)) == responses
