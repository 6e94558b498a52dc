"""A local HTTP server for conformance tests: replays responses built from the official SDKs' own types.

Why: a hand-written JSON stand-in only proves the client agrees with the test's author. Building each reply
from `openai.types.responses.Response`, `openai.types.chat.ChatCompletion` or `anthropic.types.Message` (validated
by the SDK's own pydantic models) proves the client reads the shapes the providers document; serving them over
real HTTP on 127.0.0.1 exercises the real clients' headers, status codes and error paths.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.testserver import serve_app


@dataclass
class Reply:
    """One scripted HTTP answer: a status, a JSON body and the response headers."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def sdk_json(model: Any, *, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """An SDK model as the wire JSON a provider would send (unset optionals left out; `drop` removes keys)."""
    data = model.model_dump(mode="json", exclude_unset=True)
    for key in drop:
        data.pop(key, None)
    return data


@contextlib.contextmanager
def replay(replies: list[Reply]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve `replies` in order on every POST path (/v1/messages, /v1/responses, /v1/chat/completions);
    yields (base URL, the request bodies received). Running out of replies is a 500 the test will see."""
    app = FastAPI()
    bodies: list[dict[str, Any]] = []
    queue = list(replies)

    @app.post("/{path:path}")
    async def answer(path: str, request: Request) -> JSONResponse:
        bodies.append(await request.json())
        if not queue:
            return JSONResponse({"error": {"message": "conformance server: no reply left"}}, 500)
        r = queue.pop(0)
        return JSONResponse(r.body, status_code=r.status, headers=r.headers)

    with serve_app(app) as url:
        yield url, bodies
