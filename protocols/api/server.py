"""Run the chamber tools API under uvicorn: in a background thread (tests, the agent's `extract`, the main job)
or in front (`bench_cli.py serve`).

Why a helper: every caller needs the same few steps done right — bind 127.0.0.1 on a free port chosen by the OS
(no race between picking and binding), wait for uvicorn's startup handshake, hand back the base URL, and on exit
ask the server to stop and join its thread, so no port or thread outlives the `with` block.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import uvicorn

from .app import create_app
from .auth import resolve_token

log = logging.getLogger(__name__)


@contextlib.contextmanager
def serve_in_thread(app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 10.0,
                    log_level: str = "warning") -> Iterator[str]:
    """Serve an ASGI app under uvicorn in a daemon thread; yields its base URL; stops and joins on exit."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{host}:{port}", daemon=True)
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
        yield f"http://{shown}:{bound[1]}"
    finally:
        live = getattr(getattr(app, "state", None), "live", None)
        if live is not None:  # end the open /live/stream responses: uvicorn waits for running responses to finish
            live.close()
        server.should_exit = True
        thread.join(timeout=10)
        if thread.is_alive():  # pragma: no cover - a handler stuck on the apparatus
            log.warning("uvicorn thread did not stop within 10 s")


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
