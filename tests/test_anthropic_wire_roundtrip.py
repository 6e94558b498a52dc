"""The Anthropic wire translations read back what they write: the client's request writer and the test server's
request reader, the server's response writer and the client's response reader (agent/models/anthropic_client.py).

Why: the scripted test server answers the real SDK, so a block, a stop reason or a usage count that one direction
spells differently from the other would make the offline runs test a different wire format than the real one.
"""

from __future__ import annotations

import pytest

from agent.models.anthropic_client import (
    anthropic_response,
    from_anthropic_response,
    request_from_anthropic,
    to_anthropic_request,
)
from agent.models.base import (
    DocumentBlock,
    ImageBlock,
    Message,
    ModelRequest,
    ModelTurn,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from agent.record import TokenUsage
from agent.tool import Tool

SEARCH = Tool("search_text", "Find a phrase.", {"type": "object", "properties": {"query": {"type": "string"}}})


def test_a_request_reads_back_block_for_block():
    request = ModelRequest("read the datasheet", [
        Message("user", [TextBlock("find VDD"), DocumentBlock("application/pdf", "JVBERi0=", "DPS310"),
                         ImageBlock("image/png", "iVBORw0=")]),
        Message("assistant", [TextBlock("searching"), ToolCallBlock("toolu_1", "search_text", {"query": "VDD"})]),
        Message("user", [ToolResultBlock("toolu_1", "p. 7: VDD 1.7 to 3.6 V", is_error=False,
                                         images=(("image/png", "AAAA"),)),
                         ToolResultBlock("toolu_2", "no such page", is_error=True)]),
    ], [SEARCH], tool_choice={"name": "search_text"}, max_tokens=1024)
    back = request_from_anthropic(to_anthropic_request(request, "claude-test"))
    assert back.system == request.system and back.max_tokens == 1024
    assert back.tool_choice == {"name": "search_text"} and [t.name for t in back.tools] == ["search_text"]
    assert [(m.role, m.blocks) for m in back.messages] == [(m.role, m.blocks) for m in request.messages]


@pytest.mark.parametrize("stop", ["end_turn", "tool_use", "max_tokens", "refusal", "context_exceeded"])
def test_a_response_reads_back_with_its_stop_reason_and_usage(stop):
    usage = TokenUsage(input_tokens=5200, output_tokens=300, cache_read_input_tokens=4000,
                       cache_creation_input_tokens=500)
    turn = ModelTurn(Message("assistant", [TextBlock("found it"),
                                           ToolCallBlock("toolu_9", "submit_extraction", {"value": 1.7})]),
                     stop_reason=stop, raw_stop_reason=None, usage=usage, response_id="msg_01")
    message, got_stop, raw_stop, got_usage, model = from_anthropic_response(anthropic_response(turn, "claude-test"))
    assert message.blocks == turn.message.blocks and got_stop == stop and model == "claude-test"
    assert raw_stop == ("model_context_window_exceeded" if stop == "context_exceeded" else stop)
    assert (got_usage.input_tokens, got_usage.output_tokens, got_usage.cache_read_input_tokens,
            got_usage.cache_creation_input_tokens) == (5200, 300, 4000, 500)
