"""Lab accounts: add, list and remove users; check HTTP basic credentials.

Why argon2 (argon2-cffi): it is the password hash the OWASP cheat sheet recommends first, maintained, and it keeps
its parameters in the hash, so they can be raised later. A hash costs tens of milliseconds on purpose, and the
authors' client sends the password on every request (polling every 2 s, say), so a successful check is
remembered for the process by (user, SHA-256 of the password, stored hash): a changed or removed account is
never accepted from memory, and a wrong password is always hashed anew.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import sqlalchemy as sa
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy.engine import Engine

from protocols.remote_lab.store import users

USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
MIN_PASSWORD = 8


class AccountError(ValueError):
    """A user name, password or password file the lab refuses, or a user that does not exist."""


@dataclass(frozen=True)
class User:
    name: str
    created_on: float
    max_queued: int | None


def read_password_file(path: str | Path) -> str:
    """The password: the file's first line without its line break (so `echo pw > file` works)."""
    try:
        raw = Path(path).read_bytes()[:4096]
    except OSError as exc:
        raise AccountError(f"cannot read password file {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AccountError(f"password file {path}: expected UTF-8 text") from None
    password = text.splitlines()[0] if text else ""
    if len(password) < MIN_PASSWORD:
        raise AccountError(f"password file {path}: expected a password of at least {MIN_PASSWORD} characters on its "
                           f"first line, got {len(password)}")
    return password


class Accounts:
    def __init__(self, engine: Engine, clock: Callable[[], float], hasher: PasswordHasher | None = None):
        self.engine, self.clock = engine, clock
        self.hasher = hasher or PasswordHasher()
        self._verified: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def add(self, name: str, password: str, max_queued: int | None = None) -> User:
        if not USER_NAME.match(name):
            raise AccountError(f"user name {name!r}: expected letters, digits, '_', '.', '@', '-' (at most 64)")
        if len(password) < MIN_PASSWORD:
            raise AccountError(f"expected a password of at least {MIN_PASSWORD} characters, got {len(password)}")
        with self.engine.begin() as db:
            if db.scalar(sa.select(users.c.name).where(users.c.name == name)) is not None:
                raise AccountError(f"user {name!r} exists already; remove it first to change its password")
            now = self.clock()
            db.execute(users.insert().values(name=name, password_hash=self.hasher.hash(password), created_on=now,
                                             max_queued=max_queued))
        return User(name, now, max_queued)

    def remove(self, name: str) -> None:
        with self.engine.begin() as db:
            if not db.execute(users.delete().where(users.c.name == name)).rowcount:
                raise AccountError(f"no user {name!r} in this lab")

    def list(self) -> list[User]:
        with self.engine.connect() as db:
            rows = db.execute(sa.select(users.c.name, users.c.created_on, users.c.max_queued).order_by(
                users.c.name)).all()
        return [User(r.name, r.created_on, r.max_queued) for r in rows]

    def get(self, name: str) -> User | None:
        with self.engine.connect() as db:
            row = db.execute(sa.select(users.c.name, users.c.created_on, users.c.max_queued).where(
                users.c.name == name)).first()
        return User(row.name, row.created_on, row.max_queued) if row else None

    def check(self, name: str, password: str) -> bool:
        """True when `name` exists and `password` is its password."""
        with self.engine.connect() as db:
            stored = db.scalar(sa.select(users.c.password_hash).where(users.c.name == name))
        if stored is None:
            return False
        key = (name, hashlib.sha256(password.encode("utf-8", "surrogatepass")).hexdigest(), stored)
        with self._lock:
            if key in self._verified:
                return True
        try:
            self.hasher.verify(stored, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False
        with self._lock:
            self._verified.add(key)
        return True
