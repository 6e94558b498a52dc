"""The Remote Lab backend: a real-time session on a Causal Chamber Remote Lab chamber, over HTTP.

Why a backend and not a separate client: the driver's rules (validation, operator limits, reconnection, the safe
state on every exit) must hold for a chamber reached through a Remote Lab as for one on a serial port. This
module speaks exactly the API of the chamber authors' public client (PyPI `causalchamber` 0.2.8,
`causalchamber.lab.chamber.Chamber`): HTTP basic auth, `POST {endpoint}/sessions` to open (the lab resets the
chamber), `POST {endpoint}/sessions/{id}/instructions` with SET/MSR strings, rows back as a `text/csv` part of a
`multipart/mixed` body, parsed with the stdlib email package as the client does. Status codes are mapped to the
driver's typed errors: 401/403 refused (RemoteLabRefused), 400/422 an instruction refused (RemoteLabRejected),
409 busy and every other failure a lost link (LinkLost subclasses), so the driver reconnects with back-off.

Each request runs on a short-lived worker thread while the caller waits on an event: closing an httpx client
does not wake a read blocked in another thread, so `abandon` wakes the caller itself (ExchangeAbandoned) and
`settle` waits for, or gives up on, a request an interrupt left running.
"""

from __future__ import annotations

import configparser
import csv
import io
import os
import re
import threading
import time
from dataclasses import dataclass, field
from email import message_from_string
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import numpy as np

from chamber.backend import Settled
from chamber.errors import ChamberError, InvalidSetting
from chamber.public_csv import HOST_COLUMNS
from firmware_bridge.errors import ExchangeAbandoned, FrameRejected, LinkLost, ProtocolError
from firmware_bridge.messages import format_msr, format_set, format_value
from firmware_bridge.rows import RowBlock, RowChecker
from firmware_bridge.session import BOARD_PACE, UNKNOWN_PACE, BootInfo
from firmware_bridge.variables import LAYOUTS, chamber_of

URL_FORM = "lab+http://HOST:PORT/v0/CHAMBER_ID[?config=NAME] (or lab+https://...)"
DEFAULT_CONFIG = "standard"
DEFAULT_TIMEOUT_S = 60.0
"""Seconds a request may take besides its rows (opening a session resets the chamber: boot and hatch homing)."""
CREDENTIALS_ENV = "CHAMBERLAB_LAB_CREDENTIALS"
USER_FAULT = {400, 401, 403, 409, 422}
"""The codes the authors' client reads as the user's fault (UserError); every other one is the lab's (LabError)."""


class RemoteLabUrlError(ChamberError, ValueError):
    """A port URL that is not a Remote Lab chamber URL of the expected form."""


class CredentialsError(ChamberError, ValueError):
    """A credentials file that cannot be read or lacks `[api_keys]` `user` / `password`."""


class RemoteLabRefused(ChamberError):
    """The lab refused the user (401 wrong credentials, 403 not allowed): retrying cannot help."""


class RemoteLabRejected(InvalidSetting):
    """The lab refused an instruction (400/422): a setting or measurement it does not accept; nothing was done."""

    def __init__(self, instruction: str, message: str, variable: str = "", value: object = None):
        self.instruction = instruction
        self.variable, self.value, self.expected = variable, value, message
        ChamberError.__init__(self, message)


class RemoteLabUnreachable(LinkLost):
    """No HTTP exchange with the lab (connection refused, DNS, timeout, a broken response)."""


class RemoteLabBusy(LinkLost):
    """409: the chamber is busy or restarting (or another session took it); the driver reconnects with back-off."""


class RemoteLabFault(LinkLost):
    """The lab's fault (404 on a gone session, 5xx, ...): the session is given up and reopened on next use."""


class NotMk1Chamber(ChamberError, ValueError):
    """The Remote Lab chamber's columns are not a Mk1 wind or light tunnel's (e.g. the authors' Mk2 chambers)."""


# ----------------------------------------------------------------------------------------------- plain values
def parse_remote_lab_url(url: str) -> tuple[str, str, str]:
    """`lab+http://HOST:PORT/v0/CHAMBER_ID[?config=NAME]` -> (endpoint `http://HOST:PORT/v0`, chamber id, config)."""
    def refuse(why: str) -> RemoteLabUrlError:
        return RemoteLabUrlError(f"expected a Remote Lab URL {URL_FORM}, got {url!r}: {why}")

    parts = urlsplit(url.strip())
    if parts.scheme not in ("lab+http", "lab+https"):
        raise refuse("the scheme must be lab+http or lab+https")
    if not parts.hostname:
        raise refuse("no host")
    if parts.username or parts.password:
        raise refuse("credentials belong in the credentials file (--lab-credentials), not in the URL")
    if parts.fragment:
        raise refuse("a #fragment is not part of the form")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise refuse("the port is not a number") from None
    prefix, _, chamber_id = parts.path.rpartition("/")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", chamber_id):
        raise refuse("the path must end with the chamber id")
    if not prefix.strip("/"):
        raise refuse("no endpoint path (such as /v0) before the chamber id")
    query = parse_qs(parts.query, keep_blank_values=True)
    if set(query) - {"config"} or len(query.get("config", [])) > 1:
        raise refuse("the only query parameter is one config=NAME")
    config = query.get("config", [DEFAULT_CONFIG])[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", config):
        raise refuse(f"config {config!r} is not a configuration name")
    return f"{parts.scheme.removeprefix('lab+')}://{parts.netloc}{prefix}", chamber_id, config


def is_remote_lab_url(port: str | None) -> bool:
    return bool(port) and str(port).startswith("lab+")


def read_credentials(path: str | Path) -> tuple[str, str]:
    """(user, password) from the client's `.ini` file: `[api_keys]` with `user = ...` and `password = ...`."""
    where = Path(path)
    parser = configparser.ConfigParser(interpolation=None)
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialsError(f"cannot read the Remote Lab credentials file {where}: {exc.strerror or exc}") from None
    try:
        parser.read_string(text, source=str(where))
    except configparser.Error as exc:
        first = " ".join(str(exc).split())
        raise CredentialsError(f"credentials file {where}: expected an .ini file with [api_keys] user and "
                               f"password, got: {first}") from None
    if not parser.has_section("api_keys"):
        raise CredentialsError(f"credentials file {where}: no [api_keys] section (expected [api_keys] with user "
                               "and password)")
    missing = [k for k in ("user", "password") if not parser.get("api_keys", k, fallback="").strip()]
    if missing:
        raise CredentialsError(f"credentials file {where}: [api_keys] has no {' and no '.join(missing)} entry")
    return parser.get("api_keys", "user").strip(), parser.get("api_keys", "password").strip()


def write_credentials(path: str | Path, user: str, password: str) -> Path:
    """The client's `.ini` file for (user, password), readable by its owner only (created so, never widened)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser["api_keys"] = {"user": user, "password": password}
    where = Path(path)
    with open(os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
        parser.write(fh)
    return where


def check_mk1_names(names: tuple[str, ...], config: str) -> None:
    """Refuse columns that are not a Mk1 chamber's: the layout of the announced config (else the nearest one)
    must be all there. Names the catalogue does not know are kept, as from a newer Mk1 firmware."""
    kind = chamber_of(names)
    candidates = [LAYOUTS[(kind, config)]] if (kind, config) in LAYOUTS else [
        layout for (k, _), layout in LAYOUTS.items() if k == kind]
    have = set(names)
    missing = min(([n for n in layout.names if n not in have] for layout in candidates), key=len)
    if missing:
        shown = ", ".join(missing[:12]) + (f" and {len(missing) - 12} more" if len(missing) > 12 else "")
        raise NotMk1Chamber(f"expected the columns of a Mk1 chamber ({kind}/{config}); missing: {shown} "
                            f"(announced: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})")


@dataclass(frozen=True)
class CsvRows:
    """The rows of one `text/csv` part: the variable names (after timestamp, config), the configs, the values."""

    names: tuple[str, ...]
    configs: tuple[str, ...]
    timestamps: np.ndarray
    values: np.ndarray


def parse_rows_body(text: str, content_type: str) -> CsvRows | None:
    """An instructions reply: None when empty (nothing measured), else the `text/csv` part of the
    `multipart/mixed` body, read with email.message_from_string as the authors' client reads it."""
    if text == "":
        return None
    if "boundary=" not in content_type:
        raise ProtocolError("a multipart/mixed reply with a boundary in Content-Type", content_type or "no Content-Type")
    message = message_from_string(f"Content-Type: {content_type}\r\n\r\n{text}")
    parts = [p.get_payload() for p in message.walk() if p.get_content_type() == "text/csv"]
    if len(parts) != 1 or not isinstance(parts[0], str):
        raise ProtocolError("one text/csv part", f"{len(parts)} text/csv part(s)")
    table = list(csv.reader(io.StringIO(parts[0])))
    table = [row for row in table if row]
    if not table or tuple(table[0][:2]) != HOST_COLUMNS:
        raise ProtocolError(f"a CSV header starting {','.join(HOST_COLUMNS)}", ",".join(table[0][:4]) if table else "")
    header, body = tuple(table[0]), table[1:]
    width = len(header)
    bad = next((i for i, row in enumerate(body) if len(row) != width), None)
    if bad is not None:
        raise FrameRejected(f"CSV row {bad} width", f"{width} cells", f"{len(body[bad])} cells")
    try:
        numbers = np.array([[float(c) for c in row[2:]] for row in body], dtype=np.float64).reshape(len(body), width - 2)
        stamps = np.array([float(row[0]) for row in body], dtype=np.float64)
    except ValueError as exc:
        raise FrameRejected("CSV values", "numbers", str(exc)) from None
    return CsvRows(header[2:], tuple(row[1] for row in body), stamps, numbers)


def error_message(response: httpx.Response) -> tuple[str, str]:
    """The server's own `message` (else the body's first line, else the status text) and the trace ids."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("message"):
        message = str(body["message"])
    else:
        message = response.text.strip().splitlines()[0] if response.text.strip() else response.reason_phrase
    ids = [f"{k} {body[k]}" for k in ("request_id", "scheduler_id") if isinstance(body, dict) and body.get(k)]
    return " ".join(message.split()), ", ".join(ids)


# ----------------------------------------------------------------------------------------------- the backend
@dataclass
class _Call:
    """One request on its worker thread: `ended` once it returned or failed; the caller waits on `wake`, which
    `abandon` sets early."""

    ended: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    response: httpx.Response | None = None
    error: BaseException | None = None

    @property
    def finished(self) -> bool:
        return self.ended.is_set()


class RemoteLabBackend:
    def __init__(self, endpoint: str, chamber_id: str, config: str, credentials: tuple[str, str], *,
                 client: httpx.Client | None = None, timeout: float = DEFAULT_TIMEOUT_S):
        self.endpoint = endpoint.rstrip("/")
        self.chamber_id = chamber_id
        self.config = config
        self.description = f"Remote Lab {self.endpoint} chamber {chamber_id} ({config})"
        self.timeout = timeout
        self.session: dict[str, Any] | None = None  # the lab's answer to POST sessions (model, versions, ...)
        self._auth = (str(credentials[0]), str(credentials[1]))
        self._client = client
        self._owns_client = client is None
        self._boot: BootInfo | None = None
        self._row_s = UNKNOWN_PACE.row_s
        self._call: _Call | None = None
        self._requests = 0
        self._failures = 0
        self._spent_s = 0.0

    # ------------------------------------------------------------------ Backend
    def connect(self) -> BootInfo:
        """Open a session (the lab resets the chamber), then one MSR,1,0 to learn the columns."""
        self.session = None
        answer = self._post("sessions", {"chamber_id": self.chamber_id, "chamber_config": self.config},
                            what="opening a session")
        try:
            info = answer.json()
            session_id = str(info["session_id"])
        except (ValueError, KeyError, TypeError):
            raise ProtocolError("a JSON object with session_id", answer.text[:200]) from None
        self.session = {**info, "session_id": session_id}
        self._boot = None
        rows = self._instructions([format_msr(1)], timeout=self.timeout)
        if rows is None or rows.values.shape[0] != 1:
            raise FrameRejected("rows of the first MSR,1,0", 1, 0 if rows is None else rows.values.shape[0])
        config = rows.configs[0] or self.config
        check_mk1_names(rows.names, config)
        self._boot = BootInfo(config, rows.names)
        self._row_s = BOARD_PACE.get(chamber_of(rows.names), UNKNOWN_PACE).row_s
        return self._boot

    def set(self, name: str, value: float) -> float:
        text = format_set(name, value)
        self._instructions([text], timeout=self.timeout, variable=name, value=value)
        return float(format_value(value))

    def measure(self, n: int) -> RowBlock:
        boot = self._boot
        if boot is None:
            raise LinkLost(f"no session with {self.description}")
        rows = self._instructions([format_msr(n)], timeout=self.timeout + n * self._row_s)
        got = 0 if rows is None else rows.values.shape[0]
        if rows is None or got != n:
            raise FrameRejected("row count", n, got)
        if rows.names != boot.names:
            raise ProtocolError(f"the session's columns ({len(boot.names)}: {', '.join(boot.names[:4])}, ...)",
                                f"{len(rows.names)}: {', '.join(rows.names[:4])}, ...")
        return RowChecker(len(boot.names), first_counter=None).check_array(rows.values, rows.timestamps)

    def reset(self) -> BootInfo:
        """A new session: the lab resets the chamber (also a halted one)."""
        return self.connect()

    def settle(self, timeout: float) -> Settled:
        """Idle when no request is left running; else wait for it up to `timeout` s, and give up on it and open
        a new session (the lab resets the chamber) if it does not end."""
        call = self._call
        if call is None or call.finished:
            return Settled("idle")
        if call.ended.wait(timeout):
            self._call = None
            return Settled("finished")
        self.abandon()
        return Settled("reset", self.connect())

    def abandon(self) -> None:
        """Wake the caller of the request in flight (it raises ExchangeAbandoned) and close our client, so the
        request ends as soon as the lab answers or the connection drops; the next connect opens a new one (a
        client given to the constructor is the caller's: it is kept)."""
        call = self._call
        if call is not None:
            call.wake.set()
        if self._owns_client:
            client, self._client = self._client, None
            if client is not None:
                threading.Thread(target=client.close, name="remote-lab-close", daemon=True).start()

    def close(self) -> None:
        """Close our client (a client given to the constructor is the caller's to close)."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            client.close()

    def counters(self) -> dict[str, int]:
        return {"requests": self._requests, "request_failures": self._failures,
                "request_ms": int(round(self._spent_s * 1000))}

    # ------------------------------------------------------------------ HTTP
    def _instructions(self, instructions: list[str], *, timeout: float, variable: str = "",
                      value: object = None) -> CsvRows | None:
        if self.session is None:
            raise LinkLost(f"no session with {self.description}")
        response = self._post(f"sessions/{self.session['session_id']}/instructions", {"instructions": instructions},
                              what=";".join(instructions), timeout=timeout, variable=variable, value=value)
        return parse_rows_body(response.text, response.headers.get("content-type", ""))

    def _client_now(self) -> httpx.Client:
        if self._client is None:
            if not self._owns_client:
                raise RemoteLabUnreachable(f"the HTTP client given for {self.endpoint} was closed")
            self._client = httpx.Client()
        return self._client

    def _post(self, path: str, body: dict[str, Any], *, what: str, timeout: float | None = None,
              variable: str = "", value: object = None) -> httpx.Response:
        client = self._client_now()
        url = f"{self.endpoint}/{path}"
        call = _Call()
        limit = httpx.Timeout(timeout or self.timeout, connect=min(10.0, timeout or self.timeout))

        def run() -> None:
            try:
                call.response = client.post(url, json=body, auth=self._auth, timeout=limit)
            except BaseException as exc:  # handed to the waiting caller
                call.error = exc
            finally:
                call.ended.set()
                call.wake.set()

        self._call = call
        start = time.monotonic()
        threading.Thread(target=run, name="remote-lab-request", daemon=True).start()
        call.wake.wait()
        self._spent_s += time.monotonic() - start
        self._requests += 1
        if not call.finished:
            self._failures += 1
            raise ExchangeAbandoned(f"{what} at {self.endpoint}: abandoned by another thread")
        self._call = None
        if call.error is not None:
            self._failures += 1
            error = call.error
            if isinstance(error, (httpx.HTTPError, RuntimeError, OSError)):
                raise RemoteLabUnreachable(f"no answer from the Remote Lab at {self.endpoint} ({what}): "
                                           f"{type(error).__name__}: {' '.join(str(error).split()) or 'no detail'}")
            raise error
        response = call.response
        assert response is not None
        if response.status_code != 200:
            self._failures += 1
            raise self._error(response, what, variable, value)
        return response

    def _error(self, response: httpx.Response, what: str, variable: str, value: object) -> Exception:
        code = response.status_code
        message, ids = error_message(response)
        trace = f"; {ids}" if ids else ""
        if code in (401, 403):
            return RemoteLabRefused(f"the Remote Lab at {self.endpoint} refused user {self._auth[0]} ({code}): "
                                    f"{message}{trace}")
        if code == 409:
            return RemoteLabBusy(f"{message} (the Remote Lab at {self.endpoint}, chamber {self.chamber_id}, is busy "
                                 f"or restarting: 409 on {what}{trace})")
        if code in USER_FAULT:
            return RemoteLabRejected(what, f"{message} (the Remote Lab at {self.endpoint} refused {what}: "
                                     f"{code}{trace}; nothing was done)", variable, value)
        return RemoteLabFault(f"{message} (the Remote Lab at {self.endpoint} failed on {what}: {code}{trace})")
