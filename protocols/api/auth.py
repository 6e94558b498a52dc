"""Who may call the API: loopback by default; any other bind address only with a bearer token.

Why: the API moves actuators. On 127.0.0.1 only local processes reach it; once it listens on another address,
anyone on the network could, so the server refuses to start without a token (`resolve_token`) and then answers
every request that lacks `Authorization: Bearer <token>` with 401 (`BearerAuthMiddleware`). The token comes
from the environment variable CHAMBERLAB_API_TOKEN or a file; it is never logged or recorded.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Awaitable, Callable, MutableMapping

TOKEN_ENV = "CHAMBERLAB_API_TOKEN"
MIN_TOKEN_LENGTH = 16


class TokenRequired(RuntimeError):
    """Refusing to serve: a non-loopback bind address without a usable token."""


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and 'localhost' are loopback; everything else (0.0.0.0, ::, a LAN address) is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def read_token_file(path: Path) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise TokenRequired(f"cannot read the token file {path}: {exc}") from None
    return token


def resolve_token(host: str, *, token_file: Path | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token to enforce, or None (loopback without a token). Raises TokenRequired when a non-loopback
    bind has none, or when a token is shorter than MIN_TOKEN_LENGTH characters (guessable)."""
    env = environ or {}
    token: str | None = None
    source = ""
    if token_file is not None:
        token, source = read_token_file(token_file), f"token file {token_file}"
    elif env.get(TOKEN_ENV, "").strip():
        token, source = env[TOKEN_ENV].strip(), f"environment variable {TOKEN_ENV}"
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise TokenRequired(f"the token from the {source} has {len(token)} characters; expected at least "
                            f"{MIN_TOKEN_LENGTH}")
    if token is None and not is_loopback(host):
        raise TokenRequired(f"refusing to listen on {host!r} without a bearer token: a non-loopback address lets "
                            f"other machines move the chamber. Set {TOKEN_ENV} or pass --token-file, or bind "
                            "127.0.0.1")
    return token


class BearerAuthMiddleware:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>` (constant-time compare)."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode("utf-8")

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = b""
            for key, value in scope.get("headers", []):
                if key == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self._expected):
                what = "no Authorization header" if not given else "a wrong or malformed bearer token"
                body = json.dumps({"error": {"code": "unauthorized", "message":
                                   f"this server requires 'Authorization: Bearer <token>'; the request had {what}"}}
                                  ).encode("utf-8")
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="chamberlab"')]})
                await send({"type": "http.response.body", "body": body, "more_body": False})
                return
        await self.app(scope, receive, send)
