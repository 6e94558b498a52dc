"""The API's one error envelope: `{"error": {"code": <stable code>, "message": <what to do next>}}`.

Why one type: the agent is a language model, so every refusal must say which rule it hit (a stable `code` a
program can branch on) and what to send instead (a `message` a model can act on). Handlers raise `ApiError`;
app.py turns it, FastAPI's validation errors and anything unexpected into this envelope.
"""

from __future__ import annotations

from typing import Any

# Stable codes, grouped by status. Clients (agent/chamber_client.py) branch on these strings: never rename one.
CODES: dict[str, int] = {
    "invalid_arguments": 422,  # body or path failed validation (types, ranges, extra fields)
    "setting_refused": 422,  # a stage_conditions value outside the firmware's allowed values or operator limits
    "unknown_variable": 422,  # a variable the chamber does not have, or one the API does not let a client set
    "unauthorized": 401,  # missing or wrong bearer token
    "unknown_claim": 404,
    "unknown_session": 404,
    "unknown_tool": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "extraction_not_frozen": 409,  # the two-pass freeze: no chamber tool before POST /sessions/{id}/extraction
    "extraction_already_frozen": 409,
    "session_ended": 409,  # submit_chamber_outcome (or DELETE) ended the session
    "chamber_busy": 409,  # another session holds the chamber lease (see Retry-After)
    "chamber_not_connected": 409,  # the tool needs a chamber kind this server was not started with
    "measurement_refused": 409,  # the readings cannot support the statistic (e.g. unset sensors); nothing returned
    "controller_unbounded": 409,  # pressure-control: the PID could drive an unset fan beyond its operator limit
    "payload_too_large": 413,
    "body_too_deep": 400,  # a JSON body nested deeper than record.MAX_JSON_DEPTH (refused before any parse)
    "unsupported_media_type": 415,  # a tool body that is not Content-Type: application/json
    "forbidden_host": 403,  # Host or Origin not the loopback address the tokenless server is bound to
    "too_many_sessions": 429,  # the server holds its cap of open sessions (max_sessions)
    "too_many_sessions_for_client": 429,  # this client holds its cap of open sessions (max_sessions_per_client)
    "record_unavailable": 503,  # the record cannot be written (full disk): nothing was done
    "apparatus_error": 503,  # the link broke or the firmware halted; nothing partial was returned
    "server_stopping": 503,  # the server is stopping and making its chambers safe; nothing reached the chamber
    "internal_error": 500,
}


class ApiError(Exception):
    """A refusal with a stable code, an HTTP status and a message that tells the caller what to do next."""

    def __init__(self, code: str, message: str, *, status: int | None = None, headers: dict[str, str] | None = None,
                 details: Any = None) -> None:
        if code not in CODES:
            raise ValueError(f"unknown API error code {code!r}; known: {sorted(CODES)}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status if status is not None else CODES[code]
        self.headers = headers or {}
        self.details = details

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return ApiError(code, message, details=details).body()
