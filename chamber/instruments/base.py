"""The one class that talks VISA: timeouts, terminators, buffer clearing, the *IDN? check and the SCPI error queue.

Why one class: every lab instrument driver needs the same handful of transport rules, and getting one of them
wrong (a stale reply left in the buffer, an error silently queued after a refused setting) makes the *next*
reading wrong without any visible failure. So drivers (smu.py, barometer.py, temperature.py) only call `write`,
`query` and `query_float` here and never touch pyvisa; the ResourceManager is passed in (a real one, or the
simulated bench of chamber/instruments/sim), never created here.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------- errors
class InstrumentError(RuntimeError):
    """An instrument problem; subclasses say which. The message names the instrument and its address."""


class InstrumentTimeout(InstrumentError, TimeoutError):
    """No reply within the timeout (also what a missing or powered-off instrument looks like)."""


class IdentityMismatch(InstrumentError):
    """*IDN? answered, but not with the manufacturer/model the station file expects."""

    def __init__(self, name: str, resource: str, expected: str, got: str) -> None:
        self.name, self.resource, self.expected, self.got = name, resource, expected, got
        super().__init__(f"{name} at {resource}: expected *IDN? to name {expected}, got {got!r}")


class InstrumentRefused(InstrumentError):
    """The instrument put an error in its SCPI error queue after a command (the setting was not applied)."""


class BadReading(InstrumentError):
    """A reply that is not the number it should be (names the query and the reply)."""


class ResourceManagerLike(Protocol):
    """What the base class needs of a pyvisa ResourceManager (the simulated bench provides the same)."""

    def open_resource(self, resource_name: str, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class Identity:
    """A parsed *IDN? reply: manufacturer, model, serial, firmware (IEEE 488.2 §10.14)."""

    manufacturer: str
    model: str
    serial: str
    firmware: str
    raw: str

    @classmethod
    def parse(cls, reply: str) -> "Identity":
        parts = [p.strip() for p in reply.strip().split(",")]
        parts += [""] * (4 - len(parts))
        return cls(parts[0], parts[1], parts[2], ",".join(parts[3:]).strip(","), reply.strip())

    def matches(self, manufacturer: str, model: str) -> bool:
        """Case-insensitive: the expected manufacturer and model each occur in their fields."""
        return (manufacturer.lower() in self.manufacturer.lower()) and (model.lower() in self.model.lower())


def _visa_timeout_error() -> tuple[type[BaseException], ...]:
    try:
        from pyvisa.errors import VisaIOError
    except ImportError:  # pragma: no cover - pyvisa is a dependency; keep the base importable without it
        return ()
    return (VisaIOError,)


class VisaInstrument:
    """One SCPI instrument on one VISA resource.

    Construction opens the resource with the given timeout and terminators, clears its buffers and error
    queue, and (when `expect` is given) checks *IDN? — so a driver object that exists is talking to the
    instrument it was meant for. `check_errors=True` on `write` reads the SCPI error queue after the command
    and raises InstrumentRefused when the instrument refused it.
    """

    def __init__(self, rm: ResourceManagerLike, resource: str, *, name: str | None = None,
                 timeout_ms: int = 2000, read_termination: str = "\n", write_termination: str = "\n",
                 expect: tuple[str, str] | None = None) -> None:
        self.name = name or type(self).__name__
        self.resource_name = resource
        self._io_errors = _visa_timeout_error()
        self._closed = True  # nothing to close until the resource is open
        try:
            self._resource = rm.open_resource(resource)
        except Exception as exc:  # pyvisa raises VisaIOError or ValueError for an unknown address
            raise InstrumentError(f"{self.name}: cannot open VISA resource {resource!r}: {exc}") from exc
        self._resource.timeout = int(timeout_ms)
        self._resource.read_termination = read_termination
        self._resource.write_termination = write_termination
        self._closed = False
        try:
            self.clear()
            self.identity = self.identify()
            if expect is not None and not self.identity.matches(*expect):
                raise IdentityMismatch(self.name, resource, f"manufacturer {expect[0]!r}, model {expect[1]!r}",
                                       self.identity.raw)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ transport
    def clear(self) -> None:
        """Device clear (drops stale replies), then *CLS (empties the error queue and status registers)."""
        try:
            self._resource.clear()
        except NotImplementedError:  # pyvisa-sim has no viClear; its buffers hold nothing between queries
            log.debug("%s: device clear not supported by this VISA backend", self.name)
        except self._io_errors as exc:
            raise InstrumentError(f"{self.name} at {self.resource_name}: device clear failed: {exc}") from exc
        self.write("*CLS")

    def write(self, command: str, *, check_errors: bool = False) -> None:
        try:
            self._resource.write(command)
        except self._io_errors as exc:
            raise InstrumentError(f"{self.name} at {self.resource_name}: write {command!r} failed: {exc}") from exc
        if check_errors:
            self.raise_on_error(command)

    def query(self, command: str) -> str:
        try:
            reply = self._resource.query(command)
        except self._io_errors as exc:
            raise InstrumentTimeout(
                f"{self.name} at {self.resource_name}: no reply to {command!r} within "
                f"{self._resource.timeout} ms ({exc})") from exc
        return str(reply).strip()

    def query_float(self, command: str) -> float:
        reply = self.query(command)
        try:
            value = float(reply)
        except ValueError:
            raise BadReading(f"{self.name}: expected a number in reply to {command!r}, got {reply!r}") from None
        if not math.isfinite(value) or abs(value) >= 9.9e37:  # 9.91E37 is SCPI's "not a number"
            raise BadReading(f"{self.name}: reply to {command!r} is not a finite reading: {reply!r}")
        return value

    def errors(self) -> list[str]:
        """Drain the SCPI error queue (at most 20 entries); [] when it holds only '0,No error'."""
        found = []
        for _ in range(20):
            entry = self.query(":SYST:ERR?")
            code = entry.split(",", 1)[0].strip()
            if code in ("0", "+0"):
                break
            found.append(entry)
        return found

    def raise_on_error(self, command: str) -> None:
        errors = self.errors()
        if errors:
            raise InstrumentRefused(f"{self.name} at {self.resource_name} refused {command!r}: {'; '.join(errors)}")

    def identify(self) -> Identity:
        return Identity.parse(self.query("*IDN?"))

    def reset(self) -> None:
        """*RST then clear: the instrument's power-on state (a driver may override to add its safe state)."""
        self.write("*RST")
        self.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._resource.close()
        except Exception:  # closing is best effort; the error that led here matters more
            log.debug("%s: closing %s failed", self.name, self.resource_name, exc_info=True)

    def __enter__(self) -> "VisaInstrument":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r} at {self.resource_name!r})"
