"""A local Anthropic-compatible server (`POST /v1/messages`) that answers with a scripted policy.

Why: tests and offline runs should exercise the real `anthropic` SDK over real HTTP — request building, response
parsing, status codes, request ids — so the SDK's base_url is pointed here instead of mocking its transport
(the SDK uses httpx2, which respx and pytest-httpx do not intercept). Served by uvicorn on 127.0.0.1, port chosen
by the OS.

The policies themselves are neutral (agent/models/scripted.py); this module is the one place where the scripted
side speaks HTTP: a request body is read into the loop's own `ModelRequest`, the scripted model answers it, and
its turn is written back as a Messages response body, both by the translations the real client uses
(agent/models/anthropic_client.py: request_from_anthropic, anthropic_response), so the two cannot drift. HTTP
carries no claim, so the server is given the claim projection (`task`) the policy works from, as the loop gives
it in process.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.models.anthropic_client import WireError, anthropic_response, request_from_anthropic
from agent.models.base import ModelError
from agent.models.scripted import Policy, ScriptedHTTPError, ScriptedModel
from agent.prompt import ClaimView


def answer(policy: Policy, body: dict[str, Any], task: ClaimView) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) answering one Messages request with `policy` working on `task`."""
    model = str(body.get("model", "scripted"))
    try:
        turn = ScriptedModel(policy, model, task=task).complete(request_from_anthropic(body))
    except WireError as e:
        return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": str(e)}}
    except ModelError as e:  # a policy's ScriptedHTTPError, raised by the model as its cause
        cause = e.__cause__
        if not isinstance(cause, ScriptedHTTPError):
            raise
        return cause.status, {"type": "error", "error": {"type": cause.error_type, "message": cause.message}}
    return 200, anthropic_response(turn, model)


def messages_app(policy: Policy, task: ClaimView) -> FastAPI:
    """A FastAPI app whose /v1/messages answers every request with `policy` on `app.state.task` (`task` at first;
    a test that runs several claims against one server sets it before each cell). Every request body received is
    kept in `app.state.requests` so tests can check what the SDK sent."""
    app = FastAPI(title="scripted Anthropic Messages stand-in")
    app.state.requests = []
    app.state.task = task
    ids = itertools.count(1)

    @app.post("/v1/messages")
    async def create_message(request: Request) -> JSONResponse:
        body = await request.json()
        app.state.requests.append(body)
        status, reply = answer(policy, body, app.state.task)
        return JSONResponse(reply, status_code=status, headers={"request-id": f"req_scripted_{next(ids):04d}"})

    return app


@contextlib.contextmanager
def serve_app(app: Any, *, startup_timeout_s: float = 10.0) -> Iterator[str]:
    """Run an ASGI app under uvicorn on 127.0.0.1 in a daemon thread; yields its base URL, stops on exit."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-testserver", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:  # startup handshake, not a timed assertion
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start within {startup_timeout_s} s")
        time.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def serve_scripted(policy: Policy, task: ClaimView) -> Iterator[tuple[str, FastAPI]]:
    """Serve `policy` on `task` as an Anthropic Messages endpoint; yields (base_url for the SDK, the app)."""
    app = messages_app(policy, task)
    with serve_app(app) as url:
        yield url, app
