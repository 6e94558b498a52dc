"""A local Anthropic-compatible server (`POST /v1/messages`) that answers with a scripted policy.

Why: tests and offline runs should exercise the real `anthropic` SDK over real HTTP — request building, response
parsing, status codes, request ids — so the SDK's base_url is pointed here instead of mocking its transport
(the SDK uses httpx2, which respx and pytest-httpx do not intercept). Served by uvicorn on 127.0.0.1, port chosen
by the OS.
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

from agent.scripted import ScriptedHTTPError, ScriptedPolicy


def messages_app(policy: ScriptedPolicy) -> FastAPI:
    """A FastAPI app whose /v1/messages answers every request with `policy.respond(body)`.
    Every request body received is kept in `app.state.requests` so tests can check what the SDK sent."""
    app = FastAPI(title="scripted Anthropic Messages stand-in")
    app.state.requests = []
    ids = itertools.count(1)

    @app.post("/v1/messages")
    async def create_message(request: Request) -> JSONResponse:
        body = await request.json()
        app.state.requests.append(body)
        request_id = f"req_scripted_{next(ids):04d}"
        try:
            reply = policy.respond(body)
        except ScriptedHTTPError as e:
            return JSONResponse(
                {"type": "error", "error": {"type": e.error_type, "message": e.message}},
                status_code=e.status,
                headers={"request-id": request_id},
            )
        return JSONResponse(reply, headers={"request-id": request_id})

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
def serve_scripted(policy: ScriptedPolicy) -> Iterator[tuple[str, FastAPI]]:
    """Serve `policy` as an Anthropic Messages endpoint; yields (base_url for the SDK, the app)."""
    app = messages_app(policy)
    with serve_app(app) as url:
        yield url, app
