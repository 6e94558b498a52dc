"""Who is calling: HTTP basic credentials checked against the lab's accounts, with the login limiter in front and
the password hash behind a small fixed number of slots.

Why here and async: the authors' client sends its password on every request, so this runs before every handler. A
known password is remembered (no hash); any other costs one argon2 hash, and a burst of wrong logins must neither
take the server's memory (each hash holds 64 MiB) nor its threads (a thread blocked waiting for a hashing slot
answers nobody else). So the waiting for a slot is an asyncio wait on the event loop, and only a call that holds a
slot goes to a worker thread to hash. A (name, address) pair over its failures is refused (429, Retry-After)
before any hash. Every refusal of credentials is 401 with `WWW-Authenticate: Basic` (a malformed header too).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass

from fastapi.security import HTTPBasic
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from protocols.remote_lab.accounts import Accounts
from protocols.remote_lab.logins import LoginLimiter

CHALLENGE = {"WWW-Authenticate": 'Basic realm="chamberlab Remote Lab", charset="UTF-8"'}


@dataclass(frozen=True)
class Caller:
    name: str
    account_id: str
    address: str
    max_queued: int | None = None


class GateRefusal(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str]):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class LabBasic(HTTPBasic):
    """HTTP basic credentials as (name, password), or None when absent or malformed (never an exception of its
    own: the gate answers every case with the same 401). UTF-8, as RFC 7617's charset parameter offers."""

    async def __call__(self, request: Request) -> tuple[str, str] | None:  # type: ignore[override]
        header = request.headers.get("Authorization") or ""
        scheme, _, param = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(param.strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
        name, separator, password = decoded.partition(":")
        return (name, password) if separator else None


class LoginGate:
    def __init__(self, accounts: Accounts, limiter: LoginLimiter):
        self.accounts, self.limiter = accounts, limiter
        self._slots: asyncio.Semaphore | None = None  # made on the server's loop, at the first hash

    async def caller(self, request: Request, credentials: tuple[str, str] | None) -> Caller:
        address = request.client.host if request.client else "-"
        if credentials is None:
            raise GateRefusal(401, "this lab needs HTTP basic credentials (user name and password)", CHALLENGE)
        name, password = credentials
        wait = self.limiter.retry_after(name, address)
        if wait is not None:
            seconds = max(1, int(wait + 0.999))
            raise GateRefusal(429, f"too many failed logins for {name!r} from {address}; try again in {seconds} s",
                              {"Retry-After": str(seconds)})
        stored = await run_in_threadpool(self.accounts.stored_hash, name)
        ok = self.accounts.remembered(name, password, stored)
        if not ok:
            if self._slots is None:
                self._slots = asyncio.Semaphore(self.accounts.hash_slots)
            async with self._slots:
                ok = await run_in_threadpool(self.accounts.verify, name, password, stored)
        if not ok:
            self.limiter.failed(name, address)
            raise GateRefusal(401, "wrong user name or password for this lab", CHALLENGE)
        self.limiter.succeeded(name, address)
        user = await run_in_threadpool(self.accounts.get, name)
        if user is None or user.account_id is None:  # removed meanwhile
            raise GateRefusal(401, "wrong user name or password for this lab", CHALLENGE)
        return Caller(name, user.account_id, address, user.max_queued)
