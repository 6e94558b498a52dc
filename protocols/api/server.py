"""Run the chamber tools API under uvicorn: in a background thread (tests, the agent's `extract`, the main job)
or in front (`bench_cli.py serve`).

Why a helper: every caller needs the same few steps done right — bind 127.0.0.1 on a free port chosen by the OS
(no race between picking and binding), wait for uvicorn's startup handshake, hand back the base URL, run the
app's background tasks on the server's event loop (`app.state.background`: the chamber tools API's sweep for
abandoned sessions), and on exit stop it promptly and join its thread, so no port, task or thread outlives the
`with` block.

Why the stop is prompt (issue 31: `serve` took ~18 s to stop): uvicorn lets running responses finish, without
limit by default, and a chamber call in flight (a 200-row measure: 28 s) kept it waiting while the exit path's
safe state waited 5 s more for the chamber's lock. Now the app's `on_stop` hooks run first (the API refuses new
chamber work and cuts a call in flight short), uvicorn's graceful wait is bounded (GRACEFUL_S), and the open
/live/stream responses are ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import uvicorn

from .app import create_app
from .auth import resolve_token

log = logging.getLogger(__name__)

GRACEFUL_S = 3.0
"""How long uvicorn waits for running responses once asked to stop before it cancels them (its default: forever)."""


@contextlib.contextmanager
def serve_in_thread(app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 10.0,
                    log_level: str = "warning", ssl_certfile: str | Path | None = None,
                    ssl_keyfile: str | Path | None = None, proxy_headers: bool | None = None,
                    forwarded_allow_ips: Sequence[str] | None = None) -> Iterator[str]:
    """Serve an ASGI app under uvicorn in a daemon thread; yields its base URL; stops and joins on exit. The app's
    `state.background` (coroutine functions) run on the server's loop while it serves; its `state.on_stop`
    (plain callables) are called on exit, from this thread, as the server is told to stop (a running response
    then ends sooner than GRACEFUL_S). With `ssl_certfile`/`ssl_keyfile` it serves HTTPS (the URL says https).
    `proxy_headers`/`forwarded_allow_ips`: whose X-Forwarded-For/-Proto are believed (None: uvicorn's default)."""
    tls: dict[str, Any] = {}
    if ssl_certfile is not None:
        tls = {"ssl_certfile": str(ssl_certfile), "ssl_keyfile": str(ssl_keyfile) if ssl_keyfile else None}
    if proxy_headers is not None:
        tls["proxy_headers"] = proxy_headers
    if forwarded_allow_ips is not None:
        tls["forwarded_allow_ips"] = list(forwarded_allow_ips)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off", access_log=False,
                            timeout_graceful_shutdown=GRACEFUL_S, **tls)
    server = uvicorn.Server(config)
    state = getattr(app, "state", None)
    background = tuple(getattr(state, "background", ()))
    thread = threading.Thread(target=_run, args=(server, background), name=f"uvicorn-{host}:{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:  # uvicorn's startup handshake
        if not thread.is_alive():
            raise RuntimeError(f"uvicorn failed to start on {host}:{port} (see the log above)")
        if time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=5)
            raise RuntimeError(f"uvicorn did not start within {startup_timeout_s} s on {host}:{port}")
        time.sleep(0.005)
    bound = server.servers[0].sockets[0].getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    try:
        yield f"{'https' if ssl_certfile is not None else 'http'}://{shown}:{bound[1]}"
    finally:
        live = getattr(state, "live", None)
        if live is not None:  # end the open /live/stream responses: uvicorn waits for running responses to finish
            live.close()
        server.should_exit = True  # no new connections; the running responses get GRACEFUL_S
        for hook in getattr(state, "on_stop", ()):
            try:
                hook()
            except Exception:  # pragma: no cover - a bug in a hook must not keep the server up
                log.exception("a stop hook failed")
        thread.join(timeout=10)
        if thread.is_alive():  # pragma: no cover - a handler stuck on the apparatus
            log.warning("uvicorn thread did not stop within 10 s")


def _run(server: uvicorn.Server, background: Sequence[Callable[[], Awaitable[None]]]) -> None:
    """The server thread: uvicorn's own run (its loop factory), with the background tasks beside it."""
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(_serve_with(server, background))


async def _serve_with(server: uvicorn.Server, background: Sequence[Callable[[], Awaitable[None]]]) -> None:
    tasks = [asyncio.create_task(make()) for make in background]
    try:
        await server.serve()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.contextmanager
def running_api(chambers: Mapping[str, Any], *, record_dir: str | Path, limits: Any = None,
                token: str | None = None, host: str = "127.0.0.1", port: int = 0,
                **app_options: Any) -> Iterator[str]:
    """The chamber tools API over `chambers` on 127.0.0.1 (free port) in a background thread; yields the base URL.

    `app_options` go to `create_app` (clock, lease_timeout_s, claims, ...). A non-loopback `host` needs `token`
    (TokenRequired otherwise), exactly as for `bench_cli.py serve`.
    """
    resolve_token(host, environ={"CHAMBERLAB_API_TOKEN": token} if token else {})
    app = create_app(chambers, limits=limits, record_dir=record_dir, token=token, **app_options)
    try:
        with serve_in_thread(app, host=host, port=port) as url:
            yield url
    finally:
        app.state.api.close()
