"""The agent's only way to the chamber: the chamber tools API over HTTP (issue #5's contract).

Why HTTP and not an import: the agent floor may never import chamber/ or simulator/, and a service boundary
lets the chamber refuse tool calls before the extraction is frozen (409) whatever the agent does.
Contract: POST /sessions {claim_id} → {session_id}; POST /sessions/{id}/extraction {payload} → {sha256}
(409 on a second freeze); GET /tools → [{name, description, input_schema}]; POST /sessions/{id}/tools/{name}
with JSON arguments → the tool's result JSON, or {"error": {"code", "message"}} with a 4xx/5xx status.
The listed tools become the agent's one Tool type (without a handler: they run on the service), and a call's
answer carries the ToolResult the model reads, whose `error_type` is the API's error code (or HTTP<status>).

Why a call's read timeout follows its plan (issue 24): a protocol run at the real board's pace took 131 s and the
client's fixed 120 s timeout turned a finished run into an engine error. Before a chamber tool call the client
asks POST /sessions/{id}/plans/{name} (same body) for the call's planned chamber seconds and waits for the answer
its base read timeout plus PLAN_FACTOR times the plan. Why not a progress stream: the answer stays one JSON body
with the tool's own status (the record, the refusals and every other client keep working unchanged), and a call
that really hangs still ends, a bounded time after its plan. A server that cannot plan (an older one, an error)
leaves the base timeout in force.

A service bound off loopback requires `Authorization: Bearer <token>` on every request (protocols/api/auth.py).
The client sends the token it is given; a 401 is never a tool result the model sees, it is ChamberAuthError
saying whether a token was missing or refused, so a run against such a service ends as an engine error.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.tool import JsonObject, Tool, ToolResult


PLAN_FACTOR = 1.5
"""A call may run this many times its planned chamber seconds (on top of the base read timeout) before the client
gives up on it: the plan is an estimate (rows at the board's pace, SET round trips, settles); this covers a
slower board and the overheads around it (a 10-row protocol run planned 2.3 s took 2.8 s at the real pace)."""


class ChamberError(Exception):
    """The chamber service refused or failed a request; `status` and `code` say which and why."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class ChamberAuthError(ChamberError):
    """The chamber service answered 401: it needs a bearer token and none was sent, or it refused the one sent."""


TOKEN_ENV = "CHAMBERLAB_CHAMBER_TOKEN"
"""The environment variable a client takes its bearer token from when no token file is given."""


def chamber_token(token_file: Path | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The bearer token for the chamber service: the first line of `token_file`, else $CHAMBERLAB_CHAMBER_TOKEN,
    else None (no token sent). An unreadable or empty file raises ChamberAuthError naming it."""
    if token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ChamberAuthError(f"chamber token file {token_file}: cannot be read: {e}") from e
        if not token:
            raise ChamberAuthError(f"chamber token file {token_file}: expected a token, the file is empty")
        return token
    return environ.get(TOKEN_ENV, "").strip() or None


class _ListedTool(BaseModel):
    """One entry of GET /tools as the service sends it (the boundary: checked here, not trusted)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1)
    description: str = ""
    input_schema: JsonObject | None = None

    def tool(self) -> Tool:
        return Tool(self.name, self.description, dict(self.input_schema or {}))


@dataclass(frozen=True)
class ChamberToolResult:
    """The service's answer to one tool call: the HTTP status, the JSON body, and `result`, the ToolResult the
    model reads (the body as JSON text; for a refusal, is_error with the API's error code as `error_type`)."""

    status: int
    body: Any  # the tool's result JSON, or the {"error": {...}} object
    result: ToolResult

    @property
    def ok(self) -> bool:
        return not self.result.is_error

    @property
    def error_type(self) -> str | None:
        return self.result.error_type


def tool_call_answer(status: int, body: Any) -> ChamberToolResult:
    """A tool call's HTTP answer → ChamberToolResult. A status >= 400, or a body that is only an error object, is
    a refusal named by the body's error code, else by the status (HTTP<status>)."""
    refused = status >= 400 or (isinstance(body, dict) and "error" in body and len(body) == 1)
    text = json.dumps(body, ensure_ascii=False, default=str)
    if not refused:
        return ChamberToolResult(status, body, ToolResult(text))
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return ChamberToolResult(status, body, ToolResult(text, True, str(code or f"HTTP{status}")))


class ChamberClient:
    """A thin typed client; the httpx.Client (with its base_url and timeouts) is passed in, and `token`, when
    given, goes with every request as `Authorization: Bearer <token>`."""

    def __init__(self, http: httpx.Client, *, token: str | None = None) -> None:
        if token is not None and (not token.strip() or any(c in token for c in "\r\n")):
            raise ChamberAuthError("chamber token: expected a non-empty single-line token")
        self._http = http
        self._headers = {"Authorization": f"Bearer {token.strip()}"} if token is not None else {}

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, headers=self._headers, **kwargs)
        except httpx.HTTPError as e:
            raise ChamberError(f"{method} {path}: {type(e).__name__}: {e}") from e
        if resp.status_code == 401:
            _code, message = self._error_of(resp)
            if self._headers:
                why = "refused the bearer token sent (wrong or expired token)"
            else:
                why = f"requires a bearer token and none was sent (give one, e.g. in ${TOKEN_ENV})"
            raise ChamberAuthError(f"{method} {path} → HTTP 401: the chamber service at {self.base_url} {why}; "
                                   f"it said: {message}", status=401, code="unauthorized")
        return resp

    @staticmethod
    def _error_of(resp: httpx.Response) -> tuple[str | None, str]:
        try:
            err = resp.json().get("error") or {}
            return err.get("code"), err.get("message") or resp.text[:300]
        except (ValueError, AttributeError):
            return None, resp.text[:300]

    def _json(self, method: str, path: str, expect: str | None = None, **kwargs: Any) -> Any:
        resp = self._request(method, path, **kwargs)
        if resp.status_code >= 400:
            code, message = self._error_of(resp)
            raise ChamberError(f"{method} {path} → HTTP {resp.status_code} {code or ''}: {message}",
                               status=resp.status_code, code=code)
        try:
            data = resp.json()
        except ValueError as e:
            raise ChamberError(f"{method} {path}: expected JSON, got {resp.text[:200]!r}", status=resp.status_code) from e
        if expect is not None and (not isinstance(data, dict) or expect not in data):
            raise ChamberError(f"{method} {path}: expected an object with {expect!r}, got {str(data)[:200]}",
                               status=resp.status_code)
        return data

    def end_session(self, session_id: str) -> None:
        """End a session and free its chamber leases (DELETE /sessions/{id}); an unknown one raises (404)."""
        self._json("DELETE", f"/sessions/{session_id}", "session_id")

    def planned_seconds(self, session_id: str, name: str, arguments: dict[str, Any]) -> float | None:
        """The service's planned chamber seconds for this call, or None when it cannot say (refused, no route,
        no answer): the caller then keeps its base timeout."""
        try:
            resp = self._request("POST", f"/sessions/{session_id}/plans/{name}", json=arguments)
        except ChamberAuthError:
            raise
        except ChamberError:
            return None
        if resp.status_code != 200:
            return None
        try:
            planned = float(resp.json()["planned_s"])
        except (ValueError, KeyError, TypeError):
            return None
        return planned if math.isfinite(planned) and planned >= 0 else None

    def call_timeout(self, planned_s: float | None) -> httpx.Timeout:
        """The http client's timeouts with the read timeout stretched to base + PLAN_FACTOR x planned seconds
        (no base read timeout: none either)."""
        base = self._http.timeout
        if planned_s is None or base.read is None:
            return base
        return httpx.Timeout(connect=base.connect, read=base.read + PLAN_FACTOR * planned_s, write=base.write,
                             pool=base.pool)

    def create_session(self, claim_id: str) -> str:
        return str(self._json("POST", "/sessions", "session_id", json={"claim_id": claim_id})["session_id"])

    def freeze_extraction(self, session_id: str, payload: dict[str, Any]) -> str:
        """Freeze the extraction; returns the service's SHA-256 of it. A second freeze raises (status 409)."""
        return str(self._json("POST", f"/sessions/{session_id}/extraction", "sha256", json={"payload": payload})["sha256"])

    def list_tools(self) -> list[Tool]:
        """The chamber tools the service offers, as Tools without a handler (they run on the service)."""
        data = self._json("GET", "/tools")
        if not isinstance(data, list):
            raise ChamberError(f"GET /tools: expected a list of tools, got {type(data).__name__}")
        tools = []
        for n, entry in enumerate(data):
            try:
                tools.append(_ListedTool.model_validate(entry).tool())
            except ValidationError as e:
                problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'entry'}: {err['msg']}" for err in e.errors())
                raise ChamberError(f"GET /tools: tool {n} is not {{name, description, input_schema}}: {problems}; "
                                   f"got {str(entry)[:200]}") from e
        return tools

    def call_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> ChamberToolResult:
        """Call one chamber tool. A refusal (4xx/5xx with an error object) is a result, not an exception: the
        model sees it; only transport failures (a read timeout: base + PLAN_FACTOR x the service's plan) and a 401
        (ChamberAuthError: not the model's doing) raise."""
        planned = self.planned_seconds(session_id, name, arguments)
        resp = self._request("POST", f"/sessions/{session_id}/tools/{name}", json=arguments,
                             timeout=self.call_timeout(planned))
        try:
            body = resp.json()
        except ValueError:
            body = {"error": {"code": "bad_response", "message": resp.text[:500]}}
        return tool_call_answer(resp.status_code, body)
