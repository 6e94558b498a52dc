"""Lab accounts: add, list and remove users; check HTTP basic credentials.

Why argon2 (argon2-cffi): it is the password hash the OWASP cheat sheet recommends first, maintained, and it keeps
its parameters in the hash, so they can be raised later. A hash costs tens of milliseconds on purpose, and the
authors' client sends the password on every request (polling every 2 s, say), so a successful check is
remembered for the process by (user, SHA-256 of the password, stored hash): a changed or removed account is
never accepted from memory, and a wrong password is always hashed anew.

Why a fixed number of hashing slots and a dummy hash (issue 32): 80 concurrent wrong logins took the server from
168 MB to 2.59 GB (each argon2 hash holds 64 MiB) and stalled everyone; and an unknown name answered in 2 ms where
a known one took 200 ms, so names could be listed. Now at most `HASH_SLOTS` hashes run at once (the API waits for
a slot without holding a thread: app.py), and an unknown name is checked against a dummy hash of the same
parameters, so both cost one hash.

Why an account id: the owner of experiments and sessions is the account, not its name. Removing a user cancels
their queued experiments (CANCELED, with the reason), ends their sessions and kills their download links, and
keeps their finished data for the operator; the same name added again is a new account that sees none of it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import sqlalchemy as sa
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy.engine import Engine

from protocols.remote_lab import audit, session_store, store
from protocols.remote_lab.schema import users

USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
MIN_PASSWORD = 8
HASH_SLOTS = 2
"""Password hashes run at once at most (each argon2 hash holds its memory_cost, 64 MiB by default)."""


class AccountError(ValueError):
    """A user name, password or password file the lab refuses, or a user that does not exist."""


@dataclass(frozen=True)
class User:
    name: str
    created_on: float
    max_queued: int | None
    account_id: str | None = None


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
    def __init__(self, engine: Engine, clock: Callable[[], float], hasher: PasswordHasher | None = None,
                 hash_slots: int = HASH_SLOTS):
        self.engine, self.clock = engine, clock
        self.hasher = hasher or PasswordHasher()
        self.hash_slots = hash_slots
        self._slots = threading.BoundedSemaphore(hash_slots)
        self._verified: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()
        self._dummy: str | None = None

    def add(self, name: str, password: str, max_queued: int | None = None, *, address: str | None = None,
            account_prefix: str = "acc-") -> User:
        if not USER_NAME.match(name):
            raise AccountError(f"user name {name!r}: expected letters, digits, '_', '.', '@', '-' (at most 64)")
        if len(password) < MIN_PASSWORD:
            raise AccountError(f"expected a password of at least {MIN_PASSWORD} characters, got {len(password)}")
        account_id = f"{account_prefix}{secrets.token_hex(8)}"
        with self.engine.begin() as db:
            if db.scalar(sa.select(users.c.name).where(users.c.name == name)) is not None:
                raise AccountError(f"user {name!r} exists already; remove it first to change its password")
            now = self.clock()
            db.execute(users.insert().values(name=name, password_hash=self.hasher.hash(password), created_on=now,
                                             max_queued=max_queued, account_id=account_id))
        audit.record(self.engine, "user-add", at=now, user_name=name, account_id=account_id, address=address,
                     detail=f"max_queued={max_queued}" if max_queued else None)
        return User(name, now, max_queued, account_id)

    def remove(self, name: str, *, reason: str | None = None, action: str = "user-remove",
               address: str | None = None) -> dict[str, list[str]]:
        """Remove the account: its queued experiments CANCELED with the reason, running ones asked to stop, its
        sessions ended, its download links dead; its finished data kept. What was ended, and the chambers
        concerned (for the caller to wake their workers)."""
        user = self.get(name)
        if user is None:
            raise AccountError(f"no user {name!r} in this lab")
        now = self.clock()
        why = reason or f"the account {name!r} was removed from this lab"
        with self.engine.begin() as db:
            db.execute(users.delete().where(users.c.name == name))
        ended: dict[str, list[str]] = {"canceled": [], "stopping": [], "chambers": [], "sessions_on": []}
        if user.account_id is not None:
            ended.update(store.cancel_account(self.engine, user.account_id, now, why))
            ended["sessions_on"] = session_store.end_sessions_of_account(self.engine, user.account_id, why)
        audit.record(self.engine, action, at=now, user_name=name, account_id=user.account_id, address=address,
                     detail=f"{why}; canceled {len(ended['canceled'])} queued, stopping {len(ended['stopping'])} "
                            f"running, ended sessions on {', '.join(ended['sessions_on']) or 'none'}")
        return ended

    def list(self) -> list[User]:
        with self.engine.connect() as db:
            rows = db.execute(sa.select(users.c.name, users.c.created_on, users.c.max_queued,
                                        users.c.account_id).order_by(users.c.name)).all()
        return [User(r.name, r.created_on, r.max_queued, r.account_id) for r in rows]

    def get(self, name: str) -> User | None:
        with self.engine.connect() as db:
            row = db.execute(sa.select(users.c.name, users.c.created_on, users.c.max_queued, users.c.account_id).where(
                users.c.name == name)).first()
        return User(row.name, row.created_on, row.max_queued, row.account_id) if row else None

    def stored_hash(self, name: str) -> str | None:
        with self.engine.connect() as db:
            return db.scalar(sa.select(users.c.password_hash).where(users.c.name == name))

    def remembered(self, name: str, password: str, stored: str | None) -> bool:
        """A check that needs no hash: this password was verified against this very stored hash before."""
        return stored is not None and self._key(name, password, stored) in self._verified

    def verify(self, name: str, password: str, stored: str | None) -> bool:
        """One hash, under a slot: `password` against `stored`, or against the dummy hash when there is no such
        user (the same cost, so a wrong name cannot be told from a wrong password by the time it takes)."""
        with self._slots:
            try:
                self.hasher.verify(stored if stored is not None else self.dummy_hash(), password)
            except (VerifyMismatchError, VerificationError, InvalidHashError):
                return False
        if stored is None:
            return False
        with self._lock:
            self._verified.add(self._key(name, password, stored))
        return True

    def check(self, name: str, password: str) -> bool:
        """True when `name` exists and `password` is its password (one hash, or none when remembered)."""
        stored = self.stored_hash(name)
        return self.remembered(name, password, stored) or self.verify(name, password, stored)

    def dummy_hash(self) -> str:
        """A hash of a random password with this hasher's parameters, made once (for unknown names)."""
        if self._dummy is None:
            self._dummy = self.hasher.hash(secrets.token_urlsafe(16))
        return self._dummy

    @staticmethod
    def _key(name: str, password: str, stored: str) -> tuple[str, str, str]:
        return name, hashlib.sha256(password.encode("utf-8", "surrogatepass")).hexdigest(), stored
