"""Who may call the API: loopback by default; any other bind address only with a bearer token.

Why: the API moves actuators. On 127.0.0.1 only local processes reach it; once it listens on another address,
anyone on the network could, so the server refuses to start without a token (`resolve_token`) and then answers
every request that lacks `Authorization: Bearer <token>` with 401 (`BearerAuthMiddleware`). The token comes
from the environment variable CHAMBERLAB_API_TOKEN or a file; it is never logged or recorded.

Why Host and Origin on the tokenless loopback default (`LoopbackHostMiddleware`): a web page the lab's browser
opens can make its own name resolve to 127.0.0.1 (DNS rebinding) and then reach this server as "same origin".
Such a request carries the attacker's name in `Host` (and a foreign `Origin`), so without a token every request
must name a loopback host and, when it has an Origin, a loopback origin; anything else is 403 before it is read.
With a token the token is the check (the page cannot know it), and the server may then be reached by any name.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Awaitable, Callable, MutableMapping
from urllib.parse import urlsplit

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


def _hostname(authority: str) -> str:
    """The host part of a Host header value ('127.0.0.1:8000' -> '127.0.0.1', '[::1]:80' -> '::1')."""
    authority = authority.strip()
    if authority.startswith("["):
        return authority[1:authority.find("]")] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


async def _refuse(send: Any, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class LoopbackHostMiddleware:
    """ASGI middleware for a tokenless server: `Host` must be a loopback name (or one of `extra_hosts`) and an
    `Origin`, when present, a loopback http(s) origin; otherwise 403 `forbidden_host`."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, extra_hosts: tuple[str, ...] = ()) -> None:
        self.app = app
        self._extra = {h.lower() for h in extra_hosts}

    def _allowed(self, host: str) -> bool:
        return host.lower() in self._extra or is_loopback(host)

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])
                       if k in (b"host", b"origin")}
            host = _hostname(headers.get("host", ""))
            if not self._allowed(host):
                await _refuse(send, 403, "forbidden_host",
                              f"this tokenless server answers only requests addressed to a loopback host "
                              f"(127.0.0.1, localhost, ::1); the request's Host was {headers.get('host', '(none)')!r}")
                return
            origin = headers.get("origin")
            if origin is not None:
                parts = urlsplit(origin)
                if parts.scheme not in ("http", "https") or not self._allowed(parts.hostname or ""):
                    await _refuse(send, 403, "forbidden_host",
                                  f"this tokenless server answers only pages served from a loopback origin; the "
                                  f"request's Origin was {origin!r}")
                    return
        await self.app(scope, receive, send)
