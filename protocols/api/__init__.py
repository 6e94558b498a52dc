"""The chamber tools API (issue #5): an untrusted agent reaches the chamber only through these HTTP tools.

Modules, one job each: app (the FastAPI factory and request path), sessions (freeze, lifecycle, the caps), lease
(one session at a time on each chamber), guard (firmware allowed values and operator limits, on the server), tools
(the six tools), timing (the chambers a call touches and its planned seconds), chamber_state (a chamber's link
for /health and a session's safe start), record (per-session JSONL), auth (loopback or bearer token), schemas (the
HTTP models), errors (the one error envelope), server (uvicorn in a thread or in front), operator (recovering a
halted board).
"""

from .app import API_VERSION, ApiState, create_app
from .auth import TOKEN_ENV, TokenRequired, is_loopback, resolve_token
from .errors import CODES, ApiError
from .server import running_api, serve_in_thread
from .tools import TOOLS

__all__ = ["API_VERSION", "CODES", "TOKEN_ENV", "TOOLS", "ApiError", "ApiState", "TokenRequired", "create_app",
           "is_loopback", "resolve_token", "running_api", "serve_in_thread"]
